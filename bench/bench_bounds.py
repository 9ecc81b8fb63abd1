"""Benchmark: sentence bounds segmented once per run (chunkstudy.chunks.bounds_store) against once per stage, on the
corpus of a parameter file (default: the whole QASPER test split). Ratios measured in one run.

    .venv/bin/python bench/bench_bounds.py [--params params/qasper_local.yaml] [--docs N] [--repeats 1]

Stages 02, 03 and 04 run in separate kernels, so before the store each segmented every document again. Here the
corpus is built once (01) and the induced outline and A1 contexts are computed once (02's non-chunking work:
TextTiling, the extractive baseline); then the chunking each stage does runs in a fresh process per stage, in
stage order, as the notebooks call it:

* 02: ``chunking.a0_windows`` on the induced outline and ``structural_for`` on the induced and the gold outline;
* 03: ``structural_chunks`` on ``queries.bm25_condition``'s outline (the BM25 diagnostic's chunks);
* 04: ``chunk_sets.build_all`` (every condition's chunks, before embedding).

Twice: **memo only** (``use_bounds_store(None)``: what each stage did before) and **store** (a fresh
``cache/sentence_bounds`` folder that the three processes share, as a run's stages do). Per stage it prints the
seconds, the texts segmented and read from the store (``chunking.segmentation_counts``, what the stages write into
their stats), and whether every stage's chunk tables are identical under both modes; then each mode's total and the
seconds saved. A third pass with the store already filled (a rerun) shows what a rerun of 02 costs.

``--segment-only`` times the segmentation alone on every document's text, without 02's TextTiling and A1 contexts
(minutes on the whole split): one stage's segmentation as before the store (memo only), 02's with the store (segment
and append), and 03's or 04's (read back from a fresh store object); then the three stages' sum before and after.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pandas as pd  # noqa: E402

STAGES = ("02_induce", "03_queries", "04_chunk_embed")


def stage_work(stage: str, folder: str, store: str | None, params: str, overrides: dict) -> dict:
    """One stage's chunking in this (fresh) process; returns its seconds, counts and a digest of its tables."""
    import hashlib

    from chunkstudy import config
    from chunkstudy.chunks import bounds_store, chunk_sets, chunking
    from chunkstudy.queries import bm25

    t0 = time.perf_counter()
    cfg = config.load(ROOT / params, overrides=overrides)
    d = Path(folder)
    docs, paras, gold, induced, ctx = (pd.read_parquet(d / f"{n}.parquet")
                                       for n in ("documents", "paragraphs", "gold", "induced", "contexts"))
    prm = cfg.params("chunking")
    counter = chunking.load_counter(prm.tokenizer)
    chunking.use_bounds_store(bounds_store.BoundsStore(store) if store else None)
    t1 = time.perf_counter()
    if stage == "02_induce":
        tables = [chunking.a0_windows(docs, paras, induced, prm, counter),
                  chunking.structural_for(docs, paras, induced, prm, counter),
                  chunking.structural_for(docs, paras, gold, prm, counter)]
    elif stage == "03_queries":
        sections = bm25.outline(cfg.params("queries").bm25_condition, gold, induced)
        tables = [chunking.structural_chunks(docs, paras, sections, counter, prm.max_chunk_tokens,
                                             prm.min_chunk_tokens, prm.sentence_splitter)]
    else:
        tables = [chunk_sets.build_all(docs, paras, gold, induced, ctx, prm, counter=counter)["chunks"]]
    t2 = time.perf_counter()
    digest = hashlib.sha256(b"".join(pd.util.hash_pandas_object(t, index=False).to_numpy().tobytes()
                                     for t in tables)).hexdigest()[:16]
    return {"stage": stage, "chunking_s": t2 - t1, "setup_s": t1 - t0, **chunking.segmentation_counts(),
            "digest": digest}


def segment_only(a: argparse.Namespace) -> None:
    """The documents' segmentation per stage, memo only against the store (see the module docstring)."""
    from chunkstudy import config
    from chunkstudy.chunks import bounds_store, chunking
    from chunkstudy.corpus import build

    overrides = {"corpus": {"max_docs": a.docs, "max_docs_from": "seeded"}} if a.docs else {}
    cfg = config.load(ROOT / a.params, overrides=overrides)
    splitter = cfg.params("chunking").sentence_splitter
    texts = list(build.build_corpus(cfg)["documents"]["text"])
    print(f"{cfg.corpus}: {len(texts)} documents, {sum(map(len, texts)):,} characters, splitter {splitter} "
          f"({chunking.bounds_method(splitter)}); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for mode, store in (("one stage, memo only", None), ("02, store (segment + append)", "fill"),
                            ("03 or 04, store (read)", "read")):
            chunking.use_bounds_store(bounds_store.BoundsStore(tmp) if store else None)
            t = time.perf_counter()
            got = [chunking.sentence_bounds(x, splitter) for x in texts]
            rows.append((mode, time.perf_counter() - t, chunking.segmentation_counts(), got))
        chunking.use_bounds_store(None)
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
    print(f"\n  {'mode':30s} {'seconds':>8s} {'segmented':>9s} {'from store':>10s}")
    for mode, s, c, _ in rows:
        print(f"  {mode:30s} {s:8.2f} {c['segmented']:9d} {c['from_store']:10d}")
    (_, seg, _, ref), (_, fill, _, g1), (_, read, _, g2) = rows
    before, after = 3 * seg, fill + 2 * read
    print(f"\n  bounds identical in the three modes: {ref == g1 == g2}; store file {size / 2**20:.1f} MiB")
    print(f"  02 + 03 + 04 segmentation: {before:.1f} s memo only (three times {seg:.1f} s) against {after:.1f} s "
          f"with the store ({before - after:.1f} s saved, {before / after:.1f}x; 03 and 04 each "
          f"{seg / read:.0f}x faster)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", default="params/qasper_local.yaml")
    ap.add_argument("--docs", type=int, default=None, help="corpus.max_docs (default: the parameter file's)")
    ap.add_argument("--segment-only", action="store_true",
                    help="time the segmentation of the documents' texts alone (no TextTiling, no A1 contexts)")
    a = ap.parse_args()
    if a.segment_only:
        segment_only(a)
        return

    from chunkstudy import config, induce
    from chunkstudy.chunks import chunking
    from chunkstudy.corpus import build

    overrides = {"corpus": {"max_docs": a.docs, "max_docs_from": "seeded"}} if a.docs else {}
    t0 = time.perf_counter()
    cfg = config.load(ROOT / a.params, overrides=overrides)
    corpus = build.build_corpus(cfg)
    docs, paras, gold = corpus["documents"], corpus["paragraphs"], corpus["sections_gold"]
    induced, _ = induce.induce_structure(docs, paras, cfg.params("induce"))
    prm = cfg.params("chunking")
    counter = chunking.load_counter(prm.tokenizer)
    chunking.use_bounds_store(None)
    windows = chunking.a0_windows(docs, paras, induced, prm, counter)
    ctx = induce.a1_contexts(docs, windows, cfg.params("contexts"), counter=counter, sections=gold)
    print(f"{cfg.corpus}: {len(docs)} documents, {docs['text'].str.len().sum():,} characters, splitter "
          f"{prm.sentence_splitter} ({chunking.bounds_method(prm.sentence_splitter)}); load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs ({time.perf_counter() - t0:.0f} s to build the inputs)")
    spawn = multiprocessing.get_context("spawn")  # a fresh interpreter per stage, as the runner's kernels
    with tempfile.TemporaryDirectory() as tmp:
        for name, df in (("documents", docs), ("paragraphs", paras), ("gold", gold), ("induced", induced),
                         ("contexts", ctx)):
            df.to_parquet(Path(tmp) / f"{name}.parquet")
        store = Path(tmp) / "sentence_bounds"
        results: dict[str, list[dict]] = {}
        for mode, folder in (("memo only", None), ("store", str(store)), ("store, a rerun", str(store))):
            results[mode] = []
            for stage in STAGES:
                with spawn.Pool(1) as pool:
                    results[mode].append(pool.apply(stage_work, (stage, tmp, folder, a.params, overrides)))
        print(f"\n  {'mode':16s} {'stage':16s} {'chunking s':>10s} {'segmented':>9s} {'from store':>10s} {'tables':>17s}")
        for mode, rows in results.items():
            for r in rows:
                print(f"  {mode:16s} {r['stage']:16s} {r['chunking_s']:10.1f} {r['segmented']:9d} {r['from_store']:10d} "
                      f"{r['digest']:>17s}")
        base = sum(r["chunking_s"] for r in results["memo only"])
        for mode in ("store", "store, a rerun"):
            got = sum(r["chunking_s"] for r in results[mode])
            same = all(x["digest"] == y["digest"] for x, y in zip(results["memo only"], results[mode]))
            print(f"\n  {mode}: {got:.1f} s of chunking in the three stages against {base:.1f} s memo only "
                  f"({base - got:.1f} s saved, {base / got:.2f}x); texts segmented "
                  f"{sum(r['segmented'] for r in results[mode])} against "
                  f"{sum(r['segmented'] for r in results['memo only'])}; tables identical: {same}")


if __name__ == "__main__":
    main()
