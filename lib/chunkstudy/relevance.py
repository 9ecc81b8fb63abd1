"""The paper's span relevance rule (§5.1; docs/design.md, "Metrics"), in one place for every stage that judges a chunk
against a gold span: the BM25 diagnostic (03), the metrics (06) and the BEIR/TREC export.

A chunk ``c`` is relevant to a gold span ``g`` when they overlap and ``|c ∩ g| >= span_frac·|g|`` or
``|c ∩ g| >= chunk_frac·|c|`` (``metrics.span_frac`` [0.5] and ``metrics.chunk_frac`` [0.8]). Offsets are half-open
character indices ``[start, end)`` into the same document's flat text (``documents.text``); a chunk's are its
*content* offsets, so a prefix never creates relevance. Thresholds are inclusive and allow :data:`EPS` characters
of slack, so that a fraction such as 0.8, which binary floating point cannot represent exactly, means what its
decimal says.

This module is a foundation: it imports nothing of the project. Every function is elementwise and pure.
"""

from __future__ import annotations

import numpy as np

#: Slack (in characters) of every inclusive threshold comparison.
EPS = 1e-9


def overlap(a_start, a_end, b_start, b_end) -> np.ndarray:
    """Characters shared by half-open intervals ``[a_start, a_end)`` and ``[b_start, b_end)`` (elementwise, >= 0)."""
    a_start, a_end, b_start, b_end = (np.asarray(x, dtype=np.int64) for x in (a_start, a_end, b_start, b_end))
    return np.maximum(np.minimum(a_end, b_end) - np.maximum(a_start, b_start), 0)


def relevant(chunk_start, chunk_end, span_start, span_end, span_frac: float, chunk_frac: float) -> np.ndarray:
    """The relevance rule, elementwise: chunk ``[chunk_start, chunk_end)`` is relevant to gold span
    ``[span_start, span_end)`` iff they overlap and ``|c ∩ g| >= span_frac·|g|`` or ``|c ∩ g| >= chunk_frac·|c|``
    (content offsets of the same document). ``span_frac`` and ``chunk_frac`` are ``metrics.span_frac`` and
    ``metrics.chunk_frac``."""
    ov = overlap(chunk_start, chunk_end, span_start, span_end)
    return rule(ov, np.asarray(span_end) - np.asarray(span_start), np.asarray(chunk_end) - np.asarray(chunk_start),
                span_frac, chunk_frac)


def rule(ov, span_len, chunk_len, span_frac, chunk_frac) -> np.ndarray:
    """The relevance rule on lengths already known: ``ov`` characters shared by a span of ``span_len`` and a chunk
    of ``chunk_len`` characters (elementwise; :func:`relevant` computes ``ov`` from offsets)."""
    ov = np.asarray(ov, dtype=np.float64)
    return (ov > 0) & ((ov >= span_frac * np.asarray(span_len) - EPS) | (ov >= chunk_frac * np.asarray(chunk_len) - EPS))
