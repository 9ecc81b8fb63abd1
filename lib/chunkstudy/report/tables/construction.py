"""Builders of the funnel and construction tables (paper §3-§5): the corpus and query funnels, induction,
size matching and the placebo, each beside the paper's numbers for the same corpus kind."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from ... import design, paper, stages
from .common import PAPER, USER_MARK, USER_NOTE, _require, is_user_condition
from .formatting import DASH, _missing, fmt_int, fmt_num, fmt_pct
from .record import Table



def corpus_funnel(funnel: pd.DataFrame, kind: str) -> Table:
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


def induction(stats: Mapping[str, Any] | None, kind: str, method: str) -> Table:
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


def query_funnel(funnel: pd.DataFrame, kind: str) -> Table:
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


def size_matching(summary: Mapping[str, Any], kind: str) -> Table:
    """Size matching (guards C1; paper §3.2), formatted from 04's ``summary.json`` (every number computed there
    once, :func:`chunkstudy.chunks.chunk_sets.build_all`): the realised mean content tokens per chunk of each chunk set —
    the fixed windows (A0), the induced chunks (A2), the gold chunks (G2), pooled over documents — beside the
    paper's (Wikipedia-FA 255.4 vs 259.6; QASPER 244.9 vs 249.8); then the per-document gap ``mean_A0 − mean_A2``:
    mean |gap|, max |gap|, documents above the paper's bound (``size_gap_tolerance``, 4 tokens)."""
    paper = PAPER.get(kind, {}).get("size_matching", {})
    means, counts = summary.get("realised_mean", {}), summary.get("realised_n", {})
    rows = [{"quantity": f"{c} {design.BOUNDARIES[cs.boundaries].chunks}: mean content tokens",
             "ours": float(means[c]), "paper": float(paper.get(c, np.nan)), "n_chunks": float(counts.get(c, np.nan))}
            for c, cs in design.CHUNK_SETS.items() if c in means]
    fixed, induced = next((cs.name, cs.matched_to) for cs in design.CHUNK_SETS.values() if cs.matched_to)
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


def placebo(buckets: pd.DataFrame, method: str) -> Table:
    """Placebo residuals and donors (guards C2; paper §3.2 and appendix E.3), formatted from 04's
    ``placebo_buckets`` table (:func:`chunkstudy.prefix.placebo.placebo_buckets`, every number computed there once):
    per placebo condition, per depth bucket and in total, unique (document, path) pairs, same-document residual
    assignments beside the minimum any within-bucket permutation allows, chunks carrying a residual path, foreign
    paths with identical headings, and the donor documents per document (mean, min, max) with the mean share of a
    document's paths taken from its single largest donor. The condition is a column when the run has more than one
    placebo condition. ``method`` is ``chunking.placebo_method`` (named in a note)."""
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
    if data["condition"].nunique() > 1:
        display.insert(0, "Condition", [c + (f" {USER_MARK}" if is_user_condition(c) else "")
                                        for c in data["condition"]])
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


def user_conditions(extra: Mapping[str, Any]) -> Table:
    """The user's conditions as 04 built them (``summary.json``'s ``extra``, :func:`chunkstudy.chunks.chunk_sets.build_all`):
    chunker, its version and options (or the paper chunk set a condition takes), prefix, chunks and mean content
    tokens of the condition and of its size-matched twin, and the twin's per-document size gap (mean and max
    |gap|, the A0 rule's check)."""
    rows = []
    for name, f in extra.items():
        sets = f.get("sets") or {}
        own, twin = sets.get(name, {}), sets.get(f.get("twin") or "", {})
        gap = f.get("size_gap") or {}
        cut = f.get("chunker") or f"{f.get('boundaries')} (chunk set {f.get('chunk_set')})"
        rows.append({"condition": name, "chunker": cut, "version": f.get("version"),
                     "options": ", ".join(f"{k}={v}" for k, v in (f.get("options") or {}).items()),
                     "prefix": f.get("prefix"), "n_chunks": own.get("n_chunks"),
                     "mean_content_tokens": own.get("mean_content_tokens"), "twin": f.get("twin"),
                     "twin_n_chunks": twin.get("n_chunks"), "twin_mean_content_tokens": twin.get("mean_content_tokens"),
                     "mean_abs_doc_gap": gap.get("mean_abs_doc_gap"), "max_abs_doc_gap": gap.get("max_abs_doc_gap"),
                     "unplaced": f.get("unplaced", 0), "dropped_chars": f.get("dropped_chars", 0)})
    data = pd.DataFrame(rows)
    display = pd.DataFrame({
        "Condition": [f"{c} {USER_MARK}" for c in data["condition"]] if len(data) else [],
        "Chunker": [str(c) if _missing(v) else f"{c} {v}" for c, v in zip(data.get("chunker", []),
                                                                           data.get("version", []))],
        "Options": data.get("options", []), "Prefix": data.get("prefix", []),
        "Chunks": [fmt_int(x) for x in data.get("n_chunks", [])],
        "Mean tokens": [fmt_num(x, 1) for x in data.get("mean_content_tokens", [])],
        "Twin": [DASH if _missing(t) else f"{t} {USER_MARK}" for t in data.get("twin", [])],
        "Twin chunks": [fmt_int(x) for x in data.get("twin_n_chunks", [])],
        "Twin mean tokens": [fmt_num(x, 1) for x in data.get("twin_mean_content_tokens", [])],
        "Doc gap mean / max": [DASH if _missing(a) else f"{fmt_num(a, 1)} / {fmt_num(b, 1)}"
                               for a, b in zip(data.get("mean_abs_doc_gap", []), data.get("max_abs_doc_gap", []))],
    })
    notes: tuple[str, ...] = ("Chunks are placed on exact character offsets of each document (04 stops on text a chunker drops or "
             "rewrites, unless the condition says unaligned: warn, counted here as unplaced chunks and dropped "
             "characters). A twin <NAME>-fixed has fixed windows matched per document to its condition's mean "
             "content tokens (the paper's A0 rule); the gap is |twin mean - condition mean| per document, in tokens.",
             USER_NOTE + ".")
    warned = data[(data.get("unplaced", 0) != 0) | (data.get("dropped_chars", 0) != 0)] if len(data) else data
    notes += tuple(f"{r.condition}: {r.unplaced} unplaced chunk(s), {r.dropped_chars} dropped character(s) "
                   "(unaligned: warn)." for r in warned.itertuples())
    return Table("user_conditions", "Your conditions (user-added, exploratory)", data, display, notes)
