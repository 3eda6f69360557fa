"""flexcheck._paged - paged K/V as a serving engine holds them (docs/fixtures.md "Paged K/V"),
for write_case, read_case and judge: the arguments checked (one form of K/V, each form whole),
the table followed, and the logical K/V gathered, as the C reader (fixtures/fix_paged.c) does.

The layout is vLLM's: k_cache [num_pages, page_size, Hkv, D] and v_cache [num_pages, page_size,
Hkv, Dv] (its FlashAttention backend's kv_cache[0] and [1]), block_table [R, max_pages] of
physical page numbers, one row per sequence (a dense batch entry, or a packed sequence of
cu_seqlens_k), key t of sequence r at slot t % page_size of page block_table[r][t //
page_size]. Only the entries a sequence's ceil(len / page_size) pages need are read, and only
the slots below its length: the rest (padding, stale pages) may hold anything, NaN included.
"""
import dataclasses
from typing import List, Optional, Tuple

import numpy as np

from ._args import INT32_MAX, _as_array, _ValueCheck, round_to

PAGED_FIELDS = ("k_cache", "v_cache", "block_table")
FORMS = ("give k and v (contiguous [B, Hkv, Lk, D] or packed [T, Hkv, D]), or k_cache "
         "[num_pages, page_size, Hkv, D], v_cache [num_pages, page_size, Hkv, Dv] and "
         "block_table [R, max_pages] (paged, vLLM's layout)")


@dataclasses.dataclass
class Paged:
    """A paged cache as given: caches as numpy arrays in their own type (bfloat16 widened to
    float32, bf16 set), the table as int64."""
    k_cache: np.ndarray
    v_cache: np.ndarray
    table: np.ndarray
    bf16: bool

    @property
    def page_size(self) -> int:
        return int(self.k_cache.shape[1])


def given(k, v, k_cache, v_cache, block_table) -> Optional[Paged]:
    """The paged form when k_cache, v_cache and block_table are given (checked: shapes, types),
    None when k and v are; a ValueError saying what to pass for anything else (both forms,
    neither, or a paged form missing a piece)."""
    paged = {"k_cache": k_cache, "v_cache": v_cache, "block_table": block_table}
    have = [n for n, x in paged.items() if x is not None]
    plain = [n for n, x in (("k", k), ("v", v)) if x is not None]
    if have and plain:
        raise ValueError(f"{', '.join(plain)} and {', '.join(have)}: K/V in one form: {FORMS}")
    if not have:
        if len(plain) < 2:
            missing = [n for n in ("k", "v") if n not in plain]
            raise ValueError(f"{' and '.join(missing)}: missing: {FORMS}")
        return None
    if len(have) < 3:
        missing = [n for n in PAGED_FIELDS if n not in have]
        raise ValueError(f"{', '.join(have)} without {' and '.join(missing)}: paged K/V takes "
                         f"all three: {FORMS}")
    (kc, kbf), (vc, vbf) = _as_array(k_cache, "k_cache"), _as_array(v_cache, "v_cache")
    for a, w in ((kc, "k_cache"), (vc, "v_cache")):
        if a.ndim != 4:
            raise ValueError(f"{w}: shape {list(a.shape)}: must be [num_pages, page_size, Hkv, "
                             f"{'D' if w == 'k_cache' else 'Dv'}]")
        if a.dtype.kind != "f":
            raise ValueError(f"{w}: dtype {a.dtype}: must be floating point")
    if kc.shape[:3] != vc.shape[:3]:
        raise ValueError(f"v_cache: shape {list(vc.shape)}: [num_pages, page_size, Hkv] must "
                         f"be k_cache's {list(kc.shape[:3])}")
    if kc.shape[1] < 1:
        raise ValueError(f"k_cache: page size (dim 1) {kc.shape[1]}: a page holds at least "
                         f"one key")
    if kbf != vbf:
        raise ValueError("k_cache, v_cache: one is bfloat16 and the other not: give both in "
                         "the type the engine holds them in")
    t, _ = _as_array(block_table, "block_table")
    if t.ndim != 2:
        raise ValueError(f"block_table: shape {list(t.shape)}: must be [R, max_pages], one row "
                         f"per sequence")
    if t.dtype.kind not in "iu":
        raise ValueError(f"block_table: dtype {t.dtype}: must be integers (int32)")
    if t.size and (int(t.max()) > INT32_MAX or int(t.min()) < -INT32_MAX - 1):
        raise ValueError("block_table: entries past int32: it is stored as int32")
    return Paged(kc, vc, t.astype(np.int64), kbf)


def kv_len(pg: Paged, kv_len_arg, cu_seqlens_k) -> int:
    """The logical Lk: kv_len= for a dense batch (the table does not say where the last page
    ends), cu_seqlens_k's last entry for a packed one (kv_len=, when given too, must equal it)."""
    if cu_seqlens_k is not None:
        cu, _ = _as_array(cu_seqlens_k, "cu_seqlens_k")
        total = int(cu.reshape(-1)[-1]) if cu.size else 0
        if kv_len_arg is not None and int(kv_len_arg) != total:
            raise ValueError(f"kv_len {kv_len_arg!r}: cu_seqlens_k ends at {total}; give one")
        return total
    if kv_len_arg is None:
        raise ValueError("kv_len: missing: a dense paged case needs the key count Lk of each "
                         "batch entry (its last page may be partly filled)")
    if isinstance(kv_len_arg, bool) or int(kv_len_arg) != kv_len_arg or kv_len_arg < 0:
        raise ValueError(f"kv_len {kv_len_arg!r}: must be an integer >= 0")
    return int(kv_len_arg)


def logical_shapes(pg: Paged, q_shape, lk: int) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """The shapes k and v would have, in q's layout (packed [T, H, D] or [B, H, L, D]), so that
    write_case's and judge's shape checks run on them unchanged."""
    _, _, h, d = pg.k_cache.shape
    dv = pg.v_cache.shape[3]
    if len(q_shape) == 3:
        return (lk, h, d), (lk, h, dv)
    b = q_shape[0] if len(q_shape) == 4 else 1
    return (b, h, lk, d), (b, h, lk, dv)


def _spans(b: int, lk: int, cu_k) -> List[Tuple[int, int, int]]:
    """(batch entry, first key, length) of each sequence: one per batch entry, or per packed
    sequence."""
    if cu_k is None:
        return [(i, 0, lk) for i in range(b)]
    return [(0, int(cu_k[r]), int(cu_k[r + 1] - cu_k[r])) for r in range(len(cu_k) - 1)]


def gather(pg: Paged, b: int, lk: int, cu_k, dtype: str,
           round: bool = False) -> Tuple[np.ndarray, np.ndarray, Optional[str]]:
    """The logical K and V [B, Hkv, Lk, D / Dv] through the table (in the storage type of
    dtype: float16, else float32), the pages read checked as k and v are checked (finite,
    representable in dtype unless round=True rounds them), and where rounding first changed a
    value read (None: nowhere). Refusals name the sequence, the table entry and the cache
    element."""
    spans = _spans(b, lk, cu_k)
    num_pages, ps, h, d = pg.k_cache.shape
    dv = pg.v_cache.shape[3]
    if pg.table.shape[0] != len(spans):
        raise ValueError(f"block_table: {pg.table.shape[0]} rows: one per sequence, "
                         f"{len(spans)} ({'cu_seqlens_k' if cu_k is not None else 'the batch'})")
    store = np.float16 if dtype == "float16" else np.float32
    k = np.zeros((b, h, lk, d), store)
    v = np.zeros((b, h, lk, dv), store)
    checks = {"k_cache": _ValueCheck("k_cache", dtype), "v_cache": _ValueCheck("v_cache", dtype)}
    for r, (bi, k0, n) in enumerate(spans):
        need = -(-n // ps)
        if need > pg.table.shape[1]:
            raise ValueError(f"block_table: sequence {r} holds {n} keys: {need} pages of {ps}, "
                             f"the table's rows have {pg.table.shape[1]} entries")
        for j in range(need):
            page = int(pg.table[r, j])
            if not 0 <= page < num_pages:
                raise ValueError(f"block_table[{r}][{j}] = {page}: sequence {r} reads its keys "
                                 f"from {j * ps} on through it; a used entry must lie in "
                                 f"[0, num_pages = {num_pages})")
            used = min(ps, n - j * ps)
            t0 = k0 + j * ps
            for w, cache, out in (("k_cache", pg.k_cache, k), ("v_cache", pg.v_cache, v)):
                block = cache[page, :used]  # [used, Hkv, D]: the slots the sequence reads
                conv = checks[w].convert(block, lambda i, p=page: (p,) + tuple(i))
                out[bi, :, t0:t0 + used] = conv.transpose(1, 0, 2)
    changed = None
    for w in ("k_cache", "v_cache"):
        c = checks[w].finish(round)
        changed = changed or (f"{w}{c}" if c else None)
    return k, v, changed


def stored(pg: Paged, dtype: str) -> Tuple[np.ndarray, np.ndarray]:
    """The caches as written: in the storage type of dtype (float16, else float32; bfloat16
    values widened exactly), every page, stale ones as they are (rounded with the rest: nothing
    reads them)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return round_to(pg.k_cache, dtype), round_to(pg.v_cache, dtype)
