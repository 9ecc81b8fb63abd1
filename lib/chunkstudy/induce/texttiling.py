"""The named non-LLM baseline (``method: texttiling``): Hearst's TextTiling over paragraphs, its boundaries
banded into levels, each section titled with the salient terms of its subtree (policies in
:mod:`chunkstudy.induce`)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..corpus import model as docmodel
from ..corpus.model import Outline
from .common import InductionError, _Doc, _Lexicon, _legal_levels, _log_row, _title


def gap_scores(vectors: np.ndarray, block: int) -> np.ndarray:
    """Cosine similarity at each gap ``g = 1..n-1`` (between paragraphs g-1 and g) of the summed vectors of the
    ``block`` paragraphs before and after it (fewer at the edges); 0 when a side has no terms."""
    n = vectors.shape[0]
    out = np.zeros(max(n - 1, 0))
    for g in range(1, n):
        a = vectors[max(0, g - block):g].sum(axis=0)
        b = vectors[g:min(n, g + block)].sum(axis=0)
        na, nb = np.linalg.norm(a), np.linalg.norm(b)
        out[g - 1] = float(a @ b / (na * nb)) if na > 0 and nb > 0 else 0.0
    return out


def depth_scores(scores: np.ndarray) -> np.ndarray:
    """Hearst's depth score of each gap: ``(left peak - s) + (right peak - s)``, where a peak is reached by
    climbing from the gap while the score does not decrease."""
    n = len(scores)
    out = np.zeros(n)
    for i in range(n):
        lp = scores[i]
        j = i - 1
        while j >= 0 and scores[j] >= lp:
            lp = scores[j]
            j -= 1
        rp = scores[i]
        j = i + 1
        while j < n and scores[j] >= rp:
            rp = scores[j]
            j += 1
        out[i] = (lp - scores[i]) + (rp - scores[i])
    return out


def texttiling_boundaries(vectors: np.ndarray, block: int, cutoff: float, levels: int) -> list[tuple[int, int]]:
    """``[(first paragraph, level), ...]`` of the sections after the lead (paragraph 0 always opens a level-1
    section). Boundaries are valleys of the gap score with depth > mean - cutoff * sd; ranked by depth (ties
    by position) into ``levels`` equal-count bands, deepest band = level 1."""
    n = vectors.shape[0]
    if n < 2:
        return []
    s = gap_scores(vectors, block)
    d = depth_scores(s)
    thr = d.mean() - cutoff * d.std()
    valley = [i for i in range(len(s)) if (i == 0 or s[i] <= s[i - 1]) and (i == len(s) - 1 or s[i] <= s[i + 1])]
    chosen = [i for i in valley if d[i] > thr and d[i] > 0]
    ranked = sorted(chosen, key=lambda i: (-d[i], i))
    levels = max(1, levels)
    band = {g: min(levels, 1 + (r * levels) // len(ranked)) for r, g in enumerate(ranked)} if ranked else {}
    return [(g + 1, band[g]) for g in sorted(chosen)]


def _subtree_end(starts: list[int], levels: list[int], i: int, n: int) -> int:
    for j in range(i + 1, len(starts)):
        if levels[j] <= levels[i]:
            return starts[j]
    return n


def titled_outline(doc_id: str, starts: list[int], levels: list[int], n: int, lex: _Lexicon,
                   k: int) -> list[Outline]:
    """Sections from starts and levels, titled by the salient terms of each subtree minus its ancestors'."""
    out: list = []
    anc: list = []  # stack of (level, set of title terms)
    for i, (s, lv) in enumerate(zip(starts, levels)):
        e = (starts[i + 1] if i + 1 < len(starts) else n) - 1
        while anc and anc[-1][0] >= lv:
            anc.pop()
        used = set().union(*(t for _, t in anc)) if anc else set()
        terms = lex.terms(doc_id, s, _subtree_end(starts, levels, i, n), k, used)
        anc.append((lv, set(terms)))
        out.append(Outline(_title(terms), lv, s, e))
    return out


def _texttiling(docs: list[_Doc], p: Any, lex: _Lexicon, embed: Callable | None):
    sections, log = [], []
    max_level = p.max_level
    levels_wanted = min(p.texttiling_levels, max_level)
    for d in docs:
        n = len(d.texts)
        if embed is not None:
            vecs = np.asarray(embed(d.texts), dtype=np.float64)
        else:
            vecs = lex.rows(d.doc_id, 0, n).toarray()
        bounds = texttiling_boundaries(vecs, p.texttiling_block, p.texttiling_depth_cutoff, levels_wanted)
        starts = [0] + [b for b, _ in bounds]
        levels = _legal_levels([1] + [lv for _, lv in bounds], max_level)
        outline = titled_outline(d.doc_id, starts, levels, n, lex, p.title_terms)
        secs = docmodel.sections_from_outline(d.doc_id, d.paras, outline, len(d.text))
        v = docmodel.verify_sections(secs, d.paras, len(d.text), max_level)
        if v:  # cannot happen by construction; a loud error beats a silently broken outline
            raise InductionError(f"texttiling: document {d.doc_id!r} produced an invalid outline: {v[:3]}")
        sections.append(secs)
        log.append(_log_row(d.doc_id, "ok", "texttiling", n_sections=len(secs)))
    return sections, log
