"""Tests of flexcheck.ggml_attention without ggml (Debian's python3 has no ggml-python).

The engine is a stand-in (StandIn below): ggml_flash_attn_ext as ggml.h and its CPU kernel
(ggml-cpu/ops.cpp, ggml_compute_forward_flash_attn_ext_f16_one_chunk) define it, written here
in numpy, not from the runner: q [D, Lq, Hq, B], k/v [D, Lk, Hkv, B] with query head h on kv
head h / (Hq / Hkv); s = scale * q.k, then logit_softcap c * tanh(s / c); the F16 mask added
(broadcast over heads and batch by index modulo its extent), a -INFINITY key skipped; each
head's sink joins the softmax's sum only; a row whose sum is 0 is 0. What is tested is the
runner: the mask it builds from a case the way llama.cpp's KV cache does (positions,
sequences, is_masked_swa's window types), its dtype mapping, what it calls not expressible,
what it stores, its counts and exit status; `flexcheck check` (FLEXCHECK_BIN) judges what it
stored against the float64 oracle, as in a real gate.

The negative control (--window-offset 1) must fail check with "window W+1"; a bidirectional
window built as LLAMA_SWA_TYPE_STANDARD (llama.cpp's usual SWA type, which bounds only the
past) must fail check. With ggml-python installed (the venv of make ggml-gate, pytest added),
test_real_ggml runs the same file through ggml's CPU backend.

Run: PYTHONPATH=python:python/tests FLEXCHECK_BIN=build/flexcheck python3 -m pytest \
         python/tests/test_ggml_runner.py
"""
import faulthandler
import os

import numpy as np
import pytest

from flexcheck import _engine, ggml_attention as ga
from flexcheck.fixtures import read_case, write_case
from test_torch_sdpa import _check, _qkv, allowed_pairs, write_term_cases


# ---- the stand-in engine: ggml_flash_attn_ext's CPU semantics in numpy ----

def _kv_values(a, kv_type):
    if kv_type == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def flash_attn_ext_reference(plan):
    q = plan.q.astype(np.float64)
    k, v = _kv_values(plan.k, plan.kv_type), _kv_values(plan.v, plan.kv_type)
    b, hq, lq, _ = q.shape
    out = np.zeros((b, hq, lq, v.shape[3]))
    g = hq // k.shape[1]
    for ib in range(b):
        for h in range(hq):
            s = plan.scale * q[ib, h] @ k[ib, h // g].T
            if plan.softcap:
                s = plan.softcap * np.tanh(s / plan.softcap)
            if plan.mask is not None:
                m = plan.mask[ib % plan.mask.shape[0], h % plan.mask.shape[1]]
                s = s + m.astype(np.float64)
            keep = np.isfinite(s)
            mx = np.max(np.where(keep, s, -np.inf), axis=1, keepdims=True)
            if plan.sinks is not None:
                mx = np.maximum(mx, plan.sinks[h])
            mx = np.where(np.isfinite(mx), mx, 0.0)
            e = np.where(keep, np.exp(s - mx), 0.0)
            den = e.sum(axis=1, keepdims=True)
            if plan.sinks is not None:
                den = den + np.exp(float(plan.sinks[h]) - mx)
            o = e @ v[ib, h // g]
            out[ib, h] = np.divide(o, den, out=np.zeros_like(o), where=den > 0)
    return out.astype(np.float32)


class StandIn:
    engine = "ggml"
    version = "0.0-standin"

    def __init__(self, threads=None, abort_on=None):
        self.plans = []
        self.abort_on = abort_on

    def describe(self):
        return "stand-in ggml_flash_attn_ext (numpy), tests"

    def run(self, plan):
        self.plans.append(plan)
        if self.abort_on is not None and plan.q.shape == self.abort_on:
            faulthandler.disable()  # pytest's dump of the dying child is noise here
            os.abort()  # what a GGML_ASSERT does
        y = flash_attn_ext_reference(plan)
        return y, y.copy()


# ---- fixture cases ----

CASES = (  # name, terms, (B, Hq, Hkv, Lq, Lk, D, Dv)
    ("dec-cw5", dict(causal=True, window=5), (1, 4, 2, 6, 13, 16, 16)),
    ("pre-c", dict(causal=True), (2, 2, 2, 9, 9, 16, 16)),
    ("more-q", dict(causal=True), (1, 2, 2, 6, 4, 16, 16)),
    ("more-q-none", dict(causal=False), (1, 2, 1, 6, 4, 16, 16)),
    ("bw4", dict(causal=False, window=4), (1, 2, 1, 8, 11, 16, 16)),
    ("chunk", dict(causal=True, chunk=4), (1, 2, 2, 5, 11, 16, 16)),
    ("bchunk", dict(causal=False, chunk=4), (1, 2, 2, 5, 11, 16, 16)),
    ("wchunk", dict(causal=True, window=3, chunk=4), (1, 2, 2, 5, 11, 16, 16)),
    ("none-dv", dict(causal=False), (1, 2, 2, 4, 6, 16, 8)),
    ("cap", dict(causal=True, window=3, softcap=20.0), (1, 2, 2, 9, 9, 16, 16)),
    ("sink", dict(causal=True, sinks=np.array([0.5, -1.0])), (1, 2, 1, 3, 7, 16, 16)),
)
NOT_EXPRESSIBLE = ("more-q", "bchunk", "wchunk")


def make_file(path, dtypes=("float32", "float16", "bfloat16")):
    rng = np.random.default_rng(12)
    for dt in dtypes:
        for name, kw, shape in CASES:
            q, k, v = _qkv(rng, *shape, dt)
            write_case(path, f"{name}-{dt}", q, k, v, dtype=dt, **kw)
        write_term_cases(path, rng, dt)  # xmask, bias, packed


N_CASES = len(CASES) + 3  # per dtype


@pytest.fixture
def fx(tmp_path):
    p = str(tmp_path / "ggml.h5")
    make_file(p)
    return p


# ---- plans (no engine) ----

@pytest.mark.parametrize("name", ["dec-cw5", "pre-c", "bw4", "chunk", "packed", "cap"])
def test_kq_mask_is_the_contracts(fx, name):
    c = read_case(fx, f"{name}-float32")
    assert np.array_equal(ga.kq_mask(c), allowed_pairs(c, c.window))
    if c.window:
        assert np.array_equal(ga.kq_mask(c, 1), allowed_pairs(c, c.window + 1))


def test_swa_types_as_llama_cpp_names_them(fx):
    assert ga.swa(read_case(fx, "dec-cw5-float32")) == ("STANDARD", 5)
    assert ga.swa(read_case(fx, "bw4-float32")) == ("SYMMETRIC", 6)
    assert ga.swa(read_case(fx, "bw4-float32"), 1) == ("SYMMETRIC", 8)
    assert ga.swa(read_case(fx, "chunk-float32")) == ("CHUNKED", 4)
    assert ga.swa(read_case(fx, "pre-c-float32")) == ("NONE", 0)


def test_plan_types_and_mask(fx):
    p = ga.ggml_plan(read_case(fx, "dec-cw5-float16"))
    assert p.kv_type == "F16" and p.k.dtype == np.float16 and p.q.dtype == np.float32
    assert p.mask.dtype == np.float16 and p.mask.shape == (1, 1, 6, 13)
    assert set(np.unique(p.mask).tolist()) == {0.0, -np.inf}
    p = ga.ggml_plan(read_case(fx, "pre-c-bfloat16"))
    assert p.kv_type == "BF16" and p.k.dtype == np.uint16
    p = ga.ggml_plan(read_case(fx, "more-q-none-float32"))
    assert p.kv_type == "F32" and p.mask is None
    c = read_case(fx, "xmask-float32")
    p = ga.ggml_plan(c)
    assert p.mask.shape == (1, 2, 5, 9)
    assert np.array_equal(p.mask == 0, c.mask & allowed_pairs(c, c.window)[None, None])
    c = read_case(fx, "bias-float32")
    p = ga.ggml_plan(c)
    fam = allowed_pairs(c, c.window)
    assert np.all(np.isneginf(p.mask[..., ~fam]))
    assert np.array_equal(p.mask[..., fam], c.bias[..., fam].astype(np.float16))
    p = ga.ggml_plan(read_case(fx, "sink-float32"))
    assert p.sinks.dtype == np.float32 and p.sinks.shape == (2,)


def test_what_llama_cpp_cannot_state(fx):
    with pytest.raises(_engine.NotExpressible, match="every query token is in the KV cache"):
        ga.ggml_plan(read_case(fx, "more-q-float32"))
    with pytest.raises(_engine.NotExpressible, match="LLAMA_SWA_TYPE_CHUNKED"):
        ga.ggml_plan(read_case(fx, "bchunk-float32"))
    with pytest.raises(_engine.NotExpressible, match="one swa_type"):
        ga.ggml_plan(read_case(fx, "wchunk-float32"))
    c = read_case(fx, "bias-float32")
    c.bias = c.bias + np.float32(2.0 ** -20)  # not a float16 value any more
    with pytest.raises(_engine.NotExpressible, match="not exactly representable in float16"):
        ga.ggml_plan(c)


# ---- the runner end to end with the stand-in, judged by flexcheck check (_check) ----


def test_runner_stores_what_check_passes(flexbin, fx, capsys):
    assert ga.main([fx], engine=StandIn()) == 0
    out = capsys.readouterr()
    n, ne = 3 * N_CASES, 3 * len(NOT_EXPRESSIBLE)
    assert (f"1 files, {n} cases, {n - ne} stored, 0 skipped (dtype), 0 refused by ggml, {ne} "
            f"not expressible in ggml, 0 errors, under tested/ggml-0.0-standin-flash_attn_ext-cpu"
            in out.out)
    assert "case bchunk-float16: not expressible in ggml: bidirectional chunks" in out.err
    t = read_case(fx, "packed-bfloat16").tested["ggml-0.0-standin-flash_attn_ext-cpu"]
    assert "SWA STANDARD n_swa=3" in t.producer and "K/V BF16" in t.producer
    assert "no LSE" in t.producer and t.lse is None and t.out_rerun is not None
    rc, so, se = _check(flexbin, fx)
    assert rc == 0, so + se
    assert f"{n - ne} outputs under test: {n - ne} passed, 0 failed" in so


def test_negative_control_fails_by_name(flexbin, fx, capsys):
    assert ga.main([fx, "--window-offset", "1", "--dtype", "float32"], engine=StandIn()) == 0
    capsys.readouterr()
    rc, so, se = _check(flexbin, fx)
    assert rc == 1, so + se
    fails = sorted(ln.split()[2] for ln in so.splitlines() if ln.startswith("FAIL"))
    # the windowed cases whose window does not cover every allowed key (cap's W = 3 on 9 x 9
    # does not either)
    assert fails == sorted(f"{n}-float32" for n in ("dec-cw5", "bw4", "cap", "xmask", "bias",
                                                    "packed")), so
    assert so.count("explained by window W+1") == len(fails), so
    assert "NEGATIVE CONTROL: W + 1" in so


def test_bidirectional_window_as_standard_swa_is_caught(flexbin, fx, capsys, monkeypatch):
    """llama.cpp's STANDARD type on a non-causal layer bounds only the past: handed the
    bidirectional W = 4 case, the stand-in's output fails check (keys after the window leak)."""
    real = ga.swa

    def standard(case, window_offset=0):
        t, n = real(case, window_offset)
        return ("STANDARD", case.window + window_offset) if t == "SYMMETRIC" else (t, n)
    monkeypatch.setattr(ga, "swa", standard)
    assert ga.main([fx, "--dtype", "float32"], engine=StandIn()) == 0
    capsys.readouterr()
    rc, so, se = _check(flexbin, fx)
    assert rc == 1, so + se
    fails = [ln.split()[2] for ln in so.splitlines() if ln.startswith("FAIL")]
    assert fails == ["bw4-float32"], so


def test_isolate_counts_an_abort_as_one_error(fx, capsys):
    """--isolate: a stand-in that aborts (as a GGML_ASSERT does) on the 9 x 9 cases costs
    those cases, each named with SIGABRT; the others are stored."""
    class Aborting(StandIn):
        def __init__(self, threads=None):
            super().__init__(threads, abort_on=(2, 2, 9, 16))
    assert ga.main([fx, "--isolate", "--dtype", "float32"], make_engine=Aborting) == 1
    out = capsys.readouterr()
    assert "case pre-c-float32: the engine crashed the process (signal 6, SIGABRT)" in out.err
    assert ", 1 errors, under tested/" in out.out
    stored = N_CASES - len(NOT_EXPRESSIBLE) - 1
    assert f"{stored} stored" in out.out


def test_bad_arguments_exit_2(tmp_path, capsys):
    assert ga.main([str(tmp_path / "nope.h5")], engine=StandIn()) == 2
    assert "no such file or directory" in capsys.readouterr().err
    p = str(tmp_path / "a.h5")
    make_file(p, dtypes=("float32",))
    assert ga.main([p, "--dtype", "float64"], engine=StandIn()) == 2
    assert "--dtype 'float64'" in capsys.readouterr().err
    assert ga.main([p, "--threads", "0"], engine=StandIn()) == 2
    assert "--threads 0: must be >= 1" in capsys.readouterr().err


def test_real_ggml(flexbin, tmp_path, capsys):
    pytest.importorskip("ggml")
    p = str(tmp_path / "real.h5")
    make_file(p)
    assert ga.main([p, "--isolate"]) == 0
    out = capsys.readouterr()
    assert " 0 errors" in out.out
    rc, so, se = _check(flexbin, p)
    assert rc == 0, so + se
