"""The artifact store: where every table lives, schema-checked atomic reads and writes, stage manifests.

This is the only module that touches paths. Layout (docs/design.md, "Data contracts")::

    data/<corpus>/<NN_stage>/<table>.parquet      tables
    data/<corpus>/<NN_stage>/<name>.json          small JSON facts (funnels, stats)
    data/<corpus>/<NN_stage>/<name>.npy           arrays (vectors)
    data/<corpus>/<NN_stage>/manifest.json        written by the runner after the stage succeeded
    figures/<corpus>/                             written by 08_figures

Every write goes to a temporary file in the same folder and is renamed into place, so an interrupted stage never
leaves a half-written table for a later stage to read.

**A notebook run in JupyterLab writes to its own place.** A Jupyter kernel that the runner did not start
(:func:`interactive`: JupyterLab names the notebook in ``JPY_SESSION_NAME``, the runner's kernels carry
:data:`chunkstudy.progress.STAGE_ENV`) writes its stage outputs under :data:`LAB_DIR` in the same layout
(``build/lab/data/<corpus>/06_metrics/scores.parquet``, ``build/lab/figures/<corpus>/report.md``), never into the
run's ``data/`` and ``figures/``: running a notebook there cannot change what ``./run_all.sh`` skips or rereads.
It reads the run's files, and reads back what it wrote itself in that session (:func:`place`). The caches
(``data/<corpus>/cache/``: model calls, embeddings) are shared: they are keyed by content and no stage's key.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd

from . import progress, stages
from .config import Config
from .stages import SchemaError  # noqa: F401 - re-exported: artifacts.SchemaError is what a bad table raises
from .errors import ChunkstudyError

#: table name -> (stage folder, required columns), from the stage declarations (:data:`chunkstudy.stages.STAGES`;
#: each table's columns and their kinds are there). Extra columns are allowed.
TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    name: (stages.writer(name), t.contract) for name, t in stages.tables().items()}

STAGES: tuple[str, ...] = stages.STAGE_NAMES


class PathError(ChunkstudyError, ValueError):
    """A path built from parameters or data would leave the folder it belongs in (the message names both)."""


def inside(path: Path, root: Path, what: str) -> Path:
    """``path`` resolved, after checking that it lies strictly inside ``root`` (resolved too: a ``data/`` that is
    a link to a larger disk is fine); raises :class:`PathError` naming ``what`` otherwise."""
    p, r = Path(path).resolve(), Path(root).resolve()
    if p == r or r not in p.parents:
        raise PathError(f"{what}: {p} is not inside {r}")
    return p


def set_aside(path: Path) -> Path:
    """Rename a damaged cache file to ``<name>.bad`` (``.bad1``, ``.bad2``, ... when taken), never deleting it;
    returns the new path. The caches repair themselves this way and recompute what the file held."""
    path = Path(path)
    dest, n = path.with_name(path.name + ".bad"), 0
    while dest.exists():
        n += 1
        dest = path.with_name(f"{path.name}.bad{n}")
    os.replace(path, dest)
    return dest


#: Where an interactive notebook run (:func:`interactive`) writes: the project's layout below this folder.
LAB_DIR = "build/lab"
#: What this process wrote under :data:`LAB_DIR`: read back from there, as a notebook reads its own outputs.
_written: set[Path] = set()


def interactive() -> bool:
    """Whether this process is a Jupyter kernel the runner did not start (JupyterLab's: ``JPY_SESSION_NAME`` names
    its notebook; the runner's kernels carry :data:`chunkstudy.progress.STAGE_ENV`). Its writes go to
    :data:`LAB_DIR` (module docstring)."""
    return bool(os.environ.get("JPY_SESSION_NAME")) and not os.environ.get(progress.STAGE_ENV)


def place(cfg: Config, path: Path, write: bool = False) -> Path:
    """Where a stage output at ``path`` (under ``data/`` or a declared output folder such as ``figures/``) is
    written or read by this process: ``path`` itself, but in an :func:`interactive` session its twin under
    :data:`LAB_DIR`, for a write, and for a read of a file this session wrote there."""
    if not interactive():
        return path
    for top in ("data", *sorted({f.root for s in STAGES for f in stages.stage(s).folders})):
        base = (cfg.root / top).resolve()
        if path == base or base in path.parents:
            twin = cfg.root / LAB_DIR / top / path.relative_to(base)
            break
    else:
        return path
    if write:
        if not _written:
            print(f"chunkstudy: this notebook runs outside ./run_all.sh, so it writes under {LAB_DIR}/ (here: "
                  f"{project_relative(cfg, twin)}); the run's data/ and figures/ stay as the runner left them "
                  "(docs/jupyterlab.md)", file=sys.stderr)
        _written.add(twin)
        return twin
    return twin if twin in _written and twin.exists() else path


def data_root(cfg: Config) -> Path:
    return cfg.root / "data"


def corpus_dir(cfg: Config) -> Path:
    """``data/<corpus>/``: every stage folder and the caches of one corpus."""
    return inside(data_root(cfg) / cfg.corpus, data_root(cfg), f"data folder of corpus {cfg.corpus!r}")


def stage_dir(cfg: Config, stage: str) -> Path:
    if stage not in STAGES:
        raise KeyError(f"unknown stage {stage!r}; stages: {list(STAGES)}")
    return inside(corpus_dir(cfg) / stage, corpus_dir(cfg), f"stage folder {stage!r}")


def figures_dir(cfg: Config) -> Path:
    """``figures/<corpus>/`` (:data:`chunkstudy.stages.FIGURES`)."""
    return folder_dir(cfg, stages.FIGURES)


def folder_dir(cfg: Config, folder: stages.Folder) -> Path:
    """``<root>/<corpus>/`` of a declared output folder (:class:`chunkstudy.stages.Folder`; 08's ``figures/``)."""
    top = cfg.root / folder.root
    return inside(top / cfg.corpus, top, f"{folder.root} folder of corpus {cfg.corpus!r}")


def output_dirs(cfg: Config, stage: str) -> list[tuple[Path, Path]]:
    """``[(folder, the folder it must lie strictly inside)]`` of everything ``stage`` writes: its data folder
    (inside ``data/<corpus>/``) and the output folders it declares (:attr:`chunkstudy.stages.Stage.folders`)."""
    out = [(stage_dir(cfg, stage), corpus_dir(cfg))]
    return out + [(folder_dir(cfg, f), cfg.root / f.root) for f in stages.stage(stage).folders]


#: The folder of 08's Markdown and LaTeX tables, relative to ``figures/<corpus>/``.
REPORT_TABLES = "tables"


def report_table(name: str, fmt: str) -> str:
    """Where 08 writes table ``name`` as ``fmt`` (``md`` or ``tex``), relative to ``figures/<corpus>/`` (the path
    :func:`write_text` takes and the link ``report.md`` prints): ``tables/<name>.<fmt>``."""
    return f"{REPORT_TABLES}/{name}.{fmt}"


def project_relative(cfg: Config, path: str | Path) -> str:
    """``path`` as reports and manifests show it: relative to the project root (``params/demo.yaml``,
    ``../shared/data/qasper/x.tgz``), so no machine's absolute paths end up in a shared result."""
    p = Path(path)
    if not p.is_absolute():
        return str(p)
    return os.path.relpath(p.resolve(), cfg.root.resolve())


def write_figure(cfg: Config, name: str, fig: Any) -> list[Path]:
    """Save a matplotlib figure as ``figures/<corpus>/<name>.<fmt>`` for every ``figures.formats`` (atomic)."""
    paths = []
    for fmt in cfg.params("figures").formats:
        path = place(cfg, inside(figures_dir(cfg) / f"{name}.{fmt}", figures_dir(cfg), f"figure {name!r}"), True)
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=cfg.params("figures").dpi)
        paths.append(path)
    return paths


def write_text(cfg: Config, relpath: str, text: str) -> Path:
    """Write a text file under ``figures/<corpus>/`` (e.g. ``report.md``, ``tables/table1.tex``), atomically."""
    path = place(cfg, inside(figures_dir(cfg) / relpath, figures_dir(cfg), f"report file {relpath!r}"), True)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def partner_config(cfg: Config) -> Config | None:
    """The Config of the corpus named by ``figures.replicate_with`` (a params file relative to this one), rooted
    in the same project root; None when unset. Raises ConfigError when the file is named but absent."""
    other = cfg.params("figures").replicate_with
    if not other:
        return None
    from .config import load
    return load(cfg.resolve(other), root=cfg.root)


def cache_dir(cfg: Config, name: str, create: bool = True) -> Path:
    """A persistent cache folder (model calls, embeddings, downloads) that survives stage reruns."""
    p = inside(corpus_dir(cfg) / "cache" / name, corpus_dir(cfg) / "cache", f"cache folder {name!r}")
    if create:
        p.mkdir(parents=True, exist_ok=True)
    return p


def table_path(cfg: Config, table: str) -> Path:
    if table not in TABLES:
        raise KeyError(f"unknown table {table!r}; known tables: {sorted(TABLES)}")
    return stage_dir(cfg, TABLES[table][0]) / f"{table}.parquet"


def check_schema(df: pd.DataFrame, table: str, where: str = "") -> None:
    """The declared columns of ``table`` and their kinds (:func:`chunkstudy.stages.check`)."""
    stages.check(df, table, where=where)


_UMASK = os.umask(0)
os.umask(_UMASK)


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path`` (atomic on POSIX)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_UMASK)  # mkstemp creates 0600; outputs get the usual permissions
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write(cfg: Config, table: str, df: pd.DataFrame) -> Path:
    """Schema-check ``df`` and write it atomically to its place in the store."""
    check_schema(df, table)
    path = place(cfg, table_path(cfg, table), True)
    with atomic_path(path) as tmp:
        df.reset_index(drop=True).to_parquet(tmp, index=False)
    return path


def write_each(cfg: Config, tables: Iterable[stages.Table], frames: Mapping[str, pd.DataFrame]) -> list[Path]:
    """Write every table of ``tables`` (declared records, e.g. :func:`chunkstudy.design.prefix_tables`) from
    ``frames`` under its name, each as :func:`write` does: a stage that writes what a registry declares names the
    registry, not each table (04: the prefix kinds' tables). A table ``frames`` lacks is an error naming it."""
    tables = list(tables)
    missing = [t.name for t in tables if t.name not in frames]
    if missing:
        raise KeyError(f"tables {missing} are declared but the stage's outputs hold none (they hold {list(frames)})")
    return [write(cfg, t.name, frames[t.name]) for t in tables]


def read(cfg: Config, table: str) -> pd.DataFrame:
    path = place(cfg, table_path(cfg, table))
    if not path.is_file():
        raise _missing(cfg, f"{table}: ", path, stages.writer(table))
    df = pd.read_parquet(path)
    check_schema(df, table, str(path))
    return df


def read_input(cfg: Config, stage: str, name: str) -> pd.DataFrame | None:
    """A table ``stage`` reads only under some parameters (a ``Read(..., when=...)`` of
    :data:`chunkstudy.stages.STAGES`): the table when the read holds for ``cfg``, else None (e.g. 03 reads
    ``harvested`` only for harvested queries)."""
    return read(cfg, name) if stages.read_spec(stage, name).active(cfg.params()) else None


def listing(cfg: Config, stage: str) -> list[str]:
    """The file names in a stage's output folder, sorted (what a notebook shows after writing its outputs; in an
    :func:`interactive` session that wrote there, its own folder under :data:`LAB_DIR`)."""
    return sorted(p.name for p in place(cfg, stage_dir(cfg, stage)).iterdir())


def exists(cfg: Config, table: str) -> bool:
    return place(cfg, table_path(cfg, table)).is_file()


def json_path(cfg: Config, stage: str, name: str) -> Path:
    """``data/<corpus>/<stage>/<name>.json``, for a JSON file the stage declares (:data:`chunkstudy.stages.STAGES`;
    KeyError otherwise)."""
    path = inside(stage_dir(cfg, stage) / f"{name}.json", stage_dir(cfg, stage), f"JSON file {name!r}")
    if not isinstance(stages.ARTIFACTS.get(name, (None,))[0], stages.Json) or stages.writer(name) != stage:
        declared = [a.name for a in stages.stage(stage).writes if isinstance(a, stages.Json)]
        elsewhere = (f"; {name!r} is written by {stages.writer(name)}" if name in stages.ARTIFACTS else "")
        raise KeyError(f"{stage} declares no JSON file {name!r}; its JSON files: {declared}{elsewhere} "
                       "(chunkstudy.stages.STAGES)")
    return path


def write_json(cfg: Config, stage: str, name: str, obj: Any) -> Path:
    path = place(cfg, json_path(cfg, stage, name), True)
    write_json_file(path, obj)
    return path


def write_json_file(path: Path, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=_json_default))


def read_json(cfg: Config, stage: str, name: str) -> Any:
    path = place(cfg, json_path(cfg, stage, name))
    if not path.is_file():
        raise _missing(cfg, "", path, stages.writer(name))
    return json.loads(path.read_text())


def run_command(cfg: Config, stage: str, reader: str | None = None) -> str:
    """The ``./run_all.sh`` command for ``cfg``'s parameter file that runs ``stage`` and what it needs, or with
    ``reader`` also everything that stage needs, from the stage graph (:func:`chunkstudy.stages.needs`) and the
    stages completed (their manifests): ``--only NN`` when ``stage`` is the one stage to run, else ``--until`` the
    last one (the runner skips those already current; the whole run when that is the last stage). What an error
    about a missing output suggests; :func:`reading_stage` names the reader."""
    params = cfg.params()
    want = {stage, *stages.needs(stage, params), *(stages.needs(reader, params) if reader else ())}
    todo = sorted({stage} | {s for s in want if read_manifest(cfg, s) is None})  # "NN_name": in run order
    p = cfg.path.resolve()
    arg = p.stem if p.parent == (cfg.root / "params").resolve() else os.path.relpath(p, cfg.root.resolve())
    if len(todo) == 1:
        return f"./run_all.sh {arg} --only {stage[:2]}"
    return f"./run_all.sh {arg}" + ("" if todo[-1] == stages.STAGE_NAMES[-1] else f" --until {todo[-1][:2]}")


def reading_stage() -> str | None:
    """The stage whose notebook this process runs, when it can tell: the runner names it in its kernels'
    environment (:data:`chunkstudy.progress.STAGE_ENV`); a kernel JupyterLab starts for ``notebooks/NN_stage.py``
    has that notebook's path in ``JPY_SESSION_NAME`` (jupyter_server; ipykernel's ``__session__``)."""
    for value in (os.environ.get(progress.STAGE_ENV), os.environ.get("JPY_SESSION_NAME")):
        name = Path(value).stem if value else None
        if name in stages.STAGE_NAMES:
            return name
    return None


def _missing(cfg: Config, what: str, path: Path, writer: str) -> FileNotFoundError:
    """The error for an output of ``writer`` that is not there, with the command that writes it."""
    return FileNotFoundError(f"{what}{path} does not exist; it is written by notebook {writer} "
                             f"(run {run_command(cfg, writer, reading_stage())})")


def manifest_path(cfg: Config, stage: str) -> Path:
    """``data/<corpus>/<stage>/manifest.json``, written by the runner after the stage succeeded."""
    return stage_dir(cfg, stage) / "manifest.json"


def read_manifest(cfg: Config, stage: str) -> dict | None:
    """A stage's manifest, or None when it is absent or malformed (unreadable JSON, no ``key``, no ``outputs``, an
    output without its hash): a damaged manifest means "not completed", so the stage reruns."""
    p = manifest_path(cfg, stage)
    if not p.is_file():
        return None
    try:
        m = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None
    return m if _well_formed_manifest(m) else None


def _well_formed_manifest(m: Any) -> bool:
    if not (isinstance(m, dict) and isinstance(m.get("key"), dict) and isinstance(m.get("outputs"), dict)):
        return False
    return all(isinstance(v, dict) and isinstance(v.get("sha256"), str) and isinstance(v.get("size"), int)
               and isinstance(v.get("mtime_ns"), int) for v in m["outputs"].values())


def write_array(path: Path, arr: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, arr)


def read_array(path: Path, mmap: bool = False) -> np.ndarray:
    return np.load(path, mmap_mode="r" if mmap else None)


#: The vectors artifact (:class:`chunkstudy.stages.Vectors`): its folder name and the stage that writes it.
VECTORS = "embeddings"


def vectors_dir(cfg: Config) -> Path:
    """``data/<corpus>/04_chunk_embed/embeddings/``: one ``<embedder>.npy`` (+ ``.ids.parquet``) per embedder."""
    return stage_dir(cfg, stages.writer(VECTORS)) / VECTORS


def vectors_path(cfg: Config, embedder: str) -> Path:
    """``data/<corpus>/04_chunk_embed/embeddings/<embedder>.npy``: float32 (n_unique_texts, dim); row i embeds
    unique embedded text i, and ``chunks.text_row`` indexes it (the same rows for every embedder)."""
    folder = vectors_dir(cfg)
    return inside(folder / f"{embedder}.npy", folder, f"vectors of embedder {embedder!r}")


def artifact_path(cfg: Config, name: str) -> Path:
    """Where artifact ``name`` lives: its parquet or JSON file, or the vectors folder."""
    a = stages.artifact(name)
    if isinstance(a, stages.Table):
        return table_path(cfg, name)
    if isinstance(a, stages.Json):
        return json_path(cfg, stages.writer(name), name)
    return vectors_dir(cfg)


def write_vectors(cfg: Config, embedder: str, vectors: np.ndarray, ids: pd.DataFrame | None = None) -> Path:
    """Write one embedder's vectors (float32, 2-D) and, beside them, ``<embedder>.ids.parquet`` giving the row
    order (``text_row`` plus e.g. the sha256 of each text)."""
    if vectors.dtype != np.float32 or vectors.ndim != 2:
        raise ValueError(f"vectors for {embedder!r}: expected float32 (n, dim), got {vectors.dtype} {vectors.shape}")
    path = place(cfg, vectors_path(cfg, embedder), True)
    write_array(path, vectors)
    if ids is not None:
        if len(ids) != len(vectors):
            raise ValueError(f"vectors for {embedder!r}: {len(vectors)} rows but {len(ids)} ids")
        with atomic_path(place(cfg, vectors_path(cfg, embedder).with_suffix(".ids.parquet"), True)) as tmp:
            ids.reset_index(drop=True).to_parquet(tmp, index=False)
    return path


def write_all_vectors(cfg: Config, vectors: dict[str, np.ndarray], ids: pd.DataFrame | None = None) -> dict:
    """:func:`write_vectors` for every embedder of ``vectors``; returns ``{embedder: path}``."""
    return {key: write_vectors(cfg, key, vec, ids) for key, vec in vectors.items()}


def read_vectors(cfg: Config, embedder: str, mmap: bool = False) -> np.ndarray:
    """One embedder's vectors; index with ``chunks["text_row"]``."""
    path = place(cfg, vectors_path(cfg, embedder))
    if not path.is_file():
        raise _missing(cfg, f"vectors for embedder {embedder!r}: ", path, stages.writer(VECTORS))
    return read_array(path, mmap)


def read_all_vectors(cfg: Config, embedders, mmap: bool = False) -> dict[str, np.ndarray]:
    """``{embedder: vectors}`` for every key of ``embedders`` (the ``embed.embedders`` section)."""
    return {key: read_vectors(cfg, key, mmap) for key in embedders}


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def file_hash(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
