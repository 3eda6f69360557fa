"""Tests of flexcheck.bench_torch_blockmask (make bench-torch-blockmask).

Without torch: the block-set comparison against hand-written lists (equal in any order, a
dropped, an added and a moved tile named, PyTorch's unlisted ids past the counts ignored), the
mask options, the lengths, and that importing the module does not import torch. With
FLEXCHECK_BIN: the lines it reads from `flexcheck bench blockmask --json` and the lists from
`flexcheck blockmask --json`. With torch as well (pytest.importorskip): PyTorch's block mask of
each mask equals flexcheck's at L = 1024 (blocks 128) and L = 1000 (blocks 64).

Run: PYTHONPATH=python python3 -m pytest python/tests/test_bench_torch_blockmask.py
"""
import os
import subprocess
import sys

import numpy as np
import pytest

from flexcheck import bench_torch_blockmask as bb
from _flexcli import BIN, needs_bin

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Causal, 3 query tiles of 3 kv tiles: row r lists r partial (the diagonal), 0..r-1 full.
# PyTorch's layout: ids past a count are the unlisted ones, not -1.
NUM = np.array([1, 1, 1])
IDX = np.array([[0, 1, 2], [1, 0, 2], [2, 0, 1]])
FNUM = np.array([0, 1, 2])
FIDX = np.array([[0, 1, 2], [0, 1, 2], [1, 0, 2]])
ROWS = [{"partial": [0], "full": []}, {"partial": [1], "full": [0]},
        {"partial": [2], "full": [0, 1]}]


def test_compare_rows_takes_sets_and_ignores_slots_past_the_counts():
    assert bb.compare_rows(NUM, IDX, FNUM, FIDX, ROWS) is None


@pytest.mark.parametrize("rows, want", [
    ([{"partial": [0], "full": []}, {"partial": [1], "full": [0]},
      {"partial": [2], "full": [0]}],
     "query tile 2, full kv tiles: only PyTorch lists [1], only flexcheck [] (2 vs 1 listed)"),
    ([{"partial": [0], "full": []}, {"partial": [1, 2], "full": [0]},
      {"partial": [2], "full": [0, 1]}],
     "query tile 1, partial kv tiles: only PyTorch lists [], only flexcheck [2]"),
    ([{"partial": [0], "full": []}, {"partial": [0], "full": [1]},
      {"partial": [2], "full": [0, 1]}],
     "query tile 1, partial kv tiles: only PyTorch lists [1], only flexcheck [0]"),
    (ROWS[:2], "PyTorch has 3 query tiles, flexcheck 2"),
])
def test_compare_rows_names_the_first_difference(rows, want):
    assert want in bb.compare_rows(NUM, IDX, FNUM, FIDX, rows)


def test_mask_flags_and_lengths():
    assert bb.mask_flags(bb.Mask("x", True, 1024, 0, 1)) == ["--causal", "--window", "1024"]
    assert bb.mask_flags(bb.Mask("x", True, 0, 8192, 1)) == ["--causal", "--chunk", "8192"]
    assert bb.parse_lengths("16384,65536") == [16384, 65536]
    for bad in ("", "x", "0", "16k"):
        with pytest.raises(ValueError):
            bb.parse_lengths(bad)


def test_importing_the_module_does_not_import_torch():
    code = ("import sys, flexcheck.bench_torch_blockmask; "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0


@needs_bin
def test_reads_every_mask_from_flexchecks_bench_and_lists():
    lines = bb.ours_times(BIN, 1024)
    for m in bb.MASKS:
        d = bb.find_ours(lines, m)
        assert d["mask"] == m.name and d["l"] == 1024 and d["checked"] == "slow"
        assert d["direct_us"] > 0 and d["q_block_size"] == 128
        rows = bb.ours_rows(BIN, 1024, 128, m)
        assert len(rows) == 8
        assert sum(len(r["partial"]) + len(r["full"]) for r in rows) == d["listed"]


@needs_bin
def test_pytorch_lists_the_same_blocks_as_flexcheck():
    pytest.importorskip("torch")
    from torch.nn.attention.flex_attention import create_block_mask
    for m in bb.MASKS:
        for length, block in ((1024, 128), (1000, 64)):
            bm = create_block_mask(bb.mask_mod_of(m), None, None, length, length, device="cpu",
                                   BLOCK_SIZE=block)
            # the dense mask_mod has no padding test: PyTorch masks keys past L itself
            diff = bb.compare_rows(*bb.arrays(bm), bb.ours_rows(BIN, length, block, m))
            assert diff is None, f"{m.name} L={length}: {diff}"
