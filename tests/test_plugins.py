"""chunkstudy.plugins.discover: the extensions of a package found by its files, in name order, each checked."""

from __future__ import annotations

import sys

import pytest

from chunkstudy import plugins


@pytest.fixture
def package(tmp_path, monkeypatch):
    """An importable package ``exts_<n>`` under tmp_path; returns a function writing its modules."""
    name = f"exts_{abs(hash(tmp_path)) % 10**8}"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("class Thing:\n    def __init__(self, name):\n        self.name = name\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, root
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]


HEAD = "from . import Thing\n"


def test_discover_collects_each_modules_declaration_in_name_order_and_skips_helpers(package):
    name, root = package
    (root / "zeta.py").write_text(HEAD + "EXT = Thing('z')\n")
    (root / "alpha.py").write_text(HEAD + "EXT = Thing('a')\n")
    (root / "helper.py").write_text("def f():\n    return 1\n")
    found = plugins.discover(name, "EXT", __import__(name).Thing)
    assert [(m, t.name) for m, t in found] == [(f"{name}.alpha", "a"), (f"{name}.zeta", "z")]


def test_discover_refuses_a_declaration_of_the_wrong_kind_naming_the_module(package):
    name, root = package
    (root / "bad.py").write_text("EXT = 3\n")
    with pytest.raises(TypeError, match=rf"{name}\.bad\.EXT is a int, not a Thing"):
        plugins.discover(name, "EXT", __import__(name).Thing)


def test_a_module_that_fails_to_import_is_named(package):
    name, root = package
    (root / "broken.py").write_text("import no_such_module_here\n")
    with pytest.raises(ImportError, match=rf"{name}\.broken: an extension module of {name} failed to import"):
        plugins.discover(name, "EXT", __import__(name).Thing)


def test_refuse_shared_names_both_modules_what_and_the_value():
    """Every registry refuses two extensions that declare one key (a name, an order, a column) this way."""
    found = [("pkg.a", {"name": "x", "cols": ["c1"]}), ("pkg.b", {"name": "y", "cols": ["c2", "c1"]})]

    def keys(d):
        return [("name", d["name"]), *(("column", c) for c in d["cols"])]

    with pytest.raises(LookupError, match=r"^pkg\.b\.EXT and pkg\.a\.EXT both declare the column 'c1'"):
        plugins.refuse_shared(found, "EXT", keys, LookupError)
    plugins.refuse_shared(found[:1] + [("pkg.b", {"name": "y", "cols": ["c2"]})], "EXT", keys)  # nothing shared
    with pytest.raises(ValueError, match=r"pkg\.b\.EXT and pkg\.a\.EXT both declare the name 'x'"):
        plugins.refuse_shared(found[:1] + [("pkg.b", {"name": "x", "cols": []})], "EXT", keys)
