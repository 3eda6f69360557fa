"""flexcheck.judging - is this attention output right? Asked in process, from a test suite
(flexcheck.judge, flexcheck.assert_attention_close).

    import flexcheck
    v = flexcheck.judge(q, k, v_, out, lse, causal=True, window=256)
    assert v.passed, str(v)                                  # or, in one call:
    flexcheck.assert_attention_close(q, k, v_, out=out, lse=lse, causal=True, window=256)

One order for both: q, k, v, out, lse (the C API's, write_case's). assert_attention_close takes
out (and lse) by keyword; its old order, the output first and positional, still works with a
DeprecationWarning.

The verdict is flexcheck's own, from the shared library `make` builds (build/libflexcheck.so,
include/flexcheck.h): the float64 oracle computed from q, k, v, the gates of docs/tolerance.md
against the same-precision baseline, the worst element, and for a failure the diagnosis (which
known bug explains the failing rows: "window W+1 (256 -> 257)"). `str(verdict)` is what
`flexcheck check` prints for an output under test. Nothing here computes attention: the
library does, through ctypes (no compiler at install time).

Arguments are numpy arrays or torch tensors (any device: copied to the host; bfloat16 fine;
any byte order: a big-endian array is converted value for value) in the shapes write_case
takes: [B, H, L, D], or vLLM's packed [T, H, D] with cu_seqlens_q / cu_seqlens_k; out
[B, Hq, Lq, Dv] (packed: [T, Hq, Dv]); lse [B, Hq, Lq] (packed: [Hq, T]), optional (without it
the LSE gate is not run; one kept in float16 or bfloat16 is judged at that type's resolution).
dtype defaults to q's (float16, bfloat16, float32; float64 inputs count as float32); q, k and v
must hold values exactly representable in it. The mask (causal, window, chunk; bottom-right
alignment per sequence), scale (default 1/sqrt(D)), softcap and sinks are those of
docs/semantics.md, checked as write_case checks them: causal True/False or 0/1 (numpy's too;
not "False", not None), window and chunk exact integers (no float, string or bool; never
wrapped to 32 bits), scale a number (not "0.17"). "No window" is spelled None (vLLM's
sliding_window), 0 (flexcheck's) or -1 (FlashAttention's window_size=(-1, -1)); no chunking
None or 0. Every refusal is a ValueError naming the argument.

Any mask, any additive score (docs/semantics.md section 8), each ANDed with the families:
- mask=: a dense boolean mask [Lq, Lk] or [B or 1, Hq or 1, Lq, Lk] (numpy bool or uint8, a torch
  bool tensor on any device; True / nonzero = the pair may attend).
- mask_mod=: FlexAttention's (b, h, q_idx, kv_idx) -> bool, evaluated once over the whole grid.
  With torch inputs (q a tensor) it is a torch callable, run on q's device exactly as torch's
  create_mask runs it (torch.vmap over kv_idx, q_idx, h, b: no Python `if` on an index);
  with numpy inputs a numpy one, called with broadcastable int64 index arrays b [B, 1, 1, 1],
  h [1, Hq, 1, 1], q_idx [1, 1, n, 1], kv_idx [1, 1, 1, Lk] for blocks of n query rows (use & |
  ~ and np.where). It must return booleans; not both mask= and mask_mod=.
- score_mod=: FlexAttention's (score, b, h, q_idx, kv_idx) -> score, additive only: its bias is
  score_mod(0), and score_mod(s) must be s + bias at s = 1, -3.5 and 7.25 on every pair the masks
  leave (to float32 rounding: 2^-21 (|s| + |bias|)), else refused naming a pair; a tanh soft-cap
  is softcap=. The bias is added after the soft-cap; where it is -inf at every s the pair is
  masked (create_mask's rule); a masked pair's value is never read (FlexAttention applies the
  score_mod, then the mask).
- document_ids=: packed rows held dense, [L] (or [B or 1, L]; or a tuple (ids_q, ids_k)): a
  query sees only keys of its own document (PyTorch's document-mask idiom). causal, window and
  chunk then act on the dense token index, as they would on a mask_mod's q_idx and kv_idx; with
  cu_seqlens (vLLM's packed [T, H, D]) positions restart in each sequence and are bottom-right
  aligned per sequence instead: the same pairs for causal and window when each document has
  as many queries as keys (not for chunk, whose boundaries then fall on dense positions).
Bm and Hm are 1 where the values do not vary with b (h); what Python builds is held to
max_memory (refused before it is allocated, naming its size), and the library counts what it
keeps (the mask bit-packed) in its own estimate. A failing output is diagnosed under them.

Paged K/V: k_cache=, v_cache=, block_table= (and kv_len= for a dense batch) in place of k and v,
as a serving engine holds them (vLLM's layout, docs/fixtures.md "Paged K/V"): k_cache [num_pages,
page_size, Hkv, D], v_cache [num_pages, page_size, Hkv, Dv], block_table integers [R, max_pages],
one row per sequence (a batch entry, or a packed sequence of cu_seqlens_k). The output is judged
against the logical sequence gathered through the table: only the entries and slots the sequences
read are looked at (stale pages may hold NaN); a used entry out of range, or a value read that is
not finite or not representable in dtype, is a ValueError naming the sequence, the entry and the
element. Give k and v, or all three paged arguments: anything else is refused saying so.

Rows: rows=N judges a sample of N query tokens (every batch entry and head; "auto": only where
every row would be over the budget; None or "all": every row), chosen as `flexcheck check --rows
N --rows-seed S` chooses them (rows_seed, default 1), docs/tolerance.md "Judging a sample";
out and lse are still given whole, and the verdict's text says what was judged and what a
sample may miss.

Budget: max_memory (bytes) and max_work (multiply-adds: B * Hq * (D + Dv) times the key hull of
each 128-query-row panel, what the reference computes) bound a
judge as `flexcheck check --max-memory / --max-work` bound a case, with the same defaults (the
lesser of 16 GiB and half of the memory this process can have; 2^40); a problem over either is
refused from its shapes alone, before any array is converted, naming the estimate, the budget
and the keyword to raise. Ctrl-C while the library judges raises KeyboardInterrupt within about
a second: the call runs on a worker thread, and the interrupt asks it to stop
(flexcheck_problem_interrupt), which it does at its next check, freeing what it holds.

Block mask: block_mask= is the producer's block mask, checked with the output (docs/semantics.md
section 4): a torch BlockMask (torch.nn.attention.flex_attention: its kv_num_blocks, kv_indices,
full_kv_num_blocks, full_kv_indices, BLOCK_SIZE and seq_lengths, which must be (Lq, Lk)), or a
mapping with those keys holding numpy arrays (full_* may be None or absent: no full blocks;
BLOCK_SIZE an int or a (q, kv) pair). Leading dims [nb, nh] each 1 (one for every batch entry
or head, as create_block_mask's B=None / H=None) or B / Hq. A BlockMask's mask_mod (unless it
is noop_mask, from_kv_blocks' default) is evaluated over every (batch entry, head, query, key)
the way create_mask does (one evaluator with mask_mod=: _xterms, within max_memory) and judged
as an explicit mask, ANDed with causal / window / chunk and with mask= / mask_mod= /
document_ids= when given too (PyTorch's kernel applies the BlockMask's mask_mod, the caller's
terms say what it should have: neither replaces the other): the output is held to the AND, and
the lists to it (a list of one head is held to every head's mask, as the kernel reads it for
every head). A list that drops a tile with an allowed pair, or marks full a tile with a masked
one, fails the verdict, naming the tile and the pair; a mapping's lists are held to causal /
window / chunk and the caller's explicit terms.

The library is found, in order: $FLEXCHECK_LIB; the copy `pip install ./python` put in the
package (flexcheck/_lib/); build/libflexcheck.so of the checkout this package runs from.
"""
from __future__ import annotations

import ctypes
import operator
import os
import threading
import warnings
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import _paged
from ._xterms import _explicit_terms
from ._args import (
    _as_array,
    _check_qkv_shapes,
    _cu_seqlens,
    _flag,
    _Grid,
    _infer_dtype,
    _input_values,
    _is_torch,
    _packed_seqs,
    _qkv_layout,
    _scale,
    _sinks,
    _softcap,
    _tested_out,
    _to_grid,
    DTYPES,
    INT32_MAX,
)

API_VERSION = 6  # include/flexcheck.h's FLEXCHECK_API_VERSION this module was written for
GATES = ("H1", "H2", "H3", "H4", "H5", "H6", "H7")
_STATES = {0: "not run", 1: "pass", 2: "fail"}
_OUTCOMES = {0: "fail", 1: "pass", 2: "outside"}
METRICS = ("max_err", "mean_err", "rmse", "nmse", "e_lp_max", "h1_ratio", "floor", "lse_err",
           "s1", "s2")

_lib = None


def _candidates() -> List[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    if os.environ.get("FLEXCHECK_LIB"):
        found.append(os.environ["FLEXCHECK_LIB"])
    found.append(os.path.join(here, "_lib", "libflexcheck.so"))
    found.append(os.path.join(os.path.dirname(os.path.dirname(here)), "build", "libflexcheck.so"))
    return found


def _load():
    """The shared library, loaded once, its calls declared (argument and result types)."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        if not os.path.isfile(path):
            tried.append(f"{path} (absent)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        if lib.flexcheck_api_version() < API_VERSION:
            tried.append(f"{path} (API version {lib.flexcheck_api_version()}, this module needs "
                         f"{API_VERSION})")
            continue
        _declare(lib)
        _lib = lib
        return lib
    raise RuntimeError("flexcheck.judge needs libflexcheck.so, built by `make` in the flexcheck "
                       "checkout (or FLEXCHECK_LIB=/path/to/libflexcheck.so); tried: "
                       + "; ".join(tried))


def _declare(lib) -> None:
    P, V, i32, f32p, i32p = ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, \
        ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_int32)
    sz, cs, dbl, st = ctypes.c_size_t, ctypes.c_char_p, ctypes.c_double, ctypes.c_int
    sig = {
        "flexcheck_api_version": ([], ctypes.c_int),
        "flexcheck_version": ([], cs),
        "flexcheck_problem_new": ([], P),
        "flexcheck_problem_free": ([P], None),
        "flexcheck_problem_errmsg": ([P], cs),
        "flexcheck_problem_set_shape": ([P, i32, i32, i32, i32, i32, i32, i32], st),
        "flexcheck_problem_set_dtype": ([P, cs], st),
        "flexcheck_problem_set_mask": ([P, ctypes.c_int, i32, i32], st),
        "flexcheck_problem_set_scale": ([P, dbl], st),
        "flexcheck_problem_set_softcap": ([P, dbl], st),
        "flexcheck_problem_set_sinks": ([P, f32p, sz], st),
        "flexcheck_problem_set_packed": ([P, i32p, i32p, sz], st),
        "flexcheck_problem_set_output_types": ([P, cs, cs], st),
        "flexcheck_problem_set_budget": ([P, ctypes.c_uint64, ctypes.c_uint64], st),
        "flexcheck_problem_get_budget": ([P, ctypes.POINTER(ctypes.c_uint64),
                                          ctypes.POINTER(ctypes.c_uint64)], st),
        "flexcheck_problem_set_explicit_mask": ([P, ctypes.POINTER(ctypes.c_uint8), i32, i32,
                                                 sz], st),
        "flexcheck_problem_set_bias": ([P, f32p, i32, i32, sz], st),
        "flexcheck_problem_set_rows": ([P, ctypes.c_int32, ctypes.c_uint64], st),
        "flexcheck_problem_set_block_mask": ([P, i32, i32, i32, i32, i32, i32p, i32p, i32, i32p,
                                              i32p, i32], st),
        "flexcheck_problem_set_paged": ([P, f32p, f32p, i32, i32, i32p, i32, i32], st),
        "flexcheck_problem_check": ([P], st),
        "flexcheck_problem_interrupt": ([P], st),
        "flexcheck_judge": ([P, f32p, sz, f32p, sz, f32p, sz, f32p, sz, f32p, sz,
                             ctypes.POINTER(V)], st),
        "flexcheck_verdict_free": ([V], None),
        "flexcheck_verdict_outcome": ([V], ctypes.c_int),
        "flexcheck_verdict_gate": ([V, ctypes.c_int, ctypes.POINTER(cs), ctypes.POINTER(cs),
                                    ctypes.POINTER(cs)], ctypes.c_int),
        "flexcheck_verdict_reason": ([V], cs),
        "flexcheck_verdict_worst": ([V, i32p], dbl),
        "flexcheck_verdict_metric": ([V, cs], dbl),
        "flexcheck_verdict_diagnosis": ([V], cs),
        "flexcheck_verdict_nfindings": ([V], sz),
        "flexcheck_verdict_finding": ([V, sz, ctypes.POINTER(sz)], cs),
        "flexcheck_verdict_text": ([V], cs),
    }
    for name, (args, res) in sig.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = res


def _text(b: Optional[bytes]) -> str:
    return b.decode("ascii", "backslashreplace") if b is not None else ""


class Verdict:
    """flexcheck's verdict on one output.

    outcome: "pass", "fail" or "outside" (outside the contract: the same-precision baseline
    overflowed, so H1/H2 have no scale; `check` counts it apart, --strict fails it, and so does
    assert_attention_close unless allow_outside=True). passed / failed / outside: the same as
    booleans. gates: {"H1": ("pass"|"fail"|"not run", title, reason)}. reason: the first
    failing gate or check ("" when passed). worst: ((b, h, q, d), |err|) of the first NaN of
    out (|err| NaN), else its first infinity (inf), else the largest finite error; None when
    out has no element. metrics: {"max_err": ..., ...} (NaN where not measured). diagnosis:
    the diagnosis's lines ("" when none ran); findings: [(title, failing rows it explains)].
    str(): everything `flexcheck check` prints for it."""

    def __init__(self, outcome: str, gates: Dict[str, Tuple[str, str, str]], reason: str,
                 worst, metrics: Dict[str, float], diagnosis: str,
                 findings: List[Tuple[str, int]], text: str):
        self.outcome = outcome
        self.gates = gates
        self.reason = reason
        self.worst = worst
        self.metrics = metrics
        self.diagnosis = diagnosis
        self.findings = findings
        self.text = text
        # pytest --flexcheck-report (pytest_plugin.py): the repro command of the call's file,
        # or why the call could not be kept
        self.repro: Optional[str] = None
        self.unstored: Optional[str] = None

    passed = property(lambda self: self.outcome == "pass")
    failed = property(lambda self: self.outcome == "fail")
    outside = property(lambda self: self.outcome == "outside")

    def __str__(self) -> str:
        return self.text.rstrip("\n")

    def __repr__(self) -> str:
        return f"<flexcheck.Verdict {self.outcome}: {self.reason or 'all gates hold'}>"


def _f32(a: np.ndarray):
    """A C-contiguous float32 copy (or view) and its ctypes pointer."""
    c = np.ascontiguousarray(a, dtype=np.float32)
    return c, c.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def _check(lib, p, st: int, what: str) -> None:
    if st == 2:  # FLEXCHECK_ENOMEM
        raise MemoryError(f"{what}: {_text(lib.flexcheck_problem_errmsg(p))}")
    if st != 0:
        raise ValueError(f"{what}: {_text(lib.flexcheck_problem_errmsg(p))}")


# ---- the scalar arguments, each checked the way write_case checks its own, before any array
# is converted, and each refusal naming the argument ----

# "No window" as engines spell it: vLLM's sliding_window=None, FlashAttention's
# window_size=(-1, -1) (one side: -1), and flexcheck's own 0 (the fixture attribute and the C
# API). Any other value is a window W >= 1 (allowed iff |p_q - p_k| < W). A chunk is off as
# None (vLLM's attention_chunk_size) or 0; no engine writes -1 for it, so -1 is refused.
WINDOW_OFF = (None, 0, -1)
CHUNK_OFF = (None, 0)


def _mask_size(value, what: str, off, off_means: str) -> int:
    """window / chunk as the int32 the library takes: an exact integer (numpy and torch integer
    scalars too; no float, string or bool), 0 for any of the spellings of `off`, else in
    [1, INT32_MAX]: never wrapped to 32 bits."""
    names = ["None" if o is None else str(o) for o in off]
    spelled = f"{', '.join(names[:-1])} or {names[-1]} for {off_means}"
    if value is None and None in off:
        return 0
    if isinstance(value, (bool, np.bool_, str, bytes)):
        v = None
    else:
        try:
            v = operator.index(value)
        except TypeError:
            v = None
    if v is None:
        raise ValueError(f"{what} = {value!r}: must be an integer in [1, {INT32_MAX}] "
                         f"({spelled})")
    if v in off:
        return 0
    if not 1 <= v <= INT32_MAX:
        raise ValueError(f"{what} = {v}: must be in [1, {INT32_MAX}] ({spelled})")
    return v


def _exact_int(value) -> Optional[int]:
    """value as an exact integer (int, numpy integer, anything with __index__), else None: no
    bool, string, bytes or float."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _budget(value, what: str) -> int:
    """max_memory / max_work: None for the default (the CLI's), else an integer >= 1 that
    fits the library's uint64."""
    if value is None:
        return 0
    v = _exact_int(value)
    if v is None or not 1 <= v <= 2**64 - 1:
        raise ValueError(f"{what} = {value!r}: must be an integer in [1, 2^64 - 1] (None: "
                         f"the default, as `flexcheck check --{what.replace('_', '-')}`)")
    return v


def _rows(rows, rows_seed) -> Tuple[int, int]:
    """rows / rows_seed as the library takes them (flexcheck_problem_set_rows): rows None or
    "all" every row (0), "auto" a sample only where every row is over the budget (-1), or a
    number of query tokens >= 1; the seed an integer in [0, 2^64 - 1], None for check's 1."""
    if rows is None or (isinstance(rows, str) and rows == "all"):
        r = 0
    elif isinstance(rows, str) and rows == "auto":
        r = -1
    else:
        r = _exact_int(rows)
        if r is None or not 1 <= r <= INT32_MAX:
            raise ValueError(f"rows = {rows!r}: must be a number of query tokens in [1, "
                             f"{INT32_MAX}], \"all\" (or None: every row) or \"auto\"")
    if rows_seed is None:
        return r, 1
    sd = _exact_int(rows_seed)
    if sd is None or not 0 <= sd <= 2**64 - 1:
        raise ValueError(f"rows_seed = {rows_seed!r}: must be an integer in [0, 2^64 - 1] "
                         f"(None: 1, as `flexcheck check --rows-seed`)")
    return r, sd


def _dims(a: np.ndarray, what: str, names: str) -> None:
    """Each dimension of a fits the library's int32 (a broadcast view can claim any length
    at no cost): never wrapped on the way through ctypes."""
    for n, x in zip(names.split(), a.shape):
        if x > INT32_MAX:
            raise ValueError(f"{what}: {n} = {x}: must be at most {INT32_MAX}")


# ---- block_mask= (a producer's BlockMask, include/flexcheck.h's set_block_mask) ----

_BM_KEYS = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices")


class _BlockLists:
    """A producer's block mask as the library takes it: int32 C arrays and their dims, and the
    mask_mod to judge as the explicit mask (None: none) with the device to evaluate it on."""

    def __init__(self, qb, kb, arrays, mask_mod, device):
        self.qb, self.kb = qb, kb
        self.num, self.idx, self.full_num, self.full_idx = arrays
        self.nb, self.nh, self.nqb = self.num.shape
        self.mask_mod, self.device = mask_mod, device


def _bm_array(x, what: str, ndim: int) -> np.ndarray:
    """One of the lists as C-contiguous int32, any integer dtype (a torch tensor on any device
    too), its values within int32 (never wrapped)."""
    if hasattr(x, "detach"):  # torch
        x = x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise ValueError(f"block_mask: {what}: dtype {a.dtype}: must be integer (int32)")
    if a.ndim != ndim:
        raise ValueError(f"block_mask: {what}: {a.ndim} dims {a.shape}: must have {ndim} "
                         f"([nb, nh, nqb{', width' if ndim == 4 else ''}])")
    if a.size and (int(a.min()) < -INT32_MAX - 1 or int(a.max()) > INT32_MAX):
        raise ValueError(f"block_mask: {what}: values past int32")
    return np.ascontiguousarray(a, np.int32)


def _block_mask_lists(block_mask, lq: int, lk: int) -> _BlockLists:
    """block_mask= read: a torch BlockMask (duck-typed: its attributes) or a mapping of numpy
    arrays with the same names; shapes checked against each other and (Lq, Lk) here, the rest
    (ids in range, counts within width, [nb, nh] against [B, Hq]) by the library."""
    if isinstance(block_mask, dict):
        get = block_mask.get
        missing = [k for k in ("kv_num_blocks", "kv_indices", "BLOCK_SIZE")
                   if block_mask.get(k) is None]
        if missing:
            raise ValueError(f"block_mask: a mapping needs {', '.join(missing)} (and "
                             f"full_kv_num_blocks / full_kv_indices for full blocks)")
        mask_mod, lengths, device = None, None, None
    elif all(hasattr(block_mask, a) for a in ("kv_num_blocks", "kv_indices", "BLOCK_SIZE")):
        def get(k):
            return getattr(block_mask, k, None)
        mask_mod, lengths = get("mask_mod"), get("seq_lengths")
        device = getattr(get("kv_num_blocks"), "device", "cpu")
        if mask_mod is not None and getattr(mask_mod, "__name__", "") == "noop_mask":
            mask_mod = None  # from_kv_blocks' default: no mask beyond the lists
    else:
        raise ValueError(f"block_mask: {type(block_mask).__name__}: give a torch BlockMask "
                         f"(torch.nn.attention.flex_attention) or a dict of numpy arrays "
                         f"kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices and "
                         f"BLOCK_SIZE")
    bs = get("BLOCK_SIZE")
    bs = (bs, bs) if _exact_int(bs) is not None else tuple(bs)
    if len(bs) != 2 or any(_exact_int(x) is None for x in bs):
        raise ValueError(f"block_mask: BLOCK_SIZE = {get('BLOCK_SIZE')!r}: an integer or a "
                         f"(q, kv) pair of integers")
    if lengths is not None and tuple(int(x) for x in lengths) != (lq, lk):
        raise ValueError(f"block_mask: made for seq_lengths {tuple(lengths)}, the inputs have "
                         f"(Lq, Lk) = ({lq}, {lk}): build it for these lengths (create_block_mask"
                         f"'s Q_LEN, KV_LEN)")
    num, idx = _bm_array(get("kv_num_blocks"), "kv_num_blocks", 3), \
        _bm_array(get("kv_indices"), "kv_indices", 4)
    fnum, fidx = get("full_kv_num_blocks"), get("full_kv_indices")
    if (fnum is None) != (fidx is None):
        raise ValueError("block_mask: full_kv_num_blocks and full_kv_indices: give both or "
                         "neither (no full blocks)")
    if fnum is not None:
        fnum, fidx = _bm_array(fnum, "full_kv_num_blocks", 3), \
            _bm_array(fidx, "full_kv_indices", 4)
    for n, i, w in ((num, idx, "kv"), (fnum, fidx, "full_kv")):
        if n is not None and (i.shape[:3] != num.shape or n.shape != num.shape):
            raise ValueError(f"block_mask: {w}_num_blocks {n.shape} and {w}_indices {i.shape} "
                             f"do not share [nb, nh, nqb] = {num.shape}")
    return _BlockLists(int(bs[0]), int(bs[1]), (num, idx, fnum, fidx), mask_mod, device)


def _set_block_mask(lib, p, bl: _BlockLists) -> None:
    """The lists into problem p; its mask_mod is one of the explicit terms
    (_set_explicit_terms)."""
    ip = ctypes.POINTER(ctypes.c_int32)

    def ptr(a):
        return None if a is None else a.ctypes.data_as(ip)
    fw = 0 if bl.full_idx is None else bl.full_idx.shape[3]
    _check(lib, p, lib.flexcheck_problem_set_block_mask(
        p, bl.qb, bl.kb, bl.nb, bl.nh, bl.nqb, ptr(bl.num), ptr(bl.idx), bl.idx.shape[3],
        ptr(bl.full_num), ptr(bl.full_idx), fw), "block_mask")


_HINT = "(flexcheck.round_to(x, dtype) rounds to nearest even)"


class _Call:
    """One flexcheck_judge on a worker thread while the calling thread waits, so that Ctrl-C
    (KeyboardInterrupt) is raised within about a second of the signal rather than when the C
    call returns: the waiting thread asks the library to stop (flexcheck_problem_interrupt),
    which it does at its next check, and the worker frees the handle and any verdict once the
    call has returned. The lock makes "the call has returned" and "the caller has gone" one
    decision, so the handle is freed exactly once and never interrupted after it is freed."""

    def __init__(self, lib, p, args):
        self.lib, self.p, self.args = lib, p, args
        self.vd = ctypes.c_void_p()
        self.st = None
        self.lock = threading.Lock()
        self.abandoned = False

    def work(self) -> None:
        st = self.lib.flexcheck_judge(self.p, *self.args, ctypes.byref(self.vd))
        with self.lock:
            self.st = st
            if self.abandoned:
                self.free()

    def free(self) -> None:
        if self.vd:
            self.lib.flexcheck_verdict_free(self.vd)
            self.vd = ctypes.c_void_p()
        if self.p:
            self.lib.flexcheck_problem_free(self.p)
            self.p = None

    def abandon(self) -> None:
        with self.lock:
            if self.st is None:
                self.lib.flexcheck_problem_interrupt(self.p)
                self.abandoned = True

    def run(self) -> None:
        t = threading.Thread(target=self.work, name="flexcheck-judge")
        t.start()
        try:
            t.join()
        except BaseException:
            self.abandon()
            # The common case: the call stops at once and cleans up before we return.
            t.join(timeout=1.0)
            raise


def judge(q, k=None, v=None, out=None, lse=None, *, causal=False, window=0, chunk=0, scale=None,
          cu_seqlens_q=None, cu_seqlens_k=None, softcap=0.0, sinks=None,
          dtype=None, max_memory=None, max_work=None, rows=None, rows_seed=None,
          mask=None, mask_mod=None, score_mod=None, document_ids=None,
          block_mask=None, k_cache=None, v_cache=None, block_table=None,
          kv_len=None) -> Verdict:
    """flexcheck's verdict on `out` (and `lse`, optional) as the attention of q, k, v (see the
    module's text for shapes and types, and for mask=, mask_mod=, score_mod= and document_ids=,
    the explicit terms). Raises ValueError naming the argument for inputs that
    do not fit (shapes, dtypes, non-finite or unrepresentable inputs, a problem over the
    budget), RuntimeError when the shared library cannot be found, KeyboardInterrupt within
    about a second of Ctrl-C however long the judging would take."""
    call_args = dict(locals()) if _recorder is not None else None  # before any is converted
    causal = _flag(causal, "causal")
    window = _mask_size(window, "window", WINDOW_OFF, "no window")
    chunk = _mask_size(chunk, "chunk", CHUNK_OFF, "no chunking")
    max_memory, max_work = _budget(max_memory, "max_memory"), _budget(max_work, "max_work")
    nrows, seed = _rows(rows, rows_seed)
    cap = _softcap(softcap, "")
    if out is None:
        raise ValueError("out: missing: the output under test")
    pg = _paged.given(k, v, k_cache, v_cache, block_table)
    qa, q_bf16 = _as_array(q, "q")
    if dtype is None:
        dtype = _infer_dtype(qa, q_bf16)
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: must be one of {', '.join(DTYPES)}")
    if pg is None:
        (ka, _), (va, _) = _as_array(k, "k"), _as_array(v, "v")
    else:
        ka, va = _paged_kv(pg, qa, kv_len, cu_seqlens_k, dtype)
    for x, w in ((qa, "q"), (ka, "k"), (va, "v")):
        if x.dtype.kind != "f":
            raise ValueError(f"{w}: dtype {x.dtype}: must be floating point")
    packed = cu_seqlens_q is not None or cu_seqlens_k is not None
    qa, ka, va = _qkv_layout(qa, ka, va, packed)
    _check_qkv_shapes(qa, ka, va)
    for x, w, n in ((qa, "q", "B Hq Lq D"), (ka, "k", "B Hkv Lk D"), (va, "v", "B Hkv Lk Dv")):
        _dims(x, w, n)
    cu_q, cu_k = _packed_seqs(cu_seqlens_q, cu_seqlens_k, qa, ka)
    b, hq, lq, d = qa.shape
    hkv, lk, dv = ka.shape[1], ka.shape[2], va.shape[3]
    sc = _scale(scale, d)
    sk, _ = _sinks(sinks, "", hq, False, _HINT)
    bml = _block_mask_lists(block_mask, lq, lk) if block_mask is not None else None

    lib = _load()
    p = lib.flexcheck_problem_new()
    if not p:
        raise MemoryError("flexcheck_problem_new")
    call = None
    try:
        _check(lib, p, lib.flexcheck_problem_set_shape(p, b, hq, hkv, lq, lk, d, dv),
               "q, k, v shapes")
        _check(lib, p, lib.flexcheck_problem_set_dtype(p, dtype.encode()), "dtype")
        _check(lib, p, lib.flexcheck_problem_set_mask(p, int(causal), window, chunk), "mask")
        _check(lib, p, lib.flexcheck_problem_set_scale(p, sc), "scale")
        _check(lib, p, lib.flexcheck_problem_set_softcap(p, cap), "softcap")
        if sk is not None:
            s, sp = _f32(sk)
            _check(lib, p, lib.flexcheck_problem_set_sinks(p, sp, s.size), "sinks")
        if cu_q is not None:
            a = np.ascontiguousarray(cu_q, np.int32)
            c = np.ascontiguousarray(cu_k, np.int32)
            ip = ctypes.POINTER(ctypes.c_int32)
            _check(lib, p, lib.flexcheck_problem_set_packed(p, a.ctypes.data_as(ip),
                                                            c.ctypes.data_as(ip), a.size),
                   "cu_seqlens")
        _check(lib, p, lib.flexcheck_problem_set_budget(p, max_memory, max_work), "judge")
        _check(lib, p, lib.flexcheck_problem_set_rows(p, nrows, seed), "rows")
        if bml is not None:
            _set_block_mask(lib, p, bml)
        if pg is not None:  # the diagnosis tries a page read from the wrong slot
            _set_paged(lib, p, pg, dtype)
        terms = _set_explicit_terms(lib, p, (b, hq, lq, lk), cu_q is not None,
                            torch_device=q.device if _is_torch(q) else None, mask=mask,
                            mask_mod=mask_mod, score_mod=score_mod, document_ids=document_ids,
                            block_mask_mod=bml.mask_mod if bml else None,
                            block_dev=bml.device if bml else None,
                            keep=call_args is not None)
        # The whole problem and its budget, before any array is converted or copied.
        _check(lib, p, lib.flexcheck_problem_check(p), "judge")

        qa, ka, va = (_input_values(x, w, dtype, False, _HINT)[0]
                      for x, w in ((qa, "q"), (ka, "k"), (va, "v")))
        grid = _Grid(b, hq, lq, lk, dv, cu_q is not None)
        o_in, o_bf16 = _as_array(out, "out")
        if o_in.dtype == np.uint16:  # add_tested's bit patterns need an encoding judge lacks
            raise ValueError("out: uint16 data: give bfloat16 as a torch bfloat16 tensor, an "
                             "ml_dtypes bfloat16 array or float32 values "
                             "(flexcheck.bfloat16_to_float32(bits))")
        o, enc = _tested_out(out if o_bf16 else o_in, "out", None, grid)
        out_type = "bfloat16" if enc == "bfloat16" else "float16" if o.dtype == np.float16 \
            else "float32"
        if enc == "bfloat16":  # bit patterns: widen exactly
            o = (o.astype(np.uint32) << 16).view(np.float32)
        la, lse_type = None, "float32"
        if lse is not None:
            la, lbf = _as_array(lse, "lse")
            if la.dtype.kind != "f":
                raise ValueError(f"lse: dtype {la.dtype}: must be floating point")
            # an LSE kept in float16 / bfloat16 is judged at that type's resolution
            lse_type = "bfloat16" if lbf else "float16" if la.dtype == np.float16 else "float32"
            la = _to_grid(la, "lse", grid, 3)
        _check(lib, p, lib.flexcheck_problem_set_output_types(p, out_type.encode(),
                                                              lse_type.encode()), "types")
        arrays = [_f32(x) for x in (qa, ka, va, o)]
        lp = _f32(la) if la is not None else (None, None)
        call = _Call(lib, p, (arrays[0][1], arrays[0][0].size, arrays[1][1], arrays[1][0].size,
                              arrays[2][1], arrays[2][0].size, arrays[3][1], arrays[3][0].size,
                              lp[1], 0 if lp[0] is None else lp[0].size))
        call.arrays = (arrays, lp)  # alive for as long as the worker may read them
        call.run()
        _check(lib, p, call.st, "judge")
        verdict = _verdict(lib, call.vd)
        if call_args is not None:  # pytest --flexcheck-report (pytest_plugin.py)
            call_args["terms"] = terms
            _recorder(call_args, verdict)
        return verdict
    finally:
        if call is None:
            lib.flexcheck_problem_free(p)
        else:
            with call.lock:
                if not call.abandoned:
                    call.free()


def _set_paged(lib, p, pg, dtype: str) -> None:
    """The cache and table handed to the library (flexcheck_problem_set_paged, copied), the
    caches as float32 values of dtype (stale pages as they are: never read)."""
    kc, vc = (np.ascontiguousarray(x, np.float32) for x in _paged.stored(pg, dtype))
    t = np.ascontiguousarray(pg.table, np.int32)
    fp, ip = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_int32)
    _check(lib, p, lib.flexcheck_problem_set_paged(
        p, kc.ctypes.data_as(fp), vc.ctypes.data_as(fp), kc.shape[0], kc.shape[1],
        t.ctypes.data_as(ip), t.shape[0], t.shape[1]), "k_cache, v_cache, block_table")


def _paged_kv(pg, qa: np.ndarray, kv_len, cu_seqlens_k, dtype: str):
    """The logical K and V of a paged cache (_paged.gather: the table followed, the pages read
    checked), in q's layout: [B, Hkv, Lk, D], or packed [T, Hkv, D] when q is."""
    lk = _paged.kv_len(pg, kv_len, cu_seqlens_k)
    cu_k = None if cu_seqlens_k is None else \
        _cu_seqlens(cu_seqlens_k, "cu_seqlens_k", lk, "the paged K/V (kv_len)")
    if qa.ndim not in (3, 4):
        raise ValueError(f"q: shape {list(qa.shape)}: must be [B, H, L, D] or packed [T, H, D]")
    b = qa.shape[0] if qa.ndim == 4 else 1
    ka, va, _ = _paged.gather(pg, b, lk, cu_k, dtype)
    if qa.ndim == 3:
        return ka[0].transpose(1, 0, 2), va[0].transpose(1, 0, 2)
    return ka, va


def _set_explicit_terms(lib, p, shape, packed: bool, torch_device, block_dev=None,
                        keep=False, **given):
    """mask=, mask_mod=, score_mod=, document_ids= and block_mask='s mask_mod (block_mask_mod,
    evaluated on block_dev; _xterms) handed to the library, evaluated within the budget p is
    held to (its max_memory, defaults resolved). The library copies them (the mask bit-packed)
    and counts them in the judge's estimate; ours are dropped on return, before the judge
    allocates, so each side holds to the whole budget on its own. keep (pytest
    --flexcheck-report, which stores them): returned as (mask [Bm, Hm, Lq, Lk] bool or None,
    bias [Bm, Hm, Lq, Lk] or None), held beyond the budget for the call's record; else None."""
    if all(v is None for v in given.values()):
        return None
    if any(given.get(k) is not None for k in ("mask_mod", "score_mod", "block_mask_mod")):
        # the problem (the lists included) within the budget before a callable runs over the
        # grid; a dense mask is counted by the library once set, its refusal naming the mask
        _check(lib, p, lib.flexcheck_problem_check(p), "judge")
    mem = ctypes.c_uint64()
    _check(lib, p, lib.flexcheck_problem_get_budget(p, ctypes.byref(mem), None), "judge")
    b, hq, lq, lk = shape
    t = _explicit_terms(b=b, h=hq, lq=lq, lk=lk, packed=packed, dev=torch_device,
                        block_dev=block_dev, max_memory=mem.value, **given)
    if t.mask is not None:
        m = t.mask.view(np.uint8)  # bool and uint8: one byte a pair, nonzero = allowed
        what = "block_mask: its mask_mod" if all(
            given.get(k) is None for k in ("mask", "mask_mod", "document_ids", "score_mod")) \
            else "mask"
        _check(lib, p, lib.flexcheck_problem_set_explicit_mask(
            p, m.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), t.bm, t.hm, m.size), what)
    if t.bias is not None:
        a, ap = _f32(t.bias)
        _check(lib, p, lib.flexcheck_problem_set_bias(p, ap, t.bbm, t.bhm, a.size), "score_mod")
    if not keep:
        return None
    mask = None if t.mask is None else \
        np.asarray(t.mask).view(np.uint8).reshape(t.bm, t.hm, lq, lk).astype(bool)
    bias = None if t.bias is None else np.asarray(t.bias).reshape(t.bbm, t.bhm, lq, lk)
    return mask, bias


def _verdict(lib, vd) -> Verdict:
    gates = {}
    for i in range(len(GATES)):
        name, title, reason = ctypes.c_char_p(), ctypes.c_char_p(), ctypes.c_char_p()
        state = lib.flexcheck_verdict_gate(vd, i, ctypes.byref(name), ctypes.byref(title),
                                           ctypes.byref(reason))
        gates[_text(name.value)] = (_STATES[state], _text(title.value), _text(reason.value))
    coords = (ctypes.c_int32 * 4)()
    err = lib.flexcheck_verdict_worst(vd, coords)
    worst = None if err == -1 else (tuple(int(c) for c in coords), float(err))
    findings = []
    for i in range(lib.flexcheck_verdict_nfindings(vd)):
        rows = ctypes.c_size_t()
        title = lib.flexcheck_verdict_finding(vd, i, ctypes.byref(rows))
        findings.append((_text(title), int(rows.value)))
    return Verdict(_OUTCOMES[lib.flexcheck_verdict_outcome(vd)], gates,
                   _text(lib.flexcheck_verdict_reason(vd)), worst,
                   {m: float(lib.flexcheck_verdict_metric(vd, m.encode())) for m in METRICS},
                   _text(lib.flexcheck_verdict_diagnosis(vd)), findings,
                   _text(lib.flexcheck_verdict_text(vd)))


_UNSET = object()

# pytest --flexcheck-report's recorder (pytest_plugin.py), called with each judged call's
# arguments and verdict; None (the default) records nothing.
_recorder = None


def _repro_note(verdict) -> str:
    """The end of a failing assertion's message under pytest --flexcheck-report."""
    if verdict.repro:
        return "\nreproduce: " + verdict.repro
    if verdict.unstored:
        return "\nthis call was not kept as a fixture file: " + verdict.unstored
    return ""


# assert_attention_close's arguments before judge's order became the one: the output first.
_OLD_ORDER = ("out", "q", "k", "v", "lse")
_NEW_POSITIONAL = ("q", "k", "v")


def _attention_args(args, out, kw) -> Dict[str, Any]:
    """judge's keyword arguments of an assert_attention_close call. One order for both calls:
    q, k, v, out, lse (the C API's and write_case's). Which order a call is in is told by out=,
    never guessed from shapes (equal shapes are the common case): with out= as a keyword, the
    positional arguments are q, k, v; without it, they are the old order, out first, which
    still works with a DeprecationWarning."""
    if out is _UNSET:
        if args:
            warnings.warn("assert_attention_close(out, q, k, v, lse) is deprecated: judge's "
                          "order is the one order, pass the output by keyword: "
                          "assert_attention_close(q, k, v, out=out, lse=lse)",
                          DeprecationWarning, stacklevel=3)
        names = _OLD_ORDER
    else:
        names = _NEW_POSITIONAL
        kw["out"] = out
    if len(args) > len(names):
        raise TypeError(f"assert_attention_close: {len(args)} positional arguments, at most "
                        f"{len(names)} ({', '.join(names)})"
                        + ("; lse by keyword" if out is not _UNSET else ""))
    for name, value in zip(names, args):
        if name in kw:
            raise TypeError(f"assert_attention_close: {name} given twice (by position and by "
                            f"keyword)")
        kw[name] = value
    return kw


def assert_attention_close(*args, out=_UNSET, allow_outside=False, strict=_UNSET,
                           **kw) -> Verdict:
    """assert_attention_close(q, k, v, out=out, lse=lse, **judge's keywords): judge(q, k, v,
    out, lse, ...), raising AssertionError with the verdict's text when the output fails, and
    when it is outside the contract (the same-precision baseline overflowed, so H1/H2 had no
    scale to hold the output to: an all-zero output gets through every gate that ran) unless
    the caller says such outputs may pass, allow_outside=True. Returns the verdict.

    The old order, assert_attention_close(out, q, k, v, lse) (the output first, positional),
    still works with a DeprecationWarning; a call that names out= is in judge's order.
    strict is deprecated (a DeprecationWarning): it said the opposite of allow_outside, whose
    default was the lenient one; strict=True is now the default, strict=False is
    allow_outside=True."""
    kw = _attention_args(args, out, kw)
    allow = _flag(allow_outside, "allow_outside")
    if strict is not _UNSET:
        s = _flag(strict, "strict")
        warnings.warn("assert_attention_close: strict= is deprecated: outputs outside the "
                      "contract now fail unless allow_outside=True (strict=False is "
                      "allow_outside=True)", DeprecationWarning, stacklevel=2)
        if allow_outside is not False and allow == s:
            raise ValueError(f"strict={strict!r} and allow_outside={allow_outside!r} disagree: "
                             f"give allow_outside alone")
        allow = not s
    verdict = judge(**kw)
    if verdict.failed:
        raise AssertionError("flexcheck: the attention output does not pass:\n" + str(verdict)
                             + _repro_note(verdict))
    if verdict.outside and not allow:
        raise AssertionError("flexcheck: the attention output is outside the contract (its "
                             "gates could not bound it; allow_outside=True lets it pass):\n"
                             + str(verdict) + _repro_note(verdict))
    return verdict


def library_version() -> str:
    """The loaded libflexcheck.so's version and commit."""
    return _text(_load().flexcheck_version())
