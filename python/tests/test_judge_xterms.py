"""flexcheck.judge with explicit terms (issue 37 item 4; docs/semantics.md section 8): mask= (a
dense boolean mask), mask_mod= (numpy or torch), score_mod= (additive) and document_ids= (packed
rows held dense), each judged, each refusal one line saying what to pass instead.

Python is never a second oracle here. Every expected output is flexcheck's own float64 oracle,
`flexcheck fill` of family cases, stitched: a prefix-LM's rows before the prefix end P attend to
the P prefix keys (a bidirectional problem of P queries and keys), its later rows causally (the
causal problem's rows); ALiBi's bias slope_h * (kv_idx - q_idx) is, along a row, the key-only
slope_h * kv_idx (the -slope_h * q_idx shifts the row's LSE alone), which one more head
dimension carries exactly: q_e = slope_h, k_e = kv_idx * sqrt(D) at the scale 1/sqrt(D). With
torch, flex_attention in float64 with the same mask_mod / score_mod is a second, independent
expectation (skipped without torch). Needs FLEXCHECK_BIN (fill) and the shared library.
"""
import math

import numpy as np
import pytest

import flexcheck
from flexcheck import read_case, write_case
from flexcheck import _xterms
from flexcheck._xterms import _explicit_terms
from _flexcli import run
from test_judge import WHY, inputs

pytestmark = pytest.mark.skipif(WHY is not None, reason=f"{WHY}")

L, P, HQ = 64, 20, 8  # inputs(): B 1, Hq 8, Hkv 2, Lq = Lk = 64, D 32, float16
SLOPES = np.array([2.0 ** -(h + 1) for h in range(HQ)])  # ALiBi's for 8 heads, exact in fp16


def filled(flexbin, tmp_path, cases):
    """{name: (out, lse)} of `flexcheck fill` (flexcheck's float64 oracle) for cases
    {name: (q, k, v, write_case keywords)}."""
    path = str(tmp_path / f"fill{len(list(tmp_path.iterdir()))}.h5")
    for name, (q, k, v, kw) in cases.items():
        write_case(path, name, q, k, v, **kw)
    rc, out, err = run(flexbin, "fill", path, "--in-place")
    assert rc == 0, out + err
    return {name: (read_case(path, name).out, read_case(path, name).lse) for name in cases}


def prefix_lm(flexbin, tmp_path, q, k, v, p):
    """The oracle's (out, lse) of the prefix-LM mask with prefix p: kv_idx < p or kv_idx <=
    q_idx."""
    got = filled(flexbin, tmp_path, {"pre": (q[:, :, :p], k[:, :, :p], v[:, :, :p], {}),
                                     "causal": (q, k, v, {"causal": True})})
    return tuple(np.concatenate([got["pre"][i], got["causal"][i][:, :, p:]], axis=2)
                 for i in (0, 1))


def prefix_mask(p, lq=L, lk=L):
    i, j = np.arange(lq)[:, None], np.arange(lk)[None, :]
    return (j < p) | (j <= i)


def prefix_mod(p):
    return lambda b, h, q_idx, kv_idx: (kv_idx < p) | (kv_idx <= q_idx)


def alibi(flexbin, tmp_path, q, k, v, slopes, **family):
    """The oracle's (out, lse) with ALiBi's bias slopes[h] * (kv_idx - q_idx)."""
    b, hq, lq, d = q.shape
    lk = k.shape[2]
    qe = np.broadcast_to(slopes[None, :, None, None], (b, hq, lq, 1))
    ke = np.broadcast_to((np.arange(lk) * math.sqrt(d))[None, None, :, None],
                         (b, k.shape[1], lk, 1))
    qa, ka = (np.concatenate([x, e.astype(x.dtype)], axis=3) for x, e in ((q, qe), (k, ke)))
    assert (qa[..., -1] == qe[..., 0]).all() and (ka[..., -1] == ke[..., 0]).all()  # exact
    out, lse = filled(flexbin, tmp_path, {"a": (qa, ka, v, dict(scale=d ** -0.5, **family))})["a"]
    return out, lse - slopes[None, :, None] * np.arange(lq)[None, None, :]


def alibi_mod(slopes):
    return lambda score, b, h, q_idx, kv_idx: score + slopes[h] * (kv_idx - q_idx)


def same_verdict(a, b):
    """Two verdicts that judged the same thing: outcome, gate states, every metric (NaN where
    neither measured it) and the worst element, all exactly."""
    assert a.outcome == b.outcome, (str(a), str(b))
    assert {g: s[0] for g, s in a.gates.items()} == {g: s[0] for g, s in b.gates.items()}
    for m in flexcheck.judging.METRICS:
        x, y = a.metrics[m], b.metrics[m]
        assert x == y or (math.isnan(x) and math.isnan(y)), (m, x, y)
    assert a.worst == b.worst, (a.worst, b.worst)


def f16(x):
    return x.astype(np.float16)


# ---- mask=: a prefix-LM, which no family expresses ----

def test_a_prefix_lm_mask_passes_the_right_output_and_fails_one_key_off(flexbin, tmp_path):
    q, k, v = inputs(0)
    out, lse = prefix_lm(flexbin, tmp_path, q, k, v, P)
    off, _ = prefix_lm(flexbin, tmp_path, q, k, v, P + 1)  # the prefix one key too long
    for m in (prefix_mask(P), prefix_mask(P)[None, None].astype(np.uint8),
              np.broadcast_to(prefix_mask(P), (1, HQ, L, L))):
        vd = flexcheck.judge(q, k, v, f16(out), lse.astype(np.float32), mask=m)
        assert vd.passed and vd.gates["H5"][0] == "pass", str(vd)
        bad = flexcheck.judge(q, k, v, f16(off), mask=m)
        # diagnosed under the mask: a prefix one key too long is no hypothesis of the table,
        # so nothing is named (the mask shifted one key back fits the failing rows, but the
        # passing rows refute it), and the rows are said to be unexplained
        assert bad.failed and not bad.findings, str(bad)
        assert "not explained: " in bad.diagnosis and "explicit mask" in bad.diagnosis, str(bad)
    # an engine that ignores the mask (every key of the sequence): named, every failing row
    full, _ = filled(flexbin, tmp_path, {"full": (q, k, v, {})})["full"]
    ign = flexcheck.judge(q, k, v, f16(full), mask=prefix_mask(P))
    assert ign.failed and len(ign.findings) == 1, str(ign)
    assert ign.findings[0][0].startswith("explicit mask ignored"), str(ign)
    # uint8: nonzero allows, also where it is ANDed with another term (one document here)
    two = prefix_mask(P).astype(np.uint8) * 2
    assert flexcheck.judge(q, k, v, f16(out), mask=two).passed
    assert flexcheck.judge(q, k, v, f16(out), mask=two, document_ids=np.zeros(L, int)).passed
    # neither family value judges it: causal drops the prefix's later keys, none adds the rest
    for causal in (False, True):
        assert flexcheck.judge(q, k, v, f16(out), causal=causal).failed


def test_a_numpy_mask_mod_judges_as_its_dense_mask(flexbin, tmp_path):
    q, k, v = inputs(1)
    out, lse = prefix_lm(flexbin, tmp_path, q, k, v, P)
    off, _ = prefix_lm(flexbin, tmp_path, q, k, v, P - 1)
    for o in (out, off):
        same_verdict(flexcheck.judge(q, k, v, f16(o), mask_mod=prefix_mod(P)),
                     flexcheck.judge(q, k, v, f16(o), mask=prefix_mask(P)))
    assert flexcheck.judge(q, k, v, f16(out), lse, mask_mod=prefix_mod(P)).passed
    assert flexcheck.assert_attention_close(q, k, v, out=f16(out), mask_mod=prefix_mod(P)).passed
    with pytest.raises(AssertionError):
        flexcheck.assert_attention_close(q, k, v, out=f16(off), mask_mod=prefix_mod(P))


def test_a_mask_mod_that_varies_by_head_is_judged_head_by_head(flexbin, tmp_path, monkeypatch):
    """Heads 4..7 let rows from 40 on see every key, heads 0..3 stay a prefix-LM: evaluated three
    query rows at a time, the mask turns head-deep at row 40, the rows before kept."""
    monkeypatch.setattr(_xterms, "_CHUNK", 3 * HQ * L)
    q, k, v = inputs(12)
    pre, pre_lse = prefix_lm(flexbin, tmp_path, q, k, v, P)
    full, full_lse = filled(flexbin, tmp_path, {"full": (q, k, v, {})})["full"]
    late = (np.arange(HQ) >= 4)[None, :, None, None] & (np.arange(L) >= 40)[None, None, :, None]
    out = np.where(late, full, pre)
    lse = np.where(late[..., 0], full_lse, pre_lse)

    def mod(b, h, i, j):
        return (j < P) | (j <= i) | ((h >= 4) & (i >= 40))

    vd = flexcheck.judge(q, k, v, f16(out), lse.astype(np.float32), mask_mod=mod)
    assert vd.passed and vd.gates["H5"][0] == "pass", str(vd)
    assert flexcheck.judge(q, k, v, f16(pre), mask_mod=mod).failed
    t = _xterms._explicit_terms(mask_mod=mod, b=1, h=HQ, lq=L, lk=L, packed=False, dev=None,
                                max_memory=2**30)
    assert (t.bm, t.hm) == (1, HQ)


@pytest.mark.parametrize("torch_mods", [False, True])
def test_rows_evaluated_a_few_at_a_time_give_the_same_verdict(flexbin, tmp_path, monkeypatch,
                                                              torch_mods):
    """The grid evaluated in blocks of 3, 5 or 7 query rows (the last one short): the same
    verdict as in one block, for a mask_mod, a score_mod and document_ids together."""
    q, k, v = inputs(13, d=16)
    out, _ = alibi(flexbin, tmp_path, q, k, v, SLOPES, causal=True)
    args = (q, k, v, f16(out))
    mod, smod = prefix_mod(P), alibi_mod(SLOPES)
    if torch_mods:
        torch = pytest.importorskip("torch")
        args = tuple(torch.from_numpy(x) for x in args)
        smod = alibi_mod(torch.from_numpy(SLOPES))
    kw = dict(causal=True, mask_mod=mod, score_mod=smod,
              document_ids=np.repeat([0, 1, 2], [30, 20, 14]))
    whole = flexcheck.judge(*args, **kw)
    assert whole.failed  # the documents cut rows from what the causal oracle saw
    for rows in (3, 5, 7):
        monkeypatch.setattr(_xterms, "_CHUNK", rows * HQ * L)
        same_verdict(flexcheck.judge(*args, **kw), whole)
    kw.pop("document_ids")
    monkeypatch.setattr(_xterms, "_CHUNK", 5 * HQ * L)
    assert flexcheck.judge(*args, **dict(kw, mask_mod=lambda b, h, i, j: j >= 0)).passed


# ---- an explicit term equal to a family: the family's verdict, to the bit ----

@pytest.mark.parametrize("window", [0, 16])
def test_an_explicit_mask_equal_to_a_family_gives_the_familys_verdict(flexbin, tmp_path,
                                                                       window):
    q, k, v = inputs(2)
    got = filled(flexbin, tmp_path, {
        "right": (q, k, v, dict(causal=True, window=window)),
        "wrong": (q, k, v, dict(causal=True, window=window + 1 if window else L // 2)),
        "nocausal": (q, k, v, {})})
    fam = dict(causal=True, window=window)
    i, j = np.arange(L)[:, None], np.arange(L)[None, :]
    allowed = (j <= i) & ((np.abs(i - j) < window) if window else True)

    def mod(b, h, qi, kj):
        return (kj <= qi) & ((abs(qi - kj) < window) if window else True)

    def neg(s, b, h, qi, kj):  # the pre-mask_mod idiom: -inf masks the pair (create_mask's rule)
        return np.where(mod(b, h, qi, kj), s, -np.inf)

    for name in ("right", "wrong", "nocausal"):
        o, lse = got[name]
        o, lse = f16(o), lse.astype(np.float32)
        family = flexcheck.judge(q, k, v, o, lse, **fam)
        assert family.passed == (name == "right"), (name, str(family))
        for xt in (dict(mask=allowed), dict(mask_mod=mod), dict(score_mod=neg),
                   dict(mask=allowed, **fam), dict(mask_mod=mod, **fam)):
            same_verdict(flexcheck.judge(q, k, v, o, lse, **xt), family)


# ---- score_mod=: ALiBi, and what is not additive ----

def test_alibi_as_a_score_mod_passes_and_its_sign_flipped_fails(flexbin, tmp_path):
    q, k, v = inputs(3, d=16)  # sqrt(D) = 4: the extra dimension's k_e = 4 kv_idx is exact
    out, lse = alibi(flexbin, tmp_path, q, k, v, SLOPES, causal=True)
    flipped, _ = alibi(flexbin, tmp_path, q, k, v, -SLOPES, causal=True)
    vd = flexcheck.judge(q, k, v, f16(out), lse.astype(np.float32), causal=True,
                         score_mod=alibi_mod(SLOPES))
    assert vd.passed and vd.gates["H5"][0] == "pass", str(vd)
    assert flexcheck.judge(q, k, v, f16(flipped), causal=True,
                           score_mod=alibi_mod(SLOPES)).failed
    assert flexcheck.judge(q, k, v, f16(out), causal=True).failed  # the bias matters here
    # with a mask_mod as well: ALiBi over the prefix-LM, stitched as prefix_lm stitches
    pre = alibi(flexbin, tmp_path, q[:, :, :P], k[:, :, :P], v[:, :, :P], SLOPES)
    out, lse = (np.concatenate([pre[i], x[:, :, P:]], axis=2) for i, x in enumerate((out, lse)))
    for m in (dict(mask_mod=prefix_mod(P)), dict(mask=prefix_mask(P))):
        vd = flexcheck.judge(q, k, v, f16(out), lse.astype(np.float32),
                             score_mod=alibi_mod(SLOPES), **m)
        assert vd.passed and vd.gates["H5"][0] == "pass", str(vd)
        assert flexcheck.judge(q, k, v, f16(out), score_mod=alibi_mod(-SLOPES), **m).failed


@pytest.mark.parametrize("mod, witness, hint", [
    (lambda s, b, h, i, j: 30.0 * np.tanh(s / 30.0), "(b, h, q_idx, kv_idx) = (0, 0, 0, 0) "
     "score_mod(1.0) = ", "pass a tanh soft-cap as softcap="),
    (lambda s, b, h, i, j: s * 1.001 + 0.5, "(0, 0, 0, 0) score_mod(1.0) = ", "only score + bias"),
    (lambda s, b, h, i, j: np.where((h == 3) & (i == 9) & (j == 2), 2 * s, s + 0.25),
     "(b, h, q_idx, kv_idx) = (0, 3, 9, 2) score_mod(1.0) = 2.0 but score_mod(0) = 0.0",
     "only score + bias"),
    (lambda s, b, h, i, j: np.where((i == 5) & (j == 4) & (s > 7), -np.inf, s),
     "(0, 0, 5, 4) score_mod(7.25) = -inf but score_mod(0) = 0.0", "a mask as mask_mod="),
    (lambda s, b, h, i, j: s + np.where((i == 6) & (j == 6), np.nan, 0.0),
     "score_mod(0) is nan at (b, h, q_idx, kv_idx) = (0, 0, 6, 6)", "mask the pair"),
])
def test_a_score_mod_that_is_not_additive_is_refused_with_a_witness(mod, witness, hint):
    q, k, v = inputs(4)
    with pytest.raises(ValueError) as e:
        flexcheck.judge(q, k, v, np.zeros((1, HQ, L, 32), np.float16), causal=True,
                        score_mod=mod)
    msg = str(e.value)
    assert witness in msg and hint in msg and "\n" not in msg, msg


def test_a_score_mods_nan_on_a_masked_pair_is_never_read(flexbin, tmp_path):
    """FlexAttention applies score_mod, then the mask: the masked pair's score does not count."""
    q, k, v = inputs(5)
    out, _ = prefix_lm(flexbin, tmp_path, q, k, v, P)
    nan_after = lambda s, b, h, i, j: s + np.where((j >= P) & (j > i), np.nan, 0.0)  # noqa: E731
    assert flexcheck.judge(q, k, v, f16(out), mask_mod=prefix_mod(P),
                           score_mod=nan_after).passed


# ---- document_ids=: a packed batch held dense ----

@pytest.mark.parametrize("causal", [True, False])
def test_document_ids_judge_as_the_packed_batch_does(flexbin, tmp_path, causal):
    rng = np.random.default_rng(6)
    cu = np.array([0, 5, 12, 30, 41], np.int32)
    t = int(cu[-1])
    q, k, v = (rng.standard_normal((t, h, 16)).astype(np.float16) for h in (4, 2, 2))
    ids = np.repeat(np.arange(len(cu) - 1), np.diff(cu))
    dense = [x.transpose(1, 0, 2)[None] for x in (q, k, v)]  # [1, H, T, D]
    got = filled(flexbin, tmp_path, {
        "packed": (q, k, v, dict(causal=causal, cu_seqlens_q=cu, cu_seqlens_k=cu)),
        "unpacked": (*dense, dict(causal=causal))})
    right = got["packed"][0][0].transpose(1, 0, 2)  # the fixture's [1, Hq, T, Dv] -> [T, Hq, Dv]
    wrong = got["unpacked"][0][0].transpose(1, 0, 2)
    for o in (right, wrong):
        packed = flexcheck.judge(q, k, v, f16(o), causal=causal, cu_seqlens_q=cu,
                                 cu_seqlens_k=cu)
        assert packed.passed == (o is right), str(packed)
        # a mask on the packed token axes: pairs of two sequences stay refused whatever it says
        same_verdict(flexcheck.judge(q, k, v, f16(o), causal=causal, cu_seqlens_q=cu,
                                     cu_seqlens_k=cu, mask=np.ones((t, t), bool)), packed)
        for doc in (ids, ids[None], (ids, ids), ids.astype(np.uint8)):
            same_verdict(flexcheck.judge(*dense, f16(o.transpose(1, 0, 2)[None]), causal=causal,
                                         document_ids=doc), packed)


def test_document_ids_per_batch_entry_judge_each_entry_by_its_own_documents(flexbin, tmp_path):
    """[B, L] ids, another split in each batch entry: the mask is B deep (Bm = B), each entry's
    expected rows those of its own packed batch."""
    q, k, v = inputs(14, b=2, lq=48, lk=48, d=16)
    cus = (np.array([0, 10, 48], np.int32), np.array([0, 7, 30, 41, 48], np.int32))
    ids = np.stack([np.repeat(np.arange(len(cu) - 1), np.diff(cu)) for cu in cus])
    packed = [[x[e].transpose(1, 0, 2) for x in (q, k, v)] for e in range(2)]  # [T, H, D]
    got = filled(flexbin, tmp_path, {f"e{e}": (*packed[e], dict(causal=True, cu_seqlens_q=cu,
                                                                 cu_seqlens_k=cu))
                                     for e, cu in enumerate(cus)})
    out = np.concatenate([got["e0"][0], got["e1"][0]])  # each [1, Hq, T, Dv]
    assert flexcheck.judge(q, k, v, f16(out), causal=True, document_ids=ids).passed
    swapped = flexcheck.judge(q, k, v, f16(out), causal=True, document_ids=ids[::-1])
    assert swapped.failed, str(swapped)
    t = _explicit_terms(document_ids=ids, b=2, h=HQ, lq=48, lk=48, packed=False, dev=None,
                        max_memory=2**30)
    assert (t.bm, t.hm) == (2, 1)


# ---- what is refused, and how it says what to pass ----

def _mm(b, h, i, j):
    return j <= i


@pytest.mark.parametrize("kw, says", [
    (dict(mask=np.ones((L, L - 1), bool)), "mask: shape [64, 63]: must be [Lq, Lk] = [64, 64] "
                                           "or [B or 1, Hq or 1, Lq, Lk]"),
    (dict(mask=np.ones((1, 3, L, L), bool)), "mask: shape [1, 3, 64, 64]"),
    (dict(mask=np.zeros((L, L), np.float32)), "mask: dtype float32: must be boolean (numpy bool "
                                              "or uint8, torch bool; True = the pair may attend)"
                                              ": an additive float mask (0 / -inf) is a bias"),
    (dict(mask=np.ones((L, L), np.int64)), "mask: dtype int64: must be boolean"),
    (dict(mask=np.ones((L, L), bool), mask_mod=_mm), "mask and mask_mod: give one"),
    (dict(mask_mod=lambda b, h, i, j: j - i), "mask_mod: returned int64 values, not booleans "
                                              "(called with numpy int64 index arrays"),
    (dict(mask_mod=lambda b, h, i, j: 1 / 0), "mask_mod: raised ZeroDivisionError: division by "
                                              "zero (called with numpy int64 index arrays"),
    (dict(mask_mod=lambda b, h, i, j: j < i if i > 3 else True), "mask_mod: raised ValueError: "
                                                                "The truth value of an array"),
    (dict(mask_mod=lambda b, h, i: i > 0), "mask_mod: raised TypeError"),
    (dict(mask_mod=lambda b, h, i, j: np.ones((2, 3), bool)), "mask_mod: returned shape [2, 3] "
                                                              "for the block [B, H, rows, Lk]"),
    (dict(mask_mod="causal"), "mask_mod = 'causal': must be a callable (b, h, q_idx, kv_idx) "
                              "-> bool"),
    (dict(score_mod=lambda s, b, h, i, j: j > i), "score_mod: returned bool values, not scores"),
    (dict(score_mod=lambda s, b, h, i, j: s + np.where(j > i, -1e9, 0.0)),  # HF's finfo.min idiom
     "explicit bias at (b, h, q, k) = (0, 0, 0, 1) is -1e+09: must be finite with |bias| <= "
     "1e+06 (mask a key out with the explicit mask, not with a bias)"),
    (dict(document_ids=np.zeros(L, np.float32)), "document_ids: dtype float32: document ids "
                                                 "must be integers"),
    (dict(document_ids=np.zeros(L - 1, int)), "document_ids: shape [63]: must be [L] = [64] or "
                                              "[B or 1, L]"),
    (dict(document_ids=(np.zeros(L, int), np.zeros(L + 1, int))),
     "document_ids[1] (keys): shape [65]: must be [Lk] = [64]"),
])
def test_what_it_cannot_read_is_refused_in_one_line_saying_what_to_pass(kw, says):
    q, k, v = inputs(7)
    with pytest.raises(ValueError) as e:
        flexcheck.judge(q, k, v, np.zeros((1, HQ, L, 32), np.float16), **kw)
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_document_ids_and_cu_seqlens_together_are_refused():
    cu = np.array([0, 30, 64], np.int32)
    q, k, v = (x[0].transpose(1, 0, 2) for x in inputs(8))
    with pytest.raises(ValueError) as e:
        flexcheck.judge(q, k, v, np.zeros((L, HQ, 32), np.float16), cu_seqlens_q=cu,
                        cu_seqlens_k=cu, document_ids=np.zeros(L, int))
    assert "document_ids with cu_seqlens: give one form of a packed batch" in str(e.value)


# ---- memory: Bm and Hm as small as the values allow; a grid past the budget refused ----

@pytest.mark.parametrize("mod, bh", [
    (lambda b, h, i, j: j <= i, (1, 1)),
    (lambda b, h, i, j: (j <= i) | (h * 0 > 0) | (b < 0), (1, 1)),  # uses b, h: slices equal
    (lambda b, h, i, j: (j <= i) | (h == 3), (1, 4)),
    (lambda b, h, i, j: (j <= i) | (b == 1), (2, 1)),
    (lambda b, h, i, j: (j <= i) | ((h == 3) & (b == 1)), (2, 4)),
])
def test_the_mask_is_held_only_as_deep_as_its_values_vary(mod, bh):
    t = _explicit_terms(mask_mod=mod, b=2, h=4, lq=40, lk=24, packed=False, dev=None,
                        max_memory=2**30)
    assert (t.bm, t.hm) == bh and t.mask.shape == (*bh, 40, 24)
    b, h, i, j = np.ix_(range(2), range(4), range(40), range(24))
    np.testing.assert_array_equal(np.broadcast_to(t.mask, (2, 4, 40, 24)),
                                  np.broadcast_to(mod(b, h, i, j), (2, 4, 40, 24)))


def test_a_32k_grid_past_the_budget_is_refused_before_the_mask_mod_runs():
    n = 32768
    q, k, v = (np.zeros((1, 1, n, 8), np.float16) for _ in range(3))
    calls = []

    def mod(b, h, i, j):
        calls.append(i.shape)
        return j <= i

    with pytest.raises(ValueError) as e:
        flexcheck.judge(q, k, v, q, mask_mod=mod, max_memory=2**29)
    msg = str(e.value)
    assert msg.startswith("the mask [1, 1, 32768, 32768] (bool) takes 1 GiB, ") and \
        msg.endswith("in Python before the library sees it: over the memory budget max_memory "
                     "= 0.5 GiB (536870912 bytes): raise max_memory to judge it"), msg
    assert calls == []


def test_a_mask_that_varies_by_head_is_refused_once_its_depth_passes_the_budget():
    calls = []

    def mod(b, h, i, j):
        calls.append(1)
        return (j <= i) | (h == 5)

    q, k, v = (np.zeros((1, h, 2048, 8), np.float16) for h in (8, 1, 1))
    with pytest.raises(ValueError) as e:
        flexcheck.judge(q, k, v, q, mask_mod=mod, max_memory=96 * 2**20)
    assert "the mask: it varies with the head, so [1, 8, 2048, 2048] (bool) takes 0.0312 GiB" \
        in str(e.value) and len(calls) == 1, str(e.value)


def test_the_library_counts_a_dense_mask_in_its_budget():
    q, k, v = (np.zeros((1, 1, 8192, 8), np.float16) for _ in range(3))
    with pytest.raises(ValueError) as e:
        flexcheck.judge(q, k, v, q, mask=np.ones((8192, 8192), bool), max_memory=2**23)
    assert "the explicit mask [1, 1, 8192, 8192]" in str(e.value) and "raise max_memory" in \
        str(e.value), str(e.value)


# ---- torch: create_mask's evaluation, and flex_attention itself as the expectation ----

def test_a_torch_mask_mod_judges_as_the_numpy_one(flexbin, tmp_path):
    torch = pytest.importorskip("torch")
    q, k, v = inputs(9)
    out, lse = prefix_lm(flexbin, tmp_path, q, k, v, P)
    off, _ = prefix_lm(flexbin, tmp_path, q, k, v, P + 1)
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    for o in (out, off):
        numpy_vd = flexcheck.judge(q, k, v, f16(o), mask_mod=prefix_mod(P))
        assert numpy_vd.passed == (o is out), str(numpy_vd)
        to = torch.from_numpy(f16(o))
        same_verdict(flexcheck.judge(tq, tk, tv, to, mask_mod=prefix_mod(P)), numpy_vd)
        same_verdict(flexcheck.judge(tq, tk, tv, to, mask=torch.from_numpy(prefix_mask(P))),
                     numpy_vd)
    doc = torch.tensor([0] * 20 + [1] * 30 + [2] * 14)
    same_verdict(flexcheck.judge(tq, tk, tv, torch.from_numpy(f16(out)), causal=True,
                                 mask_mod=lambda b, h, i, j: doc[i] == doc[j]),
                 flexcheck.judge(q, k, v, f16(out), causal=True, document_ids=doc.numpy()))


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_attention_in_float64_with_the_same_mods_passes_and_a_flipped_sign_fails():
    torch = pytest.importorskip("torch")
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    q, k, v = (torch.from_numpy(x) for x in inputs(10))
    slopes = torch.from_numpy(SLOPES)

    def run_flex(sign):
        bm = create_block_mask(prefix_mod(P), None, None, L, L, device="cpu")
        o = flex_attention(q.double(), k.double(), v.double(), block_mask=bm, enable_gqa=True,
                           score_mod=lambda s, b, h, i, j: s + sign * slopes[h] * (j - i))
        return o.to(torch.float16)

    vd = flexcheck.judge(q, k, v, run_flex(1), mask_mod=prefix_mod(P),
                         score_mod=lambda s, b, h, i, j: s + slopes[h] * (j - i))
    assert vd.passed, str(vd)
    assert flexcheck.judge(q, k, v, run_flex(-1), mask_mod=prefix_mod(P),
                           score_mod=lambda s, b, h, i, j: s + slopes[h] * (j - i)).failed


@pytest.mark.parametrize("mod, bh", [
    (lambda b, h, i, j: j <= i, (1, 1)),  # vmap hands this back expanded over b and h
    (lambda b, h, i, j: (j <= i) | (h * 0 > 0) | (b < 0), (1, 1)),  # uses b, h: slices equal
    (lambda b, h, i, j: (j <= i) | (h == 3), (1, 4)),
    (lambda b, h, i, j: (j <= i) | ((h == 3) & (b == 1)), (2, 4)),
])
def test_a_torch_mask_is_held_only_as_deep_as_its_values_vary(mod, bh):
    torch = pytest.importorskip("torch")
    t = _explicit_terms(mask_mod=mod, b=2, h=4, lq=40, lk=24, packed=False,
                        dev=torch.device("cpu"), max_memory=2**30)
    assert (t.bm, t.hm) == bh
    b, h, i, j = np.ix_(range(2), range(4), range(40), range(24))
    np.testing.assert_array_equal(np.broadcast_to(t.mask, (2, 4, 40, 24)),
                                  np.broadcast_to(mod(b, h, i, j), (2, 4, 40, 24)))


def test_a_torch_mod_is_refused_as_vmap_refuses_it():
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(x) for x in inputs(11))
    out = torch.zeros(1, HQ, L, 32, dtype=torch.float16)
    with pytest.raises(ValueError) as e:
        flexcheck.judge(q, k, v, out, mask_mod=lambda b, h, i, j: (j <= i) if i > 3 else True)
    assert "mask_mod: raised RuntimeError: vmap: " in str(e.value) and "evaluated as torch's " \
        "create_mask does: torch.vmap over b, h, q_idx, kv_idx" in str(e.value), str(e.value)
    assert str(e.value).endswith("; or pass the mask it means as mask=, a boolean [Lq, Lk] or "
                                 "[B, Hq, Lq, Lk] array or tensor (True = the pair may attend)")
    with pytest.raises(ValueError) as e:
        flexcheck.judge(q, k, v, out, score_mod=lambda s, b, h, i, j: 20 * torch.tanh(s / 20))
    assert "score_mod is not additive" in str(e.value) and "softcap=" in str(e.value)


def test_a_block_masks_mask_mod_that_cannot_be_evaluated_says_what_to_pass_instead():
    torch = pytest.importorskip("torch")
    fa = pytest.importorskip("torch.nn.attention.flex_attention")
    q, k, v = (torch.from_numpy(x) for x in inputs(11))
    out = torch.zeros(1, HQ, L, 32, dtype=torch.float16)
    bm = fa.create_block_mask(lambda b, h, i, j: j <= i, 1, 1, L, L, "cpu", BLOCK_SIZE=16)
    bm.mask_mod = lambda b, h, i, j: (j <= i) if i > 3 else True  # data-dependent: vmap refuses
    with pytest.raises(ValueError) as e:
        flexcheck.judge(q, k, v, out, block_mask=bm)
    assert "block_mask's mask_mod: raised RuntimeError: vmap: " in str(e.value), str(e.value)
    assert str(e.value).endswith(
        "; or pass the mask it means as mask= and the block mask's lists as a mapping without a "
        "mask_mod (kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices, BLOCK_SIZE)"
    ), str(e.value)
    # what it says to pass is taken: the lists as a mapping, the mask as mask=
    lists = {f: getattr(bm, f).numpy() for f in ("kv_num_blocks", "kv_indices",
                                                  "full_kv_num_blocks", "full_kv_indices")}
    lists["BLOCK_SIZE"] = 16
    causal = np.tril(np.ones((L, L), bool))
    vd = flexcheck.judge(q, k, v, out, block_mask=lists, mask=causal)
    assert vd.failed and "H1" in vd.reason, str(vd)  # zeros are not causal attention


def test_a_block_masks_mask_mod_is_anded_with_the_callers_terms(flexbin, tmp_path):
    """block_mask= with mask= / mask_mod=: PyTorch's kernel applied the BlockMask's mask_mod,
    the caller says what it should have: the output is held to both, ANDed (neither replaces
    the other). Prefix-LM's BlockMask ANDed with causal is causal."""
    torch = pytest.importorskip("torch")
    from torch.nn.attention.flex_attention import create_block_mask
    q, k, v = inputs(12)
    pre, _ = prefix_lm(flexbin, tmp_path, q, k, v, P)
    cau, _ = filled(flexbin, tmp_path, {"c": (q, k, v, {"causal": True})})["c"]
    bm = create_block_mask(prefix_mod(P), None, None, L, L, device="cpu", BLOCK_SIZE=16)
    alone = flexcheck.judge(q, k, v, f16(pre), block_mask=bm)
    assert alone.passed, str(alone)
    # an all-true mask removes nothing: the BlockMask's prefix-LM is still the mask
    same_verdict(flexcheck.judge(q, k, v, f16(pre), block_mask=bm, mask=np.ones((L, L), bool)),
                 alone)
    assert flexcheck.judge(q, k, v, f16(cau), block_mask=bm, mask=np.ones((L, L), bool)).failed
    # the prefix-LM of P - 2 (numpy here, the BlockMask's in torch) ANDed with it is itself,
    # its pairs removed from partial tiles only: the lists stay sound
    short, _ = prefix_lm(flexbin, tmp_path, q, k, v, P - 2)
    for o, ok in ((short, True), (pre, False)):
        vd = flexcheck.judge(q, k, v, f16(o), block_mask=bm, mask_mod=prefix_mod(P - 2))
        assert vd.passed == ok and "NOT SOUND" not in str(vd), str(vd)
        tq, tk, tv, to = (torch.from_numpy(x) for x in (q, k, v, f16(o)))
        same_verdict(flexcheck.judge(tq, tk, tv, to, block_mask=bm, mask_mod=prefix_mod(P - 2)),
                     vd)
        same_verdict(flexcheck.judge(q, k, v, f16(o), block_mask=bm, mask=prefix_mask(P - 2)), vd)
    # the lists are held to the AND too: causal removes pairs from a tile the prefix-LM lists
    # full, which the kernel reads without its mask_mod, so no output can be right
    vd = flexcheck.judge(q, k, v, f16(cau), block_mask=bm, mask_mod=lambda b, h, i, j: j <= i)
    assert vd.failed and "leaks keys" in vd.reason and "masked pair (q 0, k 1)" in vd.reason, \
        str(vd)
    # a BlockMask whose mask_mod cannot be evaluated is named as such
    bad = create_block_mask(prefix_mod(P), None, None, L, L, device="cpu", BLOCK_SIZE=16)
    bad.mask_mod = lambda b, h, i, j: (j <= i) if i > 3 else True
    with pytest.raises(ValueError, match=r"^block_mask's mask_mod: raised RuntimeError"):
        flexcheck.judge(q, k, v, f16(pre), block_mask=bad, mask=np.ones((L, L), bool))
