"""Benchmark: faster runtimes for the MiniLM stand-ins against torch float32, on a seeded sample of the corpus's own
texts: ONNX Runtime float32 (``runtime: onnx``), ONNX graph optimisations (optimum O2 and O3, float32) and dynamic
int8 quantization schemes. Ratios measured in one run.

    .venv/bin/python bench/bench_onnx.py [--params params/qasper_local.yaml] [--docs 8] [--sample 256]
                                         [--repeats 2] [--threads 2] [--embedder strong] [--no-int8] [--no-opt]

The sampled documents (``corpus.max_docs`` = ``--docs``, drawn with ``corpus.seed``) go through the stages' own
code in process, as 02 and 04 cut them under the parameter file: 02's induction (TextTiling for the local files)
and A1 contexts (the extractive baseline), then every condition's chunks; the texts are the unique embedded texts.
The queries are the corpus's harvested questions on those documents. Prints, per embedder (``--embedder``: one,
or every one in the file):

1. **speed** on ``--sample`` of the texts: texts/s and process CPU seconds of each runtime, passes interleaved,
   the fastest of ``--repeats``; the ratio to torch float32 (wall and CPU: on a shared machine compare CPU);
2. **agreement** on every text: min, 0.1th percentile and mean cosine to torch float32's vectors; and, per
   condition, flat search of the questions over that condition's chunks (as 05 does, k = 10): the mean share of
   torch's top 10 kept, the share of questions whose first chunk is unchanged, and the mean Kendall tau-b of the
   chunk scores of each question's own document (the ranks coverage-nDCG is computed from);
3. **the whole split**, estimated: the stage-04 embedding seconds given by ``--stage04-s`` (per embedder; default:
   the README's alone-rates on the 416 QASPER test papers) divided by each runtime's CPU ratio.

The float32 ONNX export is chunkstudy's own (embed.onnx_model_dir, cached under $CHUNKSTUDY_ONNX_CACHE or
~/.cache/chunkstudy/onnx). The optimised and int8 variants are written into a copy of it under build/bench-onnx/ by
sentence-transformers' ``export_optimized_onnx_model`` and ``export_dynamic_quantized_onnx_model`` (optimum's
ORTOptimizer / ORTQuantizer). A runtime would become an option only where its agreement is shown (embed.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from chunkstudy import config, embed, induce, retrieve  # noqa: E402
from chunkstudy.chunks import chunk_sets, chunking  # noqa: E402
from chunkstudy.corpus import build  # noqa: E402

#: graph optimisations tried (float32): (file suffix, optimum AutoOptimizationConfig level)
OPTIMISED = [("O2", "O2"), ("O3", "O3")]
#: dynamic int8 schemes tried: (file suffix, optimum AutoQuantizationConfig factory, keyword arguments)
SCHEMES = [
    ("qint8_avx512_vnni", "avx512_vnni", {}),
    ("qint8_avx512_vnni_matmul", "avx512_vnni", {"operators_to_quantize": ["MatMul"]}),
    ("qint8_avx2_reduce_range", "avx2", {"reduce_range": True, "operators_to_quantize": ["MatMul"]}),
    ("qint8_arm64_per_tensor", "arm64", {"per_channel": False}),
]
#: stage 04's embedding seconds on the 416 QASPER test papers at the README's alone-rates on 2 cores (67,528 texts
#: per embedder; strong about 38 min, weak 1,239 s), what --stage04-s defaults to
STAGE04_S = {"strong": 38 * 60, "weak": 1239}


def texts_and_queries(cfg: config.Config, n_docs: int) -> tuple[pd.DataFrame, list[str], pd.DataFrame, pd.DataFrame]:
    """``(chunks, unique texts, documents, questions)`` of a seeded sample of the corpus, cut by the stages' code."""
    corpus = build.build_corpus(cfg)
    docs, paras, gold = corpus["documents"], corpus["paragraphs"], corpus["sections_gold"]
    induced, _ = induce.induce_structure(docs, paras, cfg.params("induce"))
    prm = cfg.params("chunking")
    counter = chunking.load_counter(prm.tokenizer)
    windows = chunking.a0_windows(docs, paras, induced, prm, counter)
    ctx = induce.a1_contexts(docs, windows, cfg.params("contexts"), counter=counter, sections=gold)
    out = chunk_sets.build_all(docs, paras, gold, induced, ctx, prm, counter=counter)
    harvested = corpus["harvested"]
    questions = harvested[harvested["doc_id"].isin(set(docs["doc_id"]))].reset_index(drop=True)
    return out["chunks"], list(out["texts"]), docs, questions


def variant(folder: Path, file_name: str, spec, key: str) -> embed.Embedder:
    """The parameter file's embedder running ``folder/onnx/<file_name>`` (an exported or quantized graph)."""
    from sentence_transformers import SentenceTransformer

    m = SentenceTransformer(str(folder), backend="onnx", device="cpu",
                            model_kwargs={"file_name": f"onnx/{file_name}", "provider": "CPUExecutionProvider"})
    m.max_seq_length = spec.max_seq_length
    e = embed.load_embedder(spec, key)
    e._model = m
    return e


def encoders_for(spec, key: str, a: argparse.Namespace) -> dict[str, embed.Embedder]:
    from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model, \
        export_optimized_onnx_model

    torch32 = embed.load_embedder(dataclasses.replace(spec, dtype="float32"), key)
    onnx32 = embed.load_embedder(dataclasses.replace(spec, dtype="float32", runtime="onnx"), key)
    out = {"torch float32": torch32, "onnx float32": onnx32}
    onnx32.encode(["warm up"])
    export = Path(onnx32._model[0].auto_model.model_path).parents[1]
    folder = ROOT / "build" / "bench-onnx" / export.name  # variants beside a copy, never in the cache
    if not folder.is_dir():
        shutil.copytree(export, folder)
    if not a.no_opt:
        for suffix, level in OPTIMISED:
            if not (folder / "onnx" / f"model_{suffix}.onnx").is_file():
                export_optimized_onnx_model(SentenceTransformer(str(folder), backend="onnx", device="cpu"), level,
                                            str(folder))
            out[f"onnx float32 {suffix}"] = variant(folder, f"model_{suffix}.onnx", torch32.spec, key)
    if not a.no_int8:
        from optimum.onnxruntime.configuration import AutoQuantizationConfig

        for suffix, factory, kw in SCHEMES:
            if not (folder / "onnx" / f"model_{suffix}.onnx").is_file():
                qc = getattr(AutoQuantizationConfig, factory)(is_static=False, **kw)
                export_dynamic_quantized_onnx_model(SentenceTransformer(str(folder), backend="onnx", device="cpu"),
                                                    qc, str(folder), file_suffix=suffix)
            out[f"onnx int8 {suffix[6:]}"] = variant(folder, f"model_{suffix}.onnx", torch32.spec, key)
    for e in out.values():
        e.encode(["warm up"])
    return out


def race(encoders: dict[str, embed.Embedder], texts: list[str], repeats: int) -> dict[str, tuple[float, float]]:
    """Fastest ``(wall s, process CPU s)`` of each encoder over ``texts``; the order rotates every repeat."""
    best = {name: (float("inf"), float("inf")) for name in encoders}
    names = list(encoders)
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            w, c = time.perf_counter(), time.process_time()
            encoders[name].encode(texts)
            got = (time.perf_counter() - w, time.process_time() - c)
            best[name] = (min(best[name][0], got[0]), min(best[name][1], got[1]))
    return best


def kendall(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import kendalltau

    return 1.0 if len(a) < 2 else float(kendalltau(a, b).statistic)


def retrieval_agreement(chunks: pd.DataFrame, vecs: np.ndarray, ref: np.ndarray, qv: np.ndarray, qref: np.ndarray,
                        questions: pd.DataFrame) -> dict[str, tuple[float, float, float]]:
    """Per condition: (mean top-10 kept, first chunk unchanged, mean Kendall tau-b within the own document)."""
    out = {}
    for cond, g in chunks.groupby("condition", sort=False):
        rows = g["text_row"].to_numpy()
        ids = g["chunk_id"].astype(str).to_numpy()
        top = retrieve.flat_search(qv, vecs[rows], ids, k=10, backend="numpy")[0]
        top_ref = retrieve.flat_search(qref, ref[rows], ids, k=10, backend="numpy")[0]
        kept = np.mean([len(set(x) & set(y)) / len(y) for x, y in zip(top, top_ref)])
        first = np.mean(top[:, 0] == top_ref[:, 0])
        doc_rows = {d: rows[(g["doc_id"] == d).to_numpy()] for d in g["doc_id"].unique()}
        taus = [kendall(vecs[doc_rows[d]] @ qv[i], ref[doc_rows[d]] @ qref[i])
                for i, d in enumerate(questions["doc_id"]) if d in doc_rows]
        out[cond] = (float(kept), float(first), float(np.mean(taus)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", default="params/qasper_local.yaml")
    ap.add_argument("--docs", type=int, default=8)
    ap.add_argument("--sample", type=int, default=256, help="texts per embedder for the speed race")
    ap.add_argument("--repeats", type=int, default=2, help="timed passes per runtime (interleaved); fastest counts")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (ONNX Runtime uses every core)")
    ap.add_argument("--embedder", default=None, help="one embedder key (default: every one in the file)")
    ap.add_argument("--no-int8", action="store_true")
    ap.add_argument("--no-opt", action="store_true", help="leave the O2/O3 graph optimisations out")
    ap.add_argument("--stage04-s", type=lambda x: dict(kv.split("=") for kv in x.split(",")), default=None,
                    help="stage-04 embedding seconds per embedder for the estimate, e.g. strong=2280,weak=1239")
    a = ap.parse_args()

    import torch

    torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    cfg = config.load(ROOT / a.params, overrides={"corpus": {"max_docs": a.docs, "max_docs_from": "seeded"}})
    chunks, texts, docs, questions = texts_and_queries(cfg, a.docs)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, torch threads "
          f"{torch.get_num_threads()}; {cfg.corpus}: {len(docs)} documents (seeded), {len(chunks)} chunk rows over "
          f"{chunks.condition.nunique()} conditions, {len(texts)} unique texts, {len(questions)} questions "
          f"({time.perf_counter() - t0:.0f} s to cut)")
    stage04 = {k: float(v) for k, v in (a.stage04_s or STAGE04_S).items()}
    specs = cfg.params("embed").embedders
    rng = np.random.default_rng(0)
    sample = [texts[i] for i in sorted(rng.choice(len(texts), min(a.sample, len(texts)), replace=False))]
    for key, spec in specs.items():
        if a.embedder and key != a.embedder:
            continue
        encoders = encoders_for(spec, key, a)
        best = race(encoders, sample, a.repeats)
        vecs = {name: e.encode(texts) for name, e in encoders.items()}
        qtexts = questions["text"].astype(str).tolist()
        qvecs = {name: e.encode(qtexts, "query") for name, e in encoders.items()}
        ref, qref = vecs["torch float32"], qvecs["torch float32"]
        w0, c0 = best["torch float32"]
        print(f"\n{key} ({spec.model}, max_seq_length {spec.max_seq_length}, batch_size {spec.batch_size}): speed "
              f"on {len(sample)} texts, agreement on all {len(texts)} texts and {len(qtexts)} questions")
        print(f"  {'runtime':30s} {'texts/s':>8s} {'wall x':>7s} {'cpu x':>6s} {'min cos':>8s} {'p0.1 cos':>9s} "
              f"{'mean cos':>9s} {'top10 kept':>10s} {'top1 same':>9s} {'tau own doc':>11s} {'whole-split 04':>14s}")
        for name in encoders:
            cos = (vecs[name] * ref).sum(axis=1)
            agree = retrieval_agreement(chunks, vecs[name], ref, qvecs[name], qref, questions)
            kept, first, tau = (min(v[i] for v in agree.values()) for i in range(3))
            w, c = best[name]
            est = f"{stage04[key] / (c0 / c) / 60:.0f} min" if key in stage04 else "-"
            print(f"  {name:30s} {len(sample) / w:8.1f} {w0 / w:6.2f}x {c0 / c:5.2f}x {cos.min():8.5f} "
                  f"{np.quantile(cos, 0.001):9.5f} {cos.mean():9.6f} {kept:10.3f} {first:9.3f} {tau:11.4f} {est:>14s}")
        print("  (top10 kept, top1 same, tau own doc: the worst condition's mean; whole-split 04: the embedding "
              f"seconds {stage04.get(key, '?')} s of torch float32 over the CPU ratio)")
    print(f"\n{time.perf_counter() - t0:.0f} s in all")


if __name__ == "__main__":
    main()
