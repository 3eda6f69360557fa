"""The engine gate scripts (ci/torch_gate.sh, ci/sdpa_gate.sh, ci/hf_gate.sh, ci/vllm_gate.sh,
ci/onnx_gate.sh, ci/ggml_gate.sh and the steps they share, ci/engine_gate.sh) with a stand-in for
the engine's python: export, how the runner is called, check, and the exit status each outcome
gives. The real runners need torch, transformers, vLLM, ONNX Runtime, OpenVINO or ggml-python
(make torch-gate, sdpa-gate, hf-gate, vllm-gate, ort-gate, openvino-gate, ggml-gate); what is
tested here is the plumbing around them.

The stand-in logs its arguments, one call a line, and exits FAKE_RC (default 0); it stores no
output, so check judges the exported cases' own oracle (they pass).
"""
import os
import stat
import subprocess

import pytest

from _flexcli import BIN, needs_bin

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# One small case of the quick matrix (a 1 x 1 decode, three dtypes): export and check in a second.
CASE = "m1-numeric-all-d64-h6x1-b1-1x1-c-q128k128-slow"

pytestmark = needs_bin


@pytest.fixture
def fake_py(tmp_path):
    log = tmp_path / "calls.txt"
    py = tmp_path / "python"
    py.write_text(f'#!/bin/sh\necho "$*" >>"{log}"\nexit "${{FAKE_RC:-0}}"\n')
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    return py, log


def gate(script, tmp_path, py, rc=0, args=(), **env):
    e = dict(os.environ, BIN=os.path.abspath(BIN), PY=str(py), DIR=str(tmp_path / "gate"),
             SIZE=f"--quick --filter {CASE}", FAKE_RC=str(rc), OPENBLAS_NUM_THREADS="1")
    e.update(env)
    p = subprocess.run(["bash", os.path.join("ci", script), *args], cwd=REPO, env=e,
                       capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def test_torch_gate_passes_when_the_runner_and_check_do(tmp_path, fake_py):
    py, log = fake_py
    rc, out, err = gate("torch_gate.sh", tmp_path, py)
    assert rc == 0, out + err
    cases = tmp_path / "gate" / "cases"
    assert os.listdir(cases) == [CASE + ".h5"]
    assert log.read_text().splitlines() == [f"-m flexcheck.torch_flex {cases} --device cpu"]
    assert "torch-gate: export: 1 files in " in out
    assert "torch-gate: 3/3 " in out and "(1 files) --report" in out
    assert out.rstrip().splitlines()[-1].startswith("torch-gate: PASS in ")
    assert (tmp_path / "gate" / "report" / "summary.md").is_file()


@pytest.mark.parametrize("runner_rc, want, words", [
    (1, 1, "torch-gate: FAIL in "),                     # a case could not be run
    (2, 2, "torch-gate: the runner could not start"),   # bad arguments, no torch
])
def test_torch_gate_exit_status_follows_the_runner(tmp_path, fake_py, runner_rc, want, words):
    py, _ = fake_py
    rc, out, err = gate("torch_gate.sh", tmp_path, py, rc=runner_rc)
    assert rc == want and words in out + err, out + err


def test_a_gate_stops_at_an_export_that_fails(tmp_path, fake_py):
    py, log = fake_py
    rc, out, err = gate("torch_gate.sh", tmp_path, py, SIZE="--quick --filter no-such-case-id")
    assert rc == 2, out + err
    assert "torch-gate: export" in err and not log.exists()


def test_vllm_gate_runs_both_builds_one_process_a_file(tmp_path, fake_py):
    """One file and DIRECT_JOBS 2: one direct-build process (a second with no file failed the
    run with exit 2 before), and the slow build on its own copy of the file."""
    py, log = fake_py
    rc, out, err = gate("vllm_gate.sh", tmp_path, py, SLOW="*", DIRECT_JOBS="2")
    assert rc == 0, out + err
    g = tmp_path / "gate"
    calls = sorted(log.read_text().splitlines())
    assert calls == [f"-m flexcheck.vllm_flex {g}/cases-slow/{CASE}.h5 --device cpu --build slow",
                     f"-m flexcheck.vllm_flex {g}/cases/{CASE}.h5 --device cpu --build direct"]
    assert "(1 files, 1 processes)" in out
    assert "vllm-gate: 3/3 " in out and "(2 files) --report" in out
    assert out.rstrip().splitlines()[-1].startswith("vllm-gate: PASS in ")


def test_vllm_gate_refuses_a_slow_glob_naming_no_file(tmp_path, fake_py):
    py, log = fake_py
    rc, out, err = gate("vllm_gate.sh", tmp_path, py, SLOW="m9-*")
    assert rc == 2 and "SLOW='m9-*' names no exported file" in err, out + err
    assert not log.exists()


@pytest.mark.parametrize("engine, module, extra", [
    ("ort", "ort_attention", ""), ("openvino", "openvino_attention", " --isolate")])
def test_onnx_gate_runs_its_engines_runner(tmp_path, fake_py, engine, module, extra):
    py, log = fake_py
    rc, out, err = gate("onnx_gate.sh", tmp_path, py, args=(engine,), RUNNER_ARGS="--op gqa")
    assert rc == 0, out + err
    cases = tmp_path / "gate" / "cases"
    assert log.read_text().splitlines() == [f"-m flexcheck.{module} {cases}{extra} --op gqa"]
    assert out.rstrip().splitlines()[-1].startswith(f"{engine}-gate: PASS in ")


@pytest.mark.parametrize("runner_rc, want, words", [
    (1, 1, "ort-gate: FAIL in "), (2, 2, "ort-gate: the runner could not start")])
def test_onnx_gate_exit_status_follows_the_runner(tmp_path, fake_py, runner_rc, want, words):
    py, _ = fake_py
    rc, out, err = gate("onnx_gate.sh", tmp_path, py, rc=runner_rc, args=("ort",))
    assert rc == want and words in out + err, out + err


def test_onnx_gate_names_its_engines(tmp_path, fake_py):
    py, log = fake_py
    rc, out, err = gate("onnx_gate.sh", tmp_path, py, args=("tensorrt",))
    assert rc == 2 and "usage: ci/onnx_gate.sh ort|openvino" in err and not log.exists()


@pytest.mark.parametrize("script, module, extra", [
    ("sdpa_gate.sh", "torch_sdpa", ""), ("ggml_gate.sh", "ggml_attention", " --isolate"),
    ("hf_gate.sh", "hf_attention", "")])
@pytest.mark.parametrize("runner_rc, want, words", [
    (0, 0, "PASS in "), (1, 1, "FAIL in "), (2, 2, "the runner could not start")])
def test_gate_runs_its_runner(tmp_path, fake_py, script, module, extra, runner_rc, want, words):
    py, log = fake_py
    rc, out, err = gate(script, tmp_path, py, rc=runner_rc, RUNNER_ARGS="--threads 1")
    name = script.replace("_gate.sh", "-gate")
    assert rc == want and f"{name}: {words}" in out + err, out + err
    cases = tmp_path / "gate" / "cases"
    assert log.read_text().splitlines() == [f"-m flexcheck.{module} {cases}{extra} --threads 1"]
