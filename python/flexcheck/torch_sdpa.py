"""flexcheck.torch_sdpa - PyTorch's scaled_dot_product_attention on the CPU, judged.

    python -m flexcheck.torch_sdpa PATH... [--backend math|flash|efficient|all]
                                           [--dtype T[,T]] [--label L] [--overwrite]
                                           [--threads N] [--window-offset N]

PATH is a fixture file (docs/fixtures.md) or a directory searched for them. Every case is run
by torch.nn.functional.scaled_dot_product_attention on the CPU, once per backend that runs
there (torch.nn.attention.sdpa_kernel: MATH, FLASH_ATTENTION, EFFICIENT_ATTENTION; a backend
that cannot run a tiny probe on the CPU is named and left out: PyTorch 2.15 has no CPU
efficient-attention kernel), and its output stored with add_tested under
tested/torch-<version>-sdpa-<backend>-cpu for `flexcheck check` to judge.

The call is built as an engine author builds it for SDPA (sdpa_plan; nothing here computes
attention):
  - the mask as a boolean attn_mask from the case's families at the contract's positions
    (docs/semantics.md section 2: bottom-right, p_q = i + Lk - Lq, p_k = j): causal, window,
    chunk; [Lq, Lk], or [Bm, Hm, Lq, Lk] ANDed with an explicit mask; a packed batch
    (cu_seqlens) as the block-diagonal mask of its sequences, each sequence bottom-right;
  - is_causal=True only for a causal case with Lq == Lk and no other term: SDPA's is_causal
    is TOP-LEFT aligned (torch.tril(ones(L, S)), its documentation), which differs from the
    contract whenever Lq != Lk, so every other causal case goes as the explicit mask;
  - an explicit bias as a float attn_mask in the query's dtype (where the bias is exact in
    it), masked pairs -inf in it: SDPA has one attn_mask, and this is how engines fold a
    boolean mask into an additive one;
  - Hq != Hkv through enable_gqa=True where the installed torch has it, else K/V repeated
    (repeat_interleave, the producer says which);
  - scale = the case's scale.
Not expressible, with the reason: a soft-cap and sinks (SDPA has neither), a bias that the
query's dtype would round, Hq not a multiple of Hkv. What a backend declines (flash: Dv != D)
is "refused by PyTorch" in its own words (the warning that says why no kernel ran). A row with
no allowed key is stored as PyTorch returns it: the contract says 0 (docs/semantics.md
section 3), and a NaN there is PyTorch's, not patched. SDPA returns no LSE: H5 is not run.
Each case is run twice: the second output is out_rerun (H7, bitwise).

--window-offset N hands the engine W + N instead of W (the mask is built with it): the
negative control (the gate must fail with "window W+1"); the producer string says so.

Exit status: 0 every selected case was stored, refused or not expressible; 1 some case could
not be run or stored; 2 bad arguments or no fixture file.
"""
from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
import warnings
from typing import List, Optional, Tuple

import numpy as np

from . import _engine
from ._engine import NotExpressible, Refused, Result

PROG = "torch_sdpa"
BACKENDS = ("math", "flash", "efficient")
BACKEND_ENUM = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}


@dataclasses.dataclass
class Plan:
    """One SDPA call: q/k/v [B, H, L, D] as stored (float16 for float16 cases, float32 values
    otherwise: bfloat16 values are exact in float32), attn_mask None, bool or float (the bias,
    -inf where masked; the engine casts it to the query's dtype), is_causal, scale."""
    dtype: str
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    attn_mask: Optional[np.ndarray]
    is_causal: bool
    scale: float
    notes: Tuple[str, ...] = ()

    @property
    def gqa(self) -> bool:
        return self.q.shape[1] != self.k.shape[1]


def _np_type(dtype: str):
    return np.float16 if dtype == "float16" else np.float32


def family_mask(case, window_offset: int = 0) -> np.ndarray:
    """bool [Lq, Lk]: the pairs the case's families allow (docs/semantics.md section 2), on
    the packed token grid for a packed case (block-diagonal: a query sees keys of its own
    sequence only, each sequence aligned bottom-right). The window is W + window_offset."""
    lq, lk = case.q.shape[2], case.k.shape[2]
    if case.packed:
        cq = [int(x) for x in case.cu_seqlens_q]
        ck = [int(x) for x in case.cu_seqlens_k]
    else:
        cq, ck = [0, lq], [0, lk]
    allowed = np.zeros((lq, lk), dtype=bool)
    w = case.window + window_offset if case.window else 0
    for s in range(len(cq) - 1):
        nq, nk = cq[s + 1] - cq[s], ck[s + 1] - ck[s]
        if nq <= 0 or nk <= 0:
            continue
        pq = np.arange(nq)[:, None] + (nk - nq)
        pk = np.arange(nk)[None, :]
        ok = np.ones((nq, nk), dtype=bool)
        if case.causal:
            ok &= pk <= pq
        if w:
            ok &= np.abs(pq - pk) < w
        if case.chunk:
            ok &= (pq // case.chunk) == (pk // case.chunk)  # numpy's // floors negatives
        allowed[cq[s]:cq[s + 1], ck[s]:ck[s + 1]] = ok
    return allowed


def _exact(a, t, dtype: str, what: str) -> np.ndarray:
    r = np.ascontiguousarray(a, dtype=t)
    if not np.array_equal(r.astype(np.float64), np.asarray(a, dtype=np.float64)):
        raise NotExpressible(f"{what} not exactly representable in {dtype}, the query's dtype "
                             f"(SDPA's float attn_mask)")
    if dtype == "bfloat16" and np.any(r.view(np.uint32) & 0xFFFF):
        raise NotExpressible(f"{what} not exactly representable in bfloat16, the query's dtype "
                             f"(SDPA's float attn_mask)")
    return r


def sdpa_plan(case, window_offset: int = 0) -> Plan:
    """The SDPA call for a case, or NotExpressible (see the module's text)."""
    b, hq, lq, d = case.q.shape
    hkv = case.k.shape[1]
    if case.softcap:
        raise NotExpressible(f"soft-cap (c = {case.softcap:g}): scaled_dot_product_attention "
                             f"has no score modification")
    if case.sinks is not None:
        raise NotExpressible("sinks: scaled_dot_product_attention's softmax has no extra logit")
    if hq % hkv:
        raise NotExpressible(f"Hq = {hq} is not a multiple of Hkv = {hkv}")
    t = _np_type(case.dtype)
    notes: List[str] = []
    only_causal = (case.causal and not case.window and not case.chunk and not case.packed
                   and case.mask is None and case.bias is None)
    if only_causal and lq == case.k.shape[2]:
        # top-left and bottom-right agree when Lq == Lk
        mask, is_causal = None, True
        notes.append("is_causal=True (Lq == Lk)")
    else:
        is_causal = False
        fam = family_mask(case, window_offset)
        terms = case.causal or case.window or case.chunk or case.packed
        mask = fam if terms else None
        if case.mask is not None:
            mask = case.mask.astype(bool) & (fam[None, None] if mask is not None else True)
            notes.append("explicit mask ANDed into the boolean attn_mask")
        if mask is not None:
            notes.append(f"boolean attn_mask {list(mask.shape)}"
                         + (" (block-diagonal: packed)" if case.packed else ""))
        if case.bias is not None:
            bias = _exact(case.bias, t, case.dtype, "explicit bias")
            if mask is not None:
                bias = np.where(mask, bias, np.array(-np.inf, dtype=t)).astype(t)
            mask = np.ascontiguousarray(bias)
            notes.append("bias as float attn_mask (-inf where masked)")
    if case.window and window_offset:
        notes.append(f"window {case.window + window_offset} in the mask")
    return Plan(case.dtype, np.ascontiguousarray(case.q, dtype=t),
                np.ascontiguousarray(case.k, dtype=t), np.ascontiguousarray(case.v, dtype=t),
                mask, is_causal, float(case.scale), tuple(notes))


# ---- PyTorch ----

class Torch:
    """PyTorch's SDPA on the CPU. backends: those that ran the probe; left_out: {backend:
    PyTorch's words} for those that did not; run(plan, backend) -> (out, rerun)."""

    engine = "PyTorch"

    def __init__(self, threads: Optional[int] = None):
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        self.torch, self.F, self.SDPBackend, self.sdpa_kernel = torch, F, SDPBackend, sdpa_kernel
        if threads:
            torch.set_num_threads(threads)
        self.version = torch.__version__
        import inspect
        sdpa = F.scaled_dot_product_attention
        try:
            self.has_gqa = "enable_gqa" in inspect.signature(sdpa).parameters
        except (TypeError, ValueError):  # a builtin without a signature: ask it
            self.has_gqa = "enable_gqa" in (sdpa.__doc__ or "")
        self.dtypes = {"float32": torch.float32, "float16": torch.float16,
                       "bfloat16": torch.bfloat16}
        self.backends: List[str] = []
        self.left_out = {}
        for name in BACKENDS:
            if not hasattr(SDPBackend, BACKEND_ENUM[name]):
                self.left_out[name] = f"this torch has no SDPBackend.{BACKEND_ENUM[name]}"
                continue
            q = np.zeros((1, 1, 2, 8), np.float32)
            try:
                self.run(Plan("float32", q, q, q, None, False, 1.0), name)
                self.backends.append(name)
            except (Refused, RuntimeError) as e:
                self.left_out[name] = _engine.first_line(e)

    def describe(self, backend: str) -> str:
        return (f"torch {self.version} scaled_dot_product_attention, "
                f"sdpa_kernel(SDPBackend.{BACKEND_ENUM[backend]}), CPU, "
                f"{self.torch.get_num_threads()} threads, Python {platform.python_version()}")

    def tensor(self, a, dtype: str):
        torch = self.torch
        t = torch.from_numpy(np.ascontiguousarray(a))
        r = t.to(self.dtypes[dtype])
        if not torch.equal(r.to(t.dtype), t):
            raise ValueError(f"values not exactly representable in {dtype}")
        return r

    def run(self, plan: Plan, backend: str):
        torch = self.torch
        q, k, v = (self.tensor(x, plan.dtype) for x in (plan.q, plan.k, plan.v))
        kw = dict(scale=plan.scale, is_causal=plan.is_causal)
        if plan.attn_mask is not None:
            m = torch.from_numpy(np.ascontiguousarray(plan.attn_mask))
            kw["attn_mask"] = m if m.dtype == torch.bool else self.tensor(plan.attn_mask,
                                                                          plan.dtype)
        if plan.gqa:
            if self.has_gqa:
                kw["enable_gqa"] = True
            else:
                g = q.shape[1] // k.shape[1]
                k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        enum = getattr(self.SDPBackend, BACKEND_ENUM[backend])
        outs = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with self.sdpa_kernel(enum):
                    for _ in range(2):
                        outs.append(self.F.scaled_dot_product_attention(q, k, v, **kw))
            except RuntimeError as e:
                # sdpa_kernel with one backend that cannot take the inputs: "No available
                # kernel" (why: in the warnings it issued) or "No viable backend"
                text = str(e)
                if "No available kernel" in text or "No viable backend" in text:
                    why = [str(w.message).splitlines()[0] for w in caught
                           if "not used because" not in str(w.message)]
                    raise Refused("; ".join(why) or _engine.first_line(e)) from e
                raise
        return outs[0], outs[1]


def adapter(engine, backend: str, window_offset: int = 0):
    def run(case) -> Result:
        plan = sdpa_plan(case, window_offset)
        notes = list(plan.notes)
        if plan.gqa:
            notes.append("enable_gqa=True" if getattr(engine, "has_gqa", True)
                         else "K/V repeated (no enable_gqa)")
        out, rerun = engine.run(plan, backend)
        notes.append("no LSE")
        return Result(out=out, out_rerun=rerun, encoding=_engine.bits_encoding(out),
                      notes=tuple(notes))
    return run


def _args(argv):
    ap = argparse.ArgumentParser(
        prog=f"python -m flexcheck.{PROG}",
        description="Run PyTorch's scaled_dot_product_attention (CPU, each backend) on every "
                    "case of fixture files and store the outputs under tested/<label> for "
                    "`flexcheck check` to judge.")
    _engine.add_common_args(ap)
    ap.add_argument("--backend", choices=BACKENDS + ("all",), default="all")
    ap.add_argument("--threads", type=int, metavar="N", help="torch.set_num_threads")
    _engine.add_negative_control(ap)
    return ap.parse_args(argv)


def main(argv=None, engine=None) -> int:
    """The command; engine lets the tests put a stand-in with engine / version / backends /
    left_out / describe / run(plan, backend) in PyTorch's place."""
    a = _args(argv)
    got = _engine.files_and_dtypes(PROG, a)
    if got is None:
        return 2
    files, dtypes = got
    try:
        engine = engine or Torch(threads=a.threads)
    except ImportError as e:
        print(f"{PROG}: {_engine.first_line(e)}", file=sys.stderr)
        return 2
    wanted = BACKENDS if a.backend == "all" else (a.backend,)
    for name in wanted:
        if name not in engine.backends:
            print(f"{PROG}: backend {name} left out: it does not run on the CPU here "
                  f"({engine.left_out.get(name, 'not probed')})", file=sys.stderr)
    run_on = [n for n in wanted if n in engine.backends]
    if not run_on:
        print(f"{PROG}: no selected backend runs here", file=sys.stderr)
        return 2
    return _engine.run_variants(PROG, engine.engine, a, files, dtypes, run_on,
                                lambda n: f"torch-{engine.version}-sdpa-{n}-cpu", engine.describe,
                                lambda n: adapter(engine, n, a.window_offset))


if __name__ == "__main__":
    sys.exit(main())
