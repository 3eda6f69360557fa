"""PyTorch's compiled flex_attention on the shapes of `flexcheck bench kernel --gpu-shapes`.

Run by ci/gpu_check.sh on a machine with a GPU and PyTorch: fp16, B=1, H=16, D=128,
causal at L=8k, causal with window 1024 (p_q - p_k < 1024, docs/semantics.md) at L=16k, and
dense at L=16k, each with a block mask from create_block_mask (blocks 128) so the work skipped
is the same as flexcheck's direct builder. Prints one line per shape: milliseconds (median of
20 after warm-up) and TFLOP/s counted over the allowed pairs only; then the same with the LSE
returned (as the runner, python -m flexcheck.torch_flex, asks for it), or why it is not.

Works with PyTorch 2.7 and later: the LSE is asked for with return_aux=AuxRequest(lse=True)
where flex_attention takes it (2.9 and later; return_lse is deprecated there), else with
return_lse=True, told by the signature rather than the version string.

    python3 ci/bench_torch_flex.py                   # the GPU shapes (needs CUDA)
    python3 ci/bench_torch_flex.py --device cpu      # small CPU shapes: a smoke test of the paths
    python3 ci/bench_torch_flex.py --flexcheck F     # and the ratio to each kernel's line in F,
                                                     # `flexcheck bench kernel --backend gpu
                                                     # --gpu-shapes` run just before on this GPU
    python3 ci/bench_torch_flex.py --flexcheck default=F --flexcheck bq128=G   # builds side by side
"""
import argparse
import inspect
import re
import statistics
import sys
import time

import torch
from torch.nn.attention import flex_attention as fa

torch.backends.cuda.matmul.allow_tf32 = False


def has_return_aux():
    """flex_attention takes return_aux=AuxRequest(...) (told by feature, not version)."""
    try:
        params = inspect.signature(fa.flex_attention).parameters
    except (TypeError, ValueError):
        return False
    return hasattr(fa, "AuxRequest") and "return_aux" in params


def lse_kwargs():
    return {"return_aux": fa.AuxRequest(lse=True)} if has_return_aux() else {"return_lse": True}


def causal(b, h, q, k):
    return q >= k


def causal_window(w):
    def mod(b, h, q, k):
        return (q >= k) & (q - k < w)
    return mod


GPU_SHAPES = [
    ("fp16 causal L=8k D=128 B=1 H=16", 8192, causal, 8192 * 8193 // 2),
    ("fp16 causal W=1024 L=16k D=128 B=1 H=16", 16384, causal_window(1024),
     sum(min(i + 1, 1024) for i in range(16384))),
    ("fp16 dense L=16k D=128 B=1 H=16", 16384, None, 16384 * 16384),
]
# The CPU smoke shapes: the same masks, small enough for a 2-core machine.
CPU_SHAPES = [
    ("fp16 causal L=512 D=64 B=1 H=2", 512, causal, 512 * 513 // 2),
    ("fp16 causal W=64 L=512 D=64 B=1 H=2", 512, causal_window(64),
     sum(min(i + 1, 64) for i in range(512))),
    ("fp16 dense L=512 D=64 B=1 H=2", 512, None, 512 * 512),
]


class Timer:
    def __init__(self, device):
        self.device = device

    def __call__(self, fn):
        if self.device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end)
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3


# `flexcheck bench kernel` prints "  <shape name>  kernel K:  <ms> ms ..." per shape and kernel.
FLEXCHECK_LINE = re.compile(r"^\s+(.+?)\s+kernel (\d+):\s+([0-9.]+) ms")


def read_flexcheck(path, spec=None):
    """{shape name: {kernel: ms}} from a `flexcheck bench kernel` output; exits with one line
    naming the --flexcheck value (spec, default the path) when the file cannot be read."""
    out = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                m = FLEXCHECK_LINE.match(line)
                if m:
                    out.setdefault(m.group(1), {})[int(m.group(2))] = float(m.group(3))
    except (OSError, UnicodeDecodeError) as e:
        sys.exit(f"bench_torch_flex.py: --flexcheck {spec or path}: "
                 f"{getattr(e, 'strerror', None) or e}")
    return out


def warn_unmatched(specs, benches, shapes):
    """A line on stderr for each --flexcheck file that gives no ratio: no kernel line at all
    (a failed or timed-out bench), or only shapes this run does not time (another --device)."""
    names = {s[0] for s in shapes}
    for spec, (_, found) in zip(specs or (), benches):
        if not found:
            print(f"bench_torch_flex.py: warning: --flexcheck {spec}: no `flexcheck bench kernel` "
                  f"line (no ratio for it)", file=sys.stderr)
        elif not names & set(found):
            print(f"bench_torch_flex.py: warning: --flexcheck {spec}: its shapes "
                  f"({', '.join(sorted(found))}) are not this run's (no ratio for it)",
                  file=sys.stderr)


def read_benches(specs):
    """[(label, {shape: {kernel: ms}})] from --flexcheck values LABEL=FILE (or FILE alone)."""
    out = []
    for spec in specs or ():
        label, sep, path = spec.partition("=")
        out.append((label, read_flexcheck(path, spec)) if sep else ("", read_flexcheck(spec)))
    return out


def bench(compiled, timer, name, length, mod, pairs, device, reps, b=1, h=16, d=128, ours=()):
    q, k, v = (torch.randn(b, h, length, d, device=device, dtype=torch.float16)
               for _ in range(3))
    bm = create_block_mask(mod, length, device) if mod else None
    for label, kw in (("out", {}), ("out+lse", lse_kwargs())):
        def call():
            return compiled(q, k, v, block_mask=bm, **kw)
        try:
            for _ in range(3):
                call()
        except Exception as e:  # e.g. Inductor's CPU flex_attention: no LSE (2.15)
            why = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
            print(f"{name:44s} {label:8s} torch {torch.__version__}: not run: {why.strip()}")
            continue
        if device == "cuda":
            torch.cuda.synchronize()
        ms = statistics.median(timer(call) for _ in range(reps))
        tflops = 4.0 * b * h * pairs * d / (ms * 1e-3) / 1e12
        print(f"{name:44s} {label:8s} torch {torch.__version__}: {ms:9.3f} ms  "
              f"{tflops:7.3f} TFLOP/s")
        # flexcheck's kernels always return the LSE: the fair ratio is to out+lse.
        for build, shapes in ours if label == "out+lse" else ():
            for kernel, kms in sorted(shapes.get(name, {}).items()):
                who = f"flexcheck {build} kernel {kernel}" if build else f"flexcheck kernel {kernel}"
                print(f"{name:44s} {'':8s} {who}: {kms:9.3f} ms  "
                      f"{4.0 * b * h * pairs * d / (kms * 1e-3) / 1e12:7.3f} TFLOP/s  "
                      f"{ms / kms:.3f}x PyTorch's speed")


def create_block_mask(mod, length, device):
    return fa.create_block_mask(mod, None, None, length, length, device=device)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--reps", type=int, default=None, help="timed calls (default 20 on cuda, 5 on cpu)")
    ap.add_argument("--flexcheck", metavar="[LABEL=]FILE", action="append",
                    help="a `flexcheck bench kernel` output: print each kernel's ratio to PyTorch "
                    "on the shapes both ran (repeatable, one per build)")
    a = ap.parse_args(argv)
    ours = read_benches(a.flexcheck)
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_torch_flex.py: no CUDA device (--device cpu runs the small CPU shapes)")
    compiled = torch.compile(fa.flex_attention, dynamic=False)
    timer = Timer(a.device)
    if a.device == "cuda":
        print(torch.cuda.get_device_name(0))
        shapes, reps, dims = GPU_SHAPES, a.reps or 20, dict(h=16, d=128)
    else:
        print(f"cpu, {torch.get_num_threads()} threads")
        shapes, reps, dims = CPU_SHAPES, a.reps or 5, dict(h=2, d=64)
    warn_unmatched(a.flexcheck, ours, shapes)
    print(f"LSE requested with {'return_aux=AuxRequest(lse=True)' if has_return_aux() else 'return_lse=True'}")
    for shape in shapes:
        bench(compiled, timer, *shape, device=a.device, reps=reps, ours=ours, **dims)


if __name__ == "__main__":
    main()
