"""Extensions found where they live: an extension point whose extensions are one file each (a corpus loader, a
verdict) keeps no hand-written list of them. Its registry calls :func:`discover` on the package that holds them:
every module of that package is imported, in name order, and the object each declares under an agreed module
attribute is collected. A new file in the package is the whole registration, and a list can never disagree with
the files.

Import order is name order, so registration is deterministic; an extension that must come before another (the
order of its columns, say) declares that itself, and its registry sorts by it. A module that fails to import
fails the registry's import, naming the module (Python's own error, unchanged, as its cause). A registry names
its package as a string constant (``PACKAGE = "chunkstudy.stats.verdict"``): that is how :mod:`chunkstudy.codehash`,
which reads no call, knows that a stage running the registry runs every module there, so that an edited or added
extension reruns it. This module imports nothing of the project.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable, Iterable


def discover(package: str, attribute: str, kind: type | tuple[type, ...]) -> list[tuple[str, Any]]:
    """``(module name, object)`` for every module of ``package`` (dotted, e.g. ``chunkstudy.corpus``) that declares
    ``attribute``, in module-name order. Each object must be a ``kind`` (a ``TypeError`` names the module
    otherwise); modules without ``attribute`` are skipped, so helpers can live beside the extensions."""
    pkg = importlib.import_module(package)
    found = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        name = f"{package}.{info.name}"
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            raise ImportError(f"{name}: an extension module of {package} failed to import: {e}") from e
        if not hasattr(module, attribute):
            continue
        obj = getattr(module, attribute)
        if not isinstance(obj, kind):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise TypeError(f"{name}.{attribute} is a {type(obj).__name__}, not a {names}: the module attribute "
                            f"{attribute} declares an extension of {package}")
        found.append((name, obj))
    return found


def refuse_shared(found: list[tuple[str, Any]], attribute: str, keys: Callable[[Any], Iterable[tuple[str, Any]]],
                  error: type[Exception] = ValueError) -> None:
    """Refuse two of ``found`` (:func:`discover`'s ``(module, object)`` pairs) that declare the same key: ``keys``
    gives an object's ``(what, value)`` pairs (``("name", "placebo")``, one ``("column", c)`` per column), and the
    second module to declare a pair raises ``error`` naming both modules, what and the value. Every registry of
    extensions refuses its duplicates this way."""
    seen: dict[tuple[str, Any], str] = {}
    for module, obj in found:
        for what, value in keys(obj):
            if (what, value) in seen:
                raise error(f"{module}.{attribute} and {seen[(what, value)]}.{attribute} both declare the {what} "
                            f"{value!r}: each extension has its own")
            seen[(what, value)] = module
