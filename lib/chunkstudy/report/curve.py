"""The specification curves in the report (stage 08; docs/beyond.md, "Specification curve"), from 07's
``multiverse``, ``multiverse_summary`` and ``multiverse_axes`` tables (:mod:`chunkstudy.stats.multiverse`): the
figure (per contrast, every specification's Δ sorted, with its 95% CI, over an indicator panel of the choices that
made it: the layout of Simonsohn, Simmons & Nelson 2020, Fig. 2, with each value's shares at the panel's right), the
table beside Table 1, the curve read by axis, one table of every specification per contrast for report.html's
drill-down, and whether stage 01 recorded the same axes. Computes no statistic; numbers are rounded here."""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

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
PANEL_AXES = tuple(tables.AXIS_LABELS.items())
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
    null = (f"{tables.fmt_p(s['null_p'], s['n_boot'])}, Stouffer Z {tables.fmt_p(s['stouffer_p'], s['n_boot'])}"
            if bool(s["inference"]) else tables.NO_INFERENCE)
    sig = tables.sig_shares(s["share_sig_positive"], s["share_sig_negative"])
    analyses = f" ({tables.fmt_int(s['n_analyses'])} analyses)" if s["n_analyses"] != s["n_specs"] else ""
    return (f"{contrast} = {a} \u2212 {b}: {tables.fmt_int(s['n_specs'])} specifications{analyses}; same sign as "
            f"the primary {tables.fmt_pct(s['share_same_sign'])}; significant + / \u2212 {sig}\n"
            f"median \u0394 {tables.fmt_delta(s['median_delta'])}; null p: median {null}")


def level_shares(axes: pd.DataFrame | None, contrast: str, rows: list[tuple[str, str, str]]) -> list[str]:
    """Per indicator row (:func:`indicator_rows`), the shares of the specifications that took its value, from 07's
    ``multiverse_axes``: ``"sig 64.0% / 0.0% · same 98.4%"`` (significant + / \u2212, same sign as the primary);
    empty where the table has no such row."""
    if axes is None or not len(axes):
        return ["" for _ in rows]
    d = axes[axes["contrast"].astype(str) == contrast]
    by = {(r["axis"], str(r["level"])): r for _, r in d.iterrows()}
    out = []
    for col, _, value in rows:
        r = by.get((col, value))
        if r is None:
            out.append("")
            continue
        sig = tables.sig_shares(r["share_sig_positive"], r["share_sig_negative"])
        out.append(f"sig {sig} \u00b7 same {tables.fmt_pct(r['share_same_sign'])}")
    return out


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


def _indicators(ax, d: pd.DataFrame, rows: list[tuple[str, str, str]], shares: list[str]) -> None:
    x = d["rank"].to_numpy(float)
    prim = d["primary"].astype(bool).to_numpy()
    for i, (col, _, value) in enumerate(rows):
        on = (d[col].astype(str) == value).to_numpy()
        ax.scatter(x[on & ~prim], np.full(int((on & ~prim).sum()), i), s=4, marker="s", color="#4a4a4a",
                   linewidths=0)
        ax.scatter(x[on & prim], np.full(int((on & prim).sum()), i), s=24, marker="D", color=PRIMARY)
    ax.set_yticks(range(len(rows)), [f"{label}: {value}" for _, label, value in rows], fontsize=6)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    if any(shares):  # the curve read by axis: each value's shares at its row's right end
        right = ax.secondary_yaxis("right")
        right.set_yticks(range(len(rows)), shares, fontsize=6)
        right.tick_params(length=0)
    ax.set_xlabel("specification, sorted by \u0394")
    ax.grid(axis="x", alpha=0)


@figures._styled
def specification_curve(specs: pd.DataFrame, summary: pd.DataFrame | None = None,
                        axes_table: pd.DataFrame | None = None) -> Figure:
    """Per contrast of 07's ``multiverse`` table (in its order), two panels sharing the x axis: above, each
    specification's Δ sorted ascending with its 95% CI (where the floors hold), green/red where significant in that
    direction, grey where not, the primary specification ringed, the median dashed; below, the indicator panel: one
    row per value of each axis that varies, a mark where the specification took it, and at the row's right end the
    shares of the specifications that took it (``axes_table``, 07's ``multiverse_axes``: :func:`level_shares`). The
    title states the contrast's curve in numbers from ``summary`` (07's ``multiverse_summary``)."""
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
        _indicators(bottom, d, rows, level_shares(axes_table, c, rows))
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


class CurveParts(NamedTuple):
    """The section's pieces (:func:`report_parts`): the table beside Table 1, the curve read by axis (None without
    07's ``multiverse_axes``), every contrast's table of specifications and the figure."""

    table: tables.Table
    axes: tables.Table | None
    specifications: list[tables.Table]
    figure: Any


def report_parts(summary: pd.DataFrame, specs: pd.DataFrame | None, params: Params,
                 manifests: Mapping[str, Mapping] | None, axes: pd.DataFrame | None = None) -> CurveParts:
    """The section's table (:func:`chunkstudy.report.tables.multiverse`, with :func:`registration`), the curve read
    by axis (:func:`chunkstudy.report.tables.multiverse_axes`, from 07's ``axes``), every contrast's table of
    specifications (:func:`chunkstudy.report.tables.multiverse_specs`) and the figure
    (:func:`specification_curve`)."""
    table = tables.multiverse(summary, registration(params, manifests))
    have = specs if specs is not None else pd.DataFrame(columns=["contrast"])
    per = [tables.multiverse_specs(have, c) for c in dict.fromkeys(summary["contrast"].astype(str))
           if (have["contrast"] == c).any()]
    by_axis = tables.multiverse_axes(axes) if axes is not None and len(axes) else None
    return CurveParts(table, by_axis, per, specification_curve(have if len(have) else None, summary, axes))


def links(contrasts: list[str]) -> str:
    """A Markdown line linking each contrast's table of every specification in report.html."""
    return "Every specification, in report.html: " + " · ".join(f"[{c}](#{anchor(c)})" for c in contrasts) + "."
