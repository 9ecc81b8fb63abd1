"""Each contrast's specification curve as tables (07's ``multiverse`` and ``multiverse_summary``,
:mod:`chunkstudy.stats.multiverse`; docs/beyond.md, "Specification curve"): one row per contrast beside Table 1,
and every specification of one contrast for the report's drill-down."""

from __future__ import annotations

from typing import Any

import pandas as pd

from .common import NO_INFERENCE, _require, gated, inference_mask, row_notes
from .formatting import DASH, fmt_ci, fmt_delta, fmt_int, fmt_p, fmt_pct
from .record import Table

#: Each axis of the curve (07's ``multiverse`` columns, :data:`chunkstudy.stats.multiverse.AXES`) as the report
#: names it, in the figure's order.
AXIS_LABELS = {"metric_axis": "metric", "k": "k", "embedder": "embedder", "reranker": "reranker",
               "query_types": "queries", "seed": "seed", "spec_a": "A as", "spec_b": "B as"}
#: The axes a specification varies, as its table shows them: (07's column, header).
SPEC_AXES = (("metric", "Metric"), ("embedder", "Embedder"), ("reranker", "Reranker"), ("query_types", "Queries"),
             ("seed", "Seed"), ("spec_a", "A"), ("spec_b", "B"))
#: What the curve's numbers mean, under both tables.
CURVE_NOTE = ("Exploratory: each contrast under every specification declared in the parameter file's multiverse "
              "block (docs/beyond.md, \"Specification curve\"); Holm stays on the four contrasts of Table 1, whose "
              "cell is the primary specification (its row equals Table 1's). Per specification the test of Table 1: "
              "\u0394, the document-clustered bootstrap's 95% CI and two-sided p; significant = p < alpha "
              "unadjusted where the floors hold.")


def _floor_note(n_boot: pd.Series) -> str:
    """The smallest null p the run's draws allow, ``1/(B + 1)``, from the B each contrast's null had."""
    bs = sorted({int(b) for b in n_boot if not pd.isna(b) and int(b) > 0})
    if not bs:
        return ""
    floors = ", ".join(f"1/{fmt_int(b + 1)} at B = {fmt_int(b)}" for b in bs)
    return (f"The smallest null p is 1/(B + 1): {floors} (no null draw as extreme as the data), which prints as "
            f"{fmt_p(1.0 / (bs[-1] + 1))}.")


def _specifications(d: pd.DataFrame) -> list[str]:
    """``"378 of 378 (126 analyses)"``: computed of declared, and the distinct analyses where the bootstrap seed
    makes them fewer (specifications that differ only in their seed share one Δ)."""
    return [f"{fmt_int(n)} of {fmt_int(m)}" + (f" ({fmt_int(a)} analyses)" if not pd.isna(a) and a != n else "")
            for n, m, a in zip(d["n_specs"], d["n_declared"], d["n_analyses"])]


def multiverse(summary: pd.DataFrame, registration: str = "") -> Table:
    """One row per contrast of 07's ``multiverse_summary``: the specifications computed (of those declared, and the
    distinct analyses among them), the primary specification's Δ and the median over specifications, the share
    with the primary's sign, the shares significant in each direction, and the specification-curve tests of the
    median and of Stouffer's Z (Simonsohn, Simmons & Nelson 2020), :data:`NO_INFERENCE` below the floors; a median
    of exactly 0 is marked (its p is 1 by construction). ``registration`` says whether 01 recorded the same axes."""
    _require(summary, ["contrast", "condition_a", "condition_b", "n_declared", "n_specs", "n_analyses",
                       "primary_delta", "median_delta", "n_zero", "share_same_sign", "share_sig_positive",
                       "share_sig_negative", "null_p", "stouffer_p", "n_boot", "inference", "note"],
             "multiverse_summary")
    d = summary.reset_index(drop=True)
    ok = inference_mask(d)
    display = pd.DataFrame({
        "Contrast": d["contrast"].astype(str),
        "A \u2212 B": [f"{a} \u2212 {b}" for a, b in zip(d["condition_a"], d["condition_b"])],
        "Specifications": _specifications(d),
        "Primary \u0394": d["primary_delta"].map(fmt_delta),
        "Median \u0394": d["median_delta"].map(fmt_delta),
        "Same sign": d["share_same_sign"].map(fmt_pct),
        "Significant + / \u2212": [sig_shares(a, b) for a, b in zip(d["share_sig_positive"], d["share_sig_negative"])],
        "Null p (median)": gated([fmt_p(p, b) + (f" (median 0: {fmt_int(z)} \u0394 = 0)" if m == 0 else "")
                                  for p, b, m, z in zip(d["null_p"], d["n_boot"], d["median_delta"], d["n_zero"])],
                                 ok),
        "Null p (Stouffer Z)": gated([fmt_p(p, b) for p, b in zip(d["stouffer_p"], d["n_boot"])], ok),
    })
    notes = (CURVE_NOTE,
             "Specifications: computed of declared; analyses: the distinct ones among them (specifications that "
             "differ only in their bootstrap seed share one \u0394 and differ in CI and p). Same sign: the share of "
             "specifications whose \u0394 has the primary specification's sign (\u2014 when the primary \u0394 is "
             "0).",
             "Null p: the specification-curve tests against the bootstrap with the contrast's effect removed (every "
             "specification's deltas shifted to mean 0, the contrast's documents resampled once for all "
             "specifications): is the median \u0394 over specifications, or Stouffer's Z of their z = \u0394 / SE "
             "(the average z), more extreme than there? (1 + #{|statistic*| \u2265 |statistic|}) / (1 + B). A "
             "median of exactly 0 has p 1 by construction (every null median is as extreme), as when many "
             "specifications tie at \u0394 = 0; Stouffer's Z is unaffected by such ties. "
             f"{NO_INFERENCE}: below the floors (stats.min_docs documents, 1,000 resamples).",
             *[note for note in [_floor_note(d["n_boot"])] if note],
             *([registration] if registration else []), *row_notes(d["contrast"], d["note"]))
    return Table("multiverse", "Each contrast's specification curve (exploratory)", d, display, notes)


def sig_shares(positive: Any, negative: Any) -> str:
    """The shares of specifications significant in each direction, ``"64.0% / 0.0%"`` (a dash when none was
    tested): the "significant + / \u2212" cell of every curve table, title and indicator row."""
    return f"{fmt_pct(positive)} / {fmt_pct(negative)}" if not pd.isna(positive) else DASH


def _axis_cell(r: pd.Series | None) -> str:
    if r is None:
        return ""
    return f"{sig_shares(r['share_sig_positive'], r['share_sig_negative'])} \u00b7 {fmt_pct(r['share_same_sign'])}"


def _per_contrast(counts: list) -> str:
    """One count when every contrast has it, else each contrast's, in order (``"63 / 126 / 63 / 63"``)."""
    shown = [fmt_int(n) for n in counts]
    return shown[0] if len(set(shown)) == 1 else " / ".join(shown)


def multiverse_axes(axes: pd.DataFrame) -> Table:
    """Each contrast's curve read by axis (07's ``multiverse_axes``): one row per value of each axis that varies,
    in the grid's order (:data:`AXIS_LABELS`), one column per contrast with the shares of the specifications that
    took that value, significant + / \u2212 \u00b7 same sign as the primary; blank where the axis does not vary
    in that contrast. The specifications and the distinct analyses per value (:func:`_per_contrast`)."""
    _require(axes, ["contrast", "condition_a", "condition_b", "axis", "level", "n_specs", "n_analyses",
                    "share_same_sign", "share_sig_positive", "share_sig_negative"], "multiverse_axes")
    d = axes.reset_index(drop=True)
    contrasts = list(dict.fromkeys(d["contrast"].astype(str)))
    heads = {c: f"{c} = {a} \u2212 {b}" for c, a, b in zip(d["contrast"].astype(str), d["condition_a"],
                                                            d["condition_b"])}
    order = {axis: i for i, axis in enumerate(AXIS_LABELS)}
    keys = sorted(dict.fromkeys(zip(d["axis"], d["level"])), key=lambda k: order.get(k[0], len(order)))
    by = {(str(r["contrast"]), r["axis"], r["level"]): r for _, r in d.iterrows()}
    rows = []
    for axis, level in keys:
        got = {c: by.get((c, axis, level)) for c in contrasts}
        rows.append({"Axis": AXIS_LABELS.get(axis, axis), "Value": str(level),
                     "Specifications": _per_contrast([r["n_specs"] for r in got.values() if r is not None]),
                     "Analyses": _per_contrast([r["n_analyses"] for r in got.values() if r is not None]),
                     **{heads[c]: _axis_cell(r) for c, r in got.items()}})
    display = pd.DataFrame(rows, columns=["Axis", "Value", "Specifications", "Analyses", *heads.values()])
    notes = ("Each cell: of the specifications that took this value, the shares significant + / \u2212 "
             "(unadjusted p < alpha where the floors hold; \u2014 when none holds them) \u00b7 the share with the "
             "primary specification's sign. A value's shares weighted by its specifications average to the "
             "contrast's in the table above; blank: the axis does not vary in that contrast. Specifications and "
             "analyses (the distinct ones: a bootstrap seed repeats every analysis): per contrast, in the columns' "
             "order, where the contrasts differ.",)
    return Table("multiverse_axes", "Each contrast's specification curve read by axis (exploratory)", d, display,
                 notes)


def multiverse_specs(specs: pd.DataFrame, contrast: str) -> Table:
    """Every specification of ``contrast`` (07's ``multiverse`` rows), in the curve's order (rank by Δ): its
    choices, Δ, the CI and p (:data:`NO_INFERENCE` below the floors), queries / documents; the primary
    specification marked ◆, a significant one + or −."""
    _require(specs, ["contrast", "spec", "primary", "rank", "metric", "embedder", "reranker", "query_types", "seed",
                     "spec_a", "spec_b", "mean_delta", "ci_low", "ci_high", "p", "n_queries", "n_docs",
                     "significant", "inference"], "multiverse")
    d = specs[specs["contrast"] == contrast].sort_values("rank", kind="stable").reset_index(drop=True)
    ok = inference_mask(d)
    display = pd.DataFrame({"Rank": d["rank"].map(fmt_int), "Spec": d["spec"].astype(int).astype(str)
                            + d["primary"].map(lambda x: " \u25c6" if x else "")})
    for col, head in SPEC_AXES:
        display[head] = d[col].astype(str)
    display["\u0394"] = d["mean_delta"].map(fmt_delta)
    display["95% CI"] = gated([fmt_ci(lo, hi) for lo, hi in zip(d["ci_low"], d["ci_high"])], ok)
    display["p"] = gated(d["p"].map(fmt_p), ok)
    display["Sig."] = [("+" if x > 0 else "\u2212") if s else "" for s, x in zip(d["significant"], d["mean_delta"])]
    display["n (q / docs)"] = [f"{fmt_int(q)} / {fmt_int(n)}" for q, n in zip(d["n_queries"], d["n_docs"])]
    title = f"{contrast}: every specification ({len(d)}), sorted by \u0394"
    notes = ("\u25c6 the primary specification (Table 1's cell); Sig.: significant, in the direction of \u0394. "
             "Every specification's dz is in 07_stats/multiverse.", CURVE_NOTE)
    return Table(f"multiverse_{contrast}", title, d, display, notes)
