"""The split modules (issue 15 §6) and their signatures (issue 15 §4).

* ``induce``, ``queries``, ``llm`` and ``report.tables`` are sub-packages whose ``__init__``
  re-exports every public name of its submodules as the very object the submodule defines. ``chunks`` and
  ``report`` import nothing in their ``__init__``: stages 02-04 import single modules of them, and a stage's code
  hash covers every module its notebook can run, package ``__init__`` included. (The names the single modules
  had before the splits are not frozen: this is a compendium, not a library with outside importers, issue 23.)
* No policy default hides in a public signature: guarded once, for every module, by
  tests/test_typed_params.py (one list of exceptions, each with its reason).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from chunkstudy import chunks, induce, llm, queries, report
from chunkstudy.report import tables

PACKAGES = {"induce": induce, "queries": queries, "llm": llm, "report.tables": tables}
#: Packages whose ``__init__`` imports nothing (a docstring only).
BARE = {"chunks": chunks, "report": report}


def _submodules(pkg) -> list:
    return [importlib.import_module(f"{pkg.__name__}.{m.name}") for m in pkgutil.iter_modules(pkg.__path__)]


def _defined_here(module) -> dict:
    """Public functions, classes and constants a module defines itself (not those it imports)."""
    out = {}
    for name, obj in vars(module).items():
        if name.startswith("_") or inspect.ismodule(obj):
            continue
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ != module.__name__:
            continue
        if not (inspect.isfunction(obj) or inspect.isclass(obj)) and name not in _assigned(module):
            continue
        out[name] = obj
    return out


def _assigned(module) -> set[str]:
    import ast

    tree = ast.parse(inspect.getsource(module))
    names = set()
    for n in tree.body:
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_every_public_name_of_a_submodule_is_reexported_as_itself(name):
    pkg = PACKAGES[name]
    subs = _submodules(pkg)
    assert len(subs) >= 3, f"chunkstudy.{name} is expected to be split into modules"
    for sub in subs:
        for n, obj in _defined_here(sub).items():
            assert getattr(pkg, n, None) is obj, f"{sub.__name__}.{n} is not re-exported as chunkstudy.{name}.{n}"
            assert n in pkg.__all__, f"chunkstudy.{name}.__all__ lacks {n}"


def test_removed_duplicates_stay_removed():
    assert not hasattr(induce, "stats_table") and not hasattr(induce, "PAPER_INDUCTION")


@pytest.mark.parametrize("name", sorted(BARE))
def test_a_bare_package_imports_nothing(name):
    import ast

    tree = ast.parse(inspect.getsource(BARE[name]))
    assert [type(n).__name__ for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
            and n.module != "__future__"] == [], f"chunkstudy.{name}/__init__.py imports: stages would hash more"
