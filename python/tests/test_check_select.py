"""`flexcheck check --tested LABEL`: only the outputs under test whose label matches one of the
patterns are judged and counted; a selection that matches nothing is bad input. Runs only with
FLEXCHECK_BIN (make test sets it)."""
import numpy as np

from flexcheck import add_tested, read_case
from _flexcli import flexcheck as run, needs_bin

pytestmark = needs_bin


def test_tested_selects_labels_by_pattern(tmp_path):
    p = str(tmp_path / "s.h5")
    rc, text, err = run("gen", "--case", "--out", p, "--lq", "24", "--hq", "2", "--d", "16",
                        "--causal", "--dtype", "float16")
    assert rc == 0, text + err
    c = read_case(p, "c0001")
    good = c.out.astype(np.float16)
    bad = (c.out * 1.5).astype(np.float16)
    for label, out in (("torch-a", good), ("torch-b", bad), ("vllm-x", good)):
        add_tested(p, "c0001", label, out, producer=label)
    rc, text, err = run("check", p, "--tested", "vllm-x")
    assert rc == 0, text + err
    assert "tested/vllm-x" in text and "tested/torch" not in text, text
    assert "1 outputs under test selected by --tested: 1 passed, 0 failed" in text, text
    rc, text, err = run("check", p, "--tested", "torch-*")
    assert rc == 1, text + err
    assert "tested/torch-a" in text and "tested/torch-b" in text and "vllm" not in text, text
    assert "2 outputs under test selected by --tested: 1 passed, 1 failed" in text, text
    rc, text, err = run("check", p, "--tested", "torch-a", "--tested", "vllm-?")
    assert rc == 0 and "2 outputs under test selected by --tested: 2 passed" in text, text
    rc, text, err = run("check", p)
    assert "3 outputs under test: 2 passed, 1 failed" in text, text
    rc, text, err = run("check", p, "--tested", "jax*")
    assert rc == 2, text + err
    assert err.strip() == "flexcheck check: --tested: no output under test of the 1 file " \
                          "matches jax*", err
