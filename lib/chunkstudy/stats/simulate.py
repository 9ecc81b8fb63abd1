"""Simulated scores with known condition effects and document clustering (stage 07's tests, benchmarks, and
checking the machinery before real runs exist)."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..params import Params

#: The parameter file's defaults: what :func:`simulate_scores` labels its cells with unless told otherwise.
_DEFAULT = Params()


def simulate_scores(n_docs: int, n_queries: int, effects: Mapping[str, float], *, seed: int, corpus: str = "sim",
                    metrics: Sequence[str] = (_DEFAULT.stats.primary_metric,),
                    embedders: Sequence[str] = (_DEFAULT.embed.strong,),
                    rerankers: Sequence[str] = (_DEFAULT.stats.primary_reranker,), base: float = 0.4,
                    doc_sd: float = 0.1, query_sd: float = 0.2, doc_condition_sd: float = 0.02, noise_sd: float = 0.1,
                    qtypes: Sequence[str] = ("factoid", "multihop", "structural")) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Simulated ``(scores, queries)`` tables with known condition effects and document clustering.

    Every document gets at least one query and the rest are spread uniformly (so exactly ``n_queries`` over
    ``n_docs``). A score is ``base + u_d + v_q + effects[c] + w_{d,c} + e_{q,c}`` with document effect
    ``u_d ~ N(0, doc_sd²)``, query effect ``v_q ~ N(0, query_sd²)``, document × condition effect
    ``w_{d,c} ~ N(0, doc_condition_sd²)`` (what makes the paired deltas of one document move together) and noise
    ``e ~ N(0, noise_sd²)`` — unclipped, so ``effects[A] − effects[B]`` is exactly the population mean delta. Each
    metric × embedder × reranker cell draws independently; qtypes cycle over the queries.
    """
    if n_queries < n_docs or n_docs < 1:
        raise ValueError(f"simulate_scores: need n_queries ≥ n_docs ≥ 1, got {n_queries} queries, {n_docs} docs")
    rng = np.random.default_rng(seed)
    conds = list(effects)
    per_doc = 1 + rng.multinomial(n_queries - n_docs, np.full(n_docs, 1.0 / n_docs))
    doc_of = np.repeat(np.arange(n_docs), per_doc)
    doc_ids = np.array([f"d{i:05d}" for i in range(n_docs)])
    query_ids = np.array([f"q{i:06d}" for i in range(n_queries)])
    queries = pd.DataFrame({"query_id": query_ids, "doc_id": doc_ids[doc_of],
                            "qtype": np.array(list(qtypes))[np.arange(n_queries) % len(qtypes)],
                            "text": [f"simulated question {i}" for i in range(n_queries)],
                            "spans": [[[0, 1]] for _ in range(n_queries)]})
    frames = []
    eff = np.array([effects[c] for c in conds], dtype=float)
    for metric in metrics:
        for embedder in embedders:
            for reranker in rerankers:
                u = rng.normal(0, doc_sd, n_docs)[doc_of]
                v = rng.normal(0, query_sd, n_queries)
                w = rng.normal(0, doc_condition_sd, (n_docs, len(conds)))[doc_of]
                e = rng.normal(0, noise_sd, (n_queries, len(conds)))
                value = base + (u + v)[:, None] + eff[None, :] + w + e
                frames.append(pd.DataFrame({
                    "corpus": corpus, "embedder": embedder, "reranker": reranker,
                    "condition": np.tile(conds, n_queries), "query_id": np.repeat(query_ids, len(conds)),
                    "metric": metric, "value": value.ravel()}))
    return pd.concat(frames, ignore_index=True), queries
