"""chunkstudy: where chunk boundaries fall, what is prepended at embedding time, and whether retrieval routes to a
section first — the library behind the notebooks in ``notebooks/`` (see README.md and docs/index.md).

Imports flow one way: ``design`` → ``stages`` → ``config``/``artifacts`` → domain modules (``corpus``, ``llm``,
``induce``, ``contexts``, ``queries``, ``chunking``, ``conditions``, ``embed``, ``retrieve``, ``rerank``,
``metrics``, ``stats``) → ``tables``/``figures``/``report``. At the bottom, declared once: ``design`` (the
conditions, the pre-registered contrasts and the metrics; imports nothing of the project) and ``stages`` (the
stage graph: each stage's parameters, reads and writes, the tables' columns and kinds, the one schema check;
imports only ``design``); everything that names a condition, a metric, a stage or a table derives from them.
``paper`` holds the paper's own numbers (imports nothing of the project; any module may read it). Only ``artifacts`` touches paths. Beside the stages: ``runner`` (run_all.sh),
``plan`` (a run's model calls and texts, estimated before any model runs) and ``gpu`` (vLLM serving, model
prefetch, CUDA checks, the GPU smoke run's checks).
"""

__version__ = "0.1.0"
