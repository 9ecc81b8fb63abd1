"""The HTML report of stage 08: ``figures/<corpus>/report.html``, one self-contained file (docs/running.md, "The
HTML report").

It renders the **same** report as ``report.md`` (:func:`chunkstudy.report.report.render`: the same sections,
tables, warnings and notes, in the same order) and adds what only HTML can:

* every figure embedded as a base64 PNG (``data:image/png;base64,...``), so the file opens anywhere, offline;
* every table sortable by a click on its header (a few lines of inline vanilla JavaScript, no server, no CDN);
* one collapsible ``<details>`` drill-down per pre-registered contrast (:mod:`chunkstudy.report.drilldown`) under
  the report's drill-down section: each picked query's question, gold evidence, its top chunks under both conditions
  side by side, and the chunks' texts with the gold characters highlighted;
* under the specification curves (:mod:`chunkstudy.report.curve`), one collapsible table of every specification
  per contrast, each row with an id of its own: a link to ``#multiverse-c2-42`` opens specification 42 of C2;
* the model warnings first, as in the Markdown, styled as a warning box;
* a table of contents.

The Markdown is turned into HTML by markdown-it-py (CommonMark plus pipe tables, raw HTML disabled so that no
text of the run can inject markup); the page is a Jinja2 template shipped in the package
(``chunkstudy/report/templates/report.html.j2``) with autoescaping on. Everything here is pure: strings and figures in,
a string out; :func:`chunkstudy.report.report.write_all` writes it through :mod:`chunkstudy.artifacts`.
"""

from __future__ import annotations

import base64
import io
import re
from typing import Any, Mapping, Sequence

import jinja2
from markdown_it import MarkdownIt

from . import curve, drilldown
from .bundle import Bundle

TEMPLATE = "report.html.j2"


def figure_png(fig: Any, dpi: int) -> bytes:
    """A matplotlib figure as PNG bytes at ``dpi``."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def data_uri(png: bytes) -> str:
    """``data:image/png;base64,...`` for PNG bytes (what makes the page self-contained)."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def local_href(href: str | None) -> bool:
    """True for a link to a file beside the report or an anchor in it (``tables/table1.tex``, ``#notes``): no
    scheme (``http:``, ``javascript:``, ``data:``), no host (``//``), no absolute path."""
    h = (href or "").strip()
    return bool(h) and not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", h) and not h.startswith(("/", "\\"))


def _offline_only(images: Mapping[str, str]):
    """A markdown-it core rule that keeps the page self-contained whatever Markdown reaches it: an image whose
    ``src`` is not one of the report's own figures (``images``) becomes its alt text, and a link that does not
    point beside the report (:func:`local_href`) becomes its text. Tables and text from the corpus are escaped
    before they reach the Markdown (:func:`chunkstudy.report.tables.md_escape`); this is the second line of defence."""
    def rule(state) -> None:
        for block in state.tokens:
            if block.type != "inline" or not block.children:
                continue
            kept, dropped_links = [], []
            for t in block.children:
                if t.type == "image" and t.attrGet("src") not in images:
                    text = type(t)("text", "", 0)
                    text.content = "".join(c.content for c in (t.children or [])) or t.content
                    kept.append(text)
                elif t.type == "link_open" and not local_href(t.attrGet("href")):
                    dropped_links.append(True)
                elif t.type == "link_open":
                    dropped_links.append(False)
                    kept.append(t)
                elif t.type == "link_close":
                    if not (dropped_links and dropped_links.pop()):
                        kept.append(t)
                else:
                    kept.append(t)
            block.children = kept
    return rule


def _markdown(images: Mapping[str, str] | None = None) -> MarkdownIt:
    """The one Markdown renderer of the page: CommonMark with pipe tables, raw HTML escaped (not passed through),
    offline only (:func:`_offline_only`)."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    md.core.ruler.push("offline_only", _offline_only(dict(images or {})))
    return md


def markdown_to_html(text: str, images: Mapping[str, str] | None = None) -> str:
    """CommonMark (with pipe tables; raw HTML is escaped, not passed through) to HTML. Every table gets
    ``class="sortable"``; an image whose ``src`` is a key of ``images`` gets that value as its ``src`` (a data
    URI); any other image becomes its alt text and a link that leaves the page's folder its text
    (:func:`_offline_only`), so the page never fetches anything."""
    images = dict(images or {})
    md = _markdown(images)

    def table_open(self, tokens, idx, options, env):
        tokens[idx].attrSet("class", "sortable")
        return self.renderToken(tokens, idx, options, env)

    def image(self, tokens, idx, options, env):
        src = tokens[idx].attrGet("src")
        if src in images:
            tokens[idx].attrSet("src", images[src])
        return self.image(tokens, idx, options, env)

    md.add_render_rule("table_open", table_open)
    md.add_render_rule("image", image)
    return md.render(text)


_H2 = re.compile(r"^## (.+)$", re.MULTILINE)


def split_sections(markdown: str) -> tuple[str, str, list[tuple[str, str]]]:
    """Split a report at its level-2 headings: ``(title, preamble, [(heading, body), ...])``; ``title`` is the
    level-1 heading's text (empty when there is none), ``preamble`` what lies between it and the first ``## ``."""
    heads = list(_H2.finditer(markdown))
    head = markdown[: heads[0].start()] if heads else markdown
    m = re.match(r"\s*# (.+)\n", head)
    title, preamble = (m.group(1).strip(), head[m.end():]) if m else ("", head)
    sections = [(h.group(1).strip(), markdown[h.end(): heads[i + 1].start() if i + 1 < len(heads) else len(markdown)])
                for i, h in enumerate(heads)]
    return title, preamble, sections


def slug(text: str) -> str:
    """An HTML id for a heading: lower case, runs of other characters as one hyphen."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def _inline(text: str) -> str:
    """Inline Markdown (code spans, emphasis) of a heading, as HTML without the paragraph."""
    return _markdown().renderInline(text)


def _table_view(t) -> dict[str, Any]:
    columns = [str(c) for c in t.display.columns]
    return {"name": t.name, "title": t.title, "columns": columns, "rows": t.display.astype(str).to_numpy().tolist(),
            "notes": list(t.notes), "wide": [i for i, c in enumerate(columns) if c.endswith("prefix")]}


def _chunk_texts(q: drilldown.QueryDrill) -> list[dict[str, Any]]:
    rows = q.table.data.sort_values(["side", "rank"], kind="stable")
    return [{"condition": r.condition, "rank": int(r.rank), "chunk_id": r.chunk_id, "prefix": str(r.prefix).strip(),
             "segments": drilldown.highlight_segments(r.content, r.gold_ranges)} for r in rows.itertuples()]


def drill_views(drills: Sequence[drilldown.ContrastDrill]) -> list[dict[str, Any]]:
    """The template's view of the drill-downs: per contrast its title, notes, counts and queries (title,
    question, gold texts, side-by-side table, chunk texts as (text, is_gold) segments)."""
    out = []
    for c in drills:
        queries = [{"direction": q.direction, "title": q.title, "question": q.question, "gold": list(q.gold_text),
                    "table": _table_view(q.table), "chunks": _chunk_texts(q)} for q in c.queries]
        out.append({"contrast": c.contrast, "id": "drill-" + slug(c.contrast), "title": c.title,
                    "notes": list(c.notes), "queries": queries,
                    "n_gain": sum(q.direction == "gain" for q in c.queries),
                    "n_loss": sum(q.direction == "loss" for q in c.queries)})
    return out


def curve_views(specs: Sequence[Any]) -> list[dict[str, Any]]:
    """The template's view of each contrast's table of every specification (:func:`chunkstudy.report.curve.report_parts`):
    its id (:func:`chunkstudy.report.curve.anchor`), title, table and, per row, the row's own id (``<id>-<spec>``), so
    a link to any specification opens it."""
    out = []
    for t in specs:
        view = _table_view(t)
        anchor = curve.anchor(t.name.removeprefix("multiverse_"))
        view["row_ids"] = [f"{anchor}-{int(s)}" for s in t.data["spec"]]
        out.append({"id": anchor, "title": t.title, "table": view})
    return out


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("chunkstudy.report", "templates"), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def render(b: Bundle, markdown: str, dpi: int) -> str:
    """The self-contained HTML page of a report: ``markdown`` is :func:`chunkstudy.report.report.render` of
    bundle ``b`` (the same content), ``b.figures`` are embedded as PNG at ``dpi``, ``b.drilldown`` becomes one
    ``<details>`` per contrast under the section headed :data:`chunkstudy.report.drilldown.HEADING` (appended at the
    end when the Markdown has no such section)."""
    images = {f"{name}.png": data_uri(figure_png(fig, dpi)) for name, fig in b.figures.items()}
    title, preamble, sections = split_sections(markdown)
    views = [{"id": slug(h), "heading": _inline(h), "body": markdown_to_html(body, images),
              "warning": "Warnings" in h, "drilldown": h == drilldown.HEADING, "curves": h == curve.HEADING}
             for h, body in sections]
    drills = drill_views(getattr(b, "drilldown", []) or [])
    if drills and not any(v["drilldown"] for v in views):
        views.append({"id": slug(drilldown.HEADING), "heading": drilldown.HEADING, "body": "", "warning": False,
                      "drilldown": True, "curves": False})
    return _environment().get_template(TEMPLATE).render(
        title=title.replace("`", "") or f"chunkstudy report: {b.corpus}", title_html=_inline(title or b.corpus),
        corpus=b.corpus,
        preamble=markdown_to_html(preamble, images), sections=views, drills=drills,
        curves=curve_views(getattr(b, "curves", []) or []))
