"""What both inducers share: the input documents (checked), the tf-idf lexicon behind TextTiling's gap scores and
every salient-term title, the legal-level rule, the log row and the error type."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AbstractSet, Any, Sequence

import numpy as np
import pandas as pd

from .. import stages
from ..errors import ChunkstudyError


LOG_COLUMNS = stages.columns("induction_log")


class InductionError(ChunkstudyError, ValueError):
    """Bad input to induction (the message names the table and the document)."""


@dataclass
class _Doc:
    doc_id: str
    title: str
    text: str
    paras: pd.DataFrame
    texts: list[str]


def _docs(documents: pd.DataFrame, paragraphs: pd.DataFrame) -> list[_Doc]:
    for col in ("doc_id", "title", "text"):
        if col not in documents.columns:
            raise InductionError(f"documents: missing column {col!r}; written by 01_corpus")
    by_p = {d: g.sort_values("para_idx").reset_index(drop=True) for d, g in paragraphs.groupby("doc_id", sort=False)}
    out = []
    for doc_id, title, text in zip(documents["doc_id"], documents["title"], documents["text"]):
        p = by_p.get(doc_id)
        if p is None or len(p) == 0:
            raise InductionError(f"paragraphs: document {doc_id!r} has no paragraphs; written by 01_corpus")
        if list(p["para_idx"]) != list(range(len(p))):
            raise InductionError(f"paragraphs: document {doc_id!r} is not numbered 0..n-1")
        if int(p["end"].iat[-1]) != len(text):
            raise InductionError(f"paragraphs: document {doc_id!r} ends at {int(p['end'].iat[-1])}, "
                                 f"its text has {len(text)} characters")
        texts = [text[s:e] for s, e in zip(p["start"], p["end"])]
        out.append(_Doc(str(doc_id), str(title), text, p, texts))
    return out


@dataclass
class _Lexicon:
    """tf-idf over every paragraph of the input (sklearn ``TfidfVectorizer``: English stop words, sublinear tf,
    tokens of 3+ letters), shared by the TextTiling gap scores and the salient-term titles."""

    matrix: Any
    vocab: np.ndarray
    row_of: dict = field(default_factory=dict)  # (doc_id, para_idx) -> row

    @classmethod
    def fit(cls, texts: Sequence[str], keys: Sequence[tuple[str, int]]) -> "_Lexicon":
        from sklearn.feature_extraction.text import TfidfVectorizer

        vec = TfidfVectorizer(stop_words="english", sublinear_tf=True, token_pattern=r"(?u)\b[^\W\d_]{3,}\b",
                              lowercase=True, dtype=np.float64)
        try:
            mat = vec.fit_transform(list(texts)).tocsr()
            vocab = np.asarray(vec.get_feature_names_out())
        except ValueError:  # no usable term anywhere
            from scipy import sparse

            mat, vocab = sparse.csr_matrix((len(texts), 0)), np.asarray([], dtype=object)
        return cls(mat, vocab, {k: i for i, k in enumerate(keys)})

    def rows(self, doc_id: str, lo: int, hi: int):
        return self.matrix[[self.row_of[(doc_id, i)] for i in range(lo, hi)]]

    def terms(self, doc_id: str, lo: int, hi: int, k: int, exclude: AbstractSet[str] = frozenset()) -> list[str]:
        """The ``k`` highest summed tf-idf terms of paragraphs ``lo..hi-1`` (ties by term), minus ``exclude``."""
        if hi <= lo or k <= 0 or self.matrix.shape[1] == 0:
            return []
        w = np.asarray(self.rows(doc_id, lo, hi).sum(axis=0)).ravel()
        idx = np.flatnonzero(w > 0)
        top = idx[np.argsort(-w[idx], kind="stable")][: k + len(exclude) + 8]  # vocab is sorted: ties by term
        return [str(self.vocab[j]) for j in top if self.vocab[j] not in exclude][:k]


def _title(terms: list[str]) -> str:
    return ", ".join(terms).capitalize() if terms else ""


def _fit_lexicon(docs: list[_Doc]) -> _Lexicon:
    return _Lexicon.fit([t for d in docs for t in d.texts], [(d.doc_id, i) for d in docs for i in range(len(d.texts))])


def _legal_levels(levels: Sequence[int | None], max_level: int) -> list[int]:
    """Levels made legal: the first is 1, each lies in ``1..max_level`` and is at most one deeper than the
    previous; a missing level (``None``) repeats the previous one."""
    out, prev = [], 0
    for i, lv in enumerate(levels):
        lv = 1 if i == 0 else min(max(prev if lv is None else lv, 1), prev + 1, max_level)
        out.append(lv)
        prev = lv
    return out


def _log_row(doc_id: str, status: str, method: str, **kw) -> dict:
    row = {"doc_id": doc_id, "status": status, "method": method, "rounds": 0, "n_windows": 1, "n_sections": 0,
           "fixed_by": "", "n_violations": 0, "violations": "[]", "error": "", "model": "", "parsed_first": 0,
           "parsed_corrected": 0, "parsed_never": 0, "cut_calls": 0, "cut_failed": 0, "reply_budget": 0}
    row.update(kw)
    return row
