"""Notebook 06_metrics: thin (no logic in cells), and it runs end to end on a small synthetic artifact store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from chunkstudy import artifacts, config, metrics

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "06_metrics.py"


def synthetic_store(cfg, seed: int = 0) -> None:
    """Tiling chunk sets for two conditions over 6 documents, 12 queries, runs for two cells."""
    rng = np.random.default_rng(seed)
    chunk_rows, query_rows, run_rows = [], [], []
    for cond in ("A0", "A3"):
        for d in range(6):
            cuts = np.sort(rng.choice(np.arange(1, 2000), 19, replace=False))
            for i, (s, e) in enumerate(zip(np.r_[0, cuts], np.r_[cuts, 2000])):
                chunk_rows.append({"condition": cond, "doc_id": f"d{d}", "chunk_id": f"{cond}-d{d}-{i}",
                                   "start": int(s), "end": int(e), "prefix": "" if cond == "A0" else "[T › S]\n\n",
                                   "n_content_tokens": int(e - s) // 5, "n_prefix_tokens": 0 if cond == "A0" else 5,
                                   "route_key": f"d{d}"})
    for qn in range(12):
        spans = [[int(a), int(a) + int(rng.integers(50, 300))] for a in rng.integers(0, 1600, 1 + qn % 3)]
        query_rows.append({"query_id": f"q{qn}", "doc_id": f"d{qn % 6}", "qtype": "factoid", "text": f"question {qn}?",
                           "spans": spans})
    chunks = pd.DataFrame(chunk_rows)
    for emb in ("strong", "weak"):
        for cond in ("A0", "A3"):
            pool = chunks[chunks.condition == cond].chunk_id.to_numpy()
            for qn in range(12):
                own = chunks[(chunks.condition == cond) & (chunks.doc_id == f"d{qn % 6}")].chunk_id.to_numpy()
                ids = list(rng.permutation(np.r_[rng.choice(own, 5, replace=False),
                                                 rng.choice(np.setdiff1d(pool, own), 15, replace=False)]))
                run_rows += [{"embedder": emb, "reranker": "none", "condition": cond, "query_id": f"q{qn}",
                              "rank": r + 1, "chunk_id": c, "score": 1.0 - r / 20} for r, c in enumerate(ids)]
    artifacts.write(cfg, "chunks", chunks)
    artifacts.write(cfg, "documents", pd.DataFrame({"doc_id": [f"d{d}" for d in range(6)], "title": "T",
                                                    "text": [f"{d}" * 2000 for d in range(6)], "source": "synthetic"}))
    artifacts.write(cfg, "queries", pd.DataFrame(query_rows))
    artifacts.write(cfg, "runs", pd.DataFrame(run_rows))




def test_walk_example_prefers_a_multispan_query_between_0_and_1(demo_cfg):
    synthetic_store(demo_cfg)
    runs, chunks, queries = (artifacts.read(demo_cfg, t) for t in ("runs", "chunks", "queries"))
    scores = metrics.score_runs(runs, chunks, queries, demo_cfg.params("metrics"), demo_cfg.corpus)
    example = metrics.walk_example(scores, queries, embedder="strong", reranker="none", condition="A3")
    assert example["condition"] == "A3" and example["reranker"] == "none"
    value = scores[(scores.embedder == "strong") & (scores.condition == "A3") & (scores.metric == "cov-nDCG@10")
                   & (scores.query_id == example["query_id"])].value.iloc[0]
    assert 0 < value < 1
    walk = metrics.coverage_walk(runs, chunks, queries, demo_cfg.params("metrics"), **example)
    assert walk.attrs["score"] == pytest.approx(value)
    assert len(walk) == 10 and (np.diff(walk["dcg"]) >= 0).all() and (np.diff(walk["ideal_gain"]) <= 1e-12).all()


@pytest.mark.slow
def test_notebook_runs_on_a_synthetic_store(tmp_path, run_notebook, params_file):
    cfg = config.load(params_file("demo", stats={"contrasts": {"CX": ["A3", "A0"]}}), root=tmp_path)
    synthetic_store(cfg)
    run_notebook(cfg, "06_metrics")
    scores = artifacts.read(cfg, "scores")
    assert len(scores) == 2 * 2 * 12 * 7
    assert scores.value.between(0, 1).all()
    drill = artifacts.read(cfg, "drilldown")   # C1..C4 name absent conditions: only CX has rows
    assert set(drill["contrast"]) == {"CX"} and set(drill["condition"]) == {"A3", "A0"}
