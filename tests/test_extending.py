"""docs/extending.md's walk-throughs "A metric" and "A corpus loader", performed exactly as the page shows them
("Another verdict" is performed the same way by tests/test_verdicts.py, "A prefix kind" by
tests/test_prefix_kinds.py).

Each section's code blocks (first line ``# lib/chunkstudy/<file>, <where>``, or ``# tests/<file>, a new module``
for the extension's own test) are applied to a copy of lib/chunkstudy (and its tests/) at the place each one names,
and the files they touch must be exactly the files the section's numbered list names: a walk-through that needs
one library file more fails here. A fresh Python then imports the copy (first on ``PYTHONPATH``) and runs the new
metric, or the new corpus kind, through the stages' own code on a small input whose values are computed by hand
below; tests/test_walkthroughs.py performs them together through the runner.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chunkstudy.corpus import build

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "extending.md"


# ---- the page's walk-through, read and applied -------------------------------------------------------------------

def section(title: str) -> str:
    """The text of the page's ``## title`` (or ``### title``) section, up to the next heading of its level or
    above."""
    text = PAGE.read_text(encoding="utf-8")
    m = re.search(rf"\n(##|###) {re.escape(title)}\n", text)
    assert m, f"{PAGE.name}: no section {title!r}"
    return re.split(rf"\n#{{2,{len(m.group(1))}}} ", text[m.end():], maxsplit=1)[0]


def listed_files(text: str) -> list[str]:
    """The library and test files of a section's numbered list (``1. `lib/chunkstudy/...```, ``2. `tests/...```)."""
    return re.findall(r"^\d+\. `((?:lib/chunkstudy|tests)/[^`]+)`", text, re.M)


def code_blocks(text: str) -> list[tuple[str, str, str]]:
    """``(file, where, code)`` of every Python block of a section."""
    out = []
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        head, _, code = block.partition("\n")
        m = re.fullmatch(r"# ((?:lib/chunkstudy|tests)/\S+), (.+)", head)
        assert m, f"{PAGE.name}: a code block's first line names no file and place: {head!r}"
        out.append((m.group(1), m.group(2), code))
    return out


def _top(tree: ast.Module, name: str) -> ast.AST:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return node
    raise AssertionError(f"no top-level {name}")


def _indented(code: str, indent: int) -> list[str]:
    return [" " * indent + line + "\n" if line.strip() else "\n" for line in code.rstrip("\n").split("\n")]


def apply(root: Path, file: str, where: str, code: str) -> None:
    """Put ``code`` into the copy of ``file`` under ``root`` at ``where``: ``a new module``; ``in NAME`` (an entry at the
    end of the literal assigned to NAME, or a field after the last field of class NAME); ``with the other
    imports``; ``after the other metrics`` (after the last ``@register`` class)."""
    path = root / file
    if where == "a new module":
        assert not path.exists(), f"{file} exists already"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code, encoding="utf-8")
        return
    src = path.read_text(encoding="utf-8")
    lines = src.splitlines(keepends=True)
    tree = ast.parse(src)
    if where.startswith("in "):
        node = _top(tree, where[3:])
        if isinstance(node, ast.ClassDef):
            last = [n for n in node.body if isinstance(n, ast.AnnAssign)][-1]
            at = last.end_lineno or 0
            lines[at:at] = _indented(code, last.col_offset)
        else:
            value = node.value
            row, col = value.end_lineno - 1, value.end_col_offset - 1  # the literal's closing bracket
            line = lines[row]
            if line[:col].strip():  # closes on its last entry's line: one more entry there
                lines[row] = line[:col].rstrip().rstrip(",") + ", " + code.strip() + line[col:]
            else:  # closes on a line of its own: one entry per line
                first = value.elts[0] if isinstance(value, ast.Tuple) else value.keys[0]
                entry = code.rstrip().removesuffix(",") + ","
                lines[row:row] = _indented(entry, first.col_offset)
    elif where == "with the other imports":
        at = max(n.end_lineno or 0 for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))
        lines[at:at] = _indented(code, 0)
    elif where == "after the other metrics":
        registered = [n for n in tree.body if isinstance(n, ast.ClassDef) and any(
            getattr(d, "id", "") == "register" for d in n.decorator_list)]
        at = registered[-1].end_lineno or 0
        lines[at:at] = ["\n", "\n", *_indented(code, 0)]
    else:
        raise AssertionError(f"{PAGE.name}: unknown place {where!r} for {file}")
    path.write_text("".join(lines), encoding="utf-8")


def _sources(root: Path) -> dict[str, bytes]:
    """``{path relative to root: bytes}`` of the Python files of ``root``'s library and tests."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for folder in ("lib/chunkstudy", "tests")
            for p in (root / folder).rglob("*.py")}


def undo(root: Path, blocks: list[tuple[str, str, str]]) -> None:
    """Set aside, in the copy at ``root``, what the blocks add when a checkout where the walk-through was followed
    holds it already (a new module with the block's text; a metric class the block appends), so the page is
    performed on the library it starts from."""
    for file, where, code in blocks:
        path = root / file
        if where == "a new module" and path.is_file() and path.read_text() == code:
            path.unlink()
        elif where == "after the other metrics" and path.is_file():
            added = "\n\n" + code.rstrip("\n") + "\n"
            text = path.read_text()
            if added in text:
                path.write_text(text.replace(added, "", 1))


def perform(title: str, tmp_path: Path) -> Path:
    """Apply the section's blocks to a copy of lib/chunkstudy; check that they touch exactly the listed files, one
    of them in the library. Returns the copy's ``lib`` folder (for ``PYTHONPATH``). A checkout where the
    walk-through was followed holds what it adds already: the copy sets that aside first (:func:`undo`), so the
    page is performed on the library it starts from."""
    text = section(title)
    lib = tmp_path / "lib"
    shutil.copytree(ROOT / "lib" / "chunkstudy", lib / "chunkstudy",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    blocks = code_blocks(text)
    assert blocks, f"{PAGE.name}: {title!r} shows no code"
    undo(tmp_path, blocks)
    before = _sources(tmp_path)
    for file, where, code in blocks:
        apply(tmp_path, file, where, code)
    touched = sorted({file for file, _, _ in blocks})
    listed = listed_files(text)
    assert len(listed) == len(touched) and sum(t.startswith("lib/") for t in touched) == 1, (listed, touched)
    assert all(any(fnmatch.fnmatch(t, re.sub(r"<[^>]+>", "*", pat)) for t in touched) for pat in listed), (
        listed, touched)
    assert sorted(f for f, data in _sources(tmp_path).items() if before.get(f) != data) == touched
    return lib


def in_copy(root: Path, *args: str, lib: Path | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    """Run ``python args`` in ``root`` in a fresh interpreter that imports the copy's chunkstudy first (``lib``,
    default ``root/lib``, first on ``PYTHONPATH``)."""
    env = {**os.environ, "PYTHONPATH": str(lib or root / "lib"), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=timeout)


def run_copy(lib: Path, script: str, *args: str) -> dict:
    """Run ``script`` in a fresh Python that imports ``lib``'s chunkstudy; its JSON line."""
    done = in_copy(lib.parent, "-c", script, *args, lib=lib, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(out["imported"]).resolve() == (lib / "chunkstudy" / "__init__.py").resolve()
    return out


# ---- A metric --------------------------------------------------------------------------------------------------

METRIC_RUN = r'''
import json
import pandas as pd
import chunkstudy
from chunkstudy import config, design, metrics, paramdoc, stats
from chunkstudy.report import tables

# three documents, each cut [0,100) [100,200) [200,300) under A3 and A1 (the contrast C1 = A3 - A1)
chunks = pd.DataFrame([{"condition": c, "doc_id": d, "chunk_id": f"{c}-{d}-{i}", "start": 100 * i,
                        "end": 100 * (i + 1), "prefix": "", "n_content_tokens": 10, "n_prefix_tokens": 0,
                        "route_key": d} for c in ("A3", "A1") for d in ("d1", "d2", "d3") for i in range(3)])
queries = pd.DataFrame({"query_id": ["q1", "q2", "q3"], "doc_id": ["d1", "d2", "d3"], "qtype": "factoid",
                        "text": "?", "spans": [[[0, 100]], [[0, 200]], [[0, 100]]]})
ranked = {("A3", "q1"): [0, 1], ("A3", "q2"): [0, 1], ("A3", "q3"): [2, 0],
          ("A1", "q1"): [1, 2, 0], ("A1", "q2"): [2, 0], ("A1", "q3"): [0]}
doc = dict(zip(queries["query_id"], queries["doc_id"]))
runs = pd.DataFrame([{"embedder": "strong", "reranker": "none", "condition": c, "query_id": q, "rank": r + 1,
                      "chunk_id": f"{c}-{doc[q]}-{i}", "score": 10.0 - r}
                     for (c, q), ids in ranked.items() for r, i in enumerate(ids)])

p = config.record("metrics", {"precision_k": 2})
try:
    config.record("metrics", {"precision_k": 0})
    refused = ""
except Exception as e:  # the parameter layer's own error
    refused = str(e)
scores = metrics.score_runs(runs, chunks, queries, p, "demo")  # 06
st = config.record("stats", {"n_boot": 1000})
primary = design.PrimaryCell(p.primary, "strong", "none")
contrasts = stats.contrasts_table(scores, queries, st, primary, "demo")  # 07
means = stats.condition_means(scores, queries, st, primary, "demo")
table2 = tables.table2(means, "strong", "none")  # 08
c1 = contrasts[(contrasts["cell"] == "P@2|strong|none") & (contrasts["contrast"] == "C1")]
p2 = scores[scores["metric"] == "P@2"]
print(json.dumps({
    "imported": chunkstudy.__file__, "names": p.names, "refused": refused,
    "scores": {f"{c} {q}": v for c, q, v in zip(p2["condition"], p2["query_id"], p2["value"])},
    "c1": c1[["mean_delta", "mean_a", "mean_b", "n_queries"]].to_dict("records"),
    "c1_label": c1["label"].tolist(),
    "means": {c: v for c, v in means[means["metric"] == "P@2"][["condition", "mean"]].itertuples(index=False)},
    "columns": list(table2.display.columns), "printed": dict(zip(table2.display["Condition"],
                                                                 table2.display["P@2"])),
    "parameters_md": [line for line in paramdoc.markdown().splitlines() if "precision_k" in line],
}))
'''


def test_a_metric_with_a_parameter_as_the_page_walks_it(tmp_path):
    """"A metric": precision at k, one class in the one file the page names (its parameter, computation and
    citation together), scored by 06, contrasted and averaged by 07 and printed by 08, with P@2 by hand: relevant chunks among the top
    2 ranks / 2 (a relevant chunk at rank 3 counts nothing; a list of one counts over 2)."""
    lib = perform("A metric", tmp_path)
    out = run_copy(lib, METRIC_RUN)
    assert out["names"] == ["cov-nDCG@10", "recall@50", "MRR", "nDCG@10", "budget-cov@512", "budget-cov@1024",
                            "budget-cov@2048", "P@2"]
    assert "metrics.precision_k" in out["refused"]
    # q1's span is chunk 0; q2's [0, 200) makes chunks 0 and 1 relevant (each covers half of it)
    assert out["scores"] == pytest.approx({"A3 q1": 0.5, "A3 q2": 1.0, "A3 q3": 0.5,
                                           "A1 q1": 0.0, "A1 q2": 0.5, "A1 q3": 0.5})
    assert out["means"] == pytest.approx({"A3": 2 / 3, "A1": 1 / 3})
    assert out["c1"] == [pytest.approx({"mean_delta": 1 / 3, "mean_a": 2 / 3, "mean_b": 1 / 3, "n_queries": 3})]
    assert out["c1_label"] == ["exploratory"]
    assert out["columns"][-1] == "P@2" and out["printed"] == {"A1": "0.333", "A3": "0.667"}
    assert len(out["parameters_md"]) == 1 and "P@k: the ranks precision counts" in out["parameters_md"][0]


# ---- A corpus loader -------------------------------------------------------------------------------------------

CORPUS_RUN = r'''
import contextlib, io, json, sys
from pathlib import Path
import pytest
import chunkstudy
from chunkstudy import config, designdoc, paramdoc, runner, stages
from chunkstudy.corpus import build

root = Path(sys.argv[1])
nope = config.load(root / "params" / "nope.yaml", root=root)  # a plain name: the parameter layer cannot know it
try:
    build.build_corpus(nope)  # 01
    refused = ""
except build.UnknownKind as e:
    refused = str(e)
err = io.StringIO()
with contextlib.redirect_stderr(err):  # ./run_all.sh nope: refused before the first stage
    run_rc = runner.main([str(root / "params" / "nope.yaml"), "--root", str(root)])
cfg = config.load(root / "params" / "texts.yaml", root=root)
out = build.build_corpus(cfg)  # 01
for table in ("documents", "paragraphs", "sections_gold", "harvested", "corpus_funnel"):
    stages.check(out[table], table, where="corpus.kind plaintext")
build.require_verified(out)
build.require_questions(cfg, out, "harvested")
docs, secs = out["documents"], out["sections_gold"]
designdoc.main(["--write", "--root", str(root)])  # the docs' tables, regenerated in the copy
paramdoc.main(["--write", "--root", str(root)])
page_test = io.StringIO()
with contextlib.redirect_stdout(page_test):  # the page's own test, against the copy
    test_rc = pytest.main([str(root / "tests"), "-q", "-p", "no:cacheprovider", "--basetemp", str(root / "pt")])
print(json.dumps({
    "imported": chunkstudy.__file__, "refused": refused, "run_rc": int(run_rc), "run_err": err.getvalue(),
    "documents": docs[["doc_id", "title", "text", "source"]].to_dict("records"),
    "sections": [[d, t, int(lv)] for d, t, lv in zip(secs["doc_id"], secs["title"], secs["level"])],
    "harvested": [[q, d, [list(map(int, s)) for s in spans]] for q, d, spans in
                  zip(out["harvested"]["query_id"], out["harvested"]["doc_id"], out["harvested"]["spans"])],
    "sources": [[f["role"], f["path"]] for f in out["stats"]["sources"]], "kind": out["stats"]["kind"],
    "warnings": out["stats"]["warnings"], "test_rc": int(test_rc), "test_out": page_test.getvalue(),
    "kinds_block": designdoc.corpus_kinds(), "folder_block": designdoc.folder_kinds(),
}))
'''

GUIDE = "# Guide\n\nWhat it is.\n\n## Install\n\nRun the installer,\nthen restart.\n\n## Use\n\nOpen it.\n"


def _rows(block: str) -> list[str]:
    """The first cells of a generated table (its kinds)."""
    return [line.split("|")[1].strip() for line in block.splitlines()[2:]]


def test_a_corpus_loader_as_the_page_walks_it(tmp_path):
    """"A corpus loader": a plain-text folder kind written in the one library file the page names and tested by the
    one test file it names, found by the registry without a list; named by a parameter file and built through 01's
    code into tables that meet 01's data contracts, its heading becoming the gold outline and its questions.jsonl
    harvested with exact spans; an unknown kind is refused by 01 and by the runner before the first stage, naming
    the kinds there are (the new one among them); the page's test passes against the copy; and the regenerated docs
    list the new kind in docs/corpus.md's tables and among corpus.kind's values, no other page changing."""
    lib = perform("A corpus loader", tmp_path)
    assert len([f for f in listed_files(section("A corpus loader")) if f.startswith("lib/")]) == 1
    for page in ("README.md", "docs"):  # the project's pages, which the generators rewrite
        copy = shutil.copytree if page == "docs" else shutil.copy
        copy(ROOT / page, tmp_path / page)
    texts = tmp_path / "texts"
    texts.mkdir()
    (texts / "guide.txt").write_text(GUIDE)
    (texts / "notes.txt").write_text("Plain first.\n\nPlain second.\n")
    (texts / "questions.jsonl").write_text(json.dumps({"id": "q1", "question": "How is it installed?",
                                                       "doc": "guide.txt", "evidence": ["Run the installer, then "
                                                                                         "restart."]}) + "\n")
    (tmp_path / "params").mkdir()
    (tmp_path / "params" / "texts.yaml").write_text("corpus:\n  kind: plaintext\n  mirror: ../texts\n")
    (tmp_path / "params" / "nope.yaml").write_text("corpus:\n  kind: nope\n")
    out = run_copy(lib, CORPUS_RUN, str(tmp_path))
    for message in (out["refused"], out["run_err"]):
        assert "nope.yaml: corpus.kind: 'nope' is not one of [" in message
        assert all(f"'{k}'" in message for k in ("demo", "markdown", "html", "plaintext")), message
    assert out["run_rc"] == 1 and "run_all: FAILED" in out["run_err"] and not (tmp_path / "data").exists()
    guide = "What it is.\n\nRun the installer, then restart.\n\nOpen it."
    assert out["documents"] == [
        {"doc_id": "guide", "title": "Guide", "text": guide, "source": "guide.txt"},
        {"doc_id": "notes", "title": "notes", "text": "Plain first.\n\nPlain second.", "source": "notes.txt"}]
    # the one level-1 heading names the page; the level-2 headings under it are the outline's level 1
    assert out["sections"] == [["guide", "", 1], ["guide", "Install", 1], ["guide", "Use", 1], ["notes", "", 1]]
    start = guide.index("Run")
    assert out["harvested"] == [["q1", "guide", [[start, start + len("Run the installer, then restart.")]]]]
    assert out["kind"] == "plaintext" and out["warnings"] == []
    assert [r for r, _ in out["sources"]] == ["plaintext:file", "plaintext:file", "questions.jsonl"]
    assert out["test_rc"] == 0 and "1 passed" in out["test_out"], out["test_out"]
    # the docs, regenerated in the copy: the new kind in both of corpus.md's tables and among corpus.kind's values
    assert "`plaintext`" in _rows(out["kinds_block"]) and "`plaintext`" in _rows(out["folder_block"])
    corpus_md = (tmp_path / "docs" / "corpus.md").read_text(encoding="utf-8")
    assert out["kinds_block"] in corpus_md and out["folder_block"] in corpus_md
    row = next(line for line in out["kinds_block"].splitlines() if line.startswith("| `plaintext`"))
    assert "`chunkstudy.corpus.plaintext`" in row and "every `*.txt` file under `corpus.mirror`" in row
    kind_row = next(line for line in (tmp_path / "docs" / "parameters.md").read_text(encoding="utf-8").splitlines()
                    if line.startswith("| `kind` |"))
    assert "`markdown`, `plaintext`, `qasper`" in kind_row
    changed = sorted(p.relative_to(tmp_path).as_posix() for p in [tmp_path / "README.md",
                                                                  *(tmp_path / "docs").rglob("*.md")]
                     if p.read_bytes() != (ROOT / p.relative_to(tmp_path)).read_bytes())
    followed = "plaintext" in build.LOADERS  # this checkout followed the page: its docs list the kind already
    assert changed == ([] if followed else ["docs/corpus.md", "docs/parameters.md"])
