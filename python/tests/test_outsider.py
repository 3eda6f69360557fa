"""test_outsider.py - the outside engine of tests/outsider/outsider.py: without a bug it passes
`flexcheck check` on exported cases of every kind (dense, packed, windowed, sinks, soft-cap, a
layout file, a p-round design), so that what `make outsider-eval` measures are the planted bugs
alone; and each planted bug changes a tiny case exactly as hand-computed. The diagnosis's
quality is not asserted here (make outsider-eval measures it)."""
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from _flexcli import run

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "outsider"))
import outsider  # noqa: E402  (tests/outsider is no package)

from flexcheck import fixtures  # noqa: E402


def attn(q, k, v, bug="none", dtype="float32", causal=False, window=0, chunk=0, scale=1.0,
         **kw):
    """outsider.attention on [Lq, D] / [Lk, D] / [Lk, Dv] arrays of one head (B = H = 1);
    (out [Lq, Dv], lse [Lq])."""
    o, l = outsider.attention(np.asarray(q, np.float32)[None, None],
                              np.asarray(k, np.float32)[None, None],
                              np.asarray(v, np.float32)[None, None], dtype=dtype,
                              causal=causal, window=window, chunk=chunk, scale=scale, bug=bug,
                              **kw)
    return o[0, 0], l[0, 0]


# V rows of small integers: every mean of two or three of them is exact in float32.
V3 = np.array([[1.0, 2.0], [3.0, 6.0], [5.0, 10.0]])
Z3 = np.zeros((3, 4))  # q = k = 0: every allowed key scores 0, weights are uniform


# ---- the engine without a bug, on hand-computed cases ----

def test_uniform_weights_and_lse():
    o, l = attn(Z3, Z3, V3)
    np.testing.assert_array_equal(o, np.tile([3.0, 6.0], (3, 1)))
    np.testing.assert_allclose(l, math.log(3), rtol=1e-6)


def test_bottom_right_causal_and_empty_rows():
    # nq = 3 > nk = 2: positions -1, 0, 1; row 0 has no key (0, -inf), row 1 key 0, row 2 both.
    o, l = attn(Z3, Z3[:2], V3[:2], causal=True)
    np.testing.assert_array_equal(o, [[0, 0], [1, 2], [2, 4]])
    assert l[0] == -np.inf
    np.testing.assert_allclose(l[1:], [0.0, math.log(2)], rtol=1e-6)


def test_sink_and_softcap():
    # One key scoring 0 and a sink 0: the sink takes half the weight and has no value.
    o, l = attn(Z3[:1], Z3[:1], V3[:1], sinks=np.zeros(1, np.float32))
    np.testing.assert_allclose(o, [[0.5, 1.0]], rtol=1e-6)
    np.testing.assert_allclose(l, [math.log(2)], rtol=1e-6)
    # An empty row with a sink: output 0, LSE exactly the sink.
    o, l = attn(Z3[:1], Z3[:1], V3[:1], causal=True, cu_seqlens_q=[0, 1],
                cu_seqlens_k=[0, 0], sinks=np.array([1.5], np.float32))
    assert (o == 0).all() and l[0] == np.float32(1.5)
    # One key, score q.k = 60 under a cap 30: LSE = 30 tanh(2).
    q = np.array([[6.0, 0, 0, 0]])
    k = np.array([[10.0, 0, 0, 0]])
    _, l = attn(q, k, V3[:1], softcap=30.0)
    np.testing.assert_allclose(l, [30 * math.tanh(2.0)], rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_output_rounded_to_the_input_type(dtype):
    # random inputs exact in dtype: every output value is a value of dtype, and not every
    # value is a value of the coarser type below it (so the check can fail)
    rng = np.random.default_rng(5)
    q, k, v = (fixtures.round_to(rng.standard_normal((9, 8)), dtype).astype(np.float32)
               for _ in range(3))
    o, _ = attn(q, k, v, dtype=dtype, causal=True, scale=0.35)
    np.testing.assert_array_equal(outsider.rnd(o, dtype), o)
    assert (outsider.rnd(o, "bfloat16") != o).any() or dtype == "bfloat16"


def test_packed_sequences_and_gqa():
    # Two sequences (1 query and 2 keys, 1 query and 1 key), 2 query heads on 1 kv head.
    q = np.zeros((1, 2, 2, 4), np.float32)
    k = np.zeros((1, 1, 3, 4), np.float32)
    v = np.array([[[[1, 2], [3, 6], [5, 10]]]], np.float32)
    o, _ = outsider.attention(q, k, v, dtype="float32", causal=True, window=0, chunk=0,
                              scale=1.0, cu_seqlens_q=[0, 1, 2], cu_seqlens_k=[0, 2, 3])
    for h in range(2):
        np.testing.assert_array_equal(o[0, h], [[2, 4], [5, 10]])


# ---- each planted bug on a case where it must change the output ----

def test_window_plus_one():
    # causal W = 1: each row its own key; W + 1 = 2 adds the key before.
    o, _ = attn(Z3, Z3, V3, causal=True, window=1)
    np.testing.assert_array_equal(o, V3)
    o, _ = attn(Z3, Z3, V3, bug="window+1", causal=True, window=1)
    np.testing.assert_array_equal(o, [[1, 2], [2, 4], [4, 8]])
    # no window: nothing to change
    np.testing.assert_array_equal(attn(Z3, Z3, V3, bug="window+1", causal=True)[0],
                                  attn(Z3, Z3, V3, causal=True)[0])


def test_top_left():
    # one causal query over three keys: bottom-right p_q = 2 sees all three, top-left p_q = 0
    # only key 0
    np.testing.assert_array_equal(attn(Z3[:1], Z3, V3, causal=True)[0], [[3, 6]])
    np.testing.assert_array_equal(attn(Z3[:1], Z3, V3, bug="top-left", causal=True)[0],
                                  [[1, 2]])


def test_scale_one_over_d():
    # D = 4, one key, q.k = 4: LSE = scale * 4, 2 at the case's scale 0.5, 1 at 1/D
    q = np.array([[1.0, 0, 0, 0]])
    k = np.array([[4.0, 0, 0, 0]])
    assert attn(q, k, V3[:1], scale=0.5)[1][0] == 2.0
    assert attn(q, k, V3[:1], bug="scale-1/D", scale=0.5)[1][0] == 1.0


def test_stale_layer():
    # this layer causal without a window, the previous one causal W = 1
    np.testing.assert_array_equal(attn(Z3, Z3, V3, causal=True)[0], [[1, 2], [2, 4], [3, 6]])
    o, _ = attn(Z3, Z3, V3, bug="stale-layer", causal=True, prev=(True, 1, 0))
    np.testing.assert_array_equal(o, V3)
    # layer 0 (no previous layer) keeps its own mask
    np.testing.assert_array_equal(attn(Z3, Z3, V3, bug="stale-layer", causal=True)[0],
                                  [[1, 2], [2, 4], [3, 6]])


def test_stale_layer_in_a_layout_file(tmp_path):
    # Through the file path: layer01 (no window) computed with layer00's W = 1, layer00 its own.
    path = str(tmp_path / "layout.h5")
    q, k, v = (np.zeros((1, 1, 3, 4), np.float32), np.zeros((1, 1, 3, 4), np.float32),
               V3.astype(np.float32)[None, None])
    fixtures.write_case(path, "layer00", q, k, v, causal=True, window=1, layout="mistral",
                        out=v.astype(np.float64), lse=np.zeros((1, 1, 3)))
    fixtures.write_case(path, "layer01", q, k, v, causal=True, window=0, layout="mistral",
                        out=np.array([[[[1, 2], [2, 4], [3, 6]]]], np.float64),
                        lse=np.log([[[1.0, 2.0, 3.0]]]))
    notes = outsider.store_file(path, ["stale-layer"], outsider.LABELS)
    assert [(n["case"], n["changed"]) for n in notes] == [("layer00", False), ("layer01", True)]
    got = fixtures.read_case(path, "layer01").tested[outsider.LABELS["stale-layer"]].out
    np.testing.assert_array_equal(got[0, 0], V3)


@pytest.mark.parametrize("dtype,n", [("bfloat16", 257), ("float16", 2049)])
def test_softmax_lowp(dtype, n):
    # n keys scoring 0: p = 1 each. Summed in the input type the sum stops at 2^8 (bfloat16) or
    # 2^11 (float16): n = 2^k + 1 lies halfway to the next value and rounds to even, 2^k.
    z = np.zeros((1, 4))
    kz = np.zeros((n, 4))
    vz = np.ones((n, 2))
    _, l = attn(z, kz, vz, dtype=dtype)
    np.testing.assert_allclose(l, [math.log(n)], rtol=1e-6)
    _, l = attn(z, kz, vz, bug="softmax-lowp", dtype=dtype)
    np.testing.assert_allclose(l, [math.log(n - 1)], rtol=1e-6)
    # float32: the input type is the engine's own, nothing changes
    assert (attn(z, kz, vz, bug="softmax-lowp")[1] == attn(z, kz, vz)[1]).all()


def test_drop_last_key():
    o, _ = attn(Z3[:2], Z3[:2], V3[:2])
    np.testing.assert_array_equal(o, [[2, 4], [2, 4]])
    o, _ = attn(Z3[:2], Z3[:2], V3[:2], bug="drop-last-key")
    np.testing.assert_array_equal(o, [[1, 2], [1, 2]])
    # packed: each sequence loses its own last key; a one-key sequence is left empty
    q = np.zeros((1, 1, 2, 4), np.float32)
    k = np.zeros((1, 1, 3, 4), np.float32)
    v = V3.astype(np.float32)[None, None]
    o, l = outsider.attention(q, k, v, dtype="float32", causal=False, window=0, chunk=0,
                              scale=1.0, cu_seqlens_q=[0, 1, 2], cu_seqlens_k=[0, 2, 3],
                              bug="drop-last-key")
    np.testing.assert_array_equal(o[0, 0], [[1, 2], [0, 0]])
    assert l[0, 0, 0] == 0.0 and l[0, 0, 1] == -np.inf


def test_masked_row_mean():
    # causal, nq = 3 > nk = 2: row 0 (position -1) has no key
    o, l = attn(Z3, Z3[:2], V3[:2], bug="masked-row-mean", causal=True)
    np.testing.assert_array_equal(o, [[2, 4], [1, 2], [2, 4]])
    assert np.isfinite(l[0]) and l[0] < -1e38
    np.testing.assert_allclose(l[1:], [0.0, math.log(2)], rtol=1e-6)
    # a sink outweighs the fill: the empty row is right again (0, the sink)
    o, l = attn(Z3, Z3[:2], V3[:2], bug="masked-row-mean", causal=True,
                sinks=np.array([0.25], np.float32))
    assert (o[0] == 0).all() and l[0] == np.float32(0.25)


def test_lse_rounded():
    # three keys scoring 0: LSE ln 3 = 1.0986..., in bfloat16 (ulp 2^-7 there) 141 * 2^-7
    o0, l0 = attn(Z3, Z3, V3, dtype="bfloat16")
    o1, l1 = attn(Z3, Z3, V3, bug="lse-bf16", dtype="bfloat16")
    np.testing.assert_array_equal(o1, o0)
    np.testing.assert_allclose(l0, math.log(3), rtol=1e-6)
    np.testing.assert_array_equal(l1, np.full(3, 141 / 128, np.float32))


def test_softcap_before_scale():
    # D = 4, one key, q.k = 4, scale 0.5, cap 2: the LSE is the capped score, 2 tanh(2 / 2) on
    # the scaled score, 0.5 * 2 tanh(4 / 2) with q.k capped first
    q = np.array([[1.0, 0, 0, 0]])
    k = np.array([[4.0, 0, 0, 0]])
    np.testing.assert_allclose(attn(q, k, V3[:1], scale=0.5, softcap=2.0)[1],
                               [2 * math.tanh(1.0)], rtol=1e-6)
    np.testing.assert_allclose(attn(q, k, V3[:1], bug="softcap-before-scale", scale=0.5,
                                    softcap=2.0)[1], [math.tanh(2.0)], rtol=1e-6)


@pytest.mark.parametrize("bug,hkv", [("sink-kv-head", 1), ("sink-prev-head", 2)])
def test_sink_of_another_head(bug, hkv):
    # Two query heads, one key scoring 0 with V = (1, 2), sinks 0 and ln 3: the sink takes
    # 1/2 or 3/4 of the weight. Head 1 reads head 0's sink (the kv head's index 0, or h - 1);
    # head 0 keeps its own under the kv head's index, and reads the last head's at h - 1.
    q = np.zeros((1, 2, 1, 4), np.float32)
    k = np.zeros((1, hkv, 1, 4), np.float32)
    v = np.tile(np.array([1.0, 2.0], np.float32), (1, hkv, 1, 1))
    sinks = np.array([0.0, math.log(3.0)], np.float32)
    kw = dict(dtype="float32", causal=False, window=0, chunk=0, scale=1.0, sinks=sinks)
    o, _ = outsider.attention(q, k, v, **kw)
    np.testing.assert_allclose(o[0, :, 0], [[0.5, 1.0], [0.25, 0.5]], rtol=1e-6)
    o, _ = outsider.attention(q, k, v, bug=bug, **kw)
    want0 = [0.5, 1.0] if bug == "sink-kv-head" else [0.25, 0.5]
    np.testing.assert_allclose(o[0, :, 0], [want0, [0.5, 1.0]], rtol=1e-6)


def test_window_after_plus_one():
    # bidirectional W = 1: each row its own key; -1 <= p_q - p_k < 1 adds the key after it
    np.testing.assert_array_equal(attn(Z3, Z3, V3, window=1)[0], V3)
    o, _ = attn(Z3, Z3, V3, bug="window-after+1", window=1)
    np.testing.assert_array_equal(o, [[2, 4], [4, 8], [5, 10]])
    # causal: the keys after the query are masked anyway
    np.testing.assert_array_equal(attn(Z3, Z3, V3, bug="window-after+1", causal=True,
                                       window=1)[0], V3)


def test_chunk_plus_one():
    # causal chunks of 2 over 3 tokens: {0, 1}, {2}; from p + 1: {0}, {1, 2}
    np.testing.assert_array_equal(attn(Z3, Z3, V3, causal=True, chunk=2)[0],
                                  [[1, 2], [2, 4], [5, 10]])
    np.testing.assert_array_equal(attn(Z3, Z3, V3, bug="chunk+1", causal=True, chunk=2)[0],
                                  [[1, 2], [3, 6], [4, 8]])


def test_packed_leak():
    # Two sequences (1 query and keys 0-1, 1 query and key 2): the second sequence's query
    # also sees key 1, the first sequence's last; the first sequence has nothing before it.
    q = np.zeros((1, 1, 2, 4), np.float32)
    k = np.zeros((1, 1, 3, 4), np.float32)
    v = V3.astype(np.float32)[None, None]
    kw = dict(dtype="float32", causal=False, window=0, chunk=0, scale=1.0,
              cu_seqlens_q=[0, 1, 2], cu_seqlens_k=[0, 2, 3])
    np.testing.assert_array_equal(outsider.attention(q, k, v, **kw)[0][0, 0],
                                  [[2, 4], [5, 10]])
    o, l = outsider.attention(q, k, v, bug="packed-leak", **kw)
    np.testing.assert_array_equal(o[0, 0], [[2, 4], [4, 8]])
    np.testing.assert_allclose(l[0, 0], [math.log(2), math.log(2)], rtol=1e-6)


def test_decode_ahead():
    # one query over three keys, causal W = 2: at p_q = 2 keys 1 and 2, one ahead (p_q = 3)
    # key 2 alone
    np.testing.assert_array_equal(attn(Z3[:1], Z3, V3, causal=True, window=2)[0], [[4, 8]])
    np.testing.assert_array_equal(attn(Z3[:1], Z3, V3, bug="decode-ahead", causal=True,
                                       window=2)[0], [[5, 10]])
    # as many queries as keys: not a decode row, nothing moves
    np.testing.assert_array_equal(attn(Z3, Z3, V3, bug="decode-ahead", causal=True, window=2)[0],
                                  attn(Z3, Z3, V3, causal=True, window=2)[0])


def test_masked_row_nan():
    # causal, nq = 3 > nk = 2: row 0 (position -1) has no key and comes out NaN, LSE too
    o, l = attn(Z3, Z3[:2], V3[:2], bug="masked-row-nan", causal=True)
    assert np.isnan(o[0]).all() and np.isnan(l[0])
    np.testing.assert_array_equal(o[1:], [[1, 2], [2, 4]])
    np.testing.assert_allclose(l[1:], [0.0, math.log(2)], rtol=1e-6)
    # a sink keeps the row's maximum finite: 0 and the sink, as without the bug
    o, l = attn(Z3, Z3[:2], V3[:2], bug="masked-row-nan", causal=True,
                sinks=np.array([0.25], np.float32))
    assert (o[0] == 0).all() and l[0] == np.float32(0.25)


def test_softmax_lowp_scores():
    # one key, q.k = 1 + 2^-8 (scale 1): the LSE is the score; in bfloat16 (ulp 2^-7 at 1) it
    # is a tie that rounds to even, 1. Without the score's rounding (softmax-lowp) the single
    # weight is 1 either way and the LSE stays 1 + 2^-8.
    q = np.array([[1.0, 2.0 ** -8, 0, 0]])
    k = np.array([[1.0, 1.0, 0, 0]])
    for bug in ("none", "softmax-lowp"):
        assert attn(q, k, V3[:1], bug=bug, dtype="bfloat16")[1][0] == np.float32(1 + 2.0 ** -8)
    assert attn(q, k, V3[:1], bug="softmax-lowp-scores", dtype="bfloat16")[1][0] == 1.0
    # float32: the input type is the engine's own, nothing changes
    assert attn(q, k, V3[:1], bug="softmax-lowp-scores")[1][0] == np.float32(1 + 2.0 ** -8)


def test_unknown_bug_refused():
    with pytest.raises(ValueError, match="bug 'window-1'"):
        attn(Z3, Z3, V3, bug="window-1")


# ---- the engine without a bug under flexcheck check, on exported cases ----

# One exported case of each kind (docs/matrix.md): dense with a soft-cap in three dtypes,
# a packed batch with a window, a window-edge triple, sinks with a soft-cap, a p-round design,
# a layout file with sinks on every layer.
EXPORTED = [
    "m1-numeric-all-d64-h6x1-b1-108x256-none-sc50-q64k64-sup",
    "m2-numeric-f16-d64-h6x2-b1-400x749-cw64-q64k64-direct-packed8-ragged",
    "m4-window-edge-f16-d64-h2x1-b1-256x256-cw128-q64k64-direct",
    "m4-window-edge-bf16-d64-h2x1-b1-256x256-cw64-sc50sk-q64k64-direct",
    "m4-p-round-f16-d64-h2x1-b1-256x256-c-q64k64-direct",
    "m6-layout-f16-d64-h2x1-b1-290x540-none-q64k64-suptrim-packed3-gpt-oss-20b",
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from _flexcli import BIN
    if not BIN:
        pytest.skip("FLEXCHECK_BIN is not set (make test sets it)")
    d = tmp_path_factory.mktemp("outsider")
    for cid in EXPORTED:
        rc, _, err = run(os.path.abspath(BIN), "export", "--quick", "--out", d, "--filter", cid)
        assert rc == 0, err
    files = sorted(str(p) for p in d.glob("*.h5"))
    assert [os.path.basename(f)[:-3] for f in files] == sorted(EXPORTED)
    return files


def test_engine_passes_check(exported, flexbin, tmp_path):
    for f in exported:
        outsider.store_file(f, ["none"], outsider.LABELS)
    rc, out, err = run(flexbin, "check", "--report", tmp_path / "r", *exported)
    assert rc == 0, out + err
    lines = [ln for ln in out.splitlines() if " tested/outsider-none " in ln]
    # every case of every file judged, and every one passed (none outside the contract)
    ncases = sum(len(fixtures.list_cases(f)) for f in exported)
    assert len(lines) == ncases >= 14
    assert all(ln.startswith("PASS ") for ln in lines), "\n".join(lines)
    recs, problems = outsider.run_check(flexbin, exported, 2)
    assert problems == []
    mine = [r for r in recs if r.label == "outsider-none"]
    assert len(mine) == ncases and all(r.verdict == "PASS" for r in mine)


def test_planted_bug_fails_and_is_parsed(exported, flexbin):
    # window+1 on the window-edge triple: every case has a window that allows a key more, so
    # every output fails; the records carry check's diagnosis (its content is not judged here).
    f = next(x for x in exported if "window-edge-f16" in x)
    notes = outsider.store_file(f, ["window+1"], outsider.LABELS)
    assert len(notes) == 3 and all(n["changed"] for n in notes)
    recs, problems = outsider.run_check(flexbin, [f], 1)
    assert problems == []
    mine = [r for r in recs if r.label == outsider.LABELS["window+1"]]
    assert len(mine) == 3
    for r in mine:
        assert r.verdict == "FAIL" and r.first_gate == "H1"
        assert r.diagnosis == "run" and r.failing_rows > 0 and r.examined_rows > 0
        assert all(n <= r.failing_rows for _, n, _ in r.claims)


def test_cli(exported, flexbin, tmp_path):
    # the command line end to end on one file: stores, judges, writes the table
    f = next(x for x in exported if "p-round" in x)
    summary = tmp_path / "s.md"
    p = subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "tests", "outsider",
                                                     "outsider.py"), os.path.dirname(f),
                        "--bug", "top-left", "--label", "tl", "--check", flexbin,
                        "--summary", str(summary)],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    assert p.returncode == 0, p.stdout + p.stderr
    text = summary.read_text()
    assert "### top-left (tested/tl)" in text
    # every file of the folder got the label (its cases judged), and the table counts them
    ncases = sum(len(fixtures.list_cases(x)) for x in exported)
    row = next(ln for ln in text.splitlines() if ln.startswith("| ") and ln[2].isdigit())
    assert row.split("|")[1].strip() == str(ncases)
