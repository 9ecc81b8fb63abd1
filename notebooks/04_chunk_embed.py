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
# # 04 · Chunk sets and embeddings
#
# **Reads** `01_corpus/documents`, `paragraphs`, `sections_gold`; `02_induce/sections_induced` and, when a condition
# has a context prefix (A1), `contexts_a1`.
# **Writes** `04_chunk_embed/chunks` (every condition in `chunking.conditions` and `conditions.extra`),
# `late_report` (late pooling's windows and tokens), `size_matching`, the tables of the prefix kinds
# (`design.prefix_tables()`: the placebo's `placebo` and `placebo_buckets`, per placebo condition; by depth bucket),
# `summary.json` (with the size-matching numbers and what the kinds say of their tables), `embedding_report.json`, and
# `embeddings/<embedder>.npy` (float32, one row per distinct
# embedded text; `chunks.text_row` indexes it) with `embeddings/<embedder>.ids.parquet` (the row order).
#
# Boundaries: A0/A1 fixed windows size-matched per document to the A2 mean, edges at pysbd sentence starts;
# A2–A4, P on the induced structure; G2–G4 on the gold structure (split above `max_chunk_tokens`, merged below
# `min_chunk_tokens`). Prefixes: `[Title › Section › Subsection]\n\n` cut to depth 1/2/3, the A1 context, or a placebo
# path from another document. The embedded text is `prefix + content`; offsets are content-only. Each distinct
# text is embedded once per embedder, through a persistent store keyed by (model, kind, text): a rerun embeds
# nothing.
#
# User conditions (`conditions.extra`, docs/chunker.md) are conditions like the paper's: cut by their chunker
# (placed on exact character offsets: text a chunker drops or rewrites stops here, naming the document) or on one
# of the paper's chunk sets, given a prefix kind and, with `size_matched_twin`, a twin `<NAME>-fixed` of fixed
# windows matched per document to the condition's mean size (the A0 rule). They share the text rows and the
# embedding store with the paper's.

# %% tags=["parameters"]
params_file = "params/demo.yaml"

# %%
from chunkstudy import artifacts, config, design, devices, embed_store
from chunkstudy.chunks import bounds_store, chunk_sets, chunking, late
from chunkstudy.report import tables

cfg = config.load(params_file)
devices.require_cuda(cfg)  # any device: cuda without a CUDA torch fails here, naming the keys
documents = artifacts.read(cfg, "documents")
paragraphs = artifacts.read(cfg, "paragraphs")
sections_gold = artifacts.read(cfg, "sections_gold")
sections_induced = artifacts.read(cfg, "sections_induced")
contexts_a1 = artifacts.read_input(cfg, "04_chunk_embed", "contexts_a1")  # when a condition has a context prefix
chunking.use_bounds_store(bounds_store.open_for(cfg))  # the sentence bounds 02 segmented
store = embed_store.EmbeddingStore(artifacts.cache_dir(cfg, cfg.params("embed").store), cfg.params("embed").flush_every)
out = chunk_sets.build_for_run(cfg, cfg.params().run_conditions, documents, paragraphs, sections_gold, sections_induced,
                               contexts_a1, store)
artifacts.write(cfg, "size_matching", out["size_matching"])
artifacts.write_each(cfg, design.prefix_tables(), out)  # each prefix kind's tables (the placebo's two)
artifacts.write_json(cfg, "04_chunk_embed", "summary",
                     {**out["summary"], "sentence_bounds": chunking.segmentation_counts()})
out["chunks"].groupby("condition", sort=False)[["n_content_tokens", "n_prefix_tokens"]].describe()

# %% [markdown]
# ## Size matching (guards C1)
# Per document the A0 target is the mean content-token length of its A2 chunks. The paper reports realised
# means within 4 tokens per chunk set (its numbers beside ours, from `chunkstudy.paper`).

# %%
tables.size_matching(out["summary"], cfg.params("corpus").kind).display

# %%
{"over_max": out["summary"]["over_max"], "under_min": out["summary"]["under_min"]}

# %%
out["size_matching"].describe()

# %% [markdown]
# ## Placebo (guards C2)
# Unique (document, path) pairs, bucketed by depth, randomly permuted within each bucket with
# `chunking.placebo_seed` and repaired by swaps toward a cross-document derangement (`chunking.placebo_method:
# permute`; `shift` is the older cyclic shift). A residual same-document assignment happens only where one
# document holds more than half of a depth bucket (`placebo_min_residual` is the least any permutation allows).
# Donors: how many documents a document's placebo paths come from, and the share from its largest donor — a
# permutation spreads them over many documents, so the placebo is not a coherent fake document.

# %%
tables.placebo(out["placebo_buckets"], cfg.params("chunking").placebo_method).display

# %% [markdown]
# ## User conditions (`conditions.extra`; exploratory, not part of the paper's design)
# Per condition: the chunker and its version, the prefix, what was left out (empty chunks) or could not be placed
# (only under `unaligned: warn`), and each twin's size match.

# %%
out["summary"].get("extra", {})

# %% [markdown]
# ## One document cut under A0, A2 and G2

# %%
chunk_sets.chunks_side_by_side(out["chunks"], documents, documents["doc_id"].iat[0])

# %% [markdown]
# ## Embedded texts: prefixes as each condition renders them

# %%
out["chunks"].assign(embedded=chunk_sets.embedded_texts(out["chunks"], documents).str[:120]).groupby(
    "condition", sort=False).head(1)[["condition", "chunk_id", "n_prefix_tokens", "embedded"]]

# %% [markdown]
# ## Embed every distinct text with every embedder
# Unique texts are shared by conditions (A4 = A3, G4 = G3, and identical bodies without a prefix).

# %%
vectors, report = embed_store.embed_all(cfg.params("embed").embedders, out["texts"], store)
ids = embed_store.ids_table(out["texts"])

# %% [markdown]
# ## Late pooling (conditions with `embedding: late`; docs/beyond.md, "Late pooling")
# Each document is encoded once per condition and embedder, in macro windows of `embed.late_window` tokens (null:
# the embedder's `max_seq_length`, the length it embeds a chunk at independently) overlapping by
# `embed.late_overlap` (null: a quarter of the window); a chunk's vector is the mean of its content
# tokens' embeddings (prefix tokens are encoded, never pooled). Its rows follow the text rows; the store keeps them
# under a key naming the mode, the window and the overlap, so a rerun encodes nothing.

# %%
pooled = late.embed_conditions(out["chunks"], documents, late.late_conditions(cfg.params().run_conditions),
                               cfg.params("embed").embedders, store, vectors, ids,
                               window=cfg.params("embed").late_window, overlap=cfg.params("embed").late_overlap,
                               pooling=cfg.params("embed").late_pooling)
artifacts.write(cfg, "chunks", pooled["chunks"])
artifacts.write(cfg, "late_report", pooled["report"])
written = artifacts.write_all_vectors(cfg, pooled["vectors"], pooled["ids"])
pooled["report"]

# %%
artifacts.write_json(cfg, "04_chunk_embed", "embedding_report", report.to_dict(orient="records"))
report.assign(unique_share=out["summary"]["unique_text_share"], n_chunk_rows=out["summary"]["n_chunk_rows"])
