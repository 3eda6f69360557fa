"""Paged K/V (schema flexcheck-fixture-4, docs/fixtures.md "Paged K/V"): write_case(k_cache=,
v_cache=, block_table=, kv_len=), read_case, and judge / assert_attention_close with the same
arguments.

The pages are laid out here by hand from contiguous K/V (pages in a seeded order, stale pages of
NaN, padding entries out of range, a page shared by two sequences), and read back with plain
h5py. With FLEXCHECK_BIN: `fill` gives a paged dump bitwise the oracle of the same case stored
contiguous, `check` passes it, and an output computed through a table with one page read from
the wrong slot (by a numpy "engine" written here, the thing under test) fails both `check` and
the in-process judge.

Run: PYTHONPATH=python python3 -m pytest python/tests/test_paged.py
"""
import os

import h5py
import numpy as np
import pytest

import flexcheck
from flexcheck import SCHEMA_PAGED, add_tested, read_case, write_case
from _flexcli import needs_lib, run, snapshot

B, HQ, HKV, LQ, LK, D, DV, PS = 2, 4, 2, 12, 21, 8, 4, 8


def qkv(seed=0, b=B, lk=LK):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype(np.float16) for s in
                 ((b, HQ, LQ, D), (b, HKV, lk, D), (b, HKV, lk, DV)))


def page(k, v, spans, seed=1, stale=3, share=None):
    """k, v [B, Hkv, Lk, .] paged: spans (batch entry, first key, length) per sequence; pages
    drawn in a seeded order from a pool with `stale` pages of NaN more; share=(r, r2): sequence
    r2's first page is sequence r's (their keys there must be equal)."""
    need = [-(-n // PS) for _, _, n in spans]
    npages = sum(need) + stale
    order = list(np.random.default_rng(seed).permutation(npages))
    kc = np.full((npages, PS, HKV, k.shape[3]), np.nan, k.dtype)
    vc = np.full((npages, PS, HKV, v.shape[3]), np.nan, v.dtype)
    table = np.full((len(spans), max(need) + 2), -1, np.int32)
    table[:, -1] = npages + 7  # padding out of range: never read
    for r, (b, k0, n) in enumerate(spans):
        for j in range(need[r]):
            p = table[share[0], 0] if share and r == share[1] and j == 0 else order.pop()
            table[r, j] = p
            u = min(PS, n - j * PS)
            kc[p, :u] = k[b, :, k0 + j * PS:k0 + j * PS + u].transpose(1, 0, 2)
            vc[p, :u] = v[b, :, k0 + j * PS:k0 + j * PS + u].transpose(1, 0, 2)
    return kc, vc, table


DENSE = [(0, 0, LK), (1, 0, LK)]


@pytest.fixture
def h5(tmp_path):
    return str(tmp_path / "f.h5")


def test_a_dense_paged_case_is_written_as_given_and_read_back_as_its_logical_kv(h5):
    q, k, v = qkv()
    kc, vc, table = page(k, v, DENSE)
    write_case(h5, "c", q, k_cache=kc, v_cache=vc, block_table=table, kv_len=LK, causal=True)
    with h5py.File(h5, "r") as f:
        g = f["cases/c"]
        assert f.attrs["schema"] == SCHEMA_PAGED
        assert "k" not in g and "v" not in g
        assert g["block_table"].dtype == np.int32
        np.testing.assert_array_equal(g["block_table"][()], table)
        assert np.array_equal(g["k_cache"][()], kc, equal_nan=True)  # stale NaN pages too
        assert int(g.attrs["kv_len"]) == LK
    c = read_case(h5, "c")
    assert c.schema == SCHEMA_PAGED
    np.testing.assert_array_equal(c.k, k)
    np.testing.assert_array_equal(c.v, v)
    np.testing.assert_array_equal(c.block_table, table)


def test_a_packed_case_with_a_shared_prefix_page(h5):
    q, k, v = qkv(b=1, lk=30)
    cu_k = np.array([0, 10, 30], np.int32)
    k[0, :, 10:18] = k[0, :, 0:8]  # sequence 1's first page: sequence 0's (a shared prompt)
    v[0, :, 10:18] = v[0, :, 0:8]
    kc, vc, table = page(k, v, [(0, 0, 10), (0, 10, 20)], share=(0, 1))
    assert table[0, 0] == table[1, 0]
    qp = q[0].transpose(1, 0, 2)  # vLLM's packed [T, H, D]
    write_case(h5, "c", qp, k_cache=kc, v_cache=vc, block_table=table,
               cu_seqlens_q=np.array([0, 4, LQ]), cu_seqlens_k=cu_k, causal=True)
    c = read_case(h5, "c")
    np.testing.assert_array_equal(c.k, k)
    np.testing.assert_array_equal(c.v, v)


def break_table(r, j, x):
    def f(kc, vc, t):
        t = t.copy()
        t[r, j] = x
        return kc, vc, t
    return f


def nan_read(kc, vc, t):
    kc = kc.copy()
    kc[t[1, 0], 2, 1, 3] = np.nan
    return kc, vc, t


def inexact_read(kc, vc, t):
    kc = kc.astype(np.float32)
    kc[t[0, 1], 0, 0, 0] = 1.0 + 2.0 ** -20
    return kc, vc.astype(np.float32), t


REFUSALS = [
    ("entry out of range", break_table(1, 2, 99),
     r"block_table\[1\]\[2\] = 99: sequence 1 reads its keys from 16 on through it; a used "
     r"entry must lie in \[0, num_pages = 9\)"),
    ("negative entry", break_table(0, 0, -1), r"block_table\[0\]\[0\] = -1"),
    ("NaN in a page read", nan_read, r"k_cache: value nan at \[\d+\]\[2\]\[1\]\[3\] is not finite"),
    ("inexact in a page read", inexact_read,
     r"k_cache: value 1.00000095\d* at \[\d+\]\[0\]\[0\]\[0\] is not representable in float16"),
    ("narrow table", lambda kc, vc, t: (kc, vc, t[:, :2]),
     r"block_table: sequence 0 holds 21 keys: 3 pages of 8, the table's rows have 2 entries"),
    ("rows", lambda kc, vc, t: (kc, vc, t[:1]),
     r"block_table: 1 rows: one per sequence, 2 \(the batch\)"),
    ("v_cache pages", lambda kc, vc, t: (kc, vc[:3], t),
     r"v_cache: shape \[3, 8, 2, 4\]: \[num_pages, page_size, Hkv\] must be k_cache's"),
    ("float table", lambda kc, vc, t: (kc, vc, t.astype(np.float32)),
     r"block_table: dtype float32: must be integers"),
]


@pytest.mark.parametrize("label,change,message", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_write_case_refuses_a_bad_table_or_page_read_leaving_the_file(tmp_path, label, change,
                                                                      message):
    q, k, v = qkv()
    h5 = str(tmp_path / "f.h5")
    write_case(h5, "other", q, k, v)
    before = snapshot(tmp_path)
    kc, vc, t = change(*page(k, v, DENSE))
    with pytest.raises(ValueError, match=message):
        write_case(h5, "c", q, k_cache=kc, v_cache=vc, block_table=t, kv_len=LK)
    assert snapshot(tmp_path) == before


HALF = [
    ({"k_cache": 1, "v_cache": 1}, r"k_cache, v_cache without block_table: paged K/V takes all "
                                   r"three: give k and v .* or k_cache \[num_pages"),
    ({"block_table": 1}, r"block_table without k_cache and v_cache"),
    ({"k": 1, "k_cache": 1, "v_cache": 1, "block_table": 1},
     r"k and k_cache, v_cache, block_table: K/V in one form: give k and v"),
    ({}, r"k and v: missing: give k and v"),
]


@pytest.mark.parametrize("given,message", HALF)
def test_a_half_given_or_doubled_set_says_what_to_pass(h5, given, message):
    q, k, v = qkv()
    kc, vc, t = page(k, v, DENSE)
    full = {"k": k, "k_cache": kc, "v_cache": vc, "block_table": t}
    args = {n: full[n] for n in given}
    with pytest.raises(ValueError, match=message):
        write_case(h5, "c", q, kv_len=LK, **args)
    assert not os.path.exists(h5)


def test_a_dense_paged_case_needs_kv_len(h5):
    q, k, v = qkv()
    kc, vc, t = page(k, v, DENSE)
    with pytest.raises(ValueError, match=r"kv_len: missing: a dense paged case needs the key "
                                         r"count Lk"):
        write_case(h5, "c", q, k_cache=kc, v_cache=vc, block_table=t)


def test_read_case_refuses_a_version_3_file_holding_paged_kv(h5):
    q, k, v = qkv()
    kc, vc, t = page(k, v, DENSE)
    write_case(h5, "c", q, k_cache=kc, v_cache=vc, block_table=t, kv_len=LK)
    with h5py.File(h5, "r+") as f:
        f.attrs["schema"] = "flexcheck-fixture-3"
    with pytest.raises(ValueError, match=r"/cases/c: k_cache: a flexcheck-fixture-3 file holds "
                                         r"no paged K/V \(it needs schema flexcheck-fixture-4\)"):
        read_case(h5, "c")


# ---- judged: fill, check and the in-process judge ----

def attention(q, k, v, causal=True):
    """[B, H, L, D] float64 attention, bottom-right causal, GQA: the engine under test."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) * q.shape[3] ** -0.5
    ok = np.arange(LK)[None, :] <= np.arange(LQ)[:, None] + (LK - LQ)
    s = np.where(ok, s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    return (p / p.sum(-1, keepdims=True)) @ v, np.log(p.sum(-1)) + m[..., 0]


def through(kc, vc, table):
    """The engine's K/V: each sequence's keys read through `table` as it holds it."""
    k = np.stack([kc[table[b, :3]].reshape(3 * PS, HKV, D)[:LK].transpose(1, 0, 2)
                  for b in range(B)])
    v = np.stack([vc[table[b, :3]].reshape(3 * PS, HKV, DV)[:LK].transpose(1, 0, 2)
                  for b in range(B)])
    return k, v


@pytest.fixture
def judged(tmp_path, flexbin):
    q, k, v = qkv()
    kc, vc, t = page(k, v, DENSE)
    paged, contig = str(tmp_path / "p.h5"), str(tmp_path / "c.h5")
    write_case(paged, "c", q, k_cache=kc, v_cache=vc, block_table=t, kv_len=LK, causal=True)
    write_case(contig, "c", q, k, v, causal=True)
    for f in (paged, contig):
        assert run(flexbin, "fill", f, "--in-place")[0] == 0
    return q, k, v, kc, vc, t, paged, contig


def test_fill_of_a_paged_dump_is_bitwise_the_contiguous_oracle_and_check_passes(judged,
                                                                                flexbin):
    *_, paged, contig = judged
    a, b = read_case(paged, "c"), read_case(contig, "c")
    assert np.array_equal(a.out, b.out) and np.array_equal(a.lse, b.lse)
    st, out, err = run(flexbin, "check", paged)
    assert st == 0 and "PASS" in out, out + err


def wrong_slot(t):
    """Batch entry 1's logical page 0 read from its entry 1's slot (the table off by one), a
    full page: every key of it a real key of the sequence (read through entry 2, the last
    page's stale slots would give NaN)."""
    w = t.copy()
    w[1, 0] = t[1, 1]
    return w


@needs_lib
def test_a_page_read_from_the_wrong_slot_fails_check_and_the_judge(judged, flexbin):
    q, k, v, kc, vc, t, paged, _ = judged
    o, lse = attention(q, *through(kc, vc, t))
    ow, lw = attention(q, *through(kc, vc, wrong_slot(t)))
    assert not np.allclose(o, ow)  # the bug shows on this case
    add_tested(paged, "c", "right", o.astype(np.float16), lse=lse.astype(np.float32),
               producer="numpy through the table")
    add_tested(paged, "c", "wrong", ow.astype(np.float16), lse=lw.astype(np.float32),
               producer="numpy, page 1 of entry 1 from the wrong slot")
    st, out, err = run(flexbin, "check", paged)
    assert st == 1, out + err
    lines = out.splitlines()
    assert any(l.startswith("PASS") and "tested/right" in l for l in lines), out
    assert any(l.startswith("FAIL") and "tested/wrong" in l for l in lines), out
    # the diagnosis names the page, the slot read and the entry it came through
    assert (f"explained by batch entry 1's page 0 (its keys 0..7) read from physical page "
            f"{t[1, 1]}, block_table[1][1]'s, instead of page {t[1, 0]}: the block table read "
            f"one entry ahead: all 48 failing rows") in out, out
    args = dict(k_cache=kc, v_cache=vc, block_table=t, kv_len=LK, causal=True)
    assert flexcheck.judge(q, out=o.astype(np.float16), lse=lse.astype(np.float32),
                           **args).passed
    with pytest.raises(AssertionError, match="does not pass") as e:
        flexcheck.assert_attention_close(q, out=ow.astype(np.float16), lse=lw.astype(np.float32),
                                         **args)
    # in process too, the diagnosis names the page read from the wrong slot
    assert (f"batch entry 1's page 0 (its keys 0..7) read from physical page {t[1, 1]}, "
            f"block_table[1][1]'s, instead of page {t[1, 0]}") in str(e.value), str(e.value)


def test_judge_refuses_half_given_paged_arguments_saying_what_to_pass():
    q, k, v = qkv()
    kc, vc, t = page(k, v, DENSE)
    o = np.zeros((B, HQ, LQ, DV), np.float32)
    with pytest.raises(ValueError, match=r"k_cache, v_cache without block_table: paged K/V "
                                         r"takes all three: give k and v"):
        flexcheck.judge(q, out=o, k_cache=kc, v_cache=vc)
    with pytest.raises(ValueError, match=r"block_table\[0\]\[1\] = 40: sequence 0"):
        flexcheck.judge(q, out=o, k_cache=kc, v_cache=vc, block_table=break_table(0, 1, 40)(
            kc, vc, t)[2], kv_len=LK)


@needs_lib
def test_judge_takes_torch_tensors_for_the_cache():
    torch = pytest.importorskip("torch")
    q, k, v = qkv()
    kc, vc, t = page(k, v, DENSE)
    o, lse = attention(q, k, v)
    vd = flexcheck.judge(torch.from_numpy(q), out=torch.from_numpy(o.astype(np.float16)),
                         lse=torch.from_numpy(lse.astype(np.float32)),
                         k_cache=torch.from_numpy(kc), v_cache=torch.from_numpy(vc),
                         block_table=torch.from_numpy(t), kv_len=LK, causal=True)
    assert vd.passed, str(vd)


def test_export_writes_the_matrix_paged_cases_paged_and_check_passes_them(tmp_path, flexbin):
    st, out, err = run(flexbin, "export", "--quick", "--filter", "paged", "--out", tmp_path)
    assert st == 0, out + err
    files = [f for f in os.listdir(tmp_path) if f.endswith(".h5")]
    assert len(files) == 1 and "m2-paged" in files[0], files
    path = str(tmp_path / files[0])
    with h5py.File(path, "r") as f:
        assert f.attrs["schema"] in (SCHEMA_PAGED, SCHEMA_PAGED.encode())
        names = sorted(f["cases"])
        assert len(names) == 2 and names[1] == names[0] + "@prefix", names
        for n in names:
            g = f["cases"][n]
            assert "k" not in g and "k_cache" in g
    plain, prefix = (read_case(path, n) for n in names)
    t, ps = plain.block_table, plain.k_cache.shape[1]
    lens = np.diff(plain.cu_seqlens_k)
    used = [int(t[r, j]) for r in range(len(lens)) for j in range(-(-int(lens[r]) // ps))]
    assert used != sorted(used), "pages in a seeded order"
    stale = set(range(plain.k_cache.shape[0])) - set(used)
    assert stale and all(np.isnan(plain.k_cache[p]).any() for p in stale), "stale NaN pages"
    tp = prefix.block_table
    assert tp[0, 0] == tp[1, 0] or tp[0, 0] == tp[2, 0], "@prefix shares its first page"
    st, out, err = run(flexbin, "check", "--exact-blocks", path)
    assert st == 0 and out.count("PASS") == 2, out + err
