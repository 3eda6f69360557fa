"""flexcheck.openvino_attention - the ONNX attention models of ort_attention run by OpenVINO.

    python -m flexcheck.openvino_attention PATH... [--op gqa|attention|both] [--dtype T[,T]]
                                                   [--label L] [--overwrite] [--window-offset N]

The same one-node ONNX models flexcheck.ort_attention builds (com.microsoft.GroupQueryAttention
with ONNX Runtime 1.32's input order and attributes; ONNX Attention at the highest opset, 25, 24
or 23, OpenVINO's ONNX frontend reads), serialized to a temporary .onnx file, read with
openvino.Core().read_model (its ONNX frontend), compiled for the CPU plugin with its defaults
(the inference precision hint it reports is in the producer string) and run twice (out,
out_rerun); stored under tested/openvino-<version>-<op>-cpu. What cannot be stated in the op is
"not expressible" exactly as for ONNX Runtime (the same plans); what OpenVINO's frontend or
plugin rejects (an op, an attribute, an input) is "refused by OpenVINO" in its own words (its
first line). Neither op returns an LSE (H5 not run).

Exit status as flexcheck.ort_attention's.
"""
from __future__ import annotations

import os
import platform
import sys
import tempfile
from typing import Optional, Tuple

import numpy as np

from . import ort_attention as oa
from ._engine import Refused

PROG = "openvino_attention"
# ONNX Runtime 1.32's com.microsoft.GroupQueryAttention inputs, in order (its operator schema;
# OpenVINO has no registry of the contrib op's signature to read it from).
GQA_INPUTS = ("query", "key", "value", "past_key", "past_value", "seqlens_k",
              "total_sequence_length", "cos_cache", "sin_cache", "position_ids",
              "attention_bias", "head_sink")
GQA_ATTRIBUTES = ("num_heads", "kv_num_heads", "scale", "softcap", "local_window_size",
                  "causal", "do_rotary", "rotary_interleaved", "smooth_softmax")


_NOISE = ("Exception from ", "Check '", "FrontEnd API failed", "Model wasn't fully converted",
          "Summary:", "-- Conversion is failed", "While validating", "-- com.microsoft.",
          "-- Attention")


def ov_words(e: BaseException) -> str:
    """OpenVINO's own message of an exception, without its wrapping: its exceptions start with
    "Exception from src/...:" and "Check '...' failed at FILE:LINE:" lines; the words are the
    other lines (joined by ": "), followed by the innermost FILE:LINE (where OpenVINO's code
    said it)."""
    import re
    text = str(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    words = [ln for ln in lines if not ln.startswith(_NOISE)]
    where = re.findall(r"failed at (\S+?):?\s*$", text, flags=re.M)
    said = ": ".join(words) if words else (lines[0] if lines else type(e).__name__)
    return said + (f" ({where[-1].rstrip(':')})" if where else "")


class OpenVino:
    engine = "OpenVINO"
    short = "openvino"

    def __init__(self, threads: Optional[int] = None, schemas=None, static_shapes=False):
        self.static_shapes = static_shapes
        import onnx
        import openvino as ov
        self.onnx, self.ov = onnx, ov
        self.core = ov.Core()
        self.config = {}
        if threads:
            self.config["INFERENCE_NUM_THREADS"] = threads
        self.version = ov.__version__.split("-")[0]
        self.full_version = "-".join(ov.__version__.split("-")[:2])  # 2026.4.1-22982
        hint = self.core.get_property("CPU", "INFERENCE_PRECISION_HINT")  # an ov.Type
        self.precision = hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)
        self.attention_refusals = []
        self.schemas = schemas or {"gqa": oa.Schema(GQA_INPUTS, GQA_ATTRIBUTES, 1),
                                   "attention": self._attention_schema()}

    @staticmethod
    def preload() -> None:
        """Import the packages (no Core, no thread): what forked children then share."""
        import onnx  # noqa: F401
        import openvino  # noqa: F401

    def _attention_schema(self) -> Optional[oa.Schema]:
        """The highest Attention opset (25, 24, 23) of the onnx package that OpenVINO's ONNX
        frontend reads and its CPU plugin compiles (a plain non-causal node)."""
        self.attention_refusals = []
        for opset in (25, 24, 23):
            try:
                s = self.onnx.defs.get_schema("Attention", opset, "")
            except Exception:
                continue
            if s.since_version != opset and opset != 23:
                continue
            q = np.zeros((1, 1, 1, 8), np.float32)
            plan = oa.Plan("attention", "Attention", "", dict(is_causal=0),
                           [("Q", q), ("K", q), ("V", q)], "float32", (1, 1, 1, 8), False, (),
                           opset)
            try:
                self.compile(plan)
                return oa.Schema(tuple(i.name for i in s.inputs), tuple(s.attributes), opset)
            except Exception as e:
                self.attention_refusals.append(f"opset {opset}: {ov_words(e)}")
        return None

    def describe(self, op: str) -> str:
        what = "com.microsoft.GroupQueryAttention" if op == "gqa" else "Attention"
        return (f"openvino {self.full_version} ONNX frontend {what}, CPU plugin "
                f"({self.precision}), onnx {self.onnx.__version__}, "
                f"{'static' if self.static_shapes else 'symbolic'} token axes, Python "
                f"{platform.python_version()}")

    def compile(self, plan: oa.Plan):
        model = oa.model_proto(plan, self.onnx, self.static_shapes)
        fd, path = tempfile.mkstemp(suffix=".onnx", prefix="flexcheck-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(model.SerializeToString())
            m = self.core.read_model(path)
            return self.core.compile_model(m, "CPU", self.config)
        finally:
            os.unlink(path)

    def _feeds(self, plan: oa.Plan):
        feeds = plan.feeds()
        if plan.elem != "bfloat16":
            return feeds
        out = {}
        for n, a in oa.bf16_feeds(plan).items():
            if a.dtype == np.uint16:  # numpy has no bfloat16: the bits into a bf16 tensor
                t = self.ov.Tensor(self.ov.Type.bf16, list(a.shape))
                t.data.view(np.uint16)[...] = a
                a = t
            out[n] = a
        return out

    def run(self, plan: oa.Plan) -> Tuple[np.ndarray, np.ndarray]:
        try:
            cm = self.compile(plan)
        except Exception as e:  # the frontend or the plugin rejecting the node, in its words
            raise Refused(ov_words(e)) from e
        feeds = self._feeds(plan)
        req = cm.create_infer_request()
        ys = []
        for _ in range(2):
            try:
                req.infer(feeds)
            except Exception as e:  # an error of the run, in OpenVINO's words (not a refusal)
                raise RuntimeError(ov_words(e)) from e
            t = req.get_output_tensor(0)
            y = np.array(t.data, copy=True)
            if str(t.element_type) in ("<Type: 'bfloat16'>", "bf16") or \
                    t.element_type == self.ov.Type.bf16:
                y = y.view(np.uint16)
            ys.append(y)
        return ys[0], ys[1]


def main(argv=None, engine=None) -> int:
    return oa.main(argv, engine=engine, prog=PROG, make_engine=OpenVino)


if __name__ == "__main__":
    sys.exit(main())
