"""Run the numbered notebooks of one corpus with papermill, skipping stages whose inputs did not change.

``./run_all.sh CORPUS [--from NN] [--only NN] [--force]`` calls :func:`main`. A run first takes the corpus's lock
(:func:`corpus_lock`, ``data/CORPUS/run.lock``: one run per corpus at a time; a second one refuses at once, naming
the first's PID and command; a stale lock, left by a run killed outright, is taken over) and freezes its parameters
(:func:`freeze_params`: one resolved copy, ``build/executed/CORPUS/params.frozen.yaml``, that every key is computed
from and every notebook reads, so an edit of the parameter file during the run has no effect on it). Then, for each
``notebooks/NN_*.py`` (jupytext percent format), the runner:

1. computes the stage's *key* (:func:`stage_key`) from its declaration (:data:`chunkstudy.stages.STAGES`): the
   digest of the parameters the stage reads (:data:`chunkstudy.config.STAGE_SECTIONS`), the content hashes of the
   files it reads under these parameters (as they are on disk: a table edited by hand after its writer ran is an
   input change, under ``--only`` too), a hash of the library modules its notebook imports (:func:`library_hash`)
   and of the notebook itself; for 01, the path, size and sha256 of every source file it reads
   (:func:`chunkstudy.corpus.build.source_files`), so a replaced archive or an edited ``questions.yaml`` reruns it;
2. skips the stage when its manifest holds the same key and every output it recorded is still there unchanged
   (size and mtime, else a fresh content hash) — never "the file exists";
3. otherwise checks that every folder it will clear or write can be written (:func:`check_writable`: a read-only
   folder stops the run, named, before anything is deleted), removes the stage's manifest and old outputs,
   executes the notebook in a fresh kernel with ``params_file`` (the frozen copy) injected, writes the executed
   copy to ``build/executed/CORPUS/`` (and its HTML export beside it, :func:`export_html`), hashes the outputs
   and writes the manifest last (atomically), with the environment it ran in (:func:`environment`: package
   versions, git commit, Python, CPU/GPU, torch threads). A run killed midway
   leaves no manifest, so the stage reruns; tables are written atomically, so a later stage never reads a
   half-written one. Cleanup deletes only folders strictly inside ``data/<corpus>/`` and ``figures/``. The
   warnings a notebook sends (:func:`chunkstudy.progress.warn`) appear in the runner's output as they come, and
   the manifest records them for the report.

Ctrl-C and SIGTERM stop a run the same way: a message, no manifest for the stage that was running, the lock
released, exit code 130 or 143.

Model calls and embeddings live in ``data/CORPUS/cache/`` which the runner never clears: a rerun of a stage
replays them instead of recomputing.
"""

from __future__ import annotations

import argparse
import ast
import fcntl
import hashlib
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator

from . import artifacts, config, models, progress, stages

#: Which earlier stages each stage reads (its inputs are their outputs), from :data:`chunkstudy.stages.STAGES`
#: under any parameters; :func:`stage_key` narrows it to the reads a parameter file switches on.
STAGE_DEPS: dict[str, tuple[str, ...]] = {s: stages.upstream(s) for s in stages.STAGE_NAMES}

TRACKED_PACKAGES = ("numpy", "pandas", "pyarrow", "scipy", "statsmodels", "faiss-cpu", "torch", "transformers",
                    "sentence-transformers", "mwparserfromhell", "pysbd", "bm25s", "rapidfuzz", "papermill")


class StageFailed(RuntimeError):
    pass


#: Stages whose models may run on CUDA (embedders in 04 and 05, the cross-encoder in 05): when one of them is
#: selected and a parameter asks for CUDA, the runner checks for a device before the first stage starts.
CUDA_STAGES = ("04", "05")


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a job scheduler, a CI timeout), raised in the runner like Ctrl-C's KeyboardInterrupt so
    that a run stops the same clean way; ``signum`` says which signal, the exit code is 128 + it."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _terminate(signum, frame):
    raise Terminated(signum)


def _signal_name(signum: int) -> str:
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) while a stage ran: the stage wrote no manifest (it reruns), and its finished model calls,
    embedding shards and reranker blocks stay in ``data/<corpus>/cache/``, so running the same command again
    resumes. ``signum``: the signal that stopped the run (SIGINT for Ctrl-C)."""

    def __init__(self, stage: str, corpus: str, signum: int = signal.SIGINT):
        super().__init__(stage)
        self.stage, self.corpus, self.signum = stage, corpus, signum

    def __str__(self) -> str:
        how = "interrupted" if self.signum == signal.SIGINT else f"stopped by {_signal_name(self.signum)}"
        return (f"{how} during {self.stage}. Nothing finished is lost: earlier stages are complete, and "
                f"{self.stage}'s finished model calls, embeddings and reranker scores are kept in "
                f"data/{self.corpus}/cache/. Run the same command again (./run_all.sh {self.corpus}) to resume.")


class RunLocked(StageFailed):
    """Another live run holds the corpus's lock (:func:`corpus_lock`)."""


@dataclass
class Stage:
    name: str
    notebook: Path

    @property
    def number(self) -> str:
        return self.name[:2]


def discover(notebooks_dir: Path) -> list[Stage]:
    return [Stage(p.stem, p) for p in sorted(notebooks_dir.glob("[0-9][0-9]_*.py"))]


PACKAGE = "chunkstudy"


def _module_file(pkg: Path, dotted: str) -> Path | None:
    """The source file of module ``chunkstudy.<dotted>`` under ``pkg`` (``""`` = the package; None when the name
    is not a module, e.g. a function imported from one)."""
    parts = [p for p in dotted.split(".") if p]
    if parts and pkg.joinpath(*parts).with_suffix(".py").is_file():
        return pkg.joinpath(*parts).with_suffix(".py")
    init = pkg.joinpath(*parts, "__init__.py")
    return init if init.is_file() else None


def _imported(tree: ast.AST, package: str) -> set[str]:
    """Names of the package that ``tree`` imports anywhere (also inside functions), dotted and relative to the
    package (``"corpus.build"``; ``""`` = the package); ``package`` is the importing module's own package, for
    relative imports. A name that is not a module (``SCHEMA`` of ``from .config import SCHEMA``) is kept too and
    dropped by :func:`_module_file`."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.partition(".")[2] for a in node.names if a.name.split(".")[0] == PACKAGE}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == PACKAGE:
                mod = node.module.partition(".")[2]
            else:
                continue
            out.add(mod)
            out |= {f"{mod}.{a.name}".lstrip(".") for a in node.names}
    return out


def module_closure(notebook: Path, pkg: Path | None = None) -> list[Path]:
    """The package files a notebook's code can run: the modules it imports, the modules those import
    (transitively; every import statement of a module counts, also one inside a function), every package
    ``__init__`` on the way, and the package data a module among them loads (a non-Python file belongs to each
    module with a string constant that names it, outside docstrings: ``TEMPLATE = "report.html.j2"`` of
    ``report_html``). Sorted paths."""
    pkg = pkg or Path(__file__).resolve().parent
    seen: set[Path] = set()
    todo = ["", *_imported(ast.parse(notebook.read_text(encoding="utf-8")), "")]
    while todo:
        dotted = todo.pop()
        path = _module_file(pkg, dotted)
        if path is None or path in seen:
            continue
        seen.add(path)
        parts = dotted.split(".") if dotted else []
        todo += [".".join(parts[:i]) for i in range(len(parts))]  # the packages on the way
        package = dotted if path.name == "__init__.py" else ".".join(parts[:-1])
        todo += _imported(ast.parse(path.read_text(encoding="utf-8")), package)
    named = set().union(*(_strings(p) for p in seen))
    return sorted(seen | {d for d in package_data(pkg)
                          if d.name in named or str(d.relative_to(pkg)) in named})


def _strings(path: Path) -> set[str]:
    """The string constants of a module, docstrings and other bare string statements left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bare = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in bare}


def package_data(pkg: Path | None = None) -> list[Path]:
    """The package's non-Python files (templates and the like)."""
    pkg = pkg or Path(__file__).resolve().parent
    return sorted(p for p in pkg.rglob("*") if p.is_file() and p.suffix not in {".py", ".pyc"}
                  and "__pycache__" not in p.parts)


def library_hash(notebook: Path | None = None, pkg: Path | None = None) -> str:
    """Hash of the package files a stage's notebook can run (:func:`module_closure`): a change to ``figures.py``
    reruns 08 only. Without a notebook, of every source file of the package. ``pkg``: the package folder (default:
    this one)."""
    pkg = pkg or Path(__file__).resolve().parent
    if notebook is None:
        files = sorted(p for p in pkg.rglob("*") if p.suffix in {".py", ".yaml", ".json", ".txt", ".j2"}
                       and "__pycache__" not in p.parts)
    else:
        files = module_closure(notebook, pkg)
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(pkg)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def output_dirs(cfg: config.Config, stage: str) -> list[Path]:
    dirs = [artifacts.stage_dir(cfg, stage)]
    if stage == "08_figures":
        dirs.append(artifacts.figures_dir(cfg))
    return dirs


def _hash_outputs(cfg: config.Config, stage: str, previous: dict | None = None) -> dict[str, dict]:
    """``{relative path: {sha256, size, mtime_ns}}`` of a stage's outputs (manifest excluded).

    A file whose size and mtime match ``previous`` keeps its recorded hash (hashing large vector files on
    every check would cost seconds).
    """
    return _hash_files(cfg, output_dirs(cfg, stage), previous)


def _hash_files(cfg: config.Config, paths: list[Path], previous: dict | None = None) -> dict[str, dict]:
    """``{path relative to the project: {sha256, size, mtime_ns}}`` of the files at ``paths`` (a file, or every
    file under a folder; manifests and hidden files left out), sorted. A file whose size and mtime match its entry
    in ``previous`` keeps the recorded hash; any other is hashed."""
    previous = previous or {}
    out = {}
    for d in paths:
        files = [d] if d.is_file() else sorted(d.rglob("*")) if d.is_dir() else []
        for p in files:
            if not p.is_file() or p.name == "manifest.json" or p.name.startswith("."):
                continue
            rel = str(p.relative_to(cfg.root))
            st = p.stat()
            old = previous.get(rel)
            if old and old["size"] == st.st_size and old["mtime_ns"] == st.st_mtime_ns:
                out[rel] = old
            else:
                out[rel] = {"sha256": artifacts.file_hash(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return out


manifest_path = artifacts.manifest_path
read_manifest = artifacts.read_manifest  # None when absent or malformed (a manifest without outputs reruns)


def _outputs_digest(manifest: dict) -> str:
    return hashlib.sha256(json.dumps({k: v["sha256"] for k, v in manifest["outputs"].items()},
                                     sort_keys=True).encode()).hexdigest()[:16]


def _input_digest(cfg: config.Config, manifest: dict, name: str) -> tuple[str, bool]:
    """``(digest, as recorded)`` of the files of artifact ``name`` as they are on disk now ("absent" when there are
    none: the reading notebook then fails, naming the table). ``as recorded``: the files are those its writer's
    manifest records, with the same content (a file whose size and mtime match its record keeps the recorded
    hash; any other is hashed). The key holds the content the stage reads, so a table edited by hand after its
    writer ran is an input change, also under ``--only``."""
    where = artifacts.artifact_path(cfg, name)
    rel = str(where.relative_to(cfg.root))
    recorded = {k: v for k, v in manifest["outputs"].items() if k == rel or k.startswith(rel + "/")}
    files = {k: v["sha256"] for k, v in _hash_files(cfg, [where], recorded).items()}
    same = files == {k: v["sha256"] for k, v in recorded.items()}
    if not files:
        return "absent", same
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16], same


def stage_key(cfg: config.Config, stage: Stage, lib_hash: str, changed: list[str] | None = None) -> dict:
    """The stage's skip key: the digest of the parameters it reads, the content of every file it reads (per
    artifact, as it is on disk: :func:`_input_digest`; a read switched off by the parameters is not an input), the
    library it runs (:func:`library_hash`) and its notebook; for 01, its source files; for 04, the code of the
    user's chunker functions (:func:`chunker_sources`); for 08, which reads every
    earlier manifest, those manifests' keys and outputs, and the replication partner's contrasts. ``changed``
    (when given) collects the inputs whose files differ from what their writer's manifest records."""
    inputs = {}
    declared = stages.stage(stage.name) if stage.name in stages.STAGE_NAMES else None
    manifests: dict[str, dict] = {}
    for dep in stages.upstream(stage.name, cfg.data) if declared else ():
        m = read_manifest(cfg, dep)
        if m is None:
            raise StageFailed(f"{stage.name} reads the outputs of {dep}, which has not completed for corpus "
                              f"'{cfg.corpus}' (run ./run_all.sh {cfg.corpus} --only {dep[:2]})")
        manifests[dep] = m
    for name in stages.reads(stage.name, cfg.data) if declared else ():
        inputs[name], same = _input_digest(cfg, manifests[stages.writer(name)], name)
        if not same and changed is not None:
            changed.append(f"{stages.writer(name)}/{name}")
    if declared is not None and declared.manifests:
        for dep, m in manifests.items():
            inputs[f"{dep}/manifest"] = hashlib.sha256(json.dumps(m["key"], sort_keys=True).encode()).hexdigest()[
                :16] + ":" + _outputs_digest(m)
            if m.get("warnings"):  # the report shows them: a rerun that warned (or stopped warning) reruns 08
                inputs[f"{dep}/manifest"] += ":" + hashlib.sha256(
                    json.dumps(m["warnings"]).encode()).hexdigest()[:16]
    if stage.name == "08_figures":
        # the replication table reads the partner corpus's contrasts: its completion reruns 08 here
        partner = artifacts.partner_config(cfg)
        m = read_manifest(partner, "07_stats") if partner is not None else None
        if partner is not None and m is not None:
            inputs[f"{partner.corpus}/07_stats"] = _outputs_digest(m)
    params = (config.stage_digest(cfg, stage.name) if stage.name in config.STAGE_SECTIONS else cfg.digest())
    key: dict[str, Any] = {
        "params_digest": params,
        "inputs": inputs,
        "library": lib_hash,
        "notebook": artifacts.file_hash(stage.notebook)[:16],
    }
    if stage.name == "01_corpus":
        key["sources"] = [{k: f[k] for k in SOURCE_KEY_FIELDS if k in f} for f in source_fingerprints(cfg)]
    if stage.name == "04_chunk_embed" and cfg.params("conditions").extra:
        key["chunker_sources"] = chunker_sources(cfg)
    return key


def chunker_sources(cfg: config.Config) -> dict[str, str | None]:
    """Per user condition (``conditions.extra``) whose chunker is the user's own function, the sha256 of the file
    it lives in (:func:`chunkstudy.chunks.chunkers.source_file`; None when it cannot be found): an edit of that code
    reruns 04, as an edit of the package does."""
    from .chunks import chunkers

    out = {}
    for name, spec in cfg.params("conditions").extra.items():
        if not chunkers.is_library(spec.chunker):
            f = chunkers.source_file(spec.chunker, Path(cfg.path).parent)
            out[name] = artifacts.file_hash(f)[:16] if f is not None else None
    return out


#: What of a source file's fingerprint enters stage 01's key (its mtime only saves re-hashing an unchanged file)
SOURCE_KEY_FIELDS = ("role", "path", "size", "sha256", "missing")


def source_fingerprints(cfg: config.Config, previous: list[dict] | None = None) -> list[dict]:
    """Fingerprints (path, size, sha256) of every file stage 01 reads (:func:`chunkstudy.corpus.build.source_files`);
    a file whose size and mtime match an entry of ``previous`` (default: the last 01 manifest's) keeps its recorded
    hash, so a multi-GB export is not hashed again."""
    from .corpus import build

    if previous is None:
        m = read_manifest(cfg, "01_corpus")
        previous = m.get("sources") if m else None
    return build.fingerprint_sources(cfg, previous if isinstance(previous, list) else None)


def is_current(cfg: config.Config, stage: Stage, key: dict) -> bool:
    m = read_manifest(cfg, stage.name)
    if m is None or m.get("key") != key:
        return False
    now = _hash_outputs(cfg, stage.name, m["outputs"])
    return {k: v["sha256"] for k, v in now.items()} == {k: v["sha256"] for k, v in m["outputs"].items()}


def _git_commit(root: Path) -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _git_dirty(root: Path) -> bool | None:
    """True when tracked files differ from the commit (the recorded commit alone would not reproduce the run)."""
    try:
        r = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(r.stdout.strip()) if r.returncode == 0 else None


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in TRACKED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict:
    """Where a stage ran: Python, platform, CPU model and count, its hardware-bfloat16 feature (``cpu_bf16``:
    amx_bf16 / avx512_bf16 / None, what ``dtype: auto`` may use; ``cpu_features_env``: ``$CHUNKSTUDY_CPU_FEATURES``
    when it stood in for the CPU's flags) and torch's vector capability (AVX2, AVX512 ...),
    GPUs, torch's intra-op thread count and CUDA version, the key package versions, and the git commit of the checkout the library was loaded from (and whether
    its tracked files differed from it; None outside a git checkout). Recorded in every manifest and printed by the
    report."""
    env: dict[str, Any] = {"python": f"{platform.python_implementation()} {platform.python_version()}",
           "platform": platform.platform(), "cpu": _cpu_model(), "cpu_count": os.cpu_count(),
           "cpu_bf16": models.cpu_bf16_feature(), "cpu_features_env": os.environ.get(models.CPU_FEATURES_ENV),
           "cpu_capability": None,
           "gpus": [], "torch_threads": None, "cuda": None, "packages": _versions()}
    try:
        import torch

        env["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        env["torch_threads"] = torch.get_num_threads()
        env["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            env["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        pass
    code = Path(__file__).resolve().parent  # the code that ran, wherever the data root is
    env["git_commit"] = _git_commit(code)
    env["git_dirty"] = _git_dirty(code) if env["git_commit"] else None
    return env


def _row_counts(cfg: config.Config, stage: str) -> dict[str, int]:
    import pyarrow.parquet as pq

    counts = {}
    d = artifacts.stage_dir(cfg, stage)
    for p in sorted(d.glob("*.parquet")) if d.is_dir() else []:
        counts[p.stem] = pq.ParquetFile(p).metadata.num_rows
    return counts


def write_manifest(cfg: config.Config, stage: Stage, key: dict, seconds: float,
                   sources: list[dict] | None = None, env: dict | None = None,
                   warned: list[str] | None = None) -> dict:
    """Write ``manifest.json`` last, atomically: the key, the outputs' hashes, row counts, seeds, the environment
    (:func:`environment`, or ``env`` when the runner has it), the warnings the stage sent
    (:func:`chunkstudy.progress.warn`; 08 reports them), the frozen parameter copy the stage read (its path,
    sha256 and the digest of every parameter), the content of the JSON outputs declared with ``manifest=True``
    (``records``: how each encoder ran), what the user added (``user_declared``: the digest and names of
    ``conditions.extra`` and ``contrasts.extra``, when any; 01's tells whether they were declared before the run)
    and, for 01, the fingerprints of its source files. Paths are relative to the
    project."""
    env = env or environment()
    manifest = {
        "stage": stage.name,
        "corpus": cfg.corpus,
        "params_file": artifacts.project_relative(cfg, cfg.path),
        "key": key,
        "outputs": _hash_outputs(cfg, stage.name),
        "row_counts": _row_counts(cfg, stage.name),
        "seeds": _seeds(cfg, config.STAGE_SECTIONS.get(stage.name, ())),
        "packages": env["packages"],
        "git_commit": env.get("git_commit"),
        "environment": env,
        "seconds": round(seconds, 2),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if cfg.frozen is not None and cfg.frozen.is_file():
        manifest["params_frozen"] = {"path": artifacts.project_relative(cfg, cfg.frozen),
                                     "sha256": artifacts.file_hash(cfg.frozen), "digest": cfg.digest()}
    user_conditions, user_contrasts = cfg.params("conditions").extra, cfg.params("contrasts").extra
    if user_conditions or user_contrasts:  # what the user added, as this stage saw it (08)
        manifest["user_declared"] = {"digest": config.declaration_digest(cfg.params("conditions"),
                                                                         cfg.params("contrasts")),
                                     "conditions": list(user_conditions), "contrasts": list(user_contrasts)}
    if warned:
        manifest["warnings"] = list(warned)
    if sources is not None:
        manifest["sources"] = sources
    declared = stages.stage(stage.name).writes if stage.name in stages.STAGE_NAMES else ()
    records = {a.name: artifacts.read_json(cfg, stage.name, a.name) for a in declared
               if isinstance(a, stages.Json) and a.manifest and artifacts.json_path(cfg, stage.name, a.name).is_file()}
    if records:
        manifest["records"] = records
    artifacts.write_json_file(manifest_path(cfg, stage.name), manifest)
    return manifest


def _seeds(cfg: config.Config, keys: tuple[str, ...]) -> dict:
    """The seeds among the parameters a stage reads: ``{"section.key": value}``."""
    out = {}
    for key, value in cfg.values(keys).items():
        items = value.items() if "." not in key and isinstance(value, dict) else [(key.rpartition(".")[2], value)]
        out.update({f"{key.partition('.')[0]}.{k}": v for k, v in items if "seed" in k})
    return out


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_writable(cfg: config.Config, folders: list[Path], what: str, tree: bool = True) -> None:
    """Raise :class:`StageFailed` naming the first folder of ``folders`` (or, for one that does not exist yet, the
    folder it would be made in) where this process cannot create a file, before anything is deleted or written.
    With ``tree``, a folder that exists is checked with every folder under it and the one above it (a stage's
    cleanup removes them all). The check creates and removes a hidden file, so it sees what the permission bits
    alone do not (a read-only mount, an immutable folder; root passes every permission bit)."""
    todo: list[Path] = []
    for d in folders:
        if d.is_dir():
            todo += [d.parent, d, *sorted(p for p in d.rglob("*") if p.is_dir())] if tree else [d]
        else:
            todo.append(_nearest_existing(d.parent))
    for d in dict.fromkeys(todo):
        try:
            fd, probe = tempfile.mkstemp(prefix=".writable-", dir=d)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise StageFailed(f"{what}: cannot write in {artifacts.project_relative(cfg, d)} ({e.strerror or e}); "
                              "nothing was deleted or changed. Make the folder writable (or use a copy of the "
                              "project) and run again.") from None


def _clear_outputs(cfg: config.Config, stage: str) -> None:
    """Remove a stage's manifest and output folders, after checking that every one of them can be written
    (:func:`check_writable`: a read-only folder stops the run before anything is deleted). Each folder must lie
    strictly inside ``data/`` or ``figures/`` of the project root (a bad corpus name never reaches here, but a
    deletion is checked anyway)."""
    dirs = output_dirs(cfg, stage)
    for d in dirs:
        allowed = artifacts.corpus_dir(cfg) if d == artifacts.stage_dir(cfg, stage) else artifacts.figures_root(cfg)
        artifacts.inside(d, allowed, f"refusing to delete the outputs of {stage}")
    check_writable(cfg, dirs, f"{stage} cannot replace its outputs")
    mp = manifest_path(cfg, stage)
    if mp.exists():
        mp.unlink()
    for d in dirs:
        if d.is_dir():
            shutil.rmtree(d)


def execute(cfg: config.Config, stage: Stage, executed_dir: Path, progress_out=None) -> list[str]:
    """Execute one notebook with papermill in a fresh kernel (cwd = project root), its ``params_file`` the frozen
    copy of the run's parameters (``cfg.frozen``, :func:`freeze_params`) when there is one, else
    ``cfg.path``. Returns the warnings the notebook sent (:func:`chunkstudy.progress.warn`).

    The kernel's environment names a progress file (:data:`chunkstudy.progress.ENV`) and the stage; while the
    notebook runs, a :class:`chunkstudy.progress.Tail` prints its loops' progress and its warnings to
    ``progress_out`` (default: this process's stdout) — one updating line per long loop with count, rate and ETA,
    then a summary with the time."""
    import jupytext
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    executed_dir.mkdir(parents=True, exist_ok=True)
    nb = jupytext.read(stage.notebook)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    src = executed_dir / f".{stage.name}.input.ipynb"
    jupytext.write(nb, src, fmt="ipynb")
    out = executed_dir / f"{stage.name}.ipynb"
    progress_file = executed_dir / f".{stage.name}.progress.jsonl"
    progress_file.unlink(missing_ok=True)
    kernel_env = {"CHUNKSTUDY_ROOT": str(cfg.root), progress.ENV: str(progress_file), progress.STAGE_ENV: stage.name}
    saved = {k: os.environ.get(k) for k in kernel_env}
    os.environ.update(kernel_env)  # the kernel inherits this process's environment
    kernel_log = executed_dir / f"{stage.name}.kernel.log"
    tail = progress.Tail(progress_file, out=progress_out or sys.stdout)
    try:
        with tail, _stderr_to(kernel_log):
            pm.execute_notebook(str(src), str(out), parameters={"params_file": str(cfg.frozen or cfg.path)},
                                cwd=str(cfg.root), kernel_name="python3", progress_bar=False, log_output=False,
                                report_mode=False, **_kernel_config())
        return tail.warnings
    except PapermillExecutionError as e:
        raise StageFailed(f"notebook {stage.notebook.name} failed in cell {e.exec_count} (cell index {e.cell_index}):"
                          f" {e.ename}: {e.evalue}\n  executed copy with the traceback: {out}") from None
    except RuntimeError as e:  # the kernel died (papermill's DeadKernelError is a RuntimeError): show why
        raise StageFailed(f"notebook {stage.notebook.name}: {type(e).__name__}: {e}\n  the kernel's own messages "
                          f"(last lines of {kernel_log}):\n{_tail_lines(kernel_log)}") from None
    finally:
        src.unlink(missing_ok=True)
        progress_file.unlink(missing_ok=True)
        export_html(out)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` while a notebook runs, so the kernel (which inherits it) logs there and
    not into the runner's terminal: ipykernel's shutdown noise after Ctrl-C, library warnings at import. The
    notebook's own output is in the executed copy; this log keeps the rest (``NN_stage.kernel.log``)."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def _tail_lines(path: Path, n: int = 15) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "    (no kernel log)"
    return "\n".join("    " + line for line in lines[-n:]) or "    (empty)"


def export_html(executed: Path) -> Path | None:
    """Export an executed notebook to HTML beside it (``NN_stage.html``, nbconvert's standard template, outputs and
    figures embedded): how Jupyter users share a notebook. Runs for a failed stage too (its traceback is the
    point); a failed export is reported on stderr and never fails the stage."""
    if not executed.is_file():
        return None
    try:
        import nbconvert
        import nbformat

        body, _ = nbconvert.HTMLExporter().from_notebook_node(nbformat.read(executed, as_version=4))
        target = executed.with_suffix(".html")
        with artifacts.atomic_path(target) as tmp:
            tmp.write_text(body, encoding="utf-8")
        return target
    except Exception as e:  # the executed .ipynb is the record; its HTML copy is a convenience
        print(f"run_all: could not export {executed} to HTML: {type(e).__name__}: {e}", file=sys.stderr)
        return None


def _kernel_config() -> dict:
    """Let the kernel manager provision CurveZMQ keys when the kernel declares support (ipykernel does): the kernel
    then talks to the runner encrypted and does not print "Kernel is running over TCP without encryption" into
    every stage's output. Older jupyter_client, or a libzmq without CURVE, keep their default."""
    import zmq
    from jupyter_client.manager import KernelManager
    from traitlets.config import Config

    if "transport_encryption" not in KernelManager.class_trait_names() or not zmq.has("curve"):
        return {}
    return {"config": Config({"KernelManager": {"transport_encryption": "auto"}})}


# --------------------------------------------------------------------------------------- one run per corpus

#: The lock file of a corpus's run, in ``data/<corpus>/``.
LOCK_NAME = "run.lock"


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (field 22 of ``/proc/<pid>/stat``, clock ticks after boot), or None when no
    such process runs (a zombie counts as ended). Where ``/proc`` is absent: ``"?"`` for any live process."""
    stat = Path(f"/proc/{pid}/stat")
    if not Path("/proc/self/stat").is_file():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "?"
    try:
        raw = stat.read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # the command name (field 2) may hold spaces and parentheses
    return None if fields[0] in ("Z", "X") else fields[19]


def _lock_holder(path: Path) -> dict | None:
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) and isinstance(holder.get("pid"), int) else None


def _holder_alive(holder: dict | None) -> bool:
    """Whether the run a lock file names still runs: its PID exists and started when the lock says (a PID that
    was reused by another process since is no run of ours)."""
    if not holder:
        return False
    start = _process_start(holder["pid"])
    return start is not None and (start == "?" or start == str(holder.get("process_start")))


def _describe(holder: dict) -> str:
    return (f"PID {holder['pid']} ({holder.get('command') or 'command unknown'}, started "
            f"{holder.get('started') or '?'}{', on ' + holder['host'] if holder.get('host') else ''})")


@contextmanager
def corpus_lock(cfg: config.Config, command: str, log=None) -> Iterator[dict | None]:
    """Hold ``data/<corpus>/run.lock`` while a run of the corpus works: one run per corpus at a time, since two
    runs would write the same stage folders and caches. Runs of different corpora do not meet.

    The file holds the run's PID, the process's start time (``/proc/<pid>/stat``), the wall-clock start, the
    host and the command; an exclusive ``flock`` on it is held while the run lives. A second run refuses at once
    (:class:`RunLocked`), naming the first run's PID and command. The lock is released (the file removed) when the
    run ends in any way Python sees: success, failure, Ctrl-C, SIGTERM. A run killed outright (SIGKILL, a crash of
    the machine) leaves the file behind, *stale*: the kernel dropped its flock, and its PID is dead or belongs to a
    process that started at another time. The next run takes a stale lock over and says so (through ``log``).
    Yields the stale holder it took over, or None."""
    log = log or (lambda line: print(line, flush=True))
    path = artifacts.corpus_dir(cfg) / LOCK_NAME
    check_writable(cfg, [path.parent], f"corpus '{cfg.corpus}' cannot take its run lock", tree=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _lock_holder(path)
            raise RunLocked(f"corpus '{cfg.corpus}' is being run by {_describe(holder) if holder else 'another run'}; "
                            f"this run stops before touching anything. Wait for that run to end, or stop it "
                            f"(Ctrl-C in its terminal, or kill {holder['pid'] if holder else '<PID>'}), and run again "
                            f"(lock: {artifacts.project_relative(cfg, path)})") from None
        try:  # the previous holder may have removed the file between our open and our flock: lock the new one
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        holder = _lock_holder(path)
        if holder and holder["pid"] != os.getpid() and _holder_alive(holder):
            # a live run that holds no flock: a file system without flock (some network mounts); still one run
            raise RunLocked(f"corpus '{cfg.corpus}' is being run by {_describe(holder)}; this run stops before "
                            f"touching anything (lock: {artifacts.project_relative(cfg, path)})")
        stale = holder if holder and holder["pid"] != os.getpid() else None
        if stale:
            log(f"run_all: took over the stale lock of {_describe(stale)}, which no longer runs")
        record = {"pid": os.getpid(), "process_start": _process_start(os.getpid()), "host": platform.node(),
                  "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": command}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        raise
    try:
        yield stale
    finally:
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                path.unlink()
        except OSError:
            pass
        os.close(fd)  # drops the flock


#: Where a run keeps the frozen copy of its parameters (:func:`chunkstudy.config.frozen_yaml`), under the project.
FROZEN_PARAMS = "build/executed/{corpus}/params.frozen.yaml"


def freeze_params(cfg: config.Config) -> config.Config:
    """Freeze ``cfg`` for one run: write its resolved parameters to :data:`FROZEN_PARAMS` and load them back. The
    runner computes every stage's key from the returned config and hands its frozen file to every notebook, so the
    tables a run writes come from the parameters its keys name, even when the user's file is edited while the run
    works. Fails when the copy does not read back to the same parameters."""
    target = cfg.root / FROZEN_PARAMS.format(corpus=cfg.corpus)
    with artifacts.atomic_path(target) as tmp:
        tmp.write_text(config.frozen_yaml(cfg), encoding="utf-8")
    frozen = config.load(target, root=cfg.root)
    if frozen.data != cfg.data or frozen.path != cfg.path:
        raise StageFailed(f"{cfg.path}: the frozen copy {target} does not read back to the same parameters")
    return frozen


def run(params_file: Path, root: Path, notebooks_dir: Path | None = None, start: str | None = None,
        only: str | None = None, force: bool = False, log=None, command: str | None = None
        ) -> list[tuple[str, str, float]]:
    """Run the pipeline; return ``[(stage, "ran" | "skipped", seconds)]``. Raises :class:`StageFailed` (and
    :class:`RunLocked` when another run of the corpus is working), or :class:`Interrupted` on Ctrl-C or SIGTERM.
    ``log`` prints one line per stage (default: stdout, flushed, so the lines stay in order with the progress lines
    of the stage's loops even when the output goes to a file). ``command``: how the run was started, for the lock
    file (default: this process's command line).

    The run holds the corpus's lock (:func:`corpus_lock`) from start to end, and reads one frozen copy of its
    parameters (:func:`freeze_params`), the one every stage key is computed from."""
    log = log or (lambda line: print(line, flush=True))
    cfg = config.load(params_file, root=root)
    selected = discover(notebooks_dir or root / "notebooks")
    if not selected:
        raise StageFailed(f"no notebooks NN_*.py in {notebooks_dir or root / 'notebooks'}")
    if only is not None:
        selected = [s for s in selected if s.number == only.zfill(2)[:2] or s.name == only]
        if not selected:
            raise StageFailed(f"--only {only}: no such stage")
    elif start is not None:
        selected = [s for s in selected if s.number >= start.zfill(2)[:2]]
    if any(s.number in CUDA_STAGES for s in selected):
        from . import gpu

        try:  # fail before the first stage, not at 04 after hours of model calls in 02 and 03
            gpu.require_cuda(cfg)
        except gpu.CudaUnavailable as e:
            raise StageFailed(str(e)) from None
    executed_dir = root / "build" / "executed" / cfg.corpus
    with corpus_lock(cfg, command or shlex.join(sys.argv), log=log):
        check_writable(cfg, [executed_dir], f"corpus '{cfg.corpus}' cannot write its executed notebooks",
                       tree=False)
        cfg = freeze_params(cfg)
        return _run_stages(cfg, selected, executed_dir, force, log)


def _run_stages(cfg: config.Config, selected: list[Stage], executed_dir: Path, force: bool,
                log) -> list[tuple[str, str, float]]:
    results, env = [], None
    for stage in selected:
        t0 = time.perf_counter()
        changed: list[str] = []
        key = stage_key(cfg, stage, library_hash(stage.notebook), changed)
        for name in changed:
            log(f"{stage.name:<16} note: {name} differs from what its stage recorded (changed by hand?); "
                f"{stage.name} reads it as it is now, and reruns once {name.split('/')[0]} has rewritten it")
        if not force and is_current(cfg, stage, key):
            dt = time.perf_counter() - t0
            log(f"{stage.name:<16} skipped  {dt:6.1f} s  (parameters, inputs and library unchanged)")
            results.append((stage.name, "skipped", dt))
            continue
        log(f"{stage.name:<16} running ...")
        _clear_outputs(cfg, stage.name)
        try:
            warned = execute(cfg, stage, executed_dir) or []
        except KeyboardInterrupt as e:
            raise Interrupted(stage.name, cfg.corpus, getattr(e, "signum", signal.SIGINT)) from None
        dt = time.perf_counter() - t0
        sources = None
        if "sources" in key:
            # a file downloaded during the run (absent when the key was made) enters the key as it is now; any
            # other change during the run leaves the key as it was, so the next run reruns 01
            # 01's stats.json holds the fingerprints the build just took (the manifest they could come from is gone)
            stats_file = artifacts.json_path(cfg, "01_corpus", "stats")
            built = json.loads(stats_file.read_text()).get("sources") if stats_file.is_file() else None
            sources = source_fingerprints(cfg, built)
            now = [{k: f[k] for k in SOURCE_KEY_FIELDS if k in f} for f in sources]
            if [f["path"] for f in now] == [f["path"] for f in key["sources"]]:
                key = {**key, "sources": [n if b.get("missing") else b for b, n in zip(key["sources"], now)]}
        env = env or environment()  # the same for every stage of this run: git, versions, devices looked up once
        write_manifest(cfg, stage, key, dt, sources, env, warned)
        log(f"{stage.name:<16} ran      {dt:6.1f} s" + (f"  ({len(warned)} warning{'s' * (len(warned) != 1)}, "
                                                        "in the report)" if warned else ""))
        results.append((stage.name, "ran", dt))
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="run_all.sh", description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", help="a parameter file name in params/ (demo, qasper, wikipedia_fa, *_local) or a path")
    ap.add_argument("--from", dest="start", metavar="NN", help="run stages NN and later (earlier ones must be done)")
    ap.add_argument("--only", metavar="NN", help="run stage NN alone")
    ap.add_argument("--force", action="store_true", help="rerun the selected stages even if nothing changed")
    ap.add_argument("--root", type=Path, default=Path.cwd(), help="project root (default: the current folder)")
    ap.add_argument("--notebooks", type=Path, default=None, help="notebooks folder (default: ROOT/notebooks)")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    p = Path(args.corpus)
    params_file = p if p.suffix in {".yaml", ".yml"} else root / "params" / f"{args.corpus}.yaml"
    command = "./run_all.sh " + shlex.join(sys.argv[1:] if argv is None else argv)
    t0 = time.perf_counter()
    # SIGTERM stops a run the way Ctrl-C does (a message, no manifest for the stage, the lock released, exit 143)
    previous = signal.getsignal(signal.SIGTERM)
    if previous != signal.SIG_IGN:  # a SIGTERM ignored by whoever started the run stays ignored
        signal.signal(signal.SIGTERM, _terminate)
    try:
        results = run(params_file, root, notebooks_dir=args.notebooks, start=args.start, only=args.only,
                      force=args.force, command=command)
    except (StageFailed, config.ConfigError) as e:
        print(f"run_all: FAILED: {e}", file=sys.stderr)
        return 1
    except Interrupted as e:
        print(f"\nrun_all: {e}", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt as e:
        signum = getattr(e, "signum", signal.SIGINT)
        print(f"\nrun_all: {'interrupted' if signum == signal.SIGINT else 'stopped by ' + _signal_name(signum)} "
              "between stages; run the same command again to resume.", file=sys.stderr)
        return 128 + signum
    except OSError as e:  # e.g. a folder the run cannot write: the message names the file
        print(f"run_all: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    ran = sum(1 for _, status, _ in results if status == "ran")
    print(f"run_all: {len(results)} stages ({ran} ran, {len(results) - ran} skipped) in "
          f"{time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
