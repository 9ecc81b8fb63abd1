"""The cost table (07's ``cost``, :func:`chunkstudy.stats.cost.cost_table`) and the equivalence cells of Table 1
(07's TOST columns, :mod:`chunkstudy.stats.equivalence`): docs/beyond.md, "Cost" and "Equivalence"."""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from .common import _require
from .formatting import DASH, fmt_ci, fmt_int, fmt_num, fmt_pct
from .record import Table

#: The sentence the report puts beside Holm's decision wherever the TOST column is shown.
TOST_SENTENCE = ("Holm asks whether a contrast differs from zero; TOST asks whether it lies within \u00b1sesoi, the "
                 "smallest effect of interest declared before the run; \"inconclusive\" means the data cannot tell.")


def has_tost(contrasts: pd.DataFrame | None) -> bool:
    """Whether 07's contrast table carries the TOST columns (``stats.sesoi`` was declared)."""
    return contrasts is not None and "equivalence" in contrasts.columns


def tost_cells(d: pd.DataFrame, ok: Sequence[bool]) -> dict[str, list[str]]:
    """Table 1's two TOST columns for the rows of ``d`` (07's columns ``tost_ci_low, tost_ci_high, equivalence``):
    the 90% CI (``1 − 2·alpha``) and the verdict; :data:`DASH` where the row supports no inference (``ok``
    False) or 07 gave no verdict."""
    ci, verdict = [], []
    for lo, hi, v, good in zip(d["tost_ci_low"], d["tost_ci_high"], d["equivalence"], ok):
        shown = bool(good) and isinstance(v, str) and v != ""
        ci.append(fmt_ci(lo, hi) if shown else DASH)
        verdict.append(v if shown else DASH)
    return {"TOST 90% CI": ci, "TOST": verdict}


def tost_note(d: pd.DataFrame) -> tuple[str, ...]:
    """Table 1's note on the TOST columns: the bound, where it was declared, and :data:`TOST_SENTENCE`."""
    s = d["sesoi"].dropna()
    bound = fmt_num(float(s.iat[0]), 3) if len(s) else DASH
    return (f"TOST: two one-sided tests of |\u0394| < sesoi = {bound} (stats.sesoi) from the same bootstrap draws; "
            f"90% CI; equivalent = the CI lies inside \u00b1sesoi, not equivalent = wholly beyond one bound, "
            f"inconclusive = across a bound. " + TOST_SENTENCE,)


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
        "ms / query": d["latency_ms_per_query"].map(lambda x: fmt_num(x, 2)),
        "Pareto": [front(bool(a), bool(b)) for a, b in zip(d["pareto_tokens"], d["pareto_llm"])],
    })
    notes = ("Each condition is charged the work of building and searching its index alone (shared work is "
             "charged to each sharer, so the columns do not add up). LLM tokens: the server's counts where a call "
             "record holds them, else characters / 4. Tokens embedded: content + prefix tokens of the distinct "
             "embedded texts (the chunking tokenizer); tokens read: what the encoder read (special tokens, the "
             "max_seq_length cut; late pooling: its macro windows). Exact counts; the seconds are measured in this "
             "run on this machine and are not reproducible (\u2014 where the run recorded none, e.g. a rerun that "
             "embedded nothing).",
             "Pareto: on the embedder's front of the metric against tokens read (tok) or LLM tokens (llm): no other "
             "condition is at least as good and no dearer, and better or cheaper on one. Exploratory.")
    return Table("cost", f"Cost of each condition ({metric}, no reranker)", d, display, notes)
