"""flexcheck.ggml_attention - llama.cpp's ggml_flash_attn_ext on ggml's CPU backend, judged.

    python -m flexcheck.ggml_attention PATH... [--dtype T[,T]] [--label L] [--overwrite]
                                               [--threads N] [--window-offset N] [--isolate]

PATH is a fixture file (docs/fixtures.md) or a directory searched for them. Every case is one
ggml graph of one node, ggml_flash_attn_ext(q, k, v, mask, scale, max_bias = 0,
logit_softcap), with ggml_flash_attn_ext_add_sinks for head sinks, computed by
ggml_graph_compute_with_ctx on the CPU through ggml-python's bindings (its vendored ggml), and
stored with add_tested under tested/ggml-<version>-flash_attn_ext-cpu for `flexcheck check`.

The call is built as llama.cpp builds it for an attention layer (ggml_plan; nothing here
computes attention):
  - tensors in ggml's order (ne0 fastest): q [D, Lq, Hq, B] float32, k [D, Lk, Hkv, B] and
    v [Dv, Lk, Hkv, B] ("not transposed", ggml.h) in the K/V cache type; query head h reads
    kv head h / (Hq / Hkv) (the CPU kernel's rk2 broadcast), the contract's GQA;
  - the K/V type is the case's dtype: F32, F16 or BF16 (all three run on the CPU backend: Q is
    converted to K's vec_dot type, so a float16 case's Q is rounded to F16, which its values
    already are). Q is F32 as llama.cpp hands it; the output is F32 and stored as returned;
  - the mask is the F16 additive mask [Lk, Lq, Hm, Bm] (0 allowed, -INFINITY masked) that
    llama.cpp's KV cache writes (llama_kv_cache::set_input_kq_mask, src/llama-kv-cache.cpp):
    a key at position p0 is masked for a query at p1 when it belongs to another sequence, when
    causal and p0 > p1, or when llama_hparams::is_masked_swa(n_swa, swa_type, p0, p1)
    (src/llama-hparams.cpp) says so. The positions are the contract's bottom-right ones: the
    Lk keys are the cache at positions 0..Lk-1 and the Lq queries its newest tokens,
    p1 = i + Lk - Lq (per sequence for a packed case, whose sequences are llama.cpp's seq_ids
    in one ubatch). The sliding window: LLAMA_SWA_TYPE_STANDARD with n_swa = W for a causal
    window (masked when p1 - p0 >= n_swa), LLAMA_SWA_TYPE_SYMMETRIC with n_swa = 2 (W - 1)
    for a bidirectional one (masked when |p1 - p0| > n_swa / 2); chunks LLAMA_SWA_TYPE_CHUNKED
    with n_swa = C (masked when p0 < (p1 / n_swa) n_swa) on a causal layer. An explicit mask
    is ANDed in; an explicit bias is the mask's value at the allowed pairs (ggml adds the
    mask after the soft-cap, as the contract adds the bias), where F16 holds it exactly;
  - GGML_PREC_F32 requested (ggml_flash_attn_ext_set_prec), as llama.cpp's
    llm_graph_context::build_attn_mha does for every layer (src/llama-graph.cpp);
  - scale the case's, logit_softcap the case's soft-cap c (ggml's CPU kernel computes
    c * tanh(s * (scale / c)), ops.cpp ggml_compute_forward_flash_attn_ext_f16_one_chunk),
    sinks as an F32 [Hq] tensor (ggml_flash_attn_ext_add_sinks).
Not expressible, with the reason: a window and chunks on one layer (llama.cpp has one
swa_type and n_swa per layer), chunks without causality (LLAMA_SWA_TYPE_CHUNKED masks only
keys before the query's chunk and leaves the later ones to the causal mask), more queries
than keys in a sequence with a causal / window / chunk term (every query token of a ubatch is
in the KV cache, so n_q <= n_kv), a bias that F16 would round, Hq not a multiple of Hkv. ggml
returns no LSE: H5 is not run. Each case is computed twice in fresh contexts: the second output
is out_rerun (H7, bitwise). ggml checks its inputs with GGML_ASSERT, which aborts the process:
--isolate (the gate uses it) runs each file in forked children, so an abort costs one case,
counted as an error naming the signal, ggml's assertion text above it on stderr.

--window-offset N hands the engine W + N instead of W (the mask is built with it): the
negative control (the gate must fail with "window W+1"); the producer string says so.

Exit status: 0 every selected case was stored, refused or not expressible; 1 some case could
not be run or stored; 2 bad arguments, no fixture file or no ggml.
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import platform
import sys
from typing import List, Optional, Tuple

import numpy as np

from . import _engine
from ._args import bfloat16_bits
from ._engine import NotExpressible, Result

PROG = "ggml_attention"
KV_TYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


@dataclasses.dataclass
class Plan:
    """One ggml_flash_attn_ext call, in numpy's [B, H, L, D] order (ggml's ne reversed):
    q float32; k, v in kv_type (F32: float32, F16: float16, BF16: uint16 bit patterns); mask
    None or float16 [Bm, Hm, Lq, Lk] (0 / bias allowed, -inf masked); sinks None or float32
    [Hq]; scale, softcap (0: off)."""
    dtype: str
    kv_type: str
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: Optional[np.ndarray]
    sinks: Optional[np.ndarray]
    scale: float
    softcap: float
    notes: Tuple[str, ...] = ()
    v_type: Optional[str] = None   # V's type where it is not K's (an experiment's; None: K's)
    prec_f32: bool = True          # ggml_flash_attn_ext_set_prec(GGML_PREC_F32), as llama.cpp


def _sequences(case):
    """[(q0, q1, k0, k1)] token ranges of each sequence (one for an unpacked case)."""
    lq, lk = case.q.shape[2], case.k.shape[2]
    if not case.packed:
        return [(0, lq, 0, lk)]
    cq = [int(x) for x in case.cu_seqlens_q]
    ck = [int(x) for x in case.cu_seqlens_k]
    return [(cq[s], cq[s + 1], ck[s], ck[s + 1]) for s in range(len(cq) - 1)]


def swa(case, window_offset: int = 0) -> Tuple[str, int]:
    """(llama.cpp's swa_type, n_swa) for the case's window or chunk: ("NONE", 0) without one;
    NotExpressible where llama.cpp has no such layer."""
    if case.window and case.chunk:
        raise NotExpressible(f"window W = {case.window} and chunks C = {case.chunk} on one "
                             f"layer: llama.cpp has one swa_type and n_swa per layer")
    if case.chunk:
        if not case.causal:
            raise NotExpressible(f"bidirectional chunks (C = {case.chunk}): llama.cpp's "
                                 f"LLAMA_SWA_TYPE_CHUNKED masks only keys before the query's "
                                 f"chunk and relies on the causal mask for the later ones")
        return "CHUNKED", case.chunk
    if case.window:
        w = case.window + window_offset
        return ("STANDARD", w) if case.causal else ("SYMMETRIC", 2 * (w - 1))
    return "NONE", 0


def kq_mask(case, window_offset: int = 0) -> np.ndarray:
    """bool [Lq, Lk], True where llama.cpp's KV cache leaves the pair unmasked: the key in the
    query's sequence, not after it when causal, and not is_masked_swa (the module's text; the
    rules of llama_kv_cache::set_input_kq_mask and llama_hparams::is_masked_swa, one array at a
    time instead of one cell at a time)."""
    lq, lk = case.q.shape[2], case.k.shape[2]
    swa_type, n_swa = swa(case, window_offset)
    positional = case.causal or swa_type != "NONE"
    allowed = np.zeros((lq, lk), dtype=bool)
    for q0, q1, k0, k1 in _sequences(case):
        nq, nk = q1 - q0, k1 - k0
        if nq <= 0 or nk <= 0:
            continue
        if positional and nq > nk:
            raise NotExpressible(f"{nq} queries over {nk} keys with a causal, window or chunk "
                                 f"term: in llama.cpp every query token is in the KV cache "
                                 f"(n_q <= n_kv), its position p1 >= 0")
        p1 = np.arange(nq)[:, None] + (nk - nq)
        p0 = np.arange(nk)[None, :]
        masked = np.zeros((nq, nk), dtype=bool)
        if case.causal:
            masked |= p0 > p1
        if swa_type == "STANDARD":
            masked |= p1 - p0 >= n_swa
        elif swa_type == "CHUNKED":
            masked |= p0 < (p1 // n_swa) * n_swa
        elif swa_type == "SYMMETRIC":
            half = n_swa // 2
            masked |= (p1 - p0 < -half) | (p1 - p0 > half)
        allowed[q0:q1, k0:k1] = ~masked
    return allowed


def ggml_plan(case, window_offset: int = 0) -> Plan:
    """The ggml_flash_attn_ext call for a case, or NotExpressible (see the module's text)."""
    b, hq, lq, d = case.q.shape
    hkv, lk = case.k.shape[1], case.k.shape[2]
    if lq == 0 or lk == 0:
        raise NotExpressible(f"Lq = {lq}, Lk = {lk}: an empty axis")
    if hq % hkv:
        raise NotExpressible(f"Hq = {hq} is not a multiple of Hkv = {hkv} (ggml broadcasts "
                             f"kv heads by n_head / n_head_kv)")
    notes: List[str] = []
    swa_type, n_swa = swa(case, window_offset)
    fam = kq_mask(case, window_offset)
    terms = case.causal or swa_type != "NONE" or case.packed
    allowed = fam[None, None] if terms else None
    if swa_type != "NONE":
        notes.append(f"SWA {swa_type} n_swa={n_swa}")
    elif case.causal:
        notes.append("causal mask")
    if case.packed:
        notes.append("packed as seq_ids")
    if case.mask is not None:
        allowed = case.mask.astype(bool) & (allowed if allowed is not None else True)
        notes.append("explicit mask ANDed")
    mask = None
    if allowed is not None:
        mask = np.where(allowed, np.float16(0), np.float16(-np.inf))
    if case.bias is not None:
        bias = np.asarray(case.bias, dtype=np.float32)
        b16 = bias.astype(np.float16)
        if not np.array_equal(b16.astype(np.float32), bias):
            raise NotExpressible("explicit bias not exactly representable in float16, the "
                                 "type of ggml_flash_attn_ext's additive mask")
        mask = b16 if mask is None else np.where(np.isneginf(mask), mask, b16)
        notes.append("bias in the mask")
    if mask is not None:
        mask = np.ascontiguousarray(mask, dtype=np.float16)
        per = "" if mask.shape[:2] == (1, 1) else f" per {mask.shape[:2]}"
        notes.append("F16 mask" + per)
    else:
        notes.append("no mask")
    kv_type = KV_TYPES[case.dtype]
    if kv_type == "F32":
        k, v = (np.ascontiguousarray(x, dtype=np.float32) for x in (case.k, case.v))
    elif kv_type == "F16":
        k, v = (np.ascontiguousarray(x, dtype=np.float16) for x in (case.k, case.v))
    else:
        k, v = (bfloat16_bits(np.ascontiguousarray(x, np.float32), round=False)
                for x in (case.k, case.v))
    notes.append(f"K/V {kv_type}")
    sinks = None
    if case.sinks is not None:
        sinks = np.ascontiguousarray(case.sinks, dtype=np.float32)
        notes.append("sinks (add_sinks)")
    if case.softcap:
        notes.append(f"softcap {case.softcap:g}")
    return Plan(case.dtype, kv_type, np.ascontiguousarray(case.q, dtype=np.float32), k, v, mask,
                sinks, float(case.scale), float(case.softcap or 0.0), tuple(notes))


# ---- ggml ----

class Ggml:
    """ggml's CPU backend through ggml-python: run(plan) -> (out, rerun), each [B, Hq, Lq, Dv]
    float32, each computed in a context of its own."""

    engine = "ggml"

    def __init__(self, threads: Optional[int] = None):
        import ggml
        self.g = ggml
        self.threads = threads or 1
        self.version = ggml.ggml_version().decode()
        self.commit = ggml.ggml_commit().decode()
        self.binding = f"ggml-python {ggml.__version__}"
        self.types = {"F32": ggml.GGML_TYPE_F32, "F16": ggml.GGML_TYPE_F16,
                      "BF16": ggml.GGML_TYPE_BF16}

    @staticmethod
    def preload() -> None:
        """Import the package (no context, no thread): what forked children then share."""
        import ggml  # noqa: F401

    def describe(self) -> str:
        commit = "" if self.commit in ("", "unknown") else f"commit {self.commit}, "
        return (f"ggml {self.version} ({commit}{self.binding}) flash_attn_ext, CPU, "
                f"{self.threads} threads, Q F32, prec F32, Python {platform.python_version()}")

    def _tensor(self, ctx, type_name: str, a: np.ndarray):
        """A new tensor of a's shape reversed (ggml's ne), its bytes copied from a."""
        g = self.g
        ne = [int(x) for x in reversed(a.shape)] + [1] * (4 - a.ndim)
        t = g.ggml_new_tensor_4d(ctx, self.types[type_name], *ne)
        if g.ggml_nbytes(t) != a.nbytes:
            raise RuntimeError(f"ggml tensor of {g.ggml_nbytes(t)} bytes for an array of "
                               f"{a.nbytes}")
        ctypes.memmove(g.ggml_get_data(t), np.ascontiguousarray(a).ctypes.data, a.nbytes)
        return t

    def _once(self, plan: Plan) -> np.ndarray:
        g = self.g
        b, hq, lq, _ = plan.q.shape
        dv = plan.v.shape[3]
        arrays = [plan.q, plan.k, plan.v] + [x for x in (plan.mask, plan.sinks) if x is not None]
        data = sum(x.nbytes for x in arrays) + b * hq * lq * dv * 4
        # the work buffer ggml_graph_compute_with_ctx takes from the context: per thread a row
        # of Q, V and their accumulators, plus the split-kv path's partials (ops.cpp)
        work = self.threads * (plan.q.shape[3] + 2 * dv + 64) * 4 * 2
        work += self.threads * self.threads * hq * (2 + dv) * 4
        mem = (data + work + 16 * g.ggml_tensor_overhead() + g.ggml_graph_overhead()
               + (8 << 20))
        ctx = g.ggml_init(g.ggml_init_params(mem_size=mem, mem_buffer=None, no_alloc=False))
        if not ctx:
            raise MemoryError(f"ggml_init: no context of {mem} bytes")
        try:
            q = self._tensor(ctx, "F32", plan.q)
            k = self._tensor(ctx, plan.kv_type, plan.k)
            v = self._tensor(ctx, plan.v_type or plan.kv_type, plan.v)
            m = self._tensor(ctx, "F16", plan.mask) if plan.mask is not None else None
            fa = g.ggml_flash_attn_ext(ctx, q, k, v, m, plan.scale, 0.0, plan.softcap)
            if plan.prec_f32:
                g.ggml_flash_attn_ext_set_prec(fa, g.GGML_PREC_F32)
            if plan.sinks is not None:
                g.ggml_flash_attn_ext_add_sinks(fa, self._tensor(ctx, "F32", plan.sinks))
            gf = g.ggml_new_graph(ctx)
            g.ggml_build_forward_expand(gf, fa)
            status = g.ggml_graph_compute_with_ctx(ctx, gf, self.threads)
            if status != 0:
                raise RuntimeError(f"ggml_graph_compute_with_ctx: status {status}")
            n = b * lq * hq * dv
            buf = (ctypes.c_float * n).from_address(g.ggml_get_data(fa))
            # the result is [Dv, Hq, Lq, B] in ggml's order ("permuted"): numpy [B, Lq, Hq, Dv]
            y = np.ctypeslib.as_array(buf).reshape(b, lq, hq, dv).transpose(0, 2, 1, 3)
            return np.array(y, dtype=np.float32, copy=True)
        finally:
            g.ggml_free(ctx)

    def run(self, plan: Plan):
        return self._once(plan), self._once(plan)


def adapter(engine, window_offset: int = 0):
    def run(case) -> Result:
        plan = ggml_plan(case, window_offset)
        out, rerun = engine.run(plan)
        return Result(out=out, out_rerun=rerun, notes=plan.notes + ("no LSE",))
    return run


def _args(argv):
    ap = argparse.ArgumentParser(
        prog=f"python -m flexcheck.{PROG}",
        description="Run ggml's ggml_flash_attn_ext (llama.cpp's attention op) on ggml's CPU "
                    "backend on every case of fixture files and store the outputs under "
                    "tested/<label> for `flexcheck check` to judge.")
    _engine.add_common_args(ap, "ggml-<version>-flash_attn_ext-cpu")
    ap.add_argument("--threads", type=int, default=2, metavar="N",
                    help="n_threads of ggml_graph_compute_with_ctx (default 2)")
    _engine.add_negative_control(ap)
    ap.add_argument("--isolate", action="store_true",
                    help="run each file in child processes that build the engine themselves, "
                         "so that a GGML_ASSERT abort costs one case (named), not the run")
    return ap.parse_args(argv)


def main(argv=None, engine=None, make_engine=None) -> int:
    """The command; engine (or make_engine, a class taking threads=) lets the tests put a
    stand-in with engine / version / describe() / run(plan) in ggml's place."""
    a = _args(argv)
    got = _engine.files_and_dtypes(PROG, a)
    if got is None:
        return 2
    files, dtypes = got
    make = make_engine or Ggml
    isolate = a.isolate and engine is None
    # with --isolate the engine is built in the children only (ggml's OpenMP threads do not
    # survive a fork)
    try:
        (version, producer, name), engine = _engine.start(
            lambda: make(threads=a.threads), lambda e: (e.version, e.describe(), e.engine),
            isolate, engine, getattr(make, "preload", None))
    except (ImportError, RuntimeError) as e:
        print(f"{PROG}: {_engine.first_line(e)}", file=sys.stderr)
        return 2
    label = _engine.sanitize_label(a.label or f"ggml-{version}-flash_attn_ext-cpu")
    if a.window_offset:
        producer += f", NEGATIVE CONTROL: W + {a.window_offset} handed over"
    run = _engine.Run(prog=PROG, engine=name, label=label, producer=producer,
                      adapter=None if isolate else adapter(engine, a.window_offset),
                      dtypes=dtypes, overwrite=a.overwrite,
                      isolate=((lambda: adapter(make(threads=a.threads), a.window_offset))
                               if isolate else None))
    return run.files(files)


if __name__ == "__main__":
    sys.exit(main())
