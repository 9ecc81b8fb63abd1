"""Prefetching hub models (issue 21 §3): only what the loaders read (configs, tokenizer files, safetensors weights)
is downloaded, and the bytes to download and the free disk space are printed before the first byte. The hub is a
fake listing here (no network): real file names and sizes of BAAI/bge-large-en-v1.5's repository."""

from __future__ import annotations

import types

import pytest

from chunkstudy import gpu

SHA = "d4aa6901d3a41ba39fb536a557fa166f842b0e09"
BGE_LARGE = {  # path -> bytes, as the hub lists the repository
    ".gitattributes": 1519, "1_Pooling/config.json": 191, "README.md": 90_257, "config.json": 779,
    "config_sentence_transformers.json": 124, "model.safetensors": 1_340_616_616, "modules.json": 349,
    "onnx/config.json": 732, "onnx/model.onnx": 1_340_851_298, "pytorch_model.bin": 1_340_698_349,
    "sentence_bert_config.json": 52, "special_tokens_map.json": 125, "tokenizer.json": 711_396,
    "tokenizer_config.json": 366, "vocab.txt": 231_508,
}
LOADED = {"1_Pooling/config.json", "config.json", "config_sentence_transformers.json", "model.safetensors",
          "modules.json", "sentence_bert_config.json", "special_tokens_map.json", "tokenizer.json",
          "tokenizer_config.json", "vocab.txt"}
OLD_STYLE = {"config.json": 600, "pytorch_model.bin": 500_000_000, "vocab.txt": 200_000, "tf_model.h5": 500_000_000}


class FakeHub:
    """``HfApi.model_info(name, files_metadata=True)`` over fixed listings; records the downloads asked for."""

    def __init__(self, repos: dict[str, dict[str, int]]):
        self.repos = repos
        self.downloads: list[dict] = []

    def model_info(self, name, files_metadata=False):
        assert files_metadata  # the sizes come from the listing
        return types.SimpleNamespace(sha=SHA, siblings=[types.SimpleNamespace(rfilename=p, size=n)
                                                        for p, n in self.repos[name].items()])

    def download(self, name, **kw):
        self.downloads.append({"name": name, **kw})
        return f"/cache/{name}"


@pytest.fixture
def online(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")


def test_prefetch_takes_configs_tokenizer_and_safetensors_only_and_prints_the_bytes_first(online, tmp_path):
    hub = FakeHub({"BAAI/bge-large-en-v1.5": BGE_LARGE})
    said: list[str] = []
    out = gpu.prefetch(["BAAI/bge-large-en-v1.5"], echo=said.append, api=hub, download=hub.download,
                       cache_dir=tmp_path)
    assert out == {"BAAI/bge-large-en-v1.5": "/cache/BAAI/bge-large-en-v1.5"}
    (plan,) = gpu.prefetch_plan(["BAAI/bge-large-en-v1.5"], api=hub, cache_dir=tmp_path)
    assert {p for p, _ in plan["files"]} == LOADED  # no .bin, no ONNX export, no README
    want = sum(BGE_LARGE[p] for p in LOADED)
    assert plan["bytes"] == want == 1_341_561_506 and plan["bytes_cached"] == 0
    (d,) = hub.downloads
    assert d["allow_patterns"] == list(gpu.PREFETCH_PATTERNS) and d["ignore_patterns"] == list(gpu.PREFETCH_IGNORE)
    assert d["revision"] == SHA  # the revision whose listing was counted
    assert said[0] == f"prefetch: BAAI/bge-large-en-v1.5@{SHA[:10]}: 10 files, 1.34 GB, 1.34 GB to download"
    assert said[1].startswith("prefetch: 1.34 GB to download in all; ") and f"free on the disk of {tmp_path}" in said[1]
    assert said[2].startswith("prefetch: BAAI/bge-large-en-v1.5 -> /cache/BAAI/bge-large-en-v1.5")


def test_what_the_cache_holds_is_not_counted_and_a_repository_without_safetensors_gets_its_bin(online, tmp_path):
    snap = tmp_path / "models--BAAI--bge-large-en-v1.5" / "snapshots" / SHA
    snap.mkdir(parents=True)
    (snap / "model.safetensors").write_bytes(b"x")
    hub = FakeHub({"BAAI/bge-large-en-v1.5": BGE_LARGE, "old/model": OLD_STYLE})
    bge, old = gpu.prefetch_plan(["BAAI/bge-large-en-v1.5", "old/model"], api=hub, cache_dir=tmp_path)
    assert bge["bytes_cached"] == BGE_LARGE["model.safetensors"]
    assert {p for p, _ in old["files"]} == {"config.json", "pytorch_model.bin", "vocab.txt"}  # never the .h5
    assert old["allow_patterns"][-1] == "pytorch_model*.bin"
    said: list[str] = []
    gpu.prefetch(["old/model"], echo=said.append, api=hub, download=hub.download, cache_dir=tmp_path)
    assert said[0].endswith("(no safetensors in the repository: its PyTorch .bin weights instead)")


def test_prefetch_refuses_before_downloading_when_the_disk_is_too_small(online, tmp_path, monkeypatch):
    hub = FakeHub({"BAAI/bge-large-en-v1.5": BGE_LARGE})
    monkeypatch.setattr(gpu.shutil, "disk_usage", lambda path: types.SimpleNamespace(free=10**9))
    with pytest.raises(RuntimeError, match=r"1\.34 GB to download but only 1\.00 GB free on the disk of "):
        gpu.prefetch(["BAAI/bge-large-en-v1.5"], echo=lambda *_: None, api=hub, download=hub.download,
                     cache_dir=tmp_path)
    assert hub.downloads == []
