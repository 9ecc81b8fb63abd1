"""Structure induction (paper, Section 3.3 "Induced structure"): an outline for each document, headings unseen.

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

* **Whole documents.** A document is induced in ONE call whenever its numbered prompt plus the reply fit the
  model's context: ``llm.context_tokens`` minus ``llm.max_reply_tokens`` (the reply's allowance: about 60 sections of
  JSON at 2,048) minus a 512-token allowance for the instructions, tokens estimated as characters / 4 (the
  served model's tokenizer is not available to the client). The paper's model sees "the document's paragraphs";
  with its 131k-token context every Wikipedia-FA article and QASPER paper fits.
* **Long documents.** Only a document whose prompt does not fit is cut into consecutive windows of whole
  paragraphs that fit; ``induce.window_paragraphs`` (default null: "as the context allows") additionally caps
  the paragraphs per call when set. Each window is induced as a document of its own (numbered from 0, corrected
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

Layout: :mod:`.structure` (:func:`induce_structure`, the entry point), :mod:`.outline` (the LLM arm: prompt,
windows, reply parsing, violations, repair), :mod:`.texttiling` (the baseline), :mod:`.common` (the checked
documents, the tf-idf lexicon, legal levels, the log row) and :mod:`.summary` (span identity, the counts of
``induction_stats.json``, outline views, the model note). Every public name is re-exported here
(``chunkstudy.induce.repair`` and the like); the table beside the paper's numbers is
:func:`chunkstudy.tables.induction`.
"""

from __future__ import annotations

from .common import (
    LOG_COLUMNS, InductionError,
)
from .outline import (
    OUTPUT_SCHEMA, PROMPT, CORRECTION, PROMPT_ALLOWANCE_TOKENS, CHARS_PER_TOKEN, parse_reply, type_violations,
    outline_violations, repair, is_valid_outline, windows_for, build_messages,
)
from .texttiling import (
    gap_scores, depth_scores, texttiling_boundaries, titled_outline,
)
from .structure import (
    InduceParams, induce_structure,
)
from .summary import (
    span_identity, induction_stats, outline_view, outlines_side_by_side, model_note,
)

__all__ = [
    "LOG_COLUMNS", "InductionError", "OUTPUT_SCHEMA", "PROMPT", "CORRECTION", "PROMPT_ALLOWANCE_TOKENS",
    "CHARS_PER_TOKEN", "parse_reply", "type_violations", "outline_violations", "repair", "is_valid_outline",
    "windows_for", "build_messages", "gap_scores", "depth_scores", "texttiling_boundaries", "titled_outline",
    "InduceParams", "induce_structure", "span_identity", "induction_stats", "outline_view", "outlines_side_by_side",
    "model_note",
]
