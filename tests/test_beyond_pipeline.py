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

from chunkstudy import artifacts, config, golden, runner, stats
from chunkstudy.stats import equivalence
from conftest import scratch_project, seed_embeddings

ROOT = Path(__file__).resolve().parents[1]
STAGES = [p.stem for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))]
LATE = ["L0", "L2", "L3", "LP", "L4", "LREC", "LREC-fixed"]


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
    cost = artifacts.read(cfg, "cost").set_index("condition")  # and charged as L3, though it encoded nothing
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
    assert set(cost["condition"]) >= set(LATE) and set(cost["embedder"]) == {"strong"}
    assert (cost.loc[cost["condition"].isin(LATE), "embedding"] == "late").all()
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
