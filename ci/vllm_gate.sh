#!/usr/bin/env bash
# ci/vllm_gate.sh - `make vllm-gate`: vLLM's own FlexAttention backend judged by the gate's cases.
#   1. $BIN export $SIZE --out $DIR/cases        every gate case as a fixture file (the float64
#                                                 oracle computed by flexcheck)
#   2. $PY -m flexcheck.vllm_flex ...            vLLM's metadata builder, metadata and
#                                                 FlexAttentionImpl on each case, out and a rerun
#                                                 stored under tested/vllm-<version>-<build>-cpu:
#                                                 the direct build on $DIR/cases, the slow one on
#                                                 a copy of the files named by SLOW ($DIR/cases-
#                                                 slow), as two processes at once (most of the
#                                                 time is Inductor compiling; one file is never
#                                                 written by two processes)
#   3. $BIN check FILES --report $DIR/report     each vLLM output judged under the gates (both
#                                                 folders: a row per case and build)
# Steps 1 and 3 are ci/engine_gate.sh's, shared with ci/torch_gate.sh.
# Environment (the make target sets them): BIN (build/flexcheck), PY (the vLLM venv's python),
# DIR (build/vllm-gate), SIZE (--quick), RUNNER_ARGS (more runner options: --page-size, --garbage),
# SLOW (a glob on the file names: the files the slow build runs on; default m[2-6]-*, every check
# but the numeric one, 51 of the quick export's 170 files; `*` for all). The slow build compiles
# vLLM's create_block_mask (torch.compile, mode="reduce-overhead") for every new shape besides
# flex_attention: about 100 s a case on the shared 2-core machine, against about 10 for the
# direct build, so all 170 files would take it hours. DIRECT_JOBS (2): processes for the direct
# build.
# Inductor's compiled kernels are cached where torch keeps them (TORCHINDUCTOR_CACHE_DIR, by
# default /tmp/torchinductor_<user>): a rerun reuses them and is much faster than the first run.
# Exit 0 when every case was run (or refused by vLLM, or not expressible in it) and every output
# passed; 1 when vLLM failed a gate or a case could not be run; 2 when a step could not start.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BIN=${BIN:-build/flexcheck}
PY=${PY:-build/vllm-venv/bin/python}
DIR=${DIR:-build/vllm-gate}
SIZE=${SIZE:---quick}
RUNNER_ARGS=${RUNNER_ARGS:-}
SLOW=${SLOW:-m[2-6]-*}
NAME=vllm-gate
# shellcheck source=ci/engine_gate.sh
. ci/engine_gate.sh

gate_export

mkdir -p "$DIR/cases-slow"
# Every check but the numeric one first (packed batches, decode, window edges, layouts: the
# paths vLLM's batches take), then the numeric files: a run cut short has judged those first.
mapfile -t ordered < <(printf '%s\n' "${files[@]}" | grep -v '/m1-'; printf '%s\n' "${files[@]}" | grep '/m1-')
slow_files=()
for f in "${ordered[@]}"; do
    # shellcheck disable=SC2053  # SLOW is a glob
    if [[ $(basename "$f") == $SLOW ]]; then
        cp "$f" "$DIR/cases-slow/" || exit 2
        slow_files+=("$DIR/cases-slow/$(basename "$f")")
    fi
done
[ ${#slow_files[@]} -gt 0 ] || { echo "vllm-gate: SLOW='$SLOW' names no exported file" >&2; exit 2; }
# The direct build's files dealt round-robin to DIRECT_JOBS processes (never one file to two of
# them), the slow build's to one: Inductor's compiles are the time, one process each.
DIRECT_JOBS=${DIRECT_JOBS:-2}
[ "$DIRECT_JOBS" -le ${#ordered[@]} ] || DIRECT_JOBS=${#ordered[@]} # a process has a file
echo "vllm-gate: 2/3 python -m flexcheck.vllm_flex --device cpu $RUNNER_ARGS: --build direct on $DIR/cases (${#files[@]} files, $DIRECT_JOBS processes), --build slow on $DIR/cases-slow (${#slow_files[@]} files: SLOW='$SLOW')"
pids=()
for ((j = 0; j < DIRECT_JOBS; j++)); do
    part=()
    for ((i = j; i < ${#ordered[@]}; i += DIRECT_JOBS)); do part+=("${ordered[i]}"); done
    # shellcheck disable=SC2086
    PYTHONPATH=python PYTHONDONTWRITEBYTECODE=1 "$PY" -m flexcheck.vllm_flex "${part[@]}" \
        --device cpu --build direct $RUNNER_ARGS >"$DIR/vllm_flex-direct-$j.txt" 2>&1 &
    pids+=($!)
done
# shellcheck disable=SC2086
PYTHONPATH=python PYTHONDONTWRITEBYTECODE=1 "$PY" -m flexcheck.vllm_flex "${slow_files[@]}" \
    --device cpu --build slow $RUNNER_ARGS >"$DIR/vllm_flex-slow.txt" 2>&1 &
pids+=($!)
runner=0
for pid in "${pids[@]}"; do
    wait "$pid"
    rc=$?
    [ $rc -gt $runner ] && runner=$rc
done
for out in "$DIR"/vllm_flex-*.txt; do
    # The runner's own lines (errors, totals); torch's and vLLM's log lines stay in the file,
    # and so do the refusals and the cases not expressible (counted here).
    grep -E '^(vllm_flex: |ERROR )' "$out" | grep -v ': refused by vLLM: \|: not expressible in vLLM: '
    echo "vllm-gate: $(basename "$out"): $(grep -c ': refused by vLLM: ' "$out") cases refused by vLLM, $(grep -c ': not expressible in vLLM: ' "$out") not expressible in vLLM"
done
[ $runner -le 1 ] || { echo "vllm-gate: the runner could not start (exit $runner)" >&2; exit 2; }
t2=$(now)
echo "vllm-gate: vllm_flex: exit $runner in $(secs "$t1" "$t2") s (every line: $DIR/vllm_flex-*.txt)"

gate_check_and_exit "$runner" "${files[@]}" "${slow_files[@]}"
