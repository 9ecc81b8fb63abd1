"""The query stage (03_queries): leakage-controlled synthetic queries, or harvested human questions.

Paper, Section 5.1. Two paths produce the same ``queries`` table (docs/design.md, "Data contracts"):
``query_id, doc_id, qtype, text, spans, provenance`` (+ ``source``, ``rouge_l``). ``spans`` is a list of
``[start, end]`` half-open character offsets into ``documents.text``; ``provenance`` is a JSON string.

**Generated** (Wikipedia; ``queries.source: generated``). Spans first, then text:

1. :func:`sample_spans` — the pipeline picks the gold evidence per document with a seeded generator
   (``queries.seed`` and the doc_id, so a document's spans do not depend on which other documents are present):

   * ``factoid`` — one *sentence run*: ``queries.factoid_span_sentences`` consecutive sentences inside one
     paragraph (fewer when the paragraph is shorter), at least ``queries.min_span_words`` words;
   * ``underspecified`` — one sentence run, disjoint from every factoid/underspecified run of the document;
     the prompt demands a vague referent ("the commander", never the proper name);
   * ``multihop`` — two sentence runs in two different top-level sections;
   * ``structural`` — exactly one whole top-level section: from its level-1 heading's first paragraph to the
     last paragraph before the next level-1 heading (offsets from the paragraph table).

   Up to ``queries.per_doc`` samples per type per document (fewer when the document lacks candidates).
   Sentences come from pysbd (English, ``clean=False``) run on each paragraph; a sentence's span excludes its
   trailing whitespace. Top-level sections are level-1 rows with their descendants (``model.top_level_ids``);
   the lead (text before the first heading) is a top-level section of its own.
2. One model call per sample writes a query (prompts per type below; the model sees the span text, never
   reports evidence: its only output is ``{"query": ...}``).
3. :mod:`.leakage` filter, round 1 (ROUGE-L F1 > ``rouge_max`` or any shared ``ngram``-gram rejects);
   an ``underspecified`` query that contains the document title is also rejected (``named``).
4. A second call paraphrases each survivor (it sees only the query); the paraphrase passes the same filter
   (round 2) and is what enters the benchmark.
5. :func:`balance` — per type, at most ``queries.targets[type]`` finals, picked by a seeded round-robin over
   documents (documents shuffled, each document's survivors shuffled, one per document per round), so finals
   spread over as many documents as possible.

Replies are parsed leniently (:func:`parse_query`): the JSON object's ``query``; else the first non-empty line
without "Query:"-style labels or quotes. A reply with fewer than three words is ``unusable``.

**Harvested** (QASPER, demo; ``queries.source: harvested``): :func:`from_harvested` passes the 01 ``harvested``
questions through with their gold spans, checks the spans against the documents, and records the leakage
scores as description (no filtering: the questions are human-written).

Layout: :mod:`.stage` (:func:`build_queries` and what the notebook shows), :mod:`.spans` (span sampling),
:mod:`.prompts` (prompts and reply parsing), :mod:`.generated` (generation, filtering, balancing),
:mod:`.harvest` (the harvested path), :mod:`.common`, :mod:`.leakage` (the ROUGE-L and n-gram filter) and
:mod:`.bm25` (the BM25 diagnostic, ``bm25.json``). Every public name is re-exported here
(``chunkstudy.queries.sample_spans`` and the like).
"""

from __future__ import annotations

from .common import (
    QTYPES, QUERY_COLUMNS, FUNNEL_COLUMNS,
)
from .spans import (
    SAMPLE_COLUMNS, sentence_spans, top_level_sections, sentence_runs, sample_doc_spans, sample_spans,
)
from .prompts import (
    QUERY_SCHEMA, SYSTEM, RULES, PROMPTS, PARAPHRASE, template_hash, generation_messages, paraphrase_messages,
    parse_query, reply_shape, names_title,
)
from .generated import (
    GEN_STEPS, generate, balance, pick_docs, reply_counts, from_generated,
)
from .harvest import (
    HARVEST_STEPS, from_harvested,
)
from .stage import (
    QueriesError, build_queries, by_type, inputs_overview, client_for, funnel_facts, capability_note, examples,
)
from .leakage import (
    WORD_RE, words, ngrams, rouge_l, shared_ngrams, check,
)
from .bm25 import (
    TOKENISATION, tokenize, build_index, scores, rank_of, chars_in_spans, is_relevant, gold_chunk, SCOPES, diagnostic,
    summarize, chunk_structure, outline, summary_table,
)

__all__ = [
    "QTYPES", "QUERY_COLUMNS", "FUNNEL_COLUMNS", "SAMPLE_COLUMNS", "sentence_spans", "top_level_sections",
    "sentence_runs", "sample_doc_spans", "sample_spans", "QUERY_SCHEMA", "SYSTEM", "RULES", "PROMPTS", "PARAPHRASE",
    "template_hash", "generation_messages", "paraphrase_messages", "parse_query", "reply_shape", "names_title",
    "GEN_STEPS", "generate", "balance", "pick_docs", "reply_counts", "from_generated", "HARVEST_STEPS",
    "from_harvested", "QueriesError", "build_queries", "by_type", "inputs_overview", "client_for", "funnel_facts",
    "capability_note", "examples", "WORD_RE", "words", "ngrams", "rouge_l", "shared_ngrams", "check", "TOKENISATION",
    "tokenize", "build_index", "scores", "rank_of", "chars_in_spans", "is_relevant", "gold_chunk", "SCOPES",
    "diagnostic", "summarize", "chunk_structure", "outline", "summary_table",
]
