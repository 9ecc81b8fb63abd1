"""Benchmark: the MiniLM embedder under ONNX Runtime (float32, and dynamic int8 quantization schemes) against torch,
on the demo's unique chunk texts: speed ratio (one run, same texts, same threads), min / mean cosine to torch's
vectors, and the top-10 agreement of flat search over the A3 chunks with the demo queries.

    ./run_all.sh demo                          # once: the demo's chunks, queries and texts
    .venv/bin/python bench/bench_onnx.py [--threads 2] [--repeats 2] [--embedder strong]

The float32 export goes through chunkstudy's own path (embed.onnx_model_dir, cached under $CHUNKSTUDY_ONNX_CACHE or
~/.cache/chunkstudy/onnx). The int8 variants are written into a copy of it under build/bench-onnx/ by
sentence-transformers' ``export_dynamic_quantized_onnx_model`` (optimum's ORTQuantizer) with the schemes listed in
SCHEMES; a scheme would become a runtime option only if its min cosine stays >= 0.99 (embed.py says why none is
offered).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from chunkstudy import artifacts, config, embed, retrieve  # noqa: E402
from chunkstudy.chunks import chunk_sets  # noqa: E402

#: dynamic int8 schemes tried: (file suffix, optimum AutoQuantizationConfig factory, keyword arguments)
SCHEMES = [
    ("qint8_avx512_vnni", "avx512_vnni", {}),
    ("qint8_avx512_vnni_matmul", "avx512_vnni", {"operators_to_quantize": ["MatMul"]}),
    ("qint8_avx2_reduce_range", "avx2", {"reduce_range": True, "operators_to_quantize": ["MatMul"]}),
    ("qint8_arm64_per_tensor", "arm64", {"per_channel": False}),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", default="params/demo.yaml")
    ap.add_argument("--embedder", default="strong")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2, help="timed passes per encoder (interleaved); fastest counts")
    ap.add_argument("--no-int8", action="store_true")
    a = ap.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(a.threads)
    cfg = config.load(ROOT / a.params)
    try:
        chunks, documents, queries = (artifacts.read(cfg, t) for t in ("chunks", "documents", "queries"))
    except FileNotFoundError as e:
        raise SystemExit(f"{e}\nrun ./run_all.sh {cfg.corpus} first") from None
    texts_all = list(chunk_sets.embedded_texts(chunks, documents))
    texts = list(dict.fromkeys(texts_all))
    spec = cfg["embed"]["embedders"][a.embedder]
    print(f"{len(texts)} unique texts, {len(queries)} queries, embedder {a.embedder!r} ({spec['model']}, "
          f"max_seq_length {spec['max_seq_length']}), {a.threads} threads")

    encoders = {"torch float32": embed.load_embedder(config.record("embed.embedders.*", spec), a.embedder),
                "onnx float32": embed.load_embedder(config.record("embed.embedders.*", {**spec, "runtime": "onnx"}),
                                                    a.embedder)}
    for e in encoders.values():
        e.encode(["warm up"])
    if not a.no_int8:
        from optimum.onnxruntime.configuration import AutoQuantizationConfig
        from sentence_transformers import export_dynamic_quantized_onnx_model

        import shutil

        export = Path(encoders["onnx float32"]._model[0].auto_model.model_path).parents[1]
        folder = ROOT / "build" / "bench-onnx" / export.name  # int8 files beside a copy, never in the cache
        if not folder.is_dir():
            shutil.copytree(export, folder)
        for suffix, factory, kw in SCHEMES:
            path = folder / "onnx" / f"model_{suffix}.onnx"
            if not path.is_file():
                qc = getattr(AutoQuantizationConfig, factory)(is_static=False, **kw)
                export_dynamic_quantized_onnx_model(SentenceTransformer(str(folder), backend="onnx", device="cpu"),
                                                    qc, str(folder), file_suffix=suffix)
            m = SentenceTransformer(str(folder), backend="onnx", device="cpu",
                                    model_kwargs={"file_name": f"onnx/model_{suffix}.onnx",
                                                  "provider": "CPUExecutionProvider"})
            m.max_seq_length = spec["max_seq_length"]
            e = embed.load_embedder(config.record("embed.embedders.*", spec), a.embedder)
            e._model = m
            e.encode(["warm up"])
            encoders[f"onnx int8 {suffix[6:]}"] = e

    best = {name: float("inf") for name in encoders}
    vecs = {}
    for _ in range(a.repeats):
        for name, e in encoders.items():
            t = time.perf_counter()
            vecs[name] = e.encode(texts)
            best[name] = min(best[name], time.perf_counter() - t)
    qvecs = {name: e.encode(queries["text"].astype(str).tolist(), "query") for name, e in encoders.items()}

    a3 = chunks[chunks["condition"] == "A3"].reset_index(drop=True)
    row_of = {t: i for i, t in enumerate(texts)}
    a3_rows = np.array([row_of[t] for t in chunk_sets.embedded_texts(a3, documents)])
    ids = a3["chunk_id"].astype(str).to_numpy()
    ref_top = retrieve.flat_search(qvecs["torch float32"], vecs["torch float32"][a3_rows], ids, k=10, backend="numpy")[0]
    base = best["torch float32"]
    print(f"\n  {'encoder':34s} {'texts/s':>9s} {'speed vs torch':>15s} {'min cos':>9s} {'mean cos':>9s} "
          f"{'top-10 agreement':>17s}")
    for name in encoders:
        cos = (vecs[name] * vecs["torch float32"]).sum(axis=1)
        top = retrieve.flat_search(qvecs[name], vecs[name][a3_rows], ids, k=10, backend="numpy")[0]
        agree = np.mean([len(set(x) & set(y)) / 10 for x, y in zip(top, ref_top)])
        print(f"  {name:34s} {len(texts) / best[name]:9.1f} {base / best[name]:14.2f}x {cos.min():9.4f} "
              f"{cos.mean():9.4f} {agree:17.3f}")


if __name__ == "__main__":
    main()
