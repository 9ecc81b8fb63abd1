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
# # 01 · Corpus
#
# **Reads** the corpus sources named by the parameters, from `corpus.mirror` (or downloaded from
# `corpus.fetch_urls` when no mirror is set): the module of the corpus kind `corpus.kind` names reads its own
# inputs (what each kind reads: the generated table in docs/corpus.md, "Corpus kinds").
# **Writes** `01_corpus/documents`, `paragraphs`, `sections_gold`, `harvested` (questions with gold spans; empty
# for Wikipedia), `corpus_funnel` and `stats.json`.
#
# Documents are built paragraph by paragraph with exact offsets; every gold structure is verified mechanically
# (tiling, offsets against the paragraph table, legal levels) and the stage fails if any document violates it. With
# `queries.source: harvested` it also fails when no question is usable (03 would have nothing to ask).

# %% tags=["parameters"]
params_file = "params/demo.yaml"

# %%
from chunkstudy import artifacts, config, paper
from chunkstudy.corpus import build

cfg = config.load(params_file)
out = build.build_corpus(cfg)
build.require_verified(out)
build.require_questions(cfg, out, cfg.params("queries").source)
out["documents"][["doc_id", "title", "source", "n_words"]].describe(include="all")

# %% [markdown]
# ## Write the tables

# %%
artifacts.write(cfg, "documents", out["documents"])
artifacts.write(cfg, "paragraphs", out["paragraphs"])
artifacts.write(cfg, "sections_gold", out["sections_gold"])
artifacts.write(cfg, "harvested", out["harvested"])
artifacts.write(cfg, "corpus_funnel", out["corpus_funnel"])
artifacts.write_json(cfg, "01_corpus", "stats", out["stats"])
artifacts.listing(cfg, "01_corpus")

# %% [markdown]
# ## Funnel
# Wikipedia: pages read → filters (cumulative) → the seeded, bucket-capped walk. QASPER and demo: questions read →
# usable, with the evidence-match shares (exact / fuzzy / section fallback), multi-span share and mean spans.
# Markdown and HTML: files read → documents built, the markup dropped by kind (code blocks, tables, images, page
# chrome, ...), then the questions' funnel.

# %%
out["corpus_funnel"]

# %% [markdown]
# ## Beside the paper, line by line
# QASPER: the paper merges all three splits (5,049 → 4,303 usable over 1,508 papers); a run on fewer splits differs
# in size, and the test split's ~2.4 annotators per question raise its multi-span shares. Spans per question and
# multi-span appear at both levels: *evidence strings as annotated* (distinct across annotators, before matching:
# the paper's 2.10 and 43.9%) and *matched spans* (what the metric scores). Wikipedia-FA: the realised topic
# buckets beside the paper's (the paper's keyword table is not in its text; ours is in
# `chunkstudy.corpus.wikipedia`). Paper numbers come from `chunkstudy.paper`.

# %%
paper.corpus_beside(out["stats"], cfg.params("corpus").kind)

# %% [markdown]
# ## Records skipped for their shape
# A QASPER paper or question, a demo document or question, or a line of `questions.jsonl`, of the wrong shape (a string where a list belongs,
# a missing id) is skipped and counted here; the warnings below name each one. Damaged or unreadable files stop
# the stage instead (unless `corpus.allow_partial: true`).

# %%
build.skipped_records(out)

# %% [markdown]
# ## Warnings collected while building

# %%
out["stats"]["warnings"][:20]

# %% [markdown]
# ## Source files read (path relative to the project, size, sha256; a change reruns this stage)

# %%
build.sources_table(out)

# %% [markdown]
# ## Gold section trees of a few documents

# %%
build.section_trees(out["documents"], out["sections_gold"], n_docs=3)

# %% [markdown]
# ## Harvested questions (empty for a corpus kind that ships none)

# %%
out["harvested"].head(10)
