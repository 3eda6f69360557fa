"""An LSE's own precision (docs/tolerance.md H5): a correct output whose LSE was rounded to
bfloat16 (what JAX returns) fails H5 when stored widened to float32, and the diagnosis names that
alone as the cause; stored as bfloat16 (uint16 bit patterns, encoding "bfloat16", as docs/
fixtures.md allows for out) it is judged at bfloat16's resolution and passes, the line saying so.
Runs only with FLEXCHECK_BIN (make test sets it)."""
import h5py
import numpy as np

import flexcheck
from flexcheck import add_tested, read_case
from _flexcli import flexcheck as run, needs_bin

pytestmark = needs_bin


def bf16_case(tmp_path):
    p = str(tmp_path / "b.h5")
    rc, text, err = run("gen", "--case", "--out", p, "--lq", "96", "--hq", "4", "--hkv", "2",
                        "--d", "32", "--causal", "--window", "40", "--dtype", "bfloat16",
                        "--seed", "5")
    assert rc == 0, text + err
    return p, read_case(p, "c0001")


def test_an_lse_rounded_to_bfloat16_is_named_alone_or_judged_at_its_resolution(tmp_path):
    p, c = bf16_case(tmp_path)
    out = flexcheck.round_to(c.out, "bfloat16")
    lse_bf16 = flexcheck.round_to(c.lse, "bfloat16")
    # widened to float32 after rounding: the LSE fails H5 where rounding moved it past H5's
    # bound, and the only cause is that rounding
    add_tested(p, "c0001", "widened", out, producer="jax-like", lse=lse_bf16.astype(np.float32))
    # kept as bfloat16: stored as bit patterns, as out's bfloat16 is
    add_tested(p, "c0001", "kept", out, producer="jax-like", lse=None)
    with h5py.File(p, "r+") as f:
        g = f["cases/c0001/tested/kept"]
        bits = flexcheck.bfloat16_bits(lse_bf16.astype(np.float32))
        g.create_dataset("lse", data=bits).attrs["encoding"] = "bfloat16"
    assert read_case(p, "c0001").tested["kept"].lse_encoding == "bfloat16"
    rc, text, err = run("check", p)
    assert rc == 1, text + err
    lines = text.splitlines()
    kept = [ln for ln in lines if "tested/kept" in ln]
    assert len(kept) == 1 and kept[0].startswith("PASS "), text
    assert "LSE stored as bfloat16, judged at its resolution" in kept[0], kept[0]
    i = next(i for i, ln in enumerate(lines) if "tested/widened" in ln)
    assert lines[i].startswith("FAIL ") and "H5 LSE" in lines[i], lines[i]
    block = []
    for ln in lines[i + 1:]:
        if not ln.startswith("    "):
            break
        block.append(ln)
    claims = [ln for ln in block if ln.startswith("    explained")]
    assert len(claims) == 1, "\n".join(block)
    assert claims[0].startswith("    explained by LSE rounded to bfloat16 (the input type): all "), \
        claims[0]
    assert not any("not explained" in ln for ln in block), "\n".join(block)


def _lse16_output(tmp_path, cid):
    """The exported case cid (float16) with its oracle's output and the LSE rounded to float16
    stored under tested/lse16; the file's path."""
    rc, text, err = run("export", "--quick", "--out", tmp_path, "--filter", cid)
    assert rc == 0, text + err
    p = str(tmp_path / f"{cid}.h5")
    c = read_case(p, "float16")
    assert np.isfinite(c.lse).all() and (c.lse < -65504).any()
    with np.errstate(over="ignore"):  # the overflow to -inf is the point
        lse16 = c.lse.astype(np.float16).astype(np.float32)
    add_tested(p, "float16", "lse16", c.out.astype(np.float16), producer="lse in float16",
               lse=lse16)
    return p


def test_an_lse_of_minus_inf_fails_where_the_float32_score_baseline_judges_the_rows(tmp_path):
    # The quick export's float16 case with logits near -1e5: the float16 baseline overflows
    # there, so its rows are judged against the float32-score baseline (docs/tolerance.md "When
    # the baseline drowns"). An LSE rounded to float16 (-inf) fails, and the diagnosis runs and
    # names the rounding: the hypothesis's LSE is that same -inf.
    p = _lse16_output(tmp_path,
                      "m5-numeric-f16-d64-h6x2-b1-256x512-cw129-q64k64-direct-neglogits")
    rc, text, err = run("check", "--tested", "lse16", p)
    assert rc == 1, text + err
    lines = text.splitlines()
    i = next(i for i, ln in enumerate(lines) if "tested/lse16" in ln)
    assert lines[i].startswith("FAIL ") and "LSE is -inf" in lines[i], lines[i]
    block = [ln for ln in lines[i + 1:] if ln.startswith("    ")]
    assert any(ln.startswith("    diagnosis: 1536 of 1536 rows failing") for ln in block), text
    claims = [ln for ln in block if ln.startswith("    explained")]
    assert len(claims) == 1 and claims[0].startswith(
        "    explained by LSE rounded to float16 (the input type): all 1536 failing rows"), text


def test_an_lse_of_minus_inf_fails_outside_the_contract_and_says_why_no_diagnosis(tmp_path):
    # The float16 case with logits near -1e9: past what float32 resolves, so no baseline holds
    # its rows (outside H1's contract); the truth's LSE is finite. An LSE rounded to float16
    # (-inf there) fails whatever the baselines did, and the printout says why no diagnosis ran.
    p = _lse16_output(tmp_path,
                      "m5-numeric-f16-d64-h6x2-b1-256x512-cw129-q64k64-direct-farlogits")
    rc, text, err = run("check", "--tested", "lse16", p)
    assert rc == 1, text + err
    lines = text.splitlines()
    i = next(i for i, ln in enumerate(lines) if "tested/lse16" in ln)
    assert lines[i].startswith("FAIL ") and "LSE is -inf" in lines[i], lines[i]
    assert "    diagnosis: not run: no float16 baseline holds every row of this case (outside " \
           "the contract)" in text, text
