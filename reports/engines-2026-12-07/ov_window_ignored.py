"""PYTHONPATH=python build/openvino-venv/bin/python reports/engines-2026-12-07/ov_window_ignored.py FILE CASE

Is OpenVINO's output for an ONNX Attention node with left/right_window_size (opset 25) the same
as for the node without them? And with nonpad_kv_seqlen (opset 24) the same as without?
Engine against engine: no reference is computed."""
import sys, dataclasses
import numpy as np
from flexcheck import openvino_attention as ova, ort_attention as oa
from flexcheck.fixtures import read_case

e = ova.OpenVino()
path, case = sys.argv[1], sys.argv[2]
c = read_case(path, case)
p = oa.attention_plan(c, e.schemas["attention"])
print("plan:", p.attrs, [n for n, a in p.inputs if a is not None], "opset", p.opset)
y, _ = e.run(p)
attrs = {k: v for k, v in p.attrs.items() if k not in ("left_window_size", "right_window_size")}
inputs = [(n, a) for n, a in p.inputs if n != "nonpad_kv_seqlen"]
q = dataclasses.replace(p, attrs=attrs, inputs=inputs)
y2, _ = e.run(q)
print("without window attributes and nonpad_kv_seqlen: bitwise equal:", np.array_equal(y, y2))
