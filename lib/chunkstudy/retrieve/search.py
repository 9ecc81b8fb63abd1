"""Exact flat inner-product search (stage 05's kernel): float32 candidates from blocked matrix products (numpy) or
faiss ``IndexFlatIP``, every returned score recomputed exactly (:func:`exact_scores`), ties broken by
``(-score, chunk_id)``. The conventions (exact scores, ties, speed) are :mod:`chunkstudy.retrieve`'s."""

from __future__ import annotations

from typing import Any, Sequence, cast

import numpy as np



#: Extra candidates faiss proposes beyond k, so float32 rounding in the backend rarely needs a wider look.
_PAD = 16
#: Entries of one float32 score block (queries x chunks) at most, 256 MiB: up to _BLOCK_MAX_ROWS queries per block.
_BLOCK_ENTRIES = 1 << 26
#: Queries per block when the chunks allow it: BLAS repacks the chunk matrix once per product, so a product over
#: 512 queries runs about 1.7x the queries/s of one over 83 (d = 1024, 100k chunks, measured here).
_BLOCK_MAX_ROWS = 512
#: Entries of the float64 temporaries of one piece of exact rescoring (pairs x dimension), about 32 MiB.
_EXACT_ENTRIES = 1 << 22
_U32 = 2.0 ** -24  # unit roundoff of float32


# --------------------------------------------------------------------------------------------------------------
# exact scores and the tie order


def _as_matrix(x: Any, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D array (rows = vectors), got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.number):
        raise ValueError(f"{name}: expected numbers, got dtype {a.dtype}")
    a = np.ascontiguousarray(a, dtype=np.float32)
    if not np.isfinite(a.sum(dtype=np.float64)) and not np.isfinite(a).all():  # one pass, no n x d temporary
        bad = int(np.flatnonzero(~np.isfinite(a).all(axis=1))[0])
        raise ValueError(f"{name}: row {bad} holds NaN or inf")
    return a


def _tie_rank(ids: Any, name: str = "chunk_ids") -> np.ndarray:
    """Position of each id in ascending id order (the secondary sort key); ids must be unique."""
    arr = np.asarray(ids)
    if arr.dtype == object:
        arr = arr.astype(str)
    order = np.argsort(arr, kind="stable")
    srt = arr[order]
    if len(srt) > 1 and (srt[1:] == srt[:-1]).any():
        dup = srt[1:][srt[1:] == srt[:-1]][0]
        raise ValueError(f"{name}: id {dup!r} occurs more than once; ids must be unique")
    rank = np.empty(len(arr), dtype=np.int64)
    rank[order] = np.arange(len(arr))
    return rank


def exact_scores(q_rows: np.ndarray, c_rows: np.ndarray) -> np.ndarray:
    """Inner products ``sum_i q[i]*c[i]`` over the last axis, in float64, of float32 vectors.

    ``q_rows`` broadcasts against ``c_rows`` (e.g. one query (d,) against chunks (m, d), or queries (b, 1, d)
    against their candidates (b, n, d)). Each float32 x float32 product is exact in float64; the sum runs along
    the contiguous last axis with numpy's fixed pairwise order, so equal inputs give bit-equal scores wherever
    they are computed (flat search, two-stage search, the full-row fallback).
    """
    prod = np.multiply(q_rows, c_rows, dtype=np.float64)  # inputs widened to float64 inside the ufunc
    return np.ascontiguousarray(prod).sum(axis=-1)


def _error_bound(q: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Per query, an upper bound on |float32 score - exact score| (standard dot-product bound).

    |fl(q.c) - q.c| <= gamma_d * sum|q_i c_i| <= gamma_d * ||q|| * max_j ||c_j||, gamma_d = d*u/(1-d*u), for any
    summation order (BLAS blocking, FMA, faiss' kernels); doubled for safety (norms from float32 sums, inflated by
    1% to cover their own rounding).
    """
    d = q.shape[1]
    gamma = (d + 2) * _U32 / (1 - (d + 2) * _U32)
    cmax = float(np.sqrt(np.einsum("ij,ij->i", c, c).max())) if len(c) else 0.0
    qn = np.sqrt(np.einsum("ij,ij->i", q, q).astype(np.float64))
    return 2.02 * gamma * qn * cmax + 1e-30


def _block_rows(n_chunks: int, batch_size: int | None) -> int:
    """Queries per score block: ``batch_size`` when given, else ``_BLOCK_MAX_ROWS`` (an efficient matrix product)
    unless the float32 block would exceed ``_BLOCK_ENTRIES`` entries (memory)."""
    if batch_size:
        return max(int(batch_size), 1)
    return int(min(_BLOCK_MAX_ROWS, max(16, _BLOCK_ENTRIES // max(n_chunks, 1))))


def _kth_threshold(s: np.ndarray, kk: int) -> np.ndarray:
    """Per row of the float32 block ``s``, a value t with at least ``kk`` entries >= t: the kk-th largest of a
    strided sample of the columns (the sample's own entries are >= t, so the guarantee holds for any sample). The
    sample (about sqrt(n * kk) columns) makes this far cheaper than selecting over the whole row."""
    n = s.shape[1]
    step = max(1, int(np.sqrt(n / kk))) if n >= 4 * kk else 1
    sub = s[:, ::step]
    m = sub.shape[1]
    return np.partition(sub, m - kk, axis=1)[:, m - kk]


def _kth_largest_ragged(qi: np.ndarray, f: np.ndarray, n_rows: int, kk: int) -> np.ndarray:
    """Per group ``qi`` (ascending), the kk-th largest of ``f``; -inf for a group with fewer than kk entries."""
    counts = np.bincount(qi, minlength=n_rows)
    out = np.full(n_rows, -np.inf, dtype=np.float32)
    full = np.flatnonzero(counts >= kk)
    if len(full) == 0:
        return out
    width = int(counts.max())
    starts = np.cumsum(counts) - counts
    pad = np.full((n_rows, width), -np.inf, dtype=np.float32)
    pad[qi, np.arange(len(qi)) - starts[qi]] = f
    out[full] = np.partition(pad[full], width - kk, axis=1)[:, width - kk]
    return out


def _pair_scores(q: np.ndarray, c: np.ndarray, qi: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """:func:`exact_scores` of the pairs (query ``qi``, chunk ``rows``), ``qi`` ascending. Each query's pairs are
    laid out as one padded row, so its vector is widened to float64 once, not once per pair; a query with very
    many pairs (a wide tie group) goes through a flat layout instead. Every pair gets the same bits either way."""
    n_rows = int(qi[-1]) + 1 if len(qi) else 0
    counts = np.bincount(qi, minlength=n_rows)
    pos = np.arange(len(qi)) - (np.cumsum(counts) - counts)[qi]
    out = np.empty(len(qi), dtype=np.float64)
    d = max(q.shape[1], 1)
    narrow = counts <= 4 * max(int(np.median(counts[counts > 0])) if (counts > 0).any() else 1, _PAD)
    sel = narrow[qi]
    if sel.any():
        width = int(counts[narrow].max())
        group = np.flatnonzero(narrow & (counts > 0))
        slot = np.full(n_rows, -1, dtype=np.int64)
        slot[group] = np.arange(len(group))
        pad = np.zeros((len(group), width), dtype=np.int64)
        pad[slot[qi[sel]], pos[sel]] = rows[sel]
        step = max(1, _EXACT_ENTRIES // (width * d))  # queries per piece: bounded float64 temporaries
        got = np.empty((len(group), width), dtype=np.float64)
        for lo in range(0, len(group), step):
            g = group[lo:lo + step]
            got[lo:lo + step] = exact_scores(q[g][:, None, :], c[pad[lo:lo + step]])
        out[sel] = got[slot[qi[sel]], pos[sel]]
    wide = np.flatnonzero(~sel)
    step = max(1, _EXACT_ENTRIES // d)
    for lo in range(0, len(wide), step):
        w = wide[lo:lo + step]
        out[w] = exact_scores(q[qi[w]], c[rows[w]])
    return out


def _rank_exact(q: np.ndarray, c: np.ndarray, tie: np.ndarray, qi: np.ndarray, rows: np.ndarray, n_rows: int,
                kk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact scores of the (query ``qi``, chunk ``rows``) pairs (``qi`` ascending), ranked per query by
    ``(-score, chunk_id)``: the first ``kk`` of each query as ``(idx, scores, n)`` — (n_rows, kk) arrays (unused
    slots 0) and how many each query filled."""
    s = _pair_scores(q, c, qi, rows)
    order = np.lexsort((tie[rows], -s, qi))
    qi, rows, s = qi[order], rows[order], s[order]
    counts = np.bincount(qi, minlength=n_rows)
    rank = np.arange(len(qi)) - (np.cumsum(counts) - counts)[qi]
    keep = rank < kk
    idx = np.zeros((n_rows, kk), dtype=np.int64)
    out = np.zeros((n_rows, kk), dtype=np.float64)
    idx[qi[keep], rank[keep]] = rows[keep]
    out[qi[keep], rank[keep]] = s[keep]
    return idx, out, np.minimum(counts, kk)


def _block_candidates(q: np.ndarray, c: np.ndarray, s: np.ndarray | None, kk: int, err: np.ndarray,
                      faiss_index: Any = None, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (qi, rows) whose exact scores decide the top ``kk`` of each query of a block.

    With f a float32 score (|f - exact| <= err) and T the kk-th largest f of the query, every chunk with
    f < T - 2 err scores exactly below each of the kk chunks with f >= T (their exact scores are >= T - err), so
    the exact top kk, ties at the cut included, lies among the chunks with f >= T - 2 err: that set is returned,
    found from the score block ``s`` (``q @ c.T``) or, with faiss, from its top ``kk + _PAD`` (widened to a
    float32 pass over all chunks for a query whose candidate list could end inside that set).
    """
    n = c.shape[0]
    b = len(q)
    if kk >= n:  # every chunk is listed: rank them all
        return np.repeat(np.arange(b), n), np.tile(np.arange(n, dtype=np.int64), b)
    if s is not None:
        t = _kth_threshold(s, kk)
        flat = np.flatnonzero(np.greater_equal(s, t[:, None], out=mask))  # row-major: queries ascending
        qi, rows = np.divmod(flat, n)
        f = s.ravel()[flat]
        cut = _kth_largest_ragged(qi, f, b, kk).astype(np.float64) - 2 * err
        wide = ~(t.astype(np.float64) <= cut)  # the cut lies below t (or is not finite): look at the whole row
    else:
        n_cand = min(n, kk + _PAD)
        f2, r2 = faiss_index.search(q, n_cand)
        qi = np.repeat(np.arange(b), n_cand)
        rows, f = r2.ravel().astype(np.int64), f2.ravel()
        cut = np.sort(f2, axis=1)[:, n_cand - kk].astype(np.float64) - 2 * err
        wide = (n_cand < n) & ~(f2.min(axis=1).astype(np.float64) < cut) | (r2 < 0).any(axis=1)
    keep = ~wide[qi] & (f >= cut[qi])
    qi, rows = qi[keep], rows[keep].astype(np.int64)
    if wide.any():
        w = np.flatnonzero(wide)
        sw = s[w] if s is not None else q[w] @ c.T
        cw = cut[w]
        full = ~np.isfinite(cw)
        wq, wr = np.divmod(np.flatnonzero((sw >= cw[:, None]) | full[:, None]), n)
        qi, rows = np.concatenate([qi, w[wq]]), np.concatenate([rows, wr.astype(np.int64)])
        order = np.argsort(qi, kind="stable")
        qi, rows = qi[order], rows[order]
    return qi, rows


def _flat_blocks(q: np.ndarray, c: np.ndarray, tie: np.ndarray, kk: int, backend: str, batch_size: int | None,
                 err: np.ndarray):
    """Exact top ``kk`` per query, block by block: yields ``(lo, hi, idx, scores, s)`` where ``s`` is the block's
    float32 score matrix ``q[lo:hi] @ c.T`` (None with faiss, which never forms it). ``err`` is
    :func:`_error_bound` of ``q`` and ``c``, which a caller that needs it too computes once."""
    if backend not in ("faiss", "numpy"):
        raise ValueError(f"retrieve.backend: {backend!r} is not one of ['faiss', 'numpy']")
    index = None
    if backend == "faiss":
        import faiss

        index = faiss.IndexFlatIP(c.shape[1])
        index.add(c)
    step = _block_rows(len(c), batch_size)
    ct = c.T
    # one score buffer and one mask buffer for all blocks: a fresh 100+ MB array per block costs its page faults
    buf = np.empty((min(step, len(q)), len(c)), dtype=np.float32) if index is None else None
    mask = np.empty(buf.shape, dtype=bool) if buf is not None else None
    for lo in range(0, len(q), step):
        hi = min(lo + step, len(q))
        qb = q[lo:hi]
        s = np.matmul(qb, ct, out=cast(np.ndarray, buf)[:hi - lo]) if index is None else None
        qi, rows = _block_candidates(qb, c, s, kk, err[lo:hi], index, None if mask is None else mask[:hi - lo])
        idx, scores, _ = _rank_exact(qb, c, tie, qi, rows, hi - lo, kk)
        yield lo, hi, idx, scores, s


def flat_search(query_vecs: Any, chunk_vecs: Any, chunk_ids: Sequence | np.ndarray, k: int, backend: str,
                batch_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k inner-product search of every query over every chunk.

    Returns ``(idx, scores)``, both shape (n_queries, min(k, n_chunks)): ``idx`` int64 rows into ``chunk_vecs``,
    ``scores`` float64 exact inner products (see module docstring), ranked by ``(-score, chunk_id)``.
    ``backend`` only proposes candidates ("numpy": one float32 matrix product per block of ``batch_size``
    queries (default: sized to the number of chunks); "faiss": ``IndexFlatIP``); both give identical results.
    """
    q = _as_matrix(query_vecs, "query_vecs")
    c = _as_matrix(chunk_vecs, "chunk_vecs")
    if len(chunk_ids) != len(c):
        raise ValueError(f"chunk_ids: {len(chunk_ids)} ids for {len(c)} chunk vectors")
    if q.shape[1] != c.shape[1] and len(c) and len(q):
        raise ValueError(f"query_vecs have dimension {q.shape[1]}, chunk_vecs {c.shape[1]}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if backend not in ("faiss", "numpy"):
        raise ValueError(f"retrieve.backend: {backend!r} is not one of ['faiss', 'numpy']")
    tie = _tie_rank(chunk_ids)
    kk = min(k, len(c))
    idx = np.zeros((len(q), kk), dtype=np.int64)
    out = np.zeros((len(q), kk), dtype=np.float64)
    if kk == 0 or len(q) == 0:
        return idx, out
    for lo, hi, bi, bs, _ in _flat_blocks(q, c, tie, kk, backend, batch_size, _error_bound(q, c)):
        idx[lo:hi], out[lo:hi] = bi, bs
    return idx, out
