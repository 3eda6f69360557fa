"""The M8 group (docs/matrix.md) through PyTorch's flex_attention with the natural mods.

`flexcheck export --quick --filter m8-` writes the group's cases with their explicit mask or
bias and the rule that made them (attribute mask_rule). torch_flex passes flex_attention the
mask_mod / score_mod an engine author writes for the rule, from the rule's parameters alone.
Shown here: each natural mod, evaluated over the grid by PyTorch's own create_mask, gives the
stored bits (and ALiBi's score_mod the stored bias); every quick M8 case passes `flexcheck
check` eager and compiled on the CPU with the bits' lookup switched off (so the natural mods are
what ran); and defects planted in the natural mods fail `check` with their cause named: the
mask read one key back or ahead, ALiBi with the wrong sign, a block dropped from the BlockMask.

Needs torch (skips cleanly without it) and FLEXCHECK_BIN (the built CLI).
Run: PYTHONPATH=python python3 -m pytest python/tests/test_torch_flex_rules.py
"""
import glob
import os
import shutil
import subprocess

import numpy as np
import pytest

from flexcheck import read_case
from flexcheck import torch_flex as tf
from flexcheck.fixtures import list_cases
from _flexcli import BIN, needs_bin

ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
RULES = ("alibi", "doc_window", "gemma3_image", "prefix_lm", "tree")


@pytest.fixture(scope="module")
def m8_dir(tmp_path_factory):
    """The quick export's M8 files (six: one case a rule, ALiBi twice), written once."""
    if not BIN or not os.path.exists(BIN):
        pytest.skip("FLEXCHECK_BIN not built")
    d = tmp_path_factory.mktemp("m8") / "export"
    r = subprocess.run([BIN, "export", "--quick", "--filter", "m8-", "--out", str(d)],
                       capture_output=True, text=True, env=ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    files = sorted(glob.glob(str(d / "*.h5")))
    assert len(files) == 6, files
    return d


def copy_of(m8_dir, tmp_path, pattern="*"):
    out = tmp_path / "run"
    out.mkdir()
    for f in glob.glob(str(m8_dir / f"{pattern}.h5")):
        shutil.copy(f, out)
    return out


def check(paths):
    r = subprocess.run([BIN, "check", *map(str, paths)], capture_output=True, text=True,
                       env=ENV)
    return r.returncode, r.stdout + r.stderr


def no_bits(monkeypatch):
    """The stored bits' lookup made unusable: a run that still passes used the rule's mods."""
    def refuse(*a, **k):
        raise AssertionError("the stored explicit terms were read")
    monkeypatch.setattr(tf, "xterm_lookup", refuse)
    monkeypatch.setattr(tf, "bias_score_mod", refuse)


@needs_bin
def test_every_case_names_its_rule(m8_dir):
    seen = set()
    for f in sorted(glob.glob(str(m8_dir / "*.h5"))):
        for name in list_cases(f):
            c = read_case(f, name)
            rule = tf.case_rule(c)
            assert rule is not None, (f, name, c.mask_rule)
            seen.add(rule["rule"])
    assert seen == set(RULES)
    # the mask as intervals where every row is one (every rule but the tree's), else as bits
    import h5py
    for f in sorted(glob.glob(str(m8_dir / "*.h5"))):
        with h5py.File(f) as h:
            keys = set(h["cases/float32"])
        form = {"mask", "mask_intervals", "bias"} & keys
        assert form == ({"bias"} if "alibi" in f else {"mask"} if "tree" in f
                        else {"mask_intervals"}), (f, form)


@needs_bin
def test_natural_mods_give_the_stored_bits(m8_dir, monkeypatch):
    """PyTorch's create_mask over each natural mask_mod (the case's families AND the rule) is
    the stored mask, over every batch entry; ALiBi's score_mod on a zero score is the stored
    bias, head by head. The rule text alone feeds the mods."""
    torch = pytest.importorskip("torch")
    fa = pytest.importorskip("torch.nn.attention.flex_attention")
    no_bits(monkeypatch)
    for f in sorted(glob.glob(str(m8_dir / "*.h5"))):
        c = read_case(f, "float32")
        b, hq, lq, lk = c.q.shape[0], c.q.shape[1], c.q.shape[2], c.k.shape[2]
        got = fa.create_mask(tf.case_mask_mod(torch, c, "cpu"), b, 1, lq, lk,
                             device="cpu")[:, 0].numpy()
        fam = tf.make_mask_mod(torch, causal=c.causal, window=c.window, chunk=c.chunk, lq=lq,
                               lk=lk)
        want = fa.create_mask(fam, b, 1, lq, lk, device="cpu")[:, 0].numpy()
        if c.mask is not None:
            want = want & np.broadcast_to(c.mask[:, 0], want.shape)
        assert (got == want).all(), (f, np.argwhere(got != want)[:5])
        if c.bias is not None:
            sm = tf.case_score_mod(torch, c, "cpu")
            if c.softcap:  # the cap of a zero score is zero: the bias alone remains
                assert tf.case_rule(c)["rule"] == "alibi"
            q = torch.arange(lq).view(lq, 1)
            k = torch.arange(lk).view(1, lk)
            for h in range(hq):
                s = sm(torch.zeros(lq, lk), torch.tensor(0), torch.tensor(h), q, k)
                assert (s.numpy() == c.bias[0, h]).all(), (f, h)


def run_all(tmp_path, m8_dir, monkeypatch, *args, pattern="*"):
    d = copy_of(m8_dir, tmp_path, pattern)
    no_bits(monkeypatch)
    rc = tf.main([str(d), "--device", "cpu", "--threads", "1", *args])
    return rc, check(sorted(d.glob("*.h5")))


@needs_bin
def test_every_quick_case_passes_eager(tmp_path, m8_dir, monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    rc, (check_rc, out) = run_all(tmp_path, m8_dir, monkeypatch)
    assert rc == 0 and check_rc == 0, capsys.readouterr().err + out
    assert "18 outputs under test: 18 passed, 0 failed" in out
    label = tf.default_label(torch.__version__, "cpu", False)
    for f in sorted((tmp_path / "run").glob("*.h5")):
        t = read_case(str(f), "float16").tested[label]
        assert "_mod written from mask_rule" in t.producer, t.producer


@needs_bin
def test_every_quick_case_without_sinks_passes_compiled(tmp_path, m8_dir, monkeypatch, capsys):
    """Compiled on the CPU, flex_attention returns no LSE (PyTorch 2.15: "return_lse is not
    supported yet"), and the runner applies sinks from the LSE: the one case with sinks (ALiBi
    with soft-cap and sinks) cannot be run so, and is refused with that reason, nothing stored.
    The other five files' 15 cases pass."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    rc, (check_rc, out) = run_all(tmp_path, m8_dir, monkeypatch, "--compile")
    err = capsys.readouterr().err
    if rc == 1 and "CppCompileError" in err:
        pytest.skip(f"torch {torch.__version__} cannot compile flex_attention for this CPU")
    sinks = [ln for ln in err.splitlines() if ": case " in ln]
    if any("LSE" in ln for ln in sinks):  # the CPU's compiled path: no LSE, so no sinks
        assert len(sinks) == 3 and all("sc30sk" in ln and "sinks: applied from flex_attention's "
                                       "LSE, which this backend does not return" in ln
                                       for ln in sinks), err
        assert rc == 1 and check_rc == 0, err + out
        assert "15 outputs under test: 15 passed, 0 failed" in out, out
    else:  # a backend that returns the LSE runs them all
        assert rc == 0 and check_rc == 0, err + out
        assert "18 outputs under test: 18 passed, 0 failed" in out, out


# ---- planted defects in the natural mods ----

def shifted(name, by):
    """The rule's mask_mod reading key kv + by: its mask one key ahead (by = 1) or back (-1)."""
    orig = getattr(tf, name)

    def make(torch, rule, device):
        mm = orig(torch, rule, device)
        return lambda b, h, q, kv: mm(b, h, q, kv + by)

    return make


def alibi_wrong_sign(torch, rule, device, inner=None):
    """ALiBi subtracted: score - slope[h] * (p_k - p_q)."""
    slope = torch.as_tensor(rule["slopes"], dtype=torch.float32, device=device)
    off = int(rule["q_offset"])

    def score_mod(score, b, h, q_idx, kv_idx):
        s = score if inner is None else inner(score, b, h, q_idx, kv_idx)
        return s - slope[h] * (kv_idx - (q_idx + off))

    return score_mod


def drop_one_block(monkeypatch):
    """The BlockMask with the last query tile's last listed block (entry 0, head 0) dropped."""
    orig = tf.Runner.block_mask

    def block_mask(self, case):
        bm = orig(self, case)
        num, full = bm.kv_num_blocks.clone(), bm.full_kv_num_blocks.clone()
        r = num.shape[2] - 1
        if full[0, 0, r] > 0:
            full[0, 0, r] -= 1
        else:
            num[0, 0, r] -= 1
        return tf._fa().BlockMask.from_kv_blocks(
            num, bm.kv_indices, full, bm.full_kv_indices, BLOCK_SIZE=bm.BLOCK_SIZE,
            mask_mod=bm.mask_mod, seq_lengths=bm.seq_lengths)

    monkeypatch.setattr(tf.Runner, "block_mask", block_mask)


DEFECTS = {
    # defect: (the file's rule, the patch, what check must say)
    "prefix_lm_key_back": ("prefix_lm", lambda mp: mp.setattr(
        tf, "prefix_lm_mask_mod", shifted("prefix_lm_mask_mod", -1)),
        "explained by explicit mask one key back"),
    "tree_key_ahead": ("tree", lambda mp: mp.setattr(
        tf, "tree_mask_mod", shifted("tree_mask_mod", 1)),
        "explained by explicit mask one key ahead"),
    "alibi_wrong_sign": ("*b1-150x300*alibi", lambda mp: mp.setattr(
        tf, "alibi_score_mod", alibi_wrong_sign),
        "explained by bias with the wrong sign (score - bias)"),
}


@pytest.mark.parametrize("defect", sorted(DEFECTS))
@needs_bin
def test_a_planted_defect_fails_with_its_cause_named(tmp_path, m8_dir, monkeypatch, defect):
    pytest.importorskip("torch")
    pattern, patch, named = DEFECTS[defect]
    d = copy_of(m8_dir, tmp_path, pattern if "*" in pattern else f"*{pattern}")
    files = sorted(d.glob("*.h5"))
    assert len(files) == 1
    patch(monkeypatch)
    assert tf.main([str(files[0]), "--device", "cpu", "--threads", "1",
                    "--dtype", "float32"]) == 0
    rc, out = check(files)
    assert rc == 1 and "1 outputs under test: 0 passed, 1 failed" in out, out
    assert named in out, out


@pytest.mark.parametrize("compiled", [False, True])
@needs_bin
def test_a_dropped_block_fails_and_is_named(tmp_path, m8_dir, monkeypatch, capsys, compiled):
    """Eager flex_attention on the CPU computes every pair whatever the block lists say, so its
    output is right and check fails the BlockMask itself (the producer's block mask drops an
    allowed tile); compiled, the kernel follows the lists, the output is wrong, and the
    diagnosis names the block mask as given, with the tile it drops."""
    torch = pytest.importorskip("torch")
    d = copy_of(m8_dir, tmp_path, "*gemma3_image")
    files = sorted(d.glob("*.h5"))
    drop_one_block(monkeypatch)
    args = ["--compile"] if compiled else []
    if compiled:
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    rc = tf.main([str(files[0]), "--device", "cpu", "--threads", "1", "--dtype", "float32",
                  *args])
    err = capsys.readouterr().err
    if compiled and rc == 1 and "CppCompileError" in err:
        pytest.skip(f"torch {torch.__version__} cannot compile flex_attention for this CPU")
    assert rc == 0, err
    check_rc, out = check(files)
    assert check_rc == 1 and "1 outputs under test: 0 passed, 1 failed" in out, out
    assert "NOT SOUND: drops keys: 1 tiles with allowed keys are listed nowhere" in out, out
    if compiled:  # the output fails (H1) and the diagnosis names the lists
        assert "explained by the block mask as given" in out, out
        assert "it drops 1 tiles and leaks 0): all 256 failing rows" in out, out
    else:  # the output is right: the row fails as the producer's block mask
        assert "block-mask: the producer's block mask is NOT SOUND" in out, out
