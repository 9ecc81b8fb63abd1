"""The chunk stage (04_chunk_embed, paper 3.2 and appendix E): every condition's chunks, boundaries plus prefixes.

Offsets are half-open character indices ``[start, end)`` into ``documents.text`` and describe content only: a
prefix never shifts or enters them. Every chunk set tiles each document exactly.

Layout:

* :mod:`.chunking` — the boundaries: the content-token counter (:func:`load_counter`), sentence bounds, structural
  chunks of an outline, size-matched fixed windows (A0), the tiling check;
* :mod:`.chunk_sets` — the paper's chunk sets (:func:`build_all`, the function 04 runs): each condition's
  boundaries and prefix (heading paths, A1 contexts, the placebo), size matching and the summary;
* :mod:`.chunkers` — your own chunker (chonkie, semchunk, langchain-text-splitters, ``module:function``) and the
  exact placement of its chunks on the text;
* :mod:`.extra_conditions` — the conditions a user adds (``conditions.extra``): a chunker, a prefix kind and an
  optional size-matched twin.

Every public name is re-exported here (``chunkstudy.chunks.build_all`` and the like). The stage's name in the
paper is "condition" (:data:`chunkstudy.design.CONDITIONS` declares them); the module that builds them is
:mod:`.chunk_sets`.
"""

from __future__ import annotations

from .chunking import (
    TokenCounter, STRUCTURAL_COLUMNS, WINDOW_COLUMNS, ChunkingError, load_counter, sentence_bounds, content,
    structural_chunks, structural_for, fixed_windows, doc_means, a0_windows, verify_tiling,
)
from .chunk_sets import (
    PATH_SEP, ALL_CONDITIONS, CHUNK_COLUMNS, INDUCED, GOLD, render_prefix, embedded_texts, text_rows, prefix_depth,
    PLACEBO_METHODS, PLACEBO_COLUMNS, derangement_repair, placebo_assign, placebo_prefixes, placebo_donors,
    min_residual, placebo_buckets, build_all, chunks_side_by_side,
)
from .chunkers import (
    EmbedFn, Counter, CHONKIE_CHUNKERS, LIBRARIES, CHONKIE_OFFLINE_TOKENIZERS, UNALIGNED, ChunkerError,
    ChunkerWarning, Piece, Placement, pieces, place, check_alignment, load, known_chunkers, is_library, source_file,
    version, SPAN_COLUMNS, chunk_documents,
)
from .extra_conditions import (
    ExtraConditionError, ExtraCondition, declared, section_of, build, embed_functions, build_for_run,
)

__all__ = [
    "TokenCounter", "STRUCTURAL_COLUMNS", "WINDOW_COLUMNS", "ChunkingError", "load_counter", "sentence_bounds",
    "content", "structural_chunks", "structural_for", "fixed_windows", "doc_means", "a0_windows", "verify_tiling", "PATH_SEP",
    "ALL_CONDITIONS", "CHUNK_COLUMNS", "INDUCED", "GOLD", "render_prefix", "embedded_texts", "text_rows",
    "prefix_depth", "PLACEBO_METHODS", "PLACEBO_COLUMNS", "derangement_repair", "placebo_assign", "placebo_prefixes",
    "placebo_donors", "min_residual", "placebo_buckets", "build_all", "chunks_side_by_side", "EmbedFn", "Counter",
    "CHONKIE_CHUNKERS", "LIBRARIES", "CHONKIE_OFFLINE_TOKENIZERS", "UNALIGNED", "ChunkerError", "ChunkerWarning",
    "Piece", "Placement", "pieces", "place", "check_alignment", "load", "known_chunkers", "is_library",
    "source_file", "version", "SPAN_COLUMNS", "chunk_documents", "ExtraConditionError", "ExtraCondition",
    "declared", "section_of", "build", "embed_functions", "build_for_run",
]
