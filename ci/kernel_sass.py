#!/usr/bin/env python3
"""ci/kernel_sass.py - kernel 3's machine code checked for what its design relies on, on a
machine without a GPU (issue 40): for every instance of attn_v3_kernel in an nvcc object, for
each architecture compiled (sm_80, sm_90),

  - ptxas's resources (its -v log, the .o.log the Makefile keeps): registers, no spill stores or
    loads, no stack frame;
  - the SASS (cuobjdump -sass): tensor-core products (HMMA.16816), fragments through ldmatrix
    (LDSM.16.M88.4 for Q and K, LDSM.16.MT88.4 for V), asynchronous copies global -> shared
    (LDGSTS, cp.async), the tile loop's two block barriers (BAR.SYNC), and no local-memory
    instruction at all (LDL, STL, LDLK, STLK): the main loop's arrays live in registers;
  - the occupancy this gives on sm_90 (H100/H200: 64K registers, 228 KiB of shared memory a
    multiprocessor, at most 227 KiB a block, 1 KiB reserved per block, registers allocated per
    warp in units of 256), from the registers, 128 threads and the block's shared memory at its
    largest query tile.

Prints one markdown table (the figures committed under reports/) and exits 1 when a check fails,
naming the instance and what is missing; 2 when the tools or inputs are missing.

  python3 ci/kernel_sass.py [--obj build/nvcc/gpu/attn_launch.o] [--log OBJ.log]
                            [--cuobjdump PATH] [--kernel attn_v3_kernel]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

# The instructions the design relies on (every instance must hold each) and the forbidden ones.
REQUIRED = {
    "HMMA.16816": "tensor-core product (mma.sync m16n8k16)",
    "LDSM.16.M88.4": "ldmatrix .x4 (Q and K fragments)",
    "LDSM.16.MT88.4": "ldmatrix .x4 .trans (V fragments)",
    "LDGSTS": "cp.async global -> shared",
}
# Block barriers: the tile loop's two (K landed, V landed; gpu/attn_v3.cuh). One alone means a
# barrier went missing (a race the emu's race checker also reports).
MIN_BARRIERS = 2
LOCAL = ("LDL", "STL", "LDLK", "STLK")

# sm_90's per-multiprocessor limits (CUDA C Programming Guide, compute capability 9.0).
SM90_REGS, SM90_SMEM, SM90_SMEM_RESERVED, SM90_BLOCKS, SM90_WARPS = 65536, 233472, 1024, 32, 64


def demangled_shape(name):
    """(T, D, DV, BK, MT, X) from a demangled attn_v3_kernel<...> name, or None."""
    m = re.search(r"attn_v3_kernel<(\w+), (\d+), (\d+), (\d+), (\d+), (true|false)>", name)
    if not m:
        return None
    t, d, dv, bk, mt, x = m.groups()
    return t, int(d), int(dv), int(bk), int(mt), x == "true"


def block_shape(d, dv, mt):
    """(rows, threads) of the largest block an instance is launched with (gpu/attn_launch.cu:
    two m16 tiles a warp on up to 128 rows; one m16 tile a warp on 16-row blocks, or on up to
    64 rows for head dims above 128)."""
    if mt == 2:
        return 128, 128
    return (64, 128) if d > 128 or dv > 128 else (16, 32)


def smem_bytes(d, dv, bk, rows):
    """gpu/attn_v3.cuh's v3_smem_bytes for 16-bit types: Q rows, one K and one V buffer, rows
    padded by 8 elements."""
    return (rows * (d + 8) + bk * (d + 8 + dv + 8)) * 2


def occupancy_sm90(regs, threads, smem):
    warps = threads // 32
    regs_per_warp = -(-regs * 32 // 256) * 256
    by_regs = SM90_REGS // (regs_per_warp * warps)
    by_smem = SM90_SMEM // (smem + SM90_SMEM_RESERVED)
    blocks = min(by_regs, by_smem, SM90_BLOCKS, SM90_WARPS // warps)
    return blocks, blocks * warps


def ptxas_resources(log_text, kernel):
    """{(mangled, arch): (registers, spill stores, spill loads, stack)} from ptxas -v."""
    out, cur = {}, None
    spill = stack = None
    for line in log_text.splitlines():
        m = re.search(r"Compiling entry function '(\S+)' for '(sm_\d+)'", line)
        if m:
            cur = (m.group(1), m.group(2)) if kernel in m.group(1) else None
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                      line)
        if m:
            stack, spill = int(m.group(1)), (int(m.group(2)), int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            if spill is None:
                raise SystemExit(f"kernel_sass: ptxas log: no spill line before the registers "
                                 f"of {cur[0]} ({cur[1]})")
            out[cur] = (int(m.group(1)), spill[0], spill[1], stack)
            cur, spill, stack = None, None, None
    return out


def sass_opcodes(tool, obj, arch, kernel):
    """{mangled: {opcode with modifiers: count}} for the functions of obj whose name holds
    kernel, from cuobjdump -sass (one instruction a line: "/*0a40*/ [@P0] OPCODE operands ;")."""
    text = subprocess.run([tool, "-sass", "-arch", arch, obj], check=True, capture_output=True,
                          text=True).stdout
    out, cur = {}, None
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = m.group(1) if kernel in m.group(1) else None
            if cur:
                out[cur] = {}
            continue
        if cur is None:
            continue
        m = re.match(r"\s+/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            op = m.group(2)
            out[cur][op] = out[cur].get(op, 0) + 1
    return out


def count(ops, prefix):
    """Instructions whose opcode is prefix or starts with prefix followed by a modifier."""
    return sum(n for op, n in ops.items() if op == prefix or op.startswith(prefix + "."))


def find_tool(given):
    for cand in (given, os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump"),
                 os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "cuobjdump")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def demangle(names):
    filt = shutil.which("c++filt")
    if not filt:
        raise SystemExit("kernel_sass: c++filt not found (binutils)")
    res = subprocess.run([filt], input="\n".join(names), check=True, capture_output=True,
                         text=True).stdout.splitlines()
    return dict(zip(names, res))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--obj", default="build/nvcc/gpu/attn_launch.o")
    ap.add_argument("--log", help="ptxas -v output (default: OBJ.log)")
    ap.add_argument("--cuobjdump", help="cuobjdump (default: $CUOBJDUMP, PATH, $CUDA_HOME/bin)")
    ap.add_argument("--kernel", default="attn_v3_kernel", help="fragment of the mangled names")
    args = ap.parse_args(argv)
    log = args.log or args.obj + ".log"
    for path in (args.obj, log):
        if not os.path.isfile(path):
            print(f"kernel_sass: {path}: no such file (build with nvcc first: make all)",
                  file=sys.stderr)
            return 2
    tool = find_tool(args.cuobjdump)
    if not tool:
        print("kernel_sass: no cuobjdump (set CUOBJDUMP; PyPI's nvidia-cuda-cuobjdump and "
              "nvidia-cuda-nvdisasm hold both tools)", file=sys.stderr)
        return 2
    with open(log, encoding="utf-8", errors="replace") as f:
        res = ptxas_resources(f.read(), args.kernel)
    if not res:
        print(f"kernel_sass: {log}: no ptxas entry for a function named *{args.kernel}*",
              file=sys.stderr)
        return 2
    arches = sorted({a for _, a in res})
    sass = {a: sass_opcodes(tool, args.obj, a, args.kernel) for a in arches}
    names = demangle(sorted({n for n, _ in res}))
    failures, rows = [], []
    for (mangled, arch), (regs, st, ld, stack) in sorted(
            res.items(), key=lambda kv: (kv[0][1], demangled_shape(names[kv[0][0]]) or ())):
        shape = demangled_shape(names[mangled])
        if shape is None:
            failures.append(f"{names[mangled]}: not an attn_v3_kernel<T, D, DV, BK, MT, X> name")
            continue
        t, d, dv, bk, mt, x = shape
        label = f"{'fp16' if t == '__half' else 'bf16'} D={d} Dv={dv} BK={bk} MT={mt}{' X' if x else ''}"
        ops = sass[arch].get(mangled)
        if ops is None:
            failures.append(f"{label} ({arch}): in ptxas's log but not in the object's SASS")
            continue
        if st or ld or stack:
            failures.append(f"{label} ({arch}): {st} bytes spill stores, {ld} bytes spill loads, "
                            f"{stack} bytes stack frame")
        for op, what in REQUIRED.items():
            if count(ops, op) == 0:
                failures.append(f"{label} ({arch}): no {op} ({what})")
        if count(ops, "BAR.SYNC") < MIN_BARRIERS:
            failures.append(f"{label} ({arch}): {count(ops, 'BAR.SYNC')} BAR.SYNC, the tile loop "
                            f"has {MIN_BARRIERS}")
        local = sum(count(ops, op) for op in LOCAL)
        if local:
            failures.append(f"{label} ({arch}): {local} local-memory instructions "
                            f"({', '.join(op for op in LOCAL if count(ops, op))})")
        rows_, threads = block_shape(d, dv, mt)
        smem = smem_bytes(d, dv, bk, rows_)
        occ = ""
        if arch == "sm_90":
            blocks, warps = occupancy_sm90(regs, threads, smem)
            occ = f"{blocks} ({warps} warps)"
        rows.append(f"| {arch} | {label} | {regs} | {st}/{ld} | {rows_} x {threads} | {smem:,} "
                    f"| {occ} | {count(ops, 'HMMA.16816')} | {count(ops, 'LDSM.16.M88.4')} "
                    f"| {count(ops, 'LDSM.16.MT88.4')} | {count(ops, 'LDGSTS')} | {local} "
                    f"| {count(ops, 'BAR.SYNC')} |")
    print("| arch | instance | registers | spill st/ld (bytes) | largest block (rows x threads) "
          "| shared memory (bytes) | blocks an SM (sm_90) | HMMA | LDSM | LDSM.T | LDGSTS "
          "| local | BAR.SYNC |")
    print("|---|---|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    if failures:
        print(f"\nkernel_sass: {len(failures)} check(s) failed:", file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        return 1
    print(f"\nkernel_sass: {len(rows)} instances ({', '.join(arches)}): no spills, no stack, no "
          "local memory; HMMA, LDSM, LDSM.T, LDGSTS and two BAR.SYNC in each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
