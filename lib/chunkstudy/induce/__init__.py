"""Structure induction (paper, Section 3.3 "Induced structure"): an outline for each document, headings unseen;
and the A1 situating contexts (:mod:`.contexts`).

Two inducers, one output contract (the section table of :mod:`chunkstudy.corpus.model`, plus a log):

``method: llm`` — the paper's arm.
    The model sees the document's paragraphs numbered ``[0] .. [m-1]`` with every heading stripped and returns
    JSON ``{"sections": [{"title", "level", "first_paragraph", "last_paragraph"}, ...]}`` (a JSON schema is
    sent where the backend enforces one). Hard constraints: the sections tile the paragraphs exactly, levels lie
    in 1..4, the first is 1 and a level is at most one deeper than the previous one; a heading directly
    followed by a sub-heading owns no paragraphs (``last_paragraph = first_paragraph - 1``). The reply is
    verified mechanically (:func:`model.verify_sections` plus type checks). On failure the model gets
    ``self_correct_rounds`` correction turns listing the specific violations; if the reply is still
    invalid, :func:`repair` snaps it to a legal tiling. A document with no usable reply at all falls back to a
    single level-1 section (status ``failed``, counted; see below).

``method: texttiling`` — a NAMED NON-LLM BASELINE and the offline default; never the LLM arm.
    TextTiling (Hearst 1997) over paragraphs: gap scores are cosines between tf-idf vectors (or embeddings when
    ``embed`` is given) of the ``texttiling_block`` paragraphs on each side of a gap; a gap's depth score is
    ``(left peak - s) + (right peak - s)``; boundaries are valleys whose depth exceeds
    ``mean - texttiling_depth_cutoff * sd`` of all depth scores (Hearst's liberal cutoff at 0.5). Boundaries
    are ranked by depth and split into ``texttiling_levels`` equal-count bands: the deepest band opens level-1
    sections, the next level 2, and so on (then made legal: a level is at most one deeper than the previous).
    Each section is titled with the ``title_terms`` most salient tf-idf terms of its whole subtree, leaving out
    terms its ancestors' titles already use.

Policies (stated, and recorded in the log):

* **The reply budget follows the document** (:func:`reply_budget`). An induction call over ``n`` paragraphs may
  reply ``reply_base_tokens + ceil(reply_tokens_per_section * max(1, ceil(reply_sections_per_paragraph * n)))``
  tokens (its ``max_tokens``; defaults 64, 48 and 1.0), bounded by what the prompt leaves of
  ``llm.context_tokens``. Measured (SmolLM2's tokenizer, which splits digits as Gemma's does; the gold outlines
  of the QASPER test split and the Wikipedia exports written as the reply, pretty-printed): a section entry costs
  40 tokens on average and at most 45.8 per document; gold outlines hold 0.33 sections per paragraph (median),
  1.14 at most (a 7-paragraph paper); the longest gold reply is 2,169 tokens (52 sections, a Wikipedia article:
  the fixed 2,048 of ``llm.max_reply_tokens`` used before would have cut it), and no gold reply needs more than
  75% of its budget under this rule. A reply that is cut all the same is asked again with a larger budget by the
  client (:mod:`chunkstudy.llm`, ``llm.length_retries``) or fails counted; :func:`reply_plan` (and ``python -m
  chunkstudy.plan``) lists the documents whose gold outline would not fit their budget.
* **Whole documents.** A document is induced in ONE call whenever its numbered prompt plus its reply budget fit
  the model's context: the prompt's tokens are estimated as characters / 4 (the served model's tokenizer is not
  available to the client) plus a 512-token allowance for the instructions. The paper's model sees "the
  document's paragraphs"; with its 131k-token context every Wikipedia-FA article and QASPER paper fits.
* **Long documents.** Only a document whose prompt and budget do not fit is cut into consecutive windows of
  whole paragraphs that fit, each with the budget of its own paragraphs (:func:`window_plan`);
  ``induce.window_paragraphs`` (default null: "as the context allows") additionally caps the paragraphs per call
  when set. Each window is induced as a document of its own (numbered from 0, corrected
  and repaired on its own); the windows' outlines are concatenated, so every window starts a level-1 section
  (which is why windows are a last resort: they move the A2/A3/P/A4 boundaries and routing sections of exactly
  the longest documents). The log records the window count (``n_windows``), :func:`induction_stats` the
  windowed documents; a document's status is the worst of its windows'.
* **Repair** (:func:`repair`): keep each section whose ``first_paragraph`` is an integer (ints, integral floats
  and digit strings are accepted); clamp it into ``0..m``; order sections by start (stable); the first section
  starts at 0; each section ends where the next one starts (the reported ``last_paragraph`` is ignored: gaps go
  to the preceding section, overlaps to the following one); levels are clamped to ``1..max_level``, the first is
  1 and each is at most one deeper than the previous; a missing or non-string title becomes the section's
  salient terms (a non-string scalar becomes its string). A valid outline is returned unchanged.
* **Failure.** No section with a usable start after all rounds (unparseable JSON, an empty reply, an empty
  list, a backend error) — the document gets one level-1 section titled with the document title, status
  ``failed``. The paper counts "usable" = ok + repaired.

Statuses: ``ok`` (valid on the first reply), ``repaired`` (valid only after self-correction or repair),
``failed`` (fallback).

Replies, counted per document in the log (per window, summed) and in :func:`induction_stats` (``replies``):
``parsed_first`` / ``parsed_corrected`` / ``parsed_never`` — the window's first reply had the schema's shape
(:func:`schema_bound`: a ``sections`` list whose items have the schema's types; tiling is not the schema's), a
correction turn's did, or none did; ``cut_calls`` — calls whose reply stopped at its budget at least once (the
client asked again with a larger one); ``cut_failed`` — those still cut when no larger budget was left (failed
calls); ``reply_budget`` — the largest first-round budget of the document's windows.

Layout: :mod:`.structure` (:func:`induce_structure`, the entry point), :mod:`.outline` (the LLM arm: prompt,
windows, reply parsing, violations, repair), :mod:`.texttiling` (the baseline), :mod:`.common` (the checked
documents, the tf-idf lexicon, legal levels, the log row) and :mod:`.summary` (span identity, the counts of
``induction_stats.json``, outline views, the model note); :mod:`.contexts` writes stage 02's other output, the
A1 situating contexts on A0's windows (Anthropic's Contextual Retrieval prompt, or a named extractive baseline).
Every public name is re-exported here
(``chunkstudy.induce.repair`` and the like); the table beside the paper's numbers is
:func:`chunkstudy.report.tables.induction`.
"""

from __future__ import annotations

from .common import (
    LOG_COLUMNS, InductionError,
)
from .outline import (
    OUTPUT_SCHEMA, PROMPT, CORRECTION, PROMPT_ALLOWANCE_TOKENS, CHARS_PER_TOKEN, OUTLINE_CHARS_PER_TOKEN, parse_reply,
    type_violations, schema_bound, outline_violations, repair, is_valid_outline, windows_for, build_messages,
    reply_budget, prompt_tokens, window_plan, outline_reply, reply_plan,
)
from .texttiling import (
    gap_scores, depth_scores, texttiling_boundaries, titled_outline,
)
from .structure import (
    InduceParams, induce_structure,
)
from .summary import (
    span_identity, induction_stats, outline_view, outlines_side_by_side, model_note, stage_stats,
)
from .contexts import (
    CONTEXTUAL_RETRIEVAL_PROMPT, LONG_DOCUMENT, CONTEXT_COLUMNS, DOCUMENT_VIEWS, CONTEXT_PROMPT_ALLOWANCE_TOKENS,
    CONTEXT_CHARS_PER_TOKEN, ContextsError, approx_counter, render_prompt, cap_tokens, document_view,
    document_excerpt, excerpt_pages, page_excerpt, lead_sentence, a1_contexts, a1_summary,
)

__all__ = [
    "LOG_COLUMNS", "InductionError", "OUTPUT_SCHEMA", "PROMPT", "CORRECTION", "PROMPT_ALLOWANCE_TOKENS",
    "CHARS_PER_TOKEN", "OUTLINE_CHARS_PER_TOKEN", "parse_reply", "type_violations", "schema_bound",
    "outline_violations", "repair", "is_valid_outline", "windows_for", "build_messages", "reply_budget",
    "prompt_tokens", "window_plan", "outline_reply", "reply_plan", "gap_scores", "depth_scores",
    "texttiling_boundaries", "titled_outline", "InduceParams", "induce_structure", "span_identity", "induction_stats",
    "outline_view", "outlines_side_by_side", "model_note", "stage_stats", "CONTEXTUAL_RETRIEVAL_PROMPT",
    "LONG_DOCUMENT", "CONTEXT_COLUMNS", "DOCUMENT_VIEWS", "CONTEXT_PROMPT_ALLOWANCE_TOKENS", "CONTEXT_CHARS_PER_TOKEN", "ContextsError",
    "approx_counter", "render_prompt", "cap_tokens", "document_view", "document_excerpt", "excerpt_pages",
    "page_excerpt", "lead_sentence", "a1_contexts", "a1_summary",
]
