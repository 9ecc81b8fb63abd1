"""Scale, on paper: the expected time per stage of the paper's two corpora at full scale, from the work
``python -m chunkstudy.plan --json`` counts and from rates, each named with where it comes from.

This script measures nothing. It multiplies: the plan's counts (model calls, prompt and reply tokens, texts and
tokens to embed, reranker pairs) scaled from the corpus the plan saw to the paper's size, divided by a rate. A rate
is a range, low to high, and so is each time. Rates measured on this project's machines say so; rates for a GPU
this project has not run on come from published figures, named in ``RATES`` with their caveats. Replace them with
your own (``scripts/device_check.sh`` measures the encoders' items/s on a lent GPU) by editing ``RATES``.

Run (about 10 minutes of plans on 2 cores; docs/performance.md, "Scale, on paper", shows the output)::

    py=.venv/bin/python
    $py -m chunkstudy.plan bench/scale/qasper_paper_test_split.yaml --build --json > qasper.json
    $py -m chunkstudy.plan bench/scale/wikipedia_paper_local_articles.yaml --build --json > wikipedia.json
    $py -m chunkstudy.plan params/qasper_local.yaml --build --json > qasper_local.json
    $py bench/scale_table.py qasper.json wikipedia.json qasper_local.json --stand-in-texts 67528

Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Rate:
    low: float
    high: float
    unit: str
    source: str


#: Rates, low to high. H200 figures are published ones (none measured by this project); CPU figures were measured
#: on the development machine: AMD EPYC Zen 3, 2 cores, AVX2, no AVX-512 or bfloat16.
RATES = {
    "llm_prefill": Rate(34_000, 45_000, "prompt tokens/s", "Qwen3.5-35B-A3B (a MoE of Gemma-4-26B-A4B's size) on one "
                        "H200, vLLM 0.17.1, BF16: ~34k input tok/s at 1024/128 tokens x 512 concurrent, 45k total at "
                        "32000/100 x 100 (gpustack performance-lab, qwen3.5-35b-a3b/h200.md). No Gemma-4 figure is "
                        "published; vLLM forces a slower attention backend for Gemma 4 (vLLM issue #38887)"),
    "llm_decode": Rate(4_200, 6_900, "reply tokens/s", "the same source: 4.2k output tok/s (1024/128 x 512) to 6.9k "
                       "(1000/2000 x 200)"),
    "encoder_large": Rate(62_000, 500_000, "tokens/s", "bge-large-en-v1.5 (BERT-large): low = the published NVIDIA L4 "
                          "figure, TEI, ~450-token texts (0.54 req/s x 115k tokens; michaelfeil/infinity "
                          "docs/benchmarking.md), which an H200 does not fall below; high = that figure x 8.2, the "
                          "ratio of dense FP16 tensor throughput (H200 989 / L4 121 TFLOPS)"),
    "encoder_small": Rate(62_000, 2_500_000, "tokens/s", "bge-small-en-v1.5 (33M): no published datacenter figure; "
                          "low = bge-large's low, high = 5x bge-large's high"),
    "reranker": Rate(62_000, 500_000, "pair tokens/s", "bge-reranker-v2-m3 is XLM-RoBERTa-large: per token the "
                     "compute of BERT-large (its larger vocabulary is a lookup), so bge-large's range; no published "
                     "datacenter figure"),
    "cpu_strong": Rate(11.2, 21.6, "texts/s", "all-MiniLM-L6-v2 at 256 tokens, 2 cores: 5.6 texts per CPU-second "
                       "(bench_embed.py) x 2, to 21.6 texts/s (the qasper_sample run)"),
    "cpu_weak": Rate(23.2, 51.0, "texts/s", "at 128 tokens: 11.6 per CPU-second x 2, to 51 (qasper_sample)"),
    "cpu_texttiling": Rate(1.02, 2.0, "documents/s", "02 (TextTiling) on the 416 test papers: 408 s on a loaded "
                           "machine (load 6-9); the high end assumes twice that on a quiet one"),
}

#: CPU-side stages, measured on the same 2-core machine while other jobs shared it (so an upper end; the low end
#: assumes a quiet machine twice as fast): (seconds, the size they were measured at, what the time scales with).
MEASURED = {
    "01 corpus": (14.0, {"documents": 416}, "documents", "01 on the 416 test papers (qasper_local, 2026-12-01)"),
    "03 queries (harvested: matching, BM25)": (154.0, {"documents": 416}, "documents",
                                               "03 on the 416 test papers (qasper_local, 2026-12-01)"),
    "05 retrieval (22 cells, numpy)": (237.3, {"queries": 4_303, "chunks": 36_000}, "queries x chunks",
                                       "bench_retrieve.py --qasper-only: 4,303 queries x 11 conditions x 2 embedders, "
                                       "36,000 chunks per condition"),
    "06 metrics (7 metrics, all cells)": (31.1, {"queries": 4_303}, "queries",
                                         "bench_metrics.py: 189,332 ranked lists at QASPER scale"),
    "07 bootstrap (4 contrasts x 10,000)": (1.6, {"queries": 4_303}, "queries",
                                           "bench_stats.py at QASPER scale (the vectorised bootstrap alone)"),
}

#: The measured stages after 04: the same work on either host (numpy on its CPU).
DOWNSTREAM = ("05 retrieval (22 cells, numpy)", "06 metrics (7 metrics, all cells)",
              "07 bootstrap (4 contrasts x 10,000)")

#: The paper's sizes (paper.txt; params/qasper.yaml's header): corpus-side work scales with documents, query-side
#: work (reranker pairs, query embeddings) with usable questions.
PAPER = {"qasper": {"documents": 1_585, "queries": 4_303}, "wikipedia": {"documents": 200, "queries": 951}}
QUERY_TOKENS = 20  # a question's tokens inside a reranker pair (QASPER questions are short); [SEP] included


def seconds(work: float, rate: Rate) -> tuple[float, float]:
    """(fastest, slowest) seconds for ``work`` units at ``rate``."""
    return work / rate.high, work / rate.low


def llm_seconds(prompt_tokens: float, reply_tokens: float) -> tuple[float, float]:
    """(fastest, slowest) seconds of a batch of model calls: its prompt tokens at the prefill rate plus its reply
    tokens at the decode rate (added, as if the two never overlapped: the slow end of a server that batches)."""
    lo_p, hi_p = seconds(prompt_tokens, RATES["llm_prefill"])
    lo_d, hi_d = seconds(reply_tokens, RATES["llm_decode"])
    return lo_p + lo_d, hi_p + hi_d


def measured_rows(plan: dict, corpus: str, stages: tuple[str, ...]) -> list[tuple[str, str, tuple[float, float]]]:
    """(stage, work, seconds range) of the CPU-side stages, scaled linearly from where they were measured."""
    size = {"documents": PAPER[corpus]["documents"], "queries": PAPER[corpus]["queries"],
            "chunks": plan["chunks"]["rows"] / plan["chunks"]["conditions"] * PAPER[corpus]["documents"]
            / plan["documents"]}
    rows = []
    for stage in stages:
        sec, at, scales_with, _ = MEASURED[stage]
        f = 1.0
        for k, v in at.items():
            f *= size[k] / v
        rows.append((stage, f"measured, scaled with {scales_with}", (sec * f / 2, sec * f)))
    return rows


def gpu_rows(plan: dict, corpus: str) -> list[tuple[str, str, tuple[float, float]]]:
    """(stage, work, seconds range) on one H200 with the paper's models, scaled to the paper's size."""
    f_doc = PAPER[corpus]["documents"] / plan["documents"]
    f_q = PAPER[corpus]["queries"] / plan["queries"]
    rows = []
    batches = plan["llm"]["batches"]
    ind, corr = batches.get("induction"), batches.get("induction self-correction")
    if ind:
        prompt = (ind["prompt_tokens"] + (corr["prompt_tokens"] if corr else 0)) * f_doc
        reply = plan["induction"]["expected_reply_tokens"] * (2 if corr else 1) * f_doc
        rows.append(("02 induction (LLM)", f"{ind['calls'] * f_doc:,.0f} + at most as many correction calls; "
                     f"{prompt / 1e6:.1f} M prompt, {reply / 1e6:.2f} M reply tokens", llm_seconds(prompt, reply)))
    a1 = batches.get("A1 contexts")
    if a1:
        uncached = a1["prompt_tokens"] * (1 - (a1["prefix_share"] or 0)) * f_doc
        reply = a1["max_new_tokens"] * f_doc
        rows.append(("02 A1 contexts (LLM)", f"{a1['calls'] * f_doc:,.0f} calls; {uncached / 1e6:.1f} M uncached "
                     f"prompt tokens (prefix share {a1['prefix_share']:.2f}), at most {reply / 1e6:.1f} M reply "
                     f"tokens", llm_seconds(uncached, reply)))
    gen = {d: b for d, b in batches.items() if d.startswith("queries")}
    if gen:
        prompt = sum(b["prompt_tokens"] for b in gen.values()) * f_doc
        reply = sum(b["max_new_tokens"] for b in gen.values()) * f_doc
        calls = sum(b["calls"] for b in gen.values()) * f_doc
        rows.append(("03 query generation + paraphrase (LLM)", f"at most {calls:,.0f} calls; {prompt / 1e6:.1f} M "
                     f"prompt, at most {reply / 1e6:.2f} M reply tokens", llm_seconds(prompt, reply)))
    for key, rate in (("strong", "encoder_large"), ("weak", "encoder_small")):
        e = plan["embedders"][key]
        tokens = e["passage_tokens"] * f_doc + e["queries"] * f_q * QUERY_TOKENS
        rows.append((f"04 embed, {e['model'].split('/')[-1]}", f"{e['passages'] * f_doc:,.0f} texts, "
                     f"{tokens / 1e6:.1f} M tokens", seconds(tokens, RATES[rate])))
    strong = plan["embedders"]["strong"]
    per_pair = strong["passage_tokens"] / strong["passages"] + QUERY_TOKENS
    for key, r in plan["rerankers"].items():
        pairs = r["pairs_at_most"] * f_q
        rows.append((f"05 rerank, {key}", f"at most {pairs / 1e6:.2f} M pairs, {pairs * per_pair / 1e6:.0f} M "
                     f"tokens", seconds(pairs * per_pair, RATES["reranker"])))
    return rows + measured_rows(plan, corpus, DOWNSTREAM)


def cpu_rows(plan: dict, corpus: str, texts_run: int | None = None) -> list[tuple[str, str, tuple[float, float]]]:
    """(stage, work, seconds range) on 2 CPU cores with the offline stand-ins, scaled to the paper's size.
    ``texts_run``: the unique texts a run of the plan's corpus counted, in place of the plan's (which stands the gold
    outline in for the induced one before 02 has run, so the induced conditions share the gold ones' texts)."""
    docs = PAPER[corpus]["documents"]
    texts = (texts_run or plan["embedders"]["strong"]["passages"]) * docs / plan["documents"]
    return [*measured_rows(plan, corpus, ("01 corpus",)),
            ("02 induction (TextTiling)", f"{docs:,} documents", seconds(docs, RATES["cpu_texttiling"])),
            *measured_rows(plan, corpus, ("03 queries (harvested: matching, BM25)",)),
            ("04 embed, strong (MiniLM)", f"{texts:,.0f} texts", seconds(texts, RATES["cpu_strong"])),
            ("04 embed, weak (MiniLM)", f"{texts:,.0f} texts", seconds(texts, RATES["cpu_weak"])),
            *measured_rows(plan, corpus, DOWNSTREAM)]


def fmt(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 5400 else f"{s / 60:.0f} min" if s >= 90 else f"{s:.0f} s" if s >= 1 else "< 1 s"


def table(title: str, rows: list[tuple[str, str, tuple[float, float]]]) -> str:
    lines = [f"**{title}**", "", "| stage | work at full scale | time |", "|---|---|---|"]
    for stage, work, (lo, hi) in rows:
        lines.append(f"| {stage} | {work} | {fmt(lo)} – {fmt(hi)} |")
    lo, hi = sum(r[2][0] for r in rows), sum(r[2][1] for r in rows)
    lines.append(f"| total of these | | {fmt(lo)} – {fmt(hi)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("qasper", type=Path, help="plan (--json) of the paper's QASPER spec on the mirrored test split")
    ap.add_argument("wikipedia", type=Path, help="plan (--json) of the paper's Wikipedia-FA spec on local articles")
    ap.add_argument("qasper_local", type=Path, help="plan (--json) of params/qasper_local.yaml (the stand-ins)")
    ap.add_argument("--stand-in-texts", type=int, default=None,
                    help="unique texts a qasper_local run counted in 04 (67,528 with TextTiling's outline), in place "
                         "of the plan's count, which stands the gold outline in for the induced one")
    a = ap.parse_args(argv)
    q, w, local = (json.loads(p.read_text()) for p in (a.qasper, a.wikipedia, a.qasper_local))
    for plan, corpus in ((q, "qasper"), (w, "wikipedia"), (local, "qasper")):
        f = PAPER[corpus]
        print(f"{plan['corpus']}: {plan['documents']:,} documents, {plan['queries']:,} queries -> x"
              f"{f['documents'] / plan['documents']:.2f} documents, x{f['queries'] / plan['queries']:.2f} queries")
    print()
    print(table("QASPER (1,585 papers, 4,303 questions), one H200, the paper's models", gpu_rows(q, "qasper")))
    print()
    print(table("Wikipedia-FA (200 articles, 951 queries), one H200, the paper's models", gpu_rows(w, "wikipedia")))
    print()
    print(table("QASPER (1,585 papers), 2 CPU cores, the offline stand-ins",
                cpu_rows(local, "qasper", a.stand_in_texts)))
    print()
    for name, r in RATES.items():
        print(f"- {name}: {r.low:,g}-{r.high:,g} {r.unit}; {r.source}")
    for stage, (sec, at, _, source) in MEASURED.items():
        print(f"- {stage}: {sec:g} s at {at}; {source}")


if __name__ == "__main__":
    main()
