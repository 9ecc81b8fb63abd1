"""The run plan (python -m chunkstudy.plan): its counts are what the stages' own request builders send — checked
against a real run of those builders through a scripted backend — and replies a run cached are counted as such."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chunkstudy import artifacts, config, design, induce, llm, plan
from chunkstudy.chunks import chunking, cuts
from chunkstudy.induce import contexts

ROOT = Path(__file__).resolve().parents[1]
LLM_ARMS = {"llm": {"backend": "openai", "model": "google/gemma-4-26B-A4B-it", "base_url": "http://localhost:8000/v1",
                    "context_tokens": 8192, "max_reply_tokens": 1024},
            "induce": {"method": "llm"}, "contexts": {"method": "llm"}}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("plan")
    cfg = config.load(ROOT / "params" / "demo.yaml", root=root, overrides=LLM_ARMS)
    tables, source = plan.corpus_tables(cfg, build=True)
    return cfg, tables


def test_dry_run_client_counts_unique_calls_tokens_and_the_shared_prefix():
    c = plan.DryRunClient(config.record("llm", {"backend": "openai", "model": "m", "max_reply_tokens": 100}))
    doc = "<document>" + "x" * 390
    reqs = [llm.Request([{"role": "user", "content": doc + f"<chunk>{i}</chunk>"}]) for i in range(3)]
    out = c.generate(reqs + reqs[:1], desc="A1 contexts")
    assert [r.text for r in out] == [plan.PLACEHOLDER] * 4
    b = c.batches["A1 contexts"]
    n = len(doc) + len("<chunk>0</chunk>")
    assert (b["requests"], b["calls"], b["prompt_chars"], b["max_new_tokens"]) == (4, 3, 3 * n, 300)
    assert b["shared_prefix_chars"] == 2 * (len(doc) + len("<chunk>"))  # each later prompt repeats the document


def test_the_plan_predicts_the_calls_a_run_makes_and_sees_the_cache(demo, tmp_path):
    # the same parameters rooted in this test's own folder: the replies cached below would otherwise land in the
    # shared store of ``demo`` and turn every later plan of it into cache hits (random order: .ci/run's second pass)
    tables = demo[1]
    cfg = config.load(ROOT / "params" / "demo.yaml", root=tmp_path, overrides=LLM_ARMS)
    docs, paras, gold = tables["documents"], tables["paragraphs"], tables["sections_gold"]
    p = plan.estimate(cfg, tables)
    batches = p["llm"]["batches"]
    assert set(batches) == {"induction", "induction self-correction", "A1 contexts"}

    class Recording(llm.ScriptedBackend):
        name = "openai"  # the configured backend's name and model: the cache keys a real run writes

    be = Recording(lambda r: "not a valid outline", model=cfg.data["llm"]["model"])
    client = llm.make_client(cfg.params("llm"), artifacts.cache_dir(cfg, cfg.data["llm"]["cache"]), backend=be)
    induce.induce_structure(docs, paras, cfg.params("induce"), client=client)
    counter = chunking.load_counter(cfg.data["chunking"]["tokenizer"])
    windows = cuts.context_windows(docs, paras, {"sections_induced": gold, "sections_gold": gold},
                                   [design.condition("A1")], cfg.params("chunking"),
                                   counter)  # gold stands in for 02's outline
    contexts.a1_contexts(docs, windows, cfg.params("contexts"), client=client, counter=counter,
                         sections=gold)

    def made(prefix):
        calls = [c for c in be.calls if c.tag.startswith(prefix)]
        return len(calls), sum(len("".join(m["content"] for m in c.messages)) for c in calls)

    for desc, prefix in (("induction", "induce:"), ("A1 contexts", "a1:")):
        n, chars = made(prefix)
        if desc == "induction":  # first round: the tags end in r0
            calls = [c for c in be.calls if c.tag.startswith("induce:") and c.tag.endswith(":r0")]
            n, chars = len(calls), sum(len("".join(m["content"] for m in c.messages)) for c in calls)
        assert (batches[desc]["calls"], batches[desc]["prompt_tokens"]) == (n, chars / 4), desc
    corrections = [c for c in be.calls if c.tag.startswith("induce:") and c.tag.endswith(":r1")]
    assert batches["induction self-correction"]["calls"] == len(corrections)  # every reply was unusable
    assert batches["A1 contexts"]["calls"] == p["chunks"]["context_windows"] == len(windows)
    assert 0.3 < batches["A1 contexts"]["prefix_share"] < 1  # one document's windows share its text

    again = plan.estimate(cfg, tables)  # the run above cached every reply
    for desc, b in again["llm"]["batches"].items():
        assert b["calls"] == 0 and b["cached"] == batches[desc]["calls"], desc
    assert again["llm"]["cache_records"] == len(client.cache)


def test_the_plan_lists_documents_whose_expected_induction_reply_exceeds_its_budget(demo, tmp_path):
    cfg, tables = demo
    docs, paras, gold = tables["documents"], tables["paragraphs"], tables["sections_gold"]
    ind = plan.estimate(cfg, tables)["induction"]
    rp = induce.reply_plan(docs, paras, cfg.params("induce"), cfg.data["llm"]["context_tokens"], gold)
    assert (ind["calls"], ind["max_budget"], ind["over_budget"]) == (len(rp), rp["reply_budget"].max(), [])
    assert ind["max_expected_reply_tokens"] == rp["expected_reply_tokens"].max() > 0
    assert ind["expected_reply_tokens"] == rp["expected_reply_tokens"].sum() >= ind["max_expected_reply_tokens"]
    assert "no document's expected reply exceeds its budget" in plan.render(plan.estimate(cfg, tables))
    # a rule that budgets one token per paragraph: every document's gold outline would be cut, and is listed
    tight = config.load(ROOT / "params" / "demo.yaml", root=tmp_path, overrides={
        **LLM_ARMS, "induce": {"method": "llm", "reply_tokens_per_section": 1.0, "reply_base_tokens": 0}})
    over = plan.induction_budgets(tight, docs, paras, gold)["over_budget"]
    assert sorted(r["doc_id"] for r in over) == sorted(docs["doc_id"]) and all(
        r["expected_reply_tokens"] > r["reply_budget"] == r["n_paragraphs"] for r in over)
    text = plan.render({**plan.estimate(cfg, tables), "induction": plan.induction_budgets(tight, docs, paras, gold)})
    assert f"{len(docs)} window(s) whose expected reply exceeds the budget" in text


def test_embedding_and_reranking_work_follow_the_chunk_sets(demo):
    cfg, tables = demo
    p = plan.estimate(cfg, tables)
    n_q = p["queries"]
    assert n_q == len(tables["harvested"]) > 0
    assert p["chunks"]["conditions"] == len(cfg.data["chunking"]["conditions"])
    assert 0 < p["chunks"]["unique_texts"] < p["chunks"]["rows"]  # A4/G4 share A3/G3's texts
    for e in p["embedders"].values():
        assert (e["passages"], e["queries"]) == (p["chunks"]["unique_texts"], n_q)
    # what each embedder reads: cut at its own max_seq_length (demo: strong 256, weak 128), [CLS] and [SEP] counted
    strong, weak = p["embedders"]["strong"], p["embedders"]["weak"]
    assert 3 * weak["passages"] <= weak["passage_tokens"] <= 128 * weak["passages"]
    assert weak["passage_tokens"] < strong["passage_tokens"] <= 256 * strong["passages"]
    uncut = plan.estimate(config.load(ROOT / "params" / "demo.yaml", root=cfg.root, overrides={
        **LLM_ARMS, "embed": {"embedders": {k: {"max_seq_length": 100_000} for k in ("strong", "weak")}}}), tables)
    whole = uncut["embedders"]["strong"]["passage_tokens"]
    assert whole == uncut["embedders"]["weak"]["passage_tokens"] >= strong["passage_tokens"]
    assert whole > weak["passage_tokens"]
    top_n = cfg.data["retrieve"]["rerankers"]["xenc-untrained"]["top_n"]
    assert p["rerankers"]["xenc-untrained"]["pairs_at_most"] == n_q * 11 * min(top_n, cfg.data["retrieve"]["k"])
    text = plan.render(p)
    assert "A1 contexts" in text and "texts to embed" in text and "reranker pairs" in text


def test_the_plan_states_each_axis_of_the_specification_curve(demo):
    """The multiverse block before the run: the stand-in placebo's texts that no condition of the run has (counted
    against the chunk sets 04 builds), the scoring passes 06 adds, and 07's specifications per contrast."""
    from chunkstudy.chunks import chunk_sets
    from chunkstudy.stats import multiverse

    cfg0, tables = demo
    p7 = {"P7": {"boundaries": "induced", "prefix": "placebo", "depth": 3, "placebo_seed": 7}}
    block = {"metrics": ["cov-nDCG@10", "MRR"], "cutoffs": [5, 10], "embedders": ["strong", "weak"],
             "query_types": ["all", "each"], "bootstrap_seeds": [cfg0.params().stats.seed, 3],
             "conditions": {"P": ["P", "P7"]}}
    cfg = config.load(ROOT / "params" / "demo.yaml", root=cfg0.root,
                      overrides={**LLM_ARMS, "conditions": {"extra": p7}, "multiverse": block})
    got = plan.estimate(cfg, tables)
    mv = got["multiverse"]
    assert plan.estimate(cfg0, tables)["multiverse"] is None
    assert got["chunks"] == plan.estimate(cfg0, tables)["chunks"]  # the run's own counts leave the stand-in out
    # the texts of P7 that no other condition has: P7's prefixes drawn under another seed
    counter = chunking.load_counter(cfg.data["chunking"]["tokenizer"])
    gold = tables["sections_gold"]
    windows = cuts.context_windows(tables["documents"], tables["paragraphs"], {"sections_induced": gold,
                                   "sections_gold": gold}, design.run_conditions(cfg.data["chunking"]["conditions"]),
                                   cfg.params("chunking"), counter)
    built = chunk_sets.build_all(tables["documents"], tables["paragraphs"], gold, gold,
                                 windows.assign(context="(A1 context)"), cfg.params("chunking"), counter,
                                 cfg.params().run_conditions)
    ch = built["chunks"]
    own = set(ch.loc[ch["condition"] != "P7", "text_row"])
    assert mv["extra_texts"] == len(set(ch.loc[ch["condition"] == "P7", "text_row"]) - own) > 0
    assert mv["extra_scoring_passes"] == 1  # k = 5 beside metrics.cutoff
    assert 0 < mv["extra_tokens_read"]["weak"] < mv["extra_tokens_read"]["strong"]
    qtypes = sorted(set(tables["harvested"]["qtype"]))
    p = cfg.params()
    assert mv["specifications"] == {n: len(multiverse.grid(p.multiverse, p.multiverse_metrics, p.primary_cell,
                                                           p.stats.seed, a, b, qtypes))
                                    for n, (a, b) in p.stats.contrasts.items()}
    assert mv["specifications"]["C2"] == 2 * mv["specifications"]["C1"] == 2 * 3 * 2 * (1 + len(qtypes)) * 2
    # two bootstrap seeds: each analysis twice
    assert {n: 2 * a for n, a in mv["analyses"].items()} == mv["specifications"]
    assert 0 < mv["stats_seconds"][0] < mv["stats_seconds"][1]
    text = plan.render(got)
    assert "specification curves (multiverse)" in text and "06 scores every run list 1 more time(s) (k = 5)" in text
    assert f"{sum(mv['analyses'].values()):,} analyses (a bootstrap seed repeats each)" in text


def test_without_01_the_command_says_what_to_run(tmp_path):
    params = tmp_path / "params" / "fresh.yaml"
    params.parent.mkdir()
    params.write_text(f"base: {ROOT / 'params' / 'demo.yaml'}\ncorpus: {{name: fresh}}\n")
    r = subprocess.run([sys.executable, "-m", "chunkstudy.plan", str(params)], cwd=tmp_path, capture_output=True,
                       text=True, env={**os.environ, "CHUNKSTUDY_ROOT": str(tmp_path)})
    assert r.returncode == 1
    assert "01_corpus has not run for corpus 'fresh'" in r.stderr and "./run_all.sh fresh --only 01" in r.stderr
    assert "--build" in r.stderr
