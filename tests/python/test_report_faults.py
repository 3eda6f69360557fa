# tests/python/test_report_faults.py - reports under faults: a report directory that cannot be
# written is refused before any work (exit 2 at once, one line); a run stopped by SIGINT or
# SIGTERM writes nothing, leaves the previous report byte for byte and no temporary file, and
# says so. Skipped without FLEXCHECK_BIN (the `arrows` make step sets it).
import os
import signal
import subprocess
import time

import pytest

BIN = os.environ.get("FLEXCHECK_BIN")
pytestmark = pytest.mark.skipif(not BIN, reason="FLEXCHECK_BIN is not set")


def snapshot(d):
    out = {}
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            out[name] = f.read()
    return out


def test_an_unwritable_report_directory_is_refused_before_any_work(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    for cmd in (["gate", "--quick", "--filter", "m4-", "--report-dir", str(blocker / "r")],
                ["check", "--report", str(blocker / "r"), "fixtures/sets/small-f32.h5"]):
        r = subprocess.run([BIN, *cmd], capture_output=True, text=True)
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stdout == "", r.stdout  # no case was run or checked
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "is not a directory" in lines[0], r.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_gate_keeps_the_previous_report(tmp_path, sig):
    d = str(tmp_path / "report")
    r = subprocess.run([BIN, "gate", "--quick", "--filter", "m4-decode", "--report-dir", d],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    before = snapshot(d)
    p = subprocess.Popen([BIN, "gate", "--quick", "--jobs", "2", "--report-dir", d],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Wait until it is running cases (its first progress line), then stop it.
    line = p.stderr.readline()
    while line and "cases on emu" not in line:
        line = p.stderr.readline()
    time.sleep(0.5)
    p.send_signal(sig)
    out, err = p.communicate()
    assert p.returncode == 128 + sig, (p.returncode, out, err)
    name = "SIGINT" if sig == signal.SIGINT else "SIGTERM"
    assert f"stopped by {name} after" in err and "the previous one in" in err, err
    assert out == "", out  # no verdict for a run that did not finish
    assert snapshot(d) == before  # same files, same bytes, no temporaries
