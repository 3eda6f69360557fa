#!/usr/bin/env python3
"""sample_agreement.py - do sampled and all-rows verdicts agree? (docs/tolerance.md "Judging a
sample", issue 36 item 2)

Over an export whose files hold outputs under test (tests/outsider/outsider.py stores one per
planted bug and one without), runs `flexcheck check --rows all` once and `check --rows N
--rows-seed S` for each N and S given, and compares every output's verdict:

  agree    the same outcome (pass, fail, outside) both ways
  missed   fails on every row, passes on the sample: the sample did not hold a failing row (what
           a sample may miss, with the chance each verdict line prints)
  false    passes on every row, fails on the sample: the sample's bounds were tighter than all
           rows' would be (must never happen)
  other    any other pair (outside one way, not the other)

    python3 tests/outsider/sample_agreement.py EXPORT_DIR --check BIN --out DIR
        [--rows N ...] [--seed S ...] [--jobs J] [--summary FILE]

Prints one table per sample (and writes them to --summary). Exit status 1 when any output is
"false". This measures flexcheck; it computes no verdict of its own.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import glob
import json
import os
import subprocess
import sys
import time
from typing import Dict, List, Tuple


def run_check(binary: str, files: List[str], args: List[str], report: str, jobs: int) -> float:
    """check over the files in `jobs` parts, each with its own report directory; seconds."""
    parts = [files[i::jobs] for i in range(jobs)]
    t0 = time.time()

    def one(i: int) -> int:
        d = os.path.join(report, "part%d" % i)
        cmd = [binary, "check", "--quiet", "--report", d] + args + parts[i]
        with open(os.path.join(report, "part%d.log" % i), "w") as log:
            return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT,
                                  env=dict(os.environ, OPENBLAS_NUM_THREADS="1")).returncode

    os.makedirs(report, exist_ok=True)
    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        codes = list(ex.map(one, range(jobs)))
    if any(c not in (0, 1) for c in codes):
        sys.exit("sample_agreement: check exited %s (see %s/part*.log)" % (codes, report))
    return time.time() - t0


def verdicts(report: str) -> Dict[Tuple[str, str, str], str]:
    """(case id, backend, dtype) -> outcome, for every output under test of every part (an
    exported file holds a case per dtype under one case id)."""
    out: Dict[Tuple[str, str], str] = {}
    for path in glob.glob(os.path.join(report, "part*", "rows.json")):
        with open(path) as f:
            for r in json.load(f)["rows"]:
                if r["backend"].startswith("tested/"):
                    key = (r["case_id"], r["backend"], r["dtype"])
                    if key in out:
                        sys.exit("sample_agreement: %s twice in %s" % (key, report))
                    out[key] = r["outcome"]
    return out


def compare(whole: Dict, part: Dict) -> Dict[str, collections.Counter]:
    """Per label: counts of agree / missed / false / other."""
    by: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for key, a in whole.items():
        s = part.get(key)
        label = key[1][len("tested/"):]
        if s is None:
            by[label]["absent"] += 1
        elif s == a:
            by[label]["agree"] += 1
        elif a == "fail" and s == "pass":
            by[label]["missed"] += 1
        elif a == "pass" and s == "fail":
            by[label]["false"] += 1
        else:
            by[label]["other"] += 1
    return by


def table(title: str, by: Dict[str, collections.Counter], whole: Dict) -> str:
    fails = collections.Counter(k[1][len("tested/"):] for k, v in whole.items() if v == "fail")
    lines = ["### " + title, "",
             "| output | judged | fail (all rows) | agree | missed by the sample | false alarm "
             "| other |", "|---|---:|---:|---:|---:|---:|---:|"]
    tot = collections.Counter()
    for label in sorted(by):
        c = by[label]
        n = sum(c.values())
        tot.update(c)
        tot["n"] += n
        tot["fail"] += fails[label]
        lines.append("| %s | %d | %d | %d | %d | %d | %d |" % (
            label, n, fails[label], c["agree"], c["missed"], c["false"], c["other"] + c["absent"]))
    lines.append("| **all** | %d | %d | %d | %d | %d | %d |" % (
        tot["n"], tot["fail"], tot["agree"], tot["missed"], tot["false"],
        tot["other"] + tot["absent"]))
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("export")
    ap.add_argument("--check", required=True, help="the flexcheck binary")
    ap.add_argument("--out", required=True, help="a directory for the reports")
    ap.add_argument("--rows", type=int, action="append", help="sample sizes (default 16, 64)")
    ap.add_argument("--seed", type=int, action="append", help="seeds (default 1, 2)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--summary", help="also write the tables here")
    ap.add_argument("--reuse", action="store_true",
                    help="take the all-rows verdicts from an earlier run's OUT/all")
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.export, "*.h5")))
    if not files:
        sys.exit("sample_agreement: no .h5 file in %s" % a.export)
    sizes, seeds = a.rows or [16, 64], a.seed or [1, 2]
    t = 0.0
    if not (a.reuse and glob.glob(os.path.join(a.out, "all", "part*", "rows.json"))):
        t = run_check(a.check, files, ["--rows", "all"], os.path.join(a.out, "all"), a.jobs)
    whole = verdicts(os.path.join(a.out, "all"))
    text = ["every row: %d outputs judged in %.0f s (%d fail)\n" % (
        len(whole), t, sum(v == "fail" for v in whole.values()))]
    bad = 0
    for n in sizes:
        for seed in seeds:
            d = os.path.join(a.out, "rows%d-seed%d" % (n, seed))
            t = run_check(a.check, files, ["--rows", str(n), "--rows-seed", str(seed)], d,
                          a.jobs)
            by = compare(whole, verdicts(d))
            bad += sum(c["false"] for c in by.values())
            text.append(table("--rows %d --rows-seed %d (%.0f s)" % (n, seed, t), by, whole))
    out = "\n".join(text)
    print(out)
    if a.summary:
        with open(a.summary, "w") as f:
            f.write(out)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
