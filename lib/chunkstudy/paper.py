"""The paper's own numbers, in one place, each with the part of the paper that states it (the expected results
of a run, in the spirit of Anserini's regression YAMLs). Every "paper vs. this run" display reads from here:
``tables.PAPER``, ``report.PAPER_BM25``, the query funnel's ``paper`` summary,
the notebooks' side-by-side tables and the tests that restate a paper number.

Each number is a :class:`Fact`: ``value`` (shares as fractions in [0, 1], never percentages; ranges as
``(low, high)`` tuples), ``where`` (the part of the paper that states it) and ``note`` (how to read it, or how
a value was derived when the paper gives it only implicitly, e.g. a Table 2 difference). Section numbers are
the paper's own cross-references where the text gives them (3.2, 3.3, 5.1, 6.1, 6.4, 6.5 and appendices C,
E.2, E.3, H) or follow from the order of its results (6.2 Table 2 and the token budgets, 6.3 the placebo);
elsewhere the paragraph is named by its run-in head. Values are quoted, never rounded here.

Layout: ``FACTS[kind][group][key]`` with ``kind`` = ``corpus.kind`` (``"wikipedia"`` for Wikipedia-FA,
``"qasper"``) or ``"study"`` for numbers that hold across both corpora. :func:`value`/:func:`values` read
it, :func:`facts_table` lists all of it, :func:`beside` and :func:`corpus_beside` set a run's numbers next to
the paper's, line by line.

What the paper does not state is absent (``value`` returns the default, NaN): e.g. Table 1's C1 delta on
Wikipedia-FA, or a keyword table for the topic buckets (ours is in :mod:`chunkstudy.corpus.wikipedia`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import pandas as pd


@dataclass(frozen=True)
class Fact:
    """One number of the paper: ``value``, ``where`` it is stated, and a ``note`` on how to read it."""

    value: Any
    where: str
    note: str = ""


LABELS = {"wikipedia": "Wikipedia-FA", "qasper": "QASPER", "study": "both corpora"}

_T1 = "§6.1 Table 1 (primary cell: cov-nDCG@10, strong embedder, no reranker)"
_T2 = "§6.2 Table 2 (per-condition means, strong embedder, no reranker)"
_DOSE = "§6 'Breadcrumb depth dose-response' (exploratory)"
_RERANK = "§6 'Reranking lifts all boats' (exploratory)"
_ROUTE = "§6.4 C4 routing"
_MLM = "appendix 'MixedLM' (secondary check)"

FACTS: dict[str, dict[str, dict[str, Fact]]] = {
    "study": {
        "design": {
            "max_chunk_tokens": Fact(350, "§3.2 'Size matching'", "structural chunks split above this many content tokens"),
            "min_chunk_tokens": Fact(60, "§3.2 'Size matching'", "structural chunks merged below this many content tokens"),
            "size_gap_max": Fact(4, "§3.2 'Size matching'", "realised A0 vs A2 means differ by <= 4 tokens"),
            "route_sections": Fact(5, "§3.2 'Representation constancy'", "stage 1 keeps the top 5 sections"),
            "rerank_top_n": Fact(50, "Embedders/reranker paragraph", "bge-reranker-v2-m3 over the top 50"),
            "n_boot": Fact(10000, "Statistics paragraph; app. 'cluster bootstrap'", "document resamples"),
            "seed": Fact(20260710, "Data: Wikipedia-FA sampling", "the seeded walk; the study's fixed seed"),
            "rouge_max": Fact(0.35, "Data: queries (§5.1)", "reject if ROUGE-L F1 vs its gold span > 0.35"),
            "ngram": Fact(4, "Data: queries (§5.1)", "reject if any verbatim 4-gram is shared"),
            "a1_context_tokens": Fact((50, 100), "Related work: Contextual Retrieval",
                                      "the recipe prepends a 50-100-token situating context"),
            "a1_context_tokens_typical": Fact(80, "§6.2 token budgets", "'an 80-token generated context'"),
        },
        "effects": {
            "delta_range": Fact((0.01, 0.02), "§6.1 'Effect sizes are small'", "+0.01-0.02 cov-nDCG@10"),
            "dz_range": Fact((0.06, 0.11), "§6.1 'Effect sizes are small'", "dz 0.06-0.11 (results text)"),
            "dz_range_wikipedia_c1_c3": Fact((0.08, 0.10), _MLM, "C1/C2/C3 on Wikipedia-FA, dz ~ 0.08-0.10"),
            "dz_c4_wikipedia": Fact(-0.17, "§6.1 and §6.4", "|dz| = 0.17, 'roughly twice the others'"),
            "power_dz_range": Fact((0.08, 0.17), _MLM + " and §6.4",
                                   "the span of |dz| the paper reports for its non-null Wikipedia-FA contrasts"),
            "replicating_contrasts": Fact(("C1", "C2", "C4"), "§6.1",
                                          "three contrasts replicate with the same sign and Holm significance"),
            "corpus_dependent_contrast": Fact("C3", "§6.5", "Holm-significant on Wikipedia-FA only"),
            "rerank_lift": Fact((0.04, 0.06), _RERANK, "a cross-encoder adds +0.04-0.06 to nearly every condition"),
        },
        "anthropic": {
            "failure_reduction": Fact((0.35, 0.49), "Introduction, citing Contextual Retrieval [4]",
                                      "'35-49% reductions in top-20 retrieval failure' (1 - recall@20) on "
                                      "Anthropic's internal, non-peer-reviewed benchmark"),
            "contextual_embeddings": Fact(0.35, "Introduction, citing Contextual Retrieval [4]",
                                          "the low end: contextual embeddings alone, as [4] reports it"),
            "contextual_hybrid": Fact(0.49, "Introduction, citing Contextual Retrieval [4]",
                                      "the high end: contextual embeddings and contextual BM25 fused, as [4] "
                                      "reports it"),
            "top_k": Fact(20, "Introduction, citing Contextual Retrieval [4]", "the failure is counted at top 20"),
        },
    },
    "wikipedia": {
        "corpus": {
            "documents": Fact(200, "Data: Wikipedia-FA; §3.3", "Featured Articles sampled"),
            "min_words": Fact(3000, "Data: Wikipedia-FA", "quality filter: >= 3,000 words"),
            "min_heading_depth": Fact(3, "Data: Wikipedia-FA", "quality filter: heading depth >= 3"),
            "min_sections": Fact(12, "Data: Wikipedia-FA", "quality filter: >= 12 sections"),
            "max_per_bucket": Fact(60, "Data: Wikipedia-FA; app. 'Topic buckets'", "the only balancing: a cap"),
        },
        "topic_buckets": {
            "history_war": Fact(60, "Data: Wikipedia-FA; app. 'Topic buckets'", "the cap binds"),
            "other": Fact(60, "Data: Wikipedia-FA; app. 'Topic buckets'", "the cap binds"),
            "biography": Fact(30, "Data: Wikipedia-FA; app. 'Topic buckets'"),
            "arts_media": Fact(22, "Data: Wikipedia-FA; app. 'Topic buckets'"),
            "science_nature": Fact(15, "Data: Wikipedia-FA; app. 'Topic buckets'"),
            "geography_places": Fact(13, "Data: Wikipedia-FA; app. 'Topic buckets'"),
        },
        "induction": {
            "documents": Fact(200, "§3.3 Induced structure"),
            "usable": Fact(198, "§3.3 Induced structure", "198/200 documents produced usable structure"),
            "induced_whole": Fact(200, "§3.3 Induced structure",
                                  "'the model sees the document's paragraphs': no windowing is described"),
            "repaired": Fact(116, "§3.3 Induced structure"),
            "sections_per_doc": Fact(21.9, "§3.3 Induced structure", "mean induced sections per document"),
            "span_identity": Fact(0.789, "§3.3 Induced structure",
                                  "share of induced chunk spans byte-identical to a gold span"),
        },
        "size_matching": {
            "A0": Fact(255.4, "§3.2 'Size matching'", "realised mean content tokens, fixed windows"),
            "A2": Fact(259.6, "§3.2 'Size matching'", "realised mean content tokens, induced chunks"),
        },
        "queries": {
            "generated": Fact(2306, "Data: queries (§5.1)", "queries generated (before the leakage filter)"),
            "survivors": Fact(1945, "Data: queries (§5.1)", "survivors of both filter rounds"),
            "finals": Fact(951, "Data: queries (§5.1)", "balanced finals"),
            "documents": Fact(184, "Data: queries (§5.1)", "documents the finals come from"),
            "finals_factoid": Fact(250, "Data: queries (§5.1)"),
            "finals_underspecified": Fact(250, "Data: queries (§5.1)"),
            "finals_structural": Fact(250, "Data: queries (§5.1)"),
            "finals_multihop": Fact(201, "Data: queries (§5.1)", "the one type below its target of 250"),
            "rouge_l_typical": Fact((0.02, 0.13), "Data: queries (§5.1)", "typical ROUGE-L of shipped queries"),
        },
        "bm25": {
            "gold_top1": Fact(0.363, "Data: queries (§5.1)", "BM25 places the gold chunk first"),
        },
        "table1": {
            "C2_delta": Fact(0.0099, "§6.3 placebo paragraph; " + _T1, "A3 - P"),
            "C3_delta": Fact(0.0129, "§6.5; " + _T1, "G3 - A3, Holm-significant"),
            "C4_delta": Fact(-0.0326, "§6.4; " + _T1, "A4 - A3 without a reranker"),
            "C4_dz": Fact(-0.17, "§6.1 and §6.4"),
            "C1_dz": Fact(0.09, _MLM, "derived: the midpoint of 'C1/C2/C3 dz ~ 0.08-0.10' (per-contrast dz not printed)"),
            "C2_dz": Fact(0.09, _MLM, "derived: the midpoint of 'C1/C2/C3 dz ~ 0.08-0.10' (per-contrast dz not printed)"),
            "C3_dz": Fact(0.09, _MLM, "derived: the midpoint of 'C1/C2/C3 dz ~ 0.08-0.10' (per-contrast dz not printed)"),
            "C1_holm_significant": Fact(True, "§6.1", "replicates on both corpora"),
            "C2_holm_significant": Fact(True, "§6.1", "replicates on both corpora"),
            "C3_holm_significant": Fact(True, "§6.5", "Holm-significant on Wikipedia-FA"),
            "C4_holm_significant": Fact(True, "§6.1", "replicates on both corpora"),
            "mixedlm_flags": Fact(("C4",), "§6.1; " + _MLM, "the secondary MixedLM flags only C4"),
            "n_queries": Fact(951, _MLM, "n ~ 951 per condition"),
        },
        "table2": {
            "A2": Fact(0.403, "§6.3 placebo paragraph; " + _DOSE, "P 0.403 vs A2 0.403"),
            "P": Fact(0.403, "§6.3 placebo paragraph"),
            "A3-d1": Fact(0.412, _DOSE, "0.403 -> 0.412 -> 0.413 -> 0.413"),
            "A3-d2": Fact(0.413, _DOSE),
            "A3": Fact(0.413, _DOSE + "; " + _RERANK),
            "step_A0_A2": Fact(0.041, _T2, "A0 -> A2: the boundary step"),
            "step_A2_A3": Fact(0.011, _T2, "A2 -> A3: the metadata step"),
            "weak_A0": Fact(0.306, _T2, "weak embedder"),
            "weak_A3": Fact(0.343, _T2, "weak embedder"),
            "budget512_A1": Fact(0.167, "§6.2 token budgets", "budget-cov@512"),
            "budget512_A0": Fact(0.187, "§6.2 token budgets", "budget-cov@512"),
            "budget2048_A1": Fact(0.396, "§6.2 token budgets",
                                  "budget-cov@2048; the text gives the pair without naming the corpus"),
            "budget2048_A0": Fact(0.397, "§6.2 token budgets", "as budget2048_A1"),
        },
        "routing": {
            "section_recall": Fact((0.60, 0.68), _ROUTE, "P(stage 1 keeps a gold-bearing section), 200 documents"),
            "recall50_A4": Fact(0.675, _ROUTE, "recall@50"),
            "recall50_A3": Fact(0.730, _ROUTE, "recall@50"),
            "relative_loss": Fact(0.08, _ROUTE, "C4 loss ~ 8% of A3's score"),
        },
        "rerank": {
            "A3_none": Fact(0.413, _RERANK),
            "A3_reranked": Fact(0.474, _RERANK),
            "C4_reranked": Fact(-0.0273, "§6.4", "C4 under bge-reranker-v2-m3"),
        },
        "dose_response": {
            "slope_strong": Fact(0.0032, _DOSE, "per level, bootstrap p = 0.02"),
            "p_strong": Fact(0.02, _DOSE),
            "slope_weak": Fact(0.0006, _DOSE, "per level, p = 0.65"),
            "p_weak": Fact(0.65, _DOSE),
        },
        "per_type": {
            "C1_factoid": Fact(0.046, "§6 'Per-query-type cuts' (exploratory)"),
            "C1_multihop": Fact(0.031, "§6 'Per-query-type cuts' (exploratory)"),
            "C1_structural": Fact(-0.002, "§6 'Per-query-type cuts' (exploratory)"),
            "C2_structural": Fact(0.023, "§6 'Per-query-type cuts' (exploratory)", "C2's largest type"),
        },
    },
    "qasper": {
        "corpus": {
            "questions": Fact(5049, "Data: QASPER", "all three splits merged (train/val/test)"),
            "usable": Fact(4303, "Data: QASPER", "after dropping unanswerable, no-evidence, numeric-only"),
            "papers": Fact(1508, "Data: QASPER", "papers with a usable question"),
            "papers_read": Fact(1585, "§3.3 Induced structure", "papers induced (all splits)"),
            "share_exact": Fact(0.957, "Data: QASPER", "evidence matched exact -> fuzzy -> section; 95.7% exact"),
            "multi_span": Fact(0.43, "Data: QASPER", "'43% of questions cite multiple evidence paragraphs'; set "
                               "beside matched spans (docs/decisions/0002)"),
            "multi_span_appendix": Fact(0.439, "appendix C (coverage-nDCG)", "43.9%; measured to be the share with "
                                        "more than one distinct evidence string across annotators "
                                        "(docs/decisions/0002)"),
            "spans_per_question": Fact(2.10, "Data: QASPER; appendix C", "mean 2.10; measured to be distinct "
                                       "evidence strings across annotators, before matching (docs/decisions/0002)"),
            "share_depth1_papers": Fact(0.61, "Data: QASPER; §6.5", "61% of papers have depth-1 section lists"),
        },
        "induction": {
            "documents": Fact(1585, "§3.3 Induced structure"),
            "usable": Fact(1579, "§3.3 Induced structure", "1,579/1,585 papers produced usable structure"),
            "induced_whole": Fact(1585, "§3.3 Induced structure",
                                  "'the model sees the document's paragraphs': no windowing is described"),
            "repaired": Fact(590, "§3.3 Induced structure"),
            "sections_per_doc": Fact(14.5, "§3.3 Induced structure", "mean induced sections per paper"),
            "gold_sections_per_doc": Fact(14.8, "§3.3 Induced structure", "mean gold sections per paper"),
            "span_identity": Fact(0.758, "§3.3 Induced structure; §6.5",
                                  "share of induced chunk spans byte-identical to a gold span"),
        },
        "size_matching": {
            "A0": Fact(244.9, "§3.2 'Size matching'", "realised mean content tokens, fixed windows"),
            "A2": Fact(249.8, "§3.2 'Size matching'", "realised mean content tokens, induced chunks"),
        },
        "queries": {
            "harvested": Fact(5049, "Data: QASPER", "questions in all three splits"),
            "finals": Fact(4303, "Data: QASPER", "usable questions"),
            "documents": Fact(1508, "Data: QASPER", "papers with a usable question"),
        },
        "bm25": {
            "gold_top1": Fact(0.227, "Data: QASPER", "BM25 places the gold chunk first"),
        },
        "table1": {
            "C1_delta": Fact(0.011, _T2, "not stated in the text; Table 2's A3 0.125 - A1 0.114"),
            "C2_delta": Fact(0.0161, "§6.3 placebo paragraph; " + _T1, "the largest and most significant contrast"),
            "C3_delta": Fact(0.0011, "§6.5; " + _T1, "not significant"),
            "C4_delta": Fact(-0.0147, "§6.4; " + _T1, "A4 - A3 without a reranker"),
            "C1_holm_significant": Fact(True, "§6.1", "replicates on both corpora"),
            "C2_holm_significant": Fact(True, "§6.1", "replicates on both corpora"),
            "C3_holm_significant": Fact(False, "§6.5", "n.s. on QASPER"),
            "C4_holm_significant": Fact(True, "§6.1", "replicates on both corpora"),
            "C1_dz": Fact(0.085, "§6.1 'Effect sizes are small'",
                          "derived: the midpoint of the stated dz 0.06-0.11 (per-contrast dz not printed)"),
            "C2_dz": Fact(0.11, "§6.1 'Effect sizes are small'; §6.3",
                          "derived: C2 is 'the largest and most significant contrast', so the top of dz 0.06-0.11"),
            "C4_dz": Fact(-0.085, "§6.1 'Effect sizes are small'",
                          "derived: the midpoint of the stated dz 0.06-0.11, with C4's negative sign"),
            "mixedlm_flags": Fact(("C1", "C2", "C4"), "§6.1; " + _MLM, "confirms all three non-null contrasts"),
            "n_queries": Fact(4303, "§6.1; app. 'cluster bootstrap'"),
            "n_docs": Fact(1508, "app. 'cluster bootstrap'"),
        },
        "table2": {
            "A0": Fact(0.098, "§6.3 placebo paragraph", "the full QASPER ordering A0 < P < A1 < A2 < A3"),
            "P": Fact(0.109, "§6.3 placebo paragraph"),
            "A1": Fact(0.114, "§6.3 placebo paragraph"),
            "A2": Fact(0.117, "§6.3 placebo paragraph"),
            "A3": Fact(0.125, "§6.3 placebo paragraph; " + _RERANK),
            "step_A0_A2": Fact(0.019, _T2, "A0 -> A2: the boundary step"),
            "step_A2_A3": Fact(0.009, _T2, "A2 -> A3: the metadata step"),
            "weak_A0": Fact(0.087, _T2, "weak embedder"),
            "weak_A3": Fact(0.107, _T2, "weak embedder"),
            "budget512_A1": Fact(0.046, "§6.2 token budgets", "budget-cov@512"),
            "budget512_A0": Fact(0.052, "§6.2 token budgets", "budget-cov@512"),
        },
        "routing": {
            "section_recall": Fact((0.17, 0.20), _ROUTE, "P(stage 1 keeps a gold-bearing section)"),
            "candidate_sections": Fact(22000, _ROUTE, "~22,000 candidate sections"),
            "recall50_A4": Fact(0.293, _ROUTE, "recall@50"),
            "recall50_A3": Fact(0.302, _ROUTE + "; §6 'Recall, not just ranking'", "recall@50"),
            "recall50_A0": Fact(0.248, "§6 'Recall, not just ranking'", "recall@50, strong embedder"),
            "relative_loss": Fact(0.12, _ROUTE, "C4 loss ~ 12% of A3's score"),
        },
        "rerank": {
            "A3_none": Fact(0.125, _RERANK),
            "A3_reranked": Fact(0.165, _RERANK),
            "C4_reranked": Fact(-0.0038, "§6.4", "C4 under bge-reranker-v2-m3"),
        },
        "dose_response": {
            "slope_strong": Fact(0.0027, _DOSE, "per level, p < 0.001"),
            "p_strong": Fact(0.001, _DOSE, "an upper bound: 'p < 0.001'"),
            "slope_weak": Fact(0.0012, _DOSE, "per level, p = 0.052"),
            "p_weak": Fact(0.052, _DOSE),
        },
    },
}


def fact(kind: str, group: str, key: str) -> Fact | None:
    """The :class:`Fact` at ``FACTS[kind][group][key]``, or None when the paper does not state it."""
    return FACTS.get(kind, {}).get(group, {}).get(key)


def value(kind: str, group: str, key: str, default: Any = math.nan) -> Any:
    """The paper's value at ``FACTS[kind][group][key]``; ``default`` (NaN) when the paper does not state it."""
    f = fact(kind, group, key)
    return default if f is None else f.value


def values(kind: str, group: str) -> dict[str, Any]:
    """``{key: value}`` of one group (empty when the paper has none for ``kind``)."""
    return {k: f.value for k, f in FACTS.get(kind, {}).get(group, {}).items()}


def label(kind: str) -> str:
    """How tables name the paper's corpus (``"Wikipedia-FA"``, ``"QASPER"``); the kind itself otherwise."""
    return LABELS.get(kind, kind)


def facts_table(kind: str | None = None) -> pd.DataFrame:
    """Every fact (or one kind's) as rows ``kind, group, key, value, where, note``."""
    rows = [{"kind": k, "group": g, "key": key, "value": f.value, "where": f.where, "note": f.note}
            for k, groups in FACTS.items() if kind is None or k == kind
            for g, facts in groups.items() for key, f in facts.items()]
    return pd.DataFrame(rows, columns=["kind", "group", "key", "value", "where", "note"])


def beside(ours: Mapping[str, Any], kind: str, group: str, lines: Mapping[str, str] | None = None) -> pd.DataFrame:
    """This run's numbers next to the paper's, one row per line: ``line, ours, paper, where``.

    ``lines`` maps a label to a key of ``ours`` and of the paper's ``group`` (``{label: key}``; default: every key
    of ``ours``). A key absent from ``ours`` shows NaN, a number the paper does not state shows NaN and an empty
    ``where``. Values are not rounded."""
    lines = dict(lines) if lines is not None else {k: k for k in ours}
    rows = []
    for text, key in lines.items():
        f = fact(kind, group, key)
        rows.append({"line": text, "ours": ours.get(key, math.nan),
                     "paper": f.value if f is not None else math.nan, "where": f.where if f is not None else ""})
    return pd.DataFrame(rows, columns=["line", "ours", "paper", "where"])


#: The QASPER funnel, line by line: label -> key of ``corpus.qasper.harvest_stats`` (and of ``FACTS["qasper"]
#: ["corpus"]`` where the paper has the line). The string level is the paper's count (distinct evidence strings
#: across annotators, before matching); the matched level is what the metric scores.
QASPER_LINES = {
    "questions read": ("questions_read", "questions"),
    "usable questions": ("usable", "usable"),
    "papers read": ("papers_read", "papers_read"),
    "papers with usable questions": ("papers_with_usable_questions", "papers"),
    "evidence matched: exact (share of matched strings)": ("share_exact", "share_exact"),
    "evidence matched: fuzzy": ("share_fuzzy", None),
    "evidence matched: section fallback": ("share_section", None),
    "multi-span, evidence strings as annotated": ("share_multi_string", "multi_span_appendix"),
    "multi-span, matched spans (scored)": ("share_multi_span", "multi_span"),
    "spans per question, evidence strings as annotated": ("mean_strings", "spans_per_question"),
    "spans per question, matched spans (scored)": ("mean_spans", None),
    "depth-1 papers": ("share_depth1_papers", "share_depth1_papers"),
}


def corpus_beside(stats: Mapping[str, Any], kind: str) -> pd.DataFrame:
    """Stage 01's numbers next to the paper's, line by line (``line, ours, paper, where``).

    QASPER: the funnel of :data:`QASPER_LINES` (both evidence levels, labelled). Wikipedia-FA: documents, the
    quality filters' outcome and the realised topic buckets (the paper's counts; its keyword table is not in the
    text, ours is). Any other kind (the demo) has no paper counterpart: the same lines with the paper's column
    empty (Wikipedia-style for a corpus with topic buckets, QASPER-style for harvested questions)."""
    rows = []
    q = stats if kind == "qasper" else stats.get("questions", {})  # the demo keeps its questions' stats apart
    if "questions_read" in q:
        for text, (ours_key, paper_key) in QASPER_LINES.items():
            f = fact("qasper", "corpus", paper_key) if kind == "qasper" and paper_key else None
            rows.append({"line": text, "ours": q.get(ours_key, math.nan),
                         "paper": f.value if f else math.nan, "where": f.where if f else ""})
    if "per_bucket" in stats:
        wiki = kind == "wikipedia"
        f = fact("wikipedia", "corpus", "documents") if wiki else None
        rows.append({"line": "documents accepted", "ours": stats.get("accepted", math.nan),
                     "paper": f.value if f else math.nan, "where": f.where if f else ""})
        for bucket, n in stats["per_bucket"].items():
            f = fact("wikipedia", "topic_buckets", bucket) if wiki else None
            rows.append({"line": f"topic bucket: {bucket}", "ours": n, "paper": f.value if f else math.nan,
                         "where": f.where if f else ""})
    return pd.DataFrame(rows, columns=["line", "ours", "paper", "where"])


def effects_dz(kind: str) -> dict[str, float]:
    """The paper's Cohen's dz of the four pre-registered contrasts on corpus ``kind`` (``{"C1": ..., "C4": ...}``,
    signed as A − B), for the power analysis. The text prints only Wikipedia-FA's C4 (−0.17); the others are
    derived from its stated ranges (each Fact's note says how). NaN where nothing can be derived (QASPER's C3,
    not significant). Raises KeyError for a kind the paper did not run."""
    if kind not in ("wikipedia", "qasper"):
        raise KeyError(f"paper.effects_dz: the paper reports no corpus of kind {kind!r}; kinds: ['qasper', 'wikipedia']")
    return {c: float(value(kind, "table1", f"{c}_dz")) for c in ("C1", "C2", "C3", "C4")}
