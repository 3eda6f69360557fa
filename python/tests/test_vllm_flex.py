"""Tests of flexcheck.vllm_flex, the runner that judges vLLM's own FlexAttention backend.

Without vLLM (make test: Debian's python3 with numpy and h5py, no torch): the batch a case
becomes (requests, sequences without queries dropped, what vLLM cannot express), the page
table (random pages, never the null block, zero padding), the slot mapping and the cache it
fills, read back through a plain numpy page-by-page gather of the block table; the cache size
bound; argument errors (exit 2 before torch is imported).

With vLLM (pytest.importorskip("vllm"): the venv `make vllm-gate` makes, with pytest in it;
FLEXCHECK_BIN for `flexcheck export` and `check`): a layout file of the quick export run
through one metadata object passes `flexcheck check`; the two negative controls fail it with
the diagnosis naming them: every impl given W + 1 ("window W+1"), and the per-layer block-mask
rebuild suppressed ("the previous layer's mask").

Run: PYTHONPATH=python python3 -m pytest python/tests/test_vllm_flex.py
     PYTHONPATH=python FLEXCHECK_BIN=build/flexcheck build/vllm-venv/bin/python -m pytest \
         python/tests/test_vllm_flex.py        # the vLLM part too
"""
import os
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

from flexcheck import vllm_flex as vf
from flexcheck.fixtures import list_cases, read_case
from _flexcli import run

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fake_case(q_shape, k_shape, *, dv=None, causal=True, window=0, chunk=0, cu_q=None,
              cu_k=None):
    """What requests_of / expressible read of a case (shapes, mask, cu_seqlens)."""
    b, hq, lq, d = q_shape
    kb, hkv, lk, _ = k_shape
    return types.SimpleNamespace(
        q=np.zeros(q_shape, np.float32), k=np.zeros(k_shape, np.float32),
        v=np.zeros((kb, hkv, lk, dv or d), np.float32), causal=causal, window=window,
        chunk=chunk, cu_seqlens_q=None if cu_q is None else np.array(cu_q, np.int32),
        cu_seqlens_k=None if cu_k is None else np.array(cu_k, np.int32),
        packed=cu_q is not None)


# ---- without vLLM ----

def test_requests_of_dense_and_packed():
    c = fake_case((2, 6, 5, 64), (2, 2, 9, 64))
    assert vf.requests_of(c) == [vf.Request(0, 0, 5, 0, 9), vf.Request(1, 0, 5, 0, 9)]
    # the quick export's ragged packed case: sequences 0 (no query, 7 keys) and 5 (empty) are
    # no requests; the others keep their offsets on the packed axes
    c = fake_case((1, 6, 400, 64), (1, 2, 749, 64), cu_q=[0, 0, 1, 90, 91, 250, 250, 251, 400],
                  cu_k=[0, 7, 8, 97, 98, 257, 257, 600, 749])
    reqs = vf.requests_of(c)
    assert [(r.q0, r.q1, r.k0, r.k1) for r in reqs] == [
        (0, 1, 7, 8), (1, 90, 8, 97), (90, 91, 97, 98), (91, 250, 98, 257),
        (250, 251, 257, 600), (251, 400, 600, 749)]
    assert sum(r.nq for r in reqs) == 400  # every query token is in one request


def test_what_vllm_cannot_express():
    with pytest.raises(vf.NotExpressible, match="nq <= nk"):
        vf.requests_of(fake_case((1, 2, 10, 64), (1, 2, 9, 64)))
    with pytest.raises(vf.NotExpressible, match="sequence 1 has 3 queries and 2 keys"):
        vf.requests_of(fake_case((1, 2, 4, 64), (1, 2, 6, 64), cu_q=[0, 1, 4], cu_k=[0, 4, 6]))
    with pytest.raises(vf.NotExpressible, match="no sequence has a query"):
        vf.requests_of(fake_case((1, 2, 0, 64), (1, 2, 6, 64), cu_q=[0, 0], cu_k=[0, 6]))
    with pytest.raises(vf.NotExpressible, match="chunked local attention"):
        vf.expressible(fake_case((1, 2, 4, 64), (1, 2, 6, 64), chunk=16))
    with pytest.raises(vf.NotExpressible, match=r"Dv = 32"):
        vf.expressible(fake_case((1, 2, 4, 64), (1, 2, 6, 64), dv=32))
    c = fake_case((1, 2, 4, 64), (1, 2, 6, 64))
    c.mask = np.ones((1, 1, 4, 6), bool)
    with pytest.raises(vf.NotExpressible, match="an explicit mask"):
        vf.expressible(c)
    c.mask, c.bias = None, np.zeros((1, 2, 4, 6), np.float32)
    with pytest.raises(vf.NotExpressible, match="an explicit bias"):
        vf.expressible(c)
    vf.expressible(fake_case((1, 2, 4, 64), (1, 2, 6, 64), window=3))  # nothing raised


def test_encoder_only_is_bidirectional_prefill():
    c = fake_case((2, 2, 6, 64), (2, 2, 6, 64), causal=False)
    assert vf.encoder_only(c, vf.requests_of(c))
    c = fake_case((1, 2, 4, 64), (1, 2, 6, 64), causal=False)  # queries after cached keys
    assert not vf.encoder_only(c, vf.requests_of(c))
    c = fake_case((1, 2, 6, 64), (1, 2, 6, 64), causal=True)
    assert not vf.encoder_only(c, vf.requests_of(c))


def test_page_table():
    rng = np.random.default_rng(3)
    nks, ps, nb, width = [33, 1, 16, 0, 70], 16, 64, 8
    bt = vf.page_table(nks, ps, nb, width, rng)
    assert bt.dtype == np.int32 and bt.shape == (5, width)
    need = [3, 1, 1, 0, 5]
    used = np.concatenate([bt[r, :n] for r, n in enumerate(need)])
    assert len(set(used.tolist())) == len(used) == 10  # no page twice
    assert used.min() >= 1 and used.max() <= nb - 1  # never the null block, never past the cache
    for r, n in enumerate(need):
        assert (bt[r, n:] == 0).all()  # padded as vLLM pads: the null block
    # drawn at random: not the pages 1, 2, 3, ... in order (the seed fixes which)
    assert used.tolist() != list(range(1, 11))
    with pytest.raises(ValueError, match="needs 9 pages, the block table has 8"):
        vf.page_table([129], ps, nb, width, rng)
    with pytest.raises(ValueError, match="need 10 pages, the cache has 9"):
        vf.page_table([80, 80], ps, 10, width, rng)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_cache_read_back_through_the_block_table(dtype):
    """The cache build_cache fills, read back page by page through the block table (gather_kv,
    no slot formula), holds every request's K and V; every other element is the garbage; the
    slot_mapping of the new tokens points at the newest nq keys of each request."""
    rng = np.random.default_rng(7)
    ps, hkv, d = 16, 2, 8
    cu_q, cu_k = [0, 1, 1, 41, 42], [0, 20, 23, 63, 100]  # decode, no query, prefill, decode
    lq, lk = cu_q[-1], cu_k[-1]
    case = fake_case((1, 4, lq, d), (1, hkv, lk, d), cu_q=cu_q, cu_k=cu_k)
    case.k = rng.standard_normal((1, hkv, lk, d)).astype(dtype)
    case.v = rng.standard_normal((1, hkv, lk, d)).astype(dtype)
    reqs = vf.requests_of(case)
    assert [r.nq for r in reqs] == [1, 40, 1]
    nb = vf.cache_pages([r.nk for r in reqs], ps, direct=True)
    bt = vf.page_table([r.nk for r in reqs], ps, nb, 8, rng)
    cache = vf.build_cache(reqs, case.k, case.v, bt, ps, nb, float("nan"))
    assert cache.shape == (nb, ps, hkv, 2 * d) and cache.dtype == dtype
    written = np.zeros((nb, ps), bool)
    for r, q in enumerate(reqs):
        k, v = vf.gather_kv(cache, bt, r, q.nk)
        want_k = case.k[0, :, q.k0:q.k1].transpose(1, 0, 2)
        want_v = case.v[0, :, q.k0:q.k1].transpose(1, 0, 2)
        assert np.array_equal(k, want_k) and np.array_equal(v, want_v)
        for i in range(q.nk):
            written[bt[r, i // ps], i % ps] = True
    assert np.isnan(cache[~written]).all()  # null block, unused pages, tails: garbage
    assert not np.isnan(cache[written]).any()
    assert not written[0].any()  # the null block is never written
    # slot_mapping: the newest nq keys of each request, in request order
    sm = vf.new_token_slots(reqs, bt, ps)
    assert sm.dtype == np.int64 and len(sm) == sum(r.nq for r in reqs)
    flat = cache.reshape(nb * ps, hkv, 2 * d)
    newest = np.concatenate([case.k[0, :, q.k1 - q.nq:q.k1].transpose(1, 0, 2) for q in reqs])
    assert np.array_equal(flat[sm, :, :d], newest)


def test_cache_pages():
    # 3 + 1 + 1 pages and the null block = 6; + max(2, 6 // 4) spare = 8, a multiple of 4
    assert vf.cache_pages([33, 1, 16], 16, direct=False) == 8
    assert vf.cache_pages([239], 16, direct=True) == 20  # 16 + 4 spare: 320 tokens
    # 11 x 3 pages + 1 = 34, + 8 spare = 42 -> 44: under the direct build's bound, 16 pages per
    # page of the longest request (3 pages: 48)
    assert vf.cache_pages([33] * 11, 16, direct=True) == 44
    # 14 x 2 pages + 1 = 29, + 7 spare = 36: past the bound of 32 (2 pages) for the direct build
    assert vf.cache_pages([17] * 14, 16, direct=True) == 32
    assert vf.cache_pages([17] * 14, 16, direct=False) == 36
    with pytest.raises(ValueError, match="more than the 16"):
        vf.cache_pages([1] * 16, 16, direct=True)


def test_default_label():
    assert vf.default_label("0.33.0", "direct", "cpu") == "vllm-0.33.0-direct-cpu"
    assert vf.default_label("0.11.0+cpu", "slow", "cuda") == "vllm-0.11.0-cpu-slow-cuda"


@pytest.mark.parametrize("args, msg", [
    (["--page-size", "24"], "--page-size 24: must be a multiple of 16"),
    (["--page-size", "128"], "--page-size 128 with the slow build"),
    (["--page-size", "128", "--build", "both"], "--page-size 128 with the slow build"),
    (["--threads", "0"], "--threads 0: must be >= 1"),
])
def test_bad_arguments_exit_2_before_torch_is_needed(tmp_path, capsys, args, msg):
    (tmp_path / "x.h5").write_bytes(b"")
    assert vf.main([str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1


def test_no_fixture_file_exits_2(tmp_path, capsys):
    assert vf.main([str(tmp_path)]) == 2
    assert "no fixture file" in capsys.readouterr().err


def test_importing_the_runner_does_not_import_torch_or_vllm():
    code = ("import sys; import flexcheck.vllm_flex; "
            "print('torch' in sys.modules, 'vllm' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "python")))
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "False"]


def test_device_cuda_without_cuda_says_so_and_exits_2(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    (tmp_path / "x.h5").write_bytes(b"")
    p = subprocess.run([sys.executable, "-m", "flexcheck.vllm_flex", str(tmp_path), "--device",
                        "cuda"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "python")))
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "vllm_flex: --device cuda: no CUDA device here (torch.cuda.is_available() is False); "
        "run --device cpu"]


# ---- with vLLM: the layout path and the negative controls ----

MISTRAL = "m6-layout-f16-d64-h2x1-b1-300x300-none-q64k64-sup-mistral"   # 3 layers, all W = 64
GEMMA3 = "m6-layout-f32-d64-h2x1-b1-300x300-none-q64k64-slow-gemma3"    # W = 64, full every 6th


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory):
    """vLLM's objects for the direct build (imported once: importing vLLM takes seconds)."""
    pytest.importorskip("vllm")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return vf.Vllm("direct", "cpu", 16, str(tmp_path_factory.mktemp("vllm-models")))


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """The two layout files of the quick export (flexcheck export, the gate's own cases)."""
    pytest.importorskip("vllm")
    from _flexcli import BIN
    if not BIN:
        pytest.skip("FLEXCHECK_BIN is not set")
    out = tmp_path_factory.mktemp("export")
    files = {}
    for cid in (MISTRAL, GEMMA3):
        d = out / cid
        rc, so, se = run(os.path.abspath(BIN), "export", "--quick", "--filter", cid, "--out",
                         str(d))
        assert rc == 0, se
        files[cid] = str(d / f"{cid}.h5")
    return files


def run_layout(vllm_run, layouts, tmp_path, cid, label, **control):
    path = str(tmp_path / f"{cid}.h5")
    shutil.copy(layouts[cid], path)
    r = vf.Run(vllm_run, label, "huge", False, 0)
    cases = [read_case(path, n) for n in list_cases(path)]
    counts = vf.Counts()
    if "windows" in control:
        control["windows"] = {c.name: c.window + 1 for c in cases if c.window}
    stored = r.layout(path, cases, counts, **control)
    assert stored == [c.name for c in cases] and counts["errors"] == 0
    rc, so, se = run(os.path.abspath(os.environ["FLEXCHECK_BIN"]), "check", path)
    return rc, so + se


def test_layout_through_one_metadata_passes(vllm_run, layouts, tmp_path):
    rc, text = run_layout(vllm_run, layouts, tmp_path, GEMMA3, "vllm-good")
    assert rc == 0, text
    assert "12 outputs under test, 12 passed, 0 failed" in text


def test_window_one_too_wide_is_caught_as_w_plus_1(vllm_run, layouts, tmp_path):
    rc, text = run_layout(vllm_run, layouts, tmp_path, MISTRAL, "vllm-wplus1", windows=True)
    assert rc == 1, text
    assert "3 outputs under test, 0 passed, 3 failed" in text
    assert "explained by window W+1 (64 -> 65)" in text


def test_suppressed_rebuild_is_caught_as_the_previous_layers_mask(vllm_run, layouts, tmp_path):
    rc, text = run_layout(vllm_run, layouts, tmp_path, GEMMA3, "vllm-stale", stale=True)
    assert rc == 1, text
    # the full layers (5, 11) run on the windowed layers' mask: they fail, the others pass
    assert "12 outputs under test, 10 passed, 2 failed" in text
    assert "explained by the previous layer's mask" in text
