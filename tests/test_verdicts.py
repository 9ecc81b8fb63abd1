"""docs/extending.md, "Another verdict", performed exactly: a verdict beside Holm's is one class (its statistic,
stats.verdict_protocols.VerdictStatistic, and how 08 prints it, VerdictRendering), one entry in
stats.verdicts.VERDICTS and a test. Registered at run time,
the toy verdict below runs through 07's contrast code on a small family, is printed by the report's table code
with its column and note, and reaches what the goldens pin and the manifests record; nothing else is edited."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from chunkstudy import config, design, golden, stats
from chunkstudy.report import tables
from chunkstudy.stats import verdict_protocols, verdicts


# ---- the page's example, verbatim: the module (its registration is the fixture below) ------------------------
@dataclass(frozen=True)
class SignVerdict:
    """The sign the 95% CI shows: "+" (above 0), "-" (below 0) or "?" (it holds 0)."""

    name = "sign"
    columns = ("sign",)
    record_name = "sign_declared"
    golden_section = "sign"
    sentence = "The sign column says which side of zero each 95% CI lies on."

    # its statistic (VerdictStatistic): 07, the manifests, the goldens
    def decide(self, test, family):            # one dict of its columns per contrast, in family order
        return [{"sign": "+" if t.ci_low > 0 else "-" if t.ci_high < 0 else "?"} for t in family]

    def for_cell(self, stats_params, metric):  # every cell has it, with no note
        return self, ""

    def carried(self, table):                  # a 07 contrast table has its columns
        return table is not None and "sign" in table.columns

    def record(self, stats_params):            # what each stage's manifest records of its declaration
        return {"alpha": float(stats_params.alpha)}

    def golden(self, row):
        return {"sign": str(row.sign)}

    def golden_user(self, row):
        return {"sign": str(row.sign)}

    # how 08 prints it (VerdictRendering)
    def cells(self, table, ok, fmt):           # header -> cells, placed before dz
        return {"Sign": [s if good else fmt.DASH for s, good in zip(table["sign"], ok)]}

    def notes(self, table, fmt):
        return ("Sign: the side of zero the 95% CI lies on (? = it holds zero).",)

    def registration(self, stats_params, recorded):
        return "Its alpha was declared before the run." if recorded else "Stage 01 recorded no alpha."


#: The verdict as registered.
SIGN = SignVerdict()
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture()
def registered(monkeypatch):
    monkeypatch.setitem(verdicts.VERDICTS, SIGN.name, SIGN)   # the page's edit of stats/verdicts.py, at run time


def _family():
    effects = {"A0": 0.0, "A1": 0.0, "A3": 0.08, "P": 0.0, "G3": 0.03, "A4": 0.08}
    scores, queries = stats.simulate_scores(48, 192, effects, seed=5)  # above stats.min_docs: inference
    p = config.record("stats", {"n_boot": 1000, "seed": 3})
    return scores, queries, p, design.PrimaryCell(p.primary_metric, "strong", p.primary_reranker)


def test_a_verdict_registered_at_run_time_runs_through_07_and_is_printed_by_08(registered):
    scores, queries, p, primary = _family()
    contrasts = stats.contrasts_table(scores, queries, p, primary, "sim")
    # 07: its column after the declared ones (no TOST without a bound), decided from the same draws as the CI
    assert list(contrasts.columns)[-1] == "sign" and "equivalence" not in contrasts
    want = ["+" if lo > 0 else "-" if hi < 0 else "?" for lo, hi in zip(contrasts["ci_low"], contrasts["ci_high"])]
    assert contrasts["sign"].tolist() == want and "+" in want and "?" in want
    # 08: Table 1 prints it before dz, with its note; the user's table likewise
    t1 = tables.table1(contrasts)
    cols = list(t1.display.columns)
    assert cols.index("Sign") == cols.index("dz") - 1
    primary_rows = contrasts[contrasts["confirmatory"]]
    assert t1.display["Sign"].tolist() == primary_rows["sign"].tolist()
    assert "Sign: the side of zero the 95% CI lies on (? = it holds zero)." in t1.notes
    assert "sign" in t1.data.columns
    user = stats.user_contrasts_table(scores, queries, p, primary, "sim", {"U1": ["A3", "A0"]})
    shown = tables.user_contrasts(user, primary.name, "Declared before the run.")
    assert "Sign" in shown.display.columns and "Sign: the side" in " ".join(shown.notes)
    # the goldens pin its section (optional in a file pinned before it), the manifests record its declaration
    assert "sign" in golden.optional()
    row = next(primary_rows.itertuples())
    assert SignVerdict().golden(row) == {"sign": row.sign}
    assert verdicts.records(p)["sign_declared"] == {"alpha": 0.05}
    # 07 and the goldens see its statistic, 08 its rendering, both because the table carries its columns
    assert SIGN in verdicts.carried(contrasts) and SIGN in verdicts.shown(contrasts)
    assert verdicts.recorded(verdicts.records(p))["sign"] == {"alpha": 0.05}  # what 08's registration sentence reads


def test_without_the_registration_nothing_of_it_appears():
    scores, queries, p, primary = _family()
    contrasts = stats.contrasts_table(scores, queries, p, primary, "sim")
    assert "sign" not in contrasts and "Sign" not in tables.table1(contrasts).display
    assert "sign" not in golden.optional() and "sign_declared" not in verdicts.records(p)


def _page_section() -> str:
    page = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text(encoding="utf-8")
    return page.split("### Another verdict", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]


def test_the_pages_verdict_module_runs_as_written_and_meets_both_halves():
    """The page's verdict module, executed alone as a fresh module (its own imports, nothing of this file's), defines
    a class that meets the statistic half and the rendering half (a missing import is a NameError here)."""
    code = re.search(r"```python\n(.*?)```", _page_section(), flags=re.S).group(1)
    namespace: dict = {"__name__": "your_verdict"}
    exec(compile(code, "lib/chunkstudy/stats/<your_verdict>.py", "exec"), namespace)
    made = namespace["SignVerdict"]()
    assert isinstance(made, verdict_protocols.VerdictStatistic)
    assert isinstance(made, verdict_protocols.VerdictRendering)
    assert isinstance(made, verdict_protocols.RegisteredVerdict)


def test_the_page_shows_this_verdict_and_names_the_files_it_touches():
    """The page's verdict module is this file's (its import and the class), its registry edit registers that class,
    and the files it names are the verdict's module, the registry and a test."""
    section = _page_section()
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    mine = {ln.strip() for ln in Path(__file__).read_text(encoding="utf-8").splitlines()}
    lines = [ln.strip() for ln in code.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(lines) > 25 and [ln for ln in lines if ln not in mine] == []
    edit = re.search(r"```diff\n(.*?)```", section, flags=re.S).group(1)
    added = [ln[1:].strip() for ln in edit.splitlines() if ln.startswith("+")]
    assert "from . import decision, equivalence, sign" in added and "sign.SIGN.name: sign.SIGN}" in added
    named = re.findall(r"^\d+\. `([^`]+)`", section, flags=re.M)
    assert named == ["lib/chunkstudy/stats/<your_verdict>.py", "lib/chunkstudy/stats/verdicts.py",
                     "tests/test_<your_verdict>.py"]
