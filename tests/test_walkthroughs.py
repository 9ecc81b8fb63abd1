"""docs/extending.md's walk-throughs performed for real, together, the way a user follows them in a clone.

The page's code blocks are applied, at the places they name, to a copy of the project (its library, notebooks,
parameter files, docs and tests); the generated docs are regenerated with the project's own commands; and all
eight stages run through the runner, in a fresh Python that imports the copy, under one parameter file that uses
every extension at once: the new corpus loader reads a folder of plain-text files (the tiny run's three documents
and questions, written out as text), a user condition on the gold chunk set takes the new prefix kind (02 situates
its chunks, 04 renders it and writes its side table), 06 scores the new metric under the parameter the file sets, 07 tests the
contrasts in its cells and adds the new verdict beside Holm's in every cell, and 08 prints both. No registry is patched: each extension is found the way the library finds
its own. Then the copy's own checks of its registries and generated docs pass (tests/test_docs.py and the tests
that read the declarations), which is what "leaves ./run_tests.sh green" means for an extension.

About two minutes on 2 CPU cores (the tiny run's vectors are seeded, so only texts the copy changes are embedded).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
from conftest import seed_embeddings
from test_extending import apply, code_blocks, in_copy, section, undo

ROOT = Path(__file__).resolve().parents[1]
#: The page's sections performed here (each one's code blocks, in page order).
SECTIONS = ("A metric", "A prefix kind", "A corpus loader", "Another verdict")
#: The copy's own tests that read the declarations and the generated docs (with the test files the page adds).
COPY_TESTS = ("tests/test_docs.py", "tests/test_design.py", "tests/test_import_layers.py",
              "tests/test_typed_params.py", "tests/test_corpus_build.py", "tests/test_stages.py",
              "tests/test_extending.py", "tests/test_config.py", "tests/test_prefix_kinds.py")


def clone(into: Path) -> Path:
    """The project's tracked and new (not ignored) files copied to ``into``, as a clone would have them."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.splitlines()
    for rel in listed:
        src = ROOT / rel
        if src.is_file():
            (into / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, into / rel)
    return into


def texts_from(project: Path, corpus: str, into: Path) -> None:
    """Write corpus ``corpus``'s documents of ``project`` as plain-text files (``# Title``, then each gold section's
    heading one ``#`` deeper than its level, then its paragraphs, blank lines between) and its harvested questions
    as ``questions.jsonl`` with their evidence verbatim (one string per paragraph a gold span covers)."""
    base = project / "data" / corpus / "01_corpus"
    docs = pd.read_parquet(base / "documents.parquet")
    paras = pd.read_parquet(base / "paragraphs.parquet")
    secs = pd.read_parquet(base / "sections_gold.parquet")
    into.mkdir(parents=True)
    for doc in docs.itertuples():
        text, blocks = doc.text, [f"# {doc.title}"]
        mine = paras[paras["doc_id"] == doc.doc_id].set_index("para_idx")
        for sec in secs[secs["doc_id"] == doc.doc_id].itertuples():
            if sec.title:
                blocks.append("#" * (int(sec.level) + 1) + " " + sec.title)
            blocks += [" ".join(text[p.start:p.end].split())
                       for p in mine.loc[sec.first_para:sec.last_para].itertuples()]
        (into / f"{doc.doc_id}.txt").write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    rows = []
    for q in pd.read_parquet(base / "harvested.parquet").itertuples():
        text = docs.set_index("doc_id").loc[q.doc_id, "text"]
        mine = paras[paras["doc_id"] == q.doc_id]
        evidence = [" ".join(text[max(p.start, s):min(p.end, e)].split()) for s, e in q.spans
                    for p in mine.itertuples() if min(p.end, e) > max(p.start, s)]
        rows.append(json.dumps({"id": q.query_id, "question": q.text, "doc": f"{q.doc_id}.txt",
                                "qtype": q.qtype, "evidence": evidence}))
    (into / "questions.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")


PARAMS = """base: tiny.yaml
corpus:
  kind: plaintext
  mirror: ../data/texts
metrics:
  precision_k: 2
stats:
  min_docs: 3
conditions:
  extra:
    GCTX: {boundaries: gold, prefix: context_path, depth: 2}
"""

RUN = r'''
import json, sys
from pathlib import Path
import chunkstudy
from chunkstudy import artifacts, config, runner

root = Path(sys.argv[1])
results = runner.run(root / "params" / "walk.yaml", root, log=lambda *_: None)
cfg = config.load(root / "params" / "walk.yaml", root=root)
scores = artifacts.read(cfg, "scores")
contrasts = artifacts.read(cfg, "contrasts")
chunks = artifacts.read(cfg, "chunks")
gctx, g2 = (chunks[chunks["condition"] == c].reset_index(drop=True) for c in ("GCTX", "G2"))
side = artifacts.read(cfg, "context_paths")
contexts = artifacts.read(cfg, "contexts_a1")
cost = artifacts.read(cfg, "cost")
print(json.dumps({
    "imported": chunkstudy.__file__,
    "stages": [[s, status] for s, status, _ in results],
    "kind": artifacts.read_json(cfg, "01_corpus", "stats")["kind"],
    "documents": sorted(artifacts.read(cfg, "documents")["doc_id"]),
    "queries": int(len(artifacts.read(cfg, "queries"))),
    "metrics": sorted(scores["metric"].unique()),
    "p2": scores.loc[scores["metric"] == "P@2", "value"].tolist(),
    "cells": sorted(contrasts["cell"].unique()),
    "columns": list(contrasts.columns),
    "sign": [[int(u), int(d)] for u, d in zip(contrasts.get("docs_up", []), contrasts.get("docs_down", []))],
    "report": (root / "figures" / "walk" / "report.md").read_text(encoding="utf-8"),
    "gctx": [int(len(gctx)), bool(gctx[["doc_id", "start", "end"]].equals(g2[["doc_id", "start", "end"]]))],
    "gctx_prefixes": gctx["prefix"].tolist(),
    "side": [sorted(set(side["condition"])), int(len(side)), list(side.columns)],
    "context_sets": sorted(set(contexts["chunk_set"])),
    "scored": sorted(set(scores["condition"])),
    "costed": sorted(set(cost["condition"])),
}))
'''


def test_the_walkthroughs_followed_in_a_clone_run_all_eight_stages_and_leave_its_checks_green(tiny_project,
                                                                                               tmp_path):
    tiny, _ = tiny_project
    project = clone(tmp_path / "clone")
    blocks = [b for title in SECTIONS for b in code_blocks(section(title))]
    undo(project, blocks)
    for file, where, code in blocks:
        apply(project, file, where, code)
    for tool in ("paramdoc", "designdoc", "stagedoc"):
        done = in_copy(project, "-m", f"chunkstudy.{tool}", "--write")
        assert done.returncode == 0, done.stderr[-3000:]
    # the regenerated pages carry the extensions (the copy's tests/test_docs.py, run below, checks they are current)
    assert "| `precision_k` |" in (project / "docs" / "parameters.md").read_text()
    assert "| `P@{precision_k}` |" in (project / "docs" / "design.md").read_text()
    assert "`plaintext`" in (project / "docs" / "corpus.md").read_text()
    texts_from(tiny, "tiny", project / "data" / "texts")
    (project / "params" / "walk.yaml").write_text(PARAMS)
    seed_embeddings(tiny, "tiny", project, "walk")

    done = in_copy(project, "-c", RUN, str(project))
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-6000:])
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(out["imported"]).resolve() == (project / "lib" / "chunkstudy" / "__init__.py").resolve()
    assert [status for _, status in out["stages"]] == ["ran"] * 8
    # the corpus loader: the tiny run's three documents and questions, read back from plain text
    assert out["kind"] == "plaintext"
    assert out["documents"] == sorted(pd.read_parquet(tiny / "data" / "tiny" / "01_corpus" / "documents.parquet")
                                      ["doc_id"])
    assert out["queries"] == len(pd.read_parquet(tiny / "data" / "tiny" / "03_queries" / "queries.parquet"))
    # the metric: scored by 06 under the file's precision_k, contrasted by 07 in its own cells, printed by 08
    assert "P@2" in out["metrics"] and out["p2"] and all(v in (0.0, 0.5, 1.0) for v in out["p2"])
    assert any(c.startswith("P@2|") for c in out["cells"])
    assert "P@2" in out["report"]
    # the verdict: its columns in 07's contrasts of every cell, its cells and note in 08's report
    assert {"docs_up", "docs_down", "p_sign", "p_holm_sign", "reject_holm_sign"} <= set(out["columns"])
    assert out["sign"] and all(u + d <= 3 for u, d in out["sign"])  # three documents: at most three split
    assert "Sign Holm p" in out["report"] and "Sign test:" in out["report"]
    # the prefix kind: 02 situated G2's chunks for it, 04 rendered the path and the context on G2's offsets and
    # wrote its side table, 06 scored it, 07 costed it, 08 reported it (what 07 charges a kind that reads contexts
    # is checked by tests/test_prefix_kinds.py: this run's contexts are extractive, no LLM call is charged)
    n, same = out["gctx"]
    assert n > 0 and same and out["side"] == [["GCTX"], n, ["condition", "doc_id", "start", "path"]]
    assert {"A0", "G2"} <= set(out["context_sets"])
    assert all(p.startswith("[") and "]\n\n" in p for p in out["gctx_prefixes"])
    assert sum(p.split("]\n\n", 1)[1] != "" for p in out["gctx_prefixes"]) > n // 2  # most carry a context
    assert "GCTX" in out["scored"] and "GCTX" in out["costed"]
    assert "GCTX" in out["report"]

    pages_tests = sorted({file for file, _, _ in blocks if file.startswith("tests/")})
    checks = in_copy(project, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-x",
                     *COPY_TESTS, *pages_tests)
    assert checks.returncode == 0, checks.stdout[-6000:]
