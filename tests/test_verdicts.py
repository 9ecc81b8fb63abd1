"""The registry that makes a verdict one file: chunkstudy.stats.verdicts lists the verdicts the modules of
chunkstudy.stats.verdict declare, in their declared order, and refuses a declaration that lacks a member or collides
with another, naming the modules; checked on the real package and on a package of planted modules.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys

import pytest

from chunkstudy.stats import verdict as verdict_package
from chunkstudy.stats import verdicts
from chunkstudy.stats.verdict import calibrated, tost

# ---- the registry ----------------------------------------------------------------------------------------------

def test_every_verdict_module_is_registered_in_its_declared_order():
    """Each module of chunkstudy.stats.verdict that declares VERDICT is registered, and nothing else; the registry
    lists them by order, and their columns follow in that order. The two built-ins keep their places: the
    calibrated test (10) before TOST (20), as 07's tables and the goldens have them."""
    declaring = {m.name for m in pkgutil.iter_modules(verdict_package.__path__)
                 if hasattr(importlib.import_module(f"{verdicts.PACKAGE}.{m.name}"), verdicts.ATTRIBUTE)}
    registered = list(verdicts.VERDICTS.values())
    assert {type(v).__module__.rsplit(".", 1)[1] for v in registered} == declaring >= {"calibrated", "tost"}
    assert [v.order for v in registered] == sorted(v.order for v in registered)
    assert verdicts.VERDICTS["calibrated"] is calibrated.VERDICT and verdicts.VERDICTS["tost"] is tost.VERDICT
    assert (calibrated.VERDICT.order, tost.VERDICT.order) == (10, 20)
    assert verdicts.columns() == tuple(c for v in registered for c in v.columns)


HEAD = "from chunkstudy.stats.verdict.calibrated import CalibratedVerdict\n\n\n"


def _planted(name: str, place: int, columns: tuple[str, ...], **more: str) -> str:
    """A verdict module: the calibrated verdict under another name, order and columns (``more``: other members, as
    source)."""
    attrs = {"name": repr(name), "order": str(place), "columns": repr(columns), "record_name": repr(f"{name}_rec"),
             "golden_section": repr(name), **more}
    body = "".join(f"    {k} = {v}\n" for k, v in attrs.items())
    return HEAD + f"class Planted(CalibratedVerdict):\n{body}\n\nVERDICT = Planted()\n"


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """An importable package of verdict modules under tmp_path; returns (its name, a function writing a module)."""
    name = f"planted_{abs(hash(tmp_path)) % 10**8}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, lambda module, text: (tmp_path / name / f"{module}.py").write_text(text)
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]


def test_the_registry_sorts_by_order_not_by_file_name(planted):
    name, write = planted
    write("a_late", _planted("late", 30, ("late_col",)))
    write("z_early", _planted("early", 5, ("early_col",)))
    write("helper", "def not_a_verdict():\n    return 1\n")
    assert list(verdicts.discover(name)) == ["early", "late"]


@pytest.mark.parametrize("second, said", [
    (_planted("two", 10, ("two_col",)), "both declare the order 10"),
    (_planted("one", 20, ("two_col",)), "both declare the name 'one'"),
    (_planted("two", 20, ("one_col", "two_col")), "both declare the columns ['one_col']"),
    (_planted("two", 20, ("two_col",), record_name="'one_rec'"), "both declare the record_name 'one_rec'"),
])
def test_two_verdicts_that_would_collide_are_refused_naming_both_modules(planted, second, said):
    name, write = planted
    write("first", _planted("one", 10, ("one_col",)))
    write("second", second)
    with pytest.raises(ValueError, match=rf"{name}\.second\.VERDICT and {name}\.first\.VERDICT {re.escape(said)}"):
        verdicts.discover(name)


def test_a_declaration_without_a_member_is_refused_naming_the_module_and_the_members(planted):
    name, write = planted
    write("bare", "class Bare:\n    name = 'bare'\n\n\nVERDICT = Bare()\n")
    with pytest.raises(TypeError, match=rf"{name}\.bare\.VERDICT: a Bare lacks carried, cells, columns, .*order"):
        verdicts.discover(name)


def test_an_order_that_is_not_an_integer_is_refused_naming_the_module(planted):
    name, write = planted
    write("worded", _planted("worded", 0, ("x",), order="'first'"))
    with pytest.raises(TypeError, match=rf"{name}\.worded\.VERDICT\.order: expected an integer .* got 'first'"):
        verdicts.discover(name)
