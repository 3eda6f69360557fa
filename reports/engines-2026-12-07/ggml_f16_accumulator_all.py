"""PYTHONPATH=python build/ggml-venv/bin/python reports/engines-2026-12-07/ggml_f16_accumulator_all.py \
       CHECK_TXT OUT_DIR

For every output that failed in a ggml-gate run (the FAIL lines of its check.txt): the file is
copied to OUT_DIR and the case run again through ggml_attention's plan with V handed over as F32
(the same values; K stays F16), stored as tested/ggml-vF32 beside the gate's output; then run
`flexcheck check` on OUT_DIR. If the F16 output accumulator of ggml's one-chunk CPU path is the
whole cause, every vF32 output passes where the gate's output failed."""
import dataclasses
import os
import shutil
import sys

import numpy as np

from flexcheck import ggml_attention as ga
from flexcheck.fixtures import add_tested, read_case

check_txt, out_dir = sys.argv[1], sys.argv[2]
os.makedirs(out_dir, exist_ok=True)
failed = sorted({(ln.split()[1], ln.split()[2].split("@")[0]) for ln in open(check_txt)
                 if ln.startswith("FAIL ")})
e = ga.Ggml(threads=2)
for path, name in failed:
    dst = os.path.join(out_dir, os.path.basename(path))
    if not os.path.exists(dst):
        shutil.copy(path, dst)
    case = read_case(dst, name)
    plan = ga.ggml_plan(case)
    y, y2 = e.run(dataclasses.replace(plan, v=plan.v.astype(np.float32), v_type="F32"))
    add_tested(dst, name, "ggml-vF32", y, out_rerun=y2, producer=e.describe() +
               ", V F32 (same values)", overwrite=True)
    print(f"{os.path.basename(path)} {name}: q {case.q.shape} k {case.k.shape} "
          f"{case.dtype}, vF32 stored")
