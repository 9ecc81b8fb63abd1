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
# # 05 · Retrieval
#
# **Reads** `04_chunk_embed/chunks` and `04_chunk_embed/embeddings/<embedder>.npy` (one row per unique embedded
# text; a chunk's vector is row `text_row`), `03_queries/queries`, `01_corpus/documents` (the reranker reads the
# embedded text, prefix + content; the display shows content).
# **Writes** `05_retrieve/runs` (embedder, reranker, condition, query_id, rank, chunk_id, score, doc_id, source)
# and `05_retrieve/section_recall` (two-stage conditions: did stage 1 keep a section overlapping gold evidence?)
# with its per-cell summary `05_retrieve/section_recall_summary`, and `05_retrieve/rerank_report.json` (how each
# reranker ran: runtime, precision and its agreement check, pairs scored), and `05_retrieve/retrieval_timing.json`
# (each cell's search seconds, measured here: the median and range of up to `retrieve.timing_repeats` timed repeats
# after the search that ranked; 07's cost table), and `05_retrieve/lexical_report.json` (the BM25 indexes of the
# lexical modes; empty without).
#
# * **Flat** (all conditions but A4/G4): exact inner-product search over all chunks of the corpus, top
#   `retrieve.k`, ties broken by (−score, chunk_id).
# * **Two-stage** (`retrieve.two_stage_conditions`, A4 and G4): section centroids are the renormalised mean of the
#   *same* chunk vectors flat search uses (representation constancy, guards C4); stage 1 keeps the top
#   `retrieve.route_sections` sections (a section = document + top-level heading), stage 2 ranks their chunks,
#   the global ranking backfills to k.
# * **Retrieval modes** (`retrieve.modes`; docs/beyond.md, "Retrieval modes"): `dense` (above, the paper's),
#   `bm25` (one BM25 index per condition over its indexed texts, prefix + content: "contextual BM25") and `hybrid`
#   (the two rankings fused, `retrieve.fusion`); each mode's retriever (`bm25`, `hybrid-<embedder>`) is a cell of
#   its own in the `embedder` column. Two-stage conditions route in every mode. Dense searches are kept in
#   `data/<corpus>/cache/retrieval/` by content, so a rerun for a BM25 parameter searches no vector again.
#   `05_retrieve/lexical_report.json`: what each BM25 index holds and cost.
# * **Reranked cells**: each cross-encoder in `retrieve.rerankers` rescores the top `top_n` of the
#   `embed.strong` lists (in every retrieval mode), every condition, query vs. the embedded text; scores are
#   cached on disk by (model, query, text).

# %% tags=["parameters"]
params_file = "params/demo.yaml"

# %%
import pandas as pd

from chunkstudy import artifacts, config, devices, embed_store, rerank, retrieve
from chunkstudy.chunks import chunk_sets
from chunkstudy.retrieve import cache, modes

cfg = config.load(params_file)
devices.require_cuda(cfg)  # any device: cuda without a CUDA torch fails here, naming the keys
retrieve_params = cfg.params().routed_retrieve  # a condition taking A4 whole (late(A4)) routes as A4
chunks = artifacts.read(cfg, "chunks")
queries = artifacts.read(cfg, "queries")
documents = artifacts.read(cfg, "documents")
vectors = artifacts.read_all_vectors(cfg, cfg.params("embed").embedders)
chunks.groupby("condition").agg(chunks=("chunk_id", "size"), documents=("doc_id", "nunique"),
                                sections=("route_key", "nunique"))

# %% [markdown]
# ## Query vectors
# Queries go through the same persistent embedding store as the chunks (query instruction where the embedder
# spec asks for one).

# %%
store = embed_store.EmbeddingStore(artifacts.cache_dir(cfg, cfg.params("embed").store), cfg.params("embed").flush_every)
query_vectors = retrieve.embed_queries(queries, cfg.params("embed").embedders, store)
retrieve.vector_shapes(query_vectors)

# %% [markdown]
# ## First-stage retrieval (flat and two-stage)

# %%
texts = chunk_sets.embedded_texts(chunks, documents)  # what each chunk embeds: also what a lexical mode indexes
searches = cache.SearchCache(artifacts.cache_dir(cfg, "retrieval"))
retrieved = retrieve.retrieve_all(chunks, vectors, query_vectors, queries, retrieve_params, texts, searches)
artifacts.write_json(cfg, "05_retrieve", "lexical_report", retrieved["lexical"])
print(f"dense searches: {searches.hits} read from the store, {searches.misses} computed")
retrieved["runs"].groupby(["embedder", "condition", "source"]).size().unstack(fill_value=0)

# %% [markdown]
# ## Reranked cells
# The demo parameters configure an **untrained** cross-encoder: the real `BertForSequenceClassification`
# architecture built from the bundled MiniLM encoder with a freshly initialised (seeded) one-logit head. It
# exercises the code path — pair scoring, caching, reordering — but its scores carry no relevance signal, so the
# demo's reranked cells say nothing about reranking quality. The real parameter files name bge-reranker-v2-m3.

# %%
rerank_report = []
reranked = rerank.rerank_all(retrieved["runs"], queries, rerank.texts_by_chunk(chunks, texts), retrieve_params,
                             modes.reranked_retrievers(cfg.params().retrievers, cfg.params("embed").strong),
                             artifacts.cache_dir(cfg, "rerank"), report=rerank_report)
runs = pd.concat([retrieved["runs"], reranked], ignore_index=True)
artifacts.write(cfg, "runs", runs)
artifacts.write(cfg, "section_recall", retrieved["section_recall"])
artifacts.write_json(cfg, "05_retrieve", "rerank_report", rerank_report)
artifacts.write_json(cfg, "05_retrieve", "retrieval_timing", retrieved["timing"].to_dict(orient="records"))
runs.groupby(["embedder", "reranker"]).agg(conditions=("condition", "nunique"), queries=("query_id", "nunique"),
                                           rows=("chunk_id", "size"))

# %% [markdown]
# ## Section recall (two-stage diagnostic)
# Per query: did stage 1 keep any section overlapping the gold evidence (content offsets)? Whatever stage 1 drops,
# stage 2 cannot recover (paper, Section 6.4).

# %%
recall_summary = retrieve.section_recall_summary(retrieved["section_recall"])
artifacts.write(cfg, "section_recall_summary", recall_summary)
recall_summary

# %% [markdown]
# ## One query under A3 (flat) and A4 (two-stage)
# The first query whose gold sections stage 1 missed (else the first query). `in_routed`: the chunk's section was
# kept by stage 1; `source`: routed or backfill; `gold_chars`: characters of gold evidence inside the chunk.

# %%
example = retrieve.example_query(retrieved["section_recall"], cfg.params("embed").strong, "A4")
queries.loc[queries["query_id"] == example, ["query_id", "doc_id", "qtype", "text", "spans"]]

# %%
retrieve.routed_sections(retrieved["section_recall"], example, embedder=cfg.params("embed").strong)

# %%
retrieve.query_view(runs, retrieved["section_recall"], chunks, queries, documents, example,
                    conditions=("A3", "A4"), reranker="none", embedder=cfg.params("embed").strong, n=10)
