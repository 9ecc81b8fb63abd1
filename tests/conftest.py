"""Shared fixtures. Real-data tests take ``shared_data`` and skip with a message when ../shared/data is absent."""

import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests are derandomized by default: a run of ./run_tests.sh depends on no random seed and on no leftover
# .hypothesis/ example database. HYPOTHESIS_PROFILE=explore opts into random exploration (more examples, a seed
# per run, failures shrunk and reported as usual).
settings.register_profile("default", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", derandomize=False, database=None, deadline=None, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# dtype: auto picks bfloat16 only on CPUs with hardware bfloat16 (chunkstudy.models.cpu_features and cpu_vendor):
# the suite sees none, so no result depends on the machine it runs on (kernels started by the runner inherit it);
# the tests of the bfloat16 path set their own flags
os.environ["CHUNKSTUDY_CPU_FEATURES"] = ""
os.environ["CHUNKSTUDY_CPU_VENDOR"] = ""

#: A test of the default suite still running after this many seconds has hung: tests wait on events (a file a
#: stage writes, a process that ends), never on time, so the only bound is this guard (pytest-timeout), far above
#: any test's duration on a loaded machine. Slow tests (real-data runs) have none.
HANG_GUARD_S = 1800


def pytest_collection_modifyitems(config, items):
    if not config.pluginmanager.hasplugin("timeout"):
        return
    for item in items:
        if item.get_closest_marker("slow") is None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(HANG_GUARD_S))


ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("CHUNKSTUDY_SHARED_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data test: {SHARED_DATA} is absent (set CHUNKSTUDY_SHARED_DATA to the mirror folder)")
    return SHARED_DATA


@pytest.fixture
def demo_cfg(tmp_path):
    """The demo parameters with the artifact store rooted in a temporary folder."""
    from chunkstudy import config

    return config.load(ROOT / "params" / "demo.yaml", root=tmp_path)


@pytest.fixture
def run_notebook(tmp_path):
    """Execute ``notebooks/<stem>.py`` the way run_all.sh does (papermill, fresh kernel) against ``cfg``'s store."""
    from chunkstudy import runner

    def run(cfg, stem: str):
        runner.execute(cfg, runner.Stage(stem, ROOT / "notebooks" / f"{stem}.py"), tmp_path / "executed")

    return run


@pytest.fixture
def params_file(tmp_path):
    """Write ``<tmp>/params/<name>.yaml`` = ``base: params/<base>.yaml`` plus section overrides; return its path.
    Notebook tests need a file (the runner hands the notebook a path); plain tests use ``config.load(...,
    overrides=...)``."""
    import yaml

    def write(base: str = "demo", name: str | None = None, **sections) -> Path:
        path = tmp_path / "params" / f"{name or base}.yaml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(yaml.safe_dump({"base": str(ROOT / "params" / f"{base}.yaml"), **sections}))
        return path

    return write


@pytest.fixture(scope="session")
def local_cfg(shared_data):
    """The ``*_local`` parameters reading the real mirror, rooted in a given folder, with corpus overrides."""
    from chunkstudy import config

    def load(name: str, root: Path, **corpus):
        mirror = shared_data / name.split("_")[0]
        return config.load(ROOT / "params" / f"{name}.yaml", root=root,
                           overrides={"corpus": {"mirror": str(mirror), **corpus}})

    return load


def figure_cell(source: str) -> tuple[str, bool] | None:
    """The figure of 08 a notebook cell shows, whatever its call form: ``(name, required)`` when the cell's last
    expression reads ``bundle.figures`` by key (``bundle.figures["fig_x"]``: the figure must be there) or by
    ``.get("fig_x")`` (``fig_multiverse``: shown when the report has it, else the cell shows nothing); None for any
    other cell. The browser test and the executed-08 test check every such cell."""
    import ast

    try:
        body = ast.parse(source).body
    except SyntaxError:
        return None
    if not body or not isinstance(body[-1], ast.Expr):
        return None
    e = body[-1].value

    def figures(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "figures"

    if isinstance(e, ast.Subscript) and figures(e.value) and isinstance(e.slice, ast.Constant):
        return str(e.slice.value), True
    if (isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "get"
            and figures(e.func.value) and e.args and isinstance(e.args[0], ast.Constant)):
        return str(e.args[0].value), False
    return None


def scratch_project(tmp_path_factory, raw: str = "demo_raw") -> Path:
    """A scratch copy of the project: the real notebooks, parameter files and examples, the package and the raw
    corpus ``data/<raw>`` linked in; what the pipeline tests run ``runner.run`` in."""
    return make_project(tmp_path_factory.mktemp("project"), raw)


def make_project(project: Path, raw: str = "demo_raw") -> Path:
    """:func:`scratch_project` in a given (new or empty) folder."""
    project.mkdir(parents=True, exist_ok=True)
    (project / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (project / "lib").symlink_to(ROOT / "lib", target_is_directory=True)
    (project / "data").mkdir()
    (project / "data" / raw).symlink_to(ROOT / "data" / raw, target_is_directory=True)
    for folder in ("notebooks", "params", "examples"):
        shutil.copytree(ROOT / folder, project / folder)
    return project


def seed_embeddings(source: Path, corpus: str, project: Path, into: str) -> None:
    """Copy corpus ``corpus``'s embedding store of the finished project ``source`` into corpus ``into``'s store of
    ``project``. The store is content-keyed (model key and text digest, docs/models.md "The embedding store"), so a
    run reads the vectors of texts ``source`` embedded with the same model and embeds only the new ones: what a
    user's second corpus over the same documents pays. Tables do not depend on it (tests/golden/*.json)."""
    cache = project / "data" / into / "cache"
    cache.mkdir(parents=True)
    shutil.copytree(source / "data" / corpus / "cache" / "embeddings", cache / "embeddings")


def notebooks_in_process(monkeypatch) -> None:
    """Make the runner run each stage's notebook code in this process (``runner.execute`` replaced; the runner's own
    decisions, manifests and servers stay real), with the notebook's parameter file the run's frozen one and the
    working directory the project's; a failing notebook raises ``StageFailed`` as papermill's failed cell does."""
    from chunkstudy import runner

    def execute(cfg, stage, executed_dir):
        code = stage.notebook.read_text().replace('params_file = "params/demo.yaml"',
                                                  f"params_file = {str(cfg.frozen or cfg.path)!r}", 1)
        monkeypatch.chdir(cfg.root)
        try:
            exec(compile(code, str(stage.notebook), "exec"), {})
        except Exception as e:  # as papermill reports a failed cell
            raise runner.StageFailed(f"notebook {stage.notebook.name} failed: {type(e).__name__}: {e}") from None
        return []

    monkeypatch.setattr(runner, "execute", execute)


@pytest.fixture(scope="session")
def tiny_project(tmp_path_factory):
    """A scratch project that has run ``./run_all.sh tiny`` once: (project root, runner results). Once per test
    run, also on several processes: tests/test_pipeline_tiny.py tests it; tests/test_byo_pipeline.py and
    tests/test_beyond_pipeline.py seed their embedding stores from it (:func:`seed_embeddings`). Under pytest-xdist
    the first process to ask builds it in the folder all processes share, holding a lock the others wait on, and
    writes its results beside it; the others read them (docs/testing.md, "On several processes")."""
    from filelock import FileLock

    from chunkstudy import artifacts, runner

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    done = shared / "tiny-project.json"
    with FileLock(str(shared / "tiny-project.lock")):
        if not done.exists():
            shutil.rmtree(shared / "tiny-project", ignore_errors=True)  # a build that failed in another process
            project = make_project(shared / "tiny-project")
            results = runner.run(project / "params" / "tiny.yaml", project, log=lambda *_: None)
            artifacts.write_json_file(done, {"project": str(project), "results": results})
    record = json.loads(done.read_text())
    return Path(record["project"]), [tuple(r) for r in record["results"]]
