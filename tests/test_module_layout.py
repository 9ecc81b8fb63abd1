"""The split modules (issue 15 §6) and their signatures (issue 15 §4).

* ``induce``, ``queries`` and ``tables`` became sub-packages: every public name the single modules had is still
  reachable as ``chunkstudy.<module>.<name>``, and is the very object its new home defines.
* No policy default hides in a public signature: guarded once, for every module, by
  tests/test_typed_params.py (one list of exceptions, each with its reason).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from chunkstudy import induce, queries, tables

#: The public names of the single modules before the split (issue 15 §6), minus the two removed on purpose:
#: ``induce.stats_table`` and its ``PAPER_INDUCTION`` (the same numbers as ``tables.induction``).
OLD_PUBLIC = {
    "induce": ["OUTPUT_SCHEMA", "PROMPT", "CORRECTION", "PROMPT_ALLOWANCE_TOKENS", "CHARS_PER_TOKEN", "LOG_COLUMNS",
               "InductionError", "parse_reply", "type_violations", "outline_violations", "repair",
               "is_valid_outline", "windows_for", "build_messages", "gap_scores", "depth_scores",
               "texttiling_boundaries", "titled_outline", "induce_structure", "span_identity", "induction_stats",
               "outline_view", "outlines_side_by_side", "model_note"],
    "queries": ["QTYPES", "QUERY_COLUMNS", "SAMPLE_COLUMNS", "FUNNEL_COLUMNS", "GEN_STEPS", "HARVEST_STEPS",
                "QUERY_SCHEMA", "SYSTEM", "RULES", "PROMPTS", "PARAPHRASE", "template_hash", "sentence_spans",
                "top_level_sections", "sentence_runs", "sample_doc_spans", "sample_spans", "generation_messages",
                "paraphrase_messages", "parse_query", "names_title", "generate", "balance", "pick_docs",
                "from_generated", "from_harvested", "build_queries", "by_type", "inputs_overview", "client_for",
                "funnel_facts", "capability_note", "examples"],
    "tables": ["CONDITION_ORDER", "METRIC_ORDER", "CONTRAST_QUESTIONS", "CONDITIONS", "PAPER_QUERY_STEPS", "PAPER",
               "DASH", "fmt_num", "fmt_delta", "fmt_int", "fmt_pct", "fmt_ci", "fmt_p", "fmt_n", "Table",
               "latex_escape", "to_latex", "table1", "table2", "table4", "corpus_funnel", "INDUCTION_ROWS",
               "induction", "query_funnel", "size_matching", "placebo", "dose_response", "section_recall_table",
               "reranker_lift", "per_type", "fmt_approx_n", "paper_source_label", "fmt_needed", "power"],
}
PACKAGES = {"induce": induce, "queries": queries, "tables": tables}


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
def test_the_old_public_names_are_still_reachable(name):
    pkg = PACKAGES[name]
    missing = [n for n in OLD_PUBLIC[name] if not hasattr(pkg, n)]
    assert missing == [], f"chunkstudy.{name} lost {missing}"


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
