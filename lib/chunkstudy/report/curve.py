"""The specification curves in the report (stage 08; docs/beyond.md, "Specification curve"), from 07's
``multiverse`` and ``multiverse_summary`` tables (:mod:`chunkstudy.stats.multiverse`): the figure (per contrast,
every specification's Δ sorted, with its 95% CI, over an indicator panel of the choices that made it: the layout of
Simonsohn, Simmons & Nelson 2020, Fig. 2), the table beside Table 1, one table of every specification per contrast
for report.html's drill-down, and whether stage 01 recorded the same axes. Computes no statistic; numbers are
rounded here."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .. import config
from ..params import Params
from . import figures, tables

#: The report's section (report.md and report.html, right after Table 1's).
HEADING = "Specification curves (exploratory)"

#: The indicator panel's rows, in order: (07's column, label). An axis with one value in a contrast is left out
#: (it is the same in every specification; the title of the table says what the grid held).
PANEL_AXES = (("metric_axis", "metric"), ("k", "k"), ("embedder", "embedder"), ("reranker", "reranker"),
              ("query_types", "queries"), ("seed", "seed"), ("spec_a", "A as"), ("spec_b", "B as"))
#: Colours: significant and positive, significant and negative, not significant; the primary specification.
SIG_POS, SIG_NEG, NOT_SIG, PRIMARY = "#1a9850", "#d73027", "#7f7f7f", "#000000"


def indicator_rows(specs: pd.DataFrame) -> list[tuple[str, str, str]]:
    """``(column, axis label, value)`` of every row of one contrast's indicator panel: each value of each axis of
    :data:`PANEL_AXES` that takes more than one value there, in order of first appearance in the grid."""
    rows = []
    for col, label in PANEL_AXES:
        values = list(dict.fromkeys(specs.sort_values("spec")[col].astype(str)))
        if len(values) > 1:
            rows += [(col, label, v) for v in values]
    return rows


def _title(s: pd.Series | None, contrast: str, a: str, b: str) -> str:
    if s is None:
        return f"{contrast} = {a} \u2212 {b}"
    null = tables.fmt_p(s["null_p"], s["n_boot"]) if bool(s["inference"]) else tables.NO_INFERENCE
    sig = (f"{tables.fmt_pct(s['share_sig_positive'])} / {tables.fmt_pct(s['share_sig_negative'])}"
           if not pd.isna(s["share_sig_positive"]) else tables.DASH)
    return (f"{contrast} = {a} \u2212 {b}: {tables.fmt_int(s['n_specs'])} specifications; same sign as the primary "
            f"{tables.fmt_pct(s['share_same_sign'])}; significant + / \u2212 {sig}; median \u0394 "
            f"{tables.fmt_delta(s['median_delta'])}, null p {null}")


def _estimates(ax, d: pd.DataFrame) -> None:
    x = d["rank"].to_numpy(float)
    y = d["mean_delta"].to_numpy(float)
    ok = d["inference"].astype(bool).to_numpy() & d["ci_low"].notna().to_numpy() & d["ci_high"].notna().to_numpy()
    sig = d["significant"].astype(bool).to_numpy()
    colours = np.where(sig & (y > 0), SIG_POS, np.where(sig & (y < 0), SIG_NEG, NOT_SIG))
    ax.vlines(x[ok], d["ci_low"].to_numpy(float)[ok], d["ci_high"].to_numpy(float)[ok], colors=colours[ok],
              alpha=0.35, lw=1.0)
    ax.scatter(x, y, s=8, c=colours, zorder=3, linewidths=0)
    prim = d["primary"].astype(bool).to_numpy()
    ax.scatter(x[prim], y[prim], s=55, marker="D", facecolors="none", edgecolors=PRIMARY, lw=1.3, zorder=4,
               label="primary specification (Table 1)")
    ax.axhline(0.0, color="#333333", lw=0.8)
    ax.axhline(float(np.median(y)), color="#555555", lw=0.8, ls="--", label="median \u0394")
    ax.set_ylabel("\u0394 (A \u2212 B), 95% CI")
    ax.legend(frameon=False, loc="upper left", fontsize=7)


def _indicators(ax, d: pd.DataFrame, rows: list[tuple[str, str, str]]) -> None:
    x = d["rank"].to_numpy(float)
    prim = d["primary"].astype(bool).to_numpy()
    for i, (col, _, value) in enumerate(rows):
        on = (d[col].astype(str) == value).to_numpy()
        ax.scatter(x[on & ~prim], np.full(int((on & ~prim).sum()), i), s=4, marker="s", color="#4a4a4a",
                   linewidths=0)
        ax.scatter(x[on & prim], np.full(int((on & prim).sum()), i), s=24, marker="D", color=PRIMARY)
    ax.set_yticks(range(len(rows)), [f"{label}: {value}" for _, label, value in rows], fontsize=6)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("specification, sorted by \u0394")
    ax.grid(axis="x", alpha=0)


@figures._styled
def specification_curve(specs: pd.DataFrame, summary: pd.DataFrame | None = None) -> Figure:
    """Per contrast of 07's ``multiverse`` table (in its order), two panels sharing the x axis: above, each
    specification's Δ sorted ascending with its 95% CI (where the floors hold), green/red where significant in that
    direction, grey where not, the primary specification ringed, the median dashed; below, the indicator panel: one
    row per value of each axis that varies, a mark where the specification took it. The title states the
    contrast's curve in numbers from ``summary`` (07's ``multiverse_summary``)."""
    if specs is None or specs.empty:
        return figures.placeholder("Specification curves", "the parameter file declares no multiverse")
    contrasts = list(dict.fromkeys(specs["contrast"].astype(str)))
    panels = [(c, specs[specs["contrast"] == c], indicator_rows(specs[specs["contrast"] == c])) for c in contrasts]
    heights = [r for _, _, rows in panels for r in (2.4, 0.16 * max(1, len(rows)) + 0.5)]
    fig = figures._figure(9.5, sum(heights) + 0.4 * len(panels))
    axes = fig.subplots(len(heights), 1, gridspec_kw={"height_ratios": heights}, squeeze=False)[:, 0]
    by = summary.set_index("contrast") if summary is not None and len(summary) else None
    for i, (c, d, rows) in enumerate(panels):
        top, bottom = axes[2 * i], axes[2 * i + 1]
        bottom.sharex(top)
        top.tick_params(labelbottom=False)
        first = d.iloc[0]
        s = by.loc[c] if by is not None and c in by.index else None
        top.set_title(_title(s, c, str(first["condition_a"]), str(first["condition_b"])), loc="left", fontsize=8)
        _estimates(top, d)
        _indicators(bottom, d, rows)
        top.set_xlim(0.5, len(d) + 0.5)
    fig.suptitle("Each contrast's specification curve (exploratory; Holm stays on Table 1)", x=0.01, ha="left",
                 fontsize=10)
    return fig


def registration(params: Params, manifests: Mapping[str, Mapping] | None) -> str:
    """Whether the ``multiverse`` axes were declared before the run: stage 01's manifest (written before any
    result existed) records the same block (:func:`chunkstudy.manifests.write_manifest`'s ``multiverse_declared``)."""
    first = ((manifests or {}).get("01_corpus") or {}).get("multiverse_declared")
    if first == config.as_dict(params.multiverse):
        return ("The axes were declared before the run (stage 01's manifest records the same multiverse block), so "
                "no specification was chosen after seeing a result.")
    return ("The multiverse block is not what stage 01's manifest records: its axes were set after the corpus was "
            "built, possibly after seeing results.")


def anchor(contrast: str) -> str:
    """The HTML id of one contrast's table of every specification (``multiverse-c2``); a row's is
    ``<anchor>-<spec>``."""
    return "multiverse-" + "".join(ch if ch.isalnum() else "-" for ch in str(contrast).lower())


def report_parts(summary: pd.DataFrame, specs: pd.DataFrame | None, params: Params,
                 manifests: Mapping[str, Mapping] | None) -> tuple[tables.Table, list[tables.Table], Any]:
    """The section's table (:func:`chunkstudy.report.tables.multiverse`, with :func:`registration`), every
    contrast's table of specifications (:func:`chunkstudy.report.tables.multiverse_specs`) and the figure
    (:func:`specification_curve`)."""
    table = tables.multiverse(summary, registration(params, manifests))
    have = specs if specs is not None else pd.DataFrame(columns=["contrast"])
    per = [tables.multiverse_specs(have, c) for c in dict.fromkeys(summary["contrast"].astype(str))
           if (have["contrast"] == c).any()]
    return table, per, specification_curve(have if len(have) else None, summary)


def links(contrasts: list[str]) -> str:
    """A Markdown line linking each contrast's table of every specification in report.html."""
    return "Every specification, in report.html: " + " · ".join(f"[{c}](#{anchor(c)})" for c in contrasts) + "."
