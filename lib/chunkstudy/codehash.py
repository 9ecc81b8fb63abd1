"""Which package files a notebook's code can run, and their hash: the library part of a stage's skip key
(:mod:`chunkstudy.runner`). :func:`module_closure` follows every import (also one inside a function) from the
notebook through the package, every module of a package a module names by its dotted name (the extensions
:func:`chunkstudy.plugins.discover` imports from their files, which no import statement names), and the package
data a module names; :func:`library_hash` hashes those files, so a change to ``figures.py`` reruns 08 only.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import re
import sys
from pathlib import Path


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
    ``__init__`` on the way, every module of a package that a module among them names (:func:`_discovered`: the
    verdicts of ``chunkstudy.stats.verdict``, found by their files), and the package data a module among them loads (a non-Python file belongs to each
    module with a string constant that names it, outside docstrings: ``TEMPLATE = "report.html.j2"`` of
    :mod:`chunkstudy.report.html` names ``report/templates/report.html.j2``). Sorted paths."""
    pkg = pkg or Path(__file__).resolve().parent
    seen: set[Path] = set()
    todo = ["", *_imports_of(notebook.read_bytes(), "")]
    while todo:
        dotted = todo.pop()
        path = _module_file(pkg, dotted)
        if path is None or path in seen:
            continue
        seen.add(path)
        parts = dotted.split(".") if dotted else []
        todo += [".".join(parts[:i]) for i in range(len(parts))]  # the packages on the way
        package = dotted if path.name == "__init__.py" else ".".join(parts[:-1])
        source = path.read_bytes()
        todo += _imports_of(source, package)
        todo += _discovered(source, pkg)
    named = set().union(*(_strings_of(p.read_bytes()) for p in seen))
    return sorted(seen | {d for d in package_data(pkg)
                          if d.name in named or str(d.relative_to(pkg)) in named})


@functools.lru_cache(maxsize=1024)
def _imports_of(source: bytes, package: str) -> tuple[str, ...]:
    """:func:`_imported` of a module's source, memoised on the source's bytes: the runner hashes every stage's
    closure, and the modules the eight closures share are parsed once per process, not once per stage."""
    return tuple(sorted(_imported(ast.parse(source.decode("utf-8")), package)))


def _discovered(source: bytes, pkg: Path) -> list[str]:
    """The modules (dotted, below the package) of each package of the library that ``source`` names in a string
    constant, e.g. ``"chunkstudy.stats.verdict"``: a registry that finds its extensions by their files
    (:func:`chunkstudy.plugins.discover`) imports every module there, though no import statement names one, so an
    edit of one (or a new one) must rerun the stages that run the registry. A name that is a module, not a
    package, is left to the imports."""
    out = []
    for name in _strings_of(source):
        parts = name.split(".")
        if parts[0] != PACKAGE or len(parts) < 2 or not all(p.isidentifier() for p in parts):
            continue
        folder = pkg.joinpath(*parts[1:])
        if (folder / "__init__.py").is_file():
            below = ".".join(parts[1:])
            out += [f"{below}.{m.stem}" for m in sorted(folder.glob("*.py")) if m.stem != "__init__"]
            out += [f"{below}.{m.parent.name}" for m in sorted(folder.glob("*/__init__.py"))]
    return out


@functools.lru_cache(maxsize=1024)
def _strings_of(source: bytes) -> frozenset[str]:
    """The string constants of a module's source, docstrings and other bare string statements left out (memoised
    on the bytes, as :func:`_imports_of`)."""
    tree = ast.parse(source.decode("utf-8"))
    bare = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return frozenset(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                     and id(n) not in bare)


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


#: The parameters the runner injects into every notebook it executes (papermill's cell after the one tagged
#: ``parameters``): what a notebook's own parameters cell assigns to them never reaches a run.
INJECTED = ("params_file",)
_ASSIGNS_INJECTED = re.compile(rf"(?:{'|'.join(INJECTED)})\s*=")


def notebook_hash(notebook: Path) -> str:
    """sha256 (16 hex) of a notebook (jupytext percent format) as the runner executes it: every line but the
    assignments of :data:`INJECTED` in its cell tagged ``parameters``, which the runner's injected cell overrides.
    Pointing a notebook at another corpus in JupyterLab (``params_file = "params/tiny.yaml"``, saved into the tracked
    file) therefore reruns nothing; any other edit of the notebook reruns its stage."""
    kept, in_parameters = [], False
    for line in notebook.read_text(encoding="utf-8").splitlines(keepends=True):
        if line.startswith("# %%"):
            in_parameters = "parameters" in line  # the header of the tagged cell: # %% tags=["parameters"]
        elif in_parameters and _ASSIGNS_INJECTED.match(line):
            continue
        kept.append(line)
    return hashlib.sha256("".join(kept).encode("utf-8")).hexdigest()[:16]


def library_files(notebook: Path, pkg: Path | None = None) -> dict[str, str]:
    """``{file relative to the package's parent ("chunkstudy/report/figures.py"): sha256 (16 hex)}`` of the files
    :func:`library_hash` hashes for ``notebook``: what a stage's manifest records, so that a rerun after a code
    change names the files that changed."""
    pkg = pkg or Path(__file__).resolve().parent
    return {str(p.relative_to(pkg.parent)): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
            for p in module_closure(notebook, pkg)}


# ------------------------------------------------------------------------------------- a user's own modules

def _installed_dirs() -> list[Path]:
    """Where the standard library and installed packages live: no user's code of a run is there."""
    import site
    import sysconfig

    dirs = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs |= set(site.getsitepackages()) | {site.getusersitepackages()}
    return [Path(d).resolve() for d in dirs if d]


def _locate(name: str, dirs: list[Path]) -> list[Path]:
    """The files of module ``name`` (dotted) in the first folder of ``dirs`` that holds its top-level part: each
    package's ``__init__.py`` on the way and the module's own file; [] when none holds it."""
    parts = name.split(".")
    for d in dirs:
        found: list[Path] = []
        cur = d
        for i, part in enumerate(parts):
            if (cur / part / "__init__.py").is_file():
                found.append(cur / part / "__init__.py")
                cur = cur / part
            elif (cur / f"{part}.py").is_file() and i == len(parts) - 1:
                found.append(cur / f"{part}.py")
            elif (cur / part).is_dir():  # a namespace package
                cur = cur / part
            else:
                break
        if found or (d / parts[0]).is_dir() or (d / f"{parts[0]}.py").is_file():
            return found
    return []


def user_closure(path: Path) -> list[Path]:
    """A user's module file (a chunker's, ``conditions.extra.*.chunker``) and every module of the user's own it
    imports, transitively, as :func:`module_closure` follows the library: any import statement (also one inside a
    function), resolved as Python would from the module's folder, then ``sys.path``; modules of the standard
    library, of installed packages and of this package (the stage's library hash) are not the user's and are not
    followed. Sorted paths."""
    path = Path(path).resolve()
    installed = _installed_dirs()
    dirs = [path.parent] + [p for p in (Path(s or ".").resolve() for s in sys.path)
                            if p.is_dir() and not any(p == d or d in p.parents for d in installed)]
    seen: set[Path] = set()
    todo = [path]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        for node in ast.walk(ast.parse(f.read_bytes())):
            if isinstance(node, ast.Import):
                names, where = [a.name for a in node.names], dirs
            elif isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                names = [f"{mod}.{a.name}".lstrip(".") for a in node.names] + ([mod] if mod else [])
                where = [f.parent.joinpath(*[".."] * (node.level - 1)).resolve()] if node.level else dirs
            else:
                continue
            relative = isinstance(node, ast.ImportFrom) and node.level > 0
            for name in names:
                if relative or name.split(".")[0] != PACKAGE:
                    todo += [p.resolve() for p in _locate(name, where)]
    return sorted(seen)


def files_digest(files: list[Path], base: Path) -> str:
    """sha256 (16 hex) of files' names (relative to ``base`` where they lie under it) and bytes."""
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(base) if base in p.parents else p).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def foreign_library(root: Path) -> str | None:
    """Why a run of the project at ``root`` would execute another checkout's library: the package this process
    imported is not the project's ``lib/chunkstudy`` (a ``.venv`` copied from another checkout keeps an editable
    install that points there; scripts/check_editable.sh repairs it). None when it is, or when the project has no
    ``lib/`` of its own."""
    mine, running = Path(root) / "lib" / PACKAGE, Path(__file__).resolve().parent
    if not mine.is_dir() or mine.resolve() == running:
        return None
    return (f"this run would execute the library at {running}, not this project's {mine}: the environment's "
            "editable install of chunkstudy points at another checkout (a .venv copied from it?), so the stage keys "
            "would not see this checkout's edits and the manifests would record the other's git state. Repair it: "
            f"scripts/check_editable.sh .venv {root} (./run_all.sh does so itself), then run again")
