# shellcheck shell=bash
# ci/engine_gate.sh - the steps an outside engine's gate run shares, sourced by ci/torch_gate.sh,
# ci/sdpa_gate.sh, ci/vllm_gate.sh and ci/onnx_gate.sh (bash): the gate's cases exported as fixture files, and
# check over what the engine stored. Between them each script runs its engine. Uses BIN, DIR,
# SIZE and NAME (the prefix of every line: torch-gate, vllm-gate, ort-gate); sets files (the exported fixture files, sorted)
# and the step times.
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# Step 1: $BIN export $SIZE --out $DIR/cases (DIR made anew; export's progress in
# $DIR/export.txt). Exits 2 when it cannot run or writes no file.
gate_export() {
    if ! "$BIN" export --help >/dev/null 2>&1; then
        echo "$NAME: $BIN has no 'export' subcommand (it writes the gate's cases as fixture files); nothing to run" >&2
        exit 2
    fi
    rm -rf "$DIR"
    mkdir -p "$DIR"
    t0=$(now)
    echo "$NAME: 1/3 $BIN export $SIZE --out $DIR/cases"
    # shellcheck disable=SC2086  # SIZE may hold more options (--quick --filter P)
    "$BIN" export $SIZE --out "$DIR/cases" >"$DIR/export.txt" 2>&1 ||
        { cat "$DIR/export.txt" >&2; echo "$NAME: export failed" >&2; exit 2; }
    mapfile -t files < <(find "$DIR/cases" -type f \( -name '*.h5' -o -name '*.hdf5' \) | LC_ALL=C sort)
    [ ${#files[@]} -gt 0 ] || { echo "$NAME: export wrote no fixture file under $DIR/cases" >&2; exit 2; }
    t1=$(now)
    echo "$NAME: export: ${#files[@]} files in $(secs "$t0" "$t1") s"
}

# Step 2, for a runner on the engine-runner core (python/flexcheck/_engine.py): python -m
# flexcheck.MODULE $DIR/cases ARGS... $RUNNER_ARGS, its lines in $DIR/MODULE.txt; shown are its
# errors and summaries (the per-file lines and what was not expressible or refused stay in the
# file). Sets runner (its exit status, 0 or 1); exits 2 when it could not start.
gate_run_module() {
    local module=$1
    shift
    echo "$NAME: 2/3 python -m flexcheck.$module $DIR/cases $* $RUNNER_ARGS"
    # shellcheck disable=SC2086
    PYTHONPATH=python PYTHONDONTWRITEBYTECODE=1 "$PY" -m "flexcheck.$module" "$DIR/cases" \
        "$@" $RUNNER_ARGS >"$DIR/$module.txt" 2>&1
    runner=$?
    grep -v -e '^ok ' -e ': not expressible in ' -e ': refused by ' "$DIR/$module.txt"
    [ $runner -le 1 ] || { echo "$NAME: the runner could not start (exit $runner)" >&2; exit 2; }
    local t2
    t2=$(now)
    echo "$NAME: $module: exit $runner in $(secs "$t1" "$t2") s (per case: $DIR/$module.txt)"
}

# Step 3, after the engine's runner (exit status RUNNER, 0 or 1):
# $BIN check FILES... --report $DIR/report, its last 200 lines but the report's, the summary's
# verdict line; then exits 0 when every case ran and every output passed, 1 when an output failed
# or a case could not be run, 2 when check could not judge.
gate_check_and_exit() {
    local runner=$1
    shift
    local t2
    t2=$(now)
    echo "$NAME: 3/3 $BIN check ($# files) --report $DIR/report"
    "$BIN" check --quiet --report "$DIR/report" "$@" >"$DIR/check.txt" 2>&1
    local check=$?
    grep -v '^report: ' "$DIR/check.txt" | tail -n 200
    t3=$(now)
    echo "$NAME: check: exit $check in $(secs "$t2" "$t3") s (all lines: $DIR/check.txt)"
    [ -f "$DIR/report/summary.md" ] && grep -m1 "^\*\*" "$DIR/report/summary.md"
    local status=0
    [ "$runner" -eq 0 ] && [ $check -eq 0 ] || status=1
    [ $check -ge 2 ] && status=2
    echo "$NAME: $([ $status -eq 0 ] && echo PASS || echo FAIL) in $(secs "$t0" "$t3") s; report in $DIR/report/"
    exit $status
}
