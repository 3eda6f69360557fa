"""flexcheck.hf_attention - Hugging Face transformers' attention, judged.

    python -m flexcheck.hf_attention PATH... [--impl eager|sdpa|flex_attention|all]
                                             [--dtype T[,T]] [--label L] [--overwrite]
                                             [--threads N] [--compile-flex] [--window-offset N]

PATH is a fixture file (docs/fixtures.md) or a directory searched for them. Every case is run
as one attention layer of a transformers model runs it, on the CPU, once per implementation
(config._attn_implementation: eager, sdpa, flex_attention), and its output and a rerun stored
with add_tested under tested/transformers-<version>-<impl>-cpu for `flexcheck check` to judge.
Nothing here computes attention or builds a mask: transformers does both.

Each case becomes a one-layer model config (hf_plan; the model chosen by the case's terms, the
way the model family states them):
  - causal, with or without a window W: Mistral, `sliding_window = W` (None without one);
    transformers' causal window is `kv_idx > q_idx - sliding_window`
    (masking_utils.sliding_window_overlay), W keys with the query's own: flexcheck's W, so W
    is handed over unchanged;
  - causal with a soft-cap c: Gemma 2, `attn_logit_softcapping = c`, its sliding layer with
    `sliding_window = W` or its full layer;
  - causal with sinks: gpt-oss, its attention module's `sinks` parameter set to the case's,
    `sliding_window = W` as for Mistral;
  - causal with a chunk C: Llama 4, `attention_chunk_size = C` (create_chunked_causal_mask);
  - bidirectional: ModernBERT (an encoder: Lq == Lk, Hq == Hkv), its full layer
    (create_bidirectional_mask) or its sliding layer: ModernBertConfig documents
    `local_attention` as the whole window and derives `sliding_window = local_attention // 2`,
    and its mask is `abs(q_idx - kv_idx) <= sliding_window`
    (masking_utils.sliding_window_bidirectional_overlay): flexcheck's bidirectional W (abs < W)
    is `local_attention = 2 * (W - 1)` (docs/semantics.md section 2, the ModernBERT row).
Then, as the model's forward does: the mask by the model's masking_utils builder from the
config, an embedding-shaped tensor and the cache; with fewer queries than keys (decode) the
first Lk - Lq keys go into a DynamicCache(config=config) first and the step's keys through
cache.update (so a sliding layer sees what its DynamicSlidingWindowLayer keeps); a packed case
(cu_seqlens_q == cu_seqlens_k) is one row with position_ids restarting at 0 for each sequence,
which transformers detects as packing (find_packed_sequence_indices). The attention function
is the model module's eager_attention_forward, or transformers.integrations'
sdpa_attention_forward / flex_attention_forward, called with the model's real attention module
(num_key_value_groups, is_causal, sinks) and the keyword arguments its forward passes (scaling
= the case's scale, sliding_window, softcap, s_aux).

Not expressible, with the reason: an explicit mask or bias (transformers builds masks from a
config and a 2D padding mask), Lq > Lk (queries before the first key: transformers' query
positions follow the cache), packed sequences whose query and key lengths differ, a window
together with a chunk, a bidirectional chunk, soft-cap together with sinks, sinks or a
soft-cap with a chunk or without causality, a bidirectional case with Lq != Lk or Hq != Hkv
(ModernBERT), Hq not a multiple of Hkv. Refused, in transformers' words: what the model class
declines (`_supports_sdpa = False`: Gemma 2, gpt-oss) and what the function raises (sdpa with
a soft-cap). A row with no allowed key cannot occur in an expressible case. No LSE is
returned by the functions (H5 not run). Each case runs twice: the second output is out_rerun.

--window-offset N hands the config W + N instead of W (for ModernBERT: local_attention of
W + N): the negative control (the gate must fail with "window W+1"); the producer says so.

Exit status: 0 every selected case was stored, refused or not expressible; 1 some case could
not be run or stored; 2 bad arguments, no fixture file or no transformers.
"""
from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
from typing import Dict, List, Optional, Tuple

import numpy as np

from . import _engine
from ._engine import NotExpressible, Refused, Result

PROG = "hf_attention"
IMPLS = ("eager", "sdpa", "flex_attention")
HIDDEN = 64  # the configs' MLP width (no MLP runs)


@dataclasses.dataclass
class Plan:
    """One attention layer of one model: model (the transformers model type), mask (the
    masking_utils builder), config (keyword arguments of the model's config beside the
    shapes), past (keys cached before the step), position_ids (packed) or None, the
    attention call's keyword arguments (sliding_window, softcap, s_aux), q/k/v as stored."""
    model: str
    mask: str
    config: Dict[str, object]
    dtype: str
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scale: float
    past: int = 0
    position_ids: Optional[List[int]] = None
    softcap: Optional[float] = None
    sinks: Optional[np.ndarray] = None
    sliding_window: Optional[int] = None
    notes: Tuple[str, ...] = ()


def _packed_positions(case) -> List[int]:
    cq = [int(x) for x in case.cu_seqlens_q]
    ck = [int(x) for x in case.cu_seqlens_k]
    if cq != ck:
        raise NotExpressible("packed sequences with query and key lengths that differ: "
                             "transformers packs through position_ids restarting at 0, each "
                             "sequence's queries being its keys (cu_seqlens_q == cu_seqlens_k)")
    pos: List[int] = []
    for a, b in zip(cq, cq[1:]):
        pos += list(range(b - a))
    return pos


def hf_plan(case, window_offset: int = 0) -> Plan:
    """The model layer that runs a case, or NotExpressible (see the module's text)."""
    b, hq, lq, d = case.q.shape
    hkv, lk = case.k.shape[1], case.k.shape[2]
    cap = float(case.softcap) if case.softcap else None
    sinks = case.sinks
    if case.mask is not None or case.bias is not None:
        raise NotExpressible("an explicit mask or bias: transformers builds its masks from the "
                             "model config and a 2D padding mask")
    if hq % hkv:
        raise NotExpressible(f"Hq = {hq} is not a multiple of Hkv = {hkv}")
    if lq > lk:
        raise NotExpressible(f"Lq = {lq} > Lk = {lk}: transformers' query positions follow the "
                             f"cached keys (cache_position), none lies before the first key")
    if case.window and case.chunk:
        raise NotExpressible("a window and a chunk together: no transformers model masks with "
                             "both (Llama 4 layers are chunked or full)")
    if cap is not None and sinks is not None:
        raise NotExpressible("soft-cap and sinks together: Gemma 2 has no sinks, gpt-oss no "
                             "soft-cap")
    w = case.window + window_offset if case.window else 0
    notes: List[str] = []
    cfg: Dict[str, object] = {}
    position_ids = _packed_positions(case) if case.packed else None
    if position_ids is not None:
        notes.append("packed through position_ids")
    if not case.causal:
        if case.chunk:
            raise NotExpressible("a bidirectional chunk: transformers' chunked mask "
                                 "(create_chunked_causal_mask) is causal")
        if cap is not None or sinks is not None:
            raise NotExpressible("soft-cap or sinks without causality: the models that have "
                                 "them (Gemma 2, gpt-oss) are decoders")
        if lq != lk:
            raise NotExpressible(f"bidirectional with Lq = {lq} != Lk = {lk}: an encoder's "
                                 f"queries are its keys (ModernBERT)")
        if hq != hkv:
            raise NotExpressible(f"bidirectional with Hq = {hq} != Hkv = {hkv}: ModernBERT has "
                                 f"no grouped-query attention")
        model = "modernbert"
        if w:
            # ModernBertConfig: sliding_window = local_attention // 2, mask abs(d) <=
            # sliding_window; flexcheck's abs(d) < W is local_attention = 2 (W - 1)
            cfg.update(local_attention=2 * (w - 1), layer_types=["sliding_attention"])
            mask = "create_bidirectional_sliding_window_mask"
            notes.append(f"ModernBERT local_attention={2 * (w - 1)}")
            sliding = w
        else:
            cfg.update(layer_types=["full_attention"])
            mask = "create_bidirectional_mask"
            sliding = None
    else:
        sliding = w or None
        if case.chunk:
            if cap is not None or sinks is not None:
                raise NotExpressible("soft-cap or sinks with a chunk: Llama 4 has neither")
            model, mask = "llama4", "create_chunked_causal_mask"
            cfg.update(attention_chunk_size=int(case.chunk), layer_types=["chunked_attention"])
            notes.append(f"Llama 4 attention_chunk_size={case.chunk}")
        else:
            model = "gemma2" if cap is not None else "gpt_oss" if sinks is not None else "mistral"
            mask = "create_sliding_window_causal_mask" if w else "create_causal_mask"
            if model == "mistral":
                cfg.update(sliding_window=sliding)
            else:
                cfg.update(sliding_window=w or 4096,
                           layer_types=["sliding_attention" if w else "full_attention"])
            if model == "gemma2":
                cfg.update(attn_logit_softcapping=cap)
            label = {"mistral": "Mistral", "gemma2": "Gemma 2", "gpt_oss": "gpt-oss"}[model]
            notes.append(f"{label} sliding_window={w}" if w else f"{label} full attention")
    t = np.float16 if case.dtype == "float16" else np.float32
    return Plan(model=model, mask=mask, config=cfg, dtype=case.dtype,
                q=np.ascontiguousarray(case.q, dtype=t), k=np.ascontiguousarray(case.k, dtype=t),
                v=np.ascontiguousarray(case.v, dtype=t), scale=float(case.scale),
                past=lk - lq if position_ids is None else 0, position_ids=position_ids,
                softcap=cap, sinks=None if sinks is None else np.asarray(sinks, np.float32),
                sliding_window=sliding, notes=tuple(notes))


# ---- transformers ----

MODELS = {  # model type -> (module, config class, attention class, pretrained class)
    "mistral": ("mistral", "MistralConfig", "MistralAttention", "MistralPreTrainedModel"),
    "gemma2": ("gemma2", "Gemma2Config", "Gemma2Attention", "Gemma2PreTrainedModel"),
    "gpt_oss": ("gpt_oss", "GptOssConfig", "GptOssAttention", "GptOssPreTrainedModel"),
    "llama4": ("llama4", "Llama4TextConfig", "Llama4TextAttention", "Llama4PreTrainedModel"),
    "modernbert": ("modernbert", "ModernBertConfig", "ModernBertAttention",
                   "ModernBertPreTrainedModel"),
}


class Transformers:
    """transformers on the CPU: run(plan, impl) -> (out, rerun) as torch tensors [B, H, Lq, Dv]."""

    engine = "transformers"

    def __init__(self, threads: Optional[int] = None, compile_flex: bool = False):
        import importlib
        import torch
        import transformers
        from transformers import masking_utils
        from transformers.cache_utils import DynamicCache
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        self.torch, self.masking_utils, self.DynamicCache = torch, masking_utils, DynamicCache
        self.functions = ALL_ATTENTION_FUNCTIONS
        self.importlib = importlib
        if threads:
            torch.set_num_threads(threads)
        self.compile_flex = compile_flex
        if not compile_flex:
            # flex_attention_forward wraps flex_attention in torch.compile; on the CPU that
            # compiles one C++ kernel per shape and dtype (560 s for 24 small cases on the
            # shared 2-core machine, then dynamo's recompile limit falls back to the eager
            # path anyway), so by default torch.compile is told to run functions as they are
            # (torch.compiler.set_stance("force_eager")) and flex_attention runs
            # PyTorch's unfused eager path, as flexcheck.torch_flex does on the CPU; the
            # producer says which
            torch.compiler.set_stance("force_eager")
        self.version = transformers.__version__
        self.torch_version = torch.__version__
        self.dtypes = {"float32": torch.float32, "float16": torch.float16,
                       "bfloat16": torch.bfloat16}
        self.impls = [i for i in IMPLS if i == "eager" or i in self.functions]
        self.left_out = {i: "not in ALL_ATTENTION_FUNCTIONS" for i in IMPLS
                         if i not in self.impls}

    def describe(self, impl: str) -> str:
        """The producer string (at most 255 bytes with the case's notes)."""
        fn = {"eager": "each model's eager_attention_forward",
              "sdpa": "sdpa_attention_forward", "flex_attention": "flex_attention_forward"}[impl]
        if impl == "flex_attention" and not self.compile_flex:
            fn += ", force_eager"
        return (f"transformers {self.version} (torch {self.torch_version}), {impl}: {fn}, "
                f"CPU, {self.torch.get_num_threads()} threads, "
                f"Python {platform.python_version()}")

    def _classes(self, model: str):
        mod, cfg, attn, pre = MODELS[model]
        m = self.importlib.import_module(f"transformers.models.{mod}.modeling_{mod}")
        return m, getattr(m, cfg), getattr(m, attn), getattr(m, pre)

    def tensor(self, a, dtype: str):
        t = self.torch.from_numpy(np.ascontiguousarray(a))
        return t.to(self.dtypes[dtype])

    def run(self, plan: Plan, impl: str):
        torch = self.torch
        m, config_cls, attn_cls, pre = self._classes(plan.model)
        flag = {"sdpa": "_supports_sdpa", "flex_attention": "_supports_flex_attn"}.get(impl)
        if flag and not getattr(pre, flag, False):
            raise Refused(f"{pre.__name__}.{flag} is False (transformers does not run "
                          f"{plan.model} with attn_implementation={impl})")
        b, hq, lq, d = plan.q.shape
        hkv = plan.k.shape[1]
        # hidden_size = Hq * D: the configs require a multiple of the head count
        heads = dict(num_attention_heads=hq, num_hidden_layers=1, vocab_size=32,
                     hidden_size=hq * d, intermediate_size=HIDDEN)
        if plan.model != "modernbert":  # ModernBERT: head_dim = hidden_size / heads, no GQA
            heads.update(head_dim=d, num_key_value_heads=hkv)
        config = config_cls(**heads, **plan.config)
        config._attn_implementation = impl
        module = attn_cls(config, layer_idx=0).eval()
        q, k, v = (self.tensor(x, plan.dtype) for x in (plan.q, plan.k, plan.v))
        kw = dict(dropout=0.0, scaling=plan.scale)
        if plan.sliding_window is not None:
            kw["sliding_window"] = plan.sliding_window
        if plan.softcap is not None:
            kw["softcap"] = plan.softcap
        if plan.sinks is not None:
            with torch.no_grad():
                module.sinks.copy_(torch.from_numpy(plan.sinks))
            kw["s_aux"] = module.sinks
        fn = m.eager_attention_forward if impl == "eager" else self.functions[impl]
        outs = []
        for _ in range(2):
            with torch.no_grad():
                mask, keys, values = self._mask_and_kv(plan, config, k, v, q.dtype)
                try:
                    out, _w = fn(module, q, keys, values, mask, **kw)
                except ValueError as e:  # transformers declining: sdpa_attention_forward
                    # "does not support `softcap`", flex_attention_forward "Attention sinks
                    # cannot be run on CPU"
                    raise Refused(_engine.first_line(e)) from e
            outs.append(out.transpose(1, 2).contiguous())
        return outs[0], outs[1]

    def _mask_and_kv(self, plan: Plan, config, k, v, dtype):
        """The mask as the model's forward builds it, and the keys/values its attention layer
        gets: the step's after the past went through the cache."""
        torch = self.torch
        b, lq = plan.q.shape[0], plan.q.shape[2]
        embeds = torch.zeros((b, lq, 1), dtype=dtype)  # the builders read B, Lq and dtype
        builder = getattr(self.masking_utils, plan.mask)
        kw = dict(config=config, inputs_embeds=embeds, attention_mask=None)
        if plan.model == "modernbert":  # an encoder's builders take no cache
            return builder(**kw), k, v
        pos = None
        if plan.position_ids is not None:
            pos = torch.tensor([plan.position_ids], dtype=torch.long)
        cache = None
        if plan.past:
            cache = self.DynamicCache(config=config)
            cache.update(k[:, :, :plan.past], v[:, :, :plan.past], 0)
        mask = builder(**kw, cache=cache, position_ids=pos)
        if cache is not None:
            k, v = cache.update(k[:, :, plan.past:], v[:, :, plan.past:], 0)
        return mask, k, v


def adapter(engine, impl: str, window_offset: int = 0):
    def run(case) -> Result:
        plan = hf_plan(case, window_offset)
        out, rerun = engine.run(plan, impl)
        notes = list(plan.notes)
        if plan.past:
            notes.append(f"{plan.past} keys cached first")
        notes.append("no LSE")
        return Result(out=out, out_rerun=rerun, encoding=_engine.bits_encoding(out),
                      notes=tuple(notes))
    return run


def _args(argv):
    ap = argparse.ArgumentParser(
        prog=f"python -m flexcheck.{PROG}",
        description="Run Hugging Face transformers' attention (eager, sdpa, flex_attention on "
                    "the CPU, masks built by transformers from a model config) on every case "
                    "of fixture files and store the outputs under tested/<label> for "
                    "`flexcheck check` to judge.")
    _engine.add_common_args(ap, "transformers-<version>-<impl>-cpu")
    ap.add_argument("--impl", choices=IMPLS + ("all",), default="all")
    ap.add_argument("--threads", type=int, metavar="N", help="torch.set_num_threads")
    ap.add_argument("--compile-flex", action="store_true",
                    help="keep transformers' torch.compile of flex_attention (slow on the CPU)")
    _engine.add_negative_control(ap, "the config")
    return ap.parse_args(argv)


def main(argv=None, engine=None) -> int:
    """The command; engine lets the tests put a stand-in with engine / version / impls /
    left_out / describe / run(plan, impl) in transformers' place."""
    a = _args(argv)
    got = _engine.files_and_dtypes(PROG, a)
    if got is None:
        return 2
    files, dtypes = got
    try:
        engine = engine or Transformers(threads=a.threads, compile_flex=a.compile_flex)
    except ImportError as e:
        print(f"{PROG}: {_engine.first_line(e)}", file=sys.stderr)
        return 2
    wanted = IMPLS if a.impl == "all" else (a.impl,)
    for name in wanted:
        if name not in engine.impls:
            print(f"{PROG}: implementation {name} left out ({engine.left_out.get(name)})",
                  file=sys.stderr)
    run_on = [n for n in wanted if n in engine.impls]
    if not run_on:
        print(f"{PROG}: no selected implementation runs here", file=sys.stderr)
        return 2
    return _engine.run_variants(PROG, engine.engine, a, files, dtypes, run_on,
                                lambda n: f"transformers-{engine.version}-{n}-cpu",
                                engine.describe, lambda n: adapter(engine, n, a.window_offset))


if __name__ == "__main__":
    sys.exit(main())
