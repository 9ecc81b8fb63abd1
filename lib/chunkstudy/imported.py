"""What a process actually imported: the chunkstudy library (its folder and a hash of its files) and the environment
around it (the interpreter, its ``sys.prefix`` — the virtual environment — and the versions of the key packages
as that interpreter resolves them).

The runner cannot see this from outside: a stage runs in a kernel that imports ``chunkstudy`` when its first cell
runs, from wherever the environment's install points *then*. A ``.venv`` shared by two checkouts (a symlink) whose
editable install was repointed by the other checkout's environment check, or a ``PYTHONPATH`` that shadows the
package, make that kernel execute another library than the one the runner hashed into the stage's key. So the
kernel says it itself: when :data:`ENV` names a file (the runner sets it for each stage's kernel), importing the
package writes :func:`record` there (:func:`announce`, called from the package's ``__init__``); the runner reads it
back, refuses a stage whose kernel imported another library than its own, and writes the record into the stage's
manifest (``imported``; docs/running.md).

Standard library and :mod:`chunkstudy.codehash` only: the package's import must stay light.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from .codehash import library_hash

#: Environment variable naming the file a kernel writes its :func:`record` to when it imports the package.
ENV = "CHUNKSTUDY_IMPORTED"

#: The packages whose versions a record holds (and every manifest, :mod:`chunkstudy.manifests`).
TRACKED_PACKAGES = ("numpy", "pandas", "pyarrow", "scipy", "statsmodels", "faiss-cpu", "torch", "transformers",
                    "sentence-transformers", "mwparserfromhell", "pysbd", "bm25s", "rapidfuzz", "papermill")


def package_dir() -> Path:
    """The folder of the chunkstudy package this process imported, symlinks resolved."""
    return Path(__file__).resolve().parent


def versions() -> dict[str, str]:
    """``{"python": version, package: version}`` of :data:`TRACKED_PACKAGES` as this interpreter's ``sys.path``
    resolves them (a package that is not installed is left out)."""
    out = {"python": platform.python_version()}
    for name in TRACKED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def record(by: str) -> dict:
    """What this process imported: ``library`` (the package folder), ``library_hash`` (of every source and data
    file of that folder, :func:`chunkstudy.codehash.library_hash`), ``executable``, ``venv`` (``sys.prefix``),
    ``python`` and ``packages`` (:func:`versions`); ``by`` says whose record it is (``kernel``: the stage's own
    kernel said it; ``runner``: the stage ran in the runner's process)."""
    pkg = package_dir()
    return {"by": by, "pid": os.getpid(), "library": str(pkg), "library_hash": library_hash(None, pkg),
            "executable": sys.executable, "venv": sys.prefix,
            "python": f"{platform.python_implementation()} {platform.python_version()}", "packages": versions()}


def announce() -> None:
    """Write :func:`record` (``by="kernel"``) to the file :data:`ENV` names, complete or not at all; nothing when it
    names none. Called once, when the package is imported. The first process to write it wins (a hard link of a
    complete temporary file, which fails when the file exists), and the variable is then dropped from this
    process's environment: a process started later under the same variable (a model server's supervisor the runner
    starts during the stage, a subprocess of the notebook) never speaks for the kernel."""
    target = os.environ.pop(ENV, None)
    if not target:
        return
    path = Path(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record("kernel"), f, indent=2, sort_keys=True)
        os.link(tmp, path)
    except FileExistsError:
        pass  # another process of the stage spoke first: the kernel, which imports the package before any other
    finally:
        os.unlink(tmp)


def read(path: Path) -> dict | None:
    """The record a kernel wrote to ``path`` (None when there is none, or it is not a record)."""
    try:
        found = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and isinstance(found.get("library"), str) else None


def foreign(seen: dict, stage: str) -> str | None:
    """Why the record ``seen`` of ``stage``'s kernel cannot stand for this run: the kernel imported another
    chunkstudy than the runner's own (None when it imported the same folder)."""
    mine = package_dir()
    if Path(seen["library"]).resolve() == mine:
        return None
    return (f"{stage}: its kernel imported chunkstudy from {seen['library']} (python {seen.get('executable')}), not "
            f"the library this run hashed into the stage's key, {mine}. The environment's install was repointed "
            "while the run worked (a .venv shared with another checkout, whose environment check reinstalled it "
            "editable from there?) or something on PYTHONPATH shadows the package. The stage's outputs are not "
            "recorded (no manifest): give each checkout its own .venv (rm .venv; ./run_all.sh rebuilds it from the "
            "lock), then run again")
