"""Tests of flexcheck.torch_sdpa without PyTorch (Debian's python3 has none).

The engine is a stand-in (StandIn below): torch.nn.functional.scaled_dot_product_attention as
PyTorch documents it, written here in numpy from its documentation's reference code, not from
the runner: a boolean attn_mask keeps the True pairs, a float attn_mask is added to the scaled
scores, is_causal is torch.ones(L, S).tril(diagonal=0) (TOP-LEFT aligned), enable_gqa repeats
each K/V head Hq / Hkv times (repeat_interleave), scale multiplies q @ k^T; a row with no
allowed key is 0 (what PyTorch 2.15's math backend returns for a boolean mask). Its "flash"
backend declines Dv != D, as PyTorch's CPU flash does, in made-up words. What is tested is the
runner: the mask it builds from a case (the contract's bottom-right positions, windows,
chunks, packed sequences, explicit terms), when it may use is_causal, what it calls not
expressible, what it stores, its counts and exit status; `flexcheck check` (FLEXCHECK_BIN)
judges what it stored against the float64 oracle, as in a real gate.

The negative control (--window-offset 1) must fail check with "window W+1"; is_causal used for
a case with Lq != Lk (SDPA's top-left trap) must fail check. With PyTorch installed (the torch
venv of make sdpa-gate, pytest added), test_real_torch runs the same file through it.

Run: PYTHONPATH=python:python/tests FLEXCHECK_BIN=build/flexcheck python3 -m pytest \
         python/tests/test_torch_sdpa.py
"""
import numpy as np
import pytest

from flexcheck import _engine, torch_sdpa as ts
from flexcheck.fixtures import bfloat16_bits, read_case, write_case
from _flexcli import run


# ---- the stand-in engine: SDPA's documented reference in numpy ----

def sdpa_reference(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    L, S = q.shape[-2], k.shape[-2]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    bias = np.zeros((L, S))
    allowed = np.ones((L, S), dtype=bool)
    if is_causal:
        assert attn_mask is None
        allowed = np.tril(np.ones((L, S), dtype=bool))
    if attn_mask is not None:
        if attn_mask.dtype == bool:
            allowed = allowed & attn_mask
        else:
            bias = bias + attn_mask.astype(np.float64)
    if enable_gqa:
        k = np.repeat(k, q.shape[-3] // k.shape[-3], axis=-3)
        v = np.repeat(v, q.shape[-3] // v.shape[-3], axis=-3)
    s = scale * q @ np.swapaxes(k, -1, -2) + bias
    allowed = np.broadcast_to(allowed, s.shape) & np.isfinite(s)
    s = np.where(allowed, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(allowed, np.exp(s - m), 0.0)
    den = e.sum(axis=-1, keepdims=True)
    p = np.divide(e, den, out=np.zeros_like(e), where=den > 0)
    return p @ v


def _to_bf16_bits(y):
    return bfloat16_bits(np.ascontiguousarray(y, dtype=np.float32))


class StandIn:
    engine = "PyTorch"
    version = "0.0-standin"
    has_gqa = True

    def __init__(self, backends=("math", "flash")):
        self.backends = list(backends)
        self.left_out = {"efficient": "stand-in: no CPU kernel"}
        self.plans = []

    def describe(self, backend):
        return f"stand-in SDPA reference (numpy), backend {backend}, tests"

    def run(self, plan, backend):
        self.plans.append((plan, backend))
        if backend == "flash" and plan.v.shape[-1] != plan.q.shape[-1]:
            raise _engine.Refused("stand-in flash requires q,k,v to have the same last "
                                  "dimension")
        y = sdpa_reference(plan.q, plan.k, plan.v, plan.attn_mask, plan.is_causal,
                           plan.scale, enable_gqa=plan.gqa)
        if plan.dtype == "bfloat16":
            y = _to_bf16_bits(y)
        else:
            y = y.astype(plan.q.dtype)
        return y, y.copy()


# ---- fixture cases ----

def _round(x, dtype):
    t = np.float16 if dtype == "float16" else np.float32
    x = np.asarray(x).astype(t)
    if dtype == "bfloat16":  # bfloat16 values, stored as float32
        x = (x.view(np.uint32) & 0xFFFF0000).view(np.float32)
    return x


def _qkv(rng, b, hq, hkv, lq, lk, d, dv, dtype):
    def r(*shape):
        return _round(rng.standard_normal(shape), dtype)
    return r(b, hq, lq, d), r(b, hkv, lk, d), r(b, hkv, lk, dv)


CASES = (  # name, terms, (B, Hq, Hkv, Lq, Lk, D, Dv)
    ("dec-cw5", dict(causal=True, window=5), (1, 4, 2, 6, 13, 16, 16)),
    ("pre-c", dict(causal=True), (2, 2, 2, 9, 9, 16, 16)),
    ("dec-c", dict(causal=True), (1, 2, 1, 3, 7, 16, 16)),
    ("more-q", dict(causal=True), (1, 2, 2, 6, 4, 16, 16)),
    ("bw4", dict(causal=False, window=4), (1, 2, 1, 8, 11, 16, 16)),
    ("chunk", dict(causal=True, chunk=4), (1, 2, 2, 5, 11, 16, 16)),
    ("none-dv", dict(causal=False), (1, 2, 2, 4, 6, 16, 8)),
    ("cap", dict(causal=True, window=3, softcap=20.0), (1, 2, 2, 9, 9, 16, 16)),
    ("sink", dict(causal=True, sinks=np.array([0.5, -1.0])), (1, 2, 1, 3, 7, 16, 16)),
)


def write_term_cases(path, rng, dt):
    """The three cases of a dtype beside CASES (test_ggml_runner writes them too): an explicit
    per-head mask ANDed with a causal window, a bias (values exact in every dtype: 8
    significant bits, small), and a packed batch: two sequences of 3 / 5 queries over 5 / 7
    keys."""
    q, k, v = _qkv(rng, 1, 2, 1, 5, 9, 16, 16, dt)
    mask = rng.random((1, 2, 5, 9)) < 0.7
    write_case(path, f"xmask-{dt}", q, k, v, dtype=dt, causal=True, window=6, mask=mask)
    bias = _round(rng.standard_normal((1, 1, 5, 9)), "bfloat16")
    write_case(path, f"bias-{dt}", q, k, v, dtype=dt, causal=True, window=6, bias=bias)
    q, k, v = _qkv(rng, 1, 2, 2, 8, 12, 16, 16, dt)
    write_case(path, f"packed-{dt}", q, k, v, dtype=dt, causal=True, window=3,
               cu_seqlens_q=np.array([0, 3, 8]), cu_seqlens_k=np.array([0, 5, 12]))


def make_file(path, dtypes=("float32", "float16", "bfloat16")):
    rng = np.random.default_rng(11)
    for dt in dtypes:
        for name, kw, shape in CASES:
            q, k, v = _qkv(rng, *shape, dt)
            write_case(path, f"{name}-{dt}", q, k, v, dtype=dt, **kw)
        write_term_cases(path, rng, dt)


N_CASES = len(CASES) + 3  # per dtype


@pytest.fixture
def fx(tmp_path):
    p = str(tmp_path / "sdpa.h5")
    make_file(p)
    return p


# ---- plans (no engine) ----

def allowed_pairs(case, window):
    """The contract's pairs (docs/semantics.md section 2), one pair at a time, per sequence."""
    lq, lk = case.q.shape[2], case.k.shape[2]
    cq = list(case.cu_seqlens_q) if case.packed else [0, lq]
    ck = list(case.cu_seqlens_k) if case.packed else [0, lk]
    out = np.zeros((lq, lk), dtype=bool)
    for tq in range(lq):
        for tk in range(lk):
            sq = max(s for s in range(len(cq) - 1) if cq[s] <= tq)
            sk = max(s for s in range(len(ck) - 1) if ck[s] <= tk)
            if sq != sk:
                continue
            nq, nk = cq[sq + 1] - cq[sq], ck[sk + 1] - ck[sk]
            pq, pk = tq - cq[sq] + nk - nq, tk - ck[sk]
            ok = True
            if case.causal:
                ok = ok and pk <= pq
            if window:
                ok = ok and abs(pq - pk) < window
            if case.chunk:
                ok = ok and int(np.floor(pq / case.chunk)) == int(np.floor(pk / case.chunk))
            out[tq, tk] = ok
    return out


@pytest.mark.parametrize("name", ["dec-cw5", "dec-c", "more-q", "bw4", "chunk", "packed"])
def test_family_mask_is_the_contracts(fx, name):
    c = read_case(fx, f"{name}-float32")
    assert np.array_equal(ts.family_mask(c), allowed_pairs(c, c.window))
    if c.window:
        assert np.array_equal(ts.family_mask(c, 1), allowed_pairs(c, c.window + 1))


def test_is_causal_only_where_top_left_is_bottom_right(fx):
    p = ts.sdpa_plan(read_case(fx, "pre-c-float32"))
    assert p.is_causal and p.attn_mask is None
    for name in ("dec-c", "more-q"):  # Lq != Lk: SDPA's is_causal would be top-left
        c = read_case(fx, f"{name}-float32")
        p = ts.sdpa_plan(c)
        assert not p.is_causal and p.attn_mask.dtype == bool
        assert np.array_equal(p.attn_mask, allowed_pairs(c, 0))
        assert not np.array_equal(p.attn_mask, np.tril(np.ones(p.attn_mask.shape, bool)))


def test_explicit_terms(fx):
    c = read_case(fx, "xmask-float16")
    p = ts.sdpa_plan(c)
    assert p.attn_mask.shape == (1, 2, 5, 9) and p.attn_mask.dtype == bool
    assert np.array_equal(p.attn_mask, c.mask & allowed_pairs(c, c.window)[None, None])
    c = read_case(fx, "bias-float16")
    p = ts.sdpa_plan(c)
    fam = allowed_pairs(c, c.window)
    assert p.attn_mask.dtype == np.float16 and p.attn_mask.shape == (1, 1, 5, 9)
    assert np.all(np.isneginf(p.attn_mask[..., ~fam]))
    assert np.array_equal(p.attn_mask[..., fam], c.bias[..., fam].astype(np.float16))


def test_what_sdpa_cannot_state(fx):
    with pytest.raises(_engine.NotExpressible, match="soft-cap"):
        ts.sdpa_plan(read_case(fx, "cap-float32"))
    with pytest.raises(_engine.NotExpressible, match="sinks"):
        ts.sdpa_plan(read_case(fx, "sink-float32"))
    c = read_case(fx, "bias-float16")
    c.bias = c.bias + np.float32(2.0 ** -20)  # not a float16 value any more
    with pytest.raises(_engine.NotExpressible, match="not exactly representable in float16"):
        ts.sdpa_plan(c)


# ---- the runner end to end with the stand-in, judged by flexcheck check ----

def _check(flexbin, path):
    return run(flexbin, "check", path)


def test_runner_stores_what_check_passes(flexbin, fx, capsys):
    eng = StandIn()
    assert ts.main([fx], engine=eng) == 0
    out = capsys.readouterr()
    n = 3 * N_CASES
    # cap and sink are not expressible in every dtype; flash refuses none-dv (Dv != D)
    assert (f"1 files, {n} cases, {n - 6} stored, 0 skipped (dtype), 0 refused by PyTorch, 6 "
            f"not expressible in PyTorch, 0 errors, under tested/torch-0.0-standin-sdpa-math-cpu"
            in out.out)
    assert (f"1 files, {n} cases, {n - 9} stored, 0 skipped (dtype), 3 refused by PyTorch, 6 "
            f"not expressible in PyTorch, 0 errors, under "
            f"tested/torch-0.0-standin-sdpa-flash-cpu" in out.out)
    assert "backend efficient left out: it does not run on the CPU here (stand-in" in out.err
    assert "case none-dv-float32: refused by PyTorch: stand-in flash requires" in out.err
    t = read_case(fx, "packed-bfloat16").tested["torch-0.0-standin-sdpa-math-cpu"]
    assert "block-diagonal" in t.producer and "no LSE" in t.producer and t.lse is None
    assert t.encoding == "bfloat16" and t.out_rerun is not None
    rc, so, se = _check(flexbin, fx)
    assert rc == 0, so + se
    assert f"{2 * n - 15} outputs under test: {2 * n - 15} passed, 0 failed" in so


def test_negative_control_fails_by_name(flexbin, fx, capsys):
    assert ts.main([fx, "--window-offset", "1", "--dtype", "float32", "--backend", "math"],
                   engine=StandIn()) == 0
    capsys.readouterr()
    rc, so, se = _check(flexbin, fx)
    assert rc == 1, so + se
    fails = [ln for ln in so.splitlines() if ln.startswith("FAIL")]
    # the windowed cases whose window does not cover every allowed key: dec-cw5, bw4, xmask,
    # bias, packed
    assert len(fails) == 5, so
    assert so.count("explained by window W+1") == 5, so
    assert "NEGATIVE CONTROL: W + 1" in so


def test_is_causal_for_lq_ne_lk_is_caught(flexbin, fx, capsys, monkeypatch):
    """SDPA's top-left is_causal handed a causal case with Lq != Lk (the trap the runner
    avoids) fails check: the stand-in holds the runner to the documented alignment."""
    real = ts.sdpa_plan

    def top_left(case, window_offset=0):
        p = real(case, window_offset)
        if case.causal and not case.window and not case.chunk and case.mask is None:
            p.attn_mask, p.is_causal = None, True
        return p
    monkeypatch.setattr(ts, "sdpa_plan", top_left)
    assert ts.main([fx, "--dtype", "float32", "--backend", "math"], engine=StandIn()) == 0
    capsys.readouterr()
    rc, so, se = _check(flexbin, fx)
    assert rc == 1, so + se
    fails = sorted(ln.split()[2] for ln in so.splitlines() if ln.startswith("FAIL"))
    assert fails == ["dec-c-float32", "more-q-float32"], so  # not pre-c (Lq == Lk)
    assert so.count("explained by top-left alignment") == 2, so


def test_bad_arguments_exit_2(tmp_path, capsys):
    assert ts.main([str(tmp_path / "nope.h5")], engine=StandIn()) == 2
    assert "no such file or directory" in capsys.readouterr().err
    p = str(tmp_path / "a.h5")
    make_file(p, dtypes=("float32",))
    assert ts.main([p, "--dtype", "float64"], engine=StandIn()) == 2
    assert "--dtype 'float64'" in capsys.readouterr().err
    assert ts.main([p, "--backend", "efficient"], engine=StandIn()) == 2
    assert "no selected backend runs here" in capsys.readouterr().err
    assert ts.main([p, "--threads", "0"], engine=StandIn()) == 2


def test_real_torch(flexbin, tmp_path, capsys):
    pytest.importorskip("torch")
    p = str(tmp_path / "real.h5")
    make_file(p)
    assert ts.main([p]) == 0
    out = capsys.readouterr()
    assert " 0 errors" in out.out
    rc, so, se = _check(flexbin, p)
    assert rc == 0, so + se
