"""The hf-gate's W = 1 decode failures (Mistral sliding_window = 1, one query after the cached
keys, eager and sdpa): the stored output against plain attention over every key (float64) and
against the W = 1 answer (the query's own key: V of the last key). Reads what the gate stored.

    python3 reports/engines-2026-12-07/hf_window1_all_keys.py FILE CASE LABEL...
"""
import sys

import numpy as np

sys.path.insert(0, "python")
from flexcheck.fixtures import bfloat16_to_float32, read_case  # noqa: E402

path, name, labels = sys.argv[1], sys.argv[2], sys.argv[3:]
c = read_case(path, name)
q, k, v = (np.asarray(x, np.float64) for x in (c.q, c.k, c.v))
g = q.shape[1] // k.shape[1]
k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
s = c.scale * q @ np.swapaxes(k, -1, -2)
p = np.exp(s - s.max(-1, keepdims=True))
every_key = (p / p.sum(-1, keepdims=True)) @ v
own_key = v[:, :, -1:, :]
for label in labels:
    t = c.tested[label]
    out = t.out
    if t.encoding == "bfloat16":
        out = bfloat16_to_float32(out)
    out = np.asarray(out, np.float64)
    print(f"{name} {label}: max|out - attention over all {k.shape[2]} keys| = "
          f"{np.abs(out - every_key).max():.3g}; max|out - V[last] (W = 1)| = "
          f"{np.abs(out - own_key).max():.3g}")
