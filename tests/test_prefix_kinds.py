"""The prefix kinds, one class per module of lib/chunkstudy/prefix/ (chunkstudy.prefix_kinds): the registry finds
them by their files and refuses a declaration that does not hold together, naming the module; docs/extending.md's
"A prefix kind" performed as the page shows it (one library file and its test, applied to a copy of the library
and run through 02's and 04's code); and a kind with a derived table and a summary given both by 04 from its
declaration alone. No registry is patched: a kind is found the way the library finds its own (the walk-through
through the runner and all eight stages is tests/test_walkthroughs.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_extending import ROOT, in_copy, perform, run_copy

from chunkstudy import codehash, design, prefix_kinds, stages

#: The kinds the project declares (where the page was already followed: context_path too, set aside by perform).
PAPER_KINDS = [k for k in design.PREFIX_KINDS if k != "context_path"]
KIND_HEAD = "import pandas as pd\nfrom chunkstudy.prefix_kinds import PrefixKind\nfrom chunkstudy.schema import Table\n"


def _package(tmp_path: Path, monkeypatch, name: str, modules: dict[str, str]) -> str:
    """A package ``name`` under ``tmp_path`` holding ``modules`` (module name -> source), importable."""
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for module, source in modules.items():
        (pkg / f"{module}.py").write_text(KIND_HEAD + source)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _kind(cls: str, name: str, order: int, body: str = "", render: bool = True) -> str:
    method = "    def render(self, chunks, inputs):\n        return [''] * len(chunks), None\n" if render else ""
    return (f"class {cls}(PrefixKind):\n    name = {name!r}\n    order = {order}\n    text = 'x'\n{body}{method}\n"
            f"KIND = {cls}()\n")


def test_the_paper_kinds_are_found_by_their_files_in_declared_order_with_their_tables():
    """The paper's five kinds, one module each, first in their declared order (the parameters' choices; a user's
    kind follows them); the placebo's two tables are declared by its module and gathered among 04's writes as the
    very records it declares."""
    paper = ["none", "title", "context", "path", "placebo"]
    assert list(design.PREFIX_KINDS)[:5] == paper and list(design.PREFIXES) == list(design.PREFIX_KINDS)
    assert sorted(p.stem for p in (ROOT / "lib" / "chunkstudy" / "prefix").glob("[a-z]*.py")) == sorted(
        design.PREFIX_KINDS)
    assert [(k.heading_path, k.contexts, k.control) for k in list(design.PREFIX_KINDS.values())[:5]] == [
        (False, False, False), (False, False, False), (False, True, False), (True, False, False), (True, False, True)]
    placebo = design.PREFIX_KINDS["placebo"]
    assert design.prefix_tables()[:2] == (placebo.side, *placebo.derived)
    assert [t.name for t in design.prefix_tables()][:2] == ["placebo", "placebo_buckets"]
    writes = stages.stage("04_chunk_embed").writes
    assert all(any(w is t for w in writes) for t in design.prefix_tables())
    assert stages.writer("placebo_buckets") == "04_chunk_embed"


def test_every_kind_module_is_in_the_code_of_the_stages_that_read_the_kinds(tmp_path):
    """The registry imports its package by name, not by an import statement: codehash counts that name as an
    import of every module there, so an edited kind reruns 02 (it reads which kinds read contexts) and 04 (it
    renders them), and a kind added as a new file changes their code hash too."""
    kinds = {f"chunkstudy/prefix/{k}.py" for k in design.PREFIX_KINDS} | {"chunkstudy/prefix_kinds.py"}
    for stage in ("02_induce", "04_chunk_embed"):
        assert kinds <= set(codehash.library_files(ROOT / "notebooks" / f"{stage}.py")), stage
    pkg = tmp_path / "chunkstudy"
    shutil.copytree(ROOT / "lib" / "chunkstudy", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    before = codehash.library_hash(ROOT / "notebooks" / "04_chunk_embed.py", pkg)
    (pkg / "prefix" / "mine.py").write_text(KIND_HEAD + _kind("Mine", "mine", 90))
    assert "chunkstudy/prefix/mine.py" in codehash.library_files(ROOT / "notebooks" / "04_chunk_embed.py", pkg)
    assert codehash.library_hash(ROOT / "notebooks" / "04_chunk_embed.py", pkg) != before


def test_a_new_file_is_a_new_kind_and_the_registry_orders_by_the_declared_order(tmp_path, monkeypatch):
    pkg = _package(tmp_path, monkeypatch, "kinds_ok", {
        "a_late": _kind("Late", "late", 30),
        "b_early": _kind("Early", "early", 10),
        "c_helper": "HELPER = 1\n",  # a module that declares no KIND is a helper, skipped
    })
    found = prefix_kinds.discover(pkg)
    assert list(found) == ["early", "late"]
    assert found["early"].side_table is None and found["early"].derived_tables == ()


@pytest.mark.parametrize("modules, message", [
    ({"a": _kind("A", "same", 10), "b": _kind("B", "same", 20)},
     r"kinds_\w+\.b\.KIND and kinds_\w+\.a\.KIND both declare the name 'same'"),
    ({"a": _kind("A", "one", 10), "b": _kind("B", "two", 10)}, r"both declare the order 10"),
    ({"a": _kind("A", "one", 10, render=False)}, r"kinds_\w+\.a\.KIND: prefix kind one does not define render"),
    ({"a": _kind("A", "one", 10, "    side = Table('t', {'doc_id': 'str'})\n")},
     r"kinds_\w+\.a\.KIND: table t's first column must be 'condition'"),
    ({"a": _kind("A", "one", 10, "    derived = (Table('d', {'condition': 'str'}),)\n")},
     r"prefix kind one derives tables \['d'\] or a summary \(summary=False\) from a side table, and declares none"),
    ({"a": _kind("A", "one", 10, "    side = Table('t', {'condition': 'str'})\n    summary = True\n")},
     r"prefix kind one declares what needs \['pooled', 'facts'\] and does not define them"),
    ({"a": _kind("A", "one", 10, "    side = Table('t', {'condition': 'str'})\n"),
      "b": _kind("B", "two", 20, "    side = Table('t', {'condition': 'str'})\n")}, r"both declare the table 't'"),
])
def test_the_registry_refuses_a_declaration_that_does_not_hold_together_naming_the_module(tmp_path, monkeypatch,
                                                                                          modules, message):
    name = f"kinds_{abs(hash(message)) % 10**8}"
    pkg = _package(tmp_path, monkeypatch, name, modules)
    with pytest.raises(prefix_kinds.PrefixError, match=message):
        prefix_kinds.discover(pkg)


def test_a_kind_declared_as_something_else_is_refused_naming_the_module(tmp_path, monkeypatch):
    pkg = _package(tmp_path, monkeypatch, "kinds_wrong", {"a": "KIND = 'placebo'\n"})
    with pytest.raises(TypeError, match=r"kinds_wrong\.a\.KIND is a str, not a PrefixKind"):
        prefix_kinds.discover(pkg)


# ---- docs/extending.md's "A prefix kind", performed ------------------------------------------------------------

WALK = r'''
import json, sys
from pathlib import Path
import pandas as pd
import pytest
import chunkstudy
from chunkstudy import config, design, designdoc, paramdoc, stages
from chunkstudy.chunks import chunk_sets, chunking, cuts
from chunkstudy.corpus.model import heading_paths
from chunkstudy.prefix_kinds import render_prefix
from chunkstudy.stats import cost

sys.path.insert(0, sys.argv[1])  # the project's tests: its small corpus and chunking parameters
from test_conditions import PARAMS, make_corpus

counter = chunking.load_counter(PARAMS["tokenizer"])
docs, paras, gold, induced = make_corpus(n_docs=4, seed=5)
rec = config.record("chunking", PARAMS)
new = design.Condition("GCTX", "gold", "context_path", depth=2, family=design.EXTRA_FAMILY)
whole = design.Condition("GCTX-late", "gold", "context_path", depth=2, family=design.EXTRA_FAMILY,
                         embedding=design.LATE, of="GCTX")
conds = (*design.run_conditions(["A2", "G2"]), new, whole)
assert new.chunk_set == "G2" and new.needs() == ("sections_gold",)

# stage 02: contexts for every chunk of the chunk set the new kind names, and only it
windows = cuts.context_windows(docs, paras, {"sections_induced": induced, "sections_gold": gold}, conds, rec, counter)
ctx = windows.assign(context=[f"Context {d} {i}" for i, d in enumerate(windows.doc_id)], method="extractive")

# stage 04: the new condition's chunks are G2's, prefixed with the depth-2 path and the context
out = chunk_sets.build_all(docs, paras, gold, induced, ctx, rec, counter, conds)
ch = out["chunks"]
g2 = ch[ch["condition"] == "G2"].reset_index(drop=True)
mine = ch[ch["condition"] == "GCTX"].reset_index(drop=True)
side = out["context_paths"]
part = side[side["condition"] == "GCTX"]
assert part[["doc_id", "start"]].reset_index(drop=True).equals(mine[["doc_id", "start"]])
assert side[side["condition"] == "GCTX-late"].drop(columns="condition").reset_index(drop=True).equals(
    part.drop(columns="condition").reset_index(drop=True))
stages.check(side, "context_paths", where="the walk-through")
paths = heading_paths(gold)
titles = dict(zip(docs["doc_id"], docs["title"]))
by_window = {(r.doc_id, r.start, r.end): r.context for r in ctx.itertuples()}
want = [render_prefix(titles[r.doc_id], paths[r.section_id][:2]) + by_window[(r.doc_id, r.start, r.end)] + "\n\n"
        for r in mine.itertuples()]
texts = chunk_sets.embedded_texts(mine, docs)
alone = chunk_sets.build_all(docs, paras, gold, induced, None, rec, counter, design.run_conditions(["A2", "G2"]))
page_test = pytest.main([str(Path(sys.argv[2]) / "tests" / "test_prefix_context_path.py"), "-q",
                         "-p", "no:cacheprovider"])
print(json.dumps({
    "imported": chunkstudy.__file__,
    "kinds": list(design.PREFIX_KINDS), "choices": list(design.PREFIXES),
    "writes_04": [a.name for a in stages.stage("04_chunk_embed").writes],
    "window_sets": sorted(set(windows["chunk_set"])),
    "windows_are_g2": windows[["doc_id", "start", "end"]].reset_index(drop=True).equals(
        g2[["doc_id", "start", "end"]]),
    "n_g2": int(len(g2)), "same_offsets": mine[["doc_id", "start", "end"]].equals(g2[["doc_id", "start", "end"]]),
    "side_columns": list(side.columns), "side_conditions": sorted(set(side["condition"])),
    "prefix_ok": mine["prefix"].tolist() == want, "depths": sorted(set(mine["prefix_depth"])),
    "first_prefix": mine["prefix"].iloc[0],
    "texts_ok": all(t.startswith(p) and t[len(p):] == chunking.content(docs.set_index("doc_id").text[d], s, e)
                    for t, p, d, s, e in zip(texts, mine["prefix"], mine["doc_id"], mine["start"], mine["end"])),
    "paper_untouched": alone["chunks"].drop(columns="text_row").equals(
        ch[~ch["condition"].isin(["GCTX", "GCTX-late"])].drop(columns="text_row").reset_index(drop=True)),
    "alone_side": [bool(alone["context_paths"].empty), list(alone["context_paths"].columns)],
    "charged": cost.llm_uses([new], induce_llm=False, contexts_llm=True),
    "page_test": int(page_test),
    "kinds_table": designdoc.prefix_kinds(),
    "prefix_param": [line for line in paramdoc.markdown().splitlines() if line.startswith("| `prefix` |")],
}))
'''


def test_a_prefix_kind_as_the_page_walks_it(tmp_path):
    """"A prefix kind": a kind that reads the heading path and the situating contexts and keeps a side table, written
    in the one library file the page names and tested by the one test file it names, found by the registry with no
    list to edit. On the gold chunk set (G2) stage 02's windows are G2's own chunks; stage 04 renders path + context
    on exactly those offsets, returns its side table keyed by condition (also under a condition that takes it
    whole) with the columns it declares, and leaves every other condition as it was; the stage graph lists the
    table among 04's writes; 07 charges it the LLM's contexts as it charges A1; the generated docs list the kind;
    and the page's own test passes against the copy."""
    lib = perform("A prefix kind", tmp_path)
    out = run_copy(lib, WALK, str(ROOT / "tests"), str(tmp_path))
    assert out["kinds"] == out["choices"] == [*PAPER_KINDS, "context_path"]
    assert out["writes_04"][out["writes_04"].index("placebo_buckets") + 1] == "context_paths"
    assert out["window_sets"] == ["G2"] and out["windows_are_g2"]
    assert out["n_g2"] > 4 and out["same_offsets"]
    assert out["side_columns"] == ["condition", "doc_id", "start", "path"]
    assert out["side_conditions"] == ["GCTX", "GCTX-late"]
    assert out["prefix_ok"] and out["depths"] == [2] and out["texts_ok"]
    assert out["first_prefix"].startswith("[") and "]\n\nContext " in out["first_prefix"]
    assert out["paper_untouched"]
    assert out["alone_side"] == [True, ["condition", "doc_id", "start", "path"]]
    assert out["charged"] == {"GCTX": ["a1"]}
    assert out["page_test"] == 0
    assert "| `context_path` |" in out["kinds_table"] and "the heading path, then a situating context" in out[
        "kinds_table"]
    assert len(out["prefix_param"]) == 1 and "`context_path`" in out["prefix_param"][0]


# ---- a kind with a derived table and a summary ------------------------------------------------------------------

DEPTH_PATH = '''"""The heading path, with each chunk's path depth kept, counted per depth, and summarised."""

from __future__ import annotations

import pandas as pd

from ..prefix_kinds import PrefixKind, cut_paths, render_prefix
from ..schema import I, S, Table


class DepthPath(PrefixKind):
    name = "depth_path"
    order = 70
    text = "the path, its depth kept"
    heading_path = True
    side = Table("depth_paths", {"condition": S, "doc_id": S, "depth": I}, "per condition, each chunk's depth")
    derived = (Table("depth_counts", {"condition": S, "depth": I, "chunks": I}, "per condition, chunks by depth"),)
    summary = True

    def render(self, chunks, inputs):
        paths = cut_paths(chunks, inputs)
        side = pd.DataFrame({"doc_id": chunks["doc_id"].tolist(), "depth": [len(p) for p in paths]})
        return [render_prefix(inputs.titles[d], p) for d, p in zip(chunks["doc_id"], paths)], side

    def derive(self, table, part):
        return part.groupby("depth", sort=True).size().rename("chunks").reset_index()

    def pooled(self, parts, chunking):
        return {"depth_path_chunks": int(len(parts)), "depth_path_seed": chunking.placebo_seed}

    def facts(self, part):
        return {"rows": int(len(part))}


KIND = DepthPath()
'''

#: A kind whose side output lacks a column its table declares.
BAD_SIDE = '''import pandas as pd

from ..prefix_kinds import PrefixKind
from ..schema import I, S, Table


class BadSide(PrefixKind):
    name = "bad_side"
    order = 80
    text = "nothing, and a side table short of a column"
    side = Table("bad_sides", {"condition": S, "doc_id": S, "n": I}, "per condition, nothing useful")

    def render(self, chunks, inputs):
        return [""] * len(chunks), pd.DataFrame({"doc_id": chunks["doc_id"].tolist()})


KIND = BadSide()
'''

DERIVED_RUN = r'''
import json, sys
import chunkstudy
from chunkstudy import config, design
from chunkstudy.chunks import chunk_sets, chunking

sys.path.insert(0, sys.argv[1])
from test_conditions import PARAMS, make_corpus

counter = chunking.load_counter(PARAMS["tokenizer"])
docs, paras, gold, induced = make_corpus(n_docs=4, seed=5)
rec = config.record("chunking", PARAMS)
paper_kind = design.Condition("GD", "gold", "depth_path", depth=2)     # the pooled summary: a paper family
mine = design.Condition("ID", "induced", "depth_path", depth=1, family=design.EXTRA_FAMILY)
whole = design.Condition("ID-late", "induced", "depth_path", depth=1, family=design.EXTRA_FAMILY,
                         embedding=design.LATE, of="ID")
out = chunk_sets.build_all(docs, paras, gold, induced, None, rec, counter,
                           (*design.run_conditions(["A2", "G2", "P"]), paper_kind, mine, whole))
ch, side, derived, summary = out["chunks"], out["depth_paths"], out["depth_counts"], out["summary"]
try:
    chunk_sets.build_all(docs, paras, gold, induced, None, rec, counter,
                         (design.Condition("BS", "induced", "bad_side", family=design.EXTRA_FAMILY),))
    refused = ""
except chunking.ChunkingError as e:
    refused = str(e)
counts = {n: int((ch["condition"] == n).sum()) for n in ("GD", "ID", "ID-late")}
print(json.dumps({
    "imported": chunkstudy.__file__,
    "columns": [list(side.columns), list(derived.columns)],
    "side_conditions": list(dict.fromkeys(side["condition"])),
    "derived_conditions": list(dict.fromkeys(derived["condition"])),
    "rows": {n: int((side["condition"] == n).sum()) for n in counts}, "chunks": counts,
    "derived": {n: derived[derived["condition"] == n].drop(columns="condition").values.tolist() for n in counts},
    "side_depths": {n: side.loc[side["condition"] == n, "depth"].value_counts().sort_index().reset_index().values.tolist()
                    for n in counts},
    "gd_max_depth": int(side.loc[side["condition"] == "GD", "depth"].max()),
    "summary": {k: summary[k] for k in ("depth_path_chunks", "depth_path_seed", "placebo_method")},
    "extra": summary["extra"]["ID"]["sets"]["ID"]["depth_paths"], "seed": rec.placebo_seed,
    "method": rec.placebo_method, "placebo_pairs": "placebo_pairs" in summary,
    "placebo_conditions": [sorted(set(out["placebo"]["condition"])), sorted(set(out["placebo_buckets"]["condition"]))],
    "refused": refused,
}))
'''


def test_a_kind_with_a_derived_table_and_a_summary_gets_both_from_its_declaration(tmp_path):
    """04 (chunk_sets.build_all) writes a kind's side table, the tables derived from it and its summary because the
    kind declares them (side, derived, summary) and defines derive, pooled and facts: a new module in the copy's
    lib/chunkstudy/prefix/ gets all three with no code naming it, one part per condition (also under a condition
    that takes one whole), its paper conditions' parts pooled in the summary and a user condition's under
    ``extra``; the placebo's tables and summary keys are left as they were. A kind whose side output lacks a column
    its table declares is refused, naming it."""
    lib = tmp_path / "lib"
    shutil.copytree(ROOT / "lib" / "chunkstudy", lib / "chunkstudy", ignore=shutil.ignore_patterns("__pycache__"))
    (lib / "chunkstudy" / "prefix" / "depth_path.py").write_text(DEPTH_PATH)
    (lib / "chunkstudy" / "prefix" / "bad_side.py").write_text(BAD_SIDE)
    out = run_copy(lib, DERIVED_RUN, str(ROOT / "tests"))
    assert out["columns"] == [["condition", "doc_id", "depth"], ["condition", "depth", "chunks"]]
    assert out["side_conditions"] == out["derived_conditions"] == ["GD", "ID", "ID-late"]
    assert out["rows"] == out["chunks"] and min(out["chunks"].values()) > 0
    assert out["derived"] == out["side_depths"]  # chunks per depth, each condition's own
    assert out["gd_max_depth"] == 2  # the declared depth (a lead: 0)
    assert out["summary"] == {"depth_path_chunks": out["chunks"]["GD"], "depth_path_seed": out["seed"],
                              "placebo_method": out["method"]}
    assert out["extra"] == {"rows": out["chunks"]["ID"]}
    assert out["placebo_pairs"] and out["placebo_conditions"] == [["P"], ["P"]]
    # a side output short of a declared column is refused by 04, naming the kind, the condition and the columns
    assert out["refused"] == "prefix kind bad_side: its side table for BS lacks the columns ['n'] it declares for " \
                             "'bad_sides'"


def test_a_kind_module_that_fails_to_import_fails_the_registry_naming_it(tmp_path):
    lib = tmp_path / "lib"
    shutil.copytree(ROOT / "lib" / "chunkstudy", lib / "chunkstudy", ignore=shutil.ignore_patterns("__pycache__"))
    (lib / "chunkstudy" / "prefix" / "broken.py").write_text("from ..prefix_kinds import NoSuchName\n")
    done = in_copy(tmp_path, "-c", "import chunkstudy.design", lib=lib, timeout=300)
    assert done.returncode != 0
    assert "chunkstudy.prefix.broken: an extension module of chunkstudy.prefix failed to import" in done.stderr
