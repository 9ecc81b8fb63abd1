"""scripts/device_check.sh (issue 21 §4), on the CPU: the bundle made here from the pipeline's own embedder and
reranker, the check's plain-torch BERT against those references (a dry run of the very script the GPU machine
runs), its verdicts when a reference is wrong, and its rank correlation against scipy's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from chunkstudy import devicecheck

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """A small bundle: 24 texts, 4 questions x 8 passages (the device check's defaults are 256 and 62 x 20)."""
    d = tmp_path_factory.mktemp("device_check")
    info = devicecheck.prepare(d, ROOT, n_texts=24, n_queries=4, per_query=8, echo=lambda *_: None)
    return d, info


def _script(bundle_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "BUNDLE_DIR": str(bundle_dir)}
    env.pop("OUT", None)
    return subprocess.run([str(ROOT / "scripts" / "device_check.sh"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)


def test_the_bundle_fits_what_the_device_machine_takes(bundle):
    d, info = bundle
    assert info["texts"] == 24 and info["queries"] == 4 and info["pairs"] == 32
    assert info["bytes"] < 60 * 2**20  # the work tree may carry 64 MiB in all
    b = torch.load(d / devicecheck.BUNDLE, weights_only=True)  # loads with torch alone, nothing pickled
    assert {v.dtype for k, v in b["weights"].items() if k not in devicecheck.HEAD} == {torch.float16}
    assert {b["weights"][k].dtype for k in devicecheck.HEAD} == {torch.float32}  # the head as the pipeline runs it
    assert b["weights"]["classifier.weight"].shape == (1, 384)  # the seeded head of the untrained reranker
    ref = b["texts"]["reference"]
    assert ref.dtype == torch.float32 and ref.shape == (24, 384)
    assert torch.allclose(ref.norm(dim=1), torch.ones(24), atol=1e-5)


def test_dry_run_of_the_script_passes_on_the_cpu_and_writes_result_json(bundle, tmp_path):
    d, _ = bundle
    r = _script(d, "--dry-run", str(tmp_path / "out"))
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((tmp_path / "out" / "result.json").read_text())
    assert res["ok"] is True and res["dry_run"] is True and res["device_arg"] == "cpu" and res["dtype"] == "float32"
    # float32 on the CPU with float16-rounded weights: the plain-torch network is sentence-transformers' network
    assert res["embeddings"]["n"] == 24 and res["embeddings"]["min_cosine"] > 0.99999
    assert res["cross_encoder"]["queries"] == 4 and res["cross_encoder"]["min_spearman"] > 0.999
    assert [(p["what"], p["batch_size"]) for p in res["throughput"]] == list(devicecheck.PAPER_BATCHES)
    assert all(p["items_per_s"] > 0 and p["peak_memory_mib"] > 0 for p in res["throughput"])
    assert "PASS  embeddings" in r.stdout and "PASS  cross-encoder" in r.stdout


def test_a_wrong_reference_fails_the_check_and_the_script(bundle, tmp_path):
    d, _ = bundle
    b = torch.load(d / devicecheck.BUNDLE, weights_only=True)
    b["texts"]["reference"] = b["texts"]["reference"].roll(1, dims=0)  # every vector belongs to another text
    b["pairs"]["reference"] = -b["pairs"]["reference"]  # every query's ranking reversed
    bad = tmp_path / "bad"
    bad.mkdir()
    torch.save(b, bad / devicecheck.BUNDLE)
    res = devicecheck.check(bad, tmp_path / "out", "cpu", "float32", dry_run=True, echo=lambda *_: None)
    verdict = {c["check"].split(":")[0]: c["ok"] for c in res["checks"]}
    assert verdict == {"embeddings": False, "cross-encoder": False, "reranker ranking": True} and res["ok"] is False
    assert res["cross_encoder"]["min_spearman"] < -0.999
    assert json.loads((tmp_path / "out" / "result.json").read_text())["ok"] is False
    r = _script(bad, "--dry-run", str(tmp_path / "out2"))
    assert r.returncode == 1 and "FAIL  embeddings" in r.stdout


def test_no_bundle_and_no_gpu_are_named(tmp_path, bundle):
    r = _script(tmp_path / "nothing", "--dry-run", str(tmp_path / "out"))
    assert r.returncode == 1 and "device_check.sh --prepare" in r.stderr
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="sees no CUDA device"):
            devicecheck.check(bundle[0], None, "cuda", "float16")


def test_spearman_agrees_with_scipy_ties_included():
    rng = np.random.default_rng(7)
    for n in (2, 5, 20, 50):
        a = rng.integers(0, 6, n).astype(float).tolist()  # many ties
        b = (np.array(a) * 0.5 + rng.normal(size=n)).tolist()
        want = stats.spearmanr(a, b).statistic
        got = devicecheck.spearman(a, b)
        assert (np.isnan(want) and np.isnan(got)) or got == pytest.approx(want, abs=1e-12)
    with pytest.raises(ValueError, match="two equally long lists"):
        devicecheck.spearman([1.0], [2.0])


def test_the_float16_ranking_check_passes_on_the_cpu_and_finds_no_ties(bundle):
    """The reranker in float16 (the encoder; its head in float32, scores the logits) against float32 on the same
    device, with logits moved to 10, where a float16 Sigmoid is exactly 1.0 for every candidate (issue 41)."""
    d, _ = bundle
    b = torch.load(d / devicecheck.BUNDLE, weights_only=True)
    cpu = torch.device("cpu")
    half = {k: v.to(torch.float32 if k in devicecheck.HEAD else torch.float16) for k, v in b["weights"].items()}
    full = {k: v.to(torch.float32) for k, v in b["weights"].items()}
    rank = devicecheck.ranking_check(half, full, b["config"], b["pairs"], cpu, "float16")
    assert rank["ok"] and rank["detail"]["ties"] == 0 and rank["detail"]["queries"] == 4
    assert rank["detail"]["float16_sigmoid_exactly_1"] == rank["detail"]["pairs"] == 32  # the old scores: all tied
    assert rank["detail"]["max_abs_diff"] < devicecheck.RANK_NOISE


def test_the_folders_a_served_check_writes_are_the_bundles_networks(bundle, tmp_path):
    """What the device check hands vLLM (scripts/device_check.sh with a Python that has vLLM): the embedder and the
    cross-encoder written back as Hugging Face folders from the bundle. Loaded here by sentence-transformers, they
    give the bundle's references: the same networks (the served comparison itself needs vLLM: run with
    SERVE_PYTHON=.venv-serve-cpu/bin/python scripts/device_check.sh --dry-run)."""
    from sentence_transformers import CrossEncoder, SentenceTransformer

    d, _ = bundle
    b = torch.load(d / devicecheck.BUNDLE, weights_only=True)
    emb = SentenceTransformer(str(devicecheck._write_folder(b, tmp_path / "e", False)), device="cpu")
    vecs = torch.from_numpy(emb.encode(b["texts"]["strings"], normalize_embeddings=True))
    assert float(torch.nn.functional.cosine_similarity(vecs, b["texts"]["reference"]).min()) > 0.9999
    ce = CrossEncoder(str(devicecheck._write_folder(b, tmp_path / "x", True)), device="cpu", max_length=256)
    got = ce.predict([tuple(p) for p in b["pairs"]["strings"]], activation_fn=torch.nn.Identity())
    assert np.allclose(got, b["pairs"]["reference"].numpy(), atol=2e-3)  # the logits, from float16-rounded weights
