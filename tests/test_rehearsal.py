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
import sys
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
