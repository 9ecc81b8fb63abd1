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
# # 07 · Statistics
#
# **Reads** `06_metrics/scores` (per-query scores, long form) and `03_queries/queries` (query → document, type);
# for the cost table `04_chunk_embed/chunks`, `embedding_report.json`, `late_report` and
# `05_retrieve/retrieval_timing.json` and `lexical_report.json`; for the specification curves
# `06_metrics/multiverse_scores`; for Anthropic's recipe `06_metrics/recipe_scores`.
# **Writes** `07_stats/contrasts`, `mixedlm`, `mixedlm_paired`, `dose_response`, `per_type`, `condition_means`,
# `reranker_lift`, `power` and `power_needed` (the documents each contrast needs), `size_check` (the measured size of
# its tests at this run's structure), `cost` (what each condition costs), `multiverse`, `multiverse_summary` and
# `multiverse_axes` (each contrast's specification curve, and read by axis), `recipe` (Anthropic's recipe: each
# step's top-k failure reduction with its CI), and for your own contrasts (`contrasts.extra`, empty without)
# `user_contrasts`, `user_power` and `user_power_needed`.
#
# The four pre-registered contrasts (C1 = A3−A1, C2 = A3−P, C3 = G3−A3, C4 = A4−A3) are tested on one cell fixed
# in advance — cov-nDCG@10 × strong embedder × no reranker — with a document-clustered bootstrap (resampling
# documents, `stats.n_boot` resamples, `stats.seed`), 95% percentile CIs, two-sided p, Holm across the four and
# Cohen's dz, and beside it the small-sample-calibrated test (the wild cluster bootstrap-t with the null imposed);
# `stats.decision` says which one decides (auto: the calibrated test below the documents at which the percentile
# bootstrap holds its size). That family is **confirmatory**. The MixedLM is the pre-registered **secondary** check and is
# misspecified by design (no per-query random effect); beside it, the correctly specified secondary model on the
# paired per-query differences. Everything else — other cells, the depth dose-response, query-type cuts,
# per-condition means — is **exploratory**.

# %% tags=["parameters"]
params_file = "params/demo.yaml"

# %%
from chunkstudy import artifacts, config, paper, stats
from chunkstudy.stats import cost, multiverse, power, recipe, size_check

cfg = config.load(params_file)
stats_params = cfg.params("stats")
primary = cfg.params().primary_cell  # stats.primary_metric × embed.strong × stats.primary_reranker
scores = artifacts.read(cfg, "scores")
queries = artifacts.read(cfg, "queries")
scores.groupby(["metric", "embedder", "reranker"]).agg(conditions=("condition", "nunique"),
                                                       queries=("query_id", "nunique"))

# %% [markdown]
# ## Table 1 — the confirmatory family (primary cell)
# Mean paired delta, 95% cluster-bootstrap CI, two-sided p, Holm-adjusted p; the calibrated test's CI, p and Holm
# p; which test decided and its decision (`significant`); dz.

# %%
contrasts = stats.contrasts_table(scores, queries, stats_params, primary, cfg.corpus)
artifacts.write(cfg, "contrasts", contrasts)
contrasts.loc[contrasts["confirmatory"], ["label", "cell", "contrast", "condition_a", "condition_b", "mean_delta",
                                          "ci_low", "ci_high", "p", "p_holm", "reject_holm", "ci_low_cal",
                                          "ci_high_cal", "p_cal", "p_holm_cal", "reject_holm_cal", "decided_by",
                                          "significant", "dz", "n_queries", "n_docs", "note"]]

# %% [markdown]
# ## Secondary — MixedLM `score ~ condition + (1 | document)` on the primary cell
# Misspecified by design: it omits a per-query random effect, so query-to-query variance inflates its standard
# errors and it is conservative for small paired effects. Reported for pre-registration fidelity only.

# %%
mixedlm = stats.mixedlm_table(scores, queries, stats_params, primary, cfg.corpus)
artifacts.write(cfg, "mixedlm", mixedlm)
mixedlm.drop(columns=["note"])

# %%
mixedlm["note"].drop_duplicates().to_list()

# %% [markdown]
# ## Secondary — the correctly specified model: paired differences `δ ~ 1 + (1 | document)`
# Per contrast, the paired per-query differences A − B (each query's own effect cancels in the difference) with a
# random intercept per document, by REML; Holm across the family. Shown in Table 1's notes beside the
# pre-registered model (docs/design.md, "Statistics").

# %%
mixedlm_paired = stats.paired_mixedlm_table(scores, queries, stats_params, primary, cfg.corpus)
artifacts.write(cfg, "mixedlm_paired", mixedlm_paired)
mixedlm_paired.drop(columns=["note"])

# %% [markdown]
# ## Exploratory — the same contrasts in every other cell
# Other metrics, the weak embedder and the reranked cells. Holm is applied within each cell's family of four, and
# the same rule decides each cell's family (`decided_by`).

# %%
contrasts.loc[~contrasts["confirmatory"], ["label", "cell", "contrast", "mean_delta", "ci_low", "ci_high", "p",
                                           "p_holm", "p_holm_cal", "decided_by", "significant", "dz", "n_queries",
                                           "note"]]

# %% [markdown]
# ## Exploratory — breadcrumb-depth dose-response
# Slope of cov-nDCG@10 on injected heading-path depth (A2 = 0, A3-d1 = 1, A3-d2 = 2, A3 = 3), per embedder ×
# reranker, with a document-clustered bootstrap CI and p; per-level means alongside.

# %%
dose = stats.dose_response(scores, queries, stats_params, primary, cfg.corpus)
artifacts.write(cfg, "dose_response", dose)
dose

# %% [markdown]
# ## Exploratory — cuts by query type (unadjusted; hypothesis-generating only)

# %%
by_type = stats.per_type(scores, queries, stats_params, primary, cfg.corpus)
artifacts.write(cfg, "per_type", by_type)
by_type[["label", "cell", "contrast", "qtype", "mean_delta", "ci_low", "ci_high", "p", "dz", "n_queries", "note"]]

# %% [markdown]
# ## Exploratory — per-condition means (Table 2 is the primary cell's rows; recall@50 per condition included)

# %%
means = stats.condition_means(scores, queries, stats_params, primary, cfg.corpus)
artifacts.write(cfg, "condition_means", means)
means.pivot_table(index="condition", columns=["metric", "embedder", "reranker"], values="mean", sort=False)

# %%
stats.metric_rows(means, "recall")[["label", "metric", "embedder", "reranker", "condition", "mean", "se_cluster",
                                    "n_queries"]]

# %% [markdown]
# ## Exploratory — reranker lift per condition (reranked minus not reranked mean of the primary metric)

# %%
lift = stats.reranker_lift(means, stats_params, primary)
artifacts.write(cfg, "reranker_lift", lift)
lift

# %% [markdown]
# ## Planning — power: how many documents would each contrast need?
# For each contrast of the confirmatory family, the power of the same test (document-clustered bootstrap, Holm
# across the four, alpha `stats.alpha`) in simulated studies of N documents drawn with replacement from this run's
# documents, each bringing its queries' deltas of all four contrasts: at the effect observed here, and with every
# delta shifted so that dz equals the paper's (from `chunkstudy.paper`; `stats.power_paper_corpus` picks which
# corpus). `stats.power_n_sims` studies per N (`stats.power_n_docs` plus this corpus's size), `stats.power_n_boot`
# resamples per study, seed `stats.seed`. `null_rejection` is the test's size at N (every contrast at mean 0).
# The method is stated in `chunkstudy.stats.power`'s docstring. Not part of the confirmatory analysis.

# %%
paper_corpus = power.paper_corpus(stats_params, cfg.params("corpus").kind)
power_curves = power.power_table(scores, queries, stats_params, primary, cfg.corpus,
                                 paper.effects_dz(paper_corpus), f"paper ({paper_corpus})")
artifacts.write(cfg, "power", power_curves)
power_curves.pivot_table(index=["scenario", "contrast", "target_dz"], columns="n_docs", values="power")

# %%
power_needed = power.needed_table(power_curves)
artifacts.write(cfg, "power_needed", power_needed)
power_needed

# %% [markdown]
# ## Exploratory — the user's contrasts (`contrasts.extra`; docs/chunker.md)
# Contrasts a user added over the paper's conditions and the user's own (`conditions.extra`, with their
# size-matched twins `<NAME>-fixed`). The same document-clustered bootstrap, seed and dz as the paper's, but a
# **family of their own**: Holm within the user's contrasts in each cell, never mixed with the confirmatory four.
# Not pre-registered unless the parameter file declared them before the run (08's report says which). Power at the
# effects observed here. Empty when the parameter file adds none.

# %%
user = cfg.params("contrasts").extra
user_contrasts = stats.user_contrasts_table(scores, queries, stats_params, primary, cfg.corpus, user,
                                           cfg.params("contrasts").decision)
artifacts.write(cfg, "user_contrasts", user_contrasts)
user_contrasts[["label", "cell", "contrast", "condition_a", "condition_b", "mean_delta", "ci_low", "ci_high", "p",
                "p_holm", "p_holm_cal", "decided_by", "significant", "dz", "n_queries", "note"]]

# %%
user_power = power.user_power_table(scores, queries, stats_params, primary, cfg.corpus, user)
artifacts.write(cfg, "user_power", user_power)
user_power_needed = power.needed_table(user_power)
artifacts.write(cfg, "user_power_needed", user_power_needed)
user_power_needed


# %% [markdown]
# ## Each run checks itself — the measured size of its tests at this run's structure
# How often each test rejects a true null in studies of this run's own documents (resampled, each bringing its
# queries' deltas of every contrast, every contrast re-centred to 0 with its zeros kept): the percentile bootstrap and
# the calibrated test, family-wise (Holm) and per contrast, `stats.check_sims` studies with `stats.check_n_boot`
# resamples under `stats.seed`; and the paired MixedLM's 95% CI coverage (`stats.check_mixed_sims` studies).
# `decided` marks the test that decided the family (Table 1's star). Method: `chunkstudy.stats.size_check`.

# %%
checked = size_check.size_check_table(scores, queries, stats_params, primary, cfg.corpus,
                                       {stats.CONFIRMATORY: (stats_params.contrasts, contrasts),
                                        stats.USER_ADDED: (user, user_contrasts)})
artifacts.write(cfg, "size_check", checked)
checked[checked["measure"] != "size"]


# %% [markdown]
# ## Exploratory — what each condition costs (docs/beyond.md, "Cost")
# Per condition and embedder: the primary metric without a reranker beside the LLM calls and tokens it needs
# (induction, A1's contexts), the tokens embedded (content + prefix) and read by the encoder (late pooling: its
# macro windows), the index size, and this run's measured embedding seconds and search latency. The counts are
# exact; the seconds are this machine's. `pareto_tokens` / `pareto_llm`: on the embedder's Pareto front of the
# metric against tokens read / LLM tokens.

# %%
cost_table = cost.cost_for_run(cfg, means, artifacts.read(cfg, "chunks"),
                               artifacts.read_json(cfg, "04_chunk_embed", "embedding_report"),
                               artifacts.read(cfg, "late_report"),
                               artifacts.read_json(cfg, "05_retrieve", "retrieval_timing"),
                               artifacts.read_json(cfg, "05_retrieve", "lexical_report"))
artifacts.write(cfg, "cost", cost_table)
cost_table


# %% [markdown]
# ## Exploratory — Anthropic's recipe (`retrieve.modes` with bm25 and hybrid; docs/beyond.md, "Anthropic's recipe")
# Each declared step (fixed windows A0 and contextual A1, dense, BM25 and fused, the fused one also reranked) with
# its top-`stats.recipe_k` failure, 1 − recall@k (span-level), over the queries it shares with the baseline (A0,
# dense, no reranker), and the relative reduction 1 − F_step / F_base with the document-clustered bootstrap's CI:
# the ratio resampled as a ratio on the study's draws. Empty without the lexical modes.

# %%
recipe_table = recipe.recipe_table(artifacts.read(cfg, "recipe_scores"), stats_params, cfg.params("embed").strong,
                                   cfg.corpus)
artifacts.write(cfg, "recipe", recipe_table)
recipe_table


# %% [markdown]
# ## Exploratory — each contrast's specification curve (`multiverse`; docs/beyond.md, "Specification curve")
# Every contrast under every combination of the analysis choices the parameter file declared before the run
# (metric and k, embedder, reranker, query types, bootstrap seed, stand-in conditions): Δ, the clustered-bootstrap
# CI and p of Table 1's own test (its resamples shared across specifications), and per contrast the share of
# specifications with the primary's sign, the shares significant each way (unadjusted), the distinct analyses
# (specifications less the bootstrap seed), and two specification-curve tests (Simonsohn, Simmons & Nelson 2020):
# are the median Δ and Stouffer's Z more extreme than under the bootstrap with the contrast's effect removed? Then
# the same shares per value of each axis (`multiverse_axes`). Holm stays on the four primary contrasts. Empty
# without a multiverse.

# %%
curve = multiverse.curves(scores, artifacts.read(cfg, "multiverse_scores"), queries, stats_params, primary,
                          cfg.params("multiverse"), cfg.params().multiverse_metrics, cfg.corpus)
artifacts.write(cfg, "multiverse", curve.specifications)
artifacts.write(cfg, "multiverse_summary", curve.summary)
artifacts.write(cfg, "multiverse_axes", curve.axes)
curve.summary

# %%
curve.axes.head(20)
