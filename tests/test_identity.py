"""A served model is known by its answers (issue 51, case 1; docs/servers.md, "What a served model is"): a changed
model behind the same name, for an embedder (the fake's ``dims:<n>``: a model of another dimension), a reranker and
the LLM, reruns what it feeds and never meets the old model's vectors, scores or replies; an unchanged one keeps
them all, and a fully cached stage asks one canary request per model, starting no server. Fake OpenAI-compatible
servers (tests/fake_openai_server.py) in process and as a ``serve: auto`` command; the tiny project's 04 and 05 run
through the runner with their notebooks' code executed in this process."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest
import requests
import yaml

from chunkstudy import artifacts, config, embed, embed_store, identity, llm, rerank, runner

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import fake_openai_server as fake  # noqa: E402
from conftest import notebooks_in_process  # noqa: E402


@pytest.fixture
def server():
    """The fake's routes (embeddings, rerank, chat) on 127.0.0.1 in this process; base URL with /v1."""
    fake.STATE["rerank_defect"] = None
    with fake.embeddings_in_thread() as url:
        yield url
    fake.STATE["rerank_defect"] = None


# ------------------------------------------------------------------------------------ the same answers, no edge

def unit(rows):
    rows = np.asarray(rows, dtype=np.float64)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_answers_within_the_tolerance_are_one_model_and_others_are_not():
    rng = np.random.default_rng(0)
    v = unit(rng.normal(size=(4, 384)))
    noisy = unit(v + rng.normal(scale=1e-6, size=v.shape))  # a server's batching noise (cosine 1 - 1e-8)
    assert identity.same(identity.answers("embed", v), identity.answers("embed", noisy))
    # a precision change as measured (bfloat16 against float32: cosine 0.99997) is another model
    away = rng.normal(size=v.shape)
    away = unit(away - (away * v).sum(1, keepdims=True) * v)  # orthogonal to each vector
    drift = unit(v + 0.0077 * away)
    cos = (v * drift).sum(1)
    np.testing.assert_allclose(cos, 0.99997, atol=1e-6)
    assert not identity.same(identity.answers("embed", v), identity.answers("embed", drift))
    assert not identity.same(identity.answers("embed", v), identity.answers("embed", v[:, :200]))  # --dim
    assert not identity.same(identity.answers("embed", v, {"max_model_len": 512}),
                             identity.answers("embed", v, {"max_model_len": 256}))
    s = [5.0, -3.0, 0.25]
    assert identity.same(identity.answers("rerank", s), identity.answers("rerank", [5.000001, -3.000001, 0.2500001]))
    assert not identity.same(identity.answers("rerank", s), identity.answers("rerank", [5.1, -3.0, 0.25]))
    assert identity.same(identity.answers("llm", "Apollo 8"), identity.answers("llm", "Apollo 8"))
    assert not identity.same(identity.answers("llm", "Apollo 8"), identity.answers("llm", "Apollo 11"))


def test_noise_across_a_rounding_boundary_keeps_the_fingerprint(tmp_path):
    """A hash of rounded answers flips when noise carries one component across a rounding boundary; the registry
    matches within the tolerance instead, so the second answer set takes the first one's fingerprint."""
    base = np.full((4, 16), 0.25)
    base[:, 0] = 0.0005  # at the boundary of rounding to 3 decimals
    a, b = base.copy(), base.copy()
    a[:, 0] -= 1e-9
    b[:, 0] += 1e-9
    assert np.round(a, 3)[0, 0] != np.round(b, 3)[0, 0]  # rounding would separate them
    reg = identity.Registry(tmp_path, "embed", "m")
    first = reg.match(identity.answers("embed", a), "u")
    assert identity.Registry(tmp_path, "embed", "m").match(identity.answers("embed", b), "u") == first
    assert identity.fingerprint(identity.answers("embed", a)) != identity.fingerprint(identity.answers("embed", b))
    other = identity.Registry(tmp_path, "embed", "m").match(identity.answers("embed", unit(np.eye(4, 16))), "u")
    assert other != first and len(json.loads(reg.path.read_text())["seen"]) == 2


# ------------------------------------------------------------------------------------------ the clients

def served_embedder(url: str, **kw) -> embed.Embedder:
    return embed.load_embedder(config.record("embed.embedders.*", {
        "backend": "openai", "model": "m", "base_url": url, "batch_size": 8, "max_retries": 0, **kw}), "strong")


def test_the_store_keys_a_served_model_by_its_answers_and_asks_one_canary_request(server, tmp_path):
    texts = [f"text {i}, about a banana" for i in range(6)]
    e = served_embedder(server)
    store = embed_store.EmbeddingStore(tmp_path, flush_every=64)
    v = store.embed(e, texts)
    canary = [b for b in fake.EMB_STATE["bodies"] if b["n_input"] == len(identity.CANARY_TEXTS)]
    assert len(canary) == 1 and e.identity is not None and e.identity.how == "probed" and e.identity.dim == 3
    assert e.identity.fingerprint in json.dumps(json.loads(next((tmp_path / "identity").glob("*.json")).read_text()))
    again = embed_store.EmbeddingStore(tmp_path, flush_every=64)
    np.testing.assert_array_equal(again.embed(served_embedder(server), texts), v)
    assert again.n_embedded == 0  # the same model: every vector kept
    fake.EMB_STATE["defect"] = "dims:5"  # another model behind the name
    other = served_embedder(server)
    assert other.model_key != e.model_key
    changed = embed_store.EmbeddingStore(tmp_path, flush_every=64)
    assert changed.embed(other, texts).shape == (6, 5) and changed.n_embedded == 6


def test_a_reranker_replaced_behind_its_name_scores_again(server, tmp_path):
    spec = config.record("retrieve.rerankers.*", {"backend": "openai", "model": "xenc", "base_url": server,
                                                  "batch_size": 8, "max_retries": 0})
    queries, texts = ["q"] * 3, ["a", "bb", "ccc"]
    first = rerank.load_reranker(spec, "x", tmp_path)
    s1 = first.score(queries, texts)
    same = rerank.load_reranker(spec, "x", tmp_path)
    np.testing.assert_array_equal(same.score(queries, texts), s1)
    assert same.n_computed == 0 and same.model_id == first.model_id
    fake.STATE["rerank_defect"] = "scale:2"  # another cross-encoder: every logit doubled
    other = rerank.load_reranker(spec, "x", tmp_path)
    np.testing.assert_allclose(other.score(queries, texts), 2 * s1)  # not the old scores (before: s1, cached)
    assert other.n_computed == 3 and other.model_id != first.model_id


class ChatServer:
    """tests/fake_openai_server.py in a subprocess (the chat route, as a real LLM server runs apart)."""

    def __init__(self):
        self.p = subprocess.Popen([sys.executable, str(HERE / "fake_openai_server.py"), "--lifetime", "300"],
                                  stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        self.root = f"http://127.0.0.1:{int(line.split()[1])}"
        self.url = self.root + "/v1"

    def control(self, **kw) -> None:
        requests.post(self.root + "/control", json=kw, timeout=5).raise_for_status()

    def stats(self) -> dict:
        return requests.get(self.root + "/stats", timeout=5).json()

    def close(self) -> None:
        self.p.kill()
        self.p.wait(timeout=10)


def test_an_llm_replaced_behind_its_name_is_asked_again_and_its_old_replies_are_not_replayed(tmp_path):
    """The seeded greedy reply to the canary prompt tells the models apart: another model's replies are its own
    (before: the cache, keyed by the model's name, replayed the old model's replies). The old model back, they are
    found again; and with the server gone, the answers recorded for it stand for it (a replay from the cache)."""
    srv = ChatServer()
    try:
        p = config.record("llm", {"backend": "openai", "base_url": srv.url, "model": "served-model", "max_retries": 0})
        ask = [llm.Request([{"role": "user", "content": "echo:one"}])]
        assert [(r.text, r.cached) for r in llm.make_client(p, tmp_path).generate(ask)] == [("one", False)]
        assert [(r.text, r.cached) for r in llm.make_client(p, tmp_path).generate(ask)] == [("one", True)]
        srv.control(canary_reply="was Apollo 11.")
        c = llm.make_client(p, tmp_path)
        assert [(r.text, r.cached) for r in c.generate(ask)] == [("one", False)]
        assert srv.stats()["chat"] == ["echo:one", "echo:one"] and srv.stats()["canary"] == 3  # one per client
        srv.control(canary_reply=fake.STATE["canary_reply"])
        assert [r.cached for r in llm.make_client(p, tmp_path).generate(ask)] == [True]
    finally:
        srv.close()
    replay = llm.make_client(p, tmp_path)  # no server: the answers it gave last stand for it
    assert [(r.text, r.cached) for r in replay.generate(ask)] == [("one", True)]
    assert replay.identity is not None and replay.identity.how == "recorded"
    # on a machine without the model: the exported cache carries the answers with the replies
    replay.export_cache(tmp_path / "export.jsonl")
    elsewhere = llm.make_client(p, tmp_path / "elsewhere")
    assert elsewhere.import_cache(tmp_path / "export.jsonl") == 2
    assert [(r.text, r.cached) for r in elsewhere.generate(ask)] == [("one", True)]


# --------------------------------------------------------------------------------------- through the runner

def served_project(tmp_path, tiny_project, spec: dict) -> tuple[Path, Path]:
    """The tiny project (01-03 done) with both embedders served as ``spec`` says."""
    project = tmp_path / "project"
    shutil.copytree(tiny_project[0], project, symlinks=True)
    shutil.rmtree(project / "data" / "tiny" / "cache" / "embeddings")
    params = project / "params" / "tiny.yaml"
    data = yaml.safe_load(params.read_text())
    data["embed"] = {"embedders": {"strong": spec, "weak": {**spec, "max_seq_length": 128}}}
    params.write_text(yaml.safe_dump(data))
    return project, params


def run(params, project, **kw) -> tuple[list[str], list[str]]:
    lines: list[str] = []
    done = runner.run(params, project, log=lines.append, **kw)
    return [f"{s}:{status}" for s, status, _ in done], lines


def test_an_embedder_replaced_behind_its_name_reruns_04_and_05_and_an_unchanged_one_keeps_every_vector(
        tmp_path, tiny_project, monkeypatch):
    """``serve: external``: the runner asks the server the canary texts before 04 and 05 (one request for both
    embedders, which share it) and the answers enter their keys. Unchanged, 04 and 05 skip; replaced (another
    dimension), both rerun and every text and query is embedded by the new model (before: every stage skipped, and
    ``--force`` reused the old vectors). With the server gone, the answers recorded for it stand for it, said so."""
    notebooks_in_process(monkeypatch)
    up = ExitStack()
    server = up.enter_context(fake.embeddings_in_thread())
    project, params = served_project(tmp_path, tiny_project, {"backend": "openai", "model": "m", "base_url": server,
                                                             "batch_size": 8, "max_retries": 0})
    assert run(params, project, start="04", until="05")[0] == ["04_chunk_embed:ran", "05_retrieve:ran"]
    cfg = config.load(params, root=project)
    before = artifacts.read_vectors(cfg, "strong")
    key = artifacts.read_manifest(cfg, "04_chunk_embed")["key"]["models"]["embed.embedders.strong"]
    assert key.startswith("canary:") and key != identity.UNKNOWN
    n = fake.EMB_STATE["requests"]
    assert run(params, project, start="04", until="05")[0] == ["04_chunk_embed:skipped", "05_retrieve:skipped"]
    assert fake.EMB_STATE["requests"] == n + 1  # one canary request, for both embedders and both stages
    fake.EMB_STATE["defect"] = "dims:5"
    assert run(params, project, start="04", until="05")[0] == ["04_chunk_embed:ran", "05_retrieve:ran"]
    after = artifacts.read_vectors(cfg, "strong")
    assert before.shape[1] == 3 and after.shape == (before.shape[0], 5)
    assert len(artifacts.read(cfg, "runs")) > 0
    fake.EMB_STATE["defect"] = None  # the old model back: its vectors, all kept, and nothing embedded
    n = fake.EMB_STATE["requests"]
    assert run(params, project, start="04", until="05", force=True)[0] == ["04_chunk_embed:ran", "05_retrieve:ran"]
    np.testing.assert_array_equal(artifacts.read_vectors(cfg, "strong"), before)
    assert fake.EMB_STATE["requests"] == n + 1
    up.close()  # the server gone: the answers recorded for it stand for it, and the run says so
    done, lines = run(params, project, start="04", until="05")
    assert done == ["04_chunk_embed:skipped", "05_retrieve:skipped"]
    assert any(f"embed.embedders.strong: no server answers at {server}; its model is taken to be the one last "
               f"recorded for it: {key}" in line for line in lines)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_force_after_the_serve_command_changed_embeds_with_the_new_model(tmp_path, tiny_project, monkeypatch):
    """``serve: auto``, the command's ``--dim 64`` changed to ``--dim 32`` (the fake's ``--embed-dims``): with
    ``--force`` 04 embeds every text again, 32-dimensional (before: the old vectors, byte-identical, and not one
    request). Then a plain rerun skips 04 and starts no server: the answers recorded for the new command stand for
    its server, which is down between runs."""
    notebooks_in_process(monkeypatch)
    port = free_port()
    command = f"{sys.executable} {HERE / 'fake_openai_server.py'} --port {{port}} --models {{model}} --lifetime 600"
    spec = {"backend": "openai", "model": "m", "base_url": f"http://127.0.0.1:{port}/v1", "batch_size": 8,
            "max_retries": 0, "serve": "auto", "serve_command": command + " --embed-dims 64"}
    project, params = served_project(tmp_path, tiny_project, spec)
    cfg = config.load(params, root=project)
    assert run(params, project, only="04")[0] == ["04_chunk_embed:ran"]
    assert artifacts.read_vectors(cfg, "strong").shape[1] == 64
    data = yaml.safe_load(params.read_text())
    for e in data["embed"]["embedders"].values():
        e["serve_command"] = command + " --embed-dims 32"
    params.write_text(yaml.safe_dump(data))
    done, lines = run(params, project, only="04", force=True)
    assert done == ["04_chunk_embed:ran"] and artifacts.read_vectors(cfg, "strong").shape[1] == 32
    assert sum("serve: starting" in line for line in lines) == 1
    done, lines = run(params, project, only="04")
    assert done == ["04_chunk_embed:skipped"] and not any("serve: starting" in line for line in lines)
