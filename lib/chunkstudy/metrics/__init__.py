"""Stage 06, the retrieval metrics: coverage-nDCG@k and the secondary ladder (paper Section 5.1 and the appendix
"Coverage-nDCG"; docs/design.md, "Metrics").

Conventions
-----------
* Every offset is a half-open character index ``[start, end)`` into the query's document's flat text
  (``documents.text``). Chunk offsets are *content* offsets: a prefix (heading path, situating context) is never
  part of them, so a prefix can never create relevance or coverage. Prefixes matter only where they cost context
  window: the token-budget metric charges ``n_prefix_tokens``.
* A retrieved chunk from a document other than the query's contributes nothing (offsets are per-document
  coordinate spaces), but it still occupies its rank and, for budget coverage, its tokens.
* The *ideal* of a condition is computed over that condition's own chunks **of the query's document** (the
  per-condition normalisation of the paper's appendix), never over another condition's chunks.
* Thresholds are inclusive (``>=``). Comparisons allow :data:`EPS` characters of slack so that a fraction such as
  0.8, which binary floating point cannot represent exactly, means what its decimal says.
* A (cell, condition, query) with no retrieved rows scores 0 on every metric; so does a query whose ideal is 0
  (no chunk of the condition covers any gold character).
* A run list must not rank the same chunk twice (a retrieval bug): :func:`score_runs` raises.

Metrics (names derived from ``metrics`` parameters; defaults in brackets)
-----------------------------------------------------------------------
Let the query's gold spans be ``G = {g_1..g_S}`` and the ranked chunks ``c_1, c_2, ...``.

``relevant(c, g)``
    ``|c ∩ g| >= span_frac·|g|`` [0.5] or ``|c ∩ g| >= chunk_frac·|c|`` [0.8] (with ``|c ∩ g| > 0``).
    A chunk is relevant to the query when it is relevant to at least one gold span.
``cov-nDCG@k`` [k = cutoff = 10] (primary; appendix "Coverage-nDCG")
    ``gain_i = (1/S) Σ_j |(c_i ∩ g_j) \\ covered_<i(g_j)| / |g_j|``, ``DCG@k = Σ_{i<=k} gain_i / log2(i+1)``;
    ``IDCG@k`` is the DCG of the greedy maximum-marginal-coverage ordering of the condition's own chunks of the
    document (repeatedly append the chunk with the largest current marginal gain; ties go to the chunk that comes
    first in document order, i.e. smallest ``(start, end, chunk_id)``). ``cov-nDCG@k = DCG@k / IDCG@k``, 0 when
    ``IDCG@k = 0``. When the chunk set of the document does not overlap itself (every study condition tiles each
    document) every chunk's gain is independent of the order, the greedy order is the exact optimum and the score
    lies in [0, 1]. For overlapping chunk sets greedy is the paper's tractable stand-in and the score may exceed 1.
``recall@R`` [R = recall_k = 50]
    Fraction of gold spans ``g_j`` with ``|g_j ∩ ∪_{rank<=R} c| >= span_frac·|g_j|`` (the paper's "≥ 50%
    covered by the union of the top 50"; the threshold is ``span_frac``).
``MRR``
    ``1 / rank`` of the first relevant chunk anywhere in the retrieved list, 0 when none is relevant.
``nDCG@k``
    Binary gains ``rel_i ∈ {0, 1}`` from the relevance rule, ``DCG@k = Σ_{i<=k} rel_i / log2(i+1)``,
    ``IDCG@k = Σ_{i=1}^{min(n_rel, k)} 1/log2(i+1)`` with ``n_rel`` the number of relevant chunks in the
    condition's own chunk set of the document (trec_eval's ``ndcg_cut``). 0 when ``n_rel = 0``.
``budget-cov@B`` [B in budgets = 512, 1024, 2048 tokens]
    Chunks are taken in rank order; each costs ``n_prefix_tokens + n_content_tokens``. The score is
    ``|U ∩ gold| / |gold|`` where ``gold`` is the union of the gold spans' characters and ``U`` the union of the
    content characters that made it into the budget. ``budget_partial`` decides a chunk that does not fit whole:

    * ``truncate`` (default): the first chunk that does not fit is charged its prefix in full, then keeps as many
      content tokens as remain, ``r = B - used - n_prefix_tokens`` (none when ``r <= 0``); without a tokenizer
      here, ``r`` tokens are mapped to the first ``floor((end - start) · r / n_content_tokens)`` characters of
      its content. The budget is then full: no later chunk enters.
    * ``stop``: the first chunk that does not fit ends the walk; nothing of it enters.
    * ``skip``: a chunk that does not fit is left out and the walk continues with the next, smaller ones may
      still fit.

    Under ``truncate`` and ``stop`` a longer prefix can only lower budget coverage. ``skip`` is **not monotone in
    prefix cost**: a prefix can push an early chunk out of the budget and let a later, more useful one in (budget
    10, gold ``[0, 10)``, ranking ``a = [0, 1)`` at 6 tokens then ``b = [1, 10)`` at 5: coverage 0.1 without
    prefixes, 0.9 with 5 prefix tokens on each chunk).

Where it lives
--------------
* :mod:`.scoring`: the public entry points (:func:`score_runs`, :func:`coverage_walk`, :func:`rank_gains`,
  :func:`cell_means`, :func:`walk_example`);
* :mod:`.measures`: what a metric's computation reads (:class:`~.measures.Lists`) and the call of every registered
  metric (each metric's computation is its class in :mod:`chunkstudy.design_metrics`);
* :mod:`.gains`: the ranking-free gains and greedy ideals, and the run rows' novelty gains;
* :mod:`.inputs`: the input tables encoded as arrays (and the contract errors, naming the writer stage);
* :mod:`chunkstudy.metric_blocks` (the foundation): vectorised building blocks (the log discount, novelty
  coverage, grouped sums, the join of gold targets with chunks);
* :mod:`.paired`: the scores paired per query between two conditions (the deltas 07 averages);
* :mod:`.drilldown`: the per-query drill-down table of the primary cell (its presentation is 08's,
  :mod:`chunkstudy.report.drilldown`).

The relevance rule itself is :mod:`chunkstudy.relevance` (shared with the BM25 diagnostic and the export).

All functions are pure: they never mutate their inputs and never round.
"""

from ..metric_blocks import discount, new_coverage
from .inputs import MetricsInputError
from .scoring import SCORE_COLUMNS, cell_means, coverage_walk, metric_names, rank_gains, score_runs, walk_example

__all__ = ["MetricsInputError", "SCORE_COLUMNS", "cell_means", "coverage_walk", "discount",
           "metric_names", "new_coverage", "rank_gains", "score_runs", "walk_example"]
