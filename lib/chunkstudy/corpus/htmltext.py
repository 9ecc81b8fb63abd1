"""``corpus.kind: html``: a folder of HTML files, parsed by selectolax's Lexbor engine (an HTML5 parser: the tree
is the one a browser builds, implied end tags and all), never by regular expressions.

Files, questions, titles and heading levels are those of every folder kind (:mod:`chunkstudy.corpus.folder`);
the document's own title is ``<title>`` (else the first ``h1``). This module turns one page's ``<body>`` into
blocks:

* **Headings.** ``h1`` .. ``h6`` form the gold tree, wherever they sit among sections, articles and divs; a
  heading inside a list or a block quote is text of that list or quote (counted as ``heading in list/quote``).
* **Paragraphs.** Each block element (``p``, ``div``, ``blockquote``, ``figcaption``, ``address``, ``dd``/``dt``
  outside a list, ...) closes the paragraph before it and starts its own; text and inline elements (``a``,
  ``em``, ``code``, ``span``, ...) between block boundaries form one paragraph, whitespace collapsed as a browser
  collapses it (``<br>`` is a space). Entities are decoded by the parser.
* **Lists.** One list (``ul``, ``ol``, ``dl``, with nested lists) is one paragraph, one item (``li``, ``dt``,
  ``dd``) per line: the rule of the Markdown and wikitext kinds.
* **Dropped and counted** (``stats["markup_dropped"]``), each element with everything inside it: page chrome
  (``nav``, ``header``, ``footer``), code (``script``, ``style``, ``noscript``, ``template``), preformatted
  blocks (``pre``), tables, images and media (``img``, ``picture``, ``svg``, ``video``, ``audio``, ``canvas``,
  ``iframe``, ``object``, ``embed``), forms, and ``head`` (read only for ``<title>``). Comments are ignored.
"""

from __future__ import annotations


from selectolax.lexbor import LexborHTMLParser

from . import folder
from .folder import ParseReport, assemble, title_from_name

KIND = "html"
EXTENSIONS = (".html", ".htm")
#: Elements dropped with their content -> the drop counter they add to.
DROP = {"nav": "nav", "header": "header", "footer": "footer", "script": "script", "style": "style",
        "noscript": "script", "template": "script", "pre": "pre", "table": "table",
        "img": "image", "picture": "image", "svg": "image", "video": "media", "audio": "media",
        "canvas": "media", "iframe": "media", "object": "media", "embed": "media", "form": "form"}
#: Drop counters in funnel order -> their funnel label.
DROPS = {"nav": "nav", "header": "header", "footer": "footer", "script": "script/noscript/template",
         "style": "style", "pre": "pre (code blocks)", "table": "tables", "image": "images (img, picture, svg)",
         "media": "media and embeds", "form": "forms", "heading_in_container": "heading in list/quote (kept as text)"}
#: Dropped elements that sit inside running text: removing one does not end the paragraph.
INLINE_DROPS = {"img", "picture", "svg", "script", "style", "noscript", "template", "embed", "object", "canvas",
                "iframe", "video", "audio"}
HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
LISTS = {"ul", "ol", "dl", "menu"}
ITEMS = {"li", "dt", "dd"}
#: Elements that end the paragraph before them and start a new one (HTML's block-level and sectioning elements).
BLOCKS = {"p", "div", "section", "article", "main", "aside", "blockquote", "figure", "figcaption", "address",
          "details", "summary", "dd", "dt", "li", "hr", "body", "center", "hgroup", "fieldset", "legend",
          "caption", "search", "dialog"} | set(HEADINGS) | LISTS
_TEXT, _COMMENT = "-text", "-comment"


def _children(node):
    return node.iter(include_text=True)


class _Walker:
    """Collects the blocks of one ``<body>`` (module docstring)."""

    def __init__(self, report: ParseReport):
        self.report = report
        self.blocks: list[tuple] = []
        self.buf: list[str] = []

    def flush(self) -> None:
        text = " ".join("".join(self.buf).split())
        self.buf = []
        if text:
            self.blocks.append(("para", text))

    def walk(self, node, quoted: bool = False) -> None:
        """The blocks of ``node``'s children, in document order. Iterative (a stack of child iterators), so a page
        nested thousands of elements deep parses like any other: recursion crashed on ~1,000 levels."""
        stack = [(_children(node), quoted, False)]  # (children left, inside a block quote, ends a block)
        while stack:
            children, q, ends_block = stack[-1]
            c = next(children, None)
            if c is None:
                stack.pop()
                if ends_block:
                    self.flush()
                continue
            tag = c.tag
            if tag == _TEXT:
                self.buf.append(c.text_content or "")
            elif tag == _COMMENT or tag is None:
                continue
            elif tag in DROP:
                self.report.dropped[DROP[tag]] += 1
                if tag not in INLINE_DROPS:
                    self.flush()
            elif tag in HEADINGS:
                self.flush()
                text = self.text_of(c)
                if q:
                    self.report.dropped["heading_in_container"] += 1
                    self.blocks.append(("para", text))
                else:
                    self.blocks.append(("heading", HEADINGS[tag], text))
            elif tag in LISTS:
                self.flush()
                lines: list[list[str]] = []
                self.list_lines(c, lines)
                text = "\n".join(x for x in (" ".join("".join(p).split()) for p in lines) if x)
                if text:
                    self.blocks.append(("para", text))
            elif tag == "br":
                self.buf.append(" ")
            elif tag in BLOCKS:
                self.flush()
                stack.append((_children(c), q or tag == "blockquote", True))
            else:
                stack.append((_children(c), q, False))

    def text_of(self, node) -> str:
        """Plain text of an element (a heading): dropped elements left out (counted), whitespace collapsed."""
        lines: list[list[str]] = [[]]
        self.collect(node, lines, 0)
        return " ".join("".join(lines[0]).split())

    def list_lines(self, node, lines: list[list[str]]) -> None:
        """Append one line per item of the list ``node``; a nested list's items follow their parent's line."""
        self._gather(node, lines, 0, "list")

    def collect(self, node, lines: list[list[str]], idx: int) -> None:
        """Append the text inside ``node`` to line ``idx``; nested lists add lines of their own."""
        self._gather(node, lines, idx, "collect")

    def _gather(self, node, lines: list[list[str]], idx: int, mode: str) -> None:
        """:meth:`list_lines` (``mode`` "list") and :meth:`collect` ("collect") without recursion: a stack of
        ``(mode, children left, line, text appended when the element ends)``."""
        stack = [(mode, _children(node), idx, "")]
        while stack:
            kind, children, i, gap = stack[-1]
            c = next(children, None)
            if c is None:
                stack.pop()
                if gap:
                    lines[i].append(gap)
                continue
            tag = c.tag
            if kind == "list":
                if tag in ITEMS:
                    lines.append([])
                    stack.append(("collect", _children(c), len(lines) - 1, ""))
                elif tag in DROP:
                    self.report.dropped[DROP[tag]] += 1
                elif tag == _TEXT:
                    if lines:
                        lines[-1].append(c.text_content or "")
                elif tag not in (_COMMENT, None):  # a nested list, or a wrapper (a div inside a dl): look inside
                    stack.append(("list", _children(c), i, ""))
            elif tag == _TEXT:
                lines[i].append(c.text_content or "")
            elif tag in (_COMMENT, None):
                continue
            elif tag in DROP:
                self.report.dropped[DROP[tag]] += 1
            elif tag in LISTS:
                stack.append(("list", _children(c), i, ""))
            else:
                if tag in HEADINGS:
                    self.report.dropped["heading_in_container"] += 1
                g = " " if tag == "br" or tag in BLOCKS else ""
                lines[i].append(g)
                stack.append(("collect", _children(c), i, g))


def page_title(tree) -> str | None:
    """``<title>`` of the page's ``<head>`` (whitespace collapsed), or None."""
    node = tree.css_first("head > title")
    if node is None:
        return None
    return " ".join((node.text() or "").split()) or None


def parse(text: str, doc_id: str, source: str = "") -> tuple[dict, "object", "object", ParseReport]:
    """One HTML page as ``(document row, paragraphs, sections, report)`` (module docstring).

    >>> doc, paras, secs, r = parse("<title>G</title><nav>Home</nav><h1>Guide</h1><p>Intro <b>here</b>."
    ...                             "<h2>Install</h2><pre># pip</pre><p>Run it.</p>", "guide")
    >>> doc["title"], doc["text"], list(secs["title"]), dict(r.dropped)
    ('G', 'Intro here.\\n\\nRun it.', ['', 'Install'], {'nav': 1, 'pre': 1})
    """
    report = ParseReport()
    tree = LexborHTMLParser(text)
    walker = _Walker(report)
    if tree.body is not None:
        walker.walk(tree.body)
        walker.flush()
    doc, paras, secs = assemble(doc_id, walker.blocks, page_title(tree), title_from_name(source or doc_id), report,
                                source=source)
    return doc, paras, secs, report


#: The kind's loader (:mod:`chunkstudy.corpus.build`'s registry): the folder kinds' files and questions, this parser.
LOADER = folder.loader(KIND, EXTENSIONS, parse, DROPS)
