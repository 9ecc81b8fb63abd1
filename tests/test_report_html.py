"""report.html: the same report as report.md in one self-contained page (figures embedded, sortable tables, one
collapsible drill-down per contrast, warnings first), and a real headless browser that opens it.

The browser tests drive Debian's Chromium (``/usr/bin/chromium``, or ``$CHUNKSTUDY_CHROMIUM``) with Playwright's
Python package, never a browser Playwright downloads; they skip with a message where either is missing
(``apt-get install -y chromium`` and ``pip install playwright`` enable them).
"""

from __future__ import annotations

import base64
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from chunkstudy import artifacts, codehash, config, runner
from chunkstudy.metrics import drilldown
from chunkstudy.report import drilldown as drill_view
from chunkstudy.report import html as report_html
from chunkstudy.report import report
from test_drilldown import synthetic_run
from test_report import _store

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"]


# ---------------------------------------------------------------------------------------------- a small report

HOSTILE_QUESTION = "Is A | B? ![x](http://evil.example/i.png) [see](https://evil.example) *yes*"

@pytest.fixture(scope="module")
def built(tmp_path_factory, root):
    """A report built through report.build / write_all from a synthetic store that holds a drill-down table; one
    question carries markup, to prove it is escaped."""
    tmp = tmp_path_factory.mktemp("html")
    run = synthetic_run()
    cfg = config.load(root / "params" / "demo.yaml", root=tmp, overrides={"figures": {"formats": ["png"], "dpi": 40}})
    _store(cfg, run)
    scores = run["scores"].assign(corpus=cfg.corpus)
    drill = drilldown.drilldown(run["runs"], run["chunks"], run["queries"], run["documents"], scores,
                                cfg.params("stats").contrasts, cfg.params().primary_cell, cfg.params("metrics"),
                                cfg.corpus, 2)
    drill.loc[drill["query_id"] == drill["query_id"].iat[0], "question"] = (
        "<script>window.INJECTED = 1</script> what & why?")
    # the probe: a "|" shifted the drill-down's columns; a Markdown image became <img src="http://...">
    hostile = drill["query_id"].drop_duplicates().iat[1]
    drill.loc[drill["query_id"] == hostile, "question"] = HOSTILE_QUESTION
    artifacts.write(cfg, "drilldown", drill)
    b = report.build(cfg.params(), cfg.corpus, report.gather(cfg), report.partner_contrasts(cfg))
    written = report.write_all(cfg, b, "params/demo.yaml")
    path = artifacts.figures_dir(cfg) / "report.html"
    return {"cfg": cfg, "bundle": b, "written": written, "path": path, "html": path.read_text(encoding="utf-8"),
            "drill": drill}


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in {"meta", "img", "br", "hr", "link", "input"}:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in {"p", "li"} and self.stack and self.stack[-1] != tag:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def test_html_is_written_beside_the_markdown_and_is_well_formed(built):
    assert ("report", "report.html") in {(k, n) for k, n in zip(built["written"]["kind"], built["written"]["name"])}
    parser = _Collect()
    parser.feed(built["html"])
    assert parser.errors == [] and parser.stack == []
    assert built["html"].startswith("<!DOCTYPE html>")


def test_html_is_self_contained(built):
    parser = _Collect()
    parser.feed(built["html"])
    imgs = [a for t, a in parser.tags if t == "img"]
    assert len(imgs) == len([n for n in built["bundle"].figures]) >= 6
    for a in imgs:
        assert a["src"].startswith("data:image/png;base64,")
        assert base64.b64decode(a["src"].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [a for t, a in parser.tags if t in {"script", "link", "iframe"} and ("src" in a or "href" in a)]
    # nothing is fetched or linked from outside: corpus text that holds a URL shows it as text only
    assert all(a["src"].startswith("data:") for t, a in parser.tags if "src" in a)
    assert all(report_html.local_href(a["href"]) for t, a in parser.tags if "href" in a)
    assert "http://" not in built["html"].replace("http://evil.example", "").replace("https://evil.example", "")


def test_corpus_text_cannot_shift_columns_or_inject_images(built):
    md = (artifacts.figures_dir(built["cfg"]) / "report.md").read_text()
    section = md[md.index("## Per-query drill-down"):]
    table = section[section.index("| Contrast"):].split("\n\n")[0].splitlines()
    cells = [len(re.findall(r"(?<!\\)\|", line)) - 1 for line in table]
    assert cells == [9] * len(table) and sum("Is A \\| B?" in line for line in table) >= 1
    html = built["html"]
    assert "evil.example/i.png" in html and not re.search(r'<img[^>]+evil', html) and "<a href=\"https" not in html
    # the question still reads as written, in the summary table and in its drill-down
    assert "Is A | B? ![x](http://evil.example/i.png) [see](https://evil.example) *yes*" in html


def test_html_has_the_markdown_reports_content(built):
    """Not a second report: every table title and every warning of report.md is in the page, in the same order."""
    html, b = built["html"], built["bundle"]
    md = (artifacts.figures_dir(built["cfg"]) / "report.md").read_text()
    titles = [t.title for t in b.tables.values() if t.title in md]
    positions = [html.find(report_html._inline(t).replace("&amp;", "&")) for t in titles]
    assert -1 not in positions
    md_order = sorted(titles, key=md.find)
    assert [t for _, t in sorted(zip(positions, titles))] == md_order
    assert html.count("<strong>WARNING:</strong>") == len(b.warnings) >= 4
    first_warning, first_table, first_img = (html.find("WARNING:"), html.find("<table"), html.find("<img"))
    assert 0 < first_warning < first_table and first_warning < first_img
    assert html.count('<table class="sortable"') == html.count("<table") > len(b.tables)


def test_one_collapsible_drilldown_per_contrast(built):
    html, cfg = built["html"], built["cfg"]
    contrasts = list(cfg.data["stats"]["contrasts"])
    found = re.findall(r'<details class="drilldown" id="drill-([a-z0-9-]+)">', html)
    assert found == [report_html.slug(c) for c in contrasts]
    assert html.find(f"<h2>{drill_view.HEADING}</h2>") < html.find('<details class="drilldown"')
    n_picked = built["drill"].drop_duplicates(["contrast", "direction", "pick"]).shape[0]
    assert html.count('<article class="query') == n_picked > 0
    assert html.count("<mark>") > 0     # gold characters highlighted in the chunk texts


def test_text_from_the_run_is_escaped(built):
    assert "<script>window.INJECTED" not in built["html"]
    assert "&lt;script&gt;window.INJECTED = 1&lt;/script&gt; what &amp; why?" in built["html"]


def test_markdown_to_html_tables_images_and_raw_html():
    out = report_html.markdown_to_html("| a | b |\n|--:|---|\n| 1 | <b>x</b> |\n\n![cap](f.png) ![other](g.png)\n",
                                       {"f.png": "data:image/png;base64,AAAA"})
    assert '<table class="sortable">' in out and "&lt;b&gt;x&lt;/b&gt;" in out
    # only the report's own figures are images: any other image (g.png would be fetched from beside the page)
    # becomes its alt text, so the page stays self-contained
    assert 'src="data:image/png;base64,AAAA"' in out and "g.png" not in out and "<p><img" in out
    assert out.count("<img") == 1 and "other</p>" in out


def test_markdown_to_html_never_fetches_or_links_out():
    # second line of defence behind tables.md_escape: whatever Markdown reaches the renderer, no remote image,
    # no link leaving the page's folder (autolinks included); local links to the tables stay links
    text = ("![x](http://evil.example/a.png) [click](https://evil.example) <http://evil.example/auto> "
            "[js](javascript:alert(1)) [tex](tables/table1.tex) [top](#notes) ![f](f.png)")
    out = report_html.markdown_to_html(text, {"f.png": "data:image/png;base64,AAAA"})
    assert out.count("<img") == 1 and 'src="data:image/png;base64,AAAA"' in out
    assert not re.search(r'(src|href)="(https?:|javascript:|//)', out)
    assert out.count("<a ") == 2 and 'href="tables/table1.tex"' in out and 'href="#notes"' in out
    # alt and link texts remain, as text (markdown-it itself refuses a javascript: link)
    assert out.startswith("<p>x click http://evil.example/auto [js](javascript:alert(1)) <a href")
    # headings go through the same renderer
    assert "<img" not in report_html._inline("Title ![x](http://evil.example/a.png)")


def test_split_sections():
    title, pre, sections = report_html.split_sections("# T `x`\n\nintro\n\n## One\n\na\n\n### sub\n\n## Two\nb\n")
    assert title == "T `x`" and pre.strip() == "intro"
    assert [(h, body.strip()) for h, body in sections] == [("One", "a\n\n### sub"), ("Two", "b")]


def test_template_ships_as_package_data(root):
    """The template is found through the package (a wheel must carry it: pyproject's package-data)."""
    import tomllib

    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    assert "templates/*.j2" in pyproject["tool"]["setuptools"]["package-data"]["chunkstudy.report"]
    assert report_html._environment().get_template(report_html.TEMPLATE) is not None
    assert ".j2" in Path(codehash.__file__).read_text()   # the library hash covers the template (08 reruns)


# ---------------------------------------------------------------------------------------------- in a real browser

def _chromium() -> str:
    exe = os.environ.get("CHUNKSTUDY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(exe).is_file():
        pytest.skip("browser test: no Chromium (apt-get install -y chromium, or set CHUNKSTUDY_CHROMIUM)")
    return exe


@pytest.fixture(scope="module")
def page():
    pw = pytest.importorskip("playwright.sync_api", reason="browser test: the playwright package is not installed "
                                                           "(pip install playwright; never `playwright install`)")
    exe = _chromium()
    with pw.sync_playwright() as p:
        # Playwright gives the browser a fresh, empty profile of its own (the --user-data-dir the flags call for)
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_FLAGS)
        try:
            yield browser.new_page()
        finally:
            browser.close()


def check_in_browser(page, path: Path, n_figures: int, contrasts: list[str]) -> None:
    """Open ``path``; the page renders, every image decodes, a table sorts on a header click, a drill-down
    expands."""
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.resolve().as_uri())
    assert page.locator("h1").inner_text().startswith("chunkstudy")
    assert page.locator("main section").count() >= 6
    images = page.evaluate("Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight])")
    assert len(images) == n_figures and all(c and w > 0 and h > 0 for c, w, h in images), images

    # sorting: the drill-down summary's delta column (numbers with signs), ascending then descending
    table = page.locator(f"#{report_html.slug(drill_view.HEADING)} > table.sortable").first
    header = table.locator("th").filter(has_text=re.compile("^\u03b4$")).first
    col = int(header.evaluate("th => th.cellIndex"))

    def column() -> list[float]:
        cells = table.locator("tbody tr").evaluate_all(f"rows => rows.map(r => r.cells[{col}].textContent)")
        return [float(c.replace("\u2212", "-")) for c in cells]

    before = column()
    assert len(before) >= 3 and before != sorted(before)      # the click must change something
    header.click()
    assert column() == sorted(before) and header.get_attribute("aria-sort") == "ascending"
    header.click()
    assert column() == sorted(before, reverse=True) and header.get_attribute("aria-sort") == "descending"

    # a text column sorts too (the query ids)
    qhead = table.locator("th").filter(has_text=re.compile("^Query$")).first
    qcol = int(qhead.evaluate("th => th.cellIndex"))
    qhead.click()
    ids = table.locator("tbody tr").evaluate_all(f"rows => rows.map(r => r.cells[{qcol}].textContent)")
    assert ids == sorted(ids, key=lambda s: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)])

    # drill-downs: closed, one per contrast; a click on the summary opens one and shows its side-by-side table
    drills = page.locator("details.drilldown")
    assert drills.count() == len(contrasts)
    first = drills.first
    inner = first.locator("table.sortable").first
    assert first.get_attribute("open") is None and not inner.is_visible()
    first.locator("summary").first.click()
    assert first.get_attribute("open") is not None and inner.is_visible()
    assert inner.locator("tbody tr").count() >= 1

    # the specification curves: one closed table of every specification per contrast; a link to any specification
    # opens its contrast's table and shows that row
    curves = page.locator("details.curve")
    if curves.count():
        last = curves.last
        row = last.locator("tbody tr").last
        assert last.get_attribute("open") is None and not row.is_visible()
        row_id = row.get_attribute("id")
        page.goto(path.resolve().as_uri() + "#" + row_id)
        assert last.get_attribute("open") is not None and page.locator(f"[id='{row_id}']").is_visible()
        assert curves.first.get_attribute("open") is None  # only the one linked to
    assert errors == []


def test_report_opens_in_a_headless_browser(built, page):
    assert "fig_multiverse" in built["bundle"].figures and len(built["bundle"].curves) == 4
    check_in_browser(page, built["path"], len(built["bundle"].figures), list(built["cfg"].data["stats"]["contrasts"]))


@pytest.mark.slow
def test_demo_report_opens_in_a_headless_browser(root, page):
    """The demo's own report: ./run_all.sh demo (stages already current are skipped), then the browser checks."""
    runner.run(root / "params" / "demo.yaml", root, log=print)
    cfg = config.load(root / "params" / "demo.yaml", root=root)
    path = artifacts.figures_dir(cfg) / "report.html"
    b = report.build(cfg.params(), cfg.corpus, report.gather(cfg), report.partner_contrasts(cfg))
    check_in_browser(page, path, len(b.figures), list(cfg.data["stats"]["contrasts"]))
    executed = root / "build" / "executed" / cfg.corpus
    assert sorted(p.stem for p in executed.glob("*.html")) == [s.name for s in runner.discover(root / "notebooks")]
