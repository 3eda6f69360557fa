#!/usr/bin/env bash
# ci/sass_mix.sh - the instruction mix of one kernel's machine code (SASS), for kernel work on a
# machine without a GPU. Static counts: what ptxas emitted, not what a GPU executed.
#   bash ci/sass_mix.sh [OBJ [ARCH [KERNEL]]]
# OBJ    an nvcc object (default build/nvcc/gpu/attn_launch.o, built by `make` where nvcc is);
# ARCH   sm_90 (default) or sm_80, the architectures the Makefile compiles for;
# KERNEL a fragment of the mangled name (default kernel 2's fp16 D = 128 instance with 64-key
#        tiles, one stage and 16 rows a warp, the shape of the GPU speed targets).
# Prints the function's instruction count, the opcodes by count, and the instructions between
# consecutive block barriers (BAR.SYNC), which is where one tile's work shows.
# cuobjdump: $CUOBJDUMP, else on PATH, else the toolkit's; a toolkit without it (Debian's nvcc
# install here has none) can use PyPI's: `python3 -m pip download --no-deps
# nvidia-cuda-cuobjdump`, unzip the wheel, CUOBJDUMP=<there>/nvidia/cu13/bin/cuobjdump.
set -euo pipefail
obj=${1:-build/nvcc/gpu/attn_launch.o}
arch=${2:-sm_90}
kernel=${3:-_ZN7fc_cuda14attn_v2_kernelI6__halfLi128ELi128ELi64ELi1ELi1ELb0E}
tool=${CUOBJDUMP:-$(command -v cuobjdump || echo "${CUDA_HOME:-/usr/local/cuda}/bin/cuobjdump")}
[ -x "$tool" ] || { echo "sass_mix: no cuobjdump (see the header of $0)" >&2; exit 2; }
[ -f "$obj" ] || { echo "sass_mix: $obj: no such object (build with nvcc first)" >&2; exit 2; }
sass=$(mktemp)
trap 'rm -f "$sass"' EXIT
# One instruction a line: "/*0a40*/ OPCODE operands ;" (the encoding lines carry no opcode).
"$tool" -sass -arch "$arch" "$obj" |
    awk -v k="$kernel" '/Function : /{on = index($0, k) > 0; if (on) print; next}
                        on && /^ +\/\*[0-9a-f]+\*\/ +[^ ]/' >"$sass"
name=$(sed -n '1s/.*Function : //p' "$sass")
[ -n "$name" ] || { echo "sass_mix: no function matching $kernel for $arch in $obj" >&2; exit 2; }
sed -i 1d "$sass"
echo "$name ($arch): $(wc -l <"$sass") instructions"
# The opcode without predicate or modifiers: "@!P1 BRA 0x..." -> BRA, "HMMA.16816.F32" -> HMMA.
awk '{op = $2; if (op ~ /^@/) op = $3; sub(/\..*/, "", op); sub(/;$/, "", op); n[op]++}
     END {for (o in n) printf "%7d %s\n", n[o], o}' "$sass" | sort -rn | head -25
echo "instructions between block barriers (BAR.SYNC), in code order:"
awk '/BAR\.SYNC/ {printf "  %d\n", n; n = 0; next} {n++} END {printf "  %d (to the end)\n", n}' "$sass"
