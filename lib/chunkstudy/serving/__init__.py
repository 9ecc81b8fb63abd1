"""The model servers of a run: ``./run_all.sh`` starts, uses and stops them (docs/servers.md).

Each model role that talks to a server (``llm`` with ``backend: openai``; an embedder or reranker with ``backend:
openai``) declares how it is served: ``serve: external`` (the server is the user's; a stage fails fast naming the
URL when nothing answers) or ``serve: auto`` (the runner starts it at each local ``base_url`` that does not answer,
when a stage first needs a model call its caches do not hold, and stops it once no later selected stage needs it).

* :mod:`.roles` — the servers a parameter file declares (:func:`services`, one :class:`Service` per URL).
* :mod:`.check` — the up-front check before 01 (models in the local cache, serving environments, GPU, CPU).
* :mod:`.lifecycle` — :class:`Services`: port claims, the broker the stages' clients ask, start, wait, stop,
  the manifests' records and the report of a server that died.
* :mod:`.supervise` — the process between the runner and a server: it ends the server's process group when the
  runner closes its pipe or dies.
* :mod:`.args` — the vLLM command line of a role (``scripts/serve_llm.sh --foreground``).

Command line: ``.venv/bin/python -m chunkstudy.serving {args,check,list} PARAMS ...``.
"""

from __future__ import annotations

from .roles import LOCAL_HOSTS, Service, ServeError, auto_services, services

__all__ = ["LOCAL_HOSTS", "Service", "ServeError", "auto_services", "services"]
