"""Figures and tables of stage 08 (issue 10).

Inputs are a small synthetic run built by the real library chain: documents with gold and (different) induced
outlines (corpus.model), every condition's chunks (chunk_sets.build_all, MiniLM tokenizer), A1 contexts keyed by the
A0 windows, queries with spans on real paragraphs, retrieval (retrieve.retrieve_all) over *random unit vectors*
(the figures do not care what the embedder is; no model is loaded), scores (metrics.score_runs) and the 07
statistics (stats.*) with a small bootstrap. Tables are checked against independent pandas computations on those
inputs; every figure must render (Agg) to a non-trivial PNG.
"""

from __future__ import annotations

import io

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from chunkstudy import design, induce, paper, significance, stats  # noqa: E402
from chunkstudy.chunks import chunk_sets  # noqa: E402
from chunkstudy.prefix import placebo  # noqa: E402
from chunkstudy.chunks import cuts as chunk_cuts  # noqa: E402
from chunkstudy import config as config_mod  # noqa: E402
from chunkstudy import metrics, retrieve  # noqa: E402
from chunkstudy.chunks import chunking  # noqa: E402
from chunkstudy.corpus import model  # noqa: E402
from chunkstudy.report import figures, tables  # noqa: E402
from chunkstudy.stats import power  # noqa: E402

PRIMARY = design.PrimaryCell("cov-nDCG@10", "strong", "none")  # the primary cell of the simulated runs
ALL = ["A0", "A1", "A2", "A3-d1", "A3-d2", "A3", "P", "A4", "G2", "G3", "G4"]
WORDS = ("river valley harbour engine council winter archive signal bridge market orchard lantern census canal "
         "furnace treaty glacier quarry ferry beacon").split()


def _sentence(rng: np.random.Generator, i: int) -> str:
    w = rng.choice(WORDS, size=int(rng.integers(8, 16)))
    return f"{w[0].capitalize()} {' '.join(w[1:])} number {i}."


def _paragraph(rng, i: int) -> str:
    return " ".join(_sentence(rng, 10 * i + k) for k in range(int(rng.integers(3, 7))))


def build_synthetic_run(n_docs: int = 4, seed: int = 7, n_boot: int = 300) -> dict:
    """A complete miniature run: every table stages 01-07 write, for n_docs documents and ~8 queries each."""
    rng = np.random.default_rng(seed)
    docs, paras, gold, induced = [], [], [], []
    for d in range(n_docs):
        doc_id = f"d{d:05d}"
        b = model.DocumentBuilder(doc_id, f"Synthetic article {d}", lead_title="")
        for i in range(3):
            b.paragraph(_paragraph(rng, i))
        p = 3
        for s in range(3):
            b.heading(2, f"Part {s + 1}")
            for t in range(2):
                b.heading(3, f"Topic {s + 1}.{t + 1}")
                for _ in range(2):
                    b.heading(4, f"Detail {p}")
                    b.paragraph(_paragraph(rng, p))
                    b.paragraph(_paragraph(rng, p + 1))
                    p += 2
        doc, pt, st = b.build(source="synthetic")
        docs.append(doc)
        paras.append(pt)
        gold.append(st)
        n = len(pt)
        cuts = [0, 2, 7, 12, 18, 22, n]   # an induced outline that disagrees with the gold one
        outline = [(f"Induced {k}", 1 if k % 3 == 0 else 2, cuts[k], cuts[k + 1] - 1) for k in range(len(cuts) - 1)]
        induced.append(model.sections_from_outline(doc_id, pt, outline, text_len=len(doc["text"])))
    documents = pd.DataFrame(docs)
    paragraphs = pd.concat(paras, ignore_index=True)
    sections_gold = pd.concat(gold, ignore_index=True)
    sections_induced = pd.concat(induced, ignore_index=True)
    chunk_params = dict(config_mod.SCHEMA["chunking"])
    chunk_params = {k: v.default for k, v in chunk_params.items()}
    counter = chunking.load_counter(chunk_params["tokenizer"])
    a0 = chunk_cuts.context_windows(documents, paragraphs, {"sections_induced": sections_induced, "sections_gold": None},
                                    [design.condition("A1")], config_mod.record("chunking", chunk_params), counter)
    contexts = a0.assign(
        context=[f"This passage of {d} discusses its part at characters {s} to {e}." for d, s, e in
                 zip(a0["doc_id"], a0["start"], a0["end"])])
    built = chunk_sets.build_all(documents, paragraphs, sections_gold, sections_induced, contexts,
                                 config_mod.record("chunking", chunk_params),
                                 counter)
    chunks = built["chunks"]

    qrows = []
    for d, pt in zip(documents["doc_id"], paras):
        picks = rng.choice(len(pt), size=8, replace=False)
        for j, pi in enumerate(picks):
            spans = [[int(pt["start"].iat[pi]), int(pt["end"].iat[pi])]]
            if j % 3 == 2:
                pj = (pi + 5) % len(pt)
                spans.append([int(pt["start"].iat[pj]), int(pt["end"].iat[pj])])
            qrows.append({"query_id": f"{d}-q{j}", "doc_id": d, "qtype": ("factoid", "multihop", "structural")[j % 3],
                          "text": f"synthetic question {j} about {d}", "spans": spans})
    queries = pd.DataFrame(qrows)

    n_rows = int(chunks["text_row"].max()) + 1
    vecs, qvecs = {}, {}
    for e, dim in (("strong", 24), ("weak", 12)):
        v = rng.normal(size=(n_rows, dim)).astype(np.float32)
        vecs[e] = v / np.linalg.norm(v, axis=1, keepdims=True)
        q = rng.normal(size=(len(queries), dim)).astype(np.float32)
        qvecs[e] = q / np.linalg.norm(q, axis=1, keepdims=True)
    ret = retrieve.retrieve_all(chunks, vecs, qvecs, queries,
                                config_mod.record("retrieve", {"k": 20, "route_sections": 3, "backend": "numpy",
                                                               "two_stage_conditions": ["A4", "G4"]}))
    runs = ret["runs"]
    # a "reranked" copy of the strong runs (reversed top 10), so the reranker-lift view has a cell to show
    rr = runs[(runs["embedder"] == "strong") & (runs["rank"] <= 10)].copy()
    rr["reranker"] = "xenc"
    rr["rank"] = 11 - rr["rank"]
    runs = pd.concat([runs, rr], ignore_index=True)
    mparams = {k: v.default for k, v in config_mod.SCHEMA["metrics"].items()}
    scores = metrics.score_runs(runs, chunks, queries, config_mod.record("metrics", mparams), "synthetic")
    sp = {k: v.default for k, v in config_mod.SCHEMA["stats"].items()}
    sp["n_boot"] = n_boot
    out = dict(documents=documents, paragraphs=paragraphs, sections_gold=sections_gold,
               sections_induced=sections_induced, contexts_a1=contexts, chunks=chunks,
               size_matching=built["size_matching"], placebo=built["placebo"],
               placebo_buckets=built["placebo_buckets"], summary=built["summary"], queries=queries, runs=runs,
               section_recall=ret["section_recall"],
               section_recall_summary=retrieve.section_recall_summary(ret["section_recall"]), scores=scores,
               contrasts=stats.contrasts_table(scores, queries, config_mod.record("stats", sp), PRIMARY, "synthetic"),
               mixedlm=stats.mixedlm_table(scores, queries, config_mod.record("stats", sp), PRIMARY, "synthetic"),
               mixedlm_paired=stats.paired_mixedlm_table(scores, queries, config_mod.record("stats", sp), PRIMARY,
                                                         "synthetic"),
               dose_response=stats.dose_response(scores, queries, config_mod.record("stats", sp), PRIMARY,
                                                 "synthetic"),
               per_type=stats.per_type(scores, queries, config_mod.record("stats", sp), PRIMARY, "synthetic"),
               condition_means=stats.condition_means(scores, queries, config_mod.record("stats", sp), PRIMARY,
                                                     "synthetic"),
               power=power.power_table(scores, queries,
                                       config_mod.record("stats", {**sp, "power_n_docs": [4, 20, 100],
                                                                   "power_n_sims": 40, "power_n_boot": 100}),
                                       PRIMARY, "synthetic",
                                       paper.effects_dz("wikipedia"), "paper (wikipedia)"))
    out["reranker_lift"] = stats.reranker_lift(out["condition_means"], config_mod.record("stats", sp), PRIMARY)
    out["power_needed"] = power.needed_table(out["power"])
    # a run without user contrasts (contrasts.extra) writes their tables empty
    out["user_contrasts"] = stats.user_contrasts_table(scores, queries, config_mod.record("stats", sp), PRIMARY,
                                                       "synthetic", {})
    out["user_power"] = power.user_power_table(scores, queries, config_mod.record("stats", sp), PRIMARY, "synthetic",
                                               {})
    out["user_power_needed"] = power.needed_table(out["user_power"])
    from chunkstudy.stats import cost, size_check

    out["size_check"] = size_check.size_check_table(
        scores, queries, config_mod.record("stats", {**sp, "check_sims": 100, "check_mixed_sims": 20}), PRIMARY,
        "synthetic", {stats.CONFIRMATORY: (sp["contrasts"], out["contrasts"]),
                      stats.USER_ADDED: ({}, out["user_contrasts"])})

    m = out["condition_means"]
    quality = m[(m["metric"] == PRIMARY.metric) & (m["reranker"] == "none")].rename(columns={"mean": "quality"})
    out["cost"] = cost.cost_table(chunks, quality, cost.llm_calls_from_records([]),
                                  {c: [] for c in chunks["condition"].unique()},
                                  {e: cost.EncoderShape(int(v.shape[1]), 4, 256, 2) for e, v in vecs.items()},
                                  two_stage={"A4", "G4"}, retrieval=ret["timing"])
    # a dense-only run (retrieve.modes at its default) writes the recipe's table empty
    from chunkstudy.stats import recipe

    out["recipe"] = recipe.recipe_table(pd.DataFrame(), config_mod.record("stats", sp), "strong", "synthetic")
    # each contrast's specification curve (chunkstudy.stats.multiverse): the weak embedder has no reranked cell
    from chunkstudy.stats import multiverse

    mv = config_mod.record("multiverse", {"metrics": ["cov-nDCG@10", "MRR"], "embedders": ["strong", "weak"],
                                          "rerankers": ["none", "xenc"], "query_types": ["all", "each"]})
    out["multiverse"], out["multiverse_summary"], out["multiverse_axes"] = multiverse.curves(
        scores, None, queries, config_mod.record("stats", sp), PRIMARY, mv, design.metric_axis(mv.metrics, (10,)),
        "synthetic")
    out["induction_log"] = pd.DataFrame({"doc_id": documents["doc_id"],
                                         "status": (["ok", "repaired", "repaired", "failed"] * n_docs)[:n_docs],
                                         "n_windows": ([1, 2, 1, 1] * n_docs)[:n_docs]})
    structural = {name: chunking.structural_chunks(documents, paragraphs, secs, counter, chunk_params["max_chunk_tokens"],
                                                   chunk_params["min_chunk_tokens"], chunk_params["sentence_splitter"])
                  for name, secs in (("induced", sections_induced), ("gold", sections_gold))}
    out["induction_stats"] = induce.induction_stats(sections_induced, out["induction_log"], sections_gold,
                                                    structural["induced"], structural["gold"])
    out["query_funnel"] = pd.DataFrame({"stage": [0, 0, 1, 1], "step": ["harvested", "harvested", "finals",
                                                                          "finals"],
                                        "qtype": ["factoid", "all", "factoid", "all"], "count": [20, 40, 11, 32],
                                        "n_docs": [4, 4, 4, 4]})
    out["corpus_funnel"] = pd.DataFrame({"step": ["pages read", "accepted"], "count": [12, n_docs]})
    return out


@pytest.fixture(scope="module")
def run() -> dict:
    return build_synthetic_run()


def _png_bytes(fig) -> int:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=60)
    return buf.tell()


# ------------------------------------------------------------------------------------------------ formatting

@pytest.mark.parametrize("value,expected", [(0.0125, "+0.0125"), (-0.03264, "-0.0326"), (float("nan"), "\u2014"),
                                            (None, "\u2014"), (0.0, "+0.0000")])
def test_fmt_delta(value, expected):
    assert tables.fmt_delta(value) == expected


@pytest.mark.parametrize("p,n_boot,expected", [(0.0213, None, "0.021"), (0.0004, None, "< 0.001"),
                                               (0.0, 10000, "< 0.0001"), (0.0, 2000, "< 0.0005"),
                                               (1.0, 10000, "1.000"), (float("nan"), 10000, "\u2014")])
def test_fmt_p(p, n_boot, expected):
    assert tables.fmt_p(p, n_boot) == expected


def test_fmt_misc():
    assert tables.fmt_pct(0.789) == "78.9%"
    assert tables.fmt_int(1579) == "1,579"
    assert tables.fmt_ci(-0.01, 0.03) == "[-0.0100, +0.0300]"
    assert tables.fmt_num(0.40349) == "0.403"


def test_latex_is_booktabs_and_escaped():
    t = tables.Table("x", "A_B & 50% \u0394", pd.DataFrame(), pd.DataFrame({"name": ["a_b", "c&d"],
                                                                          "val": ["+0.10", "< 0.001"]}))
    tex = t.latex()
    assert tex.index(r"\toprule") < tex.index(r"\midrule") < tex.index(r"\bottomrule")
    assert r"\begin{tabular}{lr}" in tex          # text column left, numeric column right
    assert r"a\_b & +0.10 \\" in tex and r"c\&d & $<$ 0.001 \\" in tex
    assert r"\caption{A\_B \& 50\% $\Delta$}" in tex


# ------------------------------------------------------------------------------------------------ tables

def test_table1_notes_give_the_correctly_specified_model_beside_the_preregistered_one(run):
    t = tables.table1(run["contrasts"], run["mixedlm"], paired=run["mixedlm_paired"])
    (note,) = [n for n in t.notes if n.startswith("Correctly specified secondary model")]
    p = run["mixedlm_paired"].set_index("contrast")
    assert "random intercept per document" in note
    ok = run["contrasts"].set_index("contrast").loc[["C1", "C2", "C3", "C4"]]
    ok = ok[ok["confirmatory"]]["inference"]
    for c in ("C1", "C2", "C3", "C4"):  # every contrast, its coefficient as Table 1 rounds it, CI and p gated
        shown = f"{c} {tables.fmt_delta(p.at[c, 'coef'])} " + ("[" if ok[c] else f"(CI and p {tables.NO_INFERENCE})")
        assert shown in note
    assert not any(n.startswith("Correctly specified") for n in tables.table1(run["contrasts"], run["mixedlm"]).notes)


def test_table1_rows_equal_the_confirmatory_contrasts(run):
    c, m = run["contrasts"], run["mixedlm"]
    t = tables.table1(c, m)
    conf = c[c["confirmatory"]].reset_index(drop=True)
    assert t.data["contrast"].tolist() == ["C1", "C2", "C3", "C4"]
    assert list(zip(t.data["condition_a"], t.data["condition_b"])) == [("A3", "A1"), ("A3", "P"), ("G3", "A3"),
                                                                         ("A4", "A3")]
    for col in ("mean_delta", "ci_low", "ci_high", "p", "p_holm", "dz"):
        np.testing.assert_array_equal(t.data[col].to_numpy(float), conf[col].to_numpy(float))  # unrounded
    np.testing.assert_array_equal(t.data["mixedlm_coef"].to_numpy(float), m.set_index("contrast").loc[
        t.data["contrast"], "coef"].to_numpy(float))
    # the paired mean delta of C1, recomputed from the scores table by hand
    s = run["scores"]
    cell = s[(s["metric"] == "cov-nDCG@10") & (s["embedder"] == "strong") & (s["reranker"] == "none")]
    w = cell.pivot(index="query_id", columns="condition", values="value")
    assert t.data["mean_delta"].iat[0] == pytest.approx((w["A3"] - w["A1"]).mean(), abs=1e-12)
    assert t.display["\u0394"].iat[0] == f"{(w['A3'] - w['A1']).mean():+.4f}"
    assert t.display["Question"].tolist()[0] == "organization vs. contextualization"
    assert t.display["n (q / docs)"].iat[0] == "32 / 4"


def test_table1_without_a_primary_cell_is_an_error(run):
    c = run["contrasts"].assign(confirmatory=False)
    with pytest.raises(ValueError, match="no confirmatory rows"):
        tables.table1(c)


def test_table2_means_match_groupby_oracle(run):
    t = tables.table2(run["condition_means"], "strong", "none")
    s = run["scores"]
    oracle = s[(s["embedder"] == "strong") & (s["reranker"] == "none")].pivot_table(
        index="condition", columns="metric", values="value", aggfunc="mean")
    assert t.data["condition"].tolist() == ALL   # paper order
    assert list(t.data.columns[2:]) == list(tables.METRIC_ORDER)
    for m in tables.METRIC_ORDER:
        np.testing.assert_allclose(t.data[m].to_numpy(float), oracle.loc[ALL, m].to_numpy(float), rtol=0, atol=1e-12)
    assert (t.data["n_queries"] == 32).all()
    a3 = t.display.set_index("Condition").loc["A3", "cov-nDCG@10"]
    assert a3 == f"{oracle.loc['A3', 'cov-nDCG@10']:.3f}"


def test_table2_unknown_cell_names_what_exists(run):
    with pytest.raises(ValueError, match="no rows for embedder 'huge'"):
        tables.table2(run["condition_means"], "huge", "none")


def test_table4_lists_conditions_with_realised_sizes(run):
    t = tables.table4(list(reversed(ALL)), run["summary"], "llm", 5)
    assert t.data["condition"].tolist() == ALL
    assert t.data.set_index("condition").loc["A4", "retrieval"].startswith("two-stage")
    ch = run["chunks"]   # 04 computed the sizes; 08 only formats them
    assert t.data.set_index("condition").loc["P", "n_chunks"] == (ch["condition"] == "P").sum()
    assert t.data.set_index("condition").loc["P", "mean_content_tokens"] == pytest.approx(
        ch.loc[ch["condition"] == "P", "n_content_tokens"].mean(), rel=1e-12)
    assert t.data.set_index("condition").loc["A2", "mean_prefix_tokens"] == 0.0
    assert t.data.set_index("condition").loc["A1", "boundaries"] == "A0"  # the declared Table 4 text
    base = tables.table4(["A1", "G4"], None, contexts_method="extractive", route_sections=3).data.set_index("condition")
    assert base.loc["A1", "prefix"].startswith("extractive") and "baseline" in base.loc["A1", "prefix"]
    assert base.loc["G4", "retrieval"] == "two-stage (top 3 sections)"
    with pytest.raises(ValueError, match="unknown condition 'Z9'"):
        tables.table4(["A0", "Z9"], None, "llm", 5)


def test_induction_table_formats_02s_numbers_and_paper_column(run):
    st = run["induction_stats"]
    t = tables.induction(st, kind="qasper", method="texttiling")
    d = t.data.set_index("quantity")
    assert d.loc["documents", "ours"] == 4 and d.loc["usable", "ours"] == 3 and d.loc["repaired", "ours"] == 2
    assert d.loc["sections_per_doc", "ours"] == 6.0
    assert d.loc["gold_sections_per_doc", "ours"] == run["sections_gold"].groupby("doc_id").size().mean()
    # the paper's measure, computed once by 02 on the structural chunks (A2 and G2 are those chunks in 04)
    ch = run["chunks"]
    a2 = set(map(tuple, ch.loc[ch["condition"] == "A2", ["doc_id", "start", "end"]].to_numpy().tolist()))
    g2 = set(map(tuple, ch.loc[ch["condition"] == "G2", ["doc_id", "start", "end"]].to_numpy().tolist()))
    assert d.loc["span_identity", "ours"] == st["identity_with_gold"] == pytest.approx(len(a2 & g2) / len(a2))
    assert d.loc["usable", "paper"] == paper.value("qasper", "induction", "usable")
    assert d.loc["span_identity", "paper"] == paper.value("qasper", "induction", "span_identity")
    assert d.loc["induced_whole", "ours"] == 3  # one of the four documents was induced in two windows
    disp = t.display.set_index("Quantity")
    assert disp.loc["usable structure", "Ours"] == "3/4"
    assert disp.loc["usable structure", "Paper (QASPER)"] == "1,579/1,585"  # the paper's §3.3, formatted
    assert disp.loc["induced whole (one call, not windowed)", "Paper (QASPER)"] == "1,585/1,585"
    assert any("baseline" in n for n in t.notes)


def test_size_matching_pooled_means(run):
    size = run["size_matching"]
    t = tables.size_matching(run["summary"], kind="wikipedia")
    ch = run["chunks"]
    d = t.data.set_index("quantity")
    for cond, label in (("A0", "A0 fixed windows"), ("A2", "A2 induced chunks"), ("G2", "G2 gold chunks")):
        pooled = ch.loc[ch["condition"] == cond, "n_content_tokens"].mean()
        assert d.loc[f"{label}: mean content tokens", "ours"] == pytest.approx(pooled, rel=1e-12)
    assert d.loc["A0 fixed windows: mean content tokens", "paper"] == paper.value("wikipedia", "size_matching", "A0")
    assert d.loc["per-document |A0 − A2| gap: max", "ours"] == pytest.approx(size["gap_A0_A2"].abs().max())
    assert d.loc["per-document |A0 − A2| gap: mean", "ours"] == pytest.approx(size["gap_A0_A2"].abs().mean())
    assert d.loc["documents with |gap| > 4 tokens", "ours"] == (size["gap_A0_A2"].abs() > 4).sum()
    n = size.set_index("doc_id")  # pooled = sum n*mean / sum n over documents, as the per-document table says
    assert d.loc["A2 induced chunks: mean content tokens", "ours"] == pytest.approx(
        (n["n_A2"] * n["mean_A2"]).sum() / n["n_A2"].sum(), rel=1e-12)


def test_placebo_table_worked_example():
    p = pd.DataFrame({"doc_id": ["a", "a", "a", "b", "c"], "depth": [1, 1, 1, 1, 2],
                      "placebo_doc_id": ["a", "b", "b", "a", "c"],
                      "same_doc": [True, False, False, False, True], "same_path": [False] * 4 + [True],
                      "n_chunks": [2, 1, 1, 1, 3]})
    t = tables.placebo(placebo.placebo_buckets(p).assign(condition="P"), "permute")
    d = t.data.set_index("depth")
    assert d.loc["1", "pairs"] == 4 and d.loc["1", "min_same_doc"] == 2   # m=3, n=4: 2m-n = 2
    assert d.loc["1", "same_doc"] == 1 and d.loc["1", "same_doc_chunks"] == 2
    assert d.loc["2", "min_same_doc"] == 1                                 # a bucket of one pair cannot move
    assert d.loc["all", "pairs"] == 5 and d.loc["all", "documents"] == 3 and d.loc["all", "same_path"] == 1
    assert d.loc["all", "min_same_doc"] == 3 == placebo.min_residual(p.assign(path=[("x",), ("y",), ("z",),
                                                                                     ("w",), ("u", "v")]))
    assert t.display.set_index("Depth").loc["all", "Residual chunks"] == "5 of 8"


def test_placebo_table_reports_donors_per_document():
    p = pd.DataFrame({"doc_id": ["a", "a", "a", "b", "b", "c"], "depth": [1, 1, 2, 1, 2, 1],
                      "placebo_doc_id": ["b", "c", "b", "a", "a", "a"], "same_doc": [False] * 6})
    p = p.assign(same_path=False, n_chunks=1)
    t = tables.placebo(placebo.placebo_buckets(p).assign(condition="P"), "permute")
    d = t.data.set_index("depth")
    # all depths: a <- {b: 2, c: 1}, b <- {a: 2}, c <- {a: 1}
    assert (d.loc["all", "donors_mean"], d.loc["all", "donors_min"], d.loc["all", "donors_max"]) == (4 / 3, 1, 2)
    assert d.loc["all", "top_donor_share"] == pytest.approx((2 / 3 + 1 + 1) / 3)
    assert d.loc["1", "donors_mean"] == pytest.approx(4 / 3)  # depth 1: a <- {b, c}, b <- {a}, c <- {a}
    assert t.display.set_index("Depth").loc["all", "Donors / doc (min–max)"] == "1.3 (1–2)"
    assert "chunking.placebo_method: permute" in t.notes[0]


def test_query_funnel_pivot_and_paper(run):
    t = tables.query_funnel(run["query_funnel"], kind="qasper")
    assert t.data["step"].tolist() == ["harvested", "finals"]
    assert t.data.set_index("step").loc["finals", "all"] == 32
    assert t.data.set_index("step").loc["harvested", "paper"] == paper.value("qasper", "queries", "harvested")
    assert t.data.set_index("step").loc["finals", "documents"] == 4


def test_reranker_lift_is_difference_of_means(run):
    sp = {k: v.default for k, v in config_mod.SCHEMA["stats"].items()}
    lift = stats.reranker_lift(run["condition_means"], config_mod.record("stats", sp), PRIMARY)
    cm = run["condition_means"]
    cm = cm[(cm["metric"] == "cov-nDCG@10") & (cm["embedder"] == "strong")].set_index(["reranker", "condition"])
    assert lift["condition"].tolist() == ALL and set(lift["reranker"]) == {"xenc"}
    for r in lift.itertuples():
        assert r.lift == pytest.approx(cm.loc[("xenc", r.condition), "mean"] - cm.loc[("none", r.condition), "mean"])
    none_only = run["condition_means"][run["condition_means"]["reranker"] == "none"]
    assert stats.reranker_lift(none_only, config_mod.record("stats", sp), PRIMARY).empty
    assert "No reranked cell" in tables.reranker_lift(stats.reranker_lift(none_only, config_mod.record("stats", sp),
                                                                          PRIMARY), "cov-nDCG@10",
                                                      "strong").notes[0]


def test_section_recall_summary_matches_mean(run):
    sr = run["section_recall"]
    summ = run["section_recall_summary"]   # 05's table
    assert set(summ["condition"]) == {"A4", "G4"}
    for r in summ.itertuples():
        sel = sr[(sr["embedder"] == r.embedder) & (sr["condition"] == r.condition)]["section_recall"].dropna()
        assert r.section_recall == pytest.approx(sel.astype(float).mean()) and r.n_defined == len(sel)
    t = tables.section_recall_table(summ)
    assert t.data["section_recall"].tolist() == summ["section_recall"].tolist()   # formatted, not recomputed


def test_every_table_renders_markdown_and_latex(run):
    ts = [tables.table1(run["contrasts"], run["mixedlm"]), tables.table2(run["condition_means"], "strong", "none"),
          tables.table4(ALL, run["summary"], "llm", 5), tables.corpus_funnel(run["corpus_funnel"], "wikipedia"),
          tables.induction(None, "demo", "texttiling"), tables.query_funnel(run["query_funnel"], "demo"),
          tables.size_matching(run["summary"], "demo"), tables.placebo(run["placebo_buckets"], "permute"),
          tables.dose_response(run["dose_response"]), tables.section_recall_table(run["section_recall_summary"]),
          tables.per_type(run["per_type"], "strong", "none"), tables.reranker_lift(run["reranker_lift"], "cov-nDCG@10", "strong"),
          tables.power(run["power_needed"], run["power"])]
    for t in ts:
        md, tex = t.markdown(), t.latex()
        assert md.count("\n|") >= len(t.display) and "\\bottomrule" in tex, t.name
        assert len({t.name for t in ts}) == len(ts)


# ------------------------------------------------------------------------------------------------ figures

def test_every_figure_renders(run):
    params = config_mod.load(config_mod.find_root(__import__("pathlib").Path(__file__)) / "params/demo.yaml").params()
    figs = figures.all_figures(run, params)
    assert list(figs) == ["fig1_mechanisms", "fig_contrasts", "fig_dose_response", "fig_budget_coverage",
                          "fig_section_recall", "fig_per_type", "fig_reranker_lift", "fig_power"]
    for name, fig in figs.items():
        assert len(fig.axes) >= 1, name
        assert _png_bytes(fig) > 5000, name


def test_every_figure_is_an_image_to_ipython_whatever_the_backend(run):
    """08's figure cells printed ``<Figure size 800x400 with 1 Axes>`` in JupyterLab and in the executed copies:
    IPython draws a Figure built without pyplot only if it can draw itself. IPython's own display formatter (what
    ipykernel sends a cell's result through) gives every figure of the report an ``image/png``, under the Agg
    backend this test runs with: the PNG of the figure at its size (tight around what is drawn)."""
    from IPython.core.formatters import DisplayFormatter
    from matplotlib.figure import Figure
    from matplotlib.image import imread

    params = config_mod.load(config_mod.find_root(__import__("pathlib").Path(__file__)) / "params/demo.yaml").params()
    assert matplotlib.get_backend().lower() == "agg"
    fmt = DisplayFormatter()
    assert set(fmt.format(Figure())[0]) == {"text/plain"}  # a plain Figure: text only, the bug's output
    figs = {**figures.all_figures(run, params), "placeholder": figures.placeholder("A title", "a message")}
    for name, fig in figs.items():
        data, _ = fmt.format(fig)
        assert set(data) == {"text/plain", "image/png"}, name
        png = imread(io.BytesIO(data["image/png"]), format="png")
        w, h = fig.get_size_inches() * fig.dpi
        assert 0.5 < png.shape[1] / w < 1.1 and 0.5 < png.shape[0] / h < 1.1, (name, png.shape, w, h)
        assert (png[..., :3] < 0.5).any(), name  # something dark is drawn: text, lines, markers


def test_importing_the_report_leaves_the_backend_to_the_environment():
    """figures.py called ``matplotlib.use("Agg")`` at import, which switched a kernel's inline backend to Agg: a
    pyplot figure of the user's own then showed nothing either."""
    import os
    import subprocess
    import sys

    code = "import matplotlib; from chunkstudy.report import report; print(matplotlib.rcParams._get_backend_or_none())"
    for backend in ("module://matplotlib_inline.backend_inline", "svg"):
        r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "MPLBACKEND": backend},
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == backend


def test_missing_inputs_give_placeholders_not_crashes(run):
    params = config_mod.record("", {"stats": {"primary_reranker": "none", "primary_metric": "cov-nDCG@10"},
                                    "embed": {"strong": "strong"}})
    figs = figures.all_figures({"documents": run["documents"]}, params)
    assert len(figs) == 8
    for fig in figs.values():
        assert "missing" in " ".join(t.get_text() for ax in fig.axes for t in ax.texts)


def test_figure1_shows_real_boundaries_and_prefixes(run):
    doc = run["documents"]["doc_id"].iat[1]
    fig = figures.mechanisms(run["documents"], run["chunks"], doc, run["queries"], run["section_recall"], "strong")
    ax = fig.axes[0]
    ch = run["chunks"]
    # one bar per chunk for each of A0, A2, G2 (broken_barh collections, top to bottom)
    counts = sorted(len(c.get_paths()) for c in ax.collections)
    assert counts == sorted(int(((ch["condition"] == c) & (ch["doc_id"] == doc)).sum()) for c in ("A0", "A2", "G2"))
    ex = figures.example_chunk(ch, doc, "A3")
    texts = " ".join(t.get_text() for t in fig.axes[2].texts)
    assert ex["prefix"].strip()[:40].split()[0] in texts and "placebo" in texts and "situating" in texts
    route = figures.routing_example(run["section_recall"], run["queries"], doc, "A4", "strong")
    assert route is not None and route["query_id"].startswith(doc) and route["n_kept"] == 3
    with pytest.raises(ValueError, match="not in documents"):
        figures.mechanisms(run["documents"], ch, "nope")


def test_example_chunk_picks_deepest_prefix():
    ch = pd.DataFrame({"condition": ["A3"] * 3, "doc_id": ["d"] * 3, "start": [0, 5, 9], "end": [5, 9, 12],
                       "prefix": ["[T]\n\n", "[T › A › B]\n\n", "[T › A]\n\n"]})
    assert figures.example_chunk(ch, "d", "A3")["start"] == 5
    assert figures.example_chunk(ch, "other", "A3") is None


# ------------------------------------------------------------------------------------------------ issue 22: misuse

def _cells(markdown: str) -> list[list[str]]:
    """The rendered cells of each body row of the first pipe table in ``markdown`` (markdown-it, as report.html
    renders it), as text."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    rows, row, in_body = [], None, False
    for t in tokens:
        if t.type == "tbody_open":
            in_body = True
        elif in_body and t.type == "tr_open":
            row = []
        elif in_body and t.type == "inline" and row is not None:
            row.append("".join(c.content for c in t.children if c.type in ("text", "code_inline")))
            assert not [c for c in t.children if c.type in ("image", "link_open")], t.content
        elif in_body and t.type == "tr_close":
            rows.append(row)
            row = None
    return rows


HOSTILE = ["What | is this?", "![x](http://evil.example/i.png) look", "*not emphasis* and `not code`",
           "a [link](https://evil.example) and <http://evil.example/auto>", "$\\sqrt$ & ~~strike~~ __init__",
           "line\nbreak", "back\\slash | pipe"]


def test_every_table_cell_renders_as_itself():
    # the probe: a "|" in a question shifted the drill-down's columns; an image in corpus text became <img>.
    # Every cell of every Table (and every header) is escaped, whatever the builder put in it.
    display = pd.DataFrame({"Question | text": HOSTILE, "δ": ["+0.4210"] * len(HOSTILE), "A": ["0.900"] * 7})
    t = tables.Table("x", "t", display, display, ("note with | pipe and ![i](http://evil.example/n.png)",))
    rows = _cells(t.markdown())
    assert [len(r) for r in rows] == [3] * len(HOSTILE)
    assert [r[0] for r in rows] == [" ".join(h.split("\n")) for h in HOSTILE]
    assert all(r[1:] == ["+0.4210", "0.900"] for r in rows)
    from markdown_it import MarkdownIt
    html = MarkdownIt("commonmark").enable("table").render(t.markdown())
    assert "<img" not in html and "<a " not in html and "<em>" not in html and "<code>" not in html
    assert ">Question | text</th>" in html
    assert tables.md_escape("< 0.001") == "< 0.001" and tables.md_escape("07_stats") == "07_stats"


def test_table1_prints_no_inference_below_the_thresholds(run):
    # the synthetic run: 4 documents, 300 resamples -> no CI, p or star, and the notes say why with the thresholds
    t = tables.table1(run["contrasts"], run["mixedlm"])
    assert (t.display[["95% CI", "p", "Holm p", "MixedLM p"]] == tables.NO_INFERENCE).all().all()
    assert not t.display["Holm p"].str.contains(r"\*").any()
    assert t.display["\u0394"].iat[0] != tables.NO_INFERENCE     # the estimate is still shown, as description
    notes = " ".join(t.notes)
    assert f"4 documents, fewer than stats.min_docs = {significance.CALIBRATED_FROM}" in notes
    assert "stats.n_boot = 300" in notes
    # enough documents and resamples: the same table prints CIs, p and stars as before, the star on the Holm p of
    # the test that decided (the percentile bootstrap as declared here; the calibrated test under auto at this size)
    scores, queries = stats.simulate_scores(significance.CALIBRATED_FROM, 4 * significance.CALIBRATED_FROM,
                                            {"A3": 0.1, "A1": 0.0, "P": 0.0, "G3": 0.1, "A4": 0.1}, seed=3)
    sp = {**{k: v.default for k, v in config_mod.SCHEMA["stats"].items()}, "n_boot": 1000}
    for decision, column in (("percentile", "Holm p"), ("auto", "Calibrated Holm p")):
        ok = stats.contrasts_table(scores, queries, config_mod.record("stats", {**sp, "decision": decision}),
                                   PRIMARY, "sim")
        t2 = tables.table1(ok)
        assert ok["inference"].all() and ok["significant"].any()
        assert not (t2.display[["95% CI", "p", "Holm p"]] == tables.NO_INFERENCE).any().any()
        assert t2.display[column].str.endswith(" *").sum() == ok["significant"].sum()


def test_one_document_note_reaches_table1():
    scores, queries = stats.simulate_scores(1, 12, {"A3": 0.1, "A1": 0.0, "P": 0.0, "G3": 0.1, "A4": 0.1}, seed=3)
    sp = {k: v.default for k, v in config_mod.SCHEMA["stats"].items()}
    c = stats.contrasts_table(scores, queries, config_mod.record("stats", {**sp, "n_boot": 1000}), PRIMARY, "sim")
    t = tables.table1(c)
    assert any(n.startswith("C1, C2, C3, C4: only one document: the clustered bootstrap cannot estimate")
               for n in t.notes)
    assert (t.display["95% CI"] == tables.NO_INFERENCE).all()


def _dominated_placebo() -> pd.DataFrame:
    # the probe: one document holds 5 of 7 depth-1 (document, path) pairs, so no derangement exists and
    # 2·5 − 7 = 3 pairs keep their own document's path
    pairs = pd.DataFrame({"doc_id": ["a"] * 5 + ["b", "c"],
                          "path": [("A",), ("B",), ("C",), ("D",), ("E",), ("F",), ("G",)]})
    p = placebo.placebo_assign(pairs, seed=1, method="permute").assign(n_chunks=2)
    assert int(p["same_doc"].sum()) == 3
    return placebo.placebo_buckets(p).assign(condition="P")  # 04 keys each placebo condition's buckets


def test_a_placebo_that_is_not_a_placebo_marks_c2(run):
    contrasts = {"C1": ["A3", "A1"], "C2": ["A3", "P"], "C3": ["G3", "A3"], "C4": ["A4", "A3"]}
    assert tables.placebo_marks(run["placebo_buckets"], contrasts) == {}     # a clean placebo marks nothing
    marks = tables.placebo_marks(_dominated_placebo(), contrasts)
    assert list(marks) == ["C2"]
    assert "3 of 7 (document, heading path) pairs (6 of 14 placebo chunks) kept a path of their own" in marks["C2"]
    t = tables.table1(run["contrasts"], run["mixedlm"], marks)
    assert t.display["Contrast"].tolist() == ["C1", f"C2 {tables.PLACEBO_MARK}", "C3", "C4"]
    assert any(n.startswith(f"{tables.PLACEBO_MARK} C2: P is not a clean placebo") for n in t.notes)
    pt = tables.per_type(run["per_type"], "strong", "none", marks)
    assert set(pt.display.loc[pt.data["contrast"] == "C2", "Contrast"]) == {f"C2 {tables.PLACEBO_MARK}"}
    fig = figures.contrasts_forest(run["contrasts"], "cov-nDCG@10", marks)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert [lab for lab in labels if tables.PLACEBO_MARK in lab] == [
        f"C2: A3 \u2212 P {tables.PLACEBO_MARK}\n(placebo not clean)"]
    fig = figures.per_type(run["per_type"], "strong", "none", marks)
    assert [a.get_title() for a in fig.axes if tables.PLACEBO_MARK in a.get_title()] == [
        f"C2: A3 \u2212 P {tables.PLACEBO_MARK} placebo not clean"]


def test_figure_text_is_never_mathtext(run):
    # the probe: a "$" in a title ($\sqrt$) crashed Figure 1 in matplotlib's mathtext; corpus text is text
    docs = run["documents"].copy()
    docs.loc[0, "title"] = "Roots $\\sqrt$ and $x$ cost $5"
    fig = figures.mechanisms(docs, run["chunks"], docs["doc_id"].iat[0])
    assert _png_bytes(fig) > 5000
    assert "Roots $\\sqrt$ and $x$ cost $5" in fig.axes[0].get_title(loc="left")
    pt = run["per_type"].assign(qtype=run["per_type"]["qtype"].astype(str) + " $\\frac{a}$")
    assert _png_bytes(figures.per_type(pt, "strong", "none")) > 5000
