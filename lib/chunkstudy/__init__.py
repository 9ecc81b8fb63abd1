"""chunkstudy: where chunk boundaries fall, what is prepended at embedding time, and whether retrieval routes to a
section first — the library behind the notebooks in ``notebooks/`` (see README.md and docs/index.md).

The package in layers, lowest first; a module imports only from its own layer or those below, and no two modules
import each other (tests/test_import_layers.py holds the rule, and checks that this map names every module):

* foundation — the declarations everything else derives from: ``design`` (the conditions, prefix kinds, pre-registered
  contrasts and metrics; ``design_metrics`` holds each metric as one class, re-exported there, computed with the
  numpy blocks of ``metric_blocks``; ``prefix_kinds`` finds each prefix kind, one class per module of ``prefix``,
  which renders it and declares its tables), ``schema`` (a table's columns and their kinds), ``stages`` (the stage
  graph: each stage's parameters, reads, writes and edges, the tables' columns, the one schema check), ``params``,
  ``params_analysis`` (its metrics, stats and multiverse sections) and ``paramspec`` (one typed record per parameter
  section), ``paper`` (the paper's own numbers), ``significance`` (the study's one test of a contrast), ``relevance``
  (the span relevance rule); and the plumbing every stage uses: ``config`` and ``config_rules`` (loading and checking
  a parameter file), ``artifacts`` (the only module that touches the data store's paths), ``manifests``, ``codehash``,
  ``imported`` (the library and environment a process actually imported: what each stage's kernel reports to the
  runner), ``progress``, ``models``, ``devices``, ``errors``, ``procs`` (process liveness, process groups, log tails
  and server readiness, said once), ``plugins`` (the extensions of a package found by its files);
* model clients — ``llm``, ``identity`` (a served model known by its answers to a canary set), ``embed_checks``
  (what a vector and a server's reply must be), ``embed_served`` (an embedder behind a server), ``embed``,
  ``embed_store``, ``rerank``;
* the stages, in pipeline order — ``corpus`` (01), ``induce`` (02), ``queries`` (03), ``chunks`` (04),
  ``retrieve`` (05), ``metrics`` (06), ``stats`` (07), ``report`` (08);
* tools that drive or check whole runs — ``runner`` (run_all.sh), ``rerun`` (why a stage runs again) and
  ``runlock``, ``serving`` (the model servers a run starts), ``plan`` (a run's model calls and texts, estimated
  before any model runs), ``golden``, ``export``, ``gpu`` (vLLM serving, model prefetch, CUDA checks, the GPU
  smoke run's checks), ``gguf_convert`` (a GGUF model to a standard Hugging Face folder), ``devicecheck``, and the
  generated docs: ``paramdoc`` (docs/parameters.md), ``stagedoc`` (the pipeline table of docs/running.md) and
  ``designdoc`` (the tables of the conditions, prefix kinds, contrasts, metrics and corpus kinds).
"""

import os as _os

__version__ = "0.1.0"

if _os.environ.get("CHUNKSTUDY_IMPORTED"):  # a stage's kernel under the runner: say which library it imported
    from . import imported as _imported

    _imported.announce()
