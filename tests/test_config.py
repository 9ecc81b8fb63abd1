"""Parameter files: validation errors name the file and key, base inheritance, stage digests."""

from pathlib import Path

import pytest

from chunkstudy import config

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "params").glob("*.yaml")))
def test_every_shipped_params_file_validates(name):
    cfg = config.load(ROOT / "params" / name)
    assert cfg.corpus == name.removesuffix(".yaml")


def test_misspelled_key_names_key_file_and_valid_keys(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("metrics:\n  cutof: 10\n")
    with pytest.raises(config.ConfigError) as e:
        config.load(p)
    msg = str(e.value)
    assert "metrics.cutof" in msg and str(p) in msg and "'cutoff'" in msg


def test_unknown_section_and_bad_choice(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("metricz: {}\n")
    with pytest.raises(config.ConfigError, match="unknown key 'metricz'"):
        config.load(p)
    p.write_text("llm: {backend: gpt}\n")
    with pytest.raises(config.ConfigError, match=r"llm.backend: 'gpt' is not one of \['none', 'scripted'"):
        config.load(p)
    p.write_text("metrics: {cutoff: ten}\n")
    with pytest.raises(config.ConfigError, match="metrics.cutoff: expected int, got str"):
        config.load(p)
    p.write_text("chunking: {conditions: [A3, A5]}\n")
    with pytest.raises(config.ConfigError, match="'A5' is not one of"):
        config.load(p)


def test_wildcard_sections_validate_their_entries(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("embed: {embedders: {strong: {model: x, batchsize: 3}}}\n")
    with pytest.raises(config.ConfigError, match=r"unknown key 'embed.embedders.strong.batchsize'"):
        config.load(p)


def test_base_inheritance_overrides_only_what_it_restates():
    real = config.load(ROOT / "params" / "qasper.yaml")
    local = config.load(ROOT / "params" / "qasper_local.yaml")
    assert local.corpus == "qasper_local"
    assert local["corpus"]["sources"] == ["qasper-test-and-evaluator-v0.3.tgz"]
    assert local["corpus"]["fuzzy_threshold"] == real["corpus"]["fuzzy_threshold"]
    assert local["stats"] == real["stats"]
    assert local["induce"]["method"] == "texttiling" and real["induce"]["method"] == "llm"


def test_base_loop_is_an_error(tmp_path):
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(config.ConfigError, match="loops"):
        config.load(tmp_path / "a.yaml")


def test_stage_digest_tracks_only_the_sections_a_stage_reads():
    a = config.load(ROOT / "params" / "demo.yaml")
    b = config.load(ROOT / "params" / "demo.yaml", overrides={"stats": {"n_boot": 500}})
    assert config.stage_digest(a, "07_stats") != config.stage_digest(b, "07_stats")
    assert config.stage_digest(a, "08_figures") != config.stage_digest(b, "08_figures")  # the report reads all
    assert config.stage_digest(a, "06_metrics") != config.stage_digest(b, "06_metrics")  # the drill-down's cell
    for stage in ("01_corpus", "02_induce", "03_queries", "04_chunk_embed", "05_retrieve"):
        assert config.stage_digest(a, stage) == config.stage_digest(b, stage)
    # stable across loads (a digest, not an id)
    assert config.stage_digest(a, "07_stats") == config.stage_digest(
        config.load(ROOT / "params" / "demo.yaml"), "07_stats")


def test_resolve_is_relative_to_the_params_file():
    cfg = config.load(ROOT / "params" / "qasper_local.yaml")
    assert cfg.resolve(cfg["corpus"]["mirror"]) == (ROOT / "params" / "../../shared/data/qasper").resolve()


def test_empty_mapping_in_a_local_file_clears_the_base_entries():
    """qasper_local runs without a reranker although qasper.yaml names bge-reranker-v2-m3."""
    assert config.load(ROOT / "params" / "qasper.yaml")["retrieve"]["rerankers"]
    for name in ("qasper_local", "wikipedia_local", "qasper_smoke"):
        assert config.load(ROOT / "params" / f"{name}.yaml")["retrieve"]["rerankers"] == {}


def test_paths_a_base_file_states_stay_anchored_to_it(tmp_path):
    """A child in another folder inherits the demo's mirror as the demo meant it (../data/demo_raw from params/);
    its own relative paths stay relative to itself."""
    child = tmp_path / "mine.yaml"
    child.write_text(f"base: {ROOT / 'params' / 'demo.yaml'}\ncorpus: {{name: mine}}\n")
    cfg = config.load(child, root=tmp_path)
    assert cfg.resolve(cfg["corpus"]["mirror"]) == (ROOT / "data" / "demo_raw").resolve()
    child.write_text(f"base: {ROOT / 'params' / 'demo.yaml'}\ncorpus: {{name: mine, mirror: raw}}\n")
    assert config.load(child, root=tmp_path).resolve("raw") == tmp_path / "raw"
    # 'api' names no file and is inherited as written
    child.write_text(f"base: {ROOT / 'params' / 'wikipedia_fa.yaml'}\n")
    assert config.load(child, root=tmp_path)["corpus"]["featured_list"] == "api"
