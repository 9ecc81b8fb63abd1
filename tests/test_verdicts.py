"""docs/extending.md, "Another verdict", performed exactly as the page shows it, and the registry that makes a
verdict one file (chunkstudy.stats.verdicts over the modules of chunkstudy.stats.verdict).

The page's two files are written into a copy of the repository (tests/test_extending.py's ``perform``): its one
library file, a module of chunkstudy.stats.verdict, must be the only library file that changes. A fresh Python that
imports the copy runs the new verdict through 07's contrast code and 08's table code on eight documents whose
splits are set by hand, and the page's test file runs as written against the copy. The registry's order, the
built-ins' places and its refusals (a missing member, a repeated order or column) are checked on the real package
and on a package of planted modules.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys

import pytest
from scipy.stats import binomtest
from test_extending import in_copy, perform, run_copy, section

from chunkstudy.stats import verdict as verdict_package
from chunkstudy.stats import verdicts
from chunkstudy.stats.verdict import calibrated, tost

VERDICT_RUN = r'''
import json
import types

import pandas as pd

import chunkstudy
from chunkstudy import config, design, golden, stats
from chunkstudy.report import report, tables
from chunkstudy.stats import verdicts

# eight documents of two queries each, scored under the conditions of the paper's four contrasts; A3 scores 0.5
# everywhere and each document's mean delta is set by hand: C1 = A3 - A1 gains in d1..d7 and loses in d8 (d1's
# queries +0.3 and -0.1: its mean counts, not its queries), C2 = A3 - P gains in all eight, C3 = G3 - A3 gains in
# d1..d4 and loses in d5..d8, C4 = A4 - A3 gains in d1..d3, loses in d4 and d5 and is unchanged in d6..d8
docs = [f"d{i}" for i in range(1, 9)]
a1 = {d: (0.4, 0.4) for d in docs} | {"d1": (0.2, 0.6), "d8": (0.6, 0.6)}
g3 = {d: (0.7, 0.7) if i < 4 else (0.3, 0.3) for i, d in enumerate(docs)}
a4 = {d: (0.6, 0.6) if i < 3 else (0.4, 0.4) if i < 5 else (0.5, 0.5) for i, d in enumerate(docs)}
by_condition = {"A3": {d: (0.5, 0.5) for d in docs}, "A1": a1, "P": {d: (0.3, 0.3) for d in docs}, "G3": g3,
                "A4": a4}
scores = pd.DataFrame([{"corpus": "hand", "embedder": "strong", "reranker": "none", "condition": c,
                        "query_id": f"{d}q{j}", "metric": "cov-nDCG@10", "value": v[d][j]}
                       for c, v in by_condition.items() for d in docs for j in (0, 1)])
queries = pd.DataFrame({"query_id": [f"{d}q{j}" for d in docs for j in (0, 1)],
                        "doc_id": [d for d in docs for _ in (0, 1)], "qtype": "factoid"})
p = config.record("stats", {"n_boot": 1000, "min_docs": 8})
few = config.record("stats", {"n_boot": 1000, "min_docs": 9})
bound = config.record("stats", {"n_boot": 1000, "min_docs": 8, "sesoi": 0.02})
primary = design.PrimaryCell(p.primary_metric, "strong", p.primary_reranker)
contrasts = stats.contrasts_table(scores, queries, p, primary, "hand")  # 07
below = stats.contrasts_table(scores, queries, few, primary, "hand")
with_tost = stats.contrasts_table(scores, queries, bound, primary, "hand")
user = stats.user_contrasts_table(scores, queries, p, primary, "hand", {"U1": ["A3", "A1"]})
t1 = tables.table1(contrasts)  # 08
t1_below = tables.table1(below)
shown = tables.user_contrasts(user, primary.name, "Declared before the run.")
sign = ["contrast", "docs_up", "docs_down", "p_sign", "p_holm_sign", "reject_holm_sign"]
print(json.dumps({
    "imported": chunkstudy.__file__, "registered": list(verdicts.VERDICTS),
    "columns": list(contrasts.columns), "columns_with_tost": list(with_tost.columns),
    "rows": contrasts[sign].to_dict("records"), "below": below[sign].to_dict("records"),
    "user": user[sign].to_dict("records"),
    "table1": list(t1.display.columns), "table1_with_tost": list(tables.table1(with_tost).display.columns),
    "printed": t1.display[["Contrast", "Docs +/-", "Sign Holm p"]].to_dict("records"),
    "printed_below": t1_below.display[["Docs +/-", "Sign Holm p"]].to_dict("records"),
    "user_printed": shown.display[["Contrast", "Docs +/-", "Sign Holm p"]].to_dict("records"),
    "notes": list(t1.notes), "user_notes": list(shown.notes),
    "sentences": report.verdict_sentences(types.SimpleNamespace(stats=p), contrasts, {}),
    "optional": list(golden.optional()),
    "golden": {v.golden_section: {r.contrast: v.golden(r) for r in contrasts.itertuples()}
               for v in verdicts.carried(contrasts)},
    "golden_user": [v.golden_user(r) for v in verdicts.carried(user) for r in user.itertuples()],
    "records": verdicts.records(p),
}))
'''


def test_a_verdict_as_the_page_walks_it(tmp_path):
    """"Another verdict": a sign test written as the page shows it — one module of chunkstudy.stats.verdict, the
    only library file that changes — is found by its file, placed after the two built-ins by its order, decided by
    07's contrast code in every family and printed by 08's tables, with by hand for C1..C4 the splits 7/1, 8/0, 4/4
    and 3/2 of the documents' mean deltas (d1's queries split +0.3/-0.1, its mean +0.1: one document up), their
    exact binomial p-values 18/256, 2/256, 1 and 1 (scipy's binomtest agrees) and Holm over the four."""
    lib = perform("Another verdict", tmp_path)
    text = section("Another verdict")
    assert re.findall(r"^\d+\. `(tests/[^`]+)`", text, re.M) == ["tests/test_<your_verdict>.py"]
    assert [p.relative_to(tmp_path).as_posix() for p in (tmp_path / "tests").iterdir()] == ["tests/test_sign.py"]
    out = run_copy(lib, VERDICT_RUN)
    # its place (order 30): after the calibrated test's (10) and TOST's (20), its five columns together
    at = out["registered"].index
    assert at("calibrated") < at("tost") < at("sign")
    new = ["docs_up", "docs_down", "p_sign", "p_holm_sign", "reject_holm_sign"]
    for cols, before in ((out["columns"], "significant"), (out["columns_with_tost"], "equivalence")):
        assert cols[cols.index("docs_up"):cols.index("docs_up") + len(new)] == new
        assert cols.index(before) < cols.index("docs_up")
    p = [18 / 256, 2 / 256, 1.0, 1.0]
    assert p == [binomtest(up, up + down).pvalue for up, down in ((7, 1), (8, 0), (4, 4), (3, 2))]
    assert out["rows"] == [
        {"contrast": "C1", "docs_up": 7, "docs_down": 1, "p_sign": p[0], "p_holm_sign": 3 * p[0],
         "reject_holm_sign": False},
        {"contrast": "C2", "docs_up": 8, "docs_down": 0, "p_sign": p[1], "p_holm_sign": 4 * p[1],
         "reject_holm_sign": True},
        {"contrast": "C3", "docs_up": 4, "docs_down": 4, "p_sign": 1.0, "p_holm_sign": 1.0,
         "reject_holm_sign": False},
        {"contrast": "C4", "docs_up": 3, "docs_down": 2, "p_sign": 1.0, "p_holm_sign": 1.0,
         "reject_holm_sign": False}]
    # below stats.min_docs the same p-values, but nothing is rejected and nothing printed
    assert [r["p_holm_sign"] for r in out["below"]] == [r["p_holm_sign"] for r in out["rows"]]
    assert not any(r["reject_holm_sign"] for r in out["below"])
    # the user's family of one: Holm leaves its p alone
    assert out["user"] == [{"contrast": "U1", "docs_up": 7, "docs_down": 1, "p_sign": p[0], "p_holm_sign": p[0],
                            "reject_holm_sign": False}]
    # 08: its cells before dz, after the calibrated test's (and TOST's, where declared); its note and sentence
    for cols, before in ((out["table1"], "Decided by"), (out["table1_with_tost"], "TOST")):
        assert cols.index(before) < cols.index("Docs +/-") == cols.index("Sign Holm p") - 1 < cols.index("dz")
    assert out["printed"] == [{"Contrast": "C1", "Docs +/-": "7/1", "Sign Holm p": "0.211"},
                              {"Contrast": "C2", "Docs +/-": "8/0", "Sign Holm p": "0.031"},
                              {"Contrast": "C3", "Docs +/-": "4/4", "Sign Holm p": "1.000"},
                              {"Contrast": "C4", "Docs +/-": "3/2", "Sign Holm p": "1.000"}]
    assert [r["Sign Holm p"] for r in out["printed_below"]] == ["\u2014"] * 4
    assert out["user_printed"] == [{"Contrast": "U1 \u00a7", "Docs +/-": "7/1", "Sign Holm p": "0.070"}]
    note = ("Sign test: documents whose mean delta is above / below zero (ties left out); exact two-sided binomial "
            "p, Holm within the family.")
    assert note in out["notes"] and note in out["user_notes"]
    assert [s for s in out["sentences"] if s.startswith("The sign test")] == [
        "The sign test counts the documents whose mean delta is above and below zero (Docs +/-): whether more "
        "gain than lose, whatever the size of each change. It has no parameter to declare."]
    # what the goldens pin (a section a file pinned before it does not hold), and the manifests record nothing
    assert "sign" in out["optional"]
    assert out["golden"]["sign"] == {"C1": {"docs_up": 7, "docs_down": 1, "p_holm": 3 * p[0]},
                                     "C2": {"docs_up": 8, "docs_down": 0, "p_holm": 4 * p[1]},
                                     "C3": {"docs_up": 4, "docs_down": 4, "p_holm": 1.0},
                                     "C4": {"docs_up": 3, "docs_down": 2, "p_holm": 1.0}}
    assert out["golden_user"][-1] == {} and "sign_declared" not in out["records"]


def test_the_pages_test_file_passes_as_written_against_the_copy(tmp_path):
    """The page's second file, tests/test_<your_verdict>.py, is a test that runs: pytest passes it against the
    copy with the page's module (its worked example, scipy's oracle and a family's Holm)."""
    lib = perform("Another verdict", tmp_path)
    done = in_copy(tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                   "tests/test_sign.py", lib=lib, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert re.search(r"\b9 passed\b", done.stdout), done.stdout[-2000:]


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
    (_planted("two", 20, ("one_col", "two_col")), "both declare the column 'one_col'"),
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
