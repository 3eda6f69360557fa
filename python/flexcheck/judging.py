"""flexcheck.judging - is this attention output right? Asked in process, from a test suite
(flexcheck.judge, flexcheck.assert_attention_close).

    import flexcheck
    v = flexcheck.judge(q, k, v_, out, lse, causal=True, window=256)
    assert v.passed, str(v)                                  # or, in one call:
    flexcheck.assert_attention_close(out, q, k, v_, lse, causal=True, window=256)

The verdict is flexcheck's own, from the shared library `make` builds (build/libflexcheck.so,
include/flexcheck.h): the float64 oracle computed from q, k, v, the gates of docs/tolerance.md
against the same-precision baseline, the worst element, and for a failure the diagnosis (which
known bug explains the failing rows: "window W+1 (256 -> 257)"). `str(verdict)` is what
`flexcheck check` prints for an output under test. Nothing here computes attention: the
library does, through ctypes (no compiler at install time).

Arguments are numpy arrays or torch tensors (any device: copied to the host; bfloat16 fine)
in the shapes write_case takes: [B, H, L, D], or vLLM's packed [T, H, D] with cu_seqlens_q /
cu_seqlens_k; out [B, Hq, Lq, Dv] (packed: [T, Hq, Dv]); lse [B, Hq, Lq] (packed: [Hq, T]),
optional (without it the LSE gate is not run; one kept in float16 or bfloat16 is judged at
that type's resolution). dtype defaults to q's (float16, bfloat16,
float32; float64 inputs count as float32); q, k and v must hold values exactly representable in
it. The mask (causal, window, chunk; bottom-right alignment per sequence), scale (default
1/sqrt(D)), softcap and sinks are those of docs/semantics.md.

The library is found, in order: $FLEXCHECK_LIB; the copy `pip install ./python` put in the
package (flexcheck/_lib/); build/libflexcheck.so of the checkout this package runs from.
"""
from __future__ import annotations

import ctypes
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .fixtures import (
    _as_array,
    _check_qkv_shapes,
    _Grid,
    _infer_dtype,
    _input_values,
    _packed_seqs,
    _qkv_layout,
    _scale,
    _sinks,
    _softcap,
    _tested_out,
    _to_grid,
    DTYPES,
)

API_VERSION = 1  # include/flexcheck.h's FLEXCHECK_API_VERSION this module was written for
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
    overflowed, so H1/H2 have no scale; `check` counts it apart, --strict fails it).
    passed / failed / outside: the same as booleans. gates: {"H1": ("pass"|"fail"|"not run",
    title, reason)}. reason: the first failing gate or check ("" when passed). worst: ((b, h,
    q, d), |err|) of the largest error (NaN the worst), or None. metrics: {"max_err": ..., ...}
    (NaN where not measured). diagnosis: the diagnosis's lines ("" when none ran); findings:
    [(title, failing rows it explains)]. str(): everything `flexcheck check` prints for it."""

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
    if st != 0:
        raise ValueError(f"{what}: {_text(lib.flexcheck_problem_errmsg(p))}")


def judge(q, k, v, out, lse=None, *, causal=False, window=0, chunk=0, scale=None,
          cu_seqlens_q=None, cu_seqlens_k=None, softcap=0.0, sinks=None,
          dtype=None) -> Verdict:
    """flexcheck's verdict on `out` (and `lse`, optional) as the attention of q, k, v (see the
    module's text for shapes and types). Raises ValueError naming the argument for inputs that
    do not fit (shapes, dtypes, non-finite or unrepresentable inputs), RuntimeError when the
    shared library cannot be found."""
    (qa, q_bf16), (ka, _), (va, _) = (_as_array(x, w) for x, w in ((q, "q"), (k, "k"), (v, "v")))
    if dtype is None:
        dtype = _infer_dtype(qa, q_bf16)
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: must be one of {', '.join(DTYPES)}")
    qa, ka, va = (_input_values(x, w, dtype, False)[0] for x, w in ((qa, "q"), (ka, "k"), (va, "v")))
    packed = cu_seqlens_q is not None or cu_seqlens_k is not None
    qa, ka, va = _qkv_layout(qa, ka, va, packed)
    _check_qkv_shapes(qa, ka, va)
    cu_q, cu_k = _packed_seqs(cu_seqlens_q, cu_seqlens_k, qa, ka)
    b, hq, lq, d = qa.shape
    hkv, lk, dv = ka.shape[1], ka.shape[2], va.shape[3]
    grid = _Grid(b, hq, lq, lk, dv, cu_q is not None)
    o, enc = _tested_out(out, "out", None, grid)
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
    sc = _scale(scale, d)
    cap = _softcap(softcap, "")
    sk, _ = _sinks(sinks, "", hq, False)

    lib = _load()
    p = lib.flexcheck_problem_new()
    if not p:
        raise MemoryError("flexcheck_problem_new")
    vd = ctypes.c_void_p()
    try:
        _check(lib, p, lib.flexcheck_problem_set_shape(p, b, hq, hkv, lq, lk, d, dv), "shape")
        _check(lib, p, lib.flexcheck_problem_set_dtype(p, dtype.encode()), "dtype")
        _check(lib, p, lib.flexcheck_problem_set_mask(p, int(bool(causal)), int(window),
                                                      int(chunk)), "mask")
        _check(lib, p, lib.flexcheck_problem_set_scale(p, sc), "scale")
        _check(lib, p, lib.flexcheck_problem_set_softcap(p, cap), "softcap")
        _check(lib, p, lib.flexcheck_problem_set_output_types(p, out_type.encode(),
                                                              lse_type.encode()), "types")
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
        arrays = [_f32(x) for x in (qa, ka, va, o)]
        lp = _f32(la) if la is not None else (None, None)
        st = lib.flexcheck_judge(p, arrays[0][1], arrays[0][0].size, arrays[1][1],
                                 arrays[1][0].size, arrays[2][1], arrays[2][0].size,
                                 arrays[3][1], arrays[3][0].size, lp[1],
                                 0 if lp[0] is None else lp[0].size, ctypes.byref(vd))
        if st == 2:
            raise MemoryError(_text(lib.flexcheck_problem_errmsg(p)))
        _check(lib, p, st, "judge")
        return _verdict(lib, vd)
    finally:
        if vd:
            lib.flexcheck_verdict_free(vd)
        lib.flexcheck_problem_free(p)


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


def assert_attention_close(out, q, k, v, lse=None, *, strict=False, **kw) -> Verdict:
    """judge(q, k, v, out, lse, **kw), raising AssertionError with the verdict's text when the
    output fails (and, with strict=True, when it is outside the contract). Returns the verdict."""
    verdict = judge(q, k, v, out, lse, **kw)
    if verdict.failed or (strict and verdict.outside):
        raise AssertionError("flexcheck: the attention output does not pass:\n" + str(verdict))
    return verdict


def library_version() -> str:
    """The loaded libflexcheck.so's version and commit."""
    return _text(_load().flexcheck_version())
