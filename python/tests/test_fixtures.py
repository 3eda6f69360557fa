"""Tests of flexcheck.fixtures: the layout written (read back with plain h5py), every refusal,
atomicity, bfloat16 bit patterns, and, with FLEXCHECK_BIN set (make test does), the C reader
and `flexcheck check` on what was written.

numpy + h5py only. The torch tests skip without torch; the C tests skip only when
FLEXCHECK_BIN is unset. Run: PYTHONPATH=python python3 -m pytest python/tests
"""
import os
import re
import shutil
import stat
import struct

import h5py
import numpy as np
import pytest

import flexcheck
from flexcheck import add_tested, bfloat16_bits, bfloat16_to_float32, list_cases, read_case, \
    write_case
from _flexcli import run, snapshot

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETS = os.path.join(REPO, "fixtures", "sets")


def f32_bits(x):
    """The IEEE float32 bit pattern of x, from the struct module (not numpy, not the package)."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


def normal(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def qkv(b=2, hq=4, hkv=2, lq=9, lk=13, d=8, dv=6, dtype=np.float32, seed=0):
    return (normal((b, hq, lq, d), seed, dtype), normal((b, hkv, lk, d), seed + 1, dtype),
            normal((b, hkv, lk, dv), seed + 2, dtype))


def packed_qkv(t_q=10, t_k=14, hq=2, hkv=1, d=4, dtype=np.float32):
    return (normal((t_q, hq, d), 5, dtype), normal((t_k, hkv, d), 6, dtype),
            normal((t_k, hkv, d), 7, dtype))


CU_Q = [0, 3, 3, 10]
CU_K = [0, 5, 9, 14]


@pytest.fixture
def h5(tmp_path):
    return str(tmp_path / "f.h5")


# ---- the layout written ----

def test_dense_case_layout(h5):
    q, k, v = qkv()
    write_case(h5, "c01", q, k, v, causal=True, window=5, chunk=7, scale=0.5, q_block_size=16,
               kv_block_size=32, seed=42)
    with h5py.File(h5, "r") as f:
        assert f.attrs["schema"] == "flexcheck-fixture-1"
        assert "layout" not in f.attrs
        assert list(f["cases"]) == ["c01"]
        g = f["cases/c01"]
        assert g.attrs["dtype"] == "float32"
        assert (g.attrs["causal"], g.attrs["sliding_window"], g.attrs["chunk_size"]) == (1, 5, 7)
        for key in ("causal", "sliding_window", "chunk_size", "q_block_size", "kv_block_size",
                    "seed"):
            assert g.attrs[key].dtype == np.int64, key
        assert g.attrs["scale"].dtype == np.float64 and g.attrs["scale"] == 0.5
        assert (g.attrs["q_block_size"], g.attrs["kv_block_size"]) == (16, 32)
        assert g.attrs["seed"] == 42
        assert g.attrs["generator"] == f"flexcheck-python {flexcheck.__version__}"
        assert sorted(g) == ["k", "q", "v"]  # no out/lse: `flexcheck fill` computes them
        for name, x in (("q", q), ("k", k), ("v", v)):
            assert g[name].dtype == np.dtype("<f4") and g[name].shape == x.shape
            np.testing.assert_array_equal(g[name][()], x)


def test_a_uint64_seed_is_kept_exactly(h5):
    # The C reader keeps any int64 or uint64 seed exactly (docs/fixtures.md): a seed above
    # INT64_MAX, such as one a C generator wrote, is written back as uint64 and read the same.
    q, k, v = qkv()
    for seed in (2**63, 2**64 - 1, -(2**63), 7):
        write_case(h5, "c", q, k, v, seed=seed, overwrite=True)
        with h5py.File(h5, "r") as f:
            a = f["cases/c"].attrs["seed"]
            assert int(a) == seed and a.dtype == (np.uint64 if seed > 2**63 - 1 else np.int64)
        assert read_case(h5, "c").seed == seed


def test_defaults_and_bool_causal(h5):
    q, k, v = qkv(d=16)
    write_case(h5, "c", q, k, v)
    with h5py.File(h5, "r") as f:
        a = f["cases/c"].attrs
        assert (a["causal"], a["sliding_window"], a["chunk_size"]) == (0, 0, 0)
        assert a["scale"] == 0.25  # 1 / sqrt(16)
        assert (a["q_block_size"], a["kv_block_size"]) == (128, 128)
        assert "seed" not in a


def test_float16_inputs_are_stored_as_ieee_half(h5):
    q, k, v = qkv(dtype=np.float16)
    write_case(h5, "h", q, k, v)  # dtype inferred from q
    with h5py.File(h5, "r") as f:
        g = f["cases/h"]
        assert g.attrs["dtype"] == "float16"
        assert g["q"].dtype == np.dtype("<f2")
        np.testing.assert_array_equal(g["v"][()], v)


def test_float64_inputs_infer_float32_and_must_be_exact(h5):
    q, k, v = (x.astype(np.float64) for x in qkv())
    write_case(h5, "a", q, k, v)
    assert read_case(h5, "a").dtype == "float32"
    assert read_case(h5, "a").q.dtype == np.float32
    q2 = q.copy()
    q2[1, 2, 3, 4] = 0.1  # not a float32
    with pytest.raises(ValueError, match=r"q: value 0\.1 at \[1\]\[2\]\[3\]\[4\] is not "
                                         r"representable in float32"):
        write_case(h5, "b", q2, k, v)
    write_case(h5, "b", q2, k, v, round=True)
    assert read_case(h5, "b").q[1, 2, 3, 4] == np.float32(0.1)


def test_float32_values_for_a_float16_case(h5):
    q, k, v = qkv(dtype=np.float16)
    q32, k32, v32 = (x.astype(np.float32) for x in (q, k, v))
    write_case(h5, "a", q32, k32, v32, dtype="float16")
    c = read_case(h5, "a")
    assert c.dtype == "float16" and c.q.dtype == np.float16
    np.testing.assert_array_equal(c.q, q)
    k32[0, 1, 2, 3] = 1 + 2**-12  # between float16 neighbours 1 and 1 + 2^-10
    with pytest.raises(ValueError, match=r"k: value .* at \[0\]\[1\]\[2\]\[3\] is not "
                                         r"representable in float16"):
        write_case(h5, "b", q32, k32, v32, dtype="float16")
    v32[0, 0, 0, 0] = 70000.0  # past float16's largest, 65504
    with pytest.raises(ValueError, match=r"v: value 70000\.0 at \[0\]\[0\]\[0\]\[0\] overflows "
                                         r"float16"):
        write_case(h5, "b", q32, k32, v32, dtype="float16", round=True)
    k32[0, 1, 2, 3] = 1.0  # exact again: the overflow is named, not taken for a rounding
    with pytest.raises(ValueError, match=r"v: value 70000\.0 at \[0\]\[0\]\[0\]\[0\] overflows "
                                         r"float16"):
        write_case(h5, "b", q32, k32, v32, dtype="float16")


# ---- bfloat16 ----

# (float32 value, its bfloat16 bit pattern under round-to-nearest-even), worked out by hand:
# bfloat16 keeps float32's sign, exponent and top 7 mantissa bits, so around 1 its spacing is
# 2^-7 and a tie is a remainder of exactly 2^-8.
BF16_ROUNDING = [
    (1.0, 0x3F80),
    (1 + 2**-7, 0x3F81),              # exact
    (1 + 2**-8, 0x3F80),              # tie between 1 (mantissa 0, even) and 1 + 2^-7: down
    (1 + 3 * 2**-8, 0x3F82),          # tie between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up
    (1 + 2**-8 + 2**-20, 0x3F81),     # just past the tie: up
    (1 + 2**-7 + 2**-9, 0x3F81),      # below the tie: down
    (-(1 + 3 * 2**-8), 0xBF82),       # sign apart, the same
    (2 - 2**-9, 0x4000),              # carry into the exponent: 2.0
    (2.0**-149, 0x0000),              # float32's smallest subnormal: under half of 2^-133
    (3 * 2.0**-134, 0x0002),          # subnormal tie between 2^-133 (odd) and 2^-132: up
]


@pytest.mark.parametrize("value,bits", BF16_ROUNDING)
def test_bfloat16_round_to_nearest_even(value, bits):
    assert bfloat16_bits(np.array([value], np.float32))[0] == bits
    # The expected pattern, independently: the top half of the rounded value's float32 bits.
    assert f32_bits(float(bfloat16_to_float32(np.array([bits], np.uint16))[0])) == bits << 16


def test_bfloat16_special_values():
    big = np.frombuffer(struct.pack("<I", 0x7F7FFFFF), np.float32)  # float32's largest
    assert bfloat16_bits(big)[0] == 0x7F80  # rounds to +inf
    x = np.array([np.inf, -np.inf, -0.0, np.nan], np.float32)
    b = bfloat16_bits(x)
    assert list(b[:3]) == [0x7F80, 0xFF80, 0x8000]
    assert np.isnan(bfloat16_to_float32(b[3:]))[0]
    with pytest.raises(ValueError, match="not representable in bfloat16"):
        bfloat16_bits(np.array([1 + 2**-8], np.float32), round=False)
    with pytest.raises(ValueError, match="float32"):
        bfloat16_bits(np.array([1.0]))


def test_bfloat16_case_stored_as_float32(h5):
    q, k, v = qkv()
    q, k, v = (bfloat16_to_float32(bfloat16_bits(x)) for x in (q, k, v))
    write_case(h5, "b", q, k, v, dtype="bfloat16")
    with h5py.File(h5, "r") as f:
        g = f["cases/b"]
        assert g.attrs["dtype"] == "bfloat16" and g["q"].dtype == np.dtype("<f4")
        np.testing.assert_array_equal(g["k"][()], k)


def test_bfloat16_refuses_then_rounds_to_nearest_even(h5):
    q, k, v = qkv(b=1, hq=1, hkv=1, lq=1, lk=len(BF16_ROUNDING), d=1, dv=1)
    q[...] = 1.0
    k[0, 0, :, 0] = [value for value, _ in BF16_ROUNDING]
    v[...] = 0.5
    with pytest.raises(ValueError, match=r"k: value 1\.00390625 at \[0\]\[0\]\[2\]\[0\] is not "
                                         r"representable in bfloat16"):
        write_case(h5, "b", q, k, v, dtype="bfloat16")
    write_case(h5, "b", q, k, v, dtype="bfloat16", round=True)
    stored = read_case(h5, "b").k[0, 0, :, 0]
    assert [f32_bits(float(x)) for x in stored] == [bits << 16 for _, bits in BF16_ROUNDING]


# ---- packed inputs ----

def test_packed_inputs_are_stored_as_one_batch(h5):
    q, k, v = packed_qkv()
    write_case(h5, "p", q, k, v, causal=True, cu_seqlens_q=CU_Q, cu_seqlens_k=np.array(CU_K))
    with h5py.File(h5, "r") as f:
        g = f["cases/p"]
        assert g["q"].shape == (1, 2, 10, 4) and g["k"].shape == (1, 1, 14, 4)
        for name in ("cu_seqlens_q", "cu_seqlens_k"):
            assert g[name].dtype == np.dtype("<i4")
        np.testing.assert_array_equal(g["cu_seqlens_q"][()], CU_Q)
        np.testing.assert_array_equal(g["cu_seqlens_k"][()], CU_K)
        for t in range(10):  # token t of head h is row t of head h
            for h in range(2):
                np.testing.assert_array_equal(g["q"][0, h, t], q[t, h])
    c = read_case(h5, "p")
    assert c.packed and c.causal


def test_packed_inputs_in_batch_layout_with_b_1(h5):
    q, k, v = (x.transpose(1, 0, 2)[None] for x in packed_qkv())
    write_case(h5, "p", q, k, v, cu_seqlens_q=CU_Q, cu_seqlens_k=CU_K)
    assert read_case(h5, "p").q.shape == (1, 2, 10, 4)


@pytest.mark.parametrize("cu_q,cu_k", [
    ([0] * 20 + [10] * 20, [0] * 30 + [14] * 10),  # 39 sequences, 38 empty: more than tokens
    ([0, 0, 0], [0, 5, 14]),                       # no query at all (T_q = 0)
    ([0, 4, 10], [0, 0, 0]),                       # no key at all (T_k = 0)
])
def test_empty_sequences_are_legal_in_any_number(h5, cu_q, cu_k):
    """docs/fixtures.md asks cu_seqlens for int32 from 0, non-decreasing, ending at the token
    count, nothing more: an engine's batch may hold any number of empty sequences."""
    q, k, v = packed_qkv(t_q=cu_q[-1], t_k=cu_k[-1])
    write_case(h5, "p", q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    c = read_case(h5, "p")
    assert c.q.shape[2] == cu_q[-1] and c.k.shape[2] == cu_k[-1]
    np.testing.assert_array_equal(c.cu_seqlens_q, cu_q)
    np.testing.assert_array_equal(c.cu_seqlens_k, cu_k)


# ---- refusals: every ValueError names what is wrong ----

def dense_args():
    q, k, v = qkv()
    return dict(q=q, k=k, v=v)


def packed_args():
    q, k, v = packed_qkv()
    return dict(q=q, k=k, v=v, cu_seqlens_q=list(CU_Q), cu_seqlens_k=list(CU_K))


def bm_dict(nqb=1, width=1, b=1, h=1):
    return {"kv_num_blocks": np.ones((b, h, nqb), np.int32),
            "kv_indices": np.zeros((b, h, nqb, width), np.int32)}


def bm_with(**fields):
    """A change to the arguments: the one-block mask with some fields replaced."""
    return lambda a: {**a, "block_mask": {**bm_dict(), **fields}}


def q_with(value, dtype=np.float32):
    q, k, v = qkv(dtype=dtype)
    q = q.copy()
    q[0, 1, 2, 3] = value
    return dict(q=q, k=k, v=v)


WRITE_REFUSALS = [
    # (name, arguments, message), arguments applied over dense_args() or packed_args()
    ("q rank 2", lambda a: {**a, "q": a["q"][0, 0]}, r"q: shape \[9, 8\]: must be \[B, H, L, D\]"),
    ("v rank 5", lambda a: {**a, "v": a["v"][None]}, r"v: shape \[1, 2, 2, 13, 6\]"),
    ("rank 3 without cu", lambda a: {**a, "q": a["q"][0], "k": a["k"][0], "v": a["v"][0]},
     r"q: rank 3 is vLLM's packed \[T, H, D\] layout: give cu_seqlens_q"),
    ("Hq % Hkv", lambda a: {**a, "q": a["q"][:, :3]}, r"Hq = 3 is not a multiple of Hkv = 2"),
    ("D mismatch", lambda a: {**a, "k": a["k"][..., :7], "v": a["v"]},
     r"k: head dim 7, q has D = 8"),
    ("v heads", lambda a: {**a, "v": a["v"][:, :1]}, r"v: shape \[2, 1, 13, 6\] disagrees with k"),
    ("v length", lambda a: {**a, "v": a["v"][:, :, :12]}, r"v: shape .* disagrees with k"),
    ("batch", lambda a: {**a, "k": a["k"][:1], "v": a["v"][:1]}, r"k: batch 1, q has 2"),
    ("empty heads", lambda a: {**a, "q": a["q"][:, :0]}, r"q: shape \[2, 0, 9, 8\]: B, H and D"),
    ("integer q", lambda a: {**a, "q": a["q"].astype(np.int32)},
     r"q: dtype int32: must be floating point"),
    ("NaN in q", lambda a: q_with(np.nan), r"q: value nan at \[0\]\[1\]\[2\]\[3\] is not finite"),
    ("inf in q", lambda a: q_with(np.inf, np.float16),
     r"q: value inf at \[0\]\[1\]\[2\]\[3\] is not finite"),
    ("dtype", lambda a: {**a, "dtype": "float8"}, r"dtype 'float8': must be one of"),
    ("causal 2", lambda a: {**a, "causal": 2}, r"causal = 2"),
    ("window < 0", lambda a: {**a, "window": -1}, r"window = -1: must be in \[0, "),
    ("chunk float", lambda a: {**a, "chunk": 4.0}, r"chunk: 4\.0 is not an integer"),
    ("scale 0", lambda a: {**a, "scale": 0.0}, r"scale = 0\.0: must be finite and > 0"),
    ("scale nan", lambda a: {**a, "scale": float("nan")}, r"scale = nan"),
    ("q block 100", lambda a: {**a, "q_block_size": 100},
     r"q_block_size = 100: must be a power of two"),
    ("kv block 8", lambda a: {**a, "kv_block_size": 8},
     r"kv_block_size = 8: must be in \[16, 256\]"),
    ("seed", lambda a: {**a, "seed": 2**64}, r"seed = 18446744073709551616"),
    ("seed negative", lambda a: {**a, "seed": -(2**63) - 1}, r"seed = -9223372036854775809"),
    ("name /", lambda a: {**a, "name": "a/b"}, r"name 'a/b': not a valid group name"),
    ("name empty", lambda a: {**a, "name": ""}, r"name: must be a non-empty string"),
    ("name long", lambda a: {**a, "name": "x" * 128},
     r"name: 128 bytes, the reader takes at most 127"),
    ("layout empty", lambda a: {**a, "layout": ""}, r"layout: must be a non-empty string"),
    ("out alone", lambda a: {**a, "out": np.zeros((2, 4, 9, 6))}, r"out given without lse"),
    ("lse alone", lambda a: {**a, "lse": np.zeros((2, 4, 9))}, r"lse given without out"),
    ("out shape", lambda a: {**a, "out": np.zeros((2, 4, 9, 8)), "lse": np.zeros((2, 4, 9))},
     r"out: shape \[2, 4, 9, 8\]: the case needs \[B, Hq, Lq, Dv\] = \[2, 4, 9, 6\]"),
    ("lse shape", lambda a: {**a, "out": np.zeros((2, 4, 9, 6)), "lse": np.zeros((4, 9))},
     r"lse: shape \[4, 9\]: the case needs \[B, Hq, Lq\] = \[2, 4, 9\]$"),
    ("out ints", lambda a: {**a, "out": np.zeros((2, 4, 9, 6), int), "lse": np.zeros((2, 4, 9))},
     r"out: dtype int64: must be float64"),
    # a float32 oracle cannot meet `flexcheck check`'s relative 1e-10: refused, not widened
    ("out float32", lambda a: {**a, "out": np.zeros((2, 4, 9, 6), np.float32),
                               "lse": np.zeros((2, 4, 9))}, r"out: dtype float32: must be float64"),
    ("lse float32", lambda a: {**a, "out": np.zeros((2, 4, 9, 6)),
                               "lse": np.zeros((2, 4, 9), np.float32)},
     r"lse: dtype float32: must be float64"),
    ("bm not a mask", lambda a: {**a, "block_mask": [1, 2]},
     r"block_mask: list: give a dict or a torch BlockMask"),
    ("bm key", lambda a: {**a, "block_mask": {**bm_dict(), "kv_idx": 1}},
     r"block_mask: unknown key 'kv_idx'"),
    ("bm missing", lambda a: {**a, "block_mask": {"kv_num_blocks": np.ones((1, 1, 1), int)}},
     r"block_mask: kv_indices is missing"),
    ("bm full alone", bm_with(full_kv_num_blocks=np.ones((1, 1, 1), int)),
     r"full_kv_num_blocks and full_kv_indices: give both or neither"),
    ("bm rank", bm_with(kv_indices=np.zeros((1, 1, 1), int)),
     r"block_mask kv_indices: int64 of shape \[1, 1, 1\]: must be integer of rank 4"),
    ("bm float", lambda a: {**a, "block_mask": {**bm_dict(), "kv_num_blocks": np.ones((1, 1, 1))}},
     r"block_mask kv_num_blocks: float64 .*must be integer"),
    ("bm blocks", lambda a: {**a, "block_mask": bm_dict(nqb=2)},
     r"block_mask kv_num_blocks: shape \[1, 1, 2\]: must be "
     r"\[1 or B = 2, 1 or Hq = 4, ceil\(Lq / 128\) = 1\]"),
    ("bm heads", lambda a: {**a, "block_mask": bm_dict(h=2)}, r"1 or Hq = 4"),
    ("bm indices", bm_with(kv_indices=np.zeros((1, 2, 1, 1), int)),
     r"block_mask kv_indices: shape \[1, 2, 1, 1\] disagrees with kv_num_blocks \[1, 1, 1\]"),
    ("bm full shape", bm_with(kv_indices=np.zeros((1, 1, 1, 2), int),
                              full_kv_num_blocks=np.ones((1, 1, 1), int),
                              full_kv_indices=np.zeros((1, 1, 1, 1), int)),
     r"full_kv_num_blocks/full_kv_indices: shapes must equal"),
    ("bm size", lambda a: {**a, "block_mask": {**bm_dict(), "q_block_size": 48}},
     r"block_mask q_block_size = 48"),
    ("bm int32", bm_with(kv_indices=np.full((1, 1, 1, 1), 2**31)),
     r"block_mask kv_indices: values outside int32"),
]

PACKED_REFUSALS = [
    ("cu_q alone", lambda a: {**a, "cu_seqlens_k": None},
     r"cu_seqlens_q given without cu_seqlens_k"),
    ("cu_k alone", lambda a: {**a, "cu_seqlens_q": None},
     r"cu_seqlens_k given without cu_seqlens_q"),
    ("cu start", lambda a: {**a, "cu_seqlens_q": [1, 3, 3, 10]},
     r"cu_seqlens_q: starts at 1: must start at 0"),
    ("cu decreasing", lambda a: {**a, "cu_seqlens_k": [0, 5, 4, 14]},
     r"cu_seqlens_k: decreases at index 2 \(5 -> 4\): must be non-decreasing"),
    ("cu end q", lambda a: {**a, "cu_seqlens_q": [0, 3, 3, 9]},
     r"cu_seqlens_q: ends at 9: must end at the 10 tokens of q"),
    ("cu end k", lambda a: {**a, "cu_seqlens_k": [0, 5, 9, 15]},
     r"cu_seqlens_k: ends at 15: must end at the 14 tokens of k"),
    ("cu lengths", lambda a: {**a, "cu_seqlens_k": [0, 14]},
     r"cu_seqlens_k: 2 entries, cu_seqlens_q has 4"),
    ("cu one entry", lambda a: {**a, "cu_seqlens_q": [0]},
     r"cu_seqlens_q: shape \[1\]: must be \[R \+ 1\]"),
    ("cu floats", lambda a: {**a, "cu_seqlens_q": [0.0, 3.0, 3.0, 10.0]},
     r"cu_seqlens_q: dtype float64: must be integers"),
    ("packed B 2", lambda a: {**a, **{t: np.concatenate([a[t].transpose(1, 0, 2)[None]] * 2)
                                      for t in "qkv"}},
     r"q: batch 2: a packed case \(cu_seqlens\) has B = 1"),
    ("mixed ranks", lambda a: {**a, "q": a["q"].transpose(1, 0, 2)[None]},
     r"q, k, v: ranks 4, 3, 3"),
    ("packed out", lambda a: {**a, "out": np.zeros((10, 2, 5)), "lse": np.zeros((2, 10))},
     r"out: shape \[1, 2, 10, 5\]: the case needs .* = \[1, 2, 10, 4\] or \[T, Hq, Dv\]"),
]


@pytest.mark.parametrize("label,change,message", WRITE_REFUSALS,
                         ids=[r[0] for r in WRITE_REFUSALS])
def test_write_case_refusals(tmp_path, label, change, message):
    path = str(tmp_path / "f.h5")
    q, k, v = qkv(seed=9)
    write_case(path, "keep", q, k, v)
    before = snapshot(tmp_path)
    args = {"name": "new", **change(dense_args())}
    with pytest.raises(ValueError, match=message):
        write_case(path, args.pop("name"), args.pop("q"), args.pop("k"), args.pop("v"), **args)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("label,change,message", PACKED_REFUSALS,
                         ids=[r[0] for r in PACKED_REFUSALS])
def test_write_case_packed_refusals(tmp_path, label, change, message):
    path = str(tmp_path / "f.h5")
    args = change(packed_args())
    with pytest.raises(ValueError, match=message):
        write_case(path, "p", args.pop("q"), args.pop("k"), args.pop("v"), **args)
    assert os.listdir(tmp_path) == []  # nothing written, no temporary left


def test_packed_oracle_layouts_are_accepted(h5):
    a = packed_args()
    out = normal((10, 2, 4), 1, np.float64)
    lse = normal((2, 10), 2, np.float64)  # FlashAttention's varlen [Hq, T]
    write_case(h5, "p", a.pop("q"), a.pop("k"), a.pop("v"), out=out, lse=lse, **a)
    c = read_case(h5, "p")
    assert c.out.dtype == np.float64 and c.out.shape == (1, 2, 10, 4)
    np.testing.assert_array_equal(c.out[0, 1, 7], out[7, 1])
    np.testing.assert_array_equal(c.lse[0], lse)


def test_an_oracle_is_refused_when_round_changed_an_input(tmp_path):
    """out/lse are computed from the stored inputs (docs/fixtures.md, Writer): where round=True
    changed one, a caller's out/lse were computed from other inputs, and are refused, naming
    the first changed value; where rounding changed nothing they are stored."""
    path = str(tmp_path / "f.h5")
    q, k, v = qkv(dtype=np.float16)
    q32, k32, v32 = (x.astype(np.float32) for x in (q, k, v))
    out, lse = normal((2, 4, 9, 6), 1, np.float64), normal((2, 4, 9), 2, np.float64)
    write_case(path, "exact", q32, k32, v32, dtype="float16", round=True, out=out, lse=lse)
    c = read_case(path, "exact")
    np.testing.assert_array_equal(c.out, out)
    np.testing.assert_array_equal(c.lse, lse)
    before = snapshot(tmp_path)
    v32[1, 0, 4, 2] = 1 + 2**-12  # between float16 neighbours 1 and 1 + 2^-10: rounds to 1
    with pytest.raises(ValueError, match=r"round=True changed v\[1\]\[0\]\[4\]\[2\]: "
                                         r"1\.000244140625 -> 1\.0: out/lse must be computed"):
        write_case(path, "rounded", q32, k32, v32, dtype="float16", round=True, out=out, lse=lse)
    assert snapshot(tmp_path) == before
    write_case(path, "rounded", q32, k32, v32, dtype="float16", round=True)  # fill computes them
    assert read_case(path, "rounded").v[1, 0, 4, 2] == 1.0


def test_an_oracle_is_refused_when_round_changed_a_sink(tmp_path):
    path = str(tmp_path / "f.h5")
    q, k, v = qkv()
    out, lse = np.zeros((2, 4, 9, 6)), np.zeros((2, 4, 9))
    sinks = np.array([0.5, 1.0, -2.0, 0.1])  # 0.1 is no float32
    with pytest.raises(ValueError, match=r"round=True changed sinks\[3\]: 0\.1 -> "):
        write_case(path, "c", q, k, v, sinks=sinks, round=True, out=out, lse=lse)
    assert os.listdir(tmp_path) == []
    sinks[3] = 0.25
    write_case(path, "c", q, k, v, sinks=sinks, round=True, out=out, lse=lse)
    np.testing.assert_array_equal(read_case(path, "c").sinks, sinks)


# ---- files: create, append, overwrite, layout, atomicity ----

def test_append_and_overwrite(h5):
    q, k, v = qkv()
    write_case(h5, "b", q, k, v)
    write_case(h5, "a", q, k, v, causal=True)
    assert list_cases(h5) == ["a", "b"]
    with pytest.raises(ValueError, match=r"case 'a' exists; refusing to overwrite"):
        write_case(h5, "a", q, k, v)
    add_tested(h5, "a", "run1", np.zeros((2, 4, 9, 6), np.float32), producer="x")
    write_case(h5, "a", 2 * q, k, v, overwrite=True)
    c = read_case(h5, "a")
    np.testing.assert_array_equal(c.q, 2 * q)
    assert not c.causal and c.tested == {}  # outputs of the old inputs went with them
    np.testing.assert_array_equal(read_case(h5, "b").q, q)


def test_list_cases_in_byte_order(h5):
    q, k, v = qkv()
    for name in ("layer10", "Z", "layer02", "a"):
        write_case(h5, name, q, k, v)
    assert list_cases(h5) == ["Z", "a", "layer02", "layer10"]


def test_layout_attribute(h5):
    q, k, v = qkv()
    write_case(h5, "layer00", q, k, v, layout="gemma3")
    write_case(h5, "layer01", q, k, v, layout="gemma3")
    write_case(h5, "layer02", q, k, v)  # no layout given: the file's stays
    with h5py.File(h5, "r") as f:
        assert f.attrs["layout"] == "gemma3"
    assert read_case(h5, "layer02").layout == "gemma3"
    before = open(h5, "rb").read()
    with pytest.raises(ValueError, match=r"layout 'llama4' given, the file's is 'gemma3'"):
        write_case(h5, "layer03", q, k, v, layout="llama4")
    assert open(h5, "rb").read() == before


def test_refuses_files_that_are_not_fixtures(tmp_path):
    q, k, v = qkv()
    text = tmp_path / "notes.h5"
    text.write_text("not hdf5")
    with pytest.raises(ValueError, match="not an HDF5 file"):
        write_case(str(text), "c", q, k, v)
    other = str(tmp_path / "other.h5")
    with h5py.File(other, "w") as f:
        f.attrs["schema"] = "something-else"
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match=r"schema 'something-else': not a flexcheck-fixture-1"):
        write_case(other, "c", q, k, v)
    with pytest.raises(ValueError, match="no such file"):
        add_tested(str(tmp_path / "missing.h5"), "c", "l", np.zeros(1), producer="p")
    assert snapshot(tmp_path) == before


def test_a_failure_while_writing_leaves_the_file_untouched(tmp_path, monkeypatch):
    path = str(tmp_path / "f.h5")
    q, k, v = qkv()
    write_case(path, "a", q, k, v)
    before = snapshot(tmp_path)
    real = h5py.Group.create_dataset

    def failing(self, name, *args, **kwargs):
        if name == "v":
            raise OSError("disk full (simulated)")
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", failing)
    with pytest.raises(OSError, match="simulated"):
        write_case(path, "b", q, k, v)  # q and k were already written to the temporary
    assert snapshot(tmp_path) == before
    with pytest.raises(OSError, match="simulated"):
        write_case(str(tmp_path / "new.h5"), "b", q, k, v)
    assert snapshot(tmp_path) == before  # no new file, no temporary


def test_file_mode_is_kept_when_appending(h5):
    q, k, v = qkv()
    write_case(h5, "a", q, k, v)
    mode = stat.S_IMODE(os.stat(h5).st_mode)
    assert mode == 0o666 & ~_umask()  # not mkstemp's 0600: fixtures are shared
    os.chmod(h5, 0o640)
    write_case(h5, "b", q, k, v)
    assert stat.S_IMODE(os.stat(h5).st_mode) == 0o640


def test_writes_through_a_symlink_update_the_file_it_names(tmp_path):
    """The link stays a link, the file it names gets the write, and neither folder keeps a
    temporary file."""
    (tmp_path / "data").mkdir()
    (tmp_path / "links").mkdir()
    target, link = tmp_path / "data" / "f.h5", tmp_path / "links" / "link.h5"
    q, k, v = qkv()
    write_case(str(target), "a", q, k, v)
    os.symlink(os.path.join("..", "data", "f.h5"), link)  # relative, as links often are
    add_tested(str(link), "a", "t", np.zeros(OUT, np.float32), producer="p")
    write_case(link, "b", q, k, v, causal=True)  # os.PathLike too
    assert os.path.islink(link) and os.readlink(link) == os.path.join("..", "data", "f.h5")
    assert list_cases(str(target)) == ["a", "b"]
    assert list(read_case(str(target), "a").tested) == ["t"]
    assert sorted(os.listdir(tmp_path / "data")) == ["f.h5"]
    assert sorted(os.listdir(tmp_path / "links")) == ["link.h5"]
    # A link to nothing is refused (as the C writer refuses it) and stays as it was.
    dangling = tmp_path / "links" / "dangling.h5"
    os.symlink(os.path.join("..", "data", "missing.h5"), dangling)
    with pytest.raises(ValueError, match="a symbolic link to nothing"):
        write_case(str(dangling), "a", q, k, v)
    assert os.path.islink(dangling) and not (tmp_path / "data" / "missing.h5").exists()


def _umask():
    m = os.umask(0)
    os.umask(m)
    return m


def test_appending_to_files_written_by_the_c_tool(tmp_path):
    """The committed sets are written by flexcheck gen (fixed-length strings, int32
    attributes, HDF5 half types): read them, and add a case and an output under test."""
    path = str(tmp_path / "packed.h5")
    shutil.copyfile(os.path.join(SETS, "small-packed.h5"), path)
    names = list_cases(path)
    first = read_case(path, names[0])
    assert first.generator.startswith("flexcheck ") and first.out.dtype == np.float64
    assert first.packed and first.cu_seqlens_q.dtype == np.int32
    write_case(path, "zz_python", first.q, first.k, first.v, causal=first.causal,
               window=first.window, chunk=first.chunk, scale=first.scale,
               cu_seqlens_q=first.cu_seqlens_q, cu_seqlens_k=first.cu_seqlens_k,
               dtype=first.dtype, out=first.out, lse=first.lse)
    add_tested(path, names[1], "engine", read_case(path, names[1]).out, producer="p")
    assert list_cases(path) == names + ["zz_python"]
    with h5py.File(os.path.join(SETS, "small-packed.h5"), "r") as old, h5py.File(path, "r") as new:
        for name in names:
            for ds in ("q", "k", "v", "out", "lse", "cu_seqlens_q"):
                np.testing.assert_array_equal(new[f"cases/{name}/{ds}"][()],
                                              old[f"cases/{name}/{ds}"][()])
            assert dict(new[f"cases/{name}"].attrs) == dict(old[f"cases/{name}"].attrs)
    layout_file = str(tmp_path / "layout.h5")
    shutil.copyfile(os.path.join(SETS, "layout-gemma3.h5"), layout_file)
    c = read_case(layout_file, "layer00")
    assert c.layout == "gemma3"
    with pytest.raises(ValueError, match=r"the file's is 'gemma3'"):
        write_case(layout_file, "layer99", c.q, c.k, c.v, dtype=c.dtype, layout="other")


# ---- block masks ----

class FakeBlockMask:
    """What write_case reads of a torch BlockMask: four tensors and BLOCK_SIZE (Q, KV)."""

    def __init__(self, bm, block):
        for key, val in bm.items():
            setattr(self, key, val)
        self.full_kv_num_blocks = bm.get("full_kv_num_blocks")
        self.full_kv_indices = bm.get("full_kv_indices")
        self.BLOCK_SIZE = block


def test_block_mask_dict_and_blockmask_object(h5):
    q, k, v = qkv(b=2, hq=4, lq=40, lk=50)
    full = {"kv_num_blocks": np.array([[[1, 2, 1]]], np.int64),
            "kv_indices": np.array([[[[0, 0, 0, 0], [0, 1, 0, 0], [2, 0, 0, 0]]]], np.int64),
            "full_kv_num_blocks": np.zeros((1, 1, 3), np.int32),
            "full_kv_indices": np.zeros((1, 1, 3, 4), np.int32)}
    write_case(h5, "dict", q, k, v, q_block_size=16, kv_block_size=16, block_mask=full)
    partial_only = {"kv_num_blocks": np.ones((2, 4, 1), np.int16),
                    "kv_indices": np.zeros((2, 4, 1, 1), np.uint8)}
    write_case(h5, "obj", q, k, v, block_mask=FakeBlockMask(partial_only, (64, 128)))
    with h5py.File(h5, "r") as f:
        g = f["cases/dict/block_mask"]
        assert (g.attrs["q_block_size"], g.attrs["kv_block_size"]) == (16, 16)
        assert sorted(g) == sorted(full)
        for key in full:
            assert g[key].dtype == np.dtype("<i4")
            np.testing.assert_array_equal(g[key][()], full[key])
        g = f["cases/obj/block_mask"]
        assert (g.attrs["q_block_size"], g.attrs["kv_block_size"]) == (64, 128)
        assert sorted(g) == ["kv_indices", "kv_num_blocks"]  # no full blocks given
        assert f["cases/obj"].attrs["q_block_size"] == 128  # the case's own granularity


def ids_mask(counts, ids, full_counts=None, full_ids=None):
    """A one-head block mask of Lq 40, Lk 50 at blocks 16 (NQB 3, NKB 4), rows as given."""
    bm = {"kv_num_blocks": np.array([[counts]]), "kv_indices": np.array([[ids]]),
          "q_block_size": 16, "kv_block_size": 16}
    if full_counts is not None:
        bm.update(full_kv_num_blocks=np.array([[full_counts]]),
                  full_kv_indices=np.array([[full_ids]]))
    return bm


PAD = 99  # past a row's count: PyTorch leaves anything there, never read
BLOCK_VALUES = [
    # (name, mask, message or None when accepted); C's bmask_validate refuses the same
    ("count above width", ids_mask([1, 3, 1], [[0, PAD], [0, 1], [2, PAD]]),
     r"block_mask kv_num_blocks\[0\]\[0\]\[1\] = 3: must be in \[0, 2\]"),
    ("count negative", ids_mask([1, 1, -1], [[0], [1], [2]]),
     r"block_mask kv_num_blocks\[0\]\[0\]\[2\] = -1: must be in \[0, 1\]"),
    # any width is allowed (docs/fixtures.md), but no row lists more than the NKB = 4 blocks
    ("count above nkb", ids_mask([5, 0, 0], [[0, 1, 2, 3, 3, PAD]] * 3),
     r"kv_num_blocks\[0\]\[0\]\[0\] = 5: must be in \[0, 4\] \(row width 6, 4 kv blocks\)"),
    ("width above nkb", ids_mask([4, 0, 2], [[3, 2, 1, 0, PAD, PAD]] * 3), None),
    ("id past nkb", ids_mask([1, 2, 1], [[0, PAD], [1, 4], [2, PAD]]),
     r"block_mask kv_indices\[0\]\[0\]\[1\]\[1\] = 4: out of range \[0, 4\)"),
    ("id negative", ids_mask([1, 1, 1], [[0], [-1], [2]]),
     r"kv_indices\[0\]\[0\]\[1\]\[0\] = -1: out of range"),
    ("duplicate", ids_mask([1, 3, 1], [[0, PAD, PAD], [2, 1, 2], [3, 3, PAD]]),
     r"block_mask kv_indices\[0\]\[0\]\[1\]\[2\] = 2: block listed twice in the row"),
    ("padding repeats", ids_mask([1, 1, 1], [[0, 0], [1, 1], [2, -7]]), None),
    ("full count", ids_mask([1, 1, 1], [[0], [1], [2]], [0, 2, 0], [[PAD], [PAD], [PAD]]),
     r"block_mask full_kv_num_blocks\[0\]\[0\]\[1\] = 2: must be in \[0, 1\]"),
    ("full id", ids_mask([0, 0, 0], [[PAD]] * 3, [0, 0, 1], [[PAD], [PAD], [7]]),
     r"block_mask full_kv_indices\[0\]\[0\]\[2\]\[0\] = 7: out of range \[0, 4\)"),
    ("partial and full", ids_mask([1, 2, 0], [[0, PAD], [1, 3], [PAD, PAD]], [1, 1, 2],
                                  [[1, PAD], [3, PAD], [0, 1]]),
     r"block_mask full_kv_indices\[0\]\[0\]\[1\]\[0\] = 3: block listed twice in the row"),
    ("partial and full apart", ids_mask([1, 2, 0], [[0, PAD], [1, 3], [PAD, PAD]], [1, 1, 2],
                                        [[1, PAD], [2, PAD], [0, 1]]), None),
]


@pytest.mark.parametrize("name,bm,message", BLOCK_VALUES, ids=[b[0] for b in BLOCK_VALUES])
def test_block_mask_counts_and_ids(tmp_path, name, bm, message):
    path = str(tmp_path / "f.h5")
    q, k, v = qkv(b=1, hq=2, hkv=1, lq=40, lk=50)
    if message is None:
        write_case(path, "c", q, k, v, block_mask=bm)
        got = read_case(path, "c").block_mask
        for key in ("kv_num_blocks", "kv_indices"):
            np.testing.assert_array_equal(got[key], bm[key])
        return
    with pytest.raises(ValueError, match=message):
        write_case(path, "c", q, k, v, block_mask=bm)
    assert os.listdir(tmp_path) == []
    # add_tested checks a producer's mask the same way, against the case's Lk
    write_case(path, "c", q, k, v)
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match=message):
        add_tested(path, "c", "t", np.zeros((1, 2, 40, 6)), producer="p", block_mask=bm)
    assert snapshot(tmp_path) == before


REFUSED_VALUES = [b for b in BLOCK_VALUES if b[2]]
ACCEPTED_VALUES = [b for b in BLOCK_VALUES if not b[2]]


@pytest.mark.parametrize("name,bm,message", REFUSED_VALUES, ids=[b[0] for b in REFUSED_VALUES])
def test_the_c_reader_refuses_the_same_block_ids(tmp_path, flexbin, name, bm, message):
    """The refusals above are the C reader's: the same mask put in the file with h5py makes
    `flexcheck fill` name the same dataset, index and value (rows wider than NKB included: both
    sides take any width)."""
    path = str(tmp_path / "f.h5")
    q, k, v = qkv(b=1, hq=2, hkv=1, lq=40, lk=50)
    with pytest.raises(ValueError) as refused:
        write_case(path, "c", q, k, v, block_mask=bm)
    named = str(refused.value).split("block_mask ", 1)[1].split(":", 1)[0]  # kv_indices[..] = x
    write_case(path, "c", q, k, v)
    with h5py.File(path, "r+") as f:
        g = f["cases/c"].create_group("block_mask")
        g.attrs["q_block_size"], g.attrs["kv_block_size"] = 16, 16
        for key, val in bm.items():
            if key.endswith(("blocks", "indices")):
                g.create_dataset(key, data=val.astype(np.int32))
    rc, out, err = run(flexbin, "fill", path, "--out", str(tmp_path / "filled.h5"))
    assert rc == 2 and f"/cases/c/block_mask: {named}:" in err, out + err


@pytest.mark.parametrize("name,bm,message", ACCEPTED_VALUES, ids=[b[0] for b in ACCEPTED_VALUES])
def test_the_c_reader_accepts_the_same_block_masks(tmp_path, flexbin, name, bm, message):
    """What Python writes, the C reader takes (rows wider than NKB included): fill reads it,
    and check judges the mask (these masks are well formed, not sound for the dense case)."""
    path = str(tmp_path / "f.h5")
    q, k, v = qkv(b=1, hq=2, hkv=1, lq=40, lk=50)
    write_case(path, "c", q, k, v, block_mask=bm)
    filled = str(tmp_path / "filled.h5")
    rc, out, err = run(flexbin, "fill", path, "--out", filled)
    assert rc == 0, out + err
    rc, out, err = run(flexbin, "check", filled)
    assert rc in (0, 1) and "1 files, 0 rejected" in out, out + err
    assert "block mask sound" in out or "block_mask is not sound" in out, out + err


# ---- add_tested ----

@pytest.fixture
def case_file(h5):
    q, k, v = qkv()  # B 2, Hq 4, Lq 9, Dv 6
    write_case(h5, "c", q, k, v)
    return h5


OUT = (2, 4, 9, 6)
LSE = (2, 4, 9)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_tested_float_outputs_are_stored_as_given(case_file, dtype):
    out = normal(OUT, 3, dtype)
    out[0, 0, 0, 0], out[1, 3, 8, 5] = np.nan, -np.inf  # allowed: the gate judges them
    lse = normal(LSE, 4, np.float32)
    add_tested(case_file, "c", "engine-1.0_x", out, producer="engine 1.0, H100", lse=lse,
               out_rerun=out)
    with h5py.File(case_file, "r") as f:
        g = f["cases/c/tested/engine-1.0_x"]
        assert g.attrs["producer"] == "engine 1.0, H100"
        assert g["out"].dtype == dtype and g["out_rerun"].dtype == dtype
        assert "encoding" not in g["out"].attrs
        np.testing.assert_array_equal(g["out"][()], out)
        assert g["lse"].dtype == np.float32
    t = read_case(case_file, "c").tested["engine-1.0_x"]
    assert t.encoding == np.dtype(dtype).name and t.producer == "engine 1.0, H100"


def test_tested_bfloat16_bit_patterns(case_file):
    x = normal(OUT, 3)
    x[0, 0, 0, 0] = np.nan
    bits = bfloat16_bits(x)
    add_tested(case_file, "c", "bf", bits, producer="p", encoding="bfloat16", out_rerun=bits)
    with h5py.File(case_file, "r") as f:
        for name in ("out", "out_rerun"):
            ds = f[f"cases/c/tested/bf/{name}"]
            assert ds.dtype == np.dtype("<u2") and ds.attrs["encoding"] == "bfloat16"
            np.testing.assert_array_equal(ds[()], bits)
    t = read_case(case_file, "c").tested["bf"]
    assert t.encoding == "bfloat16"
    np.testing.assert_array_equal(bfloat16_to_float32(t.out), bfloat16_to_float32(bits))


def test_tested_packed_layouts(h5):
    a = packed_args()
    write_case(h5, "p", a.pop("q"), a.pop("k"), a.pop("v"), **a)
    out = normal((10, 2, 4), 1)  # vLLM's [T, Hq, Dv]
    lse = normal((2, 10), 2)     # FlashAttention's varlen [Hq, T]
    add_tested(h5, "p", "fa", out, producer="fa2", lse=lse)
    t = read_case(h5, "p").tested["fa"]
    assert t.out.shape == (1, 2, 10, 4) and t.lse.shape == (1, 2, 10)
    np.testing.assert_array_equal(t.out[0, 1, 3], out[3, 1])
    np.testing.assert_array_equal(t.lse[0], lse)
    add_tested(h5, "p", "dense", t.out, producer="p", lse=t.lse)  # the stored layout works too


def test_tested_block_mask(case_file):
    bm = bm_dict()
    add_tested(case_file, "c", "l", np.zeros(OUT, np.float32), producer="p", block_mask=bm)
    t = read_case(case_file, "c").tested["l"]
    assert (t.block_mask["q_block_size"], t.block_mask["kv_block_size"]) == (128, 128)
    np.testing.assert_array_equal(t.block_mask["kv_num_blocks"], bm["kv_num_blocks"])


def test_tested_label_overwrite(case_file):
    add_tested(case_file, "c", "l", np.zeros(OUT, np.float32), producer="first")
    before = open(case_file, "rb").read()
    with pytest.raises(ValueError, match=r"/cases/c/tested/l exists; refusing to overwrite"):
        add_tested(case_file, "c", "l", np.ones(OUT, np.float32), producer="second")
    assert open(case_file, "rb").read() == before
    add_tested(case_file, "c", "l", np.ones(OUT, np.float32), producer="second", overwrite=True)
    t = read_case(case_file, "c").tested["l"]
    assert t.producer == "second" and (t.out == 1).all()


def test_tested_labels_of_64_characters_and_more_than_64_outputs(case_file):
    # Any number of outputs per case (docs/fixtures.md): 65 are written and read back.
    out = np.zeros(OUT, np.float16)
    add_tested(case_file, "c", "A" * 64, out, producer="p")
    for i in range(64):
        add_tested(case_file, "c", f"l{i:02d}", out, producer="p")
    assert len(read_case(case_file, "c").tested) == 65


TESTED_REFUSALS = [
    ("empty label", dict(label=""), r"label '': must match"),
    ("label /", dict(label="a/b"), r"label 'a/b': must match"),
    ("label space", dict(label="a b"), r"label 'a b': must match"),
    ("label 65", dict(label="x" * 65), r"must match \[A-Za-z0-9._-\]\{1,64\}"),
    ("producer empty", dict(producer=""), r"producer: must be a non-empty string"),
    ("producer none", dict(producer=None), r"producer: must be a non-empty string"),
    ("producer long", dict(producer="p" * 256), r"producer: 256 bytes"),
    ("no case", dict(case="nope"), r"no case 'nope'"),
    ("out shape", dict(out=np.zeros((2, 4, 9, 8), np.float32)),
     r"out: shape \[2, 4, 9, 8\]: the case needs \[B, Hq, Lq, Dv\] = \[2, 4, 9, 6\]$"),
    ("out packed on dense", dict(out=np.zeros((9, 4, 6), np.float32)), r"out: shape \[9, 4, 6\]"),
    ("out ints", dict(out=np.zeros(OUT, np.int32)), r"out: dtype int32: must be float16"),
    ("uint16 no encoding", dict(out=np.zeros(OUT, np.uint16)),
     r"out: uint16 data: bfloat16 bit patterns need encoding='bfloat16'"),
    ("encoding on floats", dict(encoding="bfloat16"), r"out: encoding='bfloat16' names uint16"),
    ("encoding unknown", dict(encoding="fp8"), r"encoding 'fp8': the only encoding"),
    ("lse shape", dict(lse=np.zeros((2, 4, 8), np.float32)), r"lse: shape \[2, 4, 8\]"),
    ("lse packed on dense", dict(lse=np.zeros((4, 9), np.float32)), r"lse: shape \[4, 9\]"),
    ("lse ints", dict(lse=np.zeros(LSE, np.int64)), r"lse: dtype int64"),
    ("rerun type", dict(out_rerun=np.zeros(OUT, np.float16)),
     r"out_rerun: stored as float16, out as float32: a rerun is stored as the run"),
    ("rerun shape", dict(out_rerun=np.zeros((2, 4, 9, 5), np.float32)), r"out_rerun: shape"),
    ("block mask", dict(block_mask={"kv_num_blocks": np.ones((1, 1, 2), int),
                                    "kv_indices": np.zeros((1, 1, 2, 1), int)}),
     r"block_mask kv_num_blocks: shape \[1, 1, 2\]"),
]


@pytest.mark.parametrize("label,change,message", TESTED_REFUSALS,
                         ids=[r[0] for r in TESTED_REFUSALS])
def test_add_tested_refusals(tmp_path, label, change, message):
    path = str(tmp_path / "f.h5")
    q, k, v = qkv()
    write_case(path, "c", q, k, v)
    add_tested(path, "c", "kept", np.zeros(OUT, np.float32), producer="p")
    before = snapshot(tmp_path)
    args = {**dict(case="c", label="new", out=np.zeros(OUT, np.float32), producer="p"), **change}
    with pytest.raises(ValueError, match=message):
        add_tested(path, args.pop("case"), args.pop("label"), args.pop("out"), **args)
    assert snapshot(tmp_path) == before


def test_other_refusals(case_file):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"^q: missing$"):
        write_case(case_file, "x", None, k, v)
    with pytest.raises(ValueError, match=r"scale: 'big' is not a number"):
        write_case(case_file, "x", q, k, v, scale="big")
    with pytest.raises(ValueError, match=r"case 3: must be a case name"):
        add_tested(case_file, 3, "l", np.zeros(OUT), producer="p")
    with pytest.raises(ValueError, match=r"no case 'nope'"):
        read_case(case_file, "nope")
    with pytest.raises(ValueError, match=r"give uint16 bit patterns"):
        bfloat16_to_float32(np.zeros(3, np.int16))
    with h5py.File(case_file, "r+") as f:  # a case some other tool left without k, then v
        f.create_group("cases/broken").create_dataset("q", data=q)
    with pytest.raises(ValueError, match=r"/cases/broken/k: missing or not \[B, H, L, D\]"):
        add_tested(case_file, "broken", "l", np.zeros(OUT), producer="p")
    with h5py.File(case_file, "r+") as f:
        f["cases/broken"].create_dataset("k", data=k)
    with pytest.raises(ValueError, match=r"/cases/broken/v: missing or not \[B, H, L, D\]"):
        add_tested(case_file, "broken", "l", np.zeros(OUT), producer="p")


# ---- the C reader and `flexcheck check` (FLEXCHECK_BIN, set by make test) ----


def gen(flexbin, path, *args):
    rc, out, err = run(flexbin, "gen", "--case", "--out", path, "--d", "16", "--qb", "16",
                       "--kb", "16", *args)
    assert rc == 0, out + err


def check_lines(flexbin, path, expect_rc):
    rc, out, err = run(flexbin, "check", "--exact-blocks", path)
    assert rc == expect_rc, f"check exited {rc}:\n{out}{err}"
    return out.splitlines()


def line_of(lines, path, case, label=None):
    what = f"{path} {case} " + (f"tested/{label} " if label else "")
    found = [ln for ln in lines if what in ln and (label or "tested/" not in ln)]
    assert len(found) == 1, f"no single line for {what!r} in:\n" + "\n".join(lines)
    return found[0]


def rewrite(path, c, name, **extra):
    """Case c written back through write_case under `name`, its stored oracle passed in."""
    write_case(path, name, c.q, c.k, c.v, causal=c.causal, window=c.window, chunk=c.chunk,
               scale=c.scale, cu_seqlens_q=c.cu_seqlens_q, cu_seqlens_k=c.cu_seqlens_k,
               block_mask=c.block_mask, dtype=c.dtype, q_block_size=c.q_block_size,
               kv_block_size=c.kv_block_size, seed=c.seed, out=c.out, lse=c.lse, **extra)


def test_check_passes_a_rewritten_case_and_judges_its_outputs(tmp_path, flexbin):
    path = str(tmp_path / "gen.h5")
    gen(flexbin, path, "--dtype", "float16", "--hq", "2", "--hkv", "1", "--lq", "40", "--lk",
        "50", "--causal", "--window", "9", "--seed", "3")
    c = read_case(path, "c0001")
    rewrite(path, c, "py_copy")  # appended to the C tool's file
    add_tested(path, "py_copy", "rounded", c.out.astype(np.float16), producer="oracle, f16",
               lse=c.lse.astype(np.float32), out_rerun=c.out.astype(np.float16))
    lines = check_lines(flexbin, path, 0)
    assert line_of(lines, path, "py_copy").startswith("PASS ")
    assert line_of(lines, path, "py_copy", "rounded").startswith("PASS ")

    bad = c.out.astype(np.float32)
    bad[0, 1, 5, 2] = np.nan
    add_tested(path, "py_copy", "nan", bad, producer="oracle with a NaN")
    lines = check_lines(flexbin, path, 1)
    ln = line_of(lines, path, "py_copy", "nan")
    assert ln.startswith("FAIL ") and ": H3 " in ln and "(0, 1, 5, 2)" in ln, ln
    assert line_of(lines, path, "py_copy", "rounded").startswith("PASS ")


def test_check_passes_a_packed_bfloat16_case_given_in_vllm_layout(tmp_path, flexbin):
    src, path = str(tmp_path / "gen.h5"), str(tmp_path / "py.h5")
    gen(flexbin, src, "--dtype", "bfloat16", "--hq", "2", "--hkv", "1", "--packed", "0,5,5,30",
        "--packed-k", "0,9,20,41", "--causal", "--chunk", "8", "--seed", "4")
    c = read_case(src, "c0001")
    tokens = [x[0].transpose(1, 0, 2) for x in (c.q, c.k, c.v, c.out)]  # [T, H, D]
    write_case(path, "packed", *tokens[:3], causal=True, chunk=8, scale=c.scale,
               cu_seqlens_q=c.cu_seqlens_q, cu_seqlens_k=c.cu_seqlens_k, dtype="bfloat16",
               q_block_size=16, kv_block_size=16, block_mask=c.block_mask, out=tokens[3],
               lse=c.lse[0])
    assert read_case(path, "packed").dtype == "bfloat16"
    out_bits = bfloat16_bits(tokens[3].astype(np.float32))
    add_tested(path, "packed", "bf16", out_bits, encoding="bfloat16", producer="oracle, bf16",
               lse=c.lse[0].astype(np.float32), out_rerun=out_bits)
    lines = check_lines(flexbin, path, 0)
    assert line_of(lines, path, "packed").startswith("PASS ")
    ln = line_of(lines, path, "packed", "bf16")
    assert ln.startswith("PASS ") and "stored as bfloat16" in ln, ln


def one_element_attrs(path):
    """Every attribute of the file stored again as a one-element array of its value (strings
    as fixed-length bytes), as some writers store scalars."""
    with h5py.File(path, "r+") as f:
        objs = [f]
        f.visit(lambda name: objs.append(f[name]))
        for o in objs:
            for key in list(o.attrs):
                val = o.attrs[key]
                arr = np.array([val.encode() if isinstance(val, str) else val])
                del o.attrs[key]
                o.attrs[key] = arr


def scalars(c):
    """What read_case read from attributes, as plain Python values and types."""
    fields = ("name", "dtype", "causal", "window", "chunk", "scale", "q_block_size",
              "kv_block_size", "generator", "seed", "layout", "softcap", "schema")
    got = {f: (getattr(c, f), type(getattr(c, f))) for f in fields}
    got["bm"] = (c.block_mask["q_block_size"], c.block_mask["kv_block_size"])
    got["tested"] = {t.label: (t.producer, type(t.producer), t.encoding)
                     for t in c.tested.values()}
    return got


def test_one_element_array_attributes_read_as_their_value(tmp_path, flexbin):
    """Attributes stored as one-element arrays are the C reader's scalars (fix_h5.c
    attr_open): `flexcheck check` passes the file, read_case reads the same values as from
    scalars, and add_tested / write_case append to it."""
    path = str(tmp_path / "gen.h5")
    gen(flexbin, path, "--dtype", "bfloat16", "--lq", "40", "--lk", "50", "--causal",
        "--window", "9", "--seed", "3", "--softcap", "20")
    c = read_case(path, "c0001")
    add_tested(path, "c0001", "bf", bfloat16_bits(c.out.astype(np.float32)), producer="oracle",
               encoding="bfloat16")
    want = scalars(read_case(path, "c0001"))
    one_element_attrs(path)
    with h5py.File(path, "r") as f:
        assert f.attrs["schema"].shape == (1,) and f["cases/c0001"].attrs["causal"].shape == (1,)
    assert check_lines(flexbin, path, 0)  # the C reader takes them
    assert scalars(read_case(path, "c0001")) == want
    add_tested(path, "c0001", "again", c.out.astype(np.float32), producer="p",
               block_mask=c.block_mask)
    write_case(path, "c0002", c.q, c.k, c.v, dtype=c.dtype, causal=True)
    assert list_cases(path) == ["c0001", "c0002"]
    assert read_case(path, "c0001").tested["again"].producer == "p"


@pytest.mark.parametrize("where,key,value,message", [
    ("/", "schema", np.array([b"flexcheck-fixture-1"] * 2), r": /: attribute 'schema': 2 values"),
    ("/cases/c", "dtype", np.array([], "S7"), r": /cases/c: attribute 'dtype': 0 values"),
    ("/cases/c", "scale", np.array([[0.5, 0.5]]), r": /cases/c: attribute 'scale': 2 values"),
    ("/cases/c", "causal", None, r": /cases/c: missing attribute 'causal'"),
])
def test_attributes_of_other_than_one_value_are_refused(h5, where, key, value, message):
    write_case(h5, "c", *qkv())
    with h5py.File(h5, "r+") as f:
        del f[where].attrs[key]
        if value is not None:
            f[where].attrs[key] = value
    with pytest.raises(ValueError, match=re.escape(h5) + message):
        read_case(h5, "c")


def test_check_passes_a_dense_float32_case_with_batch_and_dv(tmp_path, flexbin):
    src, path = str(tmp_path / "gen.h5"), str(tmp_path / "py.h5")
    gen(flexbin, src, "--b", "2", "--hq", "4", "--hkv", "2", "--lq", "33", "--lk", "47",
        "--dv", "8", "--window", "5", "--scale", "0.3", "--seed", "5")
    c = read_case(src, "c0001")
    rewrite(path, c, "dense", layout=None)
    add_tested(path, "dense", "f32", c.out.astype(np.float32), producer="oracle, f32")
    lines = check_lines(flexbin, path, 0)
    assert line_of(lines, path, "dense").startswith("PASS ")
    assert line_of(lines, path, "dense", "f32").startswith("PASS ")


# ---- large layers: chunked datasets, written block by block ----

from flexcheck import fixtures as fx  # noqa: E402  (its chunk constants are patched below)

RSS_SCRIPT = os.path.join(REPO, "ci", "write_rss.py")


def tiny_chunks(monkeypatch, rows):
    """Chunks (and the blocks read for them) of `rows` rows (fewer where L is smaller), so that
    small tensors are written across many blocks."""
    monkeypatch.setattr(fx, "_chunk_rows", lambda length, row_bytes: min(rows, length))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
@pytest.mark.parametrize("args", [
    # write_case of a dense bfloat16 layer held as float32 (128 MiB), of a packed float16 one
    # (96 MiB), add_tested of a packed float32 output (128 MiB, plus a 1 MiB LSE)
    ["--hq", "2", "--hkv", "1", "--len", "65536", "--dtype", "bfloat16"],
    ["--hq", "4", "--hkv", "2", "--len", "49152", "--dtype", "float16", "--packed"],
    ["--hq", "4", "--len", "65536", "--dtype", "float32", "--packed", "--what", "add_tested"],
], ids=["dense-bf16-128MiB", "packed-f16-96MiB", "add_tested-packed-f32-128MiB"])
def test_a_large_layer_is_not_held_twice(tmp_path, args):
    """The writer holds about a chunk, not a converted copy of the layer: its peak resident
    memory above the inputs' stays under 40 MiB (the writer before chunking, measured by the
    same script: 624.4, 204.9 and 128.0 MiB)."""
    import subprocess
    import sys
    p = subprocess.run([sys.executable, RSS_SCRIPT, "--dir", str(tmp_path), "--dim", "128",
                        *args], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    assert p.returncode == 0, p.stdout + p.stderr
    m = re.search(r"peak_above_MiB=([0-9.]+)", p.stdout)
    assert m, p.stdout
    assert float(m.group(1)) < 40, p.stdout


def test_datasets_are_chunked_by_head_and_rows(h5):
    """[1, 1, R, D] chunks ([1, 1, R] for an LSE), uncompressed, R a multiple of 256 rows near
    1 MiB and never more than L; empty datasets contiguous."""
    q, k, v = qkv(b=1, hq=2, hkv=1, lq=5000, lk=300, d=128, dv=64)
    out, lse = np.zeros((1, 2, 5000, 64)), np.zeros((1, 2, 5000))
    write_case(h5, "f32", q, k, v, out=out, lse=lse)
    write_case(h5, "f16", q.astype(np.float16), k.astype(np.float16), v.astype(np.float16))
    write_case(h5, "empty", q[:, :, :0], k[:, :, :0], v[:, :, :0])
    add_tested(h5, "f32", "bits", bfloat16_bits(np.zeros((1, 2, 5000, 64), np.float32)),
               encoding="bfloat16", producer="p", lse=np.zeros((1, 2, 5000), np.float32),
               out_rerun=bfloat16_bits(np.zeros((1, 2, 5000, 64), np.float32)))
    with h5py.File(h5, "r") as f:
        chunks = {name: f[name].chunks for name in (
            "cases/f32/q", "cases/f32/k", "cases/f32/v", "cases/f32/out", "cases/f32/lse",
            "cases/f16/q", "cases/f16/k", "cases/f32/tested/bits/out",
            "cases/f32/tested/bits/out_rerun", "cases/f32/tested/bits/lse")}
        for name in chunks:
            assert f[name].compression is None, name
        assert [f[f"cases/empty/{t}"].chunks for t in "qkv"] == [None, None, None]
    assert chunks == {
        "cases/f32/q": (1, 1, 2048, 128),  # 2048 rows of 512 bytes: 1 MiB
        "cases/f32/k": (1, 1, 300, 128),   # never more than L
        "cases/f32/v": (1, 1, 300, 64),
        "cases/f32/out": (1, 1, 2048, 64),  # float64, Dv 64: 512-byte rows
        "cases/f32/lse": (1, 1, 5000),
        "cases/f16/q": (1, 1, 4096, 128),
        "cases/f16/k": (1, 1, 300, 128),
        "cases/f32/tested/bits/out": (1, 1, 5000, 64),  # uint16: 8192 rows make 1 MiB
        "cases/f32/tested/bits/out_rerun": (1, 1, 5000, 64),
        "cases/f32/tested/bits/lse": (1, 1, 5000),
    }
    assert fx._chunk_rows(10**6, 3 * 128) == 2560        # 1 MiB / 384 bytes, down to 256s
    assert fx._chunk_rows(10**6, 4096 * 8) == 256        # wide rows: one 256-row step at least
    assert fx._chunk_rows(10**6, 4) == 262144


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_values_are_written_bit_exactly_across_many_blocks(tmp_path, monkeypatch, packed, dtype):
    tiny_chunks(monkeypatch, 3)
    path = str(tmp_path / "f.h5")
    npt = np.float16 if dtype == "float16" else np.float32
    if packed:
        q, k, v = packed_qkv(hq=4, hkv=2, dtype=npt)
        extra = dict(cu_seqlens_q=CU_Q, cu_seqlens_k=CU_K)
    else:
        q, k, v = qkv(dtype=npt)
        extra = {}
    if dtype == "bfloat16":
        q, k, v = (bfloat16_to_float32(bfloat16_bits(x)) for x in (q, k, v))
    k = k.astype(k.dtype.newbyteorder(">"))  # big-endian: converted value for value
    v = np.asfortranarray(v)                # any strides
    write_case(path, "c", q, k, v, dtype=dtype, **extra)
    c = read_case(path, "c")
    for got, x in ((c.q, q), (c.k, k), (c.v, v)):
        want = np.ascontiguousarray(fx._unpack(x) if packed else x, npt)
        assert got.dtype == npt
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))  # bit for bit
    with h5py.File(path, "r") as f:
        assert f["cases/c/q"].chunks[2] == 3 and f["cases/c/q"].id.get_num_chunks() > 8
    # outputs under test: NaN, infinities and bit patterns kept, packed layouts unpacked
    shape, lse_shape = ((10, 4, 4), (4, 10)) if packed else ((2, 4, 9, 6), (2, 4, 9))
    for store in (np.float16, np.float32, np.float64, "bits"):
        x = normal(shape, 3, np.float32)
        x.reshape(-1)[[0, 5, 17]] = [np.nan, np.inf, -np.inf]
        data = bfloat16_bits(x) if store == "bits" else x.astype(store)
        lse = normal(lse_shape, 4, np.float32)
        add_tested(path, "c", "t", data, lse=lse, producer="p", overwrite=True,
                   encoding="bfloat16" if store == "bits" else None)
        tt = read_case(path, "c").tested["t"]
        want = fx._unpack(data) if packed else data
        assert tt.out.dtype == want.dtype
        np.testing.assert_array_equal(tt.out.view(np.uint8), want.view(np.uint8))
        np.testing.assert_array_equal(tt.lse, lse[np.newaxis] if packed else lse)
    # A bfloat16 tensor (torch, ml_dtypes) is read widened to float32, each block stored back
    # as its bit patterns: exact, NaN payloads and signed zeros included.
    bits = np.array([0x7FC1, 0xFFA0, 0x7F80, 0x8000, 0x0001, 0x3F81, 0xFF7F], np.uint16)
    np.testing.assert_array_equal(fx._bits_stored(bfloat16_to_float32(bits), None), bits)


def whole_message(x, what, dtype, round=False):
    """The refusal (or rounding note) of the whole tensor checked at once, as before chunking."""
    try:
        return fx._input_values(x, what, dtype, round)[1]
    except ValueError as e:
        return str(e)


@pytest.mark.parametrize("seed", range(12))
def test_a_refusal_names_the_first_offender_of_the_whole_tensor(tmp_path, monkeypatch, seed):
    """Blocks are read head by head: in a packed [T, H, D] tensor a later head's block holds
    earlier elements. The refusal still names the first non-finite value in the tensor's own
    order, else the first overflow, else the first value needing rounding: the message of the
    whole tensor checked at once."""
    tiny_chunks(monkeypatch, 2)
    rng = np.random.default_rng(seed)
    path = str(tmp_path / "f.h5")
    packed = bool(seed % 2)
    q, k, v = packed_qkv(hq=4, hkv=2) if packed else qkv()
    extra = dict(cu_seqlens_q=CU_Q, cu_seqlens_k=CU_K) if packed else {}
    q = q.copy()
    flat = q.reshape(-1)
    kinds = [np.nan, np.inf, 1e6, 1 + 2**-12]  # non-finite, overflow, inexact in float16
    for _ in range(6):
        flat[rng.integers(flat.size)] = kinds[rng.integers(len(kinds))]
    want = whole_message(q, "q", "float16")
    assert want, "the tensor holds an offender"
    with pytest.raises(ValueError) as e:
        write_case(path, "c", q, k, v, dtype="float16", **extra)
    assert str(e.value) == want
    assert os.listdir(tmp_path) == []
    if "not representable" in want:  # with round=True: the oracle refusal names the same value
        note = whole_message(q, "q", "float16", round=True)
        out = np.zeros((1, 4, 10, 4) if packed else (2, 4, 9, 6))
        with pytest.raises(ValueError, match=re.escape(f"round=True changed q{note}:")):
            write_case(path, "c", q, k, v, dtype="float16", round=True, out=out,
                       lse=np.zeros(out.shape[:3]), **extra)
        assert os.listdir(tmp_path) == []


def test_memmap_inputs(tmp_path, monkeypatch):
    """np.memmap inputs are read from their file block by block (their pages released after
    each block where the mapping is shared) and written as they are; a copy-on-write mapping's
    changes are written too, and every mapping still reads its values afterwards."""
    tiny_chunks(monkeypatch, 4)
    q, k, v = qkv()
    maps = {}
    for name, x, mode in (("q", q, "r"), ("k", k, "r+"), ("v", v, "c")):
        fn = str(tmp_path / f"{name}.bin")
        x.tofile(fn)
        maps[name] = np.memmap(fn, np.float32, mode, shape=x.shape)
    maps["v"][1, 0, 4, 2] = 0.5  # in the copy-on-write mapping only
    v = v.copy()
    v[1, 0, 4, 2] = 0.5
    path = str(tmp_path / "f.h5")
    write_case(path, "c", maps["q"], maps["k"], maps["v"])
    write_case(path, "slices", maps["q"][:, 1:3], maps["k"][:, :, 2:], maps["v"][:, :, 2:])
    c, s = read_case(path, "c"), read_case(path, "slices")
    for got, x in ((c.q, q), (c.k, k), (c.v, v), (s.q, q[:, 1:3]), (s.k, k[:, :, 2:]),
                   (s.v, v[:, :, 2:])):
        np.testing.assert_array_equal(got, x)
    for name, x in (("q", q), ("k", k), ("v", v)):
        np.testing.assert_array_equal(maps[name], x)
    out = np.memmap(str(tmp_path / "out.bin"), np.float16, "w+", shape=(2, 4, 9, 6))
    out[:] = normal((2, 4, 9, 6), 3, np.float16)
    add_tested(path, "c", "mm", out, producer="p")
    np.testing.assert_array_equal(read_case(path, "c").tested["mm"].out, out)


def test_bfloat16_arrays_are_widened_block_by_block(tmp_path, monkeypatch):
    """ml_dtypes bfloat16 arrays (JAX's) take torch's path: each block widened to float32 for
    q, k, v, turned back into bit patterns for an output under test."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    tiny_chunks(monkeypatch, 3)
    path = str(tmp_path / "f.h5")
    q, k, v = (x.astype(ml_dtypes.bfloat16) for x in packed_qkv(hq=4, hkv=2))
    write_case(path, "c", q, k, v, cu_seqlens_q=CU_Q, cu_seqlens_k=CU_K)
    c = read_case(path, "c")
    assert c.dtype == "bfloat16"
    np.testing.assert_array_equal(c.q, fx._unpack(q.astype(np.float32)))
    out = normal((10, 4, 4), 3).astype(ml_dtypes.bfloat16)
    out[3, 2, 1] = np.nan
    add_tested(path, "c", "bf", out, producer="jax", lse=normal((4, 10), 4).astype(
        ml_dtypes.bfloat16))
    with h5py.File(path, "r") as f:
        g = f["cases/c/tested/bf"]
        assert g["out"].attrs["encoding"] == "bfloat16" and g["out"].dtype == np.uint16
        np.testing.assert_array_equal(g["out"][()], fx._unpack(out.view(np.uint16)))
        np.testing.assert_array_equal(g["lse"][0], normal((4, 10), 4).astype(
            ml_dtypes.bfloat16).view(np.uint16))


def test_torch_tensors_are_read_block_by_block(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    tiny_chunks(monkeypatch, 3)
    path = str(tmp_path / "f.h5")
    q, k, v = (torch.from_numpy(x).bfloat16() for x in packed_qkv(hq=4, hkv=2))
    write_case(path, "c", q, k, v, cu_seqlens_q=CU_Q, cu_seqlens_k=CU_K)
    np.testing.assert_array_equal(read_case(path, "c").k,
                                  fx._unpack(k.float().numpy()))
    out = torch.from_numpy(normal((10, 4, 4), 3)).bfloat16()
    add_tested(path, "c", "bf", out, producer="torch")
    np.testing.assert_array_equal(read_case(path, "c").tested["bf"].out,
                                  fx._unpack(out.view(torch.int16).numpy().view(np.uint16)))


def test_check_reads_a_multi_chunk_case(tmp_path, flexbin, monkeypatch):
    """`flexcheck check` reads what the writer chunks: chunks of 256 rows (the step) in a dense
    case, and a packed bfloat16 case with its outputs under test in chunks of 3 rows."""
    monkeypatch.setattr(fx, "CHUNK_BYTES", 1)  # R = 256 rows, the step
    src, path = str(tmp_path / "gen.h5"), str(tmp_path / "py.h5")
    gen(flexbin, src, "--hq", "2", "--hkv", "1", "--lq", "600", "--lk", "700", "--causal",
        "--window", "100", "--seed", "6")
    c = read_case(src, "c0001")
    rewrite(path, c, "dense")
    add_tested(path, "dense", "f32", c.out.astype(np.float32), producer="oracle, f32",
               lse=c.lse.astype(np.float32))
    with h5py.File(path, "r") as f:  # 2 q heads, 1 kv head, rows 0-255, 256-511, 512-
        for t, n in (("q", 6), ("k", 3), ("v", 3), ("out", 6), ("tested/f32/out", 6)):
            ds = f[f"cases/dense/{t}"]
            assert ds.chunks[2] == 256 and ds.id.get_num_chunks() == n, (t, ds.chunks)
    lines = check_lines(flexbin, path, 0)
    assert line_of(lines, path, "dense").startswith("PASS ")
    assert line_of(lines, path, "dense", "f32").startswith("PASS ")

    tiny_chunks(monkeypatch, 3)
    src, path = str(tmp_path / "gen2.h5"), str(tmp_path / "packed.h5")
    gen(flexbin, src, "--dtype", "bfloat16", "--hq", "2", "--hkv", "1", "--packed", "0,5,5,30",
        "--packed-k", "0,9,20,41", "--causal", "--chunk", "8", "--seed", "4")
    c = read_case(src, "c0001")
    tokens = [x[0].transpose(1, 0, 2) for x in (c.q, c.k, c.v, c.out)]  # [T, H, D]
    write_case(path, "packed", *tokens[:3], causal=True, chunk=8, scale=c.scale,
               cu_seqlens_q=c.cu_seqlens_q, cu_seqlens_k=c.cu_seqlens_k, dtype="bfloat16",
               q_block_size=16, kv_block_size=16, out=tokens[3], lse=c.lse[0])
    out_bits = bfloat16_bits(tokens[3].astype(np.float32))
    add_tested(path, "packed", "bf16", out_bits, encoding="bfloat16", producer="oracle, bf16",
               lse=c.lse[0].astype(np.float32), out_rerun=out_bits)
    with h5py.File(path, "r") as f:
        assert f["cases/packed/q"].chunks == (1, 1, 3, c.q.shape[3])
        assert f["cases/packed/tested/bf16/out"].id.get_num_chunks() == 2 * 10  # 30 rows / 3
    lines = check_lines(flexbin, path, 0)
    assert line_of(lines, path, "packed").startswith("PASS ")
    assert line_of(lines, path, "packed", "bf16").startswith("PASS ")


# ---- torch (optional) ----

def test_torch_tensors(h5):
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(x) for x in qkv())
    write_case(h5, "f32", q, k, v)
    write_case(h5, "bf16", q.bfloat16(), k.bfloat16(), v.bfloat16())
    write_case(h5, "f16", q.half(), k.half(), v.half())
    assert read_case(h5, "f32").dtype == "float32"
    c = read_case(h5, "bf16")
    assert c.dtype == "bfloat16" and c.q.dtype == np.float32
    np.testing.assert_array_equal(c.q, q.bfloat16().float().numpy())
    assert read_case(h5, "f16").q.dtype == np.float16
    with pytest.raises(ValueError, match="not representable in bfloat16"):
        write_case(h5, "x", q, k, v, dtype="bfloat16")

    out = torch.randn(OUT, generator=torch.Generator().manual_seed(1)).bfloat16()
    out[0, 0, 0, 0] = float("nan")
    add_tested(h5, "f32", "bf", out, producer="torch", lse=torch.zeros(LSE), out_rerun=out)
    with h5py.File(h5, "r") as f:
        ds = f["cases/f32/tested/bf/out"]
        assert ds.dtype == np.dtype("<u2") and ds.attrs["encoding"] == "bfloat16"
        np.testing.assert_array_equal(ds[()], out.view(torch.int16).numpy().view(np.uint16))
    with pytest.raises(ValueError, match="a rerun is stored as the run"):
        add_tested(h5, "f32", "mixed", out, producer="torch", out_rerun=out.float())


def test_torch_block_mask(h5):
    torch = pytest.importorskip("torch")
    fa = pytest.importorskip("torch.nn.attention.flex_attention")
    q, k, v = (torch.from_numpy(x) for x in qkv(b=1, hq=2, hkv=1, lq=40, lk=40))

    def causal(b, h, qi, ki):
        return ki <= qi

    bm = fa.create_block_mask(causal, None, None, 40, 40, device="cpu", BLOCK_SIZE=16)
    write_case(h5, "c", q, k, v, causal=True, block_mask=bm)
    stored = read_case(h5, "c").block_mask
    assert (stored["q_block_size"], stored["kv_block_size"]) == (16, 16)
    np.testing.assert_array_equal(stored["kv_num_blocks"], bm.kv_num_blocks.numpy())
    np.testing.assert_array_equal(stored["full_kv_indices"], bm.full_kv_indices.numpy())


def test_torch_packed_inputs_and_bfloat16_rounding_agree(h5):
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(x) for x in packed_qkv())
    write_case(h5, "p", q.bfloat16(), k.bfloat16(), v.bfloat16(),
               cu_seqlens_q=torch.tensor(CU_Q, dtype=torch.int32),
               cu_seqlens_k=torch.tensor(CU_K, dtype=torch.int64))
    c = read_case(h5, "p")
    assert c.dtype == "bfloat16" and c.q.shape == (1, 2, 10, 4)
    np.testing.assert_array_equal(c.cu_seqlens_k, CU_K)
    # Our rounding against PyTorch's: normal values over a wide range of exponents, and exact
    # ties (low half 0x8000) of both signs.
    scales = np.float32(2.0) ** np.repeat(np.arange(-60, 60, 3), 1000).astype(np.float32)
    ties = np.random.default_rng(9).integers(0, 0xFF000000, 40000, dtype=np.uint32)
    ties = ((ties & 0xFFFF0000) | 0x8000).view(np.float32)
    ties = ties[np.isfinite(ties)]
    x = np.concatenate([normal(scales.size, 8) * scales, ties])
    theirs = torch.from_numpy(x).bfloat16().view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(bfloat16_bits(x), theirs)
