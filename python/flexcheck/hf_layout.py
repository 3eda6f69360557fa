"""flexcheck.hf_layout - layout files from real transformers models, every attention layer of one
forward captured and judged.

    python -m flexcheck.hf_layout OUTDIR [--model M[,M]] [--impl eager|sdpa|flex_attention|all]
                                         [--dtype float32|bfloat16[,..]] [--past P] [--steps L]
                                         [--window-offset N]

For each model (gemma3, gemma2, mistral, gpt_oss, llama4, modernbert) a tiny config is built here
(TINY: hidden 64, 2 to 6 layers with the family's sliding / full / chunked layer pattern, window
or chunk 8 so that it bites within the sequence) and the model made from it with random weights
(AutoModel.from_config: nothing is downloaded). A decoder first runs P tokens (--past) into a
DynamicCache(config=config), then one forward of L more tokens (--steps) with that cache; an
encoder (ModernBERT) one forward of P + L tokens. During that forward every attention layer's
call of its attention function (ALL_ATTENTION_FUNCTIONS.get_interface, the eager default
included) is recorded: q, k, v as the function got them (after RoPE, after the cache) and the
output it returned. Each layer is written as one case of OUTDIR/<model>-<impl>-<dtype>.h5 (the
file's layers in order, `layout` = hf-<model>), its output stored under
tested/transformers-<version>-<impl>-cpu, and the case's mask terms taken from the CONFIG, in
flexcheck's convention (docs/semantics.md section 2): a sliding layer's W is `sliding_window`
(kv > q - W in masking_utils), ModernBERT's is `local_attention // 2 + 1`, a Llama 4 chunked
layer's C is `attention_chunk_size`, a full layer none; the soft-cap is Gemma 2's
`attn_logit_softcapping`, the sinks gpt-oss's `sinks` parameter, the scale the module's
`scaling`. A mask transformers built for another layer than the one it was given to, or with
another window than its config says, fails `flexcheck check` on that layer. --window-offset N
writes W + N as the case's window (the negative control: check must fail the windowed layers).

Exit status: 0 every model ran and its file was written, or transformers refused it (a
ValueError, named: Gemma 2 and gpt-oss decline sdpa, flex_attention declines sinks on the CPU);
1 a model failed (named, the others still run); 2 bad arguments or no transformers.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
from typing import Dict, List, Optional

from . import _engine
from .fixtures import add_tested, write_case
from .hf_attention import IMPLS

PROG = "hf_layout"
# model -> (config class, its keyword arguments beside the common ones, causal)
TINY = {
    "gemma3": ("Gemma3TextConfig", dict(num_hidden_layers=6, sliding_window=8,
                                        query_pre_attn_scalar=16), True),
    "gemma2": ("Gemma2Config", dict(num_hidden_layers=2, sliding_window=8,
                                    attn_logit_softcapping=50.0, final_logit_softcapping=None,
                                    query_pre_attn_scalar=16), True),
    "mistral": ("MistralConfig", dict(num_hidden_layers=2, sliding_window=8), True),
    "gpt_oss": ("GptOssConfig", dict(num_hidden_layers=2, sliding_window=8, num_local_experts=4,
                                     num_experts_per_tok=2), True),
    "llama4": ("Llama4TextConfig", dict(num_hidden_layers=4, attention_chunk_size=8,
                                        intermediate_size_mlp=64, num_local_experts=2), True),
    "modernbert": ("ModernBertConfig", dict(num_hidden_layers=3, local_attention=8, pad_token_id=0,
                                            bos_token_id=1, eos_token_id=2, cls_token_id=1,
                                            sep_token_id=2,
                                            global_attn_every_n_layers=3), False),
}
COMMON = dict(vocab_size=64, hidden_size=64, intermediate_size=64, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=256)


def layer_terms(model: str, config, layer: int, module) -> Dict[str, object]:
    """The mask and score terms of one layer as the config states them, in flexcheck's
    convention (the module's text)."""
    kind = config.layer_types[layer] if getattr(config, "layer_types", None) else None
    # the scale each family documents: Gemma's query_pre_attn_scalar ** -0.5, else
    # head_dim ** -0.5 (docs/semantics.md section 2)
    pre = getattr(config, "query_pre_attn_scalar", None)
    t: Dict[str, object] = dict(causal=TINY[model][2], window=0, chunk=0,
                                scale=float(pre if pre else module.head_dim) ** -0.5)
    if kind == "sliding_attention" or (kind is None and config.sliding_window):
        if model == "modernbert":  # abs(d) <= local_attention // 2
            t["window"] = config.local_attention // 2 + 1
        else:                      # kv > q - sliding_window
            t["window"] = int(config.sliding_window)
    elif kind == "chunked_attention":
        t["chunk"] = int(config.attention_chunk_size)
    cap = getattr(config, "attn_logit_softcapping", None)
    if cap:
        t["softcap"] = float(cap)
    if getattr(module, "sinks", None) is not None:
        t["sinks"] = module.sinks.detach().float().numpy()
    return t


class Capture:
    """Records every attention function call of a forward: {layer: (q, k, v, out)}, while on."""

    def __init__(self, modeling_utils):
        self.cls = type(modeling_utils.ALL_ATTENTION_FUNCTIONS)
        self.real = self.cls.get_interface
        self.calls: Dict[int, tuple] = {}
        self.on = False

    def __enter__(self):
        cap, real = self, self.real

        def get_interface(mapping, impl, default):
            fn = real(mapping, impl, default)

            def recorded(module, q, k, v, mask, *args, **kw):
                out, w = fn(module, q, k, v, mask, *args, **kw)
                if cap.on:
                    cap.calls[module.layer_idx] = (module, q.detach(), k.detach(), v.detach(),
                                                   out.detach().transpose(1, 2).contiguous())
                return out, w
            return recorded
        self.cls.get_interface = get_interface
        return self

    def __exit__(self, *exc):
        self.cls.get_interface = self.real


def run_model(model: str, impl: str, dtype: str, past: int, steps: int, outdir: str,
              window_offset: int = 0, out=sys.stdout) -> str:
    """One forward of the model, its layers written to OUTDIR/<model>-<impl>-<dtype>.h5; the
    file's path."""
    import torch
    import transformers
    from transformers import modeling_utils
    from transformers.cache_utils import DynamicCache
    torch.compiler.set_stance("force_eager")  # flex_attention uncompiled, as hf_attention's default
    torch.manual_seed(0)
    cls_name, kw, causal = TINY[model]
    config = getattr(transformers, cls_name)(**COMMON, **kw)
    try:
        net = transformers.AutoModel.from_config(config, attn_implementation=impl).eval()
    except ValueError as e:  # "GptOssModel does not support an attention implementation
        raise _engine.Refused(_engine.first_line(e)) from e  # through ... sdpa
    tdt = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    net = net.to(tdt)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, COMMON["vocab_size"], (1, past + steps), generator=g)
    with Capture(modeling_utils) as cap, torch.no_grad():
        try:
            if causal:
                cache = DynamicCache(config=config)
                if past:
                    net(input_ids=ids[:, :past], cache=cache, use_cache=True)
                cap.on = True
                net(input_ids=ids[:, past:], cache=cache, use_cache=True)
            else:
                cap.on = True
                net(input_ids=ids)
        except ValueError as e:  # "Attention sinks cannot be run on CPU with flex attention"
            raise _engine.Refused(_engine.first_line(e)) from e
    n = config.num_hidden_layers
    if sorted(cap.calls) != list(range(n)):
        raise RuntimeError(f"{model}: captured layers {sorted(cap.calls)}, expected 0..{n - 1}")
    path = os.path.join(outdir, f"{model}-{impl}-{dtype}.h5")
    if os.path.exists(path):
        os.remove(path)
    label = _engine.sanitize_label(f"transformers-{transformers.__version__}-{impl}-cpu")
    producer = (f"transformers {transformers.__version__} (torch {torch.__version__}), "
                f"{type(net).__name__} from a tiny {cls_name}, attn_implementation={impl}, "
                f"one forward, CPU, Python {platform.python_version()}")
    if window_offset:
        producer += f", NEGATIVE CONTROL: the case's W + {window_offset}"
    for layer in range(n):
        module, q, k, v, o = cap.calls[layer]
        t = layer_terms(model, config, layer, module)
        first = past + steps - k.shape[2] if causal else 0  # the first key's position
        if t["chunk"] and first % t["chunk"]:
            # flexcheck's chunks count from the case's first key (docs/semantics.md 2)
            raise ValueError(f"layer {layer}: the cache hands over keys from position {first}, "
                             f"not a multiple of C = {t['chunk']}: choose --past so that it is")
        if t["window"] and window_offset:
            t["window"] += window_offset
        name = f"layer{layer:02d}"
        write_case(path, name, q, k, v, dtype=dtype, layout=f"hf-{model}",
                   generator=f"flexcheck.hf_layout ({cls_name})", **t)
        add_tested(path, name, label, o, producer=producer)
        what = (f"W={t['window']}" if t["window"] else f"C={t['chunk']}" if t["chunk"]
                else "full")
        print(f"{PROG}: {path}: {name}: q {list(q.shape)} k {list(k.shape)} {what}", file=out)
    return path


def _args(argv):
    ap = argparse.ArgumentParser(prog=f"python -m flexcheck.{PROG}",
                                 description="Layout files from tiny random-weight transformers "
                                             "models, every attention layer of one forward.")
    ap.add_argument("outdir")
    ap.add_argument("--model", action="append", metavar="M[,M]",
                    help=f"models (default all: {', '.join(TINY)})")
    ap.add_argument("--impl", choices=IMPLS + ("all",), default="all")
    ap.add_argument("--dtype", action="append", metavar="T[,T]",
                    help="float32 (default), bfloat16")
    ap.add_argument("--past", type=int, default=23, help="tokens cached before the captured "
                                                         "forward (decoders)")
    ap.add_argument("--steps", type=int, default=12, help="tokens of the captured forward")
    _engine.add_negative_control(ap, "the config")
    return ap.parse_args(argv)


def _list(values: Optional[List[str]], allowed, what: str, default) -> List[str]:
    out: List[str] = []
    for v in values or []:
        for t in v.split(","):
            if t not in allowed:
                raise ValueError(f"{what} {t!r}: must be one of {', '.join(allowed)}")
            out.append(t)
    return out or list(default)


def main(argv=None) -> int:
    a = _args(argv)
    try:
        models = _list(a.model, tuple(TINY), "--model", TINY)
        dtypes = _list(a.dtype, ("float32", "bfloat16"), "--dtype", ("float32",))
        if a.past < 0 or a.steps < 1:
            raise ValueError(f"--past {a.past} --steps {a.steps}: need past >= 0, steps >= 1")
    except ValueError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"{PROG}: {_engine.first_line(e)}", file=sys.stderr)
        return 2
    os.makedirs(a.outdir, exist_ok=True)
    impls = IMPLS if a.impl == "all" else (a.impl,)
    status = 0
    for model in models:
        for impl in impls:
            for dt in dtypes:
                try:
                    run_model(model, impl, dt, a.past, a.steps, a.outdir, a.window_offset)
                except _engine.Refused as e:
                    print(f"{PROG}: {model} {impl} {dt}: refused by transformers: "
                          f"{_engine.first_line(e)}", file=sys.stderr)
                except Exception as e:  # one model's failure is named; the others run
                    print(f"{PROG}: {model} {impl} {dt}: {type(e).__name__}: "
                          f"{_engine.first_line(e)}", file=sys.stderr)
                    status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
