"""test_readme_example.py - the README's pytest example ("An engine's pytest suite"), run as
written and with a planted bug under `pytest --flexcheck-report DIR`: the example passes; its
copy whose mask_mod lets one key more through (window 256 -> 257, the engine's bug) fails, the
report set is written, and the `flexcheck repro` command its message ends with tells the same
cause from the dump. The example is read from README.md, so the README cannot drift from what
runs. It needs torch (PyTorch's flex_attention is the engine): skipped without it
(make torch-gate's venv has it:
`PYTHONPATH=python:python/tests build/torch-venv/bin/python -m pytest python/tests/test_readme_example.py`,
pytest installed beside).
"""
import csv
import os
import re
import shlex
import subprocess
import sys

import pytest

from _flexcli import BIN, needs_bin, needs_lib, run

torch = pytest.importorskip("torch", reason="the README's example runs PyTorch's flex_attention")

pytestmark = [needs_bin, needs_lib]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.path.join(ROOT, "python")
RIGHT, PLANTED = "i - j < 256", "i - j < 257"


def readme_example() -> str:
    """The python block after the README's "An engine's pytest suite" line."""
    with open(os.path.join(ROOT, "README.md")) as fh:
        text = fh.read()
    at = text.index("**An engine's pytest suite**")
    m = re.compile(r"```python\n(.*?)```", re.S).search(text, at)
    assert m, "README.md: no python block after \"An engine's pytest suite\""
    return m.group(1)


def test_the_readme_example_passes_and_its_planted_window_plus_1_is_reproduced(tmp_path):
    example = readme_example()
    assert example.count(RIGHT) == 1, example  # where the bug is planted
    (tmp_path / "test_example.py").write_text(example)
    (tmp_path / "test_planted.py").write_text(example.replace(RIGHT, PLANTED))
    env = dict(os.environ, FLEXCHECK_BIN=os.path.abspath(BIN), OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([PYTHON_DIR, os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-p", "flexcheck.pytest_plugin", "--flexcheck-report", "rep",
                        "test_example.py", "test_planted.py"],
                       cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 1 and "1 failed, 1 passed" in out, out
    assert "test_planted.py::test_flex_attention_sliding_window" in out, out
    # the report set of both calls
    rep = tmp_path / "rep" / "report"
    for name in ("summary.md", "report.html", "junit.xml", "rows.csv", "rows.json"):
        assert (rep / name).is_file(), name
    with open(rep / "rows.csv") as fh:
        rows = sorted((r["case_id"].split("_test_")[0], r["outcome"]) for r in csv.DictReader(fh))
    assert rows == [("test_example.py", "pass"), ("test_planted.py", "fail")], rows
    # the cause in the message, and the same cause from the dump through repro
    cause = re.search(r"^E +(explained by window W\+1 \(256 -> 257\): all \d+ failing rows)",
                      out, re.M)
    assert cause, out
    m = re.search(r"^E +reproduce: (flexcheck repro .*)$", out, re.M)
    assert m, out
    argv = shlex.split(m.group(1))
    rc, rout, rerr = run(BIN, *argv[1:])  # the dump's path is absolute
    assert rc == 1, rerr
    assert cause.group(1) in rout, rout
