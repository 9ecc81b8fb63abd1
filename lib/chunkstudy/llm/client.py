"""The client of every model call (:class:`Client`, :func:`make_client`, :func:`describe`): the cache first, then
the backend; retries, pre-flight, timeouts, the circuit breaker, cut replies, the error share, prefix groups and
the server's prefix-cache counters. The policy is stated in :mod:`chunkstudy.llm`."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence, cast

from .. import identity
from ..params import LLMParams
from . import retry
from .backends import Backend, NoBackend, make_backend, prometheus_counters
from .base import (Call, CircuitOpen, Completion, EmptyReply, ErrorShareExceeded, LLMError, LLMUnavailable,
                   PermanentError, PreflightError, ReplyTimeout, Request, Response, _Aborted, cache_key, prompt_hash)
from .cache import CallCache


def prefix_group(call: Call, chars: int) -> str | None:
    """A digest of the first ``chars`` characters of the call's prompt (roles and contents in order), or ``None``
    when the prompt is not longer than that (such a call shares nothing worth waiting for)."""
    if chars <= 0:
        return None
    text = "".join(f"{m.get('role', '')}\x1f{m.get('content', '')}\x1e" for m in call.messages)
    return hashlib.sha256(text[:chars].encode()).hexdigest() if len(text) > chars else None


#: characters per token assumed when a prompt's tokens are bounded from above without its tokenizer (the served
#: model's tokenizer is not available to the client). Measured with SmolLM2's BPE tokenizer (49k entries; Gemma's
#: 262k-entry vocabulary needs fewer tokens): median 4.5 characters per token over the QASPER test papers and the
#: Wikipedia exports, 2.94 at the lowest (a table-heavy article), so 2.5 errs on the side of more tokens.
PROMPT_CHARS_PER_TOKEN = 2.5
#: tokens each chat message adds for the template's role markers, and once for the assistant's turn
MESSAGE_OVERHEAD_TOKENS = 8


def prompt_chars(messages: Sequence[dict]) -> int:
    """Characters of a chat prompt's message contents (what the cost table estimates tokens from when the backend
    reported no ``usage``)."""
    return sum(len(str(m.get("content") or "")) for m in messages)


def _add_usage(total: dict | None, comp: Completion) -> dict | None:
    """``total`` (``prompt_tokens``, ``completion_tokens``, ``replies``) with one more reply's ``usage`` added;
    ``None`` as soon as a reply came without one (a partial sum would look like a count)."""
    u = comp.usage
    if total is None or not isinstance(u, dict) or u.get("prompt_tokens") is None \
            or u.get("completion_tokens") is None:
        return None
    return {"prompt_tokens": int(total["prompt_tokens"]) + int(u["prompt_tokens"]),
            "completion_tokens": int(total["completion_tokens"]) + int(u["completion_tokens"]),
            "replies": int(total["replies"]) + 1}


def prompt_tokens_upper(messages: Sequence[dict]) -> int:
    """A conservative (high) estimate of a chat prompt's tokens: characters / :data:`PROMPT_CHARS_PER_TOKEN`
    plus :data:`MESSAGE_OVERHEAD_TOKENS` per message and one more for the reply's turn."""
    chars = sum(len(str(m.get("content") or "")) for m in messages)
    return math.ceil(chars / PROMPT_CHARS_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS * (len(messages) + 1)


@dataclass
class Client:
    """Cached, retrying, concurrent access to one backend. Build it with :func:`make_client`; the fields mirror
    the ``llm`` parameters (module docstring; ``max_tokens`` is ``llm.max_reply_tokens``) and have no defaults
    of their own: those live in :data:`chunkstudy.config.SCHEMA`."""

    backend: Backend
    cache: CallCache
    temperature: float
    top_p: float
    max_tokens: int
    seed: int
    max_retries: int
    retry_backoff_s: float
    context_tokens: int
    concurrency: int
    max_error_share: float
    breaker_failures: int
    preflight: bool
    retry_after_max_s: float
    prefix_group_chars: int
    server_metrics: bool
    length_retries: int
    #: ``cut_replies``: replies that stopped at their max_tokens; ``cut_resolved``: calls whose cut reply was then
    #: finished with a larger budget; ``cut_failed``: calls that failed cut (:class:`LengthCut`, also in
    #: ``failed``); ``timeouts``: requests that got no reply within ``llm.timeout_s`` (retried)
    stats: dict = field(default_factory=lambda: {"cached": 0, "called": 0, "failed": 0, "retries": 0, "timeouts": 0,
                                                 "cut_replies": 0, "cut_resolved": 0, "cut_failed": 0})
    #: the ``llm`` record the client was made from (a served model's declaration, :mod:`chunkstudy.identity`)
    record: Any = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._abort = threading.Event()
        self._breaker = retry.Breaker(self.breaker_failures, str(getattr(self.backend, "url", self.backend.name)),
                                      "llm.breaker_failures", self._abort)
        alive = getattr(self.backend, "alive", None)
        self.policy = retry.RetryPolicy(self.max_retries, self.retry_backoff_s, self.retry_after_max_s,
                                         self._breaker, sleep=self._wait, answers=alive if callable(alive) else None,
                                         rng=random.Random(), on_retry=self._retried)  # jitter: unseeded on
        # purpose, it moves retry times only (module docstring)
        self._preflight_done = False
        self._served = False  # the runner was asked for the servers (llm.serve: auto), once per client
        #: a served model's identity (its answers to the canary prompt): what the runner handed this stage, else
        #: settled before the first cache lookup (:meth:`settle_identity`)
        self.identity = identity.handed("llm") if self.backend.name == "openai" else None
        self.errors: list[str] = []  # the first few distinct failed-call errors, for the reports
        self.server: dict[str, dict] = {}  # per batch label: prefix-cache counters read from /metrics

    @property
    def model(self) -> str:
        return self.backend.model

    @property
    def model_id(self) -> str:
        """The model as the cache keys name it: the backend's model, and for a served one its fingerprint
        (:mod:`chunkstudy.identity`), so another model behind the same name never meets its replies."""
        return self.backend.model + (f"|{self.identity.fingerprint}" if self.identity is not None else "")

    def settle_identity(self) -> None:
        """A served LLM's identity before the first cache lookup: the one the runner handed this stage, else its
        ``GET /models`` entry and its seeded greedy reply to the canary prompt, asked now (in a run, the runner
        first starts an ``llm.serve: auto`` server), matched in the registry beside the cache
        (:func:`chunkstudy.identity.settle_client`); nothing for other backends. With ``llm.preflight: false`` a
        server that cannot be asked is no error here: its replies are keyed as an unknown model's
        (:data:`chunkstudy.identity.UNKNOWN`), apart from every known one's, and each call fails as it would."""
        if self.identity is not None or self.record is None or not callable(getattr(self.backend, "canary", None)):
            return
        be = cast(Any, self.backend)

        def canary() -> tuple[dict, str]:
            self._ensure_served()
            return be.canary()

        try:
            self.identity = identity.settle_client("llm", "llm", self.record, self.cache.folder, canary,
                                                   be.base_urls[0], PreflightError)
        except PreflightError:
            if self.preflight:
                raise
            self.identity = identity.Identity("llm", identity.UNKNOWN, "unknown", be.base_urls[0])

    def _ensure_served(self) -> None:
        """Ask the runner once for the servers of ``llm.serve: auto`` (nothing outside a run); a model whose key
        recorded answers made must then answer so (:func:`chunkstudy.identity.verify_recorded`)."""
        ensure = getattr(self.backend, "ensure_served", None)
        if callable(ensure) and not self._served:
            ensure()
            self._served = True
            if self.record is not None:
                self.identity = identity.verify_recorded(self.identity, "llm", self.record, self.cache.folder,
                                                         cast(Any, self.backend).canary, PreflightError)

    def resolve(self, r: Request) -> Call:
        if not isinstance(r, Request):
            raise TypeError(f"Client.generate expects llm.Request objects, got {type(r).__name__}")
        return Call(
            messages=tuple(dict(m) for m in r.messages), json_schema=r.json_schema,
            max_tokens=int(self.max_tokens if r.max_tokens is None else r.max_tokens),
            temperature=float(self.temperature if r.temperature is None else r.temperature),
            top_p=float(self.top_p), seed=int(self.seed if r.seed is None else r.seed), tag=r.tag)

    def key(self, r: Request) -> str:
        self.settle_identity()
        return cache_key(self.backend.name, self.model_id, self.resolve(r))

    def _record(self, key: str, call: Call, r: Response, calls: int) -> dict:
        """The cache record of a finished call: what was asked (prompt hash, parameters, tag, the prompt's
        characters), the reply and its finish reason, the cut replies before it, the seconds of the producing
        attempt and of all attempts, and the token counts the backend reported summed over every reply
        (:attr:`Response.usage`; absent when it reported none: then cost estimates from the characters)."""
        rec = {"key": key, "backend": self.backend.name, "model": self.backend.model,
               "identity": self.identity.fingerprint if self.identity is not None else None,
               "prompt_hash": prompt_hash(call.messages), "params": {k: v for k, v in call.key_fields().items()
                                                                     if k != "messages"},
               "tag": call.tag, "text": r.text, "seconds": r.seconds, "attempts": calls,
               "finish_reason": r.finish_reason, "cuts": r.cuts, "max_tokens_used": r.max_tokens_used,
               "prompt_chars": prompt_chars(call.messages), "attempt_seconds": r.attempt_seconds,
               "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        if r.usage is not None:
            rec["usage"] = dict(r.usage)
        return rec

    def reply_room(self, call: Call) -> int:
        """The largest reply budget the context leaves for ``call``: ``context_tokens`` minus
        :func:`prompt_tokens_upper` of its messages (may be <= 0)."""
        return self.context_tokens - prompt_tokens_upper(call.messages)

    def _grown(self, call: Call, cuts: int) -> tuple[Call | None, str]:
        """The call again with twice its budget, capped by :meth:`reply_room`; ``(None, why)`` when none is left."""
        if cuts > self.length_retries:
            return None, f"llm.length_retries ({self.length_retries}) larger budgets were cut too"
        room = self.reply_room(call)
        grown = min(2 * call.max_tokens, room)
        if grown <= call.max_tokens:
            return None, (f"the context leaves no larger budget (llm.context_tokens {self.context_tokens}, prompt "
                          f"at most ~{prompt_tokens_upper(call.messages)} tokens)")
        return dataclasses.replace(call, max_tokens=grown), ""

    # ---- failure handling

    def check_server(self) -> list[str] | None:
        """Run the backend's pre-flight check now (openai: the served models; ``None`` for backends without
        one). :meth:`generate` calls it once, before its first call that is not in the cache."""
        check = getattr(self.backend, "preflight", None)
        served = check() if callable(check) else None
        self._preflight_done = True
        return served

    def _wait(self, seconds: float) -> None:
        """The wait before a retry; it ends early, raising :class:`_Aborted`, when the batch stops."""
        if self._abort.wait(seconds):
            raise _Aborted()

    def _retried(self, error: LLMError) -> None:
        with self._lock:
            self.stats["retries"] += 1

    def _call_with_retries(self, call: Call, first: Any = None, first_seconds: float = 0.0
                           ) -> tuple[Response, int]:
        """Call the backend until a finished reply, a permanent error, ``max_retries`` failed attempts or a cut
        reply with no larger budget left (module docstring; the retries and the breaker are
        :class:`chunkstudy.llm.retry.RetryPolicy`'s); returns the outcome and the backend calls made. ``first`` is
        a reply (or exception) already obtained for the call's first attempt (a native batch's), taking
        ``first_seconds``. Only :class:`LLMError` is a failed attempt; any other exception propagates. A cut reply
        is asked again at once with a larger budget, within the same attempt. Raises :class:`_Aborted` when the
        batch is stopping."""
        cuts, calls = 0, 0
        spent = 0.0  # wall seconds of the attempts so far (not the waits between them)
        usage: dict | None = {"prompt_tokens": 0, "completion_tokens": 0, "replies": 0}
        last = 0.0  # wall seconds of the last attempt

        def failed(error: str, seconds: float = 0.0, finish: str | None = None) -> tuple[Response, int]:
            return Response("", False, error, seconds, self.backend.model, finish, cuts,
                            attempt_seconds=spent + seconds), calls

        def attempt() -> tuple[Response, int]:
            nonlocal call, first, cuts, calls, spent, usage, last
            while True:
                if self._abort.is_set():
                    raise _Aborted()
                t0 = time.perf_counter()
                try:
                    if first is not None:
                        got, first, t0 = first, None, t0 - first_seconds
                        if isinstance(got, BaseException):
                            raise got
                    else:
                        calls += 1
                        got = self.backend.complete(call)
                except LLMError as e:
                    last = time.perf_counter() - t0
                    spent += last  # a failed attempt took its time too
                    if isinstance(e, ReplyTimeout):
                        with self._lock:
                            self.stats["timeouts"] += 1
                    raise
                comp = got if isinstance(got, Completion) else Completion(got)
                if comp.text is not None:
                    usage = _add_usage(usage, comp)
                if comp.text is not None and not isinstance(comp.text, str):
                    raise TypeError(f"backend {self.backend.name!r} returned {type(comp.text).__name__}, not str")
                if comp.finish_reason == "length":  # the server answered: not a breaker failure
                    self._breaker.record(True)
                    cuts += 1
                    with self._lock:
                        self.stats["cut_replies"] += 1
                    grown, why = self._grown(call, cuts)
                    if grown is None:
                        return failed(f"LengthCut: the reply stopped at max_tokens {call.max_tokens} (finish_reason "
                                      f"'length', {cuts} cut repl{'y' if cuts == 1 else 'ies'} in all); {why}",
                                      time.perf_counter() - t0, "length")
                    spent += time.perf_counter() - t0
                    call = grown
                    continue  # asked again at once: not a failed attempt
                if comp.text is None or not comp.text.strip():
                    last = time.perf_counter() - t0
                    spent += last
                    raise EmptyReply(f"empty reply ({comp.text!r}, finish_reason {comp.finish_reason!r}) from "
                                     f"{self.backend.name} model {self.backend.model!r}")
                took = time.perf_counter() - t0
                return Response(comp.text, False, None, took, self.backend.model, comp.finish_reason, cuts,
                                call.max_tokens, usage, spent + took), calls

        try:
            return self.policy.run(attempt)
        except CircuitOpen:
            raise _Aborted() from None
        except PermanentError as e:
            spent -= last
            return failed(f"{type(e).__name__}: {e}", last)
        except LLMError as e:
            if self._abort.is_set():
                raise _Aborted() from None
            return failed(f"{type(e).__name__}: {e}")

    # ---- batches

    def generate(self, requests: Iterable[Request], desc: str = "") -> list[Response]:
        """Answer ``requests`` in order: cache lookups first, then the misses (deduplicated by key) on the
        backend, ``concurrency`` at a time in request order (groups of shared prompt prefix: first one alone);
        every success is appended to the cache as it completes.

        Raises :class:`PreflightError` / :class:`CircuitOpen` / :class:`ErrorShareExceeded` (module docstring)
        and any non-:class:`LLMError` exception a backend raised; the successes before it stay cached."""
        requests = list(requests)
        calls = [self.resolve(r) for r in requests]
        self.settle_identity()
        keys = [cache_key(self.backend.name, self.model_id, c) for c in calls]
        out: dict[str, Response] = {}
        todo: dict[str, Call] = {}
        for k, c in zip(keys, calls):
            rec = self.cache.get(k)
            if rec is not None and "prompt_chars" not in rec:  # a record of an older client: the cost table's estimate
                self.cache.amend(k, prompt_chars=prompt_chars(c.messages))
                rec = self.cache.get(k) or rec
            if rec is not None:
                out[k] = Response(rec["text"], True, None, float(rec.get("seconds", 0.0)), rec.get("model", ""),
                                  rec.get("finish_reason"), int(rec.get("cuts") or 0),
                                  rec.get("max_tokens_used") or (rec.get("params") or {}).get("max_tokens"))
            elif k not in todo:
                todo[k] = c
        self.stats["cached"] += sum(1 for k in keys if k in out)
        if not todo:
            return [out[k] for k in keys]
        if isinstance(self.backend, NoBackend):
            # a configuration error, not a failed call: say so at once instead of one error per request
            raise LLMUnavailable(f"{len(todo)} of {len(keys)} requests{' (' + desc + ')' if desc else ''} are not "
                                 f"in the cache and llm.backend is 'none'. " + NoBackend.HINT)
        self._ensure_served()  # in a run: the runner starts the servers of llm.serve: auto now, at the first miss
        if self.preflight and not self._preflight_done:
            self.check_server()
        before = self._read_metrics() if self.server_metrics else None
        from .. import progress

        bar = progress.bar(len(todo), f"{desc or 'model calls'} ({len(keys) - len(todo)} cached)", unit="call")

        def finish(k: str, r: Response, calls: int) -> None:
            if r.error is None:
                self.cache.put(self._record(k, todo[k], r, calls))
                self.stats["called"] += 1
                self.stats["cut_resolved"] += bool(r.cuts)
            else:
                self.stats["failed"] += 1
                self.stats["cut_failed"] += r.error.startswith("LengthCut")
                if len(self.errors) < 5 and r.error not in self.errors:
                    self.errors.append(r.error)
                bar.set_postfix(failed=self.stats["failed"], refresh=False)
            out[k] = r
            bar.update(1)

        items = list(todo.items())
        self._breaker.reset()
        try:
            if type(self.backend).complete_many is not Backend.complete_many:
                self._run_native(items, finish)
            else:
                self._dispatch(items, finish)
        finally:
            bar.close()
        if self._abort.is_set():
            raise CircuitOpen(f"{self._breaker.reason}. {self.stats['called']} calls of this client finished and are "
                              f"cached; {len(todo) - sum(1 for k in todo if k in out)} of this batch"
                              f"{' (' + desc + ')' if desc else ''} were not made. Rerun once the server answers.")
        if before is not None:
            self._record_metrics(desc or "model calls", before, self._read_metrics())
        self.check_errors(desc)
        return [out[k] for k in keys]

    def check_errors(self, desc: str = "") -> None:
        """Raise :class:`ErrorShareExceeded` when more than ``max_error_share`` of the calls this client made
        failed (cache hits are not calls). :meth:`generate` calls it after every batch."""
        made = self.stats["called"] + self.stats["failed"]
        if not made:
            return
        share = self.stats["failed"] / made
        if share > self.max_error_share:
            raise ErrorShareExceeded(
                f"{self.stats['failed']} of {made} model calls failed{' (last batch: ' + desc + ')' if desc else ''}"
                f", a share of {share:.4f} > llm.max_error_share {self.max_error_share:g} ({self.backend!r}). "
                f"The {self.stats['called']} successful calls are cached; a rerun retries only the failed ones. "
                f"Errors: {self.errors}")

    def _dispatch(self, items: list[tuple[str, Call]], finish) -> None:
        """Run ``items`` on a thread pool, at most ``concurrency`` in flight, in order; the first call of each
        prefix group goes alone and releases the group's others when it completes (module docstring)."""
        groups: dict[Any, list[tuple[str, Call]]] = {}
        for k, c in items:
            g = prefix_group(c, self.prefix_group_chars)
            groups.setdefault(("k", k) if g is None else ("p", g), []).append((k, c))
        order = list(groups.values())
        ready: deque = deque()
        nxt = 0
        inflight: dict = {}
        width = max(1, min(self.concurrency, len(items)))
        bug: BaseException | None = None
        with ThreadPoolExecutor(max_workers=width) as ex:
            try:
                while True:
                    while len(inflight) < width and not self._abort.is_set():
                        if ready:
                            (k, c), group = ready.popleft(), None
                        elif nxt < len(order):
                            (k, c), group = order[nxt][0], order[nxt]
                            nxt += 1
                        else:
                            break
                        inflight[ex.submit(self._call_with_retries, c)] = (k, group)
                    if not inflight:
                        break
                    done, _ = wait(inflight, return_when=FIRST_COMPLETED)
                    for f in done:
                        k, group = inflight.pop(f)
                        if group is not None:
                            ready.extend(group[1:])
                        try:
                            res = f.result()
                        except _Aborted:
                            continue
                        except Exception as e:  # a bug in a backend: stop dispatching, drain, re-raise
                            bug = bug or e
                            self._abort.set()
                            continue
                        finish(k, *res)
            except BaseException:
                self._abort.set()  # interrupted: in-flight calls finish, the rest are not attempted
                raise
        if bug is not None:
            self._abort.clear()
            raise bug

    def _run_native(self, items: list[tuple[str, Call]], finish) -> None:
        """Native batches (vLLM) in slices, so a kill loses at most one slice; each reply is judged as a first
        attempt (:meth:`_call_with_retries`): failures and cut replies are asked again one by one."""
        size = max(1, getattr(self.backend, "batch", 64))
        for i in range(0, len(items), size):
            part = items[i:i + size]
            t0 = time.perf_counter()
            res = self.backend.complete_many([c for _, c in part]) or []
            per = (time.perf_counter() - t0) / max(1, len(part))
            for (k, c), r in zip(part, res):
                try:
                    resp, calls = self._call_with_retries(c, first=LLMError("no reply") if r is None else r,
                                                          first_seconds=per)
                except _Aborted:
                    return
                finish(k, resp, calls + 1)  # and the batch's call

    # ---- server metrics

    def _read_metrics(self) -> dict[str, float] | None:
        read = getattr(self.backend, "metrics", None)
        text = read() if callable(read) else None
        return prometheus_counters(text) if text is not None else None

    def _record_metrics(self, label: str, before: dict | None, after: dict | None) -> None:
        entry = self.server.setdefault(label, {"prefix_cache_queries": 0.0, "prefix_cache_hits": 0.0,
                                               "requests": 0.0})
        if not before or not after or "vllm:prefix_cache_queries" not in after:
            entry["error"] = (f"no vLLM prefix-cache counters at "
                              f"{getattr(self.backend, 'metrics_url', self.backend.name)}")
            return
        for name, col in (("vllm:prefix_cache_queries", "prefix_cache_queries"),
                          ("vllm:prefix_cache_hits", "prefix_cache_hits"), ("vllm:request_success", "requests")):
            entry[col] += after.get(name, 0.0) - before.get(name, 0.0)
        q = entry["prefix_cache_queries"]
        entry["prefix_cache_hit_rate"] = entry["prefix_cache_hits"] / q if q else None

    # ---- moving caches

    def export_cache(self, path: str | Path) -> int:
        """Write every cached record to ``path`` (JSONL), and beside it (``<path>.identity.json``) the answers the
        cache folder recorded of its served models (:mod:`chunkstudy.identity`), so a machine without the server
        can key its replies; returns the number of records written."""
        recs = self.cache.records()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for rec in recs:
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
        if self.cache.folder is not None and (known := identity.registries(self.cache.folder)):
            from ..artifacts import write_json_file

            write_json_file(path.with_name(path.name + IDENTITY_SUFFIX), known)
        return len(recs)

    def import_cache(self, path: str | Path) -> int:
        """Add the records of an exported cache that this cache lacks, and the served models' answers exported with
        them; returns the number of records added."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"LLM cache export {path} does not exist")
        before = len(self.cache)
        for rec in CallCache._load(path)[0].values():
            self.cache.put(rec)
        side = path.with_name(path.name + IDENTITY_SUFFIX)
        if self.cache.folder is not None and side.is_file():
            identity.merge_registries(self.cache.folder, json.loads(side.read_text(encoding="utf-8")))
        return len(self.cache) - before


#: what :meth:`Client.export_cache` adds to the export's file name for the served models' recorded answers
IDENTITY_SUFFIX = ".identity.json"


def make_client(llm_params: LLMParams, cache_dir: Path | None, backend: Backend | None = None) -> Client:
    """A :class:`Client` for the ``llm`` record (``cfg.params("llm")``; a test builds one with
    ``config.record("llm", {...})``, stating only what it cares about); ``backend`` overrides
    ``llm.backend`` (tests pass a :class:`ScriptedBackend`). ``cache_dir`` is the folder of the persistent cache
    (the notebook passes ``artifacts.cache_dir(cfg, cfg.params('llm').cache)``); ``None`` keeps the cache in memory."""
    p = llm_params
    be = backend if backend is not None else make_backend(p)
    return Client(backend=be, cache=CallCache(cache_dir), temperature=p.temperature, top_p=p.top_p,
                  max_tokens=p.max_reply_tokens, seed=p.seed, max_retries=p.max_retries,
                  retry_backoff_s=p.retry_backoff_s, context_tokens=p.context_tokens,
                  concurrency=max(1, min(p.concurrency * max(1, len(getattr(be, "base_urls", ()))),
                                         getattr(be, "concurrency", 1))),
                  max_error_share=p.max_error_share, breaker_failures=p.breaker_failures, preflight=p.preflight,
                  retry_after_max_s=p.retry_after_max_s, prefix_group_chars=p.prefix_group_chars,
                  server_metrics=p.server_metrics, length_retries=p.length_retries, record=p)


def describe(client: Client) -> dict:
    """What a report says about the model: backend, model name, call statistics, the cache's self-check and,
    with ``llm.server_metrics``, the server's prefix-cache counters per batch."""
    out = {"backend": client.backend.name, "model": client.backend.model, **client.stats}
    rep = client.cache.report
    if rep["torn_tail"] or rep["bad_lines"] or rep["empty_replies"] or rep.get("cut_replies"):
        out["cache"] = dict(rep)
    if client.errors:
        out["errors"] = list(client.errors)
    if client.server:
        out["server"] = {k: dict(v) for k, v in client.server.items()}
    return out
