"""flexcheck.bench_torch_blockmask - PyTorch's create_block_mask beside flexcheck's direct
block-mask builder, measured in one run, block sets checked identical (`make
bench-torch-blockmask`; not part of `make test`).

    python -m flexcheck.bench_torch_blockmask [--bin build/flexcheck] [--l N[,N]] [--reps R]
                                              [--eager-max-gb G] [--threads N]

For each length L (default 65536) and mask (causal W=1024, causal, causal chunked C=8192), on
the CPU, blocks 128 x 128 (what `flexcheck bench blockmask` measures):

  - PyTorch compiled: torch.compile(create_block_mask); the first call compiles and is not
    timed, then the median of R calls (default 3);
  - PyTorch uncompiled, where its memory allows: it materializes the L x L mask, about 13 bytes
    an element (3.25 GB measured at 16k), so it runs only where that estimate is within
    --eager-max-gb (default 10; 64k would need about 52 GB); the median of R calls;
  - flexcheck's direct builder: `flexcheck bench blockmask --l L --json` (the median elapsed
    time of its builds over 0.2 s of repeats, the builder checked there first: against the
    slow builder up to 16k, past it against every row's allowed range);
  - the block sets: PyTorch's kv_num_blocks / kv_indices and full_kv_num_blocks /
    full_kv_indices against the direct builder's lists (`flexcheck blockmask --json`), every
    query tile's partial and full sets compared.

Then one line per (L, mask): the elapsed times and the ratios PyTorch / flexcheck (PyTorch
on all its threads, flexcheck on one), with the target
ratio of issue 16 (>= 10,000x compiled for causal W=1024 and chunked, >= 1,000x for causal)
said met or not (a benchmark reports; it does not fail on speed).

The mask_mods are the plain dense ones of PyTorch's own examples (q_idx >= kv_idx, ...), the
cheapest for create_block_mask to evaluate, so no ratio is inflated by a slow mask_mod (the
packed-batch mask_mod of flexcheck.torch_flex is not used here).

Exit status: 0 measured and every block set identical; 1 some block set differs; 2 bad
arguments, or a step could not run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import List, NamedTuple, Optional, Sequence

PROG = "bench_torch_blockmask"
# The blocks `flexcheck bench blockmask` times (cli/bench_blockmask.c); PyTorch's are made alike.
BLOCK = 128
# Bytes per element of the uncompiled create_block_mask's L x L intermediates: 3.25 GB
# measured at L = 16k (12.1 bytes), rounded up.
EAGER_BYTES_PER_ELEMENT = 13


class Mask(NamedTuple):
    name: str
    causal: bool
    window: int
    chunk: int
    target: int  # the ratio compiled PyTorch / flexcheck that issue 16 asks for


MASKS = (
    Mask("causal W=1024", True, 1024, 0, 10_000),
    Mask("causal", True, 0, 0, 1_000),
    Mask("causal C=8192", True, 0, 8192, 10_000),
)


# ---- pure helpers (no torch) ----

def mask_flags(m: Mask) -> List[str]:
    """flexcheck's mask options (MASK_PARAMS) for m."""
    return (["--causal"] if m.causal else []) + \
        (["--window", str(m.window)] if m.window else []) + \
        (["--chunk", str(m.chunk)] if m.chunk else [])


def find_ours(lines: Sequence[dict], m: Mask) -> dict:
    """The `bench blockmask --json` line of mask m (matched on its parameters, not its name)."""
    for d in lines:
        if (bool(d["causal"]), d["sliding_window"], d["chunk_size"]) == \
                (m.causal, m.window, m.chunk):
            return d
    raise ValueError(f"flexcheck bench blockmask printed no line for {m.name}")


def compare_rows(num, idx, fnum, fidx, rows: Sequence[dict]) -> Optional[str]:
    """None when PyTorch's block mask (arrays [NQB], [NQB, width] of one batch entry and head:
    partial counts and ids, full counts and ids) lists in every query tile the same partial and
    the same full kv tiles as flexcheck's rows ([{"partial": [...], "full": [...]}, ...]);
    else the first difference. Slots past a count are not read (PyTorch fills them with the
    unlisted ids)."""
    if len(num) != len(rows):
        return f"PyTorch has {len(num)} query tiles, flexcheck {len(rows)}"
    for r, row in enumerate(rows):
        for what, n, ids, ours in (("partial", num, idx, row["partial"]),
                                   ("full", fnum, fidx, row["full"])):
            theirs = sorted(int(x) for x in ids[r][:int(n[r])])
            if theirs != sorted(ours):
                only_t = sorted(set(theirs) - set(ours))[:8]
                only_o = sorted(set(ours) - set(theirs))[:8]
                return (f"query tile {r}, {what} kv tiles: only PyTorch lists {only_t}, only "
                        f"flexcheck {only_o} ({len(theirs)} vs {len(ours)} listed)")
    return None


def eager_gb(length: int) -> float:
    return EAGER_BYTES_PER_ELEMENT * float(length) ** 2 / 1e9


def ratio_text(a: Optional[float], b: float) -> str:
    return "-" if a is None else f"{a / b:,.0f}x"


def parse_lengths(text: str) -> List[int]:
    try:
        ls = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise ValueError(f"--l {text!r}: comma-separated integers")
    if not ls or any(n < 1 for n in ls):
        raise ValueError(f"--l {text!r}: lengths must be >= 1")
    return ls


# ---- flexcheck ----

def run_bin(argv: List[str]) -> str:
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()}"
                           f"{p.stdout.strip()[-500:]}")
    return p.stdout


def ours_times(binary: str, length: int) -> List[dict]:
    out = run_bin([binary, "bench", "blockmask", "--l", str(length), "--json"])
    return [json.loads(ln) for ln in out.splitlines() if ln.strip()]


def ours_rows(binary: str, length: int, block: int, m: Mask) -> List[dict]:
    out = run_bin([binary, "blockmask", "--lq", str(length), "--lk", str(length), "--qb",
                   str(block), "--kb", str(block), "--builder", "direct", "--json"]
                  + mask_flags(m))
    return json.loads(out)["rows"]


# ---- PyTorch ----

def mask_mod_of(m: Mask):
    """PyTorch's idiom for m on one dense sequence (Lq == Lk, so positions are indices)."""
    def mask_mod(b, h, q_idx, kv_idx):
        ok = q_idx >= kv_idx
        if m.window:
            ok = ok & (q_idx - kv_idx < m.window)
        if m.chunk:
            ok = ok & (q_idx // m.chunk == kv_idx // m.chunk)
        return ok
    return mask_mod


def timed(fn, reps: int):
    """(median seconds of reps calls, the last result)."""
    ts, res = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        res = fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), res


def torch_block_mask(cbm, mod, length: int, block: int, reps: int):
    """(seconds, BlockMask) of create_block_mask (cbm: compiled or not) on the CPU."""
    return timed(lambda: cbm(mod, None, None, length, length, device="cpu", BLOCK_SIZE=block),
                 reps)


def arrays(bm):
    """PyTorch's lists of batch entry 0, head 0 as numpy arrays."""
    return (bm.kv_num_blocks[0, 0].numpy(), bm.kv_indices[0, 0].numpy(),
            bm.full_kv_num_blocks[0, 0].numpy(), bm.full_kv_indices[0, 0].numpy())


# ---- the command ----

def _args(argv):
    ap = argparse.ArgumentParser(
        prog="python -m flexcheck.bench_torch_blockmask",
        description="PyTorch's create_block_mask (CPU, compiled and uncompiled) beside "
                    "flexcheck's direct block-mask builder, measured in one run, block sets "
                    "checked identical.")
    ap.add_argument("--bin", default="build/flexcheck", help="the flexcheck binary")
    ap.add_argument("--l", default="65536", metavar="N[,N]", help="lengths (default 65536)")
    ap.add_argument("--reps", type=int, default=3, help="timed PyTorch calls (default 3)")
    ap.add_argument("--eager-max-gb", type=float, default=10.0, metavar="G",
                    help="run uncompiled create_block_mask where its estimated memory is at "
                         "most G GB (default 10)")
    ap.add_argument("--threads", type=int, metavar="N", help="torch.set_num_threads(N)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    a = _args(argv)
    try:
        lengths = parse_lengths(a.l)
        if a.reps < 1 or (a.threads is not None and a.threads < 1):
            raise ValueError("--reps and --threads must be >= 1")
        if not os.access(a.bin, os.X_OK):
            raise ValueError(f"--bin {a.bin}: not an executable (make builds build/flexcheck)")
    except ValueError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    import torch
    from torch.nn.attention.flex_attention import create_block_mask
    from .torch_flex import _configure_dynamo
    if a.threads:
        torch.set_num_threads(a.threads)
    # Every (L, mask) is a new shape and mask_mod: without this dynamo would fall back to
    # running create_block_mask uncompiled after 8 of them, under the "compiled" column.
    _configure_dynamo(torch)
    # dynamic=False: code specialized to each length, PyTorch's fastest.
    compiled = torch.compile(create_block_mask, dynamic=False)
    print(f"{PROG}: torch {torch.__version__} on the CPU ({torch.get_num_threads()} threads, "
          f"{os.cpu_count()} CPUs), Python {platform.python_version()}; flexcheck {a.bin} "
          f"(one thread); blocks {BLOCK}x{BLOCK}; elapsed times, PyTorch the median of "
          f"{a.reps} calls (compiled: after a first, compiling call)")
    print(f"{'L':>7}  {'mask':<13}  {'listed':>8}  {'compiled ms':>11}  {'uncompiled ms':>13}  "
          f"{'flexcheck us':>12}  {'compiled/ours':>13}  {'uncompiled/ours':>15}  "
          f"{'target':>8}  block sets")
    rc = 0
    for length in lengths:
        try:
            ours = ours_times(a.bin, length)
        except (RuntimeError, ValueError) as e:
            print(f"{PROG}: {e}", file=sys.stderr)
            return 2
        for m in MASKS:
            try:
                d = find_ours(ours, m)
                rows = ours_rows(a.bin, length, BLOCK, m)
            except (RuntimeError, ValueError, KeyError) as e:
                print(f"{PROG}: {e}", file=sys.stderr)
                return 2
            if d["q_block_size"] != BLOCK:
                print(f"{PROG}: flexcheck bench blockmask measures blocks of "
                      f"{d['q_block_size']}, not {BLOCK}", file=sys.stderr)
                return 2
            ours_s = d["direct_us"] * 1e-6
            mod = mask_mod_of(m)  # one object: the timed calls reuse what the first compiled
            t_compile, _ = torch_block_mask(compiled, mod, length, BLOCK, 1)
            t_c, bm = torch_block_mask(compiled, mod, length, BLOCK, a.reps)
            diff = compare_rows(*arrays(bm), rows)
            t_e = None
            if eager_gb(length) <= a.eager_max_gb:
                t_e, bm_e = torch_block_mask(create_block_mask, mod, length, BLOCK, a.reps)
                diff = diff or compare_rows(*arrays(bm_e), rows)
            met = t_c / ours_s >= m.target
            print(f"{length:>7}  {m.name:<13}  {d['listed']:>8}  {t_c * 1e3:>11.1f}  "
                  f"{'-' if t_e is None else f'{t_e * 1e3:.1f}':>13}  {d['direct_us']:>12.1f}  "
                  f"{ratio_text(t_c, ours_s):>13}  {ratio_text(t_e, ours_s):>15}  "
                  f"{'met' if met else 'NOT met':>4} {m.target:,}x  "
                  f"{'identical' if diff is None else 'DIFFER: ' + diff}")
            skipped = "" if t_e is not None else \
                f"; uncompiled skipped: ~{eager_gb(length):.0f} GB"
            print(f"{'':>7}  (first compiled call {t_compile:.1f} s; flexcheck: median of "
                  f"{d['reps']} builds, {d['direct_cpu_us']:.1f} us CPU, "
                  f"{d['ns_per_block']:.2f} ns a listed block, checked against {d['checked']}"
                  f"{skipped})")
            sys.stdout.flush()
            if diff is not None:
                rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
