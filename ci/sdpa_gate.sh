#!/usr/bin/env bash
# ci/sdpa_gate.sh - `make sdpa-gate`: PyTorch's scaled_dot_product_attention (CPU, each backend
# that runs there) judged by the gate's own cases.
#   1. $BIN export $SIZE --out $DIR/cases       every gate case as a fixture file
#   2. $PY -m flexcheck.torch_sdpa ...          SDPA on each case, the mask built from the
#                                                case's terms as an engine author builds it; out
#                                                and a rerun under
#                                                tested/torch-<version>-sdpa-<backend>-cpu
#   3. $BIN check FILES --report $DIR/report    each output judged under the gates
# Steps 1 and 3 are ci/engine_gate.sh's. Environment (the make target sets them): BIN, PY (the
# torch venv's python), DIR (build/sdpa-gate), SIZE (--quick), RUNNER_ARGS (more runner
# options, e.g. --backend math or --dtype float32).
# Exit 0 when every case was run and every output passed; 1 when an output failed or a case
# could not be run; 2 when a step could not start.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BIN=${BIN:-build/flexcheck}
PY=${PY:-build/torch-venv/bin/python}
DIR=${DIR:-build/sdpa-gate}
SIZE=${SIZE:---quick}
RUNNER_ARGS=${RUNNER_ARGS:-}
NAME=sdpa-gate
# shellcheck source=ci/engine_gate.sh
. ci/engine_gate.sh

gate_export

gate_run_module torch_sdpa

gate_check_and_exit "$runner" "${files[@]}"
