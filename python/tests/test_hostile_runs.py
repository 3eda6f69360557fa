"""The hostile tester's runs, repeated (issue 27's "done when"): corrupted fixture files and junk
command lines against `flexcheck`, counting what must never happen. `make test` runs a few of
each; `make fuzz` runs FLEXCHECK_HOSTILE_TRIALS of each (fixtures/module.mk). Runs only with
FLEXCHECK_BIN.

- Corrupted files: a committed fixture set with bytes changed anywhere (0xff runs, random bytes,
  single flips), checked, repro'd and filled. Never: a signal or a status other than 0, 1, 2 from
  flexcheck itself (a libhdf5 crash in the child is one line and exit 2, which is allowed); a
  message that is not one line; a raw control character on any line; a pass whose stored
  out/lse differ from the committed oracle beyond check's own bar (a wrong verdict).
- Junk command lines: every command with random options and values holding control characters,
  long runs and odd bytes. Never: a status other than 0, 1, 2; a raw control character; a bad
  input that is not exactly one line on stderr.
The stored-oracle corruptions aimed at out/lse alone are python/tests/test_stored_oracle.py's.
"""
import glob
import os
import random
import subprocess

import h5py
import numpy as np
import pytest

from _flexcli import BIN, flexcheck as run, needs_bin, within_bar

pytestmark = needs_bin

HERE = os.path.dirname(os.path.abspath(__file__))
SETS = sorted(glob.glob(os.path.join(HERE, "..", "..", "fixtures", "sets", "*.h5")))
TRIALS = int(os.environ.get("FLEXCHECK_HOSTILE_TRIALS", "25"))
SEED = int(os.environ.get("FLEXCHECK_HOSTILE_SEED", "271"))


def clean(stream, what):
    for line in stream.splitlines():
        for ch in line:
            assert " " <= ch <= "~", f"{what}: raw {ch!r} in {line!r}"


def stored_oracle(path):
    """{case: (out, lse)} as h5py reads them, or None where the file does not open."""
    try:
        with h5py.File(path, "r") as f:
            return {n: (g["out"][...], g["lse"][...]) for n, g in f["cases"].items()
                    if "out" in g and "lse" in g}
    except Exception:  # a corrupted file h5py cannot read either: no oracle to compare
        return None


def corrupt(data, rng):
    n = len(data)
    kind = rng.randrange(3)
    at = rng.randrange(n)
    if kind == 0:
        data[at:at + 8] = b"\xff" * len(data[at:at + 8])
    elif kind == 1:
        data[at] = rng.randrange(256)
    else:
        data[at] ^= 1 << rng.randrange(8)
    return kind, at


@pytest.mark.skipif(not SETS, reason="no committed fixture sets")
def test_corrupted_files_never_get_a_wrong_verdict_a_crash_or_a_raw_line(tmp_path):
    rng = random.Random(SEED)
    committed = {p: stored_oracle(p) for p in SETS}
    counts = {"trials": 0, "passed": 0, "refused": 0, "failed": 0}
    wrong = []
    for t in range(TRIALS):
        src = SETS[rng.randrange(len(SETS))]
        data = bytearray(open(src, "rb").read())
        kind, at = corrupt(data, rng)
        dst = tmp_path / f"h{t}.h5"
        dst.write_bytes(bytes(data))
        rc, text, err = run("check", str(dst), "--quiet")
        counts["trials"] += 1
        where = f"{os.path.basename(src)} corruption {kind} at byte {at}"
        assert rc in (0, 1, 2), (where, rc, err)
        clean(text, where)
        clean(err, where)
        if rc == 2:
            counts["refused"] += 1
            assert len([ln for ln in err.splitlines() if ln]) >= 1, (where, err)
            for ln in err.splitlines():
                assert ln.startswith("flexcheck check: "), (where, ln)
        elif rc == 1:
            counts["failed"] += 1
        else:
            counts["passed"] += 1
            now = stored_oracle(str(dst))
            was = committed[src]
            if now is not None and was is not None:
                for name, (o, l) in now.items():
                    if name in was and not (within_bar(o, was[name][0]) and
                                            within_bar(l, was[name][1])):
                        wrong.append(f"{where}: case {name}")
        # repro and fill on the same bytes: the same guarantees
        for args in (["repro", str(dst)], ["fill", str(dst), "--out", str(tmp_path / "f.h5")]):
            rc2, text2, err2 = run(*args)
            assert rc2 in (0, 1, 2), (where, args[0], rc2, err2)
            clean(text2, f"{where} {args[0]}")
            clean(err2, f"{where} {args[0]}")
            if rc2 == 2:
                assert len([ln for ln in err2.splitlines() if ln]) == 1, (where, args[0], err2)
        (tmp_path / "f.h5").unlink(missing_ok=True)
        dst.unlink()
    print(f"hostile files: {counts}, {len(wrong)} wrong verdicts")
    assert not wrong, wrong


JUNK = ["\n", "\x1b[31m", "\r", "\t", "\x07", "\x00x", "-", "--", "=", "%s%n", "1e999", "-1",
        "0x10", " 7", "4294967297", "1/0", "1/2", "nan", "inf", "../../etc", "\xff", "a" * 300]
OPTIONS = {
    "gate": ["--quick", "--filter", "--shard", "--backend", "--kernel", "--jobs", "--seed",
             "--report-dir", "--list", "--strict"],
    "check": ["--backend", "--kernel", "--case", "--tested", "--report", "--max-memory",
              "--max-work", "--quiet", "--strict"],
    "repro": ["--case", "--tested", "--row", "--backend", "--kernel", "--builder", "--dtype",
              "--worst", "--max-memory"],
    "fill": ["--out", "--in-place", "--force", "--max-memory"],
    "export": ["--quick", "--out", "--filter", "--shard"],
    "gen": ["--case", "--set", "--out", "--lq", "--lk", "--window", "--dtype", "--softcap",
            "--sinks", "--layout"],
    "blockmask": ["--lq", "--lk", "--causal", "--window", "--qb", "--kb", "--diff", "--json"],
    "layout": ["--scale-div", "--layers", "--list"],
    "report": ["merge", "--out", "--force"],
}
# Appended to every gate and export line, so that a line whose junk happens to be valid selects
# no case (bad input, at once) instead of running or writing the whole matrix.
NONE_SELECTED = ["--filter", "zz-no-such-case"]


def junk(rng):
    v = rng.choice(JUNK)
    if rng.random() < 0.5:
        v = rng.choice(["7", "64", "float16", "x"]) + v
    return v


def test_junk_command_lines_are_one_line_refusals_without_raw_characters(tmp_path):
    rng = random.Random(SEED + 1)
    refused = 0
    for t in range(TRIALS * 4):
        cmd = rng.choice(sorted(OPTIONS))
        args = [cmd]
        for _ in range(rng.randrange(1, 4)):
            opt = rng.choice(OPTIONS[cmd])
            args.append(opt)
            if rng.random() < 0.8:
                args.append(junk(rng))
        if rng.random() < 0.3:
            args.insert(rng.randrange(1, len(args) + 1), junk(rng))
        if cmd in ("gate", "export"):
            args += NONE_SELECTED
        # nothing writes outside tmp_path: run there, and path-like values point inside it
        args = [a if not a.startswith("../") else str(tmp_path / "x") for a in args]
        args = [a.replace("\x00", "") for a in args]  # argv cannot hold NUL
        p = subprocess.run([os.path.abspath(BIN), *args], capture_output=True, text=True, cwd=str(tmp_path),
                           env=dict(os.environ, OPENBLAS_NUM_THREADS="1"), timeout=300,
                           errors="backslashreplace")
        rc, text, err = p.returncode, p.stdout, p.stderr
        assert rc in (0, 1, 2), (args, rc, err)
        clean(text, repr(args))
        clean(err, repr(args))
        if rc == 2:
            refused += 1
            lines = [ln for ln in err.splitlines() if ln]
            if cmd == "check":  # every file is read, and each it refuses is a line of its own
                assert 1 <= len(lines) <= len(args) - 1, (args, err)
                assert all(ln.startswith("flexcheck check: ") for ln in lines), (args, err)
            else:
                assert len(lines) == 1, (args, err)
    print(f"junk command lines: {TRIALS * 4} run, {refused} refused")
    assert refused > 0
