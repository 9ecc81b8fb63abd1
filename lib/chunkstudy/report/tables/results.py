"""Builders of the study's result tables: the paper's Tables 1, 2 and 4, the exploratory tables behind the
figures and the power analysis. Each is pure: 07's (or 04's) tables in, a :class:`Table` out."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ... import design, stages
from .common import (CONTRAST_QUESTIONS, NO_INFERENCE, PLACEBO_MARK, USER_MARK, USER_NOTE, _order,
                     _require, gated, is_user_condition,
                     inference_mask, paper_source_label, row_notes)
from .formatting import DASH, _missing, fmt_ci, fmt_delta, fmt_int, fmt_n, fmt_needed, fmt_num, fmt_p, fmt_pct
from . import formatting
from .record import Table
from ...stats import verdicts
from ...stats.contrasts import USER_ADDED as USER_ADDED_LABEL


# ---------------------------------------------------------------------------------------------------------------
# Table 1, Table 2, Table 4
# ---------------------------------------------------------------------------------------------------------------


def table1(contrasts: pd.DataFrame, mixedlm: pd.DataFrame | None = None,
           marks: Mapping[str, str] | None = None, paired: pd.DataFrame | None = None,
           size_check: pd.DataFrame | None = None) -> Table:
    """Table 1 — the confirmatory family: the primary cell's contrasts (rows with ``confirmatory`` true in the
    07_stats ``contrasts`` table), one row per contrast in the table's order, with Δ (mean paired delta A − B),
    the 95% cluster-bootstrap CI, two-sided p, Holm p, Cohen's dz, queries / documents, and the secondary
    MixedLM coefficient and p for the same contrast (joined on ``contrast``) when ``mixedlm`` is given.

    A row whose bootstrap cannot support inference (07's ``inference`` false: fewer than ``stats.min_docs``
    documents or ``stats.n_boot`` below :data:`chunkstudy.stats.MIN_BOOT`) prints :data:`NO_INFERENCE` for its
    CI, p-values and MixedLM p, and no star; 07's note saying why (and any other row note, such as the
    one-document note) is among the table's notes. ``marks`` (contrast -> why, :func:`placebo_marks`) marks
    contrasts whose placebo is not clean with :data:`PLACEBO_MARK`. ``paired`` (07's ``mixedlm_paired``): the
    correctly specified secondary model, one note (:func:`paired_mixedlm_note`). The calibrated test's CI and Holm p
    and the test that decided are the registered verdict's columns
    (:class:`chunkstudy.stats.verdict.calibrated.CalibratedVerdict`); the star sits on the Holm p of the test that
    decided (:func:`percentile_stars`). ``size_check`` (07's): the measured size of the tests at this run's
    structure, one note (:func:`size_check_note`)."""
    _require(contrasts, ["contrast", "mean_delta", "ci_low", "ci_high", "p", "p_holm", "reject_holm", "dz", "n_queries",
                         "n_docs"], "contrasts")
    marks = dict(marks or {})
    rows = contrasts[contrasts["confirmatory"].astype(bool)] if "confirmatory" in contrasts else contrasts
    if rows.empty:
        raise ValueError("contrasts: no confirmatory rows (primary cell absent from the scores?); written by 07_stats")
    d = rows.reset_index(drop=True).copy()
    for c in ("condition_a", "condition_b"):
        if c not in d:
            d[c] = ""
    ok = inference_mask(d)
    d["question"] = [CONTRAST_QUESTIONS.get((a, b), "") for a, b in zip(d["condition_a"], d["condition_b"])]
    if mixedlm is not None and len(mixedlm):
        m = mixedlm.set_index("contrast")
        d["mixedlm_coef"] = d["contrast"].map(m["coef"]).astype(float)
        d["mixedlm_p"] = d["contrast"].map(m["p"]).astype(float)
        d["mixedlm_p_holm"] = d["contrast"].map(m["p_holm"]).astype(float) if "p_holm" in m else np.nan
    else:
        d["mixedlm_coef"] = d["mixedlm_p"] = d["mixedlm_p_holm"] = np.nan
    cols = ["contrast", "condition_a", "condition_b", "question", "mean_delta", "ci_low", "ci_high", "p", "p_holm",
            "reject_holm", "dz", "n_queries", "n_docs", "mixedlm_coef", "mixedlm_p", "mixedlm_p_holm"]
    extra = [c for c in ("n_boot", "cell", "inference", "note", *verdicts.columns()) if c in d]
    data = d[cols + extra]
    n_boot = d["n_boot"] if "n_boot" in d else pd.Series([None] * len(d))

    display = pd.DataFrame({
        "Contrast": [c + (f" {PLACEBO_MARK}" if c in marks else "") for c in d["contrast"].astype(str)],
        "A \u2212 B": [f"{a} \u2212 {b}" for a, b in zip(d["condition_a"], d["condition_b"])],
        "Question": d["question"],
        "\u0394": d["mean_delta"].map(fmt_delta),
        "95% CI": gated([fmt_ci(lo, hi) for lo, hi in zip(d["ci_low"], d["ci_high"])], ok),
        "p": gated([fmt_p(p, b) for p, b in zip(d["p"], n_boot)], ok),
        "Holm p": gated([fmt_p(p, b) + (" *" if r else "") for p, b, r in zip(d["p_holm"], n_boot,
                                                                              percentile_stars(d))], ok),
        "dz": d["dz"].map(lambda x: fmt_num(x, 2)),
        "n (q / docs)": [fmt_n(q, n) for q, n in zip(d["n_queries"], d["n_docs"])],
        "MixedLM coef": d["mixedlm_coef"].map(fmt_delta),
        "MixedLM p": gated(d["mixedlm_p"].map(fmt_p), ok),
    })
    verdict_cells(display, d, ok)  # a verdict beside Holm's decision (TOST: stats.sesoi declared)
    cell = str(d["cell"].iat[0]) if "cell" in d else "primary cell"
    b = d["n_boot"].iat[0] if "n_boot" in d else None
    notes: tuple[str, ...]
    notes = (f"Confirmatory family, primary cell {cell}. \u0394 = mean of paired per-query deltas A \u2212 B; "
             f"95% percentile CI and two-sided p from a document-clustered bootstrap"
             f"{f' ({fmt_int(b)} resamples)' if b is not None and not _missing(b) else ''}; "
             "Holm across the four contrasts; * = 07's decision, on the Holm p of the test that decided (Decided "
             "by); dz = mean/sd of the deltas.",
             "MixedLM (score ~ condition + random intercept per document) is the pre-registered secondary check, "
             "misspecified by design (no per-query random effect) and conservative for small paired effects; its "
             "CI's coverage is measured in the calibration table of docs/design.md, not per run.",
             *paired_mixedlm_note(paired, ok, d["contrast"], size_check),
             *size_check_note(size_check, "confirmatory"))
    if not ok.all():
        notes += (f"{NO_INFERENCE} = not enough for inference: no CI, p-value or star is printed for that row "
                  "(see its note below and the warning at the top of the report).",)
    notes += tuple(f"{PLACEBO_MARK} {c}: {why}." for c, why in marks.items() if c in set(d["contrast"].astype(str)))
    notes += verdict_notes(d)
    if "note" in d:
        notes += row_notes(d["contrast"], d["note"])
    return Table("table1_primary", "Table 1: pre-registered contrasts on the primary cell", data, display, notes)


def percentile_stars(d: pd.DataFrame) -> list[bool]:
    """Per row of a family, whether the percentile bootstrap's Holm p carries the star: its Holm decision
    (``reject_holm``) where it decided the family (``decided_by``; a table without the column: always)."""
    by = d["decided_by"] if "decided_by" in d else pd.Series(["percentile"] * len(d))
    return [bool(r) and b == "percentile" for r, b in zip(d["reject_holm"], by)]


def size_check_note(size_check: pd.DataFrame | None, family: str) -> tuple[str, ...]:
    """The note on 07's check of its own tests (``size_check``) for one family: "measured size at this run's
    structure: X % (± SE)" of the test that decided, family-wise, with the other test's beside it; none without."""
    if size_check is None or not len(size_check):
        return ()
    d = size_check[(size_check["family"] == family) & (size_check["measure"] == "family-wise size")]
    if d.empty:
        return ()
    if d["rate"].isna().all():
        return (f"Measured size at this run's structure: {str(d['note'].iat[0]) or 'not checked'}.",)

    def said(r: Any) -> str:
        return f"{fmt_pct(r['rate'], 1)} (± {fmt_pct(r['mc_se'], 1)})"

    first = d.iloc[0]
    decided = d[d["decided"].astype(bool)]
    other = d[~d["decided"].astype(bool)]
    head = decided.iloc[0] if len(decided) else first
    text = (f"Measured size at this run's structure: {said(head)} for the {head['rule']} test that decided "
            f"(family-wise, Holm, alpha {fmt_num(head['alpha'], 2)})")
    if len(other):
        text += f"; the {other.iloc[0]['rule']} test {said(other.iloc[0])}"
    return (text + f" — {fmt_int(first['n_sims'])} null studies of this run's {fmt_int(first['n_docs'])} documents "
            f"({fmt_num(first['queries_per_doc'], 1)} queries each), its deltas re-centred to 0, "
            f"{fmt_int(first['n_boot'])} resamples each (07_stats/size_check).",)


def verdict_cells(display: pd.DataFrame, d: pd.DataFrame, ok: Sequence[bool]) -> None:
    """Put the columns of every registered verdict that ``d`` (07's rows of one family) carries into ``display``,
    before dz, in registered order (:meth:`chunkstudy.stats.verdict_protocols.VerdictRendering.cells`,
    :data:`chunkstudy.stats.verdicts.VERDICTS`); ``ok``: the rows fit for inference."""
    for v in verdicts.shown(d):
        for col, cells in v.cells(d, ok, formatting).items():
            display.insert(display.columns.get_loc("dz"), col, cells)


def verdict_notes(d: pd.DataFrame) -> tuple[str, ...]:
    """The notes of every registered verdict that ``d`` carries, in registered order."""
    return tuple(n for v in verdicts.shown(d) for n in v.notes(d, formatting))


def paired_mixedlm_note(paired: pd.DataFrame | None, ok: Sequence[bool], order: Sequence[str],
                        size_check: pd.DataFrame | None = None) -> tuple[str, ...]:
    """Table 1's note on the correctly specified secondary model (07's ``mixedlm_paired``): per contrast its
    coefficient, 95% Wald CI and Holm p (gated as the row's own: :data:`NO_INFERENCE` for the CI and p where the
    bootstrap row supports no inference; a model not fitted says why), that its estimate weights documents (it is
    not Δ, the mean over queries), and, from 07's ``size_check``, its CI's measured coverage at this run's
    structure; none when 07 wrote no such table."""
    if paired is None or not len(paired):
        return ()
    m = paired.set_index("contrast")
    gate = dict(zip(order, ok))

    def cell(c: str) -> str:
        if _missing(m.at[c, "coef"]):  # not fitted: the last part of 07's note says why
            return f"{c} not fitted ({str(m.at[c, 'note']).split('; ')[-1].removeprefix('fit failed: ')})"
        if not gate.get(c, True):  # the row's bootstrap supports no inference: no CI or p here either
            return f"{c} {fmt_delta(m.at[c, 'coef'])} (CI and p {NO_INFERENCE})"
        return (f"{c} {fmt_delta(m.at[c, 'coef'])} {fmt_ci(m.at[c, 'ci_low'], m.at[c, 'ci_high'])}, Holm p "
                f"{fmt_p(m.at[c, 'p_holm'])}")

    cells = [cell(c) for c in order if c in m.index]
    coverage = ""
    if size_check is not None and len(size_check):
        cov = size_check[(size_check["measure"] == "CI coverage") & size_check["rate"].notna()]
        if len(cov):
            coverage = (" Its 95% CI's measured coverage at this run's structure: "
                        + ", ".join(f"{r.contrast} {fmt_pct(r.rate, 1)}" for r in cov.itertuples())
                        + f" ({fmt_int(cov['n_sims'].iat[0])} null studies each, 07_stats/size_check).")
    return ("Correctly specified secondary model (beside the pre-registered one): the paired per-query differences "
            "A \u2212 B with a random intercept per document (REML; each query's own effect cancels in the "
            "difference): " + "; ".join(cells) + ". Its estimate weights each document by its precision (GLS), "
            "between one weight per query and one per document, so it is not \u0394, Table 1's mean over queries."
            + coverage,)


def table2(condition_means: pd.DataFrame, embedder: str, reranker: str) -> Table:
    """Table 2 — per-condition means for every metric on one embedder × reranker (the paper's: strong, none),
    from the 07_stats ``condition_means`` table: rows = conditions in paper order, columns = metrics in their
    declared order (:func:`chunkstudy.design.metric_order_key`; others after), values = ``mean`` over each
    condition's scored queries. Exploratory."""
    _require(condition_means, ["metric", "embedder", "reranker", "condition", "mean"], "condition_means")
    sel = condition_means[(condition_means["embedder"] == embedder) & (condition_means["reranker"] == reranker)]
    if sel.empty:
        raise ValueError(f"condition_means: no rows for embedder {embedder!r} × reranker {reranker!r}; present: "
                         f"{sorted(set(zip(condition_means['embedder'], condition_means['reranker'])))}")
    wide = sel.pivot_table(index="condition", columns="metric", values="mean", aggfunc="first")
    wide = wide.loc[_order(wide.index, design.CONDITION_NAMES), sorted(wide.columns, key=design.metric_order_key)]
    n = sel.groupby("condition")["n_queries"].max() if "n_queries" in sel else None
    data = wide.reset_index().rename_axis(columns=None)
    if n is not None:
        data.insert(1, "n_queries", data["condition"].map(n).astype("Int64"))
    user = data["condition"].map(is_user_condition)
    display = pd.DataFrame({"Condition": [c + (f" {USER_MARK}" if u else "") for c, u in zip(data["condition"], user)]})
    if n is not None:
        display["n"] = data["n_queries"].map(fmt_int)
    for m in wide.columns:
        display[m] = data[m].map(fmt_num)
    notes: tuple[str, ...] = (f"Exploratory. Mean per query over each condition's scored queries; embedder {embedder}, "
             f"reranker {reranker}. budget-cov@B charges prefix tokens against the budget.",)
    notes += (USER_NOTE + ".",) if user.any() else ()
    return Table(f"table2_means_{embedder}_{reranker}",
                 f"Table 2: per-condition means ({embedder} embedder, reranker {reranker})", data, display, notes)


def table4(conditions: Sequence[str], summary: Mapping[str, Any] | None, contexts_method: str,
           route_sections: int) -> Table:
    """Table 4 — the conditions of the run (paper appendix; docs/design.md, "Conditions"), each declared condition's
    row (:meth:`chunkstudy.design.Condition.table4`): boundaries, prefix at embedding time and retrieval, plus,
    when 04's ``summary.json`` is given, the realised chunk count and mean content / prefix tokens of each
    condition (``n_chunks``, ``mean_content_tokens``, ``mean_prefix_tokens``). ``contexts_method``
    (``contexts.method``) names A1's prefix as this run made it (a non-LLM baseline is said so);
    ``route_sections`` (``retrieve.route_sections``) is stage 1's top n."""
    unknown = [c for c in conditions if c not in design.CONDITION_NAMES]
    if unknown:
        raise ValueError(f"table4: unknown condition {unknown[0]!r}; known: {list(design.CONDITION_NAMES)}")
    conds = _order(conditions, design.CONDITION_NAMES)
    spec = {c: design.condition(c).table4(route_sections) for c in conds}
    if contexts_method != "llm":
        spec = {c: (b, f"{contexts_method} situating context (non-LLM baseline)", r)
                if design.condition(c).prefix_kind.contexts else (b, p, r) for c, (b, p, r) in spec.items()}
    data = pd.DataFrame({"condition": conds, "boundaries": [spec[c][0] for c in conds],
                         "prefix": [spec[c][1] for c in conds],
                         "retrieval": [spec[c][2] for c in conds]})
    display = data.rename(columns=str.capitalize)
    if summary and summary.get("n_chunks"):
        data["n_chunks"] = data["condition"].map(summary["n_chunks"]).astype("Int64")
        data["mean_content_tokens"] = data["condition"].map(summary["mean_content_tokens"]).astype(float)
        data["mean_prefix_tokens"] = data["condition"].map(summary["mean_prefix_tokens"]).astype(float)
        display = display.assign(**{"Chunks": data["n_chunks"].map(fmt_int),
                                    "Content tok.": data["mean_content_tokens"].map(lambda x: fmt_num(x, 1)),
                                    "Prefix tok.": data["mean_prefix_tokens"].map(lambda x: fmt_num(x, 1))})
    notes = ("Chunks of every condition tile each document exactly; offsets are content-only, so a prefix can "
             "never create relevance. Prefix tokens are counted apart from content tokens.",)
    return Table("table4_conditions", "Table 4: experimental conditions", data, display, notes)


# ---------------------------------------------------------------------------------------------------------------
# Exploratory tables behind the figures
# ---------------------------------------------------------------------------------------------------------------

def dose_response(dose: pd.DataFrame) -> Table:
    """The breadcrumb-depth dose-response (07 ``dose_response``; exploratory): per embedder × reranker the mean
    at each depth of the ladder (:func:`chunkstudy.design.depth_ladder`: A2 → A3-d1 → A3-d2 → A3), the slope per
    level, its bootstrap CI and p."""
    _require(dose, ["embedder", "reranker", "slope", "ci_low", "ci_high", "p"], "dose_response")
    data = dose.reset_index(drop=True)
    display = pd.DataFrame({"Embedder": data["embedder"], "Reranker": data["reranker"]})
    for c, d in design.depth_ladder():
        col = f"mean_d{d}"
        display[f"{c} (d{d})"] = data[col].map(fmt_num) if col in data else DASH
    nb = data["n_boot"] if "n_boot" in data else pd.Series([None] * len(data))
    display["slope / level"] = data["slope"].map(fmt_delta)
    ok = inference_mask(data)
    display["95% CI"] = gated([fmt_ci(lo, hi) for lo, hi in zip(data["ci_low"], data["ci_high"])], ok)
    display["p"] = gated([fmt_p(p, b) for p, b in zip(data["p"], nb)], ok)
    metric = str(data["metric"].iat[0]) if "metric" in data and len(data) else design.PRIMARY_METRIC.key
    notes: tuple[str, ...] = ("Exploratory, outside the pre-registered family.",)
    if "note" in data:
        notes += row_notes([f"{e} / {r}" for e, r in zip(data["embedder"], data["reranker"])], data["note"])
    return Table("exploratory_dose_response", f"Exploratory: breadcrumb-depth dose-response ({metric})", data,
                 display, notes)


def section_recall_table(summary: pd.DataFrame) -> Table:
    """Section recall of the two-stage conditions (paper §6.4), formatted from 05's ``section_recall_summary``
    (:func:`chunkstudy.retrieve.section_recall_summary`): per embedder × reranker × condition, the share of
    queries for which stage 1 kept a section overlapping gold evidence, its binomial SE and the queries."""
    _require(summary, ["embedder", "reranker", "condition", "section_recall", "se", "n_defined", "n_queries"],
             "section_recall_summary")
    data = summary.reset_index(drop=True)
    display = pd.DataFrame({"Embedder": data["embedder"], "Reranker": data["reranker"],
                            "Condition": data["condition"], "Section recall": data["section_recall"].map(fmt_num),
                            "\u00b1 SE": data["se"].map(fmt_num),
                            "Queries (defined / all)": [f"{fmt_int(a)} / {fmt_int(b)}" for a, b in
                                                        zip(data["n_defined"], data["n_queries"])]})
    return Table("exploratory_section_recall", "Stage-1 section recall of the two-stage conditions", data, display,
                 ("Share of queries for which stage 1 kept a section overlapping gold evidence.",))


def reranker_lift(lift: pd.DataFrame, metric: str, embedder: str) -> Table:
    """The reranker lift per condition (paper §6 "Reranking lifts all boats"), formatted from 07's
    ``reranker_lift`` table (:func:`chunkstudy.stats.reranker_lift`); ``metric`` and ``embedder`` name its cell
    in the title."""
    _require(lift, ["metric", "embedder", "reranker", "condition", "none", "reranked", "lift"], "reranker_lift")
    data = lift.reset_index(drop=True)
    display = pd.DataFrame({"Reranker": data["reranker"], "Condition": data["condition"],
                            "No reranker": data["none"].map(fmt_num), "Reranked": data["reranked"].map(fmt_num),
                            "Lift": data["lift"].map(fmt_delta)})
    notes = ("Exploratory. Difference of condition means.",) if len(data) else (
        "No reranked cell in this run (retrieve.rerankers is empty).",)
    return Table("exploratory_reranker_lift", f"Reranker lift per condition ({metric}, {embedder} embedder)", data,
                 display, notes)


def per_type(per_type_df: pd.DataFrame, embedder: str, reranker: str,
             marks: Mapping[str, str] | None = None) -> Table:
    """The per-query-type cuts (07 ``per_type``; exploratory, unadjusted) of one embedder × reranker. A row not
    fit for inference prints :data:`NO_INFERENCE` for its CI and p (as :func:`table1`); ``marks`` marks the
    contrasts whose placebo is not clean."""
    _require(per_type_df, ["contrast", "qtype", "mean_delta", "ci_low", "ci_high", "p"], "per_type")
    marks = dict(marks or {})
    d = per_type_df
    if "embedder" in d:
        d = d[(d["embedder"] == embedder) & (d["reranker"] == reranker)]
    data = d.reset_index(drop=True)
    ok = inference_mask(data)
    display = pd.DataFrame({"Contrast": [c + (f" {PLACEBO_MARK}" if c in marks else "")
                                         for c in data["contrast"].astype(str)],
                            "Query type": data["qtype"],
                            "\u0394": data["mean_delta"].map(fmt_delta),
                            "95% CI": gated([fmt_ci(lo, hi) for lo, hi in zip(data["ci_low"], data["ci_high"])], ok),
                            "p (unadjusted)": gated(data["p"].map(fmt_p), ok),
                            "Queries": data["n_queries"].map(fmt_int) if "n_queries" in data else DASH})
    notes: tuple[str, ...] = ("Hypothesis-generating only; no multiplicity adjustment.",)
    notes += tuple(f"{PLACEBO_MARK} {c}: {why}." for c, why in marks.items() if c in set(data["contrast"].astype(str)))
    if "note" in data:
        notes += row_notes([f"{c} ({t})" for c, t in zip(data["contrast"], data["qtype"])], data["note"])
    return Table("exploratory_per_type", f"Exploratory: contrasts by query type ({embedder}, reranker {reranker})",
                 data, display, notes)


# ---------------------------------------------------------------------------------------------------------------
# Power analysis (07 ``power``; docs/design.md, "Power")
# ---------------------------------------------------------------------------------------------------------------

def power(needed: pd.DataFrame, power_df: pd.DataFrame) -> Table:
    """The power analysis (07 ``power_needed`` and ``power``; planning, not confirmatory): per contrast and effect
    scenario (this run's effect, the paper's dz), the documents the clustered-bootstrap + Holm test needs for the
    target power (interpolated on the simulated grid by 07, :func:`chunkstudy.stats.power.needed_table`), the simulated
    power at this corpus's own size, and the design effect and ICC of its deltas; the notes name the simulation's
    settings from ``power``. ``†`` marks an N where the test's size under the null exceeds alpha
    (anti-conservative with few documents), so that N is optimistic."""
    _require(needed, stages.columns("power_needed"), "power_needed")
    _require(power_df, ["scenario", "contrast", "n_docs", "power", "target_power", "n_docs_observed", "n_sims", "n_boot",
                        "alpha", "require_sign"], "power")
    data = needed.reset_index(drop=True)
    if data.empty:
        raise ValueError("power: the table has no rows; written by 07_stats")
    first = power_df.iloc[0]
    target = float(first["target_power"])
    display = pd.DataFrame({
        "Contrast": data["contrast"],
        "A \u2212 B": [f"{a} \u2212 {b}" for a, b in zip(data["condition_a"], data["condition_b"])],
        "Effect": data["effect_source"].map(paper_source_label),
        "dz": data["target_dz"].map(lambda x: fmt_delta(x, 2)),
        f"Docs for {fmt_pct(target, 0)} power": [fmt_needed(n, s, lg) + (" \u2020" if o else "") for n, s, lg, o in
                                                 zip(data["n_docs_needed"], data["status"],
                                                     data["largest_simulated"], data["oversized"])],
        "Power at this corpus": [f"{fmt_pct(p, 0)} \u00b1 {fmt_pct(se, 0)}" if not _missing(p) else DASH
                                 for p, se in zip(data["power_at_observed"], data["mc_se_at_observed"])],
        "Design effect": data["design_effect"].map(lambda x: fmt_num(x, 2)),
        "ICC": data["icc"].map(lambda x: fmt_num(x, 2)),
    })
    n_obs = int(data["n_docs_observed"].iat[0])
    nb = first["n_boot"]
    notes: tuple[str, ...]
    k = int(data["contrast"].nunique())
    family = {2: "two", 3: "three", 4: "four"}.get(k, fmt_int(k))  # the family's size (the paper's: four)
    notes = (f"Planning, not confirmatory. Simulated studies of N documents drawn with replacement from this "
             f"corpus's {fmt_int(n_obs)} documents (each with its queries' deltas of all {family} contrasts); per "
             f"study the document-clustered bootstrap ({fmt_int(nb)} resamples) and Holm across the {family} at alpha "
             f"{float(first['alpha']):g}; power = share of {fmt_int(first['n_sims'])} studies with "
             f"Holm p < alpha{' and the effect’s sign' if bool(first['require_sign']) else ''} "
             f"(\u00b1 = Monte Carlo SE). The paper scenario shifts every delta by one constant so that dz = "
             "mean/sd equals the paper's.",
             f"Docs needed: first crossing of {fmt_pct(target, 0)} on the simulated grid "
             f"({', '.join(fmt_int(n) for n in sorted(power_df['n_docs'].unique()))}), interpolated in log N. "
             "\u2020 = the test rejects a zero effect more often than alpha at that size (few documents), so the "
             "number is optimistic.")
    notes += tuple(dict.fromkeys(f"{c}: {n}" for c, n in zip(data["contrast"], data["note"]) if n))
    return Table("power", "Power: documents needed per contrast (clustered bootstrap + Holm)", data, display, notes)


def user_contrasts(user_contrasts: pd.DataFrame, cell: str, registration: str,
                   size_check: pd.DataFrame | None = None) -> Table:
    """The user's contrasts (07's ``user_contrasts``, ``contrasts.extra``) in one cell (the primary cell's name,
    e.g. ``cov-nDCG@10 | strong | none``): Δ, 95% CI, p, Holm p within the user's family (never the
    confirmatory four's), dz, queries / documents. ``registration`` is the sentence saying whether they were
    declared before the run (:func:`chunkstudy.report.report.user_registration`). Exploratory."""
    _require(user_contrasts, ["cell", "contrast", "condition_a", "condition_b", "mean_delta", "ci_low", "ci_high",
                              "p", "p_holm", "dz", "n_queries", "n_docs"], "user_contrasts")
    d = user_contrasts[user_contrasts["cell"] == cell].reset_index(drop=True)
    if d.empty:
        raise ValueError(f"user_contrasts: no rows for cell {cell!r}; cells: {sorted(set(user_contrasts['cell']))}")
    ok = inference_mask(d)
    n_boot = d["n_boot"] if "n_boot" in d else pd.Series([None] * len(d))
    display = pd.DataFrame({
        "Contrast": [f"{c} {USER_MARK}" for c in d["contrast"].astype(str)],
        "A \u2212 B": [f"{a} \u2212 {b}" for a, b in zip(d["condition_a"], d["condition_b"])],
        "Question": [design.extra_question(a, b) for a, b in zip(d["condition_a"], d["condition_b"])],
        "\u0394": d["mean_delta"].map(fmt_delta),
        "95% CI": gated([fmt_ci(lo, hi) for lo, hi in zip(d["ci_low"], d["ci_high"])], ok),
        "p": gated([fmt_p(p, b) for p, b in zip(d["p"], n_boot)], ok),
        "Holm p (user family)": gated([fmt_p(p, b) + (" *" if r else "") for p, b, r in zip(
            d["p_holm"], n_boot, percentile_stars(d) if "reject_holm" in d else [False] * len(d))], ok),
        "dz": d["dz"].map(lambda x: fmt_num(x, 2)),
        "n (q / docs)": [fmt_n(q, n) for q, n in zip(d["n_queries"], d["n_docs"])],
    })
    verdict_cells(display, d, ok)
    notes: tuple[str, ...] = (f"Exploratory, cell {cell}. {registration} Holm is applied within the user's {len(d)} contrast(s) "
             "only: the confirmatory four are neither in this family nor affected by it.", USER_NOTE + ".")
    notes += verdict_notes(d) + size_check_note(size_check, USER_ADDED_LABEL)
    if "note" in d:
        notes += row_notes(d["contrast"], d["note"])
    return Table("user_contrasts", "Your contrasts (user-added, exploratory)", d, display, notes)
