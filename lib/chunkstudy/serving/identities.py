"""The served models a stage uses, known by their answers, for its key (docs/servers.md, "What a served model is").

Before each stage the runner settles every served role of the service kinds the stage declares
(:attr:`chunkstudy.stages.Stage.services`: ``llm``, ``embed``, ``rerank``) — once per model per run — and puts its
fingerprint (:mod:`chunkstudy.identity`) in the stage's key beside the in-process models' content
(:func:`chunkstudy.models.stage_sources`), so a model changed behind its name reruns the stages it feeds:

* a server that answers ``GET /models`` is asked the canary set (one request);
* one that does not answer stands for the answers recorded last for its declaration (a ``serve: auto`` server is
  stopped between runs: a fully cached stage starts none); for ``serve: external`` the run says so;
* with none recorded (a ``serve: auto`` command never run here, or a changed one) the key holds
  :data:`chunkstudy.identity.UNKNOWN`: the stage's client settles the model when it first needs it (the runner then
  starts the server), and :meth:`Identities.settled_after` writes the fingerprint it settled into the key the
  manifest records.

The stage's kernel gets the settled identities (:meth:`Identities.handed`), so its clients key their caches by
the same fingerprints without asking again.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, cast

from .. import artifacts, identity, procs
from ..config import Config
from ..llm import http
from ..llm.base import PREFLIGHT_TIMEOUT_S, LLMError


class IdentityProblem(RuntimeError):
    """A served model that answers, but wrongly, when the stage's key is made (the message names it)."""


def served_roles(cfg: Config, kinds: tuple[str, ...]) -> list[tuple[str, str, Any]]:
    """``[(role, kind, record)]`` of every role served over HTTP (backend ``openai``) of the service ``kinds``."""
    out: list[tuple[str, str, Any]] = []
    p = cfg.params()
    if "llm" in kinds and p.llm.backend == "openai":
        out.append(("llm", "llm", p.llm))
    if "embed" in kinds:
        out += [(f"embed.embedders.{k}", "embed", s) for k, s in p.embed.embedders.items() if s.backend == "openai"]
    if "rerank" in kinds:
        out += [(f"retrieve.rerankers.{k}", "rerank", s) for k, s in p.retrieve.rerankers.items()
                if s.backend == "openai"]
    return out


def registry_folder(cfg: Config, kind: str) -> Any:
    """The cache folder whose identity registry keys a kind's outputs: the embedding store, the reranker's score
    cache, the LLM's call cache (where each client settles its model too)."""
    p = cfg.params()
    name = {"embed": p.embed.store, "rerank": "rerank", "llm": p.llm.cache}[kind]
    return artifacts.cache_dir(cfg, name)


def probe(role: str, kind: str, record: Any) -> tuple[dict, str]:
    """The canary answers of a served role and the URL asked, through the role's own client (one request)."""
    key = role.rsplit(".", 1)[-1]
    if kind == "embed":
        from ..embed_served import ServedEmbeddings

        return ServedEmbeddings(record, key, record.max_seq_length or 0, time.sleep).canary()
    if kind == "rerank":
        from ..rerank import ServedReranker

        return ServedReranker(record, key).canary()
    from ..llm.backends import make_backend

    return cast(Any, make_backend(record)).canary()


class Identities:
    """The served models of one run (module docstring); ``log`` prints the runner's lines."""

    def __init__(self, cfg: Config, log: Callable[[str], Any]):
        self.cfg, self.log = cfg, log
        self.known: dict[str, identity.Identity | None] = {}  # role -> its identity, settled once per run
        self._asked: dict[tuple, tuple[dict, str] | None] = {}  # (kind, urls, model) -> answers: one probe each

    def roles(self, stage: Any) -> list[tuple[str, str, Any]]:
        return served_roles(self.cfg, tuple(stage.declared.services))

    def key_entries(self, stage: Any) -> dict[str, str]:
        """``{role: fingerprint}`` of the served roles ``stage`` uses (:data:`chunkstudy.identity.UNKNOWN` where its
        server does not answer and none are recorded), each settled at its first stage of the run."""
        return {role: identity.key_entry(self.settle(stage.name, role, kind, rec))
                for role, kind, rec in self.roles(stage)}

    def settle(self, stage: str, role: str, kind: str, record: Any) -> identity.Identity | None:
        if role in self.known:
            return self.known[role]
        reg = identity.Registry(registry_folder(self.cfg, kind), kind, record.model)
        declared = identity.declaration(kind, record)
        urls = http.urls(record.base_url)
        found = self._answers(role, kind, record, urls)
        ident: identity.Identity | None
        if found is not None:
            ident = identity.settle_probed(reg, role, found[0], found[1], declared)
        else:
            ident = identity.settle_recorded(reg, role, urls[0], declared)
            if record.serve == "external":
                what = (f"its model is taken to be the one last recorded for it: {identity.describe(ident)}"
                        if ident is not None else "no answers of it are recorded: the stage learns its model when it "
                        "needs it (and fails, naming it, if it still does not answer)")
                self.log(f"{stage:<16} note: {role}: no server answers at {urls[0]}; {what}")
        self.known[role] = ident
        return ident

    def _answers(self, role: str, kind: str, record: Any, urls: list[str]) -> tuple[dict, str] | None:
        """The role's canary answers when its server answers ``GET /models`` (one request per server and model in a
        run), else None."""
        where = (kind, tuple(urls), record.model)
        if where not in self._asked:
            listed, _ = procs.served_models(urls[0], http.auth_headers(record.api_key_env), PREFLIGHT_TIMEOUT_S)
            if listed is None:  # nothing answers (a server need not list the model: the canary request tells)
                self._asked[where] = None
            else:
                try:
                    self._asked[where] = probe(role, kind, record)
                except identity.NoAnswer:
                    self._asked[where] = None
                except (LLMError, RuntimeError, ValueError) as e:  # it answered, wrongly: the cause is the message
                    raise IdentityProblem(str(e) if role in str(e) else f"{role}: {e}") from None
        return self._asked[where]

    @contextmanager
    def handed(self, stage: Any) -> Iterator[None]:
        """The settled identities of ``stage``'s served roles in the environment its kernel inherits
        (:data:`chunkstudy.identity.HANDOFF_ENV`), for the stage's run."""
        mine = {role: ident.as_dict() for role, _, _ in self.roles(stage)
                if (ident := self.known.get(role)) is not None}
        saved = os.environ.get(identity.HANDOFF_ENV)
        os.environ[identity.HANDOFF_ENV] = json.dumps(mine)
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop(identity.HANDOFF_ENV, None)
            else:
                os.environ[identity.HANDOFF_ENV] = saved

    def settled_after(self, stage: Any, key: dict) -> dict:
        """``key`` with each role that was :data:`~chunkstudy.identity.UNKNOWN` when it was made and that the stage
        settled (its client asked the server it needed; the registry now records its declaration's answers) given
        its fingerprint: the manifest records the model the stage used, and the next run's key meets it."""
        models = dict(key.get("models") or {})
        for role, kind, rec in self.roles(stage):
            if models.get(role) != identity.UNKNOWN:
                continue
            reg = identity.Registry(registry_folder(self.cfg, kind), kind, rec.model)
            ident = identity.settle_recorded(reg, role, http.urls(rec.base_url)[0], identity.declaration(kind, rec))
            if ident is not None:
                models[role] = ident.fingerprint
                self.known[role] = identity.Identity(**{**ident.as_dict(), "how": "probed"})  # the stage asked it
        return {**key, "models": models} if models else key
