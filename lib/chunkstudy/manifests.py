"""Stage manifests: what the runner records when a stage finished (:func:`write_manifest`), the hashes of a
stage's outputs (:func:`hash_outputs`; its folders are :func:`chunkstudy.artifacts.output_dirs`, from the stage's
declaration) and the environment it ran in (:func:`environment`). :mod:`chunkstudy.runner` compares them with
the next run's key to skip a stage; :mod:`chunkstudy.artifacts` reads them back.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any, Mapping

from . import artifacts, config, imported as imported_mod, models, stages


def hash_outputs(cfg: config.Config, stage: str, previous: dict | None = None) -> dict[str, dict]:
    """``{relative path: {sha256, size, mtime_ns}}`` of a stage's outputs (manifest excluded).

    A file whose size and mtime match ``previous`` keeps its recorded hash (hashing large vector files on
    every check would cost seconds).
    """
    return hash_files(cfg, [d for d, _ in artifacts.output_dirs(cfg, stage)], previous)


def hash_files(cfg: config.Config, paths: list[Path], previous: dict | None = None) -> dict[str, dict]:
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


def outputs_digest(manifest: dict) -> str:
    return hashlib.sha256(json.dumps({k: v["sha256"] for k, v in manifest["outputs"].items()},
                                     sort_keys=True).encode()).hexdigest()[:16]


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


def _cpu_model() -> str:
    try:
        name = models.cpuinfo_field(("model name",))
    except OSError:
        name = None
    return name or platform.processor() or platform.machine()


def environment() -> dict:
    """Where a stage ran: Python, platform, CPU model, vendor (``cpu_vendor``: amd, intel, ...) and count, its
    hardware-bfloat16 feature (``cpu_bf16``: amx_bf16, avx512_bf16 on AMD, or None: what ``dtype: auto`` may use,
    :data:`chunkstudy.models.BF16_AUTO_RULES`; ``cpu_bf16_flags``: every bfloat16 flag the CPU has, used by auto or
    not; ``cpu_features_env`` and ``cpu_vendor_env``: ``$CHUNKSTUDY_CPU_FEATURES`` and ``$CHUNKSTUDY_CPU_VENDOR`` when
    they stood in for the CPU's own) and torch's vector capability (AVX2, AVX512 ...),
    GPUs, torch's intra-op thread count and CUDA version, the key package versions, and the git commit of the checkout the library was loaded from (and whether
    its tracked files differed from it; None outside a git checkout). Recorded in every manifest and printed by the
    report."""
    env: dict[str, Any] = {"python": f"{platform.python_implementation()} {platform.python_version()}",
           "platform": platform.platform(), "cpu": _cpu_model(), "cpu_vendor": models.cpu_vendor(),
           "cpu_count": os.cpu_count(),
           "cpu_bf16": models.cpu_bf16_feature(), "cpu_bf16_flags": list(models.cpu_bf16_flags()),
           "cpu_features_env": os.environ.get(models.CPU_FEATURES_ENV),
           "cpu_vendor_env": os.environ.get(models.CPU_VENDOR_ENV),
           "cpu_capability": None,
           "gpus": [], "torch_threads": None, "cuda": None, "packages": imported_mod.versions()}
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


def write_manifest(cfg: config.Config, stage: str, key: dict, seconds: float,
                   sources: list[dict] | None = None, env: dict | None = None,
                   warned: list[str] | None = None, services: list[dict] | None = None,
                   declared: Mapping[str, dict] | None = None, imported: Mapping[str, Any] | None = None,
                   library_files: Mapping[str, str] | None = None) -> dict:
    """Write ``manifest.json`` last, atomically: the key, the outputs' hashes, row counts, seeds, the environment
    (:func:`environment`, or ``env`` when the runner has it), the warnings the stage sent
    (:func:`chunkstudy.progress.warn`; 08 reports them), the frozen parameter copy the stage read (its path,
    sha256 and the digest of every parameter), the content of the JSON outputs declared with ``manifest=True``
    (``records``: how each encoder ran), what the user added (``user_declared``: the digest and names of
    ``conditions.extra`` and ``contrasts.extra``, when any; 01's tells whether they were declared before the run;
    likewise ``multiverse_declared`` and what each verdict beside Holm's records of its declaration: ``declared``,
    record name -> record, :func:`chunkstudy.stats.verdicts.records`, e.g. TOST's ``equivalence_declared``),
    the model servers the stage's calls went to (``services``: URL, model, started or reused, PID, start-up
    seconds, version, command, log; :mod:`chunkstudy.serving`) and, for 01, the fingerprints of its source files.
    ``imported``: what the stage's kernel imported (:func:`chunkstudy.imported.record`), recorded as ``imported``;
    its package versions and Python replace this process's in ``packages`` and ``environment``, and the git state is
    that of the library it imported, so the manifest says what ran, not what the runner assumed.
    What the next run compares to say why a stage reruns (:mod:`chunkstudy.rerun`): ``params_read``, the values of
    the parameters the stage's key digests (:func:`chunkstudy.config.digested`), and ``library_files``, the digest
    of each library file its notebook runs (:func:`chunkstudy.codehash.library_files`).
    Paths are relative to the project."""
    env = env or environment()
    if imported is not None:
        env = _as_imported(env, imported)
    manifest = {
        "stage": stage,
        "corpus": cfg.corpus,
        "params_file": artifacts.project_relative(cfg, cfg.path),
        "key": key,
        "outputs": hash_outputs(cfg, stage),
        "row_counts": _row_counts(cfg, stage),
        "seeds": _seeds(cfg, config.STAGE_SECTIONS.get(stage, ())),
        "params_read": config.digested(cfg.data, config.STAGE_SECTIONS[stage]) if stage in config.STAGE_SECTIONS
        else {},
        "packages": env["packages"],
        "git_commit": env.get("git_commit"),
        "environment": env,
        "seconds": round(seconds, 2),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if library_files is not None:
        manifest["library_files"] = dict(library_files)
    if imported is not None:
        manifest["imported"] = {**imported, **{k: artifacts.project_relative(cfg, imported[k])
                                               for k in ("library", "executable", "venv") if imported.get(k)}}
    if cfg.frozen is not None and cfg.frozen.is_file():
        manifest["params_frozen"] = {"path": artifacts.project_relative(cfg, cfg.frozen),
                                     "sha256": artifacts.file_hash(cfg.frozen), "digest": cfg.digest()}
    user_conditions, user_contrasts = cfg.params("conditions").extra, cfg.params("contrasts").extra
    if user_conditions or user_contrasts:  # what the user added, as this stage saw it (08)
        manifest["user_declared"] = {"digest": config.declaration_digest(cfg.params("conditions"),
                                                                         cfg.params("contrasts")),
                                     "conditions": list(user_conditions), "contrasts": list(user_contrasts)}
    manifest.update(declared or {})  # the verdicts' declarations as this stage saw them: 08 asks whether 01 did
    if cfg.params().multiverse.active:  # the curve's axes as this stage saw them: 08 asks whether 01 saw the same
        manifest["multiverse_declared"] = config.as_dict(cfg.params().multiverse)
    if warned:
        manifest["warnings"] = list(warned)
    if services:
        manifest["services"] = [{**r, "log": artifacts.project_relative(cfg, Path(r["log"])) if r.get("log") else None}
                                for r in services]
    if sources is not None:
        manifest["sources"] = sources
    writes = stages.stage(stage).writes if stage in stages.STAGE_NAMES else ()
    records = {a.name: artifacts.read_json(cfg, stage, a.name) for a in writes
               if isinstance(a, stages.Json) and a.manifest and artifacts.json_path(cfg, stage, a.name).is_file()}
    if records:
        manifest["records"] = records
    artifacts.write_json_file(artifacts.manifest_path(cfg, stage), manifest)
    return manifest


def _as_imported(env: dict, seen: Mapping[str, Any]) -> dict:
    """``env`` with what a stage's kernel reported of itself (``seen``): its interpreter, package versions and the
    git state of the library it imported (looked up again only when that library is not the one ``env`` names)."""
    out = {**env, "python": seen.get("python", env.get("python")), "packages": dict(seen.get("packages") or {})}
    library = Path(seen["library"]) if seen.get("library") else None
    if library is not None and library != Path(__file__).resolve().parent:
        out["git_commit"] = _git_commit(library)
        out["git_dirty"] = _git_dirty(library) if out["git_commit"] else None
    return out


def _seeds(cfg: config.Config, keys: tuple[str, ...]) -> dict:
    """The seeds among the parameters a stage reads: ``{"section.key": value}``."""
    out = {}
    for key, value in cfg.values(keys).items():
        items = value.items() if "." not in key and isinstance(value, dict) else [(key.rpartition(".")[2], value)]
        out.update({f"{key.partition('.')[0]}.{k}": v for k, v in items if "seed" in k})
    return out
