"""negctl_pairs.py CASES_DIR REPORT_DIR - a whole-export negative control (--window-offset 1) read
back: for every windowed output of REPORT_DIR/rows.csv, does window W + 1 allow any (query, key)
pair that W does not (brute force over the stored case: bottom-right alignment per sequence,
causal, chunk, the explicit mask ANDed, docs/semantics.md)? Prints (outcome, differs) counts: a
control that works fails exactly the outputs where W + 1 differs. Run from the repository root:
    PYTHONPATH=python python3 reports/engines-2026-12-07/negctl_pairs.py build/torch-neg/cases \\
        build/torch-neg/report
"""
import csv
import os
import sys
from collections import Counter

import numpy as np

import flexcheck


def allowed(c, w):
    lq, lk = c.q.shape[2], c.k.shape[2]
    cq = list(c.cu_seqlens_q) if c.cu_seqlens_q is not None else [0, lq]
    ck = list(c.cu_seqlens_k) if c.cu_seqlens_k is not None else [0, lk]
    a = np.zeros((lq, lk), bool)
    for s in range(len(cq) - 1):
        nq, nk = cq[s + 1] - cq[s], ck[s + 1] - ck[s]
        if nq <= 0 or nk <= 0:
            continue
        pq = np.arange(nq)[:, None] + (nk - nq)
        pk = np.arange(nk)[None, :]
        ok = np.ones((nq, nk), bool)
        if c.causal:
            ok &= pk <= pq
        if w:
            ok &= np.abs(pq - pk) < w
        if c.chunk:
            ok &= (pq // c.chunk) == (pk // c.chunk)
        a[cq[s]:cq[s + 1], ck[s]:ck[s + 1]] = ok
    return a if c.mask is None else a[None, None] & c.mask.astype(bool)


def case_name(row):
    """The fixture case of a report row: the dtype (and @W-1 / @W+1), or layerNN of @LNN."""
    cid = row["case_id"]
    if "@L" in cid:
        return "layer" + cid.split("@L")[1]
    return row["dtype"] + ("@" + cid.split("@")[1] if "@" in cid else "")


def main(cases, report):
    counts = Counter()
    with open(os.path.join(report, "rows.csv")) as fh:
        for r in csv.DictReader(fh):
            if int(r["window"] or 0) <= 0:
                continue
            c = flexcheck.read_case(os.path.join(cases, r["case_id"].split("@")[0] + ".h5"),
                                    case_name(r))
            differs = bool((allowed(c, c.window) != allowed(c, c.window + 1)).any())
            counts[(r["outcome"], "W+1 allows more pairs" if differs else "W+1 the same")] += 1
    for k, v in sorted(counts.items()):
        print(f"{v:5d} {k[0]}: {k[1]}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
