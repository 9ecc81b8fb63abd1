"""The paper's figures, drawn from a run's own tables (stage 08). Every function is pure: tables in, a
``matplotlib.figure.Figure`` out (built without pyplot, so no global figure state; saving is
``artifacts.write_figure``; the backend is the environment's, nothing here selects one), shown in Jupyter as an
image by itself (:class:`ShownFigure`). One style for all (:data:`STYLE`, :data:`CONDITION_COLORS`).

* :func:`mechanisms` — Figure 1: what each mechanism does to one real document of the run (boundaries of A0, A2
  and G2 along the document's character axis; the prefixes A1, A3 and P put before the same content; the
  sections stage 1 of A4 kept for one query).
* :func:`contrasts_forest` — Table 1 as a picture (primary cell, with the other cells faded as exploratory).
* :func:`dose_response` — cov-nDCG@10 against injected heading-path depth (A2 → A3-d1 → A3-d2 → A3).
* :func:`budget_coverage` — token-budget coverage at 512/1024/2048 tokens per condition.
* :func:`section_recall` — stage-1 section recall of the two-stage conditions (A4, G4).
* :func:`per_type` — the contrasts cut by query type.
* :func:`reranker_lift` — reranked minus not reranked, per condition.
* :func:`power_curves` — simulated power against the number of documents, per contrast (docs/design.md, "Power").

Numbers printed on figures are rounded here (stage 08) with the formatters of :mod:`chunkstudy.report.tables`.
"""

from __future__ import annotations

import io
import textwrap
from typing import Callable, Mapping, Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.text import Text

from .. import design, stats
from ..params import Params
from . import tables

#: rcParams applied to every figure (one consistent style).
STYLE: dict = {
    "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 8, "xtick.labelsize": 8,
    "ytick.labelsize": 8, "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
    "grid.alpha": 0.3, "grid.linewidth": 0.6, "figure.facecolor": "white", "savefig.bbox": "tight",
    "font.family": "DejaVu Sans",
    # text from the run (titles, headings, questions, condition names) is text: a "$" in a title must print as a
    # dollar sign, never start mathtext (an unbalanced or unknown TeX command crashed Figure 1)
    "text.parse_math": False,
}

#: One colour per condition, declared with it (:data:`chunkstudy.design.CONDITIONS`).
CONDITION_COLORS: dict[str, str] = {c.name: c.colour for c in design.CONDITIONS}
EMBEDDER_COLORS = ("#08519c", "#e6550d", "#31a354", "#7b3294")


def _first(role: str, plays: Callable[[design.Condition], bool]) -> str:
    """The first condition of :data:`chunkstudy.design.CONDITIONS` (in the paper's order) that ``plays`` Figure 1's
    ``role``, read from its declaration (its prefix kind's :class:`~chunkstudy.design.PrefixKind`, its boundaries,
    depth and routing), never its name: a renamed condition keeps its place in the figure, and a second condition
    of the same role (a second placebo) is drawn as any other."""
    for c in design.CONDITIONS:
        if plays(c):
            return c.name
    raise ImportError(f"chunkstudy.report.figures: no condition of design.CONDITIONS is Figure 1's {role}")


def _full_path(c: design.Condition, routing: str) -> bool:
    """The induced structure's own full heading path (A3; routed: A4)."""
    kind = c.prefix_kind
    return (c.boundaries == "induced" and kind.heading_path and not kind.control and c.depth is None
            and c.routing == routing)


#: Figure 1's conditions by role: the full induced heading path (A3), the placebo (P), the situating context
#: (A1) and the routed full path (A4); the unprefixed cuts under them are their chunk sets (A2, A0).
_FULL_PATH = _first("full heading path", lambda c: _full_path(c, "flat"))
_PLACEBO = _first("placebo", lambda c: c.prefix_kind.control)
_CONTEXT = _first("situating context", lambda c: c.prefix_kind.contexts)
_ROUTED = _first("routed full heading path", lambda c: _full_path(c, "two-stage"))


def color(condition: str) -> str:
    return CONDITION_COLORS.get(condition, "#444444")


def _control(condition: str) -> bool:
    """Conditions drawn dashed: a prefix that is not the document's own structure, one that reads the situating
    contexts or a control (:class:`~chunkstudy.design.PrefixKind`: A1's context, P's placebo)."""
    if condition not in design.CONDITION_NAMES:
        return False
    kind = design.condition(condition).prefix_kind
    return kind.contexts or kind.control


class ShownFigure(Figure):
    """A Figure that shows itself in Jupyter as an ``image/png`` output, under any backend. IPython draws a plain
    Figure only through the formatter matplotlib's inline backend registers when pyplot loads that backend, which
    figures built without pyplot never do: a cell ending in one printed ``<Figure size ...>`` in JupyterLab and in
    the runner's executed notebooks alike. The rich display protocol asks the object itself instead."""

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png", bbox_inches="tight")
        return buf.getvalue()


def _figure(w: float, h: float) -> Figure:
    with matplotlib.rc_context(STYLE):
        fig = ShownFigure(figsize=(w, h), layout="constrained")
    return fig


def _styled(fn):
    """Run a drawing function under :data:`STYLE` (rcParams are read when artists are created); every text of the
    figure it returns is plain text, never mathtext (``text.parse_math`` off on each text that exists then: those
    created under STYLE are already, and this also covers any made with an explicit setting; the ticks matplotlib
    adds while drawing show only numbers)."""
    def wrapper(*args, **kwargs):
        with matplotlib.rc_context(STYLE):
            fig = fn(*args, **kwargs)
        for t in fig.findobj(Text):
            t.set_parse_math(False)
        return fig
    wrapper.__doc__, wrapper.__name__ = fn.__doc__, fn.__name__
    setattr(wrapper, "__wrapped__", fn)
    return wrapper


@_styled
def placeholder(title: str, message: str) -> Figure:
    """A small figure that says why a plot is empty (a missing input or a run without that cell)."""
    fig = _figure(6, 1.6)
    ax = fig.add_subplot()
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, textwrap.fill(message, 90), ha="center", va="center", transform=ax.transAxes,
            color="#555555")
    return fig


# ---------------------------------------------------------------------------------------------------------------
# Figure 1
# ---------------------------------------------------------------------------------------------------------------

def example_chunk(chunks: pd.DataFrame, doc_id: str, condition: str) -> pd.Series | None:
    """The chunk of ``doc_id`` under ``condition`` that Figure 1 shows: the one with the longest prefix (the
    deepest heading path), ties to the earliest. None when the condition has no chunk in that document."""
    c = chunks[(chunks["condition"] == condition) & (chunks["doc_id"] == doc_id)]
    if c.empty:
        return None
    c = c.assign(_plen=c["prefix"].astype(str).str.len()).sort_values(["_plen", "start"], ascending=[False, True],
                                                                     kind="stable")
    return c.iloc[0].drop("_plen")


def section_extents(chunks: pd.DataFrame, doc_id: str, condition: str) -> pd.DataFrame:
    """Per route_key (top-level section) of ``doc_id`` under ``condition``: its character extent ``[start, end)``
    as the span of its chunks, in document order."""
    c = chunks[(chunks["condition"] == condition) & (chunks["doc_id"] == doc_id)]
    if c.empty:
        return pd.DataFrame(columns=["route_key", "start", "end"])
    g = c.groupby(c["route_key"].astype(str), sort=False).agg(start=("start", "min"), end=("end", "max"))
    return g.reset_index().sort_values("start", kind="stable").reset_index(drop=True)


def routing_example(section_recall_df: pd.DataFrame | None, queries: pd.DataFrame | None, doc_id: str,
                    condition: str, embedder: str | None = None) -> dict | None:
    """For Figure 1: the first query (by query_id) of ``doc_id`` with a stage-1 record under ``condition``
    (``embedder`` if given, else the first embedder), as a dict: query_id, text, spans, kept (route_keys of
    ``doc_id`` stage 1 kept), n_kept, n_other_docs, section_recall. None when there is none."""
    if section_recall_df is None or queries is None or section_recall_df.empty:
        return None
    need = {"routed_doc_ids", "routed_route_keys"}
    if not need <= set(section_recall_df.columns):
        return None
    sr = section_recall_df[(section_recall_df["condition"] == condition)
                           & (section_recall_df["reranker"].astype(str) == "none")]
    if embedder is not None and (sr["embedder"] == embedder).any():
        sr = sr[sr["embedder"] == embedder]
    q = queries[queries["doc_id"].astype(str) == str(doc_id)]
    sr = sr[sr["query_id"].astype(str).isin(set(q["query_id"].astype(str)))]
    if sr.empty:
        return None
    sr = sr.sort_values(["embedder", "query_id"], kind="stable")
    row = sr.iloc[0]
    qrow = q[q["query_id"].astype(str) == str(row["query_id"])].iloc[0]
    docs = [str(d) for d in row["routed_doc_ids"]]
    keys = [str(k) for k in row["routed_route_keys"]]
    kept = [k for d, k in zip(docs, keys) if d == str(doc_id)]
    rec = row["section_recall"]
    return {"query_id": str(row["query_id"]), "text": str(qrow.get("text", "")), "embedder": str(row["embedder"]),
            "spans": [[int(a), int(b)] for a, b in qrow["spans"]], "kept": kept, "n_kept": len(docs),
            "n_other_docs": len({d for d in docs if d != str(doc_id)}),
            "section_recall": None if pd.isna(rec) else bool(rec)}


def _bars(ax, y: float, starts: Sequence[int], ends: Sequence[int], base: str, height: float = 0.6) -> None:
    spans = [(int(s), int(e) - int(s)) for s, e in zip(starts, ends)]
    shades = [base if i % 2 == 0 else _lighter(base) for i in range(len(spans))]
    ax.broken_barh(spans, (y - height / 2, height), facecolors=shades, edgecolors="white", linewidth=0.8)


def _lighter(hex_color: str, amount: float = 0.45) -> tuple:
    rgb = np.array(matplotlib.colors.to_rgb(hex_color))
    return tuple(rgb + (1 - rgb) * amount)


def _short(s: str, width: int, lines: int) -> str:
    wrapped = textwrap.wrap(" ".join(str(s).split()), width) or [""]
    out = wrapped[:lines]
    if len(wrapped) > lines:
        out[-1] = out[-1][: max(0, width - 2)] + " \u2026"
    return "\n".join(out)


def _example_document(documents: pd.DataFrame, doc_id: str | None) -> tuple[str, str, str]:
    """Figure 1's document: its doc_id (None = the first of ``documents``), flat text and title; an empty table or
    a doc_id that is not in it raises ValueError (the latter naming ``figures.example_doc``)."""
    if documents.empty:
        raise ValueError("mechanisms: the documents table is empty (01_corpus)")
    doc_id = str(documents["doc_id"].iat[0]) if doc_id is None else str(doc_id)
    drow = documents[documents["doc_id"].astype(str) == doc_id]
    if drow.empty:
        raise ValueError(f"mechanisms: figures.example_doc {doc_id!r} is not in documents; first documents: "
                         f"{documents['doc_id'].astype(str).head(5).tolist()}")
    return doc_id, str(drow["text"].iat[0]), str(drow["title"].iat[0])


def _boundaries_panel(ax, dc: pd.DataFrame, ex: pd.Series | None, n: int, title: str, doc_id: str) -> None:
    """Figure 1's top panel (and the figure's title): one row of alternating bars per unprefixed chunk set with
    chunks in the document (``dc``: its chunks, content offsets ``[start, end)`` on the x axis of ``n``
    characters), its chunk count beside it, and the example chunk ``ex`` outlined on its chunk set's row."""
    rows = [c for c in design.CHUNK_SETS if (dc["condition"] == c).any()]
    labels = {c: f"{c} {design.BOUNDARIES[design.CHUNK_SETS[c].boundaries].label}" for c in rows}
    for i, c in enumerate(rows):
        cc = dc[dc["condition"] == c].sort_values("start")
        _bars(ax, len(rows) - 1 - i, cc["start"], cc["end"], color(c))
        ax.text(n * 1.005, len(rows) - 1 - i, f"{len(cc)} chunks", va="center", fontsize=8, color="#555555")
    cut = design.condition(_FULL_PATH).chunk_set  # the unprefixed chunks the example chunk is one of
    if ex is not None and cut in rows:
        y = len(rows) - 1 - rows.index(cut)
        ax.add_patch(matplotlib.patches.Rectangle((int(ex["start"]), y - 0.42), int(ex["end"]) - int(ex["start"]),
                                                  0.84, fill=False, edgecolor="black", linewidth=1.4))
    ax.set_yticks(range(len(rows)), [labels[c] for c in reversed(rows)])
    ax.set_xlim(0, n)
    ax.set_ylim(-0.6, max(len(rows), 1) - 0.4)
    ax.set_xlabel("character offset in the document's flat text (content only; headings are not in the text)")
    ax.grid(False)
    ax.set_title(f"Figure 1 \u2014 {title} ({doc_id}): boundaries, routing and prefixes", loc="left")
    if not rows:
        ax.text(0.5, 0.5, "no A0/A2/G2 chunks for this document", transform=ax.transAxes, ha="center")


def _routing_panel(ax, chunks: pd.DataFrame, doc_id: str, n: int, section_recall_df: pd.DataFrame | None,
                   queries: pd.DataFrame | None, embedder: str | None) -> None:
    """Figure 1's middle panel: the routed condition's top-level sections of the document along the same
    character axis (``n`` characters), those stage 1 kept for one query (:func:`routing_example`) in its colour,
    the query's gold spans in black (at least ``n / 400`` wide, so a short one shows), and a title saying what
    stage 1 kept; a note instead when there is no two-stage record for a query of this document."""
    route = routing_example(section_recall_df, queries, doc_id, _ROUTED, embedder)
    ext = section_extents(chunks, doc_id, _ROUTED)
    ax.grid(False)
    ax.set_yticks([0.5], [f"{_ROUTED} top-level sections"])
    if ext.empty or route is None:
        ax.text(0.5, 0.5, f"{_ROUTED} routing: no two-stage record for a query of this document", ha="center",
                va="center", transform=ax.transAxes, color="#555555")
    else:
        kept = set(route["kept"])
        for s, e, k in zip(ext["start"], ext["end"], ext["route_key"]):
            ax.broken_barh([(int(s), int(e) - int(s))], (0.25, 0.5), facecolors=color(_ROUTED) if k in kept
                           else "#e0e0e0", edgecolors="white", linewidth=1.0)
        for s, e in route["spans"]:
            ax.broken_barh([(s, max(e - s, n / 400))], (0.02, 0.16), facecolors="black")
        rec = {True: "kept gold evidence", False: "missed all gold evidence", None: "undefined"}[
            route["section_recall"]]
        ax.set_title(
            _short(f"{_ROUTED} stage 1 for query {route['query_id']} \u201c{route['text']}\u201d: kept {len(kept)} "
                   f"section(s) of this document (in {_ROUTED}'s colour) and {route['n_kept'] - len(kept)} in "
                   f"{route['n_other_docs']} other document(s); section recall: {rec}. Black: gold spans.", 150, 2),
            loc="left", fontsize=8)
        ax.set_ylim(0, 1)
    ax.tick_params(labelbottom=False)


def _prefixes_panel(ax, dc: pd.DataFrame, ex: pd.Series | None, text: str) -> None:
    """Figure 1's bottom panel, in axes coordinates (top down): the prefix each of the full heading path, the
    placebo and the situating context put before the example chunk ``ex``'s content (the context of the window
    of ``dc`` holding its start), each shortened to fit, then that content (``text[start:end]``); a note when
    the document has no example chunk."""
    ax.axis("off")
    if ex is None:
        ax.text(0, 0.5, f"no {_FULL_PATH} chunk in this document", transform=ax.transAxes)
        return
    s, e = int(ex["start"]), int(ex["end"])
    same = dc[(dc["start"] == s) & (dc["end"] == e)].set_index("condition")
    a1 = dc[(dc["condition"] == _CONTEXT) & (dc["start"] <= s) & (dc["end"] > s)]
    windows = design.condition(_CONTEXT).chunk_set
    lines = [(_FULL_PATH, f"heading path (depth {design.FULL_DEPTH})", str(ex["prefix"])),
             (_PLACEBO, "placebo: a real path from another document",
              str(same.loc[_PLACEBO, "prefix"]) if _PLACEBO in same.index else f"({_PLACEBO} not in this run)"),
             (_CONTEXT, f"situating context of the {windows} window holding this chunk's start",
              str(a1["prefix"].iat[0]) if len(a1) else f"({_CONTEXT} not in this run)")]
    y = 0.97
    ax.text(0, y, f"Prefixes put before the same content (outlined chunk, characters [{s}, {e})):",
            transform=ax.transAxes, va="top", fontweight="bold")
    y -= 0.12
    for cond, what, prefix in lines:
        ax.text(0, y, cond, transform=ax.transAxes, va="top", color=color(cond), fontweight="bold")
        body = _short(prefix.strip() or "(empty)", 118, 3 if cond == _CONTEXT else 1)
        ax.text(0.075, y, f"{what}:\n{body}", transform=ax.transAxes, va="top", family="DejaVu Sans Mono",
                fontsize=7.5)
        y -= 0.13 + 0.065 * body.count("\n") + 0.065
    ax.text(0, y, "content", transform=ax.transAxes, va="top", fontweight="bold", color="#333333")
    ax.text(0.075, y, _short(text[s:e], 118, 2), transform=ax.transAxes, va="top", family="DejaVu Sans Mono",
            fontsize=7.5, color="#333333")


@_styled
def mechanisms(documents: pd.DataFrame, chunks: pd.DataFrame, doc_id: str | None = None,
               queries: pd.DataFrame | None = None, section_recall_df: pd.DataFrame | None = None,
               embedder: str | None = None) -> Figure:
    """Figure 1 (paper §3.1): what each mechanism does to one document of the run.

    Top: chunk boundaries of A0 (fixed windows), A2 (induced structure) and G2 (gold structure) as alternating
    bars along the document's character axis (content offsets, half-open). Middle: the top-level sections of A4
    coloured by whether stage 1 kept them for one query of this document, with that query's gold spans.
    Bottom: the prefixes A1, A3 and P put before the same content at embedding time (the A3 chunk with the
    deepest heading path; A1 shows the context of the A0 window holding that chunk's start).
    ``doc_id`` None = the first document of ``documents``."""
    doc_id, text, title = _example_document(documents, doc_id)
    dc = chunks[chunks["doc_id"].astype(str) == doc_id]
    ex = example_chunk(chunks, doc_id, _FULL_PATH)
    fig = _figure(11, 7.2)
    gs = fig.add_gridspec(3, 1, height_ratios=[2.1, 1.0, 2.3])
    ax = fig.add_subplot(gs[0])
    _boundaries_panel(ax, dc, ex, len(text), title, doc_id)
    _routing_panel(fig.add_subplot(gs[1], sharex=ax), chunks, doc_id, len(text), section_recall_df, queries,
                   embedder)
    _prefixes_panel(fig.add_subplot(gs[2]), dc, ex, text)
    return fig


# ---------------------------------------------------------------------------------------------------------------
# Result figures
# ---------------------------------------------------------------------------------------------------------------

@_styled
def contrasts_forest(contrasts: pd.DataFrame, metric: str,
                     marks: Mapping[str, str] | None = None) -> Figure:
    """Table 1 as a forest plot: Δ and 95% CI of each contrast in every cell of ``metric``; the primary
    (confirmatory) cell drawn solid and labelled with its Holm p, the other cells hollow (exploratory). A row not
    fit for inference (07's ``inference`` false) is drawn as its Δ alone, without a CI, and labelled "no
    inference" instead of a p; a contrast of ``marks`` (its placebo is not clean,
    :func:`chunkstudy.report.tables.placebo_marks`) carries the mark and "placebo not clean" on its axis label."""
    marks = dict(marks or {})
    c = contrasts[(contrasts["metric"] == metric)] if "metric" in contrasts else contrasts
    c = c[c["mean_delta"].notna()]
    if c.empty:
        return placeholder("Pre-registered contrasts", f"no computed contrast for {metric}")
    c = c.assign(_ok=tables.inference_mask(c))
    names = list(dict.fromkeys(c["contrast"]))
    cells = list(dict.fromkeys(c["cell"]))
    fig = _figure(8, 1.0 + 0.75 * len(names))
    ax = fig.add_subplot()
    width = 0.7 / max(len(cells), 1)
    first = {cell: names.index(c[c["cell"] == cell]["contrast"].iat[0]) for cell in cells}  # one legend entry each
    user = set(c.loc[c["label"] == stats.USER_ADDED, "contrast"]) if "label" in c else set()
    for j, cell in enumerate(cells):
        sub = c[c["cell"] == cell].set_index("contrast")
        cell_conf = bool(sub["confirmatory"].any()) if "confirmatory" in sub else j == 0
        for i, name in enumerate(names):
            if name not in sub.index:
                continue
            r = sub.loc[name]
            conf = bool(r["confirmatory"]) if "confirmatory" in sub else cell_conf  # a user row never is
            y = i - 0.35 + width * (j + 0.5)
            col = EMBEDDER_COLORS[j % len(EMBEDDER_COLORS)] if not cell_conf else "black"
            xerr = [[r["mean_delta"] - r["ci_low"]], [r["ci_high"] - r["mean_delta"]]] if r["_ok"] else None
            ax.errorbar(r["mean_delta"], y, xerr=xerr,
                        fmt="o", color=col, mfc=col if conf else "white", ms=5 if conf else 4, capsize=2,
                        lw=1.4 if conf else 0.8,
                        label=f"{cell}{' (confirmatory)' if cell_conf else ''}" if i == first.get(cell) else None)
            if conf:
                text = f"Holm p {tables.fmt_p(r['p_holm'], r.get('n_boot'))}" if r["_ok"] else \
                    "no inference (too few documents or resamples)"
                ax.annotate(text, (r["ci_high"] if r["_ok"] else r["mean_delta"], y),
                            xytext=(4, 0), textcoords="offset points", va="center", fontsize=7.5)
    ax.axvline(0, color="#999999", lw=0.8)
    ax.set_yticks(range(len(names)), [
        f"{n}: {a} \u2212 {b}" + (f" {tables.PLACEBO_MARK}\n(placebo not clean)" if n in marks else "")
        + (f" {tables.USER_MARK}\n(user-added, exploratory)" if n in user else "")
        for n, a, b in c.drop_duplicates("contrast")[["contrast", "condition_a", "condition_b"]]
        .itertuples(index=False)])
    ax.invert_yaxis()
    ax.set_xlabel(f"\u0394 {metric} (paired mean, 95% document-clustered bootstrap CI)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    ax.set_title("Pre-registered contrasts: primary cell solid; other cells exploratory"
                 + (f"\n{tables.USER_MARK} user-added: exploratory, a Holm family of their own" if user else ""),
                 loc="left")
    return fig


@_styled
def dose_response(dose: pd.DataFrame) -> Figure:
    """Exploratory depth dose-response: the mean of the primary metric at injected heading-path depth 0..3
    (A2 → A3-d1 → A3-d2 → A3) per embedder (solid: no reranker; dashed: reranked), with the bootstrap slope
    per level and its CI in the legend."""
    ladder = design.depth_ladder()
    need = [f"mean_d{d}" for _, d in ladder]
    if dose.empty or not set(need) <= set(dose.columns) or dose[need].isna().all().all():
        return placeholder("Depth dose-response", "no dose-response rows ("
                           + "/".join(c for c, _ in ladder) + " not scored)")
    fig = _figure(6.4, 4.0)
    ax = fig.add_subplot()
    embedders = list(dict.fromkeys(dose["embedder"]))
    for r in dose.itertuples(index=False):
        y = np.array([getattr(r, m) for m in need], dtype=float)
        col = EMBEDDER_COLORS[embedders.index(r.embedder) % len(EMBEDDER_COLORS)]
        ls = "-" if r.reranker == "none" else "--"
        ci = tables.fmt_ci(r.ci_low, r.ci_high) if getattr(r, "inference", True) else "(no inference)"
        ax.plot(range(len(need)), y, marker="o", color=col, ls=ls,
                label=f"{r.embedder}, rerank {r.reranker}: slope {tables.fmt_delta(r.slope)}/level {ci}")
    ax.set_xticks(range(len(ladder)), [f"{c}\n(depth {d})" if d else f"{c}\n(no path)" for c, d in ladder])
    ax.set_ylabel(f"mean {dose['metric'].iat[0] if 'metric' in dose else design.PRIMARY_METRIC.key}")
    ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    ax.set_title("Breadcrumb depth dose-response (exploratory)", loc="left")
    return fig


@_styled
def budget_coverage(condition_means: pd.DataFrame, embedder: str, reranker: str) -> Figure:
    """Token-budget coverage curves: mean budget-cov@B against the budget B (512/1024/2048 tokens, prefix tokens
    charged) for every condition, on one embedder × reranker."""
    family = design.metric("budget-cov")
    budget = condition_means["metric"].astype(str).map(family.argument)
    m = condition_means[budget.notna() & (condition_means["embedder"] == embedder)
                        & (condition_means["reranker"] == reranker)]
    if m.empty:
        return placeholder("Token-budget coverage", f"no {family.key} metrics for {embedder} × {reranker}")
    m = m.assign(budget=budget[m.index].astype(int))
    fig = _figure(6.4, 4.2)
    ax = fig.add_subplot()
    for cond in tables._order(m["condition"], design.CONDITION_NAMES):
        s = m[m["condition"] == cond].sort_values("budget")
        ax.plot(s["budget"], s["mean"], marker="o", ms=3.5, color=color(cond), label=cond,
                ls="--" if _control(cond) else "-")
    budgets = sorted(m["budget"].unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(budgets, [str(b) for b in budgets])
    ax.minorticks_off()
    ax.set_xlabel("context budget (tokens; prefix tokens count against it)")
    ax.set_ylabel("mean gold-evidence coverage")
    ax.legend(ncol=2, frameon=False, loc="best")
    ax.set_title(f"Token-budget coverage ({embedder} embedder, reranker {reranker})", loc="left")
    return fig


@_styled
def section_recall(summary: pd.DataFrame) -> Figure:
    """Stage-1 section recall of the two-stage conditions (bars per condition, one per embedder × reranker, with
    ±1.96 binomial SE), from 05's ``section_recall_summary`` (:func:`chunkstudy.retrieve.section_recall_summary`)."""
    if summary.empty:
        return placeholder("Section recall", "no two-stage condition in this run")
    fig = _figure(5.6, 3.6)
    ax = fig.add_subplot()
    conds = tables._order(summary["condition"], design.CONDITION_NAMES)
    groups = list(dict.fromkeys(zip(summary["embedder"], summary["reranker"])))
    width = 0.8 / len(groups)
    for j, (e, r) in enumerate(groups):
        s = summary[(summary["embedder"] == e) & (summary["reranker"] == r)].set_index("condition").reindex(conds)
        x = np.arange(len(conds)) - 0.4 + width * (j + 0.5)
        ax.bar(x, s["section_recall"], width * 0.9, yerr=1.96 * s["se"], capsize=3,
               color=EMBEDDER_COLORS[j % len(EMBEDDER_COLORS)], label=f"{e}" + ("" if r == "none" else f", {r}"))
        for xi, v, nd in zip(x, s["section_recall"], s["n_defined"]):
            if not pd.isna(v):
                ax.text(xi, 0.02, f"{tables.fmt_num(v, 2)}\nn={tables.fmt_int(nd)}", ha="center", va="bottom",
                        fontsize=7, color="white")
    ax.set_xticks(range(len(conds)), conds)
    ax.set_ylim(0, 1)
    ax.set_ylabel("P(stage 1 keeps a gold-bearing section)")
    ax.legend(frameon=False, title="embedder")
    ax.set_title("Section recall of route-to-section retrieval", loc="left")
    return fig


@_styled
def per_type(per_type_df: pd.DataFrame, embedder: str, reranker: str,
             marks: Mapping[str, str] | None = None) -> Figure:
    """The contrasts cut by query type (exploratory): one panel per contrast, Δ and 95% CI per query type (Δ
    alone where 07 found no inference possible); a contrast of ``marks`` (placebo not clean) is marked in its
    panel title."""
    marks = dict(marks or {})
    d = per_type_df
    if "embedder" in d:
        d = d[(d["embedder"] == embedder) & (d["reranker"] == reranker)]
    d = d[d["mean_delta"].notna()]
    if d.empty:
        return placeholder("Per-query-type cuts", f"no per-type rows for {embedder} × {reranker}")
    d = d.assign(_ok=tables.inference_mask(d))
    names = list(dict.fromkeys(d["contrast"]))
    fig = _figure(2.6 * len(names) + 0.8, 0.9 + 0.35 * d["qtype"].nunique())
    axes = fig.subplots(1, len(names), sharey=True, squeeze=False)[0]
    qtypes = sorted(d["qtype"].unique())
    for ax, name in zip(axes, names):
        s = d[d["contrast"] == name].set_index("qtype").reindex(qtypes)
        y = np.arange(len(qtypes))
        ok = (s["mean_delta"].notna() & s["_ok"].fillna(False).astype(bool)).to_numpy()
        ax.errorbar(s["mean_delta"][ok], y[ok], xerr=[(s["mean_delta"] - s["ci_low"])[ok],
                                                      (s["ci_high"] - s["mean_delta"])[ok]],
                    fmt="o", color="black", ms=4, capsize=2, lw=1)
        bare = (s["mean_delta"].notna() & ~s["_ok"].fillna(False).astype(bool)).to_numpy()
        ax.plot(s["mean_delta"][bare], y[bare], "o", color="black", mfc="white", ms=4)
        ax.axvline(0, color="#999999", lw=0.8)
        a, b = s["condition_a"].dropna().iat[0], s["condition_b"].dropna().iat[0]
        ax.set_title(f"{name}: {a} \u2212 {b}" + (f" {tables.PLACEBO_MARK} placebo not clean" if name in marks else ""),
                     fontsize=9)
        ax.set_yticks(y, qtypes)
        ax.set_xlabel("\u0394 (95% CI)")
    axes[0].invert_yaxis()
    fig.suptitle(f"Contrasts by query type ({embedder}, reranker {reranker}; exploratory, unadjusted"
                 + ("; hollow = no inference, \u0394 only" if (~d["_ok"]).any() else "") + ")",
                 x=0.01, ha="left", fontsize=10)
    return fig


@_styled
def reranker_lift(lift: pd.DataFrame) -> Figure:
    """Reranker lift per condition: reranked minus not reranked mean (07's ``reranker_lift``,
    :func:`chunkstudy.stats.reranker_lift`), one bar group per condition, one bar per reranker."""
    if lift.empty:
        return placeholder("Reranker lift", "no reranked cell in this run (retrieve.rerankers is empty)")
    conds = tables._order(lift["condition"], design.CONDITION_NAMES)
    rerankers = list(dict.fromkeys(lift["reranker"]))
    fig = _figure(max(5.0, 0.6 * len(conds) + 1.5), 3.6)
    ax = fig.add_subplot()
    width = 0.8 / len(rerankers)
    for j, r in enumerate(rerankers):
        s = lift[lift["reranker"] == r].set_index("condition").reindex(conds)
        x = np.arange(len(conds)) - 0.4 + width * (j + 0.5)
        ax.bar(x, s["lift"], width * 0.9, color=[color(c) for c in conds], edgecolor="black" if j else "none",
               label=r)
    ax.axhline(0, color="#555555", lw=0.8)
    ax.set_xticks(range(len(conds)), conds)
    ax.set_ylabel("\u0394 mean (reranked \u2212 none)")
    ax.legend(frameon=False, title="reranker")
    ax.set_title("Reranker lift per condition (exploratory)", loc="left")
    return fig


@_styled
def power_curves(power_df: pd.DataFrame) -> Figure:
    """The power analysis (07 ``power``): simulated power against the number of documents (log scale), one line
    per contrast with a ±1.96 Monte Carlo SE band, one panel per effect scenario (this run's effect; the paper's
    dz); the target power dashed, this corpus's size dotted."""
    d = power_df[power_df["power"].notna()] if "power" in power_df else power_df.iloc[0:0]
    if d.empty:
        return placeholder("Power analysis", "no simulated power (no contrast could be simulated)")
    scenarios = list(dict.fromkeys(d["scenario"]))
    names = list(dict.fromkeys(power_df["contrast"]))
    fig = _figure(4.2 * len(scenarios) + 0.6, 4.4)
    axes = fig.subplots(1, len(scenarios), sharey=True, squeeze=False)[0]
    target = float(power_df["target_power"].iat[0])
    n_obs = int(power_df["n_docs_observed"].iat[0])
    for ax, scenario in zip(axes, scenarios):
        sub = d[d["scenario"] == scenario]
        for i, name in enumerate(names):
            c = sub[sub["contrast"] == name].sort_values("n_docs")
            if c.empty:
                continue
            col = EMBEDDER_COLORS[i % len(EMBEDDER_COLORS)]
            lo = (c["power"] - 1.96 * c["mc_se"]).clip(0, 1)
            hi = (c["power"] + 1.96 * c["mc_se"]).clip(0, 1)
            ax.fill_between(c["n_docs"], lo, hi, color=col, alpha=0.15, lw=0)
            ax.plot(c["n_docs"], c["power"], marker="o", ms=3, color=col,
                    label=f"{name}: {c['condition_a'].iat[0]} \u2212 {c['condition_b'].iat[0]} "
                          f"(dz {tables.fmt_delta(c['target_dz'].iat[0], 2)})")
        ax.axhline(target, color="#555555", ls="--", lw=0.9)
        ax.axvline(n_obs, color="#555555", ls=":", lw=0.9)
        ax.annotate(f"this corpus: {tables.fmt_int(n_obs)}", (n_obs, 0.97), xytext=(3, 0),
                    textcoords="offset points", fontsize=7.5, color="#555555", va="top")
        ax.set_xscale("log")
        grid = sorted(power_df["n_docs"].unique())
        ax.set_xticks(grid, [tables.fmt_int(n) for n in grid], rotation=45 if len(grid) > 6 else 0)
        ax.minorticks_off()
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("documents in the corpus (simulated)")
        source = tables.paper_source_label(sub["effect_source"].iat[0]) if "effect_source" in sub else scenario
        ax.set_title(f"effect: {source}", loc="left")
        ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=2, fontsize=7)
    axes[0].set_ylabel(f"power (Holm p < {tables.fmt_num(power_df['alpha'].iat[0], 2)}, clustered bootstrap)"
                       if "alpha" in power_df else "power")
    fig.suptitle(f"Power vs. corpus size ({tables.fmt_int(power_df['n_sims'].iat[0])} simulated studies per size; "
                 f"band \u00b1 1.96 MC SE; dashed: {tables.fmt_pct(target, 0)})" if "n_sims" in power_df else
                 "Power vs. corpus size", x=0.01, ha="left", fontsize=10)
    return fig


def all_figures(inputs: Mapping[str, pd.DataFrame | None], params: Params, doc_id: str | None = None) -> dict:
    """Every figure of the report from the tables in ``inputs`` (keys as in :data:`chunkstudy.artifacts.TABLES`;
    a missing or None table gives a :func:`placeholder` saying so). ``params`` = ``cfg.params()``. Returns
    ``{name: Figure}`` in report order."""
    st = params.stats
    metric, emb, rr = params.primary_cell
    marks = tables.placebo_marks(inputs.get("placebo_buckets"), st.contrasts)

    def have(*names: str) -> bool:
        return all(inputs.get(n) is not None for n in names)

    figs: dict[str, Figure] = {}
    figs["fig1_mechanisms"] = mechanisms(inputs["documents"], inputs["chunks"], doc_id, inputs.get("queries"),
                                         inputs.get("section_recall"), emb) if have("documents", "chunks") else \
        placeholder("Figure 1", "documents (01) or chunks (04) missing")
    user = inputs.get("user_contrasts")
    both = pd.concat([inputs["contrasts"], user], ignore_index=True) \
        if have("contrasts") and user is not None and len(user) else inputs.get("contrasts")
    figs["fig_contrasts"] = contrasts_forest(both, metric, marks) if have("contrasts") else \
        placeholder("Contrasts", "contrasts (07) missing")
    figs["fig_dose_response"] = dose_response(inputs["dose_response"]) if have("dose_response") else \
        placeholder("Depth dose-response", "dose_response (07) missing")
    figs["fig_budget_coverage"] = budget_coverage(inputs["condition_means"], emb, rr) if have("condition_means") \
        else placeholder("Token-budget coverage", "condition_means (07) missing")
    figs["fig_section_recall"] = section_recall(inputs["section_recall_summary"]) \
        if have("section_recall_summary") else placeholder("Section recall", "section_recall_summary (05) missing")
    figs["fig_per_type"] = per_type(inputs["per_type"], emb, rr, marks) if have("per_type") else \
        placeholder("Per-query-type cuts", "per_type (07) missing")
    figs["fig_reranker_lift"] = reranker_lift(inputs["reranker_lift"]) if have("reranker_lift") else \
        placeholder("Reranker lift", "reranker_lift (07) missing")
    figs["fig_power"] = power_curves(inputs["power"]) if have("power") else \
        placeholder("Power analysis", "power (07) missing")
    return figs
