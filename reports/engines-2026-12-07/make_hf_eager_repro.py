"""Writes hf-eager-bf16-scores.h5: the smallest case of the transformers eager finding (scores
computed in the input type): the gate's bfloat16 very-negative-logits case
(m5-numeric-bf16-d64-h6x2-b1-256x512-cw129-q64k64-direct-neglogits, `flexcheck export --quick
--filter` it into DIR) cut to query head 0 (kv head 0), its last 8 queries and the 137 keys they
can see (causal W = 129, bottom-right: the same pairs, the same values). Then:
    build/flexcheck fill hf-eager-bf16-scores.h5 --in-place
    build/hf-venv/bin/python -m flexcheck.hf_attention FILE --impl eager
    build/flexcheck check FILE                                  (hf-eager-bf16-scores-check.txt)

    PYTHONPATH=python python3 reports/engines-2026-12-07/make_hf_eager_repro.py DIR/<that case>.h5
"""
import sys

sys.path.insert(0, "python")
from flexcheck.fixtures import list_cases, read_case, write_case  # noqa: E402

src = sys.argv[1]
c = read_case(src, list_cases(src)[0])
lq, lk = 8, 137
q = c.q[:, :1, -lq:, :]
k, v = c.k[:, :1, -lk:, :], c.v[:, :1, -lk:, :]
write_case("reports/engines-2026-12-07/hf-eager-bf16-scores.h5", "neglogits-cut", q, k, v,
           causal=c.causal, window=c.window, scale=c.scale, dtype=c.dtype)
