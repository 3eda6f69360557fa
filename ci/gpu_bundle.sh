#!/usr/bin/env bash
# ci/gpu_bundle.sh - pack the binaries of ci/gpu_check.sh for a GPU machine that has a driver
# and Python but none of flexcheck's Debian packages (and no network to fetch them):
#   bash ci/gpu_bundle.sh BUNDLE.tar.xz
# builds them here (gpu_check.sh --build-only: nvcc, sm_80 + sm_90), copies each shared library
# they load except the C library's own and the C++ runtime (the target's are newer: carrying
# ours would shadow them), strips the binaries and writes one xz tarball that unpacks in a
# checkout's root to build/flexcheck, build/tests/... and build/gpu-libs/. There:
#   tar xJf BUNDLE.tar.xz && FLEXCHECK_LIB_DIR=build/gpu-libs bash ci/gpu_check.sh --prebuilt
# GPU_VARIANTS ("NAME=DEFINES ...", DEFINES comma-separated, or "all": every build of
# gpu/attn_v2_variants.txt; default none) adds a flexcheck built with those -D options (make
# BUILD=build-NAME FC_DEFINES=...) as build/variants/flexcheck-NAME, which gpu_check.sh times
# beside the default build: a tuning choice of kernel 2 measured on the GPU in the same call,
# never a second code path in one binary (gpu/attn_v2.cuh says what each option does). None by
# default since kernel 3 (2026-12-07): it is the w32 variant's layout (FlashAttention-2's, 4
# warps of two m16 tiles) with a two-barrier schedule of its own, and the run's minutes go to
# it; the variants were never timed on a GPU, and each costs a build here (five took 4 min 45
# s, 2026-12-01) and its quick gate (10 s on the H200) and causal 8k bench there.
# The target needs an x86-64 CPU with FMA (the emu objects are built with -mfma) and a glibc
# no older than this machine's.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: ci/gpu_bundle.sh BUNDLE.tar.xz" >&2; exit 2; }
out=$(realpath -m "$1")
OUT=build/gpu-bundle-build bash ci/gpu_check.sh --build-only >/dev/null ||
    { echo "gpu_bundle: the build failed: see build/gpu-bundle-build/build.txt" >&2; exit 1; }
bins=(build/flexcheck build/tests/test_emu_gpu build/tests/test_kernel_v2
      build/tests/test_kernel_v2_ptx)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build/tests" "$stage/build/gpu-libs"
[ -n "${GPU_VARIANTS:-}" ] && mkdir -p "$stage/build/variants"
for b in "${bins[@]}"; do strip -o "$stage/$b" "$b"; done
# NAME=DEF,DEF... from gpu/attn_v2_variants.txt (name, then its -D options; # comments)
variants=${GPU_VARIANTS:-}
[ "$variants" = all ] &&
    variants=$(awk '!/^#/ && NF { d = $2; for (i = 3; i <= NF; i++) d = d "," $i;
                                  print $1 "=" d }' gpu/attn_v2_variants.txt)
for v in $variants; do
    name=${v%%=*} defs=${v#*=}
    defs=${defs//,/ }
    # (a folder built before with other -D options recompiles: the Makefile's DEFINES_STAMP)
    make -j"$(nproc)" BUILD="build-$name" FC_DEFINES="$defs" "build-$name/flexcheck" \
        >"build/gpu-bundle-build/variant-$name.txt" 2>&1 ||
        { echo "gpu_bundle: variant $name failed: see build/gpu-bundle-build/variant-$name.txt" >&2; exit 1; }
    strip -o "$stage/build/variants/flexcheck-$name" "build-$name/flexcheck"
    bins+=("build-$name/flexcheck")
    echo "$name: $defs" >>"$stage/build/variants/README"
done
ldd "${bins[@]}" | awk '$3 ~ /^\// { print $3 }' | sort -u |
    grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv|libstdc\+\+|libgcc_s)\.so' |
    while read -r lib; do cp -L "$lib" "$stage/build/gpu-libs/"; done
printf 'built %s at commit %s%s on %s, nvcc %s\n' "$(date -u +%Y-%m-%dT%H:%MZ)" \
    "$(git rev-parse --short HEAD)" "$(git diff --quiet HEAD || echo ' (with local changes)')" \
    "$(. /etc/os-release && echo "$PRETTY_NAME")" \
    "$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')" >"$stage/build/gpu-bundle.txt"
tar -C "$stage" -cJf "$out" build
echo "gpu_bundle: $out ($(du -h "$out" | cut -f1), $(ls "$stage/build/gpu-libs" | wc -l) libraries)"
