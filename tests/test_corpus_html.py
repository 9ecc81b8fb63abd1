"""corpus.kind html: the HTML5 parser's blocks (page chrome, code and tables dropped and counted; headings, lists,
quotes), exact offsets (a property test), and a folder of pages with questions through build_corpus."""

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunkstudy import config
from chunkstudy.corpus import build, htmltext
from chunkstudy.corpus.model import verify_sections

FIX = Path(__file__).parent / "fixtures" / "corpus" / "html_site"


def parse(src: str, doc_id: str = "d"):
    doc, paras, secs, report = htmltext.parse(src, doc_id, f"{doc_id}.html")
    assert verify_sections(secs, paras, len(doc["text"])) == []
    return doc, [doc["text"][s:e] for s, e in zip(paras["start"], paras["end"])], secs, report


def outline(secs):
    return [(int(r.level), r.title, int(r.first_para), int(r.last_para)) for r in secs.itertuples()]


def test_page_chrome_scripts_styles_code_and_tables_are_dropped_and_counted():
    doc, paras, secs, r = parse(
        "<html><head><title>T</title><style>p{}</style></head><body><header><h1>Site</h1></header>"
        "<nav><a href=/>Home</a></nav><script>var s = '<p>x</p>';</script><p>Body text.</p>"
        "<pre># code\nmore</pre><table><tr><td>cell</td></tr></table><footer>(c) us</footer></body></html>")
    assert paras == ["Body text."] and outline(secs) == [(1, "", 0, 0)]
    assert dict(r.dropped) == {"header": 1, "nav": 1, "script": 1, "pre": 1, "table": 1, "footer": 1}


def test_title_from_the_title_element_else_the_first_h1_and_the_lone_h1_is_the_title_heading():
    doc, _, secs, r = parse("<title> A  &amp; B </title><h1>Page</h1><p>x</p><h2>Part</h2><p>y</p>")
    assert doc["title"] == "A & B" and r.title_heading and outline(secs) == [(1, "", 0, 0), (1, "Part", 1, 1)]
    doc, _, secs, r = parse("<h1>One</h1><p>x</p><h1>Two</h1><p>y</p>")
    assert doc["title"] == "One" and not r.title_heading and [t for _, t, _, _ in outline(secs)] == ["One", "Two"]
    doc, _, _, r = parse("<p>No headings.</p>", "my_page")
    assert doc["title"] == "my page" and r.title_source == "file name"


def test_implied_end_tags_inline_markup_entities_and_line_breaks():
    _, paras, _, _ = parse("<p>One <em>two</em> <a href=x>three</a><br>four &amp; <code>&lt;five&gt;</code>"
                           "<p>Second <img src=i.png alt=pic> paragraph<div>block <span>in</span> div</div>tail")
    assert paras == ["One two three four & <five>", "Second paragraph", "block in div", "tail"]


def test_lists_are_one_paragraph_and_headings_in_lists_or_quotes_are_text():
    _, paras, secs, r = parse("<h2>S</h2><ul><li>a <b>b</b><ol><li>n1</li><li>n2</li></ol></li>"
                              "<li><h3>head</h3> in item</li></ul><blockquote><p>q</p><h2>qh</h2></blockquote>"
                              "<dl><dt>Term</dt><dd>Def</dd></dl>")
    assert paras == ["a b\nn1\nn2\nhead in item", "q", "qh", "Term\nDef"]
    assert [t for _, t, _, _ in outline(secs)] == ["S"] and r.dropped["heading_in_container"] == 2


def test_levels_are_normalised_and_empty_sections_kept():
    _, _, secs, _ = parse("<h2>a</h2><h4>b</h4><p>x</p><h5>c</h5><h6>d</h6><p>y</p><h2>e</h2>")
    assert outline(secs) == [(1, "a", 0, -1), (2, "b", 0, 0), (3, "c", 1, 0), (4, "d", 1, 1), (1, "e", 2, 1)]


_TEXT = st.sampled_from(["alpha", "beta &amp; gamma", "d\u00e9j\u00e0", "x<br>y", "<b>bold</b>", "<a href=u>link</a>",
                         "<img src=i>", "<code>&lt;tag&gt;</code>"])
_RUN = st.lists(_TEXT, min_size=1, max_size=4).map(" ".join)
_EL = st.one_of(_RUN.map(lambda t: f"<p>{t}</p>"), _RUN.map(lambda t: f"<p>{t}"),
                st.tuples(st.integers(1, 6), _RUN).map(lambda x: f"<h{x[0]}>{x[1]}</h{x[0]}>"),
                st.lists(_RUN, min_size=1, max_size=3).map(lambda ls: "<ul>" + "".join(f"<li>{x}" for x in ls)
                                                          + "</ul>"),
                _RUN.map(lambda t: f"<div>{t}<div>{t}</div></div>"), _RUN.map(lambda t: f"<blockquote>{t}</blockquote>"),
                st.just("<nav><p>menu</p></nav>"), st.just("<pre>code</pre>"), st.just("<table><tr><td>t</td></tr></table>"),
                st.just("<script>var x='<p>';</script>"), _RUN)


@given(st.lists(_EL, min_size=1, max_size=12))
def test_any_page_gives_exact_offsets_a_verified_outline_and_no_dropped_text(els):
    doc, paras, secs, _ = htmltext.parse("<body>" + "".join(els) + "</body>", "d", "d.html")
    text = doc["text"]
    assert verify_sections(secs, paras, len(text)) == []
    got = [text[s:e] for s, e in zip(paras["start"], paras["end"])]
    assert "\n\n".join(got) == text and all(p == p.strip() != "" for p in got)
    assert not re.search(r"menu|code|var x|<b>|<p>|<br>|&amp;", text.replace("<tag>", ""))


def test_a_folder_of_pages_builds_with_questions(tmp_path):
    p = tmp_path / "params" / "h.yaml"
    p.parent.mkdir()
    p.write_text(f"corpus:\n  kind: html\n  mirror: {FIX}\n")
    cfg = config.load(p, root=tmp_path)
    out = build.build_corpus(cfg)
    build.require_verified(out)
    docs = out["documents"].set_index("doc_id")
    assert list(docs.index) == ["field/knots", "tides"]  # empty.html has no prose: skipped, warned
    assert docs.at["tides", "title"] == "Tide tables for small harbours \u2014 Harbour Notes"
    assert "Harbour Notes" not in docs.at["tides", "text"] and "newsletter" not in docs.at["tides", "text"]
    assert "Enable scripts" not in docs.at["field/knots", "text"]
    st_ = out["stats"]
    assert st_["markup_dropped"]["nav"] == 2 and st_["markup_dropped"]["table"] == 2
    assert st_["markup_dropped"]["script"] == 1 and st_["markup_dropped"]["form"] == 1
    assert any("empty.html: no prose" in w for w in st_["warnings"])
    h = out["harvested"].set_index("query_id")
    assert list(h.index) == ["h1", "h2", "h3"] and h.at["h3", "match_rules"] == ["fuzzy"]
    text = docs.at["tides", "text"]
    assert text[slice(*h.at["h2", "spans"][0])].startswith("Find the standard port's high water time.\n")
    assert [r for r, _ in build.source_files(cfg)] == ["html:file"] * 3 + ["questions.jsonl"]


# ------------------------------------------------------------------------------------ issue 22: misuse probes

def test_deeply_nested_html_parses_without_recursion():
    # the probe: HTML nested ~1,000 deep crashed 01 with RecursionError naming no file
    depth = 3000
    src = ("<h1>T</h1><p>Lead.</p><h2>Deep</h2>" + "<div><section>" * depth + "<p>Deep text.</p>"
           + "<ul><li>" * 200 + "deep item" + "</li></ul>" * 200 + "<blockquote>" * 500 + "<h3>quoted</h3>q"
           + "</blockquote>" * 500 + "</section></div>" * depth + "<h2>After</h2><p>The end.</p>")
    doc, paras, secs, r = parse(src)
    assert paras[:2] == ["Lead.", "Deep text."] and paras[-1] == "The end."
    assert "deep item" in paras[2] and "quoted" in " ".join(paras) and outline(secs)[-1][1] == "After"


def test_a_byte_order_mark_is_not_text_in_html(tmp_path):
    f = tmp_path / "site"
    f.mkdir()
    (f / "a.html").write_bytes(b"\xef\xbb\xbf<h1>Title</h1><p>Body paragraph.</p><h2>Part</h2><p>More.</p>")
    p = tmp_path / "params" / "h.yaml"
    p.parent.mkdir()
    p.write_text(f"corpus:\n  kind: html\n  mirror: {f}\n")
    out = build.build_corpus(config.load(p, root=tmp_path))
    d = out["documents"].iloc[0]
    assert d["title"] == "Title" and d["text"] == "Body paragraph.\n\nMore."


def test_a_parser_that_overflows_names_the_file(tmp_path, monkeypatch):
    # whatever a parser cannot take (here: a RecursionError), stage 01 names the file instead of crashing bare
    f = tmp_path / "site"
    f.mkdir()
    (f / "a.html").write_text("<h1>T</h1><p>Body.</p>")
    p = tmp_path / "params" / "h.yaml"
    p.parent.mkdir()
    p.write_text(f"corpus:\n  kind: html\n  mirror: {f}\n")

    def boom(*a, **k):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(htmltext._Walker, "walk", boom)
    with pytest.raises(build.CorpusInputError, match=r"a.html: nested too deeply to parse \(RecursionError"):
        build.build_corpus(config.load(p, root=tmp_path))
