"""The 08 report: model warnings, the replication table, and the whole stage on a synthetic artifact store."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from chunkstudy import artifacts, config, manifests, paper, significance, stages
from chunkstudy.report import report, tables
from chunkstudy.report.replication import replication_table
from test_figures import build_synthetic_run


def _contrasts(rows):
    """07's confirmatory rows with its decision: reject_holm as the test decides it (Holm p < 0.05)."""
    return pd.DataFrame([dict(contrast=c, condition_a=a, condition_b=b, mean_delta=d, p_holm=p, reject_holm=p < 0.05,
                              confirmatory=True) for c, a, b, d, p in rows])


def _paper_table1(kind: str) -> pd.DataFrame:
    """The paper's Table 1 as its text gives it (chunkstudy.paper): deltas where stated, Holm significance as a
    p below / above alpha. Wikipedia-FA's C1 delta is not in the text; only its sign is (C1 replicates)."""
    t1 = paper.values(kind, "table1")
    pairs = {"C1": ("A3", "A1"), "C2": ("A3", "P"), "C3": ("G3", "A3"), "C4": ("A4", "A3")}
    return _contrasts([(c, a, b, t1.get(f"{c}_delta", 0.01), 0.01 if t1[f"{c}_holm_significant"] else 0.6)
                       for c, (a, b) in pairs.items()])


def test_replication_table_worked_example():
    wiki, qasper = _paper_table1("wikipedia"), _paper_table1("qasper")
    # an exploratory row must be ignored
    qasper = pd.concat([qasper, _contrasts([("C3", "G3", "A3", 0.5, 0.0)]).assign(confirmatory=False)])
    t = replication_table({"wikipedia_fa": wiki, "qasper": qasper})
    d = t.set_index("contrast")
    # the paper's pattern (§6.1): three replicate, one is corpus-dependent
    assert d["verdict"].to_dict() == {"C1": "replicates", "C2": "replicates", "C3": "corpus-dependent",
                                      "C4": "replicates"}
    assert set(d.index[d["verdict"] == "replicates"]) == set(paper.value("study", "effects", "replicating_contrasts"))
    assert d.loc["C4", "sign[qasper]"] == "\u2212"
    assert d.loc["C3", "delta[qasper]"] == paper.value("qasper", "table1", "C3_delta")
    assert not d.loc["C3", "significant[qasper]"] and d.loc["C3", "significant[wikipedia_fa]"]


def test_replication_opposite_signs_and_nulls():
    a = _contrasts([("C1", "A3", "A1", 0.02, 0.01), ("C2", "A3", "P", 0.001, 0.5)])
    b = _contrasts([("C1", "A3", "A1", -0.02, 0.01), ("C2", "A3", "P", -0.001, 0.7)])
    d = replication_table({"x": a, "y": b}).set_index("contrast")
    assert d.loc["C1", "verdict"] == "corpus-dependent" and not d.loc["C1", "same_sign"]
    assert d.loc["C2", "verdict"] == "null"
    shown = report.replication({"x": a, "y": b}).display
    assert shown["x: \u0394 (Holm p)"].iat[0] == "+0.0200 (0.010) *"
    with pytest.raises(ValueError, match="two or more corpora"):
        replication_table({"x": a})


def test_replication_prints_07s_decision_and_decides_nothing():
    """08 reads reject_holm: a small Holm p that 07 did not reject (its floors failed) is no star, and a table
    without the decision is refused, naming it."""
    a = _contrasts([("C1", "A3", "A1", 0.02, 0.01)]).assign(reject_holm=False, inference=False)
    b = _contrasts([("C1", "A3", "A1", 0.02, 0.01)])
    d = replication_table({"x": a, "y": b}).set_index("contrast")
    assert not d.loc["C1", "significant[x]"] and d.loc["C1", "significant[y]"]
    assert d.loc["C1", "verdict"] == "corpus-dependent"
    with pytest.raises(stages.SchemaError, match="reject_holm"):
        replication_table({"x": a.drop(columns="reject_holm"), "y": b})


def test_warnings_for_demo_and_paper_params(root):
    demo = config.load(root / "params" / "demo.yaml").params()
    w = " ".join(report.model_warnings(demo))
    for needle in ("llm.capable is false", "'texttiling'", "'extractive'", "untrained", "stand-ins", "n_boot"):
        assert needle in w
    spec = config.load(root / "params" / "wikipedia_fa.yaml").params()
    assert report.model_warnings(spec) == []
    m = report.models_used(spec)
    assert "BAAI/bge-large-en-v1.5" in m["model"].tolist() and "google/gemma-4-26B-A4B-it" in m["model"].tolist()
    # the report states which document A1's model saw
    a1 = m.set_index("role").loc["A1 situating contexts", "label / status"]
    assert a1 == "LLM arm; <document> view: full"
    spec = dataclasses.replace(spec, contexts=dataclasses.replace(spec.contexts, document_view="body"))
    assert report.models_used(spec).set_index("role").loc["A1 situating contexts", "label / status"].endswith("body")


def test_a_condition_smaller_than_recall_k_is_named_in_the_warnings():
    # the Markdown example: 25 chunks in every induced condition, 51 in the gold ones, recall@50
    n = {"A0": 25, "A3": 25, "G2": 51, "G3": 51}
    (w,) = report.corpus_size_warnings(n, 50)
    assert w.startswith("recall@50 is 1 by construction for A0, A3: each has only 25 chunks")
    assert report.corpus_size_warnings(n, 20) == [] and report.corpus_size_warnings(None, 50) == []
    (w,) = report.corpus_size_warnings({"A0": 10, "G2": 12}, 50)
    assert "only 10-12 chunks" in w


@pytest.fixture(scope="module")
def synthetic():
    return build_synthetic_run()


def _store(cfg, run, skip=("drilldown",)):
    """Write what stage 08 reads (its declared reads) from the synthetic run; the BM25 diagnostic is a stub."""
    for name in stages.reads("08_figures"):
        if name in skip:
            continue
        if name == "bm25":
            artifacts.write_json(cfg, "03_queries", "bm25", {"gold_top1_share": 0.25})
        elif isinstance(stages.artifact(name), stages.Table):
            artifacts.write(cfg, name, run[name])
        else:
            artifacts.write_json(cfg, stages.writer(name), name, run[name])


def test_stage_writes_every_table_figure_and_report(tmp_path, root, synthetic):
    cfg = config.load(root / "params" / "demo.yaml", root=tmp_path,
                      overrides={"figures": {"replicate_with": "qasper_local.yaml", "formats": ["png", "pdf"]}})
    _store(cfg, synthetic)
    other = config.load(root / "params" / "qasper_local.yaml", root=tmp_path)
    partner = report.partner_contrasts(cfg)
    assert partner.corpus == "qasper_local" and partner.contrasts is None and "no 07_stats contrasts" in partner.note
    artifacts.write(other, "contrasts", synthetic["contrasts"])
    partner = report.partner_contrasts(cfg)
    b = report.build(cfg.params(), cfg.corpus, report.gather(cfg), partner)
    written = report.write_all(cfg, b, "params/demo.yaml")
    out = artifacts.figures_dir(cfg)
    for name in b.figures:
        assert (out / f"{name}.png").stat().st_size > 5000 and (out / f"{name}.pdf").is_file()
    expected = {"table1", "replication", "table2", "reranker_lift", "dose_response", "section_recall", "per_type",
                "table4", "funnel_corpus", "funnel_induction", "funnel_queries", "funnel_size_matching",
                "funnel_placebo", "power", "cost", "multiverse", "multiverse_axes"}
    assert set(b.tables) == expected, b.notes
    # the specification curves beside Table 1, every specification of each contrast in tables/ (and report.html)
    assert [t.name for t in b.curves] == ["multiverse_C1", "multiverse_C2", "multiverse_C3", "multiverse_C4"]
    assert "fig_multiverse" in b.figures and (out / "tables" / "multiverse_C2.md").is_file()
    assert "fig_cost" in b.figures and "## What each condition costs" in (artifacts.figures_dir(cfg) / "report.md").read_text()
    for t in b.tables.values():
        assert (out / "tables" / f"{t.name}.md").is_file() and "\\toprule" in (out / "tables" / f"{t.name}.tex").read_text()
    text = (out / "report.md").read_text()
    size = report.corpus_size_warnings(artifacts.read_json(cfg, "04_chunk_embed", "summary")["n_chunks"],
                                       cfg.data["metrics"]["recall_k"])
    # 4 documents and 300 resamples: inference is not possible, said first (after any placebo warning)
    inference = report.inference_warnings(synthetic["contrasts"], cfg.params("stats"))
    placebo = report.placebo_warnings(tables.placebo_marks(synthetic["placebo_buckets"], cfg.params("stats").contrasts))
    floor = f"fewer than stats.min_docs = {significance.CALIBRATED_FROM}"  # the default: the calibrated test's floor
    assert len(inference) == 1 and f"rest on 4 documents, {floor}" in inference[0]
    assert b.warnings == placebo + inference + report.model_warnings(cfg.params()) + size and len(size) == 1
    assert text.count("**WARNING:**") == len(b.warnings) >= 5
    assert "## Confirmatory" in text and "## Exploratory" in text and "fig1_mechanisms.png" in text
    # the same synthetic contrasts on both sides: every contrast has one sign, so the verdict follows Holm only
    rep = b.tables["replication"].data
    assert (rep["same_sign"] | (rep["delta[demo]"] == 0)).all()
    assert "BM25 places the gold chunk first for 25.0% of queries" in text
    # the power analysis: one sentence per contrast, the table and the figure
    assert "## Planning" in text and text.count("; this corpus has 4.") == 4 and "fig_power.png" in text
    # only 08 rounds: Table 1 of the report shows the 4-decimal delta of the unrounded contrasts table
    c1 = synthetic["contrasts"].query("confirmatory and contrast == 'C1'")["mean_delta"].iat[0]
    assert f"| {c1:+.4f} " in text
    assert "## Specification curves (exploratory)" in text and "fig_multiverse.png" in text
    assert len(written) == 2 * (len(b.tables) + len(b.curves)) + 2 * len(b.figures) + 2  # + report.md, .html


def test_the_report_in_a_notebook_embeds_its_figures(tmp_path, root, synthetic):
    """08 showed ``Markdown(report.render(...))``, whose images link ``<name>.png``: JupyterLab resolved them under
    notebooks/ (404 each). ``embed_figures=True`` puts every figure in as the PNG report.html embeds, same place, same
    caption; report.md keeps its relative links."""
    import base64
    import io
    import re

    from matplotlib.image import imread

    from chunkstudy.report import html

    cfg = config.load(root / "params" / "demo.yaml", root=tmp_path)
    _store(cfg, synthetic)
    b = report.build(cfg.params(), cfg.corpus, report.gather(cfg), report.partner_contrasts(cfg))
    linked, embedded = report.render(b, cfg.params()), report.render(b, cfg.params(), embed_figures=True)
    links = re.findall(r"!\[([^]]*)\]\(([^)]*)\)", linked)
    assert sorted(src for _, src in links) == sorted(f"{n}.png" for n in b.figures) and len(links) >= 8
    images = re.findall(r"!\[([^]]*)\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", embedded)
    assert [alt for alt, _ in images] == [alt for alt, _ in links]
    dpi = cfg.params("figures").dpi
    for (_, data), (_, src) in zip(images, links):  # the figure as report.html has it (a constrained layout
        got, want = (imread(io.BytesIO(png), format="png") for png in  # moves a little from one draw to the next)
                     (base64.b64decode(data), html.figure_png(b.figures[src[:-4]], dpi)))
        assert got.shape == want.shape and (abs(got - want).max(axis=2) > 0.02).mean() < 0.1, src
    assert re.sub(r"\(data:image/png;base64,[^)]*\)", "", embedded) == re.sub(r"\(\w+\.png\)", "", linked)


def test_missing_inputs_become_notes(tmp_path, root, synthetic):
    cfg = config.load(root / "params" / "demo.yaml", root=tmp_path, overrides={"figures": {"formats": ["png"]}})
    _store(cfg, synthetic, skip=("drilldown", "placebo_buckets", "per_type", "section_recall_summary",
                                 "induction_stats"))
    b = report.build(cfg.params(), cfg.corpus, report.gather(cfg), report.partner_contrasts(cfg))
    assert {"funnel_placebo", "per_type", "section_recall", "funnel_induction", "replication"}.isdisjoint(b.tables)
    assert any("placebo_buckets is missing" in n for n in b.notes)
    assert any("02_induce/induction_stats.json is missing" in n for n in b.notes)
    text = report.render(b, cfg.params())
    assert "Notes on missing inputs" in text and "replicate_with is null" in text
    report.write_all(cfg, b)
    assert (artifacts.figures_dir(cfg) / "fig_per_type.png").is_file()   # a placeholder figure says why


@pytest.mark.slow
def test_notebook_runs_on_a_synthetic_store(tmp_path, root, synthetic, run_notebook):
    """Executes notebooks/08_figures.py with papermill against a store holding the synthetic run."""
    cfg = config.load(root / "params" / "demo.yaml", root=tmp_path)
    _store(cfg, synthetic)
    run_notebook(cfg, "08_figures")
    assert (tmp_path / "figures" / "demo" / "report.md").is_file()
    assert (tmp_path / "figures" / "demo" / "report.html").stat().st_size > 10000
    assert "Figures, tables and report" in (tmp_path / "executed" / "08_figures.html").read_text()  # nbconvert
    assert (tmp_path / "figures" / "demo" / "tables" / f"{tables.table1(synthetic['contrasts']).name}.tex").is_file()


def test_report_prints_the_environment_and_only_project_relative_paths(tmp_path, root, synthetic, params_file):

    cfg = config.load(params_file("demo", figures={"formats": ["png"], "replicate_with": "nowhere.yaml"}),
                      root=tmp_path)
    _store(cfg, synthetic)
    manifests.write_manifest(cfg, "07_stats", {"k": 1}, 1.0)
    b = report.build(cfg.params(), cfg.corpus, report.gather(cfg), report.partner_contrasts(cfg))
    written = report.write_all(cfg, b, str(cfg.path))  # the runner hands the notebook an absolute path
    text = (artifacts.figures_dir(cfg) / "report.md").read_text()
    env = manifests.environment()
    assert "parameters `params/demo.yaml`" in text
    assert "## Environment" in text and "| 07_stats " in text and "| 08_figures " in text
    assert env["python"] in text and "| torch " in text and env["packages"]["torch"] in text
    assert f"| {env['torch_threads']} " in text
    assert "figures.replicate_with could not be loaded" in text  # a note whose error names a file under the root
    assert str(tmp_path) not in text and str(root) not in text
    assert not any(str(p).startswith("/") for p in written["path"])


def test_report_warns_first_and_marks_c2_when_the_placebo_is_not_a_placebo(tmp_path, root, synthetic):
    # the probe: no derangement existed, 3 of 7 pairs kept their own document's path, and C2 printed as usual
    from test_figures import _dominated_placebo

    cfg = config.load(root / "params" / "demo.yaml", root=tmp_path, overrides={"figures": {"formats": ["png"]}})
    _store(cfg, {**synthetic, "placebo_buckets": _dominated_placebo()})
    b = report.build(cfg.params(), cfg.corpus, report.gather(cfg), report.partner_contrasts(cfg))
    assert b.warnings[0].startswith("P is not a clean placebo: 3 of 7 (document, heading path) pairs")
    assert "Contrast C2 compares against chunks that partly carry their own real heading path" in b.warnings[0]
    assert b.tables["table1"].display["Contrast"].tolist()[1] == f"C2 {tables.PLACEBO_MARK}"
    text = report.render(b, cfg.params())
    warn, table1 = text.index("**WARNING:** P is not a clean placebo"), text.index("### Table 1")
    assert warn < table1 and f"| C2 {tables.PLACEBO_MARK} " in text


def test_report_states_the_inference_thresholds_and_says_why_none_is_printed(tmp_path, root, synthetic):
    # the probe: 2- and 3-document runs printed ordinary-looking CIs and p-values with no warning
    cfg = config.load(root / "params" / "demo.yaml", root=tmp_path, overrides={"figures": {"formats": ["png"]}})
    _store(cfg, synthetic)
    b = report.build(cfg.params(), cfg.corpus, report.gather(cfg), report.partner_contrasts(cfg))
    text = report.render(b, cfg.params())
    thresholds = (f"at least {significance.CALIBRATED_FROM} documents (stats.min_docs) with at least 1,000 bootstrap "
                  "resamples (this run: 300)")  # the resamples 07 recorded, not the params file's
    confirmatory = text[text.index("## Confirmatory"):text.index("### Table 1")]
    assert thresholds in confirmatory and "min(1, 2·(1 + k)/(B + 1))" in confirmatory
    assert "**WARNING:** Inference is not possible for C1, C2, C3, C4: C1, C2, C3, C4 rest on 4 documents" in text
    assert "stats.n_boot is 300, below the floor of 1,000 resamples" in text
    table1 = text[text.index("### Table 1"):text.index("LaTeX: [`tables/table1_primary.tex`]")]
    assert " * " not in table1 and "|  n/a " not in table1 and table1.count("| n/a ") == 4 * 4
