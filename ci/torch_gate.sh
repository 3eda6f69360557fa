#!/usr/bin/env bash
# ci/torch_gate.sh - `make torch-gate`: PyTorch's flex_attention judged by the gate's own cases.
#   1. $BIN export $SIZE --out $DIR/cases       every gate case as a fixture file (the float64
#                                                oracle computed by flexcheck)
#   2. $PY -m flexcheck.torch_flex ...          PyTorch on each case (CPU, eager, every dtype):
#                                                out, LSE, a rerun and its block mask stored
#                                                under tested/torch-<version>-cpu
#   3. $BIN check FILES --report $DIR/report    each PyTorch output judged under the gates
# Environment (the make target sets them): BIN (build/flexcheck), PY (the torch venv's python),
# DIR (build/torch-gate), SIZE (--quick), RUNNER_ARGS (more runner options, e.g. --dtype).
# Exit 0 when every case was run and every output passed; 1 when PyTorch failed a gate or a case
# could not be run; 2 when a step could not start.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BIN=${BIN:-build/flexcheck}
PY=${PY:-build/torch-venv/bin/python}
DIR=${DIR:-build/torch-gate}
SIZE=${SIZE:---quick}
RUNNER_ARGS=${RUNNER_ARGS:-}
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

if ! "$BIN" export --help >/dev/null 2>&1; then
    echo "torch-gate: $BIN has no 'export' subcommand yet (it writes the gate's cases as fixture files); nothing to run" >&2
    exit 2
fi
rm -rf "$DIR"
mkdir -p "$DIR"
t0=$(now)

echo "torch-gate: 1/3 $BIN export $SIZE --out $DIR/cases"
# shellcheck disable=SC2086  # SIZE may hold more options (--quick --filter P)
"$BIN" export $SIZE --out "$DIR/cases" || { echo "torch-gate: export failed" >&2; exit 2; }
mapfile -t files < <(find "$DIR/cases" -type f \( -name '*.h5' -o -name '*.hdf5' \) | LC_ALL=C sort)
[ ${#files[@]} -gt 0 ] || { echo "torch-gate: export wrote no fixture file under $DIR/cases" >&2; exit 2; }
t1=$(now)
echo "torch-gate: export: ${#files[@]} files in $(secs "$t0" "$t1") s"

echo "torch-gate: 2/3 python -m flexcheck.torch_flex $DIR/cases --device cpu $RUNNER_ARGS"
# shellcheck disable=SC2086
PYTHONPATH=python PYTHONDONTWRITEBYTECODE=1 "$PY" -m flexcheck.torch_flex "$DIR/cases" \
    --device cpu $RUNNER_ARGS >"$DIR/torch_flex.txt" 2>&1
runner=$?
grep -v '^ok ' "$DIR/torch_flex.txt"
[ $runner -le 1 ] || { echo "torch-gate: the runner could not start (exit $runner)" >&2; exit 2; }
t2=$(now)
echo "torch-gate: torch_flex: exit $runner in $(secs "$t1" "$t2") s (per file: $DIR/torch_flex.txt)"

echo "torch-gate: 3/3 $BIN check (${#files[@]} files) --report $DIR/report"
"$BIN" check --quiet --report "$DIR/report" "${files[@]}" >"$DIR/check.txt" 2>&1
check=$?
grep -v '^report: ' "$DIR/check.txt" | tail -n 200
t3=$(now)
echo "torch-gate: check: exit $check in $(secs "$t2" "$t3") s (all lines: $DIR/check.txt)"
[ -f "$DIR/report/summary.md" ] && grep -m1 "^\*\*" "$DIR/report/summary.md"
status=0
[ $runner -eq 0 ] && [ $check -eq 0 ] || status=1
[ $check -ge 2 ] && status=2
echo "torch-gate: $([ $status -eq 0 ] && echo PASS || echo FAIL) in $(secs "$t0" "$t3") s; report in $DIR/report/"
exit $status
