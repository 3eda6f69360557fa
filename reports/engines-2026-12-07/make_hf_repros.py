"""Writes hf-window1-decode.h5: the smallest case of the transformers W = 1 finding (Mistral
sliding_window = 1: causal W = 1, one query after 11 cached keys, B 1, H 2, D 16, float32,
seeded inputs). Then: build/hf-venv/bin/python -m flexcheck.hf_attention FILE --impl eager
and build/flexcheck check FILE (hf-window1-check.txt)."""
import sys

import numpy as np

sys.path.insert(0, "python")
from flexcheck.fixtures import write_case  # noqa: E402

rng = np.random.default_rng(39)
q, k, v = (rng.standard_normal(s).astype(np.float32)
           for s in ((1, 2, 1, 16), (1, 2, 12, 16), (1, 2, 12, 16)))
write_case("reports/engines-2026-12-07/hf-window1-decode.h5", "w1-decode", q, k, v,
           causal=True, window=1, seed=39)
