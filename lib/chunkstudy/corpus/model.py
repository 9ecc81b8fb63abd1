"""The document model shared by every corpus: flat text, paragraph table, section outline, and the verifier.

Conventions (docs/design.md, "Data contracts"):

* ``documents.text`` holds body paragraphs only, joined by :data:`SEP`. Headings are *not* in the text; they live
  in the section table and reach the embedder only through prefixes.
* The paragraph table records each paragraph's half-open character offsets ``[start, end)`` as it is emitted:
  ``text[start:end]`` is the paragraph, and paragraph ``i+1`` starts at ``end_i + len(SEP)``.
* A structure (gold or induced) is a flat outline in document order. Each row owns the paragraphs from its
  heading up to the next heading of any level: the inclusive paragraph range ``first_para..last_para``. A
  heading followed directly by another heading owns an empty range, written ``last_para == first_para - 1``
  with ``start == end``. Nesting comes from ``level`` (1..4) and ``parent_id``.
* Character offsets of a section are read from the paragraph table (``start`` of its first paragraph, ``end``
  of its last), never found by searching for text.
* Text before the first heading (a Wikipedia lead, a QASPER abstract) is a level-1 section of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import pandas as pd

from .. import stages

SEP = "\n\n"
MAX_LEVEL = 4
#: The outline tables' columns, as :mod:`chunkstudy.stages` declares ``sections_gold`` (and ``sections_induced``).
SECTION_COLUMNS: list[str] = stages.columns("sections_gold")


@dataclass
class Outline:
    """One section of an outline before offsets are attached: ``(title, level, first_para, last_para)``."""

    title: str
    level: int
    first_para: int
    last_para: int


@dataclass
class DocumentBuilder:
    """Builds one document's flat text, paragraph table and gold outline from a stream of blocks.

    >>> b = DocumentBuilder("d1", "Title")
    >>> b.paragraph("Lead text.")
    >>> b.heading(1, "History")
    >>> b.paragraph("Body.")
    >>> doc, paras, secs = b.build()
    >>> doc["text"]
    'Lead text.\\n\\nBody.'
    """

    doc_id: str
    title: str
    lead_title: str = ""
    max_level: int = MAX_LEVEL
    _parts: list[str] = field(default_factory=list)
    _offsets: list[tuple[int, int]] = field(default_factory=list)
    _heads: list[tuple[int, str, int]] = field(default_factory=list)  # (raw level, title, first para)
    _pos: int = 0

    def paragraph(self, text: str) -> None:
        """Emit one paragraph (stripped; empty paragraphs are skipped) and record its offsets."""
        text = text.strip()
        if not text:
            return
        if self._parts:
            self._pos += len(SEP)
        start = self._pos
        self._parts.append(text)
        self._pos += len(text)
        self._offsets.append((start, self._pos))

    def heading(self, level: int, title: str) -> None:
        self._heads.append((int(level), title.strip(), len(self._offsets)))

    @property
    def n_paragraphs(self) -> int:
        return len(self._offsets)

    def build(self, **doc_fields) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
        """Return ``(document row, paragraphs table, sections table)``; the outline is normalised to legal
        levels (a jump from level 1 to 3 becomes 1 to 2; levels deeper than ``max_level`` are clamped)."""
        text = SEP.join(self._parts)
        paras = paragraph_table(self.doc_id, self._offsets)
        outline: list[Outline] = []
        if not self._heads or self._heads[0][2] > 0:
            outline.append(Outline(self.lead_title, 1, 0, -1))
        stack: list[tuple[int, int]] = []  # (raw level, effective level)
        for raw, title, first in self._heads:
            while stack and stack[-1][0] >= raw:
                stack.pop()
            eff = min(stack[-1][1] + 1 if stack else 1, self.max_level)
            stack.append((raw, eff))
            outline.append(Outline(title, eff, first, -1))
        for i, o in enumerate(outline):
            o.last_para = (outline[i + 1].first_para if i + 1 < len(outline) else len(self._offsets)) - 1
        sections = sections_from_outline(self.doc_id, paras, outline, text_len=len(text))
        doc = {"doc_id": self.doc_id, "title": self.title, "text": text, **doc_fields}
        return doc, paras, sections


def paragraph_table(doc_id: str, offsets: Sequence[tuple[int, int]]) -> pd.DataFrame:
    return pd.DataFrame({
        "doc_id": [doc_id] * len(offsets),
        "para_idx": list(range(len(offsets))),
        "start": [s for s, _ in offsets],
        "end": [e for _, e in offsets],
    }).astype({"para_idx": "int64", "start": "int64", "end": "int64"})


def _empty_offset(paras: pd.DataFrame, first: int, text_len: int) -> int:
    if 0 <= first < len(paras):
        return int(paras["start"].iat[first])
    return int(paras["end"].iat[-1]) if len(paras) else text_len


def sections_from_outline(doc_id: str, paras: pd.DataFrame, outline: Iterable[Outline | tuple],
                          text_len: int | None = None) -> pd.DataFrame:
    """Attach ids, parents and paragraph-table offsets to an outline of ``(title, level, first, last)``.

    ``paras`` is this document's paragraph table (sorted by ``para_idx``). The parent of a row is the nearest
    preceding row with a smaller level. Offsets of empty sections sit at the start of the next paragraph.
    """
    paras = paras.sort_values("para_idx").reset_index(drop=True)
    rows: list = []
    stack: list = []  # stack of (level, section_id)
    for i, o in enumerate(outline):
        o = o if isinstance(o, Outline) else Outline(*o)
        sid = f"{doc_id}::s{i:03d}"
        while stack and stack[-1][0] >= o.level:
            stack.pop()
        parent = stack[-1][1] if stack else None
        stack.append((o.level, sid))
        if o.last_para >= o.first_para and 0 <= o.first_para and o.last_para < len(paras):
            start, end = int(paras["start"].iat[o.first_para]), int(paras["end"].iat[o.last_para])
        else:
            start = end = _empty_offset(paras, o.first_para, text_len or 0)
        rows.append([doc_id, sid, parent, int(o.level), o.title, int(o.first_para), int(o.last_para), start, end])
    return pd.DataFrame(rows, columns=SECTION_COLUMNS).astype(
        {"level": "int64", "first_para": "int64", "last_para": "int64", "start": "int64", "end": "int64"})


def verify_sections(sections: pd.DataFrame, paras: pd.DataFrame, text_len: int | None = None,
                    max_level: int = MAX_LEVEL) -> list[str]:
    """Mechanically verify one document's outline; return the violations (empty list = valid).

    Checks (paper, appendix E.2): rows tile the paragraphs in order with no gap or overlap and end at the last
    paragraph; paragraph ranges are in bounds; character offsets agree with the paragraph table; levels lie in
    ``1..max_level``, the first is 1, a level is never deeper than the previous row's level + 1, and
    ``parent_id`` names the nearest preceding shallower row.
    """
    out: list[str] = []
    paras = paras.sort_values("para_idx").reset_index(drop=True)
    n = len(paras)
    if list(paras["para_idx"]) != list(range(n)):
        out.append("paragraph table is not numbered 0..n-1")
    if n and text_len is not None and int(paras["end"].iat[-1]) != text_len:
        out.append(f"last paragraph ends at {int(paras['end'].iat[-1])}, text length is {text_len}")
    if len(sections) == 0:
        return out + ["no sections"]
    expected_first = 0
    stack: list = []
    for i, r in enumerate(sections.itertuples(index=False)):
        tag = f"section {i} ({r.title!r})"
        first, last, level = int(r.first_para), int(r.last_para), int(r.level)
        if first != expected_first:
            kind = "gap" if first > expected_first else "overlap"
            out.append(f"{tag}: {kind}: starts at paragraph {first}, expected {expected_first}")
        if first < 0 or first > n or last >= n or last < first - 1:
            out.append(f"{tag}: paragraph range {first}..{last} out of bounds for {n} paragraphs")
        elif last >= first:
            if int(r.start) != int(paras["start"].iat[first]) or int(r.end) != int(paras["end"].iat[last]):
                out.append(f"{tag}: char offsets disagree with paragraph table "
                           f"([{r.start},{r.end}) vs [{paras['start'].iat[first]},{paras['end'].iat[last]}))")
        elif int(r.start) != int(r.end):
            out.append(f"{tag}: empty section has non-empty char range [{r.start},{r.end})")
        if not 1 <= level <= max_level:
            out.append(f"{tag}: level {level} outside 1..{max_level}")
        if i == 0 and level != 1:
            out.append(f"{tag}: first section has level {level}, expected 1")
        prev_level = stack[-1][0] if stack else 0
        if level > prev_level + 1 and i > 0:
            out.append(f"{tag}: level jumps from {prev_level} to {level}")
        while stack and stack[-1][0] >= level:
            stack.pop()
        want_parent = stack[-1][1] if stack else None
        got_parent = r.parent_id if isinstance(r.parent_id, str) else None
        if got_parent != want_parent:
            out.append(f"{tag}: parent_id {got_parent!r}, expected {want_parent!r}")
        stack.append((level, r.section_id))
        expected_first = max(last + 1, expected_first)
    if expected_first != n:
        out.append(f"sections end at paragraph {expected_first - 1}, the last paragraph is {n - 1}")
    return out


def verify_corpus(documents: pd.DataFrame, paragraphs: pd.DataFrame, sections: pd.DataFrame,
                  max_level: int = MAX_LEVEL) -> dict[str, list[str]]:
    """Verify every document's outline; return ``{doc_id: violations}`` for the documents that fail."""
    by_p = dict(tuple(paragraphs.groupby("doc_id", sort=False)))
    by_s = dict(tuple(sections.groupby("doc_id", sort=False)))
    bad = {}
    for doc_id, text in zip(documents["doc_id"], documents["text"]):
        v = verify_sections(by_s.get(doc_id, sections.iloc[0:0]), by_p.get(doc_id, paragraphs.iloc[0:0]),
                            len(text), max_level)
        if v:
            bad[doc_id] = v
    return bad


def heading_paths(sections: pd.DataFrame) -> dict[str, list[str]]:
    """``section_id -> [titles from level 1 down to this section]`` for one or many documents.

    Empty titles (an untitled lead) are left out, so a lead's path is ``[]``.
    """
    by_id = {r.section_id: r for r in sections.itertuples(index=False)}
    out: dict[str, list[str]] = {}
    for sid, r in by_id.items():
        path, cur = [], r
        while cur is not None:
            if cur.title:
                path.append(cur.title)
            cur = by_id.get(cur.parent_id) if isinstance(cur.parent_id, str) else None
        out[sid] = path[::-1]
    return out


def top_level_ids(sections: pd.DataFrame) -> dict[str, str]:
    """``section_id -> section_id of its level-1 ancestor`` (itself for a level-1 row)."""
    by_id = {r.section_id: r for r in sections.itertuples(index=False)}
    out = {}
    for sid, r in by_id.items():
        cur = r
        while isinstance(cur.parent_id, str) and cur.parent_id in by_id:
            cur = by_id[cur.parent_id]
        out[sid] = cur.section_id
    return out


def depth(sections: pd.DataFrame) -> int:
    """Heading depth of one document's outline (the deepest level)."""
    return int(sections["level"].max()) if len(sections) else 0
