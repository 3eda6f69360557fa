"""Tests of flexcheck.hf_attention without transformers (Debian's python3 has neither it nor
torch).

The engine is a stand-in (StandIn below): one attention layer as transformers 5 documents it,
in numpy, written from transformers' masking_utils and modeling files, not from the runner:
query i of a step after `past` cached keys sits at cache_position past + i, key j at j; the
causal mask is kv_idx <= q_idx, the sliding overlay kv_idx > q_idx - sliding_window
(Mistral, Gemma 2, gpt-oss), the chunked overlay kv_idx // C == q_idx // C (Llama 4), the
bidirectional sliding overlay abs(q_idx - kv_idx) <= local_attention // 2 (ModernBERT's
config); packed rows (position_ids restarting at 0) see their own sequence only, at their
position ids; Gemma 2's eager soft-cap c * tanh(s / c) before the mask; gpt-oss's sinks one
more logit per head in the softmax, dropped after it. Gemma 2 and gpt-oss refuse sdpa
(`_supports_sdpa = False`), as their model classes do. What is tested is the runner: the model
and config it picks for a case, the window it hands over (each model's documented meaning),
what it calls not expressible, what it stores, its counts and exit status; `flexcheck check`
(FLEXCHECK_BIN) judges what it stored against the float64 oracle, as in a real gate.

The negative control (--window-offset 1) must fail check with "window W+1", for the Mistral
and the ModernBERT mapping alike. With transformers installed (the venv of make hf-gate,
pytest added), test_real_transformers runs the same file through it.

Run: PYTHONPATH=python:python/tests FLEXCHECK_BIN=build/flexcheck python3 -m pytest \
         python/tests/test_hf_attention.py
"""
import numpy as np
import pytest

from flexcheck import _engine, hf_attention as hf
from flexcheck.fixtures import read_case, write_case
from _flexcli import run
from test_torch_sdpa import _qkv, _to_bf16_bits  # the same seeded inputs and bfloat16 rounding


# ---- the stand-in engine: a transformers layer's documented semantics in numpy ----

def layer_mask(plan, lq, lk):
    """bool [Lq, Lk] from the plan's model config, as transformers' builders state it."""
    cfg = plan.config
    if plan.position_ids is not None:  # packed: a new sequence where the position restarts
        pos = np.array(plan.position_ids)
        seq = np.cumsum(np.r_[1, (np.diff(pos) != 1).astype(int)])
        qi, ki = pos[:, None], pos[None, :]
        same = seq[:, None] == seq[None, :]
    else:
        qi = plan.past + np.arange(lq)[:, None]
        ki = np.arange(lk)[None, :]
        same = np.ones((lq, lk), dtype=bool)
    if plan.model == "modernbert":
        if cfg.get("layer_types") == ["sliding_attention"]:
            return same & (np.abs(qi - ki) <= cfg["local_attention"] // 2)
        return same & np.ones((lq, lk), dtype=bool)
    ok = same & (ki <= qi)
    sw = cfg.get("sliding_window")
    if sw is not None and cfg.get("layer_types", ["sliding_attention"]) == ["sliding_attention"]:
        ok &= ki > qi - sw
    if cfg.get("attention_chunk_size"):
        c = cfg["attention_chunk_size"]
        ok &= (ki // c) == (qi // c)
    return ok


def layer_out(plan):
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (plan.q, plan.k, plan.v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)  # repeat_kv
    s = plan.scale * q @ np.swapaxes(k, -1, -2)
    if plan.softcap:
        s = plan.softcap * np.tanh(s / plan.softcap)
    allowed = layer_mask(plan, q.shape[2], k.shape[2])
    s = np.where(allowed, s, -np.inf)
    if plan.sinks is not None:
        sink = np.broadcast_to(plan.sinks.astype(np.float64)[None, :, None, None],
                               s.shape[:3] + (1,))
        s = np.concatenate([s, sink], axis=-1)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    p = e / e.sum(axis=-1, keepdims=True)
    if plan.sinks is not None:
        p = p[..., :-1]
    return p @ v


class StandIn:
    engine = "transformers"
    version = "0.0-standin"

    def __init__(self, impls=("eager", "sdpa", "flex_attention")):
        self.impls = list(impls)
        self.left_out = {}
        self.plans = []

    def describe(self, impl):
        return f"stand-in transformers layer (numpy), attn_implementation={impl}, tests"

    def run(self, plan, impl):
        self.plans.append((plan, impl))
        if impl == "sdpa" and plan.model in ("gemma2", "gpt_oss"):
            raise _engine.Refused(f"stand-in {plan.model}._supports_sdpa is False")
        y = layer_out(plan)
        y = _to_bf16_bits(y) if plan.dtype == "bfloat16" else y.astype(plan.q.dtype)
        return y, y.copy()


# ---- fixture cases ----

STORED = (  # name, terms, (B, Hq, Hkv, Lq, Lk, D, Dv), the model the runner must pick
    ("dec-cw5", dict(causal=True, window=5), (1, 4, 2, 6, 13, 16, 16), "mistral"),
    ("pre-cw3", dict(causal=True, window=3), (2, 2, 2, 9, 9, 16, 16), "mistral"),
    ("dec-c", dict(causal=True), (1, 2, 1, 3, 7, 16, 16), "mistral"),
    ("bw4", dict(causal=False, window=4), (1, 2, 2, 11, 11, 16, 8), "modernbert"),
    ("bfull", dict(causal=False), (1, 2, 2, 6, 6, 16, 16), "modernbert"),
    ("chunk", dict(causal=True, chunk=4), (1, 2, 2, 5, 11, 16, 16), "llama4"),
    ("cap", dict(causal=True, window=3, softcap=20.0), (1, 2, 2, 9, 9, 16, 16), "gemma2"),
    ("sink", dict(causal=True, window=4, sinks=np.array([0.5, -1.0])), (1, 2, 1, 3, 9, 16, 16),
     "gpt_oss"),
)
INEXPRESSIBLE = (  # name, terms, shape, words of the reason
    ("more-q", dict(causal=True), (1, 2, 2, 6, 4, 16, 16), "Lq = 6 > Lk = 4"),
    ("bw-dec", dict(causal=False, window=3), (1, 2, 2, 3, 8, 16, 16), "Lq = 3 != Lk = 8"),
    ("bw-gqa", dict(causal=False, window=3), (1, 4, 2, 8, 8, 16, 16), "Hq = 4 != Hkv = 2"),
    ("cw-chunk", dict(causal=True, window=3, chunk=4), (1, 2, 2, 8, 8, 16, 16),
     "a window and a chunk"),
    ("bchunk", dict(causal=False, chunk=4), (1, 2, 2, 8, 8, 16, 16), "a bidirectional chunk"),
    ("cap-sink", dict(causal=True, softcap=20.0, sinks=np.array([0.5, -1.0])),
     (1, 2, 2, 8, 8, 16, 16), "soft-cap and sinks"),
)


def make_file(path, dtypes=("float32", "float16", "bfloat16")):
    rng = np.random.default_rng(7)
    for dt in dtypes:
        for name, kw, shape, _ in STORED + INEXPRESSIBLE:
            q, k, v = _qkv(rng, *shape, dt)
            write_case(path, f"{name}-{dt}", q, k, v, dtype=dt, **kw)
        q, k, v = _qkv(rng, 1, 2, 2, 5, 9, 16, 16, dt)
        write_case(path, f"xmask-{dt}", q, k, v, dtype=dt, causal=True, window=6,
                   mask=rng.random((1, 2, 5, 9)) < 0.7)
        # packed: two sequences of 3 and 5 tokens (their queries are their keys), one where
        # they differ
        q, k, v = _qkv(rng, 1, 2, 2, 8, 8, 16, 16, dt)
        write_case(path, f"packed-{dt}", q, k, v, dtype=dt, causal=True, window=3,
                   cu_seqlens_q=np.array([0, 3, 8]), cu_seqlens_k=np.array([0, 3, 8]))
        q, k, v = _qkv(rng, 1, 2, 2, 8, 12, 16, 16, dt)
        write_case(path, f"packed-dec-{dt}", q, k, v, dtype=dt, causal=True, window=3,
                   cu_seqlens_q=np.array([0, 3, 8]), cu_seqlens_k=np.array([0, 5, 12]))


N_STORED = len(STORED) + 1          # per dtype, with packed
N_INEXPRESSIBLE = len(INEXPRESSIBLE) + 2   # with xmask and packed-dec
N_CASES = N_STORED + N_INEXPRESSIBLE


@pytest.fixture(scope="module")
def fx_master(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("hf") / "hf.h5")
    make_file(p)
    return p


@pytest.fixture
def fx(fx_master, tmp_path):
    import shutil
    p = str(tmp_path / "hf.h5")
    shutil.copy(fx_master, p)
    return p


# ---- plans (no engine) ----

@pytest.mark.parametrize("name, kw, shape, model", STORED)
def test_each_case_goes_to_its_model(fx, name, kw, shape, model):
    p = hf.hf_plan(read_case(fx, f"{name}-float32"))
    assert p.model == model
    assert p.past == shape[4] - shape[3]


def test_window_handed_over_as_each_config_means_it(fx):
    # Mistral / Gemma 2 / gpt-oss: sliding_window = W (kv > q - W: W keys with the query's own)
    for name, w in (("dec-cw5", 5), ("pre-cw3", 3), ("cap", 3), ("sink", 4)):
        p = hf.hf_plan(read_case(fx, f"{name}-float32"))
        assert p.config["sliding_window"] == w and p.sliding_window == w
        assert p.mask == "create_sliding_window_causal_mask"
    # ModernBERT: local_attention is the whole window, abs(d) <= local_attention // 2
    p = hf.hf_plan(read_case(fx, "bw4-float32"))
    assert p.config["local_attention"] == 6 and p.mask == "create_bidirectional_sliding_window_mask"
    assert hf.hf_plan(read_case(fx, "bw4-float32"), 1).config["local_attention"] == 8
    assert hf.hf_plan(read_case(fx, "dec-c-float32")).config == {"sliding_window": None}
    assert hf.hf_plan(read_case(fx, "chunk-float32")).config["attention_chunk_size"] == 4


def test_mask_of_each_plan_is_the_contracts(fx):
    """The stand-in's transformers mask of each plan equals the contract's pairs
    (docs/semantics.md section 2), and the plan with W + 1 does not."""
    for name, kw, shape, _ in STORED:
        c = read_case(fx, f"{name}-float32")
        lq, lk = shape[3], shape[4]
        pq = np.arange(lq)[:, None] + lk - lq
        pk = np.arange(lk)[None, :]
        want = np.ones((lq, lk), dtype=bool)
        if c.causal:
            want &= pk <= pq
        if c.window:
            want &= np.abs(pq - pk) < c.window
        if c.chunk:
            want &= pq // c.chunk == pk // c.chunk
        assert np.array_equal(layer_mask(hf.hf_plan(c), lq, lk), want), name
        if c.window:
            assert not np.array_equal(layer_mask(hf.hf_plan(c, 1), lq, lk), want), name


def test_packed_positions(fx):
    p = hf.hf_plan(read_case(fx, "packed-float32"))
    assert p.position_ids == [0, 1, 2, 0, 1, 2, 3, 4] and p.past == 0


@pytest.mark.parametrize("name, kw, shape, words", INEXPRESSIBLE)
def test_what_transformers_cannot_state(fx, name, kw, shape, words):
    with pytest.raises(_engine.NotExpressible, match=words):
        hf.hf_plan(read_case(fx, f"{name}-float32"))


def test_explicit_terms_and_unequal_packing_are_not_expressible(fx):
    with pytest.raises(_engine.NotExpressible, match="explicit mask or bias"):
        hf.hf_plan(read_case(fx, "xmask-float32"))
    with pytest.raises(_engine.NotExpressible, match="cu_seqlens_q == cu_seqlens_k"):
        hf.hf_plan(read_case(fx, "packed-dec-float32"))


# ---- the runner end to end with the stand-in, judged by flexcheck check ----

def test_runner_stores_what_check_passes(flexbin, fx, capsys):
    assert hf.main([fx], engine=StandIn()) == 0
    out = capsys.readouterr()
    n, ne = 3 * N_CASES, 3 * N_INEXPRESSIBLE
    for impl, refused in (("eager", 0), ("sdpa", 6), ("flex_attention", 0)):
        assert (f"1 files, {n} cases, {n - ne - refused} stored, 0 skipped (dtype), {refused} "
                f"refused by transformers, {ne} not expressible in transformers, 0 errors, "
                f"under tested/transformers-0.0-standin-{impl}-cpu" in out.out), out.out
    assert "case cap-float32: refused by transformers: stand-in gemma2._supports_sdpa" in out.err
    t = read_case(fx, "dec-cw5-bfloat16").tested["transformers-0.0-standin-eager-cpu"]
    assert "Mistral sliding_window=5" in t.producer and "7 keys cached first" in t.producer
    assert t.encoding == "bfloat16" and t.out_rerun is not None and t.lse is None
    rc, so, se = run(flexbin, "check", fx)
    assert rc == 0, so + se
    judged = 3 * 3 * N_STORED - 6
    assert f"{judged} outputs under test: {judged} passed, 0 failed" in so, so


def test_negative_control_fails_by_name(flexbin, fx, capsys):
    assert hf.main([fx, "--window-offset", "1", "--dtype", "float32", "--impl", "eager"],
                   engine=StandIn()) == 0
    capsys.readouterr()
    rc, so, se = run(flexbin, "check", fx)
    assert rc == 1, so + se
    fails = sorted(ln.split()[2] for ln in so.splitlines() if ln.startswith("FAIL"))
    # every windowed case the runner stores: the Mistral, Gemma 2, gpt-oss and ModernBERT
    # mappings and the packed one
    assert fails == sorted(f"{n}-float32" for n in ("dec-cw5", "pre-cw3", "bw4", "cap", "sink",
                                                     "packed")), so
    assert so.count("explained by window W+1") == 6, so
    assert "NEGATIVE CONTROL: W + 1" in so


def test_a_modernbert_mapping_off_by_one_is_caught(flexbin, fx, capsys, monkeypatch):
    """local_attention = 2W (the config value read as flexcheck's W) fails check as the
    documented ModernBERT trap: the diagnosis names a window of W + 1."""
    real = hf.hf_plan

    def doubled(case, window_offset=0):
        p = real(case, window_offset)
        if p.model == "modernbert" and "local_attention" in p.config:
            p.config["local_attention"] = 2 * case.window
        return p
    monkeypatch.setattr(hf, "hf_plan", doubled)
    assert hf.main([fx, "--dtype", "float32", "--impl", "eager"], engine=StandIn()) == 0
    capsys.readouterr()
    rc, so, se = run(flexbin, "check", fx)
    assert rc == 1, so + se
    fails = [ln.split()[2] for ln in so.splitlines() if ln.startswith("FAIL")]
    assert fails == ["bw4-float32"], so
    assert "explained by window W+1 (4 -> 5)" in so, so


def test_bad_arguments_exit_2(tmp_path, capsys):
    assert hf.main([str(tmp_path / "nope.h5")], engine=StandIn()) == 2
    assert "no such file or directory" in capsys.readouterr().err
    p = str(tmp_path / "a.h5")
    make_file(p, dtypes=("float32",))
    assert hf.main([p, "--dtype", "float64"], engine=StandIn()) == 2
    assert "--dtype 'float64'" in capsys.readouterr().err
    assert hf.main([p, "--impl", "sdpa"], engine=StandIn(impls=("eager",))) == 2
    assert "no selected implementation runs here" in capsys.readouterr().err
    assert hf.main([p, "--threads", "0"], engine=StandIn()) == 2


def test_real_transformers(flexbin, tmp_path, capsys):
    pytest.importorskip("transformers")
    p = str(tmp_path / "real.h5")
    make_file(p)
    assert hf.main([p, "--impl", "eager"]) == 0
    out = capsys.readouterr()
    assert " 0 errors" in out.out
    rc, so, se = run(flexbin, "check", p)
    assert rc == 0, so + se


# ---- layout files from real models (flexcheck.hf_layout) ----

def _cfg(**kw):
    from types import SimpleNamespace
    base = dict(layer_types=None, sliding_window=None, attn_logit_softcapping=None,
                query_pre_attn_scalar=None)
    base.update(kw)
    return SimpleNamespace(**base)


def test_layout_terms_are_each_configs_meaning():
    """A layer's terms as its config documents them (no transformers needed): a causal
    sliding layer's W is sliding_window, ModernBERT's local_attention // 2 + 1, a Llama 4
    chunked layer's C attention_chunk_size; Gemma's scale query_pre_attn_scalar ** -0.5."""
    from types import SimpleNamespace
    from flexcheck import hf_layout as hl
    mod = SimpleNamespace(head_dim=16)
    g3 = _cfg(layer_types=["sliding_attention", "full_attention"], sliding_window=8,
              query_pre_attn_scalar=64)
    assert hl.layer_terms("gemma3", g3, 0, mod) == dict(causal=True, window=8, chunk=0,
                                                        scale=0.125)
    assert hl.layer_terms("gemma3", g3, 1, mod)["window"] == 0
    mb = _cfg(layer_types=["full_attention", "sliding_attention"], local_attention=8)
    assert hl.layer_terms("modernbert", mb, 1, mod) == dict(causal=False, window=5, chunk=0,
                                                            scale=0.25)
    l4 = _cfg(layer_types=["chunked_attention", "full_attention"], attention_chunk_size=8)
    assert hl.layer_terms("llama4", l4, 0, mod)["chunk"] == 8
    assert hl.layer_terms("llama4", l4, 1, mod)["chunk"] == 0
    g2 = _cfg(layer_types=["sliding_attention"], sliding_window=8, attn_logit_softcapping=50.0,
              query_pre_attn_scalar=16)
    assert hl.layer_terms("gemma2", g2, 0, mod)["softcap"] == 50.0
    mi = _cfg(sliding_window=8)  # Mistral: no layer_types, the window on every layer
    assert hl.layer_terms("mistral", mi, 0, mod)["window"] == 8


def test_real_layout_files(flexbin, tmp_path, capsys):
    """Mistral and ModernBERT through one forward each (eager): every layer passes check; the
    same with W + 1 written into the cases fails every windowed layer by name."""
    pytest.importorskip("transformers")
    from flexcheck import hf_layout as hl
    good, bad = str(tmp_path / "good"), str(tmp_path / "bad")
    assert hl.main([good, "--model", "mistral,modernbert", "--impl", "eager"]) == 0
    assert hl.main([bad, "--model", "mistral,modernbert", "--impl", "eager",
                    "--window-offset", "1"]) == 0
    capsys.readouterr()
    for m in ("mistral", "modernbert"):
        rc, so, se = run(flexbin, "check", f"{good}/{m}-eager-float32.h5")
        assert rc == 0, so + se
        rc, so, se = run(flexbin, "check", f"{bad}/{m}-eager-float32.h5")
        assert rc == 1 and "explained by window W-1" in so, so + se
