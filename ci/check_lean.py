#!/usr/bin/env python3
"""check_lean.py LIB HEADER - holds the public shared library (make's build/libflexcheck.so) to
what include/flexcheck.h promises a process that loads it beside torch's CUDA runtime and h5py's
HDF5:

- exports: `nm -D --defined-only` lists flexcheck_* symbols and the FLEXCHECK_<n> version nodes,
  nothing else, and exactly the calls HEADER declares;
- SONAME libflexcheck.so.1, and LIB a link to it, a link to libflexcheck.so.1.<API>.0 (<API>:
  HEADER's FLEXCHECK_API_VERSION), as a Debian library is laid out;
- dependencies: its NEEDED entries are libc, libm, OpenBLAS and SLEEF (and the loader), and
  `ldd` resolves nothing but those and what Debian's OpenBLAS pulls (libgfortran, libquadmath,
  libgomp, libpthread, libgcc_s): no HDF5, Boost, CUDA, Jansson, Criterion, curl or libstdc++;
- loading runs no initialiser of ours: .init_array holds crt's frame_dummy and libgcc's CPU probe
  (__cpu_indicator_init, which __builtin_cpu_supports reads) alone.

Every failure is one line naming what was found; exit 0 when all hold, 1 otherwise, 2 on bad
arguments.
"""
import os
import re
import struct
import subprocess
import sys

NEEDED_OK = re.compile(r"^(libc\.so\.6|libm\.so\.6|libopenblas\.so\.0|libsleef\.so\.3|"
                       r"ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1)$")
LDD_OK = re.compile(r"^(linux-vdso|/lib64/ld-linux|/lib/ld-linux|ld-linux|libc\.so|libm\.so|"
                    r"libopenblas|libsleef|libgfortran|libquadmath|libgomp|libpthread|libgcc_s)")
LDD_BANNED = re.compile(r"hdf5|boost|cuda|cudart|jansson|criterion|curl|stdc\+\+", re.I)
INIT_OK = {"frame_dummy", "__cpu_indicator_init"}


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def declared_calls(header):
    """The functions HEADER declares: `name(` after a return type, outside comments."""
    text = re.sub(r"/\*.*?\*/", "", open(header).read(), flags=re.S)
    return set(re.findall(r"^[a-z_][a-z_0-9 \t*]*?\b(flexcheck_\w+)\(", text, flags=re.M))


def api_version(header):
    m = re.search(r"^#define FLEXCHECK_API_VERSION (\d+)$", open(header).read(), flags=re.M)
    return int(m.group(1)) if m else None


def check_exports(lib, header, bad):
    calls = declared_calls(header)
    exported = set()
    for line in run("nm", "-D", "--defined-only", lib).splitlines():
        parts = line.split()
        name = parts[-1]
        base = name.split("@")[0]
        if re.fullmatch(r"FLEXCHECK_\d+", base) and parts[-2] == "A":
            continue  # a version node
        if not base.startswith("flexcheck_"):
            bad.append(f"exports {name}: only flexcheck_* may be exported")
            continue
        exported.add(base)
    for name in sorted(calls - exported):
        bad.append(f"{header} declares {name}, which {lib} does not export")
    for name in sorted(exported - calls):
        bad.append(f"{lib} exports {name}, which {header} does not declare")
    return len(exported)


def check_names(lib, header, dynamic, bad):
    soname = re.search(r"\(SONAME\)\s+Library soname: \[(.*)\]", dynamic)
    if not soname or soname.group(1) != "libflexcheck.so.1":
        bad.append(f"SONAME {soname.group(1) if soname else '(none)'}, not libflexcheck.so.1")
    api = api_version(header)
    real = f"libflexcheck.so.1.{api}.0"
    d = os.path.dirname(lib)
    if not os.path.islink(lib) or os.readlink(lib) != "libflexcheck.so.1":
        bad.append(f"{lib} is not a link to libflexcheck.so.1")
    so1 = os.path.join(d, "libflexcheck.so.1")
    if not os.path.islink(so1) or os.readlink(so1) != real:
        bad.append(f"{so1} is not a link to {real} (FLEXCHECK_API_VERSION {api})")


def check_deps(lib, dynamic, bad):
    for needed in re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", dynamic):
        if not NEEDED_OK.match(needed):
            bad.append(f"needs {needed}: only libc, libm, OpenBLAS and SLEEF are allowed")
    for line in run("ldd", lib).splitlines():
        name = line.strip().split()[0] if line.strip() else ""
        if LDD_BANNED.search(line):
            bad.append(f"ldd: {line.strip()}: no HDF5, Boost, CUDA, Jansson, Criterion, curl or "
                       f"libstdc++ in the public library")
        elif name and not LDD_OK.match(name):
            bad.append(f"ldd: {line.strip()}: not libc, libm, OpenBLAS (with its own) or SLEEF")


def check_init(lib, bad):
    """The functions .init_array points at, by the symbols at those addresses."""
    sections = run("readelf", "-S", "-W", lib)
    m = re.search(r"\.init_array\s+INIT_ARRAY\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)",
                  sections)
    if not m:
        return
    addr, off, size = (int(x, 16) for x in m.groups())
    with open(lib, "rb") as f:
        f.seek(off)
        data = f.read(size)
    ptrs = struct.unpack(f"<{size // 8}Q", data)
    # a slot left 0 in the file is filled by its relocation's addend on load
    relocs = dict(re.findall(r"^([0-9a-f]+)\s+[0-9a-f]+\s+R_X86_64_RELATIVE\s+([0-9a-f]+)$",
                             run("readelf", "-r", "-W", lib), flags=re.M))
    symbols = {}
    for line in run("nm", lib).splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "tT":
            symbols[int(parts[0], 16)] = parts[2]
    for i, p in enumerate(ptrs):
        target = p or int(relocs.get(f"{addr + 8 * i:016x}", "0"), 16)
        name = symbols.get(target, f"0x{target:x}")
        if name not in INIT_OK:
            bad.append(f".init_array runs {name} on load: loading must run nothing of ours")


def main(argv):
    if len(argv) != 3 or not os.path.exists(argv[1]) or not os.path.exists(argv[2]):
        print("usage: check_lean.py LIB HEADER (both must exist)", file=sys.stderr)
        return 2
    lib, header = argv[1], argv[2]
    bad = []
    n = check_exports(lib, header, bad)
    dynamic = run("readelf", "-d", lib)
    check_names(lib, header, dynamic, bad)
    check_deps(lib, dynamic, bad)
    check_init(lib, bad)
    for b in bad:
        print(f"lean-lib: {b}", file=sys.stderr)
    if bad:
        return 1
    print(f"lean-lib: {lib}: {n} calls exported (flexcheck_* alone, as {header} declares), "
          f"SONAME libflexcheck.so.1, needs only libc, libm, OpenBLAS and SLEEF, no initialiser "
          f"of its own")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
