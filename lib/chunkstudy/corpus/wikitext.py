"""The one canonical wikitext normaliser (Wikipedia exports, the MediaWiki API and the demo corpus all use it).

It parses wikitext with mwparserfromhell and feeds a :class:`~chunkstudy.corpus.model.DocumentBuilder` block by
block, so paragraph offsets are exact by construction (no text search ever recovers an offset).

Policy (paper, data section):

* **Dropped:** templates (``{{...}}``, including infoboxes and citation templates), references (``<ref>``,
  ``<references/>``), files and images (``[[File:...]]``, ``[[Image:...]]``, ``[[Media:...]]``, ``<gallery>``),
  tables (``{| ... |}`` and ``<table>``), categories and interlanguage links, comments, template arguments,
  and non-prose HTML elements (``math``, ``chem``, ``score``, ``syntaxhighlight``, ``pre``, ``timeline``, ...).
* **Kept:** paragraph text, the visible text of wiki links and external links, the text inside inline HTML and
  wiki formatting (bold, italics, ``<span>``, ``<sup>``, ...), HTML entities decoded, and list items. A run of
  consecutive list items (``*``, ``#``, ``;``, ``:``) becomes one paragraph with one item per line.
* **Headings** become the section tree: ``==`` .. ``=====`` are levels 1..4; deeper headings are clamped to 4
  and a skipped level is closed up by the builder (``==`` then ``====`` gives levels 1, 2).
* **Tail sections**: a heading whose title (case-insensitive, whitespace-collapsed) is in ``drop_sections`` is
  dropped together with its sub-sections, up to the next heading of the same or a shallower level.
* **Categories** are the ``[[Category:X]]`` links written in the wikitext. A dump carries no "hidden" flag; hidden
  maintenance categories are almost always added by templates (which are not expanded here), so the written
  links are, to a close approximation, the visible ones. Names that look like maintenance categories
  (:data:`MAINTENANCE_PREFIXES`) are removed as well, and that policy is applied identically to API pages.
* A residual-markup guard removes any ``{{``, ``}}``, ``{|``, ``|}`` or ``<ref`` left by malformed markup that
  the parser kept as plain text, and counts the repairs so a caller can report them.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

import mwparserfromhell
from mwparserfromhell.nodes import (Argument, Comment, ExternalLink, Heading, HTMLEntity, Tag, Template, Text,
                                    Wikilink)

from .model import DocumentBuilder

#: Link namespaces whose links are dropped entirely (files, images, categories).
DROP_LINK_PREFIXES = ("file:", "image:", "media:", "category:")
#: HTML/extension tags whose whole content is dropped.
DROP_TAGS = {"ref", "references", "table", "gallery", "math", "chem", "ce", "score", "syntaxhighlight",
             "source", "pre", "timeline", "imagemap", "graph", "mapframe", "maplink", "templatedata",
             "hiero", "inputbox", "categorytree", "noinclude", "templatestyles", "code", "style", "script",
             "caption", "sup_ref"}
#: Tags that are list markers in wiki markup (``*``, ``#``, ``;``, ``:``).
LIST_TAGS = {"li", "dt", "dd"}
#: Category-name prefixes treated as hidden/maintenance (dumps lack the hidden flag; see module docstring).
MAINTENANCE_PREFIXES = ("articles ", "all articles", "pages ", "wikipedia ", "cs1 ", "use ", "webarchive",
                        "featured articles", "good articles", "all pages", "commons category", "short description",
                        "official website", "coordinates on wikidata", "harv and sfn")
#: Markup that must never survive normalisation (checked on every real export: tests/test_corpus_wikitext.py).
FORBIDDEN = ("{{", "}}", "<ref", "{|", "|}")

_LI = "\x00LI\x00"  # sentinel: the start of a list item line
_BR = "\x00BR\x00"  # sentinel: a hard line break inside a paragraph
_INTERWIKI = re.compile(r"^:?[a-z]{2,3}(-[a-z]+)?:", re.I)


@dataclass
class NormaliseReport:
    """What the normaliser did to one page (counts only; for stats)."""

    dropped_sections: list[str] = field(default_factory=list)
    residual_repairs: int = 0
    n_headings: int = 0


def _link_text(node: Wikilink) -> str:
    title = str(node.title).strip()
    low = title.lower().lstrip(":")
    if low.startswith(DROP_LINK_PREFIXES) and not title.startswith(":"):
        return ""
    if _INTERWIKI.match(title) and not title.startswith(":") and node.text is None:
        return ""  # interlanguage link, e.g. [[de:Foo]]
    if node.text is not None:
        return _render(node.text)
    return _render(_parse(title.lstrip(":").split("#")[0] or title.lstrip(":")))


#: Inline templates whose visible text is prose, kept as ``name -> positional parameters joined by a space``
#: (every other template is dropped). Without these, sentences lose words ("in {{ill|Quitzow}}" -> "in ").
TEXT_TEMPLATES = {"lang": (2,), "nowrap": (1,), "nobr": (1,), "ill": (1,), "interlanguage link": (1,),
                  "convert": (1, 2), "cvt": (1, 2), "small": (1,), "smaller": (1,), "big": (1,), "abbr": (1,),
                  "sic": (1,), "not a typo": (1,), "sortname": (1, 2), "transl": (2,), "nihongo": (1,),
                  "em": (1,), "strong": (1,), "vr": (1,), "math": (1,), "mvar": (1,), "frac": (1, 2)}


def _template_text(node: Template) -> str:
    name = " ".join(str(node.name).replace("_", " ").split()).casefold()
    keep = TEXT_TEMPLATES.get(name)
    if keep is None and name.startswith("lang-"):
        keep = (1,)
    if keep is None:
        return ""
    sep = "/" if name == "frac" else " "
    parts = [_render(node.get(str(i)).value).strip() for i in keep if node.has(str(i))]
    return sep.join(p for p in parts if p)


def _render(code) -> str:
    """Render a Wikicode fragment (or a list of nodes) to plain text."""
    out: list[str] = []
    for node in (code.nodes if hasattr(code, "nodes") else code):
        if isinstance(node, Text):
            out.append(str(node.value))
        elif isinstance(node, Template):
            out.append(_template_text(node))
        elif isinstance(node, (Comment, Argument)):
            continue
        elif isinstance(node, Wikilink):
            out.append(_link_text(node))
        elif isinstance(node, ExternalLink):
            if node.title is not None:
                out.append(_render(node.title))
            elif not node.brackets:
                out.append(str(node.url))  # a bare URL in running text
        elif isinstance(node, HTMLEntity):
            try:
                out.append(node.normalize())
            except (ValueError, OverflowError):
                out.append(html.unescape(str(node)))
        elif isinstance(node, Tag):
            tag = str(node.tag).strip().lower()
            if node.wiki_markup and tag in LIST_TAGS:
                out.append(_LI)
            elif tag in DROP_TAGS or (node.wiki_markup or "").startswith("{|"):
                continue
            elif tag == "br":
                out.append(_BR)
            elif tag == "hr":
                out.append("\n")
            elif node.contents is not None and not node.self_closing:
                out.append(_render(node.contents))
        elif isinstance(node, Heading):
            out.append("\n" + _render(node.title) + "\n")  # a heading nested in a tag: keep as a line
        else:  # unknown node kinds: keep their plain text
            out.append(str(node))
    return "".join(out)


_QUOTES = re.compile(r"'{2,}")  # wiki bold/italic markers (kept as text by skip_style_tags)
_WS = re.compile(r"[ \t\u00a0\u2009\u200b]+")
_SPACE_PUNCT = re.compile(r"\s+([,.;:!?)\]])")
_EMPTY_PARENS = re.compile(r"\(\s*[,;]?\s*\)")
_OPEN_PAREN_PUNCT = re.compile(r"\(\s*[,;]\s*")
_RESIDUAL = re.compile(r"<ref[^>]*/>|<ref[^>]*>.*?</ref>|<ref[^>]*>?|\{\{|\}\}|\{\||\|\}", re.I | re.S)


def _clean_line(line: str) -> str:
    line = _QUOTES.sub("", line)
    line = _WS.sub(" ", line).strip()
    line = _EMPTY_PARENS.sub("", line)
    line = _OPEN_PAREN_PUNCT.sub("(", line)
    line = _SPACE_PUNCT.sub(r"\1", line)
    return _WS.sub(" ", line).strip()


def _is_table_row(line: str) -> bool:
    s = line.lstrip()
    return s.startswith(("{|", "|}", "|-", "|+")) or (s.startswith(("|", "!")) and not s.startswith("||"))


def split_paragraphs(text: str, report: NormaliseReport | None = None) -> list[str]:
    """Split rendered text into paragraphs: blank lines separate paragraphs; soft line breaks inside a paragraph
    become spaces; a run of list-item lines becomes one paragraph with one item per line."""
    paras: list[str] = []
    cur: list[str] = []
    cur_list = False

    def flush():
        nonlocal cur, cur_list
        joined = ("\n" if cur_list else " ").join(x for x in cur if x)
        joined = joined.replace(_BR, "\n" if cur_list else " ")
        joined = "\n".join(_clean_line(x) for x in joined.split("\n"))
        joined = "\n".join(x for x in joined.split("\n") if x)
        if joined.strip():
            paras.append(joined.strip())
        cur, cur_list = [], False

    for raw in text.split("\n"):
        is_item = raw.lstrip().startswith(_LI)
        line = raw.replace(_LI, " ").strip()
        if _RESIDUAL.search(line) or _is_table_row(line):
            if report is not None:
                report.residual_repairs += 1
            if _is_table_row(line):
                continue
            line = _RESIDUAL.sub(" ", line).strip()
        if not line.replace(_BR, "").strip():
            if not is_item:
                flush()
            continue
        if is_item != cur_list and cur:
            flush()
        cur_list = is_item
        cur.append(line)
    flush()
    return paras


def _norm_title(t: str) -> str:
    return " ".join(t.split()).casefold()


_COMMENT = re.compile(r"<!--.*?(?:-->|$)", re.S)
_HEADING_LINE = re.compile(r"^(={1,6})(.+?)(={1,6})[ \t]*$", re.M)


def split_headings(wikitext: str) -> list[tuple[int, str, str]]:
    """Split wikitext into ``[(raw_level, heading_title_markup, body_markup)]`` on heading lines.

    The first item is the lead with ``raw_level == 0``. Headings are found line by line (as MediaWiki does),
    after comments are removed, rather than from the parse tree: one unbalanced ``''`` or ``<small>`` makes
    mwparserfromhell nest the rest of a page inside a tag and hide its headings (seen on Angela Merkel, 2021).
    Unequal ``=`` runs give the smaller level, the surplus ``=`` staying in the title (MediaWiki's rule).
    """
    text = _COMMENT.sub("", wikitext or "")
    out, pos, level, title = [], 0, 0, ""
    for m in _HEADING_LINE.finditer(text):
        left, inner, right = m.group(1), m.group(2), m.group(3)
        n = min(len(left), len(right))
        inner = left[n:] + inner + right[:len(right) - n]
        if not inner.strip():
            continue
        out.append((level, title, text[pos:m.start()]))
        level, title, pos = n, inner, m.end()
    out.append((level, title, text[pos:]))
    return out


def _parse(markup: str):
    # skip_style_tags: '' and ''' stay text (removed by _clean_line): parsing them as tags nests whole
    # paragraphs inside one unbalanced italic run.
    return mwparserfromhell.parse(markup, skip_style_tags=True)


def normalise(wikitext: str, builder: DocumentBuilder, drop_sections=(), report: NormaliseReport | None = None
              ) -> NormaliseReport:
    """Normalise one page's wikitext into ``builder`` (paragraphs and headings, in document order).

    Heading levels: ``==`` (2 equals) is level 1, so the builder receives ``raw_level - 1`` clamped to 1..4.
    A page-level ``=Title=`` heading (rare in articles) is treated as level 1 as well.
    """
    report = report or NormaliseReport()
    drop = {_norm_title(s) for s in drop_sections}
    skipping_at: int | None = None  # raw level of the dropped tail section being skipped
    for raw, title_markup, body in split_headings(wikitext):
        if raw > 0:
            if skipping_at is not None and raw > skipping_at:
                continue
            skipping_at = None
            title = _clean_line(_render(_parse(title_markup)).replace(_BR, " ").replace(_LI, " "))
            title = _RESIDUAL.sub("", title).strip()
            if _norm_title(title) in drop:
                skipping_at = raw
                report.dropped_sections.append(title)
                continue
            builder.heading(min(max(raw - 1, 1), 4), title)
            report.n_headings += 1
        for p in split_paragraphs(_render(_parse(body)), report):
            builder.paragraph(p)
    return report


def categories(wikitext: str, drop_maintenance: bool = True) -> list[str]:
    """The ``[[Category:X]]`` links of a page (names without the prefix, sort keys removed, in order, unique).

    Maintenance-looking names (:data:`MAINTENANCE_PREFIXES`) are removed when ``drop_maintenance`` (module
    docstring: dumps carry no hidden flag)."""
    out: list[str] = []
    for link in _parse(_COMMENT.sub("", wikitext or "")).ifilter_wikilinks(recursive=True):
        title = str(link.title).strip()
        if title.lower().startswith("category:"):
            name = " ".join(title.split(":", 1)[1].split()).replace("_", " ").strip()
            if name and name not in out:
                out.append(name)
    if drop_maintenance:
        out = [c for c in out if not is_maintenance_category(c)]
    return out


def is_maintenance_category(name: str) -> bool:
    return name.casefold().startswith(MAINTENANCE_PREFIXES)


def is_redirect(wikitext: str) -> bool:
    return (wikitext or "").lstrip()[:9].upper() == "#REDIRECT"


def forbidden_markup(text: str) -> list[str]:
    """Which :data:`FORBIDDEN` sequences occur in ``text`` (empty list = clean)."""
    low = text.lower()
    return [f for f in FORBIDDEN if f in low]
