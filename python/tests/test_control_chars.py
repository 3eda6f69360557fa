"""Nothing flexcheck prints carries a raw control character: file names (from the command line and
from directory listings) and command-line values quoted in messages are escaped the way names read
from files are (`\\n`, `\\t`, `\\r`, `\\xNN`), so a name cannot forge a line of its own in a CI log
or steer a terminal. Runs only with FLEXCHECK_BIN (make test sets it).
"""
import os
import shutil

import numpy as np
import pytest

from flexcheck import add_tested, read_case
from _flexcli import flexcheck as run, needs_bin

pytestmark = needs_bin

EVIL = "a\nFAKE PASS\x1b[31m\t\r\x07b"


def clean(*streams):
    """Every byte of the streams printable ASCII, a line's own newline or a tab-free space."""
    for s in streams:
        for ch in s:
            assert ch == "\n" or " " <= ch <= "~", f"raw {ch!r} in:\n{s}"


def evil_dir(tmp_path):
    d = tmp_path / ("dir" + EVIL)
    d.mkdir()
    return d


@pytest.fixture
def fixture_file(tmp_path):
    d = evil_dir(tmp_path)
    p = d / ("f" + EVIL + ".h5")
    rc, text, err = run("gen", "--case", "--out", str(p), "--lq", "16", "--hq", "2", "--d", "16",
                        "--causal", "--dtype", "float16")
    assert rc == 0, text + err
    clean(text, err)
    c = read_case(str(p), "c0001")
    add_tested(str(p), "c0001", "eng", c.out.astype(np.float16), producer="p",
               lse=c.lse.astype(np.float32))
    return p


def test_check_and_repro_lines_escape_the_file_name(fixture_file, tmp_path):
    for args in (["check", fixture_file], ["check", fixture_file, "--backend", "emu"],
                 ["check", fixture_file, "--report", tmp_path / ("r" + EVIL)],
                 ["repro", fixture_file, "--kernel", "1"],
                 ["repro", fixture_file, "--tested", "eng"]):
        rc, text, err = run(*args)
        assert rc == 0, (args, text, err)
        clean(text, err)
    rc, text, err = run("check", fixture_file)
    assert "FAKE PASS" in text and "\\n" in text  # the name is there, escaped, on its line


def test_fill_and_export_lines_escape_paths(fixture_file, tmp_path):
    out = tmp_path / ("filled" + EVIL + ".h5")
    rc, text, err = run("fill", fixture_file, "--out", out)
    assert rc == 0, text + err
    clean(text, err)
    rc, text, err = run("export", "--quick", "--filter", "m1-numeric-all-d64-h6x2-b1-113x203",
                        "--out", tmp_path / ("x" + EVIL))
    assert rc == 0, text + err
    clean(text, err)


@pytest.mark.parametrize("args", [
    ["check", "--case", "a\nFAKE", "{f}"],
    ["check", "{d}/missing" + EVIL + ".h5"],
    ["check", "--backend", "emu\x1b[31m", "{f}"],
    ["repro", "{f}", "--case", "a\nFAKE"],
    ["repro", "{f}", "--tested", "a\nFAKE"],
    ["repro", "{f}", "--row", "0,0\n1"],
    ["gen", "--case", "--out", "{d}/g.h5", "--lq", "1\x1b[31m"],
    ["gen", "--case", "--out", "{d}/g.h5", "--dtype", "float16\r"],
    ["gen", "--case", "--out", "{f}"],
    ["fill", "{d}/missing" + EVIL + ".h5", "--out", "{d}/o.h5"],
    ["blockmask", "--lq", "8\n9"],
    ["layout", "gemma\x1b[2J"],
    ["report", "merge", "{d}/nothing" + EVIL, "--out", "{d}/m"],
    ["report", "merg\ne"],
    ["gate", "--quick", "--filter", "zz\nFAKE"],
    ["gate", "--quick", "--shard", "1/2\x07"],
    ["check", "--unknown\x1b[31m", "{f}"],
    ["check", "--report", "{f}/" + EVIL, "{f}"],
    ["chec\nk"],
    ["bench", "blockmas\tk"],
])
def test_bad_input_is_one_line_without_control_characters(fixture_file, args):
    d = str(fixture_file.parent)
    argv = [a.replace("{f}", str(fixture_file)).replace("{d}", d) for a in args]
    rc, text, err = run(*argv)
    assert rc == 2, (argv, rc, text, err)
    clean(text, err)
    assert len([ln for ln in err.splitlines() if ln]) == 1, err


def test_no_report_file_carries_a_raw_control_character(fixture_file, tmp_path):
    rep = tmp_path / "rep"
    rc, text, err = run("check", fixture_file, "--report", rep)
    assert rc == 0, text + err
    names = sorted(os.listdir(rep))
    assert names == ["junit.xml", "report.html", "rows.csv", "rows.json", "summary.md"], names
    for name in names:
        data = (rep / name).read_bytes().decode("utf-8")
        assert "FAKE PASS" in data, name  # the evil name is there, escaped
        for line in data.replace("\r\n", "\n").split("\n"):
            for ch in line:
                assert ch == "\t" and name == "report.html" or ch >= " ", \
                    f"{name}: raw {ch!r} in {line!r}"
