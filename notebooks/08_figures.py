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
# # 08 · Figures, tables and report
#
# **Reads** what every earlier stage computed (its declared reads, `chunkstudy.stages`): `01_corpus` (documents,
# corpus_funnel), `02_induce` (induction_stats.json), `03_queries` (queries, query_funnel, bm25.json),
# `04_chunk_embed` (chunks, summary.json, placebo_buckets), `05_retrieve` (section_recall,
# section_recall_summary), `06_metrics` (drilldown), `07_stats` (contrasts, mixedlm, dose_response, per_type,
# condition_means, reranker_lift, power, power_needed, multiverse, multiverse_summary) and the manifests of
# 01–07 — and, for the replication table, the `07_stats/contrasts` of the corpus named by `figures.replicate_with`
# when it exists.
# **Writes** `figures/<corpus>/`: every figure as PNG and PDF (`figures.formats`), `tables/*.md` and
# `tables/*.tex` (booktabs), `report.md`, and `report.html` (the same report in one self-contained file: figures
# embedded, sortable tables, one collapsible drill-down per contrast). This is the only stage that rounds numbers,
# and it computes none: every number was written by the stage that owns it.
# A missing input becomes a note in the report, never a failure.

# %% tags=["parameters"]
params_file = "params/demo.yaml"

# %%
from IPython.display import Markdown, display

from chunkstudy import config
from chunkstudy.report import report

cfg = config.load(params_file)
inputs = report.gather(cfg)
partner = report.partner_contrasts(cfg)
{"missing inputs": inputs["missing"], "replication partner": partner.corpus, "partner note": partner.note}

# %% [markdown]
# ## Build every table and figure

# %%
bundle = report.build(cfg.params(), cfg.corpus, inputs, partner)
written = report.write_all(cfg, bundle, params_file)
written.groupby("kind").size()

# %% [markdown]
# ## Models used and warnings

# %%
display(bundle.models)
Markdown(report.warnings_markdown(bundle))

# %% [markdown]
# ## Table 1 — confirmatory (primary cell)

# %%
Markdown(report.table_markdown(bundle, "table1"))

# %%
bundle.figures["fig_contrasts"]

# %% [markdown]
# ## Each contrast's specification curve (exploratory; `multiverse`, docs/beyond.md)
# Beside Table 1: how far each contrast's sign and decision survive the declared analysis choices (a line saying
# the table is not available when the parameter file declares no multiverse); `report.html` opens any specification.

# %%
Markdown(report.table_markdown(bundle, "multiverse"))

# %%
bundle.figures.get("fig_multiverse")

# %% [markdown]
# ## Planning: how many documents would each contrast need? (07's power analysis)

# %%
Markdown(report.power_markdown(bundle))

# %%
bundle.figures["fig_power"]

# %% [markdown]
# ## Exploratory: Table 2 and the figures

# %%
Markdown(report.table_markdown(bundle, "table2"))

# %%
bundle.figures["fig_budget_coverage"]

# %%
bundle.figures["fig_dose_response"]

# %%
bundle.figures["fig_section_recall"]

# %%
bundle.figures["fig_per_type"]

# %%
bundle.figures["fig_reranker_lift"]

# %% [markdown]
# ## Figure 1 and the construction tables

# %%
bundle.figures["fig1_mechanisms"]

# %%
Markdown(report.tables_markdown(bundle, prefix="funnel"))

# %% [markdown]
# ## Per-query drill-down (summary; `report.html` has the side-by-side lists)

# %%
Markdown(report.tables_markdown(bundle, prefix="drilldown"))

# %% [markdown]
# ## The report (`figures/<corpus>/report.md`, its figures embedded here)

# %%
Markdown(report.render(bundle, cfg.params(), params_file, embed_figures=True))
