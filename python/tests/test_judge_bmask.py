"""flexcheck.judge(..., block_mask=): a producer's block mask checked with the output, through
the shared library (include/flexcheck.h's set_block_mask). Skipped (visibly) when the library
cannot be found; the torch tests are skipped when torch cannot be imported.

Without torch: the block lists as a dict of numpy arrays, held to causal alone. With torch: a
BlockMask from create_block_mask, its mask_mod (a prefix-LM, a speculative-decoding draft tree,
a per-head mask) judged as the explicit mask, its lists held to it. Outputs come from a numpy
float64 attention written here over a dense mask; tile kinds and the pairs a message must name
are computed here from that mask, element by element.
"""
import numpy as np
import pytest

import flexcheck
from test_judge import WHY  # why the library cannot load, as the other judge tests skip

pytestmark = pytest.mark.skipif(WHY is not None, reason=f"{WHY}")


def attention(q, k, v, ok):
    """[B, H, L, D] float64 attention under the boolean ok [B or 1, H or 1, Lq, Lk]."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) * q.shape[3] ** -0.5
    s = np.where(ok, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    p = np.exp(s - m)
    l = p.sum(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(l > 0, (p / np.where(l > 0, l, 1)) @ v, 0)


def inputs(seed, b, hq, hkv, lq, lk, d=16):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype(np.float32)
                 for s in ((b, hq, lq, d), (b, hkv, lk, d), (b, hkv, lk, d)))


def tile_kinds(ok, bs):
    """[nb, nh, nqb, nkb] 0 empty, 1 partial, 2 full from a boolean [nb, nh, Lq, Lk]; padding
    past Lq or Lk counts as not allowed."""
    nb, nh, lq, lk = ok.shape
    nqb, nkb = -(-lq // bs), -(-lk // bs)
    pad = np.zeros((nb, nh, nqb * bs, nkb * bs), bool)
    pad[:, :, :lq, :lk] = ok
    n = pad.reshape(nb, nh, nqb, bs, nkb, bs).sum(axis=(3, 5))
    return np.where(n == 0, 0, np.where(n == bs * bs, 2, 1))


def lists(kinds):
    """PyTorch's four arrays from tile kinds, width NKB, -1 past each count."""
    nb, nh, nqb, nkb = kinds.shape
    out = {}
    for key, want in (("kv", 1), ("full_kv", 2)):
        num = np.zeros((nb, nh, nqb), np.int32)
        idx = np.full((nb, nh, nqb, nkb), -1, np.int32)
        for i in np.ndindex(nb, nh, nqb):
            ids = np.flatnonzero(kinds[i] == want)
            num[i], idx[i][:len(ids)] = len(ids), ids
        out[key + "_num_blocks"], out[key + "_indices"] = num, idx
    return out


def first_pair(ok, b, h, r, c, bs, want):
    """The first element of tile (r, c), rows then keys, whose allowed is want."""
    lq, lk = ok.shape[2:]
    for tq in range(r * bs, (r + 1) * bs):
        for tk in range(c * bs, (c + 1) * bs):
            a = tq < lq and tk < lk and bool(ok[b, h, tq, tk])
            if a == want:
                return tq, tk
    raise AssertionError("no such element")


def causal_ok(lq, lk):
    """Bottom-right causal (docs/semantics.md section 2)."""
    return (np.arange(lk)[None, :] <= np.arange(lq)[:, None] + (lk - lq))[None, None]


# ---- a dict of numpy arrays, held to the families ----

def test_numpy_lists_pass_when_exact_and_a_dropped_diagonal_tile_is_named():
    q, k, v = inputs(0, 1, 2, 1, 40, 56)
    ok = causal_ok(40, 56)
    out = attention(q, k, v, ok).astype(np.float32)
    bm = dict(lists(tile_kinds(ok, 16)), BLOCK_SIZE=16)
    vd = flexcheck.judge(q, k, v, out, causal=True, block_mask=bm)
    assert vd.passed, str(vd)
    assert "its block mask (16x16): sound" in str(vd)
    # query tile 2 (tokens 32-47): its last partial tile dropped
    r, n = 2, int(bm["kv_num_blocks"][0, 0, 2])
    c = int(bm["kv_indices"][0, 0, r, n - 1])
    bm["kv_num_blocks"][0, 0, r] = n - 1
    tq, tk = first_pair(ok, 0, 0, r, c, 16, True)
    vd = flexcheck.judge(q, k, v, out, causal=True, block_mask=bm)
    assert vd.failed
    assert vd.reason.startswith("block-mask: the producer's block mask is NOT SOUND: drops keys")
    assert (f"query tile {r} [tokens 32, 48) kv block {c} [keys {16 * c}, {16 * c + 16}), "
            f"allowed pair (q {tq}, k {tk})") in vd.reason, vd.reason
    with pytest.raises(AssertionError, match="drops keys"):
        flexcheck.assert_attention_close(q, k, v, out=out, causal=True, block_mask=bm)


@pytest.mark.parametrize("edit,says", [
    (lambda bm: bm.pop("BLOCK_SIZE"), "a mapping needs BLOCK_SIZE"),
    (lambda bm: bm.update(BLOCK_SIZE=(16, 24)), "block sizes (16, 24): must be powers of two"),
    (lambda bm: bm.update(BLOCK_SIZE="16"), "BLOCK_SIZE = '16'"),
    (lambda bm: bm.update(kv_num_blocks=bm["kv_num_blocks"][0]), "kv_num_blocks: 2 dims"),
    (lambda bm: bm.update(kv_indices=bm["kv_indices"].astype(np.float32)),
     "kv_indices: dtype float32: must be integer"),
    (lambda bm: bm.pop("full_kv_indices"), "give both or neither"),
    (lambda bm: bm["kv_indices"].__setitem__((0, 0, 1, 0), 99),
     "set_block_mask: kv_indices[0][0][1][0] = 99: out of range [0, 4)"),
    (lambda bm: bm.update(kv_num_blocks=np.repeat(bm["kv_num_blocks"], 3, axis=1),
                          kv_indices=np.repeat(bm["kv_indices"], 3, axis=1),
                          full_kv_num_blocks=np.repeat(bm["full_kv_num_blocks"], 3, axis=1),
                          full_kv_indices=np.repeat(bm["full_kv_indices"], 3, axis=1)),
     "nh = 3: must be 1 (one for every head) or Hq = 2"),
])
def test_bad_numpy_lists_are_refused_naming_what_is_wrong(edit, says):
    q, k, v = inputs(1, 1, 2, 1, 40, 56)
    ok = causal_ok(40, 56)
    out = attention(q, k, v, ok).astype(np.float32)
    bm = dict(lists(tile_kinds(ok, 16)), BLOCK_SIZE=16)
    edit(bm)
    with pytest.raises(ValueError) as e:
        flexcheck.judge(q, k, v, out, causal=True, block_mask=bm)
    assert says in str(e.value), str(e.value)


def test_something_else_is_refused_saying_what_to_pass():
    q, k, v = inputs(2, 1, 2, 1, 16, 16)
    with pytest.raises(ValueError, match="give a torch BlockMask .* or a dict of numpy arrays"):
        flexcheck.judge(q, k, v, np.zeros((1, 2, 16, 16), np.float32), block_mask=[1, 2])


# ---- torch BlockMask: its mask_mod and its lists both judged ----

def _torch():
    torch = pytest.importorskip("torch")
    fa = pytest.importorskip("torch.nn.attention.flex_attention")
    return torch, fa


def _block_mask(fa, mask_mod, b, h, lq, lk, bs=16):
    return fa.create_block_mask(mask_mod, B=b, H=h, Q_LEN=lq, KV_LEN=lk, device="cpu",
                                BLOCK_SIZE=bs)


def _grid(fa, mask_mod, b, h, lq, lk):
    return fa.create_mask(mask_mod, b, h, lq, lk, device="cpu").numpy()


def test_prefix_lm_block_mask_passes_and_its_mask_mod_is_the_mask():
    torch, fa = _torch()
    prefix = 11

    def prefix_lm(b, h, q, kv):
        return (kv < prefix) | (kv <= q)

    q, k, v = inputs(3, 1, 2, 1, 48, 48)
    ok = _grid(fa, prefix_lm, 1, 1, 48, 48)
    out = attention(q, k, v, ok).astype(np.float32)
    bm = _block_mask(fa, prefix_lm, None, None, 48, 48)
    vd = flexcheck.judge(q, k, v, out, block_mask=bm)
    assert vd.passed, str(vd)
    # the mask_mod is judged: an output of plain causal attention fails
    wrong = attention(q, k, v, np.tril(np.ones((48, 48), bool))[None, None]).astype(np.float32)
    assert flexcheck.judge(q, k, v, wrong, block_mask=bm).failed


def test_a_draft_tree_block_list_that_drops_a_draft_tokens_tile_is_named():
    torch, fa = _torch()
    ctx, n = 40, 24
    parent = [-1, 0, 0, 1, 1, 2, 1, 6] + [i - 1 for i in range(8, n)]
    tree = np.zeros((n, ctx + n), bool)
    for i in range(n):
        tree[i, :ctx] = True
        a = i
        while a >= 0:
            tree[i, ctx + a] = True
            a = parent[a]
    tt = torch.tensor(tree)

    def draft(b, h, q, kv):
        return tt[q, kv]

    q, k, v = inputs(4, 1, 2, 1, n, ctx + n)
    out = attention(q, k, v, tree[None, None]).astype(np.float32)
    bm = _block_mask(fa, draft, None, None, n, ctx + n)
    assert flexcheck.judge(q, k, v, out, causal=True, block_mask=bm).passed
    # query tile 1 (draft tokens 16-23) without kv block 3 (draft tokens 8-23)
    num, idx = bm.kv_num_blocks.clone(), bm.kv_indices.clone()
    row = idx[0, 0, 1, :int(num[0, 0, 1])].tolist()
    assert 3 in row
    keep = [c for c in row if c != 3]
    idx[0, 0, 1, :len(keep)] = torch.tensor(keep, dtype=idx.dtype)
    num[0, 0, 1] = len(keep)
    bad = fa.BlockMask.from_kv_blocks(num, idx, bm.full_kv_num_blocks, bm.full_kv_indices,
                                      BLOCK_SIZE=bm.BLOCK_SIZE, mask_mod=draft,
                                      seq_lengths=bm.seq_lengths)
    tq, tk = first_pair(tree[None, None], 0, 0, 1, 3, 16, True)
    vd = flexcheck.judge(q, k, v, out, causal=True, block_mask=bad)
    assert vd.failed and "drops keys" in vd.reason
    assert (f"(b, h) = (0, 0) query tile 1 [tokens 16, 32) kv block 3 [keys 48, 64), allowed "
            f"pair (q {tq}, k {tk})") in vd.reason, vd.reason


def test_a_per_head_mask_mod_needs_a_list_per_head():
    torch, fa = _torch()

    def per_head(b, h, q, kv):  # head 1 does not see the first 16 keys
        return (kv <= q) & ((h == 0) | (kv >= 16))

    q, k, v = inputs(5, 1, 2, 1, 32, 32)
    ok = _grid(fa, per_head, 1, 2, 32, 32)
    out = attention(q, k, v, ok).astype(np.float32)
    assert flexcheck.judge(q, k, v, out, block_mask=_block_mask(fa, per_head, 1, 2, 32, 32)).passed
    # H=None: made from head 0, where kv block 0 of query tile 1 is full; head 1 masks it
    vd = flexcheck.judge(q, k, v, out, block_mask=_block_mask(fa, per_head, None, None, 32, 32))
    tq, tk = first_pair(ok, 0, 1, 1, 0, 16, False)
    assert vd.failed and "leaks keys" in vd.reason, str(vd)
    assert f"(b, h) = (0, 1) query tile 1 [tokens 16, 32) kv block 0 [keys 0, 16), masked pair " \
           f"(q {tq}, k {tk})" in vd.reason, vd.reason


def test_a_block_mask_for_other_lengths_is_refused():
    torch, fa = _torch()
    q, k, v = inputs(6, 1, 2, 1, 32, 32)
    bm = _block_mask(fa, lambda b, h, q_, kv: kv <= q_, None, None, 64, 64)
    with pytest.raises(ValueError, match=r"made for seq_lengths \(64, 64\), the inputs have "
                                         r"\(Lq, Lk\) = \(32, 32\)"):
        flexcheck.judge(q, k, v, np.zeros((1, 2, 32, 16), np.float32), block_mask=bm)


def test_a_problem_over_the_budget_is_refused_before_the_mask_mod_is_evaluated():
    torch, fa = _torch()
    bm = _block_mask(fa, lambda b, h, q_, kv: kv <= q_, None, None, 32, 32)
    calls = []

    def counted(b, h, q_, kv):
        calls.append(1)
        return kv <= q_

    bm = fa.BlockMask.from_kv_blocks(bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks,
                                     bm.full_kv_indices, BLOCK_SIZE=bm.BLOCK_SIZE,
                                     mask_mod=counted, seq_lengths=bm.seq_lengths)
    q, k, v = inputs(7, 1, 2, 1, 32, 32)
    with pytest.raises(ValueError, match="over the memory budget max_memory"):
        flexcheck.judge(q, k, v, np.zeros((1, 2, 32, 16), np.float32), block_mask=bm,
                        max_memory=1000)
    assert not calls
