"""PyTorch's compiled flex_attention on the shapes of `flexcheck bench kernel --gpu-shapes`.

Run by ci/gpu_check.sh on a machine with a GPU and PyTorch: fp16, B=1, H=16, D=128,
causal at L=8k, causal with window 1024 (p_q - p_k < 1024, docs/semantics.md) at L=16k, and
dense at L=16k, each with a block mask from create_block_mask (blocks 128) so the work skipped
is the same as flexcheck's direct builder. Prints one line per shape: milliseconds (median of
20 after warm-up) and TFLOP/s counted over the allowed pairs only.
"""
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

torch.backends.cuda.matmul.allow_tf32 = False
compiled = torch.compile(flex_attention, dynamic=False)


def causal(b, h, q, k):
    return q >= k


def causal_window(w):
    def mod(b, h, q, k):
        return (q >= k) & (q - k < w)
    return mod


SHAPES = [
    ("fp16 causal L=8k D=128 B=1 H=16", 8192, causal, 8192 * 8193 // 2),
    ("fp16 causal W=1024 L=16k D=128 B=1 H=16", 16384, causal_window(1024),
     sum(min(i + 1, 1024) for i in range(16384))),
    ("fp16 dense L=16k D=128 B=1 H=16", 16384, None, 16384 * 16384),
]


def bench(name, length, mod, pairs, b=1, h=16, d=128):
    q, k, v = (torch.randn(b, h, length, d, device="cuda", dtype=torch.float16) for _ in range(3))
    bm = create_block_mask(mod, None, None, length, length, device="cuda") if mod else None
    for _ in range(3):
        compiled(q, k, v, block_mask=bm)
    torch.cuda.synchronize()
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        compiled(q, k, v, block_mask=bm)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    ms = sorted(times)[len(times) // 2]
    tflops = 4.0 * b * h * pairs * d / (ms * 1e-3) / 1e12
    print(f"{name:44s} torch {torch.__version__}: {ms:9.3f} ms  {tflops:7.1f} TFLOP/s")


if __name__ == "__main__":
    print(torch.cuda.get_device_name(0))
    for shape in SHAPES:
        bench(*shape)
