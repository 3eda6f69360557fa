"""Tests of flexcheck.ort_attention and flexcheck.openvino_attention (and the engine core they
share, flexcheck._engine), without ONNX Runtime or OpenVINO.

The engine is a stand-in (StandIn below): a numpy implementation of the two ops' contracts as
ONNX Runtime 1.32 documents them, written here from its operator schemas and PR #25927, not
from the runner: GroupQueryAttention's local_window_size counts the keys a query sees including
its own, past keys come first and the queries are the newest tokens, head_sink adds e^sink to
the softmax's denominator; Attention's causal mask and left/right windows are at p = offset + i
(offset = the past length, or nonpad_kv_seqlen - Lq), boolean attn_mask ANDed, a float one
added after the soft-cap, a row with no key is 0. It is put in the session's place, so what is
tested is the runner: the model arguments it builds from a case, what it calls not
expressible, what it stores under tested/, its counts and exit status; `flexcheck check`
(FLEXCHECK_BIN) judges what it stored against the float64 oracle, as in a real gate.

A runner that maps W wrongly, drops the past keys or misplaces the sink fails here (the
stand-in follows the ops' contract, not the runner); the negative control (--window-offset 1)
must fail check with "window W+1". With the real packages (pytest.importorskip: the venvs of
make ort-gate / openvino-gate, with pytest in them), the same file is run by the real engine.

Run: PYTHONPATH=python FLEXCHECK_BIN=build/flexcheck python3 -m pytest \
         python/tests/test_onnx_runners.py
"""
import io
import os
import shutil
import types

import numpy as np
import pytest

from flexcheck import _engine, ort_attention as oa, openvino_attention as ova
from flexcheck.fixtures import list_cases, read_case, write_case
from _flexcli import run

GQA_SCHEMA = oa.Schema(ova.GQA_INPUTS, ova.GQA_ATTRIBUTES, 1)
ATT_SCHEMA = oa.Schema(("Q", "K", "V", "attn_mask", "past_key", "past_value",
                        "nonpad_kv_seqlen"),
                       ("is_causal", "scale", "softcap", "left_window_size",
                        "right_window_size"), 25)


# ---- the stand-in engine: the ops' documented contracts in numpy (float64, then the type) ----

def _softmax_rows(s, allowed, sink=None):
    """Row softmax of s over allowed keys (False: left out), with an optional sink logit in
    the denominator; rows with no key and no sink are 0."""
    s = np.where(allowed, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    if sink is not None:
        m = np.maximum(m, sink)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(allowed, np.exp(s - m), 0.0)
    den = e.sum(axis=-1, keepdims=True)
    if sink is not None:
        den = den + np.exp(sink - m)
    return np.divide(e, den, out=np.zeros_like(e), where=den > 0)


def gqa_contract(plan):
    f = plan.feeds()
    a = plan.attrs
    hq, hkv = a["num_heads"], a["kv_num_heads"]
    q = f["query"].astype(np.float64)
    b, s, _ = q.shape
    d = q.shape[2] // hq
    q = q.reshape(b, s, hq, d).transpose(0, 2, 1, 3)
    kn = f["key"].astype(np.float64).reshape(b, s, hkv, d).transpose(0, 2, 1, 3)
    vn = f["value"].astype(np.float64).reshape(b, s, hkv, d).transpose(0, 2, 1, 3)
    past = f["past_key"].shape[2] if "past_key" in f else 0
    k = np.concatenate([f["past_key"].astype(np.float64), kn], 2) if past else kn
    v = np.concatenate([f["past_value"].astype(np.float64), vn], 2) if past else vn
    total = int(f["total_sequence_length"])
    assert total == past + s and np.all(f["seqlens_k"] == total - 1)
    k, v = np.repeat(k, hq // hkv, 1), np.repeat(v, hq // hkv, 1)
    sc = a["scale"] * q @ k.transpose(0, 1, 3, 2)
    if a.get("softcap"):
        sc = a["softcap"] * np.tanh(sc / a["softcap"])
    if "attention_bias" in f:
        sc = sc + f["attention_bias"].astype(np.float64)
    pq = past + np.arange(s)[:, None]
    pk = np.arange(total)[None, :]
    causal = a.get("causal", 1)
    allowed = (pk <= pq) if causal else np.ones((s, total), bool)
    lws = a.get("local_window_size", -1)
    if lws >= 0:  # PR #25927: the window counts the current key
        allowed &= (pq - pk) < lws
    sink = f["head_sink"].astype(np.float64)[None, :, None, None] if "head_sink" in f else None
    p = _softmax_rows(sc, np.broadcast_to(allowed, sc.shape), sink)
    o = p @ v
    return o.transpose(0, 2, 1, 3).reshape(b, s, hq * d).astype(f["query"].dtype)


def attention_contract(plan):
    f = plan.feeds()
    a = plan.attrs
    q = f["Q"].astype(np.float64)
    b, hq, s, d = q.shape
    past = f["past_key"].shape[2] if "past_key" in f else 0
    k = f["K"].astype(np.float64)
    v = f["V"].astype(np.float64)
    if past:
        k = np.concatenate([f["past_key"].astype(np.float64), k], 2)
        v = np.concatenate([f["past_value"].astype(np.float64), v], 2)
    hkv, total = k.shape[1], k.shape[2]
    k, v = np.repeat(k, hq // hkv, 1), np.repeat(v, hq // hkv, 1)
    sc = a["scale"] * q @ k.transpose(0, 1, 3, 2)
    if a.get("softcap"):
        sc = a["softcap"] * np.tanh(sc / a["softcap"])
    offset = past
    if "nonpad_kv_seqlen" in f:
        offset = int(f["nonpad_kv_seqlen"][0]) - s
    p = offset + np.arange(s)[:, None]
    j = np.arange(total)[None, :]
    allowed = np.ones((s, total), bool)
    if a.get("is_causal"):
        allowed &= j <= p
    if a.get("left_window_size", -1) >= 0:
        allowed &= j >= p - a["left_window_size"]
    if a.get("right_window_size", -1) >= 0:
        allowed &= j <= p + a["right_window_size"]
    allowed = np.broadcast_to(allowed, sc.shape)
    m = f.get("attn_mask")
    if m is not None and m.dtype == bool:
        allowed = allowed & m
    elif m is not None:
        sc = sc + m.astype(np.float64)
    return (_softmax_rows(sc, allowed) @ v).astype(f["Q"].dtype)


class StandIn:
    """An engine with the runners' interface whose sessions are the contracts above; bfloat16
    refused in its own (made-up) words, as ONNX Runtime's CPU EP has no bfloat16 kernel."""

    def __init__(self, engine="ONNX Runtime", short="ort", schemas=None, broken=None):
        self.engine, self.short, self.version = engine, short, "0.0-standin"
        self.schemas = schemas or {"gqa": GQA_SCHEMA, "attention": ATT_SCHEMA}
        self.broken = broken  # plan -> exception to raise, for the error path
        self.plans = []

    def describe(self, op):
        return f"stand-in {op} contract (numpy), tests"

    def run(self, plan):
        self.plans.append(plan)
        if self.broken:
            raise self.broken
        if plan.elem == "bfloat16":
            raise _engine.Refused("stand-in: no bfloat16 kernel")
        y = (gqa_contract if plan.op == "gqa" else attention_contract)(plan)
        return y, y.copy()


# ---- fixture cases ----

def _qkv(rng, b, hq, hkv, lq, lk, d, dv, dtype):
    t = np.float16 if dtype == "float16" else np.float32

    def r(*shape):
        x = rng.standard_normal(shape).astype(t)
        if dtype == "bfloat16":  # bfloat16 values, stored as float32
            x = (x.view(np.uint32) & 0xFFFF0000).view(np.float32)
        return x
    return r(b, hq, lq, d), r(b, hkv, lk, d), r(b, hkv, lk, dv)


def make_file(path, dtypes=("float32", "float16", "bfloat16")):
    """Cases both ops can state (with the terms each has) and ones they cannot."""
    rng = np.random.default_rng(7)
    n = 0
    for dt in dtypes:
        for name, kw, shape in (
                ("dec-cw5", dict(causal=True, window=5), (1, 4, 2, 6, 13, 16, 16)),
                ("pre-cw3-cap", dict(causal=True, window=3, softcap=20.0), (2, 2, 2, 9, 9, 16, 16)),
                ("dec-c-sink", dict(causal=True, sinks=np.array([0.5, -1.0, 2.0, 0.0])),
                 (1, 4, 1, 3, 7, 16, 16)),
                ("dec-c", dict(causal=True), (1, 2, 1, 3, 7, 16, 16)),
                ("pre-bw4", dict(causal=False, window=4), (1, 2, 1, 8, 8, 16, 16)),
                ("none-dv", dict(causal=False), (1, 2, 2, 4, 6, 16, 8)),
                ("chunk", dict(causal=True, chunk=4), (1, 2, 2, 8, 8, 16, 16)),
                ("more-q", dict(causal=True), (1, 2, 2, 6, 4, 16, 16))):
            q, k, v = _qkv(rng, *shape, dt)
            write_case(path, f"{name}-{dt}", q, k, v, dtype=dt, **kw)
            n += 1
    return n


@pytest.fixture
def fx(tmp_path):
    p = str(tmp_path / "onnx.h5")
    make_file(p)
    return p


# ---- plans (no engine) ----

def _case(path, name):
    return read_case(path, name)


def test_gqa_plan_window_past_and_inputs(fx):
    c = _case(fx, "dec-cw5-float32")
    p = oa.gqa_plan(c, GQA_SCHEMA)
    assert p.attrs["local_window_size"] == 5  # W keys with the current one (PR #25927)
    f = p.feeds()
    assert f["past_key"].shape == (1, 2, 13 - 6, 16) and f["key"].shape == (1, 6, 2 * 16)
    assert int(f["total_sequence_length"]) == 13 and list(f["seqlens_k"]) == [12]
    assert np.array_equal(f["past_key"], c.k[:, :, :7])
    # the newest key of head 1 is the last 16 values of key's last token
    assert np.array_equal(f["key"][0, -1, 16:], c.k[0, 1, -1])
    names = [n for n, _ in p.inputs]
    assert names == list(ova.GQA_INPUTS[:7])  # nothing past total_sequence_length
    assert oa.gqa_plan(c, GQA_SCHEMA, window_offset=1).attrs["local_window_size"] == 6


def test_gqa_plan_sinks_are_positional(fx):
    p = oa.gqa_plan(_case(fx, "dec-c-sink-float16"), GQA_SCHEMA)
    names = [n for n, _ in p.inputs]
    assert names[-1] == "head_sink" and names.index("head_sink") == 11
    assert dict(p.inputs)["cos_cache"] is None  # left out, an empty name in the node
    assert dict(p.inputs)["head_sink"].dtype == np.float16


def test_what_gqa_cannot_state(fx):
    for name, words in (("pre-bw4-float32", "bidirectional window"),
                        ("chunk-float32", "chunked"), ("none-dv-float32", "Dv = 8"),
                        ("more-q-float32", "Lq = 6 > Lk = 4")):
        with pytest.raises(_engine.NotExpressible, match=words):
            oa.gqa_plan(_case(fx, name), GQA_SCHEMA)
    old = oa.Schema(GQA_SCHEMA.inputs[:7], ("num_heads", "kv_num_heads", "scale"))
    with pytest.raises(_engine.NotExpressible, match="causal only"):
        oa.gqa_plan(_case(fx, "none-dv-float32"), old)
    with pytest.raises(_engine.NotExpressible, match="no head_sink"):
        oa.gqa_plan(_case(fx, "dec-c-sink-float32"), old)
    packed = types.SimpleNamespace(q=np.zeros((1, 2, 4, 8)), k=np.zeros((1, 2, 4, 8)),
                                   v=np.zeros((1, 2, 4, 8)), packed=True)
    with pytest.raises(_engine.NotExpressible, match="packed"):
        oa.gqa_plan(packed, GQA_SCHEMA)


def test_attention_plan(fx):
    p = oa.attention_plan(_case(fx, "dec-cw5-float32"), ATT_SCHEMA)
    assert (p.attrs["left_window_size"], p.attrs["right_window_size"], p.opset) == (4, 0, 25)
    assert p.feeds()["past_key"].shape[2] == 7
    p = oa.attention_plan(_case(fx, "pre-bw4-float32"), ATT_SCHEMA)
    assert (p.attrs["left_window_size"], p.attrs["right_window_size"]) == (3, 3)
    p = oa.attention_plan(_case(fx, "none-dv-float32"), ATT_SCHEMA)
    assert p.opset == 24 and "left_window_size" not in p.attrs  # no window: the kernel's 24
    p = oa.attention_plan(_case(fx, "more-q-float32"), ATT_SCHEMA)
    assert list(p.feeds()["nonpad_kv_seqlen"]) == [4] and "past_key" not in p.feeds()
    p = oa.attention_plan(_case(fx, "none-dv-float32"), ATT_SCHEMA)  # no position: no past
    assert p.feeds()["K"].shape[2] == 6 and "past_key" not in p.feeds()
    with pytest.raises(_engine.NotExpressible, match="no sink"):
        oa.attention_plan(_case(fx, "dec-c-sink-float32"), ATT_SCHEMA)
    with pytest.raises(_engine.NotExpressible, match="opset 23 has no window"):
        oa.attention_plan(_case(fx, "dec-cw5-float32"),
                          oa.Schema(ATT_SCHEMA.inputs[:6], ("is_causal", "scale"), 23))


def test_model_proto_if_onnx_is_here(fx):
    onnx = pytest.importorskip("onnx")
    m = oa.model_proto(oa.gqa_plan(_case(fx, "dec-c-sink-float16"), GQA_SCHEMA), onnx)
    node = m.graph.node[0]
    assert node.domain == "com.microsoft" and list(node.input)[7:11] == ["", "", "", ""]
    assert {(o.domain, o.version) for o in m.opset_import} == {("", 23), ("com.microsoft", 1)}
    assert [i.name for i in m.graph.input][-1] == "head_sink"
    dims = [d.dim_param or d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, "S", 4 * 16]  # the token axis symbolic, as exported decoders have it
    m = oa.model_proto(oa.attention_plan(_case(fx, "more-q-float16"), ATT_SCHEMA), onnx,
                       static_shapes=True)
    types_ = {i.name: i.type.tensor_type.elem_type for i in m.graph.input}
    assert types_ == {"Q": onnx.TensorProto.FLOAT16, "K": onnx.TensorProto.FLOAT16,
                      "V": onnx.TensorProto.FLOAT16, "nonpad_kv_seqlen": onnx.TensorProto.INT64}
    assert list(m.graph.node[0].input) == ["Q", "K", "V", "", "", "", "nonpad_kv_seqlen"]
    assert [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] == [1, 2, 6, 16]


# ---- the runners end to end with the stand-in, judged by flexcheck check ----

def _check(flexbin, path):
    return run(flexbin, "check", path)


@pytest.mark.parametrize("mod,short,engine", [(oa, "ort", "ONNX Runtime"),
                                              (ova, "openvino", "OpenVINO")])
def test_runner_stores_what_check_passes(flexbin, fx, capsys, mod, short, engine):
    eng = StandIn(engine, short)
    assert mod.main([fx], engine=eng) == 0
    out = capsys.readouterr()
    # per op 24 cases, 8 shapes in 3 dtypes; GQA states 4 shapes (dec-cw5, pre-cw3-cap,
    # dec-c-sink, dec-c), Attention 6 (all but dec-c-sink and chunk); bfloat16 is refused
    assert (f"1 files, 24 cases, 8 stored, 0 skipped (dtype), 4 refused by {engine}, 12 not "
            f"expressible in {engine}, 0 errors, under tested/{short}-0.0-standin-gqa-cpu"
            in out.out)
    assert (f"1 files, 24 cases, 12 stored, 0 skipped (dtype), 6 refused by {engine}, 6 not "
            f"expressible in {engine}, 0 errors, under tested/{short}-0.0-standin-attention-cpu"
            in out.out)
    assert f"case chunk-float16: not expressible in {engine}: chunked" in out.err
    assert f"case dec-cw5-bfloat16: refused by {engine}: stand-in: no bfloat16" in out.err
    c = read_case(fx, "dec-c-sink-float16")
    t = c.tested[f"{short}-0.0-standin-gqa-cpu"]
    assert "sinks as head_sink" in t.producer and t.out_rerun is not None
    assert t.out.dtype == np.float16 and t.lse is None
    rc, so, se = _check(flexbin, fx)
    assert rc == 0, so + se
    assert "20 outputs under test: 20 passed, 0 failed" in so


@pytest.mark.parametrize("mod", [oa, ova])
def test_negative_control_fails_by_name(flexbin, fx, capsys, mod):
    """The window handed over one too wide: check fails both ops' windowed outputs and the
    diagnosis names it."""
    assert mod.main([fx, "--window-offset", "1", "--dtype", "float32"], engine=StandIn()) == 0
    capsys.readouterr()
    rc, so, se = _check(flexbin, fx)
    assert rc == 1, so + se
    fails = [ln for ln in so.splitlines() if ln.startswith("FAIL")]
    # dec-cw5 (both ops), pre-cw3-cap (both), pre-bw4 (Attention): 5 outputs
    assert len(fails) == 5, so
    assert so.count("explained by window W+1") == 5, so
    assert "NEGATIVE CONTROL: W + 1" in so


def test_a_wrong_window_mapping_is_caught(flexbin, fx, capsys, monkeypatch):
    """The runner's own W -> local_window_size is what the stand-in holds it to: W - 1 (the
    pre-#25927 reading) fails check with "window W-1"."""
    real = oa.gqa_plan

    def w_minus_1(case, schema, window_offset=0):
        return real(case, schema, window_offset - 1 if case.window else 0)
    monkeypatch.setattr(oa, "gqa_plan", w_minus_1)
    assert oa.main([fx, "--op", "gqa", "--dtype", "float32"], engine=StandIn()) == 0
    capsys.readouterr()
    rc, so, se = _check(flexbin, fx)
    assert rc == 1 and so.count("explained by window W-1") == 2, so + se


def test_errors_and_refusals_to_overwrite(flexbin, fx, capsys):
    eng = StandIn(broken=RuntimeError("kaboom\nsecond line"))
    assert oa.main([fx, "--op", "attention", "--dtype", "float32"], engine=eng) == 1
    out = capsys.readouterr()
    assert "case dec-cw5-float32: RuntimeError: kaboom" in out.err
    assert "second line" not in out.err
    assert "ERROR " in out.out and ", 6 errors, under" in out.out
    assert oa.main([fx, "--op", "gqa", "--dtype", "float16"], engine=StandIn()) == 0
    capsys.readouterr()
    assert oa.main([fx, "--op", "gqa", "--dtype", "float16"], engine=StandIn()) == 1
    assert "refusing to overwrite (--overwrite)" in capsys.readouterr().err
    assert oa.main([fx, "--op", "gqa", "--dtype", "float16", "--overwrite"],
                   engine=StandIn()) == 0


def test_bad_arguments_exit_2(tmp_path, capsys):
    assert oa.main([str(tmp_path)], engine=StandIn()) == 2
    assert "no fixture file" in capsys.readouterr().err
    assert oa.main([str(tmp_path / "nope.h5")], engine=StandIn()) == 2
    assert "nope.h5: no such file or directory" in capsys.readouterr().err
    assert oa.main([str(tmp_path), "--dtype", "float64"], engine=StandIn()) == 2
    assert "--dtype 'float64'" in capsys.readouterr().err
    assert ova.main([str(tmp_path), "--label", "!!!"], engine=StandIn()) == 2
    assert "label '!!!'" in capsys.readouterr().err


def test_not_a_fixture_file_is_an_error(tmp_path, capsys):
    p = tmp_path / "junk.h5"
    p.write_bytes(b"not hdf5")
    assert oa.main([str(p), "--op", "gqa"], engine=StandIn()) == 1
    out = capsys.readouterr()
    assert f"ERROR {p}: not read" in out.out and "cannot list cases" in out.err


def test_openvino_words():
    """OpenVINO's exception text (as 2026.4's frontend raised it for a soft-capped GQA) cut to
    its own words and the source line that said them."""
    text = ("Exception from src/inference/src/cpp/core.cpp:84:\n"
            "Check 'false' failed at src/frontends/common_translators/src/"
            "unconverted_ops_report.cpp:151:\nFrontEnd API failed with OpConversionFailure:\n"
            "Model wasn't fully converted. Failed operations detailed log:\n"
            "-- com.microsoft.GroupQueryAttention with a message:\n"
            "While validating ONNX node '<Node(GroupQueryAttention): output>': Check "
            "'softcap == 0.0f' failed at src/frontends/onnx/frontend/src/op/com.microsoft/"
            "group_query_attention.cpp:127:\nFrontEnd API failed with OpConversionFailure:\n"
            "GroupQueryAttention: softcap is not supported.\n\nSummary:\n"
            "-- Conversion is failed for: com.microsoft.GroupQueryAttention\n\n")
    assert ova.ov_words(RuntimeError(text)) == (
        "GroupQueryAttention: softcap is not supported. (src/frontends/onnx/frontend/src/op/"
        "com.microsoft/group_query_attention.cpp:127)")
    assert ova.ov_words(RuntimeError("plain")) == "plain"


# ---- the real engines, where installed ----

@pytest.mark.parametrize("pkg,mod,op", [
    ("onnxruntime", oa, "gqa"), ("onnxruntime", oa, "attention"), ("openvino", ova, "gqa"),
    pytest.param("openvino", ova, "attention", marks=pytest.mark.xfail(
        strict=True, reason="OpenVINO 2026.4's ONNX frontend ignores Attention's "
                            "left/right_window_size (docs/engines.md, finding 1)"))])
def test_real_engine(flexbin, tmp_path, capsys, pkg, mod, op):
    pytest.importorskip(pkg)
    pytest.importorskip("onnx")
    p = str(tmp_path / "real.h5")
    make_file(p, dtypes=("float32",))
    assert mod.main([p, "--op", op]) == 0
    capsys.readouterr()
    rc, so, se = _check(flexbin, p)
    assert rc == 0, so + se


def test_isolate_survives_an_engine_that_crashes(flexbin, fx, capsys):
    """--isolate: the engine lives in child processes; one that dies of SIGSEGV on one case
    costs that case (an error naming the signal); the cases before it (dec-c, dec-c-sink,
    stored by the child that died) and after it (in a new child) are stored once."""
    import signal

    class Crashing(StandIn):
        def run(self, plan):
            if plan.op == "gqa" and plan.feeds()["query"].shape[1] == 6:  # dec-cw5's 6 queries
                os.kill(os.getpid(), signal.SIGSEGV)
            return super().run(plan)

    rc = oa.main([fx, "--op", "gqa", "--dtype", "float32", "--isolate"],
                 make_engine=lambda **kw: Crashing())
    out = capsys.readouterr()
    assert rc == 1
    assert ("case dec-cw5-float32: the engine crashed the process (signal 11, SIGSEGV)"
            in out.err)
    assert "24 cases, 3 stored, 16 skipped (dtype), 0 refused by ONNX Runtime, 4 not " \
           "expressible in ONNX Runtime, 1 errors" in out.out
    rc, so, se = _check(flexbin, fx)
    assert rc == 0 and "3 outputs under test: 3 passed" in so, so + se
