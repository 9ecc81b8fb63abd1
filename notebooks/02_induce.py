# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: chunkstudy (.venv)
#     language: python
#     name: chunkstudy
# ---

# %% [markdown]
# # 02 · Structure induction and A1 contexts
#
# **Reads** `01_corpus/documents`, `paragraphs`, `sections_gold`.
# **Writes** `02_induce/sections_induced` (an outline per document in the gold table's schema, verified),
# `induction_log` (one row per document: status ok / repaired / failed, rounds, windows, violations),
# `contexts_a1` (one situating context per chunk of every chunk set a context condition names — A1: A0's windows —
# keyed by `(chunk_set, doc_id, start, end)`) and
# `induction_stats.json`.
#
# `induce.method: llm` is the paper's arm: numbered paragraphs with headings stripped (the whole document in one
# call whenever prompt and reply fit `llm.context_tokens`; windows only beyond), JSON output verified
# mechanically, one self-correction round listing the violations, then a deterministic repair (a document with
# no usable reply falls back to one section and is counted as failed). `texttiling` is a named non-LLM
# baseline. A1 contexts use Anthropic's Contextual Retrieval prompt verbatim (`contexts.method: llm`; the
# `<document>` is the document as a reader sees it — title, headings from `sections_gold`, paragraphs — under
# `contexts.document_view: full`, or its paragraphs only under `body`) or a named
# extractive baseline (title, lead sentence, salient terms of the window's neighbourhood). Every model call
# goes through the cached client (`data/<corpus>/cache/<llm.cache>/calls.jsonl`): a rerun makes no call twice.

# %% tags=["parameters"]
params_file = "params/demo.yaml"

# %%
from chunkstudy import artifacts, config, induce, llm
from chunkstudy.chunks import bounds_store, chunking, cuts
from chunkstudy.report import tables

cfg = config.load(params_file)
documents = artifacts.read(cfg, "documents")
paragraphs = artifacts.read(cfg, "paragraphs")
sections_gold = artifacts.read(cfg, "sections_gold")
chunking.use_bounds_store(bounds_store.open_for(cfg))  # sentence bounds: segmented once a run, read by 03 and 04
client = llm.make_client(cfg.params("llm"), artifacts.cache_dir(cfg, cfg.params("llm").cache))
print(induce.model_note(cfg.params("llm"), cfg.params("induce"), cfg.params("contexts")))

# %% [markdown]
# ## Induce the structure

# %%
sections_induced, induction_log = induce.induce_structure(documents, paragraphs, cfg.params("induce"), client=client)
artifacts.write(cfg, "sections_induced", sections_induced)
artifacts.write(cfg, "induction_log", induction_log)
induction_log["status"].value_counts()

# %% [markdown]
# ## Situating contexts (A1) on the chunk sets that carry one
# A context for every chunk of every chunk set a condition with a `context` prefix names (A1: A0's windows,
# size-matched per document to the mean A2 chunk length), cut by `chunks.cuts` as 04_chunk_embed cuts it, so both
# stages see the identical `(chunk_set, doc_id, start, end)`.

# %%
counter = chunking.load_counter(cfg.params("chunking").tokenizer)
windows = cuts.context_windows(documents, paragraphs, {"sections_induced": sections_induced,
                                                       "sections_gold": sections_gold},
                               cfg.params().run_conditions, cfg.params("chunking"), counter)
contexts_a1 = induce.a1_contexts(documents, windows, cfg.params("contexts"), client=client, counter=counter,
                                 sections=sections_gold)
artifacts.write(cfg, "contexts_a1", contexts_a1)
contexts_a1[["chunk_set", "doc_id", "start", "end", "method", "n_tokens", "context"]].head()

# %% [markdown]
# ## Stats next to the paper
# Identity with gold is the paper's measure: the share of induced structural chunk spans (split above
# `chunking.max_chunk_tokens`, merged below `min_chunk_tokens`) byte-identical to a gold structural chunk span.
# `induced_whole` counts the documents induced in one call (not cut into windows); the paper's model sees every
# document's paragraphs whole.

# %%
stats = induce.stage_stats(
    sections_induced, induction_log, sections_gold,
    chunking.structural_for(documents, paragraphs, sections_induced, cfg.params("chunking"), counter),
    chunking.structural_for(documents, paragraphs, sections_gold, cfg.params("chunking"), counter),
    contexts_a1, client, cfg.params("llm"), cfg.params("induce"), cfg.params("contexts"))
artifacts.write_json(cfg, "02_induce", "induction_stats",
                     {**stats, "sentence_bounds": chunking.segmentation_counts()})
tables.induction(stats, cfg.params("corpus").kind, cfg.params("induce").method).data

# %%
stats["contexts_a1"]

# %% [markdown]
# ## One document: gold and induced trees side by side

# %%
induce.outlines_side_by_side(sections_gold, sections_induced,
                             cfg.params("figures").example_doc or documents["doc_id"].iat[0])
