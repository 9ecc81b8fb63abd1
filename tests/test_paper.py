"""The paper's numbers have one home (chunkstudy.paper): every fact names where the paper states it, every
"paper vs. this run" display reads from there, and no other module restates a paper number in its code."""

from __future__ import annotations

import ast
import io
import math
import tokenize
from pathlib import Path

import pandas as pd
import pytest

from chunkstudy import paper, queries
from chunkstudy.report import report, tables

LIB = Path(paper.__file__).resolve().parent


def test_every_fact_names_its_place_in_the_paper_and_shares_are_fractions():
    t = paper.facts_table()
    assert len(t) > 100 and set(t["kind"]) == {"study", "wikipedia", "qasper"}
    assert t["where"].str.len().gt(0).all()
    shares = t[t["key"].str.contains("share|span_identity|multi_span|gold_top1|exact")]
    assert shares["value"].map(lambda v: isinstance(v, float) and 0 <= v <= 1).all(), shares


def test_the_paper_is_internally_consistent():
    """Numbers the paper states twice agree: Table 2 steps vs its means, Table 1 deltas vs Table 2, counts."""
    q, w = paper.values("qasper", "table2"), paper.values("wikipedia", "table2")
    assert q["A2"] - q["A0"] == pytest.approx(q["step_A0_A2"], abs=0.0015)
    assert q["A3"] - q["A2"] == pytest.approx(q["step_A2_A3"], abs=0.0015)
    assert w["A3"] - w["A2"] == pytest.approx(w["step_A2_A3"], abs=0.0015)
    assert q["A3"] - q["P"] == pytest.approx(paper.value("qasper", "table1", "C2_delta"), abs=0.0015)
    assert w["A3"] - w["P"] == pytest.approx(paper.value("wikipedia", "table1", "C2_delta"), abs=0.0015)
    assert paper.value("qasper", "table1", "C1_delta") == pytest.approx(q["A3"] - q["A1"])
    assert sum(paper.values("wikipedia", "topic_buckets").values()) == paper.value("wikipedia", "corpus", "documents")
    finals = [paper.value("wikipedia", "queries", f"finals_{t}") for t in queries.QTYPES]
    assert sum(finals) == paper.value("wikipedia", "queries", "finals")
    lo, hi = paper.value("study", "effects", "power_dz_range")
    assert (lo, -hi) == (paper.value("study", "effects", "dz_range_wikipedia_c1_c3")[0],
                         paper.value("wikipedia", "table1", "C4_dz"))


def test_displays_read_the_paper_module():
    assert report.PAPER_BM25 == {"wikipedia": 0.363, "qasper": 0.227} == {
        k: paper.value(k, "bm25", "gold_top1") for k in ("wikipedia", "qasper")}
    for kind in ("wikipedia", "qasper"):
        ind = paper.values(kind, "induction")
        assert tables.PAPER[kind]["induction"]["usable"] == ind["usable"]
        assert tables.PAPER[kind]["size_matching"] == paper.values(kind, "size_matching")
        assert tables.PAPER[kind]["induction"]["sections_per_doc"] == ind["sections_per_doc"]
    assert tables.PAPER["wikipedia"]["queries"]["paraphrase survivors (round 2)"] == 1945
    assert queries.generated._paper_funnel("wikipedia")["finals_by_type"]["multihop"] == 201


# literal numbers the paper states that a module other than paper.py once restated in code
PAPER_LITERALS = {4303, 5049, 1508, 1579, 1585, 2306, 1945, 951, 184, 198, 116, 590, 0.363, 0.227, 0.789, 0.758,
                  255.4, 259.6, 244.9, 249.8, 21.9, 14.5, 14.8, 0.957, 0.439, 0.0099, 0.0129, 0.0326, 0.0161,
                  0.0147}


def test_no_module_restates_a_paper_number_in_code():
    """Docstrings may quote the paper; code must read chunkstudy.paper (NUMBER tokens only, not strings)."""
    found = []
    for path in sorted(LIB.rglob("*.py")):
        if path.name == "paper.py":
            continue
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if tok.type == tokenize.NUMBER and ast.literal_eval(tok.string) in PAPER_LITERALS:
                found.append(f"{path.relative_to(LIB)}:{tok.start[0]}: {tok.string}")
    assert found == []


def test_beside_sets_ours_next_to_the_paper_and_leaves_unknowns_empty():
    t = paper.beside({"gold_top1": 0.3, "other": 1.0}, "qasper", "bm25", {"BM25 top-1": "gold_top1", "x": "other"})
    assert t["line"].tolist() == ["BM25 top-1", "x"]
    assert t["ours"].tolist() == [0.3, 1.0] and t["paper"].iat[0] == 0.227 and math.isnan(t["paper"].iat[1])
    assert t["where"].iat[0] and t["where"].iat[1] == ""


def test_corpus_beside_lines_up_the_qasper_funnel_at_both_evidence_levels():
    stats = {"questions_read": 1451, "usable": 1298, "papers_read": 416, "papers_with_usable_questions": 407,
             "share_exact": 0.958, "share_fuzzy": 0.02, "share_section": 0.022, "share_multi_string": 0.589,
             "share_multi_span": 0.573, "mean_strings": 2.60, "mean_spans": 2.31, "share_depth1_papers": 0.608}
    t = paper.corpus_beside(stats, "qasper").set_index("line")
    assert len(t) == len(paper.QASPER_LINES)
    assert t.loc["usable questions", "paper"] == 4303 and t.loc["usable questions", "ours"] == 1298
    assert t.loc["spans per question, evidence strings as annotated", "paper"] == 2.10
    assert t.loc["multi-span, matched spans (scored)", "paper"] == 0.43
    assert t.loc["multi-span, evidence strings as annotated", "paper"] == 0.439
    assert math.isnan(t.loc["spans per question, matched spans (scored)", "paper"])  # the paper's 2.10 is strings


def test_corpus_beside_puts_our_topic_buckets_next_to_the_papers():
    per_bucket = {"history_war": 55, "biography": 31, "science_nature": 20, "arts_media": 25,
                  "geography_places": 9, "other": 60}
    t = paper.corpus_beside({"accepted": 200, "per_bucket": per_bucket}, "wikipedia").set_index("line")
    assert t.loc["documents accepted", "paper"] == 200
    assert t.loc["topic bucket: history_war", "ours"] == 55 and t.loc["topic bucket: history_war", "paper"] == 60
    assert t.loc["topic bucket: geography_places", "paper"] == 13
    # the demo: our lines, no paper column values
    demo = paper.corpus_beside({"accepted": 10, "per_bucket": per_bucket, "questions": {"questions_read": 70}},
                               "demo")
    assert demo["paper"].isna().all() and "questions read" in set(demo["line"])
    assert isinstance(demo, pd.DataFrame)


def test_the_wikipedia_spec_samples_as_many_spans_as_the_papers_funnel_needs(root):
    """2,306 generated over 200 documents and 4 types is 2.9 per type per document: queries.per_doc is the
    smallest whole number whose sample covers it (every slot fills on long real articles)."""
    from chunkstudy import config

    cfg = config.load(root / "params" / "wikipedia_fa.yaml")
    n_docs, per = cfg.data["corpus"]["target_docs"], cfg.data["queries"]["per_doc"]
    assert n_docs == paper.value("wikipedia", "corpus", "documents")
    slots = n_docs * len(queries.QTYPES)
    assert (per - 1) * slots < paper.value("wikipedia", "queries", "generated") <= per * slots
