"""A custom chunker, the smallest kind a user brings (docs/chunker.md): paragraphs (runs of text
between blank lines) packed greedily until a chunk holds at least ``min_words`` words.

A chunker is any function ``f(text, **options)`` that returns ``(start, end)`` character spans of ``text`` (as here)
or chunk texts that occur in it verbatim. Name it in a parameter file as ``conditions.extra.<NAME>.chunker``:
``"../examples/paragraph_chunker.py:chunk"`` (a file, relative to the parameter file) or
``"mypackage.mymodule:chunk"`` (an importable module); ``options`` become its keyword arguments.
"""

from __future__ import annotations

import re


def paragraphs(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every paragraph: a maximal run of text without a blank line, whitespace trimmed."""
    out, pos = [], 0
    for sep in [*re.finditer(r"\n\s*\n", text), None]:
        s, e = pos, (sep.start() if sep else len(text))
        piece = text[s:e]
        if piece.strip():
            out.append((s + len(piece) - len(piece.lstrip()), e - (len(piece) - len(piece.rstrip()))))
        pos = sep.end() if sep else len(text)
    return out


def chunk(text: str, min_words: int = 120) -> list[tuple[int, int]]:
    """Paragraphs of ``text`` packed in order until each chunk has at least ``min_words`` words (the last chunk
    may have fewer); returns half-open character spans."""
    spans: list[tuple[int, int]] = []
    start, words = None, 0
    for s, e in paragraphs(text):
        start = s if start is None else start
        words += len(text[s:e].split())
        if words >= min_words:
            spans.append((start, e))
            start, words = None, 0
    if start is not None:
        spans.append((start, paragraphs(text)[-1][1]))
    return spans
