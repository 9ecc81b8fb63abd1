"""Run the numbered notebooks of one corpus with papermill, skipping stages whose inputs did not change.

``./run_all.sh CORPUS [--from NN] [--until NN] [--only NN] [--force]`` calls :func:`main`. A run first takes the
corpus's lock (:func:`corpus_lock`, ``data/CORPUS/run.lock``: one run per corpus at a time; a second one refuses at
once, naming the first's PID and command; a stale lock, left by a run killed outright, is taken over) and freezes
its parameters (:func:`freeze_params`: one resolved copy, ``build/executed/CORPUS/params.frozen.yaml``, that every
key is computed from and every notebook reads, so an edit of the parameter file during the run has no effect on it).
The stages are those of the stage graph (:data:`chunkstudy.stages.STAGES`), each from its notebook
``notebooks/<stage>.py`` (jupytext percent format; :func:`discover` refuses a notebook ``NN_*.py`` the graph does
not declare, and a declared stage whose notebook is missing). For each selected stage, the runner:

1. computes the stage's *key* (:func:`stage_key`) from its declaration (:data:`chunkstudy.stages.STAGES`): the
   digest of the parameters the stage reads (:data:`chunkstudy.config.STAGE_SECTIONS`), the content hashes of the
   files it reads under these parameters (as they are on disk: a table edited by hand after its writer ran is an
   input change, under ``--only`` too), a hash of the library modules its notebook imports
   (:func:`chunkstudy.codehash.library_hash`) and of the notebook itself; for a stage that declares source files
   (01), the path, size and sha256 of every source file it reads
   (:func:`chunkstudy.corpus.build.source_files`), so a replaced archive or an edited ``questions.yaml`` reruns it;
   for one that declares code of the user's (:class:`chunkstudy.stages.UserCode`: 04's chunkers), that code;
2. skips the stage when its manifest holds the same key and every output it recorded is still there unchanged
   (size and mtime, else a fresh content hash) — never "the file exists";
3. otherwise checks that every folder it will clear or write can be written (:func:`check_writable`: a read-only
   folder stops the run, named, before anything is deleted), removes the stage's manifest and old outputs,
   executes the notebook in a fresh kernel with ``params_file`` (the frozen copy) injected, writes the executed
   copy to ``build/executed/CORPUS/`` (and its HTML export beside it, :func:`export_html`), hashes the outputs
   and writes the manifest last (atomically, :func:`chunkstudy.manifests.write_manifest`), with the environment it
   ran in (:func:`chunkstudy.manifests.environment`: package versions, git commit, Python, CPU/GPU, torch
   threads). A run killed midway
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
import hashlib
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from . import artifacts, config, devices, imported, manifests, models, procs, progress, rerun, serving, stages
from .codehash import foreign_library, library_files, library_hash, notebook_hash
from .corpus import build as corpus_build
from .errors import ChunkstudyError
from .runlock import RunLocked, corpus_lock
from .serving.check import problems as serve_problems
from .serving.identities import Identities, IdentityProblem
from .serving.lifecycle import Services
from .stats import verdicts

#: Which earlier stages each stage reads (its inputs are their outputs), from :data:`chunkstudy.stages.STAGES`
#: under any parameters; :func:`stage_key` narrows it to the reads a parameter file switches on.
STAGE_DEPS: dict[str, tuple[str, ...]] = {s: stages.upstream(s) for s in stages.STAGE_NAMES}

class StageFailed(ChunkstudyError, RuntimeError):
    pass


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


@dataclass
class Stage:
    """A declared stage (``name``, of :data:`chunkstudy.stages.STAGE_NAMES`) and the notebook file it runs."""

    name: str
    notebook: Path

    @property
    def number(self) -> str:
        return self.name[:2]

    @property
    def declared(self) -> stages.Stage:
        """The stage's declaration (KeyError naming the declared stages for a name the graph lacks)."""
        return stages.stage(self.name)


#: Where a stage is declared (what the refusal of an undeclared notebook names).
DECLARED_IN = "lib/chunkstudy/stages.py (STAGES; docs/running.md, 'The pipeline')"


def discover(notebooks_dir: Path) -> list[Stage]:
    """The pipeline's stages in run order, one per declaration of :data:`chunkstudy.stages.STAGES`, each with its
    notebook ``notebooks_dir/<stage>.py`` (which :func:`run` requires of the stages it selects: :func:`missing_notebooks`).
    Raises :class:`StageFailed` naming every notebook ``NN_*.py`` in ``notebooks_dir`` that the graph does not
    declare: the runner would not know what it reads, writes or keys on."""
    undeclared = sorted(p.name for p in notebooks_dir.glob("[0-9][0-9]_*.py") if p.stem not in stages.STAGE_NAMES)
    if undeclared:
        raise StageFailed(f"{notebooks_dir}: {', '.join(undeclared)} {'is' if len(undeclared) == 1 else 'are'} no "
                          f"declared stage. Declare each stage in {DECLARED_IN}: its parameters, reads and writes, "
                          f"or rename the file so it does not match NN_*.py. Declared: {', '.join(stages.STAGE_NAMES)}")
    return [Stage(n, notebooks_dir / f"{n}.py") for n in stages.STAGE_NAMES]


def missing_notebooks(selected: list[Stage]) -> str | None:
    """The refusal of a run whose selected stages include one whose notebook is missing (None when every one is
    there), naming the files; checked before the first stage runs."""
    gone = [s for s in selected if not s.notebook.is_file()]
    if not gone:
        return None
    return (f"the notebook of declared stage{'s' * (len(gone) != 1)} {', '.join(s.name for s in gone)} "
            f"{'is' if len(gone) == 1 else 'are'} missing: {', '.join(str(s.notebook) for s in gone)}. Restore "
            f"{'it' if len(gone) == 1 else 'them'} (git checkout notebooks/), or select stages that do not include "
            f"{'it' if len(gone) == 1 else 'them'} (--until NN, --only NN)")


def _input_digest(cfg: config.Config, manifest: dict, name: str) -> tuple[str, bool]:
    """``(digest, as recorded)`` of the files of artifact ``name`` as they are on disk now ("absent" when there are
    none: the reading notebook then fails, naming the table). ``as recorded``: the files are those its writer's
    manifest records, with the same content (a file whose size and mtime match its record keeps the recorded
    hash; any other is hashed). The key holds the content the stage reads, so a table edited by hand after its
    writer ran is an input change, also under ``--only``."""
    where = artifacts.artifact_path(cfg, name)
    rel = str(where.relative_to(cfg.root))
    recorded = {k: v for k, v in manifest["outputs"].items() if k == rel or k.startswith(rel + "/")}
    files = {k: v["sha256"] for k, v in manifests.hash_files(cfg, [where], recorded).items()}
    same = files == {k: v["sha256"] for k, v in recorded.items()}
    if not files:
        return "absent", same
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16], same


def stage_key(cfg: config.Config, stage: Stage, lib_hash: str, changed: list[str] | None = None,
              identities: Identities | None = None) -> dict:
    """The stage's skip key: the digest of the parameters it reads, the content of every file it reads (per
    artifact, as it is on disk: :func:`_input_digest`; a read switched off by the parameters is not an input), the
    library it runs (:func:`~chunkstudy.codehash.library_hash`) and its notebook; for a stage that declares source
    files (:class:`chunkstudy.stages.SourceFiles`: 01), their fingerprints; for one that declares code of the
    user's (:class:`chunkstudy.stages.UserCode`: 04's chunkers), that code (:func:`user_code_sources`, when its
    parameter holds an entry); for a stage whose parameters name a model, its content
    (:func:`chunkstudy.models.stage_sources`); for a stage that reads every earlier manifest (08), those manifests' keys
    and outputs; for one that reads the replication partner's run (:class:`chunkstudy.stages.PartnerRead`: 08's
    contrasts), the outputs of their writer there. ``changed``
    (when given) collects the inputs whose files differ from what their writer's manifest records. ``identities``
    (the run's, :class:`chunkstudy.serving.identities.Identities`) adds the served models the stage uses, each known
    by its answers to the canary set."""
    inputs = {}
    declared = stage.declared
    params = cfg.params()
    done: dict[str, dict] = {}
    for dep in stages.upstream(stage.name, params):
        m = artifacts.read_manifest(cfg, dep)
        if m is None:
            raise StageFailed(f"{stage.name} reads the outputs of {dep}, which has not completed for corpus "
                              f"'{cfg.corpus}' (run {artifacts.run_command(cfg, stage.name)})")
        done[dep] = m
    for name in stages.reads(stage.name, params):
        inputs[name], same = _input_digest(cfg, done[stages.writer(name)], name)
        if not same and changed is not None:
            changed.append(f"{stages.writer(name)}/{name}")
    if declared.manifests:
        for dep, m in done.items():
            inputs[f"{dep}/manifest"] = hashlib.sha256(json.dumps(m["key"], sort_keys=True).encode()).hexdigest()[
                :16] + ":" + manifests.outputs_digest(m)
            if m.get("warnings"):  # the report shows them: a rerun that warned (or stopped warning) reruns 08
                inputs[f"{dep}/manifest"] += ":" + hashlib.sha256(
                    json.dumps(m["warnings"]).encode()).hexdigest()[:16]
    partner = artifacts.partner_config(cfg) if declared.partner else None
    if partner is not None:
        # what the stage reads of the replication partner's run (08: its contrasts): their completion reruns it
        for dep in dict.fromkeys(stages.writer(r.name) for r in declared.partner):
            m = artifacts.read_manifest(partner, dep)
            if m is not None:
                inputs[f"{partner.corpus}/{dep}"] = manifests.outputs_digest(m)
    key: dict[str, Any] = {
        "params_digest": config.stage_digest(cfg, stage.name),
        "inputs": inputs,
        "library": lib_hash,
        "notebook": notebook_hash(stage.notebook),  # its parameters cell's params_file left out: the runner's wins
    }
    if declared.source_files is not None:
        key["sources"] = [{k: f[k] for k in SOURCE_KEY_FIELDS if k in f}
                          for f in source_fingerprints(cfg, stage.name)]
    if declared.user_code is not None and declared.user_code.entries(params):
        key[declared.user_code.key] = user_code_sources(cfg, declared.user_code)
    if used := models.stage_sources(params, declared.params):
        key["models"] = used  # the content of each model folder or hub commit: weights edited in place rerun
    if identities is not None and (served := identities.key_entries(stage)):
        key["models"] = {**key.get("models", {}), **served}  # a served model: its answers to the canary set
    return key


def user_code_sources(cfg: config.Config, code: stages.UserCode) -> dict[str, str | None]:
    """Per entry of ``code.param`` (04: a condition of ``conditions.extra``) whose ``code.field`` names a function
    of the user's own (not a library adapter), the digest of the file it lives in (a ``file.py`` relative to the
    parameter file, or an importable module's: :func:`chunkstudy.chunks.chunkers.source_file`, the resolution of
    a function reference; None when it cannot be found) and of every module of the user's own it imports
    (:func:`chunkstudy.codehash.user_closure`): an edit of that code, or of a helper it imports, reruns the stage,
    as an edit of the package does."""
    from .chunks import chunkers
    from .codehash import files_digest, user_closure

    out = {}
    for name, spec in code.entries(cfg.params()).items():
        ref = getattr(spec, code.field)
        if not chunkers.is_library(ref):
            f = chunkers.source_file(ref, Path(cfg.path).parent)
            out[name] = files_digest(user_closure(f), f.parent) if f is not None else None
    return out


#: What of a source file's fingerprint enters stage 01's key (its mtime only saves re-hashing an unchanged file)
SOURCE_KEY_FIELDS = ("role", "path", "size", "sha256", "missing")


def source_fingerprints(cfg: config.Config, stage: str, previous: list[dict] | None = None) -> list[dict]:
    """Fingerprints (path, size, sha256) of every source file ``stage`` reads (it declares
    :class:`chunkstudy.stages.SourceFiles`: 01, :func:`chunkstudy.corpus.build.source_files`); a file whose size and
    mtime match an entry of ``previous`` (default: the stage's last manifest's) keeps its recorded hash, so a
    multi-GB export is not hashed again."""
    if previous is None:
        m = artifacts.read_manifest(cfg, stage)
        previous = m.get("sources") if m else None
    return corpus_build.fingerprint_sources(cfg, previous if isinstance(previous, list) else None)


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
    dirs = []
    for d, allowed in artifacts.output_dirs(cfg, stage):
        artifacts.inside(d, allowed, f"refusing to delete the outputs of {stage}")
        dirs.append(d)
    check_writable(cfg, dirs, f"{stage} cannot replace its outputs")
    mp = artifacts.manifest_path(cfg, stage)
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
    seen, kept = imported_file(executed_dir, stage.name), False
    seen.unlink(missing_ok=True)
    kernel_env = {"CHUNKSTUDY_ROOT": str(cfg.root), progress.ENV: str(progress_file), progress.STAGE_ENV: stage.name,
                  imported.ENV: str(seen)}
    saved = {k: os.environ.get(k) for k in kernel_env}
    os.environ.update(kernel_env)  # the kernel inherits this process's environment
    kernel_log = executed_dir / f"{stage.name}.kernel.log"
    tail = progress.Tail(progress_file, out=progress_out or sys.stdout)
    try:
        with tail, _stderr_to(kernel_log):
            pm.execute_notebook(str(src), str(out), parameters={"params_file": str(cfg.frozen or cfg.path)},
                                cwd=str(cfg.root), kernel_name="python3", progress_bar=False, log_output=False,
                                report_mode=False, **_kernel_config())
        if not seen.is_file():
            raise StageFailed(f"notebook {stage.notebook.name}: its kernel did not say which chunkstudy it imported "
                              f"(no {seen.name}): the library it ran is not this run's (one too old to report "
                              "it, from another checkout?), so its outputs are not recorded. Check that "
                              ".venv/bin/python imports this checkout's lib/ (scripts/check_editable.sh .venv .)")
        kept = True  # the record stays for what_ran; a failed or stopped stage leaves none behind
        return tail.warnings
    except KeyboardInterrupt:
        _log_orphaned_tasks(kernel_log)
        raise
    except PapermillExecutionError as e:
        raise StageFailed(f"notebook {stage.notebook.name} failed in cell {e.exec_count} (cell index {e.cell_index}):"
                          f" {e.ename}: {e.evalue}\n  executed copy with the traceback: {out}") from None
    except RuntimeError as e:  # the kernel died (papermill's DeadKernelError is a RuntimeError): show why
        raise StageFailed(f"notebook {stage.notebook.name}: {type(e).__name__}: {e}\n  the kernel's own messages "
                          f"(last lines of {kernel_log}):\n{procs.tail(kernel_log, 15)}") from None
    finally:
        for leftover in (src, progress_file) + (() if kept else (seen,)):
            leftover.unlink(missing_ok=True)
        export_html(out)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def imported_file(executed_dir: Path, stage: str) -> Path:
    """Where ``stage``'s kernel writes what it imported (:mod:`chunkstudy.imported`), beside its executed copy."""
    return executed_dir / f".{stage}.imported.json"


def what_ran(executed_dir: Path, stage: str) -> dict:
    """The library and environment ``stage`` ran with: its kernel's record (:func:`imported_file`, read and
    removed), or, for a stage that ran in this process (no kernel wrote one), this process's own. Raises
    :class:`StageFailed` when the kernel imported another chunkstudy than this runner's
    (:func:`chunkstudy.imported.foreign`): the key names this library, so the outputs would be recorded under
    a library that did not make them."""
    path = imported_file(executed_dir, stage)
    seen = imported.read(path) or imported.record("runner")
    path.unlink(missing_ok=True)
    if (why := imported.foreign(seen, stage)) is not None:
        raise StageFailed(why)
    return seen


def _log_orphaned_tasks(kernel_log: Path) -> None:
    """After Ctrl-C or SIGTERM in a notebook: send what asyncio says about the stopped cell's tasks to the kernel log.

    The signal lands while papermill waits in nbclient's event loop, so the running cell's task is left pending.
    papermill's cleanup then runs that loop again to shut the kernel down; when nbclient's kernel-alive poll fires
    meanwhile, the orphaned task ends in ``DeadKernelError``, which nothing awaits. asyncio reports it ("Task
    exception was never retrieved", with a traceback) when the task is garbage-collected: after the runner's own
    message, with the exception that carries the task. The kernel died because the run stopped it, so the report
    goes where the kernel's other shutdown noise goes (``NN_stage.kernel.log``), not into the terminal."""
    from jupyter_core.utils import ensure_event_loop

    def to_kernel_log(loop, context: dict) -> None:
        exc = context.get("exception")
        with open(kernel_log, "a", encoding="utf-8") as f:
            f.write(f"[runner] after the stop, asyncio: {context.get('message')}"
                    f"{f': {type(exc).__name__}: {exc}' if exc is not None else ''}\n")

    ensure_event_loop().set_exception_handler(to_kernel_log)


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


#: The template of the executed notebooks' HTML export: nbconvert's "lab" page with nothing that loads from the
#: network, so build/executed/<corpus>/NN_stage.html opens offline as it does online. Left out: require.js and the
#: widget renderer (the runner's kernels show no widgets: progress goes to the runner's terminal), MathJax (no
#: notebook holds math; a formula a user adds shows as its TeX source) and mermaid.js (no notebook holds a diagram).
#: Figures are embedded as data: URIs by nbconvert itself.
EXECUTED_HTML = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


def export_html(executed: Path) -> Path | None:
    """Export an executed notebook to HTML beside it (``NN_stage.html``: nbconvert's lab page, outputs and figures
    embedded): how Jupyter users share a notebook. The page loads nothing from the network (:data:`EXECUTED_HTML`
    leaves out require.js, MathJax and mermaid, which nbconvert fetches from a CDN), so it opens offline. Runs for a
    failed stage too (its traceback is the point); a failed export is reported on stderr and never fails the
    stage."""
    if not executed.is_file():
        return None
    try:
        import jinja2
        import nbconvert
        import nbformat

        exporter = nbconvert.HTMLExporter(extra_loaders=[jinja2.DictLoader({"executed.html.j2": EXECUTED_HTML})],
                                          template_file="executed.html.j2")
        body, _ = exporter.from_notebook_node(nbformat.read(executed, as_version=4))
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
        only: str | None = None, force: bool = False, log=None, command: str | None = None,
        until: str | None = None) -> list[tuple[str, str, float]]:
    """Run the pipeline; return ``[(stage, "ran" | "skipped", seconds)]``. Raises :class:`StageFailed` (and
    :class:`RunLocked` when another run of the corpus is working), or :class:`Interrupted` on Ctrl-C or SIGTERM; a
    parameter file it refuses raises :class:`chunkstudy.config.ConfigError` before anything runs (a ``corpus.kind``
    no loader declares among them: :func:`chunkstudy.corpus.build.kind_of`).
    ``log`` prints one line per stage (default: stdout, flushed, so the lines stay in order with the progress lines
    of the stage's loops even when the output goes to a file). ``command``: how the run was started, for the lock
    file (default: this process's command line).

    The run holds the corpus's lock (:func:`corpus_lock`) from start to end, and reads one frozen copy of its
    parameters (:func:`freeze_params`), the one every stage key is computed from."""
    log = log or (lambda line: print(line, flush=True))
    if (foreign := foreign_library(root)) is not None:
        raise StageFailed(foreign)
    cfg = config.load(params_file, root=root)
    corpus_build.kind_of(cfg)  # a corpus.kind no loader declares: refused now (params cannot know the loaders)
    selected = discover(notebooks_dir or root / "notebooks")
    if only is not None:
        selected = [s for s in selected if s.number == only.zfill(2)[:2] or s.name == only]
        if not selected:
            raise StageFailed(f"--only {only}: no such stage")
    else:  # --from NN, --until NN: the stages from NN on, up to NN (both ends included)
        selected = [s for s in selected if (start is None or s.number >= start.zfill(2)[:2])
                    and (until is None or s.number <= until.zfill(2)[:2])]
        if not selected:
            given = " ".join(f"--{k} {v}" for k, v in (("from", start), ("until", until)) if v is not None)
            raise StageFailed(f"{given}: no stage in that range")
    if (gone := missing_notebooks(selected)) is not None:
        raise StageFailed(gone)
    try:  # fail before the first stage, not at 04 after hours of model calls in 02 and 03
        devices.require_cuda(cfg, sections={d for s in selected for d in s.declared.devices})
    except devices.CudaUnavailable as e:
        raise StageFailed(str(e)) from None
    names = [s.name for s in selected]
    try:  # models in the local cache, every serve: auto server startable here (docs/servers.md)
        found = serve_problems(cfg, names, artifacts.project_relative(cfg, cfg.path))
    except serving.ServeError as e:
        found = [str(e)]
    if found:
        raise StageFailed("before 01, the run cannot go on:\n  - " + "\n  - ".join(found))
    executed_dir = root / "build" / "executed" / cfg.corpus
    check_writable(cfg, [artifacts.corpus_dir(cfg)], f"corpus '{cfg.corpus}' cannot take its run lock", tree=False)
    with corpus_lock(cfg, command or shlex.join(sys.argv), log=log):
        check_writable(cfg, [executed_dir], f"corpus '{cfg.corpus}' cannot write its executed notebooks",
                       tree=False)
        cfg = freeze_params(cfg)
        try:
            with Services(cfg, names, executed_dir, log, command or shlex.join(sys.argv)) as served:
                return _run_stages(cfg, selected, executed_dir, force, log, served)
        except serving.ServeError as e:
            raise StageFailed(str(e)) from None


def _run_stages(cfg: config.Config, selected: list[Stage], executed_dir: Path, force: bool,
                log, served: Services) -> list[tuple[str, str, float]]:
    results, env = [], None
    identities = Identities(cfg, log)
    for i, stage in enumerate(selected):
        served.after(stage.name, [s.name for s in selected[i:]])  # a server no stage from here on needs stops
        t0 = time.perf_counter()
        changed: list[str] = []
        try:
            key = stage_key(cfg, stage, library_hash(stage.notebook), changed, identities)
        except IdentityProblem as e:
            raise StageFailed(f"before {stage.name}: {e}") from None
        for name in changed:
            log(f"{stage.name:<16} note: {name} differs from what its stage recorded (changed by hand?); "
                f"{stage.name} reads it as it is now, and reruns once {name.split('/')[0]} has rewritten it")
        why = rerun.reason(cfg, stage.name, stage.notebook, key, force)
        if why is None:
            dt = time.perf_counter() - t0
            log(f"{stage.name:<16} skipped  {dt:6.1f} s  (parameters, inputs and library unchanged)")
            results.append((stage.name, "skipped", dt))
            continue
        log(f"{stage.name:<16} running ...  ({why})")
        _clear_outputs(cfg, stage.name)
        served.stage(stage.name)
        try:
            with identities.handed(stage):
                warned = execute(cfg, stage, executed_dir) or []
        except KeyboardInterrupt as e:
            raise Interrupted(stage.name, cfg.corpus, getattr(e, "signum", signal.SIGINT)) from None
        except StageFailed as e:
            # a server that died while the stage ran comes first, with its log's tail: it is the cause, and the
            # stage's error (calls that found no server) its consequence
            why = served.explain(stage.name)
            raise StageFailed(f"{why}\n{stage.name} failed with it: {e}" if why else str(e)) from None
        dt = time.perf_counter() - t0
        sources = None
        declared = stage.declared.source_files
        if declared is not None and "sources" in key:
            # a file downloaded during the run (absent when the key was made) enters the key as it is now; any
            # other change during the run leaves the key as it was, so the next run reruns the stage
            # its recorded JSON (01's stats.json) holds the fingerprints the build just took (the manifest they
            # could come from is gone)
            built = None
            if declared.recorded is not None and artifacts.json_path(cfg, stage.name, declared.recorded).is_file():
                built = artifacts.read_json(cfg, stage.name, declared.recorded).get("sources")
            sources = source_fingerprints(cfg, stage.name, built)
            now = [{k: f[k] for k in SOURCE_KEY_FIELDS if k in f} for f in sources]
            if [f["path"] for f in now] == [f["path"] for f in key["sources"]]:
                key = {**key, "sources": [n if b.get("missing") else b for b, n in zip(key["sources"], now)]}
        key = identities.settled_after(stage, key)  # a served model the stage learnt when it needed it
        seen = what_ran(executed_dir, stage.name)
        env = env or manifests.environment()  # the machine is the same for every stage of this run: looked up once
        manifests.write_manifest(cfg, stage.name, key, dt, sources, env, warned, served.records(stage.name),
                                 verdicts.records(cfg.params("stats")), seen, library_files(stage.notebook))
        log(f"{stage.name:<16} ran      {dt:6.1f} s" + (f"  ({len(warned)} warning{'s' * (len(warned) != 1)}, "
                                                        "in the report)" if warned else ""))
        results.append((stage.name, "ran", dt))
    served.after("", [])
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="run_all.sh", description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", help="a parameter file name in params/ (demo, qasper, wikipedia_fa, *_local) or a path")
    ap.add_argument("--from", dest="start", metavar="NN", help="run stages NN and later (earlier ones must be done)")
    ap.add_argument("--until", metavar="NN", help="run stages up to NN (those already current are skipped)")
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
                      force=args.force, command=command, until=args.until)
    except (StageFailed, RunLocked, config.ConfigError) as e:
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
