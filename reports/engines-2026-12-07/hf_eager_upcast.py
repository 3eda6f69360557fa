"""The hf-gate's eager failures in float16 / bfloat16, rerun with the same transformers call on
q, k, v upcast to float32 (values unchanged), the output rounded back to the case's dtype and
stored under tested/eager-f32-upcast beside the gate's output: if these pass `flexcheck check`,
the failure is eager_attention_forward's half-precision score path (torch.matmul of q and k in
the input dtype; Gemma 2's soft-cap divided, tanh'd and multiplied in it), not the mask.

    build/hf-venv/bin/python reports/engines-2026-12-07/hf_eager_upcast.py FILE CASE [FILE CASE...]
"""
import sys

import numpy as np
import torch

sys.path.insert(0, "python")
from flexcheck import hf_attention as hf  # noqa: E402
from flexcheck.fixtures import add_tested, read_case  # noqa: E402

eng = hf.Transformers()
args = sys.argv[1:]
for path, name in zip(args[::2], args[1::2]):
    case = read_case(path, name)
    plan = hf.hf_plan(case)
    dtype = plan.dtype
    plan.q, plan.k, plan.v = (x.astype(np.float32) for x in (plan.q, plan.k, plan.v))
    plan.dtype = "float32"
    out, _ = eng.run(plan, "eager")
    out = out.to({"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype])
    add_tested(path, name, "eager-f32-upcast", out, overwrite=True,
               producer=f"transformers {eng.version} eager, q/k/v upcast to float32, "
                        f"output rounded to {dtype}")
    print(f"{path} {name}: stored tested/eager-f32-upcast")
