"""Prefetching hub models (issue 21 §3, issue 41): only what the loaders read (configs, tokenizer files, safetensors
weights) is downloaded, the bytes to download and the free disk space are printed before the first byte, and the
download leaves ``refs/main`` so that the hub id resolves offline afterwards. The real ``HfApi`` and
``snapshot_download`` against a local hub (tests/local_hub.py) holding a repository with BGE large's file names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from local_hub import LocalHub

ROOT = Path(__file__).resolve().parents[1]
BGE_LARGE = {  # path -> bytes (the real repository's names; small stand-in sizes, the weights over the LFS bound)
    ".gitattributes": 1519, "1_Pooling/config.json": 191, "README.md": 9_025, "config.json": 779,
    "config_sentence_transformers.json": 124, "model.safetensors": 1_340_616, "modules.json": 349,
    "onnx/config.json": 732, "onnx/model.onnx": 1_340_851, "pytorch_model.bin": 1_340_698,
    "sentence_bert_config.json": 52, "special_tokens_map.json": 125, "tokenizer.json": 71_139,
    "tokenizer_config.json": 366, "vocab.txt": 23_150,
}
LOADED = {"1_Pooling/config.json", "config.json", "config_sentence_transformers.json", "model.safetensors",
          "modules.json", "sentence_bert_config.json", "special_tokens_map.json", "tokenizer.json",
          "tokenizer_config.json", "vocab.txt"}
OLD_STYLE = {"config.json": 600, "pytorch_model.bin": 1_500_000, "vocab.txt": 2_000, "tf_model.h5": 1_500_000}


def _files(tmp: Path, sizes: dict[str, int]) -> dict[str, Path]:
    out = {}
    for rel, n in sizes.items():
        p = tmp / "src" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(bytes((i * 7 + len(rel)) % 251 for i in range(n)))
        out[rel] = p
    return out


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prefetch-hub")
    h = LocalHub(tmp / "repos")
    h.repo("org/bge-large").commit(_files(tmp / "a", BGE_LARGE), "BGE large's files")
    h.repo("old/model").commit(_files(tmp / "b", OLD_STYLE), "an old repository: .bin and .h5 weights only")
    with h:
        yield h


PREFETCH = """
import json, shutil, sys, types
from chunkstudy import gpu
free = json.loads(sys.argv[1])
if free is not None:
    shutil.disk_usage = lambda path: types.SimpleNamespace(free=free)
said = []
try:
    out = gpu.prefetch(sys.argv[2:], echo=said.append)
    print(json.dumps({"said": said, "out": out}))
except RuntimeError as e:
    print(json.dumps({"said": said, "error": str(e)}))
"""


def prefetch(hub, hf_home: Path, names: list[str], free: int | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(hf_home), HF_ENDPOINT=hub.url, HF_HUB_OFFLINE="0", HF_HUB_DISABLE_TELEMETRY="1")
    r = subprocess.run([sys.executable, "-c", PREFETCH, json.dumps(free), *names], env=env, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_prefetch_takes_configs_tokenizer_and_safetensors_only_prints_the_bytes_first_and_leaves_refs_main(
        hub, tmp_path):
    sha = hub.repos["org/bge-large"].sha("main")
    got = prefetch(hub, tmp_path / "hf", ["org/bge-large"])
    store = tmp_path / "hf" / "hub" / "models--org--bge-large"
    snap = store / "snapshots" / sha
    assert got["out"] == {"org/bge-large": str(snap)}
    assert {str(p.relative_to(snap)) for p in snap.rglob("*") if p.is_file()} == LOADED  # no .bin, ONNX, README
    assert (store / "refs" / "main").read_text() == sha  # the hub id resolves offline from here on
    want = sum(BGE_LARGE[p] for p in LOADED)
    gb = f"{want / 1e9:,.2f} GB"
    said = got["said"]
    assert said[0] == f"prefetch: org/bge-large@{sha[:10]}: 10 files, {gb}, {gb} to download"
    assert said[1].startswith(f"prefetch: {gb} to download in all; ") and "free on the disk of" in said[1]
    assert said[2].startswith(f"prefetch: org/bge-large@{sha[:10]} -> {snap}")


def test_what_the_cache_holds_is_not_counted_and_a_repository_without_safetensors_gets_its_bin(hub, tmp_path):
    prefetch(hub, tmp_path / "hf", ["org/bge-large"])
    n = len(hub.requests)
    again = prefetch(hub, tmp_path / "hf", ["org/bge-large", "old/model"])
    assert again["said"][0].endswith(", 0.00 GB to download")  # all cached already
    assert again["said"][1].endswith("(no safetensors in the repository: its PyTorch .bin weights instead)")
    snap = Path(again["out"]["old/model"])
    assert sorted(p.name for p in snap.iterdir()) == ["config.json", "pytorch_model.bin", "vocab.txt"]  # never .h5
    assert not any(m == "GET" and "bge-large/resolve" in p for m, p, _ in hub.requests[n:])  # nothing fetched again


def test_prefetch_refuses_before_downloading_when_the_disk_is_too_small(hub, tmp_path):
    n = len(hub.requests)
    got = prefetch(hub, tmp_path / "hf", ["org/bge-large"], free=10**3)
    assert "to download but only 0.00 GB free on the disk of " in got["error"]
    assert not any("/resolve/" in p for _, p, _ in hub.requests[n:])  # not one file asked for
    assert not (tmp_path / "hf" / "hub" / "models--org--bge-large" / "snapshots").exists()
