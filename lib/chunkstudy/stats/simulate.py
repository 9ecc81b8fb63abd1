"""Simulated scores with known condition effects and document clustering (stage 07's tests, benchmarks, and
checking the machinery before real runs exist), and the simulations that check 07's tests on them: the family-wise
error of the equivalence verdicts (:func:`tost_family_rates`) and the coverage of the mixed models' CIs
(:func:`mixed_coverage`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

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


def tost_family_rates(test: Any, sesoi: float, m: int, *, n_docs: int, queries_per_doc: int, n_sims: int, seed: int,
                      doc_sd: float = 0.02, noise_sd: float = 0.05) -> dict[str, float]:
    """How often a family of ``m`` contrasts, every one at the equivalence bound, gets at least one false verdict:
    the family-wise error that :class:`chunkstudy.stats.verdict.tost.TostVerdict` holds (docs/beyond.md,
    "Equivalence"; bench/bench_tost_family.py prints it).

    Each of ``n_sims`` studies draws, per contrast, ``n_docs`` documents of ``queries_per_doc`` paired deltas
    ``δ = ±sesoi + w_d + e_q`` (sign alternating over the contrasts, ``w_d ~ N(0, doc_sd²)``, ``e_q ~ N(0,
    noise_sd²)``: independent contrasts, clustered by document), tests each with ``test``
    (:class:`chunkstudy.significance.BootstrapTest`, with a seed of the study's own) and decides the family with
    :class:`~chunkstudy.stats.verdict.tost.TostVerdict` at ``sesoi``. At |δ| = sesoi both claims are false: "equivalent" (H0: |δ| ≥ sesoi holds) and "not equivalent"
    (H0: |δ| ≤ sesoi holds). Returns the share of studies with at least one "equivalent" / "not equivalent"
    verdict (``holm_equivalent``, ``holm_not_equivalent``), the same from the unadjusted p-values of the same draws
    (``raw_equivalent``: any ``p_tost < alpha``, the rule before the family was held; ``raw_not_equivalent``), and
    the Monte Carlo standard error of a rate of alpha (``mc_se``)."""
    from .equivalence import EQUIVALENT, NOT_EQUIVALENT
    from .verdict.tost import TostVerdict

    rng = np.random.default_rng(seed)
    docs = np.repeat(np.arange(n_docs), queries_per_doc)
    verdict = TostVerdict(float(sesoi))
    alpha = float(test.alpha)
    counts = {"holm_equivalent": 0, "holm_not_equivalent": 0, "raw_equivalent": 0, "raw_not_equivalent": 0}
    for _ in range(n_sims):
        study = replace(test, seed=int(rng.integers(2**31)))  # each study its own bootstrap seed, as a new run has
        family = []
        for i in range(m):
            w = rng.normal(0.0, doc_sd, n_docs)[docs]
            delta = (sesoi if i % 2 == 0 else -sesoi) + w + rng.normal(0.0, noise_sd, docs.size)
            family.append(study.test(delta, docs))
        rows = verdict.decide(study, family)
        counts["holm_equivalent"] += any(r["equivalence"] == EQUIVALENT for r in rows)
        counts["holm_not_equivalent"] += any(r["equivalence"] == NOT_EQUIVALENT for r in rows)
        counts["raw_equivalent"] += any(r["p_tost"] < alpha for r in rows)
        counts["raw_not_equivalent"] += any(r["p_met"] < alpha for r in rows)
    out = {k: v / n_sims for k, v in counts.items()}
    out["mc_se"] = float(np.sqrt(alpha * (1 - alpha) / n_sims))
    return out


def mixed_coverage(n_sims: int, *, n_docs: int, n_queries: int, effect: float, seed: int, alpha: float,
                   doc_sd: float = 0.1, query_sd: float = 0.2, doc_condition_sd: float = 0.03, noise_sd: float = 0.1,
                   preregistered: bool = False) -> dict[str, float]:
    """How often the ``(1 − alpha)`` Wald CI of the correctly specified secondary model
    (:func:`chunkstudy.stats.contrasts.fit_paired_mixedlm`) covers a known contrast, over ``n_sims`` studies of
    :func:`simulate_scores` (two conditions ``A = effect``, ``B = 0``; document, query, document × condition and
    noise SDs as given: the variances the simulation knows); with ``preregistered`` also the pre-registered model's
    (:func:`chunkstudy.stats.contrasts.fit_mixedlm`, no query effect; statsmodels, about 100 times slower).
    Returns ``paired`` (coverage), ``paired_se`` (its mean SE) against ``sd_estimate`` (the SD of its estimates
    over the studies), the mean estimated variances against the true ones (``doc_var`` vs ``true_doc_var =
    2·doc_condition_sd²``, ``resid_var`` vs ``true_resid_var = 2·noise_sd²``), ``studies`` and ``mc_se`` (the
    Monte Carlo SE of a coverage of ``1 − alpha``); with ``preregistered``, ``preregistered`` and
    ``preregistered_se``."""
    from .contrasts import fit_mixedlm, fit_paired_mixedlm

    rng = np.random.default_rng(seed)
    keys = ("paired", "paired_se", "estimate", "doc_var", "resid_var") + (
        ("preregistered", "preregistered_se") if preregistered else ())
    got: dict[str, list[float]] = {k: [] for k in keys}
    for _ in range(n_sims):
        scores, queries = simulate_scores(n_docs, n_queries, {"A": effect, "B": 0.0}, seed=int(rng.integers(2**31)),
                                          doc_sd=doc_sd, query_sd=query_sd, doc_condition_sd=doc_condition_sd,
                                          noise_sd=noise_sd)
        values = scores["value"].to_numpy().reshape(n_queries, 2)  # one row per query: A, B (simulate_scores' order)
        docs = queries["doc_id"].to_numpy()
        p = fit_paired_mixedlm(values[:, 0] - values[:, 1], docs, alpha=alpha)
        got["paired"].append(p["ci_low"] <= effect <= p["ci_high"])
        got["paired_se"].append(p["se"])
        got["estimate"].append(p["coef"])
        got["doc_var"].append(p["doc_var"])
        got["resid_var"].append(p["resid_var"])
        if preregistered:
            m = fit_mixedlm(values.T.ravel(), np.repeat([1.0, 0.0], n_queries), np.r_[docs, docs], alpha=alpha)
            got["preregistered"].append(m["ci_low"] <= effect <= m["ci_high"])
            got["preregistered_se"].append(m["se"])
    out = {k: float(np.mean(v)) for k, v in got.items() if k != "estimate"}
    out.update(sd_estimate=float(np.std(got["estimate"], ddof=1)), true_doc_var=2 * doc_condition_sd ** 2,
               true_resid_var=2 * noise_sd ** 2, studies=float(n_sims),
               mc_se=float(np.sqrt(alpha * (1 - alpha) / n_sims)))
    return out
