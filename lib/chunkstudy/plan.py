"""Estimate a run before any model runs: ``python -m chunkstudy.plan params/qasper.yaml [--build] [--json]``.

Prints the model calls each generative batch will make (and how many the LLM cache already holds), their prompt
tokens, the texts each embedder will embed, and the reranker pairs — from stage 01's tables, without loading a
model. ``--build`` builds the corpus in memory when 01 has not run (reading or downloading its sources, as 01
would).

How. The pipeline's own request builders run with a dry-run client (:class:`DryRunClient`) that records every
request and answers with a placeholder: induction (``induce.induce_structure``), A1 contexts
(``induce.a1_contexts`` on ``chunks.cuts.context_windows``) and generated queries (``queries.build_queries``). The chunk
sets come from ``chunks.build_all``, the function 04 runs. So the counts follow the code, not a copy of it.

What is exact and what is estimated:

* prompt tokens are characters / 4 (the estimate ``induce`` and ``contexts`` size their windows with); the
  model's tokenizer is not loaded. ``generated tokens`` is the sum of ``max_tokens``: an upper bound.
* induction: first-round calls are exact; the self-correction round is an upper bound (every window corrected);
  each call's reply budget follows its paragraphs (``induce.reply_budget``), and the plan lists the documents whose
  *expected reply* — the gold outline written as the reply the prompt asks for, characters / 3.5
  (``induce.reply_plan``) — would exceed it, i.e. be cut at the first try;
* A1 windows and the induced chunk sets follow 02's ``sections_induced`` when it exists, else the gold structure
  stands in for it (same documents, the authors' outline instead of the model's): an estimate;
* A1 prefix share: the characters of each A1 prompt equal to the start of the previous prompt of the same
  document, over all A1 prompt characters — about the prefix-cache hit rate a server can reach (vLLM caches
  whole blocks of 16 tokens, so a little less);
* generated queries: generation calls are exact; paraphrases are at most one per generated query;
* texts to embed are the unique embedded texts (the embedding store embeds each distinct text once per model)
  plus the queries; token counts use ``chunking.tokenizer`` when it loads offline, else an approximation
  (words and punctuation), which the output says. ``passage_tokens`` is what each embedder reads: every unique
  text's tokens plus [CLS] and [SEP], cut at its ``max_seq_length``; before 02 has written A1 contexts, an A1 text
  counts a placeholder context (each real one adds up to ``contexts.max_context_tokens``);
* reranker pairs: queries x conditions x min(top_n, k) per reranker, an upper bound (a pair repeated across
  conditions, A3/A4 say, is scored once);
* the specification curves (``multiverse``, :func:`multiverse_plan`): per axis what it adds; the stand-in
  conditions' new texts are exact (their chunk sets built as 04 builds them), 07's seconds an estimate at the rate
  bench/bench_multiverse.py measured on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from . import config, llm
from .params import LLMParams

CHARS_PER_TOKEN = 4.0
SPECIAL_TOKENS = 2  # a BERT-style encoder's [CLS] and [SEP] around each passage (the BGE models', MiniLM's)
PLACEHOLDER = "(dry run: no model was called)"
A1_DOCS_PER_BATCH = 50  # A1 prompts hold whole documents: build them a few documents at a time


class _DryBackend(llm.Backend):
    """Carries the configured backend's name and model, so cache keys match a real run's; never called."""

    def __init__(self, llm_params: LLMParams):
        self.name, model, gguf = llm_params.backend, llm_params.model, llm_params.gguf_file
        self.model = f"{model}/{gguf}" if self.name == "transformers" and gguf else model

    def complete(self, call):  # pragma: no cover - the dry run never calls a model
        raise RuntimeError("the dry-run backend is never called")


def _prompt_text(call: llm.Call) -> str:
    return "".join(str(m.get("content", "")) for m in call.messages)


def _common_prefix(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


class DryRunClient:
    """Stands in for :class:`chunkstudy.llm.Client` in the request builders: ``generate`` records the batch and
    answers each request with its cached reply, else :data:`PLACEHOLDER`. ``records`` are the LLM cache's records
    (read, never written), so cached requests are counted as such and later rounds follow the cached replies."""

    def __init__(self, llm_params: LLMParams, records: Mapping[str, dict] | None = None):
        self._client = llm.make_client(llm_params, None, backend=_DryBackend(llm_params))
        self.context_tokens = self._client.context_tokens
        self.max_tokens = self._client.max_tokens
        self.model = self._client.backend.model
        self.records = records or {}
        # a served model's replies are keyed by its fingerprint too (chunkstudy.identity); the plan asks no server,
        # so it takes the fingerprint of the cache's newest reply of this model
        mine = sorted((r.get("finished_at") or "", r["identity"]) for r in self.records.values()
                      if r.get("identity") and r.get("model") == self.model and r.get("backend") == llm_params.backend)
        self.model_id = self.model + (f"|{mine[-1][1]}" if mine else "")
        self.batches: dict[str, dict] = {}
        self._last: dict[str, str] = {}  # per batch label: the previous prompt (for the prefix share)

    def generate(self, requests: Sequence[llm.Request], desc: str = "") -> list[llm.Response]:
        requests = list(requests)
        b = self.batches.setdefault(desc, {"requests": 0, "calls": 0, "cached": 0, "prompt_chars": 0,
                                           "shared_prefix_chars": 0, "max_new_tokens": 0})
        seen: set[str] = set()
        out = []
        for r in requests:
            call = self._client.resolve(r)
            key = llm.cache_key(self._client.backend.name, self.model_id, call)
            rec = self.records.get(key)
            # a cached reply is what the run will see (a self-correction round depends on it)
            out.append(llm.Response(rec["text"] if rec else PLACEHOLDER, rec is not None, None, 0.0, self.model))
            b["requests"] += 1
            if key in seen:
                continue
            seen.add(key)
            if rec is not None:
                b["cached"] += 1
                continue
            text = _prompt_text(call)
            b["calls"] += 1
            b["prompt_chars"] += len(text)
            b["max_new_tokens"] += call.max_tokens
            b["shared_prefix_chars"] += _common_prefix(self._last.get(desc, ""), text)
            self._last[desc] = text
        return out


def _counter(tokenizer: str):
    from .chunks import chunking
    from .induce import contexts

    try:
        return chunking.load_counter(tokenizer), f"{tokenizer} tokens"
    except Exception as e:  # noqa: BLE001 - the plan falls back and says so
        return contexts.approx_counter, (f"approximate tokens (words and punctuation): {tokenizer!r} does not load "
                                         f"here ({type(e).__name__})")


def corpus_tables(cfg, build: bool = False) -> tuple[dict[str, pd.DataFrame], str]:
    """01's tables (documents, paragraphs, sections_gold, harvested) from the run's store, else built in memory
    with ``build``; ``(tables, where they came from)``."""
    from . import artifacts

    names = ("documents", "paragraphs", "sections_gold", "harvested")
    if all(artifacts.exists(cfg, n) for n in names):
        return {n: artifacts.read(cfg, n) for n in names}, f"01_corpus of corpus '{cfg.corpus}'"
    if not build:
        raise FileNotFoundError(f"01_corpus has not run for corpus '{cfg.corpus}' (no {artifacts.table_path(cfg, 'documents')}): "
                                f"run ./run_all.sh {cfg.path.stem} --only 01 (no model is needed), or pass --build to "
                                f"build the corpus in memory")
    from .corpus import build as corpus_build

    out = corpus_build.build_corpus(cfg)
    return {n: out[n] for n in names}, "the corpus built in memory (--build)"


def estimate(cfg, tables: Mapping[str, pd.DataFrame]) -> dict:
    """The plan of a run of ``cfg`` over 01's ``tables`` (module docstring): a dict of plain numbers and notes."""
    from . import artifacts

    documents = tables["documents"]
    notes: list[str] = []
    lp = cfg.params("llm")
    cache_path = artifacts.cache_dir(cfg, lp.cache, create=False) / llm.CACHE_FILE  # read, not created
    records = llm.CallCache._load(cache_path)[0] if cache_path.is_file() else {}
    client = DryRunClient(lp, records)
    counter, counted = _counter(cfg.params("chunking").tokenizer)
    structure, induction, windows = _structure_and_contexts(cfg, tables, client, counter, notes)
    n_queries, qtypes = _queries(cfg, tables, client, notes)
    chunks, texts, extra_texts = _chunk_texts(cfg, tables, structure, windows, counter)
    embedders = _embedders(cfg, texts, counter(texts), n_queries)
    n_conditions = chunks["condition"].nunique()
    k = int(cfg.params("retrieve").k)
    rerankers = {key: {"model": spec.model, "pairs_at_most": n_queries * n_conditions * min(int(spec.top_n), k)}
                 for key, spec in cfg.params("retrieve").rerankers.items()}
    llm_rows = {desc: {**b, "prompt_tokens": b["prompt_chars"] / CHARS_PER_TOKEN,
                       "prefix_share": b["shared_prefix_chars"] / b["prompt_chars"] if b["prompt_chars"] else None}
                for desc, b in client.batches.items()}
    return {
        "multiverse": multiverse_plan(cfg.params(), extra_texts, counter, qtypes, int(len(documents)), embedders),
        "params": str(cfg.path), "corpus": cfg.corpus, "documents": int(len(documents)),
        "llm": {"backend": lp.backend, "model": client.model, "concurrency": lp.concurrency,
                "cache_records": len(records), "batches": llm_rows},
        "induction": induction,
        "chunks": {"rows": int(len(chunks)), "conditions": int(n_conditions), "unique_texts": len(texts),
                   "context_windows": int(len(windows)), "counted_in": counted},
        "queries": n_queries, "embedders": embedders, "rerankers": rerankers, "notes": notes,
    }


def _structure_and_contexts(cfg, tables: Mapping[str, pd.DataFrame], client, counter, notes: list[str]):
    """02 through the dry-run ``client``: the structure the A1 windows and induced chunk sets follow (02's
    ``sections_induced`` when it exists, else the gold one), the induction budgets (``llm`` induction only) and the
    A1 context windows, whose contexts the client counts (``llm`` contexts only). Appends its notes."""
    from . import artifacts, design, induce
    from .chunks import cuts
    from .induce import contexts

    documents, paragraphs, sections_gold = tables["documents"], tables["paragraphs"], tables["sections_gold"]
    if artifacts.exists(cfg, "sections_induced"):
        structure = artifacts.read(cfg, "sections_induced")
        notes.append("A1 windows and induced chunk sets: from 02's sections_induced")
    else:
        structure = sections_gold
        notes.append("A1 windows and induced chunk sets: the gold structure stands in for 02's induced one (not "
                     "run yet)")
    induction = None
    if cfg.params("induce").method == "llm":
        induce.induce_structure(documents, paragraphs, cfg.params("induce"), client=client)
        notes.append("induction self-correction: an upper bound (every window corrected)")
        induction = induction_budgets(cfg, documents, paragraphs, sections_gold)
    windows = cuts.context_windows(documents, paragraphs, {"sections_induced": structure, "sections_gold": sections_gold},
                                   design.run_conditions(cfg.params("chunking").conditions), cfg.params("chunking"),
                                   counter)
    if cfg.params("contexts").method == "llm":
        ids = list(dict.fromkeys(windows["doc_id"]))
        for i in range(0, len(ids), A1_DOCS_PER_BATCH):
            part = set(ids[i:i + A1_DOCS_PER_BATCH])
            contexts.a1_contexts(documents[documents["doc_id"].isin(part)], windows[windows["doc_id"].isin(part)],
                                 cfg.params("contexts"), client=client, counter=counter, sections=sections_gold)
    return structure, induction, windows


def _queries(cfg, tables: Mapping[str, pd.DataFrame], client, notes: list[str]) -> tuple[int, list[str]]:
    """03 through the dry-run ``client``: the number of queries (harvested: counted; generated: at most the
    targets, with their paraphrase calls at most one per generated query) and the query types."""
    from . import queries

    qp = cfg.params("queries")
    q = queries.build_queries(tables["documents"], tables["paragraphs"], tables["sections_gold"],
                              tables.get("harvested"), qp, client=client if qp.source == "generated" else None)
    n_queries = len(q["queries"]) if qp.source == "harvested" else int(sum(vars(qp.targets).values()))
    if qp.source == "generated":
        gen = client.batches.get("queries: generate", {}).get("calls", 0)
        client.batches["queries: paraphrase (at most)"] = {"requests": gen, "calls": gen, "cached": 0,
                                                           "prompt_chars": 0, "shared_prefix_chars": 0,
                                                           "max_new_tokens": gen * int(qp.gen_reply_tokens)}
        client.batches.pop("queries: paraphrase", None)
        notes.append(f"generated queries: at most {n_queries} after balancing (queries.targets)")
    qtypes = sorted(set(q["queries"]["qtype"].astype(str))) if qp.source == "harvested" else list(vars(qp.targets))
    return n_queries, qtypes


def _chunk_texts(cfg, tables: Mapping[str, pd.DataFrame], structure, windows, counter):
    """04's chunk sets without a model: ``(chunks, texts, extra_texts)`` — the run's chunks and their unique
    texts, and the texts only the multiverse's stand-in conditions add (:func:`multiverse_stand_ins`). The A1
    contexts are 02's when it ran, else placeholders."""
    from . import artifacts, design
    from .chunks import chunk_sets

    if artifacts.exists(cfg, "contexts_a1"):
        ctx = artifacts.read(cfg, "contexts_a1")
    else:
        ctx = windows.assign(context=[f"(A1 context {i})" for i in range(len(windows))])
    stand_ins = multiverse_stand_ins(cfg.params())
    built = chunk_sets.build_all(tables["documents"], tables["paragraphs"], tables["sections_gold"], structure, ctx,
                                 cfg.params("chunking"), counter,
                                 [*design.run_conditions(cfg.params("chunking").conditions), *stand_ins]
                                 if stand_ins else None)
    chunks, texts = built["chunks"], built["texts"]
    mine = chunks["condition"].isin([c.name for c in stand_ins])
    extra_texts = [texts[i] for i in sorted(set(chunks.loc[mine, "text_row"]) - set(chunks.loc[~mine, "text_row"]))]
    return chunks[~mine], [texts[i] for i in sorted(set(chunks.loc[~mine, "text_row"]))], extra_texts


def _embedders(cfg, texts: list[str], lengths, n_queries: int) -> dict[str, dict]:
    """Per embedder: the passages and their tokens (each unique text's tokens, prefix and content, plus the
    special tokens, cut at the model's ``max_seq_length``), the queries, and the embedder whose vectors it shares
    (the same model key)."""
    from . import embed

    embedders = {}
    keys_seen: dict[str, str] = {}
    for key, spec in cfg.params("embed").embedders.items():
        mk = embed.Embedder(spec, key).declared_key  # a plan asks no server
        cap = embed.seq_length(spec)[0]
        embedders[key] = {"model": spec.model, "device": spec.device, "passages": len(texts),
                          "passage_tokens": int(sum(min(n + SPECIAL_TOKENS, cap) for n in lengths)),
                          "queries": n_queries, "shares_vectors_with": keys_seen.get(mk)}
        keys_seen.setdefault(mk, key)
    return embedders


def multiverse_stand_ins(params) -> list:
    """The conditions of ``conditions.extra`` that ``multiverse.conditions`` names as stand-ins (a placebo under
    another seed), as :class:`chunkstudy.design.Condition` records: the plan builds them to count their texts."""
    from . import design

    named = {c for alternatives in params.multiverse.conditions.values() for c in alternatives}
    return [c for c in design.user_conditions(params.conditions.extra) if c.name in named]


def multiverse_plan(params, extra_texts: Sequence[str], counter, qtypes: Sequence[str], n_docs: int,
                    embedders: Mapping[str, dict]) -> dict | None:
    """What each axis of the specification curve (``multiverse``) adds to the run, before it: the texts 04 embeds
    beyond the run's own (the stand-in conditions' texts no other condition has; per embedder their tokens read
    and their share of all tokens read, i.e. of 04's encoding time), the scoring passes 06 adds (one per other
    cut-off), and the specifications 07 tests (and the distinct analyses among them: the bootstrap-seed axis repeats
    each) with its estimated seconds
    (:data:`chunkstudy.stats.multiverse.SECONDS_PER_DRAW` × specifications × resamples × documents). None without a
    multiverse."""
    from . import embed
    from .metrics import cutoffs
    from .stats import multiverse

    mv, st = params.multiverse, params.stats
    if not mv.active:
        return None
    metric_axis = params.multiverse_metrics
    other_k = cutoffs.extra_cutoffs(metric_axis, params.metrics.cutoff, params.metrics.names)
    lengths = counter(list(extra_texts)) if extra_texts else []
    read = {e: int(sum(min(n + SPECIAL_TOKENS, spec_max) for n in lengths))
            for e, spec_max in ((e, embed.seq_length(params.embed.embedders[e])[0]) for e in embedders)}
    stand_ins = {c: list(alt[1:]) for c, alt in mv.conditions.items()}
    axes = [
        ("metrics", sorted({label for _, label, _ in metric_axis}), 0, "none: scores holds them"),
        ("cutoffs", list(mv.cutoffs or (params.metrics.cutoff,)), 0,
         f"06 scores every run list {len(other_k)} more time(s) (k = {', '.join(map(str, other_k)) or '-'})"),
        ("embedders", list(mv.embedders or (params.embed.strong,)), 0, "none: every cell is scored"),
        ("rerankers", list(mv.rerankers or (st.primary_reranker,)), 0, "none: every cell is scored"),
        ("query_types", [label for label, _ in multiverse.query_subsets(mv.query_types, qtypes)], 0, "none"),
        ("bootstrap_seeds", list(mv.bootstrap_seeds or (st.seed,)), 0, "07's resampling only"),
        ("conditions", [f"{c}: {', '.join(a)}" for c, a in stand_ins.items()], len(extra_texts),
         "04 embeds the stand-ins' new texts (" + ", ".join(
             f"{e}: {read[e]:,} tokens, {read[e] / max(1, info['passage_tokens']):.1%} of the run's"
             for e, info in embedders.items()) + "); 05 retrieves and 06 scores them as conditions"
         if extra_texts else "none"),
    ]
    grids = {name: multiverse.grid(mv, metric_axis, params.primary_cell, st.seed, a, b, qtypes)
             for name, (a, b) in st.contrasts.items()}
    specs = {name: len(g) for name, g in grids.items()}
    draws = sum(specs.values()) * st.n_boot * n_docs
    return {"axes": [{"axis": a, "alternatives": v, "extra_texts": n, "work": w} for a, v, n, w in axes],
            "specifications": specs, "analyses": {name: len({s.analysis for s in g}) for name, g in grids.items()},
            "extra_scoring_passes": len(other_k), "extra_texts": len(extra_texts),
            "extra_tokens_read": read, "stats_seconds": [draws * multiverse.SECONDS_PER_DRAW[0],
                                                         draws * multiverse.SECONDS_PER_DRAW[1]]}


def induction_budgets(cfg, documents: pd.DataFrame, paragraphs: pd.DataFrame, sections_gold: pd.DataFrame) -> dict:
    """The induction calls' reply budgets (``induce.reply_plan``) against the replies the gold outlines would need:
    the rule, the largest budget and expected reply, and every window whose expected reply exceeds its budget."""
    from . import induce

    ip, lp = cfg.params("induce"), cfg.params("llm")
    rp = induce.reply_plan(documents, paragraphs, ip, lp.context_tokens, sections_gold)
    over = rp[rp["over_budget"]]
    cols = ["doc_id", "lo", "hi", "n_paragraphs", "n_sections", "expected_reply_tokens", "reply_budget"]
    return {"rule": (f"reply budget = {ip.reply_base_tokens} + ceil({ip.reply_tokens_per_section:g} x max(1, "
                     f"ceil({ip.reply_sections_per_paragraph:g} x paragraphs))), bounded by what the prompt leaves of "
                     f"llm.context_tokens {lp.context_tokens}"),
            "calls": int(len(rp)), "windowed_docs": int(rp.groupby("doc_id").size().gt(1).sum()),
            "max_budget": int(rp["reply_budget"].max()) if len(rp) else 0,
            "max_expected_reply_tokens": int(rp["expected_reply_tokens"].max()) if len(rp) else 0,
            "expected_reply_tokens": int(rp["expected_reply_tokens"].sum()),
            "over_budget": [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
                            for r in over[cols].to_dict("records")]}


def render(plan: Mapping[str, Any]) -> str:
    """The plan as text: one table per kind of work, then the notes."""
    lines = [f"plan for {plan['params']} (corpus '{plan['corpus']}', {plan['documents']} documents)", ""]
    lp = plan["llm"]
    lines.append(f"model calls  (llm.backend {lp['backend']}, model {lp['model']!r}, concurrency {lp['concurrency']}; "
                 f"{lp['cache_records']} records in the LLM cache)")
    if lp["batches"]:
        cols = ["requests", "cached", "calls", "prompt_tokens", "max_new_tokens"]
        rows = {d: {**{c: f"{b[c]:,.0f}" for c in cols},
                    "prefix_share": "" if b["prefix_share"] is None else f"{b['prefix_share']:.3f}"}
                for d, b in lp["batches"].items()}
        rows["total"] = {**{c: f"{sum(b[c] for b in lp['batches'].values()):,.0f}" for c in cols}, "prefix_share": ""}
        lines.append(pd.DataFrame(rows).T.to_string())
    else:
        lines.append("  none (no stage of these parameters calls a language model)")
    ind = plan.get("induction")
    if ind:
        lines += ["", f"induction reply budgets  ({ind['rule']})",
                  f"  {ind['calls']:,} first-round calls ({ind['windowed_docs']} documents in windows); largest "
                  f"budget {ind['max_budget']:,} tokens; largest expected reply {ind['max_expected_reply_tokens']:,} "
                  f"tokens (a gold outline written as the reply)"]
        if ind["over_budget"]:
            lines += [f"  {len(ind['over_budget'])} window(s) whose expected reply exceeds the budget (cut at the "
                      f"first try; the client then asks with a larger budget, up to llm.length_retries times):",
                      pd.DataFrame(ind["over_budget"]).to_string(index=False)]
        else:
            lines.append("  no document's expected reply exceeds its budget")
    c = plan["chunks"]
    lines += ["", f"chunks  {c['rows']:,} rows over {c['conditions']} conditions, {c['unique_texts']:,} unique "
                  f"embedded texts, {c['context_windows']:,} chunks with a situating context (A1) (sizes in {c['counted_in']})",
              "", f"texts to embed  ({plan['queries']:,} queries)",
              pd.DataFrame(plan["embedders"]).T.to_string()]
    if plan["rerankers"]:
        lines += ["", "reranker pairs", pd.DataFrame(plan["rerankers"]).T.to_string()]
    mv = plan.get("multiverse")
    if mv:
        specs = mv["specifications"]
        lines += ["", f"specification curves (multiverse)  {sum(specs.values()):,} specifications ("
                      + ", ".join(f"{c} {n:,}" for c, n in specs.items())
                      + f"), {sum(mv['analyses'].values()):,} analyses (a bootstrap seed repeats each); 07 about "
                      f"{mv['stats_seconds'][0]:,.1f}"
                      f"-{mv['stats_seconds'][1]:,.1f} s on 2 CPU cores; {mv['extra_texts']:,} more texts to embed, "
                      f"{mv['extra_scoring_passes']} more scoring pass(es) in 06",
                  pd.DataFrame([{**a, "alternatives": ", ".join(map(str, a["alternatives"]))} for a in mv["axes"]])
                  .to_string(index=False)]
    lines += ["", "notes"] + [f"  - {n}" for n in plan["notes"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chunkstudy.plan", description=__doc__.split("\n\n")[0])
    ap.add_argument("params", help="a parameter file (params/qasper.yaml) or a name in params/")
    ap.add_argument("--build", action="store_true", help="build the corpus in memory when 01 has not run")
    ap.add_argument("--json", action="store_true", help="print the plan as JSON")
    a = ap.parse_args(argv)
    p = Path(a.params)
    cfg = config.load(p if p.suffix in {".yaml", ".yml"} else Path("params") / f"{a.params}.yaml")
    try:
        tables, source = corpus_tables(cfg, a.build)
    except FileNotFoundError as e:
        print(f"plan: {e}", file=sys.stderr)
        return 1
    plan = estimate(cfg, tables)
    plan["notes"].insert(0, f"corpus: {source}")
    print(json.dumps(plan, indent=2, default=str) if a.json else render(plan))
    return 0


if __name__ == "__main__":
    sys.exit(main())
