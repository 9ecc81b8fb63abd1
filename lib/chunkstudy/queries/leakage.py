"""The lexical-leakage filter for synthetic queries (paper, Section 5.1 "Leakage and provenance controls").

A query is **rejected** iff, against the text of any of its gold spans,

* its ROUGE-L F1 is **strictly greater** than ``rouge_max`` (paper: 0.35), or
* it shares **any** verbatim word n-gram (paper: n = 4) with it.

Both rounds of the pipeline use it: on the generated query, and again on its paraphrase (the paraphrase is what
enters the benchmark).

Tokenisation, stated because the scores depend on it:

* **ROUGE-L** is ``rouge_score.rouge_scorer.RougeScorer(["rougeL"], use_stemmer=...)``. Its tokenizer lowercases,
  replaces every character outside ``[a-z0-9]`` by a space (so accented and non-Latin letters split words and are
  dropped) and, with ``use_stemmer=True`` (parameter ``queries.rouge_stemmer``, default true), applies the NLTK
  Porter stemmer to tokens longer than 3 characters. ROUGE-L F1 = 2·P·R / (P + R) with
  P = LCS / |query tokens|, R = LCS / |span tokens| (the ``fmeasure`` of rouge-score, beta = 1). It is computed per
  gold span; the query's score is the maximum over its spans (a multihop query must be far from both).
* **n-gram overlap** uses its own tokenizer: Unicode-lowercased ``\\w+`` runs (``re.findall(r"\\w+", text.lower())``),
  no stemming, no stopword removal; an n-gram is n consecutive tokens. Any n-gram that occurs in the query and in
  a span rejects (verbatim copying of stopword runs such as "one of the most" counts too: the paper says "any").

The scores are returned as provenance and stored with each query.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Sequence

from rouge_score import rouge_scorer

WORD_RE = re.compile(r"\w+")


@lru_cache(maxsize=4)
def _scorer(use_stemmer: bool) -> rouge_scorer.RougeScorer:
    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=use_stemmer)


def words(text: str) -> list[str]:
    """The n-gram tokenizer: Unicode-lowercased ``\\w+`` runs."""
    return WORD_RE.findall(text.lower())


def ngrams(tokens: Sequence[str], n: int) -> set[tuple[str, ...]]:
    """The set of all runs of ``n`` consecutive tokens (empty when there are fewer than ``n`` tokens)."""
    if n < 1:
        raise ValueError(f"n-gram length must be >= 1, got {n}")
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


def rouge_l(query: str, reference: str, use_stemmer: bool = True) -> float:
    """ROUGE-L F1 of ``query`` (the prediction) against ``reference`` (a gold span's text), in [0, 1].

    rouge-score's ``fmeasure``: 2·P·R/(P+R), P = LCS/|query|, R = LCS/|reference| (its tokenizer; see module doc).
    """
    return float(_scorer(bool(use_stemmer)).score(reference, query)["rougeL"].fmeasure)


def shared_ngrams(query: str, reference: str, n: int = 4) -> list[str]:
    """Verbatim word n-grams the query shares with ``reference``, sorted, each joined by spaces."""
    common = ngrams(words(query), n) & ngrams(words(reference), n)
    return sorted(" ".join(g) for g in common)


def check(query: str, span_texts: Sequence[str], rouge_max: float, ngram: int, use_stemmer: bool) -> dict:
    """Score one query against its gold span texts and decide.

    Returns a JSON-able dict (the provenance kept with the query)::

        rouge_l          max over spans of ROUGE-L F1 (0.0 when there are no spans)
        rouge_l_spans    ROUGE-L F1 per span, in the order given
        shared_ngrams    the verbatim n-grams shared with any span (sorted, unique)
        passed           rouge_l <= rouge_max and no shared n-gram
        reason           "ok", "rouge", "ngram" or "rouge+ngram"

    An empty query (no tokens) cannot leak and is rejected by the caller as unusable, not here.
    """
    if not isinstance(query, str):
        raise TypeError(f"query must be a string, got {type(query).__name__}")
    if isinstance(span_texts, str):
        raise TypeError("span_texts must be a sequence of span texts, not one string")
    per_span = [rouge_l(query, t, use_stemmer) for t in span_texts]
    shared = sorted({g for t in span_texts for g in shared_ngrams(query, t, ngram)})
    top = max(per_span, default=0.0)
    too_close = top > rouge_max
    reason = "+".join(r for r, hit in (("rouge", too_close), ("ngram", bool(shared))) if hit) or "ok"
    return {"rouge_l": top, "rouge_l_spans": per_span, "shared_ngrams": shared, "passed": reason == "ok",
            "reason": reason}
