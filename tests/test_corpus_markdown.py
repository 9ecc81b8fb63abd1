"""corpus.kind markdown: the CommonMark parser on tricky inputs, exact offsets (a property test), drop counts,
questions.jsonl, the bundled example, the generated-query path, and real Markdown written by others (the README
files of the installed packages)."""

import importlib.metadata
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from chunkstudy import config, llm, queries, stages
from chunkstudy.corpus import build, folder, mdtext, sources
from chunkstudy.corpus.model import heading_paths, verify_sections

ROOT = Path(__file__).resolve().parents[1]


def parse(src: str, doc_id: str = "d"):
    doc, paras, secs, report = mdtext.parse(src, doc_id, f"{doc_id}.md")
    assert verify_sections(secs, paras, len(doc["text"])) == []
    for s, e in zip(paras["start"], paras["end"]):  # offsets are the paragraph table's, never searched for
        assert doc["text"][s:e] == doc["text"][s:e].strip() != ""
    return doc, paras, secs, report


def outline(secs) -> list[tuple[int, str, int, int]]:
    return [(int(r.level), r.title, int(r.first_para), int(r.last_para)) for r in secs.itertuples()]


def paragraphs(doc, paras) -> list[str]:
    return [doc["text"][s:e] for s, e in zip(paras["start"], paras["end"])]


# ------------------------------------------------------------------------------------ parser, tricky CommonMark

def test_setext_and_atx_headings_form_one_tree_and_a_thematic_break_is_no_heading():
    doc, paras, secs, r = parse("Guide\n=====\n\nLead.\n\nInstall\n-------\nSteps.\n\n### Linux\n\nApt.\n\n"
                                "Para.\n\n---\n\nAfter the rule.\n\nUse\n---\n\nText.\n")
    # the lone first h1 (setext) is the title heading; '---' after a blank line is a thematic break, after a
    # paragraph line it underlines a setext heading
    assert doc["title"] == "Guide" and r.title_source == "first level-1 heading" and r.title_heading
    assert outline(secs) == [(1, "", 0, 0), (1, "Install", 1, 1), (2, "Linux", 2, 4), (1, "Use", 5, 5)]
    assert paragraphs(doc, paras) == ["Lead.", "Steps.", "Apt.", "Para.", "After the rule.", "Text."]


def test_headings_inside_lists_and_block_quotes_are_text_not_sections():
    doc, paras, secs, r = parse("## Top\n\n- # not a section\n- item\n\n> ## quoted heading\n> quoted text\n\n"
                                "## Next\n\nBody.\n")
    assert [t for _, t, _, _ in outline(secs)] == ["Top", "Next"]
    assert paragraphs(doc, paras) == ["not a section\nitem", "quoted heading", "quoted text", "Body."]
    assert r.dropped["heading_in_container"] == 2


def test_code_blocks_with_hash_lines_are_dropped_not_parsed_as_headings():
    src = ("## Setup\n\n```sh\n# install\npip install x\n```\n\n    # indented code\n    more code\n\n"
           "~~~\n## still code\n~~~\n\nAfter.\n")
    doc, paras, secs, r = parse(src)
    assert outline(secs) == [(1, "Setup", 0, 0)] and doc["text"] == "After."
    assert r.dropped["code_block"] == 3


def test_html_blocks_are_dropped_and_inline_html_keeps_its_text():
    doc, paras, secs, r = parse("<div align=\"center\">\n<img src=\"x.png\">\n</div>\n\n<!-- a comment -->\n\n"
                                "Press <kbd>Ctrl</kbd>+<kbd>C</kbd> to stop.\n")
    assert doc["text"] == "Press Ctrl+C to stop."
    assert r.dropped["html_block"] == 2 and r.dropped["html_inline"] == 4


def test_inline_markup_becomes_plain_text_and_images_tables_go():
    src = ("Some *emphasis*, **strong**, ~~gone~~, [a link](https://x.invalid \"t\"), <https://auto.invalid>, "
           "`code <b>` and \\# escaped &amp; decoded.  \nHard break.\n\n"
           "[![badge](https://b.invalid/b.svg)](https://ci.invalid) ![logo](logo.png)\n\n"
           "| a | b |\n|---|---|\n| 1 | 2 |\n\nEnd with ![inline image](i.png) inside.\n")
    doc, paras, secs, r = parse(src)
    assert paragraphs(doc, paras) == [
        "Some emphasis, strong, gone, a link, https://auto.invalid, code <b> and # escaped & decoded. Hard break.",
        "End with inside."]
    assert (r.dropped["image"], r.dropped["table"]) == (3, 1)


def test_front_matter_gives_the_title_and_bad_front_matter_is_a_problem_not_a_crash():
    doc, _, secs, r = parse("---\ntitle: From the front matter\ntags: [a, b]\n---\n\n# Heading One\n\nText.\n")
    assert doc["title"] == "From the front matter" and r.title_source == "metadata"
    assert r.title_heading and outline(secs) == [(1, "", 0, 0)]  # the lone first h1 is still the title heading
    assert r.dropped["front_matter"] == 1 and "title" not in doc["text"]
    doc, _, _, r = parse("---\ntitle: [unclosed\n---\n\n# Fallback\n\nText.\n")
    assert doc["title"] == "Fallback" and "not valid YAML" in r.problems[0]
    doc, _, _, r = parse("No heading here.\n", "my-notes_v2")
    assert doc["title"] == "my notes v2" and r.title_source == "file name"


def test_several_h1_or_an_h1_after_other_headings_stay_sections():
    _, _, secs, r = parse("# One\n\nA.\n\n# Two\n\nB.\n")
    assert not r.title_heading and outline(secs) == [(1, "One", 0, 0), (1, "Two", 1, 1)]
    doc, _, secs, r = parse("## Intro\n\nA.\n\n# Late\n\nB.\n")
    assert doc["title"] == "Late" and not r.title_heading
    assert outline(secs) == [(1, "Intro", 0, 0), (1, "Late", 1, 1)]


def test_empty_sections_and_a_heading_directly_followed_by_a_sub_heading():
    doc, paras, secs, _ = parse("# T\n\n## A\n### A1\n\nx.\n\n## B\n\n## C\n")
    assert outline(secs) == [(1, "A", 0, -1), (2, "A1", 0, 0), (1, "B", 1, 0), (1, "C", 1, 0)]
    s = secs.set_index("title")
    assert s.at["A", "start"] == s.at["A", "end"] == 0 and s.at["C", "start"] == s.at["C", "end"] == len(doc["text"])
    assert heading_paths(secs)[s.at["A1", "section_id"]] == ["A", "A1"]


def test_levels_deeper_than_four_and_level_jumps_are_normalised():
    src = "# T\n\n## a\n\n#### b (jump)\n\n##### c\n\n###### d\n\n###### e\n\n### f\n\n## g\n\nx.\n"
    _, _, secs, _ = parse(src)
    assert [(lv, t) for lv, t, _, _ in outline(secs)] == [
        (1, "a"), (2, "b (jump)"), (3, "c"), (4, "d"), (4, "e"), (2, "f"), (1, "g")]
    by = secs.set_index("title")
    assert by.at["e", "parent_id"] == by.at["c", "section_id"]  # a clamped heading is a level-4 sibling


def test_lists_are_one_paragraph_one_item_per_line():
    doc, paras, _, _ = parse("1. First *step*.\n2. Second step,\n   continued.\n\n   Its second paragraph.\n"
                             "   - nested a\n   - nested b\n3. Third.\n\nAfter.\n")
    assert paragraphs(doc, paras) == ["First step.\nSecond step, continued. Its second paragraph.\nnested a\n"
                                      "nested b\nThird.", "After."]


def test_a_document_of_only_code_has_no_paragraphs():
    doc, paras, secs, _ = mdtext.parse("# Only code\n\n```\nx = 1\n```\n", "d", "d.md")
    assert len(paras) == 0 and doc["text"] == ""


_WORD = st.sampled_from(["alpha", "beta", "gamma", "delta", "x1", "naïve", "über", "42"])
_INLINE = st.one_of(_WORD, _WORD.map(lambda w: f"*{w}*"), _WORD.map(lambda w: f"`{w}`"),
                    _WORD.map(lambda w: f"[{w}](https://e.invalid/{w})"), _WORD.map(lambda w: f"![{w}](i.png)"),
                    st.just("<b>bold</b>"), st.just("a&amp;b"))
_LINE = st.lists(_INLINE, min_size=1, max_size=6).map(" ".join)
_BLOCK = st.one_of(
    st.tuples(st.integers(1, 6), _LINE).map(lambda t: "#" * t[0] + " " + t[1]),
    st.tuples(st.sampled_from("=-"), _LINE).map(lambda t: f"{t[1]}\n{t[0] * 3}"),
    _LINE, st.lists(_LINE, min_size=1, max_size=3).map(lambda ls: "\n".join("- " + x for x in ls)),
    _LINE.map(lambda x: "> " + x), st.just("```\n# code\n```"), st.just("    # indented"),
    st.just("| a | b |\n|---|---|\n| 1 | 2 |"), st.just("<div>\nblock\n</div>"), st.just("---"))


@given(st.lists(_BLOCK, min_size=1, max_size=14))
def test_any_markdown_gives_exact_offsets_a_verified_outline_and_no_markup(blocks):
    src = "\n\n".join(blocks) + "\n"
    doc, paras, secs, _ = mdtext.parse(src, "d", "d.md")
    text = doc["text"]
    assert verify_sections(secs, paras, len(text)) == []
    got = [text[s:e] for s, e in zip(paras["start"], paras["end"])]
    assert "\n\n".join(got) == text and all(p == p.strip() != "" for p in got)
    assert not re.search(r"^#{1,6}\s|```|\|---|!\[|<div>|<b>|\]\(", text, re.M)
    assert all(1 <= lv <= 4 for lv in secs["level"])


# ------------------------------------------------------------------------------------ the kind through build

def _params(tmp_path, folder: Path, **corpus) -> config.Config:
    p = tmp_path / "params" / "t.yaml"
    p.parent.mkdir(exist_ok=True)
    lines = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in corpus.items())
    p.write_text(f"corpus:\n  kind: markdown\n  mirror: {folder}\n{lines}")
    return config.load(p, root=tmp_path)


def _folder(tmp_path) -> Path:
    f = tmp_path / "md"
    (f / "guide").mkdir(parents=True)
    (f / "a.md").write_text("# Alpha\n\nAlpha lead paragraph.\n\n## Part\n\nAlpha body paragraph.\n\n"
                            "```\ncode\n```\n\n| t | u |\n|---|---|\n| 1 | 2 |\n")
    (f / "guide" / "b.markdown").write_text("---\ntitle: Beta\n---\nBeta lead.\n\n## One\n\nBeta one.\n\n"
                                            "![pic](p.png)\n\n## Two\n\nBeta two is a longer paragraph.\n")
    (f / "empty.md").write_text("```\nonly code\n```\n")
    (f / ".hidden").mkdir()
    (f / ".hidden" / "x.md").write_text("# Never read\n\nHidden.\n")
    (f / "notes.txt").write_text("not markdown\n")
    qs = [{"id": "q1", "doc": "a.md", "qtype": "extractive", "question": "Alpha?",
           "evidence": ["Alpha body paragraph."]},
          {"doc": "guide/b", "question": "Beta?", "evidence": ["Beta one.", "Beta two is a longer paragraph!"]},
          {"doc": "guide/b.markdown", "question": "Table?", "evidence": ["| 1 | 2 |"]},
          {"doc": "zzz.md", "question": "Unknown doc?", "evidence": ["x"]},
          "not an object", {"id": "q1", "doc": "a.md", "question": "Repeated id?", "evidence": ["x"]},
          {"doc": "a.md", "question": "Scalar evidence?", "evidence": "Alpha body paragraph."},
          {"id": "q0002", "doc": "a.md", "question": "Takes the id a later line gets by default", "evidence": ["x"]}]
    (f / "questions.jsonl").write_text("\n".join(json.dumps(q) for q in qs) + "\n{broken json\n\n")
    return f


def test_a_markdown_folder_builds_with_exact_spans_counts_and_named_warnings(tmp_path):
    cfg = _params(tmp_path, _folder(tmp_path))
    out = build.build_corpus(cfg)
    docs = out["documents"].set_index("doc_id")
    assert list(docs.index) == ["a", "guide/b"] and list(docs["title"]) == ["Alpha", "Beta"]
    assert docs.at["a", "text"] == "Alpha lead paragraph.\n\nAlpha body paragraph."
    assert docs.at["guide/b", "source"] == "guide/b.markdown"
    assert out["stats"]["verification_failures"] == {}
    st_ = out["stats"]
    assert (st_["files_read"], st_["documents_built"], st_["empty_documents"]) == (3, 2, 1)
    assert {k: v for k, v in st_["markup_dropped"].items() if v} == {"code_block": 2, "table": 1, "image": 1,
                                                                     "front_matter": 1}
    funnel = out["corpus_funnel"].set_index("step")["count"]
    assert funnel["dropped: code blocks (fenced and indented)"] == 2 and funnel["documents built"] == 2
    h = out["harvested"].set_index("query_id")
    text_a = docs.at["a", "text"]
    assert [text_a[s:e] for s, e in h.at["q1", "spans"]] == ["Alpha body paragraph."]
    assert h.at["q0002", "match_rules"] == ["exact", "fuzzy"] and pd.isna(h.at["q0002", "qtype"])
    assert list(h.index) == ["q1", "q0002"]  # q0003: the table is dropped, its row matches nothing
    assert st_["skipped_records"] == {"questions": 5} and st_["questions"]["questions_read"] == 9
    w = "\n".join(st_["warnings"])
    for needle in ("empty.md: no prose", "q0003 (guide/b): evidence matches no paragraph",
                   "line 5: a str, not an object", "line 6: id 'q1' repeats", "line 7: evidence is 'Alpha",
                   "line 9: not valid JSON", "line 8: id 'q0002' repeats", "names document 'zzz'"):
        assert needle in w, needle
    roles = [(f["role"], Path(f["path"]).name) for f in st_["sources"]]
    assert roles == [("markdown:file", "a.md"), ("markdown:file", "empty.md"), ("markdown:file", "b.markdown"),
                     ("questions.jsonl", "questions.jsonl")]


def test_sources_max_docs_and_files_outside_the_folder(tmp_path):
    f = _folder(tmp_path)
    out = build.build_corpus(_params(tmp_path, f, sources=["guide/b.markdown"]))
    assert list(out["documents"]["doc_id"]) == ["guide/b"]
    out = build.build_corpus(_params(tmp_path, f, max_docs=1))
    assert list(out["documents"]["doc_id"]) == ["a"]
    # a seeded sample: the first of the seeded walk order over the file names, not the first file
    ext = (".md", ".markdown")
    names = [n for n, _ in folder.document_files(_params(tmp_path, f), "markdown", ext)]
    kept = {seed: folder.document_files(_params(tmp_path, f, max_docs=1, max_docs_from="seeded", seed=seed),
                                        "markdown", ext) for seed in range(8)}
    assert all([n for n, _ in files] == sources.walk_order(names, seed)[:1] for seed, files in kept.items())
    assert len({files[0][0] for files in kept.values()}) > 1
    (tmp_path / "outside.md").write_text("# Secret\n\nSecret.\n")
    cfg = _params(tmp_path, f, sources=["../outside.md"])
    with pytest.raises(build.CorpusInputError, match="outside.md is not inside"):
        build.build_corpus(cfg)
    assert "outside.md" not in str(build.source_files(cfg))


def test_an_undecodable_file_stops_the_build_unless_allow_partial(tmp_path):
    f = _folder(tmp_path)
    (f / "latin.md").write_bytes("# Caf\u00e9\n\nD\u00e9j\u00e0 vu.\n".encode("latin-1"))
    with pytest.raises(build.CorpusInputError, match="latin.md: not valid UTF-8"):
        build.build_corpus(_params(tmp_path, f))
    out = build.build_corpus(_params(tmp_path, f, allow_partial=True))
    assert "latin" not in set(out["documents"]["doc_id"])
    assert any("latin.md: not valid UTF-8" in w for w in out["stats"]["warnings"])


def test_a_folder_without_questions_builds_for_generated_queries(tmp_path):
    f = _folder(tmp_path)
    (f / "questions.jsonl").unlink()
    out = build.build_corpus(_params(tmp_path, f))
    assert len(out["documents"]) == 2 and len(out["harvested"]) == 0
    assert out["stats"]["questions"]["file"] is None


# ------------------------------------------------------------------------------------ the bundled example

@pytest.fixture(scope="module")
def example(tmp_path_factory):
    cfg = config.load(ROOT / "params" / "markdown_example.yaml", root=tmp_path_factory.mktemp("mdx"))
    return cfg, build.build_corpus(cfg)


def test_the_bundled_markdown_example(example):
    """data/markdown_example_raw/README.txt: five documents, 43 questions, lq030 quotes a dropped table row,
    lq004 and lq022 quote with backticks (fuzzy), lq025 names a section."""
    _, out = example
    build.require_verified(out)
    st_ = out["stats"]
    assert len(out["documents"]) == 5 and st_["questions"]["questions_read"] == 43
    h = out["harvested"].set_index("query_id")
    assert len(h) == 42 and "lq030" not in h.index
    assert {q for q, r in h["match_rules"].items() if r not in (["exact"], ["exact", "exact"])} == {
        "lq004", "lq022", "lq025"}
    assert h.at["lq025", "match_rules"] == ["section"]
    assert st_["title_from"] == {"metadata": 2, "first level-1 heading": 3} and st_["title_headings"] == 3
    assert st_["depth_distribution"] == {"2": 2, "3": 2, "4": 1}
    assert all(v > 0 for k, v in st_["markup_dropped"].items() if k not in ("heading_in_container", "unparsed_lines"))
    assert st_["markup_dropped"]["unparsed_lines"] == 0
    for doc_id, text in zip(out["documents"]["doc_id"], out["documents"]["text"]):
        assert not re.search(r"^#{1,6}\s|```|\|---|!\[|<kbd>|<img|<p ", text, re.M), doc_id


def test_generated_queries_work_unchanged_on_a_markdown_corpus(example):
    """queries.source generated with any configured model: the existing path samples spans from the gold outline
    of a Markdown corpus and keeps what passes the filters (a scripted model stands in for the LLM)."""
    cfg, out = example
    docs, paras, secs = out["documents"], out["paragraphs"], out["sections_gold"]
    qp = {**cfg.data["queries"], "source": "generated", "per_doc": 2,
          "targets": {"factoid": 4, "underspecified": 4, "multihop": 4, "structural": 4}}
    n = iter(range(10 ** 6))

    def reply(req):
        i = next(n)
        return json.dumps({"query": f"Which zephyr quokka marmalade number {i} applies here?"})

    client = llm.make_client(config.record("llm", {"max_retries": 0, "seed": 1, "max_error_share": 1.0}), None,
                             backend=llm.ScriptedBackend(reply))
    got = queries.build_queries(docs, paras, secs, None, config.record("queries", qp), client=client)
    q = got["queries"]
    assert len(q) == 16 and set(q["qtype"]) == {"factoid", "underspecified", "multihop", "structural"}
    text = dict(zip(docs["doc_id"], docs["text"]))
    assert all(0 <= s < e <= len(text[d]) for d, spans in zip(q["doc_id"], q["spans"]) for s, e in spans)


# ------------------------------------------------------------------------------------ real Markdown

#: Markup that must not survive in documents.text: ATX heading lines, code fences, table delimiter rows, images,
#: HTML tags (a tag is allowed only where the CommonMark parser itself says it is literal text: inside a code span
#: or escaped, e.g. ``<filename>``). An ATX heading needs a space or a tab after its #s (CommonMark 0.31, §4.2):
#: httpcore's changelog has a line ``###\u00a0Added`` (a no-break space) that every CommonMark parser reads as
#: paragraph text, and the document text keeps it as text with the no-break space made a space. Such a line is
#: literal text of the source, not surviving markup (:func:`_literal_heading`).
_MARKUP = {"heading line": re.compile(r"^#{1,6}([ \t]|$)", re.M), "code fence": re.compile(r"^\s*(```|~~~)", re.M),
           "table row": re.compile(r"\|\s*:?-{3,}:?\s*\|"), "image": re.compile(r"!\[[^\]]*\]\([^)]*\)")}
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(\s[^<>]*)?/?>")


def _literal_heading(m: re.Match, text: str, body: str) -> bool:
    """Is the heading-like line at ``m`` in ``text`` a source line whose #s are followed by a no-break space (so
    paragraph text for CommonMark, never a heading)?"""
    line = text[m.start():text.find("\n", m.start()) if "\n" in text[m.start():] else len(text)]
    return line.replace(" ", "\u00a0", 1) in body


def _literal_texts(src: str) -> list[str]:
    """Every piece of literal text CommonMark finds in ``src`` (text and code-span content), an oracle that does
    not go through chunkstudy's parser."""
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    out = []
    for t in md.parse(src):
        out += [c.content for c in t.children or [] if c.type in ("text", "code_inline")]
    return out


def _package_readmes(min_chars: int = 400) -> dict[str, str]:
    """Markdown long descriptions of the installed packages (METADATA bodies, Description-Content-Type
    text/markdown), chunkstudy's own left out: real Markdown written by others."""
    out = {}
    for dist in importlib.metadata.distributions():
        m = dist.metadata
        name = m.get("Name") or ""
        kind = (m.get("Description-Content-Type") or "").split(";")[0].strip().lower()
        body = m.get_payload() or m.get("Description") or ""
        if kind == "text/markdown" and name.lower() != "chunkstudy" and len(body) >= min_chars:
            out.setdefault(name, body)
    return dict(sorted(out.items()))


def test_real_markdown_of_installed_packages_verifies_and_no_markup_survives():
    readmes = _package_readmes()
    if len(readmes) < 10:
        pytest.skip(f"real-Markdown test: only {len(readmes)} installed packages carry a Markdown README "
                    "(text/markdown METADATA); 10 are needed")
    failures, markup, totals = {}, {}, {"docs": 0, "sections": 0, "code_block": 0, "html_block": 0}
    for name, body in readmes.items():
        doc, paras, secs, r = mdtext.parse(body, name, name)
        if not len(paras):
            continue
        totals["docs"] += 1
        totals["sections"] += len(secs)
        totals["code_block"] += r.dropped["code_block"]
        totals["html_block"] += r.dropped["html_block"]
        v = verify_sections(secs, paras, len(doc["text"]))
        if v:
            failures[name] = v
        text = doc["text"]
        found = [k for k, pat in _MARKUP.items()
                 if any(not (k == "heading line" and _literal_heading(m, text, body)) for m in pat.finditer(text))]
        literal = _literal_texts(body)
        found += [f"tag {m.group(0)}" for m in _TAG.finditer(text) if not any(m.group(0) in x for x in literal)]
        if found:
            markup[name] = found
    print(totals)
    assert totals["docs"] >= 10 and totals["sections"] > totals["docs"]
    assert totals["code_block"] > 0 and totals["html_block"] > 0  # real READMEs do exercise the drops
    assert failures == {} and markup == {}


def test_a_folder_with_no_prose_is_an_error_naming_the_corpus(tmp_path):
    f = _folder(tmp_path)
    for p in list(f.rglob("*.md")) + list(f.rglob("*.markdown")):
        p.write_text("```\nonly code\n```\n")
    with pytest.raises(build.CorpusInputError,
                       match=r"(?s)corpus .t. \(markdown\) has no documents.*a.md: no prose"):
        build.build_corpus(_params(tmp_path, f))
    (tmp_path / "nothing").mkdir()
    with pytest.raises(build.CorpusInputError, match="has no documents"):
        build.build_corpus(_params(tmp_path, tmp_path / "nothing"))


@pytest.mark.slow
def test_notebook_01_builds_and_verifies_the_markdown_example(tmp_path, run_notebook, params_file):
    from chunkstudy import artifacts

    cfg = config.load(params_file("markdown_example"), root=tmp_path)
    run_notebook(cfg, "01_corpus")
    assert len(artifacts.read(cfg, "documents")) == 5 and len(artifacts.read(cfg, "harvested")) == 42
    stats = artifacts.read_json(cfg, "01_corpus", "stats")
    assert stats["verification_failures"] == {} and stats["kind"] == "markdown"


# ------------------------------------------------------------------------------------ issue 22: misuse probes

def test_a_symlink_out_of_the_folder_is_skipped_with_a_warning_never_read(tmp_path):
    # the probe: passwd.md -> /etc/passwd was read as a document and its lines reached report.html
    f = _folder(tmp_path)
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "s.md").write_text("# Secret\n\nThe secret paragraph.\n")
    (f / "passwd.md").symlink_to(secret / "s.md")
    (f / "linked_dir").symlink_to(secret, target_is_directory=True)
    (f / "inside.md").symlink_to(f / "a.md")  # a link that stays inside the folder is an ordinary file
    cfg = _params(tmp_path, f)
    out = build.build_corpus(cfg)
    assert "Secret" not in " ".join(out["documents"]["text"]) + " ".join(out["documents"]["title"])
    assert set(out["documents"]["doc_id"]) == {"a", "guide/b", "inside"}
    w = "\n".join(out["stats"]["warnings"])
    assert f"passwd.md: a link to {secret / 's.md'}, outside corpus.mirror {f}; skipped" in w
    # (pathlib's rglob does not descend into a linked folder; were it to, its files would be skipped the same way)
    funnel = out["corpus_funnel"].set_index("step")["count"]
    assert funnel["skipped: outside the folder (links)"] == w.count("outside corpus.mirror") >= 1
    assert not [p for _, p in build.source_files(cfg) if "secret" in str(p)]  # never fingerprinted either
    # named in corpus.sources, a link out of the folder is refused, as any path out of it is
    with pytest.raises(build.CorpusInputError, match="passwd.md is not inside|s.md is not inside"):
        build.build_corpus(_params(tmp_path, f, sources=["passwd.md"]))
    # so is a questions.jsonl that links out of the folder
    (f / "questions.jsonl").unlink()
    (f / "questions.jsonl").symlink_to(secret / "s.md")
    with pytest.raises(build.CorpusInputError, match=r"questions.jsonl: .*s.md is not inside"):
        build.build_corpus(cfg)
    assert "questions.jsonl" not in {r for r, _ in build.source_files(cfg)}


def test_deep_nesting_drops_nothing():
    # the probe: a list nested 10 levels deep, or a block quote 21 deep, silently dropped the rest of the
    # document (markdown-it's maxNesting), later sections included
    deep_list = "".join("  " * i + f"- level {i}\n" for i in range(12))
    deep_quote = "".join(">" * (i + 1) + f" quote {i}\n>" + ">" * i + "\n" for i in range(25))
    for body, last in ((deep_list, "level 11"), (deep_quote, "quote 24")):
        doc, paras, secs, r = parse(f"# T\n\nLead.\n\n## A\n\n{body}\n## After\n\nThe last paragraph.\n")
        assert [s.title for s in secs.itertuples()][-1] == "After"
        assert doc["text"].endswith("The last paragraph.") and last in doc["text"]
        assert r.problems == [] and r.dropped["unparsed_lines"] == 0
    assert "quote 24" in parse(f"# T\n\n{deep_quote}\n")[0]["text"]


def test_nesting_beyond_the_parser_is_counted_and_warned_never_silent(tmp_path):
    # far deeper than any real document (150 nested quotes): what the parser cannot take is a counted, warned
    # drop naming the file, never a silent one
    src = "# T\n\nLead.\n\n" + "".join(">" * (i + 1) + f" q{i}\n\n" for i in range(150)) + "## After\n\nEnd.\n"
    doc, paras, secs, r = mdtext.parse(src, "d", "d.md")
    assert "q98" in doc["text"] and "q99" not in doc["text"] and doc["text"].endswith("End.")
    assert r.dropped["unparsed_lines"] == 51 and list(secs["title"])[-1] == "After"
    assert r.problems == ["51 line(s) nested deeper than 100 levels of lists and block quotes were not parsed; "
                          "their text is not in the document"]
    f = tmp_path / "deep"
    f.mkdir()
    (f / "deep.md").write_text(src)
    out = build.build_corpus(_params(tmp_path, f))
    assert any(w.startswith("deep.md: 51 line(s) nested deeper than 100 levels") for w in out["stats"]["warnings"])
    funnel = out["corpus_funnel"].set_index("step")["count"]
    assert funnel["dropped: lines nested too deeply to parse (warned)"] == 51


def test_a_byte_order_mark_is_not_text(tmp_path):
    # the probe: a UTF-8 BOM was kept, so "# Title" on the first line was no heading
    f = tmp_path / "bom"
    f.mkdir()
    (f / "a.md").write_bytes(b"\xef\xbb\xbf# Title\n\nBody paragraph.\n\n## Part\n\nMore.\n")
    (f / "questions.jsonl").write_bytes(
        b"\xef\xbb\xbf" + json.dumps({"id": "q1", "doc": "a.md", "question": "Body?",
                                      "evidence": ["Body paragraph."]}).encode() + b"\n")
    out = build.build_corpus(_params(tmp_path, f))
    d = out["documents"].iloc[0]
    assert d["title"] == "Title" and d["text"] == "Body paragraph.\n\nMore." and "\ufeff" not in d["text"]
    assert list(out["harvested"]["query_id"]) == ["q1"] and out["stats"]["skipped_records"] == {"questions": 0}
    assert sources.read_text(f / "a.md").startswith("# Title")


def test_a_missing_mirror_folder_names_the_path_and_the_key(tmp_path):
    # the probe: a corpus.mirror that does not exist gave "has no documents", naming neither
    missing = tmp_path / "no_such_folder"
    with pytest.raises(build.CorpusInputError,
                       match=rf"t.yaml: corpus.mirror: the folder {re.escape(str(missing))} does not exist"):
        build.build_corpus(_params(tmp_path, missing))
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(build.CorpusInputError, match="corpus.mirror: .*a_file is not a folder"):
        build.build_corpus(_params(tmp_path, tmp_path / "a_file"))


def test_no_usable_question_fails_at_01_naming_the_corpus_and_the_file(tmp_path):
    # the probe: 01-04 ran (embeddings and all), then 05 failed with "zero-size array to reduction operation
    # maximum". 01 is the stage that can know (notebook 01 calls build.require_questions): the harvested path
    # has no question to ask.
    f = tmp_path / "md"
    f.mkdir()
    (f / "a.md").write_text("# A\n\nA paragraph about rivers.\n")
    (f / "questions.jsonl").write_text(json.dumps({"doc": "a.md", "question": "Q?", "evidence": ["not there"]})
                                       + "\n" + json.dumps({"doc": "zzz.md", "question": "Q2?", "evidence": ["x"]})
                                       + "\n")
    cfg = _params(tmp_path, f)
    out = build.build_corpus(cfg)
    with pytest.raises(build.CorpusInputError,
                       match=r"^t.yaml: corpus 't' has no usable question: 2 read from questions.jsonl, 0 usable "
                             r"\(dropped: no evidence 1, document not in corpus 1\); the warnings .*; "
                             r"queries.source is 'harvested' \(set it to 'generated'"):
        build.require_questions(cfg, out, cfg.data["queries"]["source"])
    (f / "questions.jsonl").unlink()
    with pytest.raises(build.CorpusInputError, match=r"no usable question: no questions.jsonl in corpus.mirror"):
        build.require_questions(cfg, build.build_corpus(cfg), "harvested")
    build.require_questions(cfg, out, "generated")  # generated queries: 03 writes them, nothing to check here
    assert "queries.source" in stages.stage("01_corpus").params  # so a change of source reruns 01's check
