"""Reporting an induction run: span identity with gold (the paper's measure), the counts of
``induction_stats.json`` (the whole file: :func:`stage_stats`), outline views for display, and the note on which
model produced the structure. The table beside the paper's numbers is :func:`chunkstudy.report.tables.induction`."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..params import ContextsParams, InduceParams, LLMParams
from .contexts import a1_summary


def span_identity(induced: pd.DataFrame, gold: pd.DataFrame) -> float:
    """Share of induced spans ``(doc_id, start, end)`` (half-open character offsets) that are byte-identical to
    a gold span of the same document (paper 3.3: "induced chunk spans byte-identical to a gold span"). Empty
    spans are left out. NaN when there are no induced spans."""
    def spans(df):
        df = df[df["end"] > df["start"]]
        return set(zip(df["doc_id"].astype(str), df["start"].astype(int), df["end"].astype(int)))

    ind, gld = spans(induced), spans(gold)
    return len(ind & gld) / len(ind) if ind else float("nan")


def induction_stats(sections_induced: pd.DataFrame, log: pd.DataFrame, sections_gold: pd.DataFrame | None = None,
                    induced_chunks: pd.DataFrame | None = None, gold_chunks: pd.DataFrame | None = None) -> dict:
    """Counts and rates of an induction run (no rounding).

    ``usable`` = ok + repaired; ``induced_whole`` = documents induced in one call (not cut into windows);
    ``sections_per_doc`` counts every outline row (empty parent sections too);
    ``identity_with_gold`` is :func:`span_identity` of the structural chunks of both outlines when
    ``induced_chunks``/``gold_chunks`` are given (``identity_basis: "structural chunks"``, the paper's measure),
    else of the non-empty section spans (``"section spans"``). With LLM induction, ``replies`` counts the windows'
    schema-bound replies (:mod:`chunkstudy.induce`, "Replies"): ``parsed_first_try``, ``parsed_after_correction``,
    ``parsed_never``, and the calls whose reply was cut at its budget (``cut``), finished with a larger one
    (``cut_resolved``) or failed cut (``cut_failed``); ``max_reply_budget`` is the largest first-round budget."""
    st = log["status"].value_counts()
    out: dict[str, Any] = {
        "n_docs": int(len(log)),
        "ok": int(st.get("ok", 0)), "repaired": int(st.get("repaired", 0)), "failed": int(st.get("failed", 0)),
        "method": ",".join(sorted(set(log["method"]))) if "method" in log else "",
        "model": ",".join(sorted(set(m for m in log.get("model", pd.Series(dtype=str)) if m))),
        "windowed_docs": int((log["n_windows"] > 1).sum()) if "n_windows" in log else 0,
        "sections_per_doc": float(sections_induced.groupby("doc_id").size().mean()) if len(sections_induced)
        else float("nan"),
        "depth_mean": float(sections_induced.groupby("doc_id")["level"].max().mean()) if len(sections_induced)
        else float("nan"),
    }
    out["usable"] = out["ok"] + out["repaired"]
    out["induced_whole"] = out["n_docs"] - out["windowed_docs"]
    llm = log[log["method"] == "llm"] if "method" in log and "parsed_first" in log else log.iloc[:0]
    if len(llm):
        total = {c: int(llm[c].sum()) for c in ("parsed_first", "parsed_corrected", "parsed_never", "cut_calls",
                                                 "cut_failed")}
        out["replies"] = {"parsed_first_try": total["parsed_first"],
                          "parsed_after_correction": total["parsed_corrected"],
                          "parsed_never": total["parsed_never"], "cut": total["cut_calls"],
                          "cut_resolved": total["cut_calls"] - total["cut_failed"], "cut_failed": total["cut_failed"],
                          "max_reply_budget": int(llm["reply_budget"].max())}
    if sections_gold is not None and len(sections_gold):
        out["gold_sections_per_doc"] = float(sections_gold.groupby("doc_id").size().mean())
        if "level" in sections_gold.columns:
            out["gold_depth_mean"] = float(sections_gold.groupby("doc_id")["level"].max().mean())
    if induced_chunks is not None and gold_chunks is not None:
        out["identity_with_gold"] = span_identity(induced_chunks, gold_chunks)
        out["identity_basis"] = "structural chunks"
    elif sections_gold is not None:
        out["identity_with_gold"] = span_identity(sections_induced, sections_gold)
        out["identity_basis"] = "section spans"
    return out


def outline_view(sections: pd.DataFrame, doc_id: str) -> pd.DataFrame:
    """One document's outline as an indented tree: ``[heading, paragraphs]`` rows (for display)."""
    s = sections[sections["doc_id"] == doc_id]
    return pd.DataFrame({
        "heading": [("· " * (lv - 1)) + (t or "(untitled lead)") for lv, t in zip(s["level"], s["title"])],
        "paragraphs": [f"{a}-{b}" if b >= a else f"(empty at {a})" for a, b in zip(s["first_para"], s["last_para"])],
    }).reset_index(drop=True)


def outlines_side_by_side(gold: pd.DataFrame, induced: pd.DataFrame, doc_id: str) -> pd.DataFrame:
    """Gold and induced trees of one document next to each other (rows aligned by position, padded)."""
    g, i = outline_view(gold, doc_id), outline_view(induced, doc_id)
    n = max(len(g), len(i))
    g = g.reindex(range(n)).fillna("")
    i = i.reindex(range(n)).fillna("")
    return pd.DataFrame({"gold": g["heading"], "gold paragraphs": g["paragraphs"], "induced": i["heading"],
                         "induced paragraphs": i["paragraphs"]})


def stage_stats(sections_induced: pd.DataFrame, induction_log: pd.DataFrame, sections_gold: pd.DataFrame,
                induced_chunks: pd.DataFrame, gold_chunks: pd.DataFrame, contexts_a1: pd.DataFrame, client: Any,
                llm_params: LLMParams, induce_params: InduceParams, contexts_params: ContextsParams) -> dict:
    """What 02_induce writes as ``induction_stats.json``: :func:`induction_stats` (span identity over the
    structural chunks of both outlines, ``induced_chunks`` and ``gold_chunks``:
    :func:`chunkstudy.chunks.chunking.structural_for`), the A1 summary (``contexts_a1``, :func:`a1_summary`), the model
    client's report (:func:`chunkstudy.llm.describe`), ``llm.capable`` and the :func:`model_note`."""
    from .. import llm

    return {**induction_stats(sections_induced, induction_log, sections_gold, induced_chunks, gold_chunks),
            "contexts_a1": a1_summary(contexts_a1), "llm": llm.describe(client), "capable": llm_params.capable,
            "note": model_note(llm_params, induce_params, contexts_params)}


def model_note(llm_params: LLMParams, induce_params: InduceParams, contexts_params: ContextsParams) -> str:
    """A plain statement of what produced induced structure and A1 contexts, and whether that is the study's
    class of model (``llm.capable``); reports print it above their numbers. Each argument is its section
    (``cfg.params("llm")``, ``cfg.params("induce")``, ``cfg.params("contexts")``) or its record; a key left out
    takes the schema's default."""
    lp, ip, cp = llm_params, induce_params, contexts_params
    parts = []
    model = f"{lp.backend} model {lp.model or '(none)'}"
    below = not lp.capable
    for what, method, baseline in (("Structure induction", ip.method, "texttiling"),
                                   ("A1 contexts", cp.method, "extractive")):
        if method == baseline:
            parts.append(f"{what}: the non-LLM '{method}' BASELINE, not the paper's LLM arm.")
        else:
            parts.append(f"{what}: {model}" + (" - BELOW the study's model class (llm.capable is false); "
                                                "numbers show the pipeline, not the paper's result." if below
                                                else " (llm.capable: a model of the study's class)."))
    return " ".join(parts)
