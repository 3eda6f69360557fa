"""Tests of flexcheck.torch_flex, the runner that judges PyTorch's flex_attention.

Without torch: label sanitizing, the producer string, file discovery, the --dtype filter,
argument errors, that importing the module does not import torch, and the mask_mod on a numpy
stand-in for torch (the truth tables below; cases with no query or no key). With torch
(pytest.importorskip): the mask_mod against truth tables written by hand from
docs/semantics.md section 2 (not computed by any code under test), and the runner end to end
on small cases written with write_case: what it stores, the --dtype filter, refusing to
overwrite a label, the return_lse path against the return_aux one; the score terms (the
soft-cap score_mod, the sink post-process by hand, empty rows with sinks); compiled, that
cases differing only in W, C or the cap reuse Inductor's graph; the explicit terms (the mask's
lookup against hand-written tables, per head and batch entry and padded; the bias after the
cap). With FLEXCHECK_BIN as well, `flexcheck fill` and `flexcheck check` judge what it stored,
explicit-term cases included (eager and compiled), and fail a planted defect (the mask read
one key off; the terms dropped).

Run: PYTHONPATH=python python3 -m pytest python/tests/test_torch_flex.py
"""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from flexcheck import read_case, write_case
from flexcheck.fixtures import LABEL_RE
from flexcheck import torch_flex as tf
from _flexcli import BIN, needs_bin

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---- without torch ----

@pytest.mark.parametrize("text, label", [
    ("torch-2.15.0+cu132-cpu", "torch-2.15.0-cu132-cpu"),
    ("torch-2.7.1-cuda-compiled", "torch-2.7.1-cuda-compiled"),
    ("torch 2.8.0a0+git1234/rocm", "torch-2.8.0a0-git1234-rocm"),
    ("++torch++", "torch"),
    ("a" * 70, "a" * 64),
    ("x" * 63 + "+y", "x" * 63),  # cut at 64 would end in '-': dropped
])
def test_sanitize_label(text, label):
    assert tf.sanitize_label(text) == label
    assert LABEL_RE.fullmatch(label)


@pytest.mark.parametrize("text", ["", "+++", "é"])
def test_sanitize_label_refuses_what_has_no_valid_character(text):
    with pytest.raises(ValueError, match="nothing left"):
        tf.sanitize_label(text)


def test_default_label_and_producer():
    assert tf.default_label("2.15.0+cu132", "cpu", False) == "torch-2.15.0-cu132-cpu"
    assert tf.default_label("2.7.1", "cuda", True) == "torch-2.7.1-cuda-compiled"
    p = tf.producer_string("2.7.1+cu126", "cuda", "NVIDIA H200", True, "3.11.2")
    assert p == ("torch 2.7.1+cu126 flex_attention, cuda (NVIDIA H200), compiled "
                 "(torch.compile), Python 3.11.2")
    p = tf.producer_string("2.15.0", "cpu", None, False)
    assert p.startswith("torch 2.15.0 flex_attention, cpu, eager, Python 3.")


def touch(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb"):
        pass
    return path


def test_discover(tmp_path):
    d = str(tmp_path)
    b = touch(os.path.join(d, "cases", "b.h5"))
    a = touch(os.path.join(d, "cases", "a.hdf5"))
    sub = touch(os.path.join(d, "cases", "m1", "c.h5"))
    touch(os.path.join(d, "cases", "notes.txt"))
    touch(os.path.join(d, "cases", ".b.h5.x1y2.tmp"))       # the package's temporary file
    touch(os.path.join(d, "cases", ".hidden", "d.h5"))
    touch(os.path.join(d, "cases", ".e.h5"))
    odd = touch(os.path.join(d, "dump.bin"))                # named files are taken as they are
    assert tf.discover([os.path.join(d, "cases")]) == [a, b, sub]
    # each file once, in the order first met
    assert tf.discover([odd, b, os.path.join(d, "cases")]) == [odd, b, a, sub]
    assert tf.discover([os.path.join(d, "cases", "m1")]) == [sub]
    os.makedirs(os.path.join(d, "empty"))
    assert tf.discover([os.path.join(d, "empty")]) == []
    with pytest.raises(ValueError, match="no such file or directory"):
        tf.discover([os.path.join(d, "missing.h5")])


def test_parse_dtypes():
    assert tf.parse_dtypes(None) is None
    assert tf.parse_dtypes([]) is None
    assert tf.parse_dtypes(["float16"]) == ("float16",)
    assert tf.parse_dtypes(["float32,bfloat16", "float32"]) == ("float32", "bfloat16")
    with pytest.raises(ValueError, match="--dtype 'fp16'"):
        tf.parse_dtypes(["fp16"])


def test_bad_arguments_exit_2_before_torch_is_needed(tmp_path, capsys):
    assert tf.main([str(tmp_path / "missing.h5"), "--device", "cpu"]) == 2
    assert "missing.h5: no such file or directory" in capsys.readouterr().err
    assert tf.main([str(tmp_path), "--device", "cpu"]) == 2
    assert "no fixture file" in capsys.readouterr().err
    touch(str(tmp_path / "x.h5"))
    assert tf.main([str(tmp_path), "--device", "cpu", "--dtype", "half"]) == 2
    assert "--dtype 'half'" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: --device is required
        tf.main([str(tmp_path)])


def test_importing_the_runner_does_not_import_torch():
    code = "import sys, flexcheck.torch_flex; sys.exit(1 if 'torch' in sys.modules else 0)"
    env = {**os.environ, "PYTHONPATH": os.path.join(REPO, "python"),
           "PYTHONDONTWRITEBYTECODE": "1"}
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0


# ---- the mask_mod against docs/semantics.md (torch) ----

def table(rows):
    return np.array([[c == "1" for c in r] for r in rows.split()], bool)


# (name, parameters, grid evaluated (rows, cols), truth table by hand from docs/semantics.md)
TRUTH = [
    # bottom-right: nq = 3, nk = 5, so p_q = i + 2
    ("causal_lq_lt_lk", dict(causal=True, window=0, chunk=0, lq=3, lk=5), (3, 5),
     "11100 11110 11111"),
    # nq = 4, nk = 2: p_q = i - 2; the first two queries see nothing
    ("causal_lq_gt_lk", dict(causal=True, window=0, chunk=0, lq=4, lk=2), (4, 2),
     "00 00 10 11"),
    # causal window W covers W keys: the query's own position and W - 1 before it
    ("causal_window_2", dict(causal=True, window=2, chunk=0, lq=5, lk=5), (5, 5),
     "10000 11000 01100 00110 00011"),
    # a bidirectional window covers 2W - 1
    ("bidir_window_2", dict(causal=False, window=2, chunk=0, lq=4, lk=4), (4, 4),
     "1100 1110 0111 0011"),
    # chunks {0, 1}, {2, 3}, {4}, causal within
    ("causal_chunk_2", dict(causal=True, window=0, chunk=2, lq=5, lk=5), (5, 5),
     "10000 11000 00100 00110 00001"),
    # p_q = -2, -1, 0, 1: floor(-1 / 3) = -1 shares no chunk with key 0 (truncation would)
    ("bidir_chunk_negative_positions", dict(causal=False, window=0, chunk=3, lq=4, lk=2),
     (4, 2), "00 00 11 11"),
    # causal, W = 2, C = 3: the window and the chunk both hold
    ("causal_window_chunk", dict(causal=True, window=2, chunk=3, lq=6, lk=6), (6, 6),
     "100000 110000 011000 000100 000110 000011"),
    # packed: s0 has 2 queries, 3 keys (p_q = 1, 2); s1 no queries, 1 key; s2 3 queries,
    # 2 keys (p_q = -1, 0, 1)
    ("packed_causal", dict(causal=True, window=0, chunk=0, lq=5, lk=6, cu_q=[0, 2, 2, 5],
                           cu_k=[0, 3, 4, 6]), (5, 6),
     "110000 111000 000000 000010 000011"),
    # packed bidirectional window 2: no pair across sequences; s1 has queries and no key
    ("packed_bidir_window_empty_k", dict(causal=False, window=2, chunk=0, lq=5, lk=4,
                                         cu_q=[0, 2, 3, 5], cu_k=[0, 2, 2, 4]), (5, 4),
     "1100 1100 0000 0011 0011"),
    # PyTorch pads to whole blocks: tokens past Lq / Lk are never allowed
    ("padding_dense", dict(causal=False, window=0, chunk=0, lq=3, lk=2), (4, 4),
     "1100 1100 1100 0000"),
    ("padding_packed_causal", dict(causal=True, window=0, chunk=0, lq=5, lk=6,
                                   cu_q=[0, 2, 2, 5], cu_k=[0, 3, 4, 6]), (7, 8),
     "11000000 11100000 00000000 00001000 00001100 00000000 00000000"),
]


class _Tensor(np.ndarray):
    """A numpy array with the two tensor methods the mask_mod calls."""

    def clamp(self, lo=None, hi=None):
        return np.clip(self, lo, hi)

    def abs(self):
        return np.abs(self)


class NumpyTorch:
    """The torch functions make_mask_mod and doc_ids use, on numpy: enough to run the mask_mod
    without torch. Out-of-range indexing raises IndexError on both."""
    int64 = np.int64

    @staticmethod
    def as_tensor(x, dtype=None, device=None):
        return np.asarray(x, dtype).view(_Tensor)

    @staticmethod
    def arange(n, device=None):
        return np.arange(n).view(_Tensor)

    @staticmethod
    def searchsorted(a, v, right=False):
        return np.searchsorted(a, v, side="right" if right else "left").view(_Tensor)

    @staticmethod
    def div(a, b, rounding_mode=None):
        assert rounding_mode == "floor"
        return np.floor_divide(a, b)


def eval_mask_mod(torch, params, grid):
    mm = tf.make_mask_mod(torch, **params)
    q = torch.as_tensor(np.arange(grid[0]).reshape(-1, 1))
    k = torch.as_tensor(np.arange(grid[1]).reshape(1, -1))
    zero = torch.as_tensor(0)
    return np.broadcast_to(np.asarray(mm(zero, zero, q, k)), grid)


@pytest.mark.parametrize("name, params, grid, rows", TRUTH, ids=[t[0] for t in TRUTH])
def test_mask_mod_truth_tables_on_numpy(name, params, grid, rows):
    """The stand-in is faithful enough: the truth tables hold through it."""
    got = eval_mask_mod(NumpyTorch, params, grid)
    assert (got == table(rows)).all(), f"\n{got.astype(int)}"


# No query (Lq = 0: `gen --lq 0`, `--packed 0,0,0`) or no key: PyTorch still evaluates the
# mask_mod on its padded grid, and every pair must come back not allowed, no index past R.
EMPTY = [
    ("lq0_dense", dict(causal=True, window=0, chunk=0, lq=0, lk=5)),
    ("lq0_packed", dict(causal=False, window=3, chunk=2, lq=0, lk=5, cu_q=[0, 0, 0],
                        cu_k=[0, 2, 5])),
    ("lk0_dense", dict(causal=True, window=0, chunk=0, lq=3, lk=0)),
    ("lq0_lk0_packed", dict(causal=True, window=0, chunk=0, lq=0, lk=0, cu_q=[0, 0, 0],
                            cu_k=[0, 0, 0])),
]


@pytest.mark.parametrize("name, params", EMPTY, ids=[e[0] for e in EMPTY])
def test_mask_mod_without_queries_or_keys(name, params):
    assert not eval_mask_mod(NumpyTorch, params, (4, 8)).any()


@pytest.mark.parametrize("name, params, grid, rows", TRUTH, ids=[t[0] for t in TRUTH])
def test_mask_mod_truth_tables(name, params, grid, rows):
    torch = pytest.importorskip("torch")
    mm = tf.make_mask_mod(torch, **params)
    want = table(rows)
    assert want.shape == grid
    q = torch.arange(grid[0]).view(-1, 1)
    k = torch.arange(grid[1]).view(1, -1)
    zero = torch.tensor(0)
    got = mm(zero, zero, q, k).expand(grid).numpy()
    assert (got == want).all(), f"\n{got.astype(int)}\n!=\n{want.astype(int)}"
    # the same through PyTorch's own evaluation (vmap over scalar indices), on the real grid
    fa = pytest.importorskip("torch.nn.attention.flex_attention")
    lq, lk = params["lq"], params["lk"]
    dense = fa.create_mask(mm, 1, 1, lq, lk, device="cpu")[0, 0].numpy()
    assert (dense == want[:lq, :lk]).all()


# ---- the runner end to end (torch) ----

def rng_inputs(seed, b, hq, hkv, lq, lk, d, dv, dtype):
    rng = np.random.default_rng(seed)
    out = []
    for shape in ((b, hq, lq, d), (b, hkv, lk, d), (b, hkv, lk, dv)):
        x = rng.standard_normal(shape).astype(np.float32)
        if dtype == "float16":
            x = x.astype(np.float16)
        elif dtype == "bfloat16":  # keep the top 16 bits: exactly representable
            x = (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
        out.append(x)
    return out


@pytest.fixture
def cases_file(tmp_path):
    """Three small cases: float32 dense GQA Lq < Lk with an empty-row-free causal mask,
    float16 packed causal window with empty rows, bfloat16 chunked decode."""
    path = str(tmp_path / "cases.h5")
    q, k, v = rng_inputs(1, 2, 4, 2, 20, 37, 16, 8, "float32")
    write_case(path, "a_f32_gqa", q, k, v, causal=True, window=0, q_block_size=16,
               kv_block_size=32)
    q, k, v = rng_inputs(2, 1, 2, 2, 40, 30, 16, 16, "float16")
    write_case(path, "b_f16_packed", q, k, v, causal=True, window=5,
               cu_seqlens_q=[0, 10, 10, 40], cu_seqlens_k=[0, 12, 20, 30],
               q_block_size=16, kv_block_size=16, dtype="float16")
    q, k, v = rng_inputs(3, 1, 2, 1, 1, 50, 32, 32, "bfloat16")
    write_case(path, "c_bf16_decode", q, k, v, causal=True, chunk=16, dtype="bfloat16",
               q_block_size=16, kv_block_size=16)
    return path


def run_main(*args):
    return tf.main([*map(str, args)])


def test_runner_stores_out_lse_rerun_and_block_mask(cases_file, capsys):
    torch = pytest.importorskip("torch")
    assert run_main(cases_file, "--device", "cpu", "--threads", "1") == 0
    stdout = capsys.readouterr().out
    label = tf.default_label(torch.__version__, "cpu", False)
    assert (f"ok {cases_file}: 3 cases, 3 stored, 0 skipped (dtype), 0 refused by PyTorch, 0 "
            f"not expressible in PyTorch, 0 errors" in stdout)
    assert f"0 errors, under tested/{label}" in stdout
    for name, enc in (("a_f32_gqa", "float32"), ("b_f16_packed", "float16"),
                      ("c_bf16_decode", "bfloat16")):
        c = read_case(cases_file, name)
        t = c.tested[label]
        assert t.encoding == enc
        assert t.producer.startswith(f"torch {torch.__version__} flex_attention, cpu, eager, "
                                     f"Python ")
        b, hq, lq, _ = c.q.shape
        assert t.out.shape == (b, hq, lq, c.v.shape[3])
        assert t.lse.shape == (b, hq, lq) and t.lse.dtype == np.float32
        assert t.out_rerun is not None and t.out_rerun.tobytes() == t.out.tobytes()
        bm = t.block_mask
        assert (bm["q_block_size"], bm["kv_block_size"]) == (c.q_block_size, c.kv_block_size)
        assert bm["kv_num_blocks"].shape[-1] == -(-lq // c.q_block_size)
    # The packed case's query tokens 0..9 are the sequence's last 10 of 12 keys under a window
    # of 5; its second sequence has 0 queries; tokens 10..39 have 10 keys (p_q = i - 20), so
    # the first 20 of them see no key at all: PyTorch's answer there is stored as returned.
    t = read_case(cases_file, "b_f16_packed").tested[label]
    assert np.isneginf(t.lse[0, :, 10:30]).all()
    assert np.isfinite(t.lse[0, :, 30:]).all() and np.isfinite(t.lse[0, :, :10]).all()


def test_runner_dtype_filter_label_and_overwrite(cases_file, capsys):
    pytest.importorskip("torch")
    assert run_main(cases_file, "--device", "cpu", "--dtype", "float16,bfloat16",
                    "--label", "my torch+run") == 0
    assert ("3 cases, 2 stored, 1 skipped (dtype), 0 refused by PyTorch, 0 not expressible in "
            "PyTorch, 0 errors" in capsys.readouterr().out)
    assert list(read_case(cases_file, "a_f32_gqa").tested) == []
    assert list(read_case(cases_file, "b_f16_packed").tested) == ["my-torch-run"]
    before = open(cases_file, "rb").read()
    # the label exists: refused case by case (exit 1), the file untouched
    assert run_main(cases_file, "--device", "cpu", "--dtype", "float16",
                    "--label", "my-torch-run") == 1
    captured = capsys.readouterr()
    assert "case b_f16_packed: ValueError" in captured.err and "overwrite" in captured.err
    assert "ERROR " in captured.out
    assert open(cases_file, "rb").read() == before
    assert run_main(cases_file, "--device", "cpu", "--dtype", "float16",
                    "--label", "my-torch-run", "--overwrite") == 0


def test_return_lse_path_agrees_with_return_aux(cases_file):
    torch = pytest.importorskip("torch")
    r = tf.Runner("cpu", compiled=False)
    assert r.aux == tf.has_return_aux()
    c = read_case(cases_file, "b_f16_packed")
    out, lse, rerun, _ = r.run(c)
    if not r.aux:
        pytest.skip(f"torch {torch.__version__} has no return_aux: return_lse is the path")
    r.aux = False  # the path PyTorch before 2.9 takes (deprecated since, still working)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        out2, lse2, _, _ = r.run(c)
    assert torch.equal(out, out2) and torch.equal(lse, lse2)


def test_compiled_on_cpu_stores_the_output_without_the_lse(cases_file, capsys):
    """Inductor's CPU flex_attention returns no LSE (2.15: "return_lse is not supported yet"):
    the output is stored without it, the producer says so, and check judges it without H5.
    One small case (compiling takes seconds); skipped where this PyTorch cannot compile
    flex_attention for the CPU at all (2.7.1 on Debian 12: a C++ compile error)."""
    torch = pytest.importorskip("torch")
    rc = run_main(cases_file, "--device", "cpu", "--compile", "--dtype", "bfloat16")
    captured = capsys.readouterr()
    if rc == 1 and "CppCompileError" in captured.err:
        pytest.skip(f"torch {torch.__version__} cannot compile flex_attention for this CPU")
    assert rc == 0, captured.out + captured.err
    label = tf.default_label(torch.__version__, "cpu", True)
    assert label.endswith("-cpu-compiled")
    t = read_case(cases_file, "c_bf16_decode").tested[label]
    assert "compiled (torch.compile)" in t.producer
    if t.lse is None:
        assert t.producer.endswith("no LSE (backend refused)")
        assert "this backend returns no LSE" in captured.err
    assert t.out_rerun.tobytes() == t.out.tobytes()


def test_runner_errors_are_per_case(tmp_path, cases_file, capsys):
    """A file that is not a fixture is named and the others still run (exit 1)."""
    pytest.importorskip("torch")
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"not hdf5")
    assert run_main(bad, cases_file, "--device", "cpu", "--dtype", "bfloat16") == 1
    captured = capsys.readouterr()
    assert f"ERROR {bad}: not read" in captured.out
    assert (f"ok {cases_file}: 3 cases, 1 stored, 2 skipped (dtype), 0 refused by PyTorch, 0 "
            f"not expressible in PyTorch, 0 errors" in captured.out)


def test_refusal_is_told_from_failure():
    """PyTorch's refusal of a block size (its words as an H200 run printed them, 2.11) is a
    refusal; any other exception, a PyTorch message of another kind included, is not."""
    seen = ("LoweringException: ValueError: Q and KV block size must be divisible by BLOCK_M "
            "and BLOCK_N. We got Q_BLOCK_SIZE=128 and KV_BLOCK_SIZE=64.")
    e = RuntimeError("InductorError: " + seen + "\n  target: flex_attention\n")
    assert tf.refusal(e) == "InductorError: " + seen
    assert tf.refusal(RuntimeError("CUDA error: an illegal memory access was encountered")) is None
    assert tf.refusal(ValueError("tested/x exists; refusing to overwrite (--overwrite)")) is None
    assert tf.refusal(RuntimeError("")) is None


@needs_bin
def test_flexcheck_checks_what_the_runner_stored(tmp_path, cases_file):
    """fill (our float64 oracle), the runner, check: every case confirmed, PyTorch's outputs
    judged (they pass: PyTorch's eager flex_attention is correct on these), its block masks
    checked sound."""
    torch = pytest.importorskip("torch")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    r = subprocess.run([BIN, "fill", cases_file, "--in-place"], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert run_main(cases_file, "--device", "cpu") == 0
    r = subprocess.run([BIN, "check", cases_file, "--report", str(tmp_path / "report")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    label = tf.default_label(torch.__version__, "cpu", False)
    assert r.stdout.count(f"PASS {cases_file}") == 6, r.stdout  # 3 cases + 3 outputs
    assert r.stdout.count(f"tested/{label}") == 3
    assert r.stdout.count("its block mask") == 3 and "sound" in r.stdout
    assert "3 outputs under test: 3 passed, 0 failed" in r.stdout


def test_the_negative_control_fails_naming_the_window(tmp_path, cases_file):
    """--window-offset 1 hands flex_attention W + 1: the windowed case's output fails, the
    diagnosis naming the window, the producer saying it was a negative control; the cases
    without a window are untouched and pass."""
    pytest.importorskip("torch")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    r = subprocess.run([BIN, "fill", cases_file, "--in-place"], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert run_main(cases_file, "--device", "cpu", "--window-offset", 1, "--label", "neg") == 0
    assert "NEGATIVE CONTROL: W + 1 handed over" in read_case(cases_file, "b_f16_packed") \
        .tested["neg"].producer
    r = subprocess.run([BIN, "check", cases_file], capture_output=True, text=True, env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "3 outputs under test: 2 passed, 1 failed" in r.stdout, r.stdout
    assert re.search(r"^FAIL \S+ b_f16_packed tested/neg float16", r.stdout, re.M), r.stdout
    assert "explained by window W+1 (5 -> 6)" in r.stdout, r.stdout


# ---- score terms (docs/semantics.md section 7) ----

def test_softcap_score_mod_is_gemma2s_form():
    torch = pytest.importorskip("torch")
    mod = tf.softcap_score_mod(torch, 50.0)
    s = torch.tensor([-1e4, -100.0, 0.0, 1.0, 100.0], dtype=torch.float64)
    want = torch.tensor([-50.0, 50.0 * np.tanh(-2.0), 0.0, 50.0 * np.tanh(0.02),
                         50.0 * np.tanh(2.0)], dtype=torch.float64)
    # torch's tanh and numpy's may differ in the last bit
    assert torch.allclose(mod(s, None, None, None, None), want, rtol=4e-16, atol=0)


def test_apply_sinks_by_hand():
    """lse' = logaddexp(lse, sink), out' = out * exp(lse - lse'): with sum e^s = 3 and
    e^sink = 1 the sink takes a quarter; a row with no allowed key (out 0, lse -inf) becomes
    out 0, lse = sink; a NaN row stays NaN (the gate judges it, nothing is patched)."""
    torch = pytest.importorskip("torch")
    out = torch.tensor([[[[4.0, -8.0], [0.0, 0.0], [float("nan"), 1.0]]]], dtype=torch.float16)
    lse = torch.tensor([[[np.log(3.0), -np.inf, 0.0]]], dtype=torch.float32)
    o2, l2 = tf.apply_sinks(torch, out, lse, np.array([0.0], np.float32))
    assert o2.dtype == torch.float16 and l2.dtype == torch.float32
    assert o2[0, 0, 0].tolist() == [3.0, -6.0]
    assert o2[0, 0, 1].tolist() == [0.0, 0.0] and l2[0, 0, 1].item() == 0.0
    assert torch.isnan(o2[0, 0, 2, 0]) and l2[0, 0, 2].item() == pytest.approx(np.log(2.0))
    assert l2[0, 0, 0].item() == pytest.approx(np.log(4.0), rel=1e-7)
    # per head: head 1's sink of 2.5 on an empty row gives lse 2.5 exactly
    o3, l3 = tf.apply_sinks(torch, torch.zeros(1, 2, 1, 3), torch.full((1, 2, 1), -np.inf),
                            [-1.0, 2.5])
    assert l3.flatten().tolist() == [-1.0, 2.5] and (o3 == 0).all()


@pytest.fixture
def terms_file(tmp_path):
    """Soft-capped and sink cases (schema 2): scores far beyond the cap (inputs of sigma 4),
    a float16 case with Lq > Lk (empty rows) and sinks, a bfloat16 window case with both."""
    path = str(tmp_path / "terms.h5")
    q, k, v = rng_inputs(4, 1, 2, 1, 24, 24, 16, 16, "float32")
    write_case(path, "cap", 4 * q, 4 * k, v, causal=True, softcap=2.0, q_block_size=16,
               kv_block_size=16)
    q, k, v = rng_inputs(5, 1, 2, 2, 20, 12, 16, 16, "float16")
    write_case(path, "sinks", q, k, v, causal=True, dtype="float16", q_block_size=16,
               kv_block_size=16, sinks=np.array([-2.0, 6.5], np.float32))
    q, k, v = rng_inputs(6, 1, 4, 2, 30, 30, 16, 16, "bfloat16")
    write_case(path, "both", q, k, v, causal=True, window=6, dtype="bfloat16",
               q_block_size=16, kv_block_size=16, softcap=1.5,
               sinks=np.array([0.0, 1.0, 2.0, 3.0], np.float32))
    return path


def test_runner_applies_the_score_terms(terms_file, capsys):
    torch = pytest.importorskip("torch")
    assert run_main(terms_file, "--device", "cpu", "--threads", "1") == 0
    assert "3 cases, 3 stored" in capsys.readouterr().out
    label = tf.default_label(torch.__version__, "cpu", False)
    cap = read_case(terms_file, "cap")
    t = cap.tested[label]
    assert t.producer.endswith(", softcap as score_mod")
    # every capped score is below 2, so the LSE is below 2 + log(allowed keys) (causal,
    # Lq = Lk: row i has i + 1 keys); uncapped, these scores reach about 16
    bound = 2.0 + np.log(np.arange(1, 25))
    assert (t.lse[0] < bound).all()
    sk = read_case(terms_file, "sinks")
    t = sk.tested[label]
    assert "sinks applied to its out/LSE afterwards" in t.producer
    # Lq 20 > Lk 12, causal bottom-right: queries 0..7 see no key: out 0, LSE = the sink
    assert (t.out[0, :, :8] == 0).all()
    np.testing.assert_array_equal(t.lse[0, :, :8], np.array([[-2.0] * 8, [6.5] * 8],
                                                            np.float32))
    # elsewhere the sink only adds to the denominator: LSE above it and above the rows' own
    assert (t.lse[0, :, 8:] > sk.sinks[:, None]).all()
    assert t.out_rerun.tobytes() == t.out.tobytes()
    both = read_case(terms_file, "both").tested[label]
    assert both.encoding == "bfloat16" and np.isfinite(both.lse).all()
    assert "softcap as score_mod" in both.producer and "sinks" in both.producer


@needs_bin
def test_flexcheck_checks_the_runner_on_score_terms(tmp_path, terms_file):
    """fill (our oracle with the terms), the runner, check: PyTorch's soft-capped output and
    the sink post-process of its output pass the gates, empty rows with sinks included. (The
    bfloat16 case's scores are small: PyTorch 2.7's eager bfloat16 path rounds the scores to
    bfloat16 before the score_mod, which fails scores near a cap of 30; docs/engines.md,
    "PyTorch's flex_attention, judged".)"""
    torch = pytest.importorskip("torch")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    r = subprocess.run([BIN, "fill", terms_file, "--in-place"], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert run_main(terms_file, "--device", "cpu") == 0
    r = subprocess.run([BIN, "check", terms_file], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    label = tf.default_label(torch.__version__, "cpu", False)
    assert r.stdout.count(f"tested/{label}") == 3
    assert "3 outputs under test: 3 passed, 0 failed" in r.stdout


# ---- compiled: one kernel for cases that differ only in W, C or the cap ----

def test_compiled_runner_reuses_the_kernel_across_w_c_and_cap(tmp_path, monkeypatch):
    """W, C and the soft-cap enter the mask_mod / score_mod as 0-d tensors, so a case that
    differs from an earlier one only in them is Inductor's graph again (a cache hit, no
    compile); with them captured as Python numbers every case compiled anew. The reused
    kernel must still use the new values: each output is compared with eager's (same dtype,
    float32 here) and the W = 8 and W = 9 outputs must differ."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    path = str(tmp_path / "reuse.h5")
    q, k, v = rng_inputs(7, 1, 2, 2, 64, 64, 16, 16, "float32")
    params = [("w8", dict(window=8)), ("w9", dict(window=9)),
              ("c8", dict(chunk=8)), ("c16", dict(chunk=16)),
              ("w8cap30", dict(window=8, softcap=30.0)), ("w9cap2", dict(window=9, softcap=2.0))]
    for name, p in params:
        write_case(path, name, 4 * q, 4 * k, v, causal=True, q_block_size=16,
                   kv_block_size=16, **p)
    compiled, eager = tf.Runner("cpu", compiled=True), tf.Runner("cpu", compiled=False)
    if compiled.compilations() is None:
        pytest.skip(f"torch {torch.__version__} keeps no Inductor cache counters")
    outs, paid = {}, {}
    for name, _ in params:
        case = read_case(path, name)
        before = compiled.compilations()
        try:
            out = compiled.run(case)[0]
        except Exception as e:  # noqa: BLE001 - told apart below
            if "CppCompileError" in type(e).__name__ + str(e):
                pytest.skip(f"torch {torch.__version__} cannot compile flex_attention here")
            raise
        after = compiled.compilations()
        paid[name] = (after[0] - before[0], after[1] - before[1])
        torch.testing.assert_close(out, eager.run(case)[0], rtol=1e-5, atol=1e-5)
        outs[name] = out
    for name in ("w9", "c16", "w9cap2"):  # the second of each kind: taken from the cache
        assert paid[name][0] == 0 and paid[name][1] >= 1, paid
    assert not torch.equal(outs["w8"], outs["w9"])
    assert not torch.equal(outs["w8cap30"], outs["w9cap2"])


# ---- explicit terms (docs/semantics.md section 8): mask and bias passed to flex_attention ----

def test_explicit_mask_lookup_broadcasts_and_pads():
    """The mask_mod with an explicit mask on PyTorch's padded grid: per head (Hm = Hq) and per
    batch entry (Bm = B) the entry's own mask, ANDed with causal; Bm = 1 / Hm = 1 the one mask
    for all; tokens past Lq = 3 / Lk = 4 refused, looked up without an index error."""
    torch = pytest.importorskip("torch")
    m = torch.zeros(2, 2, 3, 4, dtype=torch.bool)  # [B, Hq, Lq, Lk]
    m[0, 0] = torch.tensor(table("1111 0111 1010"))
    m[0, 1] = torch.tensor(table("0111 1111 0101"))
    m[1, 1] = torch.tensor(table("1000 1100 1111"))
    mm = tf.make_mask_mod(torch, causal=True, window=0, chunk=0, lq=3, lk=4, mask=m)
    q, k = torch.arange(5).view(-1, 1), torch.arange(6).view(1, -1)
    # causal, nk - nq = 1: row i allows keys <= i + 1; padded rows / cols 0
    want = {(0, 0): "110000 011000 101000 000000 000000",
            (0, 1): "010000 111000 010100 000000 000000",
            (1, 0): "000000 000000 000000 000000 000000",
            (1, 1): "100000 110000 111100 000000 000000"}
    for (b, h), rows in want.items():
        got = mm(torch.tensor(b), torch.tensor(h), q, k).numpy()
        assert (got == table(rows)).all(), (b, h, got.astype(int))
    one = tf.make_mask_mod(torch, causal=False, window=0, chunk=0, lq=3, lk=4, mask=m[:1, 1:])
    for b, h in ((0, 0), (1, 1), (1, 0)):  # Bm = Hm = 1: head 1 of entry 0 for every one
        got = one(torch.tensor(b), torch.tensor(h), q, k).numpy()
        assert (got == table("011100 111100 010100 000000 000000")).all()


def test_bias_score_mod_after_the_cap_on_the_padded_grid():
    """score_mod = cap, then + bias[b', h', q, kv]: per head (Hm = Hq) with Bm = 1 (every batch
    entry the same), on PyTorch's padded grid (5 x 6 for Lq = 3, Lk = 4) without an index
    error; the real pairs' values are cap(score) + bias, computed here from the definition."""
    torch = pytest.importorskip("torch")
    bias = torch.arange(24, dtype=torch.float32).view(1, 2, 3, 4) - 10.0
    cap = tf.softcap_score_mod(torch, 2.0)
    mod = tf.bias_score_mod(torch, bias, 3, 4, inner=cap)
    q, k = torch.arange(5).view(-1, 1), torch.arange(6).view(1, -1)
    score = torch.full((5, 6), 3.0)
    for b, h in ((0, 0), (1, 1)):
        got = mod(score, torch.tensor(b), torch.tensor(h), q, k)
        assert got.shape == (5, 6)
        want = 2.0 * torch.tanh(torch.tensor(1.5)) + bias[0, h]
        assert torch.equal(got[:3, :4], want)
    plain = tf.bias_score_mod(torch, bias, 3, 4)
    assert torch.equal(plain(score, torch.tensor(0), torch.tensor(1), q, k)[:3, :4],
                       3.0 + bias[0, 1])


def alibi(hq, lq, lk):
    """ALiBi's bias [1, Hq, Lq, Lk]: -slope_h * (p_q - p_k), slope_h = 2^(-8 (h + 1) / Hq),
    bottom-right positions (p_q = i + Lk - Lq); float32 (powers of two times integers)."""
    slope = 2.0 ** (-8.0 * np.arange(1, hq + 1) / hq)
    d = (np.arange(lq)[:, None] + (lk - lq)) - np.arange(lk)[None, :]
    return (-slope[:, None, None] * d).astype(np.float32)[None]


@pytest.fixture
def xterms_file(tmp_path):
    """Four cases with explicit terms, their lengths not multiples of the block sizes (the
    padded grid's lookups are clamped): a prefix-LM mask (bidirectional over a prefix, causal
    after it; float32 GQA), ALiBi with a soft-cap (float16, Lq < Lk, scores beyond the cap),
    a per-head mask over [B, Hq] whose heads use different key blocks, with an empty row
    (bfloat16), and a packed causal case with a random mask (float16, empty rows)."""
    path = str(tmp_path / "xterms.h5")
    rng = np.random.default_rng(11)
    q, k, v = rng_inputs(21, 1, 4, 2, 40, 40, 16, 16, "float32")
    prefix = 13
    i, j = np.arange(40)[:, None], np.arange(40)[None, :]
    write_case(path, "prefix_lm", q, k, v, causal=False, q_block_size=16, kv_block_size=16,
               mask=((j < prefix) | (j <= i))[None, None])
    q, k, v = rng_inputs(22, 2, 4, 2, 20, 37, 16, 16, "float16")
    write_case(path, "alibi_cap", 4 * q, 4 * k, v, causal=True, softcap=3.0,
               dtype="float16", q_block_size=16, kv_block_size=16, bias=alibi(4, 20, 37))
    q, k, v = rng_inputs(23, 2, 4, 2, 30, 45, 16, 16, "bfloat16")
    m = rng.random((2, 4, 30, 45)) < 0.7
    heads = np.arange(4)[:, None, None]
    kv = np.arange(45)[None, :]
    m &= np.where(heads % 2 == 0, kv < 20, kv >= 20)[None]  # even heads: keys < 20, odd: >= 20
    m[1, 3, 5] = False  # a row with no allowed key
    write_case(path, "per_head", q, k, v, causal=False, dtype="bfloat16", q_block_size=16,
               kv_block_size=16, mask=m)
    q, k, v = rng_inputs(24, 1, 2, 2, 40, 30, 16, 16, "float16")
    write_case(path, "packed_mask", q, k, v, causal=True, dtype="float16",
               cu_seqlens_q=[0, 10, 10, 40], cu_seqlens_k=[0, 12, 20, 30], q_block_size=16,
               kv_block_size=16, mask=rng.random((1, 1, 40, 30)) < 0.6)
    return path


XCASES = ("alibi_cap", "packed_mask", "per_head", "prefix_lm")


def run_and_check(tmp_path, path, *runner_args):
    """fill (flexcheck's oracle), the runner, check: (check's exit status, its stdout)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    r = subprocess.run([BIN, "fill", path, "--in-place"], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    rc = run_main(path, "--device", "cpu", *runner_args)
    r = subprocess.run([BIN, "check", path, "--report", str(tmp_path / "report")],
                       capture_output=True, text=True, env=env)
    return rc, r.returncode, r.stdout + r.stderr


def test_runner_passes_the_explicit_terms(xterms_file, capsys):
    torch = pytest.importorskip("torch")
    assert run_main(xterms_file, "--device", "cpu", "--threads", "1") == 0
    assert "4 cases, 4 stored" in capsys.readouterr().out
    label = tf.default_label(torch.__version__, "cpu", False)
    t = {n: read_case(xterms_file, n).tested[label] for n in XCASES}
    assert t["prefix_lm"].producer.endswith(", explicit mask ANDed into mask_mod")
    assert t["alibi_cap"].producer.endswith(
        ", softcap as score_mod, explicit bias added by score_mod after the softcap")
    # the per-head mask's block mask is per batch entry and head, as the mask is
    assert t["per_head"].block_mask["kv_num_blocks"].shape[:2] == (2, 4)
    assert np.isneginf(t["per_head"].lse[1, 3, 5]) and (t["per_head"].out[1, 3, 5] == 0).all()


@needs_bin
def test_flexcheck_checks_the_runner_on_explicit_terms(tmp_path, xterms_file):
    """PyTorch given the terms passes on every case, its block masks sound."""
    torch = pytest.importorskip("torch")
    rc, check_rc, out = run_and_check(tmp_path, xterms_file)
    assert rc == 0 and check_rc == 0, out
    label = tf.default_label(torch.__version__, "cpu", False)
    assert out.count(f"tested/{label}") == 4
    assert "4 outputs under test: 4 passed, 0 failed" in out


@needs_bin
def test_flexcheck_checks_the_compiled_runner_on_explicit_terms(tmp_path, xterms_file):
    torch = pytest.importorskip("torch")
    rc, check_rc, out = run_and_check(tmp_path, xterms_file, "--compile")
    if rc == 1 and "CppCompileError" in out:
        pytest.skip(f"torch {torch.__version__} cannot compile flex_attention for this CPU")
    assert rc == 0 and check_rc == 0, out
    assert "4 outputs under test: 4 passed, 0 failed" in out


def shifted_lookup(t, b, h, q, kv):
    """The planted defect: the explicit mask read one key to the right (the bias as it is)."""
    if t.dtype.is_floating_point:
        return XTERM_LOOKUP(t, b, h, q, kv)
    return XTERM_LOOKUP(t, b, h, q, (kv + 1).clamp(max=t.shape[3] - 1))


XTERM_LOOKUP = tf.xterm_lookup


@pytest.mark.parametrize("defect", ["mask_shifted", "terms_ignored"])
@needs_bin
def test_flexcheck_fails_the_runner_with_a_planted_defect(tmp_path, xterms_file, monkeypatch,
                                                          defect):
    """A runner reading the mask one key off fails check on the mask cases; one that drops the
    terms (what torch_flex did before it passed them) fails on all four."""
    pytest.importorskip("torch")
    if defect == "mask_shifted":
        monkeypatch.setattr(tf, "xterm_lookup", shifted_lookup)
        failing = ("packed_mask", "per_head", "prefix_lm")
    else:
        monkeypatch.setattr(tf, "case_mask_mod", lambda torch, case, device, offset=0:
                            tf.make_mask_mod(torch, causal=case.causal, window=case.window,
                                             chunk=case.chunk, lq=case.q.shape[2],
                                             lk=case.k.shape[2], cu_q=case.cu_seqlens_q,
                                             cu_k=case.cu_seqlens_k, device=device))
        monkeypatch.setattr(tf, "case_score_mod", lambda torch, case, device: (
            tf.softcap_score_mod(torch, case.softcap, device) if case.softcap else None))
        failing = XCASES
    rc, check_rc, out = run_and_check(tmp_path, xterms_file)
    assert rc == 0 and check_rc != 0, out
    assert f"4 outputs under test: {4 - len(failing)} passed, {len(failing)} failed" in out
    for name in failing:
        assert any(ln.startswith("FAIL") and name in ln for ln in out.splitlines()), (name, out)


@needs_bin
def test_flexcheck_checks_the_runner_on_a_bias_with_sinks(tmp_path):
    """Sinks with a bias: apply_sinks works from flex_attention's LSE, which holds the bias,
    and the sink has none (section 8); with a mask too, empty rows (Lq > Lk, causal) get the
    sink. check passes it."""
    torch = pytest.importorskip("torch")
    path = str(tmp_path / "sinks_bias.h5")
    q, k, v = rng_inputs(25, 1, 2, 1, 30, 22, 16, 16, "float32")
    mask = np.random.default_rng(12).random((1, 2, 30, 22)) < 0.8
    write_case(path, "sinks_bias", q, k, v, causal=True, q_block_size=16, kv_block_size=16,
               sinks=np.array([1.0, -0.5], np.float32), bias=alibi(2, 30, 22), mask=mask)
    rc, check_rc, out = run_and_check(tmp_path, path)
    assert rc == 0 and check_rc == 0, out
    t = read_case(path, "sinks_bias").tested[tf.default_label(torch.__version__, "cpu", False)]
    assert "sinks applied" in t.producer and "explicit bias" in t.producer
    assert "1 outputs under test: 1 passed, 0 failed" in out
