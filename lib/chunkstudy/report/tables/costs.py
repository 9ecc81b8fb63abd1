"""The cost table (07's ``cost``, :func:`chunkstudy.stats.cost.cost_table`) and the equivalence cells of Table 1
(07's TOST columns, :mod:`chunkstudy.stats.equivalence`): docs/beyond.md, "Cost" and "Equivalence"."""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from ...stats import equivalence
from .common import _require
from .formatting import DASH, fmt_ci, fmt_int, fmt_num, fmt_p, fmt_pct
from .record import Table

#: The sentence the report puts beside Holm's decision wherever the TOST column is shown.
TOST_SENTENCE = ("Holm asks whether a contrast differs from zero; TOST asks whether it lies within \u00b1sesoi, the "
                 "smallest effect of interest declared before the run; \"inconclusive\" means the data cannot tell.")


def has_tost(contrasts: pd.DataFrame | None) -> bool:
    """Whether 07's contrast table carries the TOST columns (``stats.sesoi`` was declared)."""
    return contrasts is not None and "equivalence" in contrasts.columns


def tost_cells(d: pd.DataFrame, ok: Sequence[bool]) -> dict[str, list[str]]:
    """Table 1's TOST columns for the rows of ``d`` (07's columns ``tost_ci_low, tost_ci_high, p_tost_holm,
    equivalence``): the unadjusted 90% CI (``1 − 2·alpha``), the Holm-adjusted TOST p and the verdict (decided
    on the family's Holm-adjusted p-values); :data:`DASH` where the row supports no inference (``ok`` False) or
    07 gave no verdict."""
    ci, p, verdict = [], [], []
    n_boot = d["n_boot"] if "n_boot" in d else pd.Series([None] * len(d))
    for lo, hi, ph, v, good, b in zip(d["tost_ci_low"], d["tost_ci_high"], d["p_tost_holm"], d["equivalence"], ok,
                                      n_boot):
        shown = bool(good) and isinstance(v, str) and v != ""
        ci.append(fmt_ci(lo, hi) if shown else DASH)
        p.append(fmt_p(ph, b) if shown else DASH)
        verdict.append(v if shown else DASH)
    return {"TOST 90% CI": ci, "TOST Holm p": p, "TOST": verdict}


def tost_note(d: pd.DataFrame) -> tuple[str, ...]:
    """The note on the TOST columns: the bound, how the verdict holds the family's error, :data:`TOST_SENTENCE`,
    and each contrast's reading (:func:`tost_readings`)."""
    s = d["sesoi"].dropna()
    bound = fmt_num(float(s.iat[0]), 3) if len(s) else DASH
    metric = f" ({d['metric'].iat[0]})" if "metric" in d and len(d) else ""
    return (f"TOST: two one-sided tests of |\u0394| < sesoi = {bound}{metric} from the same bootstrap draws; the 90% "
            "CI is unadjusted. The verdicts hold the family's error at alpha as Holm does: equivalent = the "
            "Holm-adjusted TOST p (the larger one-sided p) < alpha; not equivalent = the Holm-adjusted p of the "
            "minimum-effect test (H0: |\u0394| \u2264 sesoi) < alpha; inconclusive = neither. " + TOST_SENTENCE,
            *tost_readings(d))


def tost_readings(d: pd.DataFrame) -> tuple[str, ...]:
    """One sentence per contrast with a verdict (:func:`chunkstudy.stats.equivalence.reading`, from the verdict and
    the contrast's Holm decision ``reject_holm``), e.g. "C4: no difference of interest: equivalent within
    ±sesoi."; none without a verdict."""
    rejected = d["reject_holm"] if "reject_holm" in d else pd.Series([False] * len(d))
    return tuple(f"{c}: {equivalence.reading(v, bool(r))}." for c, v, r in zip(d["contrast"], d["equivalence"], rejected)
                 if isinstance(v, str) and v in equivalence.VERDICTS)


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
