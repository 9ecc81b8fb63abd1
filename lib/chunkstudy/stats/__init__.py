"""Statistics (stage 07): the pre-registered contrasts, their document-clustered bootstrap, Holm, Cohen's dz, the
secondary MixedLMs (the pre-registered one and the correctly specified paired one), and the exploratory analyses (paper, main text §4 "Statistics" and the statistics appendix;
docs/design.md, "Statistics").

Vocabulary
----------
* A **cell** is one metric × one embedder × one reranker setting of one corpus; its name is
  ``"<metric>|<embedder>|<reranker>"``, e.g. ``"cov-nDCG@10|strong|none"`` (:func:`chunkstudy.design.cell_name`).
* The **primary cell** is fixed in advance by ``stats.primary_metric`` × ``embed.strong`` × ``stats.primary_reranker``
  (cov-nDCG@10 × strong × none): :class:`chunkstudy.design.PrimaryCell`, computed once from the parameters
  (``cfg.params().primary_cell``) and passed as ``primary``. Its four contrasts are the *confirmatory* family; every
  other number this package produces is labelled *exploratory*.
* A **contrast** ``name: [A, B]`` (``stats.contrasts``; C1 = A3−A1, C2 = A3−P, C3 = G3−A3, C4 = A4−A3) is the mean
  of the paired per-query deltas ``δ_q = score_A(q) − score_B(q)`` over the queries scored under both conditions
  (a NaN score counts as "not scored").
* Uncertainty comes from a **document-clustered bootstrap**: documents are resampled with replacement and every
  query of a drawn document enters the replicate as a bundle.

Inputs are the ``scores`` table of 06_metrics (long form: corpus, embedder, reranker, condition, query_id, metric,
value) and the ``queries`` table of 03_queries (query_id → doc_id, qtype), paired per query by
:mod:`chunkstudy.metrics.paired`. Every function is pure: it never mutates
its inputs and never rounds (only 08_figures rounds). A contrast whose conditions are absent from a cell is not an
error: its row carries NaN statistics and a ``note`` saying why.

Where it lives: the test itself — resampling, statistic, CI, p, the inference floors and Holm's decision — is
:class:`chunkstudy.significance.BootstrapTest` (a foundation module, because the parameter rules use it too; its
building blocks are re-exported here); :mod:`.effects` (Cohen's dz, the cluster-robust SE), :mod:`.contrasts` (the confirmatory family in every cell, the user's family, the secondary MixedLM),
:mod:`.exploratory` (dose-response, per-type cuts, per-condition means, reranker lift), :mod:`.simulate`
(simulated scores with known effects), :mod:`.verdicts` (the verdicts beside Holm's, one module each in
:mod:`.verdict`, found by their files), :mod:`.power` (how many documents each contrast needs; imported as
``chunkstudy.stats.power``) and :mod:`.multiverse` (each contrast's specification curve; imported as
``chunkstudy.stats.multiverse``).
"""

from .contrasts import (CONFIRMATORY, CONTRAST_COLUMNS, EXPLORATORY, MIXEDLM_COLUMNS, MIXEDLM_NOTE,
                        PAIRED_MIXEDLM_COLUMNS, PAIRED_MIXEDLM_NOTE, USER_ADDED, contrasts_table, fit_mixedlm,
                        fit_paired_mixedlm, mixedlm_table, paired_mixedlm_table, user_contrasts_table, user_family)
from .exploratory import (DEPTH_LADDER, DOSE_COLUMNS, MEANS_COLUMNS, PER_TYPE_COLUMNS, condition_means,
                          dose_response, metric_rows, per_query_slopes, per_type, reranker_lift)
from ..significance import (MIN_BOOT, ONE_DOCUMENT_NOTE, Bootstrap, BootstrapTest, bootstrap_p, cluster_bootstrap,
                            cluster_sums, holm, inference_problem, mc_p_two_sided, percentile_ci)
from .effects import cluster_se, cohens_dz
from .simulate import simulate_scores

__all__ = ["CONFIRMATORY", "CONTRAST_COLUMNS", "EXPLORATORY", "MIXEDLM_COLUMNS", "MIXEDLM_NOTE",
           "PAIRED_MIXEDLM_COLUMNS", "PAIRED_MIXEDLM_NOTE", "USER_ADDED", "contrasts_table", "fit_mixedlm",
           "fit_paired_mixedlm", "mixedlm_table", "paired_mixedlm_table", "user_contrasts_table", "user_family", "DEPTH_LADDER",
           "DOSE_COLUMNS", "MEANS_COLUMNS", "PER_TYPE_COLUMNS", "condition_means", "dose_response", "metric_rows",
           "per_query_slopes", "per_type", "reranker_lift", "MIN_BOOT", "ONE_DOCUMENT_NOTE", "Bootstrap", "BootstrapTest",
           "bootstrap_p", "cluster_bootstrap", "cluster_se", "cluster_sums", "cohens_dz", "holm",
           "inference_problem", "mc_p_two_sided", "percentile_ci", "simulate_scores"]
