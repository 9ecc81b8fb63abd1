"""Retrieval metrics: coverage-nDCG@k and the secondary ladder (paper Section 5.1 and the appendix
"Coverage-nDCG"; DESIGN.md "Metrics").

Conventions
-----------
* Every offset is a half-open character index ``[start, end)`` into the query's document's flat text
  (``documents.text``). Chunk offsets are *content* offsets: a prefix (heading path, situating context) is never
  part of them, so a prefix can never create relevance or coverage. Prefixes matter only where they cost context
  window: the token-budget metric charges ``n_prefix_tokens``.
* A retrieved chunk from a document other than the query's contributes nothing (offsets are per-document
  coordinate spaces), but it still occupies its rank and, for budget coverage, its tokens.
* The *ideal* of a condition is computed over that condition's own chunks **of the query's document** (the
  per-condition normalisation of the paper's appendix), never over another condition's chunks.
* Thresholds are inclusive (``>=``). Comparisons allow :data:`EPS` characters of slack so that a fraction such as
  0.8, which binary floating point cannot represent exactly, means what its decimal says.
* A (cell, condition, query) with no retrieved rows scores 0 on every metric; so does a query whose ideal is 0
  (no chunk of the condition covers any gold character).
* A run list must not rank the same chunk twice (a retrieval bug): :func:`score_runs` raises.

Metrics (names derived from ``metrics`` parameters; defaults in brackets)
-----------------------------------------------------------------------
Let the query's gold spans be ``G = {g_1..g_S}`` and the ranked chunks ``c_1, c_2, ...``.

``relevant(c, g)``
    ``|c ∩ g| >= span_frac·|g|`` [0.5] or ``|c ∩ g| >= chunk_frac·|c|`` [0.8] (with ``|c ∩ g| > 0``).
    A chunk is relevant to the query when it is relevant to at least one gold span.
``cov-nDCG@k`` [k = cutoff = 10] (primary; appendix "Coverage-nDCG")
    ``gain_i = (1/S) Σ_j |(c_i ∩ g_j) \\ covered_<i(g_j)| / |g_j|``, ``DCG@k = Σ_{i<=k} gain_i / log2(i+1)``;
    ``IDCG@k`` is the DCG of the greedy maximum-marginal-coverage ordering of the condition's own chunks of the
    document (repeatedly append the chunk with the largest current marginal gain; ties go to the chunk that comes
    first in document order, i.e. smallest ``(start, end, chunk_id)``). ``cov-nDCG@k = DCG@k / IDCG@k``, 0 when
    ``IDCG@k = 0``. When the chunk set of the document does not overlap itself (every study condition tiles each
    document) every chunk's gain is independent of the order, the greedy order is the exact optimum and the score
    lies in [0, 1]. For overlapping chunk sets greedy is the paper's tractable stand-in and the score may exceed 1.
``recall@R`` [R = recall_k = 50]
    Fraction of gold spans ``g_j`` with ``|g_j ∩ ∪_{rank<=R} c| >= span_frac·|g_j|`` (the paper's "≥ 50%
    covered by the union of the top 50"; the threshold is ``span_frac``).
``MRR``
    ``1 / rank`` of the first relevant chunk anywhere in the retrieved list, 0 when none is relevant.
``nDCG@k``
    Binary gains ``rel_i ∈ {0, 1}`` from the relevance rule, ``DCG@k = Σ_{i<=k} rel_i / log2(i+1)``,
    ``IDCG@k = Σ_{i=1}^{min(n_rel, k)} 1/log2(i+1)`` with ``n_rel`` the number of relevant chunks in the
    condition's own chunk set of the document (trec_eval's ``ndcg_cut``). 0 when ``n_rel = 0``.
``budget-cov@B`` [B in budgets = 512, 1024, 2048 tokens]
    Chunks are taken in rank order; each costs ``n_prefix_tokens + n_content_tokens``. The score is
    ``|U ∩ gold| / |gold|`` where ``gold`` is the union of the gold spans' characters and ``U`` the union of the
    content characters that made it into the budget. ``budget_partial`` decides a chunk that does not fit whole:

    * ``truncate`` (default): the first chunk that does not fit is charged its prefix in full, then keeps as many
      content tokens as remain, ``r = B - used - n_prefix_tokens`` (none when ``r <= 0``); without a tokenizer
      here, ``r`` tokens are mapped to the first ``floor((end - start) · r / n_content_tokens)`` characters of
      its content. The budget is then full: no later chunk enters.
    * ``stop``: the first chunk that does not fit ends the walk; nothing of it enters.
    * ``skip``: a chunk that does not fit is left out and the walk continues with the next, smaller ones may
      still fit.

    Under ``truncate`` and ``stop`` a longer prefix can only lower budget coverage. ``skip`` is **not monotone in
    prefix cost**: a prefix can push an early chunk out of the budget and let a later, more useful one in (budget
    10, gold ``[0, 10)``, ranking ``a = [0, 1)`` at 6 tokens then ``b = [1, 10)`` at 5: coverage 0.1 without
    prefixes, 0.9 with 5 prefix tokens on each chunk).

All functions are pure: they never mutate their inputs and never round.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from . import config, design, stages

#: Slack (in characters) of every inclusive threshold comparison; see the module docstring.
EPS = 1e-9

_RUN_COLUMNS = ("embedder", "reranker", "condition", "query_id", "rank", "chunk_id")
_CHUNK_COLUMNS = ("condition", "doc_id", "chunk_id", "start", "end", "n_content_tokens", "n_prefix_tokens")
_QUERY_COLUMNS = ("query_id", "doc_id", "spans")
SCORE_COLUMNS = list(stages.artifact("scores").contract)  # what a score is; doc_id and qtype are joined on


class MetricsInputError(ValueError):
    """An input table breaks its contract; the message names the table, the key and the stage that wrote it."""


# --------------------------------------------------------------------------------------------------------------
# Parameters and names
# --------------------------------------------------------------------------------------------------------------

class _MetricNames:
    """Methods of the ``metrics`` record (:data:`MetricParams`): its metric names."""

    @property
    def names(self) -> list[str]:
        """Canonical metric names, in the order of the scores table (:func:`chunkstudy.design.metric_names`)."""
        return design.metric_names(self.__dict__)

    @property
    def primary(self) -> str:
        """The confirmatory metric's name under these parameters (``cov-nDCG@10``)."""
        return design.PRIMARY_METRIC.names(self.__dict__)[0]

    def named(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Computed values keyed by metric family (:data:`chunkstudy.design.METRICS`; a list parameter's family
        holds one value per element) renamed to the canonical names, in table order. A declared family that
        was not computed raises KeyError."""
        out = {}
        for m in design.METRICS:
            listed = m.parameter is not None and isinstance(getattr(self, m.parameter), (list, tuple))
            out.update(zip(m.names(self.__dict__), values[m.key] if listed else [values[m.key]], strict=True))
        return out


#: The validated ``metrics`` section: the record :func:`chunkstudy.config.record` generates from the schema, with
#: the metric-name methods above.
MetricParams = config.record_type("metrics", base=_MetricNames)


def params_from(metrics_params: Mapping[str, Any] | MetricParams) -> MetricParams:
    """The ``metrics`` record; missing keys take the defaults of :data:`chunkstudy.config.SCHEMA`, and every value
    is checked by the schema's types and ranges (ConfigError naming the key)."""
    return config.record("metrics", metrics_params, base=_MetricNames)


def metric_names(metrics_params: Mapping[str, Any] | MetricParams) -> list[str]:
    """Canonical metric names for these parameters, e.g. ``['cov-nDCG@10', 'recall@50', 'MRR', 'nDCG@10',
    'budget-cov@512', 'budget-cov@1024', 'budget-cov@2048']``."""
    return params_from(metrics_params).names


# --------------------------------------------------------------------------------------------------------------
# Elementwise building blocks
# --------------------------------------------------------------------------------------------------------------

def overlap(a_start, a_end, b_start, b_end) -> np.ndarray:
    """Characters shared by half-open intervals ``[a_start, a_end)`` and ``[b_start, b_end)`` (elementwise, >= 0)."""
    a_start, a_end, b_start, b_end = (np.asarray(x, dtype=np.int64) for x in (a_start, a_end, b_start, b_end))
    return np.maximum(np.minimum(a_end, b_end) - np.maximum(a_start, b_start), 0)


def relevant(chunk_start, chunk_end, span_start, span_end, span_frac: float, chunk_frac: float) -> np.ndarray:
    """The relevance rule, elementwise: chunk ``[chunk_start, chunk_end)`` is relevant to gold span
    ``[span_start, span_end)`` iff they overlap and ``|c ∩ g| >= span_frac·|g|`` or ``|c ∩ g| >= chunk_frac·|c|``
    (content offsets of the same document; DESIGN.md "Metrics"). ``span_frac`` and ``chunk_frac`` are
    ``metrics.span_frac`` and ``metrics.chunk_frac``."""
    ov = overlap(chunk_start, chunk_end, span_start, span_end)
    return _rule(ov, np.asarray(span_end) - np.asarray(span_start), np.asarray(chunk_end) - np.asarray(chunk_start),
                 span_frac, chunk_frac)


def _rule(ov, span_len, chunk_len, span_frac, chunk_frac) -> np.ndarray:
    ov = np.asarray(ov, dtype=np.float64)
    return (ov > 0) & ((ov >= span_frac * np.asarray(span_len) - EPS) | (ov >= chunk_frac * np.asarray(chunk_len) - EPS))


def discount(rank) -> np.ndarray:
    """The log discount ``1 / log2(rank + 1)`` of a 1-based rank."""
    return 1.0 / np.log2(np.asarray(rank, dtype=np.float64) + 1.0)


def new_coverage(group, lo, hi) -> np.ndarray:
    """Characters of each interval not covered by earlier intervals of its group (the novelty term).

    Rows must be sorted by group and, within a group, in rank order; ``[lo, hi)`` are half-open character
    intervals (non-negative integers, ``lo <= hi``). Returns, per row, ``|[lo_i, hi_i) \\ ∪_{i' < i, same group}
    [lo_i', hi_i')|`` as float64. Vectorised: the group's interval ends cut it into elementary segments; each
    segment is credited to the first row that covers it.
    """
    group = np.asarray(group, dtype=np.int64)
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    n = len(group)
    if n == 0:
        return np.zeros(0)
    big = int(hi.max()) + 1
    k_lo, k_hi = group * big + lo, group * big + hi
    points = np.unique(np.concatenate([k_lo, k_hi]))
    a = np.searchsorted(points, k_lo)
    b = np.searchsorted(points, k_hi)
    seg, row = _expand(a, b - a)
    if len(seg) == 0:
        return np.zeros(n)
    segments, first = np.unique(seg, return_index=True)   # first occurrence = earliest row (rows are in order)
    length = (points[segments + 1] - points[segments]).astype(np.float64)
    return np.bincount(row[first], weights=length, minlength=n)


def _expand(start: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For row i, the indices ``start[i] .. start[i] + count[i] - 1`` and the row number of each."""
    count = np.maximum(count, 0)
    total = int(count.sum())
    row = np.repeat(np.arange(len(count)), count)
    offset = np.arange(total) - np.repeat(np.cumsum(count) - count, count)
    return np.repeat(start, count) + offset, row


def _run_ids(key: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... numbering the runs of equal values of a sorted key (a cheap ``np.unique(..., return_inverse)``)."""
    if len(key) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.r_[0, np.cumsum(key[1:] != key[:-1])]


def _group_sum(key: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(key, weights=values, minlength=n) if len(key) else np.zeros(n)


# --------------------------------------------------------------------------------------------------------------
# Input normalisation
# --------------------------------------------------------------------------------------------------------------

def _need(df: pd.DataFrame, cols: tuple[str, ...], table: str) -> None:
    stages.check(df, table, cols, "metrics input", error=MetricsInputError)


def _strings(values) -> pa.Array:
    """A column as an Arrow string array (ids may arrive as str, object or int columns)."""
    arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(
        values.astype(str) if getattr(values, "dtype", None) is not None and values.dtype.kind in "iuf" else values)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr if pa.types.is_large_string(arr.type) else pc.cast(arr, pa.large_string())


def _index_in(values, universe) -> np.ndarray:
    """Position of each value in ``universe`` (-1 when absent), by Arrow hashing (fast on millions of ids)."""
    idx = pc.index_in(_strings(values), value_set=_strings(universe))
    return idx.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def _encode(values) -> tuple[np.ndarray, np.ndarray]:
    """(codes, names) of a string column, like :func:`pandas.factorize`."""
    enc = pc.dictionary_encode(_strings(values))
    return (enc.indices.to_numpy(zero_copy_only=False).astype(np.int64),
            np.asarray(enc.dictionary.to_pylist(), dtype=object))


@dataclass
class _Queries:
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


def _parse_queries(queries: pd.DataFrame, docs: np.ndarray) -> _Queries:
    _need(queries, _QUERY_COLUMNS, "queries")
    ids = queries["query_id"].astype(str).to_numpy(dtype=object)
    if len(set(ids)) != len(ids):
        dup = pd.Series(ids)[pd.Series(ids).duplicated()].iloc[0]
        raise MetricsInputError(f"queries: query_id {dup!r} appears twice; written by 03_queries")
    tq, tlo, thi = [], [], []
    for qi, (qid, spans) in enumerate(zip(ids, queries["spans"])):
        pairs = [] if spans is None else list(spans)
        if not pairs:
            raise MetricsInputError(f"queries: query {qid!r} has no gold spans; written by 03_queries")
        for sp in pairs:
            sp = list(sp)
            if len(sp) != 2 or not 0 <= int(sp[0]) < int(sp[1]) or int(sp[0]) != sp[0] or int(sp[1]) != sp[1]:
                raise MetricsInputError(
                    f"queries: query {qid!r} has span {sp!r}; expected [start, end] integers, 0 <= start < end")
            tq.append(qi)
            tlo.append(int(sp[0]))
            thi.append(int(sp[1]))
    t_q, t_lo, t_hi = (np.asarray(x, dtype=np.int64) for x in (tq, tlo, thi))
    doc = _index_in(queries["doc_id"], docs)
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
    return _Queries(ids, doc, np.bincount(t_q, minlength=n), t_q, t_lo, t_hi, m_q, m_lo, m_hi,
                    np.bincount(m_q, weights=(m_hi - m_lo).astype(np.float64), minlength=n))


@dataclass
class _Chunks:
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


def _parse_chunks(chunks: pd.DataFrame, conds: np.ndarray, docs: np.ndarray) -> _Chunks:
    _need(chunks, _CHUNK_COLUMNS, "chunks")
    cond = _index_in(chunks["condition"], conds)
    doc = _index_in(chunks["doc_id"], docs)
    start = chunks["start"].to_numpy(dtype=np.int64)
    end = chunks["end"].to_numpy(dtype=np.int64)
    bad = np.flatnonzero((start < 0) | (end < start))
    if len(bad):
        r = chunks.iloc[bad[0]]
        raise MetricsInputError(f"chunks: condition {r['condition']!r} chunk {r['chunk_id']!r} has offsets "
                                f"[{r['start']}, {r['end']}); expected 0 <= start <= end; written by 04_chunk_embed")
    n_content = chunks["n_content_tokens"].to_numpy(dtype=np.float64)
    n_prefix = chunks["n_prefix_tokens"].to_numpy(dtype=np.float64)
    if (n_content < 0).any() or (n_prefix < 0).any() or np.isnan(n_content).any() or np.isnan(n_prefix).any():
        raise MetricsInputError("chunks: negative or missing n_content_tokens/n_prefix_tokens; written by "
                                "04_chunk_embed")
    chunk_id = np.asarray(_strings(chunks["chunk_id"]).to_pylist(), dtype=object)
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
    return _Chunks(cond, doc, start, end, n_content, n_prefix, chunk_id, key_start, key_maxend, over, big, n_docs)


def _join_targets(ch: _Chunks, cond_codes: np.ndarray, t_q: np.ndarray, t_lo: np.ndarray, t_hi: np.ndarray,
                  q_doc: np.ndarray) -> dict[str, np.ndarray]:
    """Every (condition, target, chunk) whose chunk (of the target's document, in that condition) overlaps the
    target interval. Returns arrays ``c, t, chunk, lo, hi`` (``[lo, hi)`` = the overlap)."""
    n_t, n_c = len(t_q), len(cond_codes)
    c = np.repeat(cond_codes.astype(np.int64), n_t)
    t = np.tile(np.arange(n_t), n_c)
    doc = q_doc[t_q][t]
    lo, hi = t_lo[t], t_hi[t]
    known = doc >= 0
    group = c * ch.n_docs + np.where(known, doc, 0)
    first = np.searchsorted(ch.key_maxend, group * ch.big + np.minimum(lo, ch.big - 1), side="right")
    last = np.searchsorted(ch.key_start, group * ch.big + np.minimum(hi, ch.big), side="left")
    idx, row = _expand(first, np.where(known, last - first, 0))
    olo = np.maximum(ch.start[idx], lo[row])
    ohi = np.minimum(ch.end[idx], hi[row])
    keep = ohi > olo
    return {"c": c[row][keep], "t": t[row][keep], "chunk": idx[keep], "lo": olo[keep], "hi": ohi[keep]}


# --------------------------------------------------------------------------------------------------------------
# The scorer
# --------------------------------------------------------------------------------------------------------------

@dataclass
class _Scored:
    """Intermediate results, kept for :func:`coverage_walk` and the tests."""

    cells: pd.DataFrame           # embedder, reranker, condition (one row per cell-condition in the runs)
    cell_cond: np.ndarray         # condition code per cell
    n_q: int
    values: dict[str, np.ndarray]  # metric -> value per list (list = cell * n_q + q)
    run: dict[str, np.ndarray]     # run rows sorted by (list, rank): list, rank, chunk, same_doc, rel, gain
    ideal: dict[str, np.ndarray]   # ideal orderings: cq (= cond * n_q + q), pos, chunk, gain


@dataclass
class _Runs:
    """The run rows encoded against the parsed queries and chunks, sorted by (list, rank)."""

    cells: pd.DataFrame           # embedder, reranker, condition (one row per cell-condition in the runs)
    cell_cond: np.ndarray         # condition code per cell
    n_q: int                      # queries (every cell has one list per query)
    lst: np.ndarray               # list id per row (list = cell * n_q + q)
    rank: np.ndarray              # 1-based rank per row
    chunk_row: np.ndarray         # row of the chunk in :class:`_Chunks`
    q: np.ndarray                 # query code per row
    c: np.ndarray                 # condition code per row
    same_doc: np.ndarray          # the chunk lies in the query's document

    @property
    def n_lists(self) -> int:
        return len(self.cells) * self.n_q


@dataclass
class _Static:
    """Gold spans x the condition's own chunks, independent of any ranking: one entry per (condition, query,
    chunk) that overlaps a gold span (``keys`` = (cond * n_q + q) * n_chunks + chunk, sorted) with its static
    gain and relevance, plus the raw (condition, span, chunk) overlaps ``cand`` and their keys ``cqk``."""

    cand: dict[str, np.ndarray]
    cqk: np.ndarray
    keys: np.ndarray
    rel: np.ndarray
    ideal: dict[str, np.ndarray]   # ideal orderings: cq (= cond * n_q + q), pos, chunk, gain
    idcg: np.ndarray               # coverage IDCG@cutoff per cq
    bin_idcg: np.ndarray           # binary nDCG's IDCG@cutoff per cq


@dataclass
class _RunGains:
    """Run rows x gold spans: per (run row, span) overlap ``rr, t, grp`` (sorted by list, span, rank) and its
    newly covered characters ``new``; per run row its coverage ``gain`` and relevance ``rel``."""

    rr: np.ndarray
    t: np.ndarray
    grp: np.ndarray
    new: np.ndarray
    gain: np.ndarray
    rel: np.ndarray


def _score(runs: pd.DataFrame, chunks: pd.DataFrame, queries: pd.DataFrame, p: MetricParams) -> tuple[
        _Scored, _Queries, _Chunks, np.ndarray, np.ndarray]:
    """Every metric of every run list: encode the inputs, compute the ranking-free gains and ideals, the run
    rows' gains, and assemble the metric values."""
    _need(runs, _RUN_COLUMNS, "runs")
    docs = np.asarray(pc.unique(pa.concat_arrays([_strings(chunks["doc_id"]), _strings(queries["doc_id"])]))
                      .to_pylist(), dtype=object)
    conds = np.asarray(pc.unique(_strings(chunks["condition"])).to_pylist(), dtype=object)
    q = _parse_queries(queries, docs)
    ch = _parse_chunks(chunks, conds, docs)
    r = _encode_runs(runs, q, ch, conds)
    st = _static_gains(r, q, ch, len(conds), p)
    rg = _run_gains(r, q, ch, st)
    values = _assemble(r, q, ch, st, rg, p)
    scored = _Scored(r.cells, r.cell_cond, r.n_q, p.named(values),
                     {"list": r.lst, "rank": r.rank, "chunk": r.chunk_row, "same_doc": r.same_doc, "rel": rg.rel,
                      "gain": rg.gain},
                     st.ideal)
    return scored, q, ch, docs, conds


def _encode_runs(runs: pd.DataFrame, q: _Queries, ch: _Chunks, conds: np.ndarray) -> _Runs:
    """Run rows -> cell, list id and chunk row, sorted by (list, rank); raises on unknown conditions, queries or
    chunks, non-positive or repeated ranks and a chunk ranked twice in one list."""
    n_q = len(q.ids)
    rc = _index_in(runs["condition"], conds)
    if (rc < 0).any():
        missing = runs["condition"].iloc[int(np.flatnonzero(rc < 0)[0])]
        raise MetricsInputError(f"runs: condition {missing!r} has no chunks (chunks hold {list(conds)}); "
                                "written by 05_retrieve / 04_chunk_embed")
    emb_codes, emb_names = _encode(runs["embedder"])
    rer_codes, rer_names = _encode(runs["reranker"])
    qi = _index_in(runs["query_id"], q.ids)
    if (qi < 0).any():
        raise MetricsInputError(f"runs: query_id {runs['query_id'].iloc[int(np.flatnonzero(qi < 0)[0])]!r} is "
                                "not in the queries table; written by 05_retrieve")
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

    chunk_codes = pc.unique(_strings(ch.chunk_id))
    ch_cid = _index_in(ch.chunk_id, chunk_codes)
    ch_key = ch.cond.astype(np.int64) * len(chunk_codes) + ch_cid
    if len(np.unique(ch_key)) != len(ch_key):
        k = pd.Series(ch_key).duplicated()
        raise MetricsInputError(f"chunks: chunk_id {ch.chunk_id[k.to_numpy()][0]!r} appears twice in one "
                                "condition; written by 04_chunk_embed")
    # (condition, chunk id) -> chunk row through a dense table: one gather instead of a search per run row
    table = np.full(len(conds) * len(chunk_codes), -1, dtype=np.int64)
    table[ch_key] = np.arange(len(ch_key))
    run_cid = _index_in(runs["chunk_id"], chunk_codes)
    chunk_row = np.where(run_cid >= 0, table[rc * len(chunk_codes) + np.maximum(run_cid, 0)], -1)
    if (chunk_row < 0).any():
        i = int(np.flatnonzero(chunk_row < 0)[0])
        raise MetricsInputError(f"runs: chunk {runs['chunk_id'].iloc[i]!r} of condition {runs['condition'].iloc[i]!r} is "
                                "not in the chunks table; written by 05_retrieve")
    rank = runs["rank"].to_numpy(dtype=np.int64)
    if (rank < 1).any():
        raise MetricsInputError(f"runs: rank {rank[rank < 1][0]} found; ranks are 1-based; written by 05_retrieve")
    list_rank = lst * (int(rank.max()) + 1 if len(rank) else 1) + rank
    if len(list_rank) > 1 and not (list_rank[1:] > list_rank[:-1]).all():    # 05 usually writes lists in order
        order = np.argsort(list_rank, kind="stable")
        lst, rank, chunk_row, list_rank = lst[order], rank[order], chunk_row[order], list_rank[order]
        same = np.flatnonzero(list_rank[1:] == list_rank[:-1])
        if len(same):
            i = int(order[same[0]])
            raise MetricsInputError(f"runs: rank {rank[same[0]]} appears twice for {_describe(runs, i)}; "
                                    "written by 05_retrieve")
    _check_repeats(lst, chunk_row, ch, cells, q.ids, n_q)
    run_q = lst % n_q
    same_doc = (ch.doc[chunk_row] == q.doc[run_q]) & (q.doc[run_q] >= 0)
    return _Runs(cells, cell_cond, n_q, lst, rank, chunk_row, run_q, cell_cond[lst // n_q], same_doc)


def _static_gains(r: _Runs, q: _Queries, ch: _Chunks, n_conds: int, p: MetricParams) -> _Static:
    """Gold spans x the condition's own chunks of the query's document (every condition the runs use): each
    chunk's static gain and relevance, the greedy ideal orderings and both IDCGs (ranking-free)."""
    n_q = r.n_q
    cand = _join_targets(ch, np.unique(r.cell_cond), q.t_q, q.t_lo, q.t_hi, q.doc)
    c_q = q.t_q[cand["t"]]
    span_len = (q.t_hi - q.t_lo)[cand["t"]]
    ov = cand["hi"] - cand["lo"]
    chunk_len = ch.end[cand["chunk"]] - ch.start[cand["chunk"]]
    n_chunks = len(ch.cond)
    cqk = (cand["c"] * n_q + c_q) * n_chunks + cand["chunk"]       # (cond, query, chunk)
    static_keys, inv = np.unique(cqk, return_inverse=True)
    static_gain = np.bincount(inv, weights=ov / span_len / q.n_spans[c_q], minlength=len(static_keys))
    static_rel = np.bincount(inv, weights=_rule(ov, span_len, chunk_len, p.span_frac, p.chunk_frac).astype(np.float64),
                             minlength=len(static_keys)) > 0
    s_cq = static_keys // n_chunks
    s_chunk = static_keys % n_chunks
    n_cq = n_conds * n_q
    n_rel = np.bincount(s_cq, weights=static_rel, minlength=n_cq)
    ideal = _ideal_orderings(s_cq, s_chunk, static_gain, cand, c_q, q, ch, n_q, p.cutoff)
    idcg = _group_sum(ideal["cq"], ideal["gain"] * discount(ideal["pos"]), n_cq)
    bin_idcg = np.concatenate([[0.0], np.cumsum(discount(np.arange(1, p.cutoff + 1)))])[
        np.minimum(n_rel, p.cutoff).astype(np.int64)]
    return _Static(cand, cqk, static_keys, static_rel, ideal, idcg, bin_idcg)


def _run_gains(r: _Runs, q: _Queries, ch: _Chunks, st: _Static) -> _RunGains:
    """Run rows x gold spans: the characters each retrieved chunk newly covers (novelty, in rank order within
    its list and span), its coverage gain and its relevance (looked up among the static entries)."""
    n_q, n_chunks = r.n_q, len(ch.cond)
    rows_sd = np.flatnonzero(r.same_doc)
    r_key = (r.c[rows_sd] * n_q + r.q[rows_sd]) * n_chunks + r.chunk_row[rows_sd]
    cand_order = np.argsort(st.cqk, kind="stable")
    sorted_cqk = st.cqk[cand_order]
    a = np.searchsorted(sorted_cqk, r_key, side="left")
    b = np.searchsorted(sorted_cqk, r_key, side="right")
    ci, ri = _expand(a, b - a)
    ci = cand_order[ci]
    rr = rows_sd[ri]                                   # run row of each (run row, span) overlap
    t = st.cand["t"][ci]
    o = np.lexsort((r.rank[rr], t, r.lst[rr]))
    rr, t, olo, ohi = rr[o], t[o], st.cand["lo"][ci][o], st.cand["hi"][ci][o]
    grp = _run_ids(r.lst[rr] * len(q.t_q) + t)
    new = new_coverage(grp, olo, ohi)
    span_len_rt = (q.t_hi - q.t_lo)[t]
    gain_rt = new / span_len_rt / q.n_spans[q.t_q[t]]
    gain = np.bincount(rr, weights=gain_rt, minlength=len(r.lst))

    s_pos = np.searchsorted(st.keys, r_key)
    rel = np.zeros(len(r.lst), dtype=bool)
    ok = s_pos < len(st.keys)
    rel[rows_sd[ok]] = st.rel[s_pos[ok]] & (st.keys[s_pos[ok]] == r_key[ok])
    return _RunGains(rr, t, grp, new, gain, rel)


def _assemble(r: _Runs, q: _Queries, ch: _Chunks, st: _Static, rg: _RunGains, p: MetricParams) -> dict[str, Any]:
    """The metric values per list, keyed by metric family (:data:`chunkstudy.design.METRICS`; renamed by
    :meth:`MetricParams.named`)."""
    n_q, n_lists, lst, rank = r.n_q, r.n_lists, r.lst, r.rank
    values: dict[str, Any] = {}
    list_c = np.repeat(r.cell_cond, n_q) * n_q + np.tile(np.arange(n_q), len(r.cells))   # cq of each list
    in_k = rank <= p.cutoff
    dcg = _group_sum(lst[in_k], rg.gain[in_k] * discount(rank[in_k]), n_lists)
    values["cov-nDCG"] = _safe_ratio(dcg, st.idcg[list_c])
    in_r = rank[rg.rr] <= p.recall_k
    covered = np.bincount(rg.grp[in_r], weights=rg.new[in_r], minlength=rg.grp.max() + 1 if len(rg.grp) else 0)
    grp_first = np.unique(rg.grp, return_index=True)[1]
    g_t = rg.t[grp_first]
    hit = covered >= p.span_frac * (q.t_hi - q.t_lo)[g_t] - EPS
    values["recall"] = _group_sum(lst[rg.rr][grp_first], hit / q.n_spans[q.t_q[g_t]], n_lists)
    first_rel = np.full(n_lists, np.inf)
    np.minimum.at(first_rel, lst[rg.rel], rank[rg.rel].astype(np.float64))
    values["MRR"] = np.where(np.isfinite(first_rel), 1.0 / first_rel, 0.0)
    rk = rg.rel & in_k
    values["nDCG"] = _safe_ratio(_group_sum(lst[rk], discount(rank[rk]), n_lists), st.bin_idcg[list_c])
    values["budget-cov"] = _budget_coverage(lst, rank, r.chunk_row, r.same_doc, r.c, r.q, ch, q,
                                            np.unique(r.cell_cond), n_q, n_lists, p.budgets, p.budget_partial)
    return values


def _check_repeats(lst, chunk_row, ch: _Chunks, cells, ids, n_q) -> None:
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
                                f"{_describe_list(cells, ids, lst[starts[r]], n_q)}; written by 05_retrieve")


def _safe_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    out = np.zeros(len(num))
    np.divide(num, den, out=out, where=den > 0)
    return out


def _describe(runs: pd.DataFrame, i: int) -> str:
    r = runs.iloc[i]
    return f"embedder {r['embedder']!r} reranker {r['reranker']!r} condition {r['condition']!r} query {r['query_id']!r}"


def _describe_list(cells: pd.DataFrame, ids: np.ndarray, list_id: int, n_q: int) -> str:
    c = cells.iloc[int(list_id) // n_q]
    return (f"embedder {c['embedder']!r} reranker {c['reranker']!r} condition {c['condition']!r} "
            f"query {ids[int(list_id) % n_q]!r}")


def _ideal_orderings(s_cq, s_chunk, static_gain, cand, c_q, q: _Queries, ch: _Chunks, n_q: int,
                     k: int) -> dict[str, np.ndarray]:
    """The greedy maximum-marginal-coverage ordering (top ``k``) per (condition, query).

    Where the condition's chunks of the document do not overlap each other, a chunk's marginal gain never
    changes, so greedy = sort by static gain (descending; ties in document order). Elsewhere the greedy loop
    runs with exact rational gains (:func:`_greedy`)."""
    s_over = ch.overlapping[(s_cq // n_q) * ch.n_docs + q.doc[s_cq % n_q]]
    fast = ~s_over
    o = np.lexsort((s_chunk[fast], -static_gain[fast], s_cq[fast]))
    cq, chunk, gain = s_cq[fast][o], s_chunk[fast][o], static_gain[fast][o]
    starts = np.r_[0, np.flatnonzero(cq[1:] != cq[:-1]) + 1] if len(cq) else np.zeros(0, dtype=np.int64)
    pos = np.arange(len(cq)) - np.repeat(starts, np.diff(np.r_[starts, len(cq)])) + 1
    keep = pos <= k
    out = {"cq": cq[keep], "pos": pos[keep], "chunk": chunk[keep], "gain": gain[keep]}
    slow_cq = np.unique(s_cq[s_over])
    if len(slow_cq):
        cand_cq = cand["c"] * n_q + c_q
        sel = np.isin(cand_cq, slow_cq)
        frame = pd.DataFrame({"cq": cand_cq[sel], "t": cand["t"][sel], "chunk": cand["chunk"][sel],
                              "lo": cand["lo"][sel], "hi": cand["hi"][sel]})
        extra = [_greedy(g, q, k) for _, g in frame.groupby("cq", sort=True)]
        out = {key: np.concatenate([out[key]] + [e[key] for e in extra]) for key in out}
    return out


def _greedy(cands: pd.DataFrame, q: _Queries, k: int) -> dict[str, np.ndarray]:
    """Greedy max-marginal coverage for one (condition, query) with overlapping chunks, in exact arithmetic."""
    cq = int(cands["cq"].iloc[0])
    t0 = {}
    for t in np.unique(cands["t"]):
        t0[int(t)] = np.zeros(int(q.t_hi[t] - q.t_lo[t]), dtype=bool)
    pieces: dict[int, list[tuple[int, int, int]]] = {}
    for t, c, lo, hi in zip(cands["t"], cands["chunk"], cands["lo"], cands["hi"]):
        pieces.setdefault(int(c), []).append((int(t), int(lo - q.t_lo[t]), int(hi - q.t_lo[t])))
    n_spans = int(q.n_spans[q.t_q[int(cands["t"].iloc[0])]])
    chosen, gains = [], []
    remaining = sorted(pieces)                     # chunk rows are in document order: ties go to the first
    while remaining and len(chosen) < k:
        best, best_gain = None, Fraction(0)
        for c in remaining:
            g = sum((Fraction(int((~t0[t][lo:hi]).sum()), len(t0[t])) for t, lo, hi in pieces[c]), Fraction(0))
            if g > best_gain:
                best, best_gain = c, g
        if best is None:
            break
        for t, lo, hi in pieces[best]:
            t0[t][lo:hi] = True
        chosen.append(best)
        gains.append(float(best_gain / n_spans))
        remaining.remove(best)
    n = len(chosen)
    return {"cq": np.full(n, cq, dtype=np.int64), "pos": np.arange(1, n + 1), "chunk": np.asarray(chosen, dtype=np.int64),
            "gain": np.asarray(gains, dtype=np.float64)}


def _budget_kept(lst, chunk_row, ch: _Chunks, budgets: tuple[int, ...], policy: str) -> list[np.ndarray]:
    """Per budget: content characters of each run row (rows sorted by list, rank) that enter a ``budget``-token
    window (see the module docstring for the partial-chunk policy)."""
    n = len(lst)
    if n == 0:
        return [np.zeros(0, dtype=np.int64) for _ in budgets]
    starts = np.r_[0, np.flatnonzero(lst[1:] != lst[:-1]) + 1]
    sizes = np.diff(np.r_[starts, n])
    n_content, n_prefix = ch.n_content[chunk_row], ch.n_prefix[chunk_row]
    length = ch.end[chunk_row] - ch.start[chunk_row]
    cost = n_content + n_prefix
    out = []
    if policy in ("truncate", "stop"):
        # the rows that enter form a prefix of each list: tokens used before a row = its list's running sum
        total = np.cumsum(cost)
        before = total - cost - np.repeat(total[starts] - cost[starts], sizes)
        for budget in budgets:
            kept = np.zeros(n, dtype=np.int64)
            fits = before + cost <= budget
            kept[fits] = length[fits]
            if policy == "truncate":
                # the first row that does not fit is the only non-fitting one with ``before <= budget``
                left = budget - before - n_prefix
                part = ~fits & (before <= budget) & (left > 0) & (n_content > 0)
                share = np.floor(length[part] * left[part] / n_content[part])
                kept[part] = np.minimum(share, length[part]).astype(np.int64)
            out.append(kept)
        return out
    # skip: whether a row fits depends on which earlier rows did; one vectorised step per rank position
    col = np.arange(n) - np.repeat(starts, sizes)
    grid = np.full((len(starts), int(sizes.max())), -1, dtype=np.int64)
    grid[np.repeat(np.arange(len(starts)), sizes), col] = np.arange(n)
    for budget in budgets:
        kept = np.zeros(n, dtype=np.int64)
        used = np.zeros(len(starts))
        for j in range(grid.shape[1]):
            at = grid[:, j]
            c = np.where(at >= 0, cost[at], np.inf)
            fits = used + c <= budget
            kept[at[fits]] = length[at[fits]]
            used = np.where(fits, used + c, used)
        out.append(kept)
    return out


def _budget_coverage(lst, rank, chunk_row, same_doc, run_c, run_q, ch: _Chunks, q: _Queries, used_conds, n_q,
                     n_lists, budgets: tuple[int, ...], policy: str) -> list[np.ndarray]:
    """budget-cov@B for every list and budget: covered gold characters / gold characters."""
    cand = _join_targets(ch, used_conds, q.m_q, q.m_lo, q.m_hi, q.doc)
    cqk = (cand["c"] * n_q + q.m_q[cand["t"]]) * len(ch.cond) + cand["chunk"]
    o = np.argsort(cqk, kind="stable")
    sk = cqk[o]
    use = np.flatnonzero(same_doc)
    r_key = (run_c[use] * n_q + run_q[use]) * len(ch.cond) + chunk_row[use]
    a, b = np.searchsorted(sk, r_key, "left"), np.searchsorted(sk, r_key, "right")
    ci, ri = _expand(a, b - a)
    ci = o[ci]
    rr0 = use[ri]
    t0 = cand["t"][ci]
    order = np.lexsort((rank[rr0], t0, lst[rr0]))
    rr0, t0, lo0, hi0 = rr0[order], t0[order], cand["lo"][ci][order], cand["hi"][ci][order]
    gold = q.gold_chars[np.arange(n_lists) % n_q]
    out = []
    for kept in _budget_kept(lst, chunk_row, ch, budgets, policy):
        hi = np.minimum(hi0, ch.start[chunk_row[rr0]] + kept[rr0])
        live = hi > lo0
        rr, lo, hi, t = rr0[live], lo0[live], hi[live], t0[live]
        grp = _run_ids(lst[rr] * max(len(q.m_q), 1) + t)
        covered = _group_sum(lst[rr], new_coverage(grp, lo, hi), n_lists)
        out.append(_safe_ratio(covered, gold))
    return out


# --------------------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------------------

def score_runs(runs: pd.DataFrame, chunks: pd.DataFrame, queries: pd.DataFrame,
               metrics_params: Mapping[str, Any] | MetricParams, corpus: str) -> pd.DataFrame:
    """Score every run list: the long-form ``scores`` table (DESIGN.md "Data contracts").

    ``runs``: embedder, reranker, condition, query_id, rank (1-based), chunk_id (05_retrieve).
    ``chunks``: condition, doc_id, chunk_id, start, end (content offsets), n_content_tokens, n_prefix_tokens
    (04_chunk_embed). ``queries``: query_id, doc_id, spans (list of [start, end] on the query's document), qtype
    (03_queries). ``metrics_params``: the ``metrics`` parameter section.

    Returns one row per (embedder, reranker, condition) present in ``runs`` × every query × metric, with columns
    corpus, embedder, reranker, condition, query_id, metric, value, plus doc_id (the bootstrap's cluster) and
    qtype when ``queries`` has it. A query with no retrieved rows in a cell-condition scores 0 on every metric.
    Definitions and policies: the module docstring.
    """
    p = params_from(metrics_params)
    scored, q, _, _, _ = _score(runs, chunks, queries, p)
    n_lists = len(scored.cells) * scored.n_q
    cell_of = np.repeat(np.arange(len(scored.cells)), scored.n_q)
    q_of = np.tile(np.arange(scored.n_q), len(scored.cells))
    m = len(p.names)
    out = pd.DataFrame({
        "corpus": np.full(n_lists * m, corpus, dtype=object),
        "embedder": np.tile(scored.cells["embedder"].to_numpy()[cell_of], m),
        "reranker": np.tile(scored.cells["reranker"].to_numpy()[cell_of], m),
        "condition": np.tile(scored.cells["condition"].to_numpy()[cell_of], m),
        "query_id": np.tile(q.ids[q_of], m),
        "metric": np.repeat(np.asarray(p.names, dtype=object), n_lists),
        "value": np.concatenate([scored.values[name] for name in p.names]) if n_lists else np.zeros(0),
        "doc_id": np.tile(queries["doc_id"].astype(str).to_numpy(dtype=object)[q_of], m),
    })
    if "qtype" in queries.columns:
        out["qtype"] = np.tile(queries["qtype"].astype(str).to_numpy(dtype=object)[q_of], m)
    return out


def coverage_walk(runs: pd.DataFrame, chunks: pd.DataFrame, queries: pd.DataFrame,
                  metrics_params: Mapping[str, Any] | MetricParams, *, embedder: str, reranker: str,
                  condition: str, query_id: str) -> pd.DataFrame:
    """One query's coverage-nDCG, rank by rank, beside the greedy ideal (for the notebook and for reading).

    Rows are ranks 1..cutoff. Columns: ``rank``, the retrieved ``chunk_id``/``doc_id``/``start``/``end``,
    ``same_doc``, ``relevant`` (the relevance rule), ``gain`` (mean over gold spans of the newly covered
    fraction), ``dcg`` (running sum of ``gain / log2(rank + 1)``); the ideal's ``ideal_chunk_id``,
    ``ideal_start``, ``ideal_end``, ``ideal_gain`` and running ``idcg``. ``attrs`` holds ``dcg``, ``idcg`` and
    ``score`` (= cov-nDCG@cutoff, 0 when the ideal is 0).
    """
    p = params_from(metrics_params)
    sel = ((runs["embedder"].astype(str) == embedder) & (runs["reranker"].astype(str) == reranker)
           & (runs["condition"].astype(str) == condition) & (runs["query_id"].astype(str) == query_id))
    one_q = queries[queries["query_id"].astype(str) == query_id]
    if one_q.empty:
        raise MetricsInputError(f"queries: no query {query_id!r}")
    one_c = chunks[chunks["condition"].astype(str) == condition]
    if one_c.empty:
        raise MetricsInputError(f"chunks: no chunks for condition {condition!r}")
    if not sel.any():
        raise MetricsInputError(f"runs: no rows for embedder {embedder!r} reranker {reranker!r} condition "
                                f"{condition!r} query {query_id!r}")
    scored, q, ch, docs, _ = _score(runs[sel], one_c, one_q, p)
    r = scored.run
    k = p.cutoff
    walk = pd.DataFrame({"rank": np.arange(1, k + 1)})
    here = r["rank"] <= k
    obs = pd.DataFrame({
        "rank": r["rank"][here], "chunk_id": ch.chunk_id[r["chunk"][here]],
        "doc_id": np.asarray(docs, dtype=object)[ch.doc[r["chunk"][here]]],
        "start": ch.start[r["chunk"][here]], "end": ch.end[r["chunk"][here]],
        "same_doc": r["same_doc"][here], "relevant": r["rel"][here], "gain": r["gain"][here]})
    walk = walk.merge(obs, on="rank", how="left")
    walk["gain"] = walk["gain"].fillna(0.0)
    walk["dcg"] = np.cumsum(walk["gain"].to_numpy() * discount(walk["rank"]))
    ideal = scored.ideal
    ide = pd.DataFrame({"rank": ideal["pos"], "ideal_chunk_id": ch.chunk_id[ideal["chunk"]],
                        "ideal_start": ch.start[ideal["chunk"]], "ideal_end": ch.end[ideal["chunk"]],
                        "ideal_gain": ideal["gain"]})
    walk = walk.merge(ide, on="rank", how="left")
    walk["ideal_gain"] = walk["ideal_gain"].fillna(0.0)
    walk["idcg"] = np.cumsum(walk["ideal_gain"].to_numpy() * discount(walk["rank"]))
    walk = walk.astype({c: "Int64" for c in ("start", "end", "ideal_start", "ideal_end")})
    dcg, idcg = float(walk["dcg"].iloc[-1]), float(walk["idcg"].iloc[-1])
    walk.attrs.update({"dcg": dcg, "idcg": idcg, "score": dcg / idcg if idcg > 0 else 0.0,
                       "metric": p.primary, "query_id": query_id, "condition": condition})
    return walk


def rank_gains(runs: pd.DataFrame, chunks: pd.DataFrame, queries: pd.DataFrame,
               metrics_params: Mapping[str, Any] | MetricParams) -> pd.DataFrame:
    """The coverage-nDCG terms of every retrieved row within the cutoff, for every list in ``runs`` at once (the
    vectorised counterpart of :func:`coverage_walk`, for the per-query drill-down).

    One row per run row with ``rank <= cutoff``, sorted by list then rank. Columns: ``embedder``, ``reranker``,
    ``condition``, ``query_id``, ``rank``, ``chunk_id``, ``same_doc`` (the chunk lies in the query's document),
    ``relevant`` (the relevance rule), ``gain`` (mean over gold spans of the newly covered fraction, as in
    cov-nDCG), ``discounted_gain`` = ``gain / log2(rank + 1)``, ``dcg`` (running sum of ``discounted_gain``
    within the list), ``idcg`` (the list's greedy ideal over the condition's own chunks of the document) and
    ``ndcg`` (the list's cov-nDCG@cutoff = final ``dcg`` / ``idcg``, 0 when ``idcg`` is 0; the value
    :func:`score_runs` reports). Inputs and conventions as in :func:`score_runs`.
    """
    p = params_from(metrics_params)
    scored, q, ch, _, conds = _score(runs, chunks, queries, p)
    r = scored.run
    keep = r["rank"] <= p.cutoff
    lst, rank, chunk = r["list"][keep], r["rank"][keep], r["chunk"][keep]
    cell, qi = lst // scored.n_q, lst % scored.n_q
    n_cq = len(conds) * scored.n_q
    idcg_cq = _group_sum(scored.ideal["cq"], scored.ideal["gain"] * discount(scored.ideal["pos"]), n_cq)
    gain = r["gain"][keep]
    disc = gain * discount(rank)
    starts = np.r_[0, np.flatnonzero(lst[1:] != lst[:-1]) + 1] if len(lst) else np.zeros(0, dtype=np.int64)
    total = np.cumsum(disc)
    before = np.repeat(total[starts] - disc[starts], np.diff(np.r_[starts, len(lst)])) if len(lst) else total
    return pd.DataFrame({
        "embedder": scored.cells["embedder"].to_numpy()[cell],
        "reranker": scored.cells["reranker"].to_numpy()[cell],
        "condition": scored.cells["condition"].to_numpy()[cell],
        "query_id": q.ids[qi], "rank": rank, "chunk_id": ch.chunk_id[chunk],
        "same_doc": r["same_doc"][keep], "relevant": r["rel"][keep], "gain": gain, "discounted_gain": disc,
        "dcg": total - before, "idcg": idcg_cq[scored.cell_cond[cell] * scored.n_q + qi],
        "ndcg": scored.values[p.primary][lst],
    })


def cell_means(scores: pd.DataFrame) -> pd.DataFrame:
    """Mean of every metric per (embedder, reranker, condition): rows = cell × condition, columns = metrics in
    table order (exploratory summary; the confirmatory statistics live in 07_stats)."""
    metrics = list(pd.unique(scores["metric"]))
    wide = scores.pivot_table(index=["embedder", "reranker", "condition"], columns="metric", values="value",
                              aggfunc="mean", sort=True)
    return wide[metrics]


def walk_example(scores: pd.DataFrame, queries: pd.DataFrame, *, embedder: str, reranker: str,
                 condition: str) -> dict[str, str]:
    """A query worth walking through in the notebook: in the given cell and condition (else the first condition
    scored there), the query with the most gold spans whose coverage-nDCG lies strictly between 0 and 1 (the
    novelty and the ideal both visible), ties to the smallest query_id; else the smallest query_id scored.
    Returns the keyword arguments of :func:`coverage_walk`."""
    cell = scores[(scores["embedder"] == embedder) & (scores["reranker"] == reranker)]
    if cell.empty:
        raise MetricsInputError(f"scores: no rows for embedder {embedder!r} reranker {reranker!r}; cells: "
                                f"{sorted(set(zip(scores['embedder'], scores['reranker'])))}")
    if condition not in set(cell["condition"]):
        condition = sorted(set(cell["condition"]))[0]
    primary = cell[(cell["condition"] == condition)
                   & cell["metric"].map(lambda n: design.is_metric(n, design.PRIMARY_METRIC.key))]
    n_spans = queries.set_index("query_id")["spans"].map(len)
    table = primary.assign(n_spans=primary["query_id"].map(n_spans).to_numpy(),
                           inside=(primary["value"] > 0) & (primary["value"] < 1))
    best = table.sort_values(["inside", "n_spans", "query_id"], ascending=[False, False, True]).iloc[0]
    return {"embedder": embedder, "reranker": reranker, "condition": condition, "query_id": str(best["query_id"])}
