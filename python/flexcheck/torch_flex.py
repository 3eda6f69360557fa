"""flexcheck.torch_flex - PyTorch's flex_attention run as a kernel under test on fixture files.

    python -m flexcheck.torch_flex PATH... --device cpu|cuda [--compile] [--dtype T[,T]]
                                           [--label L] [--overwrite] [--threads N]
                                           [--window-offset N]

PATH is a fixture file (docs/fixtures.md) or a directory searched for them (*.h5, *.hdf5,
recursively, in sorted order). For every case (read with read_case) this runs PyTorch's
`flex_attention` on the case's stored inputs, in the case's dtype, with the case's scale,
`enable_gqa` when Hq != Hkv and a block mask from `create_block_mask` at the case's q/kv block
sizes (compiled with flex_attention under --compile), and stores what PyTorch returned with
add_tested under tested/<label>:

  - out: the output as PyTorch returned it (float32, float16 or bfloat16), never patched
    (rows with no allowed key included: what PyTorch returns there is what is judged);
  - lse: PyTorch's natural-log LSE (return_aux=AuxRequest(lse=True) where flex_attention
    has it, else return_lse=True; told by the signature, not the version string);
  - out_rerun: a second call on the same inputs and block mask (H7: bitwise determinism);
  - block_mask: PyTorch's own BlockMask, which `flexcheck check` holds to the case's mask.

Score terms (docs/semantics.md section 7, fixture schema 2):
  - softcap c: a score_mod c * tanh(score / c), as Gemma 2 users of flex_attention write it
    (Hugging Face's flex_attention integration does exactly this); PyTorch hands score_mod the
    scaled score, so this is the contract's c * tanh(s / c) before masking and softmax.
  - sinks: PyTorch's flex_attention has no sink argument (2.7.1's signature: query, key,
    value, score_mod, block_mask, scale, enable_gqa, return_lse, kernel_options; 2.15's
    documented one adds only return_aux), and a sink cannot be a score_mod (it is a column
    with no key). So they are
    applied as gpt-oss ports of flex_attention do (Hugging Face's flex_attention_forward with
    s_aux), on PyTorch's output and LSE: see apply_sinks. What is stored for such a case is a
    post-process of PyTorch's output, not PyTorch's kernel, and the producer string says so.

Explicit terms (docs/semantics.md section 8, fixture schema 3), as FlexAttention users write
them, and named in the producer string:
  - mask [Bm, Hm, Lq, Lk]: ANDed into the mask_mod as a lookup mask[b', h', q_idx, kv_idx]
    (xterm_lookup: b' = 0 when Bm == 1 else b, h' likewise) at the stored token indices (a
    packed case's packed grid, as the families read it), clamped into range on PyTorch's
    padded grid where the families refuse the pair anyway; with Bm = B or Hm = Hq the block
    mask is built over those dims, since one built at b = h = 0 would drop other heads' blocks.
  - bias [Bm, Hm, Lq, Lk]: the score_mod adds bias[b', h', q_idx, kv_idx] after the soft-cap
    (the contract's order). A masked key's bias never reaches a row (the mask removes it), and
    sinks need nothing more: flex_attention's LSE holds the bias, and the sink has none.

The mask_mod is written from docs/semantics.md section 2, not from flexcheck's C code: per
sequence, bottom-right alignment p_q = i + (nk - nq), p_k = j; packed batches through
document-id lookup tensors built from cu_seqlens; causal p_k <= p_q, sliding window
|p_q - p_k| < W, chunk floor(p_q / C) == floor(p_k / C); tokens past Lq / Lk (PyTorch pads the
grid to whole blocks) never allowed. This module computes no reference: PyTorch is the thing
judged, by `flexcheck check` against flexcheck's float64 oracle.

The label defaults to torch-<version>-<device>[-compiled] (sanitized to [A-Za-z0-9._-], at most
64 characters); the producer string names torch's version, the device, compiled or eager and
the Python version. Files are modified in place through add_tested (atomic per case).

Exit status: 0 every selected case was stored or refused by PyTorch (REFUSALS: a configuration
it does not run, named on stderr and counted, nothing stored); 1 some case could not be run or
stored (each named on stderr, the others still stored); 2 bad arguments or no fixture file
found.
"""
from __future__ import annotations

import argparse
import inspect
import json
import platform
import sys
import warnings
from typing import Optional, Tuple

import numpy as np

from . import _engine
from ._engine import Refused, Result

PROG = "torch_flex"


# ---- pure helpers (no torch) ----

# the label, file and dtype rules every runner shares (flexcheck._engine)
sanitize_label = _engine.sanitize_label
discover = _engine.discover
parse_dtypes = _engine.parse_dtypes


def default_label(torch_version: str, device: str, compiled: bool) -> str:
    """torch-<version>-<device>[-compiled], sanitized."""
    return sanitize_label(f"torch-{torch_version}-{device}" + ("-compiled" if compiled else ""))


def producer_string(torch_version: str, device: str, device_name: Optional[str],
                    compiled: bool, python_version: Optional[str] = None) -> str:
    """Free text for the producer attribute: torch version, device, compiled or eager, Python."""
    dev = f"{device} ({device_name})" if device_name else device
    mode = "compiled (torch.compile)" if compiled else "eager"
    py = python_version or platform.python_version()
    return f"torch {torch_version} flex_attention, {dev}, {mode}, Python {py}"


# ---- torch ----

def _torch():
    import torch  # only here: the helpers above and the tests of them run without torch

    return torch


def _fa():
    from torch.nn.attention import flex_attention as fa

    return fa


def has_return_aux(fa=None) -> bool:
    """True when flex_attention takes return_aux=AuxRequest(...) (PyTorch 2.9 and later),
    told by feature: return_lse is deprecated there."""
    fa = fa or _fa()
    try:
        params = inspect.signature(fa.flex_attention).parameters
    except (TypeError, ValueError):
        return False
    return hasattr(fa, "AuxRequest") and "return_aux" in params


def doc_ids(torch, cu, length: int, device):
    """[max(length, 1)] int64: the sequence s with cu[s] <= t < cu[s + 1] of every token t
    (right=True skips the repeated entries of empty sequences). With no token (length 0) the
    one placeholder entry would be R, past the last sequence: clamped to R - 1 so that every
    per-sequence lookup stays in range (the mask_mod refuses such a token as not real)."""
    ids = torch.searchsorted(cu, torch.arange(max(length, 1), device=device), right=True) - 1
    return ids.clamp(0, len(cu) - 2)


def xterm_lookup(t, b, h, q, kv):
    """t[b', h', q, kv] of an explicit term t [Bm, Hm, Lq, Lk] (docs/semantics.md section 8):
    b' = 0 when Bm == 1 else b, h' likewise (PyTorch's broadcast of a dim of 1). h is the
    query head, as flex_attention's mask_mod and score_mod receive it (Hm is 1 or Hq). q and
    kv must already be in range: PyTorch pads its grid to whole blocks."""
    return t[b if t.shape[0] > 1 else 0, h if t.shape[1] > 1 else 0, q, kv]


def make_mask_mod(torch, *, causal: bool, window: int, chunk: int, lq: int, lk: int,
                  cu_q=None, cu_k=None, device="cpu", mask=None):
    """The mask_mod of docs/semantics.md section 2 on the (packed) token grid of one batch
    entry: query token q_idx may use key token kv_idx when both are real tokens (q_idx < Lq,
    kv_idx < Lk), of the same sequence, and every switched-on term allows the pair at the
    positions p_q = i + (nk - nq), p_k = j within that sequence. cu_q / cu_k: the packed
    batch's offsets (None: one sequence of Lq queries and Lk keys). mask: the case's explicit
    mask, a bool tensor [Bm, Hm, Lq, Lk] on device (section 8), ANDed in by xterm_lookup at
    the stored token indices (a packed case's grid is the packed tokens, as q_idx is here)."""
    if cu_q is None:
        cu_q, cu_k = [0, lq], [0, lk]
    cq = torch.as_tensor([int(x) for x in cu_q], dtype=torch.int64, device=device)
    ck = torch.as_tensor([int(x) for x in cu_k], dtype=torch.int64, device=device)
    seq_q, seq_k = doc_ids(torch, cq, lq, device), doc_ids(torch, ck, lk, device)
    shift = (ck[1:] - ck[:-1]) - (cq[1:] - cq[:-1])  # nk - nq of every sequence
    last_q, last_k = max(lq - 1, 0), max(lk - 1, 0)
    # W and C enter as 0-d tensors, not ints: torch.compile guards a captured int by its value
    # and a tensor by its shape and dtype, so cases that differ only in W or C (a window-edge
    # file's W-1, W, W+1) reuse one compiled kernel. Which terms are on stays a Python choice.
    w = torch.as_tensor(window, dtype=torch.int64, device=device)
    c = torch.as_tensor(max(chunk, 1), dtype=torch.int64, device=device)
    # With no query or no key there is no pair to look up (and no index in range): `real`
    # alone refuses the whole padded grid.
    has_mask = mask is not None and lq > 0 and lk > 0

    def mask_mod(b, h, q_idx, kv_idx):
        real = (q_idx < lq) & (kv_idx < lk)
        qi = q_idx.clamp(0, last_q)  # padded tokens looked up in range, then refused by `real`
        ki = kv_idx.clamp(0, last_k)
        sq, sk = seq_q[qi], seq_k[ki]
        p_q = qi - cq[sq] + shift[sq]
        p_k = ki - ck[sk]
        ok = real & (sq == sk)
        if causal:
            ok = ok & (p_k <= p_q)
        if window:
            ok = ok & ((p_q - p_k).abs() < w)
        if chunk:
            ok = ok & (torch.div(p_q, c, rounding_mode="floor")
                       == torch.div(p_k, c, rounding_mode="floor"))
        if has_mask:  # looked up at the clamped indices; a padded pair is refused by `real`
            ok = ok & xterm_lookup(mask, b, h, qi, ki)
        return ok

    return mask_mod


def softcap_score_mod(torch, cap: float, device="cpu"):
    """Gemma 2's logit soft-cap as a flex_attention score_mod: score (already scaled by
    PyTorch) becomes cap * tanh(score / cap), the form Gemma 2 ports write. The cap is a 0-d
    float32 tensor, for the reason make_mask_mod's W is (one compiled kernel for every cap); a
    0-d tensor takes part in type promotion as a Python float does (the score keeps its dtype,
    the cap is used in it), so the arithmetic is the same."""
    c = torch.as_tensor(cap, dtype=torch.float32, device=device)

    def score_mod(score, b, h, q_idx, kv_idx):
        return c * torch.tanh(score / c)

    return score_mod


def bias_score_mod(torch, bias, lq: int, lk: int, inner=None):
    """The explicit bias (docs/semantics.md section 8) as the additive score_mod FlexAttention
    users write: score + bias[b', h', q_idx, kv_idx] (xterm_lookup), after `inner` (the
    soft-cap) when given: the contract adds the bias after the cap. bias: float32 tensor
    [Bm, Hm, Lq, Lk] on the device. PyTorch calls score_mod on its padded grid too (the
    result is masked there), so the indices are clamped into range as make_mask_mod's are.
    A masked key's bias never reaches a row: the block mask's mask_mod removes the pair."""
    last_q, last_k = max(lq - 1, 0), max(lk - 1, 0)

    def score_mod(score, b, h, q_idx, kv_idx):
        s = score if inner is None else inner(score, b, h, q_idx, kv_idx)
        return s + xterm_lookup(bias, b, h, q_idx.clamp(0, last_q), kv_idx.clamp(0, last_k))

    return score_mod


def apply_sinks(torch, out, lse, sinks):
    """(out', lse') with per-head sink logits applied on top of flex_attention's result.

    flex_attention has no sink argument, so gpt-oss ports rescale its output afterwards
    (Hugging Face transformers, integrations/flex_attention.py, flex_attention_forward with
    s_aux): the sink adds e^sink to the softmax denominator and nothing to the numerator, so
        lse' = logaddexp(lse, sink),   out' = out * exp(lse - lse').
    This is a post-process of PyTorch's output, not PyTorch's kernel. Done in float32 (the
    LSE's type; out widened, the product rounded once back to out's dtype). Hugging Face casts
    the LSE to the value dtype first; at bfloat16 that rounding alone moves the rescale by
    about 2^-9 * |lse| relative, and the gate would then judge the cast rather than
    flex_attention. A row with no allowed
    key comes back from PyTorch as out 0, lse -inf: then lse' = sink and out' = 0 * 0 = 0, the
    contract's answer (docs/semantics.md section 7), with nothing patched (a NaN row stays
    NaN: it is what the gate judges)."""
    s = torch.as_tensor(sinks, dtype=torch.float32, device=lse.device).view(1, -1, 1)
    lse32 = lse.to(torch.float32)
    lse2 = torch.logaddexp(lse32, s.expand_as(lse32))
    factor = torch.exp(lse32 - lse2).unsqueeze(-1)
    return (out.to(torch.float32) * factor).to(out.dtype), lse2


# ---- the natural mods of a case's mask_rule (the M8 group, ci/xcases.h) ----
#
# A case exported with attribute mask_rule states the rule that made its explicit mask and bias
# (docs/fixtures.md). For those the runner passes flex_attention what an engine author writes
# for the rule, computed from the rule's parameters and never from the stored bits: the bits
# are what `check` judges PyTorch against. Each mod indexes its tables at clamped indices
# (PyTorch evaluates mask_mod on its padded grid; the families' `real` refuses those pairs).


def prefix_lm_mask_mod(torch, rule, device):
    """PaliGemma's prefix-LM: bidirectional over the prefix, causal after: (kv < prefix[b]) |
    (kv <= q)."""
    prefix = torch.as_tensor(rule["prefix"], dtype=torch.int64, device=device)

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx < prefix[b]) | (kv_idx <= q_idx)

    return mask_mod


def alibi_score_mod(torch, rule, device, inner=None):
    """ALiBi (BLOOM's slopes 2^(-8(h+1)/H)) as score_mod: score + slope[h] * (p_k - p_q), the
    query at p_q = q_idx + q_offset (bottom-right), after `inner` (the soft-cap): the contract
    adds a bias after the cap. In float32: a power-of-two slope times an integer is exact."""
    slope = torch.as_tensor(rule["slopes"], dtype=torch.float32, device=device)
    off = int(rule["q_offset"])

    def score_mod(score, b, h, q_idx, kv_idx):
        s = score if inner is None else inner(score, b, h, q_idx, kv_idx)
        return s + slope[h] * (kv_idx - (q_idx + off))

    return score_mod


def tree_ancestors(parents) -> np.ndarray:
    """bool [B, T, T]: anc[b, i, j] when draft token j is on draft i's path to the root (i
    itself included), from each entry's parent array (-1 at the root)."""
    par = np.asarray(parents, dtype=np.int64)
    anc = np.zeros(par.shape + par.shape[1:], dtype=bool)
    for b in range(par.shape[0]):
        for i in range(par.shape[1]):
            j = i
            while j >= 0:
                anc[b, i, j] = True
                j = par[b, j]
    return anc


def tree_mask_mod(torch, rule, device):
    """A speculative-decoding draft tree as vLLM's tree attention and SGLang's EAGLE build it:
    every draft query sees the context keys, and the draft keys through an ancestor table
    (tree_ancestors). Key kv is draft token kv - context; query q_idx is draft token q_idx."""
    n = int(rule["context"])
    anc = torch.from_numpy(tree_ancestors(rule["parents"])).to(device)
    last = anc.shape[1] - 1

    def mask_mod(b, h, q_idx, kv_idx):
        draft = anc[b, q_idx.clamp(0, last), (kv_idx - n).clamp(0, last)]
        return (kv_idx < n) | ((kv_idx >= n) & draft)

    return mask_mod


def doc_window_mask_mod(torch, rule, device):
    """Documents held dense on one row, each with its own window: document ids from the
    documents' lengths, then same document and q - kv < window[doc[q]] (the causal family is
    the case's own)."""
    lengths = torch.as_tensor(rule["doc_lengths"], dtype=torch.int64, device=device)
    doc = torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths)
    win = torch.as_tensor(rule["windows"], dtype=torch.int64, device=device)
    last = doc.shape[0] - 1

    def mask_mod(b, h, q_idx, kv_idx):
        qi, ki = q_idx.clamp(0, last), kv_idx.clamp(0, last)
        return (doc[qi] == doc[ki]) & (qi - ki < win[doc[qi]])

    return mask_mod


def gemma3_image_mask_mod(torch, rule, length: int, device):
    """A Gemma 3 local layer as transformers writes it (models/gemma3/modeling_gemma3.py:
    token_type_ids 1 on image tokens, group ids = cumsum(image starts) - 1 on them, -1 on
    text; token_type_ids_mask_function OR'ed with masking_utils' causal sliding window):
    (kv <= q & kv > q - W) | (group[b, q] == group[b, kv] & group[b, q] >= 0)."""
    spans = rule["image_spans"]
    tt = torch.zeros(len(spans), length, dtype=torch.int64, device=device)
    for b, entry in enumerate(spans):
        for lo, hi in entry:
            tt[b, lo:hi] = 1
    is_image = tt == 1
    prev = torch.nn.functional.pad(is_image, (1, 0), value=False)[:, :-1]
    group = torch.cumsum((is_image & ~prev).to(torch.int64), dim=1) - 1
    group = torch.where(is_image, group, torch.full_like(group, -1))
    w = int(rule["window"])
    last = length - 1

    def mask_mod(b, h, q_idx, kv_idx):
        gq, gk = group[b, q_idx.clamp(0, last)], group[b, kv_idx.clamp(0, last)]
        return ((kv_idx <= q_idx) & (kv_idx > q_idx - w)) | ((gq == gk) & (gq >= 0))

    return mask_mod


MASK_RULES = ("prefix_lm", "tree", "doc_window", "gemma3_image")
SCORE_RULES = ("alibi",)


def case_rule(case):
    """The case's mask_rule as a dict when it names a rule this runner writes mods for, else
    None (then the stored bits are used, as for any file). A rule text that is not JSON, or a
    known rule missing a parameter, is a ValueError naming the attribute."""
    if not case.mask_rule:
        return None
    try:
        rule = json.loads(case.mask_rule)
    except ValueError as e:
        raise ValueError(f"attribute mask_rule: not JSON ({e})") from None
    if not isinstance(rule, dict) or rule.get("rule") not in MASK_RULES + SCORE_RULES:
        return None
    return rule


def rule_mask_mod(torch, rule, case, device):
    """The natural mask_mod of a mask rule (MASK_RULES); None for a score rule."""
    name = rule["rule"]
    if name == "prefix_lm":
        return prefix_lm_mask_mod(torch, rule, device)
    if name == "tree":
        return tree_mask_mod(torch, rule, device)
    if name == "doc_window":
        return doc_window_mask_mod(torch, rule, device)
    if name == "gemma3_image":
        return gemma3_image_mask_mod(torch, rule, case.k.shape[2], device)
    return None


def case_mask_mod(torch, case, device, window_offset: int = 0):
    """The case's mask_mod: its families AND its explicit mask: the rule's natural mask_mod
    when the case names one (case_rule), else the stored bits (case.mask) looked up. The
    family window is W + window_offset (--window-offset, the negative control)."""
    rule = case_rule(case)
    use_bits = rule is None and case.mask is not None
    mask = torch.from_numpy(case.mask).to(device) if use_bits else None
    window = case.window + window_offset if case.window else 0
    fam = make_mask_mod(torch, causal=case.causal, window=window, chunk=case.chunk,
                        lq=case.q.shape[2], lk=case.k.shape[2], cu_q=case.cu_seqlens_q,
                        cu_k=case.cu_seqlens_k, device=device, mask=mask)
    mm = None if rule is None else rule_mask_mod(torch, rule, case, device)
    if mm is None:
        return fam

    def mask_mod(b, h, q_idx, kv_idx):
        return fam(b, h, q_idx, kv_idx) & mm(b, h, q_idx, kv_idx)

    return mask_mod


def case_score_mod(torch, case, device):
    """The case's score_mod: the soft-cap, then the explicit bias (ALiBi's natural score_mod
    when the case's rule is alibi, else the stored bias looked up); None when it has neither.
    (Sinks are not a score_mod: apply_sinks, from the LSE, which holds the bias; the sink
    itself has none, as the contract says.)"""
    sm = softcap_score_mod(torch, case.softcap, device) if case.softcap else None
    rule = case_rule(case)
    if rule is not None and rule["rule"] == "alibi":
        return alibi_score_mod(torch, rule, device, inner=sm)
    if case.bias is not None and case.bias.size:  # empty: no pair, nothing to look up
        bias = torch.from_numpy(case.bias).to(device)
        sm = bias_score_mod(torch, bias, case.q.shape[2], case.k.shape[2], inner=sm)
    return sm


def _configure_dynamo(torch) -> None:
    """Every case is a new shape and a new mask_mod closure: dynamo's default recompile limit
    (8) would otherwise make torch.compile fall back to running the function eagerly, and a
    "compiled" label would then be false. The option's name changed (cache_size_limit ->
    recompile_limit); set whichever this version has."""
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, 1 << 20)
    # A Python float that changes between calls becomes a SymFloat under dynamo's automatic
    # dynamic, which flex_attention's operator refuses ("can only be of (Tensor, int,
    # SymInt)": PyTorch 2.15's eager path, when the soft-cap score_mod closed over a float).
    # The cap is a tensor now; the scale is still a float argument: specialized floats
    # recompile per value instead (one scale per head dimension in the export).
    if hasattr(cfg, "specialize_float"):
        cfg.specialize_float = True


class Runner:
    """flex_attention on one device, eager or compiled, returning (out, natural-log lse)."""

    def __init__(self, device: str, compiled: bool, window_offset: int = 0):
        torch, fa = _torch(), _fa()
        self.torch, self.fa = torch, fa
        self.device, self.compiled = device, compiled
        self.window_offset = window_offset  # the negative control's W + N
        self.aux = has_return_aux(fa)
        self.lse_refused: Optional[str] = None  # why, once the backend refused to return it
        self.dtypes = {"float32": torch.float32, "float16": torch.float16,
                       "bfloat16": torch.bfloat16}
        if device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("--device cuda: torch.cuda.is_available() is False")
        self.device_name = torch.cuda.get_device_name(0) if device == "cuda" else None
        _configure_dynamo(torch)
        # fullgraph: a graph break would run part of it eagerly under a "compiled" label.
        self.fn = (torch.compile(fa.flex_attention, dynamic=False, fullgraph=True)
                   if compiled else fa.flex_attention)
        # The block mask is compiled too under --compile, as long-context users do (PyTorch's
        # advice for create_block_mask's deprecated _compile=True): eager create_block_mask
        # materializes the whole Lq x Lk grid of mask_mod results (at 131,072 tokens 17 GB of
        # bools alone, before the index tensors it broadcasts); compiled, the grid is fused.
        self.create_block_mask = (torch.compile(fa.create_block_mask) if compiled
                                  else fa.create_block_mask)

    def compilations(self) -> Optional[Tuple[int, int]]:
        """(graphs Inductor compiled, graphs it took from its cache) in this process, from its
        own counters; None when eager or where this version keeps no such counters. A case
        that differs from an earlier one only in W, C or the soft-cap is a cache hit (its
        graph is the same), so the pair says what the run paid for."""
        if not self.compiled:
            return None
        try:
            ind = self.torch._dynamo.utils.counters["inductor"]
            return int(ind["fxgraph_cache_miss"]), int(ind["fxgraph_cache_hit"])
        except (AttributeError, KeyError, TypeError):
            return None

    def tensor(self, a, dtype: str, what: str):
        """A stored input as a tensor of the case's dtype on the device; the values must be
        exactly representable (docs/fixtures.md), so the conversion must not change them."""
        torch = self.torch
        t = torch.from_numpy(a)
        r = t.to(self.dtypes[dtype])
        if not torch.equal(r.to(t.dtype), t):
            raise ValueError(f"{what}: values not exactly representable in {dtype}")
        return r.to(self.device)

    def block_mask(self, case):
        """create_block_mask of case_mask_mod. The families are the same for every batch entry
        and head (B = H = None: one [1, 1] block mask); an explicit mask with Bm = B or Hm = Hq
        differs between them, and a block mask built for b = h = 0 alone would drop the other
        entries' blocks, so it is built over those dims."""
        bm_b = bm_h = None
        rule = case_rule(case)
        if rule is not None:  # the mask rules differ per batch entry (prefix, tree, images)
            bm_b = case.q.shape[0] if rule["rule"] in MASK_RULES and case.q.shape[0] > 1 else None
        elif case.mask is not None:
            bm_b = case.mask.shape[0] if case.mask.shape[0] > 1 else None
            bm_h = case.mask.shape[1] if case.mask.shape[1] > 1 else None
        return self.create_block_mask(
            case_mask_mod(self.torch, case, self.device, self.window_offset), bm_b, bm_h,
            case.q.shape[2],
            case.k.shape[2], device=self.device,
            BLOCK_SIZE=(case.q_block_size, case.kv_block_size))

    def call(self, q, k, v, bm, case, score_mod=None):
        """(out, lse); lse None once this backend has refused to return it."""
        kw = dict(block_mask=bm, scale=case.scale, enable_gqa=q.shape[1] != k.shape[1])
        if score_mod is not None:
            kw["score_mod"] = score_mod
        if not self.lse_refused:
            try:
                if self.aux:
                    out, aux = self.fn(q, k, v, return_aux=self.fa.AuxRequest(lse=True), **kw)
                    return out, aux.lse
                return self.fn(q, k, v, return_lse=True, **kw)
            except Exception as e:
                # Inductor's CPU flex_attention (2.15) raises "torch.compile on CPU only
                # supports inference and `return_lse` is not supported yet": judge the
                # output without the LSE (H5 not run) rather than not at all.
                if not (self.compiled and "return_lse" in str(e) and "not supported" in str(e)):
                    raise
                self.lse_refused = next(ln for ln in str(e).splitlines() if "return_lse" in ln)
                print(f"{PROG}: this backend returns no LSE ({self.lse_refused.strip()}): "
                      f"outputs stored without it (H5 not run)", file=sys.stderr)
        return self.fn(q, k, v, **kw), None

    def run(self, case):
        """(out, lse, out_rerun, block mask) of one case, moved to the CPU; lse None when the
        backend refused to return it. A case with sinks gets them through apply_sinks (on the
        rerun too), which needs the LSE: refused (ValueError) where the backend returns none."""
        q = self.tensor(case.q, case.dtype, "q")
        k = self.tensor(case.k, case.dtype, "k")
        v = self.tensor(case.v, case.dtype, "v")
        bm = self.block_mask(case)
        sm = case_score_mod(self.torch, case, self.device)
        out, lse = self.call(q, k, v, bm, case, sm)
        rerun, lse_rerun = self.call(q, k, v, bm, case, sm)
        if case.sinks is not None:
            if lse is None or lse_rerun is None:
                raise ValueError("sinks: applied from flex_attention's LSE, which this backend "
                                 "does not return")
            out, lse = apply_sinks(self.torch, out, lse, case.sinks)
            rerun, _ = apply_sinks(self.torch, rerun, lse_rerun, case.sinks)
        if self.device == "cuda":
            self.torch.cuda.synchronize()
        return out.cpu(), None if lse is None else lse.cpu(), rerun.cpu(), bm.to("cpu")


# ---- the command ----

def _args(argv):
    ap = argparse.ArgumentParser(
        prog="python -m flexcheck.torch_flex",
        description="Run PyTorch's flex_attention on every case of fixture files and store its "
                    "output, LSE, rerun and block mask under tested/<label> for `flexcheck "
                    "check` to judge.")
    _engine.add_common_args(ap, "torch-<version>-<device>[-compiled]")
    ap.add_argument("--device", required=True, choices=("cpu", "cuda"))
    ap.add_argument("--compile", action="store_true",
                    help="run torch.compile(flex_attention) (default: eager)")
    ap.add_argument("--threads", type=int, metavar="N", help="torch.set_num_threads(N)")
    _engine.add_negative_control(ap, "the mask_mod")
    return ap.parse_args(argv)


# What PyTorch says when it cannot run a case's configuration at all, as opposed to running it
# wrongly: Inductor's CUDA flex_attention (2.11, seen on an H200) lowers only block masks whose
# Q and KV block sizes are multiples of its own tile sizes, and refuses q128/kv64 in fp16 and
# bf16 ("Q and KV block size must be divisible by BLOCK_M and BLOCK_N"). Such a case is
# counted as refused, with PyTorch's words, not as an error of the run: it says nothing of
# PyTorch's correctness, and no output of it exists to judge.
REFUSALS = ("block size must be divisible by block_m and block_n",)


def refusal(exc):
    """PyTorch's own line when exc is its refusal of a configuration (REFUSALS), else None."""
    for line in str(exc).splitlines():
        if any(r in line.lower() for r in REFUSALS):
            return line.strip()
    return None


def adapter(runner):
    """case -> Result through the Runner; PyTorch's refusals (REFUSALS) as Refused. The notes
    say what was judged beside PyTorch's kernel (sinks applied afterwards, the mods written)."""
    def run(case) -> Result:
        try:
            out, lse, rerun, bm = runner.run(case)
        except Exception as e:  # PyTorch failed or refused the case
            why = refusal(e)
            if why:
                raise Refused(why) from e
            raise
        notes = []
        if lse is None:
            notes.append("no LSE (backend refused)")
        if case.sinks is not None:  # say what was judged: not PyTorch's kernel alone
            notes.append("sinks applied to its out/LSE afterwards (O*exp(LSE-LSE'))")
        if case.softcap:
            notes.append("softcap as score_mod")
        rule = case_rule(case)
        if rule is not None:
            kind = "score" if rule["rule"] in SCORE_RULES else "mask"
            notes.append(f"{rule['rule']} {kind}_mod written from mask_rule")
        elif case.mask is not None:
            notes.append("explicit mask ANDed into mask_mod")
        if case.bias is not None and rule is None:
            notes.append("explicit bias added by score_mod" +
                         (" after the softcap" if case.softcap else ""))
        # flex_attention rounds P to the input type (its tiled kernels the unnormalised exp, its
        # eager path the normalised P): the producer claims that profile, so the p-round
        # designs hold it to it (docs/tolerance.md)
        return Result(out=out, lse=lse, out_rerun=rerun, block_mask=bm, notes=tuple(notes),
                      rounding="flexattention")
    return run


def main(argv=None) -> int:
    a = _args(argv)
    got = _engine.files_and_dtypes(PROG, a)
    if got is None:
        return 2
    files, dtypes = got
    torch = _torch()
    # Eager is what was asked for: PyTorch's advice to compile is not news.
    warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
    if a.threads:
        torch.set_num_threads(a.threads)
    try:
        runner = Runner(a.device, a.compile, a.window_offset)
        label = sanitize_label(a.label) if a.label else default_label(torch.__version__,
                                                                      a.device, a.compile)
    except (RuntimeError, ValueError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    producer = producer_string(torch.__version__, a.device, runner.device_name, a.compile)
    if a.window_offset:
        producer += f", NEGATIVE CONTROL: W + {a.window_offset} handed over"
    print(f"{PROG}: LSE via {'return_aux' if runner.aux else 'return_lse'}")
    run = _engine.Run(prog=PROG, engine="PyTorch", label=label, producer=producer,
                      adapter=adapter(runner), dtypes=dtypes, overwrite=a.overwrite)
    status = run.files(files)
    n = runner.compilations()
    if n is not None:
        print(f"{PROG}: Inductor compiled {n[0]} graphs, took {n[1]} from its cache")
    return status


if __name__ == "__main__":
    sys.exit(main())
