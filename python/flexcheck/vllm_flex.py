"""flexcheck.vllm_flex - vLLM's own FlexAttention backend run as a kernel under test on fixtures.

    python -m flexcheck.vllm_flex PATH... [--device cpu|cuda] [--build direct|slow|both]
                                          [--page-size N] [--dtype T[,T]] [--label L]
                                          [--overwrite] [--seed S]

PATH is a fixture file (docs/fixtures.md) or a directory searched for them, as for
flexcheck.torch_flex. Every case is run through vLLM's own objects, the way its model runner
drives them, and what vLLM returns is stored with add_tested under
tested/vllm-<version>-<build>-<device>:

  - configuration: vLLM's VllmConfig from its ModelConfig (a local Llama config.json written to a
    temporary directory: Hq, Hkv, head size and dtype of the case, nothing downloaded),
    CacheConfig (block_size = the page size, num_gpu_blocks set), SchedulerConfig and
    AttentionConfig; the --build slow run sets attention_config.flex_attn_{q,kv}_block_size to
    128, which is vLLM's own switch from the direct block-mask build to create_block_mask;
  - FlexAttentionBackend.validate_configuration: what vLLM's backend selector would refuse
    (attention sinks: "attention sinks not supported") is counted as refused by vLLM, with its
    words;
  - FlexAttentionMetadataBuilder.build on a CommonAttentionMetadata the runner fills as vLLM's
    GPU model runner does: query_start_loc (+ _cpu), seq_lens (the whole KV length, new tokens
    included), num_reqs, num_actual_tokens, max_query_len, max_seq_len, block_table_tensor,
    slot_mapping, causal; a FullAttentionSpec (decoder) or EncoderOnlyAttentionSpec;
  - FlexAttentionImpl (one per layer: its scale, sliding_window, soft-cap) and its forward; a
    soft-cap is refused by the impl's constructor (NotImplementedError, its message counted as
    refused by vLLM);
  - the LSE through the impl's out_transform hook (vLLM asks flex_attention for it only when
    the hook is set): where Inductor's CPU flex_attention refuses to return it, the output is
    stored without it (H5 not run) and the producer says so.

Batches as vLLM runs them: a packed case (cu_seqlens) is one batch of requests, a dense case
of B entries a batch of B requests, each request's queries the newest tokens of its sequence
(prefill when nq == nk, chunked prefill or decode when nq < nk: vLLM's decode_offset =
seq_lens - query_lens is the contract's bottom-right alignment). K/V go into a paged cache of
num_gpu_blocks pages of --page-size tokens: each request gets pages drawn at random (seeded)
from 1..num_gpu_blocks-1, never contiguous on purpose; block 0 (vLLM's null block), unused
pages and the unused tail of each last page hold garbage (NaN); block-table entries past a
request's pages are 0, as vLLM pads them. vLLM's cache write (reshape_and_cache_flash) is a
vllm._C op, absent from the CPU install, so the runner writes the cache by tensor indexing into
the slots that slot_mapping names (page_table / lay_kv below, checked against a numpy gather in
the tests). Non-causal cases whose every sequence has nq == nk run as vLLM runs bidirectional
encoders (AttentionType.ENCODER_ONLY, EncoderOnlyAttentionSpec: no KV cache, always vLLM's
generic build at 128 x 128); other non-causal cases as decoders with causal=False.

Layout files (the file attribute `layout`: consecutive layers of one model) run as one
attention group does in vLLM: ONE metadata object built once for the batch, one
FlexAttentionImpl per layer with its own window (and scale), each layer its own KV cache
through the same page table, layers called in model order and then a second time in the same
order. The first pass is stored as out, the second as out_rerun: forward rebuilds the block
mask whenever attn_metadata.sliding_window != impl.sliding_window, and that rebuild is what
`flexcheck check` judges (a stale mask shows as "the previous layer's mask" in its diagnosis;
a second pass that differs from the first fails H7).

What vLLM cannot express is not run and not counted as a failure or a refusal: a sequence with
more queries than keys (vLLM's queries are the newest tokens of their sequence), chunked local
attention (vLLM runs it as ChunkedLocalAttention, virtual batches of its own builder in a KV
group of its own, never through FlexAttentionImpl's mask), Dv != D (one head_size for K and V
in the cache), an explicit mask or bias (the M8 group's cases: FlexAttentionImpl takes no
mask_mod or score_mod of the caller's). Each such case is named on stderr with the reason and
counted as "not expressible in vLLM". Sequences with no query tokens are not requests (they have no output).

What runs: vLLM's Python code (config, builder, metadata, block-mask builds, impl) and the
flex_attention it calls, compiled by vLLM itself (flex_attention_compiled = torch.compile(
flex_attention, fullgraph=True) at import): on the CPU, Inductor's C++ flex_attention, which
walks the BlockMask's kv lists, never the Triton kernel vLLM runs on a GPU. vLLM sets dynamo's
recompile limit to 16 at import; every case is a new shape, so the runner raises the limits
(recompile_limit, accumulated_recompile_limit) after importing vLLM, or later cases would fall
back to the eager path (the unfused math path, which evaluates the mask_mod on the whole grid:
vLLM's kv lists would go untested). That the runs are compiled shows in what Inductor's CPU
lowering says of them (no LSE; its C++ compile errors, see the report).

Exit status: 0 every case was stored, refused by vLLM or not expressible; 1 some case could not
be run or stored (each named on stderr, the others still run); 2 bad arguments, no fixture file,
or --device cuda without CUDA (one line).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _engine
from ._engine import Counts, NotExpressible, sanitize_label
from .fixtures import add_tested, list_cases, read_case

PROG = "vllm_flex"
BUILDS = ("direct", "slow")
# vLLM's slow route: attention_config.flex_attn_{q,kv}_block_size (create_block_mask at these
# sizes). With a page size equal to it vLLM would take the direct build again.
SLOW_BLOCK = 128
# The runner's vLLM configuration bounds (persistent buffers are sized from them): the longest
# sequence and the most tokens one batch may have, and the most requests.
MAX_MODEL_LEN = 4096
MAX_BATCHED_TOKENS = 4096
MAX_NUM_SEQS = 16
# vLLM's direct build makes kv_indices [groups, q_block_size * cdiv(max_seq_len, page)] (its
# q_block_size is 16 there), and Inductor's CPU flex_attention asserts that the block mask
# covers the whole KV axis, which for vLLM is the whole cache: kv_indices width * page >=
# num_gpu_blocks * page ("KV seqlen must be smaller than the block_mask size in the KV
# dimension"). A cache of GPU-like size therefore fails on the CPU; the runner sizes the cache
# of each batch within that bound (cache_pages).
DIRECT_Q_BLOCK = 16


# ---- pure helpers (numpy, no torch, no vLLM): the batch, the page table, the cache ----

@dataclasses.dataclass(frozen=True)
class Request:
    """One vLLM request of a case: batch entry b, query tokens [q0, q1) and keys [k0, k1) of
    that entry's token axes (packed: the packed axes)."""
    b: int
    q0: int
    q1: int
    k0: int
    k1: int

    @property
    def nq(self) -> int:
        return self.q1 - self.q0

    @property
    def nk(self) -> int:
        return self.k1 - self.k0


def requests_of(case) -> List[Request]:
    """The requests vLLM runs for a case, in order: one per sequence of a packed case (from
    cu_seqlens), one per batch entry of a dense one. Sequences with no query token are no
    request (they have no output rows, and their keys are no other sequence's). NotExpressible
    when a sequence has more queries than keys: vLLM's queries are the newest tokens of their
    sequence (seq_lens counts them), so a query never precedes the sequence's first key."""
    b, _, lq, _ = case.q.shape
    lk = case.k.shape[2]
    if case.packed:
        cq = [int(x) for x in case.cu_seqlens_q]
        ck = [int(x) for x in case.cu_seqlens_k]
        seqs = [Request(0, cq[s], cq[s + 1], ck[s], ck[s + 1]) for s in range(len(cq) - 1)]
    else:
        seqs = [Request(i, 0, lq, 0, lk) for i in range(b)]
    for i, r in enumerate(seqs):
        if r.nq > r.nk:
            raise NotExpressible(
                f"sequence {i} has {r.nq} queries and {r.nk} keys: vLLM's queries are the "
                f"newest tokens of their sequence (seq_lens counts them), so nq <= nk")
    reqs = [r for r in seqs if r.nq > 0]
    if not reqs:
        raise NotExpressible("no sequence has a query token: nothing for vLLM to run")
    return reqs


def expressible(case) -> None:
    """NotExpressible naming what vLLM's FlexAttention path cannot state about the case."""
    d, dv = case.q.shape[3], case.v.shape[3]
    if dv != d:
        raise NotExpressible(f"head dims differ (D = {d}, Dv = {dv}): vLLM's FlexAttention "
                             f"cache holds K and V at one head_size")
    if case.chunk:
        raise NotExpressible(
            f"chunked local attention (C = {case.chunk}): vLLM runs it as ChunkedLocalAttention "
            f"(virtual batches from its own metadata builder, a KV-cache group of its own), "
            f"never through FlexAttentionImpl's mask")
    if getattr(case, "mask", None) is not None or getattr(case, "bias", None) is not None:
        raise NotExpressible(
            f"an explicit {'mask' if getattr(case, 'mask', None) is not None else 'bias'} "
            f"(docs/semantics.md section 8): FlexAttentionImpl builds its mask_mod from causal, "
            f"sliding window and chunking alone and takes no score_mod but the soft-cap (a "
            f"draft tree is vLLM's TreeAttention backend, not this one)")
    requests_of(case)


def encoder_only(case, reqs: Sequence[Request]) -> bool:
    """True when vLLM would run the case as a bidirectional encoder: non-causal and every
    request's queries are its whole sequence (no KV cache: AttentionType.ENCODER_ONLY)."""
    return not case.causal and all(r.nq == r.nk for r in reqs)


def page_table(nks: Sequence[int], page_size: int, num_blocks: int, width: int,
               rng: np.random.Generator) -> np.ndarray:
    """vLLM's block_table_tensor [R, width] int32 for requests of nks keys: request r's
    logical page i (its keys [i * page_size, (i + 1) * page_size)) is page bt[r, i] of the
    cache. The pages are drawn without replacement, in random order, from 1..num_blocks-1:
    block 0 is vLLM's null block and is never handed out; entries past a request's pages are 0,
    as vLLM pads them. ValueError when the pages or the width do not suffice."""
    need = [-(-int(n) // page_size) for n in nks]
    if max(need, default=0) > width:
        raise ValueError(f"a request needs {max(need)} pages, the block table has {width}")
    if sum(need) > num_blocks - 1:
        raise ValueError(f"the requests need {sum(need)} pages, the cache has {num_blocks - 1} "
                         f"besides the null block")
    pool = rng.permutation(np.arange(1, num_blocks, dtype=np.int64))
    bt = np.zeros((len(nks), width), dtype=np.int32)
    at = 0
    for r, n in enumerate(need):
        bt[r, :n] = pool[at:at + n]
        at += n
    return bt


def slots(bt: np.ndarray, r: int, positions: np.ndarray, page_size: int) -> np.ndarray:
    """slot_mapping of request r's tokens at `positions` (int64): page bt[r, p // page_size],
    offset p % page_size, as vLLM's slot_mapping = page * page_size + offset."""
    p = np.asarray(positions, dtype=np.int64)
    return bt[r, p // page_size].astype(np.int64) * page_size + p % page_size


def lay_kv(cache: np.ndarray, slot_ids: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
    """Write tokens' K and V [n, Hkv, D] into a cache laid out as vLLM's FlexAttention stores
    it, [num_blocks, page_size, Hkv, 2 * D] (K in [..., :D], V in [..., D:]), at slot_ids:
    what vLLM's reshape_and_cache_flash does with the same slot_mapping."""
    nb, ps, h, d2 = cache.shape
    d = d2 // 2
    flat = cache.reshape(nb * ps, h, d2)  # a view: the cache is contiguous
    if not np.shares_memory(flat, cache):
        raise ValueError("lay_kv: the cache must be contiguous")
    flat[slot_ids, :, :d] = k
    flat[slot_ids, :, d:] = v


def gather_kv(cache: np.ndarray, bt: np.ndarray, r: int, nk: int) -> Tuple[np.ndarray, np.ndarray]:
    """Request r's first nk keys and values read back through the block table (the test's
    independent reading of the cache: page by page, not through the slot formula)."""
    nb, ps, h, d2 = cache.shape
    d = d2 // 2
    pages = [cache[bt[r, i]] for i in range(-(-nk // ps))]
    seq = np.concatenate(pages, axis=0)[:nk] if pages else cache[:0, 0]
    return seq[:, :, :d], seq[:, :, d:]


def build_cache(reqs: Sequence[Request], k: np.ndarray, v: np.ndarray, bt: np.ndarray,
                page_size: int, num_blocks: int, garbage: float) -> np.ndarray:
    """The whole paged cache of one layer: every request's nk keys and values (k, v: the case's
    [B, Hkv, L, D]) at their slots, `garbage` everywhere else (the null block, unused pages,
    the tail of each last page). float32 for float32 and bfloat16 cases, float16 for float16
    (the values are the case's, exactly)."""
    _, h, _, d = k.shape
    cache = np.full((num_blocks, page_size, h, 2 * d), garbage, dtype=k.dtype)
    for r, q in enumerate(reqs):
        s = slots(bt, r, np.arange(q.nk), page_size)
        lay_kv(cache, s, k[q.b, :, q.k0:q.k1].transpose(1, 0, 2),
               v[q.b, :, q.k0:q.k1].transpose(1, 0, 2))
    return cache


def cache_pages(nks: Sequence[int], page_size: int, direct: bool) -> int:
    """num_gpu_blocks for a batch of requests of nks keys: the pages they need, the null block
    and spare pages of garbage (a quarter more, at least 2), rounded up to a multiple of 4 so
    that batches of similar sizes share cache shapes (and compiled kernels); for the direct
    build at most DIRECT_Q_BLOCK * cdiv(max nk, page), the bound Inductor's CPU flex_attention
    sets on vLLM's direct block mask. ValueError when the pages needed exceed it.

    Not larger: with one query token and a KV axis (the cache) of 512 tokens or more, torch
    2.14's CPU flex_attention switches to its flash-decoding template, which does not compile
    for a block mask without full blocks (vLLM's direct build), see _first_line. Batches that
    need that many pages still meet it (the quick export's 1 x 1000 decode cases)."""
    need = sum(-(-int(n) // page_size) for n in nks) + 1
    want = -(-(need + max(2, need // 4)) // 4) * 4
    if not direct:
        return want
    bound = DIRECT_Q_BLOCK * -(-max(int(n) for n in nks) // page_size)
    if need > bound:
        raise ValueError(f"{need} pages needed, more than the {bound} Inductor's CPU "
                         f"flex_attention takes with vLLM's direct block mask")
    return min(want, bound)


def new_token_slots(reqs: Sequence[Request], bt: np.ndarray, page_size: int) -> np.ndarray:
    """slot_mapping of a batch: each request's new tokens, positions nk - nq .. nk - 1."""
    parts = [slots(bt, r, np.arange(q.nk - q.nq, q.nk), page_size) for r, q in enumerate(reqs)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def default_label(version: str, build: str, device: str) -> str:
    return sanitize_label(f"vllm-{version}-{build}-{device}")


# ---- vLLM ----

def _configure_dynamo(torch) -> None:
    """vLLM sets torch._dynamo.config.recompile_limit = 16 when its flex_attention module is
    imported; each case is a new shape, and past the limit dynamo would run flex_attention
    eagerly (the eager path applies the mask_mod and ignores the BlockMask's kv lists). Raised
    after importing vLLM, whichever names this version has."""
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, 1 << 20)
    # Every case compiles for its own static shapes. With automatic dynamic shapes dynamo
    # recompiles a shape seen changing as symbolic, and Inductor's CPU flex_attention template
    # then emits C++ that does not compile (torch 2.14: "'cur_kvSplitSize4' was not declared in
    # this scope", a packed 400-token case after 113-token ones).
    cfg.automatic_dynamic_shapes = False


class _Layer:
    """Stand-in for vLLM's Attention layer module: forward reads only these attributes of it
    (the KV scales for the cache write, and the optional logical_mask_mod/block_sparsity_hint
    hooks, absent here as in a plain decoder layer)."""

    def __init__(self, torch, device):
        self._k_scale = torch.tensor(1.0, device=device)
        self._v_scale = torch.tensor(1.0, device=device)


class Vllm:
    """vLLM's objects for one build (direct or slow) on one device."""

    def __init__(self, build: str, device: str, page_size: int, tmpdir: str):
        import torch
        import vllm
        from vllm.config import (AttentionConfig, CacheConfig, CompilationConfig, ModelConfig,
                                 SchedulerConfig, VllmConfig)
        from vllm.v1.attention.backend import AttentionType, CommonAttentionMetadata
        from vllm.v1.attention.backends import flex_attention as fa
        from vllm.v1.kv_cache_interface import EncoderOnlyAttentionSpec, FullAttentionSpec

        _configure_dynamo(torch)
        self.torch, self.vllm, self.fa = torch, vllm, fa
        self.cfg = dict(AttentionConfig=AttentionConfig, CacheConfig=CacheConfig,
                        CompilationConfig=CompilationConfig, ModelConfig=ModelConfig,
                        SchedulerConfig=SchedulerConfig, VllmConfig=VllmConfig)
        self.AttentionType, self.CAM = AttentionType, CommonAttentionMetadata
        self.FullSpec, self.EncSpec = FullAttentionSpec, EncoderOnlyAttentionSpec
        self.build, self.device, self.page_size, self.tmpdir = build, device, page_size, tmpdir
        self.width = -(-MAX_MODEL_LEN // page_size)
        self.dtypes = {"float32": torch.float32, "float16": torch.float16,
                       "bfloat16": torch.bfloat16}
        self.builders: Dict[tuple, object] = {}
        self.layer = _Layer(torch, device)
        self.lse_refused: Optional[str] = None
        self.builds_seen = set()  # (direct_build) of every metadata built: said in the producer

    # configuration
    def _model_dir(self, hq: int, hkv: int, d: int, dtype: str) -> str:
        """A local Hugging Face config.json (Llama) with the case's heads, head size and dtype,
        for vLLM's ModelConfig to read offline; no weights (none are loaded)."""
        path = os.path.join(self.tmpdir, f"llama-h{hq}x{hkv}-d{d}-{dtype}")
        if not os.path.isdir(path):
            os.makedirs(path)
            cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                   "hidden_size": hq * d, "num_attention_heads": hq,
                   "num_key_value_heads": hkv, "head_dim": d, "intermediate_size": 4 * hq * d,
                   "num_hidden_layers": 1, "max_position_embeddings": MAX_MODEL_LEN,
                   "vocab_size": 256, "torch_dtype": dtype, "rms_norm_eps": 1e-5}
            with open(os.path.join(path, "config.json"), "w") as f:
                json.dump(cfg, f)
        return path

    def vllm_config(self, hq: int, hkv: int, d: int, dtype: str, num_blocks: int):
        c = self.cfg
        mc = c["ModelConfig"](model=self._model_dir(hq, hkv, d, dtype), dtype=dtype,
                              max_model_len=MAX_MODEL_LEN, skip_tokenizer_init=True)
        cc = c["CacheConfig"](block_size=self.page_size)
        sc = c["SchedulerConfig"](max_num_batched_tokens=MAX_BATCHED_TOKENS,
                                  max_num_seqs=MAX_NUM_SEQS, max_model_len=MAX_MODEL_LEN,
                                  is_encoder_decoder=False)
        ac = c["AttentionConfig"]()
        if self.build == "slow":
            ac.flex_attn_q_block_size = SLOW_BLOCK
            ac.flex_attn_kv_block_size = SLOW_BLOCK
        vc = c["VllmConfig"](model_config=mc, cache_config=cc, scheduler_config=sc,
                             attention_config=ac)
        vc.cache_config.num_gpu_blocks = num_blocks
        if vc.cache_config.block_size != self.page_size:
            raise RuntimeError(f"vLLM changed the page size {self.page_size} to "
                               f"{vc.cache_config.block_size}")
        return vc

    def builder(self, hq: int, hkv: int, d: int, dtype: str, encoder: bool, num_blocks: int):
        """One FlexAttentionMetadataBuilder per model shape and cache size, kept for the run (as
        vLLM keeps one per attention group: its persistent buffers, sized from num_gpu_blocks
        at the first build, are reused across batches)."""
        key = (hq, hkv, d, dtype, encoder, num_blocks)
        if key not in self.builders:
            vc = self.vllm_config(hq, hkv, d, dtype, num_blocks)
            spec_cls = self.EncSpec if encoder else self.FullSpec
            spec = spec_cls(block_size=self.page_size, num_kv_heads=hkv, head_size=d,
                            dtype=self.dtypes[dtype])
            self.builders[key] = self.fa.FlexAttentionMetadataBuilder(
                spec, ["layer0"], vc, self.torch.device(self.device))
        return self.builders[key]

    def refusal(self, case, encoder: bool) -> Optional[str]:
        """vLLM's backend selector's words for a case it would not give to FlexAttention."""
        fb = self.fa.FlexAttentionBackend
        at = self.AttentionType.ENCODER_ONLY if encoder else self.AttentionType.DECODER
        from vllm.platforms import current_platform
        reasons = fb.validate_configuration(
            head_size=case.q.shape[3], dtype=self.dtypes[case.dtype], kv_cache_dtype="auto",
            block_size=self.page_size, use_mla=False, has_sink=case.sinks is not None,
            use_sparse=False, use_mm_prefix=False, use_per_head_quant_scales=False,
            device_capability=current_platform.get_device_capability(), attn_type=at,
            has_sliding_window=case.window > 0, use_non_causal=not case.causal)
        return "; ".join(reasons) if reasons else None

    def impl(self, case, encoder: bool, window: Optional[int] = None, lse_box=None):
        """FlexAttentionImpl for one layer, as vLLM's Attention layer makes it: the case's heads,
        scale, sliding_window (|q - kv| < W; None for no window; `window` overrides the case's,
        for the negative controls) and soft-cap. NotImplementedError is vLLM refusing."""
        w = case.window if window is None else window
        kw = {}
        if lse_box is not None and not self.lse_refused:
            def out_transform(out, lse):
                lse_box.append(lse.detach().clone())
                return out
            kw["out_transform"] = out_transform
        return self.fa.FlexAttentionImpl(
            num_heads=case.q.shape[1], head_size=case.q.shape[3], scale=case.scale,
            num_kv_heads=case.k.shape[1], alibi_slopes=None, sliding_window=w or None,
            kv_cache_dtype="auto", logits_soft_cap=case.softcap or None,
            attn_type=self.AttentionType.ENCODER_ONLY if encoder else self.AttentionType.DECODER,
            **kw)

    # a batch
    def plan(self, case, reqs: Sequence[Request], encoder: bool, rng: np.random.Generator):
        """(num_gpu_blocks, block table) of a batch: its pages drawn at random (page_table)."""
        nks = [r.nk for r in reqs]
        nb = cache_pages(nks, self.page_size, self.build == "direct" and not encoder)
        return nb, page_table(nks, self.page_size, nb, self.width, rng)

    def metadata(self, case, reqs: Sequence[Request], encoder: bool, nb: int, bt: np.ndarray):
        torch, dev = self.torch, self.device
        nq = [r.nq for r in reqs]
        nk = [r.nq for r in reqs] if encoder else [r.nk for r in reqs]
        qsl = np.concatenate([[0], np.cumsum(nq)]).astype(np.int32)
        cam = self.CAM(
            query_start_loc=torch.from_numpy(qsl).to(dev),
            query_start_loc_cpu=torch.from_numpy(qsl),
            seq_lens=torch.tensor(nk, dtype=torch.int32, device=dev),
            num_reqs=len(reqs), num_actual_tokens=int(qsl[-1]), max_query_len=max(nq),
            max_seq_len=max(nk), block_table_tensor=torch.from_numpy(bt).to(dev),
            slot_mapping=torch.from_numpy(new_token_slots(reqs, bt, self.page_size)).to(dev),
            causal=bool(case.causal))
        b = self.builder(case.q.shape[1], case.k.shape[1], case.q.shape[3], case.dtype, encoder,
                         nb)
        md = b.build(common_prefix_len=0, common_attn_metadata=cam)
        self.builds_seen.add(bool(md.direct_build))
        return md

    def tokens(self, a: np.ndarray, reqs: Sequence[Request], dtype: str, kv: bool):
        """A case tensor [B, H, L, D] as vLLM's packed [T, H, D] of the requests' new tokens
        (queries, or for an encoder its keys/values: the same tokens)."""
        parts = [a[r.b, :, (r.k1 - r.nq if kv else r.q0):(r.k1 if kv else r.q1)]
                 .transpose(1, 0, 2) for r in reqs]
        t = self.torch.from_numpy(np.ascontiguousarray(np.concatenate(parts, axis=0)))
        return t.to(self.dtypes[dtype]).to(self.device)

    def cache(self, case, reqs, nb: int, bt, garbage: float):
        c = build_cache(reqs, case.k, case.v, bt, self.page_size, nb, garbage)
        t = self.torch.from_numpy(c).to(self.dtypes[case.dtype]).to(self.device)
        # vLLM's logical view [num_blocks, Hkv, page_size, 2 * D] of the cache stored as
        # [num_blocks, page_size, Hkv, 2 * D] (KVCacheLayout LBNHC): forward transposes back.
        return t.permute(0, 2, 1, 3)

    def forward(self, impl, md, q, k, v, kv_cache, lse_box):
        """One forward call; (out [T, Hq, D] on the CPU, lse [Hq, T] or None)."""
        torch = self.torch
        out = torch.full_like(q, float("nan"))  # rows vLLM does not write stay NaN (H3)
        lse_box.clear()
        try:
            impl.forward(self.layer, q, k, v, kv_cache, md, out)
        except Exception as e:
            # Inductor's CPU flex_attention: "torch.compile on CPU only supports inference and
            # `return_lse` is not supported yet". The hook is what asks for the LSE: without it
            # the same forward runs, and the output is judged without the LSE (H5 not run).
            why = next((ln.strip() for ln in str(e).splitlines()
                        if "return_lse" in ln and "not supported" in ln), None)
            if why is None or impl.out_transform is None:
                raise
            said = self.lse_refused is not None
            self.lse_refused = why[why.find("torch.compile"):] if "torch.compile" in why else why
            if not said:
                print(f"{PROG}: this backend returns no LSE ({self.lse_refused}): outputs stored "
                      f"without it (H5 not run)", file=sys.stderr)
            impl.out_transform = None
            lse_box.clear()
            impl.forward(self.layer, q, k, v, kv_cache, md, out)
        if self.device == "cuda":
            torch.cuda.synchronize()
        lse = lse_box[0][0].float().cpu() if lse_box else None
        return out.cpu(), lse


def unpack(case, reqs: Sequence[Request], out, lse):
    """vLLM's packed [T, Hq, D] output (and [Hq, T] LSE) as the case's layout: a packed case
    takes vLLM's [T, Hq, Dv] and [Hq, T] as they are (dropped sequences had no tokens);
    a dense one [B, Hq, Lq, Dv] and [B, Hq, Lq]."""
    if case.packed:
        return out, lse
    b, hq, lq, _ = case.q.shape
    o = out.reshape(b, lq, hq, -1).permute(0, 2, 1, 3)
    l = None if lse is None else lse.reshape(hq, b, lq).permute(1, 0, 2)
    return o, l


# ---- the command ----

def _args(argv):
    ap = argparse.ArgumentParser(
        prog="python -m flexcheck.vllm_flex",
        description="Run vLLM's FlexAttention backend (metadata builder, metadata, "
                    "FlexAttentionImpl) on every case of fixture files and store its output "
                    "under tested/vllm-<version>-<build>-<device> for `flexcheck check`.")
    _engine.add_common_args(ap, "vllm-<version>-<build>-<device>; with --build both, -<build> "
                                "is appended")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--build", default="both", choices=("direct", "slow", "both"),
                    help="vLLM's block-mask build: direct (its default: kv block = page "
                         "size), slow (attention_config.flex_attn_{q,kv}_block_size = 128: "
                         "create_block_mask), or both (two labels)")
    ap.add_argument("--page-size", type=int, default=16, metavar="N",
                    help="the KV cache's page (block) size, a multiple of 16 (default 16)")
    ap.add_argument("--seed", type=int, default=0, help="the page tables' random draw")
    ap.add_argument("--garbage", default="huge", choices=tuple(GARBAGE),
                    help="what fills the cache where no key is (the null block, unused pages, "
                         "each last page's tail): huge (1e30; float16 65504, default) or nan")
    ap.add_argument("--threads", type=int, metavar="N", help="torch.set_num_threads(N)")
    return ap.parse_args(argv)


def check_args(a) -> None:
    if a.page_size < 16 or a.page_size % 16 or a.page_size > MAX_MODEL_LEN:
        raise ValueError(f"--page-size {a.page_size}: must be a multiple of 16 (vLLM's "
                         f"FlexAttention kernel block sizes) up to {MAX_MODEL_LEN}")
    if a.build in ("slow", "both") and a.page_size == SLOW_BLOCK:
        raise ValueError(f"--page-size {SLOW_BLOCK} with the slow build: vLLM takes the "
                         f"direct build when the kv block size ({SLOW_BLOCK}) equals the page "
                         f"size")


GARBAGE = {"nan": {"float32": float("nan"), "float16": float("nan"), "bfloat16": float("nan")},
           # the largest finite float16; 1e30 as float32 and as bfloat16 (rounded to it)
           "huge": {"float32": 1e30, "float16": 65504.0, "bfloat16": 1e30}}


class Run(_engine.Run):
    """One build's run on the engine-runner core: its files, per-file and summary lines, counts
    and exit status are _engine.Run's; a file's cases are run here (file), since a layout file
    is one batch of one attention group, not one case after another."""

    def __init__(self, v: Vllm, label: str, garbage: str, overwrite: bool, seed: int,
                 dtypes: Optional[Tuple[str, ...]] = None):
        super().__init__(prog=PROG, engine="vLLM", label=label, adapter=None, dtypes=dtypes,
                         overwrite=overwrite, producer=(
                             f"vllm {v.vllm.__version__}, torch {v.torch.__version__}, "
                             f"{v.build} build, page {v.page_size}, {v.device}, {garbage} "
                             f"garbage"))
        self.v, self.garbage, self.seed = v, garbage, seed

    def producer_of(self, md, encoder: bool) -> str:
        v = self.v
        how = ("direct build (from_kv_blocks)" if md.direct_build
               else f"create_block_mask {md.q_block_size}x{md.kv_block_size}")
        if encoder:
            how = "encoder-only, " + how
        dev = v.device if v.device == "cpu" else f"{v.device} ({v.torch.cuda.get_device_name(0)})"
        text = (f"vllm {v.vllm.__version__} FlexAttentionImpl, {how}, page {v.page_size}; torch "
                f"{v.torch.__version__} {dev}, vLLM's compile; stand-ins: layer, KV write by "
                f"indexing (no vllm._C), local config.json; {self.garbage} garbage; Python "
                f"{platform.python_version()}")
        if v.lse_refused:
            text += "; no LSE (backend refused)"
        return text

    def rng(self, path: str, name: str) -> np.random.Generator:
        """The page-table draw of one batch: from the seed and the file and case names, so a
        case gets the same pages whatever else the run holds."""
        key = f"{os.path.basename(path)}/{name}".encode()
        return np.random.default_rng([self.seed, *key])

    def check_label(self, case) -> None:
        if self.label in case.tested and not self.overwrite:
            raise ValueError(f"tested/{self.label} exists; refusing to overwrite (--overwrite)")

    def gate(self, case, counts: Counts, path: str):
        """(requests, encoder) of a case vLLM can run; None, counted and said, when vLLM
        cannot state it or refuses it."""
        try:
            expressible(case)
            reqs = requests_of(case)
        except NotExpressible as e:
            counts["inexpressible"] += 1
            print(f"{PROG}: {path}: case {case.name}: not expressible in vLLM: {e}",
                  file=sys.stderr)
            return None
        enc = encoder_only(case, reqs)
        why = self.v.refusal(case, enc)
        if why is None:
            try:
                self.v.impl(case, enc)
            except NotImplementedError as e:
                why = str(e).strip()
        if why is not None:
            counts["refused"] += 1
            print(f"{PROG}: {path}: case {case.name}: refused by vLLM: {why}", file=sys.stderr)
            return None
        return reqs, enc

    def store(self, path, case, reqs, enc, md, run1, run2) -> None:
        out, lse = unpack(case, reqs, *run1)
        rerun, _ = unpack(case, reqs, *run2)
        # vLLM's backend runs flex_attention: it claims FlexAttention's rounding of P, which
        # the p-round designs then hold it to (docs/tolerance.md)
        add_tested(path, case.name, self.label, out, producer=self.producer_of(md, enc), lse=lse,
                   out_rerun=rerun, overwrite=self.overwrite, rounding="flexattention")

    def inputs(self, case, reqs, enc, nb, bt):
        v = self.v
        q = v.tokens(case.q, reqs, case.dtype, False)
        k = v.tokens(case.k, reqs, case.dtype, True)
        val = v.tokens(case.v, reqs, case.dtype, True)
        if enc:  # no KV cache: vLLM's forward reads key/value themselves
            kvc = v.torch.empty(0, dtype=q.dtype, device=q.device)
        else:
            kvc = v.cache(case, reqs, nb, bt, GARBAGE[self.garbage][case.dtype])
        return q, k, val, kvc

    def run_case(self, path: str, case, counts: Counts) -> None:
        """One case: its own batch, metadata and impl; forward twice (out, out_rerun)."""
        self.check_label(case)
        g = self.gate(case, counts, path)
        if g is None:
            return
        reqs, enc = g
        v = self.v
        nb, bt = v.plan(case, reqs, enc, self.rng(path, case.name))
        md = v.metadata(case, reqs, enc, nb, bt)
        box: list = []
        impl = v.impl(case, enc, lse_box=box)
        q, k, val, kvc = self.inputs(case, reqs, enc, nb, bt)
        run1 = v.forward(impl, md, q, k, val, kvc, box)
        run2 = v.forward(impl, md, q, k, val, kvc, box)
        self.store(path, case, reqs, enc, md, run1, run2)
        counts["stored"] += 1

    def layout(self, path: str, cases, counts: Counts, windows=None, stale=False) -> List[str]:
        """A layout file: its layers as one attention group of vLLM runs them (one metadata,
        an impl per layer, model order, then again). Returns the names of the layers stored.
        windows: {layer name: window given to its impl} (a negative control: W + 1); stale:
        from the second call on, each impl is made to believe the metadata's window is already
        its own, so forward never rebuilds and every layer runs on the mask the first layer
        built (a negative control: the per-layer rebuild suppressed)."""
        v = self.v
        first = cases[0]
        geo = lambda c: (c.q.shape[:3], c.k.shape, c.v.shape, c.dtype, c.causal,  # noqa: E731
                         None if c.cu_seqlens_q is None else (tuple(c.cu_seqlens_q),
                                                              tuple(c.cu_seqlens_k)))
        for c in cases[1:]:
            if geo(c) != geo(first):
                raise ValueError(f"layer {c.name}: shapes, dtype, causal or cu_seqlens differ "
                                 f"from {first.name}'s: not one batch of one attention group")
        runnable = []
        for c in cases:
            self.check_label(c)
            g = self.gate(c, counts, path)
            if g is not None:
                runnable.append((c, *g))
        if not runnable:
            return []
        reqs, enc = runnable[0][1], runnable[0][2]
        if any(e != enc for _, _, e in runnable):
            raise ValueError("layers differ in being encoder-only")
        nb, bt = v.plan(first, reqs, enc, self.rng(path, "layout"))
        md = v.metadata(first, reqs, enc, nb, bt)  # ONE metadata object for every layer
        layers = []
        for c, _, _ in runnable:
            box: list = []
            w = None if windows is None else windows.get(c.name)
            layers.append((c, v.impl(c, enc, window=w, lse_box=box), box,
                           self.inputs(c, reqs, enc, nb, bt)))
        runs: Dict[str, list] = {c.name: [] for c, *_ in layers}
        calls = 0
        for _ in range(2):  # model order, then again
            for c, impl, box, (q, k, val, kvc) in layers:
                if stale and calls:
                    impl.sliding_window = md.sliding_window
                runs[c.name].append(v.forward(impl, md, q, k, val, kvc, box))
                calls += 1
        for c, *_ in layers:
            self.store(path, c, reqs, enc, md, *runs[c.name])
            counts["stored"] += 1
        return [c.name for c, *_ in layers]

    def file(self, path: str, only=None, report=None) -> Counts:
        """Every case of the file (a layout file as one attention group); only and report
        are _engine.Run's and not used here (no --isolate)."""
        counts = Counts()
        names = list_cases(path)
        counts["cases"] = len(names)
        cases = []
        for name in names:
            try:
                c = read_case(path, name)
            except Exception as e:
                counts["errors"] += 1
                print(f"{PROG}: {path}: case {name}: {type(e).__name__}: {_first_line(e)}",
                      file=sys.stderr)
                continue
            if self.dtypes and c.dtype not in self.dtypes:
                counts["skipped"] += 1
                continue
            cases.append(c)
        if not cases:
            return counts
        if cases[0].layout and len(cases) + counts["skipped"] == len(names):
            try:
                self.layout(path, cases, counts)
            except Exception as e:
                n = len(cases) - counts["refused"] - counts["inexpressible"] - counts["stored"]
                counts["errors"] += n
                print(f"{PROG}: {path}: layout {cases[0].layout}: {n} layers not run: "
                      f"{type(e).__name__}: {_first_line(e)}", file=sys.stderr)
            return counts
        for c in cases:
            try:
                self.run_case(path, c, counts)
            except Exception as e:
                counts["errors"] += 1
                print(f"{PROG}: {path}: case {c.name}: {type(e).__name__}: {_first_line(e)}",
                      file=sys.stderr)
        return counts


def _first_line(e: BaseException) -> str:
    """The first line of an exception's message (vLLM's and Inductor's run to pages); the
    whole traceback on stderr with FLEXCHECK_VLLM_TRACE=1."""
    if os.environ.get("FLEXCHECK_VLLM_TRACE") == "1":
        import traceback

        traceback.print_exception(e, file=sys.stderr)
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    if not lines:
        return ""
    first = lines[0]
    if "C++ compile error" in first:
        # Inductor's message is the g++ command and its output: name the first error. Seen with
        # torch 2.14: its CPU flash-decoding template (one query token, a KV axis of at least
        # 512) reads full_kv_num_blocks, which a BlockMask without full blocks (vLLM's direct
        # build) does not have: "'full_kv_num_blocks' was not declared in this scope".
        err = next((ln.split("error:", 1)[1].strip() for ln in lines if "error:" in ln), None)
        if err:
            first += f" (first: {err})"
    return first[:400]


def main(argv=None) -> int:
    a = _args(argv)
    got = _engine.files_and_dtypes(PROG, a)
    if got is None:
        return 2
    files, dtypes = got
    try:
        check_args(a)
    except ValueError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        print(f"{PROG}: --device cuda: no CUDA device here (torch.cuda.is_available() is "
              f"False); run --device cpu", file=sys.stderr)
        return 2
    if a.threads:
        torch.set_num_threads(a.threads)
    # vLLM picks its platform at import: its CPU platform where there is no GPU.
    if a.device == "cpu":
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model config is local; nothing to fetch
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # its config advice is not news here
    builds = BUILDS if a.build == "both" else (a.build,)
    status = 0
    with tempfile.TemporaryDirectory(prefix="flexcheck-vllm-") as tmp:
        for build in builds:
            try:
                v = Vllm(build, a.device, a.page_size, tmp)
                ver = v.vllm.__version__
                if a.label:
                    label = sanitize_label(a.label + (f"-{build}" if len(builds) > 1 else ""))
                else:
                    label = default_label(ver, build, a.device)
            except (ImportError, RuntimeError, ValueError) as e:
                print(f"{PROG}: {type(e).__name__}: {_first_line(e)}", file=sys.stderr)
                return 2
            run = Run(v, label, a.garbage, a.overwrite, a.seed, dtypes)
            status = max(status, run.files(files))
    return status


if __name__ == "__main__":
    sys.exit(main())
