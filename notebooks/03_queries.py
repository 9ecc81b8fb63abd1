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
# # 03 · Queries
#
# **Reads** `01_corpus/documents`, `paragraphs`, `sections_gold` and, for harvested corpora (QASPER, demo),
# `01_corpus/harvested`; when `queries.bm25_condition` is cut from the induced outline (A2, say) also
# `02_induce/sections_induced`.
# **Writes** `03_queries/queries` (query_id, doc_id, qtype, text, spans, provenance, source, rouge_l),
# `03_queries/query_funnel`, `03_queries/funnel.json` and `03_queries/bm25.json`.
#
# Paper, Section 5.1. **Generated** (Wikipedia): the pipeline samples the gold spans per document with a seed
# (factoid: a sentence run; underspecified: a sentence run, vague referent; multihop: two runs in different
# top-level sections; structural: one whole top-level section); the model writes a query and never reports
# evidence. A query is rejected if its ROUGE-L F1 against a gold span exceeds `queries.rouge_max` (0.35) or it
# shares any verbatim `queries.ngram`-gram (4); a second call paraphrases each survivor, the paraphrase passes
# the same filter, and the paraphrases are balanced to `queries.targets` per type. **Harvested** (QASPER, demo):
# the human questions from 01 pass through with their gold spans; their leakage scores are recorded, not used.
#
# **BM25 diagnostic**: the share of queries whose gold chunk (the chunk with the largest character overlap with
# the gold spans) BM25 ranks first, over the structural chunks of `queries.bm25_condition` (G2 = gold structure),
# shown beside the paper's share (from `chunkstudy.paper`).

# %% tags=["parameters"]
params_file = "params/demo.yaml"

# %%
from chunkstudy import artifacts, config, paper, queries
from chunkstudy.chunks import bounds_store, chunking
from chunkstudy.queries import bm25
from chunkstudy.report import tables

cfg = config.load(params_file)
qp = cfg.params("queries")
documents = artifacts.read(cfg, "documents")
paragraphs = artifacts.read(cfg, "paragraphs")
sections_gold = artifacts.read(cfg, "sections_gold")
harvested = artifacts.read_input(cfg, "03_queries", "harvested")  # harvested queries only
chunking.use_bounds_store(bounds_store.open_for(cfg))  # the sentence bounds 02 segmented (BM25 chunks)
print(queries.capability_note(cfg.params("llm"), qp.source))
queries.inputs_overview(cfg.corpus, qp.source, documents, harvested)

# %% [markdown]
# ## Build the queries
# Generated runs call the model through the cached client (`data/<corpus>/cache/<llm.cache>/calls.jsonl`): a
# rerun replays every call from the cache.

# %%
client = queries.client_for(qp.source, cfg.params("llm"), artifacts.cache_dir(cfg, cfg.params("llm").cache))
result = queries.build_queries(documents, paragraphs, sections_gold, harvested, qp, client=client, where=cfg.corpus)
query_table = result["queries"]
artifacts.write(cfg, "queries", query_table)
artifacts.write(cfg, "query_funnel", result["funnel"])
artifacts.write_json(cfg, "03_queries", "funnel", queries.funnel_facts(result["summary"], cfg.params("llm"), qp.source,
                                                                     client))
queries.by_type(query_table)

# %% [markdown]
# ## The funnel
# Counts of queries (and of documents they come from) at each step, per type.

# %%
result["funnel"].pivot(index=["stage", "step"], columns="qtype", values="count")

# %%
result["funnel"].pivot(index=["stage", "step"], columns="qtype", values="n_docs")

# %% [markdown]
# ## The funnel beside the paper's
# Wikipedia-FA: 2,306 generated → 1,945 survivors → 951 balanced finals over 184 documents (about 3 per type per
# document: `queries.per_doc: 3`). QASPER: 5,049 harvested → 4,303 usable over 1,508 papers (all splits).

# %%
funnel_table = tables.query_funnel(result["funnel"], cfg.params("corpus").kind)
print("\n".join(funnel_table.notes))
funnel_table.display

# %% [markdown]
# ## Example queries beside their gold span text

# %%
queries.examples(query_table, documents, per_type=2, seed=qp.seed)

# %% [markdown]
# ## BM25 diagnostic
# Structural chunks of the chosen outline (the chunking parameters of 04), bm25s Lucene BM25 (k1, b from
# `queries.bm25_k1/bm25_b`). Both scopes are reported — the query's own document's chunks, and every chunk of
# the corpus — with `queries.bm25_scope` as the headline.

# %%
sections_induced = artifacts.read_input(cfg, "03_queries", "sections_induced")  # an induced bm25_condition only
bm25_sections = bm25.outline(qp.bm25_condition, sections_gold, sections_induced)
bm25_chunks = chunking.structural_chunks(documents, paragraphs, bm25_sections,
                                       chunking.load_counter(cfg.params("chunking").tokenizer),
                                       cfg.params("chunking").max_chunk_tokens,
                                       cfg.params("chunking").min_chunk_tokens,
                                       cfg.params("chunking").sentence_splitter)
bm25_per_query, bm25_summary = bm25.diagnostic(documents, bm25_chunks, query_table, k1=qp.bm25_k1,
                                               b=qp.bm25_b, span_frac=cfg.params("metrics").span_frac,
                                               chunk_frac=cfg.params("metrics").chunk_frac,
                                               condition=qp.bm25_condition, scope=qp.bm25_scope)
artifacts.write_json(cfg, "03_queries", "bm25", {**bm25_summary, "sentence_bounds": chunking.segmentation_counts()})
bm25.summary_table(bm25_summary)

# %%
paper.beside({"gold_top1": bm25_summary["gold_top1_share"]}, cfg.params("corpus").kind, "bm25",
             {f"BM25 gold chunk first ({qp.bm25_scope} scope)": "gold_top1"})
