#!/usr/bin/env bash
# ci/gpu_check.sh - the GPU run (issues 6 and 40), for a machine with an NVIDIA GPU:
#   1. build natively (nvcc, sm_80 + sm_90) together with the emu build;
#   2. run the suites whose native halves need a device: the emu self-tests against the
#      hardware (test_emu_gpu), the PTX wrappers' CPU twins against the real instructions
#      (test_kernel_v2_ptx) and kernels 2 and 3 natively, paged and unpaged (test_kernel_v2);
#   3. the quick gate on the gpu backend with kernels 1, 2 and 3;
#   4. `flexcheck bench kernel --backend gpu --gpu-shapes --kernel 2,3`: both kernels side by
#      side in one process, on the same inputs, each judged under the gates before it is timed;
#      the same (and the quick gate, whose rows must equal the default build's) for each
#      kernel 2 variant build the bundle carries (build/variants/flexcheck-NAME: none unless
#      ci/gpu_bundle.sh was given GPU_VARIANTS); kernel 3 under Nsight Compute (ncu) on the
#      causal 8k shape when ncu is there; and, when PyTorch is importable,
#      ci/bench_torch_flex.py on the same shapes and masks (PyTorch 2.7 or later: the LSE is
#      asked for with return_aux or return_lse, whichever flex_attention takes), which ends with
#      reports/bench.md's lines (kernel / PyTorch ratios, targets met or missed, the window's
#      fraction of what the block ratio allows), copied to OUT/bench_md.txt and the summary;
#   5. unless TORCH_CASES=0, when PyTorch is importable and `flexcheck export` exists: the
#      gate's cases exported (TORCH_EXPORT, default --quick), PyTorch's compiled flex_attention
#      run on them on the GPU (python -m flexcheck.torch_flex --device cuda --compile: out, LSE,
#      rerun and block mask stored under tested/torch-<version>-cuda-compiled) and judged by
#      `flexcheck check`, report in OUT/torch-report. A case compiles unless Inductor's on-disk
#      cache (shared by the runners) holds its graph: same shapes, dtype, block sizes and mask
#      terms (W, C and the soft-cap are tensors, not part of the graph: 470 quick cases, at most
#      332 graphs). Compiling took about 10 s per file of three dtypes on an H200 with PyTorch
#      2.11, so TORCH_JOBS runners (default half the cores) share the files;
#      TORCH_EXPORT="--quick --shard 1/4" exports a quarter of the quick set (170 files), and
#      TORCH_TIMEOUT (seconds, default 30 under STEP_TIMEOUT when that is over 60, which bounds
#      the step around them) bounds the runners;
#   6. with GATE_LONG=1, last: the long-context group on the GPU with kernel 3, each case of
#      `flexcheck gate --full --filter m7- --list` as `gate --full --filter ID --backend gpu
#      --kernel 3` (ci/module.mk's gate-long; its dense cases, which the emu skips, run here),
#      reports in OUT/gate-long-k3/ID/, bounded by GATE_LONG_TIMEOUT (seconds, default
#      STEP_TIMEOUT) and by what BUDGET leaves;
# and writes everything under OUT (default build/gpu-report; `$OUT` on the lent machine).
#   bash ci/gpu_check.sh [--build-only]      # --build-only: step 1 alone (tested on CPU machines)
#   bash ci/gpu_check.sh --prebuilt          # skip step 1: the binaries are already in build/
#   TORCH_ONLY=1 bash ci/gpu_check.sh --prebuilt   # step 5 alone
# --prebuilt is for a GPU machine without the Debian packages (and no network to fetch them):
# ci/gpu_bundle.sh packs the binaries built here with the shared libraries they load, and
# FLEXCHECK_LIB_DIR names the folder those libraries were unpacked to. Only flexcheck's own
# binaries see that folder (LD_LIBRARY_PATH), so Python and PyTorch keep their machine's libraries.
# Every step runs under `timeout STEP_TIMEOUT` (seconds, default 600) so that one hang costs
# one step, and its time is in the summary. BUDGET (seconds, default none) bounds the whole
# script: each step gets at most what is left of it, and a step with under 10 s left is skipped
# with a line saying so, so that the call's own time limit never cuts the script (and the
# copying of OUT after it) short. tests/python/test_gpu_check.py runs it with stand-in binaries.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-build/gpu-report}
# Whole seconds, checked once: the torch runners' default limit is computed from them.
for v in STEP_TIMEOUT TORCH_TIMEOUT BUDGET GATE_LONG_TIMEOUT; do
    t=${!v:-1}
    [[ $t =~ ^[0-9]+$ && $t -gt 0 ]] ||
        { echo "gpu_check: $v = '$t': whole seconds > 0" >&2; exit 2; }
done
step_timeout=${STEP_TIMEOUT:-600}
TORCH_TIMEOUT=${TORCH_TIMEOUT:-$(( step_timeout > 60 ? step_timeout - 30 : step_timeout ))}
mkdir -p "$OUT"
JOBS=$(nproc 2>/dev/null || echo 2)
log() { printf '%s\n' "$*" | tee -a "$OUT/summary.txt"; }
# limit_for MAX: the seconds a step may take, MAX or what BUDGET leaves, whichever is less.
limit_for() {
    local lim=$1
    if [ -n "${BUDGET:-}" ] && [ $((BUDGET - SECONDS)) -lt "$lim" ]; then
        lim=$((BUDGET - SECONDS))
    fi
    echo "$lim"
}
# budget_spent: under 10 s left of BUDGET, too few for any step to finish in.
budget_spent() { [ -n "${BUDGET:-}" ] && [ $((BUDGET - SECONDS)) -lt 10 ]; }
# run [--limit S] NAME CMD...: output to OUT/NAME.txt, status and seconds into the summary.
# With the budget spent: not run, status 125 (a step that could not finish is no result).
run() {
    local max=$step_timeout
    [ "$1" = "--limit" ] && { max=$2; shift 2; }
    local name=$1; shift
    local lim t0=$SECONDS rc
    lim=$(limit_for "$max")
    if budget_spent; then
        log "$(printf '%-28s skipped: %d s left of BUDGET=%s' "$name" "$((BUDGET - SECONDS))" "$BUDGET")"
        return 125
    fi
    # -k 5: the gate answers SIGTERM by finishing the cases in hand (minutes at 128k), so
    # whatever has not stopped 5 s later is killed, and the step ends within its limit.
    timeout -k 5 "$lim" "$@" >"$OUT/$name.txt" 2>&1
    rc=$?
    log "$(printf '%-28s exit %d  %4d s%s' "$name" "$rc" $((SECONDS - t0)) \
        "$([ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "  (timed out after $lim s)")")"
    return $rc
}
# NAT: the prefix for flexcheck's own binaries (the prebuilt libraries, when named).
NAT=()
[ -n "${FLEXCHECK_LIB_DIR:-}" ] &&
    NAT=(env "LD_LIBRARY_PATH=$FLEXCHECK_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")

: >"$OUT/summary.txt"
log "flexcheck GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader >>"$OUT/summary.txt" 2>&1
BINS=(build/flexcheck build/tests/test_emu_gpu build/tests/test_kernel_v2
      build/tests/test_kernel_v2_ptx)
status=0
if [ "${1:-}" = "--prebuilt" ]; then
    for b in "${BINS[@]}"; do
        [ -x "$b" ] || { log "--prebuilt: $b is missing (ci/gpu_bundle.sh packs it)"; exit 2; }
    done
    log "prebuilt binaries: $(cat build/gpu-bundle.txt 2>/dev/null || echo 'origin unknown')"
else
    command -v nvcc >/dev/null || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] ||
        { log "nvcc not found: set CUDA_HOME"; exit 2; }
    run build make -j"$JOBS" all "${BINS[@]:1}" emu-nvcc || exit 1
    grep -E "Compiling entry|registers|spill" "$OUT/build.txt" >"$OUT/resources.txt" || true
    [ "${1:-}" = "--build-only" ] && { log "build only: done"; exit 0; }
fi

export OPENBLAS_NUM_THREADS=1
have_torch=
python3 -c "import torch" 2>/dev/null && have_torch=1
# TORCH_ONLY=1: step 5 alone (a second call on the same machine, for the whole quick export).
if [ -z "${TORCH_ONLY:-}" ]; then
    run test_emu_gpu "${NAT[@]}" build/tests/test_emu_gpu || status=1
    run test_kernel_v2_ptx "${NAT[@]}" build/tests/test_kernel_v2_ptx || status=1
    run test_kernel_v2 "${NAT[@]}" build/tests/test_kernel_v2 || status=1
    for k in 1 2 3; do
        run "gate_gpu_kernel$k" "${NAT[@]}" build/flexcheck gate --quick --backend gpu --kernel "$k" \
            --report-dir "$OUT/gate-k$k" || status=1
    done
    # Kernels 2 and 3 in one process: each shape's inputs, float64 oracle and baselines are made
    # once (the CPU side, most of the step: kernel 2 alone took 61 s with 2 reps on an H200
    # machine's 16 cores, 2026-11-30), then each kernel judged and timed on them.
    run bench_kernel env OPENBLAS_NUM_THREADS="$JOBS" "${NAT[@]}" build/flexcheck bench kernel \
        --kernel 2,3 --backend gpu --gpu-shapes --reps 5 || status=1
    # Variant builds of kernel 2 (ci/gpu_bundle.sh with GPU_VARIANTS: build/variants/flexcheck-NAME),
    # timed the same way; each judged on its shapes too, so a variant that breaks fails the run.
    # The judging (a CPU oracle per shape) is most of a bench's time, so variants time the causal
    # 8k target alone unless VARIANT_BENCH says otherwise ("" for all three shapes).
    flexcheck_benches=("default=$OUT/bench_kernel.txt")
    for vb in build/variants/flexcheck-*; do
        [ -x "$vb" ] || continue
        name=${vb##*/flexcheck-}
        # A variant changes how kernel 2 runs, never what it computes: its quick gate on the GPU
        # must give the default build's rows byte for byte (same machine, same CPU side).
        if run "gate_gpu_kernel2_$name" "${NAT[@]}" "$vb" gate --quick --backend gpu --kernel 2 \
            --report-dir "$OUT/gate-k2-$name"; then
            if [ ! -f "$OUT/gate-k2/rows.csv" ]; then
                log "gate_gpu_kernel2_$name: not compared (the default build's gate wrote no rows.csv)"
                status=1
            elif cmp -s "$OUT/gate-k2/rows.csv" "$OUT/gate-k2-$name/rows.csv"; then
                log "gate_gpu_kernel2_$name: rows.csv identical to the default build's"
            else
                log "gate_gpu_kernel2_$name: rows.csv DIFFERS from the default build's"
                status=1
            fi
        else
            status=1
        fi
        # shellcheck disable=SC2086  # VARIANT_BENCH is a list of options
        run "bench_kernel_$name" env OPENBLAS_NUM_THREADS="$JOBS" "${NAT[@]}" "$vb" bench kernel \
            --kernel 2 --backend gpu --gpu-shapes --reps 5 ${VARIANT_BENCH---shape 1} || status=1
        flexcheck_benches+=("$name=$OUT/bench_kernel_$name.txt")
    done
    # PyTorch right after the kernels, on the same machine in the same call: the ratios'
    # two sides minutes apart at most.
    if [ -n "$have_torch" ]; then
        run bench_torch python3 ci/bench_torch_flex.py "${flexcheck_benches[@]/#/--flexcheck=}" ||
            status=1
        # reports/bench.md's lines, as the script printed them (measured or said to be missing)
        if [ -f "$OUT/bench_torch.txt" ]; then
            grep -E '^(gpu: |  target )' "$OUT/bench_torch.txt" >"$OUT/bench_md.txt"
            cat "$OUT/bench_md.txt" >>"$OUT/summary.txt"
        fi
    else
        log "bench_torch                  skipped: PyTorch is not importable here"
    fi
    # Where the profiler is (Nsight Compute; it read the counters on a Firecracker H200 machine,
    # 2026-11-04): kernel 3's first launch on the causal L = 8k shape (issue 40's first target),
    # the sections that say what holds it back. Information, not a gate: its exit status does
    # not count. After the timings, so that its replays cannot disturb them.
    if command -v ncu >/dev/null; then
        run ncu_kernel3 env OPENBLAS_NUM_THREADS="$JOBS" ncu --clock-control none -k regex:attn_v3 \
            -c 1 \
            --section SpeedOfLight --section Occupancy --section LaunchStats \
            --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
            --section MemoryWorkloadAnalysis "${NAT[@]}" build/flexcheck bench kernel --backend gpu \
            --gpu-shapes --shape 1 --kernel 3 --reps 1 || true
    else
        log "ncu_kernel3                  skipped: ncu is not on PATH"
    fi
fi
if [ -n "$have_torch" ] && [ "${TORCH_CASES:-1}" != 0 ]; then
    if "${NAT[@]}" build/flexcheck export --help >/dev/null 2>&1; then
        rm -rf "$OUT/torch-cases"
        # shellcheck disable=SC2086  # TORCH_EXPORT is a list of options
        run torch_export "${NAT[@]}" build/flexcheck export ${TORCH_EXPORT:---quick} \
            --out "$OUT/torch-cases" || status=1
        mapfile -t torch_files < <(find "$OUT/torch-cases" -type f -name '*.h5' | LC_ALL=C sort)
        # The compiles are CPU work (Inductor, Triton): TORCH_JOBS runners (default half the
        # cores) on disjoint files, each file wholly one runner's, a few files a runner.
        tj=${TORCH_JOBS:-$((JOBS > 1 ? JOBS / 2 : 1))}
        per=$(((${#torch_files[@]} + 2 * tj - 1) / (2 * tj)))
        [ "$per" -ge 1 ] || per=1
        # the runners' own limit never past what BUDGET leaves (run's timeout is around them)
        tt=$(limit_for "$TORCH_TIMEOUT")
        [ "$tt" -ge 1 ] || tt=1
        run torch_flex_cuda env PYTHONPATH=python PYTHONDONTWRITEBYTECODE=1 \
            timeout "$tt" \
            xargs -r -d "\n" -n "$per" -P "$tj" \
            python3 -m flexcheck.torch_flex --device cuda --compile \
            < <(printf '%s\n' "${torch_files[@]}") || status=1
        if [ ${#torch_files[@]} -gt 0 ]; then
            run torch_check "${NAT[@]}" build/flexcheck check --quiet --report "$OUT/torch-report" \
                "${torch_files[@]}" || status=1
            grep "^check:" "$OUT/torch_check.txt" >>"$OUT/summary.txt"
        fi
    else
        log "torch_flex_cuda              skipped: this flexcheck has no export subcommand"
    fi
elif [ -z "$have_torch" ]; then
    log "torch_flex_cuda              skipped: PyTorch is not importable here"
else
    log "torch_flex_cuda              skipped: TORCH_CASES=0"
fi
# The long-context group last, with what is left: optional, the rest of the run is complete
# before it starts. Its cost is the CPU side (each case's float64 oracle and baselines, one
# core a case; a 128k dense case is about 1e12 multiply-adds of them), so it may not finish:
# a gate stopped early writes no report, so each case is a gate of its own (JOBS at a time),
# and every case that finishes leaves its report in OUT/gate-long-k3/<case id>/.
if [ -z "${TORCH_ONLY:-}" ] && [ "${GATE_LONG:-0}" = 1 ] && budget_spent; then
    run gate_long_gpu_kernel3 true || status=1 # (logged as skipped: the budget is spent)
elif [ -z "${TORCH_ONLY:-}" ] && [ "${GATE_LONG:-0}" = 1 ]; then
    mapfile -t long_cases < <("${NAT[@]}" build/flexcheck gate --full --filter m7- --list \
        2>/dev/null | grep '^m7-')
    if [ ${#long_cases[@]} -eq 0 ]; then
        log "gate_long_gpu_kernel3        not run: \`gate --full --filter m7- --list\` listed no case"
        status=1
    else
        mkdir -p "$OUT/gate-long-k3"
        run --limit "${GATE_LONG_TIMEOUT:-$step_timeout}" gate_long_gpu_kernel3 \
            env OPENBLAS_NUM_THREADS=1 xargs -d "\n" -P "$JOBS" -I{} "${NAT[@]}" build/flexcheck \
            gate --full --filter {} --backend gpu --kernel 3 --report-dir "$OUT/gate-long-k3/{}" \
            < <(printf '%s\n' "${long_cases[@]}") || status=1
        log "gate_long_gpu_kernel3: $(find "$OUT/gate-long-k3" -name summary.md | wc -l) of" \
            "${#long_cases[@]} cases reported"
    fi
fi
log "overall: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
