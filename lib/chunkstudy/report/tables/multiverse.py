"""Each contrast's specification curve as tables (07's ``multiverse`` and ``multiverse_summary``,
:mod:`chunkstudy.stats.multiverse`; docs/beyond.md, "Specification curve"): one row per contrast beside Table 1,
and every specification of one contrast for the report's drill-down."""

from __future__ import annotations

import pandas as pd

from .common import NO_INFERENCE, _require, gated, inference_mask, row_notes
from .formatting import DASH, fmt_ci, fmt_delta, fmt_int, fmt_p, fmt_pct
from .record import Table

#: The axes a specification varies, as its table shows them: (07's column, header).
SPEC_AXES = (("metric", "Metric"), ("embedder", "Embedder"), ("reranker", "Reranker"), ("query_types", "Queries"),
             ("seed", "Seed"), ("spec_a", "A"), ("spec_b", "B"))
#: What the curve's numbers mean, under both tables.
CURVE_NOTE = ("Exploratory: each contrast under every specification declared in the parameter file's multiverse "
              "block (docs/beyond.md, \"Specification curve\"); Holm stays on the four contrasts of Table 1, whose "
              "cell is the primary specification (its row equals Table 1's). Per specification the test of Table 1: "
              "\u0394, the document-clustered bootstrap's 95% CI and two-sided p; significant = p < alpha "
              "unadjusted where the floors hold.")


def multiverse(summary: pd.DataFrame, registration: str = "") -> Table:
    """One row per contrast of 07's ``multiverse_summary``: the specifications computed (of those declared), the
    primary specification's Δ and the median over specifications, the share with the primary's sign, the shares
    significant in each direction, and the specification-curve test of the median (Simonsohn, Simmons & Nelson
    2020), :data:`NO_INFERENCE` below the floors. ``registration`` says whether 01 recorded the same axes."""
    _require(summary, ["contrast", "condition_a", "condition_b", "n_declared", "n_specs", "primary_delta",
                       "median_delta", "share_same_sign", "share_sig_positive", "share_sig_negative", "null_p",
                       "n_boot", "inference", "note"], "multiverse_summary")
    d = summary.reset_index(drop=True)
    ok = inference_mask(d)
    display = pd.DataFrame({
        "Contrast": d["contrast"].astype(str),
        "A \u2212 B": [f"{a} \u2212 {b}" for a, b in zip(d["condition_a"], d["condition_b"])],
        "Specifications": [f"{fmt_int(n)} of {fmt_int(m)}" for n, m in zip(d["n_specs"], d["n_declared"])],
        "Primary \u0394": d["primary_delta"].map(fmt_delta),
        "Median \u0394": d["median_delta"].map(fmt_delta),
        "Same sign": d["share_same_sign"].map(fmt_pct),
        "Significant + / \u2212": [f"{fmt_pct(a)} / {fmt_pct(b)}" if not pd.isna(a) else DASH
                                  for a, b in zip(d["share_sig_positive"], d["share_sig_negative"])],
        "Null p (median)": gated([fmt_p(p, b) for p, b in zip(d["null_p"], d["n_boot"])], ok),
    })
    notes = (CURVE_NOTE,
             "Same sign: the share of specifications whose \u0394 has the primary specification's sign (\u2014 when the "
             "primary \u0394 is 0). Null p: "
             "the specification-curve test, is the median \u0394 over specifications more extreme than under the "
             "bootstrap with the contrast's effect removed (every specification's deltas shifted to mean 0, the "
             "contrast's documents resampled once for all specifications): (1 + #{|median*| \u2265 |median|}) / "
             f"(1 + B). {NO_INFERENCE}: below the floors (stats.min_docs documents, 1,000 resamples).",
             *([registration] if registration else []), *row_notes(d["contrast"], d["note"]))
    return Table("multiverse", "Each contrast's specification curve (exploratory)", d, display, notes)


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
