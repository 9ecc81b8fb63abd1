"""The pre-registered contrasts of stage 07 (paper §4 and the statistics appendix): the confirmatory family in the
primary cell and the same contrasts, exploratory, in every other cell; the user's own family
(``contrasts.extra``); the pre-registered secondary MixedLM, and beside it the correctly specified one on the paired
differences. Vocabulary: :mod:`chunkstudy.stats`."""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any, Mapping, cast

import numpy as np
import pandas as pd

from .. import design, stages
from ..metrics.paired import pair, prepare_scores, wide_scores
from ..params import StatsParams
from ..significance import BootstrapTest, Tested, holm
from . import verdicts
from .effects import cohens_dz

CONFIRMATORY = "confirmatory"
EXPLORATORY = "exploratory"
#: The label of a user contrast (``contrasts.extra``): its own exploratory family, never the confirmatory one.
USER_ADDED = "exploratory (user-added)"

MIXEDLM_NOTE = (
    "secondary, misspecified by design: random intercept per document but no per-query random effect although "
    "treatment varies within query, so query-to-query variance inflates the SE and the model is conservative for "
    "small paired effects; the clustered bootstrap is primary"
)
PAIRED_MIXEDLM_NOTE = (
    "secondary, correctly specified: the paired per-query differences A - B (each query's own effect cancels in "
    "the difference) with a random intercept per document (the document's own effect of the contrast); REML, Wald "
    "CI; its estimate weights each document by its precision (GLS), so it is not mean_delta, the mean over "
    "queries; the clustered bootstrap is primary"
)


def contrast_spec(stats_params: StatsParams) -> dict[str, tuple[str, str]]:
    raw = stats_params.contrasts
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError(f"stats.contrasts: expected a mapping name -> [condition_a, condition_b], got {raw!r}")
    out = {}
    for name, ab in raw.items():
        if not isinstance(ab, (list, tuple)) or len(ab) != 2 or not all(isinstance(c, str) for c in ab):
            raise ValueError(f"stats.contrasts.{name}: expected [condition_a, condition_b], got {ab!r}")
        out[str(name)] = (ab[0], ab[1])
    return out


def cells_in(wide: pd.DataFrame, primary: tuple[str, str, str]) -> list[tuple[str, str, str]]:
    keys = wide.index.droplevel("query_id").unique()
    cells = cast("list[tuple[str, str, str]]", sorted({tuple(map(str, k)) for k in keys}))
    return sorted(cells, key=lambda c: (c != primary, c))


def contrast_row(both: pd.DataFrame | None, note: str, a: str, b: str, test: BootstrapTest) -> tuple[dict, Tested]:
    """One contrast ``a − b`` over the paired queries ``both`` (None: none, ``note`` says why): the row's
    statistics — ``mean_delta`` (the mean paired delta), the test's CI, p, ``inference`` and note
    (:meth:`~chunkstudy.significance.BootstrapTest.test`), ``dz``, sizes and the two means — and what the test
    saw, for the family's decision (:meth:`~chunkstudy.significance.BootstrapTest.decide`)."""
    nan = float("nan")
    if both is None:
        return (dict(mean_delta=nan, ci_low=nan, ci_high=nan, p=nan, dz=nan, n_queries=0, n_docs=0, mean_a=nan,
                     mean_b=nan, inference=False, note=note), Tested.untested(note))
    delta = both[a].to_numpy() - both[b].to_numpy()
    t = test.test(delta, both["doc_id"].to_numpy())
    row: dict[str, Any] = dict(mean_delta=float(delta.mean()), ci_low=t.ci_low, ci_high=t.ci_high, p=t.p,
                               dz=cohens_dz(delta), n_queries=t.n, n_docs=t.n_clusters, mean_a=float(both[a].mean()),
                               mean_b=float(both[b].mean()), inference=t.inference,
                               note="; ".join(x for x in (note, t.note) if x))
    return row, t


# ---------------------------------------------------------------------------------------------------------------
# Confirmatory family + the same contrasts in every other cell
# ---------------------------------------------------------------------------------------------------------------

CONTRAST_COLUMNS = stages.columns("contrasts")


def contrasts_table(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: StatsParams, primary: design.PrimaryCell,
                    corpus: str) -> pd.DataFrame:
    """The contrasts of ``stats.contrasts`` in every cell of ``corpus`` present in ``scores`` (paper §4 and the
    statistics appendix; the primary cell's rows are Table 1).

    Per cell and contrast ``A − B``: ``mean_delta`` = unweighted mean of the paired per-query deltas; ``ci_low``/
    ``ci_high`` = the ``(1−alpha)`` percentile CI and ``p`` = the two-sided p of a document-clustered bootstrap
    (:class:`chunkstudy.significance.BootstrapTest`, ``stats.n_boot`` resamples, ``stats.seed``); ``p_holm`` =
    Holm-adjusted within the cell's family (family = all contrasts of ``stats.contrasts``); ``inference`` = the
    bootstrap supports inference (at least ``stats.min_docs`` documents and
    :data:`~chunkstudy.significance.MIN_BOOT` resamples; when not, ``note`` says why and 08 prints no CI, p or
    star); ``reject_holm`` = the test's decision (``p_holm < alpha`` and ``inference``, its :data:`HOLM` verdict;
    08 prints it and decides nothing); ``dz`` = Cohen's dz (:func:`cohens_dz`); ``mean_a``/``mean_b`` = the two
    conditions' means
    over the paired queries. ``confirmatory`` is True only in the primary cell; ``label`` says "confirmatory" or
    "exploratory". A contrast whose conditions are missing from a cell gets NaN statistics and a ``note``. Every
    cell's family also carries the calibrated test beside the percentile bootstrap and the test that decides under
    ``stats.decision`` (:class:`chunkstudy.stats.verdict.calibrated.CalibratedVerdict`: ``p_cal``, ``p_holm_cal``,
    ``ci_low_cal``, ``ci_high_cal``, ``reject_holm_cal``, ``decided_by``, ``significant``). With a further
    registered verdict beside Holm's declared (:data:`chunkstudy.stats.verdicts.VERDICTS`: the TOST of
    :class:`chunkstudy.stats.verdict.tost.TostVerdict` when a bound is declared, ``stats.sesoi`` for the primary
    metric, ``stats.sesoi_by_metric`` for others) the test also carries that verdict, from the same draws and
    decided within the cell's family, with its columns after these (TOST's blank in a cell whose metric has no
    bound, with a ``note`` saying so).
    """
    contrasts = contrast_spec(stats_params)
    base = BootstrapTest.of(stats_params)
    wide = wide_scores(prepare_scores(scores, queries, corpus))
    rows = []
    for metric, embedder, reranker in cells_in(wide, primary):
        block = wide.xs((metric, embedder, reranker), level=["metric", "embedder", "reranker"])
        beside, cell_note = verdicts.for_cell(stats_params, metric)
        test = replace(base, verdicts=(*base.verdicts, *beside))
        cell_rows, family = [], []
        for name, (a, b) in contrasts.items():
            both, note = pair(block, a, b)
            stats_row, tested = contrast_row(both, note, a, b, test)
            confirmatory = (metric, embedder, reranker) == primary
            cell_rows.append(dict(corpus=corpus, cell=design.cell_name(metric, embedder, reranker), metric=metric,
                                  embedder=embedder, reranker=reranker, contrast=name, condition_a=a,
                                  condition_b=b, **stats_row, confirmatory=confirmatory,
                                  label=CONFIRMATORY if confirmatory else EXPLORATORY, n_boot=test.n_boot,
                                  seed=test.seed))
            family.append(tested)
        for r, verdict in zip(cell_rows, test.decide(family)):
            r.update(verdict)
            r["note"] = "; ".join(x for x in (r["note"], cell_note) if x)
        rows.extend(cell_rows)
    return pd.DataFrame(rows, columns=table_columns(stats_params))


def table_columns(stats_params: Any) -> list[str]:
    """The columns of 07's contrast tables under the ``stats`` record: the declared ones (:data:`CONTRAST_COLUMNS`)
    but the registered verdicts', then the columns of each verdict the run declares
    (:func:`chunkstudy.stats.verdicts.declared`), in registered order."""
    own = set(verdicts.columns())
    return ([c for c in CONTRAST_COLUMNS if c not in own]
            + [c for v in verdicts.declared(stats_params) for c in v.columns])


def user_family(stats_params: StatsParams, user_contrasts: Mapping[str, Any], decision: str | None = None) -> Any:
    """The ``stats`` record with ``contrasts`` replaced by the user's (``contrasts.extra``) and, when given, its
    ``decision`` by the user family's (``contrasts.decision``): every function that tests or simulates "the family"
    (:func:`contrasts_table`, :func:`chunkstudy.stats.power.power_table`) then works on the user's family alone, with
    its own Holm correction and rule, and never touches the confirmatory four."""
    out = replace(stats_params, contrasts=dict(user_contrasts))
    return out if decision is None else replace(out, decision=cast(Any, decision))


def user_contrasts_table(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: Any, primary: design.PrimaryCell,
                         corpus: str, user_contrasts: Mapping[str, Any], decision: str | None = None) -> pd.DataFrame:
    """The user's contrasts (``contrasts.extra``) in every cell, as :func:`contrasts_table` computes the paper's:
    the same bootstrap, seed and dz, but Holm-adjusted within the user's family in each cell (a family of its own,
    kept apart from ``stats.contrasts``) and decided under ``decision`` (``contrasts.decision``; None: as
    ``stats.decision``), ``confirmatory`` False everywhere and ``label`` :data:`USER_ADDED`, the primary cell
    included. Empty (with the columns) when there are none."""
    if not user_contrasts:
        return pd.DataFrame(columns=table_columns(stats_params))
    out = contrasts_table(scores, queries, user_family(stats_params, user_contrasts, decision), primary, corpus)
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


def _primary_pairs(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: StatsParams, primary: design.PrimaryCell,
                   corpus: str):
    """Per contrast of ``stats.contrasts`` in the primary cell: ``(name, a, b, paired queries or None, note)``."""
    wide = wide_scores(prepare_scores(scores, queries, corpus))
    try:
        block = wide.xs(tuple(primary), level=["metric", "embedder", "reranker"])
    except KeyError:
        block = None
    for name, (a, b) in contrast_spec(stats_params).items():
        both, note = (None, f"skipped: primary cell {primary.name} absent from scores") if block is None \
            else pair(block, a, b)
        yield name, a, b, both, note


def mixedlm_table(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: StatsParams, primary: design.PrimaryCell,
                  corpus: str) -> pd.DataFrame:
    """The pre-registered secondary check: per contrast of the primary cell, a MixedLM
    ``score ~ condition + (1 | document)`` over the queries scored under both conditions (:func:`fit_mixedlm`;
    paper §4 and the statistics appendix, "mixed-effects regression").

    The paper reports it as misspecified by design (no per-query random effect, so query-to-query variance lands
    in the residual and the SE is inflated): every row carries that note (:data:`MIXEDLM_NOTE`). ``p_holm`` is
    Holm over the family for comparison with the bootstrap table. Empty (with the columns) when
    ``stats.mixedlm`` is false. A model that fails to fit gives a row of NaNs and the error in ``note``.
    The correctly specified model is :func:`paired_mixedlm_table`.
    """
    if not stats_params.mixedlm:
        return pd.DataFrame(columns=MIXEDLM_COLUMNS)
    alpha = float(stats_params.alpha)
    nan = float("nan")
    rows = []
    for name, a, b, both, note in _primary_pairs(scores, queries, stats_params, primary, corpus):
        row: dict[str, Any] = dict(corpus=corpus, cell=primary.name, contrast=name, condition_a=a, condition_b=b,
                   label="secondary (confirmatory family)")
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


PAIRED_MIXEDLM_COLUMNS = stages.columns("mixedlm_paired")


def fit_paired_mixedlm(deltas: np.ndarray, groups: np.ndarray, *, alpha: float) -> dict:
    """Fit the paired per-query differences with a random intercept per group, by REML:

        δ_q = μ + u_d(q) + e_q,   u_d ~ N(0, σ_d²),  e_q ~ N(0, σ²)

    where ``δ_q = score_A(q) − score_B(q)``: a query's own effect (and its document's effect on both conditions)
    cancels in the difference, ``u_d`` is the document's own deviation from the contrast ``μ`` (a random slope of
    the condition per document in the model of the scores) and ``e_q`` the query's. The same fixed effect as the
    scores' model with a random intercept and condition slope per document and a random intercept per query
    nested in it (docs/design.md, "Statistics", measured at QASPER's size).

    The one-way model is fitted in closed form (Harville 1977; the restricted likelihood profiled over ``σ²``):
    with ``λ = σ_d²/σ²``, group sizes ``n_g``, means ``ȳ_g``, weights ``w_g = 1/(1 + λ n_g)``,
    ``μ̂(λ) = Σ w_g n_g ȳ_g / Σ w_g n_g``, ``σ̂²(λ) = [Σ_g Σ_i (δ_gi − ȳ_g)² + Σ_g n_g w_g (ȳ_g − μ̂)²] / (N − 1)`` and
    ``ℓ(λ) = −½[(N − 1) log σ̂² + Σ_g log(1 + λ n_g) + log Σ_g w_g n_g]`` maximised over ``λ ≥ 0`` (bounded
    search on log λ, and λ = 0 itself). ``se = √(σ̂² / Σ w_g n_g)`` (the GLS variance of μ̂, as lme4 and nlme
    report it); the ``(1−alpha)`` CI and p are Wald's (normal), as :func:`fit_mixedlm`'s are. statsmodels'
    ``MixedLM`` is the oracle in the tests (Powell's method: its default optimiser fails on this model in about
    one simulated study in eight). Returns coef (``μ̂``), se, z, p, ci_low, ci_high, ``doc_var`` (``σ̂_d²``),
    ``resid_var`` (``σ̂²``), ``converged`` and ``note`` (the document variance on its boundary 0, where so)."""
    from scipy import stats as sps
    from scipy.optimize import minimize_scalar

    d = np.asarray(deltas, dtype=float)
    _, inv = np.unique(np.asarray(groups), return_inverse=True)
    n = np.bincount(inv).astype(float)
    if d.ndim != 1 or d.size < 3 or not np.isfinite(d).all():
        raise ValueError(f"fit_paired_mixedlm: need at least 3 finite deltas, got {d.size}")
    if n.size < 2:
        raise ValueError("fit_paired_mixedlm: one document: no document variance to estimate")
    ybar = np.bincount(inv, weights=d) / n
    within = float(((d - ybar[inv]) ** 2).sum())
    if within + float(((ybar - ybar.mean()) ** 2).sum()) <= 0:
        raise ValueError("fit_paired_mixedlm: every paired delta is the same: no variance to model")

    def profile(lam: float) -> tuple[float, float, float, float]:
        w = 1.0 / (1.0 + lam * n)
        wn = float((w * n).sum())
        mu = float((w * n * ybar).sum()) / wn
        s2 = (within + float((n * w * (ybar - mu) ** 2).sum())) / (d.size - 1)
        return mu, s2, wn, -0.5 * ((d.size - 1) * np.log(s2) + float(np.log1p(lam * n).sum()) + np.log(wn))

    found = minimize_scalar(lambda t: -profile(float(np.exp(t)))[3], bounds=(-25.0, 12.0), method="bounded",
                            options={"xatol": 1e-9})
    lam = float(np.exp(found.x))
    boundary = profile(0.0)[3] >= profile(lam)[3]
    lam = 0.0 if boundary else lam
    mu, s2, wn, _ = profile(lam)
    se = float(np.sqrt(s2 / wn))
    z = mu / se if se > 0 else float("nan")
    half = float(sps.norm.ppf(1 - alpha / 2)) * se
    return dict(coef=mu, se=se, z=z, p=float(2 * sps.norm.sf(abs(z))), ci_low=mu - half, ci_high=mu + half,
                doc_var=lam * s2, resid_var=s2, converged=bool(found.success) or boundary,
                note="document variance estimated at its boundary 0" if boundary else "")


def paired_mixedlm_table(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: StatsParams,
                         primary: design.PrimaryCell, corpus: str) -> pd.DataFrame:
    """The correctly specified secondary model beside the pre-registered one (:func:`mixedlm_table`): per
    contrast of the primary cell, :func:`fit_paired_mixedlm` of the paired per-query deltas ``A − B`` with a random
    intercept per document. ``p_holm``: Holm over the family. Every row carries :data:`PAIRED_MIXEDLM_NOTE`; a
    model that fails to fit (one document, identical conditions) gives NaNs and the error in ``note``. Empty (with
    the columns) when ``stats.mixedlm`` is false. Columns :data:`PAIRED_MIXEDLM_COLUMNS`."""
    if not stats_params.mixedlm:
        return pd.DataFrame(columns=PAIRED_MIXEDLM_COLUMNS)
    nan = float("nan")
    rows = []
    for name, a, b, both, note in _primary_pairs(scores, queries, stats_params, primary, corpus):
        fit: dict[str, Any] = dict(coef=nan, se=nan, z=nan, p=nan, ci_low=nan, ci_high=nan, doc_var=nan,
                                   resid_var=nan, converged=False, note=note)
        n_q = n_d = 0
        if both is not None:
            n_q, n_d = len(both), int(both["doc_id"].nunique())
            try:
                fit = fit_paired_mixedlm(both[a].to_numpy() - both[b].to_numpy(), both["doc_id"].to_numpy(),
                                         alpha=float(stats_params.alpha))
            except Exception as e:  # a singular design (e.g. identical conditions) must not stop the stage
                fit["note"] = f"fit failed: {type(e).__name__}: {e}"
        rows.append(dict(corpus=corpus, cell=primary.name, contrast=name, condition_a=a, condition_b=b,
                         label="secondary (confirmatory family)", **fit, n_queries=n_q, n_docs=n_d))
        rows[-1]["note"] = "; ".join(x for x in (PAIRED_MIXEDLM_NOTE, rows[-1]["note"]) if x)
    out = pd.DataFrame(rows)
    out["p_holm"] = holm(out["p"].to_numpy(float)) if len(out) else []
    return out[PAIRED_MIXEDLM_COLUMNS]
