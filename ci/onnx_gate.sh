#!/usr/bin/env bash
# ci/onnx_gate.sh ENGINE - `make ort-gate` (ENGINE ort) and `make openvino-gate` (ENGINE openvino):
# ONNX Runtime's, or OpenVINO's, attention ops judged by the gate's own cases.
#   1. $BIN export $SIZE --out $DIR/cases       every gate case as a fixture file
#   2. $PY -m flexcheck.ort_attention ...       com.microsoft.GroupQueryAttention and ONNX
#      (or flexcheck.openvino_attention)         Attention as one-node models on the CPU, each
#                                                case's output and a rerun under
#                                                tested/<engine>-<version>-<op>-cpu
#   3. $BIN check FILES --report $DIR/report    each output judged under the gates
# Steps 1 and 3 are ci/engine_gate.sh's. OpenVINO runs with --isolate (each file in child
# processes): its 2026.4 CPU plugin crashes the process on some GroupQueryAttention models.
# Environment (the make targets set them): BIN, PY (the venv's python), DIR, SIZE (--quick),
# RUNNER_ARGS (more runner options, e.g. --dtype float32 or --op gqa).
# Exit 0 when every case was run and every output passed; 1 when an output failed or a case
# could not be run; 2 when a step could not start.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ENGINE=${1:-}
case $ENGINE in
    ort) MODULE=ort_attention; EXTRA="" ;;
    openvino) MODULE=openvino_attention; EXTRA="--isolate" ;;
    *) echo "usage: ci/onnx_gate.sh ort|openvino" >&2; exit 2 ;;
esac
BIN=${BIN:-build/flexcheck}
PY=${PY:-build/$ENGINE-venv/bin/python}
DIR=${DIR:-build/$ENGINE-gate}
SIZE=${SIZE:---quick}
RUNNER_ARGS=${RUNNER_ARGS:-}
NAME=$ENGINE-gate
# shellcheck source=ci/engine_gate.sh
. ci/engine_gate.sh

gate_export

# shellcheck disable=SC2086
gate_run_module "$MODULE" $EXTRA

gate_check_and_exit "$runner" "${files[@]}"
