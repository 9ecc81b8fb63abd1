"""Two-stage route-to-section search and section recall (stage 05; paper, Method, "Representation constancy
(guards C4)"): a section's centroid is the renormalised mean of the chunk vectors flat search ranks
(:mod:`.search`); stage 1 keeps the top ``n_sections`` centroids, stage 2 ranks the chunks inside them, and the
flat ranking backfills a list they cannot fill. Section recall asks whether the routed sections hold the query's
gold evidence (content offsets: a prefix never contributes to an extent)."""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np
import pandas as pd

from .. import stages
from .search import (_EXACT_ENTRIES, _as_matrix, _error_bound, _flat_blocks, _kth_largest_ragged, _rank_exact,
                     _tie_rank, flat_search)


# --------------------------------------------------------------------------------------------------------------
# two-stage search


def section_centroids(chunk_vecs: Any, route_keys: Sequence) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centroids of sections: ``(keys, centroids, codes)``.

    ``keys`` are the sorted unique ``route_keys``; ``centroids[j]`` = sum of the chunk vectors of section j divided
    by its norm (the renormalised mean: mean/||mean|| = sum/||sum||), float32; ``codes[i]`` = section of chunk i.
    A section whose vectors sum to zero has no direction and raises.
    """
    return _centroids(_as_matrix(chunk_vecs, "chunk_vecs"), route_keys)


def _centroids(c: np.ndarray, route_keys: Sequence) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`section_centroids` of an already validated float32 matrix."""
    keys = np.asarray(route_keys)
    if keys.dtype == object:
        keys = keys.astype(str)
    if len(keys) != len(c):
        raise ValueError(f"route_keys: {len(keys)} keys for {len(c)} chunk vectors")
    uniq, codes = np.unique(keys, return_inverse=True)
    codes = codes.reshape(-1)
    sums = _section_sums(c, codes, len(uniq))
    norms = np.sqrt((sums ** 2).sum(axis=1))
    if (norms == 0).any():
        raise ValueError(f"section {uniq[np.flatnonzero(norms == 0)[0]]!r}: its chunk vectors sum to zero; "
                         "the centroid has no direction")
    return uniq, np.divide(sums, norms[:, None], out=sums).astype(np.float32), codes.astype(np.int64)


def _section_sums(c: np.ndarray, codes: np.ndarray, n_sections: int) -> np.ndarray:
    """Per section, the float64 sum of its chunk vectors (rows in index order), bit for bit what
    ``np.add.reduceat(c[order].astype(float64), starts, axis=0)`` gives: the first row plus numpy's pairwise sum
    of the others, per dimension. reduceat pays a fixed cost per (section, dimension); here sections of one
    length are summed together, as one reduction along a contiguous axis (numpy's pairwise order), so 22,000
    sections cost about what one pass over the vectors does."""
    d = c.shape[1]
    sums = np.zeros((n_sections, d), dtype=np.float64)
    if len(c) == 0:
        return sums
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes, minlength=n_sections)
    starts = np.cumsum(counts) - counts
    for length in np.unique(counts[counts > 0]):
        same = np.flatnonzero(counts == length)
        step = max(1, _EXACT_ENTRIES // int(length * d))  # sections per piece: bounded float64 temporaries
        for lo in range(0, len(same), step):
            sec = same[lo:lo + step]
            rows = order[starts[sec][:, None] + np.arange(length)]  # (sections, length): chunk rows in order
            if length == 1:
                sums[sec] = c[rows[:, 0]]
            elif length <= 8:  # numpy sums fewer than 8 values left to right: the same, elementwise over sections
                block = c[rows]
                rest = block[:, 1].astype(np.float64)
                for j in range(2, length):
                    rest += block[:, j]
                sums[sec] = block[:, 0] + rest
            else:  # (sections, d, length - 1), contiguous along the summed axis: numpy's pairwise order
                rest = np.ascontiguousarray(c[rows[:, 1:]].transpose(0, 2, 1), dtype=np.float64)
                sums[sec] = c[rows[:, 0]] + np.add.reduce(rest, axis=-1)
    return sums


class TwoStageResult(NamedTuple):
    """Result of :func:`two_stage_search` (all arrays have one row per query)."""

    idx: np.ndarray          # (n_q, k) int64 rows into chunk_vecs, -1 never occurs when n_chunks >= k
    scores: np.ndarray       # (n_q, k) float64 exact inner products
    routed: np.ndarray       # (n_q, n_sections) section keys kept by stage 1, best first
    routed_scores: np.ndarray  # (n_q, n_sections) float64 centroid scores
    n_routed: np.ndarray     # (n_q,) how many list entries come from routed sections (the rest is backfill)


def two_stage_search(query_vecs: Any, chunk_vecs: Any, chunk_ids: Sequence, route_keys: Sequence, k: int,
                     n_sections: int, backend: str, batch_size: int | None = None) -> TwoStageResult:
    """Route-to-section, then rank (paper, Method, "Representation constancy").

    Stage 1 ranks section centroids (:func:`section_centroids`) by inner product, ties by ``(-score, key)``, and
    keeps ``n_sections``. Stage 2 ranks all chunks of the routed sections by ``(-score, chunk_id)``. If they are
    fewer than k, the global flat ranking (:func:`flat_search`) backfills the list, in its order, skipping chunks
    already listed. So: routed chunks come first, the list has min(k, n_chunks) entries, no chunk repeats, and
    with every section routed the result equals flat search.

    Cost: one matrix product against the centroids, one against the chunks per block of queries; that score
    block serves both the global ranking and the routed chunks (whose exact scores are computed only for those
    that can reach the top k), with no loop over queries.
    """
    q = _as_matrix(query_vecs, "query_vecs")
    c = _as_matrix(chunk_vecs, "chunk_vecs")
    keys, centroids, codes = _centroids(c, route_keys)
    tie = _tie_rank(chunk_ids)
    kk = min(k, len(c))
    sec_idx, sec_scores = flat_search(q, centroids, keys, k=n_sections, backend=backend, batch_size=batch_size)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(keys) + 1))
    idx = np.zeros((len(q), kk), dtype=np.int64)
    scores = np.zeros((len(q), kk), dtype=np.float64)
    n_routed = np.zeros(len(q), dtype=np.int64)
    if kk == 0 or len(q) == 0:
        return TwoStageResult(idx, scores, keys[sec_idx], sec_scores, n_routed)
    err = _error_bound(q, c)
    ns = sec_idx.shape[1]
    for lo, hi, g_idx, g_scores, s in _flat_blocks(q, c, tie, kk, backend, batch_size, err):
        b = hi - lo
        sec = sec_idx[lo:hi]
        # every (query, chunk of a routed section) pair, query by query
        lens = (bounds[sec + 1] - bounds[sec]).ravel()
        first = bounds[sec].ravel()
        seg = np.cumsum(lens) - lens
        rows = order[np.arange(int(lens.sum())) - np.repeat(seg - first, lens)]
        qi = np.repeat(np.repeat(np.arange(b), ns), lens)
        m = np.bincount(qi, minlength=b)
        big = m > kk
        if big.any():  # only chunks whose float32 score can reach the query's routed top k are scored exactly
            f = s[qi, rows] if s is not None else np.einsum("ij,ij->i", q[lo + qi], c[rows])
            cut = _kth_largest_ragged(qi, f, b, kk).astype(np.float64) - 2 * err[lo:hi]
            keep = ~big[qi] | (f >= cut[qi]) | ~np.isfinite(cut[qi])
            qi, rows = qi[keep], rows[keep]
        r_idx, r_scores, n_r = _rank_exact(q[lo:hi], c, tie, qi, rows, b, kk)
        # backfill: the global ranking in its order, minus chunks of routed sections
        free = ~(codes[g_idx][:, :, None] == sec[:, None, :]).any(axis=2)
        pos = np.cumsum(free, axis=1) - 1
        need = kk - n_r
        take = free & (pos < need[:, None])
        if (take.sum(axis=1) != need).any():  # the global top k cannot be short of k chunks outside the routed
            raise RuntimeError("backfill found fewer chunks than needed; this is a bug")
        ti, tj = np.nonzero(take)
        dest = n_r[ti] + pos[ti, tj]
        r_idx[ti, dest], r_scores[ti, dest] = g_idx[ti, tj], g_scores[ti, tj]
        idx[lo:hi], scores[lo:hi], n_routed[lo:hi] = r_idx, r_scores, n_r
    return TwoStageResult(idx, scores, keys[sec_idx], sec_scores, n_routed)


# --------------------------------------------------------------------------------------------------------------
# section recall


def section_extents(chunks: pd.DataFrame) -> pd.DataFrame:
    """Character extent of every section as the union of its chunks' ``[start, end)`` in its document.

    Returns one row per maximal interval: doc_id, route_key, start, end (half-open content offsets; adjacent
    chunks merge into one interval).
    """
    stages.check(chunks, "chunks", ("doc_id", "route_key", "start", "end"), "retrieve.section_extents")
    df = chunks[["doc_id", "route_key", "start", "end"]].sort_values(["doc_id", "route_key", "start", "end"])
    df = df[df["end"] > df["start"]]
    if df.empty:
        return pd.DataFrame({"doc_id": [], "route_key": [], "start": [], "end": []})
    same = (df["doc_id"].eq(df["doc_id"].shift()) & df["route_key"].eq(df["route_key"].shift())).to_numpy()
    run_end = df.groupby(["doc_id", "route_key"], sort=False)["end"].cummax().shift().to_numpy()
    new = ~same | (df["start"].to_numpy() > np.where(same, run_end, -1))
    grp = np.cumsum(new)
    out = df.groupby(grp, sort=False).agg(doc_id=("doc_id", "first"), route_key=("route_key", "first"),
                                          start=("start", "min"), end=("end", "max"))
    return out.reset_index(drop=True).astype({"start": np.int64, "end": np.int64})


def gold_sections(queries: pd.DataFrame, chunks: pd.DataFrame) -> pd.DataFrame:
    """Sections overlapping each query's gold evidence: query_id, doc_id, route_key (one row per pair).

    Overlap means at least one shared character between a gold span and the section's extent, both half-open
    content offsets in the query's own document (offsets are per-document coordinates).
    """
    stages.check(queries, "queries", ("query_id", "doc_id", "spans"), "retrieve.gold_sections")
    spans = queries[["query_id", "doc_id", "spans"]].explode("spans").dropna(subset=["spans"])
    if spans.empty:
        return pd.DataFrame({"query_id": [], "doc_id": [], "route_key": []})
    pairs = np.array([list(map(int, sp)) for sp in spans["spans"]], dtype=np.int64).reshape(-1, 2)
    spans = spans.drop(columns="spans").assign(s_start=pairs[:, 0], s_end=pairs[:, 1])
    hits = spans.merge(section_extents(chunks), on="doc_id")
    hits = hits[np.maximum(hits["s_start"], hits["start"]) < np.minimum(hits["s_end"], hits["end"])]
    return hits[["query_id", "doc_id", "route_key"]].drop_duplicates().reset_index(drop=True)


def section_recall(routed: pd.DataFrame, queries: pd.DataFrame, chunks: pd.DataFrame) -> pd.DataFrame:
    """Per query: did stage 1 keep any section that overlaps gold evidence? (paper, Sections 4 and 6.4)

    ``routed``: query_id, route_rank (1-based), doc_id, route_key — the sections stage 1 kept. ``chunks``: the
    condition's chunks (their union per section is its extent, :func:`section_extents`).
    Returns query_id, doc_id, section_recall (nullable boolean: NA when no section overlaps the evidence, e.g. an
    empty span list), n_gold_sections, n_routed_gold, first_gold_route_rank (NA when none was routed).
    """
    gold = gold_sections(queries, chunks)
    n_gold = gold.groupby("query_id").size()
    hit = routed.merge(gold, on=["query_id", "doc_id", "route_key"])
    n_hit = hit.groupby("query_id").size()
    first = hit.groupby("query_id")["route_rank"].min()
    out = queries[["query_id", "doc_id"]].copy().reset_index(drop=True)
    out["n_gold_sections"] = out["query_id"].map(n_gold).fillna(0).astype(np.int64)
    out["n_routed_gold"] = out["query_id"].map(n_hit).fillna(0).astype(np.int64)
    out["section_recall"] = pd.array(out["n_routed_gold"] > 0, dtype="boolean")
    out.loc[out["n_gold_sections"] == 0, "section_recall"] = pd.NA
    out["first_gold_route_rank"] = pd.array(out["query_id"].map(first), dtype="Int64")
    return out
