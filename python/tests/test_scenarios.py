"""The three scenarios of an engineer holding a dump of a bad layer, end to end: written with
this package from numpy, filled by `flexcheck fill`, judged by `flexcheck check`, explained by
`flexcheck repro --tested`.

The "engine" below is a test double of a float16 kernel under test: attention in float32 on the
float16 inputs, rounded to float16, with a mask predicate the scenario chooses (the correct one
on most rows, a buggy one on a few). It is the thing judged, never a reference: every expected
value comes from flexcheck's own oracle through `fill`. The bugs are the ones the issue names:
a window one too wide in one head (every row of it) plus a NaN in row 90; a layer that reused the
previous layer's block mask (stale shared metadata); a decode step aligned top-left.

Runs only with FLEXCHECK_BIN set (the make target sets it to the built binary).
"""

import numpy as np

from flexcheck import add_tested, write_case
from _flexcli import flexcheck as run, needs_bin

pytestmark = needs_bin


def inputs(rng, b, hq, hkv, lq, lk, d):
    def f16(*shape):
        return rng.standard_normal(shape).astype(np.float16)
    return f16(b, hq, lq, d), f16(b, hkv, lk, d), f16(b, hkv, lk, d)


def allowed(lq, lk, causal, window, top_left=False):
    """[lq, lk] booleans of docs/semantics.md's mask (bottom-right alignment unless top_left)."""
    i = np.arange(lq)[:, None] + (0 if top_left else lk - lq)
    j = np.arange(lk)[None, :]
    ok = np.ones((lq, lk), bool)
    if causal:
        ok &= j <= i
    if window:
        ok &= np.abs(i - j) < window
    return ok


def engine(q, k, v, masks):
    """float32 attention on float16 inputs, out rounded to float16; masks[h] is [lq, lk]."""
    b, hq, lq, d = q.shape
    rep = hq // k.shape[1]
    out = np.zeros((b, hq, lq, v.shape[3]), np.float32)
    lse = np.full((b, hq, lq), -np.inf, np.float32)
    for bi in range(b):
        for h in range(hq):
            s = (q[bi, h].astype(np.float32) @ k[bi, h // rep].astype(np.float32).T) / np.sqrt(
                np.float32(d))
            s = np.where(masks[h], s, -np.inf)
            m = s.max(axis=1, keepdims=True)
            e = np.exp(s - m)
            l = e.sum(axis=1, keepdims=True)
            out[bi, h] = (e / l) @ v[bi, h // rep].astype(np.float32)
            lse[bi, h] = (m + np.log(l))[:, 0]
    return out.astype(np.float16), lse


def fill(tmp_path, dump):
    filled = str(tmp_path / "filled.h5")
    rc, out, err = run("fill", dump, "--out", filled)
    assert rc == 0, out + err
    return filled


def explained_lines(text):
    return [ln for ln in text.splitlines() if "explained by" in ln or "explained in " in ln]


def test_engine_dump_window_off_by_one_and_a_nan_row(tmp_path):
    rng = np.random.default_rng(12)
    W = 16
    q, k, v = inputs(rng, 1, 2, 1, 128, 128, 32)
    good = allowed(128, 128, True, W)
    wide = allowed(128, 128, True, W + 1)
    # the engine's window is one too wide in head 1 (rows 16 on see a key more), and a NaN in
    # head 0: W + 1 is the cause in head 1, the NaN row is H3's
    out, lse = engine(q, k, v, [good, wide])
    out[0, 0, 90, 3] = np.nan
    dump = str(tmp_path / "dump.h5")
    write_case(dump, "layer07", q, k, v, causal=True, window=W)
    add_tested(dump, "layer07", "engine", out, producer="numpy engine, float16", lse=lse)
    filled = fill(tmp_path, dump)

    rc, text, err = run("check", filled)
    assert rc == 1, text + err
    line = [ln for ln in text.splitlines() if ln.startswith("FAIL") and "tested/engine" in ln]
    assert line and "H3" in line[0] and "(b, h, q, d) = (0, 0, 90, 3)" in line[0], text
    assert "H1" in text and "explained in 1 head by window W+1 (16 -> 17): all " in text, text

    rc, text, err = run("repro", filled, "--case", "layer07", "--tested", "engine")
    assert rc == 1, text + err
    exp = explained_lines(text)
    assert exp and "explained in 1 head by window W+1" in exp[0] and "(0, 1, 16" in exp[0], text
    assert not any("90" in ln.split(":", 1)[-1] for ln in exp), "the NaN row was explained"
    assert "(0, 0, 90)" in text and "H3" in text, text


def test_layout_layer_that_reused_the_previous_layers_mask(tmp_path):
    rng = np.random.default_rng(3)
    dump = str(tmp_path / "layers.h5")
    W = 24
    plan = [dict(causal=True, window=W), dict(causal=True, window=0)]  # sliding, then global
    outs = []
    for li, m in enumerate(plan):
        q, k, v = inputs(rng, 1, 2, 2, 96, 96, 16)
        write_case(dump, f"layer{li:02d}", q, k, v, layout="gemma3", **m)
        # Layer 1 runs with the block mask cached for layer 0 (a cache key missing the window).
        used = plan[0]
        outs.append(engine(q, k, v, [allowed(96, 96, used["causal"], used["window"])] * 2))
    for li, (o, l) in enumerate(outs):
        add_tested(dump, f"layer{li:02d}", "engine", o, producer="engine with a stale cache",
                   lse=l)
    filled = fill(tmp_path, dump)

    rc, text, err = run("check", filled)
    assert rc == 1, text + err
    assert any(ln.startswith("PASS") and "layer00 tested/engine" in ln
               for ln in text.splitlines()), text
    assert any(ln.startswith("FAIL") and "layer01 tested/engine" in ln
               for ln in text.splitlines()), text

    rc, text, err = run("repro", filled, "--case", "layer01", "--tested", "engine")
    assert rc == 1, text + err
    exp = explained_lines(text)
    assert exp and "previous layer" in exp[0], text


def test_decode_step_aligned_top_left(tmp_path):
    rng = np.random.default_rng(5)
    lq, lk = 4, 96
    q, k, v = inputs(rng, 2, 4, 2, lq, lk, 32)
    bad = allowed(lq, lk, True, 0, top_left=True)
    out, lse = engine(q, k, v, [bad] * 4)
    dump = str(tmp_path / "decode.h5")
    write_case(dump, "decode", q, k, v, causal=True)
    add_tested(dump, "decode", "engine", out, producer="engine, top-left decode", lse=lse)
    filled = fill(tmp_path, dump)

    rc, text, err = run("check", filled)
    assert rc == 1, text + err
    rc, text, err = run("repro", filled, "--case", "decode", "--tested", "engine")
    assert rc == 1, text + err
    exp = explained_lines(text)
    assert exp and "top-left" in exp[0], text
    # Every row is wrong (each sees 1..4 keys instead of 93..96), and all are explained.
    assert "32 of 32" in exp[0] or "all 32" in exp[0], text
