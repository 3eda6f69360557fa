# tests/python/test_bench_torch_lines.py - the lines ci/bench_torch_flex.py prints for
# reports/bench.md (issue 40: `gpu: kernel 3 / PyTorch compiled, fp16 causal L=8k D=128: R x`,
# the targets met or missed, the window's fraction of what the block ratio allows), computed
# from given timings without PyTorch or a GPU: the H200 run's recorded figures
# (reports/gpu-2026-11-30-h200), synthetic ones for what that run did not measure, and missing
# measurements, which must be said to be missing. Then the parser against what this build's
# `flexcheck bench kernel` prints (FLEXCHECK_BIN, the `arrows` make step), so a change of
# either side's format fails here; and main() as a whole over a stand-in for PyTorch.
#
#   FLEXCHECK_BIN=build/flexcheck python3 -m pytest -q tests/python

import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
H200 = os.path.join(ROOT, "reports", "gpu-2026-11-30-h200")


def load():
    spec = importlib.util.spec_from_file_location(
        "bench_torch_flex", os.path.join(ROOT, "ci", "bench_torch_flex.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # imports no torch: main() alone does
    return mod


btf = load()
CAUSAL, WINDOW, DENSE = (s[0] for s in btf.GPU_SHAPES)
# run2's PyTorch 2.11 out+lse medians on the H200 (run2/bench_torch.txt)
TORCH_H200 = {CAUSAL: 0.825, WINDOW: 0.497, DENSE: 4.588}


def kernel_line(shape, kernel, ms, blocks=None):
    """A line as `flexcheck bench kernel --backend gpu` prints it (cli/bench_kernel.c)."""
    line = f"  {shape:<40s} kernel {kernel}: {ms:9.3f} ms    55.960 TFLOP/s"
    if blocks:
        line += f"  {blocks[0] + blocks[1]} blocks ({blocks[0]} full, {blocks[1]} partial)"
    return line + "\n"


# The block masks' tiles at blocks 128 x 128 (README of the H200 run: `flexcheck blockmask`).
TILES = {CAUSAL: (2016, 64), WINDOW: (868, 248), DENSE: (16384, 0)}


def test_the_h200_run_recorded_without_block_counts_gives_ratios_and_no_fraction():
    with open(os.path.join(H200, "run3-bench-kernel2.txt")) as f:
        found = btf.parse_flexcheck(f)
    assert found[CAUSAL][2].ms == 4.913 and found[DENSE][2].blocks is None
    lines = btf.bench_md_lines(TORCH_H200, [("", found)])
    assert lines == [
        "gpu: kernel 2 / PyTorch compiled, fp16 causal L=8k D=128: 0.168 x",
        "  target >= 0.5x: missed; stretch 1.0x: missed",
        "gpu: kernel 2 / PyTorch compiled, fp16 causal W=1024 L=16k D=128: 0.188 x",
        "gpu: kernel 2 / PyTorch compiled, fp16 dense L=16k D=128: 0.135 x",
        "  target >= 0.5x: missed; stretch 1.0x: missed",
        "gpu: kernel 2 window W=1024 L=16k D=128: fraction not measured (this flexcheck's "
        "lines print no block counts)",
        # kernel 3 did not exist then: every line says so rather than inventing a figure
        "gpu: kernel 3 / PyTorch compiled, fp16 causal L=8k D=128: not measured "
        "(no flexcheck kernel 3 line for this shape)",
        "gpu: kernel 3 / PyTorch compiled, fp16 causal W=1024 L=16k D=128: not measured "
        "(no flexcheck kernel 3 line for this shape)",
        "gpu: kernel 3 / PyTorch compiled, fp16 dense L=16k D=128: not measured "
        "(no flexcheck kernel 3 line for this shape)",
        "gpu: kernel 3 window W=1024 L=16k D=128: fraction not measured (no flexcheck kernel 3 "
        f"line for {WINDOW} and {DENSE})",
    ]


def test_both_kernels_side_by_side_with_block_counts():
    # kernel 2: the H200's times; kernel 3: synthetic, one target met, one at the stretch
    text = "".join(kernel_line(s, k, ms, TILES[s]) for s, k, ms in (
        (CAUSAL, 2, 4.913), (CAUSAL, 3, 1.5), (WINDOW, 2, 2.638), (WINDOW, 3, 0.9),
        (DENSE, 2, 33.974), (DENSE, 3, 4.5)))
    lines = btf.bench_md_lines(TORCH_H200, [("default", btf.parse_flexcheck(text.splitlines()))])
    assert lines == [
        "gpu: kernel 2 / PyTorch compiled, fp16 causal L=8k D=128: 0.168 x",
        "  target >= 0.5x: missed; stretch 1.0x: missed",
        "gpu: kernel 2 / PyTorch compiled, fp16 causal W=1024 L=16k D=128: 0.188 x",
        "gpu: kernel 2 / PyTorch compiled, fp16 dense L=16k D=128: 0.135 x",
        "  target >= 0.5x: missed; stretch 1.0x: missed",
        # the README's 0.88: 33.974 / 2.638 = 12.88x of 16384 / 1116 = 14.68x
        "gpu: kernel 2 window W=1024 L=16k D=128: 0.877 of what the block ratio allows "
        "(dense / window time 33.974 / 2.638 ms = 12.88x, blocks 16384 / 1116 = 14.68x); "
        "target >= 0.8: met",
        "gpu: kernel 3 / PyTorch compiled, fp16 causal L=8k D=128: 0.550 x",
        "  target >= 0.5x: met; stretch 1.0x: missed",
        "gpu: kernel 3 / PyTorch compiled, fp16 causal W=1024 L=16k D=128: 0.552 x",
        "gpu: kernel 3 / PyTorch compiled, fp16 dense L=16k D=128: 1.020 x",
        "  target >= 0.5x: met; stretch 1.0x: met",
        "gpu: kernel 3 window W=1024 L=16k D=128: 0.341 of what the block ratio allows "
        "(dense / window time 4.500 / 0.900 ms = 5.00x, blocks 16384 / 1116 = 14.68x); "
        "target >= 0.8: missed",
    ]


def test_a_missing_measurement_is_named_not_filled_in():
    text = "".join(kernel_line(s, k, ms, TILES[s]) for s, k, ms in (
        (CAUSAL, 2, 4.0), (CAUSAL, 3, 2.0), (WINDOW, 2, 2.0), (WINDOW, 3, 1.0), (DENSE, 2, 30.0)))
    # kernel 3's dense bench ran out of time; PyTorch refused the window shape
    torch_ms = {CAUSAL: 1.0, WINDOW: "out+lse not run: out of resource", DENSE: 5.0}
    lines = btf.bench_md_lines(torch_ms, [("", btf.parse_flexcheck(text.splitlines()))])
    assert "gpu: kernel 3 / PyTorch compiled, fp16 dense L=16k D=128: not measured " \
           "(no flexcheck kernel 3 line for this shape)" in lines
    assert "gpu: kernel 2 / PyTorch compiled, fp16 causal W=1024 L=16k D=128: not measured " \
           "(PyTorch: out+lse not run: out of resource)" in lines
    assert "gpu: kernel 3 window W=1024 L=16k D=128: fraction not measured (no flexcheck " \
           f"kernel 3 line for {DENSE})" in lines
    # the window's fraction needs no PyTorch time: kernel 2's is there, (30/2) / (16384/1116)
    assert any(ln.startswith("gpu: kernel 2 window W=1024 L=16k D=128: 1.022 of what")
               for ln in lines), lines
    # no PyTorch run at all: every ratio says so
    none = btf.bench_md_lines({}, [("", btf.parse_flexcheck(text.splitlines()))])
    assert "gpu: kernel 2 / PyTorch compiled, fp16 causal L=8k D=128: not measured " \
           "(PyTorch: PyTorch was not run on it)" in none
    assert not any(ln.endswith(" x") for ln in none), none


def test_a_variant_build_gets_its_own_kernels_lines_labelled():
    base = "".join(kernel_line(s, k, 2.0, TILES[s]) for s in (CAUSAL, WINDOW, DENSE)
                   for k in (2, 3))
    variant = kernel_line(CAUSAL, 2, 1.65, TILES[CAUSAL])
    lines = btf.bench_md_lines(TORCH_H200, [
        ("default", btf.parse_flexcheck(base.splitlines())),
        ("st2", btf.parse_flexcheck(variant.splitlines()))])
    st2 = [ln for ln in lines if "(st2)" in ln]
    assert st2[0] == "gpu: kernel 2 (st2) / PyTorch compiled, fp16 causal L=8k D=128: 0.500 x"
    assert not any("kernel 3 (st2)" in ln for ln in lines), "the variant timed kernel 2 only"


def test_the_parser_reads_what_this_flexcheck_prints():
    exe = os.environ.get("FLEXCHECK_BIN")
    if not exe:
        pytest.skip("FLEXCHECK_BIN is not set (the `arrows` make step sets it)")
    r = subprocess.run([exe, "bench", "kernel", "--shape", "4", "--kernel", "2,3", "--reps", "1"],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OPENBLAS_NUM_THREADS="1", EMU_THREADS="2"))
    assert r.returncode == 0, r.stdout + r.stderr
    found = btf.parse_flexcheck(r.stdout.splitlines())
    shape = "S=512 D=64 B=1 H=2 causal"
    assert set(found) == {shape} and set(found[shape]) == {2, 3}, r.stdout
    for m in found[shape].values():  # causal 512 in 128-blocks: 6 full and 4 diagonal tiles
        assert m.ms > 0 and m.blocks == 10, r.stdout


# A stand-in for PyTorch, enough of its API for ci/bench_torch_flex.py's main() to run as it does
# on the GPU: each call "takes" the H200's run2 time of its shape (told by length and block
# mask), and the window shape's out+lse call fails where FAIL_WINDOW_LSE is set. It checks the
# script's plumbing (the import in main, the times handed to bench_md_lines), not PyTorch.
STUB_TORCH = {
    "torch/__init__.py": '''
import os
__version__ = "0.0+stub"
float16 = "float16"
LAST = [0.0]
class _Flags:
    allow_tf32 = True
class backends:
    class cuda:
        matmul = _Flags()
class cuda:
    @staticmethod
    def is_available(): return True
    @staticmethod
    def get_device_name(i): return "stub GPU"
    @staticmethod
    def synchronize(): pass
    class Event:
        def __init__(self, enable_timing=False): pass
        def record(self): pass
        def elapsed_time(self, end): return LAST[0]
def randn(b, h, length, d, device=None, dtype=None): return length
def compile(fn, dynamic=False): return fn
''',
    "torch/nn/__init__.py": "",
    "torch/nn/attention/__init__.py": "",
    "torch/nn/attention/flex_attention.py": '''
import os
import torch
class AuxRequest:
    def __init__(self, lse=False): self.lse = lse
def flex_attention(q, k, v, block_mask=None, return_aux=None):
    if block_mask is None:
        torch.LAST[0] = 4.588
    elif q == 16384:
        if return_aux is not None and os.environ.get("FAIL_WINDOW_LSE"):
            raise RuntimeError("out of resource: shared memory")
        torch.LAST[0] = 0.497
    else:
        torch.LAST[0] = 0.825
    return q
def create_block_mask(mod, b, h, lq, lk, device=None): return ("block mask", lq)
''',
}


def run_main(tmp_path, bench_text, **env):
    for rel, text in STUB_TORCH.items():
        p = tmp_path / "stub" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    f = tmp_path / "bench_kernel.txt"
    f.write_text(bench_text)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "ci", "bench_torch_flex.py"),
                        "--reps", "3", f"--flexcheck=default={f}"],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(tmp_path / "stub"),
                                PYTHONDONTWRITEBYTECODE="1", **env))
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.split("\nreports/bench.md lines")[1].splitlines()[1:]


def test_main_hands_its_pytorch_times_to_the_lines(tmp_path):
    text = "".join(kernel_line(s, k, ms, TILES[s]) for s, k, ms in (
        (CAUSAL, 2, 4.913), (CAUSAL, 3, 1.5), (WINDOW, 2, 2.638), (WINDOW, 3, 0.9),
        (DENSE, 2, 33.974), (DENSE, 3, 4.5)))
    lines = run_main(tmp_path, text)
    # the same figures as test_both_kernels_side_by_side_with_block_counts, through main()
    want = btf.bench_md_lines(TORCH_H200, [("default", btf.parse_flexcheck(text.splitlines()))])
    assert lines == want and "gpu: kernel 3 / PyTorch compiled, fp16 causal L=8k D=128: 0.550 x" \
        in lines
    # PyTorch's window call with the LSE fails: its ratios say why, the window fraction stays
    lines = run_main(tmp_path, text, FAIL_WINDOW_LSE="1")
    assert "gpu: kernel 3 / PyTorch compiled, fp16 causal W=1024 L=16k D=128: not measured " \
           "(PyTorch: out+lse not run: out of resource: shared memory)" in lines, lines
    assert any(ln.startswith("gpu: kernel 3 window W=1024 L=16k D=128: 0.341 of") for ln in lines)
