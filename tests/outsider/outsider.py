#!/usr/bin/env python3
"""outsider.py - an attention engine written from docs/ alone, with planted bugs, to measure
flexcheck's diagnosis.

This is an engine UNDER TEST, not an oracle: it computes the way a typical float32 engine does
(docs/semantics.md section 5): scores q.k in float32 times the case's scale, the soft-cap in
float32, the mask, a float32 softmax with the sink in its sum, for float16/bfloat16 the
unnormalised probabilities rounded to the input type before P.V (FlexAttention's tiled kernels'
rounding, with the row's maximum), P.V accumulated in float32 and divided by the float32 sum,
the output rounded to the input type, the LSE m + log(l) in float32. Rows with no allowed key
give 0 and LSE -inf (the sink, with sinks). Each switch in BUGS plants one bug; "none" is the
engine without one, which must pass flexcheck's gates (python/tests/test_outsider.py):

  lse-bf16         the output right, the LSE rounded to the input type and stored as float32
                   (JAX); float32 cases unchanged
  window+1         |p_q - p_k| < W + 1
  top-left         p_q = i instead of i + nk - nq
  scale-1/D        the scale 1/D instead of the case's
  stale-layer      in a layout file each layer runs with the previous layer's mask (causal,
                   window, chunk; layer 0 its own)
  softmax-lowp     each weight rounded to the input type and their sum accumulated in it, key
                   by key (float16/bfloat16 cases only)
  drop-last-key    each sequence's last key never attended (an exclusive end one short)
  masked-row-mean  masked scores filled with a finite -0.7 * float32 max instead of -inf: a row
                   with no allowed key gives the mean of V over its sequence's keys and a finite
                   LSE (a sink outweighs the fill: rows with sinks stay right)
  softcap-before-scale  the soft-cap on q.k before the scale: scale * c tanh(q.k / c)
  sink-kv-head     each query head's sink read at its kv head's index, sinks[h // (Hq / Hkv)]
  sink-prev-head   each query head's sink read at h - 1 (Python's sinks[-1] at h = 0: the last)
  window-after+1   the window written -W <= p_q - p_k < W: keys after the query reach W + 1
                   (bidirectional windows; a causal one never sees them)
  chunk+1          chunk ids from 1-based positions, (p + 1) // C, for queries and keys
  packed-leak      each packed sequence's key slice starts at the previous sequence's last key
                   (k0 - 1), and the row padding that lets through is the first query's
  decode-ahead     sequences with fewer queries than keys put query i at i + nk - nq + 1 (the
                   context length taken as the new token's position)
  masked-row-nan   no guard for a row whose maximum is -inf: a row with no allowed key (and no
                   sink) is exp(-inf - -inf) = NaN throughout, LSE NaN
  softmax-lowp-scores  softmax-lowp on scores rounded to the input type first (q.k scaled in
                   float32, stored in the input type; float16/bfloat16 cases only)

    python3 tests/outsider/outsider.py EXPORT_DIR --bug NAME [--bug NAME ...] [--label L]
        [--jobs N] [--check BIN] [--summary FILE] [--no-store]

stores, for every case of every EXPORT_DIR/*.h5 (`flexcheck export`), the output and LSE under
tested/<label> (default label: LABELS[bug]), p-round designs (`<dtype>@design`) included; with
--check it then runs `BIN check --quiet --report R FILES` (in --jobs parts over the files),
parses check's lines into one record per output and prints one table per bug: how often the
diagnosis names the planted bug. EXPECTED maps each bug to the title prefixes of the hypotheses
(diag/hyps.c) that name it: edit it as hypotheses are added.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

try:
    from flexcheck import fixtures
except ImportError:  # run from the checkout without PYTHONPATH=python
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "python"))
    from flexcheck import fixtures

# ---- the bugs -------------------------------------------------------------------------------

BUGS = ("none", "lse-bf16", "window+1", "top-left", "scale-1/D", "stale-layer", "softmax-lowp",
        "drop-last-key", "masked-row-mean", "softcap-before-scale", "sink-kv-head",
        "sink-prev-head", "window-after+1", "chunk+1", "packed-leak", "decode-ahead",
        "masked-row-nan", "softmax-lowp-scores")

# Labels must match [A-Za-z0-9._-]{1,64} (docs/fixtures.md): '+' and '/' are spelled out.
LABELS = {
    "none": "outsider-none",
    "lse-bf16": "outsider-lse-bf16",
    "window+1": "outsider-window-plus-1",
    "top-left": "outsider-top-left",
    "scale-1/D": "outsider-scale-1-over-D",
    "stale-layer": "outsider-stale-layer",
    "softmax-lowp": "outsider-softmax-lowp",
    "drop-last-key": "outsider-drop-last-key",
    "masked-row-mean": "outsider-masked-row-mean",
    "softcap-before-scale": "outsider-softcap-before-scale",
    "sink-kv-head": "outsider-sink-kv-head",
    "sink-prev-head": "outsider-sink-prev-head",
    "window-after+1": "outsider-window-after-plus-1",
    "chunk+1": "outsider-chunk-plus-1",
    "packed-leak": "outsider-packed-leak",
    "decode-ahead": "outsider-decode-ahead",
    "masked-row-nan": "outsider-masked-row-nan",
    "softmax-lowp-scores": "outsider-softmax-lowp-scores",
}

# bug -> the title prefixes (diag/hyps.c, as `check` prints them after "explained by ") of the
# hypotheses that name it; None where no hypothesis models the bug yet. Edit as diag/ grows.
EXPECTED: Dict[str, Optional[Tuple[str, ...]]] = {
    # The engine without a bug: no failure, nothing to name.
    "none": None,
    # A correct output whose LSE is rounded to the input type (JAX): the table also counts every
    # cause claimed on it, whatever it names.
    "lse-bf16": ("LSE rounded to",),
    "window+1": ("window W+1",),
    "top-left": ("top-left alignment",),
    # Where the case's scale is the default 1/sqrt(D), "scale applied twice" computes 1/D too:
    # one finding titled with both names (diag_run.c merge_same), matched by either.
    "scale-1/D": ("scale 1/D",),
    "stale-layer": ("the previous layer's mask",),
    "softmax-lowp": ("softmax in ",),
    "drop-last-key": ("the last key of each sequence dropped",),
    # the engine averages over the row's own sequence (diag also tries every key of the batch)
    "masked-row-mean": ("fully masked rows give the mean of V over their sequence's keys",),
    "softcap-before-scale": ("soft-cap before the scale",),
    "sink-kv-head": ("sinks indexed by the kv head",),
    # at Hq = 2 the previous head is the next: one finding, titled with both names
    "sink-prev-head": ("sink of the previous head",),
    "window-after+1": ("asymmetric window, W+1 after the query",),
    "chunk+1": ("chunks from position + 1",),
    "packed-leak": ("packed boundary leak",),
    # on a decode row (one query) under a window this is window W-1's key set: merged titles
    "decode-ahead": ("decode positions one ahead",),
    "masked-row-nan": ("rows with no allowed key are NaN",),
    # softmax-lowp's hypothesis, its ways on rounded scores (ref.h REF_LOWP_SCORES): as a
    # hypothesis of its own it tied with softmax-lowp's on 66 of the two bugs' 364 failed outputs
    "softmax-lowp-scores": ("softmax in ",),
}

# The finite fill a JAX-style engine gives masked scores (jax's flash attention kernels use
# -0.7 * float32 max): a row with no allowed key then averages V over its sequence's keys.
MASK_FILL = np.float32(-0.7 * float(np.finfo(np.float32).max))

LOWP = ("float16", "bfloat16")
ROW_CHUNK = 512  # query rows per score matrix: bounds memory at long Lk


def rnd(x: np.ndarray, dtype: str) -> np.ndarray:
    """x rounded to nearest even in dtype, as float32 values (float32: unchanged)."""
    if dtype == "float32":
        return np.asarray(x, np.float32)
    return fixtures.round_to(np.asarray(x, np.float32), dtype).astype(np.float32)


def lowp_sum(p: np.ndarray, dtype: str) -> np.ndarray:
    """Row sums of p [rows, n] accumulated key by key in dtype: a running sum held in the
    input type, rounded after every addition (a kernel keeping l in a half register)."""
    x = rnd(p, dtype)
    acc = np.zeros(x.shape[0], np.float32)
    for j in range(x.shape[1]):
        acc = rnd(acc + x[:, j], dtype)
    return acc


def _sequences(b: int, lq: int, lk: int, cu_q, cu_k) -> List[Tuple[int, int, int, int]]:
    """(q0, q1, k0, k1) of each sequence of batch entry b (docs/semantics.md section 1)."""
    if cu_q is None:
        return [(0, lq, 0, lk)]
    cu_q = [int(x) for x in cu_q]
    cu_k = [int(x) for x in cu_k]
    return [(cu_q[s], cu_q[s + 1], cu_k[s], cu_k[s + 1]) for s in range(len(cu_q) - 1)]


def _allowed(i: np.ndarray, nq: int, nk: int, causal: bool, window: int, chunk: int,
             bug: str) -> np.ndarray:
    """[len(i), nk] booleans: may query i (index in its sequence) use key j (section 2)."""
    pq = i if bug == "top-left" else i + (nk - nq)
    if bug == "decode-ahead" and nq < nk:
        pq = pq + 1  # the context length nk - nq + i + 1 taken as the position
    pk = np.arange(nk)
    ok = np.ones((len(i), nk), bool)
    if causal:
        ok &= pk[None, :] <= pq[:, None]
    if window >= 1:
        w = window + 1 if bug == "window+1" else window
        d = pq[:, None] - pk[None, :]
        if bug == "window-after+1":
            ok &= (d < w) & (d >= -w)  # |d| < W written as a half-open range, -W <= d < W
        else:
            ok &= np.abs(d) < w
    if chunk >= 1:  # numpy's // floors, negative positions included
        cq, ck = (pq + 1, pk + 1) if bug == "chunk+1" else (pq, pk)
        ok &= (cq // chunk)[:, None] == (ck // chunk)[None, :]
    if bug == "drop-last-key" and nk:
        ok[:, nk - 1] = False  # an exclusive end off by one: [k0, k1 - 1)
    return ok


def attention(q, k, v, *, dtype: str, causal, window: int, chunk: int, scale: float,
              softcap: float = 0.0, sinks=None, cu_seqlens_q=None, cu_seqlens_k=None,
              bug: str = "none", prev=None) -> Tuple[np.ndarray, np.ndarray]:
    """(out [B, Hq, Lq, Dv], lse [B, Hq, Lq]) as float32 arrays, out holding values of dtype.

    q [B, Hq, Lq, D], k [B, Hkv, Lk, D], v [B, Hkv, Lk, Dv] hold values of dtype; prev: the
    previous layer's (causal, window, chunk), used by the bug "stale-layer" (None: its own)."""
    if bug not in BUGS:
        raise ValueError(f"bug {bug!r}: one of {', '.join(BUGS)}")
    if dtype not in ("float32",) + LOWP:
        raise ValueError(f"dtype {dtype!r}: float32, float16 or bfloat16")
    q = np.asarray(q, np.float32)
    k = np.asarray(k, np.float32)
    v = np.asarray(v, np.float32)
    nb, hq, lq, d = q.shape
    hkv, lk, dv = k.shape[1], k.shape[2], v.shape[3]
    if bug == "stale-layer" and prev is not None:
        causal, window, chunk = prev
    causal, window, chunk = bool(causal), int(window), int(chunk)
    sc = np.float32(1.0 / d if bug == "scale-1/D" else scale)
    cap = np.float32(softcap or 0.0)
    lowp = dtype in LOWP
    out = np.zeros((nb, hq, lq, dv), np.float32)
    lse = np.full((nb, hq, lq), -np.inf, np.float32)
    for b in range(nb):
        for q0, q1, k0, k1 in _sequences(b, lq, lk, cu_seqlens_q, cu_seqlens_k):
            nq, nk = q1 - q0, k1 - k0
            # packed-leak: the key slice from the previous sequence's last key (a fencepost)
            lead = 1 if bug == "packed-leak" and k0 > 0 else 0
            for h in range(hq):
                kvh = h // (hq // hkv)  # GQA: neighbouring query heads share a kv head
                ks, vs = k[b, kvh, k0 - lead:k1], v[b, kvh, k0 - lead:k1]
                sh = {"sink-kv-head": kvh, "sink-prev-head": h - 1}.get(bug, h)
                sink = None if sinks is None else np.float32(sinks[sh])
                for c0 in range(0, nq, ROW_CHUNK):
                    i = np.arange(c0, min(nq, c0 + ROW_CHUNK))
                    o_rows, l_rows = _rows(q[b, h, q0 + i], ks, vs, i, nq, nk, causal, window,
                                           chunk, sc, cap, sink, dtype, lowp, bug, lead)
                    out[b, h, q0 + i] = o_rows
                    lse[b, h, q0 + i] = l_rows
    return out, lse


def _rows(qs, ks, vs, i, nq, nk, causal, window, chunk, sc, cap, sink, dtype, lowp, bug,
          lead=0):
    """Output and LSE rows of the queries i (indices in their sequence) over the sequence's
    keys ks, vs (lead > 0: packed-leak's key slice, one key more in front)."""
    rows = len(i)
    s = (qs @ ks.T).astype(np.float32)
    if cap and bug == "softcap-before-scale":
        s = sc * (cap * np.tanh(s / cap))  # q.k capped, then scaled
    else:
        s = s * sc
        if bug == "softmax-lowp-scores" and lowp:
            s = rnd(s, dtype)  # the scaled score stored in the input type
        if cap:
            s = cap * np.tanh(s / cap)  # float32 throughout; masked keys are filled after
    ok = _allowed(i, nq, nk, causal, window, chunk, bug)
    if lead:  # the slice's extra key: the padding lets the sequence's first query through
        ok = np.concatenate([(i == 0)[:, None], ok], axis=1)
    fill = MASK_FILL if bug == "masked-row-mean" else np.float32(-np.inf)
    s = np.where(ok, s, fill).astype(np.float32)
    m = s.max(axis=1) if nk + lead else np.full(rows, -np.inf, np.float32)
    if sink is not None:
        m = np.maximum(m, sink)
    empty = np.isneginf(m)  # no allowed key (or, with the fill, no key) and no sink
    guard = bug != "masked-row-nan"  # the bug: exp(s - m) with m = -inf, 0/0 downstream
    m0 = np.where(empty & guard, np.float32(0), m).astype(np.float32)
    if bug in ("softmax-lowp", "softmax-lowp-scores") and lowp:
        # P and its sum in the input type: each weight exp(s - m) (computed in float32) rounded
        # to it, and the sum of the rounded weights accumulated in it, key by key.
        p = rnd(np.exp(s - m0[:, None]), dtype)
        ps = rnd(np.exp(sink - m0), dtype) if sink is not None else np.float32(0)
        l = rnd(lowp_sum(p, dtype) + ps, dtype)
    else:
        with np.errstate(invalid="ignore"):  # masked-row-nan: -inf - -inf
            p = np.exp(s - m0[:, None]).astype(np.float32)
        ps = np.exp(sink - m0).astype(np.float32) if sink is not None else np.float32(0)
        l = (p.sum(axis=1, dtype=np.float32) + ps).astype(np.float32)
    with np.errstate(invalid="ignore"):  # NaN weights (masked-row-nan) times V
        pv = (rnd(p, dtype) if lowp else p) @ vs  # FlexAttention: P rounded before P.V
    with np.errstate(invalid="ignore", divide="ignore"):
        o = (pv / l[:, None]).astype(np.float32)
        lse = (m0 + np.log(l)).astype(np.float32)
    if guard:
        o[empty] = 0.0
        lse[empty] = -np.inf
    o = rnd(o, dtype)
    if bug == "lse-bf16" and lowp:
        lse = rnd(lse, dtype)  # JAX: the LSE in the input type, stored as float32
    return o, lse


# ---- running the engine on exported files ----------------------------------------------------

def case_attention(c: "fixtures.Case", bug: str, prev=None) -> Tuple[np.ndarray, np.ndarray]:
    return attention(c.q, c.k, c.v, dtype=c.dtype, causal=c.causal, window=c.window,
                     chunk=c.chunk, scale=c.scale, softcap=c.softcap, sinks=c.sinks,
                     cu_seqlens_q=c.cu_seqlens_q, cu_seqlens_k=c.cu_seqlens_k, bug=bug,
                     prev=prev)


def _stored(out: np.ndarray, dtype: str):
    """(array, encoding) as add_tested stores an output of dtype."""
    if dtype == "bfloat16":
        return fixtures.bfloat16_bits(out), "bfloat16"
    if dtype == "float16":
        return out.astype(np.float16), None
    return out, None


def store_file(path: str, bugs: Sequence[str], labels: Dict[str, str]) -> List[dict]:
    """Every case of one file run under each bug, stored under its label (an existing output
    under the label is replaced). Returns one note per (case, bug): case_id, and whether the
    output or LSE differs from the bug-free engine's (bitwise)."""
    names = fixtures.list_cases(path)
    ids = case_ids([path])
    notes = []
    prev = None
    for name in names:
        c = fixtures.read_case(path, name)
        mask = (c.causal, c.window, c.chunk)
        case_id = ids[(os.path.basename(path), name)]
        clean = case_attention(c, "none")
        for bug in bugs:
            # stale-layer: layer 0 (and a file that is no layout) keeps its own mask
            o, l = clean if bug == "none" else case_attention(
                c, bug, prev if c.layout is not None else None)
            arr, enc = _stored(o, c.dtype)
            # the engine rounds P as FlexAttention's tiled kernels do and says so: the p-round
            # designs hold it to that (docs/tolerance.md)
            fixtures.add_tested(path, name, labels[bug], arr, encoding=enc, lse=l,
                                producer=f"outsider.py numpy engine, planted bug {bug}",
                                overwrite=True, rounding="flexattention")
            changed = not (np.array_equal(o, clean[0], equal_nan=True)
                           and np.array_equal(l, clean[1], equal_nan=True))
            notes.append({"file": os.path.basename(path), "case": name, "case_id": case_id,
                          "bug": bug, "changed": bool(changed)})
        prev = mask
    return notes


# ---- reading check's lines -------------------------------------------------------------------

@dataclasses.dataclass
class Record:
    """One output under test as `check` judged it."""
    file: str
    case: str
    label: str
    verdict: str = "PASS"                 # PASS, FAIL, OUTSIDE, ERROR (rows.json's outcome)
    first_gate: str = ""                  # rows.json first_fail
    detail: str = ""
    failing_rows: Optional[int] = None    # "diagnosis: N of M rows failing"
    nonfinite_rows: int = 0
    examined_rows: Optional[int] = None   # "..., E examined under H hypotheses"
    diagnosis: str = ""                   # "", "run", "not run: ...", "no row to examine"
    h2_alone: bool = False                # "H2 alone failed: ..." (rows by their H2 share)
    # What the diagnosis claims as causes (diag.h): (title, rows, kind), kind "cause" (the one
    # hypothesis explaining every examined row), "tie" (one of several that all do,
    # indistinguishable) or "head" (every failing row of some heads; rows = those rows).
    claims: List[Tuple[str, int, str]] = dataclasses.field(default_factory=list)
    partial: List[Tuple[str, int]] = dataclasses.field(default_factory=list)  # no cause
    unexplained_rows: int = 0             # finite rows no cause covers
    not_examined_rows: int = 0            # left out by the work budget
    # Hypotheses that fit every failing row but are not the cause (diag.h): (title, why), why
    # "passing" (passing rows contradict it) or "closer" (no 4x closer than the correct output)
    refuted: List[Tuple[str, str]] = dataclasses.field(default_factory=list)
    edge_fail: bool = False               # a window-edge line named it
    changed: Optional[bool] = None        # differs from the bug-free engine's output
    case_id: str = ""                     # the report row's id and dtype (case_ids)


RE_OUTPUT = re.compile(r"^(FAIL|OUTSIDE|PASS) (\S+) (\S+) tested/(\S+) (\S+) \(.*, out stored as "
                       r"\S+\): (.*)$")
RE_EDGE = re.compile(r"^FAIL (\S+) (\S+) tested/(\S+): window-edge: (.*)$")
RE_DIAG = re.compile(r"^    diagnosis: (\d+) of (\d+) rows failing \((\d+) non-finite\), (\d+) "
                     r"examined")
RE_TIE = re.compile(r"^    explained by one of (\d+) hypotheses, each within the bounds on every "
                    r"failing row, none \S+ times closer \(indistinguishable here\): (.*): all "
                    r"(\d+) failing rows?")
RE_CAUSE = re.compile(r"^    explained by (.*): all (\d+) failing rows?")
RE_HEAD = re.compile(r"^    explained in (\d+) heads? by (.*): all (\d+) failing rows? there: ")
RE_PARTIAL = re.compile(r"^    partial fits, no cause: (.*)$")
RE_PART1 = re.compile(r"^(.*) on (\d+) of (\d+) rows$")
RE_NOTX = re.compile(r"^    not explained: (\d+) rows?: (.*)$")
RE_SKIP = re.compile(r"^    not examined \(work budget of \d+ multiply-adds\): (\d+) rows?")
RE_REFUTED = re.compile(r"^    fits every failing row, but not the cause: (.*?): (\d+ of the \d+ "
                        r"passing rows checked|it reproduces the failing values no)")


def _diag_line(r: Record, line: str) -> None:
    """One indented line under an output's verdict (diag/diag_print.c diag_print) into r."""
    if line.startswith("    diagnosis: not run"):
        r.diagnosis = line.strip()[len("diagnosis: "):]
    elif line.startswith("    diagnosis: every row is within"):
        r.diagnosis = "no row to examine"
    elif (m := RE_DIAG.match(line)):
        r.diagnosis = "run"
        r.failing_rows, r.nonfinite_rows = int(m.group(1)), int(m.group(3))
        r.examined_rows = int(m.group(4))
    elif line.startswith("    H2 alone failed"):
        r.h2_alone = True
    elif (m := RE_TIE.match(line)):
        n = int(m.group(3))
        r.claims += [(t, n, "tie") for t in m.group(2).split("; ")]
    elif (m := RE_HEAD.match(line)):
        r.claims.append((m.group(2), int(m.group(3)), "head"))
    elif (m := RE_CAUSE.match(line)):
        r.claims.append((m.group(1), int(m.group(2)), "cause"))
    elif (m := RE_PARTIAL.match(line)):
        for item in m.group(1).split("; "):
            mm = RE_PART1.match(item)
            r.partial.append((mm.group(1), int(mm.group(2))) if mm else (item, 0))
    elif (m := RE_NOTX.match(line)):
        if not m.group(2).endswith("(non-finite output: H3)"):
            r.unexplained_rows += int(m.group(1))
    elif (m := RE_SKIP.match(line)):
        r.not_examined_rows += int(m.group(1))
    elif (m := RE_REFUTED.match(line)):
        r.refuted.append((m.group(1), "closer" if m.group(2).startswith("it") else "passing"))


def parse_check(stdout: str) -> Dict[Tuple[str, str, str], Record]:
    """Records keyed by (file basename, case, label) from check's stdout (--quiet: failed and
    outside-contract outputs, and window-edge lines)."""
    recs: Dict[Tuple[str, str, str], Record] = {}
    cur: Optional[Record] = None
    for line in stdout.splitlines():
        m = RE_OUTPUT.match(line)
        if m:
            key = (os.path.basename(m.group(2)), m.group(3), m.group(4))
            cur = recs.setdefault(key, Record(*key))
            cur.verdict, cur.detail = m.group(1), m.group(6)
            continue
        m = RE_EDGE.match(line)
        if m:
            key = (os.path.basename(m.group(1)), m.group(2), m.group(3))
            r = recs.setdefault(key, Record(*key))
            r.verdict, r.edge_fail = "FAIL", True
            cur = None
            continue
        if not line.startswith("    "):
            cur = None
        elif cur is not None:
            _diag_line(cur, line)
    return recs


def read_rows(report_dir: str) -> List[dict]:
    """rows.json's rows of outputs under test (backend tested/<label>)."""
    with open(os.path.join(report_dir, "rows.json"), encoding="utf-8") as fh:
        rows = json.load(fh)["rows"]
    return [r for r in rows if str(r.get("backend", "")).startswith("tested/")]


def case_ids(files: Sequence[str]) -> Dict[Tuple[str, str], str]:
    """(file basename, case) -> "<id> <dtype>": what tells check's report rows apart. The id is
    the case_id attribute, else "<basename>:<case>" (check/tally.c); one exported case id names
    a case in each of its dtypes (an M1 file holds three), so the dtype goes with it."""
    import h5py  # case_id is flexcheck's own attribute, not a field of fixtures.Case

    ids = {}
    for path in files:
        base = os.path.basename(path)
        with h5py.File(path, "r") as f:
            for name, g in f["cases"].items():
                cid, dt = g.attrs.get("case_id"), g.attrs.get("dtype")
                cid, dt = (x.decode() if isinstance(x, bytes) else x for x in (cid, dt))
                cid = cid if isinstance(cid, str) and cid else f"{base}:{name}"
                ids[(base, name)] = f"{cid} {dt}"
    return ids


OUTCOMES = {"pass": "PASS", "fail": "FAIL", "outside-contract": "OUTSIDE", "error": "ERROR",
            "skip": "SKIP"}


def run_check(bin_path: str, files: Sequence[str], jobs: int) -> Tuple[List[Record], List[str]]:
    """check on the files in `jobs` parts at once; (one record per judged output, problems:
    what check wrote to stderr, and exit statuses other than 0 and 1). The verdict and first
    failing gate come from the report's rows.json (it lists passed outputs too), the
    diagnosis from check's lines."""
    parts = [list(files[i::jobs]) for i in range(jobs) if files[i::jobs]]
    ids = case_ids(files)
    problems: List[str] = []
    records: List[Record] = []
    with tempfile.TemporaryDirectory(prefix="outsider-check-") as tmp:
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
        procs = []
        for n, part in enumerate(parts):
            rep = os.path.join(tmp, f"r{n}")
            procs.append((rep, subprocess.Popen(
                [bin_path, "check", "--quiet", "--report", rep, *part], stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, env=env)))
        for rep, p in procs:
            so, se = p.communicate()
            if p.returncode not in (0, 1):
                problems.append(f"check exited {p.returncode}")
            problems += [ln for ln in se.splitlines() if ln.strip()]
            by_id = {(ids.get((r.file, r.case), r.case), r.label): r
                     for r in parse_check(so).values()}
            if not os.path.exists(os.path.join(rep, "rows.json")):
                problems.append("check wrote no rows.json")
                continue
            for row in read_rows(rep):
                label = row["backend"][len("tested/"):]
                rid = f"{row['case_id']} {row['dtype']}"
                r = by_id.pop((rid, label), None) or Record(file="", case=rid, label=label)
                r.case_id = rid
                r.first_gate = row.get("first_fail") or ""
                r.verdict = OUTCOMES.get(row.get("outcome"), str(row.get("outcome")))
                records.append(r)
            problems += [f"check printed {k} with no report row" for k in by_id]
    return records, problems


# ---- the tables ------------------------------------------------------------------------------

# diag_run.c names hypotheses that compute the same rows on a case in one title:
# "window W+1 (1 -> 2), here the same as window doubled 2W".
SAME_AS = ", here the same as "


def _prefix_match(title: str, prefixes: Optional[Tuple[str, ...]]) -> bool:
    """Whether one of the names in title (several when merged) starts with one of prefixes."""
    return bool(prefixes) and any(name.startswith(p) for name in title.split(SAME_AS)
                                  for p in prefixes)


def _short(title: str) -> str:
    """A title without its case's values: "window W+1 (8 -> 9)" -> "window W+1"."""
    return title.split(" (")[0]


COLUMNS = ("judged", "changed", "failed", "named alone", "named with others", "not named",
           "(another claimed)", "(another alone)", "(partial fit only)", "no rows diagnosed",
           "unexplained rows", "rows not examined")


def bug_table(bug: str, label: str, recs: Sequence[Record]) -> Tuple[dict, List[str]]:
    """The counts for one bug and its section of the summary (markdown)."""
    exp = EXPECTED.get(bug)
    failed = [r for r in recs if r.verdict == "FAIL"]
    n = collections.Counter()
    claimed = collections.Counter()
    for r in failed:
        n["unexpl"] += r.unexplained_rows
        n["skipped"] += r.not_examined_rows
        if r.diagnosis != "run":  # failed by an exactness rule, or nothing to examine
            n["no_rows"] += 1
        mine = [c for c in r.claims if _prefix_match(c[0], exp)]
        for t, _, kind in r.claims:
            if not _prefix_match(t, exp):
                claimed[f"{_short(t)}{'' if kind == 'cause' else f' ({kind})'}"] += 1
        n["any_claim"] += bool(r.claims)
        for t, why in r.refuted:
            n["refuted_" + why] += 1
            n["refuted_expected"] += _prefix_match(t, exp)
        n["claim_expected"] += bool(mine)
        n["claim_other"] += any(not _prefix_match(t, exp) for t, _, _ in r.claims)
        if mine:
            if len(r.claims) == 1 and mine[0][2] == "cause":
                n["alone"] += 1
                n["alone_merged"] += SAME_AS in mine[0][0]
            else:
                n["with_others"] += 1
        else:
            n["not_named"] += 1
            n["others_only"] += bool(r.claims)
            # a confident wrong cause: another hypothesis, the only one, explaining every row
            n["other_alone"] += len(r.claims) == 1 and r.claims[0][2] == "cause"
            n["partial_only"] += any(_prefix_match(t, exp) for t, _ in r.partial)
    c = {"bug": bug, "label": label, "judged": len(recs),
         "changed": sum(1 for r in recs if r.changed),
         "changed_known": all(r.changed is not None for r in recs),
         "failed": len(failed), "outside": sum(1 for r in recs if r.verdict == "OUTSIDE"),
         "errors": sum(1 for r in recs if r.verdict == "ERROR"),
         "alone": n["alone"], "alone_merged": n["alone_merged"], "with_others": n["with_others"], "not_named": n["not_named"],
         "others_only": n["others_only"], "other_alone": n["other_alone"],
         "partial_only": n["partial_only"], "no_rows": n["no_rows"],
         "unexplained_rows": n["unexpl"], "not_examined_rows": n["skipped"],
         "any_claim": n["any_claim"], "claim_expected": n["claim_expected"],
         "claim_other": n["claim_other"],
         "refuted_passing": n["refuted_passing"], "refuted_closer": n["refuted_closer"],
         "refuted_expected": n["refuted_expected"],
         "gates": dict(collections.Counter(r.first_gate or "-" for r in failed)),
         "claimed": dict(claimed.most_common()), "expected": list(exp) if exp else None,
         "silent": sum(1 for r in recs if r.changed and r.verdict != "FAIL")}
    lines = [f"### {bug} (tested/{label})", ""]
    lines.append("expected hypothesis: " + (" or ".join(f'"{p}"' for p in exp) if exp else
                                            "none (no hypothesis models this bug)"))
    lines += ["", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS),
              "| " + " | ".join(_cells(c)) + " |", ""]
    if bug in ("lse-bf16", "none"):
        lines.append(f"- a correct output{' with its LSE rounded' if bug == 'lse-bf16' else ''}: "
                     f"{c['failed']} failures; {c['any_claim']} of them with an \"explained "
                     f"by\" line (a claimed cause): {c['claim_expected']} naming the expected "
                     f"hypothesis, {c['claim_other']} naming another")
    if c["alone_merged"]:
        lines.append(f"- of the named alone, {c['alone_merged']} under a title naming with it the "
                     f"hypotheses that compute the same rows on that case (\"{SAME_AS.strip()}\")")
    lines.append(f"- outside the contract: {c['outside']}; not judged (error): {c['errors']}")
    lines.append(f"- fitting every failing row but not named (diag.h's refutations; no cause is "
                 f"named that a passing row contradicts): {c['refuted_passing']} contradicted by "
                 f"passing rows, {c['refuted_closer']} no 4x closer than the correct output "
                 f"({c['refuted_expected']} of them the expected hypothesis)")
    if c["changed_known"]:
        lines.append(f"- changed by the bug but passed the gates: {c['silent']}")
    if c["gates"]:
        lines.append("- first failing gate: " + ", ".join(
            f"{g} {k}" for g, k in sorted(c["gates"].items(), key=lambda x: -x[1])))
    if claimed:
        lines.append("- other hypotheses claimed as causes (outputs; tie = among "
                     "indistinguishable ones, head = in some heads): " + "; ".join(
                         f"{t} {k}" for t, k in claimed.most_common()))
    lines.append("")
    return c, lines


def _cells(c: dict) -> List[str]:
    """The COLUMNS of one bug's counts ("-" where no hypothesis is expected)."""
    na = (lambda x: str(x)) if c["expected"] else (lambda x: "-")
    return [str(c["judged"]), str(c["changed"]) if c["changed_known"] else "?", str(c["failed"]),
            na(c["alone"]), na(c["with_others"]), str(c["not_named"]), str(c["others_only"]),
            str(c["other_alone"]), na(c["partial_only"]), str(c["no_rows"]),
            str(c["unexplained_rows"]), str(c["not_examined_rows"])]


def overview(counts: Sequence[dict]) -> List[str]:
    """One row per bug: the columns of the per-bug tables side by side."""
    lines = ["| bug | expected hypothesis | " + " | ".join(COLUMNS) + " |",
             "|" + "---|" * (len(COLUMNS) + 2)]
    for c in counts:
        exp = " / ".join(c["expected"]) if c["expected"] else "(none)"
        lines.append(f"| {c['bug']} | {exp} | " + " | ".join(_cells(c)) + " |")
    return lines


# ---- the command line ------------------------------------------------------------------------

def _store_one(args):
    path, bugs, labels = args
    return store_file(path, bugs, labels)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("export_dir", help="a folder of `flexcheck export` files (*.h5)")
    ap.add_argument("--bug", action="append", required=True,
                    help=f"one of {', '.join(BUGS)}, or all; repeatable")
    ap.add_argument("--label", help="the tested/<label> (one --bug only; default per bug)")
    ap.add_argument("--jobs", type=int, default=1, help="files processed at once")
    ap.add_argument("--check", metavar="BIN", help="then judge with BIN check and print tables")
    ap.add_argument("--summary", metavar="FILE", help="also write the tables (markdown) here")
    ap.add_argument("--json", metavar="FILE", help="also write the counts and records here")
    ap.add_argument("--no-store", action="store_true",
                    help="judge outputs a previous run stored (needs --check)")
    a = ap.parse_args(argv)
    bugs: List[str] = []
    for b in a.bug:
        for x in (BUGS if b == "all" else [b]):
            if x not in BUGS:
                ap.error(f"--bug {x!r}: one of {', '.join(BUGS)}, or all")
            if x not in bugs:
                bugs.append(x)
    labels = dict(LABELS)
    if a.label:
        if len(bugs) != 1:
            ap.error("--label names the output of one --bug")
        if not fixtures.LABEL_RE.fullmatch(a.label):
            ap.error(f"--label {a.label!r}: must match [A-Za-z0-9._-]{{1,64}}")
        labels[bugs[0]] = a.label
    if a.jobs < 1:
        ap.error("--jobs: at least 1")
    if a.no_store and not a.check:
        ap.error("--no-store needs --check")
    files = sorted(glob.glob(os.path.join(a.export_dir, "*.h5")))
    if not files:
        print(f"outsider: {a.export_dir}: no *.h5 files", file=sys.stderr)
        return 2
    manifest = os.path.join(a.export_dir, "outsider-changed.json")
    t0 = time.monotonic()
    # (case id and dtype, label) -> whether the output differs from the bug-free engine's: kept beside
    # the files so that a later --no-store run can still say it
    changed: Dict[Tuple[str, str], bool] = {}
    if os.path.exists(manifest):
        with open(manifest, encoding="utf-8") as fh:
            for n in json.load(fh):
                changed[(n["case_id"], n["label"])] = n["changed"]
    if not a.no_store:
        work = [(f, bugs, labels) for f in files]
        if a.jobs > 1:
            with concurrent.futures.ProcessPoolExecutor(a.jobs) as ex:
                notes = [n for ns in ex.map(_store_one, work) for n in ns]
        else:
            notes = [n for w in work for n in _store_one(w)]
        for n in notes:
            changed[(n["case_id"], labels[n["bug"]])] = n["changed"]
        with open(manifest, "w", encoding="utf-8") as fh:
            json.dump([{"case_id": c, "label": l, "changed": v}
                       for (c, l), v in sorted(changed.items())], fh)
        print(f"outsider: {len(notes)} outputs stored ({len(bugs)} bugs, {len(files)} files) "
              f"in {time.monotonic() - t0:.1f} s")
    if not a.check:
        return 0
    t1 = time.monotonic()
    records, problems = run_check(a.check, files, a.jobs)
    t_check = time.monotonic() - t1
    for p in problems:
        print(f"outsider: check: {p}", file=sys.stderr)
    by_label = collections.defaultdict(list)
    for r in records:
        r.changed = changed.get((r.case_id, r.label))
        by_label[r.label].append(r)
    out = ["# outsider: planted bugs under flexcheck's diagnosis", "",
           f"{len(files)} files of {a.export_dir}; check took {t_check:.1f} s "
           f"({a.jobs} parts); total {time.monotonic() - t0:.1f} s. p-round designs "
           f"(`<dtype>@design`) are included.", "",
           "Columns: judged = outputs check judged; changed = outputs that differ bitwise from "
           "the bug-free engine's; failed = FAIL (gates, or an exactness rule); of the failed: "
           "named alone = the planted bug's hypothesis is the one cause claimed (\"explained by "
           "T: all N failing rows\", no other claim); named with others = it is claimed, but "
           "among indistinguishable ones, per head, or beside other claims; not named = no "
           "claim names it, of which another claimed = other causes are claimed, another alone = "
           "one other hypothesis is the only claim, for every examined row (a confident wrong "
           "cause), partial fit only = it appears only on the \"partial fits, no cause\" "
           "line; no rows diagnosed = the diagnosis examined no row or did not run "
           "(window-edge, p-round); unexplained rows = finite failing rows no cause covers, "
           "summed; rows not examined = past the diagnosis's work budget, summed.", ""]
    counts, sections = [], []
    for bug in bugs:
        c, lines = bug_table(bug, labels[bug], by_label.get(labels[bug], []))
        counts.append(c)
        sections += lines
    out += overview(counts) + [""] + sections
    text = "\n".join(out)
    print(text)
    if a.summary:
        with open(a.summary, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as fh:
            json.dump({"counts": counts, "records": [dataclasses.asdict(r) for r in records]},
                      fh, indent=1)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
