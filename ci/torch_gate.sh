#!/usr/bin/env bash
# ci/torch_gate.sh - `make torch-gate`: PyTorch's flex_attention judged by the gate's own cases.
#   1. $BIN export $SIZE --out $DIR/cases       every gate case as a fixture file (the float64
#                                                oracle computed by flexcheck)
#   2. $PY -m flexcheck.torch_flex ...          PyTorch on each case (CPU, eager, every dtype):
#                                                out, LSE, a rerun and its block mask stored
#                                                under tested/torch-<version>-cpu
#   3. $BIN check FILES --report $DIR/report    each PyTorch output judged under the gates
# Steps 1 and 3 are ci/engine_gate.sh's, shared with ci/vllm_gate.sh.
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
NAME=torch-gate
# shellcheck source=ci/engine_gate.sh
. ci/engine_gate.sh

gate_export

echo "torch-gate: 2/3 python -m flexcheck.torch_flex $DIR/cases --device cpu $RUNNER_ARGS"
# shellcheck disable=SC2086
PYTHONPATH=python PYTHONDONTWRITEBYTECODE=1 "$PY" -m flexcheck.torch_flex "$DIR/cases" \
    --device cpu $RUNNER_ARGS >"$DIR/torch_flex.txt" 2>&1
runner=$?
grep -v '^ok ' "$DIR/torch_flex.txt"
[ $runner -le 1 ] || { echo "torch-gate: the runner could not start (exit $runner)" >&2; exit 2; }
t2=$(now)
echo "torch-gate: torch_flex: exit $runner in $(secs "$t1" "$t2") s (per file: $DIR/torch_flex.txt)"

gate_check_and_exit "$runner" "${files[@]}"
