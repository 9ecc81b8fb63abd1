"""Late chunking, cost and equivalence end to end (docs/beyond.md): params/demo_beyond.yaml (the demo without its
reranker, with late-pooled copies of A0, A3, P and A4, a late-pooled chunker cut and its size-matched twin, their
contrasts, and stats.sesoi) through the runner, offline, against tests/golden/demo_beyond.json (``--slow``); the
default suite runs the same tests on params/tiny_beyond.yaml (the same parameters on tiny's three documents, with
min_docs 3 so they get verdicts) against tests/golden/tiny_beyond.json.

It checks what the feature promises: the late conditions keep their chunk sets' offsets (so relevance cannot move
with the mode) and get vectors of their own, stored under keys that name the mode and the window, so a second
encoding of the same chunks (L4 = L3's) reads the store; the late contrasts are a Holm family of their own, with a
TOST verdict from the same draws; late(A4) routes two-stage; the cost table and its Pareto figure are in the report,
and Table 1 shows the TOST column beside Holm with its sentence; the drill-down covers the late contrasts; each
contrast's specification curve (the multiverse block) holds Table 1's row as its primary specification.
A second test runs the Markdown example with the same late conditions (``--slow``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from chunkstudy import artifacts, config, export, golden, runner, stats
from chunkstudy.chunks import chunk_sets
from chunkstudy.params import Bm25Params
from chunkstudy.retrieve import lexical
from chunkstudy.stats import equivalence, multiverse
from conftest import scratch_project, seed_embeddings

ROOT = Path(__file__).resolve().parents[1]
STAGES = [p.stem for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))]
LATE = ["L0", "L2", "L3", "LP", "L4", "LREC", "LREC-fixed"]
#: retrieve.modes [dense, bm25, hybrid] with the one embedder: the retrievers, the cells' second coordinate
RETRIEVERS = ["strong", "bm25", "hybrid-strong"]


#: params/tiny_beyond.yaml (demo_beyond.yaml on tiny's three documents) in the default suite; the full
#: demo_beyond run, and its golden, in the slow suite: every test below runs on both
RUNS = ["tiny_beyond", pytest.param("demo_beyond", marks=pytest.mark.slow)]


@pytest.fixture(scope="module", params=RUNS)
def beyond(request, tmp_path_factory):
    """A scratch project that has run ``./run_all.sh <run>`` once: (project root, Config, runner results).
    tiny_beyond's embedding store is seeded from the tiny run's (tests/conftest.py: its A0-A4 chunks are tiny's,
    with the same strong embedder), so only the late-pooled and the chunker's chunks are encoded."""
    name = request.param
    project = scratch_project(tmp_path_factory, "demo_raw")
    if name == "tiny_beyond":
        seed_embeddings(request.getfixturevalue("tiny_project")[0], "tiny", project, name)
    results = runner.run(project / "params" / f"{name}.yaml", project, log=lambda *_: None)
    return project, config.load(project / "params" / f"{name}.yaml", root=project), results


def test_every_stage_runs_and_the_headline_is_the_pinned_one(beyond):
    _, cfg, results = beyond
    assert [(s, status) for s, status, _ in results] == [(s, "ran") for s in STAGES]
    got = golden.headline(cfg)
    assert {"user_contrasts", "tost", "cost"} <= set(got)
    assert golden.compare(json.loads(golden.golden_path(ROOT, cfg.corpus).read_text()), got) == []


def test_late_conditions_keep_their_offsets_and_get_vectors_of_their_own(beyond):
    _, cfg, _ = beyond
    chunks = artifacts.read(cfg, "chunks")
    cols = ["doc_id", "start", "end", "prefix", "route_key"]
    for late_name, of in (("L0", "A0"), ("L2", "A2"), ("L3", "A3"), ("LP", "P"), ("L4", "A4")):
        a = chunks[chunks["condition"] == late_name][cols].reset_index(drop=True)
        b = chunks[chunks["condition"] == of][cols].reset_index(drop=True)
        assert a.equals(b), late_name  # the same chunks: relevance is computed on these offsets
    (n_texts,) = {r["n_texts"] for r in artifacts.read_json(cfg, "04_chunk_embed", "embedding_report")}
    late_rows = chunks.loc[chunks["condition"].isin(LATE), "text_row"].to_numpy()
    assert late_rows.min() == n_texts and len(set(late_rows)) == len(late_rows)  # one row per late chunk
    vec = artifacts.read_vectors(cfg, "strong")
    assert len(vec) == n_texts + len(late_rows)
    np.testing.assert_allclose(np.linalg.norm(vec[late_rows], axis=1), 1.0, atol=1e-5)
    rows = {c: chunks.loc[chunks["condition"] == c, "text_row"].to_numpy() for c in ("A0", "L0", "L3", "L4")}
    cos = (vec[rows["A0"]] * vec[rows["L0"]]).sum(axis=1)
    assert cos.mean() < 0.95  # context reached the chunks: late vectors are not the independent ones
    np.testing.assert_array_equal(vec[rows["L3"]], vec[rows["L4"]])  # the same chunks, the same stored vectors
    report = artifacts.read(cfg, "late_report")
    # the window is the embedder's max_seq_length (256), the overlap a quarter of it: late and independent vectors
    # see the same positions (embed.late_window / late_overlap null)
    assert set(report["condition"]) == set(LATE) and set(report["window"]) == {256} and set(report["overlap"]) == {64}
    l4 = report[report["condition"] == "L4"]
    assert (l4["tokens_run"] == 0).all() and (l4["tokens_read"] > 0).all()  # read back, never encoded twice
    assert all(k.endswith(".late1-w256-o64") for k in report["model_key"])
    cost = artifacts.read(cfg, "cost").query("embedder == 'strong'").set_index("condition")
    # and charged as L3, though it encoded nothing
    assert cost.loc["L4", "embed_seconds"] == pytest.approx(cost.loc["L3", "embed_seconds"])


def test_late_contrasts_are_a_holm_family_with_tost_from_the_same_draws(beyond):
    _, cfg, _ = beyond
    user = artifacts.read(cfg, "user_contrasts")
    prim = user[user["cell"] == cfg.params().primary_cell.name].set_index("contrast")
    assert list(prim.index) == ["B1", "B2", "B3", "B4", "B5", "B6", "B7"]
    assert prim.loc["B1", ["condition_a", "condition_b"]].tolist() == ["L0", "A0"]
    assert prim.loc["B7", ["condition_a", "condition_b"]].tolist() == ["A3", "L2"]
    assert prim["p_holm"].tolist() == pytest.approx(stats.holm(prim["p"].to_numpy()).tolist())
    assert prim["inference"].all() and set(prim["equivalence"]) <= set(equivalence.VERDICTS)
    # the verdicts hold the family's error: Holm within the user's seven on the TOST p-values
    assert prim["p_tost_holm"].tolist() == pytest.approx(stats.holm(prim["p_tost"].to_numpy()).tolist())
    for r in prim.itertuples():
        assert r.equivalence == equivalence.verdict_of(r.p_tost_holm, r.p_met_holm, 0.05)
        lo, hi = (r.ci_low_cal, r.ci_high_cal) if r.decided_by == "calibrated" else (r.ci_low, r.ci_high)
        assert lo <= r.tost_ci_low <= r.tost_ci_high <= hi  # 90% inside the 95% of the test that decided
    paper = artifacts.read(cfg, "contrasts")
    assert paper["equivalence"].notna().all() and "equivalence" in paper
    recall = artifacts.read(cfg, "section_recall_summary")
    assert {"A4", "G4", "L4"} == set(recall["condition"])  # late(A4) is routed two-stage


def test_the_report_shows_the_cost_table_the_pareto_figure_and_tost_beside_holm(beyond):
    project, cfg, _ = beyond
    cost = artifacts.read(cfg, "cost")
    assert set(cost["condition"]) >= set(LATE) and set(cost["embedder"]) == set(RETRIEVERS)
    late = cost[cost["condition"].isin(LATE)]
    assert (late.loc[late["embedder"] != "bm25", "embedding"] == "late").all()
    assert (cost.loc[cost["embedder"] == "bm25", "embedding"] == "none").all()
    assert cost.groupby("embedder")["pareto_tokens"].any().all()
    out = project / "figures" / cfg.corpus
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "## What each condition costs (exploratory)" in md and (out / "fig_cost.png").is_file()
    assert "| TOST 90% CI" in md and "| TOST Holm p" in md and "Holm asks whether a contrast differs from zero" in md
    assert "The equivalence bounds (cov-nDCG@10 \u00b10.02) were declared before the run" in md
    assert "Correctly specified secondary model" in md and "C1: " in md  # the paired MixedLM; each reading
    assert "Quality against cost" in html and (out / "tables" / "cost.tex").is_file()
    drill = artifacts.read(cfg, "drilldown")
    assert {"B1", "B2", "B3"} <= set(drill["contrast"])
    assert artifacts.read_manifest(cfg, "01_corpus")["equivalence_declared"]["sesoi"] == 0.02


def test_each_contrast_s_specification_curve(beyond):
    """The multiverse block: 06 scores the other cut-offs, 07 runs every contrast under every specification with
    the primary one equal to Table 1 exactly, C2 also against P7 (P's chunks under another placebo seed, sharing
    every text row whose prefix is P's), 01's manifest records the axes and the report shows the section."""
    project, cfg, _ = beyond
    extra = artifacts.read(cfg, "multiverse_scores")
    assert set(extra["metric"]) == {"cov-nDCG@5", "cov-nDCG@20", "nDCG@5", "nDCG@20"}
    specs, summary = artifacts.read(cfg, "multiverse"), artifacts.read(cfg, "multiverse_summary").set_index("contrast")
    table1 = artifacts.read(cfg, "contrasts").query("confirmatory").set_index("contrast")
    primary = specs[specs["primary"]].set_index("contrast")
    cols = ["mean_delta", "ci_low", "ci_high", "p", "dz", "n_queries", "n_docs", "inference"]
    assert primary[cols].equals(table1[cols].astype(primary[cols].dtypes.to_dict()))
    # 8 metric x k choices, 7 query subsets (three types), 3 seeds; C2 twice (P, P7)
    assert summary["n_declared"].to_dict() == {"C1": 168, "C2": 336, "C3": 168, "C4": 168}
    assert set(specs.loc[specs["contrast"] == "C2", "spec_b"]) == {"P", "P7"}
    chunks = artifacts.read(cfg, "chunks")
    p, p7 = (chunks[chunks["condition"] == c].reset_index(drop=True) for c in ("P", "P7"))
    assert p7[["doc_id", "start", "end"]].equals(p[["doc_id", "start", "end"]])
    same = (p7["prefix"] == p["prefix"]).to_numpy()
    assert not same.all() and (p7.loc[same, "text_row"].to_numpy() == p.loc[same, "text_row"].to_numpy()).all()
    assert artifacts.read_manifest(cfg, "01_corpus")["multiverse_declared"] == config.as_dict(cfg.params().multiverse)
    out = project / "figures" / cfg.corpus
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "## Specification curves (exploratory)" in md and "declared before the run" in md
    assert (out / "fig_multiverse.png").is_file() and html.count('<details class="curve"') == 4
    assert (out / "tables" / "multiverse_C2.md").is_file()


@pytest.mark.slow
def test_the_markdown_example_reports_the_late_contrasts(tmp_path_factory):
    """The Markdown example (five documents) with late(A0), late(A3) and the three contrasts: every stage runs and
    07 and the report carry them (few documents: no inference, so no verdicts, and the report says why)."""
    project = scratch_project(tmp_path_factory, "markdown_example_raw")
    params = project / "params" / "markdown_late.yaml"
    params.write_text("base: markdown_example.yaml\nretrieve: {rerankers: {}}\n"
                      "conditions: {extra: {L0: {of: A0, embedding: late}, L3: {of: A3, embedding: late}}}\n"
                      "contrasts: {extra: {B1: [L0, A0], B2: [L0, A1], B3: [A3, L0]}}\n"
                      "stats: {n_boot: 1000, sesoi: 0.02}\n")
    results = runner.run(params, project, log=lambda *_: None)
    assert [s for s, status, _ in results if status != "ran"] == []
    cfg = config.load(params, root=project)
    user = artifacts.read(cfg, "user_contrasts")
    assert set(user["contrast"]) == {"B1", "B2", "B3"} and "equivalence" in user
    md = (project / "figures" / "markdown_late" / "report.md").read_text()
    assert "B1 §" in md and "## What each condition costs" in md


# ------------------------------------------------------------------------------------------------ retrieval modes


def test_each_condition_is_ranked_in_every_mode_and_its_prefix_enters_the_lexical_index(beyond):
    """retrieve.modes [dense, bm25, hybrid]: every condition in each retriever, first stage and reranked (the
    strong embedder's lists in every mode); the BM25 lists are BM25 over what each condition embeds (A1: its
    situating context + content), and late pooling, which changes vectors only, leaves a condition's BM25 list
    as its source condition's (L3's is A3's)."""
    _, cfg, _ = beyond
    runs, chunks = artifacts.read(cfg, "runs"), artifacts.read(cfg, "chunks")
    conds = set(chunks["condition"])
    for rr in ("none", *cfg.params("retrieve").rerankers):  # tiny_beyond's untrained cross-encoder
        cells = runs[runs["reranker"] == rr].groupby("embedder")["condition"].agg(set)
        assert list(cells.index.sort_values()) == sorted(RETRIEVERS) and all(c == conds for c in cells)
    documents, queries = artifacts.read(cfg, "documents"), artifacts.read(cfg, "queries")
    a1 = chunks[chunks["condition"] == "A1"].reset_index(drop=True)
    texts = chunk_sets.embedded_texts(a1, documents)
    assert (a1["prefix"] != "").all() and all(t.startswith(p) for t, p in zip(texts, a1["prefix"]))
    p = Bm25Params()
    index = lexical.build_index(lexical.tokenize(list(texts), p), p)
    idx, scores, n = lexical.flat_search(index, lexical.tokenize(queries["text"].tolist(), p), a1["chunk_id"],
                                         cfg.params("retrieve").k)
    got = runs[(runs["embedder"] == "bm25") & (runs["reranker"] == "none") & (runs["condition"] == "A1")]
    assert got["chunk_id"].tolist() == [a1["chunk_id"][j] for q in range(len(queries)) for j in idx[q, :n[q]]]
    np.testing.assert_array_equal(got["score"].to_numpy(), np.concatenate([scores[q, :n[q]]
                                                                           for q in range(len(queries))]))

    def plain(cond):
        r = runs[(runs["embedder"] == "bm25") & (runs["reranker"] == "none") & (runs["condition"] == cond)]
        return [(q, c.split("|", 1)[1], s) for q, c, s in zip(r["query_id"], r["chunk_id"], r["score"])]

    assert plain("L3") == plain("A3") and plain("L0") == plain("A0")
    report = artifacts.read_json(cfg, "05_retrieve", "lexical_report")
    assert {r["condition"] for r in report["conditions"]} == conds and report["method"] == "lucene"
    recall = artifacts.read(cfg, "section_recall_summary")
    assert set(recall.loc[recall["condition"] == "A4", "embedder"]) == set(RETRIEVERS)  # routed in every mode


def test_the_report_shows_each_mode_s_contrasts_and_the_recipe_with_its_interval(beyond):
    project, cfg, _ = beyond
    contrasts = artifacts.read(cfg, "contrasts")
    primary = cfg.params().primary_cell
    for r in RETRIEVERS:  # the four contrasts in each mode's cell of the primary metric, Holm within it
        cell = contrasts[(contrasts["metric"] == primary.metric) & (contrasts["embedder"] == r)
                         & (contrasts["reranker"] == "none")]
        assert list(cell["contrast"]) == ["C1", "C2", "C3", "C4"]
        assert cell["confirmatory"].tolist() == [r == primary.embedder] * 4
        assert cell["p_holm"].tolist() == pytest.approx(stats.holm(cell["p"].to_numpy()).tolist())
    per_type = artifacts.read(cfg, "per_type")
    assert set(per_type.loc[per_type["metric"] == primary.metric, "embedder"]) == set(RETRIEVERS)
    recipe, scores = artifacts.read(cfg, "recipe"), artifacts.read(cfg, "recipe_scores")
    k = cfg.params("stats").recipe_k
    assert set(scores["metric"]) == {f"recall@{k}"} and set(scores["condition"]) == {"A0", "A1"}
    rerankers = list(cfg.params("retrieve").rerankers)
    assert recipe["step"].tolist() == ["R0", "R1", "R2", "R3", "R4", "R5"] + ["R6"] * len(rerankers)
    assert recipe.loc[recipe["step"] == "R6", ["condition", "embedder", "reranker"]].values.tolist() == \
        [["A1", "hybrid-strong", r] for r in rerankers]

    def failure(cond, retriever, rr="none"):
        sel = scores[(scores["condition"] == cond) & (scores["embedder"] == retriever) & (scores["reranker"] == rr)]
        return float((1 - sel["value"]).mean())

    r5 = recipe.set_index("step").loc["R5"]
    assert r5["failure"] == pytest.approx(failure("A1", "hybrid-strong"))
    assert r5["reduction"] == pytest.approx(1 - failure("A1", "hybrid-strong") / failure("A0", "strong"))
    assert r5["anthropic"] == 0.49 and recipe.set_index("step").loc["R3", "anthropic"] == 0.35
    for name, spec in cfg.params("retrieve").rerankers.items():
        if spec.top_n <= k:  # reordering the top n <= k cannot change which chunks the top k hold
            r6 = recipe[(recipe["step"] == "R6") & (recipe["reranker"] == name)].iloc[0]
            assert r6["failure"] == r5["failure"] and r6["reduction"] == r5["reduction"]
    ok = recipe[recipe["inference"]]
    assert len(ok) and (ok["ci_low"] <= ok["reduction"]).all() and (ok["reduction"] <= ok["ci_high"]).all()
    out = project / "figures" / cfg.corpus
    md = (out / "report.md").read_text()
    assert "## Retrieval modes: dense, BM25 and hybrid (exploratory)" in md
    assert "Exploratory: the contrasts in each retrieval mode" in md and "Anthropic's contextual-retrieval recipe" in md
    assert (out / "fig_recipe.png").is_file() and (out / "tables" / "recipe.tex").is_file()
    got = golden.headline(cfg)
    assert set(got["modes"]) == {"bm25", "hybrid-strong"} and len(got["recipe"]) == 6 + len(rerankers)


def test_every_mode_s_trec_runs_score_in_ir_measures_as_in_the_study(beyond, tmp_path):
    """The BEIR/TREC export of every cell, each mode's first-stage and reranked lists included (a BM25 list may be
    shorter than k): ir_measures' nDCG@10 and RR equal the study's per query."""
    _, cfg, _ = beyond
    written = export.export_run(cfg, tmp_path)
    check = export.check_with_ir_measures(cfg, written)
    assert set(check["embedder"]) == set(RETRIEVERS)
    assert set(check["reranker"]) == {"none", *cfg.params("retrieve").rerankers}
    assert check[["max_diff_nDCG", "max_diff_RR"]].to_numpy().max() <= 1e-9


def test_the_mode_is_an_axis_of_each_contrast_s_specification_curve(beyond):
    """multiverse.embedders takes the run's retrievers: each contrast's curve over the three modes (with the query
    types), whose dense primary specification is Table 1's row and whose other modes' all-query specifications are
    07's contrasts of those cells."""
    _, cfg, _ = beyond
    p = cfg.params()
    mv = config.record("multiverse", {"embedders": RETRIEVERS, "query_types": ["all", "each"]})
    scores, queries = artifacts.read(cfg, "scores"), artifacts.read(cfg, "queries")
    got = multiverse.curves(scores, None, queries, p.stats, p.primary_cell, mv,
                                  [(p.stats.primary_metric, "cov-nDCG", p.metrics.cutoff)], cfg.corpus)
    specs = got.specifications
    n_types = queries["qtype"].nunique()
    assert (got.summary["n_declared"] == len(RETRIEVERS) * (1 + n_types)).all()
    contrasts = artifacts.read(cfg, "contrasts").set_index(["embedder", "contrast"])
    cols = ["mean_delta", "ci_low", "ci_high", "p", "n_queries"]
    for r in RETRIEVERS:
        every = specs[(specs["embedder"] == r) & (specs["query_types"] == "all")].set_index("contrast")
        want = contrasts[contrasts["metric"] == p.stats.primary_metric].loc[r]
        want = want[want["reranker"] == "none"]
        for c in every.index:
            assert every.loc[c, cols].tolist() == pytest.approx(want.loc[c, cols].tolist(), nan_ok=True), (r, c)
    assert specs.loc[specs["primary"], "embedder"].unique().tolist() == [p.embed.strong]
