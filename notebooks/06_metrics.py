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
# # 06 · Metrics
#
# **Reads** `05_retrieve/runs` (ranked chunk lists per embedder × reranker × condition × query),
# `04_chunk_embed/chunks` (content offsets and token counts of every condition's chunks) and
# `03_queries/queries` (gold evidence spans, half-open character offsets on the query's document) and
# `01_corpus/documents` (the texts the drill-down quotes).
# **Writes** `06_metrics/scores`: one row per cell × condition × query × metric (long form; with `doc_id`, the
# bootstrap's cluster, and `qtype`), `06_metrics/drilldown`: the per-query drill-down of the primary cell, and
# `06_metrics/multiverse_scores`: the same rows at the specification curve's other cut-offs (empty without), and
# `06_metrics/recipe_scores`: recall@`stats.recipe_k` of the recipe's conditions in every cell, whose
# complement is Anthropic's top-k failure (empty unless `retrieve.modes` has bm25 and hybrid).
#
# Relevance comes only from character overlap on content offsets — a prefix can never create relevance; it only
# costs tokens in the budget metrics. The metrics (paper Section 5.1 and the appendix on coverage-nDCG) are those
# `chunkstudy.design.METRICS` declares, completed by the `metrics` parameters: their names, parameters, roles and
# definitions are the generated table in docs/design.md, "Metrics"; `stats.primary_metric` names the primary one.
# A chunk that only partly fits a token budget follows `metrics.budget_partial`. A query with no retrieved results
# scores 0; so does one whose ideal is 0. Definitions: `chunkstudy.metrics`.

# %% tags=["parameters"]
params_file = "params/demo.yaml"

# %%
from chunkstudy import artifacts, config, metrics
from chunkstudy.metrics import cutoffs, drilldown

cfg = config.load(params_file)
metrics_params = cfg.params("metrics")
runs = artifacts.read(cfg, "runs")
chunks = artifacts.read(cfg, "chunks")
queries = artifacts.read(cfg, "queries")
runs.groupby(["embedder", "reranker", "condition"]).agg(queries=("query_id", "nunique"), rows=("rank", "size"))

# %% [markdown]
# ## Scores
# Every metric for every (embedder, reranker, condition, query) in the runs, plus the policy in force.

# %%
scores = metrics.score_runs(runs, chunks, queries, metrics_params, cfg.corpus)
artifacts.write(cfg, "scores", scores)
print(metrics_params)
scores.groupby("metric", sort=False)["value"].describe()

# %% [markdown]
# ## The specification curve's other cut-offs (`multiverse.cutoffs`)
# The rank-cut metrics `multiverse.metrics` names, at each other k, by the same scorer: what 07's
# specification curves read beside `scores` (docs/beyond.md, "Specification curve"). Empty without.

# %%
extra_scores = cutoffs.multiverse_scores(runs, chunks, queries, metrics_params, cfg.params().multiverse_metrics,
                                         cfg.corpus)
artifacts.write(cfg, "multiverse_scores", extra_scores)
extra_scores.groupby("metric")["value"].describe()

# %% [markdown]
# ## Anthropic's recipe: recall at its k
# The recipe's failure is 1 − recall@k (span-level: a gold span counts as retrieved when the union of the top k
# covers ≥ `span_frac` of it), per query, for A0 and A1 in every retriever and reranker (docs/beyond.md).

# %%
recipe = cutoffs.recipe_scores(runs, chunks, queries, metrics_params, cfg.params("stats").recipe_k,
                               cfg.params("retrieve").modes, cfg.corpus)
artifacts.write(cfg, "recipe_scores", recipe)
recipe.groupby(["embedder", "reranker", "condition"])["value"].mean()

# %% [markdown]
# ## Per-condition means for every cell (exploratory)
# Rows: embedder × reranker × condition; columns: metrics. The confirmatory test of the primary cell
# (cov-nDCG@10 × strong × no reranker) is 07_stats' job.

# %%
metrics.cell_means(scores)

# %% [markdown]
# ## One query's coverage walk
# Rank by rank: the gain (mean over gold spans of the newly covered fraction), the running DCG, and beside it the
# greedy ideal over the condition's own chunks of that document. The example is the query with the most gold spans
# whose score lies strictly between 0 and 1 in the strong embedder's A3 list.

# %%
primary = cfg.params().primary_cell
example = metrics.walk_example(scores, queries, embedder=primary.embedder, reranker=primary.reranker, condition="A3")
walk = metrics.coverage_walk(runs, chunks, queries, metrics_params, **example)
print(example, walk.attrs)
print(queries.set_index("query_id").loc[example["query_id"], ["text", "spans"]].to_dict())
walk

# %% [markdown]
# ## Per-query drill-down (primary cell)
# For each pre-registered contrast (`stats.contrasts`, then each of yours, `contrasts.extra`) in the primary cell, the `stats.drilldown_queries` queries
# with the largest gains and the largest losses of the paired delta, and for each of them the top chunks under both
# conditions: rank, retrieval score, the prefix as embedded, the gold characters the chunk covers and the
# coverage-nDCG gain of the rank (`gain / log2(rank + 1)` summed over the ranks, divided by the IDCG, is the
# query's score). 08 formats it: a summary table in `report.md`, the side-by-side lists in `report.html`.

# %%
documents = artifacts.read(cfg, "documents")
# the paper's contrasts, then the user's (contrasts.extra: exploratory, marked in 08); each picks its own queries
drill = drilldown.drilldown(runs, chunks, queries, documents, scores,
                            {**cfg.params("stats").contrasts, **cfg.params("contrasts").extra}, primary,
                            metrics_params, cfg.corpus, cfg.params("stats").drilldown_queries)
artifacts.write(cfg, "drilldown", drill)
drilldown.overview(drill)
