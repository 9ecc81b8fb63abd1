"""Statistics (stage 07): the pre-registered contrasts, their document-clustered bootstrap, Holm, Cohen's dz, the
secondary MixedLM, and the exploratory analyses (paper, main text §4 "Statistics" and the statistics appendix;
DESIGN.md, "Statistics").

Vocabulary
----------
* A **cell** is one metric × one embedder × one reranker setting of one corpus; its name is
  ``"<metric>|<embedder>|<reranker>"``, e.g. ``"cov-nDCG@10|strong|none"`` (:func:`cell_name`).
* The **primary cell** is fixed in advance by ``stats.primary_metric`` × ``embed.strong`` × ``stats.primary_reranker``
  (cov-nDCG@10 × strong × none; the functions that need it take ``embed.strong`` as ``strong``). Its four contrasts are the *confirmatory* family; every other number this module
  produces is labelled *exploratory*.
* A **contrast** ``name: [A, B]`` (``stats.contrasts``; C1 = A3−A1, C2 = A3−P, C3 = G3−A3, C4 = A4−A3) is the mean
  of the paired per-query deltas ``δ_q = score_A(q) − score_B(q)`` over the queries scored under both conditions
  (a NaN score counts as "not scored").
* Uncertainty comes from a **document-clustered bootstrap**: documents are resampled with replacement and every
  query of a drawn document enters the replicate as a bundle.

Inputs are the ``scores`` table of 06_metrics (long form: corpus, embedder, reranker, condition, query_id, metric,
value) and the ``queries`` table of 03_queries (query_id → doc_id, qtype). Every function is pure: it never mutates
its inputs and never rounds (only 08_figures rounds). A contrast whose conditions are absent from a cell is not an
error: its row carries NaN statistics and a ``note`` saying why.
"""

from __future__ import annotations


import warnings
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence, cast

import numpy as np
import pandas as pd

from . import config, design, stages
from .params import Params, StatsParams

#: The parameter file's defaults: what :func:`simulate_scores` labels its cells with unless told otherwise.
_DEFAULT = Params()

#: Display order of conditions (the paper's: A0 A1 A2 A3-d1 A3-d2 A3 P A4 G2 G3 G4); others follow alphabetically.
CONDITION_ORDER: tuple[str, ...] = design.CONDITION_NAMES

#: The breadcrumb-depth ladder of the dose-response analysis: (condition, injected heading-path depth), from the
#: declared conditions (:func:`chunkstudy.design.depth_ladder`).
DEPTH_LADDER: tuple[tuple[str, int], ...] = design.depth_ladder()

#: Draw this many bootstrap replicates at a time (bounds memory at ``_BLOCK × n_docs`` int64 indices; the random
#: stream does not depend on it: int64 ``Generator.integers`` draws are sequential).
_BLOCK = 1000

CONFIRMATORY = "confirmatory"
EXPLORATORY = "exploratory"
#: The label of a user contrast (``contrasts.extra``): its own exploratory family, never the confirmatory one.
USER_ADDED = "exploratory (user-added)"

MIXEDLM_NOTE = (
    "secondary, misspecified by design: random intercept per document but no per-query random effect although "
    "treatment varies within query, so query-to-query variance inflates the SE and the model is conservative for "
    "small paired effects; the clustered bootstrap is primary"
)

_SCORE_KEYS = ["embedder", "reranker", "condition", "query_id", "metric"]


# ---------------------------------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------------------------------

def cell_name(metric: str, embedder: str, reranker: str) -> str:
    """The canonical cell name ``"<metric>|<embedder>|<reranker>"``, e.g. ``"cov-nDCG@10|strong|none"``."""
    return f"{metric}|{embedder}|{reranker}"


def holm(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm step-down adjusted p-values (paper, statistics appendix, "Holm"; Holm 1979).

    Sort the ``m`` p-values ascending; the ``i``-th smallest (0-based) becomes ``min(1, max_{j≤i} (m−j)·p_(j))``
    — inflated by ``(m−i)`` under a running maximum so the adjusted values stay monotone, then clipped to 1.
    Returned in the input order. Ties keep their input order (a stable sort), which does not change the values.

    A NaN entry (a contrast that could not be computed) stays NaN in the output but still counts as a member of
    the family, ranked last as if its p were 1: the family size stays as pre-registered, which can only make the
    other adjusted p-values larger (conservative), never smaller.
    """
    p = np.asarray(pvalues, dtype=float)
    if p.ndim != 1:
        raise ValueError(f"holm: expected a 1-d vector of p-values, got shape {p.shape}")
    finite = ~np.isnan(p)
    if np.any((p[finite] < 0) | (p[finite] > 1)):
        raise ValueError(f"holm: p-values must lie in [0, 1]; got {p.tolist()}")
    m = p.size
    ranked = np.where(finite, p, 1.0)
    order = np.argsort(ranked, kind="stable")
    inflated = (m - np.arange(m)) * ranked[order]
    adjusted_sorted = np.minimum(1.0, np.maximum.accumulate(inflated))
    out = np.empty(m)
    out[order] = adjusted_sorted
    out[~finite] = np.nan
    return out


def cohens_dz(deltas: Sequence[float] | np.ndarray) -> float:
    """Cohen's ``dz = mean(δ) / sd(δ)`` over paired per-query deltas, ``sd`` with ddof = 1 (paper, statistics
    appendix, "effect size"). Equivalently ``dz = t / sqrt(n)`` for the paired t statistic.

    NaN when it is undefined: fewer than two deltas, or ``sd = 0`` (e.g. identical conditions, where the mean
    delta is 0 and there is no spread to scale by).
    """
    d = np.asarray(deltas, dtype=float)
    if d.size < 2:
        return float("nan")
    sd = float(np.std(d, ddof=1))
    if sd == 0.0:
        return float("nan")
    return float(np.mean(d)) / sd


def percentile_ci(replicates: np.ndarray, alpha: float) -> tuple[float, float]:
    """The ``(1−alpha)`` percentile interval: the ``100·alpha/2`` and ``100·(1−alpha/2)`` percentiles of the
    bootstrap replicates (numpy's default linear interpolation). alpha = 0.05 gives the 2.5th/97.5th percentiles."""
    if not 0 < alpha < 1:
        raise ValueError(f"percentile_ci: alpha must lie in (0, 1), got {alpha}")
    lo, hi = np.percentile(replicates, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(lo), float(hi)


def mc_p_two_sided(n_le: np.ndarray | int, n_ge: np.ndarray | int, n_boot: int) -> np.ndarray | float:
    """The Monte-Carlo-correct two-sided p from the counts of replicates on each side of 0:

        p = min(1, 2 · (1 + min(#{δ* ≤ 0}, #{δ* ≥ 0})) / (1 + B))

    It doubles the smaller one-sided Monte Carlo p-value, which is counted as the literature does:
    Davison & Hinkley (1997, *Bootstrap Methods and their Application*, §4.2, Monte Carlo tests)
    ``p_mc = (1 + #{t*_r ≥ t}) / (R + 1)``; North, Curtis & Sham (2002, *Am. J. Hum. Genet.* 71:439-441)
    ``p = (r + 1) / (n + 1)`` for ``r`` of ``n`` replicates at least as extreme; Phipson & Smyth (2010,
    "Permutation p-values should never be zero"). The observed sample counts as one of the ``B + 1`` equally
    likely outcomes, so p is never 0: its smallest value is ``2 / (B + 1)`` (the plain share ``#{…}/B`` gives 0
    whenever no replicate crosses 0, whatever ``B``, and a level-alpha test built on it is anti-conservative).
    Elementwise on arrays of counts (the power simulation counts many studies at once)."""
    if int(n_boot) < 1:
        raise ValueError(f"mc_p_two_sided: n_boot must be ≥ 1, got {n_boot}")
    p = np.minimum(1.0, 2.0 * (1.0 + np.minimum(n_le, n_ge)) / (1.0 + int(n_boot)))
    return float(p) if np.ndim(p) == 0 else p


def bootstrap_p(replicates: np.ndarray) -> float:
    """Two-sided bootstrap p-value of the paper's statistics appendix, ``2·min(P[δ* ≤ 0], P[δ* ≥ 0])`` clipped to
    1, counted Monte-Carlo-correctly over the ``B`` replicates (:func:`mc_p_two_sided`):
    ``min(1, 2·(1 + min(#{δ* ≤ 0}, #{δ* ≥ 0})) / (1 + B))``. Never 0; its smallest value is ``2/(B + 1)``."""
    r = np.asarray(replicates, dtype=float)
    if r.size == 0:
        raise ValueError("bootstrap_p: no replicates")
    return float(mc_p_two_sided(int(np.sum(r <= 0.0)), int(np.sum(r >= 0.0)), r.size))


#: The fewest bootstrap resamples with which 07 calls anything significant. Efron & Tibshirani (1993, *An
#: Introduction to the Bootstrap*, §19.3) ask for B ≥ 1,000 for percentile intervals: their 2.5th/97.5th percentiles
#: rest on the ~25 most extreme replicates of each tail. It also leaves the Monte Carlo p room under Holm: its
#: smallest value is 2/(B + 1), so the smallest Holm-adjusted p of a family of four is 8/(B + 1) — 0.008 at
#: B = 1,000, but 0.73 at B = 10 and 4 at B = 1 (where a "CI" is one replicate and may exclude its own Δ). The
#: paper uses 10,000; a run below this floor still writes its numbers, but no row is marked significant and the
#: report prints no CI, p or star for it (:func:`inference_problem`). Not a parameter: it is a property of the
#: method, not a policy to tune.
MIN_BOOT = 1000

#: The note of a contrast whose paired queries all come from one document.
ONE_DOCUMENT_NOTE = "only one document: the clustered bootstrap cannot estimate uncertainty"


def inference_problem(n_docs: int, n_boot: int, min_docs: int) -> str:
    """Why a document-clustered bootstrap over ``n_docs`` documents with ``n_boot`` resamples cannot support
    inference — CIs, p-values, Holm rejections — or ``""`` when it can. Two floors: ``min_docs`` documents
    (``stats.min_docs``, the resampled units: with few clusters the percentile bootstrap understates the spread of
    their mean and rejects a true null far more often than alpha) and :data:`MIN_BOOT` resamples."""
    problems = []
    if n_docs < min_docs:
        problems.append(f"{n_docs} document{'' if n_docs == 1 else 's'}, fewer than stats.min_docs = {min_docs}")
    if n_boot < MIN_BOOT:
        problems.append(f"stats.n_boot = {n_boot}, below the floor of {MIN_BOOT:,} resamples")
    return ("no inference: " + "; ".join(problems)) if problems else ""


@dataclass(frozen=True)
class Bootstrap:
    """A cluster-bootstrap result: the point estimate (the unweighted mean over all observations), the percentile
    CI, the two-sided p, the sizes, and the replicate means themselves (length ``n_boot``)."""

    estimate: float
    ci_low: float
    ci_high: float
    p: float
    n: int
    n_clusters: int
    replicates: np.ndarray


def cluster_sums(values: Sequence[float] | np.ndarray, clusters: Sequence) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-cluster sums and counts of ``values``: ``(labels, sums, counts)`` with ``labels`` sorted."""
    v = np.asarray(values, dtype=float)
    c = np.asarray(clusters)
    if v.ndim != 1 or c.shape != v.shape:
        raise ValueError(f"cluster_sums: values {v.shape} and clusters {c.shape} must be 1-d of equal length")
    labels, inverse = np.unique(c, return_inverse=True)
    sums = np.bincount(inverse, weights=v, minlength=labels.size)
    counts = np.bincount(inverse, minlength=labels.size).astype(float)
    return labels, sums, counts


def cluster_bootstrap(deltas: Sequence[float] | np.ndarray, clusters: Sequence, n_boot: int, seed: int,
                      *, alpha: float) -> Bootstrap:
    """Document-clustered bootstrap of the mean of ``deltas`` (paper, statistics appendix, "cluster bootstrap";
    Cameron, Gelbach & Miller 2008).

    Group the observations by cluster (document) into per-cluster sums ``S_d`` and counts ``n_d``. Each of the
    ``n_boot`` replicates draws ``G`` clusters with replacement (``G`` = number of clusters) and recomputes the mean
    as ``δ̄* = Σ_{d∈draw} S_d / Σ_{d∈draw} n_d``, so every query of a drawn document enters as a bundle.
    Returns the full-sample mean, the ``(1−alpha)`` percentile CI (:func:`percentile_ci`) and the two-sided p
    (:func:`bootstrap_p`).

    Draws: ``numpy.random.default_rng(seed).integers(0, G, size=(n_boot, G))`` (int64, consumed row by row in
    blocks) indexing the clusters in sorted label order. With one observation per cluster and the observations
    given in sorted cluster order this is exactly the ordinary paired bootstrap with the same draws. Two calls with
    the same cluster labels and seed use the same document draws (common random numbers across contrasts).
    """
    if n_boot < 1:
        raise ValueError(f"cluster_bootstrap: n_boot must be ≥ 1, got {n_boot}")
    labels, sums, counts = cluster_sums(deltas, clusters)
    if labels.size == 0:
        raise ValueError("cluster_bootstrap: no observations")
    if np.isnan(sums).any():
        raise ValueError("cluster_bootstrap: deltas contain NaN; drop unpaired queries first")
    g = labels.size
    rng = np.random.default_rng(seed)
    replicates = np.empty(n_boot)
    for start in range(0, n_boot, _BLOCK):
        stop = min(n_boot, start + _BLOCK)
        idx = rng.integers(0, g, size=(stop - start, g))
        replicates[start:stop] = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    estimate = float(sums.sum() / counts.sum())
    lo, hi = percentile_ci(replicates, alpha)
    return Bootstrap(estimate, lo, hi, bootstrap_p(replicates), int(counts.sum()), int(g), replicates)


def cluster_se(values: Sequence[float] | np.ndarray, clusters: Sequence) -> float:
    """Cluster-robust (sandwich, CR1) standard error of a mean:
    ``sqrt(G/(G−1) · Σ_d (S_d − n_d·ȳ)²) / N`` over ``G`` clusters with sums ``S_d``, counts ``n_d``, ``N = Σ n_d``.
    NaN with fewer than two clusters."""
    _, sums, counts = cluster_sums(values, clusters)
    g = sums.size
    if g < 2:
        return float("nan")
    n = counts.sum()
    mean = sums.sum() / n
    return float(np.sqrt(g / (g - 1) * np.sum((sums - counts * mean) ** 2)) / n)


# ---------------------------------------------------------------------------------------------------------------
# Table plumbing
# ---------------------------------------------------------------------------------------------------------------

def _contrast_spec(stats_params: StatsParams) -> dict[str, tuple[str, str]]:
    raw = stats_params.contrasts
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError(f"stats.contrasts: expected a mapping name -> [condition_a, condition_b], got {raw!r}")
    out = {}
    for name, pair in raw.items():
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not all(isinstance(c, str) for c in pair):
            raise ValueError(f"stats.contrasts.{name}: expected [condition_a, condition_b], got {pair!r}")
        out[str(name)] = (pair[0], pair[1])
    return out


def _primary(stats_params: StatsParams, strong: str) -> tuple[str, str, str]:
    """The primary cell: ``stats.primary_metric`` × ``embed.strong`` (``strong``) × ``stats.primary_reranker``."""
    return stats_params.primary_metric, strong, stats_params.primary_reranker


def prepare_scores(scores: pd.DataFrame, queries: pd.DataFrame, corpus: str) -> pd.DataFrame:
    """The ``scores`` rows of ``corpus`` joined with each query's ``doc_id`` and ``qtype`` from ``queries``.

    Raises ``ValueError`` naming the table when columns are missing, when no row belongs to ``corpus``, when a
    scored query has no row in ``queries``, or when a (embedder, reranker, condition, query_id, metric) key
    appears twice.
    """
    need = ["corpus", *_SCORE_KEYS, "value"]
    stages.check(scores, "scores", need, "stats.prepare_scores")
    stages.check(queries, "queries", ("query_id", "doc_id", "qtype"), "stats.prepare_scores")
    s = scores.loc[scores["corpus"] == corpus, need]
    if s.empty:
        raise ValueError(f"scores: no rows for corpus {corpus!r}; corpora present: "
                         f"{sorted(map(str, scores['corpus'].unique()))}")
    dup = s.duplicated(_SCORE_KEYS)
    if dup.any():
        key = s.loc[dup, _SCORE_KEYS].iloc[0].to_dict()
        raise ValueError(f"scores: corpus {corpus!r} has {int(dup.sum())} duplicated rows, e.g. {key}")
    q = queries[["query_id", "doc_id", "qtype"]].astype({"query_id": str, "doc_id": str})
    qdup = q["query_id"].duplicated()
    if qdup.any():
        raise ValueError(f"queries: query_id {q.loc[qdup, 'query_id'].iloc[0]!r} appears more than once")
    s = s.astype({"query_id": str})
    out = s.merge(q, on="query_id", how="left", validate="many_to_one")
    orphan = out["doc_id"].isna()
    if orphan.any():
        raise ValueError(f"scores: {int(out.loc[orphan, 'query_id'].nunique())} scored queries have no row in "
                         f"queries (03_queries), e.g. query_id {out.loc[orphan, 'query_id'].iloc[0]!r}")
    return out.astype({"value": float})


def _wide(prepared: pd.DataFrame) -> pd.DataFrame:
    """One row per (metric, embedder, reranker, query_id), one column per condition, plus doc_id and qtype."""
    wide = prepared.pivot(index=["metric", "embedder", "reranker", "query_id"], columns="condition", values="value")
    wide.columns = [str(c) for c in wide.columns]
    meta = prepared.drop_duplicates("query_id").set_index("query_id")
    qid = wide.index.get_level_values("query_id")
    return wide.assign(doc_id=qid.map(meta["doc_id"]).to_numpy(), qtype=qid.map(meta["qtype"]).to_numpy())


def _cells(wide: pd.DataFrame, primary: tuple[str, str, str]) -> list[tuple[str, str, str]]:
    keys = wide.index.droplevel("query_id").unique()
    cells = cast("list[tuple[str, str, str]]", sorted({tuple(map(str, k)) for k in keys}))
    return sorted(cells, key=lambda c: (c != primary, c))


def _pair(block: pd.DataFrame, a: str, b: str) -> tuple[pd.DataFrame | None, str]:
    """The paired rows of one cell for conditions a and b (complete cases), or (None, note)."""
    absent = [c for c in (a, b) if c not in block.columns or block[c].isna().all()]
    if absent:
        return None, f"skipped: condition(s) {absent} absent from this cell"
    both = block.loc[block[a].notna() & block[b].notna(), [a, b, "doc_id", "qtype"]]
    if both.empty:
        return None, f"skipped: no query scored under both {a} and {b}"
    return both, ""


def _contrast_row(both: pd.DataFrame | None, note: str, a: str, b: str, n_boot: int, seed: int,
                  alpha: float, min_docs: int) -> dict:
    nan = float("nan")
    if both is None:
        return dict(mean_delta=nan, ci_low=nan, ci_high=nan, p=nan, dz=nan, n_queries=0, n_docs=0, mean_a=nan,
                    mean_b=nan, inference=False, note=note)
    delta = both[a].to_numpy() - both[b].to_numpy()
    clusters = both["doc_id"].to_numpy()
    boot = cluster_bootstrap(delta, clusters, n_boot, seed, alpha=alpha)
    row: dict[str, Any] = dict(mean_delta=float(delta.mean()), ci_low=boot.ci_low, ci_high=boot.ci_high, p=boot.p,
               dz=cohens_dz(delta), n_queries=boot.n, n_docs=boot.n_clusters, mean_a=float(both[a].mean()),
               mean_b=float(both[b].mean()), note=note)
    if boot.n_clusters < 2:
        row.update(ci_low=nan, ci_high=nan, p=nan, note=ONE_DOCUMENT_NOTE)
    problem = inference_problem(boot.n_clusters, n_boot, min_docs)
    row["inference"] = not problem
    row["note"] = "; ".join(x for x in (row["note"], problem) if x)
    return row


def paired_deltas(scores: pd.DataFrame, queries: pd.DataFrame, condition_a: str, condition_b: str, *, corpus: str,
                  metric: str, embedder: str, reranker: str) -> pd.DataFrame:
    """Per-query paired deltas ``δ_q = score_A(q) − score_B(q)`` in one cell, over the queries scored (non-NaN)
    under both conditions. Columns: query_id, doc_id, qtype, value_a, value_b, delta; sorted by query_id.
    Empty (with those columns) when either condition is absent."""
    wide = _wide(prepare_scores(scores, queries, corpus))
    cols = ["query_id", "doc_id", "qtype", "value_a", "value_b", "delta"]
    key = (metric, embedder, reranker)
    try:
        block = wide.xs(key, level=["metric", "embedder", "reranker"])
    except KeyError:
        return pd.DataFrame(columns=cols)
    both, _ = _pair(block, condition_a, condition_b)
    if both is None:
        return pd.DataFrame(columns=cols)
    out = both.rename(columns={condition_a: "value_a", condition_b: "value_b"}).reset_index()
    out["delta"] = out["value_a"] - out["value_b"]
    return out[cols].sort_values("query_id", kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------------------------------------------------------
# Confirmatory family + the same contrasts in every other cell
# ---------------------------------------------------------------------------------------------------------------

CONTRAST_COLUMNS = stages.columns("contrasts")


def contrasts_table(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: StatsParams, strong: str,
                    corpus: str) -> pd.DataFrame:
    """The contrasts of ``stats.contrasts`` in every cell of ``corpus`` present in ``scores`` (paper §4 and the
    statistics appendix; the primary cell's rows are Table 1).

    Per cell and contrast ``A − B``: ``mean_delta`` = unweighted mean of the paired per-query deltas; ``ci_low``/
    ``ci_high`` = the ``(1−alpha)`` percentile CI and ``p`` = the two-sided p of a document-clustered bootstrap
    (:func:`cluster_bootstrap`, ``stats.n_boot`` resamples, ``stats.seed``); ``p_holm`` = Holm-adjusted within the
    cell's family (:func:`holm`, family = all contrasts of ``stats.contrasts``); ``inference`` = the bootstrap
    supports inference (:func:`inference_problem`: at least ``stats.min_docs`` documents and :data:`MIN_BOOT`
    resamples; when not, ``note`` says why and 08 prints no CI, p or star); ``reject_holm`` = ``p_holm < alpha``
    and ``inference``; ``dz`` = Cohen's dz (:func:`cohens_dz`); ``mean_a``/``mean_b`` = the two conditions' means
    over the paired queries. ``confirmatory`` is True only in the primary cell; ``label`` says "confirmatory" or
    "exploratory". A contrast whose conditions are missing from a cell gets NaN statistics and a ``note``.
    """
    contrasts = _contrast_spec(stats_params)
    primary = _primary(stats_params, strong)
    n_boot, seed, alpha = int(stats_params.n_boot), int(stats_params.seed), float(stats_params.alpha)
    min_docs = int(stats_params.min_docs)
    wide = _wide(prepare_scores(scores, queries, corpus))
    rows = []
    for metric, embedder, reranker in _cells(wide, primary):
        block = wide.xs((metric, embedder, reranker), level=["metric", "embedder", "reranker"])
        cell_rows = []
        for name, (a, b) in contrasts.items():
            both, note = _pair(block, a, b)
            stats_row = _contrast_row(both, note, a, b, n_boot, seed, alpha, min_docs)
            confirmatory = (metric, embedder, reranker) == primary
            cell_rows.append(dict(corpus=corpus, cell=cell_name(metric, embedder, reranker), metric=metric,
                                  embedder=embedder, reranker=reranker, contrast=name, condition_a=a,
                                  condition_b=b, **stats_row, confirmatory=confirmatory,
                                  label=CONFIRMATORY if confirmatory else EXPLORATORY, n_boot=n_boot, seed=seed))
        p_holm = holm([r["p"] for r in cell_rows])
        for r, ph in zip(cell_rows, p_holm):
            r["p_holm"] = float(ph)
            r["reject_holm"] = bool(ph < alpha) and r["inference"] if not np.isnan(ph) else False
        rows.extend(cell_rows)
    return pd.DataFrame(rows, columns=CONTRAST_COLUMNS)


def user_family(stats_params: StatsParams, user_contrasts: Mapping[str, Any]) -> Any:
    """The ``stats`` record with ``contrasts`` replaced by the user's (``contrasts.extra``): every function that
    tests or simulates "the family" (:func:`contrasts_table`, :func:`chunkstudy.power.power_table`) then works on
    the user's family alone, with its own Holm correction, and never touches the confirmatory four."""
    return replace(stats_params, contrasts=dict(user_contrasts))


def user_contrasts_table(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: Any, strong: str, corpus: str,
                         user_contrasts: Mapping[str, Any]) -> pd.DataFrame:
    """The user's contrasts (``contrasts.extra``) in every cell, as :func:`contrasts_table` computes the paper's:
    the same bootstrap, seed and dz, but Holm-adjusted within the user's family in each cell (a family of its own,
    kept apart from ``stats.contrasts``), ``confirmatory`` False everywhere and ``label`` :data:`USER_ADDED`, the
    primary cell included. Empty (with the columns) when there are none."""
    if not user_contrasts:
        return pd.DataFrame(columns=CONTRAST_COLUMNS)
    out = contrasts_table(scores, queries, user_family(stats_params, user_contrasts), strong, corpus)
    return out.assign(confirmatory=False, label=USER_ADDED)


# ---------------------------------------------------------------------------------------------------------------
# Secondary: MixedLM
# ---------------------------------------------------------------------------------------------------------------

MIXEDLM_COLUMNS = stages.columns("mixedlm")


def fit_mixedlm(values: np.ndarray, treated: np.ndarray, groups: np.ndarray, *, alpha: float) -> dict:
    """Fit ``value ~ treated`` with a random intercept per group (statsmodels ``MixedLM``, REML).

    ``treated`` is 1 for condition A and 0 for condition B, so the fixed-effect coefficient is the A − B
    difference — the same model as ``score ~ C(condition)`` with B as the reference level. Returns coef, se,
    z = coef/se, p (Wald, normal), the ``(1−alpha)`` Wald CI, the random-intercept and residual variances,
    ``converged`` and any warnings statsmodels raised (as ``note``).
    """
    import statsmodels.formula.api as smf

    data = pd.DataFrame({"value": np.asarray(values, float), "treated": np.asarray(treated, float),
                         "doc_id": np.asarray(groups)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = smf.mixedlm("value ~ treated", data, groups=data["doc_id"]).fit(reml=True)
    coef = float(result.fe_params["treated"])
    se = float(result.bse_fe["treated"])
    lo, hi = result.conf_int(alpha=alpha).loc["treated"]
    msgs = sorted({f"{type(w.message).__name__}: {w.message}".split("\n")[0] for w in caught})
    return dict(coef=coef, se=se, z=coef / se if se > 0 else float("nan"), p=float(result.pvalues["treated"]),
                ci_low=float(lo), ci_high=float(hi), group_var=float(result.cov_re.iloc[0, 0]),
                resid_var=float(result.scale), converged=bool(result.converged), note="; ".join(msgs))


def mixedlm_table(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: StatsParams, strong: str,
                  corpus: str) -> pd.DataFrame:
    """The pre-registered secondary check: per contrast of the primary cell, a MixedLM
    ``score ~ condition + (1 | document)`` over the queries scored under both conditions (:func:`fit_mixedlm`;
    paper §4 and the statistics appendix, "mixed-effects regression").

    The paper reports it as misspecified by design (no per-query random effect, so query-to-query variance lands
    in the residual and the SE is inflated): every row carries that note (:data:`MIXEDLM_NOTE`). ``p_holm`` is
    Holm over the family for comparison with the bootstrap table. Empty (with the columns) when
    ``stats.mixedlm`` is false. A model that fails to fit gives a row of NaNs and the error in ``note``.
    """
    if not stats_params.mixedlm:
        return pd.DataFrame(columns=MIXEDLM_COLUMNS)
    contrasts = _contrast_spec(stats_params)
    primary = _primary(stats_params, strong)
    alpha = float(stats_params.alpha)
    wide = _wide(prepare_scores(scores, queries, corpus))
    nan = float("nan")
    try:
        block = wide.xs(primary, level=["metric", "embedder", "reranker"])
    except KeyError:
        block = None
    rows = []
    for name, (a, b) in contrasts.items():
        row: dict[str, Any] = dict(corpus=corpus, cell=cell_name(*primary), contrast=name, condition_a=a, condition_b=b,
                   label="secondary (confirmatory family)")
        both, note = (None, f"skipped: primary cell {cell_name(*primary)} absent from scores") if block is None \
            else _pair(block, a, b)
        fit: dict[str, Any]
        fit = dict(coef=nan, se=nan, z=nan, p=nan, ci_low=nan, ci_high=nan, group_var=nan, resid_var=nan,
                   converged=False, note=note)
        n_q = n_d = 0
        if both is not None:
            n_q, n_d = len(both), int(both["doc_id"].nunique())
            values = np.concatenate([both[a].to_numpy(), both[b].to_numpy()])
            treated = np.repeat([1.0, 0.0], n_q)
            groups = np.concatenate([both["doc_id"].to_numpy(), both["doc_id"].to_numpy()])
            try:
                fit = fit_mixedlm(values, treated, groups, alpha=alpha)
            except Exception as e:  # a singular design (e.g. identical conditions) must not stop the stage
                fit["note"] = f"fit failed: {type(e).__name__}: {e}"
        row.update(fit, n_obs=2 * n_q, n_queries=n_q, n_docs=n_d)
        row["note"] = "; ".join(x for x in (MIXEDLM_NOTE, row["note"]) if x)
        rows.append(row)
    out = pd.DataFrame(rows, columns=[c for c in MIXEDLM_COLUMNS if c != "p_holm"])
    out.insert(out.columns.get_loc("p") + 1, "p_holm", holm(out["p"].to_numpy(float)))
    return out[MIXEDLM_COLUMNS]


# ---------------------------------------------------------------------------------------------------------------
# Exploratory analyses
# ---------------------------------------------------------------------------------------------------------------

DOSE_COLUMNS = stages.columns("dose_response")


def per_query_slopes(values: np.ndarray, depths: Sequence[float]) -> np.ndarray:
    """Least-squares slope of each row of ``values`` (queries × levels) on ``depths``:
    ``s_q = Σ_l (x_l − x̄)(y_ql − ȳ_q) / Σ_l (x_l − x̄)²``.

    With every query observed at the same levels, the pooled OLS slope of score on depth equals the mean of these
    per-query slopes, so a clustered bootstrap of ``s_q`` is a clustered bootstrap of the regression slope."""
    x = np.asarray(depths, dtype=float)
    y = np.asarray(values, dtype=float)
    xc = x - x.mean()
    denom = float(np.sum(xc ** 2))
    if y.ndim != 2 or y.shape[1] != x.size or denom == 0:
        raise ValueError(f"per_query_slopes: need a (queries × {x.size}) array and ≥2 distinct depths")
    return (y - y.mean(axis=1, keepdims=True)) @ xc / denom


def dose_response(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: StatsParams, strong: str,
                  corpus: str) -> pd.DataFrame:
    """Exploratory breadcrumb-depth dose-response (paper §6, "Breadcrumb depth dose-response"): per embedder ×
    reranker, the OLS slope of the primary metric (cov-nDCG@10) on injected heading-path depth 0..3
    (:data:`DEPTH_LADDER`: A2 → A3-d1 → A3-d2 → A3), in metric units per level, over the queries scored at every
    available level; CI and two-sided p from the document-clustered bootstrap of the per-query slopes
    (:func:`per_query_slopes`, :func:`cluster_bootstrap`). ``mean_d0..mean_d3`` are the per-level means over the
    same queries. A missing level is dropped (noted); fewer than two levels skip the cell (noted)."""
    metric = _primary(stats_params, strong)[0]
    n_boot, seed, alpha = int(stats_params.n_boot), int(stats_params.seed), float(stats_params.alpha)
    min_docs = int(stats_params.min_docs)
    wide = _wide(prepare_scores(scores, queries, corpus))
    nan = float("nan")
    rows = []
    for m, embedder, reranker in _cells(wide, _primary(stats_params, strong)):
        if m != metric:
            continue
        block = wide.xs((m, embedder, reranker), level=["metric", "embedder", "reranker"])
        present = [(c, d) for c, d in DEPTH_LADDER if c in block.columns and block[c].notna().any()]
        absent = [c for c, _ in DEPTH_LADDER if c not in dict(present)]
        row: dict[str, Any] = dict(corpus=corpus, cell=cell_name(m, embedder, reranker), metric=m, embedder=embedder,
                   reranker=reranker, slope=nan, ci_low=nan, ci_high=nan, p=nan, n_queries=0, n_docs=0,
                   levels=",".join(c for c, _ in present), **{f"mean_d{d}": nan for _, d in DEPTH_LADDER},
                   inference=False, label=EXPLORATORY, note=f"levels absent: {absent}" if absent else "")
        if len(present) < 2:
            row["note"] = f"skipped: fewer than two depth levels present (absent: {absent})"
            rows.append(row)
            continue
        conds = [c for c, _ in present]
        complete = block.dropna(subset=conds)
        if complete.empty:
            row["note"] = "skipped: no query scored at every present depth level"
            rows.append(row)
            continue
        slopes = per_query_slopes(complete[conds].to_numpy(), [d for _, d in present])
        boot = cluster_bootstrap(slopes, complete["doc_id"].to_numpy(), n_boot, seed, alpha=alpha)
        row.update(slope=boot.estimate, ci_low=boot.ci_low, ci_high=boot.ci_high, p=boot.p, n_queries=boot.n,
                   n_docs=boot.n_clusters)
        if boot.n_clusters < 2:
            row.update(ci_low=nan, ci_high=nan, p=nan)
        problem = inference_problem(boot.n_clusters, n_boot, min_docs)
        row["inference"] = not problem
        row["note"] = "; ".join(x for x in (row["note"], ONE_DOCUMENT_NOTE if boot.n_clusters < 2 else "", problem)
                                if x)
        for c, d in present:
            row[f"mean_d{d}"] = float(complete[c].mean())
        rows.append(row)
    return pd.DataFrame(rows, columns=DOSE_COLUMNS)


PER_TYPE_COLUMNS = stages.columns("per_type")


def per_type(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: StatsParams, strong: str,
             corpus: str) -> pd.DataFrame:
    """Exploratory per-query-type cuts (paper §6, "Per-query-type cuts"): every contrast within each ``qtype`` of
    the queries table, in every cell of the primary metric (all embedders × rerankers). Statistics as in
    :func:`contrasts_table` but unadjusted (no Holm: these cuts are hypothesis-generating only)."""
    contrasts = _contrast_spec(stats_params)
    primary = _primary(stats_params, strong)
    n_boot, seed, alpha = int(stats_params.n_boot), int(stats_params.seed), float(stats_params.alpha)
    min_docs = int(stats_params.min_docs)
    wide = _wide(prepare_scores(scores, queries, corpus))
    wide = wide.assign(qtype=wide["qtype"].astype(object).where(wide["qtype"].notna(), "(none)").astype(str))
    rows = []
    for metric, embedder, reranker in _cells(wide, primary):
        if metric != primary[0]:
            continue
        block = wide.xs((metric, embedder, reranker), level=["metric", "embedder", "reranker"])
        for name, (a, b) in contrasts.items():
            both, note = _pair(block, a, b)
            groups = [(t, g) for t, g in both.groupby("qtype", sort=True)] if both is not None else [("(all)", None)]
            for qtype, g in groups:
                rows.append(dict(corpus=corpus, cell=cell_name(metric, embedder, reranker), metric=metric,
                                 embedder=embedder, reranker=reranker, contrast=name, condition_a=a, condition_b=b,
                                 qtype=qtype, **_contrast_row(g, note, a, b, n_boot, seed, alpha, min_docs),
                                 label=EXPLORATORY))
    return pd.DataFrame(rows, columns=PER_TYPE_COLUMNS)


MEANS_COLUMNS = stages.columns("condition_means")


def condition_means(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: StatsParams, strong: str,
                    corpus: str) -> pd.DataFrame:
    """Exploratory per-condition means for every metric × embedder × reranker (paper Table 2 and §6, including
    recall@50 per condition): ``mean`` and ``sd`` (ddof = 1) over the queries scored (non-NaN) under that
    condition, ``se_cluster`` = the cluster-robust SE of the mean over documents (:func:`cluster_se`), the query and
    document counts. Unpaired: each condition uses all of its own scored queries. ``primary_cell`` marks the rows
    of the primary cell (Table 2); every row is labelled exploratory, as in the paper."""
    primary = _primary(stats_params, strong)
    s = prepare_scores(scores, queries, corpus).dropna(subset=["value"])
    keys = ["metric", "embedder", "reranker", "condition"]
    grouped = s.groupby(keys, sort=True)
    out = grouped["value"].agg(mean="mean", sd=lambda v: float(np.std(v, ddof=1)) if len(v) > 1 else float("nan"),
                               n_queries="size")
    out["n_docs"] = grouped["doc_id"].nunique()
    # CR1 sandwich SE of each mean, vectorised over (group, document) sums
    per_doc = s.groupby([*keys, "doc_id"], sort=True)["value"].agg(["sum", "size"]).reset_index()
    per_doc = per_doc.join(out["mean"], on=keys)
    per_doc["sq"] = (per_doc["sum"] - per_doc["size"] * per_doc["mean"]) ** 2
    acc = per_doc.groupby(keys, sort=True)["sq"].sum()
    g = out["n_docs"].astype(float)
    out["se_cluster"] = np.where(g > 1, np.sqrt(g / (g - 1).where(g > 1) * acc) / out["n_queries"], np.nan)
    out = out.reset_index()
    rank = {c: i for i, c in enumerate(CONDITION_ORDER)}
    out = out.sort_values(["metric", "embedder", "reranker", "condition"], kind="stable",
                          key=lambda col: col.map(lambda c: (rank.get(c, len(rank)), c)) if col.name == "condition"
                          else col).reset_index(drop=True)
    out.insert(0, "corpus", corpus)
    out.insert(1, "cell", [cell_name(m, e, r) for m, e, r in zip(out["metric"], out["embedder"], out["reranker"])])
    out["primary_cell"] = [(m, e, r) == primary for m, e, r in zip(out["metric"], out["embedder"], out["reranker"])]
    out["label"] = EXPLORATORY
    out["n_queries"] = out["n_queries"].astype(int)
    out["n_docs"] = out["n_docs"].astype(int)
    return out[MEANS_COLUMNS]


def metric_rows(table: pd.DataFrame, key: str) -> pd.DataFrame:
    """The rows of a table with a ``metric`` column whose metric belongs to the declared family ``key``
    (:data:`chunkstudy.design.METRICS`), e.g. ``metric_rows(means, "recall")`` -> the ``recall@50`` rows."""
    return table[table["metric"].astype(str).map(lambda n: design.is_metric(n, key))]


def reranker_lift(condition_means: pd.DataFrame, stats_params: StatsParams, strong: str) -> pd.DataFrame:
    """Exploratory reranker lift (paper §6, "Reranking lifts all boats"): per condition and reranker other than
    ``none``, the mean of the primary metric on the primary embedder without a reranker (``none``), with it
    (``reranked``) and ``lift = reranked − none`` — a difference of the :func:`condition_means` rows, not a paired
    test. Rows in reranker, then paper condition order; empty when no reranked cell was scored."""
    stages.check(condition_means, "condition_means", ["metric", "embedder", "reranker", "condition", "mean"],
                 "stats.reranker_lift")
    metric, embedder, _ = _primary(stats_params, strong)
    s = condition_means[(condition_means["metric"] == metric) & (condition_means["embedder"] == embedder)]
    base = s[s["reranker"] == "none"].set_index("condition")["mean"]
    rer = s[s["reranker"] != "none"]
    cols = stages.columns("reranker_lift")
    if rer.empty or base.empty:
        return pd.DataFrame(columns=cols)
    out = pd.DataFrame({"metric": metric, "embedder": embedder, "reranker": rer["reranker"].to_numpy(),
                        "condition": rer["condition"].to_numpy(), "reranked": rer["mean"].astype(float).to_numpy()})
    out["none"] = out["condition"].map(base).astype(float)
    out["lift"] = out["reranked"] - out["none"]
    out = out.sort_values(["reranker", "condition"], kind="stable",
                          key=lambda c: c.map(design.condition_order_key) if c.name == "condition" else c)
    return out[cols].reset_index(drop=True)


# ---------------------------------------------------------------------------------------------------------------
# Simulation (tests, benchmark, and checking the machinery before real runs exist)
# ---------------------------------------------------------------------------------------------------------------

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
