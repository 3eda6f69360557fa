#!/usr/bin/env bash
# ci/vllm_gate.sh - `make vllm-gate`: vLLM's own FlexAttention backend judged by the gate's cases.
#   1. $BIN export $SIZE --out $DIR/cases        every gate case as a fixture file (the float64
#                                                 oracle computed by flexcheck)
#   2. $PY -m flexcheck.vllm_flex ...            vLLM's metadata builder, metadata and
#                                                 FlexAttentionImpl on each case (both block-mask
#                                                 builds): out and a rerun stored under
#                                                 tested/vllm-<version>-<build>-cpu
#   3. $BIN check FILES --report $DIR/report     each vLLM output judged under the gates
# Environment (the make target sets them): BIN (build/flexcheck), PY (the vLLM venv's python),
# DIR (build/vllm-gate), SIZE (--quick), RUNNER_ARGS (more runner options: --build, --page-size).
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
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

if ! "$BIN" export --help >/dev/null 2>&1; then
    echo "vllm-gate: $BIN has no 'export' subcommand; nothing to run" >&2
    exit 2
fi
rm -rf "$DIR"
mkdir -p "$DIR"
t0=$(now)

echo "vllm-gate: 1/3 $BIN export $SIZE --out $DIR/cases"
# shellcheck disable=SC2086  # SIZE may hold more options (--quick --filter P)
"$BIN" export $SIZE --out "$DIR/cases" >/dev/null || { echo "vllm-gate: export failed" >&2; exit 2; }
mapfile -t files < <(find "$DIR/cases" -type f \( -name '*.h5' -o -name '*.hdf5' \) | LC_ALL=C sort)
[ ${#files[@]} -gt 0 ] || { echo "vllm-gate: export wrote no fixture file under $DIR/cases" >&2; exit 2; }
t1=$(now)
echo "vllm-gate: export: ${#files[@]} files in $(secs "$t0" "$t1") s"

echo "vllm-gate: 2/3 python -m flexcheck.vllm_flex $DIR/cases --device cpu --build both $RUNNER_ARGS"
# shellcheck disable=SC2086
PYTHONPATH=python PYTHONDONTWRITEBYTECODE=1 "$PY" -m flexcheck.vllm_flex "$DIR/cases" \
    --device cpu --build both $RUNNER_ARGS >"$DIR/vllm_flex.txt" 2>&1
runner=$?
# The runner's own lines (refusals, cases not expressible, errors, totals); torch's and vLLM's
# log lines stay in the file.
grep -E '^(vllm_flex: |ERROR )' "$DIR/vllm_flex.txt" | grep -v ': refused by vLLM: \|: not expressible in vLLM: '
grep -c ': refused by vLLM: ' "$DIR/vllm_flex.txt" | sed 's/^/vllm-gate: refused-by-vLLM lines: /'
grep -c ': not expressible in vLLM: ' "$DIR/vllm_flex.txt" | sed 's/^/vllm-gate: not-expressible lines: /'
[ $runner -le 1 ] || { echo "vllm-gate: the runner could not start (exit $runner)" >&2; exit 2; }
t2=$(now)
echo "vllm-gate: vllm_flex: exit $runner in $(secs "$t1" "$t2") s (every line: $DIR/vllm_flex.txt)"

echo "vllm-gate: 3/3 $BIN check (${#files[@]} files) --report $DIR/report"
"$BIN" check --quiet --report "$DIR/report" "${files[@]}" >"$DIR/check.txt" 2>&1
check=$?
grep -v '^report: ' "$DIR/check.txt" | tail -n 200
t3=$(now)
echo "vllm-gate: check: exit $check in $(secs "$t2" "$t3") s (all lines: $DIR/check.txt)"
[ -f "$DIR/report/summary.md" ] && grep -m1 "^\*\*" "$DIR/report/summary.md"
status=0
[ $runner -eq 0 ] && [ $check -eq 0 ] || status=1
[ $check -ge 2 ] && status=2
echo "vllm-gate: $([ $status -eq 0 ] && echo PASS || echo FAIL) in $(secs "$t0" "$t3") s; report in $DIR/report/"
exit $status
