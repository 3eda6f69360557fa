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

With --flexcheck on the GPU shapes it ends with the lines reports/bench.md takes, one per kernel
(2 and 3, issue 40) and shape, `gpu: kernel 3 / PyTorch compiled, fp16 causal L=8k D=128: R x`
(R: PyTorch's out+lse time over the kernel's, both this call's), each target met or missed, and
the window's fraction of what the block ratio allows: (dense time / window time) over (dense
blocks / window blocks), the block counts from the kernel's own lines (`flexcheck bench
kernel` prints the block mask's tiles). A measurement that is missing (a bench that failed or
ran out of time, PyTorch refusing a shape) is said to be missing, never filled in. The lines
are computed without PyTorch (bench_md_lines; tests/python/test_bench_torch_lines.py).
"""
import argparse
import inspect
import re
import statistics
import sys
import time

# PyTorch is imported by main() alone: the parsing and the bench.md lines run without it (the
# test runs under Debian's python3, which has no torch).
torch = fa = None


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


# Names as `flexcheck bench kernel --gpu-shapes` prints them (cli/bench_kernel.c's gpu_shapes):
# its lines are matched to these by name.
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


# `flexcheck bench kernel` prints "  <shape name>  kernel K:  <ms> ms ... N blocks (F full, P
# partial)" per shape and kernel (older builds end the line without the blocks).
FLEXCHECK_LINE = re.compile(r"^\s+(.+?)\s+kernel (\d+):\s+([0-9.]+) ms"
                            r"(?:.*\s(\d+) blocks \((\d+) full, (\d+) partial\))?")


class Measured:
    """One kernel's line: its time (ms) and, when printed, the block mask's listed tiles."""

    def __init__(self, ms, blocks=None):
        self.ms, self.blocks = ms, blocks

    def __repr__(self):
        return f"Measured({self.ms!r}, {self.blocks!r})"


def parse_flexcheck(lines):
    """{shape name: {kernel: Measured}} from `flexcheck bench kernel` output lines."""
    out = {}
    for line in lines:
        m = FLEXCHECK_LINE.match(line)
        if m:
            blocks = int(m.group(4)) if m.group(4) else None
            out.setdefault(m.group(1), {})[int(m.group(2))] = Measured(float(m.group(3)), blocks)
    return out


def read_flexcheck(path, spec=None):
    """parse_flexcheck of a file; exits with one line naming the --flexcheck value (spec,
    default the path) when the file cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return parse_flexcheck(f)
    except (OSError, UnicodeDecodeError) as e:
        sys.exit(f"bench_torch_flex.py: --flexcheck {spec or path}: "
                 f"{getattr(e, 'strerror', None) or e}")


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
    """[(label, {shape: {kernel: Measured}})] from --flexcheck values LABEL=FILE (or FILE)."""
    out = []
    for spec in specs or ():
        label, sep, path = spec.partition("=")
        out.append((label, read_flexcheck(path, spec)) if sep else ("", read_flexcheck(spec)))
    return out


# Issue 40's targets, by shape name: kernel / PyTorch speed at causal 8k and dense 16k (stretch
# 1.0x), and the window's share of the speed-up over dense that skipping blocks allows.
SPEED_TARGETS = {
    "fp16 causal L=8k D=128 B=1 H=16": (0.5, 1.0),
    "fp16 dense L=16k D=128 B=1 H=16": (0.5, 1.0),
}
WINDOW_SHAPE, DENSE_SHAPE = "fp16 causal W=1024 L=16k D=128 B=1 H=16", "fp16 dense L=16k D=128 B=1 H=16"
WINDOW_TARGET = 0.8
# The kernels issue 40 compares with PyTorch: a line for each, measured or said to be missing.
BENCH_KERNELS = (2, 3)


def md_label(shape):
    """reports/bench.md's name of a shape: the bench's without the batch and heads (B=1 H=16
    on every GPU shape)."""
    return re.sub(r" B=\d+ H=\d+$", "", shape)


def met(value, target):
    return "met" if value >= target else "missed"


def bench_md_lines(torch_ms, benches, shapes=None):
    """The bench.md lines of one run. torch_ms: {shape: PyTorch's out+lse ms, or a str saying
    why there is none}; benches: read_benches' list, the first the default build (every kernel
    of BENCH_KERNELS gets its lines, measured or not), the others variant builds (their
    kernels' lines only). Nothing is computed from a measurement that is missing."""
    shapes = [s[0] for s in GPU_SHAPES] if shapes is None else shapes
    out = []
    for n, (build, found) in enumerate(benches):
        kernels = sorted(set(BENCH_KERNELS) | {k for per in found.values() for k in per}) \
            if n == 0 else sorted({k for per in found.values() for k in per})
        for kernel in kernels:
            who = f"kernel {kernel}" + (f" ({build})" if build and build != "default" else "")
            for shape in shapes:
                ours = found.get(shape, {}).get(kernel)
                theirs = torch_ms.get(shape, "PyTorch was not run on it")
                head = f"gpu: {who} / PyTorch compiled, {md_label(shape)}:"
                if ours is None:
                    out.append(f"{head} not measured (no flexcheck {who} line for this shape)")
                    continue
                if isinstance(theirs, str):
                    out.append(f"{head} not measured (PyTorch: {theirs})")
                    continue
                ratio = theirs / ours.ms
                out.append(f"{head} {ratio:.3f} x")
                if shape in SPEED_TARGETS:
                    target, stretch = SPEED_TARGETS[shape]
                    out.append(f"  target >= {target}x: {met(ratio, target)}; "
                               f"stretch {stretch}x: {met(ratio, stretch)}")
            out.extend(window_lines(who, found, kernel))
    return out


def window_lines(who, found, kernel):
    """The window's fraction of what the block ratio allows, for one kernel, or why not."""
    head = f"gpu: {who} window {md_label(WINDOW_SHAPE).replace('fp16 causal ', '')}:"
    w, d = (found.get(s, {}).get(kernel) for s in (WINDOW_SHAPE, DENSE_SHAPE))
    missing = [n for n, m in ((WINDOW_SHAPE, w), (DENSE_SHAPE, d)) if m is None]
    if missing:
        return [f"{head} fraction not measured (no flexcheck {who} line for "
                f"{' and '.join(missing)})"]
    if w.blocks is None or d.blocks is None:
        return [f"{head} fraction not measured (this flexcheck's lines print no block counts)"]
    speedup, allowed = d.ms / w.ms, d.blocks / w.blocks
    frac = speedup / allowed
    return [f"{head} {frac:.3f} of what the block ratio allows (dense / window time "
            f"{d.ms:.3f} / {w.ms:.3f} ms = {speedup:.2f}x, blocks {d.blocks} / {w.blocks} = "
            f"{allowed:.2f}x); target >= {WINDOW_TARGET}: {met(frac, WINDOW_TARGET)}"]


def bench(compiled, timer, name, length, mod, pairs, device, reps, b=1, h=16, d=128, ours=()):
    """Times PyTorch on one shape, printing its lines and each kernel's ratio; returns its
    out+lse median in ms, or a str saying why there is none."""
    q, k, v = (torch.randn(b, h, length, d, device=device, dtype=torch.float16)
               for _ in range(3))
    bm = create_block_mask(mod, length, device) if mod else None
    result = "its out+lse call did not run"
    for label, kw in (("out", {}), ("out+lse", lse_kwargs())):
        def call():
            return compiled(q, k, v, block_mask=bm, **kw)
        try:
            for _ in range(3):
                call()
        except Exception as e:  # e.g. Inductor's CPU flex_attention: no LSE (2.15)
            why = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
            print(f"{name:44s} {label:8s} torch {torch.__version__}: not run: {why.strip()}")
            if label == "out+lse":
                result = f"out+lse not run: {why.strip()}"
            continue
        if device == "cuda":
            torch.cuda.synchronize()
        ms = statistics.median(timer(call) for _ in range(reps))
        tflops = 4.0 * b * h * pairs * d / (ms * 1e-3) / 1e12
        print(f"{name:44s} {label:8s} torch {torch.__version__}: {ms:9.3f} ms  "
              f"{tflops:7.3f} TFLOP/s")
        if label != "out+lse":
            continue
        result = ms
        # flexcheck's kernels always return the LSE: the fair ratio is to out+lse.
        for build, shapes in ours:
            for kernel, m in sorted(shapes.get(name, {}).items()):
                who = f"flexcheck {build} kernel {kernel}" if build else f"flexcheck kernel {kernel}"
                print(f"{name:44s} {'':8s} {who}: {m.ms:9.3f} ms  "
                      f"{4.0 * b * h * pairs * d / (m.ms * 1e-3) / 1e12:7.3f} TFLOP/s  "
                      f"{ms / m.ms:.3f}x PyTorch's speed")
    return result


def create_block_mask(mod, length, device):
    return fa.create_block_mask(mod, None, None, length, length, device=device)


def main(argv=None):
    global torch, fa
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--reps", type=int, default=None, help="timed calls (default 20 on cuda, 5 on cpu)")
    ap.add_argument("--flexcheck", metavar="[LABEL=]FILE", action="append",
                    help="a `flexcheck bench kernel` output: print each kernel's ratio to PyTorch "
                    "on the shapes both ran (repeatable, one per build; the first is the default "
                    "build)")
    a = ap.parse_args(argv)
    ours = read_benches(a.flexcheck)
    import torch as torch_module
    from torch.nn.attention import flex_attention as fa_module
    torch, fa = torch_module, fa_module
    torch.backends.cuda.matmul.allow_tf32 = False
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
    torch_ms = {}
    for shape in shapes:
        try:
            torch_ms[shape[0]] = bench(compiled, timer, *shape, device=a.device, reps=reps,
                                       ours=ours, **dims)
        except Exception as e:  # one shape's failure (e.g. out of memory) leaves the others
            why = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
            print(f"{shape[0]:44s} torch {torch.__version__}: failed: {why.strip()}")
            torch_ms[shape[0]] = f"failed: {why.strip()}"
    if ours and a.device == "cuda":  # the lines name the GPU shapes and targets
        print(f"\nreports/bench.md lines (PyTorch {torch.__version__} out+lse, median of {reps}, "
              f"this process; flexcheck from {', '.join(a.flexcheck)}):")
        for line in bench_md_lines(torch_ms, ours, [s[0] for s in shapes]):
            print(line)


if __name__ == "__main__":
    main()
