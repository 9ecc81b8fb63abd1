"""build_corpus on the demo corpus and a tiny demo-format fixture, bad inputs through the whole build, the
01_corpus notebook, and the acceptance checks on the real data in ../shared/data."""

import bz2
import random
import re
from pathlib import Path

import pytest

from chunkstudy import artifacts, config, paper, params
from chunkstudy.corpus import build, fetch
from chunkstudy.corpus.model import verify_sections
from chunkstudy.corpus.wikitext import forbidden_markup

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "fixtures" / "corpus"
NOTEBOOK = ROOT / "notebooks" / "01_corpus.py"


def _params(tmp_path, text):
    p = tmp_path / "params" / "t.yaml"
    p.parent.mkdir(exist_ok=True)
    p.write_text(text)
    return config.load(p, root=tmp_path)


def _write_demo(folder: Path):
    folder.mkdir(parents=True)
    (folder / "documents.yaml").write_text(
        "- {doc_id: d1, title: One, file: d1.wiki, categories: [Rivers of Nowhere]}\n"
        "- {doc_id: d2, title: Two, file: d2.wiki, categories: [1900 births]}\n"
        "- {doc_id: d3, title: Gone, file: missing.wiki, categories: []}\n")
    (folder / "d1.wiki").write_text("The river is long.\n\n== Course ==\nIt flows west.<ref>x</ref>\n\n"
                                    "=== Mouth ===\nIt ends in a delta.\n\n== References ==\n{{reflist}}\n")
    (folder / "d2.wiki").write_text("'''Two''' was a person.\n\n== Life ==\nBorn in 1900.\n")
    (folder / "questions.yaml").write_text(
        "- {query_id: q1, doc_id: d1, qtype: extractive, question: 'Where does it flow?', answer: west,\n"
        "   evidence: [It flows west., It ends in a delta., It ends in a delta.,  It ends in a delta.  , ends in a delta]}\n"
        "- {query_id: q2, doc_id: d2, qtype: boolean, question: 'Born?', answer: Yes, evidence: [Born in 1900!]}\n"
        "- {query_id: q3, doc_id: d2, qtype: boolean, question: 'Caption?', answer: No,\n"
        "   evidence: ['Table 9: nothing like this']}\n"
        "- {query_id: q4, doc_id: d9, qtype: boolean, question: 'Unknown doc?', answer: No, evidence: [x]}\n")


DEMO_PARAMS = "corpus:\n  kind: demo\n  mirror: {mirror}\n  require_featured: false\n" \
              "  min_words: 1\n  min_heading_depth: 1\n  min_sections: 1\n  allow_partial: {partial}\n"


def test_demo_format_fixture_builds_with_exact_spans_and_reports_bad_inputs(tmp_path):
    _write_demo(tmp_path / "raw")
    cfg = _params(tmp_path, DEMO_PARAMS.format(mirror=tmp_path / "raw", partial="true"))
    out = build.build_corpus(cfg)
    d = out["documents"].set_index("doc_id")
    assert d.at["d1", "text"] == "The river is long.\n\nIt flows west.\n\nIt ends in a delta."
    assert d.at["d1", "topic_bucket"] == "geography_places" and d.at["d2", "topic_bucket"] == "biography"
    h = out["harvested"].set_index("query_id")
    assert h.at["q1", "spans"] == [[20, 34], [36, 55]] and h.at["q1", "match_rules"] == ["exact", "exact"]
    assert h.at["q2", "match_rules"] == ["fuzzy"]
    assert list(h.index) == ["q1", "q2"]
    # the paper's spans per question count distinct evidence strings as annotated (a repeat, or one differing
    # only in spacing, is one string; a shorter quote of the same paragraph is another), before matching merges
    # them into the matched spans the metric scores
    assert h.at["q1", "n_strings"] == 3 and h.at["q1", "n_spans"] == 2 and h.at["q2", "n_strings"] == 1
    assert out["stats"]["questions"]["mean_strings"] == pytest.approx(2.0)
    w = " | ".join(out["stats"]["warnings"])
    assert "missing.wiki" in w and "q3" in w and "q4" in w
    assert out["stats"]["verification_failures"] == {}
    build.require_verified(out)


def test_a_missing_or_undecodable_document_file_is_fatal_unless_allow_partial(tmp_path):
    _write_demo(tmp_path / "raw")
    cfg = _params(tmp_path, DEMO_PARAMS.format(mirror=tmp_path / "raw", partial="false"))
    with pytest.raises(build.CorpusInputError, match=r"d3: file .*missing.wiki not found"):
        build.build_corpus(cfg)
    (tmp_path / "raw" / "missing.wiki").write_bytes("Gone is \u00e9t\u00e9.\n".encode("latin-1"))
    with pytest.raises(build.CorpusInputError, match=r"missing.wiki: not valid UTF-8"):
        build.build_corpus(cfg)


def test_demo_files_must_stay_inside_their_mirror(tmp_path):
    _write_demo(tmp_path / "raw")
    (tmp_path / "secret.wiki").write_text("A secret outside the mirror.\n\n== Part ==\nMore secret.\n")
    docs = tmp_path / "raw" / "documents.yaml"
    docs.write_text(docs.read_text().replace("file: missing.wiki", "file: ../secret.wiki"))
    cfg = _params(tmp_path, DEMO_PARAMS.format(mirror=tmp_path / "raw", partial="true"))
    with pytest.raises(build.CorpusInputError, match=r"secret.wiki is not inside .*raw.*inside corpus.mirror"):
        build.build_corpus(cfg)
    assert "secret.wiki" not in str(build.source_files(cfg))  # never fingerprinted (read) either
    # issue 22: so are the mirror's own files when they are links out of it, and a document file that is one
    docs.write_text(docs.read_text().replace("file: ../secret.wiki", "file: link.wiki"))
    (tmp_path / "raw" / "link.wiki").symlink_to(tmp_path / "secret.wiki")
    with pytest.raises(build.CorpusInputError, match=r"secret.wiki is not inside"):
        build.build_corpus(cfg)
    (tmp_path / "raw" / "link.wiki").unlink()
    (tmp_path / "outside.yaml").write_text("- {query_id: q9, doc_id: d1, question: Q?, evidence: [x]}\n")
    (tmp_path / "raw" / "questions.yaml").unlink()
    (tmp_path / "raw" / "questions.yaml").symlink_to(tmp_path / "outside.yaml")
    with pytest.raises(build.CorpusInputError, match=r"questions.yaml: .*outside.yaml is not inside"):
        build.build_corpus(cfg)
    assert "outside.yaml" not in str(build.source_files(cfg)) and "questions.yaml" not in str(build.source_files(cfg))


def test_demo_records_of_the_wrong_shape_are_skipped_named_and_counted(tmp_path):
    """A scalar ``evidence:`` used to be matched character by character; a missing query_id became "None"."""
    _write_demo(tmp_path / "raw")
    q = tmp_path / "raw" / "questions.yaml"
    q.write_text(q.read_text()
                 + "- {query_id: q5, doc_id: d1, qtype: extractive, question: 'Scalar?', answer: x,\n"
                   "   evidence: It flows west.}\n"
                 + "- {doc_id: d1, qtype: extractive, question: 'No id?', answer: x, evidence: [It flows west.]}\n")
    d = tmp_path / "raw" / "documents.yaml"
    d.write_text(d.read_text() + "- {doc_id: d4, file: d1.wiki}\n")
    out = build.build_corpus(_params(tmp_path, DEMO_PARAMS.format(mirror=tmp_path / "raw", partial="true")))
    assert out["stats"]["skipped_records"] == {"documents": 1, "questions": 2}
    assert set(out["harvested"]["query_id"]) == {"q1", "q2"}
    w = out["stats"]["warnings"]
    assert any("question q5: evidence is a str" in x for x in w)
    assert any("question #5: query_id is missing" in x for x in w)
    assert any("document d4: title is missing" in x for x in w)
    assert build.skipped_records(out).set_index("record")["skipped"].to_dict() == {"documents": 1, "questions": 2}


def test_duplicate_keys_in_a_demo_file_are_an_error(tmp_path):
    _write_demo(tmp_path / "raw")
    q = tmp_path / "raw" / "questions.yaml"
    q.write_text("- query_id: q1\n  doc_id: d1\n  question: 'x?'\n  evidence: [It flows west.]\n"
                 "  evidence: [It ends in a delta.]\n")
    with pytest.raises(config.ConfigError, match=r"questions.yaml: line 5: duplicate key '\[0\].evidence'"):
        build.build_corpus(_params(tmp_path, DEMO_PARAMS.format(mirror=tmp_path / "raw", partial="true")))


def test_zero_documents_is_an_error(tmp_path):
    _write_demo(tmp_path / "raw")
    cfg = _params(tmp_path, DEMO_PARAMS.format(mirror=tmp_path / "raw", partial="true"))
    cfg = config.load(cfg.path, root=tmp_path, overrides={"corpus": {"min_words": 10 ** 6}})
    with pytest.raises(build.CorpusInputError, match=r"corpus 't' \(demo\) has no documents"):
        build.build_corpus(cfg)


def test_stats_fingerprint_every_source_file(tmp_path):
    import hashlib

    _write_demo(tmp_path / "raw")
    (tmp_path / "raw" / "missing.wiki").write_text("x\n")
    out = build.build_corpus(_params(tmp_path, DEMO_PARAMS.format(mirror=tmp_path / "raw", partial="false")))
    got = {(f["role"], Path(f["path"]).name): f for f in out["stats"]["sources"]}
    assert set(got) == {("demo:documents.yaml", "documents.yaml"), ("demo:questions.yaml", "questions.yaml"),
                        ("demo:file", "d1.wiki"), ("demo:file", "d2.wiki"), ("demo:file", "missing.wiki")}
    q = tmp_path / "raw" / "questions.yaml"
    f = got[("demo:questions.yaml", "questions.yaml")]
    assert f["sha256"] == hashlib.sha256(q.read_bytes()).hexdigest() and f["size"] == q.stat().st_size
    assert f["path"] == "raw/questions.yaml"  # relative to the project root (tmp_path here)


def test_bundled_demo_corpus(demo_cfg):
    out = build.build_corpus(demo_cfg)
    build.require_verified(out)
    docs = out["documents"]
    assert len(docs) == 10 and not any(forbidden_markup(t) for t in docs["text"])
    q = out["stats"]["questions"]
    h = out["harvested"]
    # data/demo_raw/README.md: 62 questions, dq061 fuzzy by design, dq062 cites a table caption (dropped)
    assert q["questions_read"] == 62 and len(h) == 61 and "dq062" not in set(h["query_id"])
    assert h.set_index("query_id").at["dq061", "match_rules"] == ["fuzzy"]
    assert sum(r.count("exact") for r in h["match_rules"]) == 89
    for row in h.itertuples():
        text = docs.set_index("doc_id").at[row.doc_id, "text"]
        assert all(0 <= s < e <= len(text) and text[s:e].strip() == text[s:e] for s, e in row.spans)


def test_wikipedia_build_truncated_bz2_is_fatal_unless_allow_partial(tmp_path):
    raw = (FIX / "tiny_export.xml").read_bytes()
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "good.xml.bz2").write_bytes(bz2.compress(raw))
    blob = bz2.compress(raw.replace(b"Alpha Fort", b"Gamma Fort").replace(b"<id>101", b"<id>201")
                        .replace(b"<id>105", b"<id>205"))
    (mirror / "bad.xml.bz2").write_bytes(blob[: len(blob) // 2])
    cfg = _params(tmp_path, f"corpus:\n  kind: wikipedia\n  mirror: {mirror}\n  sources: [good.xml.bz2, bad.xml.bz2]\n"
                            "  require_featured: false\n  min_words: 1\n  min_heading_depth: 1\n  min_sections: 1\n")
    with pytest.raises(build.CorpusInputError, match=r"mirror/bad.xml.bz2: export is truncated"):
        build.build_corpus(cfg)
    cfg = config.load(cfg.path, root=tmp_path, overrides={"corpus": {"allow_partial": True}})
    out = build.build_corpus(cfg)
    assert set(out["documents"]["title"]) >= {"Alpha Fort", "Beta Battle"}
    assert any("bad.xml.bz2" in w for w in out["stats"]["warnings"])
    assert len(out["harvested"]) == 0 and list(out["harvested"].columns)[:5] == [
        "query_id", "doc_id", "qtype", "text", "spans"]
    assert out["stats"]["revisions"]["Alpha Fort"] == "9001"


def test_fetch_downloads_once_with_a_fake_session(tmp_path):
    class Resp:
        def raise_for_status(self):
            pass

        def iter_content(self, n):
            yield b"abc"
            yield b"def"

    class Session:
        n = 0

        def get(self, url, stream=True, timeout=None):
            Session.n += 1
            return Resp()

    urls = ["https://example.org/a/qasper-test-v0.3.tgz"]
    assert fetch.download(urls, tmp_path, Session())[0].read_bytes() == b"abcdef"
    fetch.download(urls, tmp_path, Session())
    assert Session.n == 1


def test_source_paths_names_a_source_the_downloads_lack(tmp_path):
    class Resp:
        def raise_for_status(self):
            pass

        def iter_content(self, n):
            yield b"x"

    class Session:
        def get(self, url, stream=True, timeout=None):
            return Resp()

    cfg = _params(tmp_path, "corpus:\n  kind: qasper\n  mirror: null\n  sources: [a.tgz, b.tgz]\n"
                            "  fetch_urls: [https://example.org/a.tgz, https://example.org/c.tgz]\n")
    with pytest.raises(FileNotFoundError, match=r"\['b.tgz'\]"):
        build.source_paths(cfg, Session())
    cfg = _params(tmp_path, "corpus:\n  kind: qasper\n  mirror: null\n  sources: [c.tgz]\n"
                            "  fetch_urls: [https://example.org/a.tgz, https://example.org/c.tgz]\n")
    assert [p.name for p in build.source_paths(cfg, Session())] == ["c.tgz"]




@pytest.mark.slow
def test_notebook_runs_on_the_demo_corpus(tmp_path, run_notebook, params_file):
    cfg = config.load(params_file("demo"), root=tmp_path)
    run_notebook(cfg, "01_corpus")
    assert len(artifacts.read(cfg, "documents")) == 10 and len(artifacts.read(cfg, "harvested")) == 61
    assert artifacts.read_json(cfg, "01_corpus", "stats")["verification_failures"] == {}


# ------------------------------------------------------------------------------------- real data

def _corruption_caught(out, seed=0, n=200):
    rng = random.Random(seed)
    paras = dict(tuple(out["paragraphs"].groupby("doc_id")))
    secs = dict(tuple(out["sections_gold"].groupby("doc_id")))
    lens = dict(zip(out["documents"]["doc_id"], out["documents"]["text"].str.len()))
    for _ in range(n):
        d = rng.choice(sorted(lens))
        s = secs[d].reset_index(drop=True).copy()
        i = rng.randrange(len(s))
        col = rng.choice(["start", "end", "level", "first_para"])
        s.loc[i, col] = s.loc[i, col] + rng.choice([-1, 1]) * (5 if col == "level" else 1)
        nonempty = s.loc[i, "last_para"] >= s.loc[i, "first_para"] or col in ("level", "first_para")
        if nonempty:
            assert verify_sections(s, paras[d], lens[d]), (d, i, col)


@pytest.fixture(scope="module")
def qasper_local(local_cfg, tmp_path_factory):
    return build.build_corpus(local_cfg("qasper_local", tmp_path_factory.mktemp("q")))


@pytest.fixture(scope="module")
def wikipedia_local(local_cfg, tmp_path_factory):
    return build.build_corpus(local_cfg("wikipedia_local", tmp_path_factory.mktemp("w")))


@pytest.mark.slow
@pytest.mark.realdata
def test_qasper_test_split_funnel_matches_the_paper(qasper_local):
    """The test split under params/qasper.yaml's policy (union over annotators). The paper counts all three
    splits; the test split alone has ~2.4 annotations per question (train mostly one), so its multi-span shares
    run higher than the paper's 43% and are pinned as measured; the split-independent rates are checked against
    the paper (chunkstudy.paper)."""
    out = qasper_local
    st = out["stats"]
    print({k: st[k] for k in ("questions_read", "usable", "papers_with_usable_questions", "share_exact",
                              "share_fuzzy", "share_section", "share_multi_span", "mean_spans",
                              "share_multi_string", "mean_strings", "share_depth1_papers")})
    assert st["verification_failures"] == {} and len(out["documents"]) == 416
    assert (st["questions_read"], st["usable"], st["papers_with_usable_questions"]) == (1451, 1298, 407)
    assert abs(st["share_exact"] - paper.value("qasper", "corpus", "share_exact")) < 0.03
    assert abs(st["share_depth1_papers"] - paper.value("qasper", "corpus", "share_depth1_papers")) < 0.05
    # both levels, as measured on the test split (docstring of chunkstudy.corpus.qasper)
    assert st["share_multi_span"] == pytest.approx(0.573, abs=0.001) and st["mean_spans"] == pytest.approx(2.313,
                                                                                                       abs=0.001)
    assert st["share_multi_string"] == pytest.approx(0.589, abs=0.001) and st["mean_strings"] == pytest.approx(
        2.605, abs=0.001)
    # every span comes from at least one string (two strings may land on one paragraph: one span)
    h = out["harvested"]
    assert (h["n_strings"] >= h["n_spans"]).all()
    funnel = out["corpus_funnel"].set_index("step")
    assert funnel.loc["spans per question: evidence strings as annotated", "value"] == st["mean_strings"]
    assert funnel.loc["multi-span questions: matched spans (scored)", "value"] == st["share_multi_span"]
    assert st["evidence_unmatched"] == 0
    _corruption_caught(out)


@pytest.mark.slow
@pytest.mark.realdata
def test_wikipedia_exports_every_accepted_document_is_clean_and_verified(wikipedia_local):
    out = wikipedia_local
    st = out["stats"]
    print({k: st[k] for k in ("candidates", "pass_each", "accepted", "per_bucket", "mean_sections_per_doc",
                              "depth_distribution")})
    assert st["verification_failures"] == {}
    assert st["accepted"] >= 30 and sum(st["per_bucket"].values()) == st["accepted"]
    bad = {t: forbidden_markup(x) for t, x in zip(out["documents"]["title"], out["documents"]["text"])
           if forbidden_markup(x)}
    assert bad == {}
    assert (out["documents"]["n_words"] >= 3000).all()
    assert min(int(k) for k in st["depth_distribution"]) >= 3
    _corruption_caught(out)


@pytest.mark.realdata
def test_truncated_real_export_is_fatal(shared_data, tmp_path):
    """A copy of a real export cut in half: a smaller corpus and a warning before, a stop naming the file now."""
    src = shared_data / "wikipedia" / "enwiki-minidump-2021.xml.bz2"
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    blob = src.read_bytes()
    (mirror / src.name).write_bytes(blob[: len(blob) // 2])
    cfg = config.load(ROOT / "params" / "wikipedia_local.yaml", root=tmp_path,
                      overrides={"corpus": {"mirror": str(mirror), "sources": [src.name], "featured_list": None}})
    with pytest.raises(build.CorpusInputError, match=f"mirror/{src.name}: export is truncated"):
        build.build_corpus(cfg)


@pytest.mark.realdata
def test_real_table_heavy_export_normalises_cleanly(shared_data):
    from chunkstudy.corpus import wikipedia as W

    warnings = []
    pages = list(W.iter_export(shared_data / "wikipedia" / "enwiki-table-markup.xml.bz2", warnings))
    assert warnings == [] and len([p for p in pages if not p["redirect"]]) >= 3
    for p in pages:
        if p["redirect"]:
            continue
        doc, paras, secs, info = W.page_document(p, ["References", "External links", "See also"])
        assert forbidden_markup(doc["text"]) == [], p["title"]
        assert verify_sections(secs, paras, len(doc["text"])) == [], p["title"]


# ------------------------------------------------------------------------------------- corpus kinds (issue 15 §3b)

def test_every_corpus_kind_is_a_loader_with_the_same_entry_points_in_name_order():
    """The registry holds each module's ``LOADER``, the paper's corpora and the bundled kinds among them, in kind
    order; each loader's two entry points take what build_corpus passes."""
    import inspect

    assert {"demo", "wikipedia", "qasper", "markdown", "html"} <= set(build.LOADERS)
    assert build.kinds() == tuple(sorted(build.LOADERS))
    for kind, loader in build.LOADERS.items():
        assert loader.kind == kind and build.MODULES[kind].startswith("chunkstudy.corpus."), kind
        assert list(inspect.signature(loader.build).parameters) == ["cfg", "session", "warnings"], kind
        assert list(inspect.signature(loader.source_files).parameters) == ["cfg"], kind
    assert config.SCHEMA["corpus"]["kind"].choices is None  # the parameter layer cannot know the loaders


def test_two_modules_declaring_one_kind_fail_the_registry_naming_both(monkeypatch):
    demo = build.LOADERS["demo"]
    monkeypatch.setattr(build.plugins, "discover", lambda *args: [("chunkstudy.corpus.demo", demo),
                                                                  ("chunkstudy.corpus.demo2", demo)])
    with pytest.raises(ImportError, match=r"chunkstudy.corpus.demo2.LOADER and chunkstudy.corpus.demo.LOADER both "
                                          r"declare the corpus.kind 'demo'"):
        build._registry()


def test_each_loaders_parameters_are_keys_of_the_corpus_section_and_every_key_has_its_kinds():
    """A loader's ``parameters`` say which ``corpus`` keys are its own: each is a key of ``CorpusParams`` (a loader
    naming another is refused when it is made, naming it), a key whose documentation line says it is one kind's
    ("wikipedia filter: ...", "QASPER: ...") is that kind's, and every key is common or some kind's."""
    import dataclasses
    import re

    from chunkstudy.corpus.loader import COMMON_PARAMETERS, CorpusLoader

    keys = {f.name: config.SCHEMA["corpus"][f.name].doc for f in dataclasses.fields(params.CorpusParams)}
    own = {kind: set(loader.parameters) for kind, loader in build.LOADERS.items()}
    for kind, declared in own.items():
        assert declared <= set(keys) and not declared & set(COMMON_PARAMETERS), kind
    belongs = {key: m.group(1).lower() for key, doc in keys.items()
               if (m := re.match(r"([A-Za-z]+)\b[^:;,(]{0,20}:", doc)) and m.group(1).lower() in build.LOADERS}
    assert {"min_words": "wikipedia", "drop_numeric_only": "qasper", "evidence_annotators": "qasper"}.items() <= \
        belongs.items()
    assert [key for key, kind in belongs.items() if key not in own[kind]] == []
    orphans = set(keys) - set(COMMON_PARAMETERS) - set().union(*own.values())
    assert orphans == set(), f"corpus keys no loader reads: {sorted(orphans)}"
    with pytest.raises(ValueError, match=r"CorpusLoader 'x': parameters \['min_word'\] are not keys of the corpus "
                                         r"section .*'min_words'"):
        CorpusLoader(kind="x", doc="files", parameters=("min_word",), build=build.LOADERS["demo"].build,
                     source_files=build.LOADERS["demo"].source_files)
    with pytest.raises(ValueError, match=r"lists \['mirror'\]: a key is listed once, and the common keys"):
        CorpusLoader(kind="x", doc="files", parameters=("mirror",), build=build.LOADERS["demo"].build,
                     source_files=build.LOADERS["demo"].source_files)


def test_a_kind_no_loader_declares_is_refused_naming_the_file_the_key_and_every_kind(tmp_path):
    """``corpus.kind`` is a plain name to the parameter layer; stage 01 (``kind_of``, through ``build_corpus`` and
    ``source_files``) refuses one no loader declares, naming the file, the key, the value and the kinds there are;
    a name that is not plain is refused at load."""
    cfg = _params(tmp_path, "corpus:\n  kind: plaintxt\n")
    listed = ", ".join(repr(k) for k in build.LOADERS)
    for step in (build.build_corpus, build.source_files):
        with pytest.raises(build.UnknownKind, match=re.escape(f"t.yaml: corpus.kind: 'plaintxt' is not one of "
                                                              f"[{listed}]")):
            step(cfg)
    assert issubclass(build.UnknownKind, config.ConfigError)  # ./run_all.sh reports it as a bad parameter file
    with pytest.raises(config.ConfigError, match="corpus.kind: '../x' is not a plain name"):
        _params(tmp_path, "corpus:\n  kind: ../x\n")


def test_build_corpus_only_dispatches_and_a_new_kind_plugs_in_through_the_registry(tmp_path, monkeypatch):
    """A kind is its loader: build_corpus adds verification, warnings, fingerprints and an empty harvested table (a
    kind without questions), whatever the kind, and a parameter file may name any kind the registry holds."""
    from chunkstudy.corpus.loader import CorpusLoader
    from chunkstudy.corpus.model import DocumentBuilder

    src = tmp_path / "raw" / "one.txt"
    src.parent.mkdir()
    src.write_text("First.\n\nSecond.\n")

    def source_files(cfg):
        return [("plain:file", src)]

    def build_plain(cfg, session, warnings):
        b = DocumentBuilder("one", "One")
        for i, p in enumerate(src.read_text().split("\n\n")):
            if i:
                b.heading(1, "Rest")
            b.paragraph(p)
        doc, paras, secs = b.build(source="plain")
        warnings.append("plain: read one file")
        import pandas as pd
        return {"documents": pd.DataFrame([doc]), "paragraphs": paras, "sections_gold": secs,
                "corpus_funnel": pd.DataFrame([{"step": "files", "count": 1}]), "stats": {}}

    monkeypatch.setitem(build.LOADERS, "plain", CorpusLoader(kind="plain", doc="one.txt", build=build_plain,
                                                             source_files=source_files))
    cfg = _params(tmp_path, "corpus:\n  kind: plain\n  mirror: raw\n")
    out = build.build_corpus(cfg)
    assert out["documents"]["text"].tolist() == ["First.\n\nSecond."]
    assert out["stats"]["verification_failures"] == {} and out["stats"]["warnings"] == ["plain: read one file"]
    assert [(f["role"], f["path"]) for f in out["stats"]["sources"]] == [("plain:file", "raw/one.txt")]
    assert len(out["harvested"]) == 0 and "spans" in out["harvested"].columns and out["stats"]["kind"] == "plain"
    assert build.source_files(cfg) == [("plain:file", src)]
    with pytest.raises(build.CorpusInputError, match="corpus.kind plain has no questions of its own"):
        build.require_questions(cfg, out, "harvested")


def test_each_kind_lists_only_the_files_it_reads(tmp_path):
    """Wikipedia's featured list and revision pins belong to the wikipedia kind: a QASPER run that inherits them
    never reads them, so they are not in its fingerprints."""
    (tmp_path / "m").mkdir()
    text = ("corpus:\n  kind: {kind}\n  mirror: m\n  sources: [a.tgz]\n  featured_list: f.tsv\n"
            "  api_revisions: pins.tsv\n")
    roles = {k: [r for r, _ in build.source_files(_params(tmp_path, text.format(kind=k)))]
             for k in ("qasper", "wikipedia")}
    assert roles == {"qasper": ["corpus.sources"],
                     "wikipedia": ["corpus.sources", "corpus.featured_list", "corpus.api_revisions"]}
