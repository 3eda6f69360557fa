#!/usr/bin/env python3
"""measure.py - H5 (the LSE gate) against PyTorch's math SDPA on scales that are not powers of two.

    PYTHONPATH=python build/torch-venv/bin/python reports/h5-sdpa-2026-12-02/measure.py \
        OUT_DIR BIN [BIN_OLD]

Writes fixture files with `flexcheck gen` (float16 and bfloat16; D 64, 80, 96, 128 at scale
1/sqrt(D), and D 64 at scales 0.1 and 0.3; causal, causal window 64, bidirectional window 64;
256 x 256, 4 query heads over 2 kv heads), then stores two outputs under test in each case:

  sdpa-math     torch.nn.functional.scaled_dot_product_attention under SDPBackend.MATH on the CPU,
                the mask as a boolean attn_mask; its LSE, which SDPA does not return, computed
                the way its math path computes the scores (on the CPU it upcasts q, k and v to
                float32 and multiplies q and k by sqrt(scale) each; the script checks that this
                recomputation gives SDPA's output bit for bit before it uses it)
  prescale-lowp the same composite without the upcast: q * sqrt(scale) and k * sqrt(scale)
                rounded to the input type, q.k accumulated in float32 and rounded to it (matmul
                in the input type), a float32 softmax, P rounded, P.V in the input type; LSE the
                float32 logsumexp of those rounded scores

and runs BIN check (and BIN_OLD check, a flexcheck built before H5 was scaled by the baseline)
on every file, printing per binary and output how many outputs H5 fails and the worst H5 ratio.
An engine of the composite's kind is a correct same-precision engine: the question is whether H5
holds it to what such an engine may differ by.
"""
import glob
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from flexcheck import add_tested, list_cases, read_case  # noqa: E402

DT = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def mask_of(c):
    lq, lk = c.q.shape[2], c.k.shape[2]
    i = torch.arange(lq)[:, None] + (lk - lq)
    j = torch.arange(lk)[None, :]
    ok = torch.ones(lq, lk, dtype=torch.bool)
    if c.causal:
        ok &= j <= i
    if c.window:
        ok &= (i - j).abs() < c.window
    return ok


def run(c, way):
    dt = DT[c.dtype]
    q, k, v = (torch.from_numpy(np.asarray(x, np.float32)).to(dt) for x in (c.q, c.k, c.v))
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    ok = mask_of(c)
    sf = math.sqrt(c.scale)
    if way == "sdpa-math":
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=ok,
                                                                   scale=c.scale)
        s = (q.float() * sf) @ (k.float() * sf).transpose(-1, -2)
        s = s.masked_fill(~ok, float("-inf"))
        again = (torch.softmax(s, -1) @ v.float()).to(dt)
        assert torch.equal(again, out), "the recomputation is not SDPA's math path"
        lse = torch.logsumexp(s, -1)
    else:
        s = (q * sf) @ (k * sf).transpose(-1, -2)  # rounded to the input type
        s = s.float().masked_fill(~ok, float("-inf"))
        out = torch.softmax(s, -1).to(dt) @ v
        lse = torch.logsumexp(s, -1)
    out = out.float().numpy()
    return (out.astype(np.float16) if c.dtype == "float16" else out), lse.numpy()


def gen(bin_, out_dir):
    files = []
    for dt in ("float16", "bfloat16"):
        for d, scale in ((64, None), (80, None), (96, None), (128, None), (64, 0.1), (64, 0.3)):
            for name, mask in (("c", ["--causal"]), ("cw64", ["--causal", "--window", "64"]),
                               ("w64", ["--window", "64"])):
                f = os.path.join(out_dir, f"{dt}-d{d}-s{scale or 'def'}-{name}.h5")
                args = [bin_, "gen", "--case", "--out", f, "--lq", "256", "--lk", "256", "--hq",
                        "4", "--hkv", "2", "--d", str(d), "--dtype", dt, "--seed", str(d),
                        "--force", *mask] + (["--scale", str(scale)] if scale else [])
                subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
                files.append(f)
    return files


def judge(bin_, files, tag):
    rep = os.path.join(os.path.dirname(files[0]), f"report-{tag}")
    subprocess.run([bin_, "check", "--quiet", "--report", rep, *files], stdout=subprocess.DEVNULL)
    with open(os.path.join(rep, "rows.json"), encoding="utf-8") as fh:
        rows = [r for r in json.load(fh)["rows"] if str(r["backend"]).startswith("tested/")]
    res = {}
    for r in rows:
        key = (r["backend"][len("tested/"):], r["dtype"])
        n, h5, passed = res.get(key, (0, 0, 0))
        failed_h5 = r["gates"][5] == "F"  # H6 H3 H4 H1 H2 H5 H7
        res[key] = (n + 1, h5 + failed_h5, passed + (r["outcome"] == "pass"))
    return res


def main():
    out_dir, bin_ = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    files = gen(bin_, out_dir)
    scores = {}
    for f in files:
        for name in list_cases(f):
            c = read_case(f, name)
            for way in ("sdpa-math", "prescale-lowp"):
                o, l = run(c, way)
                add_tested(f, name, way, o, lse=l.astype(np.float32),
                           producer=f"torch {torch.__version__} {way}", overwrite=True)
                err = float(np.max(np.abs(l.astype(np.float64) - np.asarray(c.lse))))
                scores.setdefault((way, c.dtype), []).append(err)
    print(f"{len(files)} files, torch {torch.__version__}")
    for (way, dt), errs in sorted(scores.items()):
        print(f"  {way} {dt}: max |LSE - LSE_gold| over cases {max(errs):.3g}")
    for tag, b in (("new", bin_), ("old", sys.argv[3] if len(sys.argv) > 3 else None)):
        if not b:
            continue
        for (way, dt), (n, h5, passed) in sorted(judge(b, files, tag).items()):
            print(f"  {tag} check: {way} {dt}: {n} outputs, {passed} pass, H5 failed on {h5}")


if __name__ == "__main__":
    main()
