"""The stage graph, declared once (chunkstudy.stages): the notebooks read and write what their stages declare, the
runner's keys follow the declared reads (the 03 -> 02 bug), a stage's library hash covers only what its notebook
imports, and one schema check with declared column kinds."""

from __future__ import annotations

import ast
import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from chunkstudy import artifacts, codehash, config, design, manifests, runner, stages
from chunkstudy.report import report

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = {p.stem: p for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))}

READS = {"read": 1, "read_input": 2, "read_json": 2}      # function -> position of the artifact name
WRITES = {"write": 1, "write_json": 2, "write_each": 1}
VECTORS = {"read_vectors", "read_all_vectors", "write_vectors", "write_all_vectors"}


def _calls(tree: ast.AST, module: str):
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                and n.func.value.id == module:
            yield n.func.attr, n


def _names_of(fn: str, arg: ast.expr) -> list[str] | None:
    """The artifact names a call's name argument stands for: a literal; for ``write_each``, a declaration of
    chunkstudy.design (``design.prefix_tables()``), evaluated; None for any other expression."""
    if fn != "write_each":
        return [arg.value] if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
    call = arg if isinstance(arg, ast.Call) and not arg.args else None
    ref = call.func if call is not None else arg
    if not (isinstance(ref, ast.Attribute) and isinstance(ref.value, ast.Name) and ref.value.id == "design"):
        return None
    declared = getattr(design, ref.attr)
    return [t.name for t in (declared() if call is not None else declared)]


def notebook_io(path: Path) -> dict[str, set]:
    """What a notebook reads and writes through chunkstudy.artifacts, from its source: artifact names of the
    read*/write* calls (a name must be a literal; ``write_each`` names a declaration of chunkstudy.design, which
    is evaluated), read_input's reads apart, and the stage named by the calls that take one."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = {"read": set(), "read_input": set(), "write": set(), "stage_args": set(), "dynamic": set()}
    for fn, call in _calls(tree, "artifacts"):
        if fn in VECTORS:
            out["read" if fn.startswith("read") else "write"].add("embeddings")
            continue
        pos = READS.get(fn, WRITES.get(fn))
        if pos is None:
            continue
        names = _names_of(fn, call.args[pos])
        if names is None:
            out["dynamic"].add(f"{fn} at line {call.lineno}")
            continue
        out["read_input" if fn == "read_input" else "read" if fn in READS else "write"].update(names)
        if pos == 2:
            out["stage_args"].add(call.args[1].value)
    if any(fn == "gather" for fn, _ in _calls(tree, "report")):   # 08 reads its declared inputs through gather
        out["read"] |= set(report.INPUT_TABLES) | {name for _, name in report.INPUT_JSON}
    return out


def test_write_each_counts_the_tables_of_a_declaration_and_any_other_name_is_dynamic(tmp_path):
    """04 writes the prefix kinds' tables with one ``artifacts.write_each(cfg, design.prefix_tables(), out)``: the
    check evaluates the declaration and counts every table it holds; a name from anywhere else is still refused as
    unchecked."""
    nb = tmp_path / "nb.py"
    nb.write_text('artifacts.write_each(cfg, design.prefix_tables(), out)\n'
                  'artifacts.write_each(cfg, mine(), out)\n'
                  'artifacts.write(cfg, "size_matching", out["size_matching"])\n'
                  'artifacts.write(cfg, table.name, x)\n')
    io = notebook_io(nb)
    assert io["write"] == {t.name for t in design.prefix_tables()} | {"size_matching"}
    assert io["dynamic"] == {"write_each at line 2", "write at line 4"}


def test_every_stage_has_its_notebook_and_every_notebook_its_stage():
    assert list(NOTEBOOKS) == list(stages.STAGE_NAMES) == list(config.STAGE_SECTIONS)
    assert all((ROOT / s.notebook).is_file() for s in stages.STAGES)


@pytest.mark.parametrize("name", list(stages.STAGE_NAMES))
def test_notebook_reads_and_writes_what_its_stage_declares(name):
    io = notebook_io(NOTEBOOKS[name])
    spec = stages.stage(name)
    assert io["dynamic"] == set(), f"{name}: artifact names must be literals to be checked: {io['dynamic']}"
    conditional = {r.name for r in spec.reads if r.when is not None}
    assert io["read"] | io["read_input"] == set(stages.reads(name)), name
    assert io["read_input"] == conditional, f"{name}: a read that holds only under some parameters goes through " \
                                            "artifacts.read_input (and only such a read)"
    assert io["write"] == {a.name for a in spec.writes}, name
    assert io["stage_args"] <= {name} | {stages.writer(n) for n in io["read"]}, io["stage_args"]


#: What a value derived from the whole parameter file (``cfg.params().<property>``) reads.
DERIVED = {"primary_cell": {"stats.primary_metric", "embed.strong", "stats.primary_reranker"},
           "run_conditions": {"chunking.conditions", "conditions.extra"},
           "routed_retrieve": {"retrieve", "conditions.extra"},
           "multiverse_metrics": {"multiverse.metrics", "multiverse.cutoffs", "metrics.cutoff", "stats.primary_metric"}}


def _param_uses(path: Path) -> set[str]:
    """Parameters a notebook reads: ``cfg["s"]["k"]`` -> ``s.k``, ``cfg["s"]`` used whole -> ``s``, through
    aliases (``qp = cfg["queries"]``); ``cfg.data`` -> every section; ``cfg.params().primary_cell`` and
    ``.run_conditions``, ``.routed_retrieve`` -> what they are made of (:data:`DERIVED`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parent = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}

    def key(node) -> str | None:
        return node.slice.value if isinstance(node.slice, ast.Constant) else None

    aliases = {t.id: key(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
               for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Subscript)
               and isinstance(n.value.value, ast.Name) and n.value.value.id == "cfg"}
    def params_call(node) -> str | None:  # cfg.params("s") -> "s" (a typed record, issue 15 §4)
        return (node.args[0].value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "params" and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "cfg" and node.args and isinstance(node.args[0], ast.Constant) else None)

    records = {t.id: params_call(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
               for t in n.targets if isinstance(t, ast.Name) and params_call(n.value)}
    uses = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "cfg" \
                and n.attr == "data":
            uses |= set(config.SCHEMA)
        if isinstance(n, ast.Attribute) and n.attr in DERIVED and isinstance(n.value, ast.Call) \
                and isinstance(n.value.func, ast.Attribute) and n.value.func.attr == "params" and not n.value.args:
            uses |= DERIVED[n.attr]
        rec = params_call(n) or (records.get(n.id) if isinstance(n, ast.Name) else None)
        if rec is not None:
            if isinstance(n, ast.Name) and isinstance(parent.get(n), ast.Assign) and n in parent[n].targets:
                continue
            up = parent.get(n)
            uses.add(f"{rec}.{up.attr}" if isinstance(up, ast.Attribute) and up.value is n else rec)
            continue
        if not isinstance(n, ast.Name) or (n.id != "cfg" and n.id not in aliases):
            continue
        up = parent.get(n)
        section = aliases.get(n.id)
        if n.id == "cfg":
            if not (isinstance(up, ast.Subscript) and up.value is n):
                continue
            section, up = key(up), parent.get(up)
        elif isinstance(parent.get(n), ast.Assign) and n in parent[n].targets:
            continue
        if isinstance(up, ast.Subscript) and isinstance(up.slice, ast.Constant):
            uses.add(f"{section}.{key(up)}")
        else:
            uses.add(section)
    return uses


@pytest.mark.parametrize("name", list(stages.STAGE_NAMES))
def test_notebook_reads_the_parameters_its_stage_declares(name):
    declared = set(config.STAGE_SECTIONS[name])
    uses = _param_uses(NOTEBOOKS[name])
    uncovered = {u for u in uses if u not in declared and u.split(".")[0] not in declared}
    assert uncovered == set(), f"{name} reads {uncovered} without declaring them: a change would not rerun it"
    if stages.ALL_PARAMS not in stages.stage(name).params:
        unused = {d for d in declared if d not in uses and not any(u.startswith(d + ".") for u in uses)}
        assert unused == set(), f"{name} declares {unused} but its notebook does not read them"


def test_the_graph_is_well_formed():
    seen: set[str] = set()
    for s in stages.STAGES:
        for r in s.reads:
            assert r.name in seen, f"{s.name} reads {r.name}, which no earlier stage writes"
        names = [a.name for a in s.writes]
        assert not set(names) & seen, f"{s.name} writes an artifact an earlier stage writes"
        seen |= set(names)
        for p in s.params:
            if p != stages.ALL_PARAMS:
                sec, _, k = p.partition(".")
                assert sec in config.SCHEMA and (not k or k in config.SCHEMA[sec]), p
    assert runner.STAGE_DEPS["03_queries"] == ("01_corpus", "02_induce")     # under some parameters
    assert runner.STAGE_DEPS["08_figures"] == stages.STAGE_NAMES[:-1]
    assert artifacts.TABLES["chunks"][0] == "04_chunk_embed"
    assert report.INPUT_JSON == (("02_induce", "induction_stats"), ("03_queries", "bm25"), ("04_chunk_embed", "summary"))


def test_a_reads_condition_follows_the_parameters(root):
    def params(**overrides):
        return config.load(root / "params" / "demo.yaml", overrides=overrides).params()

    assert stages.upstream("03_queries", params()) == ("01_corpus",)          # bm25_condition G2: gold outline
    assert stages.upstream("03_queries", params(queries={"bm25_condition": "A3"})) == ("01_corpus", "02_induce")
    assert "harvested" not in stages.reads("03_queries", params(queries={"source": "generated"}))
    no_a1 = dataclasses.replace(params(), chunking=dataclasses.replace(params().chunking, conditions=("A0", "A2")))
    assert "contexts_a1" not in stages.reads("04_chunk_embed", no_a1)


def test_the_edges_outside_the_store_are_declared(demo_cfg):
    """01's source files, 08's figures/ folder and 08's read of the partner's contrasts are declarations the runner
    reads, not stage names it special-cases."""
    sources = [(s.name, s.source_files.recorded) for s in stages.STAGES if s.source_files]
    assert sources == [("01_corpus", "stats")]
    assert [s.name for s in stages.STAGES if s.folders] == ["08_figures"]
    partner = [(s.name, [r.name for r in s.partner]) for s in stages.STAGES if s.partner]
    assert partner == [("08_figures", ["contrasts"])]
    assert artifacts.output_dirs(demo_cfg, "08_figures") == [
        (artifacts.stage_dir(demo_cfg, "08_figures"), artifacts.corpus_dir(demo_cfg)),
        (artifacts.figures_dir(demo_cfg), demo_cfg.root / "figures")]
    assert artifacts.output_dirs(demo_cfg, "07_stats") == [(artifacts.stage_dir(demo_cfg, "07_stats"),
                                                            artifacts.corpus_dir(demo_cfg))]


#: Where the models behind each kind of model server run when no server serves them (stages.SERVICES ->
#: stages.DEVICE_SECTIONS), and the parameter that names their device
SERVED_ON = {"llm": ("llm", "llm.device"), "embed": ("embed", "embed.embedders"),
             "rerank": ("retrieve", "retrieve.rerankers")}


def test_a_stage_declares_the_devices_of_the_models_it_runs():
    """The runner checks for CUDA before the first stage for the devices the selected stages declare (it used to
    name 04 and 05, and missed the transformers LLM of 02 and 03): every stage that reads a model's device key
    declares its section, and so does every stage that may call that model's server."""
    for s in stages.STAGES:
        if stages.ALL_PARAMS in s.params:  # 08 reads every parameter for its report and runs no model
            assert not s.devices and not s.services
            continue
        reads = {sec for sec, key in SERVED_ON.values() if any(key == p or key.startswith(p + ".") for p in s.params)}
        assert set(s.devices) == reads == {SERVED_ON[kind][0] for kind in s.services}, s.name


def test_a_declaration_the_runner_cannot_honour_is_refused():
    four = stages.stage("04_chunk_embed")
    with pytest.raises(ValueError, match="devices \\['gpu'\\] are not among"):
        dataclasses.replace(four, devices=("gpu",))
    with pytest.raises(ValueError, match="models \\['llm.model'\\] are not among the parameters it reads"):
        dataclasses.replace(four, models=("llm.model",))
    outside = stages.UserCode("retrieve.rerankers", "model", "reranker_sources")
    with pytest.raises(ValueError, match="'retrieve.rerankers' is not among the parameters it reads"):
        dataclasses.replace(four, user_code=outside)
    assert four.user_code is not None and four.user_code.entries(config.load(ROOT / "params/tiny_byo.yaml",
                                                                             root=ROOT).params())


def test_read_input_reads_only_what_the_parameters_switch_on(demo_cfg):
    harvested = pd.DataFrame({"query_id": ["q"], "doc_id": ["d"], "qtype": ["t"], "text": ["?"], "spans": [[[0, 1]]]})
    artifacts.write(demo_cfg, "harvested", harvested)
    assert len(artifacts.read_input(demo_cfg, "03_queries", "harvested")) == 1
    generated = config.load(demo_cfg.path, root=demo_cfg.root, overrides={"queries": {"source": "generated"}})
    assert artifacts.read_input(generated, "03_queries", "harvested") is None
    with pytest.raises(KeyError, match="03_queries does not declare a read of 'chunks'"):
        artifacts.read_input(demo_cfg, "03_queries", "chunks")


def test_needs_is_the_transitive_closure_of_upstream(root):
    p = config.load(root / "params" / "tiny.yaml").params()
    assert stages.needs("01_corpus", p) == ()
    assert stages.needs("03_queries", p) == ("01_corpus",)          # bm25_condition G2: not 02, under tiny
    assert stages.needs("05_retrieve", p) == ("01_corpus", "02_induce", "03_queries", "04_chunk_embed")
    for name in stages.STAGE_NAMES:
        closure = set(stages.upstream(name, p))
        for dep in stages.upstream(name, p):
            closure |= set(stages.needs(dep, p))
        assert set(stages.needs(name, p)) == closure, name


def test_a_notebook_on_a_corpus_that_never_ran_names_the_run_that_feeds_it(tmp_path, root, monkeypatch):
    """06 with params_file = "params/tiny.yaml" and tiny never run said ``./run_all.sh tiny --only 05``, which
    failed on 01. The command comes from the stage graph, what has completed, and the notebook that reads (the
    kernel JupyterLab starts for notebooks/NN_stage.py has its path in JPY_SESSION_NAME)."""
    shutil.copytree(root / "params", tmp_path / "params")
    cfg = config.load(tmp_path / "params" / "tiny.yaml", root=tmp_path)
    monkeypatch.delenv("CHUNKSTUDY_STAGE", raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)

    def said(call) -> str:
        with pytest.raises(FileNotFoundError) as e:
            call()
        return str(e.value).rsplit("(run ", 1)[1].rstrip(")")

    assert said(lambda: artifacts.read(cfg, "runs")) == "./run_all.sh tiny --until 05"     # 06's first read
    assert said(lambda: artifacts.read(cfg, "documents")) == "./run_all.sh tiny --only 01"
    assert said(lambda: artifacts.read_vectors(cfg, "strong")) == "./run_all.sh tiny --until 04"
    assert said(lambda: artifacts.read(cfg, "contrasts")) == "./run_all.sh tiny --until 07"
    # 04 reads 01's documents first, then 02's outline: in its notebook, the one command runs both
    monkeypatch.setenv("JPY_SESSION_NAME", str(root / "notebooks" / "04_chunk_embed.py"))
    assert artifacts.reading_stage() == "04_chunk_embed"
    assert said(lambda: artifacts.read(cfg, "documents")) == "./run_all.sh tiny --until 02"
    # 01 and 02 completed: what 05 still lacks is 03 and 04; then 04 alone
    _tiny_outputs(cfg, "01_corpus")
    _tiny_outputs(cfg, "02_induce")
    monkeypatch.setenv("JPY_SESSION_NAME", str(root / "notebooks" / "05_retrieve.py"))
    assert said(lambda: artifacts.read(cfg, "chunks")) == "./run_all.sh tiny --until 04"
    monkeypatch.setenv("JPY_SESSION_NAME", "/somewhere/Untitled.ipynb")  # not a stage's notebook: the writer's needs
    assert artifacts.reading_stage() is None
    assert said(lambda: artifacts.read(cfg, "chunks")) == "./run_all.sh tiny --only 04"
    assert said(lambda: artifacts.read(cfg, "scores")) == "./run_all.sh tiny --until 06"
    assert artifacts.run_command(cfg, "08_figures") == "./run_all.sh tiny"
    monkeypatch.setenv("CHUNKSTUDY_STAGE", "06_metrics")  # the runner's kernels: it names the stage
    assert artifacts.reading_stage() == "06_metrics"


# ------------------------------------------------------------------------------------------- runner keys

def _tiny_outputs(cfg, stage: str, version: int = 0) -> None:
    """Minimal tables of a stage plus its manifest (content hashes only): enough for runner.stage_key."""
    s = lambda **kw: pd.DataFrame(kw)  # noqa: E731
    secs = s(doc_id=["d"], section_id=["d::s0"], parent_id=[None], level=[1], title=[f"v{version}"], first_para=[0],
             last_para=[0], start=[0], end=[4])
    if stage == "01_corpus":
        artifacts.write(cfg, "documents", s(doc_id=["d"], title=["t"], text=["abcd"], source=["x"]))
        artifacts.write(cfg, "paragraphs", s(doc_id=["d"], para_idx=[0], start=[0], end=[4]))
        artifacts.write(cfg, "sections_gold", secs)
        artifacts.write(cfg, "harvested", s(query_id=["q"], doc_id=["d"], qtype=["t"], text=["?"], spans=[[[0, 1]]]))
        artifacts.write(cfg, "corpus_funnel", s(step=["read"], count=[version]))
    else:
        artifacts.write(cfg, "sections_induced", secs)
        artifacts.write(cfg, "contexts_a1", s(chunk_set=["A0"], doc_id=["d"], start=[0], end=[4],
                                              context=[f"c{version}"]))
    artifacts.write_json_file(artifacts.manifest_path(cfg, stage),
                              {"key": {"v": version}, "outputs": manifests.hash_outputs(cfg, stage)})


def _key03(cfg) -> dict:
    return runner.stage_key(cfg, runner.Stage("03_queries", NOTEBOOKS["03_queries"]), "lib")


def test_a_new_induced_outline_reruns_03_only_when_its_bm25_diagnostic_reads_it(tmp_path, root):
    """The bug: 03 reads 02_induce/sections_induced when queries.bm25_condition is induced, but its key held only
    01's outputs, so a new outline left 03's BM25 diagnostic stale."""
    induced = config.load(root / "params" / "demo.yaml", root=tmp_path, overrides={"queries": {"bm25_condition": "A2"}})
    gold = config.load(root / "params" / "demo.yaml", root=tmp_path, overrides={"queries": {"bm25_condition": "G2"}})
    _tiny_outputs(induced, "01_corpus")
    _tiny_outputs(induced, "02_induce", 1)
    before = {"A2": _key03(induced), "G2": _key03(gold)}
    assert "sections_induced" in before["A2"]["inputs"] and "sections_induced" not in before["G2"]["inputs"]
    _tiny_outputs(induced, "02_induce", 2)                    # 02 reran and wrote another outline
    assert _key03(induced)["inputs"] != before["A2"]["inputs"]  # 03 reruns
    assert _key03(gold) == before["G2"]                        # nothing 03 reads under G2 changed


def test_a_key_covers_the_files_a_stage_reads_not_everything_upstream_wrote(tmp_path, root):
    cfg = config.load(root / "params" / "demo.yaml", root=tmp_path, overrides={"queries": {"bm25_condition": "A2"}})
    _tiny_outputs(cfg, "01_corpus")
    _tiny_outputs(cfg, "02_induce", 1)
    before = _key03(cfg)
    artifacts.write(cfg, "contexts_a1", pd.DataFrame({"chunk_set": ["A0"], "doc_id": ["d"], "start": [0], "end": [4],
                                                   "context": ["new"]}))
    artifacts.write(cfg, "corpus_funnel", pd.DataFrame({"step": ["read"], "count": [99]}))
    for stage in ("01_corpus", "02_induce"):
        artifacts.write_json_file(artifacts.manifest_path(cfg, stage),
                                  {"key": {}, "outputs": manifests.hash_outputs(cfg, stage)})
    assert _key03(cfg) == before          # 03 reads neither A1's contexts nor the corpus funnel
    artifacts.manifest_path(cfg, "02_induce").unlink()
    with pytest.raises(runner.StageFailed, match="reads the outputs of 02_induce, which has not completed"):
        _key03(cfg)


# ------------------------------------------------------------------------------------------- library hashes

def _rel(paths, pkg):
    return {str(p.relative_to(pkg)) for p in paths}


def test_a_stage_hashes_only_the_modules_its_notebook_imports():
    pkg = ROOT / "lib" / "chunkstudy"
    closures = {n: _rel(codehash.module_closure(p, pkg), pkg) for n, p in NOTEBOOKS.items()}
    assert [n for n, c in closures.items() if "report/figures.py" in c] == ["08_figures"]
    assert [n for n, c in closures.items() if "report/templates/report.html.j2" in c] == ["08_figures"]
    assert {"__init__.py", "config.py", "artifacts.py", "stages.py", "design.py"} <= closures["07_stats"]
    assert not any(f.startswith("llm/") for f in closures["07_stats"]) and "embed.py" not in closures["07_stats"]
    assert "llm/client.py" in closures["03_queries"]    # imported inside a queries function: it still counts
    assert "corpus/build.py" in closures["01_corpus"] and "corpus/__init__.py" in closures["01_corpus"]


def test_a_discover_call_counts_as_importing_every_module_of_its_package(tmp_path):
    """``plugins.discover("chunkstudy.ext", ...)`` imports each module of ``ext`` without an import statement naming
    one: module_closure follows the package's name to all of them (sub-packages included, as discover imports
    them), so an edit of any changes the hash. Any string naming a package of the library counts (a registry's
    ``PACKAGE`` constant as much as the call's argument: more reruns, never a stale one); a name that is no package
    of it adds nothing."""
    pkg = tmp_path / "chunkstudy"
    for name, text in {"__init__.py": "", "plugins.py": "def discover(package, attribute, kind): ...\n",
                       "registry.py": "from . import plugins\nFOUND = plugins.discover('chunkstudy.ext', 'X', object)\n",
                       "other.py": "import runner\nrunner.discover('chunkstudy.nothere')\nname = 'chunkstudy.lost.c.x'\n",
                       "ext/__init__.py": "", "ext/a.py": "X = 1\n", "ext/b.py": "", "ext/sub/__init__.py": "",
                       "lost/__init__.py": "", "lost/c.py": ""}.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    notebook = tmp_path / "nb.py"
    notebook.write_text("from chunkstudy import registry\n")
    assert _rel(codehash.module_closure(notebook, pkg), pkg) == {
        "__init__.py", "plugins.py", "registry.py", "ext/__init__.py", "ext/a.py", "ext/b.py", "ext/sub/__init__.py"}
    notebook.write_text("from chunkstudy import other\n")
    assert _rel(codehash.module_closure(notebook, pkg), pkg) == {"__init__.py", "other.py"}


def test_a_module_the_registry_discovers_is_in_its_stages_closure(tmp_path):
    """The corpus registry finds its loaders by their files (``plugins.discover("chunkstudy.corpus", ...)``), with no
    import statement naming one: a new kind's module is still code 01 runs, so it enters 01's library hash (an edit
    of it reruns 01) and no other stage's."""
    pkg = tmp_path / "chunkstudy"
    shutil.copytree(ROOT / "lib" / "chunkstudy", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    closure = _rel(codehash.module_closure(NOTEBOOKS["01_corpus"], pkg), pkg)
    assert {"corpus/qasper.py", "corpus/mdtext.py", "corpus/loader.py"} <= closure
    before = {n: codehash.library_hash(p, pkg) for n, p in NOTEBOOKS.items()}
    (pkg / "corpus" / "plaintext.py").write_text("LOADER = None\n")
    assert "corpus/plaintext.py" in _rel(codehash.module_closure(NOTEBOOKS["01_corpus"], pkg), pkg)
    after = {n: codehash.library_hash(p, pkg) for n, p in NOTEBOOKS.items()}
    assert [n for n in NOTEBOOKS if before[n] != after[n]] == ["01_corpus"]


def test_every_package_data_file_belongs_to_a_module():
    pkg = ROOT / "lib" / "chunkstudy"
    owned = set().union(*(codehash.module_closure(p, pkg) for p in NOTEBOOKS.values()))
    assert set(codehash.package_data(pkg)) <= owned


def test_editing_figures_reruns_08_alone(tmp_path):
    pkg = tmp_path / "chunkstudy"
    shutil.copytree(ROOT / "lib" / "chunkstudy", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    before = {n: codehash.library_hash(p, pkg) for n, p in NOTEBOOKS.items()}
    (pkg / "report" / "figures.py").write_text((pkg / "report" / "figures.py").read_text() + "\n# an edit\n")
    after = {n: codehash.library_hash(p, pkg) for n, p in NOTEBOOKS.items()}
    assert [n for n in NOTEBOOKS if before[n] != after[n]] == ["08_figures"]
    (pkg / "stages.py").write_text((pkg / "stages.py").read_text() + "\n# an edit\n")
    assert all(codehash.library_hash(p, pkg) != after[n] for n, p in NOTEBOOKS.items())   # every stage imports it


def test_a_module_found_by_its_file_belongs_to_every_stage_that_runs_its_registry(tmp_path):
    """The verdicts are imported by the registry's discovery (plugins.discover on chunkstudy.stats.verdict), not by
    an import statement: each verdict's file is in the closure of every stage whose closure holds the registry, and
    editing one, or adding one, reruns those stages and no other (before, an edit of the calibrated verdict reran
    nothing)."""
    pkg = tmp_path / "chunkstudy"
    shutil.copytree(ROOT / "lib" / "chunkstudy", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    closures = {n: _rel(codehash.module_closure(p, pkg), pkg) for n, p in NOTEBOOKS.items()}
    running = [n for n, c in closures.items() if "stats/verdicts.py" in c]
    assert "07_stats" in running and "08_figures" in running
    files = {f"stats/verdict/{m.name}" for m in (pkg / "stats" / "verdict").glob("*.py")}
    assert {"stats/verdict/calibrated.py", "stats/verdict/tost.py"} <= files
    assert [n for n, c in closures.items() if files <= c] == running
    before = {n: codehash.library_hash(p, pkg) for n, p in NOTEBOOKS.items()}
    calibrated = pkg / "stats" / "verdict" / "calibrated.py"
    calibrated.write_text(calibrated.read_text() + "\n# an edit\n")
    edited = {n: codehash.library_hash(p, pkg) for n, p in NOTEBOOKS.items()}
    assert [n for n in NOTEBOOKS if edited[n] != before[n]] == running
    (pkg / "stats" / "verdict" / "another.py").write_text('"""A verdict added by its file."""\n')
    added = {n: codehash.library_hash(p, pkg) for n, p in NOTEBOOKS.items()}
    assert [n for n in NOTEBOOKS if added[n] != edited[n]] == running


# ------------------------------------------------------------------------------------------- the schema check

def test_schema_check_names_table_column_kind_and_writer():
    ok = pd.DataFrame({"embedder": ["e"], "reranker": ["none"], "condition": ["A2"], "query_id": ["q"],
                       "rank": np.array([1], dtype=np.int64), "chunk_id": ["c"], "score": [0.5], "extra": [object()]})
    stages.check(ok, "runs")
    with pytest.raises(stages.SchemaError, match=r"runs \(here\): missing columns \['score'\].*written by 05_retrieve"):
        stages.check(ok.drop(columns="score"), "runs", where="here")
    with pytest.raises(stages.SchemaError, match=r"runs: column 'rank' holds float64, expected int"):
        stages.check(ok.assign(rank=[1.5]), "runs")
    with pytest.raises(stages.SchemaError, match=r"column 'query_id' holds int64, expected str"):
        stages.check(ok.assign(query_id=[7]), "runs")
    with pytest.raises(stages.SchemaError, match=r"column 'doc_id' holds object \(int values\), expected str"):
        stages.check(ok.assign(doc_id=pd.Series([3], dtype=object)), "runs")   # optional, but of its kind
    stages.check(ok.assign(score=[1]), "runs")                                    # an int passes as a float
    stages.check(ok.assign(rank=pd.Series([np.int64(3)], dtype=object)), "runs")   # ints in an object column
    with pytest.raises(stages.SchemaError, match=r"'rank' holds object \(bool values\), expected int"):
        stages.check(ok.assign(rank=pd.Series([True], dtype=object)), "runs")
    stages.check(ok.drop(columns="score"), "runs", columns=["rank", "chunk_id"])  # only what a function needs


def test_schema_check_kinds_for_lists_bools_and_empty_tables():
    sr = pd.DataFrame({"embedder": ["e"], "reranker": ["none"], "condition": ["A4"], "query_id": ["q"],
                       "section_recall": pd.array([pd.NA], dtype="boolean"), "routed_doc_ids": [np.array(["d"])]})
    stages.check(sr, "section_recall")
    with pytest.raises(stages.SchemaError, match="'routed_doc_ids' holds str, expected list"):
        stages.check(sr.assign(routed_doc_ids=["d"]), "section_recall")
    with pytest.raises(stages.SchemaError, match="'section_recall' holds float64, expected bool"):
        stages.check(sr.assign(section_recall=[0.5]), "section_recall")
    stages.check(pd.DataFrame(columns=stages.columns("placebo_buckets")), "placebo_buckets")  # no values to check
    with pytest.raises(KeyError, match="are not declared columns"):
        stages.check(sr, "section_recall", columns=["nope"])


def test_artifacts_write_applies_the_check(demo_cfg):
    with pytest.raises(artifacts.SchemaError, match="'count' holds str, expected int"):
        artifacts.write(demo_cfg, "corpus_funnel", pd.DataFrame({"step": ["a"], "count": ["7"]}))
    assert not artifacts.exists(demo_cfg, "corpus_funnel")


def test_write_each_writes_every_declared_table_checked_or_none_when_one_is_missing(tmp_path):
    cfg = config.load(ROOT / "params" / "tiny.yaml", root=tmp_path)
    tables = design.prefix_tables()  # the placebo's two, and any a user's kind declares after them
    frames = {t.name: pd.DataFrame(columns=stages.columns(t.name)) for t in tables}
    short = {name: f for name, f in frames.items() if name != "placebo_buckets"}
    with pytest.raises(KeyError, match=r"tables \['placebo_buckets'\] are declared but the stage's outputs hold none"):
        artifacts.write_each(cfg, tables, short)
    assert not any(artifacts.exists(cfg, t.name) for t in tables)  # refused before any write
    written = artifacts.write_each(cfg, tables, frames)
    assert [p.stem for p in written] == [t.name for t in tables]
    assert all(list(artifacts.read(cfg, t.name).columns) == stages.columns(t.name) for t in tables)
    bad = pd.DataFrame({"condition": ["P"], "doc_id": ["d"], "depth": ["x"]})
    with pytest.raises(artifacts.SchemaError, match="placebo: column 'depth' holds str, expected int"):
        artifacts.write_each(cfg, [stages.table("placebo")], {"placebo": bad})  # each table checked as artifacts.write checks it
