"""flexcheck.vllm_flex on the engine-runner core (_engine.Run), without vLLM or torch: what
its Run does before vLLM is asked anything. A stand-in for vf.Vllm carries the names the
run's header reads (never called: a case that reaches vLLM fails the test); the file holds a
chunked case (not expressible in vLLM: chunked local attention is not FlexAttentionImpl's
mask), a float16 case outside --dtype float32 (skipped) and a case that is not a case (an
error, the run goes on). test_vllm_flex.py has the rest, and with vLLM the real runs.

Run: PYTHONPATH=python:python/tests FLEXCHECK_BIN=build/flexcheck python3 -m pytest \\
         python/tests/test_vllm_flex_core.py
"""
import types

import h5py
import numpy as np
import pytest

from flexcheck import vllm_flex as vf
from flexcheck.fixtures import write_case


class NotVllm:
    """What Run reads of vf.Vllm before a case reaches vLLM; anything else is a failure."""
    vllm = types.SimpleNamespace(__version__="0.0-standin")
    torch = types.SimpleNamespace(__version__="0.0-standin")
    build, page_size, device, lse_refused = "direct", 16, "cpu", None

    def __getattr__(self, name):
        raise AssertionError(f"vLLM asked for {name}: no case here may reach it")


@pytest.fixture
def fx(tmp_path):
    p = str(tmp_path / "v.h5")
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((2, 1, 2, 4, 64)).astype(np.float32)
    write_case(p, "chunked", q, k, k, dtype="float32", causal=True, chunk=2)
    write_case(p, "half", q.astype(np.float16), k.astype(np.float16), k.astype(np.float16),
               dtype="float16", causal=True)
    with h5py.File(p, "a") as f:  # a group under /cases that read_case cannot read
        f["cases"].create_group("broken")
    return p


def test_run_counts_on_the_core(fx, capsys):
    run = vf.Run(NotVllm(), "vllm-standin", "huge", False, 0, ("float32",))
    assert run.files([fx]) == 1  # the broken case is an error
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == (
        f"vllm_flex: 1 files -> tested/vllm-standin (vllm 0.0-standin, torch 0.0-standin, "
        f"direct build, page 16, cpu, huge garbage)")
    assert (f"ERROR {fx}: 3 cases, 0 stored, 1 skipped (dtype), 0 refused by vLLM, 1 not "
            f"expressible in vLLM, 1 errors (") in out
    assert out.splitlines()[-1].startswith(
        "vllm_flex: 1 files, 3 cases, 0 stored, 1 skipped (dtype), 0 refused by vLLM, 1 not "
        "expressible in vLLM, 1 errors, under tested/vllm-standin in ")
    assert f"vllm_flex: {fx}: case chunked: not expressible in vLLM: chunked local" in err
    assert f"vllm_flex: {fx}: case broken: " in err


@pytest.mark.parametrize("args, msg", [
    (["--dtype", "float64"], "--dtype 'float64': must be one of"),
    (["--label", "!!"], "label '!!': nothing left of it"),
])
def test_common_options_are_the_cores(fx, capsys, args, msg):
    assert vf.main([fx, *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1
