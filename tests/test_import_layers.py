"""The package's layout as a rule (issue 23 §1): every import inside ``lib/chunkstudy`` (function-level ones
included) points down the layers below, or sideways within a module's own group; no two modules import each other,
directly or through others; no module is over 700 lines.

Layers, lowest first: the foundation (the study's declarations and the plumbing every stage uses), the model
clients, the eight stages in pipeline order (a stage may use an earlier one, never a later one), and the tools that
drive or check whole runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "lib" / "chunkstudy"
MAX_LINES = 700

#: Each layer, lowest first: the top-level names (module or package) it holds.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("foundation", frozenset({"errors", "significance", "design", "design_metrics", "paper", "params", "params_analysis",
                              "paramspec", "stages", "config", "config_rules", "artifacts",
                              "manifests", "codehash", "imported", "progress", "models", "devices", "relevance",
                              "procs", "plugins", "metric_blocks", "schema", "prefix_kinds", "prefix"})),
    ("model clients", frozenset({"llm", "identity", "embed_checks", "embed_served", "embed", "embed_store",
                                 "rerank"})),
    ("01 corpus", frozenset({"corpus"})),
    ("02 induce", frozenset({"induce"})),
    ("03 queries", frozenset({"queries"})),
    ("04 chunks", frozenset({"chunks"})),
    ("05 retrieve", frozenset({"retrieve"})),
    ("06 metrics", frozenset({"metrics"})),
    ("07 stats", frozenset({"stats"})),
    ("08 report", frozenset({"report"})),
    ("tools", frozenset({"runner", "rerun", "runlock", "plan", "golden", "export", "gpu", "devicecheck", "paramdoc", "stagedoc",
                         "designdoc", "gguf_convert", "serving", ""})),
)


def _modules() -> dict[str, Path]:
    """``{dotted name below chunkstudy ("" for the package itself): file}``."""
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(PKG).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _resolve(dotted: str) -> str | None:
    while dotted not in MODULES:
        if "." not in dotted:
            return None
        dotted = dotted.rsplit(".", 1)[0]
    return dotted


def imports(name: str) -> set[str]:
    """The package's modules that module ``name`` imports, anywhere in its body (``from . import x`` counts as an
    import of module ``x`` where ``x`` is one, else of the package it comes from)."""
    path = MODULES[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found = [_resolve(a.name.removeprefix("chunkstudy").lstrip(".")) for a in node.names
                     if a.name == "chunkstudy" or a.name.startswith("chunkstudy.")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
                mod = ".".join(parts)
            elif node.module == "chunkstudy" or (node.module or "").startswith("chunkstudy."):
                mod = (node.module or "").removeprefix("chunkstudy").lstrip(".")
            else:
                continue
            found = [f"{mod}.{a.name}".lstrip(".") if f"{mod}.{a.name}".lstrip(".") in MODULES else _resolve(mod)
                     for a in node.names]
        else:
            continue
        out |= {f for f in found if f is not None and f != name}
    return out


def layer_of(name: str) -> int:
    top = name.split(".")[0]
    for i, (_, members) in enumerate(LAYERS):
        if top in members:
            return i
    raise AssertionError(f"chunkstudy.{name} is in no layer: add its top-level name to LAYERS")


def upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"chunkstudy.{m} ({LAYERS[layer_of(m)][0]}) imports chunkstudy.{d} ({LAYERS[layer_of(d)][0]})"
                  for m, deps in graph.items() for d in deps if layer_of(d) > layer_of(m))


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


GRAPH = {m: imports(m) for m in MODULES}


def test_every_module_has_a_layer():
    for m in MODULES:
        layer_of(m)


def test_no_import_points_up_a_layer():
    assert upward(GRAPH) == []


def test_no_import_circle():
    assert circles(GRAPH) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_over_the_line_limit(name):
    n = len(MODULES[name].read_text().splitlines())
    assert n <= MAX_LINES, f"chunkstudy.{name} has {n} lines (limit {MAX_LINES}): split it along a seam"


def test_the_rules_see_a_circle_and_an_upward_import(tmp_path, monkeypatch):
    """The checks can fail: a planted circle (one side a function-level import) and an upward import are found."""
    for name, text in {"design": "from . import paper\n", "paper": "def f():\n    from .design import x\n",
                       "stages": "from chunkstudy.report import render\n"}.items():
        (tmp_path / f"{name}.py").write_text(text)
        monkeypatch.setitem(MODULES, name, tmp_path / f"{name}.py")
    graph = {m: imports(m) for m in ("design", "paper", "stages")}
    assert graph == {"design": {"paper"}, "paper": {"design"}, "stages": {"report"}}
    assert circles(graph) == [["design", "paper"]]
    assert upward(graph) == ["chunkstudy.stages (foundation) imports chunkstudy.report (08 report)"]


def test_the_package_docstring_maps_every_module_in_its_layer():
    """``chunkstudy/__init__``'s module map used to name modules that no longer existed (``contexts``, ``chunking``,
    ``tables``) and leave out a dozen that did: it names every top-level module and no other, in the order of the
    layers (:data:`LAYERS`), one bullet per group of layers."""
    import re

    import chunkstudy

    doc = chunkstudy.__doc__ or ""
    order = list(dict.fromkeys(re.findall(r"``([a-z_]+)``", doc)))
    assert set(order) == {m.split(".")[0] for m in MODULES if m}, "the map in lib/chunkstudy/__init__.py"
    layers = [layer_of(m) for m in order]
    assert layers == sorted(layers), [f"{m} ({LAYERS[layer_of(m)][0]})" for m in order]
    bullets = [[layer_of(m) for m in re.findall(r"``([a-z_]+)``", b)] for b in doc.split("\n* ")[1:]]
    assert all(a[-1] < b[0] for a, b in zip(bullets, bullets[1:]))  # no layer split across two bullets
