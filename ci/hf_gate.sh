#!/usr/bin/env bash
# ci/hf_gate.sh - `make hf-gate`: Hugging Face transformers' attention (eager, sdpa,
# flex_attention on the CPU; masks built by transformers from a model config) judged by the
# gate's own cases.
#   1. $BIN export $SIZE --out $DIR/cases       every gate case as a fixture file
#   2. $PY -m flexcheck.hf_attention ...        each case as one layer of a tiny model config
#                                                (Mistral, Gemma 2, gpt-oss, Llama 4, ModernBERT);
#                                                out and a rerun under
#                                                tested/transformers-<version>-<impl>-cpu
#   3. $BIN check FILES --report $DIR/report    each output judged under the gates
# Steps 1 and 3 are ci/engine_gate.sh's. Environment (the make target sets them): BIN, PY (the
# hf venv's python), DIR (build/hf-gate), SIZE (--quick), RUNNER_ARGS (more runner options,
# e.g. --impl eager, --dtype float32, --window-offset 1 for the negative control).
# Exit 0 when every case was run and every output passed; 1 when an output failed or a case
# could not be run; 2 when a step could not start.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BIN=${BIN:-build/flexcheck}
PY=${PY:-build/hf-venv/bin/python}
DIR=${DIR:-build/hf-gate}
SIZE=${SIZE:---quick}
RUNNER_ARGS=${RUNNER_ARGS:-}
NAME=hf-gate
# shellcheck source=ci/engine_gate.sh
. ci/engine_gate.sh

gate_export

gate_run_module hf_attention

gate_check_and_exit "$runner" "${files[@]}"
