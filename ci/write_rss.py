#!/usr/bin/env python3
"""write_rss.py - how much memory flexcheck.write_case / add_tested hold above their inputs.

Builds one layer's tensors (random values exactly representable in --dtype), then measures the
process's peak resident set during one call against its resident set just before it, so the
inputs are in the baseline and the figure is what the call itself adds:

    /usr/bin/python3 ci/write_rss.py --dir /tmp/x --hq 4 --hkv 2 --len 131072 --dim 128 \
        --dtype bfloat16 [--source numpy|memmap|torch] [--packed] [--what write_case|add_tested]

The peak is VmHWM of /proc/self/status after resetting it with /proc/self/clear_refs (Linux);
where that reset is refused, ru_maxrss, which then also covers building the inputs (built one
slab at a time, so that stays near the baseline). Inputs are built slab by slab for the same
reason. One call per process: run it fresh for each figure. Prints one line,
`peak_above_MiB=<n> ...`, that python/tests/test_fixtures.py parses.

--what add_tested writes a case first (its q and k hold D = 8 and 256 keys: add_tested reads only
their shapes), then measures add_tested of out [1, Hq, L, --dim] (packed [L, Hq, --dim]) with an
LSE [1, Hq, L] float32 (packed [Hq, L]). Its out is float16/float32 as --dtype, and bfloat16 as
uint16 bit patterns (numpy, memmap) or a torch bfloat16 tensor. --source memmap: the tensors are
np.memmap files in --dir opened read-only, so they are not resident before the call.
"""
import argparse
import gc
import os
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))
import flexcheck  # noqa: E402

SLAB = 1 << 20  # elements filled at a time


def status_kib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/self/status")


def fill(a, rng, dtype):
    """a (numpy, memmap) filled slab by slab with normal values exact in dtype."""
    flat = a.reshape(-1)
    for i in range(0, flat.size, SLAB):
        x = rng.standard_normal(min(SLAB, flat.size - i), dtype=np.float32)
        if dtype == "bfloat16":  # cut to bfloat16: exact, and stored as float32 (or bits)
            x = (x.view(np.uint32) & 0xFFFF0000).view(np.float32)
        if flat.dtype == np.uint16:
            flat[i:i + x.size] = x.view(np.uint32) >> 16
        else:
            flat[i:i + x.size] = x


def make(shape, dtype, source, folder, name, rng, bits=False):
    """One tensor of `shape` holding values exact in dtype: float32 for float32 and bfloat16
    (or uint16 bit patterns with bits=True), float16 for float16; torch bfloat16 for torch."""
    np_type = np.float16 if dtype == "float16" else np.uint16 if bits else np.float32
    if source == "memmap":
        fn = os.path.join(folder, f"{name}.bin")
        a = np.memmap(fn, np_type, "w+", shape=shape)
        fill(a, rng, dtype)
        a.flush()
        del a
        return np.memmap(fn, np_type, "r", shape=shape)  # a fresh mapping: nothing resident
    a = np.empty(shape, np.float16 if dtype == "float16" else np.float32 if source == "torch"
                 else np_type)
    fill(a, rng, dtype)
    if source == "torch":
        import torch
        t = torch.from_numpy(a)
        if dtype == "bfloat16":  # converted slab by slab into a bfloat16 tensor
            b = torch.empty(shape, dtype=torch.bfloat16)
            bf, tf = b.reshape(-1), t.reshape(-1)
            for i in range(0, tf.numel(), SLAB):
                bf[i:i + SLAB] = tf[i:i + SLAB]
            del t, a, bf, tf
            return b
        return t
    return a


def nbytes(x):
    return x.numel() * x.element_size() if hasattr(x, "numel") else x.nbytes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, help="folder for the file (and memmap inputs)")
    ap.add_argument("--hq", type=int, default=4)
    ap.add_argument("--hkv", type=int, default=2)
    ap.add_argument("--len", type=int, default=131072, help="tokens (Lq = Lk)")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--dtype", default="bfloat16", choices=flexcheck.DTYPES)
    ap.add_argument("--source", default="numpy", choices=("numpy", "memmap", "torch"))
    ap.add_argument("--packed", action="store_true", help="vLLM's [T, H, D] with cu_seqlens")
    ap.add_argument("--what", default="write_case", choices=("write_case", "add_tested"))
    a = ap.parse_args()
    if a.source == "torch":
        import torch  # noqa: F401  (before the baseline: importing it is not the call's)
    os.makedirs(a.dir, exist_ok=True)
    path = os.path.join(a.dir, "rss.h5")
    if os.path.exists(path):
        os.unlink(path)
    rng = np.random.default_rng(1)
    n = a.len

    def shape(h, d, length=n):
        return (length, h, d) if a.packed else (1, h, length, d)

    cu = dict(cu_seqlens_q=[0, n], cu_seqlens_k=[0, n]) if a.packed else {}
    if a.what == "write_case":
        tensors = [make(shape(h, a.dim), a.dtype, a.source, a.dir, t, rng)
                   for t, h in (("q", a.hq), ("k", a.hkv), ("v", a.hkv))]

        def call():
            flexcheck.write_case(path, "c", *tensors, dtype=a.dtype, causal=True, **cu)
    else:
        small = 256
        q = make(shape(a.hq, 8), a.dtype, "numpy", a.dir, "q", rng)
        k = make(shape(a.hkv, 8, small), a.dtype, "numpy", a.dir, "k", rng)
        v = make(shape(a.hkv, a.dim, small), a.dtype, "numpy", a.dir, "v", rng)
        if a.packed:
            cu["cu_seqlens_k"] = [0, small]
        flexcheck.write_case(path, "c", q, k, v, dtype=a.dtype, **cu)
        del q, k, v
        bits = a.dtype == "bfloat16" and a.source != "torch"
        out = make(shape(a.hq, a.dim), a.dtype, a.source, a.dir, "out", rng, bits=bits)
        lse = rng.standard_normal((a.hq, n) if a.packed else (1, a.hq, n), dtype=np.float32)
        tensors = [out, lse]

        def call():
            flexcheck.add_tested(path, "c", "t", out, lse=lse, producer="write_rss",
                                 encoding="bfloat16" if bits else None)
    gc.collect()
    inputs = sum(nbytes(x) for x in tensors)
    base = status_kib("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident set
        how = "VmHWM"
    except OSError:
        how = "ru_maxrss"
    t0 = time.time()
    call()
    secs = time.time() - t0
    peak = (status_kib("VmHWM") if how == "VmHWM"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    mib = 1 << 20
    print(f"peak_above_MiB={(peak - base) / 1024:.1f} what={a.what} source={a.source} "
          f"dtype={a.dtype} packed={int(a.packed)} hq={a.hq} hkv={a.hkv} len={n} dim={a.dim} "
          f"inputs_MiB={inputs / mib:.1f} baseline_MiB={base / 1024:.1f} "
          f"peak_MiB={peak / 1024:.1f} ({how}) file_MiB={os.path.getsize(path) / mib:.1f} "
          f"seconds={secs:.1f}")
    os.unlink(path)
    for t in ("q", "k", "v", "out"):
        if os.path.exists(os.path.join(a.dir, f"{t}.bin")):
            os.unlink(os.path.join(a.dir, f"{t}.bin"))


if __name__ == "__main__":
    main()
