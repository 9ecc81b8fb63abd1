"""Your own chunker as a condition (docs/chunker.md): placement of a chunker's output on exact
character offsets (dropped or rewritten text is an error naming the document, or a counted warning), the library
adapters (chonkie's recursive, sentence and semantic chunkers, semchunk, langchain-text-splitters) on real text,
user functions (a module or a file), the prefix kinds, the size-matched twins (the A0 rule per document), and the
validation of ``conditions.extra`` / ``contrasts.extra`` with errors that name the key."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkstudy import config, design, embed_store, paper, stats
from chunkstudy import prefix_kinds as prefixes
from chunkstudy.chunks import chunk_sets, chunkers, chunking
from chunkstudy.corpus.model import heading_paths
from test_conditions import PARAMS, TOKENIZER, make_corpus

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def counter():
    return chunking.load_counter(TOKENIZER)


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(n_docs=5, seed=3)


def _chunking_params(**kw):
    return config.record("chunking", {**PARAMS, **kw})


def _place(text: str, out, overlap: bool = False) -> chunkers.Placement:
    return chunkers.place(text, chunkers.pieces(out, "d"), where="d", overlap=overlap)


def _non_ws(s: str) -> str:
    return re.sub(r"\s+", "", s)


# ------------------------------------------------------------------------------------------------ placement

def test_texts_are_located_exactly_and_in_order():
    text = "alpha beta. alpha beta. gamma"
    p = _place(text, ["alpha beta.", "alpha beta.", "gamma"])
    assert p.spans == [(0, 11), (12, 23), (24, 29)] and p.aligned  # the second copy, not the first again


def test_spans_with_text_must_hold_that_text():
    text = "one two three"
    ok = _place(text, [{"start": 0, "end": 3, "text": "one"}, (4, 13)])
    assert ok.spans == [(0, 3), (4, 13)] and ok.aligned
    bad = _place(text, [{"start": 0, "end": 3, "text": "One"}, (4, 13)])
    assert bad.unplaced == 1 and bad.dropped_chars == 3 and not bad.aligned


def test_a_span_outside_the_text_is_an_error_naming_where():
    with pytest.raises(chunkers.ChunkerError, match=r"doc 'x'.*\[0, 99\), outside the text \[0, 5\)"):
        chunkers.place("hello", chunkers.pieces([(0, 99)], "doc 'x'"), where="doc 'x'", overlap=False)


def test_overlap_is_an_error_unless_declared():
    text = "aaaa bbbb cccc"
    out = [(0, 9), (5, 14)]
    with pytest.raises(chunkers.ChunkerError, match="overlap; a condition whose chunker overlaps"):
        _place(text, out)
    assert _place(text, out, overlap=True).spans == out
    # a located text that overlaps the previous chunk is found only when overlap is declared
    texts = ["aaaa bbbb", "bbbb cccc"]
    assert _place(text, texts, overlap=True).spans == [(0, 9), (5, 14)]
    assert _place(text, texts).unplaced == 1


def test_whitespace_between_chunks_may_be_dropped_but_text_may_not():
    text = "first part.\n\n  second part."
    assert _place(text, ["first part.", "second part."]).aligned
    p = _place(text, ["first part."])
    assert p.dropped_chars == len("secondpart.") and "second part" in p.problems[0]


def test_bad_output_types_are_named():
    with pytest.raises(chunkers.ChunkerError, match="returned str, expected a list"):
        chunkers.pieces("a text", "d")
    with pytest.raises(chunkers.ChunkerError, match="chunk 1 is float"):
        chunkers.pieces(["a", 1.5], "d")
    with pytest.raises(chunkers.ChunkerError, match="chunk 0 has start 0.5"):
        chunkers.pieces([(0.5, 2)], "d")


@settings(max_examples=60, derandomize=True, deadline=None)
@given(st.text(alphabet="ab .\n", min_size=1, max_size=60), st.lists(st.integers(0, 60), max_size=6))
def test_cutting_a_text_anywhere_places_back_to_the_same_spans(text, cuts):
    """Property: chunks that tile the text (any cut points), given as texts, are placed exactly where they were cut
    (non-empty ones), and nothing is reported dropped."""
    edges = sorted({0, len(text), *[c for c in cuts if c <= len(text)]})
    spans = [(s, e) for s, e in zip(edges, edges[1:])]
    p = _place(text, [text[s:e] for s, e in spans])
    kept = [(s, e) for s, e in spans if text[s:e].strip()]
    assert p.dropped_chars == 0 and p.unplaced == 0
    assert [text[s:e] for s, e in p.spans] == [text[s:e] for s, e in kept]


# -------------------------------------------------------------------------------- a chunker that rewrites text

def _docs():
    return pd.DataFrame({"doc_id": ["d1", "d2"], "title": ["One", "Two"],
                         "text": ["Plain words here. More words.", "Another text, with a comma."]})


def test_a_chunker_returning_text_not_in_the_document_fails_naming_the_document():
    def rewrite(text):  # lower-cases its chunks: text not in the document
        return [text.lower()]

    with pytest.raises(chunkers.ChunkerError) as e:
        chunkers.chunk_documents(_docs(), rewrite, name="LOW", chunker="mine:rewrite", overlap=False,
                                 unaligned="error")
    msg = str(e.value)
    assert "conditions.extra.LOW (mine:rewrite): document 'd1'" in msg
    assert "not in the document (rewritten)" in msg and "'plain words here. more words.'" in msg


def test_under_unaligned_warn_it_is_counted_and_warned():
    def rewrite(text):
        return [text.lower()]

    with pytest.warns(chunkers.ChunkerWarning, match=r"2 chunk\(s\).*in 2 document\(s\), e.g. \['d1', 'd2'\]"):
        spans, report = chunkers.chunk_documents(_docs(), rewrite, name="LOW", chunker="mine:rewrite",
                                                 overlap=False, unaligned="warn")
    assert len(spans) == 0 and report["unplaced"] == 2 and report["docs_unaligned"] == ["d1", "d2"]
    assert report["dropped_chars"] == sum(len(_non_ws(t)) for t in _docs()["text"])


def test_a_chunker_that_raises_is_named_with_the_document():
    def boom(text):
        if "comma" in text:
            raise RuntimeError("cannot cut commas")
        return [text]

    with pytest.raises(chunkers.ChunkerError, match=r"document 'd2': the chunker raised RuntimeError: cannot cut"):
        chunkers.chunk_documents(_docs(), boom, name="X", chunker="mine:boom", overlap=False,
                                 unaligned="error")


# ------------------------------------------------------------------------------------------ library adapters

LIBRARY_CASES = [
    ("chonkie:RecursiveChunker", {"chunk_size": 60}),
    ("chonkie:SentenceChunker", {"chunk_size": 60}),
    ("semchunk", {"chunk_size": 60}),
    ("langchain:RecursiveCharacterTextSplitter", {"chunk_size": 300, "chunk_overlap": 0}),
    ("langchain:RecursiveCharacterTextSplitter", {"chunk_size": 60, "chunk_overlap": 0, "length_function": "tokens"}),
]


@pytest.mark.parametrize("chunker,options", LIBRARY_CASES)
def test_library_chunkers_place_exactly_and_cover_every_character(chunker, options, corpus, counter):
    docs = corpus[0]
    fn = chunkers.load(chunker, options, counter=counter)
    spans, report = chunkers.chunk_documents(docs, fn, name="LIB", chunker=chunker, overlap=False,
                                             unaligned="error")
    assert report["unplaced"] == report["dropped_chars"] == 0 and len(spans) > len(docs)
    text = dict(zip(docs["doc_id"], docs["text"]))
    for d, g in spans.groupby("doc_id"):
        pieces = [text[d][s:e] for s, e in zip(g["start"], g["end"])]
        assert "".join(_non_ws(p) for p in pieces) == _non_ws(text[d])  # in order, nothing lost or doubled
        assert (g["start"].to_numpy()[1:] >= g["end"].to_numpy()[:-1]).all()
    if "chunk_size" in options and chunker != "langchain:RecursiveCharacterTextSplitter":
        sizes = counter([text[d][s:e] for d, s, e in zip(spans["doc_id"], spans["start"], spans["end"])])
        assert max(sizes) <= options["chunk_size"] + 5  # sizes counted in the run's tokens (special tokens aside)


def test_a_langchain_overlap_must_be_declared(corpus, counter):
    fn = chunkers.load("langchain:RecursiveCharacterTextSplitter", {"chunk_size": 200, "chunk_overlap": 80},
                       counter=counter)
    docs = corpus[0]
    with pytest.raises(chunkers.ChunkerError, match=r"doc0.*overlap; a condition whose chunker overlaps"):
        chunkers.chunk_documents(docs, fn, name="OV", chunker="langchain", overlap=False, unaligned="error")
    spans, report = chunkers.chunk_documents(docs, fn, name="OV", chunker="langchain", overlap=True,
                                             unaligned="error")
    assert report["unplaced"] == 0 and (spans["start"].to_numpy()[1:] < spans["end"].to_numpy()[:-1]).any()


def test_the_semantic_chunker_embeds_with_the_runs_own_embedder_through_the_store(corpus, counter, tmp_path):
    """chonkie's SemanticChunker with the run's strong embedder (the bundled MiniLM, offline) through the
    embedding store: the vectors it asked for are in the store afterwards, and its chunks place exactly."""
    cfg = config.load(ROOT / "params" / "tiny.yaml")
    store = embed_store.EmbeddingStore(tmp_path, 64)
    extra = {"SEM": {"chunker": "chonkie:SemanticChunker", "options": {"chunk_size": 80}, "embedder": "strong"}}
    fns = chunk_sets.embed_functions(design.user_conditions(_records(extra)), cfg.params("embed").embedders, store)
    assert list(fns) == ["strong"]
    fn = chunkers.load("chonkie:SemanticChunker", {"chunk_size": 80}, counter=counter, embed_fn=fns["strong"])
    docs = corpus[0].head(2)
    spans, report = chunkers.chunk_documents(docs, fn, name="SEM", chunker="chonkie:SemanticChunker",
                                             overlap=False, unaligned="error")
    assert report["unplaced"] == report["dropped_chars"] == 0 and len(spans) >= 2
    assert store.n_embedded > 0 and len(store) == store.n_embedded  # every vector came from (and stays in) it


def test_unknown_chunkers_and_options_are_named(counter):
    with pytest.raises(chunkers.ChunkerError, match=r"chonkie:TokenChunker is not one of the chonkie chunkers"):
        chunkers.load("chonkie:TokenChunker", {}, counter=counter, where="conditions.extra.T")
    with pytest.raises(chunkers.ChunkerError, match="langchain:Nope is not a text splitter"):
        chunkers.load("langchain:Nope", {}, counter=counter)
    with pytest.raises(chunkers.ChunkerError, match="semchunk needs options.chunk_size"):
        chunkers.load("semchunk", {}, counter=counter)
    with pytest.raises(chunkers.ChunkerError, match="chonkie would download it"):
        chunkers.load("chonkie:RecursiveChunker", {"tokenizer": "gpt2"}, counter=counter)
    with pytest.raises(chunkers.ChunkerError, match="cannot import module 'no_such_module_x'"):
        chunkers.load("no_such_module_x:f", {}, counter=counter)
    with pytest.raises(chunkers.ChunkerError, match="not a library chunker"):
        chunkers.load("justaname", {}, counter=counter)


def test_a_function_from_a_file_beside_the_parameter_file(tmp_path, counter):
    (tmp_path / "mine.py").write_text(textwrap.dedent("""
        def halves(text, at=0.5):
            k = int(len(text) * at)
            return [(0, k), (k, len(text))]
    """))
    fn = chunkers.load("mine.py:halves", {"at": 0.25}, counter=counter, params_dir=tmp_path)
    assert fn("abcdefgh") == [(0, 2), (2, 8)]
    assert chunkers.source_file("mine.py:halves", tmp_path) == (tmp_path / "mine.py").resolve()
    with pytest.raises(chunkers.ChunkerError, match="mine.py has no function 'nope'"):
        chunkers.load("mine.py:nope", {}, counter=counter, params_dir=tmp_path)
    with pytest.raises(chunkers.ChunkerError, match="does not exist"):
        chunkers.load("other.py:f", {}, counter=counter, params_dir=tmp_path)


# ---------------------------------------------------------------------------------- conditions and twins

def _records(extra):
    """``conditions.extra`` validated into its records, as a parameter file's would be."""
    return config.record("conditions", {"extra": extra}).extra


def _build(corpus, extra, counter, paper=(), **kw):
    """build_all of the user's conditions ``extra`` (after the paper's ``paper``, when given)."""
    docs, paras, gold, induced = corpus
    conds = design.run_conditions(paper, _records(extra))
    return chunk_sets.build_all(docs, paras, gold, induced, None, _chunking_params(**kw), counter, conds,
                                params_dir=ROOT / "examples")


def _frames(out) -> dict:
    return {c: g.reset_index(drop=True) for c, g in out["chunks"].groupby("condition", sort=False)}


EXAMPLE = "paragraph_chunker.py:chunk"  # examples/paragraph_chunker.py, the worked example's custom function


def test_twins_are_size_matched_per_document_by_the_a0_rule(corpus, counter):
    extra = {"REC": {"chunker": "chonkie:RecursiveChunker", "options": {"chunk_size": 50},
                     "size_matched_twin": True},
             "PARA": {"chunker": EXAMPLE, "options": {"min_words": 40}, "size_matched_twin": True}}
    out = _build(corpus, extra, counter)
    chunks = out["chunks"]
    assert list(dict.fromkeys(chunks["condition"])) == ["REC", "REC-fixed", "PARA", "PARA-fixed"]
    docs = corpus[0]
    for name in ("REC", "PARA"):
        own = chunks[chunks["condition"] == name]
        twin = chunks[chunks["condition"] == name + "-fixed"]
        # the twin is exactly the A0 rule applied to this condition's per-document means
        want = chunking.fixed_windows(docs, chunking.doc_means(own), counter, "pysbd")
        assert twin[["doc_id", "start", "end"]].reset_index(drop=True).equals(
            want[["doc_id", "start", "end"]].reset_index(drop=True))
        assert chunking.verify_tiling(twin, docs) == {}
        gap = out["summary"]["extra"][name]["size_gap"]
        means_own, means_twin = chunking.doc_means(own), chunking.doc_means(twin)
        assert gap["max_abs_doc_gap"] == pytest.approx(max(abs(means_twin[d] - means_own[d]) for d in means_own))
        assert gap["max_abs_doc_gap"] <= paper.value("study", "design", "size_gap_max") * 3


def test_prefix_kinds(corpus, counter):
    docs, _, gold, induced = corpus
    extra = {n: {"chunker": "semchunk", "options": {"chunk_size": 40}, "prefix": n.lower()}
             for n in ("NONE", "TITLE", "PATH", "PLACEBO")}
    extra["GOLD"] = {"chunker": "semchunk", "options": {"chunk_size": 40}, "prefix": "path", "outline": "gold",
                     "depth": 1}
    out = _build(corpus, extra, counter)
    by = _frames(out)
    titles = dict(zip(docs["doc_id"], docs["title"]))
    assert set(by["NONE"]["prefix"]) == {""}
    assert list(by["TITLE"]["prefix"]) == [prefixes.render_prefix(titles[d], []) for d in by["TITLE"]["doc_id"]]
    paths = heading_paths(induced)
    assert list(by["PATH"]["prefix"]) == [prefixes.render_prefix(titles[d], paths[s][:3])
                                          for d, s in zip(by["PATH"]["doc_id"], by["PATH"]["section_id"])]
    gpaths = heading_paths(gold)
    assert list(by["GOLD"]["prefix"]) == [prefixes.render_prefix(titles[d], gpaths[s][:1])
                                          for d, s in zip(by["GOLD"]["doc_id"], by["GOLD"]["section_id"])]
    # the section is the one the chunk's content starts in
    text = dict(zip(docs["doc_id"], docs["text"]))
    sec = induced.set_index("section_id")
    for d, s, e, sid in by["PATH"][["doc_id", "start", "end", "section_id"]].itertuples(index=False):
        first = s + len(text[d][s:e]) - len(text[d][s:e].lstrip())
        assert sec.loc[sid, "start"] <= first < sec.loc[sid, "end"]
    # the placebo: same offsets as PATH, real paths of the same depth, mostly from other documents
    assert by["PLACEBO"][["doc_id", "start", "end"]].equals(by["PATH"][["doc_id", "start", "end"]])
    assert (by["PLACEBO"]["prefix"] != by["PATH"]["prefix"]).mean() > 0.5
    facts = out["summary"]["extra"]["PLACEBO"]["sets"]["PLACEBO"]["placebo"]
    assert facts["pairs"] == len(out["placebo"][out["placebo"]["condition"] == "PLACEBO"]) > 0  # keyed by condition


def test_build_all_puts_user_conditions_beside_the_papers_without_changing_them(corpus, counter):
    docs, paras, gold, induced = corpus
    p = _chunking_params(conditions=["A0", "A2", "A3"])
    paper_only = chunk_sets.build_all(docs, paras, gold, induced, None, p, counter)
    both = _build(corpus, {"REC": {"chunker": "chonkie:RecursiveChunker", "options": {"chunk_size": 50},
                                   "prefix": "title", "size_matched_twin": True}}, counter,
                  paper=("A0", "A2", "A3"), conditions=["A0", "A2", "A3"])
    mine = both["chunks"][both["chunks"]["condition"].isin(["A0", "A2", "A3"])].reset_index(drop=True)
    cols = ["condition", "doc_id", "chunk_id", "start", "end", "prefix", "n_content_tokens", "n_prefix_tokens",
            "text_row"]
    assert mine[cols].equals(paper_only["chunks"][cols])
    assert both["texts"][:len(paper_only["texts"])] == paper_only["texts"]  # the paper's rows come first
    user = both["chunks"][both["chunks"]["condition"] == "REC"]
    assert user["chunk_id"].str.startswith("REC|").all() and user["text_row"].max() < len(both["texts"])
    assert both["summary"]["extra"]["REC"]["twin"] == "REC-fixed"
    assert both["summary"]["n_chunks"]["REC-fixed"] == len(both["chunks"][both["chunks"]["condition"] == "REC-fixed"])


# ------------------------------------------------------------------------------------------------ validation

def _load(tmp_path, extra_yaml: str):
    f = tmp_path / "p.yaml"
    f.write_text(f"base: {ROOT / 'params' / 'tiny.yaml'}\n" + textwrap.dedent(extra_yaml))
    return config.load(f)


@pytest.mark.parametrize("body,match", [
    ("conditions: {extra: {A0: {chunker: semchunk}}}", r"conditions.extra.*'A0' is already a paper condition"),
    ("conditions: {extra: {X: {chunker: semchunk, size_matched_twin: true}, X-fixed: {chunker: semchunk}}}",
     r"'X-fixed' is already a condition of conditions.extra \(X\)"),
    ("conditions: {extra: {X: {chunker: ''}}}", r"X.chunker is empty"),
    ("conditions: {extra: {X: {chunker: semchunk, prefix: context}}}",
     r"conditions.extra: X.prefix: a 'context' prefix reads the situating contexts 02 writes"),
    ("conditions: {extra: {X: {boundaries: induced, chunker: semchunk}}}", r"X.chunker: boundaries 'induced' take"),
    ("conditions: {extra: {X: {boundaries: gold, size_matched_twin: true}}}", r"X.size_matched_twin: only a chunker"),
    ("conditions: {extra: {X: {boundaries: gold, prefix: title, depth: 1}}}", r"X.depth: a 'title' prefix has no"),
    ("conditions: {extra: {X: {chunker: semchunk, prefix: nope}}}", r"conditions.extra.X.prefix"),
    ("conditions: {extra: {X: {chunker: semchunk, depth: 2}}}", r"X.depth: a 'none' prefix has no heading path"),
    ("conditions: {extra: {X: {chunker: semchunk, colour: red}}}", r"conditions.extra.X.colour"),
    ("conditions: {extra: {X: {chunker: semchunk}}}\ncontrasts: {extra: {U1: [X, Y]}}",
     r"contrasts.extra.*U1: 'Y' is not a condition of this run"),
    ("conditions: {extra: {X: {chunker: semchunk}}}\ncontrasts: {extra: {C1: [X, A0]}}",
     r"C1: the name is a contrast of stats.contrasts"),
    ("conditions: {extra: {X: {chunker: semchunk}}}\ncontrasts: {extra: {U1: [X, X]}}", r"two different conditions"),
])
def test_bad_declarations_name_the_key(tmp_path, body, match):
    with pytest.raises(config.ConfigError, match=match):
        _load(tmp_path, body)


def test_a_good_declaration_loads_and_twins_are_conditions(tmp_path):
    cfg = _load(tmp_path, """
        conditions: {extra: {SEM: {chunker: "chonkie:SemanticChunker", size_matched_twin: true}}}
        contrasts: {extra: {U1: [SEM, SEM-fixed], U2: [SEM, A0]}}
    """)
    assert cfg.data["conditions"]["extra"]["SEM"]["embedder"] == cfg.data["embed"]["strong"]  # resolved when loaded
    assert design.extra_condition_names(cfg.data["conditions"]["extra"]) == ["SEM", "SEM-fixed"]
    assert design.extra_question("SEM", "SEM-fixed").startswith("boundary placement")


def test_runs_without_user_conditions_keep_their_stage_digests():
    """The new sections at their unused value leave every stage digest as it was (no run reruns for them)."""
    cfg = config.load(ROOT / "params" / "tiny.yaml")
    for stage in ("04_chunk_embed", "07_stats"):
        sections = tuple(s for s in config.STAGE_SECTIONS[stage] if s not in ("conditions", "contrasts"))
        assert config.stage_digest(cfg, stage) == cfg.digest(sections)


# -------------------------------------------------------------------------------------------- the user family

def test_user_contrasts_are_their_own_holm_family():
    effects = {"A0": 0.0, "A1": 0.01, "A3": 0.03, "P": 0.0, "G3": 0.05, "A4": 0.02}
    scores, queries = stats.simulate_scores(12, 48, effects, seed=5)
    p = config.record("stats", {"n_boot": 400, "seed": 3})
    primary = design.PrimaryCell(p.primary_metric, "strong", p.primary_reranker)
    extra_pairs = {"U1": ["A3", "A0"], "U2": ["G3", "A1"]}
    user = stats.user_contrasts_table(scores, queries, p, primary, "sim", extra_pairs)
    paper_only = stats.contrasts_table(scores, queries, p, primary, "sim")
    assert set(user["label"]) == {stats.USER_ADDED} and not user["confirmatory"].any()
    for cell, g in user.groupby("cell"):
        assert np.allclose(g["p_holm"], stats.holm(g["p"].to_numpy()), equal_nan=True)  # Holm over 2, not 6
    # the confirmatory family is the same with or without the user's contrasts
    assert stats.contrasts_table(scores, queries, p, primary, "sim").equals(paper_only)
    assert stats.user_contrasts_table(scores, queries, p, primary, "sim", {}).empty


def test_registration_needs_stage_01s_manifest_to_hold_the_same_declaration(tmp_path):
    from chunkstudy.report import report

    cfg = _load(tmp_path, """
        conditions: {extra: {X: {chunker: semchunk, options: {chunk_size: 80}}}}
        contrasts: {extra: {U1: [X, A0]}}
    """)
    params = cfg.params()
    same = {"01_corpus": {"user_declared": {"digest": config.declaration_digest(params.conditions,
                                                                                params.contrasts)}}}
    assert report.user_registration(params, same)[0] is True
    other = {"01_corpus": {"user_declared": {"digest": "0" * 16}}}
    declared, sentence = report.user_registration(params, other)
    assert declared is False and "not pre-registered" in sentence
    assert report.user_registration(params, {"01_corpus": {}})[0] is False
    # what the runner records for 01 is that digest (a changed declaration gives another)
    changed = _load(tmp_path, """
        conditions: {extra: {X: {chunker: semchunk, options: {chunk_size: 90}}}}
        contrasts: {extra: {U1: [X, A0]}}
    """).params()
    assert config.declaration_digest(changed.conditions, changed.contrasts) != \
        same["01_corpus"]["user_declared"]["digest"]


def test_a_variant_elsewhere_inherits_a_file_chunker_relative_to_the_file_that_states_it(tmp_path):
    variant = tmp_path / "elsewhere" / "variant.yaml"
    variant.parent.mkdir()
    variant.write_text(f"base: {ROOT / 'params' / 'tiny_byo.yaml'}\ncorpus: {{name: variant}}\n")
    ref = config.load(variant).data["conditions"]["extra"]["PARA"]["chunker"]
    assert ref == f"{ROOT / 'examples' / 'paragraph_chunker.py'}:chunk"
    assert chunkers.source_file(ref, variant.parent) == ROOT / "examples" / "paragraph_chunker.py"
    assert config.load(ROOT / "params" / "tiny_byo.yaml").data["conditions"]["extra"]["PARA"]["chunker"] == \
        "../examples/paragraph_chunker.py:chunk"  # the stating file's own value stays as written
