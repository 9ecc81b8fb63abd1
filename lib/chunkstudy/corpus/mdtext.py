"""``corpus.kind: markdown``: a folder of Markdown files, parsed by markdown-it-py (CommonMark, with the GFM table
and strikethrough rules and YAML front matter), never by regular expressions.

Files, questions, titles and heading levels are those of every folder kind (:mod:`chunkstudy.corpus.folder`).
This module turns one file's token stream into blocks:

* **Headings.** ATX (``#`` .. ``######``) and setext (``===`` / ``---`` underlines) headings at the top level of
  the document form the gold tree. A heading inside a list item or a block quote is not part of the document's
  outline: its text stays in that list or quote (counted as ``heading in list/quote``).
* **Paragraphs.** Each paragraph is one paragraph; soft and hard line breaks become spaces. A paragraph inside a
  block quote is a paragraph of its own.
* **Lists.** One list (with its nested lists) is one paragraph, one item per line, markers dropped: the same rule
  as wikitext's lists, so a list of steps stays one passage. An item's own paragraphs join with spaces on its
  line; a nested list's items follow as lines of their own.
* **Inline markup** becomes its plain text: emphasis, strong, strikethrough, links (their text; an autolink its
  URL), code spans (their content), entities and backslash escapes decoded.
* **Dropped and counted** (``stats["markup_dropped"]``, one funnel row each): code blocks (fenced and indented),
  tables, images (with their alt text; a paragraph that was only images or badges disappears), HTML blocks
  (comments included) and inline HTML tags (the tag only: ``<kbd>K</kbd>`` keeps ``K``), thematic breaks are
  ignored. The YAML front matter is read for ``title:`` and dropped.
* **Nesting.** Lists and block quotes parse up to :data:`MAX_NESTING` levels (CommonMark's preset stops at 20 and
  skipped the rest of the document without a word); lines nested deeper are counted (``unparsed_lines``) and
  warned, naming the file.
"""

from __future__ import annotations


import yaml
from markdown_it import MarkdownIt
from mdit_py_plugins.front_matter import front_matter_plugin

from . import folder
from .folder import ParseReport, assemble, title_from_name

KIND = "markdown"
EXTENSIONS = (".md", ".markdown")
#: Drop counters in funnel order -> their funnel label.
DROPS = {"code_block": "code blocks (fenced and indented)", "table": "tables", "image": "images",
         "html_block": "HTML blocks", "html_inline": "inline HTML tags",
         "heading_in_container": "heading in list/quote (kept as text)", "front_matter": "front matter blocks",
         "unparsed_lines": "lines nested too deeply to parse (warned)"}

#: markdown-it's nesting limit (block quotes and lists: a list level counts twice). CommonMark's preset stops at 20,
#: and everything past it was silently skipped — a list nested 10 deep or a quote 21 deep lost the rest of the
#: document. 100 is far beyond real documents and still far from Python's recursion limit in the parser; what
#: lies deeper is counted and warned (``unparsed_lines``), never dropped silently.
MAX_NESTING = 100

_MD = MarkdownIt("commonmark", {"maxNesting": MAX_NESTING}).enable(["table", "strikethrough"]).use(
    front_matter_plugin)
_block_tokenize = _MD.block.tokenize


def _counting_tokenize(state, start_line: int, end_line: int, *args) -> None:
    """markdown-it's block tokenizer, counting the non-blank lines it is about to skip: at the nesting limit it
    jumps to the end of the container without a token (``state.env["unparsed_lines"]``)."""
    if state.level >= MAX_NESTING:
        lines = state.src.split("\n")[start_line:end_line]
        state.env["unparsed_lines"] = state.env.get("unparsed_lines", 0) + sum(1 for x in lines if x.strip())
    return _block_tokenize(state, start_line, end_line, *args)


_MD.block.tokenize = _counting_tokenize  # type: ignore[method-assign, assignment]


def inline_text(token, report: ParseReport) -> str:
    """The plain text of one ``inline`` token: text, code spans and link text kept; images and inline HTML tags
    dropped (counted); line breaks become spaces; whitespace collapsed."""
    out = []
    for c in token.children or []:
        if c.type in ("text", "code_inline"):
            out.append(c.content)
        elif c.type in ("softbreak", "hardbreak"):
            out.append(" ")
        elif c.type == "image":
            report.dropped["image"] += 1
        elif c.type == "html_inline":
            report.dropped["html_inline"] += 1
    return " ".join("".join(out).split())


def _close(tokens, i: int) -> int:
    """Index of the token that closes the block opened at ``tokens[i]``."""
    depth = 0
    for j in range(i, len(tokens)):
        depth += tokens[j].nesting
        if depth == 0:
            return j
    return len(tokens) - 1


def _list_lines(tokens, report: ParseReport) -> list[str]:
    """One line per list item (nested items included, in order): the item's own text joined with spaces."""
    lines: list[list[str]] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.type == "list_item_open":
            lines.append([])
        elif t.type == "inline" and lines:
            lines[-1].append(inline_text(t, report))
        elif t.type == "heading_open":
            report.dropped["heading_in_container"] += 1
        elif t.type in ("fence", "code_block", "html_block"):
            report.dropped["code_block" if t.type != "html_block" else "html_block"] += 1
        elif t.type == "table_open":
            report.dropped["table"] += 1
            i = _close(tokens, i)
        i += 1
    return [" ".join(x for x in parts if x) for parts in lines]


def blocks(tokens, report: ParseReport) -> list[tuple]:
    """The document's blocks in order (:func:`chunkstudy.corpus.folder.assemble`) from markdown-it tokens."""
    out: list[tuple] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.type == "heading_open":
            text = inline_text(tokens[i + 1], report)
            if t.level == 0:
                out.append(("heading", int(t.tag[1:]), text))
            else:  # inside a block quote: text of the quote
                report.dropped["heading_in_container"] += 1
                out.append(("para", text))
            i = _close(tokens, i)
        elif t.type == "paragraph_open":
            out.append(("para", inline_text(tokens[i + 1], report)))
            i = _close(tokens, i)
        elif t.type in ("bullet_list_open", "ordered_list_open"):
            j = _close(tokens, i)
            out.append(("para", "\n".join(x for x in _list_lines(tokens[i + 1:j], report) if x)))
            i = j
        elif t.type in ("fence", "code_block"):
            report.dropped["code_block"] += 1
        elif t.type == "html_block":
            report.dropped["html_block"] += 1
        elif t.type == "table_open":
            report.dropped["table"] += 1
            i = _close(tokens, i)
        elif t.type == "front_matter":
            report.dropped["front_matter"] += 1
        # blockquote_open/close, hr: the quote's blocks follow as blocks of their own
        i += 1
    return out


def front_matter_title(tokens, report: ParseReport) -> str | None:
    """``title:`` of the YAML front matter, or None (no front matter, no title, or front matter that is not a
    YAML mapping: then a problem is noted)."""
    for t in tokens[:1]:
        if t.type != "front_matter":
            return None
        try:
            meta = yaml.safe_load(t.content)
        except yaml.YAMLError as e:
            report.problems.append(f"front matter is not valid YAML ({str(e).splitlines()[0]}); title not read")
            return None
        if meta is None:
            return None
        if not isinstance(meta, dict):
            report.problems.append(f"front matter is a {type(meta).__name__}, not a mapping; title not read")
            return None
        title = meta.get("title")
        if title is None:
            return None
        if not isinstance(title, (str, int, float)):
            report.problems.append(f"front matter title is a {type(title).__name__}, not text; not used")
            return None
        return " ".join(str(title).split()) or None
    return None


def parse(text: str, doc_id: str, source: str = "") -> tuple[dict, "object", "object", ParseReport]:
    """One Markdown file as ``(document row, paragraphs, sections, report)`` (module docstring).

    >>> doc, paras, secs, r = parse("# Guide\\n\\nIntro *here*.\\n\\n## Install\\n\\n```sh\\n# pip\\n```\\n"
    ...                             "Run `pip install x`.\\n", "guide")
    >>> doc["title"], doc["text"], list(secs["title"]), r.dropped["code_block"]
    ('Guide', 'Intro here.\\n\\nRun pip install x.', ['', 'Install'], 1)
    """
    report = ParseReport()
    env: dict = {}
    tokens = _MD.parse(text, env)
    if env.get("unparsed_lines"):
        report.dropped["unparsed_lines"] += env["unparsed_lines"]
        report.problems.append(f"{env['unparsed_lines']} line(s) nested deeper than {MAX_NESTING} levels of lists "
                               "and block quotes were not parsed; their text is not in the document")
    meta = front_matter_title(tokens, report)
    doc, paras, secs = assemble(doc_id, blocks(tokens, report), meta, title_from_name(source or doc_id), report,
                                source=source)
    return doc, paras, secs, report


#: The kind's loader (:mod:`chunkstudy.corpus.build`'s registry): the folder kinds' files and questions, this parser.
LOADER = folder.loader(KIND, EXTENSIONS, parse, DROPS)
