"""Benchmark: how far one finished run's results are from another's on the same corpus (issue 34: bfloat16 against
float32 on the whole QASPER split). Both runs must have the same chunks (same 01-04 parameters but the encoders).

    .venv/bin/python bench/compare_runs.py [--reference qasper_local] [--other qasper_local_fast] [--k 10]

Prints, for each embedder of the reference:

1. **vectors**: min, 0.1th percentile and mean cosine of every embedded text's vector in ``--other`` to the
   reference's (04's ``embeddings``, row for row: the two runs' ``chunks`` must be identical);
2. **rankings** (05's ``runs``), per condition, over the questions: the mean share of the reference's top ``--k``
   that the other run keeps, the share of questions whose first chunk is the same, and the mean Kendall tau-b
   of the two runs' scores over the chunks both ranked (``retrieve.k`` deep);
3. **metrics** (06's ``scores``, the primary metric): per condition the mean over the questions in each run, their
   difference and the largest per-question difference;
4. **contrasts** (07's ``contrasts``, every cell): the largest difference of mean_delta, CI bounds, Holm p and dz,
   and the contrasts whose Holm verdict (``reject_holm``) or TOST verdict (``equivalence``) differs;

and the two runs' stage-04 embedding seconds from ``embedding_report`` (04's ``embedding_report.json``) with
their ratio. Nothing is written; reading the tables takes seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats as sps  # noqa: E402

from chunkstudy import artifacts, config  # noqa: E402


def load(name: str) -> config.Config:
    path = Path(name) if name.endswith(".yaml") else ROOT / "params" / f"{name}.yaml"
    return config.load(path)


def embedding_report(cfg: config.Config) -> dict:
    return {r["embedder"]: r for r in json.loads(artifacts.json_path(cfg, "04_chunk_embed",
                                                                     "embedding_report").read_text())}


def vectors(ref: config.Config, oth: config.Config, key: str) -> str:
    a, b = artifacts.read_vectors(ref, key), artifacts.read_vectors(oth, key)
    if a.shape != b.shape:
        return f"vectors: shapes differ ({a.shape} against {b.shape}): not the same texts"
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return (f"vectors: {len(cos):,} texts, cosine min {cos.min():.6f}, 0.1th percentile "
            f"{np.percentile(cos, 0.1):.6f}, mean {cos.mean():.7f}; identical rows {np.mean(np.all(a == b, 1)):.3f}")


def rankings(ra: pd.DataFrame, rb: pd.DataFrame, k: int) -> pd.DataFrame:
    """Per condition, over the questions of ``ra`` (the reference's ranked lists): top-``k`` kept, top-1 same, and
    Kendall tau-b of the two runs' scores over the chunks both ranked (a question ``rb`` lacks counts as none kept)."""
    other = {key: g.sort_values("rank") for key, g in rb.groupby(["condition", "query_id"], sort=False)}
    out = []
    for (cond, qid), ga in ra.groupby(["condition", "query_id"], sort=True):
        ga, gb = ga.sort_values("rank"), other.get((cond, qid))
        row = {"condition": cond, "query_id": qid, "topk_kept": 0.0, "top1_same": False, "kendall": np.nan}
        if gb is not None and len(ga) and len(gb):
            top_a = list(ga.chunk_id[:k])
            both = ga.merge(gb, on="chunk_id", suffixes=("_a", "_b"))
            row.update(topk_kept=len(set(top_a) & set(gb.chunk_id[:k])) / len(top_a),
                       top1_same=ga.chunk_id.iloc[0] == gb.chunk_id.iloc[0],
                       kendall=sps.kendalltau(both.score_a, both.score_b).statistic if len(both) > 2 else np.nan)
        out.append(row)
    return pd.DataFrame(out).groupby("condition").agg(questions=("query_id", "size"), topk_kept=("topk_kept", "mean"),
                                                      top1_same=("top1_same", "mean"), kendall=("kendall", "mean"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", default="qasper_local", help="parameter file (name in params/ or a path)")
    ap.add_argument("--other", default="qasper_local_fast")
    ap.add_argument("--k", type=int, default=10, help="top k compared in the rankings")
    a = ap.parse_args()
    ref, oth = load(a.reference), load(a.other)
    print(f"reference {ref.corpus}, other {oth.corpus}")

    ca, cb = artifacts.read(ref, "chunks"), artifacts.read(oth, "chunks")
    cols = ["condition", "doc_id", "chunk_id", "start", "end", "prefix", "text_row"]
    same_chunks = ca[cols].reset_index(drop=True).equals(cb[cols].reset_index(drop=True))
    print(f"chunks: {len(ca):,} rows, identical in both runs: {same_chunks}")
    if not same_chunks:
        sys.exit("compare_runs: the two runs cut different chunks; compare runs that differ in their encoders only")

    rep_a, rep_b = embedding_report(ref), embedding_report(oth)
    runs_a, runs_b = artifacts.read(ref, "runs"), artifacts.read(oth, "runs")
    prm = ref.params()
    metric = prm.primary_cell.metric
    sa, sb = artifacts.read(ref, "scores"), artifacts.read(oth, "scores")
    for key in ref.params("embed").embedders:
        ea, eb = rep_a.get(key, {}), rep_b.get(key, {})
        print(f"\n== {key}: {ea.get('dtype')} ({ea.get('seconds', float('nan')):.0f} s in 04) against "
              f"{eb.get('dtype')} ({eb.get('seconds', float('nan')):.0f} s in 04, cpu_bf16 {eb.get('cpu_bf16')}, "
              f"agreement check min cosine {eb.get('agreement_min')}); speed "
              f"{ea.get('seconds', np.nan) / eb.get('seconds', np.nan):.2f}x")
        print("  " + vectors(ref, oth, key))
        flat_a = runs_a[(runs_a.embedder == key) & (runs_a.reranker == "none")]
        flat_b = runs_b[(runs_b.embedder == key) & (runs_b.reranker == "none")]
        r = rankings(flat_a, flat_b, a.k)
        print(f"  rankings (no reranker), per condition: top-{a.k} kept, top-1 same, Kendall tau-b over the chunks "
              "both ranked")
        print("    " + r.to_string(float_format=lambda v: f"{v:.4f}").replace("\n", "\n    "))
        print(f"  over all conditions: top-{a.k} kept {r.topk_kept.mean():.4f} (worst {r.topk_kept.min():.4f}), "
              f"top-1 same {r.top1_same.mean():.4f} (worst {r.top1_same.min():.4f})")
        on = ["condition", "query_id"]
        pa = sa[(sa.embedder == key) & (sa.reranker == "none") & (sa.metric == metric)][on + ["value"]]
        pb = sb[(sb.embedder == key) & (sb.reranker == "none") & (sb.metric == metric)][on + ["value"]]
        m = pa.merge(pb, on=on, suffixes=("_a", "_b"))
        m["diff"] = m.value_b - m.value_a
        g = m.groupby("condition").agg(mean_a=("value_a", "mean"), mean_b=("value_b", "mean"),
                                       max_abs_q=("diff", lambda d: d.abs().max()))
        g["delta"] = g.mean_b - g.mean_a
        print(f"  {metric} per condition (a: reference, b: other; max_abs_q: the largest per-question difference)")
        print("    " + g.to_string(float_format=lambda v: f"{v:.5f}").replace("\n", "\n    "))

    xa, xb = artifacts.read(ref, "contrasts"), artifacts.read(oth, "contrasts")
    on = ["cell", "contrast"]
    x = xa.merge(xb, on=on, suffixes=("_a", "_b"))
    print(f"\n== contrasts: {len(x)} (cell, contrast) pairs in both")
    for col in ("mean_delta", "ci_low", "ci_high", "p_holm", "dz"):
        d = (x[f"{col}_b"] - x[f"{col}_a"]).abs()
        if d.notna().any():
            i = d.idxmax()
            print(f"  {col}: largest difference {d.max():.5f} ({x.loc[i, 'cell']} / {x.loc[i, 'contrast']})")
    conf = x[x.confirmatory_a.astype(bool)]
    flips = conf[conf.reject_holm_a.astype(bool) != conf.reject_holm_b.astype(bool)]
    print(f"  confirmatory contrasts whose Holm verdict differs: {len(flips)} of {len(conf)}")
    for r in flips.itertuples():
        print(f"    {r.cell} {r.contrast}: p_holm {r.p_holm_a:.4f} -> {r.p_holm_b:.4f}")
    every = x[x.reject_holm_a.astype(bool) != x.reject_holm_b.astype(bool)]
    print(f"  every contrast (exploratory cells too) whose Holm verdict differs: {len(every)} of {len(x)}")
    if "equivalence_a" in x:
        t = x[x.equivalence_a.notna() | x.equivalence_b.notna()]
        print(f"  TOST verdicts that differ: {int((t.equivalence_a != t.equivalence_b).sum())} of {len(t)}")


if __name__ == "__main__":
    main()
