"""What a served model is: its answers to a fixed, declared canary set (docs/servers.md, "What a served model is").

A served model's name says nothing of the weights behind it: another checkpoint served under the same name, or the
same one started with ``--dim 32`` instead of ``--dim 64``, answers to the same name. So before a stage uses a
served model, its client (or the runner, for the stage's key) sends it a canary set — :data:`CANARY_TEXTS` for an
embedder, :data:`CANARY_PAIRS` for a reranker, :data:`CANARY_CHAT` (seeded, greedy) for the LLM — and reads its
model entry of ``GET /models`` (vLLM's ``max_model_len``). The answers' *fingerprint* enters the model's content key
(an embedder's store key, a reranker's score cache id, the LLM's call cache key, and the stage keys): a changed model
reruns what it feeds and never meets the vectors, scores or replies of the old one; an unchanged one keeps them all.

* **The same answers.** Two answer sets are the same model's when they agree within the declared tolerance
  (:func:`same`): an embedder's canary vectors each at cosine >= :data:`EMBED_MIN_COSINE`, a reranker's scores within
  :data:`RERANK_TOLERANCE` (relative, at least absolute), the LLM's reply identical; and ``max_model_len`` equal where
  the server reports it. Batching noise is far inside these; a precision change (float32 to bfloat16) or another
  checkpoint is outside.
* **No rounding edge.** A fingerprint is not a hash of rounded answers (one component near a rounding boundary would
  flip it under noise): each folder that keys a model's outputs keeps a :class:`Registry` of the answer sets it has
  seen, and a new answer set takes the fingerprint of the first recorded one it matches, or a new one (the sha256
  of the answers themselves) when none does.
* **Declarations.** The registry also records, per *declaration* of a role (:func:`declaration`: how the server is
  reached, and for a server the run starts, the command, engine arguments and the model's content), the
  fingerprint it answered with last. When that server does not answer (a run's servers are stopped between runs), the
  recorded fingerprint stands for it, so a fully cached stage starts no server; a changed declaration has none
  recorded, so its server answers first.
* **Hand-off.** The runner settles each served role a stage uses before the stage's key (one request per model per
  run) and hands the result to the stage's kernel (:data:`HANDOFF_ENV`, :func:`handed`), so the stage's clients key
  their caches by the same fingerprint without asking again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import procs
from .errors import ChunkstudyError

#: the version of the canary sets below: a change of any of them is a new version, whose fingerprints are new
CANARY_VERSION = 1
#: what an embedder is asked (passages: no query instruction): four texts of different lengths and topics
CANARY_TEXTS: tuple[str, ...] = (
    "The cat sat on the mat.",
    "Apollo 8 was the first crewed spacecraft to leave low Earth orbit and to orbit the Moon, in December 1968.",
    "Mitochondria are organelles that produce most of a cell's chemical energy through aerobic respiration.",
    "A bank may refuse a loan when the applicant's income is too low to repay it within the term.",
)
#: what a reranker is asked: one query and three passages (one request), the relevant one among them
CANARY_QUERY = "which spacecraft first orbited the moon with a crew"
CANARY_PAIRS: tuple[tuple[str, str], ...] = tuple((CANARY_QUERY, t) for t in CANARY_TEXTS[:3])
#: what the LLM is asked, with temperature 0, seed :data:`CANARY_SEED` and at most :data:`CANARY_TOKENS` tokens
CANARY_CHAT: tuple[dict, ...] = (
    {"role": "user", "content": "Continue this sentence in a few words: The first crewed flight around the Moon"},)
CANARY_SEED = 0
CANARY_TOKENS = 8

#: an embedder's canary vectors (unit-normalised) are the same model's when each has at least this cosine to the
#: recorded one: other batch compositions moved all-MiniLM-L6-v2's canary vectors by 1 - cosine <= 1.1e-8 (float32,
#: CPU), bfloat16 autocast by 1.8e-5 (docs/servers.md, "What a served model is"); another checkpoint is far below
EMBED_MIN_COSINE = 1 - 1e-5
#: a reranker's canary scores (logits) are the same model's when each is within this share of the recorded one's
#: magnitude (at least 1): two replicas' scores were seen 6e-8 apart (docs/servers.md), another checkpoint moves a
#: logit by whole units
RERANK_TOLERANCE = 1e-3
#: set by the runner for a stage's kernel: ``{role: Identity as a dict}`` of the served roles it settled
HANDOFF_ENV = "CHUNKSTUDY_MODEL_IDENTITY"
#: a stage key's entry for a served role whose answers are not known when the key is made (its server does not
#: answer and none are recorded for its declaration); the runner writes the fingerprint the stage settles instead
UNKNOWN = "canary:unknown"


class IdentityError(ChunkstudyError, RuntimeError):
    """A served model's identity cannot be learnt; the message names the role and URL."""


class NoAnswer(IdentityError):
    """A server did not answer the canary request (nothing answers at its URL, or the request failed after its
    retries); a reply that came and was wrong is the client's own error, naming the cause."""


# --------------------------------------------------------------------------------------------------- answers

def answers(kind: str, values: Any, meta: dict | None = None) -> dict:
    """The canary answers of a model of ``kind`` (``embed``, ``rerank``, ``llm``) as plain data: an embedder's
    vectors (unit-normalised by the caller; ``dim`` with them), a reranker's scores, the LLM's reply;
    ``max_model_len`` from ``meta`` (the model's entry of ``GET /models``) where the server reports it."""
    out: dict[str, Any] = {"kind": kind, "canary": CANARY_VERSION}
    if kind == "embed":
        v = np.asarray(values, dtype=np.float64)
        out["dim"] = int(v.shape[1]) if v.ndim == 2 else 0
        out["values"] = [[float(x) for x in row] for row in v]
    elif kind == "rerank":
        out["values"] = [float(x) for x in values]
    else:
        out["reply"] = str(values)
    mml = (meta or {}).get("max_model_len")
    if isinstance(mml, int) and not isinstance(mml, bool):
        out["max_model_len"] = mml
    return out


def same(a: dict, b: dict) -> bool:
    """Whether two answer sets (:func:`answers`) are one model's, within the declared tolerances (module docstring)."""
    if (a.get("kind"), a.get("canary"), a.get("max_model_len")) != (b.get("kind"), b.get("canary"),
                                                                     b.get("max_model_len")):
        return False
    if a["kind"] == "embed":
        va, vb = np.asarray(a["values"], dtype=np.float64), np.asarray(b["values"], dtype=np.float64)
        if va.shape != vb.shape or va.ndim != 2:
            return False
        cos = (va * vb).sum(axis=1) / (np.linalg.norm(va, axis=1) * np.linalg.norm(vb, axis=1))
        return bool((cos >= EMBED_MIN_COSINE).all())
    if a["kind"] == "rerank":
        sa, sb = np.asarray(a["values"], dtype=np.float64), np.asarray(b["values"], dtype=np.float64)
        return sa.shape == sb.shape and bool((np.abs(sa - sb) <= RERANK_TOLERANCE * np.maximum(1.0, np.abs(sa))).all())
    return a.get("reply") == b.get("reply")


def fingerprint(found: dict) -> str:
    """A new fingerprint: ``canary:<16 hex>``, the sha256 of an answer set as it came (its first recording)."""
    return "canary:" + hashlib.sha256(json.dumps(found, sort_keys=True).encode()).hexdigest()[:16]


def declaration(kind: str, record: Any, content: str | None = None) -> dict:
    """What identifies a role's server when it does not answer: the model, the URLs and how it is served; for a
    server the run starts (``serve: auto``), also what the command serves (``serve_command``, ``device``,
    ``vllm_engine``, an LLM's ``serve_weights``, an untrained reranker head's ``seed``) and ``content``, the content
    key of the weights it loads (default :func:`chunkstudy.models.content_key` of the model name; None where it
    names no folder or cached hub model here). A server of the user's (``serve: external``)
    is known by its URL and name alone: its answers, when it answers, tell the rest."""
    from .llm import http

    out: dict[str, Any] = {"kind": kind, "model": record.model, "base_url": http.urls(record.base_url),
                           "serve": record.serve, "canary": CANARY_VERSION}
    if record.serve == "auto":
        if content is None:
            from . import models

            try:
                content = models.content_key(record.model)
            except ValueError:
                content = None
        out.update(serve_command=record.serve_command, device=str(record.device), vllm_engine=dict(record.vllm_engine),
                   content=content)
        if kind == "llm":
            out["serve_weights"] = record.serve_weights
        if kind == "rerank":
            out.update(trained=record.trained, seed=record.seed)
    return out


def model_entry(base_url: str, model: str, headers: dict, timeout_s: float) -> dict:
    """The entry of ``model`` in ``GET {base_url}/models`` (vLLM's holds ``max_model_len``), asked before a canary
    request: an :class:`IdentityError` when nothing answers there (a refused or broken connection, no reply in
    time), so a dead server is named at once rather than after the canary request's retries; {} when the server
    answers without listing the model (an OpenAI-compatible server need not serve ``/models``; the canary request
    tells)."""
    listed = procs.model_list(base_url, headers, timeout_s)
    if listed.status is None:
        raise IdentityError(f"no server answers at {listed.url} ({listed.why})")
    return next((e for e in listed.entries or [] if e.get("id") == model), {})


def ask(where: str, url: str, model: str, headers: dict, timeout_s: float, post: Any, endpoint: str,
        failures: tuple[type[Exception], ...]) -> tuple[dict, Any]:
    """A served embedder's or reranker's canary request: the model's :func:`model_entry` at ``url``, then ``post()``
    (the request of the canary set); :class:`NoAnswer` naming ``where`` when nothing answers, and naming
    ``{url}/{endpoint}`` when the request fails with one of ``failures`` (the client's transport errors)."""
    try:
        return model_entry(url, model, headers, timeout_s), post()
    except IdentityError as e:
        raise NoAnswer(f"{where}: {e}") from None
    except failures as e:
        raise NoAnswer(f"{where}: the canary request to {url}/{endpoint} failed: {e}") from None


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


# -------------------------------------------------------------------------------------------------- identity

@dataclass(frozen=True)
class Identity:
    """What a served role answered with: its ``fingerprint``, ``how`` it is known (``probed`` this run, or
    ``recorded``: the last answers of its declaration, its server not answering), the ``url`` asked, and from the
    answers the vectors' ``dim`` (an embedder) and the server's ``max_model_len`` (where reported)."""

    role: str
    fingerprint: str
    how: str
    url: str
    dim: int | None = None
    max_model_len: int | None = None
    declared: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _identity(role: str, fp: str, how: str, url: str, found: dict, declared: dict) -> Identity:
    return Identity(role, fp, how, url, found.get("dim"), found.get("max_model_len"), _digest(declared))


def handed(role: str) -> Identity | None:
    """The identity the runner settled for ``role`` and handed to this stage (:data:`HANDOFF_ENV`), None without one
    (outside a run, or a role whose answers were unknown when the stage's key was made)."""
    raw = os.environ.get(HANDOFF_ENV)
    if not raw:
        return None
    try:
        rec = json.loads(raw).get(role)
    except (ValueError, AttributeError):
        return None
    return Identity(**rec) if isinstance(rec, dict) else None


# -------------------------------------------------------------------------------------------------- registry

class Registry:
    """The answer sets a folder has seen for one model name of one kind, and the fingerprint each declaration
    answered with last: ``<folder>/identity/<kind>-<model>-<hash>.json``, written whole and renamed into place.
    ``folder`` None keeps it in memory (a client without a cache folder: each answer set is its own fingerprint)."""

    def __init__(self, folder: str | Path | None, kind: str, model: str):
        self.kind, self.model = kind, model
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model.rstrip("/").split("/")[-1])[:60]
        self.path = (Path(folder) / "identity" / f"{kind}-{slug}-{_digest([kind, model])[:10]}.json"
                     if folder is not None else None)
        self.data: dict = {"kind": kind, "model": model, "seen": [], "declarations": {}}
        if self.path is not None and self.path.is_file():
            try:
                loaded = json.loads(self.path.read_text(encoding="utf-8"))
                if isinstance(loaded, dict) and isinstance(loaded.get("seen"), list):
                    self.data = {**self.data, **loaded}
            except (OSError, ValueError):
                pass  # a damaged record is seen again: the answers are asked anew

    def _write(self) -> None:
        if self.path is None:
            return
        from .artifacts import write_json_file

        write_json_file(self.path, self.data)

    def merge(self, other: dict) -> None:
        """Add the answer sets and declarations of another registry's record of this model (an exported cache's,
        :meth:`chunkstudy.llm.Client.import_cache`) that this one lacks."""
        have = {e["fingerprint"] for e in self.data["seen"]}
        added = [e for e in other.get("seen", []) if isinstance(e, dict) and e.get("fingerprint") not in have]
        new = {k: v for k, v in (other.get("declarations") or {}).items() if k not in self.data["declarations"]}
        if added or new:
            self.data["seen"] += added
            self.data["declarations"].update(new)
            self._write()

    def match(self, found: dict, url: str) -> str:
        """The fingerprint of the first recorded answer set ``found`` is the same as (:func:`same`), else a new one
        recorded for it."""
        for entry in self.data["seen"]:
            if same(entry["answers"], found):
                return str(entry["fingerprint"])
        fp = fingerprint(found)
        self.data["seen"].append({"fingerprint": fp, "answers": found, "url": url,
                                  "first_seen": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        self._write()
        return fp

    def answers_of(self, fp: str) -> dict:
        return next((e["answers"] for e in self.data["seen"] if e["fingerprint"] == fp), {})

    def recorded(self, declared: dict) -> str | None:
        """The fingerprint ``declared`` answered with last, None when it never answered here."""
        rec = self.data["declarations"].get(_digest(declared))
        return str(rec["fingerprint"]) if isinstance(rec, dict) and "fingerprint" in rec else None

    def remember(self, declared: dict, fp: str) -> None:
        """Record that ``declared`` answered with ``fp`` (now)."""
        rec = {"fingerprint": fp, "declaration": declared, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        old = self.data["declarations"].get(_digest(declared))
        if not isinstance(old, dict) or old.get("fingerprint") != fp:
            self.data["declarations"][_digest(declared)] = rec
            self._write()


def registries(folder: str | Path) -> dict[str, dict]:
    """The registry records kept in ``folder`` (``identity/*.json``), by file name: what an exported cache carries."""
    out = {}
    for f in sorted((Path(folder) / "identity").glob("*.json")):
        try:
            out[f.name] = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
    return out


def merge_registries(folder: str | Path, records: dict[str, dict]) -> None:
    """Merge exported registry records (:func:`registries`) into ``folder``'s."""
    for rec in records.values():
        if isinstance(rec, dict) and rec.get("kind") and rec.get("model"):
            Registry(folder, str(rec["kind"]), str(rec["model"])).merge(rec)


def settle_probed(registry: Registry, role: str, found: dict, url: str, declared: dict) -> Identity:
    """The identity of answers just probed: matched in ``registry`` (:meth:`Registry.match`) and remembered as the
    declaration's latest."""
    fp = registry.match(found, url)
    registry.remember(declared, fp)
    return _identity(role, fp, "probed", url, found, declared)


def settle_recorded(registry: Registry, role: str, url: str, declared: dict) -> Identity | None:
    """The identity ``declared`` answered with last (:meth:`Registry.recorded`), None when none is recorded."""
    fp = registry.recorded(declared)
    if fp is None:
        return None
    return _identity(role, fp, "recorded", url, registry.answers_of(fp), declared)


def changed_since(recorded: Identity, found: dict, registry: Registry, declared: dict) -> str | None:
    """When a server whose recorded answers stood for it (``recorded.how == "recorded"``) is started and answers
    otherwise: the new fingerprint (remembered for ``declared``, so the next run keys the model by it); None when it
    answers as recorded."""
    if same(registry.answers_of(recorded.fingerprint), found):
        return None
    fp = registry.match(found, recorded.url)
    registry.remember(declared, fp)
    return fp


def describe(ident: Identity) -> str:
    """One line for messages and manifests: ``canary:1a2b... (probed at http://...)``."""
    how = "probed at" if ident.how == "probed" else "recorded for the server at"
    return f"{ident.fingerprint} ({how} {ident.url})"


def key_entry(ident: Identity | None) -> str:
    """What a stage key holds for a served role: its fingerprint, or :data:`UNKNOWN`."""
    return ident.fingerprint if ident is not None else UNKNOWN



# ------------------------------------------------------------------------------------------- for the clients

def settle_client(role: str, kind: str, record: Any, folder: str | Path | None, canary: Any, first_url: str,
                  error: type[Exception]) -> Identity:
    """A client's own settling of a served role (no identity handed by the runner): ``canary()`` (which first asks
    the runner to start a ``serve: auto`` server, in a run) -> ``(answers, url)``, matched in the registry of
    ``folder`` and remembered for the role's declaration. When the server does not answer (``canary`` raises
    :class:`NoAnswer`), the answers recorded last for the declaration stand for it, with a note; with none recorded,
    ``error`` says why what the model computes cannot be keyed. A wrong reply (the client's own error) stops it."""
    reg = Registry(folder, kind, record.model)
    declared = declaration(kind, record)
    try:
        found, url = canary()
    except NoAnswer as e:
        ident = settle_recorded(reg, role, first_url, declared)
        if ident is None:
            raise error(f"{e}; no answers of it are recorded here either, so what it computes cannot be told from "
                        "another model's: start its server (one canary request tells)") from None
        from . import progress

        progress.note(f"{role}: {e}; its model is taken to be the one last recorded for this server: {describe(ident)}")
        return ident
    return settle_probed(reg, role, found, url, declared)


def verify_recorded(ident: Identity | None, kind: str, record: Any, folder: str | Path | None, canary: Any,
                    error: type[Exception]) -> Identity | None:
    """Once a role's server answers for a stage whose key its *recorded* answers made (``ident.how ==
    "recorded"``: the server was down then, and the run has now started it): it must answer so (``canary()``, one
    request). Else ``error`` — nothing of the stage's is stored under the old fingerprint — and the new answers are
    recorded for its declaration, so the next run keys the model by them. Returns the identity, now probed."""
    if ident is None or ident.how != "recorded":
        return ident
    try:
        found, url = canary()
    except NoAnswer as e:
        raise error(str(e)) from None
    reg = Registry(folder, kind, record.model)
    new = changed_since(ident, found, reg, declaration(kind, record))
    if new is not None:
        raise error(f"{ident.role}: the server started at {url} answers the canary set otherwise ({new}) than when "
                    f"it was last run ({ident.fingerprint}), whose answers keyed this stage: the model behind it "
                    "changed; nothing of it is stored. Run again: the next run keys the model by its new answers")
    return Identity(**{**ident.as_dict(), "how": "probed"})
