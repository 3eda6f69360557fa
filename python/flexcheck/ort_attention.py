"""flexcheck.ort_attention - ONNX Runtime's attention operators run as kernels under test.

    python -m flexcheck.ort_attention PATH... [--op gqa|attention|both] [--dtype T[,T]]
                                              [--label L] [--overwrite] [--window-offset N]

PATH is a fixture file (docs/fixtures.md) or a directory searched for them. For every case a
one-node ONNX model is built in memory with the `onnx` package, run by an InferenceSession on
the CPU execution provider, and its output stored with add_tested under
tested/ort-<version>-<op>-cpu (one label per op) for `flexcheck check` to judge:

  - gqa: com.microsoft.GroupQueryAttention (ONNX Runtime's contrib op, the one its LLM exports
    use). query [B, Lq, Hq*D], key/value the Lq newest tokens [B, Lq, Hkv*D], the Lk - Lq older
    tokens as past_key/past_value [B, Hkv, Lk - Lq, D] (empty for a prefill), seqlens_k =
    Lk - 1 for every entry and total_sequence_length = Lk. Attributes num_heads, kv_num_heads,
    scale, softcap, causal (where the schema has it), and local_window_size = W (see gqa_plan:
    ORT's window counts the current key); head sinks through the
    head_sink input and an explicit bias through attention_bias where the installed schema has
    those inputs (read from ONNX Runtime's own operator schemas, not from its version).
  - attention: ONNX's Attention at opset 24 (ONNX Runtime 1.32's CPU kernel), 25 for a window
    (which ORT runs as ONNX's function body; the producer names the opset): 4-D Q/K/V
    [B, H, L, D] (Hq != Hkv is its GQA), is_causal, scale, softcap, left/right_window_size
    (opset 25), the Lk - Lq older keys as past_key/past_value (its causal mask and windows are
    offset by the past length: bottom-right, as the contract), and an explicit mask (bool) or
    bias (float) as attn_mask.

What an op cannot state is counted "not expressible" with the reason (gqa_plan, attention_plan),
never run and never passed: for GQA a bidirectional window, chunks, packed sequences, Dv != D,
more queries than keys, an explicit mask; for Attention chunks, packed sequences, sinks, both an
explicit mask and a bias. What ONNX Runtime declines (no CPU kernel for bfloat16, a shape its
kernel checks) is counted "refused by ONNX Runtime" in its words.
Neither op returns an LSE: H5 is not run. Each case is run twice on one session: the second
output is out_rerun (H7, bitwise).

--window-offset N hands the engine W + N instead of W: the negative control (the gate must
fail with "window W+1"); the producer string says so.

Exit status: 0 every selected case was stored, refused or not expressible; 1 some case could
not be run or stored; 2 bad arguments or no fixture file.
"""
from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _engine
from ._args import bfloat16_bits
from ._engine import NotExpressible, Refused, Result

PROG = "ort_attention"
OPS = ("gqa", "attention")
MS_DOMAIN = "com.microsoft"


@dataclasses.dataclass
class Plan:
    """One node: op_type and domain, attributes, inputs in the op's order (name, array; None
    for an optional input left out), the output's layout back to [B, Hq, Lq, Dv]. elem: the
    tensors' type (float32, float16, bfloat16); arrays are float32 for bfloat16 (its values)."""
    op: str
    op_type: str
    domain: str
    attrs: Dict[str, object]
    inputs: List[Tuple[str, Optional[np.ndarray]]]
    elem: str
    out_shape: Tuple[int, int, int, int]   # B, Hq, Lq, Dv
    out_bsh: bool                           # output is [B, Lq, Hq*Dv] (GQA), else [B, Hq, Lq, Dv]
    notes: Tuple[str, ...] = ()
    opset: int = 23                         # the default domain's

    def feeds(self) -> Dict[str, np.ndarray]:
        return {n: a for n, a in self.inputs if a is not None}

    def output(self, y: np.ndarray) -> np.ndarray:
        """The op's output as [B, Hq, Lq, Dv] (a view; the values as the engine returned them)."""
        b, h, lq, dv = self.out_shape
        y = np.asarray(y)
        if self.out_bsh:
            if y.shape != (b, lq, h * dv):
                raise ValueError(f"{self.op_type} returned shape {y.shape}, expected "
                                 f"{(b, lq, h * dv)}")
            return y.reshape(b, lq, h, dv).transpose(0, 2, 1, 3)
        if y.shape != (b, h, lq, dv):
            raise ValueError(f"{self.op_type} returned shape {y.shape}, expected {(b, h, lq, dv)}")
        return y


def _np_type(dtype: str):
    return np.float16 if dtype == "float16" else np.float32


def _common(case, op: str) -> None:
    b, hq, lq, d = case.q.shape
    lk = case.k.shape[2]
    if case.packed:
        raise NotExpressible(f"packed sequences (cu_seqlens): the {op} op takes one length per "
                             f"batch entry, no sequence boundaries inside one")
    if lq == 0 or lk == 0:
        raise NotExpressible(f"Lq = {lq}, Lk = {lk}: an empty axis")
    if hq % case.k.shape[1]:
        raise NotExpressible(f"Hq = {hq} is not a multiple of Hkv = {case.k.shape[1]}")


@dataclasses.dataclass(frozen=True)
class Schema:
    """What the installed op takes: its inputs in order, its attribute names, its opset."""
    inputs: Tuple[str, ...]
    attributes: Tuple[str, ...]
    opset: int = 1

    def __iter__(self):  # inputs, attributes = schema
        return iter((self.inputs, self.attributes))


def schema_opset(schema, default: int) -> int:
    return getattr(schema, "opset", default)


def gqa_plan(case, schema, window_offset: int = 0) -> Plan:
    """The GroupQueryAttention node for a case, or NotExpressible. schema: (inputs, attributes)
    of the installed op (Schema), which decide what it can state.

    The window: since ONNX Runtime PR #25927 ("Fix Local Attention off by 1 bug", 2025-09)
    local_window_size counts the keys a query sees INCLUDING its own: the CPU kernel
    (contrib_ops/cpu/bert/gqa_attention_base.h, GQAAttentionBase::ComputeAttentionProbs) keeps
    `window_size = local_window_size_` keys from `start_offset = seq_causal_length -
    local_window_size_`, and attention_parameters.h says "The window size includes new token".
    That is the contract's causal W (p_q - p_k < W, W keys with the current one,
    docs/semantics.md section 2), so local_window_size = W. (The schema's text still says
    "left_window_size", the pre-#25927 meaning, W - 1: handed W - 1, ORT 1.32 fails with
    "window W-1" on every windowed row. Releases before #25927 need W - 1.)
    """
    inputs, attributes = schema
    _common(case, "GroupQueryAttention")
    b, hq, lq, d = case.q.shape
    _, hkv, lk, dv = case.v.shape
    attrs: Dict[str, object] = dict(num_heads=hq, kv_num_heads=hkv, scale=float(case.scale))
    notes: List[str] = []
    if not case.causal:
        if "causal" not in attributes:
            raise NotExpressible("bidirectional: this GroupQueryAttention is causal only (no "
                                 "`causal` attribute)")
        if case.window:
            raise NotExpressible(f"bidirectional window (W = {case.window}): "
                                 f"GroupQueryAttention's local_window_size is a left window "
                                 f"and must be -1 when causal is 0")
        attrs["causal"] = 0
        notes.append("causal=0")
    if case.chunk:
        raise NotExpressible(f"chunked attention (C = {case.chunk}): GroupQueryAttention has a "
                             f"local window, no chunks")
    if dv != d:
        raise NotExpressible(f"Dv = {dv} != D = {d}: GroupQueryAttention has one head_size")
    if lq > lk:
        raise NotExpressible(f"Lq = {lq} > Lk = {lk}: GroupQueryAttention's queries are the "
                             f"newest tokens (total_sequence_length counts them)")
    if case.mask is not None:
        raise NotExpressible("explicit mask: GroupQueryAttention has no boolean mask input")
    if case.window:
        w = case.window + window_offset
        attrs["local_window_size"] = w
        notes.append(f"local_window_size {w}")
    if case.softcap:
        attrs["softcap"] = float(case.softcap)
    t = _np_type(case.dtype)
    past = lk - lq

    def bsh(x, lo, hi):  # [B, H, L, D] tokens lo..hi -> [B, hi - lo, H * D]
        y = x[:, :, lo:hi].transpose(0, 2, 1, 3)
        return np.ascontiguousarray(y.reshape(y.shape[0], hi - lo, -1), dtype=t)

    given: Dict[str, Optional[np.ndarray]] = {
        "query": bsh(case.q, 0, lq), "key": bsh(case.k, past, lk), "value": bsh(case.v, past, lk),
        "seqlens_k": np.full((b,), lk - 1, dtype=np.int32),
        "total_sequence_length": np.array(lk, dtype=np.int32)}
    # past_key/past_value always, of length 0 for a prefill, as exported decoders feed them
    # (OpenVINO's frontend requires them; ONNX Runtime returns the same bits with or without)
    given["past_key"] = np.ascontiguousarray(case.k[:, :, :past], dtype=t)
    given["past_value"] = np.ascontiguousarray(case.v[:, :, :past], dtype=t)
    if past:
        notes.append(f"{past} keys as past_key/value")
    if case.sinks is not None:
        if "head_sink" not in inputs:
            raise NotExpressible("sinks: this GroupQueryAttention has no head_sink input")
        given["head_sink"] = _exact(case.sinks, t, case.dtype, "sinks (head_sink)")
        notes.append("sinks as head_sink")
    if case.bias is not None:
        if "attention_bias" not in inputs:
            raise NotExpressible("explicit bias: this GroupQueryAttention has no "
                                 "attention_bias input")
        given["attention_bias"] = _exact(case.bias, t, case.dtype, "explicit bias "
                                         "(attention_bias)")
        notes.append("explicit bias as attention_bias")
    return Plan("gqa", "GroupQueryAttention", MS_DOMAIN, attrs, _positional(inputs, given),
                case.dtype, (b, hq, lq, dv), True, tuple(notes))


def _exact(a, t, dtype: str, what: str) -> np.ndarray:
    """a in the input type t, or NotExpressible when that would change a value (these inputs
    are of the op's input type: a float32 bias cannot go into a float16 model unrounded)."""
    r = np.ascontiguousarray(a, dtype=t)
    if not np.array_equal(r.astype(np.float64), np.asarray(a, dtype=np.float64)):
        raise NotExpressible(f"{what} not exactly representable in {dtype}, the op's input type")
    return r


def _positional(names: Sequence[str], given: Dict[str, Optional[np.ndarray]]):
    """Optional ONNX inputs are positional: every schema input up to the last one given, the
    others left out (None, an empty name in the node)."""
    unknown = set(given) - set(names)
    if unknown:
        raise NotExpressible(f"this op has no input {sorted(unknown)[0]}")
    last = max(i for i, n in enumerate(names) if given.get(n) is not None)
    return [(n, given.get(n)) for n in names[:last + 1]]


def attention_plan(case, schema, window_offset: int = 0) -> Plan:
    """The ONNX Attention node for a case, or NotExpressible: opset 25 for a window where the
    installed schema has left_window_size/right_window_size, else 24 (or 23). Its causal mask and windows are
    at absolute positions p = offset + i, offset = past_sequence_length (a past_key input) or
    nonpad_kv_seqlen - Lq (its schema's words), so the contract's bottom-right alignment
    p_q = i + (Lk - Lq) is: the Lk - Lq oldest keys as past_key/past_value when Lq < Lk,
    nonpad_kv_seqlen = Lk when Lq > Lk. A window W (|p_q - p_k| < W) is left_window_size
    W - 1 and, bidirectional, right_window_size W - 1 ("a value of 0 allows the current
    position": both bounds are inclusive)."""
    inputs, attributes = schema
    _common(case, "Attention")
    b, hq, lq, d = case.q.shape
    _, hkv, lk, dv = case.v.shape
    windows = "left_window_size" in attributes
    # opset 25 only where a window needs it: ONNX Runtime 1.32 has a CPU kernel for Attention
    # 23 and 24, and runs an opset-25 node as ONNX's function body (its decomposition into
    # MatMul, Softmax, ...), so each case is run by the kernel wherever the kernel can state it
    opset = schema_opset(schema, 23)
    if not case.window:
        opset = min(opset, 24)
    if case.chunk:
        raise NotExpressible(f"chunked attention (C = {case.chunk}): Attention has no chunks")
    if case.window and not windows:
        raise NotExpressible("sliding window: Attention opset 23 has no window attribute")
    if case.sinks is not None:
        raise NotExpressible(f"sinks: Attention (opset {opset}) has no sink input")
    if case.mask is not None and case.bias is not None:
        raise NotExpressible("explicit mask and bias: Attention has one attn_mask")
    t = _np_type(case.dtype)
    attrs: Dict[str, object] = dict(is_causal=int(case.causal), scale=float(case.scale))
    notes: List[str] = [f"opset {opset}"]
    if case.softcap:
        attrs["softcap"] = float(case.softcap)
    if case.window:
        w = case.window + window_offset
        attrs["left_window_size"] = w - 1
        attrs["right_window_size"] = 0 if case.causal else w - 1
        notes.append(f"left/right_window_size {w - 1}/{attrs['right_window_size']}")
    past = max(lk - lq, 0)
    given: Dict[str, Optional[np.ndarray]] = {
        "Q": np.ascontiguousarray(case.q, dtype=t),
        "K": np.ascontiguousarray(case.k[:, :, past:], dtype=t),
        "V": np.ascontiguousarray(case.v[:, :, past:], dtype=t)}
    aligned = case.causal or case.window
    if past and aligned:
        given["past_key"] = np.ascontiguousarray(case.k[:, :, :past], dtype=t)
        given["past_value"] = np.ascontiguousarray(case.v[:, :, :past], dtype=t)
        notes.append(f"{past} keys as past_key/value")
    elif past:  # no position enters: all keys as K/V
        given["K"] = np.ascontiguousarray(case.k, dtype=t)
        given["V"] = np.ascontiguousarray(case.v, dtype=t)
    if lq > lk and aligned:
        if "nonpad_kv_seqlen" not in inputs:
            raise NotExpressible(f"Lq = {lq} > Lk = {lk} with a causal or window mask: its "
                                 f"offset Lk - Lq < 0 needs nonpad_kv_seqlen (opset 24)")
        given["nonpad_kv_seqlen"] = np.full((b,), lk, dtype=np.int64)
        notes.append("nonpad_kv_seqlen = Lk")
    if case.mask is not None:
        given["attn_mask"] = np.ascontiguousarray(case.mask, dtype=bool)
        notes.append("explicit mask as boolean attn_mask")
    elif case.bias is not None:
        given["attn_mask"] = _exact(case.bias, t, case.dtype, "explicit bias (float attn_mask)")
        notes.append("explicit bias as float attn_mask")
    # attn_mask is [.., Lq, total_sequence_length] (past and new keys), the case's [.., Lq, Lk]
    return Plan("attention", "Attention", "", attrs, _positional(inputs, given), case.dtype,
                (b, hq, lq, dv), False, tuple(notes), opset)


# The token axes of each input, named as exported decoders name them: an exported LLM's graph
# has symbolic sequence lengths (its past grows every step), and engines take other paths for
# static ones (OpenVINO 2026.4 reads a static past_key as a preallocated max-length cache).
TOKEN_AXES = {"query": {1: "S"}, "key": {1: "S"}, "value": {1: "S"}, "past_key": {2: "P"},
              "past_value": {2: "P"}, "attention_bias": {2: "S", 3: "T"}, "Q": {2: "S"},
              "K": {2: "L"}, "V": {2: "L"}, "attn_mask": {2: "S", 3: "T"}}


def model_proto(plan: Plan, onnx, static_shapes: bool = False):
    """The one-node ModelProto of a plan (onnx.helper): the plan's opset for the default domain,
    1 for com.microsoft; the token axes symbolic (TOKEN_AXES) unless static_shapes."""
    h, TP = onnx.helper, onnx.TensorProto
    elem = {"float32": TP.FLOAT, "float16": TP.FLOAT16, "bfloat16": TP.BFLOAT16}[plan.elem]
    ins, in_names = [], []
    for name, a in plan.inputs:
        if a is None:
            in_names.append("")
            continue
        in_names.append(name)
        if a.dtype == np.int32:
            et = TP.INT32
        elif a.dtype == np.int64:
            et = TP.INT64
        elif a.dtype == bool:
            et = TP.BOOL
        else:
            et = elem
        shape = list(a.shape)
        if not static_shapes:
            for axis, sym in TOKEN_AXES.get(name, {}).items():
                if axis < len(shape) and shape[axis] != 1:  # a broadcast axis stays 1
                    shape[axis] = sym
        ins.append(h.make_tensor_value_info(name, et, shape))
    outs = ["output"] if plan.op == "gqa" else ["Y"]
    # the present cache is an output whenever there is a past (GroupQueryAttention always
    # has one; ONNX Runtime's Attention kernel refuses a past_key without present_key)
    if plan.op == "gqa" or dict(plan.inputs).get("past_key") is not None:
        outs += ["present_key", "present_value"]
    node = h.make_node(plan.op_type, in_names, outs, domain=plan.domain, **plan.attrs)
    out_vi = [h.make_tensor_value_info(outs[0], elem, None)]
    out_vi += [h.make_tensor_value_info(n, elem, None) for n in outs[1:]]
    graph = h.make_graph([node], f"flexcheck_{plan.op}", ins, out_vi)
    opsets = [h.make_opsetid("", plan.opset)]
    if plan.domain:
        opsets.append(h.make_opsetid(plan.domain, 1))
    m = h.make_model(graph, opset_imports=opsets, producer_name="flexcheck")
    m.ir_version = min(m.ir_version, 10)  # what ONNX Runtime 1.2x reads
    return m


def bf16_feeds(plan: Plan) -> Dict[str, np.ndarray]:
    """Feeds for a bfloat16 model as uint16 bit patterns (the values are bfloat16-exact)."""
    out = {}
    for n, a in plan.feeds().items():
        if a.dtype == np.float32:
            a = bfloat16_bits(a, round=False)  # bfloat16 values held in float32, exactly
        out[n] = a
    return out


# ---- ONNX Runtime ----

class Ort:
    """ONNX Runtime on its CPU EP. schemas[op]: Schema of the installed op (GroupQueryAttention:
    ONNX Runtime's own; Attention: the highest opset whose CPU kernel a session accepts, probed
    once); run(plan) -> (output, rerun) of one session."""

    engine = "ONNX Runtime"
    short = "ort"

    def __init__(self, threads: Optional[int] = None, schemas=None, static_shapes=False):
        import onnx
        import onnxruntime as ort
        self.onnx, self.ort = onnx, ort
        self.static_shapes = static_shapes
        self.version = ort.__version__
        self.threads = threads
        self.attention_refusals = []
        self.schemas = schemas or {"gqa": self._schema("GroupQueryAttention", MS_DOMAIN, None),
                                   "attention": self._attention_schema()}

    @staticmethod
    def preload() -> None:
        """Import the packages (no session, no thread): what forked children then share."""
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401

    def _schema(self, op: str, domain: str, version: Optional[int]) -> Optional[Schema]:
        from onnxruntime.capi import onnxruntime_pybind11_state as C
        best = None
        for s in C.get_all_operator_schema():
            if s.name == op and s.domain == domain and (version is None or
                                                         s.since_version <= version):
                if best is None or s.since_version > best.since_version:
                    best = s
        if best is None:
            return None
        return Schema(tuple(i.name for i in best.inputs), tuple(best.attributes),
                      version or best.since_version)

    def _attention_schema(self) -> Optional[Schema]:
        """The highest Attention opset (25, 24, 23) a CPU session takes: the schema may be
        newer than the CPU kernels."""
        self.attention_refusals = []
        for opset in (25, 24, 23):
            sc = self._schema("Attention", "", opset)
            if sc is None:
                continue
            q = np.zeros((1, 1, 1, 8), np.float32)
            plan = Plan("attention", "Attention", "", dict(is_causal=0), [("Q", q), ("K", q),
                        ("V", q)], "float32", (1, 1, 1, 8), False, (), opset)
            try:
                self.session(plan)
                return sc
            except Exception as e:
                self.attention_refusals.append(f"opset {opset}: {_engine.first_line(e)}")
        return None

    def describe(self, op: str) -> str:
        what = "com.microsoft.GroupQueryAttention" if op == "gqa" else "Attention"
        return (f"onnxruntime {self.version} {what}, CPU EP, onnx {self.onnx.__version__}, "
                f"{'static' if self.static_shapes else 'symbolic'} token axes, "
                f"Python {platform.python_version()}")

    def session(self, plan: Plan):
        ort = self.ort
        model = model_proto(plan, self.onnx, self.static_shapes).SerializeToString()
        so = ort.SessionOptions()
        # ORT logs a kernel's refusal as an error on stderr before raising it; the runner
        # reports it once, in its count and line: fatal only
        so.log_severity_level = 4
        if self.threads:
            so.intra_op_num_threads = self.threads
        return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])

    def run(self, plan: Plan) -> Tuple[np.ndarray, np.ndarray]:
        try:
            sess = self.session(plan)
        except Exception as e:
            # no kernel for the node (NOT_IMPLEMENTED: bfloat16 on the CPU EP) is ORT declining
            # it; anything else (INVALID_GRAPH, ...) says the runner built a bad model: an error
            if "NOT_IMPLEMENTED" in str(e):
                raise Refused(_engine.first_line(e)) from e
            raise
        feeds = plan.feeds()
        if plan.elem == "bfloat16":  # numpy has no bfloat16: bit patterns typed by ORT
            bf16 = self.onnx.TensorProto.BFLOAT16
            feeds = {n: (self.ort.OrtValue.ortvalue_from_numpy_with_onnx_type(a, bf16)
                         if a.dtype == np.uint16 else a)
                     for n, a in bf16_feeds(plan).items()}
        try:
            y = sess.run(None, feeds)[0]
            y2 = sess.run(None, feeds)[0]
        except Exception as e:
            # ORT's checks of the inputs (a shape its kernel does not take) say INVALID_ARGUMENT
            # or NOT_IMPLEMENTED; anything else is an error of the run
            if "INVALID_ARGUMENT" in str(e) or "NOT_IMPLEMENTED" in str(e):
                raise Refused(_engine.first_line(e)) from e
            raise
        return y, y2


def adapter(engine, op: str, window_offset: int = 0):
    """case -> Result through engine.run for one op (engine.schemas[op] says what it takes)."""
    schema = engine.schemas.get(op)

    def run(case) -> Result:
        if schema is None:
            raise Refused(f"no {op} operator in this {engine.engine} " +
                          "; ".join(getattr(engine, "attention_refusals", [])))
        if case.dtype == "bfloat16":
            # the stored inputs are bfloat16 values; ONNX has the type (TensorProto.BFLOAT16)
            plan_dtype = "bfloat16"
        else:
            plan_dtype = case.dtype
        plan = (gqa_plan if op == "gqa" else attention_plan)(case, schema, window_offset)
        assert plan.elem == plan_dtype
        y, y2 = engine.run(plan)
        out, rerun = plan.output(y), plan.output(y2)
        enc = None
        if plan.elem == "bfloat16":
            out, rerun = _bf16_out(out), _bf16_out(rerun)
            enc = "bfloat16"
        return Result(out=out, out_rerun=rerun, encoding=enc,
                      notes=plan.notes)
    return run


def _bf16_out(y: np.ndarray) -> np.ndarray:
    """A bfloat16 output as its uint16 bit patterns (what add_tested stores with encoding
    bfloat16), from the engine's uint16 bits or exact float32 values."""
    y = np.ascontiguousarray(y)
    if y.dtype == np.uint16:
        return y
    if y.dtype == np.float32:
        return bfloat16_bits(y, round=False)
    raise ValueError(f"bfloat16 output returned as {y.dtype}")


def _args(argv, prog=PROG):
    ap = argparse.ArgumentParser(
        prog=f"python -m flexcheck.{prog}",
        description="Run ONNX Runtime's GroupQueryAttention and Attention ops on every case of "
                    "fixture files and store the outputs under tested/<label> for `flexcheck "
                    "check` to judge.")
    _engine.add_common_args(ap)
    ap.add_argument("--op", choices=OPS + ("both",), default="both")
    ap.add_argument("--threads", type=int, metavar="N", help="intra_op_num_threads")
    _engine.add_negative_control(ap)
    ap.add_argument("--static-shapes", action="store_true",
                    help="declare every input shape static in the model (default: the token "
                         "axes symbolic, as in exported decoders)")
    ap.add_argument("--isolate", action="store_true",
                    help="run each file in a child process that imports the engine itself, "
                         "so a crash of the engine costs one case (named), not the run")
    return ap.parse_args(argv)


def _info(engine) -> dict:
    """What the parent of an isolated run needs to know of the engine (names, producers)."""
    return dict(engine=engine.engine, short=engine.short, version=engine.version,
                describe={op: engine.describe(op) for op in OPS}, schemas=engine.schemas)


def main(argv=None, engine=None, prog: str = PROG, make_engine=None) -> int:
    """The command; engine (or make_engine) lets the tests and the OpenVINO runner put
    another engine with the same engine / short / version / schemas / describe / run(plan)
    in ONNX Runtime's place."""
    a = _args(argv, prog)
    got = _engine.files_and_dtypes(prog, a)
    if got is None:
        return 2
    files, dtypes = got
    make = make_engine or Ort
    isolate = a.isolate and engine is None
    try:
        info, engine = _engine.start(
            lambda: make(threads=a.threads, static_shapes=a.static_shapes), _info, isolate,
            engine, getattr(make, "preload", None))
    except (ImportError, RuntimeError) as e:
        print(f"{prog}: {_engine.first_line(e)}", file=sys.stderr)
        return 2
    ops = OPS if a.op == "both" else (a.op,)
    status = 0
    for op in ops:
        if a.label:
            label = _engine.sanitize_label(a.label + ("" if len(ops) == 1 else f"-{op}"))
        else:
            label = _engine.sanitize_label(f"{info['short']}-{info['version']}-{op}-cpu")
        producer = info["describe"][op]
        if a.window_offset:
            producer += f", NEGATIVE CONTROL: W + {a.window_offset} handed over"
        run = _engine.Run(prog=prog, engine=info["engine"], label=label, producer=producer,
                          adapter=None if isolate else adapter(engine, op, a.window_offset),
                          dtypes=dtypes, overwrite=a.overwrite,
                          isolate=((lambda op=op: adapter(
                                       make(threads=a.threads, schemas=info["schemas"],
                                            static_shapes=a.static_shapes), op,
                                       a.window_offset))
                                   if isolate else None))
        status = max(status, run.files(files))
    return status


if __name__ == "__main__":
    sys.exit(main())
