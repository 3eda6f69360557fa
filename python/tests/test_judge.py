"""flexcheck.judge / assert_attention_close: flexcheck's verdict in process, through the shared
library `make` builds. Skipped (visibly) when the library cannot be found.

The attention these tests feed it is a brute-force numpy float64 attention written here from
docs/semantics.md (bottom-right alignment, causal, window, GQA): the thing under test, as an
engine's kernel would be, never a second oracle.
"""
import json
import os
import subprocess

import numpy as np
import pytest

import flexcheck
from flexcheck import add_tested, list_cases, read_case
from _flexcli import BIN

from flexcheck.judging import library_version

try:
    library_version()
    WHY = None
except RuntimeError as e:  # no libflexcheck.so: the reason is the skip's
    WHY = str(e)

pytestmark = pytest.mark.skipif(WHY is not None, reason=f"{WHY}")


def attention(q, k, v, *, causal=False, window=0, scale=None):
    """[B, H, L, D] float64 attention, the mask of docs/semantics.md, dense batch."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    lq, lk = q.shape[2], k.shape[2]
    s = q @ k.transpose(0, 1, 3, 2) * (scale if scale else q.shape[3] ** -0.5)
    pq = np.arange(lq)[:, None] + (lk - lq)
    pk = np.arange(lk)[None, :]
    ok = np.ones((lq, lk), bool)
    if causal:
        ok &= pk <= pq
    if window:
        ok &= np.abs(pq - pk) < window
    s = np.where(ok, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    p = np.exp(s - m)
    l = p.sum(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        o = np.where(l > 0, (p / np.where(l > 0, l, 1)) @ v, 0)
        lse = np.where(l[..., 0] > 0, np.log(l[..., 0]) + m[..., 0], -np.inf)
    return o, lse


def inputs(seed=0, b=1, hq=8, hkv=2, lq=64, lk=64, d=32, dt=np.float16):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype(dt)
                 for s in ((b, hq, lq, d), (b, hkv, lk, d), (b, hkv, lk, d)))


def test_a_right_output_passes_and_its_verdict_says_so():
    q, k, v = inputs()
    o, lse = attention(q, k, v, causal=True, window=16)
    vd = flexcheck.judge(q, k, v, o.astype(np.float16), lse.astype(np.float32), causal=True,
                         window=16)
    assert vd.passed and not vd.failed and vd.reason == "", str(vd)
    assert str(vd).startswith("PASS output float16: passes the gates (H1 ratio ")
    assert vd.gates["H1"][0] == "pass" and vd.gates["H5"][0] == "pass"
    assert vd.gates["H6"][0] == "not run" and vd.gates["H7"][0] == "not run"
    assert vd.diagnosis == "" and vd.findings == []
    assert 0 < vd.metrics["h1_ratio"] < 1
    assert flexcheck.assert_attention_close(q, k, v, out=o.astype(np.float16), causal=True,
                                            window=16).passed


def test_a_window_one_too_wide_raises_naming_window_w_plus_1():
    q, k, v = inputs(1)
    o, lse = attention(q, k, v, causal=True, window=17)  # the engine's bug: W + 1
    with pytest.raises(AssertionError) as e:
        flexcheck.assert_attention_close(q, k, v, out=o.astype(np.float16),
                                         lse=lse.astype(np.float32), causal=True, window=16)
    text = str(e.value)
    assert "FAIL output float16: H1 max ratio" in text
    assert "explained by window W+1 (16 -> 17)" in text, text
    vd = flexcheck.judge(q, k, v, o.astype(np.float16), lse, causal=True, window=16)
    assert vd.findings[0][0] == "window W+1 (16 -> 17)"
    (b, h, qi, di), err = vd.worst
    assert err == pytest.approx(abs(float(o.astype(np.float16)[b, h, qi, di]) -
                                    attention(q, k, v, causal=True, window=16)[0][b, h, qi, di]),
                                rel=1e-6)


def test_one_argument_order_and_the_old_one_warns_with_the_same_verdict():
    """q, k, v, out, lse for judge and assert_attention_close; the old assert order (out first,
    positional) is told by the absent out= and still judged the same, with a warning. Equal
    shapes throughout (Hq = Hkv, Lq = Lk, D = Dv): no shape could tell the orders apart."""
    import warnings

    q, k, v = inputs(3, hq=2, hkv=2, lq=32, lk=32, d=16)
    good, lse = attention(q, k, v, causal=True, window=8)
    bad, _ = attention(q, k, v, causal=True, window=9)  # window W+1
    good, bad, lse = good.astype(np.float16), bad.astype(np.float16), lse.astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # judge's order: no warning
        assert flexcheck.assert_attention_close(q, k, v, out=good, lse=lse, causal=True,
                                                window=8).passed
        assert flexcheck.assert_attention_close(out=good, q=q, k=k, v=v, causal=True,
                                                window=8).passed
    new = str(flexcheck.judge(q, k, v, good, lse, causal=True, window=8))
    with pytest.warns(DeprecationWarning, match=r"assert_attention_close\(q, k, v, out=out"):
        old = flexcheck.assert_attention_close(good, q, k, v, lse, causal=True, window=8)
    assert str(old) == new
    # the wrong output fails in both orders, with the same text
    with pytest.raises(AssertionError) as e_new:
        flexcheck.assert_attention_close(q, k, v, out=bad, causal=True, window=8)
    with pytest.warns(DeprecationWarning), pytest.raises(AssertionError) as e_old:
        flexcheck.assert_attention_close(bad, q, k, v, causal=True, window=8)
    assert "explained by window W+1 (8 -> 9)" in str(e_new.value), str(e_new.value)
    assert str(e_old.value) == str(e_new.value)
    # out= makes the positional arguments q, k, v: a fourth is refused, not taken for lse
    with pytest.raises(TypeError, match=r"4 positional arguments, at most 3 \(q, k, v\); lse "
                                        r"by keyword"):
        flexcheck.assert_attention_close(q, k, v, lse, out=good)
    with pytest.raises(TypeError, match="q given twice"):
        flexcheck.assert_attention_close(q, k, v, q=q, out=good)
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="k given twice"):
        flexcheck.assert_attention_close(good, q, k, k=k, v=v)


def test_packed_vllm_layout_and_bfloat16_from_float32_values():
    rng = np.random.default_rng(2)
    cu = np.array([0, 5, 12, 30], np.int32)
    tq = int(cu[-1])
    q, k, v = (flexcheck.round_to(rng.standard_normal((tq, h, 16)), "bfloat16")
               for h in (4, 2, 2))
    outs = []
    for s in range(3):
        a, z = cu[s], cu[s + 1]
        o, _ = attention(q[a:z].transpose(1, 0, 2)[None], k[a:z].transpose(1, 0, 2)[None],
                         v[a:z].transpose(1, 0, 2)[None], causal=True)
        outs.append(o[0].transpose(1, 0, 2))
    out = flexcheck.round_to(np.concatenate(outs), "bfloat16")
    vd = flexcheck.judge(q, k, v, out, causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu,
                         dtype="bfloat16")
    assert vd.passed, str(vd)
    # the batch not packed: the second and third sequences see the first's keys
    o_all, _ = attention(q.transpose(1, 0, 2)[None], k.transpose(1, 0, 2)[None],
                         v.transpose(1, 0, 2)[None], causal=True)
    wrong = flexcheck.round_to(o_all[0].transpose(1, 0, 2), "bfloat16")
    vd = flexcheck.judge(q, k, v, wrong, causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu,
                         dtype="bfloat16")
    assert vd.failed and "packed" in vd.findings[0][0], str(vd)


def test_views_and_odd_strides_are_copied_not_misread():
    q, k, v = inputs(3, lq=32, lk=32)
    o, _ = attention(q, k, v)
    qt = np.asfortranarray(q)  # same values, another memory order
    ot = np.ascontiguousarray(o.astype(np.float16).transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    assert not ot.flags["C_CONTIGUOUS"]
    assert flexcheck.judge(qt, k, v, ot).passed


@pytest.mark.parametrize("args,says", [
    (dict(out=np.zeros((1, 8, 64, 31), np.float16)), "out: shape [1, 8, 64, 31]"),
    (dict(k=np.zeros((1, 3, 64, 32), np.float16), v=np.zeros((1, 3, 64, 32), np.float16)),
     "Hq = 8 is not a multiple of Hkv = 3"),
    (dict(q=np.zeros((8, 64, 32), np.float16)), "rank 3 is vLLM's packed [T, H, D] layout"),
    (dict(dtype="float8"), "dtype 'float8'"),
    (dict(q=np.full((1, 8, 64, 32), 0.1)), "q: value 0.1 at [0][0][0][0] is not representable "
                                           "in float32"),
    (dict(k=np.full((1, 2, 64, 32), np.nan, np.float16)), "k: value nan"),
    (dict(window=-2), "window = -2: must be in [1, 2147483647] (None, 0 or -1 for no window)"),
    (dict(lse=np.zeros((1, 8, 63), np.float32)), "lse: shape [1, 8, 63]"),
    (dict(out=np.zeros((1, 8, 64, 32), np.int32)), "out: dtype int32"),
    (dict(sinks=np.zeros(3, np.float32)), "sinks: shape [3]"),
])
def test_bad_arguments_raise_value_error_naming_the_argument(args, says):
    q, k, v = inputs(4)
    kw = dict(q=q, k=k, v=v, out=np.zeros((1, 8, 64, 32), np.float16))
    kw.update(args)
    with pytest.raises(ValueError) as e:
        flexcheck.judge(**kw)
    assert says in str(e.value), str(e.value)


def test_torch_tensors_on_any_device_and_bfloat16():
    torch = pytest.importorskip("torch")
    q, k, v = (torch.randn(1, h, 40, 16).to(torch.bfloat16) for h in (4, 2, 2))
    o, lse = attention(q.float().numpy(), k.float().numpy(), v.float().numpy(), causal=True)
    out = torch.from_numpy(o).to(torch.bfloat16)
    vd = flexcheck.judge(q, k, v, out, torch.from_numpy(lse), causal=True)
    assert vd.passed, str(vd)


# ---- the same verdict as `flexcheck check` on exported cases ----

def _exported(tmp_path, filt):
    rc = subprocess.run([BIN, "export", "--quick", "--filter", filt, "--out",
                         str(tmp_path / "x")], capture_output=True, text=True)
    assert rc.returncode == 0, rc.stderr
    return sorted(str(p) for p in (tmp_path / "x").glob("*.h5"))


def agreement(tmp_path, filt):
    """Two outputs per exported case (the oracle rounded to the case's dtype; the same, 0.1%
    too large on one head), check --report over them, and judge() on each: the same outcome,
    max|err| to 1e-6 relative, and judge's worst element carries exactly that error."""
    files = _exported(tmp_path, filt)
    assert files
    kinds = {}
    for f in files:
        for name in list_cases(f):
            c = read_case(f, name)
            dt = np.float16 if c.dtype == "float16" else np.float32
            good = c.out.astype(dt)
            if c.dtype == "bfloat16":
                good = flexcheck.round_to(c.out, "bfloat16")
            bad = good.copy()
            bad[:, 0] = (bad[:, 0].astype(np.float64) * 1.001).astype(bad.dtype)
            add_tested(f, name, "good", good, producer="oracle", lse=c.lse.astype(np.float32))
            add_tested(f, name, "bad", bad, producer="scaled", lse=c.lse.astype(np.float32))
    rep = tmp_path / "r"
    rc = subprocess.run([BIN, "check", "--quiet", "--report", str(rep), *files],
                        capture_output=True, text=True, env=dict(os.environ,
                                                                 OPENBLAS_NUM_THREADS="1"))
    assert rc.returncode in (0, 1), rc.stdout + rc.stderr
    rows = json.loads((rep / "rows.json").read_text())["rows"]
    by = {(r["case_id"], r["dtype"], r["backend"]): r for r in rows}
    compared = 0
    for f in files:
        for name in list_cases(f):
            if name.endswith("@design"):
                continue  # judged by p-round's rule in check; judge() takes the call as given
            c = read_case(f, name)
            cid = c.case_id if hasattr(c, "case_id") else None
            for label in ("good", "bad"):
                t = c.tested[label]
                out = flexcheck.bfloat16_to_float32(t.out) if t.encoding == "bfloat16" else t.out
                vd = flexcheck.judge(c.q, c.k, c.v, out, t.lse, causal=c.causal,
                                     window=c.window, chunk=c.chunk, scale=c.scale,
                                     cu_seqlens_q=c.cu_seqlens_q, cu_seqlens_k=c.cu_seqlens_k,
                                     softcap=c.softcap, sinks=c.sinks, dtype=c.dtype)
                row = [r for (i, d, b), r in by.items()
                       if d == c.dtype and b == f"tested/{label}" and
                       r["case_id"] == _case_id(f, name)]
                assert len(row) == 1, (f, name, label)
                row = row[0]
                want = {"pass": "pass", "fail": "fail", "outside": "outside-contract"}[vd.outcome]
                assert row["outcome"] == want, (f, name, label, row["reason"], str(vd))
                kinds[want] = kinds.get(want, 0) + 1
                if row["max_err"] is not None and vd.worst is not None:
                    assert vd.metrics["max_err"] == pytest.approx(row["max_err"], rel=1e-6,
                                                                  abs=1e-12)
                    (b, h, qi, di), err = vd.worst
                    got = abs(float(np.asarray(out, np.float64)[b, h, qi, di]) -
                              float(c.out[b, h, qi, di]))
                    assert got == pytest.approx(row["max_err"], rel=1e-6, abs=1e-12), \
                        (f, name, label)
                compared += 1
    return compared, kinds


def _case_id(path, name):
    """The report's case id of a case: its exported case_id attribute (read with h5py)."""
    import h5py
    with h5py.File(path, "r") as f:
        cid = f[f"cases/{name}"].attrs.get("case_id")
    return cid.decode() if isinstance(cid, bytes) else str(cid)


@pytest.mark.skipif(not BIN, reason="FLEXCHECK_BIN is not set (make test sets it)")
def test_judge_agrees_with_check_on_exported_cases(tmp_path):
    # make test: the M1 numeric group at one size; FLEXCHECK_JUDGE_AGREE=PATTERN (e.g. "m")
    # runs it over any part of the quick export (the whole of it: "-").
    filt = os.environ.get("FLEXCHECK_JUDGE_AGREE", "m1-numeric-all-d64-h6x2")
    compared, kinds = agreement(tmp_path, filt)
    print(f"judge vs check: {compared} outputs compared, {kinds}")
    assert compared >= 4 and kinds.get("pass") and kinds.get("fail"), kinds


# ---- rows: a sample of query tokens (docs/tolerance.md "Judging a sample") ----

def _long(lq=20000, w=64):
    """A float32 causal window-w layer (Hq 2, Hkv 1, D 16) and its float64 attention in
    float32, computed band by band (docs/semantics.md: keys q - w < k <= q): an output a
    correct float32 engine could give."""
    q, k, v = inputs(seed=3, hq=2, hkv=1, lq=lq, lk=lq, d=16, dt=np.float32)
    o = np.zeros((1, 2, lq, 16), np.float64)
    lse = np.zeros((1, 2, lq), np.float64)
    for s in range(0, lq, 512):
        e = min(s + 512, lq)
        k0 = max(0, s - w + 1)
        oo, ll = attention(q[:, :, s:e], k[:, :, k0:e], v[:, :, k0:e], causal=True, window=w)
        o[:, :, s:e], lse[:, :, s:e] = oo, ll
    return q, k, v, o.astype(np.float32), lse.astype(np.float32)


def test_a_sample_judges_its_rows_catches_rows_past_2_15_and_says_what_it_may_miss():
    q, k, v, o, lse = _long()
    good = flexcheck.judge(q, k, v, o, lse, causal=True, window=64, rows=64)
    assert good.passed, str(good)
    assert "judged a sample: 64 of 20000 query tokens (every batch entry and head)" in str(good)
    assert "uniform from seed 1; a defect on 1 random token escapes it with chance 0.997" \
        in str(good)
    past = o.copy()  # head 1's rows from 2^14 on shifted by 100 tokens (2^14 is placed)
    past[0, 1, 2**14:] = o[0, 1, 2**14 - 100:o.shape[2] - 100]
    for seed in (1, 7, 12345):
        bad = flexcheck.judge(q, k, v, past, lse, causal=True, window=64, rows=64,
                              rows_seed=seed)
        assert bad.failed, str(bad)
        # failed H1 on the sample's bounds (tighter than every row's may be): judged again
        assert "judged again on every row" in str(bad), str(bad)
        (b, h, row, _), _ = bad.worst
        assert (b, h) == (0, 1) and row >= 2**14, bad.worst  # the whole output's coordinates
    # one token a 64-token sample of seed 1 does not hold: missed there, caught on every row
    miss = next(t for t in range(5001, 20000)
                if flexcheck.judge(q, k, v, _negate(o, t), lse, causal=True, window=64,
                                   rows=64).passed)
    assert flexcheck.judge(q, k, v, _negate(o, miss), lse, causal=True, window=64).failed


def _negate(o, t):
    x = o.copy()
    x[0, :, t] *= -1
    return x


def test_rows_auto_samples_only_past_the_budget():
    q, k, v, o, lse = _long(lq=4096, w=64)
    whole = flexcheck.judge(q, k, v, o, lse, causal=True, window=64, rows="auto")
    assert whole.passed and "judged a sample" not in str(whole)
    part = flexcheck.judge(q, k, v, o, lse, causal=True, window=64, rows="auto",
                           max_work=2 * 1024 * 1024)
    assert part.passed and "judged a sample: " in str(part), str(part)


@pytest.mark.parametrize("kw, says", [
    ({"rows": 0}, "rows = 0: must be a number of query tokens"),
    ({"rows": -3}, "rows = -3: must be a number of query tokens"),
    ({"rows": 2.5}, "rows = 2.5: must be a number of query tokens"),
    ({"rows": "64"}, "rows = '64': must be a number of query tokens"),
    ({"rows": True}, "rows = True: must be a number of query tokens"),
    ({"rows": 65}, "rows = 65: past the problem's 64 query tokens (Lq)"),
    ({"rows": 8, "rows_seed": -1}, "rows_seed = -1: must be an integer"),
    ({"rows": 8, "rows_seed": "1"}, "rows_seed = '1': must be an integer"),
])
def test_bad_rows_raise_value_error_naming_rows(kw, says):
    q, k, v = inputs()
    o, _ = attention(q, k, v)
    with pytest.raises(ValueError) as e:
        flexcheck.judge(q, k, v, o.astype(np.float16), **kw)
    assert says in str(e.value)
