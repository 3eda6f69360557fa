#!/usr/bin/env bash
# ci/ggml_gate.sh - `make ggml-gate`: ggml's ggml_flash_attn_ext (llama.cpp's attention op) on
# ggml's CPU backend, judged by the gate's own cases.
#   1. $BIN export $SIZE --out $DIR/cases       every gate case as a fixture file
#   2. $PY -m flexcheck.ggml_attention ...      ggml_flash_attn_ext on each case, the mask built
#                                                as llama.cpp's KV cache builds it; out and a
#                                                rerun under tested/ggml-<version>-flash_attn_ext-cpu
#   3. $BIN check FILES --report $DIR/report    each output judged under the gates
# Steps 1 and 3 are ci/engine_gate.sh's. The runner runs with --isolate (each file in child
# processes): ggml checks its inputs with GGML_ASSERT, which aborts the process, and an abort
# then costs one case. Environment (the make target sets them): BIN, PY (the ggml venv's
# python), DIR (build/ggml-gate), SIZE (--quick), RUNNER_ARGS (more runner options, e.g.
# --dtype float16 or --threads 1).
# Exit 0 when every case was run and every output passed; 1 when an output failed or a case
# could not be run; 2 when a step could not start.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BIN=${BIN:-build/flexcheck}
PY=${PY:-build/ggml-venv/bin/python}
DIR=${DIR:-build/ggml-gate}
SIZE=${SIZE:---quick}
RUNNER_ARGS=${RUNNER_ARGS:-}
NAME=ggml-gate
# shellcheck source=ci/engine_gate.sh
. ci/engine_gate.sh

gate_export

gate_run_module ggml_attention --isolate

gate_check_and_exit "$runner" "${files[@]}"
