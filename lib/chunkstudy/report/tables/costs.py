"""The cost table (07's ``cost``, :func:`chunkstudy.stats.cost.cost_table`): docs/beyond.md, "Cost". The
equivalence cells of Table 1 are TOST's own (:class:`chunkstudy.stats.verdict.tost.TostVerdict`, printed through
:func:`chunkstudy.report.tables.results.verdict_cells` as every registered verdict is)."""

from __future__ import annotations

import pandas as pd

from .common import _require
from .formatting import fmt_int, fmt_num, fmt_pct
from .record import Table


def _latency(median: float, low: float, high: float) -> str:
    """A search latency (ms per query): the median of 05's timed repeats, their range beside it when it has one."""
    spread = not (pd.isna(low) or pd.isna(high)) and low != high
    return fmt_num(median, 3) + (f" ({fmt_num(low, 3)}\u2013{fmt_num(high, 3)})" if spread else "")


def cost(table: pd.DataFrame, metric: str) -> Table:
    """The cost of each condition, one row per (condition, embedder) of 07's ``cost`` table: the primary metric
    (without a reranker), the embedding mode, LLM calls and tokens, tokens embedded and the prefix share, tokens
    the encoder read, the index size, and this run's measured embedding seconds and retrieval latency; ``*`` marks
    a row on its embedder's Pareto front of the metric against tokens read (``tok``) or LLM tokens (``llm``)."""
    _require(table, ["condition", "embedder", "quality", "embedding", "llm_calls", "llm_tokens", "tokens_embedded",
                     "prefix_share", "tokens_read", "index_bytes", "embed_seconds", "latency_ms_per_query",
                     "pareto_tokens", "pareto_llm"], "cost")
    d = table.reset_index(drop=True)

    def front(tok: bool, llm: bool) -> str:
        return ", ".join(n for n, on in (("tok", tok), ("llm", llm)) if on) or ""

    display = pd.DataFrame({
        "Condition": d["condition"], "Embedder": d["embedder"], metric: d["quality"].map(fmt_num),
        "Embedding": d["embedding"], "LLM calls": d["llm_calls"].map(fmt_int),
        "LLM tokens": d["llm_tokens"].map(fmt_int),
        "Tokens embedded": d["tokens_embedded"].map(fmt_int), "Prefix share": d["prefix_share"].map(fmt_pct),
        "Tokens read": d["tokens_read"].map(fmt_int),
        "Index (KiB)": d["index_bytes"].map(lambda x: fmt_num(float(x) / 1024, 1)),
        "Embed s": d["embed_seconds"].map(lambda x: fmt_num(x, 2)),
        "ms / query": [_latency(m, lo, hi) for m, lo, hi in zip(
            d["latency_ms_per_query"], d.get("latency_ms_min", d["latency_ms_per_query"]),
            d.get("latency_ms_max", d["latency_ms_per_query"]))],
        "Pareto": [front(bool(a), bool(b)) for a, b in zip(d["pareto_tokens"], d["pareto_llm"])],
    })
    notes = ("Each condition is charged the work of building and searching its index alone, whatever another "
             "condition left in the caches (shared work is charged to each sharer, so the columns do not add up). "
             "LLM tokens: the server's counts (usage) where a call record holds them, every reply of a cut-and-"
             "retried call included, else characters / 4 (records written before the client kept usage). Tokens "
             "embedded: content + prefix tokens of the distinct embedded texts (the chunking tokenizer); tokens "
             "read: what the encoder read (special tokens, the max_seq_length cut; late pooling: its macro "
             "windows). Exact counts; the seconds are measured in this run on this machine and are not "
             "reproducible: embedding seconds are the tokens read at this run's rate for the embedder and mode "
             "(\u2014 where it measured none, e.g. a rerun that embedded nothing); ms / query is the median of 05's "
             "timed repeats of the search, their range in parentheses.",
             "Pareto: on the embedder's front of the metric against tokens read (tok) or LLM tokens (llm): no other "
             "condition is at least as good and no dearer, and better or cheaper on one. Exploratory.")
    return Table("cost", f"Cost of each condition ({metric}, no reranker)", d, display, notes)
