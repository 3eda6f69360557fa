"""flexcheck._xterms - the explicit terms of docs/semantics.md section 8 as flexcheck.judge takes
them: mask= (a dense boolean mask), mask_mod= (FlexAttention's), score_mod= (an additive one)
and document_ids= (packed rows held dense), made into the [Bm, Hm, Lq, Lk] boolean mask and
float32 bias the C API takes (flexcheck_problem_set_explicit_mask / _set_bias, masks/xterms.h).
Nothing here computes attention or a family mask (causal, window, chunk): the library ANDs the
families with what this builds, and judges.

The callables are evaluated over the whole grid once, in blocks of query rows
(_explicit_terms):
- torch, when q is a torch tensor: on q's device, exactly as torch's create_mask evaluates a
  mask_mod (torch.vmap over kv_idx, q_idx, h, b in its _vmap_for_bhqkv, under its
  TransformGetItemToIndex, int64 aranges); a score_mod the same way with a float32 score
  first, as create_mask does for one.
- numpy, otherwise: called once per block with broadcastable int64 index arrays b [B, 1, 1, 1],
  h [1, H, 1, 1], q_idx [1, 1, n, 1], kv_idx [1, 1, 1, Lk] (a score_mod: score first, a
  float32 [1, 1, 1, 1]); it returns an array that broadcasts to [B, H, n, Lk].
Bm (Hm) is 1 when the result does not vary with b (h): numpy's broadcast shape says so when the
callable never touches b, else slices are compared. Held to the judge's max_memory before any
of it is allocated.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from ._args import _is_torch

# Grid elements (B * H * rows * Lk) evaluated at once: bounds a callable's temporaries, which
# _SCRATCH_BYTES reserves in the budget (eight 8-byte grids: int64 index arithmetic, the four
# float evaluations of a score_mod widened to float64, their comparisons).
_CHUNK = 1 << 20
_SCRATCH_BYTES = 64

# The score values a score_mod is evaluated at to prove it additive (score_mod(0) is the bias).
# Not round: a term that multiplies or caps the score moves each differently.
_PROBES = (1.0, -3.5, 7.25)
# How far score_mod(s) may be from s + bias and still be additive: 2^-21 (|s| + |bias|), eight
# float32 roundings. One float32 add (score + bias) rounds by at most 2^-24 |s + bias|; a term
# built in a few float32 steps (score + a + c) by a few of those. Anything that scales or caps
# the score is off by far more: score * 1.001 at 7.25 by 7e-3, against 2^-21 * 7.25 = 3.5e-6,
# a soft-cap of 50 by 0.05. A kernel computes the same score_mod in float32 and rounds as much.
_ADDITIVE_REL = 2.0 ** -21


class _Terms:
    """What judge hands the library: mask (uint8 or bool [bm, hm, Lq, Lk], C order) or None,
    bias (float32 [bbm, bhm, Lq, Lk]) or None."""

    def __init__(self):
        self.mask, self.bm, self.hm = None, 1, 1
        self.bias, self.bbm, self.bhm = None, 1, 1


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB"


class _Budget:
    """Bytes held by the terms, against the judge's max_memory (the library's figure, defaults
    resolved: flexcheck_problem_get_budget), each refusal naming what and how much."""

    def __init__(self, limit: int):
        self.limit, self.used = limit, 0

    def take(self, n: int, what: str) -> None:
        if self.used + n > self.limit:
            total = self.used + n
            raise ValueError(f"{what} takes {_gib(n)}, {_gib(total)} ({total} bytes) with what "
                             f"the evaluation holds already, in Python before the library sees "
                             f"it: over the memory budget max_memory = {_gib(self.limit)} "
                             f"({self.limit} bytes): raise max_memory to judge it")
        self.used += n

    def give(self, n: int) -> None:
        self.used -= n


class _Grid:
    """A [Bm, Hm, Lq, Lk] term filled one block of query rows at a time, Bm and Hm as small as
    its values allow: a block that varies along b (h) makes the whole term B (H) deep, its
    earlier rows broadcast (they did not vary), the growth counted before it is allocated."""

    def __init__(self, what: str, dtype, lq: int, lk: int, budget: _Budget):
        self.what, self.dtype, self.lq, self.lk = what, np.dtype(dtype), lq, lk
        self.budget = budget
        self.a = None

    def _bytes(self, bm: int, hm: int) -> int:
        return bm * hm * self.lq * self.lk * self.dtype.itemsize

    def reserve(self, fill=None) -> None:
        """The smallest the term can be, [1, 1, Lq, Lk], counted before anything is evaluated;
        filled with `fill` where given (rows no block will put)."""
        n = self._bytes(1, 1)
        self.budget.take(n, f"{self.what} [1, 1, {self.lq}, {self.lk}] ({self.dtype.name})")
        shape = (1, 1, self.lq, self.lk)
        self.a = np.empty(shape, self.dtype) if fill is None else np.full(shape, fill, self.dtype)

    def put(self, q0: int, q1: int, block: np.ndarray) -> None:
        """Rows [q0, q1) from block, which broadcasts to [B, H, q1 - q0, Lk]."""
        block = _collapse(block.reshape((1,) * (4 - block.ndim) + block.shape))
        bm, hm = max(self.a.shape[0], block.shape[0]), max(self.a.shape[1], block.shape[1])
        if (bm, hm) != self.a.shape[:2]:
            old = self._bytes(*self.a.shape[:2])
            varies = " and ".join(w for w, x in (("batch entry", bm > 1), ("head", hm > 1)) if x)
            self.budget.take(self._bytes(bm, hm),
                             f"{self.what}: it varies with the {varies}, so [{bm}, {hm}, "
                             f"{self.lq}, {self.lk}] ({self.dtype.name})")
            grown = np.empty((bm, hm, self.lq, self.lk), self.dtype)
            grown[...] = self.a  # earlier rows did not vary along the new axis: broadcast
            self.a = grown
            self.budget.give(old)
        self.a[:, :, q0:q1] = block


def _collapse(x: np.ndarray) -> np.ndarray:
    """x [b, h, n, k] with its batch (head) axis cut to 1 where every slice equals the first:
    at once where the axis's stride is 0 (a broadcast: torch.vmap hands back a result that never
    read b or h expanded so), else compared."""
    if x.shape[0] > 1 and (x.strides[0] == 0 or bool((x == x[:1]).all())):
        x = x[:1]
    if x.shape[1] > 1 and (x.strides[1] == 0 or bool((x == x[:, :1]).all())):
        x = x[:, :1]
    return x


# ---- mask= and document_ids=: arrays ----

def _host(x, what: str) -> np.ndarray:
    """An array argument on the host: numpy as is, a torch tensor copied from its device."""
    if _is_torch(x):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _dense_mask(mask, b: int, h: int, lq: int, lk: int) -> np.ndarray:
    """mask= as a [Bm, Hm, Lq, Lk] view: boolean (numpy bool or uint8, torch bool or uint8;
    nonzero = the pair may attend), [Lq, Lk] or [B or 1, H or 1, Lq, Lk]."""
    a = _host(mask, "mask")
    given = list(a.shape)
    if a.dtype != np.bool_ and a.dtype != np.uint8:
        extra = (": an additive float mask (0 / -inf) is a bias: pass mask=(m == 0), or the "
                 "bias as score_mod" if a.dtype.kind == "f" else "")
        raise ValueError(f"mask: dtype {a.dtype}: must be boolean (numpy bool or uint8, torch "
                         f"bool; True = the pair may attend){extra}")
    if a.ndim == 2:
        a = a[None, None]
    if a.ndim != 4 or a.shape[2:] != (lq, lk) or a.shape[0] not in (1, b) or \
            a.shape[1] not in (1, h):
        raise ValueError(f"mask: shape {given}: must be [Lq, Lk] = [{lq}, {lk}] or "
                         f"[B or 1, Hq or 1, Lq, Lk] = [{b} or 1, {h} or 1, {lq}, {lk}]")
    return a


def _ids(x, what: str, b: int, n: int, axis: str) -> np.ndarray:
    """One side of document_ids as [B or 1, 1, n] integers."""
    a = _host(x, what)
    if a.dtype.kind not in "iu":
        raise ValueError(f"{what}: dtype {a.dtype}: document ids must be integers (the "
                         f"document of each token)")
    if a.ndim == 1:
        a = a[None]
    if a.ndim != 2 or a.shape[1] != n or a.shape[0] not in (1, b):
        raise ValueError(f"{what}: shape {list(np.shape(x))}: must be [{axis}] = [{n}] or "
                         f"[B or 1, {axis}] = [{b} or 1, {n}]")
    return a.astype(np.int64)[:, None, :]


def _document_ids(ids, b: int, lq: int, lk: int) -> Tuple[np.ndarray, np.ndarray]:
    """document_ids= as ([Bd, 1, Lq], [Bd, 1, Lk]): one array for both sides (Lq == Lk), or a
    tuple (ids_q, ids_k)."""
    if isinstance(ids, tuple) and len(ids) == 2 and all(np.ndim(i) >= 1 for i in ids):
        return (_ids(ids[0], "document_ids[0] (queries)", b, lq, "Lq"),
                _ids(ids[1], "document_ids[1] (keys)", b, lk, "Lk"))
    if lq != lk:
        raise ValueError(f"document_ids: one array for Lq = {lq} queries and Lk = {lk} keys: "
                         f"give (ids_q, ids_k)")
    a = _ids(ids, "document_ids", b, lq, "L")
    return a, a


# ---- mask_mod= and score_mod=: callables over the grid ----

def _torch_mods():
    """torch's own machinery of create_mask: its _vmap_for_bhqkv, and TransformGetItemToIndex
    (imported into flex_attention up to torch 2.7 or so, from torch._dynamo since)."""
    import importlib

    import torch
    from torch.nn.attention import flex_attention as fa
    tg = getattr(fa, "TransformGetItemToIndex", None)
    for where in ("torch._dynamo._trace_wrapped_higher_order_op",
                  "torch._higher_order_ops.flex_attention"):
        if tg is None:
            try:
                tg = getattr(importlib.import_module(where), "TransformGetItemToIndex", None)
            except ImportError:
                pass
    vm = getattr(fa, "_vmap_for_bhqkv", None)
    if vm is None or tg is None:
        raise ValueError(f"mask_mod/score_mod: torch {torch.__version__} lacks create_mask's "
                         f"_vmap_for_bhqkv or TransformGetItemToIndex: use torch >= 2.5, or "
                         f"numpy inputs and a numpy mod")
    return vm, tg


class _Refused(ValueError):
    """A refusal of ours, raised from inside an evaluation: passed on as it is."""


class _Caller:
    """Evaluates a mask_mod or score_mod on a block of query rows [q0, q1) for every (b, h, kv),
    with torch (device dev) or numpy (dev None), checking what it returns."""

    def __init__(self, fn, what: str, b: int, h: int, lk: int, dev, kind: Optional[str] = None):
        self.kind = kind or what  # "mask_mod" or "score_mod": the signature it must have
        if not callable(fn):
            raise ValueError(f"{what} = {fn!r}: must be a callable {_SIG[self.kind]}")
        self.fn, self.what, self.b, self.h, self.lk, self.dev = fn, what, b, h, lk, dev
        if dev is not None:
            self.vmap, self.getitem = _torch_mods()

    def _fail(self, why: str, e: Optional[BaseException] = None):
        how = ("evaluated as torch's create_mask does: torch.vmap over b, h, q_idx, kv_idx, so "
               "no Python if or .item() on them" if self.dev is not None else
               "called with numpy int64 index arrays that broadcast to [B, H, rows, Lk]: use & | "
               "~ and np.where, not and/or/if; a torch mod needs q, k, v as torch tensors")
        raise _Refused(f"{self.what}: {why} ({how}; it must be {_SIG[self.kind]}); "
                       f"{_INSTEAD[self.what]}") from e

    def __call__(self, q0: int, q1: int, score: Optional[float] = None) -> np.ndarray:
        shape = (self.b, self.h, q1 - q0, self.lk)
        try:
            r = self._torch(q0, q1, score) if self.dev is not None else \
                self._numpy(q0, q1, score)
        except _Refused:
            raise
        except Exception as e:  # the callable's own error: what it is, and how it was called
            self._fail(f"raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                       e)
        if score is None and r.dtype != np.bool_:
            self._fail(f"returned {r.dtype} values, not booleans")
        if score is not None and r.dtype.kind != "f":
            self._fail(f"returned {r.dtype} values, not scores")
        try:
            out = np.broadcast_shapes(r.shape, shape) == shape and r.ndim <= 4
        except ValueError:
            out = False
        if not out:
            self._fail(f"returned shape {list(r.shape)} for the block [B, H, rows, Lk] = "
                       f"{list(shape)}")
        return r.reshape((1,) * (4 - r.ndim) + r.shape)

    def _numpy(self, q0, q1, score):
        ix = (np.arange(self.b).reshape(-1, 1, 1, 1), np.arange(self.h).reshape(1, -1, 1, 1),
              np.arange(q0, q1).reshape(1, 1, -1, 1), np.arange(self.lk).reshape(1, 1, 1, -1))
        if score is None:
            r = self.fn(*ix)
        else:
            r = self.fn(np.full((1, 1, 1, 1), score, np.float32), *ix)
        if _is_torch(r):
            self._fail("returned a torch tensor for numpy inputs: pass q, k, v as torch "
                       "tensors for a torch mod")
        return np.asarray(r)

    def _torch(self, q0, q1, score):
        import torch
        d = self.dev
        ix = (torch.arange(self.b, device=d), torch.arange(self.h, device=d),
              torch.arange(q0, q1, device=d), torch.arange(self.lk, device=d))
        with self.getitem():
            if score is None:
                r = self.vmap(self.fn, prefix=())(*ix)
            else:
                s = torch.full((), score, dtype=torch.float32, device=d)
                r = self.vmap(self.fn, prefix=(0,))(s.expand(self.b, self.h, q1 - q0, self.lk),
                                                    *ix)
        if not isinstance(r, torch.Tensor):
            self._fail(f"returned {type(r).__name__}, not a tensor")
        if r.is_floating_point() and r.dtype not in (torch.float32, torch.float64):
            r = r.to(torch.float64)  # bfloat16 / float16 scores: numpy has no bfloat16; exact
        return r.detach().cpu().numpy()


_SIG = {"mask_mod": "(b, h, q_idx, kv_idx) -> bool",
        "score_mod": "(score, b, h, q_idx, kv_idx) -> score"}
# What a caller whose callable cannot be evaluated may pass instead, by the callable's name.
_INSTEAD = {
    "mask_mod": "or pass the mask it means as mask=, a boolean [Lq, Lk] or [B, Hq, Lq, Lk] "
                "array or tensor (True = the pair may attend)",
    "score_mod": "or pass q, k, v as numpy arrays with a numpy score_mod (index arrays in, "
                 "scores out), or a tanh soft-cap as softcap=",
    "block_mask's mask_mod": "or pass the mask it means as mask= and the block mask's lists as "
                             "a mapping without a mask_mod (kv_num_blocks, kv_indices, "
                             "full_kv_num_blocks, full_kv_indices, BLOCK_SIZE)",
}


def _additive(caller: _Caller, q0: int, q1: int, allowed) -> Tuple[np.ndarray, np.ndarray]:
    """(bias, score_mask) of a score_mod on rows [q0, q1): bias = score_mod(0), proven additive
    at _PROBES on every pair `allowed` leaves (FlexAttention applies score_mod, then the mask:
    a masked pair's score is never read); score_mask False where score_mod is -inf at every
    probe (create_mask's rule for a score_mod: -inf masks the pair), None when nowhere."""
    f0 = caller(q0, q1, 0.0).astype(np.float64)
    shape = (caller.b, caller.h, q1 - q0, caller.lk)
    live = np.broadcast_to(True if allowed is None else allowed, shape)
    ninf = np.isneginf(f0)
    for s in _PROBES:
        fs = caller(q0, q1, s).astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            off = np.abs(fs - (s + f0)) > _ADDITIVE_REL * (abs(s) + np.abs(f0))
        bad = live & ((np.isneginf(fs) != ninf) | (~ninf & ~np.isneginf(fs) & off))
        bad |= live & ~ninf & ~np.isfinite(f0)
        if bad.any():
            b, h, i, j = (int(x) for x in np.argwhere(bad)[0])
            v0, vs = (np.broadcast_to(f, shape)[b, h, i, j] for f in (f0, fs))
            if not math.isfinite(v0) and not np.isneginf(v0):
                raise ValueError(f"score_mod: score_mod(0) is {float(v0)} at (b, h, q_idx, kv_idx) "
                                 f"= ({b}, {h}, {i + q0}, {j}), a pair no mask removes: a bias "
                                 f"must be finite (mask the pair with mask_mod, or -inf)")
            raise ValueError(f"score_mod is not additive: at (b, h, q_idx, kv_idx) = ({b}, {h}, "
                             f"{i + q0}, {j}) score_mod({s}) = {float(vs)!r} but score_mod(0) = "
                             f"{float(v0)!r}, not {s} + {float(v0)!r}; only score + bias can be "
                             f"judged: pass a tanh soft-cap as softcap=, a mask as mask_mod=")
    keep = ~np.broadcast_to(ninf, shape) if ninf.any() else None
    dead = ~live | np.broadcast_to(ninf, shape)
    bias = np.where(dead, 0.0, f0) if dead.any() else f0
    return bias.astype(np.float32), keep


def _and(parts):
    out = None
    for p in parts:
        if p is not None:
            out = p if out is None else out & p
    return out


def _explicit_terms(*, mask=None, mask_mod=None, score_mod=None, document_ids=None,
                    block_mask_mod=None, block_dev=None,
                    b: int, h: int, lq: int, lk: int, packed: bool, dev,
                    max_memory: int) -> _Terms:
    """The explicit mask and bias of judge's mask=, mask_mod=, score_mod= and document_ids=
    (any of them None), for B b, Hq h, Lq lq, Lk lk; dev: q's torch device (callables are torch
    ones) or None (numpy ones). block_mask_mod: a torch BlockMask's mask_mod (block_mask=),
    always a torch callable, evaluated on block_dev (where its BlockMask, and the tensors it
    reads, live). Every source of a mask is ANDed (section 8: a mask only removes pairs; the
    BlockMask's mask_mod is what PyTorch's kernel applied, the caller's terms what it should
    have). ValueError naming the argument for anything it cannot read, and before anything is
    allocated when the terms would pass max_memory."""
    t = _Terms()
    if mask is not None and mask_mod is not None:
        raise ValueError("mask and mask_mod: give one (a mask_mod's values as a dense mask, or "
                         "the mask_mod alone); AND two masks in the mask_mod")
    if document_ids is not None and packed:
        raise ValueError("document_ids with cu_seqlens: give one form of a packed batch "
                         "(document_ids for rows held dense, [1, H, T, D]; cu_seqlens for vLLM's "
                         "packed [T, H, D])")
    dense = _dense_mask(mask, b, h, lq, lk) if mask is not None else None
    docs = _document_ids(document_ids, b, lq, lk) if document_ids is not None else None
    mm = _Caller(mask_mod, "mask_mod", b, h, lk, dev) if mask_mod is not None else None
    sm = _Caller(score_mod, "score_mod", b, h, lk, dev) if score_mod is not None else None
    bmm = None if block_mask_mod is None else \
        _Caller(block_mask_mod, "block_mask's mask_mod", b, h, lk, block_dev or "cpu",
                "mask_mod")
    if lq == 0 or lk == 0 or all(x is None for x in (dense, docs, mm, sm, bmm)):
        return t
    if dense is not None and docs is None and sm is None and bmm is None:
        # the caller's array as it is (a view: no copy of a large mask); the library packs it
        t.mask, t.bm, t.hm = np.ascontiguousarray(dense), dense.shape[0], dense.shape[1]
        return t
    budget = _Budget(max_memory)
    rows = max(1, _CHUNK // max(1, b * h * lk))
    budget.take(_SCRATCH_BYTES * b * h * min(rows, lq) * lk,
                f"evaluating {(mm or sm or bmm).what if mm or sm or bmm else 'document_ids'} "
                f"over [B, H, rows, Lk] = [{b}, {h}, {min(rows, lq)}, {lk}] at a time")
    mgrid = None
    if dense is not None or docs is not None or mm is not None or bmm is not None:
        mgrid = _Grid("the mask", np.bool_, lq, lk, budget)
        mgrid.reserve(True)
    if sm:
        bgrid = _Grid("the score_mod's bias", np.float32, lq, lk, budget)
        bgrid.reserve()
    for q0 in range(0, lq, rows):
        q1 = min(lq, q0 + rows)
        allowed = _and([dense[:, :, q0:q1] != 0 if dense is not None else None,  # uint8 too
                        docs[0][:, :, q0:q1, None] == docs[1][:, :, None, :] if docs else None,
                        mm(q0, q1) if mm else None, bmm(q0, q1) if bmm else None])
        if sm:
            bias, keep = _additive(sm, q0, q1, allowed)
            bgrid.put(q0, q1, bias)
            if keep is not None and mgrid is None:  # the first pair a score_mod masks (-inf)
                mgrid = _Grid("the mask (score_mod's -inf)", np.bool_, lq, lk, budget)
                mgrid.reserve(True)
            allowed = _and([allowed, keep])
        if mgrid is not None and allowed is not None:
            mgrid.put(q0, q1, allowed)
    if mgrid is not None:
        t.mask, t.bm, t.hm = mgrid.a, mgrid.a.shape[0], mgrid.a.shape[1]
    if sm:
        t.bias, t.bbm, t.bhm = bgrid.a, bgrid.a.shape[0], bgrid.a.shape[1]
    return t
