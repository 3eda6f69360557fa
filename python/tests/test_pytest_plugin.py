"""test_pytest_plugin.py - `pytest --flexcheck-report DIR` (flexcheck/pytest_plugin.py): a session
run in a child pytest keeps every judged call as a fixture file, writes the report set from them
with `flexcheck check`, and ends a failing assertion with the `flexcheck repro` command that
tells the same diagnosis; without the option nothing is written.

The outputs under test are flexcheck's own oracle of another case (a window one wider, or
another mask and bias), computed by `flexcheck gen` / `fill`: nothing here computes attention.
"""
import csv
import os
import re
import shlex
import subprocess
import sys

import h5py
import numpy as np
import pytest

import flexcheck
from _flexcli import BIN, needs_bin, needs_lib, run

pytestmark = [needs_bin, needs_lib]

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PLANTED = '''
import flexcheck, numpy as np
c = flexcheck.read_case("w9.h5", flexcheck.list_cases("w9.h5")[0])
out = np.asarray(c.out, dtype=np.float32)  # the oracle of window 9

def test_right_window():
    flexcheck.assert_attention_close(c.q, c.k, c.v, out=out, causal=True, window=9)

def test_window_plus_one():  # the engine's window is one wider than asked for
    flexcheck.assert_attention_close(c.q, c.k, c.v, out=out, causal=True, window=8)
'''


def session(tmp_path, *opts):
    """(exit status, output) of a child pytest over test_planted.py in tmp_path."""
    env = dict(os.environ, FLEXCHECK_BIN=os.path.abspath(BIN), OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([PYTHON_DIR, os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-p", "flexcheck.pytest_plugin", *opts, "test_planted.py"],
                       cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    return p.returncode, p.stdout + p.stderr


@pytest.fixture
def planted(tmp_path):
    rc, _, err = run(BIN, "gen", "--case", "--out", tmp_path / "w9.h5", "--lq", 64, "--lk", 64,
                     "--causal", "--window", 9, "--dtype", "float32", "--seed", 5)
    assert rc == 0, err
    (tmp_path / "test_planted.py").write_text(PLANTED)
    return tmp_path


def test_every_call_is_kept_and_the_report_set_holds_them(planted):
    rc, out = session(planted, "--flexcheck-report", "rep")
    assert rc == 1, out  # one test failed
    assert "1 failed, 1 passed" in out, out
    rep = planted / "rep"
    calls = sorted(os.listdir(rep / "calls"))
    assert calls == ["test_planted.py_test_right_window-1.h5",
                     "test_planted.py_test_window_plus_one-2.h5"], calls
    for name in ("summary.md", "report.html", "junit.xml", "rows.csv", "rows.json"):
        assert (rep / "report" / name).is_file(), name
    with open(rep / "report" / "rows.csv") as fh:
        rows = {r["case_id"]: r["outcome"] for r in csv.DictReader(fh)}
    assert rows == {f"{calls[0]}:c0001": "pass", f"{calls[1]}:c0001": "fail"}, rows
    assert "flexcheck: 2 calls judged: 1 passed, 1 failed, 0 outside the contract" in out, out
    assert "flexcheck: check's verdicts agree with the session's" in out, out
    # the file holds the call: its inputs as given, the output under test, the test as producer
    case = flexcheck.read_case(str(rep / "calls" / calls[1]), "c0001")
    gold = flexcheck.read_case(str(planted / "w9.h5"), flexcheck.list_cases(str(planted / "w9.h5"))[0])
    assert case.window == 8 and case.causal
    for a, b in ((case.q, gold.q), (case.k, gold.k), (case.v, gold.v)):
        assert np.array_equal(a, b)
    t = case.tested["pytest"]
    assert t.producer == "test_planted.py::test_window_plus_one"
    assert np.array_equal(t.out, np.asarray(gold.out, np.float32))


def test_a_failing_assertion_ends_with_the_repro_command_that_tells_the_same_cause(planted):
    rc, out = session(planted, "--flexcheck-report", "rep")
    m = re.search(r"^E +reproduce: (flexcheck repro .*)$", out, re.M)
    assert m, out
    cause = re.search(r"^E +(explained by window W\+1 \(8 -> 9\): all \d+ failing rows)", out, re.M)
    assert cause, out
    argv = shlex.split(m.group(1))
    assert argv[:2] == ["flexcheck", "repro"] and argv[3:] == ["--case", "c0001", "--tested",
                                                                "pytest"], argv
    rc, rout, rerr = run(BIN, *argv[1:])
    assert rc == 1, rerr  # the case fails there too
    assert cause.group(1) in rout, rout
    # the command is the message's last line: nothing after it
    msg = out[out.index("AssertionError: flexcheck: the attention output does not pass"):]
    assert msg.split("\n")[msg.split("\n").index(m.group(0))] == m.group(0)


def test_without_the_option_nothing_is_written_and_the_message_is_unchanged(planted):
    rc, out = session(planted)
    assert rc == 1 and "1 failed, 1 passed" in out, out
    assert "reproduce:" not in out and "calls judged" not in out and "report set" not in out, out
    assert sorted(os.listdir(planted)) == ["test_planted.py", "w9.h5"]


XTERMS = '''
import flexcheck, numpy as np
c = flexcheck.read_case("x.h5", "c0")
out = np.asarray(c.out, dtype=np.float32)  # the oracle of the prefix-LM mask and ALiBi bias
P, SLOPE = 5, 0.25

def prefix_lm(b, h, q, kv):
    return (kv < P) | (kv <= q)

def alibi(score, b, h, q, kv):
    return score - SLOPE * np.abs(q - kv).astype(np.float32)

def test_mods():
    flexcheck.assert_attention_close(c.q, c.k, c.v, out=out, mask_mod=prefix_lm, score_mod=alibi)
'''


def test_mask_mod_and_score_mod_are_kept_as_the_mask_and_bias_they_evaluate_to(tmp_path):
    rng = np.random.default_rng(3)
    L = 24
    q, k, v = (rng.standard_normal((1, 2, L, 16)).astype(np.float32) for _ in range(3))
    qi, kj = np.arange(L)[:, None], np.arange(L)[None, :]
    mask = ((kj < 5) | (kj <= qi))[None, None]
    bias = (-0.25 * np.abs(qi - kj)).astype(np.float32)[None, None]
    flexcheck.write_case(str(tmp_path / "x.h5"), "c0", q, k, v, dtype="float32", mask=mask,
                         bias=bias)
    rc, _, err = run(BIN, "fill", tmp_path / "x.h5", "--in-place")
    assert rc == 0, err
    (tmp_path / "test_planted.py").write_text(XTERMS)
    rc, out = session(tmp_path, "--flexcheck-report", "rep")
    assert rc == 0, out
    assert "flexcheck: check's verdicts agree with the session's" in out, out
    kept = flexcheck.read_case(str(tmp_path / "rep" / "calls" / "test_planted.py_test_mods-1.h5"),
                               "c0001")
    assert np.array_equal(np.broadcast_to(kept.mask, mask.shape), mask)
    # the bias at allowed pairs (a masked pair's bias never counts, docs/semantics.md section 8,
    # and the evaluation leaves it 0 there)
    kb = np.broadcast_to(kept.bias, bias.shape)
    assert np.array_equal(np.where(mask, kb, 0), np.where(mask, bias, 0))
