"""The recipe figure (stage 08; docs/beyond.md, "Anthropic's recipe"): each step's reduction of the baseline's top-k
retrieval failure with its 95% CI, from 07's ``recipe`` table (:func:`chunkstudy.stats.recipe.recipe_table`),
beside the reduction the paper cites from Anthropic where it cites one."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from . import figures


@figures._styled
def recipe_figure(recipe_df: pd.DataFrame) -> Figure:
    """One row per step (the baseline first, at 0): the reduction as a dot with its 95% CI (no interval where 07
    found no inference), each step's top-k failure in its label, and Anthropic's reported reduction as a hollow
    diamond where the paper cites one."""
    d = recipe_df.reset_index(drop=True)
    if d.empty:
        return figures.placeholder("Anthropic's recipe", "no recipe rows (retrieve.modes lacks bm25 or hybrid)")
    k = int(d["k"].iat[0])
    fig = figures._figure(8, 1.0 + 0.42 * len(d))
    ax = fig.add_subplot()
    y = np.arange(len(d))
    ok = d["inference"].astype(bool).to_numpy() if "inference" in d else np.ones(len(d), dtype=bool)
    for i, r in d.iterrows():
        red = float(r["reduction"]) * 100
        err = [[red - float(r["ci_low"]) * 100], [float(r["ci_high"]) * 100 - red]] if ok[i] else None
        ax.errorbar(red, y[i], xerr=err, fmt="o", color=figures.color(str(r["condition"])), ms=5, capsize=2, lw=1.2)
        if not pd.isna(r["anthropic"]):
            ax.scatter([float(r["anthropic"]) * 100], [y[i]], marker="D", s=40, facecolors="none",
                       edgecolors="#555555", zorder=3)
    ax.axvline(0, color="#999999", lw=0.8)
    ax.set_yticks(y, [f"{r.step}: {r.description}" + (f" ({r.reranker})" if r.reranker != "none" else "")
                      + f"\nfailure@{k} {100 * float(r.failure):.1f}%" for r in d.itertuples()], fontsize=7.5)
    ax.invert_yaxis()
    ax.set_xlabel(f"reduction of R0's top-{k} failure (1 \u2212 recall@{k}), %, 95% clustered CI")
    cited = "\n\u25c7 the reduction the paper cites from Anthropic [4]" if d["anthropic"].notna().any() else ""
    ax.set_title("Anthropic's recipe under the study's controls (exploratory)" + cited, loc="left", fontsize=10)
    return fig
