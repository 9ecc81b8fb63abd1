"""The paper's tables, rebuilt from a run's own tables (stage 08; paper §6, Tables 1, 2 and 4, and the funnel and
construction numbers of §3-§5). Also the only place in the project that rounds numbers.

Every builder is pure: it takes the tables of stages 01-07 and returns a :class:`Table`, which keeps two views:

* ``data``: the unrounded values (what tests check, and what a reader can recompute);
* ``display``: the same rows as strings, rounded by the formatters below (:func:`fmt_num`, :func:`fmt_delta`,
  :func:`fmt_p`, :func:`fmt_ci`, :func:`fmt_pct`, :func:`fmt_int`), rendered to Markdown (``tabulate``, pipe
  format) and LaTeX (``booktabs``: ``\\toprule``/``\\midrule``/``\\bottomrule``).

Rounding policy (stated once): cov-nDCG and other metric means to 3 decimals; paired deltas, CIs and slopes to 4
decimals with an explicit sign; dz to 2 decimals; p-values to 3 decimals, ``< 0.001`` below that, and
``< 1/B`` when a bootstrap p is exactly 0 (no replicate crossed 0 among ``B`` resamples); shares as percentages
with 1 decimal; token means to 1 decimal. A missing value prints as an em dash.

The paper's own numbers (the ``paper`` columns, :data:`PAPER`) come from :mod:`chunkstudy.paper`, their one home.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from . import design, paper, stages
from .config import SCHEMA

#: Display order of conditions (the paper's), from the declared conditions (:mod:`chunkstudy.design`).
CONDITION_ORDER: tuple[str, ...] = design.CONDITION_NAMES
#: Display order of metrics (primary first, then the secondary ladder) under the default ``metrics`` parameters;
#: tables order any metric name by :func:`chunkstudy.design.metric_order_key`.
METRIC_ORDER: tuple[str, ...] = tuple(design.metric_names({k: p.default for k, p in SCHEMA["metrics"].items()}))
#: The mechanism question each pre-registered contrast asks (paper §3.2), keyed by (condition_a, condition_b).
CONTRAST_QUESTIONS: dict[tuple[str, str], str] = {(c.a, c.b): c.question for c in design.CONTRASTS}
#: Table 4 of the paper (appendix; DESIGN.md "Conditions"): boundaries, prefix at embedding time, retrieval, from
#: each declared condition (:meth:`chunkstudy.design.Condition.table4`, stage 1 keeping the paper's 5 sections).
CONDITIONS: dict[str, tuple[str, str, str]] = {
    c.name: c.table4(paper.value("study", "design", "route_sections")) for c in design.CONDITIONS}

#: Which query-funnel step (03 ``query_funnel``) each paper count stands beside, by corpus kind.
PAPER_QUERY_STEPS: dict[str, dict[str, str]] = {
    "wikipedia": {"generated": "generated", "paraphrase survivors (round 2)": "survivors",
                  "balanced finals": "finals", "documents": "documents"},
    "qasper": {"harvested": "harvested", "finals": "finals", "documents": "documents"},
}


def _paper_tables(kind: str) -> dict[str, Any]:
    """The paper's numbers in the shape the funnel/construction tables use, read from :mod:`chunkstudy.paper`."""
    ind = paper.values(kind, "induction")
    ind.setdefault("gold_sections_per_doc", math.nan)
    c = paper.values(kind, "corpus")
    pct = {k: f"{100 * v:g}%" for k, v in c.items() if isinstance(v, float) and v < 1}
    if kind == "wikipedia":
        b = paper.values(kind, "topic_buckets")
        seed = paper.value("study", "design", "seed")
        corpus = [f"{c['documents']} Featured Articles (>= {c['min_words']:,} words, heading depth >= "
                  f"{c['min_heading_depth']}, >= {c['min_sections']} sections), seed {seed}",
                  "buckets: " + ", ".join(f"{k.replace('_', '/')} {v}" for k, v in b.items())]
    else:
        corpus = [f"all splits merged: {c['questions']:,} -> {c['usable']:,} usable questions over {c['papers']:,} "
                  "papers",
                  f"evidence matched {pct['share_exact']} exact; {pct['multi_span']} multi-span "
                  f"({pct['multi_span_appendix']} in its appendix); mean {c['spans_per_question']:.2f} "
                  f"spans/question; {pct['share_depth1_papers']} depth-1 papers"]
    q = paper.values(kind, "queries")
    return {"label": paper.label(kind), "induction": ind, "size_matching": paper.values(kind, "size_matching"),
            "queries": {step: q[key] for step, key in PAPER_QUERY_STEPS[kind].items()}, "corpus": corpus}


#: The paper's numbers for the funnel/construction tables, by corpus kind (``corpus.kind``); one home:
#: :mod:`chunkstudy.paper`.
PAPER: dict[str, dict[str, Any]] = {kind: _paper_tables(kind) for kind in ("wikipedia", "qasper")}

DASH = "\u2014"


# ---------------------------------------------------------------------------------------------------------------
# Formatting (the only rounding in the project)
# ---------------------------------------------------------------------------------------------------------------

def _missing(x: Any) -> bool:
    if x is None or x is pd.NA:
        return True
    try:
        return bool(np.isnan(x))
    except (TypeError, ValueError):
        return False


def fmt_num(x: Any, digits: int = 3) -> str:
    """``x`` to ``digits`` decimals; missing -> em dash."""
    return DASH if _missing(x) else f"{float(x):.{digits}f}"


def fmt_delta(x: Any, digits: int = 4) -> str:
    """A signed difference, e.g. ``+0.0129`` / ``-0.0326``; missing -> em dash."""
    return DASH if _missing(x) else f"{float(x):+.{digits}f}"


def fmt_int(x: Any) -> str:
    """An integer with thousands separators (``1,579``); missing -> em dash."""
    return DASH if _missing(x) else f"{int(round(float(x))):,}"


def fmt_pct(x: Any, digits: int = 1) -> str:
    """A share in [0, 1] as a percentage (``0.789`` -> ``78.9%``); missing -> em dash."""
    return DASH if _missing(x) else f"{100 * float(x):.{digits}f}%"


def fmt_ci(lo: Any, hi: Any, digits: int = 4) -> str:
    """A signed interval ``[+0.0100, +0.0300]``; missing -> em dash."""
    if _missing(lo) or _missing(hi):
        return DASH
    return f"[{float(lo):+.{digits}f}, {float(hi):+.{digits}f}]"


def fmt_p(p: Any, n_boot: Any = None) -> str:
    """A p-value: 3 decimals; ``< 0.001`` below 0.001; ``< 1/B`` (e.g. ``< 0.0001``) when a bootstrap p is
    exactly 0 with ``n_boot = B`` resamples (its resolution); missing -> em dash."""
    if _missing(p):
        return DASH
    p = float(p)
    if p == 0.0 and not _missing(n_boot) and n_boot:
        return f"< {1.0 / float(n_boot):.2g}"
    if p < 0.001:
        return "< 0.001"
    return f"{p:.3f}"


def fmt_n(n_queries: Any, n_docs: Any) -> str:
    """``"951 / 184"``: queries / documents."""
    return f"{fmt_int(n_queries)} / {fmt_int(n_docs)}"


# ---------------------------------------------------------------------------------------------------------------
# The Table record and its renderings
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Table:
    """One table of the report: ``name`` (file stem), ``title`` (caption), ``data`` (unrounded), ``display``
    (rounded strings, the rendered rows), ``notes`` (printed under the table)."""

    name: str
    title: str
    data: pd.DataFrame
    display: pd.DataFrame
    notes: tuple[str, ...] = field(default_factory=tuple)

    def markdown(self) -> str:
        """A pipe table (tabulate) followed by its notes as a list."""
        body = self.display.to_markdown(index=False, disable_numparse=True) if len(self.display.columns) else ""
        if self.display.empty:
            body = "_(no rows)_"
        notes = "".join(f"\n- {n}" for n in self.notes)
        return body + ("\n" + notes if notes else "") + "\n"

    def latex(self) -> str:
        """A LaTeX ``table`` float with a booktabs ``tabular`` (numeric-looking columns right-aligned)."""
        return to_latex(self.display, caption=self.title, label=f"tab:{self.name}", notes=self.notes)


_NUMERIC_CELL = re.compile(r"^[\s<>+\-\u2212\d.,%\[\]/\u2014*]*$")

_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
    "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"$<$", ">": r"$>$",
    "\u0394": r"$\Delta$", "\u2212": r"$-$", "\u203a": r"$\rangle$", "\u2264": r"$\le$", "\u2265": r"$\ge$",
    "\u00d7": r"$\times$", "\u2192": r"$\rightarrow$", "\u2014": "---", "\u2013": "--", "\u00b1": r"$\pm$",
}


def latex_escape(s: Any) -> str:
    """Escape LaTeX specials and map the few non-ASCII symbols the tables use (Δ − › ≤ ≥ × → —) to LaTeX."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(s))


def to_latex(display: pd.DataFrame, caption: str, label: str, notes: Sequence[str] = ()) -> str:
    """Render string rows as a booktabs table: ``\\toprule`` header ``\\midrule`` rows ``\\bottomrule``.
    Columns whose every cell looks numeric are right-aligned, the others left-aligned."""
    cols = list(display.columns)
    align = "".join("r" if len(display) and display[c].astype(str).map(lambda v: bool(_NUMERIC_CELL.match(v))).all()
                    else "l" for c in cols)
    lines = [r"\begin{table}[t]", r"\centering", r"\small", f"\\caption{{{latex_escape(caption)}}}",
             f"\\label{{{label}}}", f"\\begin{{tabular}}{{{align}}}", r"\toprule",
             " & ".join(latex_escape(c) for c in cols) + r" \\", r"\midrule"]
    for row in display.itertuples(index=False):
        lines.append(" & ".join(latex_escape(v) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    if notes:
        lines.append(r"\par\smallskip\footnotesize " + " ".join(latex_escape(n) for n in notes))
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def _order(values: Sequence[str], order: Sequence[str]) -> list[str]:
    rank = {c: i for i, c in enumerate(order)}
    return sorted(dict.fromkeys(map(str, values)), key=lambda c: (rank.get(c, len(rank)), c))


def _require(df: pd.DataFrame, cols: Sequence[str], table: str) -> None:
    stages.check(df, table, cols, "stage 08's tables")


# ---------------------------------------------------------------------------------------------------------------
# Table 1, Table 2, Table 4
# ---------------------------------------------------------------------------------------------------------------

def table1(contrasts: pd.DataFrame, mixedlm: pd.DataFrame | None = None) -> Table:
    """Table 1 — the confirmatory family: the primary cell's contrasts (rows with ``confirmatory`` true in the
    07_stats ``contrasts`` table), one row per contrast in the table's order, with Δ (mean paired delta A − B),
    the 95% cluster-bootstrap CI, two-sided p, Holm p, Cohen's dz, queries / documents, and the secondary
    MixedLM coefficient and p for the same contrast (joined on ``contrast``) when ``mixedlm`` is given."""
    _require(contrasts, ["contrast", "mean_delta", "ci_low", "ci_high", "p", "p_holm", "dz", "n_queries", "n_docs"],
             "contrasts")
    rows = contrasts[contrasts["confirmatory"].astype(bool)] if "confirmatory" in contrasts else contrasts
    if rows.empty:
        raise ValueError("contrasts: no confirmatory rows (primary cell absent from the scores?); written by 07_stats")
    d = rows.reset_index(drop=True).copy()
    for c in ("condition_a", "condition_b"):
        if c not in d:
            d[c] = ""
    if "reject_holm" not in d:
        d["reject_holm"] = d["p_holm"] < 0.05
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
    extra = [c for c in ("n_boot", "cell") if c in d]
    data = d[cols + extra]
    n_boot = d["n_boot"] if "n_boot" in d else pd.Series([None] * len(d))
    display = pd.DataFrame({
        "Contrast": d["contrast"],
        "A \u2212 B": [f"{a} \u2212 {b}" for a, b in zip(d["condition_a"], d["condition_b"])],
        "Question": d["question"],
        "\u0394": d["mean_delta"].map(fmt_delta),
        "95% CI": [fmt_ci(lo, hi) for lo, hi in zip(d["ci_low"], d["ci_high"])],
        "p": [fmt_p(p, b) for p, b in zip(d["p"], n_boot)],
        "Holm p": [fmt_p(p, b) + (" *" if r else "") for p, b, r in zip(d["p_holm"], n_boot, d["reject_holm"])],
        "dz": d["dz"].map(lambda x: fmt_num(x, 2)),
        "n (q / docs)": [fmt_n(q, n) for q, n in zip(d["n_queries"], d["n_docs"])],
        "MixedLM coef": d["mixedlm_coef"].map(fmt_delta),
        "MixedLM p": d["mixedlm_p"].map(fmt_p),
    })
    cell = str(d["cell"].iat[0]) if "cell" in d else "primary cell"
    b = d["n_boot"].iat[0] if "n_boot" in d else None
    notes = (f"Confirmatory family, primary cell {cell}. \u0394 = mean of paired per-query deltas A \u2212 B; "
             f"95% percentile CI and two-sided p from a document-clustered bootstrap"
             f"{f' ({fmt_int(b)} resamples)' if b is not None and not _missing(b) else ''}; "
             "Holm across the four contrasts (* = Holm p < alpha); dz = mean/sd of the deltas.",
             "MixedLM (score ~ condition + random intercept per document) is the pre-registered secondary check, "
             "misspecified by design (no per-query random effect) and conservative for small paired effects.")
    return Table("table1_primary", "Table 1: pre-registered contrasts on the primary cell", data, display, notes)


def table2(condition_means: pd.DataFrame, embedder: str = "strong", reranker: str = "none") -> Table:
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
    wide = wide.loc[_order(wide.index, CONDITION_ORDER), sorted(wide.columns, key=design.metric_order_key)]
    n = sel.groupby("condition")["n_queries"].max() if "n_queries" in sel else None
    data = wide.reset_index().rename_axis(columns=None)
    if n is not None:
        data.insert(1, "n_queries", data["condition"].map(n).astype("Int64"))
    display = pd.DataFrame({"Condition": data["condition"]})
    if n is not None:
        display["n"] = data["n_queries"].map(fmt_int)
    for m in wide.columns:
        display[m] = data[m].map(fmt_num)
    notes = (f"Exploratory. Mean per query over each condition's scored queries; embedder {embedder}, "
             f"reranker {reranker}. budget-cov@B charges prefix tokens against the budget.",)
    return Table(f"table2_means_{embedder}_{reranker}",
                 f"Table 2: per-condition means ({embedder} embedder, reranker {reranker})", data, display, notes)


def table4(conditions: Sequence[str], summary: Mapping[str, Any] | None = None, contexts_method: str = "llm",
           route_sections: int = 5) -> Table:
    """Table 4 — the conditions of the run (paper appendix, DESIGN.md "Conditions"), each declared condition's
    row (:meth:`chunkstudy.design.Condition.table4`): boundaries, prefix at embedding time and retrieval, plus,
    when 04's ``summary.json`` is given, the realised chunk count and mean content / prefix tokens of each
    condition (``n_chunks``, ``mean_content_tokens``, ``mean_prefix_tokens``). ``contexts_method``
    (``contexts.method``) names A1's prefix as this run made it (a non-LLM baseline is said so);
    ``route_sections`` (``retrieve.route_sections``) is stage 1's top n."""
    unknown = [c for c in conditions if c not in design.CONDITION_NAMES]
    if unknown:
        raise ValueError(f"table4: unknown condition {unknown[0]!r}; known: {list(design.CONDITION_NAMES)}")
    conds = _order(conditions, CONDITION_ORDER)
    spec = {c: design.condition(c).table4(route_sections) for c in conds}
    if contexts_method != "llm":
        spec = {c: (b, f"{contexts_method} situating context (non-LLM baseline)", r)
                if design.condition(c).prefix == "context" else (b, p, r) for c, (b, p, r) in spec.items()}
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
# Funnel and construction tables
# ---------------------------------------------------------------------------------------------------------------

def corpus_funnel(funnel: pd.DataFrame, kind: str = "") -> Table:
    """The corpus funnel (01_corpus ``corpus_funnel``: step, count, ...) in its own order; the paper's corpus
    facts for ``kind`` follow as notes (its funnel steps are not named alike, so they are not aligned row by row)."""
    _require(funnel, ["step", "count"], "corpus_funnel")
    data = funnel.reset_index(drop=True).copy()
    display = pd.DataFrame({"Step": data["step"].astype(str), "Count": data["count"].map(fmt_int)})
    for c in data.columns:
        if c not in ("step", "count"):
            col = data[c]
            display[c] = col.map(fmt_int) if pd.api.types.is_integer_dtype(col) else \
                col.map(fmt_num) if pd.api.types.is_float_dtype(col) else col.astype(str)
    paper = PAPER.get(kind, {})
    notes = tuple(f"Paper ({paper['label']}): {x}" for x in paper.get("corpus", []))
    return Table("funnel_corpus", "Corpus funnel", data, display, notes)


#: The induction funnel's rows: a key of 02's ``induction_stats.json``, its label, how it prints.
INDUCTION_ROWS: tuple[tuple[str, str, str], ...] = (
    ("documents", "documents", "int"),
    ("usable", "usable structure", "of_documents"),
    ("induced_whole", "induced whole (one call, not windowed)", "of_documents"),
    ("repaired", "repaired", "int"),
    ("sections_per_doc", "sections / doc (induced)", "num1"),
    ("gold_sections_per_doc", "sections / doc (gold)", "num1"),
    ("span_identity", "induced chunk spans identical to gold", "pct"),
)
#: Where each induction row's value lives in ``induction_stats.json`` (02 names some of them differently).
_INDUCTION_KEYS = {"documents": "n_docs", "span_identity": "identity_with_gold"}


def induction(stats: Mapping[str, Any] | None, kind: str = "", method: str = "") -> Table:
    """Induction funnel beside the paper's (§3.3), formatted from 02's ``induction_stats.json``
    (:func:`chunkstudy.induce.induction_stats`, every number computed there once): documents, usable (ok +
    repaired), induced whole (documents induced in one call, not windowed; the paper's model sees each
    document's paragraphs), repaired, mean sections per document (induced and gold), and span identity with gold
    (the paper's measure: the share of induced structural chunk spans byte-identical to a gold one). ``stats``
    None or a missing key prints a dash."""
    nan = float("nan")
    found = {k: (stats or {}).get(_INDUCTION_KEYS.get(k, k)) for k, _, _ in INDUCTION_ROWS}
    ours = {k: nan if v is None else float(v) for k, v in found.items()}
    paper = PAPER.get(kind, {}).get("induction", {})
    data = pd.DataFrame({"quantity": [k for k, _, _ in INDUCTION_ROWS], "ours": [ours[k] for k in ours],
                         "paper": [float(paper.get(k, nan)) for k in ours]})

    def show(how: str, v: float, of: float) -> str:
        if how == "pct":
            return fmt_pct(v)
        if how == "num1":
            return fmt_num(v, 1)
        if how == "of_documents" and not _missing(v) and not _missing(of):
            return f"{fmt_int(v)}/{fmt_int(of)}"
        return fmt_int(v)

    display = pd.DataFrame({
        "Quantity": [label for _, label, _ in INDUCTION_ROWS],
        "Ours": [show(how, ours[k], ours["documents"]) for k, _, how in INDUCTION_ROWS],
        f"Paper ({PAPER[kind]['label']})" if kind in PAPER else "Paper": [
            show(how, float(paper.get(k, nan)), float(paper.get("documents", nan))) for k, _, how in INDUCTION_ROWS]})
    notes = (f"Inducer: {method or 'unknown'}. The paper's inducer is Gemma-4-26B-A4B with one self-correction "
             "round and a deterministic repair.",) + (
        ("Non-LLM baseline inducer: its numbers are not comparable to the paper's LLM arm.",)
        if method and method != "llm" else ())
    return Table("funnel_induction", "Structure induction, ours beside the paper's", data, display, notes)


def query_funnel(funnel: pd.DataFrame, kind: str = "") -> Table:
    """The query funnel (03_queries ``query_funnel``: stage, step, qtype, count, n_docs): one row per step in
    stage order, one column per query type plus ``all`` and the documents of ``all``; the paper's count beside
    the steps it reports (§5: Wikipedia 2,306 generated → 1,945 survivors → 951 finals over 184 documents;
    QASPER 5,049 harvested → 4,303 usable over 1,508 papers)."""
    _require(funnel, ["step", "count"], "query_funnel")
    f = funnel.copy()
    if "qtype" not in f:
        f["qtype"] = "all"
    if "stage" not in f:
        f["stage"] = pd.factorize(f["step"])[0]
    steps = f.drop_duplicates("step").sort_values("stage", kind="stable")["step"].tolist()
    wide = f.pivot_table(index="step", columns="qtype", values="count", aggfunc="sum").reindex(steps)
    qtypes = [c for c in wide.columns if c != "all"] + (["all"] if "all" in wide.columns else [])
    data = wide[qtypes].reset_index().rename_axis(columns=None)
    if "n_docs" in f:
        docs = f[f["qtype"] == "all"].set_index("step")["n_docs"] if (f["qtype"] == "all").any() else \
            f.groupby("step")["n_docs"].max()
        data["documents"] = data["step"].map(docs)
    counts = PAPER.get(kind, {}).get("queries", {})
    data["paper"] = data["step"].map(lambda s: counts.get(s, np.nan)).astype(float)
    display = pd.DataFrame({"Step": data["step"]})
    for c in data.columns[1:]:
        display[c if c != "paper" else f"paper ({PAPER[kind]['label']}, all)" if kind in PAPER else "paper"] = \
            data[c].map(fmt_int)
    by_type = {k[len("finals_"):]: v for k, v in paper.values(kind, "queries").items() if k.startswith("finals_")}
    notes = ((f"Paper: {fmt_int(counts['documents'])} documents in the final set.",) if "documents" in counts
             else ()) + ((("Paper finals by type: " + ", ".join(f"{t} {fmt_int(n)}" for t, n in by_type.items())
                           + "."),) if by_type else ())
    return Table("funnel_queries", "Query funnel", data, display, notes)


def size_matching(summary: Mapping[str, Any], kind: str = "") -> Table:
    """Size matching (guards C1; paper §3.2), formatted from 04's ``summary.json`` (every number computed there
    once, :func:`chunkstudy.conditions.build_all`): the realised mean content tokens per chunk of each chunk set —
    the fixed windows (A0), the induced chunks (A2), the gold chunks (G2), pooled over documents — beside the
    paper's (Wikipedia-FA 255.4 vs 259.6; QASPER 244.9 vs 249.8); then the per-document gap ``mean_A0 − mean_A2``:
    mean |gap|, max |gap|, documents above the paper's bound (``size_gap_tolerance``, 4 tokens)."""
    paper = PAPER.get(kind, {}).get("size_matching", {})
    means, counts = summary.get("realised_mean", {}), summary.get("realised_n", {})
    rows = [{"quantity": f"{c} {design.BOUNDARIES[design.condition(c).boundaries].chunks}: mean content tokens",
             "ours": float(means[c]), "paper": float(paper.get(c, np.nan)), "n_chunks": float(counts.get(c, np.nan))}
            for c in design.CHUNK_SETS if c in means]
    fixed, induced, _ = design.CHUNK_SETS
    pair = f"{fixed}_{induced}"
    if f"mean_abs_doc_gap_{pair}" in summary:
        tol = summary["size_gap_tolerance"]
        rows += [{"quantity": f"per-document |{fixed} − {induced}| gap: mean", "ours": summary[f"mean_abs_doc_gap_{pair}"],
                  "paper": np.nan, "n_chunks": np.nan},
                 {"quantity": f"per-document |{fixed} − {induced}| gap: max", "ours": summary[f"max_abs_doc_gap_{pair}"],
                  "paper": np.nan, "n_chunks": np.nan},
                 {"quantity": f"documents with |gap| > {tol:g} tokens",
                  "ours": float(summary[f"docs_over_tolerance_{pair}"]), "paper": np.nan, "n_chunks": np.nan}]
    data = pd.DataFrame(rows, columns=["quantity", "ours", "paper", "n_chunks"])
    display = pd.DataFrame({
        "Quantity": data["quantity"],
        "Ours": [fmt_int(v) if q.startswith("documents") else fmt_num(v, 1) for q, v in zip(data["quantity"],
                                                                                            data["ours"])],
        "Paper": data["paper"].map(lambda v: fmt_num(v, 1)),
        "Chunks": data["n_chunks"].map(fmt_int)})
    n_docs = summary.get(f"n_docs_{pair}")
    note = ((f"{fmt_int(n_docs)} documents. " if n_docs is not None else "")
            + f"Per document, the {fixed} target is the mean content-token length of its {induced} chunks; window "
              "edges snap to sentence boundaries.")
    return Table("funnel_size_matching", "Size matching of the fixed windows", data, display, (note,))


def placebo(buckets: pd.DataFrame, method: str = "") -> Table:
    """Placebo residuals and donors (guards C2; paper §3.2 and appendix E.3), formatted from 04's
    ``placebo_buckets`` table (:func:`chunkstudy.conditions.placebo_buckets`, every number computed there once):
    per depth bucket and in total, unique (document, path) pairs, same-document residual assignments beside the
    minimum any within-bucket permutation allows, chunks carrying a residual path, foreign paths with identical
    headings, and the donor documents per document (mean, min, max) with the mean share of a document's paths
    taken from its single largest donor. ``method`` is ``chunking.placebo_method`` (named in a note)."""
    _require(buckets, stages.columns("placebo_buckets"), "placebo_buckets")
    data = buckets.reset_index(drop=True)
    display = pd.DataFrame({"Depth": data["depth"], "Pairs": data["pairs"].map(fmt_int),
                            "Docs": data["documents"].map(fmt_int),
                            "Same-doc residual": data["same_doc"].map(fmt_int),
                            "Minimum possible": data["min_same_doc"].map(fmt_int),
                            "Residual chunks": [f"{fmt_int(a)} of {fmt_int(b)}" for a, b in
                                                zip(data["same_doc_chunks"], data["chunks"])],
                            "Same headings": data["same_path"].map(fmt_int),
                            "Donors / doc (min–max)": [
                                DASH if _missing(a) else f"{fmt_num(a, 1)} ({fmt_int(lo)}–{fmt_int(hi)})"
                                for a, lo, hi in zip(data["donors_mean"], data["donors_min"], data["donors_max"])],
                            "Largest donor's share": data["top_donor_share"].map(fmt_pct)})
    how = {"permute": "randomly permuted within depth buckets (fixed seed) and repaired by swaps toward a "
                      "cross-document derangement",
           "shift": "cyclically shifted by document groups within depth buckets (fixed seed; the older method, "
                    "few donors per document)"}
    notes = (f"Placebo paths {how.get(method, 'reassigned within depth buckets (fixed seed)')}"
             + (f" (chunking.placebo_method: {method})." if method else "."),
             "Donors: distinct documents a document's placebo paths come from; largest donor's share: the mean, "
             "over documents, of the share of its paths taken from one donor.")
    return Table("funnel_placebo", "Placebo construction: residual same-document assignments and donors", data,
                 display, notes)


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
    display["95% CI"] = [fmt_ci(lo, hi) for lo, hi in zip(data["ci_low"], data["ci_high"])]
    display["p"] = [fmt_p(p, b) for p, b in zip(data["p"], nb)]
    metric = str(data["metric"].iat[0]) if "metric" in data and len(data) else design.PRIMARY_METRIC.key
    return Table("exploratory_dose_response", f"Exploratory: breadcrumb-depth dose-response ({metric})", data,
                 display, ("Exploratory, outside the pre-registered family.",))


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


def reranker_lift(lift: pd.DataFrame, metric: str = "cov-nDCG@10", embedder: str = "strong") -> Table:
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


def per_type(per_type_df: pd.DataFrame, embedder: str = "strong", reranker: str = "none") -> Table:
    """The per-query-type cuts (07 ``per_type``; exploratory, unadjusted) of one embedder × reranker."""
    _require(per_type_df, ["contrast", "qtype", "mean_delta", "ci_low", "ci_high", "p"], "per_type")
    d = per_type_df
    if "embedder" in d:
        d = d[(d["embedder"] == embedder) & (d["reranker"] == reranker)]
    data = d.reset_index(drop=True)
    display = pd.DataFrame({"Contrast": data["contrast"], "Query type": data["qtype"],
                            "\u0394": data["mean_delta"].map(fmt_delta),
                            "95% CI": [fmt_ci(lo, hi) for lo, hi in zip(data["ci_low"], data["ci_high"])],
                            "p (unadjusted)": data["p"].map(fmt_p),
                            "Queries": data["n_queries"].map(fmt_int) if "n_queries" in data else DASH})
    return Table("exploratory_per_type", f"Exploratory: contrasts by query type ({embedder}, reranker {reranker})",
                 data, display, ("Hypothesis-generating only; no multiplicity adjustment.",))


# ---------------------------------------------------------------------------------------------------------------
# Power analysis (07 ``power``; issue 18 §2)
# ---------------------------------------------------------------------------------------------------------------

def fmt_approx_n(x: Any) -> str:
    """A corpus size read off a simulated power curve, to 2 significant digits (``276.1`` -> ``280``,
    ``1424`` -> ``1,400``, ``19.2`` -> ``19``); missing -> em dash."""
    if _missing(x):
        return DASH
    v = float(x)
    if v <= 0:
        return fmt_int(v)
    return fmt_int(round(v, 1 - int(math.floor(math.log10(v)))))


def paper_source_label(source: str) -> str:
    """``"paper (wikipedia)"`` -> ``"paper (Wikipedia-FA)"``: the power table's effect source with the paper's
    corpus label (:data:`PAPER`)."""
    out = str(source)
    for kind, facts in PAPER.items():
        out = out.replace(f"({kind})", f"({facts['label']})")
    return out


def fmt_needed(n: Any, status: str, largest: Any) -> str:
    """The documents a contrast needs, as the report prints it: ``≈ 280``, ``> 5,000`` (no simulated size
    reaches the target), ``≤ 5`` (the smallest already does), ``no effect`` (target dz 0) or an em dash."""
    if status == "interpolated":
        return f"\u2248 {fmt_approx_n(n)}"
    if status == "at_or_below_smallest":
        return f"\u2264 {fmt_int(n)}"
    if status == "above_largest":
        return f"> {fmt_int(largest)}"
    if status == "no_effect":
        return "no effect"
    return DASH


def power(needed: pd.DataFrame, power_df: pd.DataFrame) -> Table:
    """The power analysis (07 ``power_needed`` and ``power``; planning, not confirmatory): per contrast and effect
    scenario (this run's effect, the paper's dz), the documents the clustered-bootstrap + Holm test needs for the
    target power (interpolated on the simulated grid by 07, :func:`chunkstudy.power.needed_table`), the simulated
    power at this corpus's own size, and the design effect and ICC of its deltas; the notes name the simulation's
    settings from ``power``. ``†`` marks an N where the test's size under the null exceeds alpha
    (anti-conservative with few documents), so that N is optimistic."""
    _require(needed, stages.columns("power_needed"), "power_needed")
    _require(power_df, ["scenario", "contrast", "n_docs", "power", "target_power", "n_docs_observed"], "power")
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
    nb = first.get("n_boot")
    notes = (f"Planning, not confirmatory. Simulated studies of N documents drawn with replacement from this "
             f"corpus's {fmt_int(n_obs)} documents (each with its queries' deltas of all four contrasts); per study "
             f"the document-clustered bootstrap ({fmt_int(nb)} resamples) and Holm across the four at alpha "
             f"{float(first.get('alpha', 0.05)):g}; power = share of {fmt_int(first.get('n_sims'))} studies with "
             f"Holm p < alpha{' and the effect’s sign' if bool(first.get('require_sign', True)) else ''} "
             f"(\u00b1 = Monte Carlo SE). The paper scenario shifts every delta by one constant so that dz = "
             "mean/sd equals the paper's.",
             f"Docs needed: first crossing of {fmt_pct(target, 0)} on the simulated grid "
             f"({', '.join(fmt_int(n) for n in sorted(power_df['n_docs'].unique()))}), interpolated in log N. "
             "\u2020 = the test rejects a zero effect more often than alpha at that size (few documents), so the "
             "number is optimistic.")
    notes += tuple(dict.fromkeys(f"{c}: {n}" for c, n in zip(data["contrast"], data["note"]) if n))
    return Table("power", "Power: documents needed per contrast (clustered bootstrap + Holm)", data, display, notes)
