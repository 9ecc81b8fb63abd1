"""The study's design, declared once (chunkstudy.design): every condition has what every consumer needs, every
registry that used to restate the conditions or the metrics derives from the declaration, and no module holds a
second list of them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from chunkstudy import config, design, design_metrics, metrics, stats
from chunkstudy.chunks import chunk_sets
from chunkstudy.queries import bm25
from chunkstudy.report import figures, tables

LIB = Path(__file__).resolve().parents[1] / "lib" / "chunkstudy"
#: The paper's conditions and metric names, written out here as the oracle (docs/design.md, paper §3.2 and §5.1).
PAPER_CONDITIONS = ["A0", "A1", "A2", "A3-d1", "A3-d2", "A3", "P", "A4", "G2", "G3", "G4"]
PAPER_METRICS = ["cov-nDCG@10", "recall@50", "MRR", "nDCG@10", "budget-cov@512", "budget-cov@1024",
                 "budget-cov@2048"]


# ---------------------------------------------------------------------------------------------------- conditions

def test_each_condition_is_declared_once_in_the_papers_order():
    assert list(design.CONDITION_NAMES) == PAPER_CONDITIONS
    assert len(set(design.CONDITION_NAMES)) == len(design.CONDITIONS)
    with pytest.raises(ValueError, match=r"unknown condition 'A5'; conditions: \['A0', 'A1'"):
        design.condition("A5")


@pytest.mark.parametrize("name", PAPER_CONDITIONS)
def test_every_condition_has_a_colour_a_table4_row_and_a_chunk_set(name):
    c = design.condition(name)
    assert re.fullmatch(r"#[0-9a-f]{6}", c.colour) and figures.color(name) == c.colour
    row = tables.table4([name], None, "llm", route_sections=5).data.iloc[0]
    assert row["condition"] == name and all(row[k] for k in ("boundaries", "prefix", "retrieval"))
    assert c.chunk_set in design.CHUNK_SETS and c.boundaries in design.BOUNDARIES
    assert c.prefix in design.PREFIXES and c.routing in design.ROUTINGS
    assert c.matched_to is None or c.matched_to in design.CONDITION_NAMES


def test_colours_tell_conditions_apart():
    colours = [c.colour for c in design.CONDITIONS]
    assert len(set(colours)) == len(colours)


def test_every_declared_condition_gets_chunks_from_its_chunk_set():
    """build_all cuts every declared condition, each on the offsets of its declared chunk set."""
    from test_conditions import PARAMS, contexts_for, make_corpus

    docs, paras, gold, induced = make_corpus(n_docs=2)
    out = chunk_sets.build_all(docs, paras, gold, induced, contexts_for(docs, paras, induced),
                               config.record("chunking", PARAMS))
    ch = out["chunks"]
    assert list(ch["condition"].unique()) == PAPER_CONDITIONS
    spans = {c: ch.loc[ch["condition"] == c, ["doc_id", "start", "end"]].reset_index(drop=True)
             for c in PAPER_CONDITIONS}
    for c in design.CONDITIONS:
        pd.testing.assert_frame_equal(spans[c.name], spans[c.chunk_set])
        got = ch.loc[ch["condition"] == c.name, ["prefix_depth", "shares_vectors_with"]]
        assert (got["prefix_depth"] == c.prefix_depth(PARAMS["depths"])).all()
        assert got["shares_vectors_with"].isna().all() if c.shares_vectors_with is None else \
            (got["shares_vectors_with"] == c.shares_vectors_with).all()


def test_derived_facts_of_the_conditions():
    assert tuple(design.CHUNK_SETS) == ("A0", "A2", "G2")
    assert design.CHUNK_SETS["A0"].matched_to == "A2" and design.PAPER_CUTS == {"fixed": "A0", "induced": "A2",
                                                                               "gold": "G2"}
    assert design.TWO_STAGE == ("A4", "G4") == tuple(config.SCHEMA["retrieve"]["two_stage_conditions"].default)
    assert {c.name: c.shares_vectors_with for c in design.CONDITIONS if c.shares_vectors_with} == \
        {"A4": "A3", "G4": "G3"}
    assert stats.DEPTH_LADDER == (("A2", 0), ("A3-d1", 1), ("A3-d2", 2), ("A3", 3))   # paper §6
    assert [c for c in PAPER_CONDITIONS if design.condition(c).structural] == list(design.STRUCTURAL)
    assert set(design.names_where(boundaries=("fixed", "induced"))) == {"A0", "A1", "A2", "A3-d1", "A3-d2", "A3", "P",
                                                                         "A4"}
    assert {c.name for c in design.CONDITIONS if c.needs() == ("sections_gold",)} == {"G2", "G3", "G4"}
    assert {c.name for c in design.CONDITIONS if c.needs() == ("sections_induced",)} == {
        "A0", "A1", "A2", "A3-d1", "A3-d2", "A3", "P", "A4"}  # A0's windows are matched to A2, cut from induced
    assert [design.condition(c).prefix_depth([1, 2, 4]) for c in PAPER_CONDITIONS] == [0, 0, 0, 1, 2, 4, 4, 4, 0, 4, 4]
    assert bm25.chunk_structure("G3") == "sections_gold" and bm25.chunk_structure("P") == "sections_induced"


def test_the_parameter_schema_takes_its_choices_and_defaults_from_the_declaration():
    s = config.SCHEMA
    assert s["chunking"]["conditions"].default == PAPER_CONDITIONS
    assert tuple(s["chunking"]["conditions"].choices) == design.CONDITION_NAMES
    assert tuple(s["retrieve"]["two_stage_conditions"].choices) == design.CONDITION_NAMES
    assert s["retrieve"]["two_stage_conditions"].default == ["A4", "G4"]
    assert tuple(s["queries"]["bm25_condition"].choices) == ("A2", "A3-d1", "A3-d2", "A3", "P", "A4", "G2", "G3",
                                                             "G4")
    assert s["stats"]["contrasts"].default == {"C1": ["A3", "A1"], "C2": ["A3", "P"], "C3": ["G3", "A3"],
                                               "C4": ["A4", "A3"]}


def test_contrast_questions_come_from_the_declared_contrasts():
    assert tables.CONTRAST_QUESTIONS[("A3", "P")] == "content vs. tokens"
    assert design.contrast_question("A4", "A3") == "routing vs. flat" and design.contrast_question("A0", "A1") == ""


# ---------------------------------------------------------------------------------------------------- metrics

def test_metric_names_follow_the_declaration():
    defaults = {k: p.default for k, p in config.SCHEMA["metrics"].items()}
    # the paper's metrics come first, in its order; a metric a user registers follows them
    assert design.metric_names(defaults)[:len(PAPER_METRICS)] == PAPER_METRICS
    assert design.metric_names(defaults) == list(tables.METRIC_ORDER)
    assert design.metric_names({**defaults, "cutoff": 5, "recall_k": 20, "budgets": [256]})[:5] == [
        "cov-nDCG@5", "recall@20", "MRR", "nDCG@5", "budget-cov@256"]
    assert design.metric_of("budget-cov@1024") == (design.metric("budget-cov"), 1024)
    assert design.metric_of("MRR") == (design.metric("MRR"), 0) and design.metric_of("nDCG") is None
    assert design.metric_of("cov-nDCG@10")[0] is design.PRIMARY_METRIC
    names = ["budget-cov@2048", "other", "MRR", "budget-cov@512", "cov-nDCG@20", "recall@5"]
    assert sorted(names, key=design.metric_order_key) == ["cov-nDCG@20", "recall@5", "MRR", "budget-cov@512",
                                                          "budget-cov@2048", "other"]


def test_a_rank_cut_family_declares_the_k_axis_and_saturation_that_the_curve_and_the_report_read(monkeypatch):
    """What the k axis varies, and which metrics the report calls 1 by construction, is read from each family's
    declaration (Metric.k_axis, Metric.saturates), not from its parameter's or its key's name: a family added to
    METRICS, cut at recall_k, is on the k axis, scored at each k and warned about, with no other change."""
    from chunkstudy.metrics import cutoffs
    from chunkstudy.report import report

    class Hit(design.Metric):
        """a relevant chunk among the top recall_k"""

        key, template, rank_cut, k_axis, saturates = "hit", "hit@{recall_k}", True, True, True

    hit = Hit()  # declared, not registered: the registry is patched for this test alone
    monkeypatch.setattr(design, "METRICS", [*design.METRICS, hit])
    monkeypatch.setattr(design_metrics, "METRICS", design.METRICS)  # where the metric functions read it
    assert design.metric_axis(["hit@50", "recall@50"], (5, 50)) == [
        ("hit@5", "hit", 5), ("hit@50", "hit", 50), ("recall@50", "recall@50", None)]
    assert design.metric_axis(["hit@50"], ()) == [("hit@50", "hit", 50)]  # unstated: its own cut-off
    mp = config.record("metrics")
    assert cutoffs.extra_cutoffs(design.metric_axis(["hit@50", "cov-nDCG@10"], (10, 50)), mp.cutoff,
                                 design.metric_names(vars(mp))) == {10: ["hit@10"], 50: ["cov-nDCG@50"]}
    assert (cutoffs.at_cutoff(mp, 5).cutoff, cutoffs.at_cutoff(mp, 5).recall_k) == (5, 5)
    warned = report.saturation_warnings({"A0": 25, "G2": 51}, mp)
    assert [w.split(" is 1 by construction")[0] for w in warned] == ["recall@50", "hit@50"]
    with pytest.raises(ValueError, match="declare rank_cut"):
        class X(design.Metric):
            """x"""

            key, template, k_axis = "x", "x@{cutoff}", True


@pytest.mark.parametrize("params", [{}, {"cutoff": 3, "recall_k": 4, "budgets": [8, 64]}])
def test_score_runs_computes_every_declared_metric_in_order(params):
    """Each declared metric family is computed by metrics.score_runs (a family without a computation raises),
    under the names and in the order the declaration gives."""
    chunks = pd.DataFrame({"condition": "A2", "doc_id": "d", "chunk_id": ["a", "b", "c"], "start": [0, 40, 70],
                           "end": [40, 70, 100], "n_content_tokens": [10, 8, 9], "n_prefix_tokens": 0})
    runs = pd.DataFrame({"embedder": "e", "reranker": "none", "condition": "A2", "query_id": "q",
                         "rank": [1, 2, 3], "chunk_id": ["b", "a", "c"]})
    queries = pd.DataFrame({"query_id": ["q"], "doc_id": ["d"], "spans": [[[30, 60]]], "qtype": ["factoid"]})
    scores = metrics.score_runs(runs, chunks, queries, config.record("metrics", params), "x")
    expected = design.metric_names(config.record("metrics", params).__dict__)
    assert list(pd.unique(scores["metric"])) == expected
    assert scores["value"].notna().all() and ((scores["value"] >= 0) & (scores["value"] <= 1)).all()
    broken = config.record("metrics", params)
    with pytest.raises(KeyError, match="budget-cov"):
        broken.named({"cov-nDCG": 0, "recall": 0, "MRR": 0, "nDCG": 0})


def test_each_metric_is_one_class_with_its_parameters_computation_and_citation():
    """The ir_measures pattern: each registered metric is one class holding its parameters, its computation and its
    docstring (the definition line, then the formula and the citation); the ``metrics`` section is assembled from
    the parameters they declare, each key declared once."""
    for m in design.METRICS:
        cls = type(m)
        assert cls.compute is not design.Metric.compute, m.key
        paragraphs = [p for p in (cls.__doc__ or "").split("\n\n") if p.strip()]
        assert len(paragraphs) >= 2 and m.definition, f"{m.key}: a definition line, then its formula and citation"
    declared = [name for name, _, _ in design.parameter_fields()]
    assert declared[:4] == ["cutoff", "recall_k", "budgets", "budget_partial"]  # the paper's, then a user's
    assert list(config.SCHEMA["metrics"]) == [*declared, "span_frac", "chunk_frac"]
    assert {m.parameter for m in design.METRICS} - {None} <= set(config.SCHEMA["metrics"])


def test_a_metric_is_refused_when_its_declaration_clashes(monkeypatch):
    """register refuses a second key or a parameter another metric declares (naming both classes); the section's
    assembly refuses a template whose parameter no metric declares; a metric without a docstring is refused."""
    from dataclasses import dataclass

    from chunkstudy import params_analysis
    from chunkstudy.paramspec import param

    monkeypatch.setattr(design, "METRICS", list(design.METRICS))  # registered for this test alone
    monkeypatch.setattr(design_metrics, "METRICS", design.METRICS)
    with pytest.raises(ValueError, match=r"metric Again: key 'MRR' .* is MRR's already"):
        @design_metrics.register
        class Again(design.Metric):
            """again"""

            key, template = "MRR", "MRR2"

    with pytest.raises(ValueError, match=r"parameters \['cutoff'\] are declared by CoverageNDCG already"):
        @design_metrics.register
        class Twice(design.Metric):
            """twice"""

            key, template = "twice", "twice@{cutoff}"

            @dataclass(frozen=True)
            class Parameters:
                cutoff: int = param(3, "again", ge=1)

    @design_metrics.register
    class Orphan(design.Metric):
        """orphan"""

        key, template = "orphan", "orphan@{nope}"

    with pytest.raises(TypeError, match=r"metric 'orphan': its template 'orphan@\{nope\}' names the parameter "
                                        r"'nope', which no metric declares"):
        params_analysis._metrics_params()
    with pytest.raises(ValueError, match="its docstring is its definition"):
        class Bare(design.Metric):
            key, template = "bare", "bare"


def test_metric_rows_select_a_family():
    t = pd.DataFrame({"metric": PAPER_METRICS, "mean": np.arange(7.0)})
    assert stats.metric_rows(t, "budget-cov")["metric"].tolist() == PAPER_METRICS[4:]
    assert stats.metric_rows(t, "recall")["mean"].tolist() == [1.0]


# ---------------------------------------------------------------------------------------------------- declared once

def _literal_strings(node: ast.AST) -> set[str] | None:
    elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else \
        [k for k in node.keys if k is not None] if isinstance(node, ast.Dict) else None
    if elts is None:
        return None
    return {e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}


def test_no_module_holds_a_second_registry_of_conditions_or_metrics():
    """A literal collection naming three or more conditions, or two or more metrics, outside chunkstudy.design is a
    second registry waiting to disagree with it (paper.py holds the paper's own numbers, keyed by condition)."""
    found = []
    for path in sorted(LIB.rglob("*.py")):
        if path.name in ("design.py", "paper.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            strings = _literal_strings(node)
            if not strings:
                continue
            conds = strings & set(PAPER_CONDITIONS)
            named = {s for s in strings if design.metric_of(s) is not None}
            if len(conds) >= 3 or len(named) >= 2:
                found.append(f"{path.relative_to(LIB)}:{node.lineno}: {sorted(conds | named)}")
    assert found == []


#: The prefix registry: the kinds' base and registry, and the one module of each kind (everything else reads the
#: declaration).
PREFIX_REGISTRY = ("design.py", "prefix_kinds.py", "prefix/")


def _prefix_name_checks(source: str) -> list[str]:
    """The places in ``source`` that decide by a prefix kind's name: a comparison (``==``, ``!=``, ``in``,
    ``not in``) of an expression that reads a prefix with a kind's name (or a literal collection holding one), or
    a keyword ``prefix=<kind name>`` (a lookup of conditions by their prefix's name)."""
    kinds = set(design.PREFIXES)

    def names_a_kind(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in kinds
        return bool((_literal_strings(node) or set()) & kinds)

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(names_a_kind(x) for x in sides) and any("prefix" in ast.unparse(x) for x in sides
                                                            if not names_a_kind(x)):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.keyword) and node.arg == "prefix" and names_a_kind(node.value):
            found.append(f"{node.value.lineno}: prefix={ast.unparse(node.value)}")
    return found


def test_the_prefix_name_check_finds_what_it_looks_for():
    """The scan below is not vacuous: it finds each form a decision by a kind's name took before issue 44."""
    assert len(_prefix_name_checks('a = c.prefix == "context"\nb = getattr(c, "prefix", "") == "context"\n'
                                   'd = spec["prefix"] != "placebo"\ne = c.prefix in ("context", "placebo")\n'
                                   'f = _the(prefix="placebo")\n')) == 5
    assert _prefix_name_checks('a = r.reranker == "none"\nb = c.prefix == design.NO_PREFIX\n'
                               'c = sides.get("placebo")\n') == []


def test_no_module_outside_the_prefix_registry_decides_by_a_prefix_kinds_name():
    """Every decision about a prefix kind (whether it is costed, drawn dashed, shown in Figure 1, seeded, keeps a
    side table) reads its declaration, design.PrefixKind, never its name: a kind added to design.PREFIX_KINDS is
    treated by what it declares. A table that happens to be called "placebo" is a table, not a kind."""
    found = [f"{path.relative_to(LIB)}:{hit}" for path in sorted(LIB.rglob("*.py"))
             if not str(path.relative_to(LIB)).startswith(PREFIX_REGISTRY)
             for hit in _prefix_name_checks(path.read_text(encoding="utf-8"))]
    assert found == []


#: Where a prefix kind's table names may be looked up: the kinds' base and registry, each kind's own module (which
#: declares its tables), and the report, which renders the tables 04 wrote under the names 08's declared reads give
#: them.
KIND_TABLE_REGISTRY = ("design.py", "prefix_kinds.py", "prefix/")
ARTIFACT_READERS = ("report/",)


def _kind_table_checks(source: str) -> list[str]:
    """The places in ``source`` that decide by the name of a table a prefix kind declares (its side table or a table
    derived from it, :func:`chunkstudy.design.side_tables`, :func:`chunkstudy.design.derived_tables`): a reference to
    ``placebo.TABLE``, or such a name as a literal in a comparison, a subscript, the key of ``.get`` /
    ``.setdefault`` / ``.pop``, or a key of a dict display."""
    names = set(design.side_tables()) | set(design.derived_tables())

    def names_a_table(node: ast.AST | None) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        return node is not None and bool((_literal_strings(node) or set()) & names)

    found = []
    for node in ast.walk(ast.parse(source)):
        hit = False
        if isinstance(node, ast.Attribute):
            hit = node.attr == "TABLE" and isinstance(node.value, ast.Name) and node.value.id == "placebo"
        elif isinstance(node, ast.Compare):
            hit = any(names_a_table(x) for x in [node.left, *node.comparators])
        elif isinstance(node, ast.Subscript):
            hit = names_a_table(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            hit = node.func.attr in ("get", "setdefault", "pop") and names_a_table(node.args[0])
        elif isinstance(node, ast.Dict):
            hit = any(names_a_table(k) for k in node.keys)
        if hit:
            found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_the_kind_table_check_finds_what_it_looks_for():
    """The scan below is not vacuous: it finds each form 04's wiring of the placebo's extras to its table's name took
    (the buckets and the residual summary built for the table called "placebo")."""
    assert len(_kind_table_checks('placebos = sides.get(placebo.TABLE, {})\n'
                                  'out = {"placebo_buckets": keyed(placebos, "placebo_buckets")}\n'
                                  'if c.name in sides["placebo"]:\n    pass\n'
                                  'ok = table == "placebo"\n')) == 4
    assert _kind_table_checks('cols = stages.columns("placebo_buckets")\nx = design.side_tables()\n'
                              'y = sides.get(kind.side_table)\nz = c.prefix_kind.side_table is None\n') == []


def test_no_module_outside_the_prefix_registry_decides_by_a_prefix_kind_s_table_name():
    """Which side tables 04 writes, which tables it derives from them and what its summary says of them are read from
    the kinds' declarations (design.PrefixKind.side, derived, summary) and their methods (each kind's module of
    lib/chunkstudy/prefix/), never from a table's name: a kind added with a side table and a derived table gets both
    written, and its summary, without code that names it (before, the placebo's buckets and residual summary were
    wired to the table called "placebo")."""
    found = [f"{rel}:{hit}" for path in sorted(LIB.rglob("*.py"))
             if not (rel := str(path.relative_to(LIB))).startswith(KIND_TABLE_REGISTRY + ARTIFACT_READERS)
             for hit in _kind_table_checks(path.read_text(encoding="utf-8"))]
    assert found == []


#: The retrieval modes' registry: their declaration and the function of each.
MODE_REGISTRY = ("design.py", "retrieve/modes.py")


def _mode_name_checks(source: str) -> list[str]:
    """The places in ``source`` that decide by a retrieval mode's name: a comparison (``==``, ``!=``, ``in``, ``not
    in``) of an expression that reads a mode with a mode's name (or a literal collection holding one)."""
    names = set(design.MODES)

    def names_a_mode(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        return bool((_literal_strings(node) or set()) & names)

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(names_a_mode(x) for x in sides) and any("mode" in ast.unparse(x) for x in sides
                                                            if not names_a_mode(x)):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_mode_name_check_finds_what_it_looks_for():
    assert len(_mode_name_checks('a = mode.name == "bm25"\nb = "hybrid" in p.modes\nc = m.mode != "dense"\n'
                                 'd = mode.name in ("bm25", "hybrid")\n')) == 4
    assert _mode_name_checks('a = mode.lexical\nb = design.DENSE in p.modes\nc = r.embedder == "bm25x"\n') == []


def test_no_module_outside_the_mode_registry_decides_by_a_retrieval_mode_s_name():
    """Whether a mode reads vectors, a BM25 index or both, what its retriever is called and which retrievers a
    reranker rescores are read from design.RetrievalMode, never from its name: a mode added to
    design.RETRIEVAL_MODES (with its function in retrieve/modes.py) is treated by what it declares."""
    found = [f"{path.relative_to(LIB)}:{hit}" for path in sorted(LIB.rglob("*.py"))
             if str(path.relative_to(LIB)) not in MODE_REGISTRY
             for hit in _mode_name_checks(path.read_text(encoding="utf-8"))]
    assert found == []


def test_the_recipe_is_declared_on_the_paper_s_conditions_and_the_declared_modes():
    assert design.RECIPE[0].mode == design.DENSE and not design.RECIPE[0].reranked  # the baseline: plain embeddings
    assert {s.condition for s in design.RECIPE} == {"A0", "A1"}
    assert design.recipe_modes() == design.MODES
    assert [s.name for s in design.RECIPE if s.anthropic] == ["R3", "R5"]
    with pytest.raises(ValueError, match="unknown retrieval mode"):
        design.RecipeStep("X", "A0", "sparse", False, "x")
    with pytest.raises(ValueError, match="unknown condition"):
        design.RecipeStep("X", "Z9", "bm25", False, "x")
