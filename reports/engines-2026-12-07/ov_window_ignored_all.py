"""PYTHONPATH=python build/openvino-venv/bin/python \
    reports/engines-2026-12-07/ov_window_ignored_all.py

After make openvino-gate: every windowed ONNX Attention output that failed
(build/openvino-gate/report/rows.csv) run again by OpenVINO with and without
left/right_window_size; counts the bitwise-equal pairs. Engine against engine: no reference."""
import csv
import dataclasses

import numpy as np

from flexcheck import openvino_attention as ova, ort_attention as oa
from flexcheck.fixtures import read_case

e = ova.OpenVino()
rows = [r for r in csv.DictReader(open("build/openvino-gate/report/rows.csv"))
        if r["group"] == "tested" and "attention" in r["backend"] and r["outcome"] == "fail"
        and r["window"] != "0"]
eq = ne = 0
for r in rows:
    cid = r["case_id"]
    if "@" in cid:  # a layout layer (file@L03 -> layer03) or a variant (file@W+1)
        f, suf = cid.split("@", 1)
        name = f"layer{suf[1:]}" if suf[0] == "L" and suf[1:].isdigit() else f"{r['dtype']}@{suf}"
        path = f"build/openvino-gate/cases/{f}.h5"
    else:
        path, name = f"build/openvino-gate/cases/{cid}.h5", r["dtype"]
    p = oa.attention_plan(read_case(path, name), e.schemas["attention"])
    y, _ = e.run(p)
    q = dataclasses.replace(p, attrs={k: v for k, v in p.attrs.items() if "window" not in k})
    y2, _ = e.run(q)
    if np.array_equal(y, y2):
        eq += 1
    else:
        ne += 1
        print("differs", cid, r["dtype"])
print(f"{len(rows)} failing windowed Attention outputs: {eq} bitwise equal without the window "
      f"attributes, {ne} differ")
