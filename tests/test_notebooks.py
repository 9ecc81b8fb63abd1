"""Every stage notebook is thin: a parameters cell, library calls and displays — no functions, classes, loops,
comprehensions or conditional expressions (logic of any kind lives in lib/chunkstudy, where it is tested)."""

import ast
from pathlib import Path

import jupytext
import pytest

from chunkstudy import config

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.py"))
BANNED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For, ast.AsyncFor, ast.While, ast.Lambda,
          ast.If, ast.IfExp, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Try, ast.With)


def test_all_eight_stages_are_present():
    assert [p.stem for p in NOTEBOOKS] == list(config.STAGE_SECTIONS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_thin(path):
    tree = ast.parse(path.read_text())
    found = [f"{type(n).__name__} at line {n.lineno}" for n in ast.walk(tree) if isinstance(n, BANNED)]
    assert not found, f"{path.name}: move this logic into lib/chunkstudy and test it there: {found}"


def test_the_thinness_check_sees_comprehensions_and_conditional_expressions():
    src = "a = [x for x in y]\nb = {k: 1 for k in y}\nc = sorted(p for p in y)\nd = 1 if e else None\n"
    found = {type(n).__name__ for n in ast.walk(ast.parse(src)) if isinstance(n, BANNED)}
    assert found == {"ListComp", "DictComp", "GeneratorExp", "IfExp"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_has_a_header_and_a_parameters_cell(path):
    nb = jupytext.read(path)
    assert nb.cells[0].cell_type == "markdown", f"{path.name}: start with a markdown header (what it reads, writes)"
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and params[0].source.strip() == 'params_file = "params/demo.yaml"'
    assert any("config.load(params_file)" in c.source for c in nb.cells if c.cell_type == "code")
