"""The cost figure (stage 08): the primary metric of each condition against what it cost, tokens the encoder read
and LLM tokens, one panel each, from 07's ``cost`` table (:func:`chunkstudy.stats.cost.cost_table`), the Pareto
front of each embedder marked and joined (docs/beyond.md, "Cost")."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from . import figures

#: The panels: (cost column, front column, axis label).
PANELS = (("tokens_read", "pareto_tokens", "tokens the encoder read"),
          ("llm_tokens", "pareto_llm", "LLM tokens (prompt + reply)"))


@figures._styled
def cost_front(cost: pd.DataFrame, metric: str, embedder: str) -> Figure:
    """``metric`` (07's ``quality``, no reranker) against each cost of :data:`PANELS` for the rows of
    ``embedder``: one point per condition in its colour (a hollow marker for a late-pooled one), labelled, the
    front's points ringed and joined in cost order. A panel whose cost is the same for every condition (no LLM
    in the run: all zero) says so in its title."""
    rows = cost[cost["embedder"] == embedder]
    if rows.empty:
        return figures.placeholder("Cost and quality", f"no cost rows for embedder {embedder!r}")
    fig = figures._figure(10, 3.8)
    axes = fig.subplots(1, len(PANELS), sharey=True)
    for ax, (col, front, label) in zip(np.atleast_1d(axes), PANELS):
        x = rows[col].astype(float)
        for r, xv in zip(rows.itertuples(), x):
            late = getattr(r, "embedding") == "late"
            ax.scatter([xv], [r.quality], s=36, color=figures.color(str(r.condition)) if not late else "white",
                       edgecolors=figures.color(str(r.condition)) if not late else "black", zorder=3)
            ax.annotate(str(r.condition), (xv, r.quality), textcoords="offset points", xytext=(4, 3), fontsize=7)
        on = rows[rows[front].astype(bool)].assign(_x=x).sort_values("_x")
        ax.plot(on["_x"], on["quality"], color="#555555", lw=1, ls="--", zorder=2, label="Pareto front")
        ax.scatter(on["_x"], on["quality"], s=120, facecolors="none", edgecolors="#d62728", lw=1.2, zorder=4)
        ax.set_xlabel(label)
        same = x.nunique(dropna=True) <= 1
        ax.set_title(f"{metric} vs {label}" + (" (the same for every condition)" if same else ""), loc="left",
                     fontsize=9)
    np.atleast_1d(axes)[0].set_ylabel(f"{metric} ({embedder}, no reranker)")
    np.atleast_1d(axes)[0].legend(frameon=False, loc="lower right")
    fig.suptitle("Quality against cost; ringed = on the Pareto front; hollow = late pooling (exploratory)",
                 x=0.01, ha="left", fontsize=10)
    return fig
