"""Which model servers a parameter file declares (:func:`services`): one :class:`Service` per server URL of a role
whose backend talks to a server (``llm.backend: openai``, an ``openai`` embedder or reranker), with how it is
served (``serve: auto | external``), the command that starts it, and the stages that need it (their declared
``services``, :data:`chunkstudy.stages.STAGES`)."""

from __future__ import annotations

import shlex
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .. import stages
from ..config import Config
from ..errors import ChunkstudyError
from ..llm import http

#: hosts a ``serve: auto`` server may be started for (this machine)
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
#: the checkout that holds ``scripts/serve_llm.sh`` (the code's, wherever the data root is)
CODE_ROOT = Path(__file__).resolve().parents[3]
SERVE_SCRIPT = CODE_ROOT / "scripts" / "serve_llm.sh"
#: the share of the GPU's memory (vLLM's ``gpu_memory_utilization``) a ``device: cuda`` server of each kind gets when
#: its ``vllm_engine`` states none: shares that fit together on one GPU (the LLM's beside an embedder's and a
#: reranker's). vLLM's own default, 0.92, lets no second server start: each checks at start-up that its share is free.
GPU_SHARE_DEFAULT = {"llm": 0.80, "embed": 0.05, "rerank": 0.05}
#: the most the shares of the servers up at once on one GPU may add up to (the rest: CUDA contexts), and what that
#: leaves when a stage also runs a model in process on the GPU
GPU_SHARE_LIMIT = 0.95
GPU_SHARE_IN_PROCESS = 0.10


class ServeError(ChunkstudyError, RuntimeError):
    """A server cannot be planned, started or reached (the message names the parameter key and what to do)."""


@dataclass
class Service:
    """One server: ``url`` (a base URL, one replica), the parameter keys it serves (``roles``: ``llm``,
    ``embed.embedders.<k>``, ``retrieve.rerankers.<k>``; roles at the same URL share it), their ``kind`` (the
    stages' service names: ``llm``, ``embed``, ``rerank``), the served ``model`` name, ``serve`` (auto or
    external), ``device`` (where the default command serves: cuda or cpu), the start-up ``timeout_s``, the key
    the client sends and the command line pieces (``command``: an explicit ``serve_command``, else None)."""

    url: str
    roles: list[str]
    kind: str
    model: str
    serve: str
    device: str
    timeout_s: float
    api_key_env: str
    command: str | None
    replica: int = 1
    replicas: int = 1
    stages: tuple[str, ...] = field(default=())
    engine: dict = field(default_factory=dict)

    @property
    def gpu_share(self) -> float | None:
        """The share of the GPU's memory the server takes: its ``vllm_engine.gpu_memory_utilization``, else
        :data:`GPU_SHARE_DEFAULT`; None for a server that is not on a GPU (``device`` not cuda)."""
        if not self.device.startswith("cuda"):
            return None
        return float(self.engine.get("gpu_memory_utilization", GPU_SHARE_DEFAULT[self.kind]))

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    @property
    def port(self) -> int:
        u = urlsplit(self.url)
        return u.port or (443 if u.scheme == "https" else 80)

    @property
    def local(self) -> bool:
        return self.host in LOCAL_HOSTS

    @property
    def bind_host(self) -> str:
        """The address the server listens on: ``127.0.0.1`` for every spelling of this machine
        (:data:`LOCAL_HOSTS`), else the URL's host resolved to its first address (the host when it resolves to none)."""
        if self.local:
            return "127.0.0.1"
        try:
            return str(socket.getaddrinfo(self.host, self.port, proto=socket.IPPROTO_TCP)[0][4][0])
        except (OSError, UnicodeError):
            return self.host

    @property
    def endpoint(self) -> str:
        """Where the server is, whatever the URL's spelling: the resolved address and the port (``127.0.0.1-8000``
        for ``localhost:8000`` and ``127.0.0.1:8000`` alike). A port claim is on this, so two spellings of one
        local endpoint are one claim."""
        return f"{self.bind_host}-{self.port}"

    @property
    def name(self) -> str:
        """The server's file name stem: ``serve-llm``, ``serve-embed-strong`` (``-2`` ... for later replicas)."""
        first = self.roles[0].rsplit(".", 1)[-1] if self.kind != "llm" else ""
        return "-".join(p for p in ("serve", self.kind, first, str(self.replica) if self.replica > 1 else "") if p)

    def argv(self, params: Path) -> list[str]:
        """The command that starts this server: ``serve_command`` with its placeholders filled, else
        ``scripts/serve_llm.sh --foreground [--cpu] --role ROLE --url URL PARAMS`` (vLLM, from ``.venv-serve`` on
        a cuda device, ``.venv-serve-cpu`` on the CPU)."""
        if self.command:
            values = {"host": "127.0.0.1" if self.local else self.host, "port": str(self.port),
                      "model": self.model, "params": str(params)}
            text = self.command
            for k, v in values.items():
                text = text.replace("{" + k + "}", shlex.quote(v))
            return shlex.split(text)
        cpu = [] if self.device.startswith("cuda") else ["--cpu"]
        return [str(SERVE_SCRIPT), "--foreground", *cpu, "--role", self.roles[0], "--url", self.url, str(params)]


def _roles(cfg: Config) -> list[tuple[str, str, Any]]:
    """``[(key, kind, record)]`` of every role served over HTTP."""
    out: list[tuple[str, str, Any]] = []
    lp = cfg.params("llm")
    if lp.backend == "openai":
        out.append(("llm", "llm", lp))
    out += [(f"embed.embedders.{k}", "embed", s) for k, s in cfg.params("embed").embedders.items()
            if s.backend == "openai"]
    out += [(f"retrieve.rerankers.{k}", "rerank", s) for k, s in cfg.params("retrieve").rerankers.items()
            if s.backend == "openai"]
    return out


def kind_stages(kind: str) -> tuple[str, ...]:
    """The stages that declare service ``kind`` (:attr:`chunkstudy.stages.Stage.services`)."""
    return tuple(s.name for s in stages.STAGES if kind in s.services)


def services(cfg: Config) -> list[Service]:
    """Every server the parameters name, one per URL (replicas apart), in role order. Roles at one URL share its
    server: they must name the same model and be served the same way, else :class:`ServeError` names both."""
    by_url: dict[str, Service] = {}
    engines: dict[str, dict] = {}
    spelled: dict[str, Service] = {}  # local endpoint -> the first service there
    for key, kind, rec in _roles(cfg):
        base = http.urls(rec.base_url)
        if not base:
            raise ServeError(f"{cfg.path}: {key}.base_url is empty; backend 'openai' needs the server's URL")
        for i, url in enumerate(base, 1):
            svc = Service(url, [key], kind, rec.model, rec.serve, str(rec.device), float(rec.serve_timeout_s),
                          rec.api_key_env, rec.serve_command, i, len(base), kind_stages(kind), dict(rec.vllm_engine))
            first = spelled.setdefault(svc.endpoint, svc) if svc.local else svc
            if first.url != url:
                raise ServeError(f"{cfg.path}: {first.roles[0]}.base_url {first.url} and {key}.base_url {url} are one "
                                 f"server ({svc.endpoint.replace('-', ':')}) spelled two ways; write it one way")
            old = by_url.get(url)
            if old is None:
                by_url[url], engines[url] = svc, dict(rec.vllm_engine)
                continue
            same = (old.kind, old.model, old.serve, old.command, old.device, engines[url]) == \
                   (svc.kind, svc.model, svc.serve, svc.command, svc.device, dict(rec.vllm_engine))
            if not same:
                raise ServeError(f"{cfg.path}: {old.roles[0]} and {key} name the same server {url} but not the same "
                                 f"model, kind, serve, serve_command, device and vllm_engine; give one of them its "
                                 f"own base_url")
            old.roles.append(key)
    return list(by_url.values())


def auto_services(cfg: Config, selected: list[str]) -> list[Service]:
    """The ``serve: auto`` servers a selected stage needs."""
    return [s for s in services(cfg) if s.serve == "auto" and set(s.stages) & set(selected)]
