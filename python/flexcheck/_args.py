"""flexcheck._args - the arrays and arguments the fixture writer (fixtures.py) and the in-process
judge (judging.py) take, checked one way for both: numpy arrays and torch tensors on any device
(torch imported only when given one), bfloat16 as bit patterns or widened values, inputs exactly
representable in the case's dtype, the scalar terms (causal, scale, softcap, sinks), the shapes
(PyTorch's [B, H, L, D] and vLLM's packed [T, H, D] with cu_seqlens) and an output under test's
storage. Private: the names a user calls (round_to, bfloat16_bits, bfloat16_to_float32, DTYPES)
are re-exported by flexcheck.fixtures and the package; everything else may change.

Each refusal is a ValueError naming the argument (its `what`), as write_case and judge document.
"""
from __future__ import annotations

import dataclasses
import decimal
import math
import mmap
import numbers
import operator
from typing import Dict, Optional, Tuple

import numpy as np

DTYPES = ("float32", "float16", "bfloat16")
INT32_MAX = 2**31 - 1
# The score terms' bounds (masks/terms.h TERMS_MAX_SOFTCAP, TERMS_MAX_SINK): far beyond any
# model's (Gemma 2 caps at 50; sinks are logits), small enough for the C side's arithmetic.
MAX_SOFTCAP = 1e6
MAX_SINK = 1e4


# ---- arrays: numpy, torch (imported only when given a tensor), bfloat16 bits ----

def _is_torch(x) -> bool:
    """True for torch objects, told by their module so that torch is never imported for
    numpy users."""
    mod = type(x).__module__
    return mod == "torch" or mod.startswith("torch.")


def _as_array(x, what: str) -> Tuple[np.ndarray, bool]:
    """(numpy array in the machine's byte order, True if the values came as bfloat16).
    bfloat16 tensors (and ml_dtypes arrays) go through float32, which holds every bfloat16
    value exactly. A big-endian array (">f2", as h5py or np.frombuffer can hand out) is
    converted value for value: every check below compares dtypes with == np.float16 and friends,
    which a non-native dtype never equals, so it would be taken for another type."""
    if x is None:
        raise ValueError(f"{what}: missing")
    if _is_torch(x):
        import torch  # lazily: only a caller holding tensors needs torch

        t = x.detach().cpu()
        if t.dtype == torch.bfloat16:
            return t.to(torch.float32).numpy(), True
        return t.numpy(), False
    a = np.asarray(x)
    if a.dtype.name == "bfloat16":  # ml_dtypes (JAX): not a numpy float kind
        return a.astype(np.float32), True
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return a, False


# numpy 2 moved byte_bounds to numpy.lib.array_utils
_byte_bounds = getattr(np, "byte_bounds", None) or getattr(
    getattr(np.lib, "array_utils", None), "byte_bounds", None)


class _Shaped:
    """What the shape checks (_check_qkv_shapes, _packed_seqs) read of an array: its shape."""

    def __init__(self, shape):
        self.shape = tuple(shape)


class _Source:
    """A tensor read one block at a time, so that a large layer is never held twice: numpy
    arrays in place (any strides or byte order), np.memmap from its file, torch tensors on any
    device (one block copied to the host at a time; torch imported only when given a tensor).
    shape is the tensor's as given; dtype the numpy type of a block as read() returns it
    (native byte order; bfloat16, from torch or ml_dtypes, widened to float32 with bf16 set).

    A memmap's block is copied out and its pages then released (MADV_DONTNEED): read through
    the mapping, every page read would otherwise stay resident and the whole file end up
    counted in the process. The file's page cache keeps them; a shared mapping ("r", "r+",
    "w+") reads them back unchanged if touched again. A copy-on-write one ("c") is left alone:
    releasing would drop the caller's changes."""

    def __init__(self, x, what: str):
        if x is None:
            raise ValueError(f"{what}: missing")
        self.what = what
        self._torch = _is_torch(x)
        self._mm = None
        if self._torch:
            import torch  # lazily: only a caller holding tensors needs torch

            self.bf16 = x.dtype == torch.bfloat16
            self.dtype = (np.dtype(np.float32) if self.bf16
                          else torch.empty(0, dtype=x.dtype).numpy().dtype)
        else:
            if not isinstance(x, np.ndarray):
                x = np.asarray(x)
            self.bf16 = x.dtype.name == "bfloat16"  # ml_dtypes (JAX): not a numpy float kind
            self.dtype = np.dtype(np.float32) if self.bf16 else x.dtype.newbyteorder("=")
            mm = getattr(x, "_mmap", None) if isinstance(x, np.memmap) else None
            if mm is not None and x.mode != "c" and hasattr(mm, "madvise"):
                self._mm = mm
                self._mm_start = np.frombuffer(mm, np.uint8).ctypes.data
        self._x = x
        self.shape = tuple(x.shape)

    def read(self, index) -> np.ndarray:
        """x[index] as a numpy array (a copy where the source is not plain host memory)."""
        part = self._x[index]
        if self._torch:
            part = part.detach().to("cpu")
            return (part.float() if self.bf16 else part).numpy()
        if self.bf16 or not part.dtype.isnative:
            block = part.astype(self.dtype)  # value for value: see _as_array
        elif self._mm is not None:
            block = np.array(part)  # a copy: its pages are released below
        else:
            return part
        if self._mm is not None and part.size:
            lo, hi = _byte_bounds(part)
            start = (lo - self._mm_start) // mmap.PAGESIZE * mmap.PAGESIZE
            self._mm.madvise(mmap.MADV_DONTNEED, start, hi - self._mm_start - start)
        return block


def bfloat16_bits(x, *, round: bool = True) -> np.ndarray:
    """uint16 bfloat16 bit patterns of float32 values `x`, rounded to nearest even (the
    rounding PyTorch's .to(torch.bfloat16) does). NaNs stay NaN (quiet); values past the
    largest bfloat16 become infinities. With round=False, a value that is not exactly a
    bfloat16 raises ValueError instead.

    Done on the float32 bit patterns: adding 0x7FFF plus the kept part's lowest bit and
    dropping the 16 low bits rounds half to even, and a carry out of the mantissa moves to
    the exponent (up to infinity), exactly as IEEE rounding does."""
    a = np.asarray(x)
    if a.dtype != np.float32:
        raise ValueError(f"bfloat16_bits: dtype {a.dtype}: give float32 values")
    u = a.view(np.uint32).astype(np.uint64)  # room for the carry past 0xFFFFFFFF
    if not round:
        low = (u & 0xFFFF) != 0
        low &= ~np.isnan(a)
        if low.any():
            i = _first(low)
            raise ValueError(f"bfloat16_bits: value {float(a[i])!r} at {_fmt_index(i)} is not "
                             f"representable in bfloat16")
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    quiet_nan = (u >> 16) | 0x0040
    return np.where(np.isnan(a), quiet_nan, rounded).astype(np.uint16)


def bfloat16_to_float32(bits) -> np.ndarray:
    """float32 values of uint16 bfloat16 bit patterns (exact: bfloat16 is float32's top half)."""
    b = np.asarray(bits)
    if b.dtype != np.uint16:
        raise ValueError(f"bfloat16_to_float32: dtype {b.dtype}: give uint16 bit patterns")
    return (b.astype(np.uint32) << 16).view(np.float32)


def _first(mask: np.ndarray) -> Tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _fmt_index(idx: Tuple[int, ...]) -> str:
    """[0][1][2][3]: the C reader's spelling of an element index."""
    return "".join(f"[{i}]" for i in idx)


def round_to(x, dtype: str) -> np.ndarray:
    """Floating-point values x rounded to nearest even in dtype ("float32", "float16" or
    "bfloat16"), in the type q/k/v are stored as: float16 for float16, float32 otherwise
    (bfloat16 values as float32 values with 16 zero bits). float64 values bound for bfloat16
    are rounded to float32 first. Values past the type's range become infinities."""
    if dtype not in ("float32", "float16", "bfloat16"):
        raise ValueError(f"round_to: dtype {dtype!r}: must be float32, float16 or bfloat16")
    a, _ = _as_array(x, "round_to")  # numpy, torch (bfloat16 included), ml_dtypes
    if a.dtype.kind != "f":
        raise ValueError(f"round_to: dtype {a.dtype}: give floating-point values")
    with np.errstate(over="ignore", invalid="ignore"):  # callers report overflow
        if dtype == "float16":
            return a.astype(np.float16)
        x32 = a.astype(np.float32)
        if dtype == "float32":
            return x32
        return bfloat16_to_float32(bfloat16_bits(x32))


ROUND_HINT = "(round=True rounds to nearest even)"


def _input_values(a: np.ndarray, what: str, dtype: str, round: bool,
                  hint: str = ROUND_HINT) -> Tuple[np.ndarray, Optional[str]]:
    """(q, k, v or the sinks converted to the storage type; None, or where rounding first
    changed a value, "[i]..: x -> y", for a message). Values must be finite and exactly
    representable in dtype: silently rounding an engine's inputs would make flexcheck judge
    a different attention call than the one the engine ran. hint: how the caller's API rounds,
    for the refusal."""
    if a.dtype.kind != "f":
        raise ValueError(f"{what}: dtype {a.dtype}: must be floating point")
    check = _ValueCheck(what, dtype)
    r = check.convert(a, lambda i: i)  # the whole array as one block
    return r, check.finish(round, hint)


class _ValueCheck:
    """The checks of _input_values on a tensor converted block by block (write_case), with the
    refusal naming the same element as on the whole tensor, whatever order the blocks come in:
    the first non-finite value in the tensor's own row-major order, else the first that
    overflows dtype (before exactness: a value past the type's range is not a rounding
    matter), else the first that needs rounding. So each kind keeps its earliest offender
    across blocks, and finish() decides once every block was seen."""

    def __init__(self, what: str, dtype: str):
        self.what, self.dtype = what, dtype
        self.first: Dict[str, Tuple[Tuple[int, ...], float, float]] = {}

    def convert(self, a: np.ndarray, where) -> np.ndarray:
        """Block a (floating point) in the storage type. where(i): the tensor's index of the
        block's index i; it must keep the block's row-major order (a block is a run of rows of
        one head, so it does)."""
        r = round_to(a, self.dtype)
        finite = np.isfinite(a)
        self._see("not finite", ~finite, a, r, where)
        self._see("overflow", finite & ~np.isfinite(r), a, r, where)
        with np.errstate(over="ignore"):  # float16 data bound for bfloat16 can round past 65504
            self._see("inexact", r.astype(a.dtype) != a, a, r, where)
        return r

    def _see(self, kind: str, bad: np.ndarray, a, r, where) -> None:
        if not bad.any():
            return
        j = np.unravel_index(int(np.argmax(bad)), bad.shape)  # the block's first
        i = tuple(int(x) for x in where(j))
        if kind not in self.first or i < self.first[kind][0]:
            self.first[kind] = (i, float(a[j]), float(r[j]))

    def finish(self, round: bool, hint: str = ROUND_HINT) -> Optional[str]:
        """Raises for the tensor's first offender (as above); else None, or with round=True
        where rounding first changed a value, "[i]..: x -> y"."""
        what = self.what
        if "not finite" in self.first:
            i, x, _ = self.first["not finite"]
            raise ValueError(f"{what}: value {x!r} at {_fmt_index(i)} is not finite "
                             f"(inputs must be finite)")
        if "overflow" in self.first:
            i, x, _ = self.first["overflow"]
            raise ValueError(f"{what}: value {x!r} at {_fmt_index(i)} overflows {self.dtype}")
        if "inexact" not in self.first:
            return None
        i, x, y = self.first["inexact"]
        if not round:
            raise ValueError(f"{what}: value {x!r} at {_fmt_index(i)} is not "
                             f"representable in {self.dtype} {hint}")
        return f"{_fmt_index(i)}: {x!r} -> {y!r}"


def _infer_dtype(q: np.ndarray, q_bf16: bool) -> str:
    """float16 from float16, bfloat16 from bfloat16, float32 from float32 and float64."""
    if q_bf16:
        return "bfloat16"
    return "float16" if q.dtype == np.float16 else "float32"


# ---- scalar arguments ----

def _int_arg(value, what: str, lo: int, hi: int) -> int:
    """An integer in [lo, hi]; floats are refused rather than truncated, booleans (an int to
    Python: window=True would be W = 1) rather than taken for 0 and 1."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{what}: {value!r} is not an integer")
    try:
        v = operator.index(value)
    except TypeError:
        raise ValueError(f"{what}: {value!r} is not an integer") from None
    if not lo <= v <= hi:
        raise ValueError(f"{what} = {v}: must be in [{lo}, {hi}]")
    return v


def _flag(value, what: str) -> bool:
    """A boolean: True/False (numpy's too) or the integers 0/1. Nothing else: "False" is a
    true string, None and 2 are not answers, 1.0 is a float."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if not isinstance(value, (str, bytes)):
        try:
            v = operator.index(value)
        except TypeError:
            v = None
        if v in (0, 1):
            return bool(v)
    raise ValueError(f"{what} = {value!r}: must be True/False or 0/1")


def _real(value, what: str) -> float:
    """One real number as a float: Python numbers (Fraction and Decimal too), numpy scalars and
    0-d arrays, torch scalar tensors. Booleans, strings (float("0.17") would parse: a number is
    meant), bytes, complex numbers and arrays with elements are refused, naming `what`."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise ValueError(f"{what}: {value!r} is not a number")
    if isinstance(value, np.ndarray) or _is_torch(value):
        a, _ = _as_array(value, what)
        if a.ndim != 0 or a.dtype.kind not in "fiu":
            raise ValueError(f"{what}: {value!r} is not a number")
        value = a[()]
    if not isinstance(value, (numbers.Real, decimal.Decimal)):
        raise ValueError(f"{what}: {value!r} is not a number")
    try:
        return float(value)
    except OverflowError:  # an int or Fraction past float's range
        raise ValueError(f"{what}: a {type(value).__name__} beyond float's range") from None


def _scale(scale, d: int) -> float:
    """The softmax scale; None is the usual 1/sqrt(D) (flexcheck gen's default)."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    s = _real(scale, "scale")
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"scale = {s!r}: must be finite and > 0")
    return s


def _softcap(softcap, where: str) -> float:
    """The logit soft-cap c (docs/semantics.md section 7); 0.0 when off (None or 0). A cap must
    be one finite number > 0: tanh(s / c) of a negative, NaN or infinite c is not a cap. Python
    numbers (Fraction and Decimal too), numpy scalars and 0-d arrays and torch scalar tensors
    count as numbers; booleans, strings and arrays with elements do not."""
    if softcap is None:
        return 0.0
    if isinstance(softcap, (bool, np.bool_)):  # float(True) is 1.0: almost surely not meant
        raise ValueError(f"{where}softcap = {softcap!r}: give the cap as a number (0 or None = "
                         f"off)")
    if isinstance(softcap, (numbers.Real, decimal.Decimal)):
        try:
            c = float(softcap)
        except OverflowError:  # an int or Fraction past float's range (its repr: pages)
            raise ValueError(f"{where}softcap: a {type(softcap).__name__} beyond float's range: "
                             f"must be finite, > 0 and at most {MAX_SOFTCAP:g}") from None
    elif isinstance(softcap, np.ndarray) or _is_torch(softcap):
        a, _ = _as_array(softcap, f"{where}softcap")  # detached, on the CPU, bfloat16 widened
        if a.dtype.kind == "b":
            raise ValueError(f"{where}softcap = {softcap!r}: give the cap as a number (0 or "
                             f"None = off)")
        if a.ndim != 0 or a.dtype.kind not in "fiu":
            raise ValueError(f"{where}softcap: {softcap!r} is not a number")
        c = float(a)
    else:  # str and bytes ("30" would parse: a number is meant), lists, complex, ...
        raise ValueError(f"{where}softcap: {softcap!r} is not a number")
    if c == 0.0:
        return 0.0
    if not (math.isfinite(c) and c > 0):
        raise ValueError(f"{where}softcap = {c!r}: must be finite and > 0 (0 or None = off)")
    if c > MAX_SOFTCAP:
        raise ValueError(f"{where}softcap = {c!r}: the reader takes at most {MAX_SOFTCAP:g}")
    return c


def _sinks(sinks, where: str, hq: int, round: bool,
           hint: str = ROUND_HINT) -> Tuple[Optional[np.ndarray], Optional[str]]:
    """(per-head sink logits as stored, where rounding changed one as _input_values says):
    float32 [Hq], finite, checked as q/k/v are (_input_values): the case must hold the logits
    the engine used, so values must be float32 values (float16 and bfloat16 ones are);
    round=True rounds float64 ones to nearest even."""
    if sinks is None:
        return None, None
    a, _ = _as_array(sinks, f"{where}sinks")
    if a.shape != (hq,):
        raise ValueError(f"{where}sinks: shape {list(a.shape)}: must be [Hq] = [{hq}]")
    r, changed = _input_values(a, f"{where}sinks", "float32", round, hint)
    bad = np.abs(r) > MAX_SINK
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{where}sinks: value {float(a[i])!r} at [{i}]: the reader takes "
                         f"|sink| <= {MAX_SINK:g}")
    return r, changed


# ---- shapes ----

@dataclasses.dataclass(frozen=True)
class _Grid:
    """What other fields are checked against: B, Hq, Lq and Lk (T_q and T_k when packed) and
    Dv of a case."""
    b: int
    hq: int
    lq: int
    lk: int
    dv: int
    packed: bool


def _unpack(a: np.ndarray) -> np.ndarray:
    """vLLM's packed [T, H, D] as [1, H, T, D]."""
    return np.ascontiguousarray(a.transpose(1, 0, 2)[np.newaxis])


def _qkv_layout(q, k, v, packed: bool) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q, k, v as [B, H, L, D]. Rank 3 is the packed layout and needs cu_seqlens."""
    if _qkv_ranks(q.shape, k.shape, v.shape, packed) == 3:
        q, k, v = _unpack(q), _unpack(k), _unpack(v)
    return q, k, v


def _qkv_ranks(qs, ks, vs, packed: bool) -> int:
    """The rank q, k, v are given in (shapes qs, ks, vs): 4, or 3 for the packed layout, which
    needs cu_seqlens; anything else refused."""
    shapes = {"q": qs, "k": ks, "v": vs}
    for what, shape in shapes.items():
        if len(shape) == 3 and not packed:
            raise ValueError(f"{what}: rank 3 is vLLM's packed [T, H, D] layout: give "
                             f"cu_seqlens_q and cu_seqlens_k with it (or use [B, H, L, D])")
        if len(shape) not in (3, 4):
            raise ValueError(f"{what}: shape {list(shape)}: must be [B, H, L, D]"
                             + (" or packed [T, H, D]" if packed else ""))
    ranks = {what: len(shape) for what, shape in shapes.items()}
    if len(set(ranks.values())) != 1:
        raise ValueError(f"q, k, v: ranks {ranks['q']}, {ranks['k']}, {ranks['v']}: give all "
                         f"three in the same layout")
    return ranks["q"]


def _logical(shape: Tuple[int, ...], rank: int) -> Tuple[int, ...]:
    """The stored [B, H, L(, D)] shape of a tensor given in `shape`: a rank-one-less shape is
    packed, [T, H, D] (q, k, v, out) or [H, T] (an LSE), stored as [1, H, T(, D)]."""
    if len(shape) == rank - 1:
        return (1, shape[1], shape[0], shape[2]) if rank == 4 else (1,) + tuple(shape)
    return tuple(shape)


def _check_qkv_shapes(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
    """The shape rules of docs/fixtures.md, each refusal naming the tensor at fault."""
    (b, hq, _, d), (bk, hkv, lk, dk), (bv, hv, lv, _) = q.shape, k.shape, v.shape
    for what, t in (("q", q), ("k", k), ("v", v)):
        if min(t.shape[0], t.shape[1], t.shape[3]) < 1:
            raise ValueError(f"{what}: shape {list(t.shape)}: B, H and D must be >= 1")
    if bk != b or bv != b:
        raise ValueError(f"{'k' if bk != b else 'v'}: batch {bk if bk != b else bv}, q has {b}")
    if dk != d:
        raise ValueError(f"k: head dim {dk}, q has D = {d}")
    if hv != hkv or lv != lk:
        raise ValueError(f"v: shape {list(v.shape)} disagrees with k {list(k.shape)} "
                         f"(Hkv and Lk must match)")
    if hq % hkv:
        raise ValueError(f"q, k: Hq = {hq} is not a multiple of Hkv = {hkv}")


def _cu_seqlens(cu, what: str, total: int, tensor: str) -> np.ndarray:
    """A packed batch's offsets: int32, from 0, non-decreasing, ending at the token count."""
    a, _ = _as_array(cu, what)
    if a.ndim != 1 or a.size < 2:
        raise ValueError(f"{what}: shape {list(a.shape)}: must be [R + 1], R >= 1 sequences")
    if a.dtype.kind not in "iu":
        raise ValueError(f"{what}: dtype {a.dtype}: must be integers")
    if a.size and int(a.max()) > INT32_MAX:  # before int64: a uint64 past it would turn negative
        raise ValueError(f"{what}: value {int(a.max())} at index {int(np.argmax(a))}: past "
                         f"int32 ({INT32_MAX})")
    a = a.astype(np.int64)
    if a[0] != 0:
        raise ValueError(f"{what}: starts at {a[0]}: must start at 0")
    steps = np.diff(a)
    if (steps < 0).any():
        i = int(np.argmax(steps < 0))
        raise ValueError(f"{what}: decreases at index {i + 1} ({a[i]} -> {a[i + 1]}): must be "
                         f"non-decreasing")
    if a[-1] != total:
        raise ValueError(f"{what}: ends at {a[-1]}: must end at the {total} tokens of {tensor}")
    return a.astype(np.int32)


def _packed_seqs(cu_q, cu_k, q: np.ndarray, k: np.ndarray):
    """(cu_q, cu_k) as int32, or (None, None) for a dense case."""
    if cu_q is None and cu_k is None:
        return None, None
    if cu_q is None or cu_k is None:
        given, missing = ("cu_seqlens_q", "cu_seqlens_k") if cu_k is None else \
                         ("cu_seqlens_k", "cu_seqlens_q")
        raise ValueError(f"{given} given without {missing}: give both or neither")
    if q.shape[0] != 1:
        raise ValueError(f"q: batch {q.shape[0]}: a packed case (cu_seqlens) has B = 1")
    cq = _cu_seqlens(cu_q, "cu_seqlens_q", q.shape[2], "q")
    ck = _cu_seqlens(cu_k, "cu_seqlens_k", k.shape[2], "k")
    if cq.size != ck.size:
        raise ValueError(f"cu_seqlens_k: {ck.size} entries, cu_seqlens_q has {cq.size}: one "
                         f"entry per sequence boundary on both sides")
    return cq, ck


def _to_grid(a: np.ndarray, what: str, grid: _Grid, rank: int) -> np.ndarray:
    """An output-like array in the case's stored layout: out [B, Hq, Lq, Dv] (packed also
    [T, Hq, Dv]) when rank is 4, lse [B, Hq, Lq] (packed also FlashAttention's [Hq, T]) when
    rank is 3."""
    if _grid_shape(a.shape, what, grid, rank) != a.shape:
        a = _unpack(a) if rank == 4 else a[np.newaxis]
    return np.ascontiguousarray(a)


def _grid_shape(shape, what: str, grid: _Grid, rank: int) -> Tuple[int, ...]:
    """The stored shape of an output-like tensor given in `shape` (_to_grid's layouts), or a
    ValueError naming `what` and the layouts the case takes."""
    shape = tuple(shape)
    if grid.packed and len(shape) == rank - 1:
        shape = _logical(shape, rank)
    want = (grid.b, grid.hq, grid.lq, grid.dv)[:rank]
    if shape != want:
        packed = (" or [T, Hq, Dv]" if rank == 4 else " or [Hq, T]") if grid.packed else ""
        names = "[B, Hq, Lq, Dv]" if rank == 4 else "[B, Hq, Lq]"
        raise ValueError(f"{what}: shape {list(shape)}: the case needs {names} = "
                         f"{list(want)}{packed}")
    return shape


# ---- outputs under test ----

def _bits_stored(block: np.ndarray, where) -> np.ndarray:
    """A widened bfloat16 block back to its uint16 bit patterns: exact, the 16 low bits of a
    widened bfloat16 being zero (NaN too)."""
    return (np.ascontiguousarray(block, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _tested_out(x, what: str, encoding, grid: _Grid) -> Tuple[np.ndarray, Optional[str]]:
    """An output under test as stored, whole (judge): float16/32/64 as is, bfloat16 as uint16
    bit patterns (encoding "bfloat16"). NaN and infinities are kept: they are what the gate
    judges."""
    _encoding(encoding)
    a, bf16 = _as_array(x, what)
    enc = _out_encoding(a.dtype, bf16, what, encoding)
    if bf16:
        a = _bits_stored(a, None)
    return _to_grid(a, what, grid, 4), enc


def _encoding(encoding) -> None:
    if encoding not in (None, "bfloat16"):
        raise ValueError(f"encoding {encoding!r}: the only encoding is 'bfloat16' (uint16 bit "
                         f"patterns)")


def _out_encoding(dtype: np.dtype, bf16: bool, what: str, encoding) -> Optional[str]:
    """How an output under test of numpy type dtype (bf16: bfloat16 widened) is stored: as it
    is (None) or as uint16 bfloat16 bit patterns ("bfloat16")."""
    if bf16:
        return "bfloat16"
    if dtype == np.uint16:
        if encoding != "bfloat16":
            raise ValueError(f"{what}: uint16 data: bfloat16 bit patterns need "
                             f"encoding='bfloat16'")
        return "bfloat16"
    if dtype in (np.float16, np.float32, np.float64):
        if encoding is not None:
            raise ValueError(f"{what}: encoding='bfloat16' names uint16 bit patterns, {what} is "
                             f"{dtype}")
        return None
    raise ValueError(f"{what}: dtype {dtype}: must be float16, float32, float64, torch "
                     f"bfloat16 or uint16 bfloat16 bit patterns")
