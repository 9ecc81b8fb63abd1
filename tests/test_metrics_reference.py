"""A plain, obviously correct reference implementation of the metrics (sets of character positions, exact
fractions), kept beside the tests as the oracle for :mod:`chunkstudy.metrics` (and timed by bench/bench_metrics.py).

It scores one ranked list at a time, straight from the definitions in the paper's appendix "Coverage-nDCG" and
docs/design.md, "Metrics"; it shares no code with the library. Thresholds are exact decimals (``Fraction(str(x))``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True)
class Chunk:
    chunk_id: str
    doc_id: str
    start: int
    end: int
    n_content_tokens: int = 0
    n_prefix_tokens: int = 0


def chars(chunk: Chunk, doc_id: str) -> set[int]:
    """The characters a chunk contributes to a query on ``doc_id`` (none from another document)."""
    return set(range(chunk.start, chunk.end)) if chunk.doc_id == doc_id else set()


def is_relevant(chunk: Chunk, doc_id: str, spans, span_frac, chunk_frac) -> bool:
    mine = chars(chunk, doc_id)
    for s, e in spans:
        ov = len(mine & set(range(s, e)))
        if ov > 0 and (ov >= Fraction(str(span_frac)) * (e - s)
                       or ov >= Fraction(str(chunk_frac)) * (chunk.end - chunk.start)):
            return True
    return False


def coverage_gains(ranked: list[Chunk], doc_id: str, spans) -> list[Fraction]:
    """Rank by rank: mean over spans of the newly covered fraction of the span."""
    gold = [set(range(s, e)) for s, e in spans]
    covered = [set() for _ in gold]
    gains = []
    for c in ranked:
        mine = chars(c, doc_id)
        new = [Fraction(len((mine & g) - cov), len(g)) for g, cov in zip(gold, covered)]
        for g, cov in zip(gold, covered):
            cov |= mine & g
        gains.append(sum(new, Fraction(0)) / len(gold))
    return gains


def greedy_ideal(own: list[Chunk], doc_id: str, spans, k: int) -> list[Fraction]:
    """Greedy max-marginal coverage over the condition's own chunks; ties to the smallest (start, end, id)."""
    gold = [set(range(s, e)) for s, e in spans]
    covered = [set() for _ in gold]
    left = sorted(own, key=lambda c: (c.start, c.end, c.chunk_id))
    gains = []
    while left and len(gains) < k:
        best, best_gain = None, Fraction(0)
        for c in left:
            mine = chars(c, doc_id)
            g = sum((Fraction(len((mine & gs) - cov), len(gs)) for gs, cov in zip(gold, covered)), Fraction(0))
            if g > best_gain:
                best, best_gain = c, g
        if best is None:
            break
        for gs, cov in zip(gold, covered):
            cov |= chars(best, doc_id) & gs
        gains.append(best_gain / len(gold))
        left.remove(best)
    return gains


def dcg(gains, k: int) -> float:
    return sum(float(g) / math.log2(i + 2) for i, g in enumerate(gains[:k]))


def budget_chars(ranked: list[Chunk], doc_id: str, budget: int, policy: str) -> set[int]:
    used, got = 0, set()
    for c in ranked:
        cost = c.n_content_tokens + c.n_prefix_tokens
        if used + cost <= budget:
            got |= chars(c, doc_id)
            used += cost
            continue
        if policy == "skip":
            continue
        if policy == "truncate":
            left = budget - used - c.n_prefix_tokens
            if left > 0 and c.n_content_tokens > 0:
                keep = min((c.end - c.start) * left // c.n_content_tokens, c.end - c.start)
                got |= chars(Chunk(c.chunk_id, c.doc_id, c.start, c.start + keep), doc_id)
        break
    return got


def reference_metrics(ranked: list[Chunk], own: list[Chunk], doc_id: str, spans, p: dict) -> dict[str, float]:
    """Every metric for one ranked list (ranks 1..n in list order). ``own``: the condition's chunks of the
    query's document; ``spans``: the gold [start, end) pairs; ``p``: the metrics parameters (all keys)."""
    k, rk = p["cutoff"], p["recall_k"]
    out = {}
    ideal = dcg(greedy_ideal(own, doc_id, spans, k), k)
    out[f"cov-nDCG@{k}"] = dcg(coverage_gains(ranked, doc_id, spans), k) / ideal if ideal > 0 else 0.0
    top = set().union(*[chars(c, doc_id) for c in ranked[:rk]]) if ranked else set()
    out[f"recall@{rk}"] = sum(
        len(top & set(range(s, e))) >= Fraction(str(p["span_frac"])) * (e - s) for s, e in spans) / len(spans)
    rel = [is_relevant(c, doc_id, spans, p["span_frac"], p["chunk_frac"]) for c in ranked]
    out["MRR"] = next((1.0 / (i + 1) for i, r in enumerate(rel) if r), 0.0)
    n_rel = sum(is_relevant(c, doc_id, spans, p["span_frac"], p["chunk_frac"]) for c in own)
    ideal_bin = dcg([1] * min(n_rel, k), k)
    out[f"nDCG@{k}"] = dcg([int(r) for r in rel], k) / ideal_bin if ideal_bin > 0 else 0.0
    gold = set().union(*[set(range(s, e)) for s, e in spans])
    for b in p["budgets"]:
        out[f"budget-cov@{b}"] = len(budget_chars(ranked, doc_id, b, p["budget_partial"]) & gold) / len(gold)
    return out


# ---- the reference checks itself on the paper's worked example ----------------------------------------------------

P = {"cutoff": 10, "recall_k": 50, "budgets": [512], "span_frac": 0.5, "chunk_frac": 0.8, "budget_partial": "truncate"}


def test_reference_reproduces_the_worked_example():
    a, b, c = Chunk("a", "d", 0, 60), Chunk("b", "d", 40, 100), Chunk("c", "d", 200, 300)
    assert coverage_gains([a, b, c], "d", [(0, 100)]) == [Fraction(3, 5), Fraction(2, 5), 0]
    assert round(dcg(coverage_gains([a, b, c], "d", [(0, 100)]), 10), 3) == 0.852
    assert reference_metrics([a, b, c], [a, b, c], "d", [(0, 100)], P)["cov-nDCG@10"] == 1.0
    whole = Chunk("w", "d", 0, 100)
    assert reference_metrics([a, b, c], [a, b, c, whole], "d", [(0, 100)], P)["cov-nDCG@10"] < 1.0


def test_reference_gives_other_documents_nothing():
    assert reference_metrics([Chunk("x", "other", 0, 100)], [Chunk("a", "d", 0, 100)], "d", [(0, 100)],
                             P) == {"cov-nDCG@10": 0.0, "recall@50": 0.0, "MRR": 0.0, "nDCG@10": 0.0,
                                    "budget-cov@512": 0.0}
