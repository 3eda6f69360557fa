"""pytest_plugin.py - `pytest --flexcheck-report DIR`: every output a test session judges
(flexcheck.judge, flexcheck.assert_attention_close) kept as a fixture file, and the session's
report set written from them.

Installed as a pytest11 entry point (pyproject.toml), so an engine's suite gets the option by
installing the package; without the option the plugin does nothing and judging is untouched.
With it:
- each judged call writes its inputs and the output under test as one fixture file,
  DIR/calls/<test>-<n>.h5 (case c0001, the output under tested/pytest, the test's node id as
  its producer): mask_mod, score_mod and document_ids are stored as the explicit mask and bias
  they evaluate to (docs/fixtures.md, version 3), a BlockMask as the output's own block mask;
- a failing assert_attention_close ends its message with the exact `flexcheck repro` command
  that tells the same case from that file (a call the file cannot hold says why instead);
- at the end of the session `flexcheck check --report DIR/report` judges every file, so the
  report set (summary.md, report.html, junit.xml, rows.csv, rows.json) holds every judged call
  (check's lines in DIR/check.txt), judged by
  the same library the tests called, and the terminal summary says where it is and whether
  check's verdicts agree with the session's.
Every call is kept, passing ones too, because the report is of every call: a session that
judges large layers should point DIR at a disk with room for their inputs.

The command is found as FLEXCHECK_BIN, else the one the package holds (flexcheck/_bin/, an
installed wheel's), else `flexcheck` on PATH, else this checkout's build/flexcheck; without one the files are still written and the summary says how to judge
them.
"""
import os
import re
import shutil
import subprocess
from typing import Any, Dict, List, Optional

from ._cli import binary_paths, is_command

LABEL = "pytest"
CASE = "c0001"


def pytest_addoption(parser):
    group = parser.getgroup("flexcheck")
    group.addoption("--flexcheck-report", metavar="DIR", default=None,
                    help="keep every output flexcheck judges as a fixture file under DIR/calls, "
                         "write the session's report set into DIR, and end a failing "
                         "assert_attention_close with the flexcheck repro command")


def pytest_configure(config):
    d = config.getoption("flexcheck_report")
    if not d:
        return
    rec = _Recorder(d)
    rec.command = find_command()  # resolved where the session starts
    config._flexcheck_recorder = rec
    from . import judging
    judging._recorder = rec


def pytest_unconfigure(config):
    if getattr(config, "_flexcheck_recorder", None) is not None:
        from . import judging
        judging._recorder = None


def pytest_runtest_setup(item):
    rec = getattr(item.config, "_flexcheck_recorder", None)
    if rec is not None:
        rec.test = item.nodeid


def pytest_runtest_teardown(item):
    rec = getattr(item.config, "_flexcheck_recorder", None)
    if rec is not None:
        rec.test = None


def pytest_sessionfinish(session):
    rec = getattr(session.config, "_flexcheck_recorder", None)
    if rec is not None:
        rec.finish()


def pytest_terminal_summary(terminalreporter, config):
    rec = getattr(config, "_flexcheck_recorder", None)
    if rec is not None:
        for line in rec.summary():
            terminalreporter.write_line(line)


def find_command() -> Optional[str]:
    """The flexcheck command: FLEXCHECK_BIN, the one this package holds (an installed wheel's),
    `flexcheck` on PATH, or this checkout's build."""
    env = os.environ.get("FLEXCHECK_BIN")
    if env:
        return os.path.abspath(env)  # a relative one is the session's, whatever a test chdirs to
    packaged, checkout = binary_paths()
    if is_command(packaged):
        return packaged
    found = shutil.which("flexcheck")
    if found:
        return found
    return os.path.abspath(checkout) if is_command(checkout) else None


def _file_name(test: Optional[str], n: int) -> str:
    """A file name from a node id: its characters outside [A-Za-z0-9._-] as '_' (a
    parametrized id's brackets and slashes included), cut to keep the name short."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", test or "outside-a-test").strip("_.")[:120]
    return f"{stem or 'call'}-{n}.h5"


def _quote(s: str) -> str:
    return s if re.fullmatch(r"[A-Za-z0-9._/@%+=:,-]+", s) else "'" + s.replace("'", "'\\''") + "'"


class _Recorder:
    """What judging.judge hands each verdict to while the option is on."""

    def __init__(self, d: str):
        self.dir = os.path.abspath(d)
        self.calls = os.path.join(self.dir, "calls")
        self.report = os.path.join(self.dir, "report")  # the writer replaces its directory whole
        self.test: Optional[str] = None
        self.files: List[str] = []
        self.counts = {"pass": 0, "fail": 0, "outside": 0}
        self.unstored: List[str] = []
        self.result: Optional[List[str]] = None
        self.n = 0
        self.command: Optional[str] = None

    # ---- each judged call ----

    def __call__(self, args: Dict[str, Any], verdict) -> None:
        """Writes the call's file; sets verdict.repro (the command) or verdict.unstored (why
        the call could not be kept). Never raises: a test's verdict stands whatever happens
        to its record."""
        self.counts[verdict.outcome] = self.counts.get(verdict.outcome, 0) + 1
        self.n += 1
        os.makedirs(self.calls, exist_ok=True)
        path = os.path.join(self.calls, _file_name(self.test, self.n))
        try:
            _write_call(path, args, self.test or "outside a test")
        except Exception as e:  # noqa: BLE001 - reported, never raised into the test
            why = f"{type(e).__name__}: {e}"
            verdict.unstored = why
            self.unstored.append(f"{self.test}: call {self.n}: {why}")
            if os.path.exists(path):
                os.remove(path)
            return
        self.files.append(path)
        verdict.repro = " ".join(["flexcheck", "repro", _quote(path), "--case", CASE,
                                  "--tested", LABEL] + _repro_budget(args))

    # ---- the session's end ----

    def finish(self) -> None:
        if not self.files:
            return
        cmd = self.command
        if cmd is None:
            self.result = [f"flexcheck: no flexcheck command (FLEXCHECK_BIN, PATH, the "
                           f"checkout's build/): judge the {len(self.files)} files with "
                           f"`flexcheck check --tested {LABEL} --report {_quote(self.report)} "
                           f"{_quote(self.calls)}/*.h5`"]
            return
        argv = [cmd, "check", "--quiet", "--tested", LABEL, "--report", self.report] + self.files
        env = dict(os.environ, OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "1"))
        p = subprocess.run(argv, capture_output=True, text=True, env=env)
        with open(os.path.join(self.dir, "check.txt"), "w") as fh:
            fh.write(p.stdout)
            fh.write(p.stderr)
        failed = self.counts.get("fail", 0)
        agree = (p.returncode == 0) == (failed == 0) and p.returncode in (0, 1)
        self.result = [
            f"flexcheck: report set of {len(self.files)} judged calls in {self.report} "
            f"(flexcheck check exit {p.returncode}; its lines in {self.dir}/check.txt)",
            "flexcheck: check's verdicts agree with the session's" if agree else
            f"flexcheck: check's verdicts do NOT agree with the session's ({failed} failed in "
            f"process, check exit {p.returncode}): see check.txt",
        ]

    def summary(self) -> List[str]:
        if self.n == 0:
            return [f"flexcheck: no call judged; nothing written to {self.dir}"]
        c = self.counts
        lines = [f"flexcheck: {self.n} calls judged: {c.get('pass', 0)} passed, "
                 f"{c.get('fail', 0)} failed, {c.get('outside', 0)} outside the contract; "
                 f"{len(self.files)} kept in {self.calls}"]
        lines += [f"flexcheck: not kept: {u}" for u in self.unstored]
        return lines + (self.result or [])


def _repro_budget(args: Dict[str, Any]) -> List[str]:
    """repro's options for the call's budget and sample, so the command judges what the call did."""
    out = []
    if args.get("max_memory") is not None:
        out += ["--max-memory", str(int(args["max_memory"]))]
    if args.get("max_work") is not None:
        out += ["--max-work", str(int(args["max_work"]))]
    rows = args.get("rows")
    if rows is not None:
        out += ["--rows", str(rows)]
        if args.get("rows_seed") is not None:
            out += ["--rows-seed", str(int(args["rows_seed"]))]
    return out


def _write_call(path: str, args: Dict[str, Any], test: str) -> None:
    """The call as a fixture file: its inputs by write_case, with the explicit mask and bias
    that judge evaluated mask=, mask_mod=, score_mod=, document_ids= and a BlockMask's
    mask_mod to (args["terms"]), and its output by add_tested (a BlockMask as the output's own
    block mask)."""
    from . import fixtures
    a = {k: v for k, v in args.items() if k not in _NOT_STORED}
    out, lse, block_mask = a.pop("out"), a.pop("lse"), a.pop("block_mask")
    terms = args.get("terms")
    mask, bias = terms if terms is not None else (None, None)
    q, k, v = a.pop("q"), a.pop("k"), a.pop("v")
    fixtures.write_case(path, CASE, q, k, v, mask=mask, bias=bias, generator=f"pytest {test}",
                        overwrite=True, **a)
    fixtures.add_tested(path, CASE, LABEL, out, producer=test, lse=lse, block_mask=block_mask)


# judge's arguments a file does not hold as such: the budget and sample (repro's options),
# the explicit terms' sources (stored as the mask and bias they evaluate to)
_NOT_STORED = ("max_memory", "max_work", "rows", "rows_seed", "mask", "mask_mod", "score_mod",
               "document_ids", "terms")
