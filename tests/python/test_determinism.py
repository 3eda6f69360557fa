# tests/python/test_determinism.py - the gate's report does not depend on how it was run in
# parallel: --jobs 1 or 2, OpenBLAS single-threaded, at 2 threads or at its default. rows.csv,
# rows.json without its run identity and summary.md after the identity block must be
# byte-identical. The M5 cases are large enough (about 1e8 multiply-adds) for the reference to
# spread its panels over threads. Before the reference kept OpenBLAS's process-wide thread count
# steady across concurrent calls, --jobs 2 at the default thread count gave other soft metrics
# in about one run of eight (tests/test_ref.c pins the root cause).
#
# Skipped without FLEXCHECK_BIN (the `arrows` make step sets it).
import json
import os
import subprocess

import pytest

BIN = os.environ.get("FLEXCHECK_BIN")
pytestmark = pytest.mark.skipif(not BIN, reason="FLEXCHECK_BIN is not set")

RUNS = [  # (jobs, OPENBLAS_NUM_THREADS or None for unset)
    (1, "1"),
    (2, None),
    (2, "2"),
    (1, None),
]


def gate(out, jobs, threads):
    env = dict(os.environ)
    env.pop("OPENBLAS_NUM_THREADS", None)
    if threads:
        env["OPENBLAS_NUM_THREADS"] = threads
    r = subprocess.run([BIN, "gate", "--quick", "--filter", "m5-", "--jobs", str(jobs),
                        "--report-dir", out], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr


def comparable(d):
    with open(os.path.join(d, "rows.csv"), "rb") as f:
        csv = f.read()
    with open(os.path.join(d, "rows.json")) as f:
        js = json.load(f)
    js.pop("run")
    with open(os.path.join(d, "summary.md")) as f:
        md = f.read()
    return csv, json.dumps(js, sort_keys=True), md[md.index("\n**"):]


def test_reports_do_not_depend_on_jobs_or_blas_threads(tmp_path):
    got = []
    for jobs, threads in RUNS:
        d = str(tmp_path / f"j{jobs}-t{threads or 'default'}")
        gate(d, jobs, threads)
        got.append(comparable(d))
    for (jobs, threads), g in zip(RUNS[1:], got[1:]):
        for name, a, b in zip(("rows.csv", "rows.json", "summary.md"), got[0], g):
            assert a == b, f"{name} differs with --jobs {jobs}, OPENBLAS_NUM_THREADS={threads}"
