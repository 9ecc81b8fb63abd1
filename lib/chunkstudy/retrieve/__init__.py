"""Retrieval (stage 05): exact flat inner-product search, two-stage route-to-section search, section recall.

Conventions
-----------
* Vectors are rows of float32 matrices; inputs of another dtype are cast to float32 once (the embedder writes
  float32, normalised). Scores are inner products; for unit vectors they are cosine similarities in [-1, 1].
* **Exact scores.** Whatever the backend (numpy's blocked float32 matrix products, or faiss ``IndexFlatIP``), it
  only proposes candidates. Every returned score is recomputed as a float64 sum of the exact float32 x float32
  products, with one code path (:func:`exact_scores`), so the same (query, chunk) pair always gets the
  bit-identical score: in flat and two-stage search, with either backend, in any block size.
* **Ties** are broken by ``(-score, chunk_id)``: equal scores rank in ascending chunk_id order (docs/design.md,
  "Policy: seeds and ties"). The candidates are every chunk whose float32 score is within twice the float32 error
  bound of the k-th best float32 score, so a group of (near-)ties at the cut is always rescored whole and the
  result is the exact top k under this order, never an artefact of float32 rounding or faiss' heap.
* **Speed** (``bench/bench_retrieve.py``): per block of queries one float32 matrix product against all chunks;
  the k-th best score is bracketed from a strided sample of the block's columns (no full selection over each row),
  and only the ~k candidates are rescored exactly. Two-stage search reuses the same block for the routed chunks
  and the backfill, with no loop over queries.
* Offsets in chunk/query tables are half-open character indices into ``documents.text`` (content offsets: a
  prefix never contributes to an extent, so section recall cannot be created by a heading path).

Two-stage search (paper, Method, "Representation constancy (guards C4)"): a *section* is a document plus one
top-level heading (the lead before the first heading is its own section); chunks carry it as ``route_key``. A
section's centroid is the renormalised mean of the very chunk vectors flat search ranks, so A4 vs A3 (C4)
compares retrieval algorithms over one representation. Stage 1 keeps the top ``n_sections`` (5) centroids; stage 2
ranks the chunks inside them; when they hold fewer than k chunks the global flat ranking backfills the list.

Layout: :mod:`.search` (exact flat search, the kernel every condition uses), :mod:`.routing` (section centroids,
two-stage search, section recall), and here the whole stage (:func:`retrieve_all`) and what 05's notebook displays.
The kernels are re-exported: ``chunkstudy.retrieve.flat_search`` and the like.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from .. import design, progress, stages
from ..params import RetrieveParams
from . import modes
from .cache import SearchCache
# the kernels, re-exported: the stage's callers and the benches name them retrieve.flat_search and the like
from .routing import (TwoStageResult, gold_sections, section_centroids, section_extents,  # noqa: F401
                      section_recall, two_stage_search)
from .search import _as_matrix, exact_scores, flat_search  # noqa: F401

_RUNS_COLUMNS = stages.columns("runs")


# --------------------------------------------------------------------------------------------------------------
# the whole stage


def _runs_frame(embedder: str, condition: str, query_ids: np.ndarray, cond_chunks: pd.DataFrame,
                found: modes.Found) -> pd.DataFrame:
    """The runs rows of one cell: every filled slot of its lists (all of them unless ``found.n`` says fewer)."""
    nq, kk = found.idx.shape
    keep = np.ones(nq * kk, dtype=bool) if found.n is None else \
        (np.arange(kk)[None, :] < found.n[:, None]).ravel()
    flat = found.idx.ravel()[keep]
    return pd.DataFrame({
        "embedder": embedder,
        "reranker": "none",
        "condition": condition,
        "query_id": np.repeat(query_ids, kk)[keep],
        "rank": np.tile(np.arange(1, kk + 1, dtype=np.int64), nq)[keep],
        "chunk_id": cond_chunks["chunk_id"].to_numpy()[flat],
        "score": found.scores.ravel()[keep],
        "doc_id": cond_chunks["doc_id"].to_numpy()[flat],
        "source": found.source.ravel()[keep],
    }, columns=_RUNS_COLUMNS)


def _recall_frame(embedder: str, condition: str, query_ids: np.ndarray, queries: pd.DataFrame,
                  cc: pd.DataFrame, found: modes.Found) -> pd.DataFrame:
    """The section_recall rows of one routed cell: the sections stage 1 kept (``found.routed``, "" unused)."""
    routed_keys = np.asarray(found.routed).astype(str)
    used = routed_keys != ""
    split = np.char.partition(routed_keys, "\x1f")
    ns = routed_keys.shape[1]
    routed = pd.DataFrame({
        "query_id": np.repeat(query_ids, ns)[used.ravel()],
        "route_rank": np.tile(np.arange(1, ns + 1), len(query_ids))[used.ravel()],
        "doc_id": split[..., 0].ravel()[used.ravel()], "route_key": split[..., 2].ravel()[used.ravel()]})
    sr = section_recall(routed, queries.assign(query_id=query_ids), cc.astype({"doc_id": str, "route_key": str}))
    sr.insert(0, "condition", condition)
    sr.insert(0, "reranker", "none")
    sr.insert(0, "embedder", embedder)
    whole = bool(used.all())  # every slot used (dense routing): the rows as they are
    sr["routed_doc_ids"] = list(split[..., 0]) if whole else [r[u] for r, u in zip(split[..., 0], used)]
    sr["routed_route_keys"] = list(split[..., 2]) if whole else [r[u] for r, u in zip(split[..., 2], used)]
    scores = np.asarray(found.routed_scores)
    sr["routed_scores"] = list(scores) if whole else [r[u] for r, u in zip(scores, used)]
    return sr


def _query_vectors(vectors_by_embedder: Mapping[str, np.ndarray], query_vecs_by_embedder: Mapping[str, np.ndarray],
                   n_queries: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per embedder, its chunk matrix and its validated query vectors (the checks name what 04 or the server got
    wrong)."""
    out = {}
    for embedder in vectors_by_embedder:
        if embedder not in query_vecs_by_embedder:
            raise KeyError(f"query vectors for embedder {embedder!r} are missing; have {list(query_vecs_by_embedder)}")
        matrix = np.asarray(vectors_by_embedder[embedder])
        qv = _as_matrix(query_vecs_by_embedder[embedder], f"query vectors ({embedder})")
        if len(qv) != n_queries:
            raise ValueError(f"query vectors ({embedder}): {len(qv)} rows for {n_queries} queries")
        if len(qv) and matrix.ndim == 2 and qv.shape[1] != matrix.shape[1]:  # the server's model changed after 04
            raise ValueError(f"query vectors ({embedder}) have dimension {qv.shape[1]}, 04's chunk vectors "
                             f"{matrix.shape[1]}: the model changed since 04 ran; run from 04 (--from 04), which "
                             "embeds the chunks with the model that answers now")
        out[embedder] = (matrix, qv)
    return out


def _chunk_vectors(matrix: np.ndarray, rows: np.ndarray, condition: str, embedder: str) -> np.ndarray:
    if len(rows) and (rows.min() < 0 or rows.max() >= len(matrix)):
        raise IndexError(f"chunks ({condition}): text_row {int(rows.max())} is outside the {embedder!r} "
                         f"vectors matrix of {len(matrix)} rows; 04_chunk_embed wrote them inconsistently")
    return matrix[rows]


def retrieve_all(chunks: pd.DataFrame, vectors_by_embedder: Mapping[str, np.ndarray],
                 query_vecs_by_embedder: Mapping[str, np.ndarray], queries: pd.DataFrame,
                 retrieve_params: RetrieveParams, texts: Sequence[str] | None = None,
                 searches: SearchCache | None = None) -> dict[str, Any]:
    """Retrieve every query under every (retriever, condition): flat, or two-stage for ``two_stage_conditions``.

    ``chunks``: the 04 table (condition, doc_id, chunk_id, start, end, route_key, text_row); a condition's chunk
    vectors are ``vectors_by_embedder[e][chunks.text_row]``. ``query_vecs_by_embedder[e]`` has one row per row of
    ``queries`` (same order). ``retrieve_params``: the ``retrieve`` record, ``cfg.params("retrieve")`` (k,
    route_sections, backend, two_stage_conditions, modes and their bm25 and fusion records; a mapping is validated
    into one). The retrievers are ``retrieve.modes`` × the embedders (:func:`chunkstudy.design.retrievers`: an
    embedder's own key in the dense mode, ``bm25``, ``hybrid-<embedder>``), each searched by its mode's function
    (:data:`chunkstudy.retrieve.modes.FUNCTIONS`); a lexical mode indexes ``texts``, each chunk row's indexed text
    (prefix + content, :func:`chunkstudy.chunks.chunk_sets.embedded_texts`). ``searches``: the store of dense
    searches (:class:`chunkstudy.retrieve.cache.SearchCache`; None searches every time). Every query searches all
    chunks of the corpus under that condition. Returns ``{"runs": ..., "section_recall": ..., "timing": ...,
    "lexical": ...}``. timing: embedder (the retriever), condition, n_queries, the cell's search seconds
    (:func:`chunkstudy.progress.timed`, ``retrieve.timing_repeats``; a dense search read from the store keeps the
    seconds it took when it ran; measured, never in a golden). runs: embedder (the retriever), reranker ("none"),
    condition, query_id, rank (1-based), chunk_id, score, doc_id, source ("flat" | "routed" | "backfill"); a BM25
    list holds only chunks sharing a token with the query, so it may be shorter than k. section_recall (two-stage
    conditions only): embedder, reranker, condition, query_id, doc_id, section_recall, n_gold_sections,
    n_routed_gold, first_gold_route_rank, routed_doc_ids, routed_route_keys, routed_scores (lists, best first).
    lexical: :func:`chunkstudy.retrieve.modes.lexical_report` (empty without a lexical mode).
    """
    stages.check(chunks, "chunks", ("condition", "doc_id", "chunk_id", "start", "end", "route_key", "text_row"),
                 "retrieve.retrieve_all")
    stages.check(queries, "queries", ("query_id", "doc_id", "spans"), "retrieve.retrieve_all")
    if chunks["chunk_id"].duplicated().any():
        raise ValueError(f"chunks: chunk_id {chunks.loc[chunks['chunk_id'].duplicated(), 'chunk_id'].iloc[0]!r} "
                         "occurs more than once (chunk ids must be unique across conditions)")
    p = retrieve_params
    chunks = chunks.reset_index(drop=True)
    retrievers = design.retrievers(getattr(p, "modes", (design.DENSE,)), list(vectors_by_embedder))
    lx = None
    if any(mode.lexical for mode, _ in retrievers.values()):
        if texts is None or len(texts) != len(chunks):
            raise ValueError(f"retrieve.modes {list(p.modes)}: a lexical mode indexes each chunk's text (prefix + "
                             f"content); got {'none' if texts is None else len(texts)} texts for {len(chunks)} chunks")
        lx = modes.lexical_inputs(texts, queries["text"].astype(str).tolist(), p.bm25)
    out = _cells(chunks, _query_vectors(vectors_by_embedder, query_vecs_by_embedder, len(queries)), queries, p,
                 retrievers, lx, searches)
    return {**out, "lexical": modes.lexical_report(lx)}


def _cells(chunks: pd.DataFrame, vectors: Mapping[str, tuple[np.ndarray, np.ndarray]], queries: pd.DataFrame,
           p: RetrieveParams, retrievers: Mapping[str, tuple[design.RetrievalMode, str | None]],
           lx: modes.Lexical | None, searches: SearchCache | None) -> dict[str, pd.DataFrame]:
    """:func:`retrieve_all`'s loop: each retriever (in order), each condition (sorted), one cell each."""
    two_stage = set(p.two_stage_conditions)
    repeats = int(getattr(p, "timing_repeats", 0))
    query_ids = queries["query_id"].astype(str).to_numpy()
    runs, recall, timing = [], [], []
    for name, (mode, embedder) in retrievers.items():
        for condition, cc in chunks.groupby("condition", sort=True):
            rows = cc.index.to_numpy()
            cc = cc.reset_index(drop=True)
            matrix, qv = vectors[embedder] if mode.dense and embedder is not None else (None, None)
            cvec = _chunk_vectors(matrix, cc["text_row"].to_numpy(), str(condition), str(embedder)) \
                if matrix is not None else None
            # a section is (document, top-level heading); route_key alone may repeat across documents
            labels = (cc["doc_id"].astype(str) + "\x1f" + cc["route_key"].astype(str)).to_numpy() \
                if condition in two_stage else None
            cell = modes.Cell(str(condition), cc["chunk_id"].astype(str).to_numpy(), rows, labels, qv, cvec, lx, p,
                              searches, repeats)
            found = modes.FUNCTIONS[mode.name](cell)
            runs.append(_runs_frame(name, str(condition), query_ids, cc, found))
            if found.routed is not None:
                recall.append(_recall_frame(name, str(condition), query_ids, queries, cc, found))
            timing.append({"embedder": name, "condition": str(condition), "n_queries": int(len(query_ids)),
                           **found.seconds})
    runs_df = pd.concat(runs, ignore_index=True) if runs else pd.DataFrame(columns=_RUNS_COLUMNS)
    recall_df = (pd.concat(recall, ignore_index=True) if recall
                 else pd.DataFrame(columns=stages.columns("section_recall")))
    return {"runs": runs_df, "section_recall": recall_df,
            "timing": pd.DataFrame(timing, columns=["embedder", "condition", "n_queries", *progress.TIMING_COLUMNS])}


# --------------------------------------------------------------------------------------------------------------
# helpers the notebook displays


def embed_queries(queries: pd.DataFrame, embedders: Mapping[str, Any], store: Any) -> dict[str, np.ndarray]:
    """Query vectors per embedder key, one row per row of ``queries``, through the persistent embedding store
    (``store``, an ``embed_store.EmbeddingStore``), for ``cfg.params("embed").embedders``; ``kind="query"`` (the
    BGE query instruction where the spec asks for it)."""
    from .. import embed

    texts = queries["text"].astype(str).tolist()
    return {key: np.asarray(store.embed(embed.load_embedder(spec, key), texts, kind="query"))
            for key, spec in embedders.items()}


def vector_shapes(vectors_by_embedder: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """Rows and dimension of each embedder's vectors (for display): one column per embedder."""
    return pd.DataFrame({key: {"queries": v.shape[0], "dim": v.shape[1]} for key, v in vectors_by_embedder.items()})


def section_recall_summary(section_recall_df: pd.DataFrame) -> pd.DataFrame:
    """Per (embedder, reranker, condition): mean section recall over the queries where it is defined (not NA),
    ``n_queries``, ``n_defined``, the binomial standard error ``se = sqrt(r(1−r)/n_defined)`` and, when the
    table has it, the mean number of gold sections per query: the ``section_recall_summary`` table 05 writes and
    08 formats."""
    stages.check(section_recall_df, "section_recall", ("embedder", "reranker", "condition", "query_id",
                                                       "section_recall"), "retrieve.section_recall_summary")
    df = section_recall_df.assign(defined=section_recall_df["section_recall"].notna(),
                                  hit=section_recall_df["section_recall"].astype("float64"))
    extra = {"mean_gold_sections": ("n_gold_sections", "mean")} if "n_gold_sections" in df.columns else {}
    out = (df.groupby(["embedder", "reranker", "condition"])
             .agg(section_recall=("hit", "mean"), n_queries=("query_id", "size"), n_defined=("defined", "sum"),
                  **extra).reset_index())
    r = out["section_recall"]
    out["se"] = np.sqrt(r * (1 - r) / out["n_defined"].where(out["n_defined"] > 0))
    return out.astype({"n_queries": "int64", "n_defined": "int64"})


def query_view(runs: pd.DataFrame, section_recall_df: pd.DataFrame, chunks: pd.DataFrame, queries: pd.DataFrame,
               documents: pd.DataFrame, query_id: str, conditions: Sequence[str], *, reranker: str,
               embedder: str | None = None, n: int = 10, snippet_chars: int = 90) -> pd.DataFrame:
    """The top ``n`` results of one query under ``conditions``, for reading: condition, rank, chunk_id, doc_id,
    route_key, score, source, in_routed (the chunk's section was kept by stage 1), gold_chars (characters of the
    query's gold spans inside the chunk, content offsets) and a content snippet."""
    sel = runs[(runs["query_id"] == query_id) & runs["condition"].isin(conditions) & (runs["reranker"] == reranker)
               & (runs["rank"] <= n)]
    if embedder is not None:
        sel = sel[sel["embedder"] == embedder]
    if sel.empty:
        raise KeyError(f"runs: no rows for query {query_id!r} under {list(conditions)} (embedder {embedder!r})")
    view = sel.merge(chunks[["chunk_id", "start", "end", "route_key"]], on="chunk_id", how="left")
    q = queries.loc[queries["query_id"] == query_id].iloc[0]
    spans = np.array([list(map(int, s)) for s in q["spans"]], dtype=np.int64).reshape(-1, 2)
    same_doc = (view["doc_id"] == q["doc_id"]).to_numpy()
    st, en = view["start"].to_numpy()[:, None], view["end"].to_numpy()[:, None]
    inter = np.clip(np.minimum(en, spans[:, 1]) - np.maximum(st, spans[:, 0]), 0, None).sum(axis=1)
    view["gold_chars"] = np.where(same_doc, inter, 0)
    routed = section_recall_df[(section_recall_df["query_id"] == query_id)
                               & section_recall_df["condition"].isin(conditions)]
    if embedder is not None:
        routed = routed[routed["embedder"] == embedder]
    kept = {(r.embedder, r.condition, d, k) for r in routed.itertuples()
            for d, k in zip(r.routed_doc_ids, r.routed_route_keys)}
    view["in_routed"] = [(e, c, d, k) in kept if c in set(routed["condition"]) else pd.NA
                         for e, c, d, k in zip(view["embedder"], view["condition"], view["doc_id"],
                                               view["route_key"])]
    text = documents.set_index("doc_id")["text"]
    view["snippet"] = [text[d][s:s + snippet_chars].replace("\n", " ")
                       for d, s in zip(view["doc_id"], view["start"])]
    return view[["embedder", "condition", "rank", "chunk_id", "doc_id", "route_key", "score", "source",
                 "in_routed", "gold_chars", "snippet"]].reset_index(drop=True)


def routed_sections(section_recall_df: pd.DataFrame, query_id: str, embedder: str | None = None) -> pd.DataFrame:
    """The sections stage 1 kept for one query (one row per routed section, best first), centroid scores."""
    sel = section_recall_df[section_recall_df["query_id"] == query_id]
    if embedder is not None:
        sel = sel[sel["embedder"] == embedder]
    if sel.empty:
        raise KeyError(f"section_recall: no rows for query {query_id!r}")
    out = sel[["embedder", "condition", "query_id", "routed_doc_ids", "routed_route_keys", "routed_scores"]].explode(
        ["routed_doc_ids", "routed_route_keys", "routed_scores"]).rename(
        columns={"routed_doc_ids": "doc_id", "routed_route_keys": "route_key", "routed_scores": "centroid_score"})
    out["route_rank"] = out.groupby(["embedder", "condition"]).cumcount() + 1
    return out.reset_index(drop=True)


def example_query(section_recall_df: pd.DataFrame, embedder: str, condition: str) -> str:
    """A query to read in the notebook: the first (by query_id) whose gold sections stage 1 missed under
    ``condition`` (a routing failure shows what C4 measures), else the first query."""
    sel = section_recall_df[(section_recall_df["embedder"] == embedder)
                            & (section_recall_df["condition"] == condition)].sort_values("query_id")
    if sel.empty:
        raise KeyError(f"section_recall: no rows for embedder {embedder!r}, condition {condition!r}")
    missed = sel[sel["section_recall"].eq(False).fillna(False).astype(bool)]
    return str((missed if len(missed) else sel)["query_id"].iloc[0])
