"""Tests of the score terms in flexcheck.fixtures (schema flexcheck-fixture-2, docs/fixtures.md;
docs/semantics.md section 7): logit soft-capping (case attribute softcap) and attention sinks
(dataset sinks [Hq]).

What is written (read back with plain h5py), the schema version chosen and never downgraded,
version-1 files unchanged, and every refusal: a bad cap or bad sinks given to write_case, a
version-1 file that holds a term, an unknown schema, badly stored terms, each refused with one
line naming file, case and field, the file left byte-identical. numpy + h5py only; the torch
test skips without torch. With FLEXCHECK_BIN (make test), the C side reads and judges what was
written: `flexcheck fill` then `check` on a case with both terms, a dump that ignored the
soft-cap failing, and our float64 oracle held to the committed PyTorch soft-cap set and the
Hugging Face sink set.

Run: PYTHONPATH=python python3 -m pytest python/tests/test_score_terms.py
"""
import os
import re
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction

import h5py
import numpy as np
import pytest

from flexcheck import SCHEMA, SCHEMA_TERMS, add_tested, list_cases, read_case, write_case
from _flexcli import run, schema_of, snapshot

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETS = os.path.join(REPO, "fixtures", "sets")
V1 = "flexcheck-fixture-1"
V2 = "flexcheck-fixture-2"


def normal(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def qkv(b=1, hq=4, hkv=2, lq=9, lk=13, d=16, dv=16, dtype=np.float32, seed=0, sigma=1.0):
    return tuple((sigma * normal(shape, seed + i)).astype(dtype) for i, shape in
                 enumerate(((b, hq, lq, d), (b, hkv, lk, d), (b, hkv, lk, dv))))


SINKS = np.array([-5.0, 0.5, 3.25, 10.0], np.float32)  # one per query head (Hq = 4)


@pytest.fixture
def h5(tmp_path):
    return str(tmp_path / "f.h5")


# ---- the layout written, the version chosen ----

def test_constants():
    assert (SCHEMA, SCHEMA_TERMS) == (V1, V2)


def test_both_terms_round_trip(h5):
    q, k, v = qkv()
    write_case(h5, "c", q, k, v, causal=True, softcap=30.0, sinks=SINKS)
    assert schema_of(h5) == V2
    with h5py.File(h5, "r") as f:
        g = f["cases/c"]
        assert g.attrs["softcap"].dtype == np.float64 and g.attrs["softcap"] == 30.0
        assert g["sinks"].dtype == np.dtype("<f4") and g["sinks"].shape == (4,)
        np.testing.assert_array_equal(g["sinks"][()], SINKS)
        assert sorted(g) == ["k", "q", "sinks", "v"]  # no out/lse: `flexcheck fill` does them
    c = read_case(h5, "c")
    assert c.schema == V2 and c.softcap == 30.0 and c.sinks.dtype == np.float32
    np.testing.assert_array_equal(c.sinks, SINKS)
    np.testing.assert_array_equal(c.q, q)


@pytest.mark.parametrize("kw", [dict(softcap=2), dict(softcap=np.float32(0.5)), dict(softcap=1e6),
                                dict(softcap=np.array(30.0)), dict(softcap=np.int64(7)),
                                dict(softcap=Fraction(1, 4)), dict(softcap=Decimal("30")),
                                dict(softcap=np.float16(0.5)),
                                dict(sinks=[1e4, -1e4, 0.0, 1.0]),
                                dict(sinks=[1.0, 2.0, -3.5, 0.0])])
def test_either_term_alone_makes_version_2(h5, kw):
    q, k, v = qkv()
    write_case(h5, "c", q, k, v, **kw)
    assert schema_of(h5) == V2
    c = read_case(h5, "c")
    assert c.softcap == float(kw.get("softcap", 0.0))
    assert (c.sinks is None) == ("sinks" not in kw)


@pytest.mark.parametrize("cap", [None, 0, 0.0])
def test_no_term_stays_version_1(h5, cap):
    q, k, v = qkv()
    write_case(h5, "c", q, k, v, softcap=cap, sinks=None)
    assert schema_of(h5) == V1
    with h5py.File(h5, "r") as f:
        assert "softcap" not in f["cases/c"].attrs and "sinks" not in f["cases/c"]
    c = read_case(h5, "c")
    assert (c.schema, c.softcap, c.sinks) == (V1, 0.0, None)


def test_a_term_upgrades_a_version_1_file_and_keeps_its_cases(h5):
    q, k, v = qkv()
    write_case(h5, "a", q, k, v, causal=True)
    add_tested(h5, "a", "eng", np.zeros((1, 4, 9, 16), np.float32), producer="p")
    write_case(h5, "b", q, k, v, softcap=50.0)
    assert schema_of(h5) == V2 and list_cases(h5) == ["a", "b"]
    a = read_case(h5, "a")
    assert a.causal and a.softcap == 0.0 and a.sinks is None and list(a.tested) == ["eng"]
    np.testing.assert_array_equal(a.q, q)


def test_version_2_is_never_downgraded(h5):
    """A version-2 file stays version 2: appending a case without terms, an output under test,
    and overwriting the only case with terms by one without."""
    q, k, v = qkv()
    write_case(h5, "a", q, k, v, sinks=SINKS)
    write_case(h5, "b", q, k, v)
    assert schema_of(h5) == V2
    add_tested(h5, "a", "eng", np.zeros((1, 4, 9, 16), np.float16), producer="p",
               lse=np.zeros((1, 4, 9), np.float32))
    assert schema_of(h5) == V2
    write_case(h5, "a", q, k, v, overwrite=True)
    assert schema_of(h5) == V2
    assert read_case(h5, "a").sinks is None and read_case(h5, "a").tested == {}


def test_add_tested_on_a_version_2_file_changes_only_the_output(h5):
    q, k, v = qkv()
    write_case(h5, "c", q, k, v, softcap=2.0, sinks=SINKS, causal=True, window=4)
    before = read_case(h5, "c")
    add_tested(h5, "c", "eng", np.ones((1, 4, 9, 16), np.float32), producer="engine")
    after = read_case(h5, "c")
    assert after.schema == V2 and after.softcap == 2.0
    np.testing.assert_array_equal(after.sinks, before.sinks)
    assert list(after.tested) == ["eng"] and (after.tested["eng"].out == 1).all()


def test_sinks_from_other_float_types(h5):
    """float16 and float64 sinks holding float32 values are stored float32; float64 values
    that are not float32 values are refused unless round=True (as q/k/v)."""
    q, k, v = qkv()
    write_case(h5, "h", q, k, v, sinks=SINKS.astype(np.float16))
    write_case(h5, "d", q, k, v, sinks=SINKS.astype(np.float64))
    for name in ("h", "d"):
        np.testing.assert_array_equal(read_case(h5, name).sinks, SINKS)
    third = np.array([0.1, 0.2, 0.3, 0.4])
    with pytest.raises(ValueError, match=r"case 'r': sinks: value 0\.1 at \[0\] is not "
                                         r"representable in float32 \(round=True"):
        write_case(h5, "r", q, k, v, sinks=third)
    write_case(h5, "r", q, k, v, sinks=third, round=True)
    np.testing.assert_array_equal(read_case(h5, "r").sinks, third.astype(np.float32))


def test_packed_case_with_terms(h5):
    q, k, v = (normal((t, h, 16), s) for t, h, s in ((10, 4, 1), (14, 2, 2), (14, 2, 3)))
    write_case(h5, "p", q, k, v, cu_seqlens_q=[0, 3, 3, 10], cu_seqlens_k=[0, 5, 9, 14],
               causal=True, softcap=5.0, sinks=SINKS)
    c = read_case(h5, "p")
    assert c.packed and c.q.shape == (1, 4, 10, 16) and c.softcap == 5.0
    np.testing.assert_array_equal(c.sinks, SINKS)


def test_version_1_sets_read_as_before():
    schemas = {name: schema_of(os.path.join(SETS, name)) for name in sorted(os.listdir(SETS))}
    assert set(schemas.values()) <= {V1, V2}, schemas
    v1 = [name for name, schema in schemas.items() if schema == V1]
    # one set of each writer: the C tool's (bytes attributes) and the package's (str)
    assert "small-f32.h5" in v1 and "torch-flex.h5" in v1, v1
    for name in v1:
        path = os.path.join(SETS, name)
        for case in list_cases(path):
            c = read_case(path, case)
            assert (c.schema, c.softcap, c.sinks) == (V1, 0.0, None), (name, case)


# ---- refusals: one line naming file, case, field and value; the file untouched ----

WRITE_REFUSALS = [
    ("softcap negative", dict(softcap=-1.0), r"softcap = -1\.0: must be finite and > 0"),
    ("softcap tiny negative", dict(softcap=-1e-300), r"softcap = -1e-300: must be finite"),
    ("softcap nan", dict(softcap=float("nan")), r"softcap = nan: must be finite and > 0"),
    ("softcap inf", dict(softcap=float("inf")), r"softcap = inf: must be finite and > 0"),
    ("softcap -inf", dict(softcap=-np.inf), r"softcap = -inf: must be finite and > 0"),
    ("softcap text", dict(softcap="30"), r"softcap: '30' is not a number"),
    ("softcap huge", dict(softcap=2e6), r"softcap = 2000000\.0: the reader takes at most 1e\+06"),
    ("softcap bool", dict(softcap=True), r"softcap = True: give the cap as a number"),
    ("softcap list", dict(softcap=[30.0]), r"softcap: \[30\.0\] is not a number"),
    ("softcap numpy bool", dict(softcap=np.True_), r"softcap = (np\.)?True_?: give the cap as a "
                                                   r"number"),
    ("softcap 1-element array", dict(softcap=np.array([30.0])),
     r"softcap: array\(\[30\.\]\) is not a number"),
    ("softcap bytes", dict(softcap=b"30"), r"softcap: b'30' is not a number"),
    ("softcap complex", dict(softcap=30j), r"softcap: 30j is not a number"),
    ("softcap huge int", dict(softcap=10**400), r"softcap: a int beyond float's range: must be "
                                                r"finite, > 0 and at most 1e\+06"),
    ("softcap huge int in range", dict(softcap=2**70), r"softcap = 1\.18\d+e\+21: the reader "
                                                      r"takes at most 1e\+06"),
    ("sinks short", dict(sinks=SINKS[:3]), r"sinks: shape \[3\]: must be \[Hq\] = \[4\]"),
    ("sinks long", dict(sinks=np.zeros(8, np.float32)), r"sinks: shape \[8\]: must be \[Hq\]"),
    ("sinks 2-d", dict(sinks=SINKS[None]), r"sinks: shape \[1, 4\]: must be \[Hq\] = \[4\]"),
    ("sinks scalar", dict(sinks=1.0), r"sinks: shape \[\]: must be \[Hq\] = \[4\]"),
    ("sinks nan", dict(sinks=np.array([0, 1, np.nan, 2], np.float32)),
     r"sinks: value nan at \[2\] is not finite"),
    ("sinks inf", dict(sinks=np.array([np.inf, 0, 0, 0])), r"sinks: value inf at \[0\] is not "
                                                           r"finite"),
    ("sinks -inf", dict(sinks=[0.0, 0.0, 0.0, -np.inf]), r"sinks: value -inf at \[3\]"),
    ("sinks overflow", dict(sinks=[0.0, 1e39, 0.0, 0.0]),
     r"sinks: value 1e\+39 at \[1\] overflows float32"),
    ("sinks huge", dict(sinks=[0.0, 0.0, -10001.0, 0.0]),
     r"sinks: value -10001\.0 at \[2\]: the reader takes \|sink\| <= 10000"),
    ("sinks ints", dict(sinks=np.arange(4)), r"sinks: dtype int64: must be floating point"),
    ("sinks text", dict(sinks=["a", "b", "c", "d"]), r"sinks: dtype <U1: must be floating"),
]


@pytest.mark.parametrize("label,kw,message", WRITE_REFUSALS, ids=[r[0] for r in WRITE_REFUSALS])
def test_write_case_refuses_bad_terms(tmp_path, label, kw, message):
    path = str(tmp_path / "f.h5")
    q, k, v = qkv()
    write_case(path, "keep", q, k, v)
    before = snapshot(tmp_path)
    with pytest.raises(ValueError) as e:
        write_case(path, "new", q, k, v, **kw)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: case 'new': "), msg  # file and case named
    assert re.search(message, msg), msg
    assert snapshot(tmp_path) == before  # nothing written, no temporary left
    assert schema_of(path) == V1


def test_a_bad_term_for_a_new_file_leaves_nothing(tmp_path):
    q, k, v = qkv()
    with pytest.raises(ValueError, match="softcap = -2.0"):
        write_case(str(tmp_path / "new.h5"), "c", q, k, v, softcap=-2.0)
    assert os.listdir(tmp_path) == []


def v1_file_with(path, change):
    """A version-1 file written by the package, then changed by h5py as another tool might."""
    q, k, v = qkv()
    write_case(path, "a", q, k, v)
    write_case(path, "b", q, k, v)
    with h5py.File(path, "r+") as f:
        change(f)


def put_softcap(value):
    def change(f):
        f["cases/b"].attrs["softcap"] = value
    return change


def put_sinks(data):
    def change(f):
        f["cases/b"].create_dataset("sinks", data=data)
    return change


def put_schema(value):
    def change(f):
        f.attrs["schema"] = value
    return change


FILE_REFUSALS = [
    # (name, change to a valid version-1 file of cases a and b, message after "<path>: ")
    ("v1 with softcap", put_softcap(np.float64(30.0)),
     r"/cases/b: softcap = 30\.0: a flexcheck-fixture-1 file holds no score terms \(they need "
     r"schema flexcheck-fixture-2\)"),
    ("v1 with sinks", put_sinks(SINKS), r"/cases/b: sinks: a flexcheck-fixture-1 file holds no "
                                        r"score terms"),
    ("unknown schema", put_schema("flexcheck-fixture-5"),
     r"schema 'flexcheck-fixture-5': not a flexcheck-fixture-1, flexcheck-fixture-2, "
     r"flexcheck-fixture-3 or flexcheck-fixture-4 file"),
    ("schema 2 misspelt", put_schema("flexcheck-fixture-2 "), r"schema 'flexcheck-fixture-2 '"),
]


@pytest.mark.parametrize("label,change,message", FILE_REFUSALS,
                         ids=[r[0] for r in FILE_REFUSALS])
def test_files_refused_by_every_entry_point(tmp_path, label, change, message):
    """read_case of the case at fault (of any case when the schema itself is bad: the file is
    one unit for it), write_case appending, add_tested: each refuses with the same line."""
    path = str(tmp_path / "f.h5")
    v1_file_with(path, change)
    before = snapshot(tmp_path)
    q, k, v = qkv()
    calls = [lambda: read_case(path, "b"),
             lambda: write_case(path, "c", q, k, v),
             lambda: write_case(path, "c", q, k, v, softcap=2.0),
             lambda: add_tested(path, "a", "eng", np.zeros((1, 4, 9, 16)), producer="p")]
    if "schema" in label:
        calls.append(lambda: read_case(path, "a"))
    for call in calls:
        with pytest.raises(ValueError) as e:
            call()
        msg = str(e.value)
        assert msg.startswith(f"{path}: ") and "\n" not in msg, msg
        assert re.search(message, msg), msg
    assert snapshot(tmp_path) == before


def test_a_v1_file_with_softcap_0_is_no_term(h5):
    """softcap 0 means off (docs/fixtures.md): not a term, so a version-1 file may hold it."""
    v1_file_with(h5, put_softcap(np.float64(0.0)))
    assert read_case(h5, "b").softcap == 0.0
    write_case(h5, "c", *qkv())
    assert schema_of(h5) == V1


STORED_REFUSALS = [
    ("softcap negative", lambda f: f["cases/b"].attrs.__setitem__("softcap", -3.0),
     r"/cases/b: softcap = -3\.0: must be finite and > 0 \(0 = off\)"),
    ("softcap nan", lambda f: f["cases/b"].attrs.__setitem__("softcap", np.nan),
     r"/cases/b: softcap = nan: must be finite"),
    ("softcap inf", lambda f: f["cases/b"].attrs.__setitem__("softcap", np.inf),
     r"/cases/b: softcap = inf"),
    ("softcap huge", lambda f: f["cases/b"].attrs.__setitem__("softcap", 2e6),
     r"/cases/b: softcap = 2000000\.0: the reader takes at most 1e\+06"),
    ("sinks huge", lambda f: f["cases/b"].create_dataset(
        "sinks", data=np.array([0, 0, -2e4, 0], np.float32)),
     r"/cases/b: sinks: value -20000\.0 at \[2\]: the reader takes \|sink\| <= 10000"),
    ("softcap two", lambda f: f["cases/b"].attrs.__setitem__("softcap", [1.0, 2.0]),
     r"/cases/b: softcap: \[1\.0, 2\.0\]: must be one number"),
    ("softcap text", lambda f: f["cases/b"].attrs.__setitem__("softcap", "big"),
     r"/cases/b: softcap: \['big'\]: must be one number"),
    ("sinks short", lambda f: f["cases/b"].create_dataset("sinks", data=SINKS[:2]),
     r"/cases/b: sinks: float32 of shape \[2\]: must be float32 \[Hq\] = \[4\]"),
    ("sinks ints", lambda f: f["cases/b"].create_dataset("sinks", data=np.arange(4)),
     r"/cases/b: sinks: int64 of shape \[4\]"),
    ("sinks float64", lambda f: f["cases/b"].create_dataset("sinks", data=SINKS.astype(float)),
     r"/cases/b: sinks: float64 of shape \[4\]: must be float32 \[Hq\] = \[4\]"),
    ("sinks group", lambda f: f["cases/b"].create_group("sinks"), r"/cases/b: sinks: not a "
                                                                   r"dataset"),
    ("sinks nan", lambda f: f["cases/b"].create_dataset(
        "sinks", data=np.array([0, 0, 0, np.nan], np.float32)),
     r"/cases/b: sinks: value nan at \[3\] is not finite"),
]


@pytest.mark.parametrize("label,change,message", STORED_REFUSALS,
                         ids=[r[0] for r in STORED_REFUSALS])
def test_read_case_refuses_badly_stored_terms(h5, label, change, message):
    q, k, v = qkv()
    write_case(h5, "a", q, k, v, softcap=1.0)  # version 2
    write_case(h5, "b", q, k, v)
    with h5py.File(h5, "r+") as f:
        change(f)
    with pytest.raises(ValueError) as e:
        read_case(h5, "b")
    msg = str(e.value)
    assert msg.startswith(f"{h5}: ") and "\n" not in msg, msg
    assert re.search(message, msg), msg
    assert read_case(h5, "a").softcap == 1.0  # the other case still reads


# ---- torch (optional) ----

def test_torch_sinks_and_cap(h5):
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(x).bfloat16() for x in qkv())
    sinks = torch.nn.Parameter(torch.tensor(SINKS).bfloat16())  # gpt-oss keeps them as a param
    write_case(h5, "c", q, k, v, sinks=sinks, softcap=torch.tensor(50.0).item())
    c = read_case(h5, "c")
    assert c.dtype == "bfloat16" and c.softcap == 50.0
    np.testing.assert_array_equal(c.sinks, sinks.detach().float().numpy())


def test_torch_scalar_caps(h5):
    """A cap held as a torch scalar (bfloat16, a parameter with grad) is a number; a 1-element
    tensor or a boolean one is not."""
    torch = pytest.importorskip("torch")
    q, k, v = qkv()
    caps = [torch.tensor(30.0, dtype=torch.bfloat16), torch.tensor(50.0, requires_grad=True),
            torch.tensor(7)]
    for i, cap in enumerate(caps):
        write_case(h5, f"c{i}", q, k, v, softcap=cap)
        assert read_case(h5, f"c{i}").softcap == float(cap.detach().float())
    for cap, message in ((torch.tensor([30.0]), "is not a number"),
                         (torch.tensor(True), "give the cap as a number")):
        with pytest.raises(ValueError, match=message):
            write_case(h5, "bad", q, k, v, softcap=cap)


# ---- the C side (FLEXCHECK_BIN, set by make test) ----


def check(flexbin, path, expect_rc, *extra):
    rc, out, err = run(flexbin, "check", *extra, path)
    assert rc == expect_rc, f"check exited {rc}:\n{out}{err}"
    return out.splitlines()


def only_line(lines, what):
    """The one line with `what`; a case's own line (no "tested/" asked for) is not one of its
    outputs' lines."""
    found = [ln for ln in lines if what in ln and ("tested/" in what or "tested/" not in ln)]
    assert len(found) == 1, f"no single line with {what!r} in:\n" + "\n".join(lines)
    return found[0]


def terms_case(path, name, *, softcap, sinks, dtype="float32", seed=11):
    """GQA (4, 2), Lq 20 > Lk 14 under a causal window (6 empty rows per head), inputs of
    sigma 3 so that scores reach far beyond a cap of 2."""
    q, k, v = qkv(hq=4, hkv=2, lq=20, lk=14, seed=seed, sigma=3.0)
    write_case(path, name, q, k, v, causal=True, window=9, softcap=softcap, sinks=sinks,
               dtype=dtype, round=True, q_block_size=16, kv_block_size=16)


def test_fill_then_check_a_case_with_both_terms(tmp_path, flexbin):
    """write_case (schema 2, no out/lse) -> flexcheck fill (our float64 oracle, with the
    terms) -> check: the case passes, its empty rows have out 0 and LSE = the head's sink, and
    the filled oracle given back as outputs under test (float32, bfloat16) passes the gates."""
    path = str(tmp_path / "dump.h5")
    terms_case(path, "both", softcap=2.0, sinks=SINKS)
    terms_case(path, "both_bf16", softcap=30.0, sinks=SINKS, dtype="bfloat16", seed=12)
    rc, out, err = run(flexbin, "fill", path, "--in-place")
    assert rc == 0, out + err
    c = read_case(path, "both")
    assert c.schema == V2 and c.softcap == 2.0 and c.out.dtype == np.float64
    # causal, Lq 20 > Lk 14: queries 0..5 sit at negative positions and see no key
    assert (c.out[0, :, :6] == 0).all()
    np.testing.assert_array_equal(c.lse[0, :, :6], np.repeat(SINKS[:, None], 6, 1))
    assert np.isfinite(c.lse).all() and (c.lse[0] >= SINKS[:, None]).all()  # sink in the sum
    from flexcheck import bfloat16_bits
    add_tested(path, "both", "oracle-f32", c.out.astype(np.float32), producer="oracle, f32",
               lse=c.lse.astype(np.float32))
    b = read_case(path, "both_bf16")
    add_tested(path, "both_bf16", "oracle-bf16", bfloat16_bits(b.out.astype(np.float32)),
               encoding="bfloat16", producer="oracle, bf16", lse=b.lse.astype(np.float32))
    lines = check(flexbin, path, 0)
    for what in (f"{path} both ", f"{path} both_bf16 ", "tested/oracle-f32",
                 "tested/oracle-bf16"):
        assert only_line(lines, what).startswith("PASS "), lines


@pytest.mark.parametrize("term", ["softcap", "sinks"])
def test_a_dump_that_ignores_a_term_fails_check(tmp_path, flexbin, term):
    """The same inputs with and without the term, each filled by flexcheck: the output computed
    without the term, stored as the engine's output of the case with it, fails check."""
    with_term, without = str(tmp_path / "with.h5"), str(tmp_path / "without.h5")
    kw = dict(softcap=2.0, sinks=None) if term == "softcap" else dict(softcap=None, sinks=SINKS)
    terms_case(with_term, "layer", **kw)
    terms_case(without, "layer", softcap=None, sinks=None)
    assert schema_of(with_term) == V2 and schema_of(without) == V1
    for path in (with_term, without):
        rc, out, err = run(flexbin, "fill", path, "--in-place")
        assert rc == 0, out + err
    plain = read_case(without, "layer")
    add_tested(with_term, "layer", "engine", plain.out.astype(np.float32),
               producer=f"an engine that ignored {term}", lse=plain.lse.astype(np.float32))
    lines = check(flexbin, with_term, 1)
    assert only_line(lines, f"{with_term} layer ").startswith("PASS ")  # the oracle holds
    ln = only_line(lines, "tested/engine")
    assert ln.startswith("FAIL ") and ": H" in ln, ln


# The committed cross-check sets with score terms: our float64 oracle against PyTorch's
# flex_attention with a soft-cap score_mod (fixtures/torch/make_torch_set.py --set softcap)
# and against the float64 formula of Hugging Face's gpt-oss eager attention
# (fixtures/hf/make_sinks_set.py). `make test`'s fixtures-check holds them to relative 1e-10
# like every set; here to 1e-14, close to what float64 allows (measured: about 1e-15).
TERM_SETS = [("torch-softcap.h5", 8), ("sinks-hf.h5", 7)]
ERRS = re.compile(r": out ([0-9.e+-]+) lse ([0-9.e+-]+)")


@pytest.mark.parametrize("name,cases", TERM_SETS, ids=[s[0] for s in TERM_SETS])
def test_oracle_agrees_with_the_committed_term_sets(flexbin, name, cases):
    path = os.path.join(SETS, name)
    assert schema_of(path) == V2
    lines = [ln for ln in check(flexbin, path, 0, "--exact-blocks") if ln.startswith("PASS ")]
    assert len(lines) == cases, lines
    for ln in lines:
        m = ERRS.search(ln)
        assert m, ln
        assert float(m.group(1)) <= 1e-14 and float(m.group(2)) <= 1e-14, ln
    terms = [read_case(path, c) for c in list_cases(path)]
    assert all(c.softcap > 0 for c in terms) if name.startswith("torch") else \
        all(c.sinks is not None for c in terms)


def h5_items(path):
    """{object path: array} of every dataset and attribute ("path@name") of a file."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            for k, v in obj.attrs.items():
                out[f"{name}@{k}"] = np.asarray(v)
            if isinstance(obj, h5py.Dataset):
                out[name] = obj[()]
        visit("/", f)
        f.visititems(visit)
    return out


def test_the_sinks_set_is_reproduced(tmp_path):
    """make_sinks_set.py's claim: the committed file is what it writes (the package's round_to
    and write_case included), so the set can be rebuilt and reviewed: every input and
    attribute bit for bit, the float64 out and lse to 1e-12 of each dataset's largest
    magnitude. Not the file's bytes: numpy's float64 exp picks its code by CPU (AVX-512 or
    not) and version, which moves the last bits of out and lse, and another HDF5 lays the
    same data out differently."""
    out = tmp_path / "sinks.h5"
    committed = os.path.join(SETS, "sinks-hf.h5")
    path = os.pathsep.join(p for p in (os.path.join(REPO, "python"), os.environ.get("PYTHONPATH"))
                           if p)
    env = dict(os.environ, PYTHONPATH=path, PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run([sys.executable, os.path.join(REPO, "fixtures", "hf", "make_sinks_set.py"),
                        str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    got, want = h5_items(out), h5_items(committed)
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        g = got[name]
        assert (g.dtype, g.shape) == (w.dtype, w.shape), name
        if name.endswith(("/out", "/lse")):
            # the bound from the finite values (an infinite one would admit anything);
            # assert_allclose holds infinities and NaNs to be equal as they are
            fin = np.abs(w[np.isfinite(w)])
            scale = float(np.max(fin)) if fin.size else 0.0
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-12 * scale, err_msg=name)
        else:
            assert g.tobytes() == w.tobytes(), name
