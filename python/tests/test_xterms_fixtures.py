"""Tests of the explicit terms in flexcheck.fixtures (schema flexcheck-fixture-3,
docs/fixtures.md; docs/semantics.md section 8): write_case(mask=, mask_packed=,
mask_intervals=, bias=) and read_case.

What is written (read back with plain h5py and compared with numpy's own packbits), the
version chosen and never downgraded, the mask written chunk by chunk, every refusal (one line
naming the argument, the index and the value, the file left byte-identical), read_case's
refusals of badly stored terms. With FLEXCHECK_BIN (make test), end to end: a prefix-LM case
and an ALiBi case written here, filled by `flexcheck fill` (flexcheck's oracle: nothing here
computes attention), then `flexcheck check` passes the filled output given back as an output
under test and fails the output of the mask shifted by one key (or the bias of the other
sign), on every row and on a sample of rows.

Run: PYTHONPATH=python python3 -m pytest python/tests/test_xterms_fixtures.py
"""
import os

import h5py
import numpy as np
import pytest

import flexcheck.fixtures as fixtures
from flexcheck import (SCHEMA, SCHEMA_TERMS, SCHEMA_XTERMS, add_tested, read_case,
                       write_case)
from _flexcli import run, schema_of, snapshot

V3 = "flexcheck-fixture-3"
B, HQ, HKV, LQ, LK, D = 2, 4, 2, 24, 40, 16


def qkv(b=B, hq=HQ, hkv=HKV, lq=LQ, lk=LK, d=D, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype(np.float32) for s in
                 ((b, hq, lq, d), (b, hkv, lk, d), (b, hkv, lk, d)))


def prefix_lm(prefix, lq=LQ, lk=LK):
    """[len(prefix), 1, Lq, Lk] bool: entry b sees its first prefix[b] keys, causal after them
    (bottom-right: query q sits at key position q + Lk - Lq)."""
    q = np.arange(lq)[:, None] + (lk - lq)
    k = np.arange(lk)[None, :]
    return np.stack([(k < p) | (k <= q) for p in prefix])[:, None]


def alibi(slopes, lq=LQ, lk=LK):
    """[1, H, Lq, Lk] float32: -slope_h * |distance| (ALiBi)."""
    dist = np.abs(np.arange(lq)[:, None] + (lk - lq) - np.arange(lk)[None, :])
    return (-np.asarray(slopes, np.float32)[:, None, None] * dist).astype(np.float32)[None]


@pytest.fixture
def h5(tmp_path):
    return str(tmp_path / "f.h5")


# ---- what is written ----

def test_constants():
    assert SCHEMA_XTERMS == V3 and fixtures.SCHEMAS[:3] == (SCHEMA, SCHEMA_TERMS, V3)


def test_a_mask_is_stored_bit_packed_as_numpy_packs_it(h5):
    q, k, v = qkv()
    m = prefix_lm([5, 17])
    write_case(h5, "c", q, k, v, mask=m)
    assert schema_of(h5) == V3
    with h5py.File(h5, "r") as f:
        ds = f["cases/c/mask"]
        assert ds.dtype == np.uint8 and ds.shape == (B, 1, LQ, 5)
        assert ds.attrs["bitorder"] in ("little", b"little")
        np.testing.assert_array_equal(ds[()], np.packbits(m, axis=-1, bitorder="little"))
        assert "bias" not in f["cases/c"] and "mask_intervals" not in f["cases/c"]
    c = read_case(h5, "c")
    assert c.schema == V3 and c.mask.dtype == bool and c.bias is None
    np.testing.assert_array_equal(c.mask, m)


def test_a_0_1_integer_mask_and_a_packed_one_store_the_same_bits(tmp_path):
    q, k, v = qkv()
    m = prefix_lm([3, 30])
    paths = [str(tmp_path / f"{i}.h5") for i in range(3)]
    write_case(paths[0], "c", q, k, v, mask=m)
    write_case(paths[1], "c", q, k, v, mask=m.astype(np.int64))
    write_case(paths[2], "c", q, k, v, mask=np.packbits(m, axis=-1, bitorder="little"),
               mask_packed=True)
    stored = []
    for p in paths:
        with h5py.File(p, "r") as f:
            stored.append(f["cases/c/mask"][()])
    np.testing.assert_array_equal(stored[0], stored[1])
    np.testing.assert_array_equal(stored[0], stored[2])


def test_intervals_are_stored_as_given_and_read_as_the_mask_they_state(h5):
    q, k, v = qkv()
    prefix = [5, 17]
    hi = np.maximum(np.arange(LQ)[None, :] + (LK - LQ) + 1, np.array(prefix)[:, None])
    iv = np.stack([np.zeros_like(hi), hi], -1)[:, None]  # [B, 1, Lq, 2]
    write_case(h5, "c", q, k, v, mask_intervals=iv)
    assert schema_of(h5) == V3
    with h5py.File(h5, "r") as f:
        assert f["cases/c/mask_intervals"].dtype == np.int32 and "mask" not in f["cases/c"]
    c = read_case(h5, "c")
    np.testing.assert_array_equal(c.mask_intervals, iv)
    np.testing.assert_array_equal(c.mask, prefix_lm(prefix))


def test_a_bias_is_stored_float32_and_read_back(h5):
    q, k, v = qkv()
    bias = alibi([0.5, 0.25, 0.125, 0.0625])
    write_case(h5, "c", q, k, v, causal=True, bias=bias)
    with h5py.File(h5, "r") as f:
        assert f["cases/c/bias"].dtype == np.dtype("<f4")
        assert f["cases/c/bias"].shape == (1, HQ, LQ, LK)
    c = read_case(h5, "c")
    assert c.mask is None
    np.testing.assert_array_equal(c.bias, bias)


def test_round_rounds_a_float64_bias_and_says_so_to_an_oracle_given(h5):
    q, k, v = qkv()
    bias = alibi([0.5, 0.25, 0.125, 0.0625]).astype(np.float64) + 1e-9
    with pytest.raises(ValueError, match=r"bias: value .* at \[0\]\[0\]\[0\]\[0\] is not "
                                         r"representable in float32"):
        write_case(h5, "c", q, k, v, bias=bias)
    write_case(h5, "c", q, k, v, bias=bias, round=True)
    np.testing.assert_array_equal(read_case(h5, "c").bias, bias.astype(np.float32))


def test_the_version_is_3_only_with_a_term_and_never_downgraded(h5):
    q, k, v = qkv()
    write_case(h5, "a", q, k, v)
    assert schema_of(h5) == SCHEMA
    write_case(h5, "b", q, k, v, softcap=30.0)
    assert schema_of(h5) == SCHEMA_TERMS
    write_case(h5, "c", q, k, v, mask=prefix_lm([1, 2]))
    assert schema_of(h5) == V3
    write_case(h5, "d", q, k, v)
    assert schema_of(h5) == V3
    assert read_case(h5, "a").mask is None and read_case(h5, "b").softcap == 30.0


def test_a_large_mask_is_written_chunk_by_chunk(h5, monkeypatch):
    """Small chunks (as the module's tests of q/k/v shrink them): the mask's dataset is chunked
    [1, 1, R, ceil(Lk / 8)], its bytes numpy's, and a bad value in a late chunk is found and
    named with its index in the mask."""
    monkeypatch.setattr(fixtures, "CHUNK_BYTES", 256)
    monkeypatch.setattr(fixtures, "CHUNK_ROW_STEP", 4)
    lq, lk = 64, 100
    q, k, v = qkv(b=1, hq=2, hkv=1, lq=lq, lk=lk)
    m = np.random.default_rng(3).integers(0, 2, (1, 2, lq, lk)).astype(np.uint8)
    write_case(h5, "c", q, k, v, mask=m)
    with h5py.File(h5, "r") as f:
        ds = f["cases/c/mask"]
        assert ds.chunks == (1, 1, 16, 13), ds.chunks  # 256 // 13 bytes -> 16 rows
        np.testing.assert_array_equal(ds[()], np.packbits(m, axis=-1, bitorder="little"))
    bad = m.copy()
    bad[0, 1, 50, 7] = 2
    bad[0, 1, 60, 0] = 3
    before = snapshot(os.path.dirname(h5))
    with pytest.raises(ValueError, match=r"^mask: value 2 at \[0\]\[1\]\[50\]\[7\]: must be 0 "
                                         r"or 1"):
        write_case(h5, "c", q, k, v, mask=bad, overwrite=True)
    assert snapshot(os.path.dirname(h5)) == before


def test_a_torch_bool_mask_is_written_like_numpys(tmp_path):
    torch = pytest.importorskip("torch")
    q, k, v = qkv()
    m = prefix_lm([5, 17])
    a, b = str(tmp_path / "a.h5"), str(tmp_path / "b.h5")
    write_case(a, "c", q, k, v, mask=m)
    write_case(b, "c", q, k, v, mask=torch.from_numpy(m))
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        np.testing.assert_array_equal(fa["cases/c/mask"][()], fb["cases/c/mask"][()])


# ---- refusals ----

def _bias_with(value):
    b = alibi([0.5, 0.25, 0.125, 0.0625])
    b[0, 2, 3, 5] = value
    return b


M = prefix_lm([5, 17])
IV_OK = np.zeros((1, 1, LQ, 2), np.int32) + [0, 1]
REFUSALS = [
    ("mask float", dict(mask=M.astype(np.float32)),
     r"mask: dtype float32: must be bool \(or integers 0/1\); an additive float mask is a "
     r"bias \(bias=\)"),
    ("mask value", dict(mask=np.where(np.arange(LK) == 9, 5, M).astype(np.int8)),
     r"mask: value 5 at \[0\]\[0\]\[0\]\[9\]: must be 0 or 1"),
    ("mask Bm", dict(mask=np.concatenate([M, M[:1]])),
     r"mask: shape \[3, 1, 24, 40\]: must be \[Bm, Hm, Lq, Lk\] with Bm 1 or B = 2"),
    ("mask 2-d", dict(mask=M[0, 0]), r"mask: shape \[24, 40\]: .*as \[1, 1, Lq, Lk\]"),
    ("mask packed dtype", dict(mask=M, mask_packed=True),
     r"mask: dtype bool: mask_packed=True takes uint8"),
    ("mask packed shape", dict(mask=M.astype(np.uint8), mask_packed=True),
     r"mask: shape \[2, 1, 24, 40\]: must be \[Bm, Hm, Lq, ceil\(Lk / 8\)\]"),
    ("mask twice", dict(mask=M, mask_intervals=IV_OK),
     r"mask and mask_intervals: give the explicit mask once"),
    ("interval past Lk", dict(mask_intervals=np.where(np.arange(LQ)[:, None] == 4, [3, 41],
                                                      [0, 1])[None, None]),
     r"mask_intervals: row \[0\]\[0\]\[4\]: \[lo, hi\) = \[3, 41\): must satisfy 0 <= lo <= "
     r"hi <= Lk = 40"),
    ("interval reversed", dict(mask_intervals=np.where(np.arange(LQ)[:, None] == 4, [9, 3],
                                                       [0, 1])[None, None]),
     r"mask_intervals: row \[0\]\[0\]\[4\]: \[lo, hi\) = \[9, 3\)"),
    ("interval float", dict(mask_intervals=IV_OK.astype(np.float32)),
     r"mask_intervals: dtype float32: must be integers"),
    ("bias nan", dict(bias=_bias_with(np.nan)),
     r"bias: value nan at \[0\]\[2\]\[3\]\[5\] is not finite"),
    ("bias -inf", dict(bias=_bias_with(-np.inf)),
     r"bias: value -inf at \[0\]\[2\]\[3\]\[5\] is not finite"),
    ("bias large", dict(bias=_bias_with(2e6)),
     r"bias: value 2000000\.0 at \[0\]\[2\]\[3\]\[5\]: the reader takes \|bias\| <= 1e\+06"),
    ("bias Hm", dict(bias=alibi([0.5, 0.25, 0.125])),
     r"bias: shape \[1, 3, 24, 40\]: .*Hm 1 or Hq = 4"),
    ("bias int", dict(bias=np.zeros((1, 1, LQ, LK), np.int32)),
     r"bias: dtype int32: must be floating point"),
]


@pytest.mark.parametrize("label,kw,message", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_a_bad_term_is_refused_naming_it_and_the_file_is_left_as_it_was(h5, label, kw,
                                                                         message):
    q, k, v = qkv()
    write_case(h5, "keep", q, k, v)
    before = snapshot(os.path.dirname(h5))
    with pytest.raises(ValueError, match=message) as e:
        write_case(h5, "c", q, k, v, **kw)
    assert "\n" not in str(e.value)
    assert snapshot(os.path.dirname(h5)) == before


def _change(path, fn):
    with h5py.File(path, "r+") as f:
        fn(f)


STORED_REFUSALS = [
    ("v2 with a mask", lambda f: f.attrs.__setitem__("schema", SCHEMA_TERMS),
     r"/cases/c: mask: a flexcheck-fixture-2 file holds no explicit terms \(they need schema "
     r"flexcheck-fixture-3\)"),
    ("big-endian bits", lambda f: f["cases/c/mask"].attrs.__setitem__("bitorder", "big"),
     r"/cases/c: mask: attribute bitorder = 'big': must be 'little'"),
    ("no bit order", lambda f: f["cases/c/mask"].attrs.__delitem__("bitorder"),
     r"/cases/c: mask: attribute bitorder = '\(missing\)'"),
]


@pytest.mark.parametrize("label,change,message", STORED_REFUSALS,
                         ids=[r[0] for r in STORED_REFUSALS])
def test_read_case_refuses_a_badly_stored_mask(h5, label, change, message):
    q, k, v = qkv()
    write_case(h5, "c", q, k, v, mask=M)
    _change(h5, change)
    with pytest.raises(ValueError, match=message):
        read_case(h5, "c")


# ---- end to end: flexcheck's oracle, flexcheck's verdict (FLEXCHECK_BIN) ----

def check_lines(flexbin, path, expect_rc, *extra):
    rc, out, err = run(flexbin, "check", *extra, path)
    assert rc == expect_rc, f"check exited {rc}:\n{out}{err}"
    return out.splitlines()


def line_of(lines, what):
    found = [ln for ln in lines if what in ln]
    assert len(found) == 1, f"no single line with {what!r} in:\n" + "\n".join(lines)
    return found[0]


def shifted(m):
    """The mask shifted by one key: key tk read as key tk - 1 (key 0 never allowed)."""
    s = np.zeros_like(m)
    s[..., 1:] = m[..., :-1]
    return s


@pytest.mark.parametrize("rows", [None, "64"])
def test_prefix_lm_and_alibi_pass_when_right_and_fail_when_off_by_a_key(tmp_path, flexbin,
                                                                        rows):
    """The right output (fill's own oracle, given back as float32) passes; the output of the
    mask shifted by one key, or of the bias with the other sign, each computed by flexcheck
    fill on a case written with that term, fails. rows="64": judged on a sample of 64 query
    tokens (the terms are read whole, the sample's rows of them taken by token index)."""
    lq = lk = 256 if rows else 40
    q, k, v = qkv(b=1, hq=2, hkv=1, lq=lq, lk=lk, seed=4)
    m = prefix_lm([lq // 3], lq, lk)
    bias = alibi([0.5, 0.125], lq, lk)
    path, wrong = str(tmp_path / "cases.h5"), str(tmp_path / "wrong.h5")
    write_case(path, "prefix", q, k, v, mask=m)
    write_case(path, "alibi", q, k, v, causal=True, bias=bias)
    write_case(wrong, "prefix", q, k, v, mask=shifted(m))
    write_case(wrong, "alibi", q, k, v, causal=True, bias=-bias)
    for p in (path, wrong):
        rc, out, err = run(flexbin, "fill", p, "--in-place")
        assert rc == 0, out + err
    for name in ("prefix", "alibi"):
        right, off = read_case(path, name), read_case(wrong, name)
        assert not np.array_equal(right.out, off.out), name  # the terms change the oracle
        add_tested(path, name, "right", right.out.astype(np.float32), producer="fill's oracle",
                   lse=right.lse.astype(np.float32))
        add_tested(path, name, "off", off.out.astype(np.float32), producer="one key off",
                   lse=off.lse.astype(np.float32))
    extra = ("--rows", rows) if rows else ()
    lines = check_lines(flexbin, path, 1, *extra)
    for name in ("prefix", "alibi"):
        assert line_of(lines, f"{name} tested/right").startswith("PASS "), lines
        assert line_of(lines, f"{name} tested/off").startswith("FAIL "), lines
    if rows:  # repro judges the same sample (its exit status: 0 passes, 1 fails a gate)
        for label, want in (("right", 0), ("off", 1)):
            rc, out, err = run(flexbin, "repro", path, "--case", "prefix", "--tested", label,
                               "--rows", rows)
            assert rc == want and "judged a sample: 64 of 256 query tokens" in out, (
                label, out + err)


def test_intervals_and_bits_of_one_mask_fill_the_same_oracle(tmp_path, flexbin):
    q, k, v = qkv(seed=8)
    prefix = [5, 17]
    hi = np.maximum(np.arange(LQ)[None, :] + (LK - LQ) + 1, np.array(prefix)[:, None])
    path = str(tmp_path / "two.h5")
    write_case(path, "bits", q, k, v, mask=prefix_lm(prefix))
    write_case(path, "intervals", q, k, v,
               mask_intervals=np.stack([np.zeros_like(hi), hi], -1)[:, None])
    rc, out, err = run(flexbin, "fill", path, "--in-place")
    assert rc == 0, out + err
    a, b = read_case(path, "bits"), read_case(path, "intervals")
    np.testing.assert_array_equal(a.out, b.out)
    np.testing.assert_array_equal(a.lse, b.lse)


def test_check_refuses_a_v2_file_holding_a_mask_naming_it(h5, flexbin):
    q, k, v = qkv()
    write_case(h5, "c", q, k, v, mask=M)
    _change(h5, lambda f: f.attrs.__setitem__("schema", SCHEMA_TERMS))
    rc, out, err = run(flexbin, "check", h5)
    assert rc != 0
    assert ("/cases/c: dataset 'mask': an explicit mask needs schema 'flexcheck-fixture-3' "
            "(the file says 'flexcheck-fixture-2')") in err, err


def test_our_kernels_run_a_case_with_an_explicit_term(h5, flexbin):
    """Both kernels read the explicit terms (docs/semantics.md section 8): `check --backend
    emu` runs them on a prefix-LM mask and an ALiBi bias and passes both cases."""
    q, k, v = qkv(b=1, hq=2, hkv=1, lq=40, lk=40, d=32, seed=1)
    write_case(h5, "prefix", q, k, v, mask=prefix_lm([7], 40, 40))
    write_case(h5, "alibi", q, k, v, causal=True, bias=alibi([0.5, 0.25], 40, 40))
    for kernel in ("1", "2"):
        rc, out, err = run(flexbin, "check", "--backend", "emu", "--kernel", kernel, h5)
        assert rc == 0, out + err
        lines = out.splitlines()
        for name in ("prefix", "alibi"):
            ln = line_of(lines, f" {name} ")
            assert not ln.startswith("SKIP ") and not ln.startswith("FAIL"), ln
        assert "failed in 0" in out, out


def test_a_packed_case_takes_a_mask_over_its_token_grid(tmp_path, flexbin):
    """vLLM's packed [T, H, D] with cu_seqlens: the mask is [1, Hm, T, T] over the packed
    tokens. All ones changes nothing (docs/semantics.md section 8: sequences still never see
    each other, and the oracle is bitwise the families'); one key masked in one row changes
    that row only."""
    t = 30
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((t, 2, 16)).astype(np.float32) for _ in range(3))
    cu = np.array([0, 9, 9, 30], np.int32)
    ones = np.ones((1, 1, t, t), bool)
    one_off = ones.copy()
    one_off[0, 0, 20, 12] = False  # sequence 2 (tokens 9..29): query 20 loses key 12
    path = str(tmp_path / "packed.h5")
    for name, m in (("plain", None), ("ones", ones), ("one_off", one_off)):
        write_case(path, name, q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, causal=True, mask=m)
    rc, out, err = run(flexbin, "fill", path, "--in-place")
    assert rc == 0, out + err
    plain, all_on, off = (read_case(path, n) for n in ("plain", "ones", "one_off"))
    assert all_on.mask.shape == (1, 1, t, t) and all_on.packed
    np.testing.assert_array_equal(all_on.out, plain.out)
    np.testing.assert_array_equal(all_on.lse, plain.lse)
    changed = np.argwhere((off.out != plain.out).any(-1))  # (b, h, q) rows
    assert [tuple(r) for r in changed] == [(0, 0, 20), (0, 1, 20)], changed


def test_check_refuses_a_compressed_mask_declaring_gigabytes_before_reading_it(h5, flexbin):
    """A mask of 131,072 x 131,072 keys stored gzip-compressed and never written (every chunk
    the fill value): a file of a few MB that declares 2 GiB. check --max-memory 1G refuses it
    from its shape, naming the dataset, its size, the budget and the flag (the child reading
    the file is held to 1 GiB of address space: a read would have failed otherwise)."""
    n = 131072
    q, k, v = qkv(b=1, hq=1, hkv=1, lq=n, lk=n, d=1, seed=2)
    write_case(h5, "c", q, k, v, mask_intervals=np.zeros((1, 1, n, 2), np.int32))
    with h5py.File(h5, "r+") as f:  # the intervals' form replaced by the packed one
        g = f["cases/c"]
        del g["mask_intervals"]
        ds = g.create_dataset("mask", (1, 1, n, n // 8), np.uint8, chunks=(1, 1, 256, n // 8),
                              compression="gzip")
        ds.attrs["bitorder"] = "little"
    assert os.path.getsize(h5) < 8 << 20
    rc, out, err = run(flexbin, "check", "--max-memory", "1G", h5)
    assert rc == 2, out + err
    assert ("/cases/c/mask: [1, 1, 131072, 16384] packed bits: about 2 GiB in memory whatever "
            "its storage, over the memory budget (--max-memory) of 1 GiB") in err, err
