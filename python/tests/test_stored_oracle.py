"""The stored oracle is what every verdict rests on: `check`, `repro` and `fill` must never take a
corrupted `out`/`lse` for it. Runs only with FLEXCHECK_BIN (make test sets it).

- Garbage that used to pass: an `out` (or `lse`) of zeros, or negated, with one element of about
  1e308 made the old comparison's scale (taken from the stored values) infinite, so every error
  was 0 and `check` exited 0, then judged an output under test against that garbage.
- Random corruption of the stored `out`/`lse` bytes of the committed fixture sets
  (FLEXCHECK_CORRUPT_TRIALS trials, default 60; `make fuzz` runs more): whenever `check` passes a
  corrupted file, its `out`/`lse` must still be the committed oracle within check's own bar
  (relative 1e-10 of the committed values' scale; -inf exactly), i.e. the bytes hit changed
  nothing that matters. The committed files are the truth here: `make test` confirms each of
  them against the float64 oracle.
"""
import glob
import os
import random
import shutil

import h5py
import numpy as np
import pytest

from flexcheck import add_tested, read_case
from _flexcli import flexcheck as run, needs_bin, within_bar

pytestmark = needs_bin

HERE = os.path.dirname(os.path.abspath(__file__))
SETS = sorted(glob.glob(os.path.join(HERE, "..", "..", "fixtures", "sets", "*.h5")))


def gen(path, *args):
    rc, text, err = run("gen", "--case", "--out", str(path), "--lq", "24", "--lk", "40",
                        "--hq", "2", "--d", "16", "--causal", "--window", "9", *args)
    assert rc == 0, text + err
    return str(path)


def garble(path, what, field):
    """Replaces case c0001's stored field by zeros ('zeros') or its negation ('negated'), with
    one element of 1.7e308."""
    with h5py.File(path, "r+") as f:
        d = f["cases/c0001/" + field]
        x = d[...]
        x = np.zeros_like(x) if what == "zeros" else -x
        x.flat[7] = 1.7e308
        d[...] = x


@pytest.mark.parametrize("field", ["out", "lse"])
@pytest.mark.parametrize("what", ["zeros", "negated"])
def test_check_refuses_garbage_with_one_huge_element(tmp_path, what, field):
    p = gen(tmp_path / "g.h5", "--dtype", "float16")
    c = read_case(p, "c0001")
    # An engine output that matches the garbage exactly: judged against the garbage it would pass.
    add_tested(p, "c0001", "eng", np.zeros_like(c.out, dtype=np.float32), producer="zeros")
    garble(p, what, field)
    rc, text, err = run("check", p)
    assert rc == 1, text + err
    fail = [ln for ln in text.splitlines()
            if ln.startswith("FAIL ") and " c0001 " in ln and "tested/" not in ln]
    assert len(fail) == 1, text
    assert f"{field} at (b, h, q" in fail[0] and ": stored " in fail[0], fail[0]
    assert ("beyond max|v|" if field == "out" else "beyond the") in fail[0], fail[0]
    assert "PASS" not in text, text
    eng = [ln for ln in text.splitlines() if "tested/eng" in ln]
    assert len(eng) == 1 and eng[0].startswith("FAIL ") and "not judged" in eng[0], text


@pytest.mark.parametrize("field", ["out", "lse"])
def test_repro_refuses_to_judge_against_garbage(tmp_path, field):
    p = gen(tmp_path / "g.h5", "--dtype", "float32")
    garble(p, "zeros", field)
    rc, text, err = run("repro", p, "--case", "c0001", "--kernel", "1")
    assert rc == 2, text + err
    assert len([ln for ln in err.splitlines() if ln]) == 1, err
    assert "not the float64 oracle of its inputs" in err and f"{field} at (b, h, q" in err, err
    assert "verdict" not in text, text


def test_fill_refuses_garbage_it_would_keep(tmp_path):
    p = gen(tmp_path / "g.h5", "--dtype", "float32")
    garble(p, "negated", "out")
    before = open(p, "rb").read()
    rc, text, err = run("fill", p, "--out", str(tmp_path / "filled.h5"))
    assert rc == 2, text + err
    assert "not the float64 oracle of its inputs" in err and "/cases/c0001" in err, err
    assert not os.path.exists(tmp_path / "filled.h5")
    assert open(p, "rb").read() == before


def committed_oracle(path):
    """{(case, field): (file offset, dtype, values)} of every stored out/lse."""
    found = {}
    with h5py.File(path, "r") as f:
        for name, g in f["cases"].items():
            for field in ("out", "lse"):
                d = g[field]
                off = d.id.get_offset()
                if off is not None and d.chunks is None:  # contiguous: its bytes sit at off
                    found[(name, field)] = (off, d.dtype, d[...])
    return found


def corrupt(data, off, nbytes, rng):
    """One of the corruptions a disk, a transfer or a hostile author makes, inside one element."""
    kind = rng.randrange(5)
    pos = off + rng.randrange(nbytes // 8) * 8
    if kind == 0:    # 0xff over a whole element (a NaN)
        data[pos:pos + 8] = b"\xff" * 8
    elif kind == 1:  # the largest finite double
        data[pos:pos + 8] = np.array([1.7976931348623157e308]).tobytes()
    elif kind == 2:  # one random byte of the element
        data[pos + rng.randrange(8)] = rng.randrange(256)
    elif kind == 3:  # eight random bytes
        data[pos:pos + 8] = bytes(rng.randrange(256) for _ in range(8))
    else:            # one 0xff byte anywhere in the dataset
        data[off + rng.randrange(nbytes)] = 0xFF
    return kind


@pytest.mark.skipif(not SETS, reason="no committed fixture sets found")
def test_random_corruption_of_the_stored_oracle_never_passes(tmp_path):
    trials = int(os.environ.get("FLEXCHECK_CORRUPT_TRIALS", "60"))
    rng = random.Random(int(os.environ.get("FLEXCHECK_CORRUPT_SEED", "20261201")))
    targets = [(p, key, v) for p in SETS for key, v in committed_oracle(p).items()]
    assert targets
    wrong, passed, failed = [], 0, 0
    for t in range(trials):
        src, (case, field), (off, dtype, old) = targets[rng.randrange(len(targets))]
        if dtype != np.float64:
            continue
        data = bytearray(open(src, "rb").read())
        kind = corrupt(data, off, old.size * 8, rng)
        dst = tmp_path / f"t{t}.h5"
        dst.write_bytes(bytes(data))
        with h5py.File(dst, "r") as f:
            new = f[f"cases/{case}/{field}"][...]
        rc, text, err = run("check", str(dst), "--case", case)
        assert rc in (0, 1, 2), (src, case, field, kind, rc, text, err)
        assert all(len(ln) < 2000 for ln in err.splitlines()), err
        if rc == 0:
            passed += 1
            if not within_bar(new, old):
                wrong.append(f"{os.path.basename(src)} {case}/{field} corruption {kind}")
        else:
            failed += 1
        dst.unlink()
    print(f"stored-oracle corruption: {trials} trials, {failed} refused, {passed} passed "
          f"(each within check's bar of the committed oracle), {len(wrong)} wrong verdicts")
    assert not wrong, wrong
    assert failed > 0, "no corruption was ever caught: the test exercised nothing"


@pytest.mark.parametrize("what", ["zeros", "negated", "right-but-one"])
def test_an_output_under_test_with_one_huge_element_fails(tmp_path, what):
    # The outputs under test are judged against the confirmed oracle, with scales from it: one
    # huge element cannot make the rest look small.
    p = gen(tmp_path / "g.h5", "--dtype", "float32")
    c = read_case(p, "c0001")
    o = {"zeros": np.zeros_like(c.out), "negated": -c.out, "right-but-one": c.out.copy()}[what]
    o = o.astype(np.float32)
    o.flat[7] = 3e38  # finite: the output is stored as float32
    add_tested(p, "c0001", "eng", o, producer="garbage", lse=c.lse)
    rc, text, err = run("check", p)
    assert rc == 1, text + err
    eng = [ln for ln in text.splitlines() if "tested/eng" in ln]
    assert len(eng) == 1 and eng[0].startswith("FAIL ") and "H1 max ratio" in eng[0], text
