# tests/python/test_ci_example.py - ci/examples/github-actions.yml, the sharded CI workflow users
# copy, run locally as far as it can be: the YAML parses, the gate jobs cover shards 1..N with
# `--shard I/N` and upload what the merge job downloads; then the gate job's command runs on two
# shards of a small filter (`--shard 1/2`, `2/2`, the workflow's N replaced), each report is put
# where the download step puts its artifact, and the merge step's command runs as written. The
# merged totals and rows must equal the unsharded run's.
#
#   FLEXCHECK_BIN=build/flexcheck python3 -m pytest -q tests/python    (the `arrows` make step)
#
# Skipped without FLEXCHECK_BIN; needs Debian's python3-yaml (ci/install-deps.sh).

import fnmatch
import json
import os
import shutil
import subprocess

import pytest

yaml = pytest.importorskip("yaml")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
WORKFLOW = os.path.join(ROOT, "ci", "examples", "github-actions.yml")
SHARD = "${{ matrix.shard }}"
# Ten one-token cases of the quick matrix: a second for all three runs.
FILTER = "*-b1-1x1-*"


def load():
    with open(WORKFLOW) as f:
        return yaml.safe_load(f)


def step(job, uses=None, run_has=None):
    """The one step of job that uses an action (prefix) or whose command holds run_has."""
    found = [
        s
        for s in job["steps"]
        if (uses and s.get("uses", "").startswith(uses)) or (run_has and run_has in s.get("run", ""))
    ]
    assert len(found) == 1, f"want one step {uses or run_has!r}, found {len(found)}"
    return found[0]


def test_the_jobs_cover_every_shard_and_hand_their_reports_to_the_merge():
    jobs = load()["jobs"]
    gate, merge = jobs["gate"], jobs["merge"]
    shards = gate["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, len(shards) + 1)) and len(shards) == 4
    assert gate["strategy"]["fail-fast"] is False
    run = step(gate, run_has="flexcheck gate")["run"]
    assert f"--shard {SHARD}/{len(shards)}" in run and "--quick" in run
    assert f"--report-dir report-{SHARD}" in run
    upload = step(gate, uses="actions/upload-artifact")
    assert upload["if"] == "always()"
    assert upload["with"]["path"].rstrip("/") == f"report-{SHARD}"
    assert merge["needs"] == "gate" and merge["if"] == "always()"
    download = step(merge, uses="actions/download-artifact")["with"]
    for i in shards:  # every shard's artifact is downloaded, each into its own folder
        assert fnmatch.fnmatch(upload["with"]["name"].replace(SHARD, str(i)), download["pattern"])
    merge_run = step(merge, run_has="report merge")["run"]
    assert f"{download['path']}/{download['pattern']}" in merge_run
    out = merge_run.split("--out", 1)[1].split()[0]
    junit = step(merge, uses="mikepenz/action-junit-report")
    assert junit["with"]["report_paths"] == f"{out}/junit.xml" and junit["if"] == "always()"
    assert step(merge, uses="actions/upload-artifact")["with"]["path"].rstrip("/") == out


def bash(cmd, cwd):
    r = subprocess.run(["bash", "-eo", "pipefail", "-c", cmd], cwd=cwd, capture_output=True,
                       text=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout}{r.stderr}"
    return r.stdout


def job_dir(tmp, name, flexcheck):
    """A checkout as a job sees it: build/flexcheck in its working directory."""
    d = tmp / name
    (d / "build").mkdir(parents=True)
    os.symlink(flexcheck, d / "build" / "flexcheck")
    return d


def rows_json(path):
    with open(path) as f:
        return json.load(f)


def test_the_merge_step_merges_two_shards_into_the_unsharded_run(tmp_path):
    flexcheck = os.environ.get("FLEXCHECK_BIN")
    if not flexcheck:
        pytest.skip("FLEXCHECK_BIN is not set (make test sets it)")
    flexcheck = os.path.abspath(flexcheck)
    jobs = load()["jobs"]
    gate_run = step(jobs["gate"], run_has="flexcheck gate")["run"]
    n = len(jobs["gate"]["strategy"]["matrix"]["shard"])
    merge_job = job_dir(tmp_path, "merge", flexcheck)
    download = step(jobs["merge"], uses="actions/download-artifact")["with"]
    for i in (1, 2):  # each gate job, then its artifact where the download step puts it
        cmd = gate_run.replace(f"{SHARD}/{n}", f"{i}/2").replace(SHARD, str(i))
        gate_job = job_dir(tmp_path, f"gate-{i}", flexcheck)
        bash(f"{cmd} --filter '{FILTER}'", gate_job)
        shutil.copytree(gate_job / f"report-{i}", merge_job / download["path"] / f"report-{i}")
    merge_run = step(jobs["merge"], run_has="report merge")["run"]
    out = bash(merge_run, merge_job)
    assert "report merge: 2 reports" in out
    whole = job_dir(tmp_path, "whole", flexcheck)
    bash(f"build/flexcheck gate --quick --filter '{FILTER}' --report-dir whole", whole)

    merged = rows_json(merge_job / merge_run.split("--out", 1)[1].split()[0] / "rows.json")
    unsharded = rows_json(whole / "whole" / "rows.json")
    for total in ("rows_total", "pass", "fail", "error", "skip"):
        assert merged[total] == unsharded[total], total
    # every case the filter selects is an M1 design case, one row per dtype
    listed = bash(f"build/flexcheck gate --quick --list --filter '{FILTER}'", whole).split()
    assert listed and all(i.startswith("m1-numeric-all-") for i in listed), listed
    assert merged["rows_total"] == 3 * len(listed)
    assert merged["rows"] == unsharded["rows"]
    assert merged["checks"] == unsharded["checks"]
    assert [p["shard_i"] for p in merged["run"]["merged"]] == [1, 2]
    assert merged["run"]["filter"] == FILTER and merged["run"]["matrix"] == "quick"
