"""PYTHONPATH=python build/ggml-venv/bin/python reports/engines-2026-12-07/ggml_f16_accumulator.py \
       SRC CASE HEAD OUT.h5

Is ggml's float16 failure its F16 output accumulator? One head of a failing float16 case of the
gate run is written as its own fixture file OUT.h5 (q, k, v, the case's terms; the oracle left
to check), and three outputs are stored under it:
  - tested/ggml-<version>-flash_attn_ext-cpu: ggml as the runner hands it the case (K, V F16,
    GGML_PREC_F32 requested, as llama.cpp requests it);
  - tested/ggml-<version>-vF32: ggml with the same V values as F32 (K still F16): the CPU kernel
    then accumulates V*softmax in F32 (VKQ32) instead of F16 (VKQ16), nothing else changes;
  - tested/emulated-f16-vkq: the one-chunk loop of ggml-cpu/ops.cpp
    (ggml_compute_forward_flash_attn_ext_f16_one_chunk) in numpy, with its accumulator rounded
    to float16 after every ggml_vec_scale_f16 and ggml_vec_mad_f16, as those functions store it.
Then `flexcheck check OUT.h5` judges all three. The script prints how far apart they are, and
whether ggml's output with GGML_PREC_DEFAULT is bitwise the one with GGML_PREC_F32."""
import dataclasses
import sys

import numpy as np

from flexcheck import ggml_attention as ga
from flexcheck.fixtures import add_tested, read_case, write_case

src, name, head, dst = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
c = read_case(src, name)
assert c.dtype == "float16" and c.mask is None and c.bias is None and not c.packed
hkv = head // (c.q.shape[1] // c.k.shape[1])
one = lambda x, h: np.ascontiguousarray(x[:, h:h + 1])  # noqa: E731
q, k, v = one(c.q, head), one(c.k, hkv), one(c.v, hkv)
sinks = None if c.sinks is None else c.sinks[head:head + 1]
write_case(dst, "c0", q, k, v, dtype="float16", causal=c.causal, window=c.window, chunk=c.chunk,
           scale=c.scale, softcap=c.softcap, sinks=sinks, overwrite=True)
case = read_case(dst, "c0")
e = ga.Ggml(threads=1)
plan = ga.ggml_plan(case)
y16, _ = e.run(plan)
y32, _ = e.run(dataclasses.replace(plan, v=plan.v.astype(np.float32), v_type="F32"))
ydef, _ = e.run(dataclasses.replace(plan, prec_f32=False))  # GGML_PREC_DEFAULT


def emulate(plan):
    """ggml's one-chunk loop for one row, its VKQ accumulator in float16."""
    qr = plan.q[0, 0, 0].astype(np.float16).astype(np.float32)  # Q converted to K's type
    kk, vv = plan.k[0, 0].astype(np.float32), plan.v[0, 0]
    scale = np.float32(plan.scale)
    if plan.softcap:
        scale = np.float32(scale / np.float32(plan.softcap))
    M, S = np.float32(-np.inf), np.float32(0)
    acc = np.zeros(vv.shape[1], np.float16)
    for ic in range(kk.shape[0]):
        mv = np.float32(0) if plan.mask is None else np.float32(plan.mask[0, 0, 0, ic])
        if mv == -np.inf:
            continue
        s = np.float32(kk[ic] @ qr) * scale
        if plan.softcap:
            s = np.float32(plan.softcap) * np.tanh(s)
        s = np.float32(s + mv)
        ms, vs = np.float32(1), np.float32(1)
        if s > M:
            M, ms = s, np.float32(np.exp(M - s))
            acc = (acc.astype(np.float32) * ms).astype(np.float16)
        else:
            vs = np.float32(np.exp(s - M))
        acc = (acc.astype(np.float32) + vv[ic].astype(np.float32) * vs).astype(np.float16)
        S = np.float32(S * ms + vs)
    acc = acc.astype(np.float32)
    if plan.sinks is not None:
        s = np.float32(plan.sinks[0])
        ms, vs = np.float32(1), np.float32(1)
        if s > M:
            ms = np.float32(np.exp(M - s))
            acc = acc * ms
        else:
            vs = np.float32(np.exp(s - M))
        S = np.float32(S * ms + vs)
    return (acc / S).reshape(1, 1, 1, -1)


ye = emulate(plan)
producer = e.describe()
add_tested(dst, "c0", f"ggml-{e.version}-flash_attn_ext-cpu", y16, out_rerun=y16.copy(),
           producer=producer + ", K/V F16 (as the runner)", overwrite=True)
add_tested(dst, "c0", f"ggml-{e.version}-vF32", y32, out_rerun=y32.copy(),
           producer=producer + ", K F16, V F32 (same values)", overwrite=True)
add_tested(dst, "c0", "emulated-f16-vkq", ye, producer="numpy emulation of ggml's one-chunk "
           "loop, VKQ accumulator in float16", overwrite=True)
print(f"{src} {name} head {head}: q {q.shape} k {k.shape} v {v.shape} -> {dst}")
print(f"max |ggml(V F16) - ggml(V F32)|      = {np.max(np.abs(y16 - y32)):.3e}")
print(f"max |ggml(V F16) - emulated F16 VKQ| = {np.max(np.abs(y16 - ye)):.3e}")
print(f"ggml(V F16) with GGML_PREC_F32 and with GGML_PREC_DEFAULT bitwise equal: "
      f"{np.array_equal(y16, ydef)}")
print(f"max |ggml(V F32) - emulated F16 VKQ| = {np.max(np.abs(y32 - ye)):.3e}")
