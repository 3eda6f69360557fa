"""Write the small fixture files of this report's OpenVINO findings (inputs only, seeded):

    PYTHONPATH=python python3 reports/engines-2026-12-07/make_repros.py DIR

  ov-attention-window.h5   causal W = 4 over 16 tokens (B 1, H 2, D 16): ONNX Attention at
                           opset 25 gets left_window_size 3, right_window_size 0
  ov-attention-bf16-empty.h5  causal, 8 queries over 4 keys (the first 4 queries have no key)
                           in bfloat16 and float32: Attention with nonpad_kv_seqlen = 4
  ov-gqa-static-past.h5    causal decode-like chunk, 4 queries over 12 keys (8 as past_key):
                           GroupQueryAttention, run with --static-shapes

Then the runner stores OpenVINO's outputs and check judges them (README.md has the commands).
"""
import os
import sys

import numpy as np

from flexcheck.fixtures import write_case


def qkv(rng, hq, hkv, lq, lk, d, bf16=False):
    def r(*s):
        x = rng.standard_normal(s).astype(np.float32)
        if bf16:  # bfloat16 values, stored as float32
            x = (x.view(np.uint32) & 0xFFFF0000).view(np.float32)
        return x
    return r(1, hq, lq, d), r(1, hkv, lk, d), r(1, hkv, lk, d)


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20261207)
    p = os.path.join(out, "ov-attention-window.h5")
    write_case(p, "float32", *qkv(rng, 2, 2, 16, 16, 16), causal=True, window=4,
               dtype="float32", q_block_size=16, kv_block_size=16)
    p = os.path.join(out, "ov-attention-bf16-empty.h5")
    for dt in ("bfloat16", "float32"):
        write_case(p, dt, *qkv(rng, 1, 1, 8, 4, 16, bf16=True), causal=True, dtype=dt,
                   q_block_size=16, kv_block_size=16)
    p = os.path.join(out, "ov-gqa-static-past.h5")
    write_case(p, "float32", *qkv(rng, 2, 1, 4, 12, 16), causal=True, dtype="float32",
               q_block_size=16, kv_block_size=16)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
