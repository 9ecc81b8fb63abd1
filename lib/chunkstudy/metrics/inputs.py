"""The metrics' inputs (stage 06) encoded as arrays: the gold spans of ``queries`` (03), the content offsets of
``chunks`` (04) and the ranked lists of ``runs`` (05), each checked against its contract. An error names the table,
the key and the stage that wrote it (:func:`chunkstudy.stages.writer`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .. import stages
from ..errors import ChunkstudyError


RUN_COLUMNS = ("embedder", "reranker", "condition", "query_id", "rank", "chunk_id")
_CHUNK_COLUMNS = ("condition", "doc_id", "chunk_id", "start", "end", "n_content_tokens", "n_prefix_tokens")
_QUERY_COLUMNS = ("query_id", "doc_id", "spans")


def _by(table: str) -> str:
    """``written by <stage>``: the stage the stage graph declares as ``table``'s writer."""
    return f"written by {stages.writer(table)}"


class MetricsInputError(ChunkstudyError, ValueError):
    """An input table breaks its contract; the message names the table, the key and the stage that wrote it."""


# --------------------------------------------------------------------------------------------------------------
# Input normalisation
# --------------------------------------------------------------------------------------------------------------

def need(df: pd.DataFrame, cols: tuple[str, ...], table: str) -> None:
    stages.check(df, table, cols, "metrics input", error=MetricsInputError)


def strings(values) -> pa.Array:
    """A column as an Arrow string array (ids may arrive as str, object or int columns)."""
    arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(
        values.astype(str) if getattr(values, "dtype", None) is not None and values.dtype.kind in "iuf" else values)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr if pa.types.is_large_string(arr.type) else pc.cast(arr, pa.large_string())


def index_in(values, universe) -> np.ndarray:
    """Position of each value in ``universe`` (-1 when absent), by Arrow hashing (fast on millions of ids)."""
    idx = pc.index_in(strings(values), value_set=strings(universe))
    return idx.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def encode(values) -> tuple[np.ndarray, np.ndarray]:
    """(codes, names) of a string column, like :func:`pandas.factorize`."""
    enc = pc.dictionary_encode(strings(values))
    return (enc.indices.to_numpy(zero_copy_only=False).astype(np.int64),
            np.asarray(enc.dictionary.to_pylist(), dtype=object))


@dataclass
class Queries:
    ids: np.ndarray          # query_id (object), index = q
    doc: np.ndarray          # doc code per q
    n_spans: np.ndarray      # S per q
    t_q: np.ndarray          # gold spans: query, start, end (one row per span)
    t_lo: np.ndarray
    t_hi: np.ndarray
    m_q: np.ndarray          # merged gold intervals (union of the spans' characters)
    m_lo: np.ndarray
    m_hi: np.ndarray
    gold_chars: np.ndarray   # |union of gold spans| per q


def parse_queries(queries: pd.DataFrame, docs: np.ndarray) -> Queries:
    need(queries, _QUERY_COLUMNS, "queries")
    ids = queries["query_id"].astype(str).to_numpy(dtype=object)
    if len(set(ids)) != len(ids):
        dup = pd.Series(ids)[pd.Series(ids).duplicated()].iloc[0]
        raise MetricsInputError(f"queries: query_id {dup!r} appears twice; {_by('queries')}")
    tq, tlo, thi = [], [], []
    for qi, (qid, spans) in enumerate(zip(ids, queries["spans"])):
        pairs = [] if spans is None else list(spans)
        if not pairs:
            raise MetricsInputError(f"queries: query {qid!r} has no gold spans; {_by('queries')}")
        for sp in pairs:
            sp = list(sp)
            if len(sp) != 2 or not 0 <= int(sp[0]) < int(sp[1]) or int(sp[0]) != sp[0] or int(sp[1]) != sp[1]:
                raise MetricsInputError(
                    f"queries: query {qid!r} has span {sp!r}; expected [start, end] integers, 0 <= start < end")
            tq.append(qi)
            tlo.append(int(sp[0]))
            thi.append(int(sp[1]))
    t_q, t_lo, t_hi = (np.asarray(x, dtype=np.int64) for x in (tq, tlo, thi))
    doc = index_in(queries["doc_id"], docs)
    # Merge overlapping or touching spans per query into disjoint intervals (the union of gold characters).
    order = np.lexsort((t_lo, t_q))
    sq, slo, shi = t_q[order], t_lo[order], t_hi[order]
    big = int(shi.max()) + 1 if len(shi) else 1
    run_max = np.maximum.accumulate(sq * big + shi)
    new = np.ones(len(sq), dtype=bool)
    new[1:] = sq[1:] * big + slo[1:] > run_max[:-1]
    starts = np.flatnonzero(new)
    m_q, m_lo = sq[starts], slo[starts]
    m_hi = np.maximum.reduceat(shi, starts) if len(starts) else np.zeros(0, dtype=np.int64)
    n = len(ids)
    return Queries(ids, doc, np.bincount(t_q, minlength=n), t_q, t_lo, t_hi, m_q, m_lo, m_hi,
                    np.bincount(m_q, weights=(m_hi - m_lo).astype(np.float64), minlength=n))


@dataclass
class Chunks:
    cond: np.ndarray        # condition code per chunk row (rows sorted by cond, doc, start, end, chunk_id)
    doc: np.ndarray
    start: np.ndarray
    end: np.ndarray
    n_content: np.ndarray
    n_prefix: np.ndarray
    chunk_id: np.ndarray
    key_start: np.ndarray   # (cond, doc) group * big + start, sorted
    key_maxend: np.ndarray  # running max of (group * big + end): monotone, finds the first chunk ending after x
    overlapping: np.ndarray  # bool per (cond * n_docs + doc): the group's chunks overlap each other
    big: int
    n_docs: int


def parse_chunks(chunks: pd.DataFrame, conds: np.ndarray, docs: np.ndarray) -> Chunks:
    need(chunks, _CHUNK_COLUMNS, "chunks")
    cond = index_in(chunks["condition"], conds)
    doc = index_in(chunks["doc_id"], docs)
    start = chunks["start"].to_numpy(dtype=np.int64)
    end = chunks["end"].to_numpy(dtype=np.int64)
    bad = np.flatnonzero((start < 0) | (end < start))
    if len(bad):
        r = chunks.iloc[bad[0]]
        raise MetricsInputError(f"chunks: condition {r['condition']!r} chunk {r['chunk_id']!r} has offsets "
                                f"[{r['start']}, {r['end']}); expected 0 <= start <= end; {_by('chunks')}")
    n_content = chunks["n_content_tokens"].to_numpy(dtype=np.float64)
    n_prefix = chunks["n_prefix_tokens"].to_numpy(dtype=np.float64)
    if (n_content < 0).any() or (n_prefix < 0).any() or np.isnan(n_content).any() or np.isnan(n_prefix).any():
        raise MetricsInputError("chunks: negative or missing n_content_tokens/n_prefix_tokens; " + _by("chunks"))
    chunk_id = np.asarray(strings(chunks["chunk_id"]).to_pylist(), dtype=object)
    order = np.lexsort((end, start, doc, cond))
    same = (np.diff(cond[order]) == 0) & (np.diff(doc[order]) == 0) & (np.diff(start[order]) == 0) & (
        np.diff(end[order]) == 0)
    if same.any():                                 # identical offsets: order them by chunk_id (slow path, rare)
        order = np.lexsort((chunk_id, end, start, doc, cond))
    cond, doc, start, end = cond[order], doc[order], start[order], end[order]
    n_content, n_prefix, chunk_id = n_content[order], n_prefix[order], chunk_id[order]
    n_docs = max(len(docs), 1)
    group = cond.astype(np.int64) * n_docs + doc
    big = int(max(end.max() if len(end) else 0, 0)) + 1
    if (int(group.max()) + 1 if len(group) else 1) * big >= 2 ** 62:
        raise MetricsInputError("chunks: offsets too large to index (documents longer than about 1e12 chars)")
    key_start = group * big + start
    key_maxend = np.maximum.accumulate(group * big + end) if len(group) else group
    over = np.zeros(len(conds) * n_docs, dtype=bool)
    if len(group) > 1:
        hit = (group[1:] == group[:-1]) & (key_start[1:] < key_maxend[:-1])
        over[group[1:][hit]] = True
    return Chunks(cond, doc, start, end, n_content, n_prefix, chunk_id, key_start, key_maxend, over, big, n_docs)


@dataclass
class Runs:
    """The run rows encoded against the parsed queries and chunks, sorted by (list, rank)."""

    cells: pd.DataFrame           # embedder, reranker, condition (one row per cell-condition in the runs)
    cell_cond: np.ndarray         # condition code per cell
    n_q: int                      # queries (every cell has one list per query)
    lst: np.ndarray               # list id per row (list = cell * n_q + q)
    rank: np.ndarray              # 1-based rank per row
    chunk_row: np.ndarray         # row of the chunk in :class:`Chunks`
    q: np.ndarray                 # query code per row
    c: np.ndarray                 # condition code per row
    same_doc: np.ndarray          # the chunk lies in the query's document

    @property
    def n_lists(self) -> int:
        return len(self.cells) * self.n_q


def encode_runs(runs: pd.DataFrame, q: Queries, ch: Chunks, conds: np.ndarray) -> Runs:
    """Run rows -> cell, list id and chunk row, sorted by (list, rank); raises on unknown conditions, queries or
    chunks, non-positive or repeated ranks and a chunk ranked twice in one list."""
    n_q = len(q.ids)
    rc = index_in(runs["condition"], conds)
    if (rc < 0).any():
        missing = runs["condition"].iloc[int(np.flatnonzero(rc < 0)[0])]
        raise MetricsInputError(f"runs: condition {missing!r} has no chunks (chunks hold {list(conds)}); "
                                f"{_by('runs')} / {stages.writer('chunks')}")
    emb_codes, emb_names = encode(runs["embedder"])
    rer_codes, rer_names = encode(runs["reranker"])
    qi = index_in(runs["query_id"], q.ids)
    if (qi < 0).any():
        raise MetricsInputError(f"runs: query_id {runs['query_id'].iloc[int(np.flatnonzero(qi < 0)[0])]!r} is "
                                f"not in the queries table; {_by('runs')}")
    cell_key = (emb_codes * len(rer_names) + rer_codes) * len(conds) + rc
    cell_keys = np.flatnonzero(np.bincount(cell_key)) if len(cell_key) else np.zeros(0, dtype=np.int64)
    cell = np.zeros(int(cell_key.max()) + 1 if len(cell_key) else 0, dtype=np.int64)
    cell[cell_keys] = np.arange(len(cell_keys))
    cell = cell[cell_key]                        # (a small dense lookup: cell keys are few)
    cell_cond = (cell_keys % len(conds)).astype(np.int64)
    cells = pd.DataFrame({
        "embedder": emb_names[cell_keys // len(conds) // len(rer_names)],
        "reranker": rer_names[cell_keys // len(conds) % len(rer_names)],
        "condition": conds[cell_cond]})
    lst = cell.astype(np.int64) * n_q + qi

    chunk_codes = pc.unique(strings(ch.chunk_id))
    ch_cid = index_in(ch.chunk_id, chunk_codes)
    ch_key = ch.cond.astype(np.int64) * len(chunk_codes) + ch_cid
    if len(np.unique(ch_key)) != len(ch_key):
        k = pd.Series(ch_key).duplicated()
        raise MetricsInputError(f"chunks: chunk_id {ch.chunk_id[k.to_numpy()][0]!r} appears twice in one "
                                f"condition; {_by('chunks')}")
    # (condition, chunk id) -> chunk row through a dense table: one gather instead of a search per run row
    table = np.full(len(conds) * len(chunk_codes), -1, dtype=np.int64)
    table[ch_key] = np.arange(len(ch_key))
    run_cid = index_in(runs["chunk_id"], chunk_codes)
    chunk_row = np.where(run_cid >= 0, table[rc * len(chunk_codes) + np.maximum(run_cid, 0)], -1)
    if (chunk_row < 0).any():
        i = int(np.flatnonzero(chunk_row < 0)[0])
        raise MetricsInputError(f"runs: chunk {runs['chunk_id'].iloc[i]!r} of condition {runs['condition'].iloc[i]!r} is "
                                f"not in the chunks table; {_by('runs')}")
    rank = runs["rank"].to_numpy(dtype=np.int64)
    if (rank < 1).any():
        raise MetricsInputError(f"runs: rank {rank[rank < 1][0]} found; ranks are 1-based; {_by('runs')}")
    list_rank = lst * (int(rank.max()) + 1 if len(rank) else 1) + rank
    if len(list_rank) > 1 and not (list_rank[1:] > list_rank[:-1]).all():    # 05 usually writes lists in order
        order = np.argsort(list_rank, kind="stable")
        lst, rank, chunk_row, list_rank = lst[order], rank[order], chunk_row[order], list_rank[order]
        same = np.flatnonzero(list_rank[1:] == list_rank[:-1])
        if len(same):
            i = int(order[same[0]])
            raise MetricsInputError(f"runs: rank {rank[same[0]]} appears twice for {_describe(runs, i)}; "
                                    f"{_by('runs')}")
    _check_repeats(lst, chunk_row, ch, cells, q.ids, n_q)
    run_q = lst % n_q
    same_doc = (ch.doc[chunk_row] == q.doc[run_q]) & (q.doc[run_q] >= 0)
    return Runs(cells, cell_cond, n_q, lst, rank, chunk_row, run_q, cell_cond[lst // n_q], same_doc)


def _check_repeats(lst, chunk_row, ch: Chunks, cells, ids, n_q) -> None:
    """Raise when a list ranks the same chunk twice (rows sorted by list): sort each list's chunk rows."""
    if len(lst) < 2:
        return
    starts = np.r_[0, np.flatnonzero(lst[1:] != lst[:-1]) + 1]
    sizes = np.diff(np.r_[starts, len(lst)])
    col = np.arange(len(lst)) - np.repeat(starts, sizes)
    grid = np.full((len(starts), int(sizes.max())), -1, dtype=np.int64)
    grid -= np.arange(grid.shape[1])             # distinct negative fillers never collide
    grid[np.repeat(np.arange(len(starts)), sizes), col] = chunk_row
    grid.sort(axis=1)
    hit = np.argwhere(grid[:, 1:] == grid[:, :-1])
    if len(hit):
        r, c = hit[0]
        raise MetricsInputError(f"runs: chunk {ch.chunk_id[grid[r, c]]!r} is ranked twice for "
                                f"{_describe_list(cells, ids, lst[starts[r]], n_q)}; {_by('runs')}")


def _describe(runs: pd.DataFrame, i: int) -> str:
    r = runs.iloc[i]
    return f"embedder {r['embedder']!r} reranker {r['reranker']!r} condition {r['condition']!r} query {r['query_id']!r}"


def _describe_list(cells: pd.DataFrame, ids: np.ndarray, list_id: int, n_q: int) -> str:
    c = cells.iloc[int(list_id) // n_q]
    return (f"embedder {c['embedder']!r} reranker {c['reranker']!r} condition {c['condition']!r} "
            f"query {ids[int(list_id) % n_q]!r}")
