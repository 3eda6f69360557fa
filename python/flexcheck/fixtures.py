"""flexcheck.fixtures - write and read flexcheck fixture files (docs/fixtures.md) from Python.

An engine, a test or a notebook holding q/k/v (and maybe its own kernel's output) writes them
here, and flexcheck judges them:

    write_case("dump.h5", "layer07", q, k, v, causal=True, window=512)   # inputs only
    add_tested("dump.h5", "layer07", "vllm-fa3", out, producer="vllm 0.9, H100", lse=lse)
    # flexcheck fill dump.h5 --out filled.h5   (the float64 oracle, computed in C)
    # flexcheck check filled.h5                (PASS/FAIL per output under test)

This module never computes attention: the expected out/lse come from flexcheck's float64
oracle in C (`flexcheck fill`), or from a producer's own float64 oracle passed in as `out=` /
`lse=`. What it does is the bookkeeping the C reader is strict about: layouts (PyTorch's
[B, H, L, D] or vLLM's packed [T, H, D]), storage types (float16 inputs as IEEE half, float32
and bfloat16 inputs as float32, bfloat16 outputs as uint16 bit patterns), values exactly
representable in the case's dtype (refused, not silently rounded, unless round=True), and
attribute types the reader accepts (the ones fixtures/torch/make_torch_set.py writes).

Schema versions: a file is `flexcheck-fixture-1` unless a case uses a score term (logit
soft-capping `softcap`, attention sinks `sinks`; docs/semantics.md section 7), which makes it
`flexcheck-fixture-2`. A version-1 reader refuses version-2 files, so version 2 is written only
where it is needed; a file that is version 2 stays version 2 (appending to it, add_tested).

Every write goes to a temporary file in the target's folder (a copy of the file when
appending) that replaces the target only once complete: a refused or failed write leaves the
original byte-identical. Through a symlink, the file it names is the target (the link stays).
Two processes writing one file at the same time are not serialized: the last to finish wins.

Large layers: a layer's tensors are written chunk by chunk, never held twice. Each dataset of
q, k, v, out, lse and outputs under test is chunked [1, 1, R, D] (one head, R rows; [1, 1, R]
for an LSE, see CHUNK_BYTES), and each chunk's rows are read from the caller's tensor (a numpy
array in place, an np.memmap from its file, a torch tensor on any device, one block copied to
the host at a time), checked, converted and written on their own: the writer holds about one
chunk beyond the inputs (ci/write_rss.py measures it; python/README.md has the figures).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any, Dict, List, Optional, Tuple

import h5py
import numpy as np

from . import _paged
from ._version import __version__
# The arrays and arguments checked as judging.py checks them (one private module, _args.py).
from ._args import (  # noqa: F401 (round_to, bfloat16_bits, _unpack, ... re-exported)
    _as_array,
    _bits_stored,
    _check_qkv_shapes,
    _encoding,
    _first,
    _flag,
    _fmt_index,
    _Grid,
    _grid_shape,
    _infer_dtype,
    _input_values,
    _int_arg,
    _logical,
    _out_encoding,
    _packed_seqs,
    _qkv_ranks,
    _scale,
    _Shaped,
    _sinks,
    _softcap,
    _Source,
    _unpack,
    _ValueCheck,
    bfloat16_bits,
    bfloat16_to_float32,
    DTYPES,
    INT32_MAX,
    MAX_SINK,
    MAX_SOFTCAP,
    ROUND_HINT,
    round_to,
)

SCHEMA = "flexcheck-fixture-1"
# Version 2 adds the score terms (the case attribute softcap, the dataset sinks [Hq]); it is
# written only when some case of the file uses one, so files without them stay readable by
# version-1 readers.
SCHEMA_TERMS = "flexcheck-fixture-2"
# Version 3 adds the explicit terms (docs/semantics.md section 8): an explicit mask, as the
# dataset mask (bit-packed rows) or mask_intervals (one allowed interval of keys a row), and an
# additive bias; written only when some case holds one. It holds the score terms too.
SCHEMA_XTERMS = "flexcheck-fixture-3"
# Written only when a case holds its K/V paged (k_cache, v_cache, block_table; _paged.py);
# version 4 holds everything version 3 does.
SCHEMA_PAGED = "flexcheck-fixture-4"
SCHEMAS = (SCHEMA, SCHEMA_TERMS, SCHEMA_XTERMS, SCHEMA_PAGED)
# The bit order of a packed mask's bytes, its attribute `bitorder` (numpy.packbits' name).
MASK_BITORDER = "little"
GENERATOR = f"flexcheck-python {__version__}"

# The C reader's limits (fixtures/fix.h), checked here so a file we write is never refused or
# cut for them: names and layout up to 127 bytes, free text up to 255 (the reader shows longer
# text cut). Outputs under test per case: any number (the reader holds them to --max-memory).
NAME_MAX = 127
TEXT_MAX = 255
LABEL_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
MIN_BLOCK, MAX_BLOCK = 16, 256
# The explicit bias's bound (masks/xterms.h XTERMS_MAX_BIAS): a key is masked by the mask, never
# by a "minus infinity" bias.
MAX_BIAS = 1e6
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_BM_FIELDS = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices")


def _block_size(value, what: str) -> int:
    v = _int_arg(value, what, MIN_BLOCK, MAX_BLOCK)
    if v & (v - 1):
        raise ValueError(f"{what} = {v}: must be a power of two in [{MIN_BLOCK}, {MAX_BLOCK}]")
    return v


def _text(value, what: str, limit: int) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what}: must be a non-empty string, got {value!r}")
    if len(value.encode()) > limit:
        raise ValueError(f"{what}: {len(value.encode())} bytes, the reader takes at most {limit}")
    return value


def _case_name(name) -> str:
    """A group name the C writer would also accept: no '/', not '.'."""
    _text(name, "name", NAME_MAX)
    if "/" in name or name == ".":
        raise ValueError(f"name {name!r}: not a valid group name (no '/', not '.')")
    return name


def _mask_attrs(causal, window, chunk) -> Dict[str, np.int64]:
    """The mask attributes under their file names (masks/mask.h MASK_PARAMS)."""
    return {"causal": np.int64(_flag(causal, "causal")),
            "sliding_window": np.int64(_int_arg(window, "window", 0, INT32_MAX)),
            "chunk_size": np.int64(_int_arg(chunk, "chunk", 0, INT32_MAX))}


def _oracle(out, lse, grid: _Grid) -> Tuple[Optional[_Source], Optional[_Source]]:
    """A producer's own oracle, as sources to write from: both or neither, float64
    (docs/fixtures.md: computed in float64 from the stored inputs; `flexcheck check` recomputes
    it and allows a relative 1e-10, which a float32 one cannot meet), in a shape the case
    takes (_to_grid's). Where round=True changed an input, _oracle_rounded refuses it."""
    if out is None and lse is None:
        return None, None
    if out is None or lse is None:
        raise ValueError(f"{'out' if lse is None else 'lse'} given without "
                         f"{'lse' if lse is None else 'out'}: the oracle is both or neither")
    srcs = []
    for what, x, rank in (("out", out, 4), ("lse", lse, 3)):
        src = _Source(x, what)
        if src.dtype != np.float64:
            raise ValueError(f"{what}: dtype {src.dtype}: must be float64 (the oracle is "
                             f"computed in float64; leave out/lse to `flexcheck fill` otherwise)")
        _grid_shape(src.shape, what, grid, rank)
        srcs.append(src)
    return srcs[0], srcs[1]


def _oracle_rounded(rounded: Optional[str]) -> None:
    """rounded: None, or the first input value round=True changed ("q[0][1][2][3]: x -> y"):
    an oracle passed in was then computed from other inputs than the ones stored, and is
    refused."""
    if rounded:
        raise ValueError(f"out, lse: round=True changed {rounded}: out/lse must be computed "
                         f"from the stored (rounded) inputs: round them first (round_to) or "
                         f"leave out/lse to `flexcheck fill`")


# ---- block masks ----

def _block_mask_fields(bm, what: str, sizes: Tuple[int, int]) -> Tuple[Dict[str, Any], Tuple]:
    """(the four fields, some None, and the block sizes) of a dict or a torch BlockMask."""
    if isinstance(bm, Mapping):
        known = set(_BM_FIELDS) | {"q_block_size", "kv_block_size"}
        unknown = sorted(set(bm) - known)
        if unknown:
            raise ValueError(f"{what}: unknown key {unknown[0]!r} "
                             f"(keys: {', '.join(sorted(known))})")
        fields = {f: bm.get(f) for f in _BM_FIELDS}
        return fields, (bm.get("q_block_size", sizes[0]), bm.get("kv_block_size", sizes[1]))
    if not (hasattr(bm, "kv_num_blocks") and hasattr(bm, "kv_indices")):
        raise ValueError(f"{what}: {type(bm).__name__}: give a dict or a torch BlockMask")
    fields = {f: getattr(bm, f, None) for f in _BM_FIELDS}
    block = getattr(bm, "BLOCK_SIZE", sizes)  # PyTorch's (Q, KV)
    if isinstance(block, int):
        block = (block, block)
    return fields, tuple(block)


def _block_ids(out: Dict[str, Any], what: str, nkb: int) -> None:
    """The values of a block mask whose shapes are checked, as the C reader checks them
    (masks/bmask_check.c bmask_validate): each count in [0, min(width, NKB)], the ids a count
    covers in [0, NKB), no id twice in a row (its partial and full ids together). The entries
    past a count are padding (PyTorch leaves anything there) and are not looked at. Each
    refusal names the dataset and the index, as the C reader does."""
    width = out["kv_indices"].shape[3]
    cap = min(width, nkb)  # the row's slots; a row lists each of the NKB blocks at most once
    lists = [f for f in ("kv", "full_kv") if f"{f}_num_blocks" in out]
    for f in lists:
        n, ids = out[f"{f}_num_blocks"], out[f"{f}_indices"]
        bad = (n < 0) | (n > cap)
        if bad.any():
            i = _first(bad)
            raise ValueError(f"{what} {f}_num_blocks{_fmt_index(i)} = {n[i]}: must be in "
                             f"[0, {cap}] (row width {width}, {nkb} kv blocks)")
        bad = (np.arange(width) < n[..., np.newaxis]) & ((ids < 0) | (ids >= nkb))
        if bad.any():
            i = _first(bad)
            raise ValueError(f"{what} {f}_indices{_fmt_index(i)} = {ids[i]}: out of range "
                             f"[0, {nkb})")
    # Duplicates: a row's partial then full ids side by side, uncounted slots made distinct
    # negatives; a stable sort puts each repeat after its first listing, so the smallest
    # position of a repeat is the first one the C reader's scan meets.
    row = np.concatenate([out[f"{f}_indices"].astype(np.int64) for f in lists], axis=-1)
    counted = np.concatenate([np.arange(width) < out[f"{f}_num_blocks"][..., np.newaxis]
                              for f in lists], axis=-1)
    row = np.where(counted, row, -1 - np.arange(row.shape[-1]))
    order = np.argsort(row, axis=-1, kind="stable")
    ranked = np.take_along_axis(row, order, axis=-1)
    repeat = np.zeros(row.shape, bool)
    np.put_along_axis(repeat, order[..., 1:], ranked[..., 1:] == ranked[..., :-1], axis=-1)
    if repeat.any():
        i = _first(repeat)
        f, j = lists[i[3] // width], i[3] % width
        raise ValueError(f"{what} {f}_indices{_fmt_index(i[:3] + (j,))} = {row[i]}: block "
                         f"listed twice in the row")


def _block_mask(bm, what: str, grid: _Grid, sizes: Tuple[int, int]):
    """A block mask in PyTorch's convention, int32, checked as the C reader does
    (docs/fixtures.md): counts [1 or B, 1 or Hq, ceil(Lq / QB)], ids [.., width] (any width),
    the full pair both or neither and shaped like the partial one; then the values
    (_block_ids). Soundness against the case's mask is `flexcheck check`'s."""
    if bm is None:
        return None
    fields, (qb, kb) = _block_mask_fields(bm, what, sizes)
    qb = _block_size(qb, f"{what} q_block_size")
    kb = _block_size(kb, f"{what} kv_block_size")
    out: Dict[str, Any] = {"q_block_size": qb, "kv_block_size": kb}
    for f in _BM_FIELDS[:2]:
        if fields[f] is None:
            raise ValueError(f"{what}: {f} is missing")
    if (fields["full_kv_num_blocks"] is None) != (fields["full_kv_indices"] is None):
        raise ValueError(f"{what}: full_kv_num_blocks and full_kv_indices: give both or neither")
    for f in _BM_FIELDS:
        if fields[f] is None:
            continue
        a, _ = _as_array(fields[f], f"{what} {f}")
        rank = 3 if f.endswith("num_blocks") else 4
        if a.ndim != rank or a.dtype.kind not in "iu":
            raise ValueError(f"{what} {f}: {a.dtype} of shape {list(a.shape)}: must be integer "
                             f"of rank {rank}")
        if a.size and (a.min() < -2**31 or a.max() > INT32_MAX):
            raise ValueError(f"{what} {f}: values outside int32")
        out[f] = a.astype(np.int32)
    n = out["kv_num_blocks"].shape
    nqb = -(-grid.lq // qb)
    if n[0] not in (1, grid.b) or n[1] not in (1, grid.hq) or n[2] != nqb:
        raise ValueError(f"{what} kv_num_blocks: shape {list(n)}: must be [1 or B = {grid.b}, "
                         f"1 or Hq = {grid.hq}, ceil(Lq / {qb}) = {nqb}]")
    if out["kv_indices"].shape[:3] != n:
        raise ValueError(f"{what} kv_indices: shape {list(out['kv_indices'].shape)} disagrees "
                         f"with kv_num_blocks {list(n)}")
    if "full_kv_num_blocks" in out and (out["full_kv_num_blocks"].shape != n or
                                        out["full_kv_indices"].shape != out["kv_indices"].shape):
        raise ValueError(f"{what} full_kv_num_blocks/full_kv_indices: shapes must equal "
                         f"kv_num_blocks/kv_indices'")
    _block_ids(out, what, -(-grid.lk // kb))
    return out


def _write_block_mask(parent: h5py.Group, bm: Dict[str, Any]) -> None:
    g = parent.create_group("block_mask")
    g.attrs["q_block_size"] = np.int64(bm["q_block_size"])
    g.attrs["kv_block_size"] = np.int64(bm["kv_block_size"])
    for f in _BM_FIELDS:
        if f in bm:
            _dataset(g, f, bm[f])


# ---- explicit terms (schema 3) ----

def _xterm_shape(shape, what: str, grid: _Grid, last: int, last_is: str) -> Tuple[int, ...]:
    """[Bm, Hm, Lq, last] of an explicit term, Bm 1 or B and Hm 1 or Hq (PyTorch's broadcast),
    Lq the case's (T for a packed case: the mask is over the packed token grid)."""
    shape = tuple(int(n) for n in shape)
    if (len(shape) != 4 or shape[0] not in (1, grid.b) or shape[1] not in (1, grid.hq)
            or shape[2] != grid.lq or shape[3] != last):
        raise ValueError(f"{what}: shape {list(shape)}: must be [Bm, Hm, Lq, {last_is}] with Bm "
                         f"1 or B = {grid.b}, Hm 1 or Hq = {grid.hq}, Lq = {grid.lq}, "
                         f"{last_is} = {last} (a [Lq, Lk] mask as [1, 1, Lq, Lk])")
    return shape


class _MaskCheck:
    """A dense mask's blocks packed as stored (numpy.packbits(..., bitorder="little") along the
    keys: key tk is bit tk & 7 of byte tk >> 3), each value checked: bool, or integers 0 and 1
    (1 = allowed). The first other value in the mask's row-major order is refused by finish(),
    whatever order the blocks come in (as _ValueCheck)."""

    def __init__(self, what: str):
        self.what = what
        self.first: Optional[Tuple[Tuple[int, ...], int]] = None

    def convert(self, a: np.ndarray, where) -> np.ndarray:
        if a.dtype != np.bool_:
            bad = (a != 0) & (a != 1)
            if bad.any():
                j = np.unravel_index(int(np.argmax(bad)), bad.shape)
                i = tuple(int(x) for x in where(j))
                if self.first is None or i < self.first[0]:
                    self.first = (i, int(a[j]))
        return np.packbits(a != 0, axis=-1, bitorder=MASK_BITORDER)

    def finish(self) -> None:
        if self.first is not None:
            i, x = self.first
            raise ValueError(f"{self.what}: value {x} at {_fmt_index(i)}: must be 0 or 1 "
                             f"(or bool; 1 = allowed)")


class _BiasCheck(_ValueCheck):
    """The bias's blocks as float32 values, checked as q/k/v are (finite, float32 values unless
    round=True) and within MAX_BIAS, the reader's bound."""

    def __init__(self, what: str):
        super().__init__(what, "float32")

    def convert(self, a: np.ndarray, where) -> np.ndarray:
        r = super().convert(a, where)
        with np.errstate(invalid="ignore"):
            self._see("too large", np.isfinite(a) & ~(np.abs(r) <= MAX_BIAS), a, r, where)
        return r

    def finish(self, round: bool, hint: str = ROUND_HINT) -> Optional[str]:
        if "not finite" not in self.first and "too large" in self.first:
            i, x, _ = self.first["too large"]
            raise ValueError(f"{self.what}: value {x!r} at {_fmt_index(i)}: the reader takes "
                             f"|bias| <= {MAX_BIAS:g} (mask a key out with mask=, not with a "
                             f"bias)")
        return super().finish(round, hint)


def _mask_source(mask, packed: bool, grid: _Grid):
    """(source, stored shape, convert) of the mask argument: a dense bool / 0-1 integer array
    [Bm, Hm, Lq, Lk], packed as it is written, or with packed=True the packed uint8 rows
    [Bm, Hm, Lq, ceil(Lk / 8)] stored as they are (bits past Lk are never read)."""
    src = _Source(mask, "mask")
    rb = (grid.lk + 7) // 8
    if packed:
        if src.dtype != np.uint8:
            raise ValueError(f"mask: dtype {src.dtype}: mask_packed=True takes uint8 bytes of "
                             f"packed bits (numpy.packbits(..., bitorder='little'))")
        shape = _xterm_shape(src.shape, "mask", grid, rb, "ceil(Lk / 8)")
        return src, shape, None
    if src.dtype != np.bool_ and src.dtype.kind not in "iu":
        raise ValueError(f"mask: dtype {src.dtype}: must be bool (or integers 0/1); an additive "
                         f"float mask is a bias (bias=)")
    b, h, lq, _ = _xterm_shape(src.shape, "mask", grid, grid.lk, "Lk")
    return src, (b, h, lq, rb), _MaskCheck("mask")


def _mask_intervals(iv, grid: _Grid) -> np.ndarray:
    """int32 [Bm, Hm, Lq, 2]: row (b, h, q) allows the keys [lo, hi), 0 <= lo <= hi <= Lk
    (lo = hi: none). The first row that breaks it is refused, naming it."""
    a, _ = _as_array(iv, "mask_intervals")
    if a.dtype.kind not in "iu":
        raise ValueError(f"mask_intervals: dtype {a.dtype}: must be integers")
    _xterm_shape(a.shape, "mask_intervals", grid, 2, "2 (lo, hi)")
    a = a.astype(np.int64)
    lo, hi = a[..., 0], a[..., 1]
    bad = (lo < 0) | (lo > hi) | (hi > grid.lk)
    if bad.any():
        i = _first(bad)
        raise ValueError(f"mask_intervals: row {_fmt_index(i)}: [lo, hi) = [{lo[i]}, {hi[i]}): "
                         f"must satisfy 0 <= lo <= hi <= Lk = {grid.lk} (lo = hi: no key "
                         f"allowed)")
    return a.astype(np.int32)


def _bias_source(bias, grid: _Grid):
    src = _Source(bias, "bias")
    if src.dtype.kind != "f":
        raise ValueError(f"bias: dtype {src.dtype}: must be floating point (stored float32)")
    return src, _xterm_shape(src.shape, "bias", grid, grid.lk, "Lk")


def _dataset(g: h5py.Group, name: str, data: np.ndarray) -> h5py.Dataset:
    # No timestamps, as the C writer: the same inputs give the same bytes.
    return g.create_dataset(name, data=data, track_times=False)


# A layer's tensors (q, k, v, out, lse, and outputs under test) are written in chunks of one
# (b, h) and a block of R rows, [1, 1, R, D] ([1, 1, R] for an LSE), uncompressed, each read,
# checked and converted on its own and written whole: the writer holds about one chunk, never
# a converted copy of the tensor. R is a multiple of CHUNK_ROW_STEP rows, so that no q or kv
# block of 16 to 256 rows straddles two chunks (a reader taking a block reads one chunk),
# sized to about CHUNK_BYTES, libhdf5's default per-dataset chunk cache, and never more than L.
# (Tests shrink both to write many chunks from small tensors.)
CHUNK_BYTES = 1 << 20
CHUNK_ROW_STEP = 256


def _chunk_rows(length: int, row_bytes: int) -> int:
    """R for a dataset of `length` rows of `row_bytes` each (see CHUNK_BYTES)."""
    r = max(CHUNK_ROW_STEP, CHUNK_BYTES // max(row_bytes, 1) // CHUNK_ROW_STEP * CHUNK_ROW_STEP)
    return min(r, length)


def _write_rows(g: h5py.Group, name: str, src: _Source, shape: Tuple[int, ...], store,
                convert) -> h5py.Dataset:
    """Dataset `name` of stored shape [B, H, L(, D)] and numpy type `store`, written chunk by
    chunk from src (given in that shape, or packed: _logical): each block of rows of one head
    read, passed to convert(block, where) (where(i): src's index of the block's index i) and
    written into its chunk. An empty dataset stays contiguous (there is nothing to chunk)."""
    store = np.dtype(store)
    if 0 in shape:
        return g.create_dataset(name, shape, store, track_times=False)
    b_n, h_n, length = shape[:3]
    rows = _chunk_rows(length, int(np.prod(shape[3:], dtype=np.int64)) * store.itemsize)
    ds = g.create_dataset(name, shape, store, chunks=(1, 1, rows) + tuple(shape[3:]),
                          track_times=False)  # no timestamps: same inputs, same bytes
    packed = len(src.shape) == len(shape) - 1
    for b in range(b_n):
        for h in range(h_n):
            for r0 in range(0, length, rows):
                r1 = min(r0 + rows, length)
                if not packed:  # [B, H, L(, D)]
                    index = (b, h, slice(r0, r1))
                    where = lambda i, b=b, h=h, r0=r0: (b, h, r0 + i[0]) + tuple(i[1:])
                elif len(shape) == 4:  # [T, H, D]
                    index = (slice(r0, r1), h)
                    where = lambda i, h=h, r0=r0: (r0 + i[0], h) + tuple(i[1:])
                else:  # an LSE [H, T]
                    index = (h, slice(r0, r1))
                    where = lambda i, h=h, r0=r0: (h, r0 + i[0])
                block = convert(src.read(index), where)
                ds[b, h, r0:r1] = block.astype(store, copy=False)
    return ds


def _as_stored(block: np.ndarray, where) -> np.ndarray:
    """An output's block as stored: values as they are (outputs are not checked: NaN and
    infinities are what the gates judge)."""
    return block


# ---- files ----

_REQUIRED = object()


def _attr(obj, key: str, default=_REQUIRED):
    """Attribute `key` of an h5py object as its one value. Absent: `default`, or without one a
    ValueError naming file, object and attribute. An attribute stored with
    a one-element dataspace of any rank (np.array([b"flexcheck-fixture-1"]), as some writers
    make them) comes back from h5py as an array: the C reader takes its element
    (fixtures/fix_h5.c attr_open), and so is it taken here; more or fewer values are refused."""
    where = f"{obj.file.filename}: {obj.name}"
    if key not in obj.attrs:
        if default is _REQUIRED:
            raise ValueError(f"{where}: missing attribute {key!r}")
        return default
    v = obj.attrs[key]
    if isinstance(v, np.ndarray):
        if v.size != 1:
            raise ValueError(f"{where}: attribute {key!r}: {v.size} values, must hold exactly one")
        v = v.reshape(-1)[0]
    return v


def _str_attr(v) -> str:
    """h5py returns variable-length strings as str, fixed-length ones (the C writer's) as
    bytes."""
    return v.decode() if isinstance(v, bytes) else str(v)


def _schema(f: h5py.File, path: str) -> str:
    """The file's schema, one of SCHEMAS; ValueError naming any other value."""
    raw = _attr(f, "schema", None)
    value = None if raw is None else _str_attr(raw)
    if value not in SCHEMAS:
        raise ValueError(f"{path}: schema {value!r}: not a {SCHEMA}, {SCHEMA_TERMS}, "
                         f"{SCHEMA_XTERMS} or {SCHEMA_PAGED} file")
    return value


def _stored_softcap(g: h5py.Group) -> Tuple[Optional[float], str]:
    """The case attribute softcap as (value, its text for a message): value None when the
    attribute is not one number (an integer or float of one element)."""
    c = np.asarray(g.attrs["softcap"]).reshape(-1)
    if c.size != 1 or c.dtype.kind not in "fiu":
        return None, repr(c.tolist())
    return float(c[0]), repr(c.tolist()[0])


def _v1_term(g: h5py.Group) -> Optional[str]:
    """The score term a case holds, as `field = value` for a message, or None. softcap 0 is
    off (docs/fixtures.md), so not a term."""
    if "sinks" in g:
        return "sinks"
    if "softcap" in g.attrs:
        cap, text = _stored_softcap(g)
        if cap != 0.0:
            return f"softcap = {text}"
    return None


XTERM_FIELDS = ("mask", "mask_intervals", "bias")  # the datasets of schema 3


def _refuse_v1_terms(f: h5py.File, path: str, schema: str, names) -> None:
    """A version-1 file that holds a score term, or a version-1 or -2 file that holds an
    explicit term, is malformed: a reader of that version would judge the case without the
    term, or a version-1 to -3 file paged K/V. Refused, naming the first such case and field."""
    if schema == SCHEMA_PAGED:
        return
    for name in sorted(names, key=lambda s: s.encode()):
        g = f["cases"].get(name)
        if not isinstance(g, h5py.Group):
            continue
        term = _v1_term(g) if schema == SCHEMA else None
        if term:
            raise ValueError(f"{path}: /cases/{name}: {term}: a {SCHEMA} file holds no score "
                             f"terms (they need schema {SCHEMA_TERMS})")
        for x in XTERM_FIELDS:
            if x in g and schema != SCHEMA_XTERMS:
                raise ValueError(f"{path}: /cases/{name}: {x}: a {schema} file holds no "
                                 f"explicit terms (they need schema {SCHEMA_XTERMS})")
        for x in ("k_cache", "v_cache", "block_table"):
            if x in g:
                raise ValueError(f"{path}: /cases/{name}: {x}: a {schema} file holds no "
                                 f"paged K/V (it needs schema {SCHEMA_PAGED})")


def _inspect(path: str):
    """The existing file's (schema, layout or None, case names); None when there is no file.
    Refuses files that are not fixtures (and version-1 files holding a score term): appending
    to them would hide the problem."""
    if not os.path.exists(path):
        return None
    if not h5py.is_hdf5(path):
        raise ValueError(f"{path}: not an HDF5 file; refusing to write into it")
    with h5py.File(path, "r") as f:
        schema = _schema(f, path)
        layout = _attr(f, "layout", None)
        names = list(f["cases"]) if "cases" in f else []
        _refuse_v1_terms(f, path, schema, names)
    return schema, (None if layout is None else _str_attr(layout)), names


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


@contextlib.contextmanager
def _rewrite(path: str):
    """An h5py.File on a temporary file in path's folder: a copy of path when it exists, else a
    new file. Moved over path (os.replace, atomic) when the block finishes; removed on any
    failure, leaving path as it was. A symlink is resolved first: os.replace on the link would
    replace the link by a file and leave the file it names as it was. A link to nothing is
    refused, as the C writer refuses it (writing through it would create a file elsewhere)."""
    if os.path.islink(path) and not os.path.exists(path):
        raise ValueError(f"{path}: a symbolic link to nothing: not written through; point it "
                         f"at a file or remove it")
    path = os.path.realpath(path)
    folder = os.path.dirname(path)
    exists = os.path.exists(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    os.close(fd)
    try:
        if exists:
            shutil.copyfile(path, tmp)
            shutil.copymode(path, tmp)
        else:
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600: a fixture is meant to be shared
        with h5py.File(tmp, "r+" if exists else "w") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


# ---- write_case ----

def write_case(path, name, q, k=None, v=None, *, causal=False, window=0, chunk=0, scale=None,
               cu_seqlens_q=None, cu_seqlens_k=None, block_mask=None, dtype=None,
               q_block_size=128, kv_block_size=128, seed=None, layout=None, overwrite=False,
               round=False, out=None, lse=None, generator=None, softcap=None,
               sinks=None, mask=None, mask_packed=False, mask_intervals=None,
               bias=None, k_cache=None, v_cache=None, block_table=None,
               kv_len=None) -> None:
    """Write one attention call's inputs as case /cases/<name> of the fixture file `path`.

    Creates the file (root attribute schema = "flexcheck-fixture-1", or "flexcheck-fixture-2"
    when the case uses a score term; and `layout` if given) or appends to it (a version-1 file
    becomes version 2 when the new case uses a term; a version-2 file stays version 2). An
    existing case `name` is refused unless overwrite=True (which also drops that case's
    outputs under test: they were computed from the old inputs). `layout` on an existing file
    must equal its root attribute (it names the model the cases are consecutive layers of).
    The write is atomic: on any error the file is left byte-identical. It holds about one
    chunk beyond the inputs (module text: large layers): shapes, attributes and the oracle's
    type are checked first, and q, k, v's values as they are written, so a refused value is
    found after the tensors before it were written into the temporary file, which is removed.

    q, k, v: numpy arrays or torch tensors, [B, Hq, Lq, D], [B, Hkv, Lk, D], [B, Hkv, Lk, Dv]
    (PyTorch's layout), or vLLM's packed [T, H, D] with cu_seqlens_q / cu_seqlens_k (the
    offsets of each sequence, R + 1 entries from 0 to T), stored as [1, H, T, D] and int32
    offsets. The mask (causal, window, chunk) and its bottom-right alignment are those of
    docs/semantics.md.

    dtype: the precision the kernel ran in, "float32", "float16" or "bfloat16"; by default
    q's (numpy float16 -> float16, float32/float64 -> float32, torch bfloat16 -> bfloat16).
    Every value must be finite and exactly representable in dtype: the case must be the call
    the engine made, so a value that would need rounding is refused (ValueError naming the
    tensor and index) unless round=True rounds it to nearest even (float64 values bound for
    bfloat16 through float32, as torch's x.float().bfloat16() does). Stored as the C writer
    does: float16 cases as IEEE half, float32 and bfloat16 cases as float32.

    scale: the softmax scale (default 1/sqrt(D)). q_block_size, kv_block_size: the block
    granularity flexcheck uses for this case (powers of two in [16, 256]). seed: provenance.
    generator: who wrote the case (default "flexcheck-python <version>").

    block_mask: the engine's block mask in PyTorch's convention, stored under block_mask/ so
    `flexcheck check` holds it to the case's mask: a dict with kv_num_blocks [1|B, 1|Hq, NQB],
    kv_indices [.., NQB, width], optional full_kv_num_blocks, full_kv_indices (numpy or
    torch integers; optional q_block_size / kv_block_size keys, default the case's), or a
    torch BlockMask (its BLOCK_SIZE gives the block sizes). Refused as the C reader refuses
    it: each count in [0, min(width, NKB)], the ids it covers in [0, NKB), none twice in a row
    (partial and full together; NKB = ceil(Lk / kv_block_size)); entries past a count are
    padding and not looked at.

    softcap: logit soft-cap c > 0 (Gemma 2: the scaled score s becomes c * tanh(s / c) before
    masking and softmax; docs/semantics.md section 7), stored as attribute softcap (float64);
    None or 0 = off (nothing stored). Must be finite, > 0 and at most 1e6 (the C side's bound).
    sinks: per-query-head sink logits [Hq] (gpt-oss: one extra logit per head in the softmax,
    not scaled, not capped, with no value), stored as float32 dataset sinks; finite, |sink| <=
    1e4, and float32 values (round=True rounds float64 ones). Either term makes the file
    flexcheck-fixture-2; a refused term names file, case, field and value.

    mask, mask_packed, mask_intervals, bias: the explicit terms (docs/semantics.md section 8:
    FlexAttention's mask_mod and an additive score_mod, stored), each [Bm, Hm, Lq, ...] with Bm
    1 or B and Hm 1 or Hq (one for every batch entry / head, PyTorch's broadcast), over the
    stored token grid (a packed case's [T, T]); any of them makes the file flexcheck-fixture-3.
    The mask is ANDed with causal/window/chunk (it can only remove pairs from them; give
    causal=False to state a mask whole). mask: bool (or 0/1 integers) [Bm, Hm, Lq, Lk], True =
    allowed, e.g. torch's create_mask(mask_mod, B, H, Lq, Lk); written bit-packed (dataset
    mask, uint8 [Bm, Hm, Lq, ceil(Lk / 8)], numpy.packbits(..., bitorder="little") along the
    keys, attribute bitorder = "little") chunk by chunk, never held twice; with
    mask_packed=True, mask is those uint8 bytes already packed, stored as they are.
    mask_intervals: instead of mask, when every row allows one interval of keys (prefix-LM,
    a document mask, Gemma 3's image spans): integers [Bm, Hm, Lq, 2], row (b, h, q) allows the
    keys lo <= tk < hi, 0 <= lo <= hi <= Lk (lo = hi: none), stored int32 (8 bytes a row
    instead of Lk / 8). bias: float [Bm, Hm, Lq, Lk] added to the scaled (soft-capped) score of
    every allowed pair (ALiBi, a relative-position bias), stored float32: finite float32
    values (round=True rounds float64 ones) with |bias| <= 1e6. Refusals name the argument,
    the index and the value.

    k_cache, v_cache, block_table, kv_len: K/V paged as a serving engine holds them, instead of
    k and v (docs/fixtures.md "Paged K/V"; one form or the other, the paged one whole): vLLM's
    k_cache [num_pages, page_size, Hkv, D] and v_cache [num_pages, page_size, Hkv, Dv], and
    block_table (integers [R, max_pages]: one row per sequence, a batch entry or a packed
    sequence of cu_seqlens_k, each from slot 0 of its first page). kv_len: the logical Lk of a
    dense case (required there; a packed case's is cu_seqlens_k's end). Only what the table's
    used entries read is checked (entries in [0, num_pages), values as k and v's are); pages
    no entry uses and entries past a sequence's pages are written as given, NaN included. The
    caches are stored whole in the case's storage type (they are converted whole: a paged
    case is held twice while written), the table as int32; the file becomes
    flexcheck-fixture-4. The oracle `fill` computes is the logical sequence's.

    out, lse: normally absent: `flexcheck fill` computes them with flexcheck's float64 oracle.
    A producer with its own float64 oracle may pass them ([B, Hq, Lq, Dv] and [B, Hq, Lq]; for
    a packed case also [T, Hq, Dv] and [Hq, T]), float64 (anything else is refused: `flexcheck
    check` confirms them against ours to a relative 1e-10), computed from the inputs as stored:
    where round=True changed an input value (q, k, v or sinks) they are refused, naming it.
    """
    path = os.fspath(path)
    name = _case_name(name)
    pg = _paged.given(k, v, k_cache, v_cache, block_table)
    srcs = {w: _Source(x, w) for w, x in (("q", q), ("k", k), ("v", v))
            if w == "q" or x is not None}  # q missing: _Source says so
    if dtype is None:
        dtype = _infer_dtype(srcs["q"], srcs["q"].bf16)
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: must be one of {', '.join(DTYPES)}")
    for w, src in srcs.items():
        if src.dtype.kind != "f":
            raise ValueError(f"{w}: dtype {src.dtype}: must be floating point")
    # Shapes first, values as they are written (below): q, k, v are read once, block by block.
    packed = cu_seqlens_q is not None or cu_seqlens_k is not None
    shapes = {w: srcs[w].shape for w in srcs}
    if pg is not None:  # the logical K/V's shapes, in q's layout
        shapes["k"], shapes["v"] = _paged.logical_shapes(
            pg, shapes["q"], _paged.kv_len(pg, kv_len, cu_seqlens_k))
    _qkv_ranks(*(shapes[w] for w in "qkv"), packed)
    qs, ks, vs = (_Shaped(_logical(shapes[w], 4)) for w in "qkv")
    _check_qkv_shapes(qs, ks, vs)
    cu_q, cu_k = _packed_seqs(cu_seqlens_q, cu_seqlens_k, qs, ks)
    grid = _Grid(qs.shape[0], qs.shape[1], qs.shape[2], ks.shape[2], vs.shape[3],
                 cu_q is not None)
    attrs: Dict[str, Any] = {"dtype": dtype, **_mask_attrs(causal, window, chunk),
                             "scale": np.float64(_scale(scale, qs.shape[3])),
                             "q_block_size": np.int64(_block_size(q_block_size, "q_block_size")),
                             "kv_block_size": np.int64(_block_size(kv_block_size, "kv_block_size")),
                             "generator": _text(generator or GENERATOR, "generator", TEXT_MAX)}
    if seed is not None:  # any int64 or uint64, kept exactly (as the C writer stores it)
        s = _int_arg(seed, "seed", INT64_MIN, 2**64 - 1)
        attrs["seed"] = np.int64(s) if s <= INT64_MAX else np.uint64(s)
    bm = _block_mask(block_mask, "block_mask", grid,
                     (int(attrs["q_block_size"]), int(attrs["kv_block_size"])))
    if layout is not None:
        _text(layout, "layout", NAME_MAX)
    where = f"{path}: case {name!r}: "
    cap = _softcap(softcap, where)
    if cap:
        attrs["softcap"] = np.float64(cap)
    sk, sk_rounded = _sinks(sinks, where, grid.hq, round)
    if mask is not None and mask_intervals is not None:
        raise ValueError("mask and mask_intervals: give the explicit mask once, in one form")
    mk = None if mask is None else _mask_source(mask, _flag(mask_packed, "mask_packed"), grid)
    iv = None if mask_intervals is None else _mask_intervals(mask_intervals, grid)
    bs = None if bias is None else _bias_source(bias, grid)
    o, l = _oracle(out, lse, grid)
    uses_term = bool(cap) or sk is not None
    uses_xterm = mk is not None or iv is not None or bs is not None

    pg_changed = None
    if pg is not None:  # the table followed and the pages it reads checked, before writing
        _, _, pg_changed = _paged.gather(pg, qs.shape[0], ks.shape[2], cu_k, dtype, round)

    existing = _inspect(path)
    schema = SCHEMA_PAGED if pg is not None else SCHEMA_XTERMS if uses_xterm else \
        SCHEMA_TERMS if uses_term else SCHEMA
    if existing is not None:
        old_schema, old_layout, names = existing
        # never downgraded: other cases may use a term
        schema = max(schema, old_schema, key=SCHEMAS.index)
        if layout is not None and old_layout is not None and layout != old_layout:
            raise ValueError(f"{path}: layout {layout!r} given, the file's is {old_layout!r}")
        if name in names and not overwrite:
            raise ValueError(f"{path}: case {name!r} exists; refusing to overwrite "
                             f"(overwrite=True)")
    with _rewrite(path) as f:
        if existing is None or existing[0] != schema:
            f.attrs["schema"] = schema
        if layout is not None and "layout" not in f.attrs:
            f.attrs["layout"] = layout
        cases = f.require_group("cases")
        if name in cases:
            del cases[name]  # overwrite=True; HDF5 does not reclaim the space (h5repack does)
        g = cases.create_group(name)
        for key, val in attrs.items():
            g.attrs[key] = val
        # q, k, v checked as they are written: a refusal (raised once the tensor's every block
        # is seen, naming its first offender) leaves the file as it was, as any failure does.
        rounded = []  # where round=True changed a value, q then k, v, sinks
        store = np.float16 if dtype == "float16" else np.float32
        for w, st in (("q", qs), ("k", ks), ("v", vs)):
            if w not in srcs:
                continue  # paged: written below
            check = _ValueCheck(w, dtype)
            _write_rows(g, w, srcs[w], st.shape, store, check.convert)
            changed = check.finish(round)
            if changed:
                rounded.append(f"{w}{changed}")
        if pg is not None:
            for w, cache in zip(("k_cache", "v_cache"), _paged.stored(pg, dtype)):
                g.create_dataset(w, data=cache.astype(store), track_times=False)
            g.create_dataset("block_table", data=pg.table.astype(np.int32), track_times=False)
            g.attrs["kv_len"] = np.int64(ks.shape[2])
            if pg_changed:
                rounded.append(pg_changed)
        if sk_rounded:
            rounded.append(f"sinks{sk_rounded}")
        if mk is not None:
            src, shape, check = mk
            ds = _write_rows(g, "mask", src, shape, np.uint8,
                             check.convert if check else _as_stored)
            if check:
                check.finish()
            ds.attrs["bitorder"] = MASK_BITORDER
        if iv is not None:
            _dataset(g, "mask_intervals", iv)
        if bs is not None:
            check = _BiasCheck("bias")
            _write_rows(g, "bias", bs[0], bs[1], np.float32, check.convert)
            changed = check.finish(round)
            if changed:
                rounded.append(f"bias{changed}")
        if o is not None:  # an oracle passed in was computed from other inputs
            _oracle_rounded(rounded[0] if rounded else None)
        for key, arr in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k), ("sinks", sk)):
            if arr is not None:
                _dataset(g, key, arr)
        if o is not None:
            _write_rows(g, "out", o, (grid.b, grid.hq, grid.lq, grid.dv), np.float64,
                        _as_stored)
            _write_rows(g, "lse", l, (grid.b, grid.hq, grid.lq), np.float64, _as_stored)
        if bm is not None:
            _write_block_mask(g, bm)


# ---- add_tested ----

def _case_grid(path: str, case: str):
    """The case's grid, block sizes and tested labels, read from the file (whoever wrote it)."""
    if not os.path.exists(path):
        raise ValueError(f"{path}: no such file")
    _inspect(path)
    with h5py.File(path, "r") as f:
        g = f.get(f"cases/{case}") if case and "/" not in case else None
        if not isinstance(g, h5py.Group):
            raise ValueError(f"{path}: no case {case!r}")
        paged = "k_cache" in g  # the logical Lk is kv_len, Dv the cache's (read_case checks)
        for t in ("q",) + (("v_cache",) if paged else ("k", "v")):
            if not isinstance(g.get(t), h5py.Dataset) or g[t].ndim != 4:
                raise ValueError(f"{path}: /cases/{case}/{t}: missing or not "
                                 f"{'[num_pages, page_size, Hkv, Dv]' if paged else '[B, H, L, D]'}")
        b, hq, lq, _ = g["q"].shape
        lk = int(_attr(g, "kv_len")) if paged else g["k"].shape[2]
        grid = _Grid(b, hq, lq, lk, g["v_cache" if paged else "v"].shape[3],
                     "cu_seqlens_q" in g)
        sizes = (int(_attr(g, "q_block_size", 128)), int(_attr(g, "kv_block_size", 128)))
        labels = list(g["tested"]) if "tested" in g else []
    return grid, sizes, labels


def _tested_source(x, what: str, encoding, grid: _Grid):
    """(source, encoding, stored numpy type) of an output under test, checked as _tested_out
    checks it, read only when written (add_tested)."""
    _encoding(encoding)
    src = _Source(x, what)
    enc = _out_encoding(src.dtype, src.bf16, what, encoding)
    _grid_shape(src.shape, what, grid, 4)
    return src, enc, np.dtype(np.uint16) if enc else src.dtype


def _tested_lse(x, grid: _Grid):
    """(source, encoding, stored numpy type) of an LSE under test, stored in its own type as
    out is (_tested_out): float16/32/64 as they are, bfloat16 as uint16 bit patterns (encoding
    "bfloat16"). Kept in its type, not widened: an LSE in float16 or bfloat16 is judged at
    that type's resolution (docs/tolerance.md, H5)."""
    src = _Source(x, "lse")
    if src.bf16:
        enc, store = "bfloat16", np.dtype(np.uint16)
    elif src.dtype in (np.float16, np.float32, np.float64):
        enc, store = None, src.dtype
    else:
        raise ValueError(f"lse: dtype {src.dtype}: must be float16, float32, float64 or torch "
                         f"bfloat16")
    _grid_shape(src.shape, "lse", grid, 3)
    return src, enc, store


ROUNDINGS = ("flexattention",)  # the rounding profiles a producer may claim (docs/fixtures.md)


def add_tested(path, case, label, out, *, producer, lse=None, out_rerun=None, block_mask=None,
               encoding=None, overwrite=False, rounding=None) -> None:
    """Store what a kernel under test produced from case `case`'s inputs, as
    /cases/<case>/tested/<label>, for `flexcheck check` to judge (docs/tolerance.md) against
    the case's float64 out/lse.

    label: 1 to 64 characters of [A-Za-z0-9._-]; an existing label is refused unless
    overwrite=True. producer: free text naming engine, version, device (stored as attribute
    `producer`).

    out: [B, Hq, Lq, Dv] (for a packed case also vLLM's [T, Hq, Dv]), shape checked against the
    case's q and v. numpy float16/float32/float64 are stored as they are; a torch bfloat16
    tensor as uint16 bit patterns with attribute encoding = "bfloat16" (exact); numpy uint16
    bit patterns need encoding="bfloat16". NaN and infinities are allowed: they are what the
    gate judges.

    lse: optional natural-log LSE, [B, Hq, Lq] (for a packed case also FlashAttention's varlen
    [Hq, T]), stored in its own type like out: float16, float32, float64, or a torch bfloat16
    tensor as bit patterns; an LSE kept in float16 or bfloat16 is judged at that type's
    resolution (H5's bound plus half an ulp). Without it the LSE gate (H5) is not run.
    out_rerun: optional second run on the same inputs, stored like out (same encoding):
    the gate compares it bitwise (H7). block_mask: the producer's own, as in write_case
    (stored under the label; the default block sizes are the case's).
    rounding: "flexattention" claims that the producer rounds P to the input type as
    FlexAttention does (attribute `rounding`): on a p-round design (`<dtype>@design`, flexcheck
    export) the output is then held to that rounding (docs/tolerance.md p-round); without the
    claim the rule's finding is a note. None: no claim.

    Atomic, like write_case, and written as it is, chunk by chunk (module text: large
    layers): about one chunk held beyond the arrays given.
    """
    path = os.fspath(path)
    if not isinstance(label, str) or not LABEL_RE.fullmatch(label):
        raise ValueError(f"label {label!r}: must match [A-Za-z0-9._-]{{1,64}}")
    _text(producer, "producer", TEXT_MAX)
    if not isinstance(case, str):
        raise ValueError(f"case {case!r}: must be a case name")
    grid, sizes, labels = _case_grid(path, case)
    if label in labels and not overwrite:
        raise ValueError(f"{path}: /cases/{case}/tested/{label} exists; refusing to overwrite "
                         f"(overwrite=True)")
    o, enc, o_type = _tested_source(out, "out", encoding, grid)
    l, lenc, l_type = (None, None, None) if lse is None else _tested_lse(lse, grid)
    r = None
    if out_rerun is not None:
        r, renc, r_type = _tested_source(out_rerun, "out_rerun", encoding, grid)
        if renc != enc or r_type != o_type:
            raise ValueError(f"out_rerun: stored as {renc or r_type}, out as {enc or o_type}: "
                             f"a rerun is stored as the run")
    bm = _block_mask(block_mask, "block_mask", grid, sizes)
    if rounding is not None and rounding not in ROUNDINGS:
        raise ValueError(f"rounding {rounding!r}: None or one of {', '.join(ROUNDINGS)}")
    with _rewrite(path) as f:
        tg = f[f"cases/{case}"].require_group("tested")
        if label in tg:
            del tg[label]
        g = tg.create_group(label)
        g.attrs["producer"] = producer
        if rounding is not None:
            g.attrs["rounding"] = rounding
        out_shape = (grid.b, grid.hq, grid.lq, grid.dv)
        for key, src, store, e in (("out", o, o_type, enc), ("out_rerun", r, o_type, enc),
                                   ("lse", l, l_type, lenc)):
            if src is not None:
                ds = _write_rows(g, key, src, out_shape[:4 if key != "lse" else 3], store,
                                 _bits_stored if src.bf16 else _as_stored)
                if e:
                    ds.attrs["encoding"] = e
        if bm is not None:
            _write_block_mask(g, bm)


# ---- reading ----

@dataclasses.dataclass
class Tested:
    """/cases/<name>/tested/<label> as stored. encoding: how out is stored ("float16",
    "float32", "float64", or "bfloat16" for uint16 bit patterns: bfloat16_to_float32);
    lse_encoding the same of lse (its values here widened to float32 when bfloat16)."""
    label: str
    producer: str
    out: np.ndarray
    encoding: str
    lse: Optional[np.ndarray] = None     # widened to float32 when stored as bfloat16 bits
    lse_encoding: Optional[str] = None   # how lse was stored: "float16", "float32", ...
    out_rerun: Optional[np.ndarray] = None
    block_mask: Optional[Dict[str, Any]] = None


@dataclasses.dataclass
class Case:
    """/cases/<name> as stored: tensors in [B, H, L, D] layout, q/k/v in their storage type
    (float16 for float16 cases, float32 otherwise), out/lse None until filled; the score
    terms (docs/semantics.md section 7) softcap (0.0 = off) and sinks (None = none); the
    explicit terms (section 8) mask (bool [Bm, Hm, Lq, Lk], True = allowed: unpacked from the
    bits, or expanded from mask_intervals when the case stores those) and bias (float32
    [Bm, Hm, Lq, Lk]), None = none."""
    name: str
    dtype: str
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    causal: bool
    window: int
    chunk: int
    scale: float
    q_block_size: int = 128
    kv_block_size: int = 128
    out: Optional[np.ndarray] = None
    lse: Optional[np.ndarray] = None
    cu_seqlens_q: Optional[np.ndarray] = None
    cu_seqlens_k: Optional[np.ndarray] = None
    block_mask: Optional[Dict[str, Any]] = None
    generator: Optional[str] = None
    seed: Optional[int] = None
    layout: Optional[str] = None
    tested: Dict[str, Tested] = dataclasses.field(default_factory=dict)
    softcap: float = 0.0                 # logit soft-cap c, 0.0 = off
    sinks: Optional[np.ndarray] = None   # per-head sink logits [Hq], as stored
    schema: str = SCHEMA                 # the file's
    mask: Optional[np.ndarray] = None    # explicit mask, bool [Bm, Hm, Lq, Lk]
    mask_intervals: Optional[np.ndarray] = None  # int32 [Bm, Hm, Lq, 2] when stored so
    bias: Optional[np.ndarray] = None    # explicit bias, float32 [Bm, Hm, Lq, Lk]
    mask_rule: Optional[str] = None      # attribute mask_rule: the JSON rule text `export`
                                         # writes beside the bits (docs/fixtures.md); None when
                                         # absent or not a string (informational, as in C)
    # paged K/V as stored (k and v then hold the logical K/V gathered through the table)
    k_cache: Optional[np.ndarray] = None     # [num_pages, page_size, Hkv, D]
    v_cache: Optional[np.ndarray] = None     # [num_pages, page_size, Hkv, Dv]
    block_table: Optional[np.ndarray] = None  # int [R, max_pages]

    @property
    def packed(self) -> bool:
        return self.cu_seqlens_q is not None


def _read(g: h5py.Group, name: str) -> Optional[np.ndarray]:
    return g[name][()] if name in g else None


def _read_block_mask(g: h5py.Group) -> Optional[Dict[str, Any]]:
    if "block_mask" not in g:
        return None
    bg = g["block_mask"]
    bm: Dict[str, Any] = {f: bg[f][()] for f in _BM_FIELDS if f in bg}
    bm["q_block_size"] = int(_attr(bg, "q_block_size"))
    bm["kv_block_size"] = int(_attr(bg, "kv_block_size"))
    return bm


def _read_tested(g: h5py.Group) -> Dict[str, Tested]:
    tested = {}
    for label in sorted(g.get("tested", {})):
        tg = g["tested"][label]
        out = tg["out"]
        enc = _str_attr(_attr(out, "encoding", out.dtype))
        lse, lenc = None, None
        if "lse" in tg:
            ld = tg["lse"]
            lenc = _str_attr(_attr(ld, "encoding", ld.dtype))
            lse = ld[()]
            if lenc == "bfloat16":
                lse = bfloat16_to_float32(lse)
        tested[label] = Tested(label=label, producer=_str_attr(_attr(tg, "producer")),
                               out=out[()], encoding=enc, lse=lse, lse_encoding=lenc,
                               out_rerun=_read(tg, "out_rerun"),
                               block_mask=_read_block_mask(tg))
    return tested


def _read_terms(g: h5py.Group, path: str, name: str, hq: int):
    """(softcap, sinks) of a case, checked as the C reader checks them: a cap finite, >= 0
    (0 = off) and at most MAX_SOFTCAP, sinks float32 [Hq], finite and within MAX_SINK. Anything
    else is refused, naming the field, so that nothing downstream runs a case with a term it
    cannot honour or that flexcheck would refuse."""
    where = f"{path}: /cases/{name}"
    cap = 0.0
    if "softcap" in g.attrs:
        cap, text = _stored_softcap(g)
        if cap is None:
            raise ValueError(f"{where}: softcap: {text}: must be one number")
        if not (math.isfinite(cap) and cap >= 0):
            raise ValueError(f"{where}: softcap = {cap!r}: must be finite and > 0 (0 = off)")
        if cap > MAX_SOFTCAP:  # the C reader's bound: a file it refuses is refused here too
            raise ValueError(f"{where}: softcap = {cap!r}: the reader takes at most "
                             f"{MAX_SOFTCAP:g}")
    sinks = None
    if "sinks" in g:
        ds = g["sinks"]
        # float32 only, as the C reader: the case's sinks are float32 values by definition
        if not isinstance(ds, h5py.Dataset) or ds.dtype != np.float32 or ds.shape != (hq,):
            what = (f"{ds.dtype} of shape {list(ds.shape)}" if isinstance(ds, h5py.Dataset)
                    else "not a dataset")
            raise ValueError(f"{where}: sinks: {what}: must be float32 [Hq] = [{hq}]")
        sinks = ds[()]
        bad = ~np.isfinite(sinks)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{where}: sinks: value {float(sinks[i])!r} at [{i}] is not finite")
        bad = np.abs(sinks) > MAX_SINK
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{where}: sinks: value {float(sinks[i])!r} at [{i}]: the reader "
                             f"takes |sink| <= {MAX_SINK:g}")
    return cap, sinks


def _read_xterms(g: h5py.Group, path: str, name: str, grid: _Grid):
    """(mask, mask_intervals, bias) of a case, checked as the C reader checks them (shapes
    against the case, the mask's type and bit order, the intervals within [0, Lk], the bias
    float32, finite and within MAX_BIAS), each refusal naming the field, so that nothing
    downstream reads the wrong bits or a term flexcheck would refuse."""
    where = f"{path}: /cases/{name}"
    mask = iv = bias = None
    if "mask" in g and "mask_intervals" in g:
        raise ValueError(f"{where}: both mask and mask_intervals: the mask is stored once")
    rb = (grid.lk + 7) // 8
    try:
        if "mask" in g:
            ds = g["mask"]
            if ds.dtype != np.uint8:
                raise ValueError(f"mask: dtype {ds.dtype}: must be uint8 (packed bits)")
            order = _str_attr(_attr(ds, "bitorder", "(missing)"))
            if order != MASK_BITORDER:
                raise ValueError(f"mask: attribute bitorder = {order!r}: must be "
                                 f"{MASK_BITORDER!r}")
            _xterm_shape(ds.shape, "mask", grid, rb, "ceil(Lk / 8)")
            mask = np.unpackbits(ds[()], axis=-1, count=grid.lk,
                                 bitorder=MASK_BITORDER).astype(bool)
        if "mask_intervals" in g:
            iv = _mask_intervals(g["mask_intervals"][()], grid)
            keys = np.arange(grid.lk)
            mask = (keys >= iv[..., :1]) & (keys < iv[..., 1:])
        if "bias" in g:
            ds = g["bias"]
            if ds.dtype != np.float32:
                raise ValueError(f"bias: dtype {ds.dtype}: must be float32")
            _xterm_shape(ds.shape, "bias", grid, grid.lk, "Lk")
            bias = ds[()]
            check = _BiasCheck("bias")
            check.convert(bias, lambda i: i)
            check.finish(False)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    return mask, iv, bias


def read_case(path, name) -> Case:
    """Case `name` of fixture file `path`, as stored. The schema must be flexcheck-fixture-1
    to -4, a version-1 file may hold no score term, a version-1 or -2 file no explicit term
    and a version-1 to -3 file no paged K/V; paged K/V (k_cache, v_cache, block_table) are
    returned as stored with k and v the logical K/V gathered through the table (checked as the
    C reader checks them: used entries in range, the values read finite and representable);
    and the terms must be well formed (a cap finite, >= 0 and <= 1e6, sinks float32 [Hq]
    finite and within +-1e4; the explicit mask uint8 bit-packed with bitorder "little" or
    intervals within [0, Lk], the bias float32, finite and within +-1e6, each of a shape the
    case takes; as the C reader takes them): each refusal a ValueError naming file, case and
    field. An attribute stored as a
    one-element array is read as its value, as the C reader reads it; a missing required one,
    or one of more or fewer values, is refused. Otherwise no validation beyond what h5py
    does: `flexcheck check` is the validator."""
    path = os.fspath(path)
    with h5py.File(path, "r") as f:
        schema = _schema(f, path)
        if f"cases/{name}" not in f:
            raise ValueError(f"{path}: no case {name!r}")
        g = f[f"cases/{name}"]
        _refuse_v1_terms(f, path, schema, [name])
        layout = _attr(f, "layout", None)
        q = g["q"][()]
        softcap, sinks = _read_terms(g, path, name, q.shape[1] if q.ndim == 4 else -1)
        dtype = _str_attr(_attr(g, "dtype"))
        pg, k, v = _read_paged(g, path, name, q, dtype)
        mask = iv = bias = None
        if any(x in g for x in XTERM_FIELDS):
            k_shape, v_shape = k.shape, v.shape
            if q.ndim != 4 or len(k_shape) != 4 or len(v_shape) != 4:
                raise ValueError(f"{path}: /cases/{name}: q, k, v: not [B, H, L, D]")
            grid = _Grid(q.shape[0], q.shape[1], q.shape[2], k_shape[2], v_shape[3],
                         "cu_seqlens_q" in g)
            mask, iv, bias = _read_xterms(g, path, name, grid)
        return Case(
            name=name, dtype=dtype, q=q, k=k, v=v,
            causal=bool(_attr(g, "causal")), window=int(_attr(g, "sliding_window")),
            chunk=int(_attr(g, "chunk_size")), scale=float(_attr(g, "scale")),
            q_block_size=int(_attr(g, "q_block_size", 128)),
            kv_block_size=int(_attr(g, "kv_block_size", 128)),
            out=_read(g, "out"), lse=_read(g, "lse"),
            cu_seqlens_q=_read(g, "cu_seqlens_q"), cu_seqlens_k=_read(g, "cu_seqlens_k"),
            block_mask=_read_block_mask(g),
            generator=None if "generator" not in g.attrs else _str_attr(_attr(g, "generator")),
            seed=None if "seed" not in g.attrs else int(_attr(g, "seed")),
            layout=None if layout is None else _str_attr(layout),
            tested=_read_tested(g), softcap=softcap, sinks=sinks, schema=schema, mask=mask,
            mask_intervals=iv, bias=bias, mask_rule=_opt_text(g, "mask_rule"),
            k_cache=None if pg is None else pg.k_cache,
            v_cache=None if pg is None else pg.v_cache,
            block_table=None if pg is None else pg.table.astype(np.int32))


def _opt_text(g: h5py.Group, key: str) -> Optional[str]:
    """An optional informational string attribute (flexcheck's own, like case_id): None when
    absent or not one string, as the C reader ignores such a value."""
    if key not in g.attrs:
        return None
    v = g.attrs[key]
    if isinstance(v, np.ndarray):
        v = v.reshape(-1)[0] if v.size == 1 else None
    if isinstance(v, bytes):
        try:
            return v.decode()
        except UnicodeDecodeError:
            return None
    return v if isinstance(v, str) else None


def _read_paged(g: h5py.Group, path: str, name: str, q: np.ndarray, dtype: str):
    """(paged form or None, logical k, logical v) of a case: k and v as stored, or gathered
    through the stored table and checked as the C reader checks them (_paged.gather), each
    refusal naming file, case and field."""
    where = f"{path}: /cases/{name}"
    try:
        pg = _paged.given(_read(g, "k"), _read(g, "v"), _read(g, "k_cache"),
                          _read(g, "v_cache"), _read(g, "block_table"))
        if pg is None:
            return None, g["k"][()], g["v"][()]
        cu_k = _read(g, "cu_seqlens_k")
        lk = _paged.kv_len(pg, _attr(g, "kv_len", None), cu_k)
        k, v, _ = _paged.gather(pg, q.shape[0], lk, cu_k, dtype)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    return pg, k, v


def list_cases(path) -> List[str]:
    """The case names of `path` in processing order (byte order, as flexcheck reads them)."""
    with h5py.File(os.fspath(path), "r") as f:
        return sorted(f.get("cases", {}), key=lambda s: s.encode())
