"""A minimal OpenAI-compatible chat-completions server for the HTTP tests (127.0.0.1 only, standard library).

Run as ``python tests/fake_openai_server.py``: it binds an ephemeral port (or ``--port``) on 127.0.0.1, prints ``PORT <n>`` on
stdout and serves until killed (or ``--lifetime`` seconds, a safety bound; with ``--until-stdin-closes``, also until
its standard input closes, so a test can hold it for as long as it runs). Behaviour is chosen by the last
user message, so one server covers the cases the tests need:

* ``echo:<text>``   reply ``<text>``;
* ``json``          reply a JSON object that satisfies the request's ``response_format`` schema (it echoes back
                    the schema's required keys with type-correct dummy values and the request's ``seed``);
* ``flaky:<id>``    HTTP 500 on the first request for ``<id>``, then ``ok <id>``;
* ``slow:<secs>[:<id>]``  sleep ``<secs>`` seconds, then reply ``slow done``;
* ``gather:<n>[:<id>]``  wait until ``n`` chat requests have been in flight at once (at most a minute), then reply
                    ``gathered``: concurrency tests read ``max_inflight`` without depending on speed;
* ``bad``           HTTP 400;
* ``empty`` / ``none``  a reply whose content is ``""`` / ``null``;
* ``retry-after:<id>``  HTTP 429 with ``Retry-After: 1`` on the first request for ``<id>``, then ``ok <id>``;
* ``words:<n>[:<id>]``  a reply of ``n`` words, one per token (``w1 w2 ...``): cut to the request's ``max_tokens``
                    words with ``finish_reason: length`` when that is smaller (as vLLM does), else whole (``stop``);
* ``loop[:<id>]``   a model that never stops: ``max_tokens`` words, always ``finish_reason: length``;
* ``hold:<id>``     the first request for ``<id>`` gets no reply until the test releases it (``POST /control
                    {"release": true}``; a client's read timeout fires first, whatever the machine's load), later
                    ones ``ok <id>`` at once;
* any prompt containing ``FAILME``: HTTP 500 while the server is *failing* (``POST /control {"failing": b}``,
  initially ``--failing``), else as above.

``GET /stats`` returns ``{"requests": n, "auth": [authorization headers seen], "max_inflight": n, "chat":
[the last message of every chat request, in arrival order], "times": {id: [arrival times]}, "max_tokens": {id:
[max_tokens of each request]}, "held": n, "canary": n}`` so tests can check counts, overlap, and that the key
arrived as a bearer token (the canary prompt, :func:`is_canary`, is counted apart). ``GET {prefix}/models`` lists ``--models``;
Every chat reply carries ``usage`` counted in words (:func:`usage`). ``GET /metrics`` is a Prometheus text with
vLLM's prefix-cache counters, modelled in characters: every prompt
queries its length and hits its longest common prefix with any earlier prompt. ``GET /version`` answers
``{"version": "fake-1"}`` as vLLM's does; ``POST /control {"exit": n}`` answers, then ends the process with exit
code ``n`` (a server that dies mid-stage); with ``"after": PATH`` it answers, closes every later connection unanswered
(a dying server: its clients fail at once) and ends with code ``n`` only once ``PATH`` exists, so a test orders the
clients' failure before the process's exit, as a loaded machine may. ``POST .../rerank`` (the Jina/Cohere shape vLLM
serves) scores each document ``len(document) / (1 + len(query))`` (a document ``flaky:<id>`` gets HTTP 503 the first
time; a document ``score:<hex>:<anything>`` scores ``float.fromhex(<hex>)``, a score the test chose), its results
sorted by score as vLLM sends them; with ``STATE["rerank_defect"]`` set by a test, ``"repeat-index"`` numbers the
results 0, 0, 1, ..., n-2, ``"nan"`` gives the last candidate a NaN score and ``"scale:<f>"`` multiplies every score
by f (another model).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE = {"requests": 0, "seen": {}, "auth": [], "inflight": 0, "max_inflight": 0, "chat": [], "times": {},
         "failing": False, "models": ["served-model"], "prompts": [], "pc_queries": 0, "pc_hits": 0, "success": 0,
         "max_tokens": {}, "held": 0, "canary": 0, "canary_reply": "was Apollo 8, in December 1968."}


def is_canary(req: dict) -> bool:
    """Whether a chat request is the canary prompt a client asks to know the model by (chunkstudy.identity): it is
    answered with ``STATE["canary_reply"]`` (the model's answer; ``--canary-reply`` or ``POST /control
    {"canary_reply": ...}`` make another model of it) and counted in ``STATE["canary"]``, never among the stage's
    chat requests."""
    try:
        from chunkstudy.identity import CANARY_CHAT
    except ImportError:  # run without the package: nothing is a canary
        return False
    return list(req.get("messages") or []) == list(CANARY_CHAT)
LOCK = threading.Lock()
RELEASE = threading.Event()  # hold:<id> requests wait on it
DYING = threading.Event()  # set by POST /control {"exit": n, "after": path}: every later connection closed unanswered
#: notified whenever a request enters: ``gather:<n>`` requests wait on it
ENTERED = threading.Condition(LOCK)
#: how long a ``gather:<n>`` request waits for the overlap at most: a client that never overlaps its requests then
#: fails its test slowly instead of hanging; one that overlaps them is released the moment they overlap
GATHER_BOUND_S = 60.0


def gather(cond: threading.Condition, state: dict, key: str, n: int) -> None:
    """Hold a request until ``state[key]`` (the most requests in flight at once so far) reaches ``n``: concurrency
    shown by an event, not by a sleep that must outlast the client's dispatch on a loaded machine."""
    with cond:
        cond.wait_for(lambda: state[key] >= n, timeout=GATHER_BOUND_S)


def _common(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _dummy(schema: dict):
    t = schema.get("type")
    if t == "object":
        return {k: _dummy(v) for k, v in schema.get("properties", {}).items()}
    if t == "array":
        return [_dummy(schema.get("items", {}))]
    if t == "integer":
        return 1
    if t == "number":
        return 1.0
    if t == "boolean":
        return True
    return "x"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep test output quiet
        pass

    #: the in-flight count this request entered: (state, key, condition), cleared once it has left
    _flight: tuple[dict, str, threading.Condition] | None = None

    def _enter(self, state: dict, key: str, cond: threading.Condition) -> None:
        """Count this request in flight (``state[key]``, its peak in ``state["max_" + key]``) and wake gatherers."""
        with cond:
            state[key] += 1
            state["max_" + key] = max(state["max_" + key], state[key])
            cond.notify_all()
        self._flight = (state, key, cond)

    def _leave(self) -> None:
        """Count this request out, once, *before* its reply is written: a client that has read the reply may send
        its next request at once, and must not find this one still counted (CI run 7: a serial client's requests
        peaked at 2 in flight because the handler counted itself out after writing)."""
        if self._flight is not None:
            state, key, cond = self._flight
            self._flight = None
            with cond:
                state[key] -= 1
                cond.notify_all()

    def _send(self, code: int, obj, headers: dict | None = None) -> None:
        self._leave()
        body = (obj if isinstance(obj, str) else json.dumps(obj)).encode()
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json" if not isinstance(obj, str) else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self):
        path = self.path.rstrip("/")
        if path.endswith("/stats"):
            with LOCK:
                self._send(200, {k: STATE[k] for k in ("requests", "auth", "max_inflight", "chat", "times",
                                                      "max_tokens", "held", "canary")})
        elif path.endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in STATE["models"]]})
        elif path == "/version":
            self._send(200, {"version": "fake-1"})
        elif path == "/metrics":
            with LOCK:
                text = "".join(f"# TYPE vllm:{n} counter\nvllm:{n}_total{{engine=\"0\"}} {float(v)}\n"
                               f"vllm:{n}_created{{engine=\"0\"}} 1.7e9\n"
                               for n, v in (("prefix_cache_queries", STATE["pc_queries"]),
                                            ("prefix_cache_hits", STATE["pc_hits"]),
                                            ("request_success", STATE["success"])))
            self._send(200, text)
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        req = json.loads(self.rfile.read(n) or b"{}")
        if self.path.rstrip("/").endswith("/chat/completions") and is_canary(req):
            with LOCK:
                STATE["canary"] += 1
            return self._reply(req, STATE["canary_reply"], "stop")
        with LOCK:
            STATE["requests"] += 1
            STATE["auth"].append(self.headers.get("Authorization"))
        if self.path.rstrip("/").endswith("/control"):
            with LOCK:
                STATE["failing"] = bool(req.get("failing", STATE["failing"]))
                STATE["canary_reply"] = str(req.get("canary_reply", STATE["canary_reply"]))
            if req.get("release"):
                RELEASE.set()
            self._send(200, {"failing": STATE["failing"]})
            if req.get("exit") is not None:
                self.wfile.flush()
                if req.get("after"):
                    DYING.set()
                    threading.Thread(target=_exit_once, args=(int(req["exit"]), str(req["after"])),
                                     daemon=True).start()
                    return
                os._exit(int(req["exit"]))
            return
        if self.path.rstrip("/").endswith("/rerank"):
            return self._rerank(req)
        if not self.path.endswith("/chat/completions"):
            return self._send(404, {"error": "not found"})
        self._enter(STATE, "inflight", ENTERED)
        try:
            self._chat(req)
        finally:
            self._leave()  # a reply was sent (and counted out before it), or the handler failed

    def _chat(self, req: dict) -> None:
        last = req["messages"][-1]["content"]
        prompt = "".join(m["content"] for m in req["messages"])
        with LOCK:
            STATE["chat"].append(last)
            STATE["times"].setdefault(last, []).append(time.time())
            STATE["max_tokens"].setdefault(last, []).append(req.get("max_tokens"))
            failing = STATE["failing"]
        if failing and "FAILME" in prompt:
            return self._send(500, {"error": {"message": "scripted failure"}})
        with LOCK:
            STATE["pc_queries"] += len(prompt)
            STATE["pc_hits"] += max((_common(prompt, p) for p in STATE["prompts"]), default=0)
            STATE["prompts"].append(prompt)
            STATE["success"] += 1
        if last == "bad":
            return self._send(400, {"error": {"message": "bad request"}})
        if last.startswith("flaky:"):
            with LOCK:
                first = last not in STATE["seen"]
                STATE["seen"][last] = True
            if first:
                return self._send(500, {"error": {"message": "transient"}})
            text = "ok " + last.split(":", 1)[1]
        elif last.startswith("slow:"):
            time.sleep(float(last.split(":")[1]))  # slow:<secs>[:<id>]
            text = "slow done"
        elif last.startswith("gather:"):
            gather(ENTERED, STATE, "max_inflight", int(last.split(":")[1]))  # gather:<n>[:<id>]
            text = "gathered"
        elif last == "json":
            rf = req.get("response_format") or {}
            schema = (rf.get("json_schema") or {}).get("schema") or {}
            obj = _dummy(schema) if schema else {}
            text = json.dumps({"response_format_type": rf.get("type"), "seed": req.get("seed"), "value": obj})
        elif last.startswith("echo:"):
            text = last.split(":", 1)[1]
        elif last in ("empty", "none"):
            text = "" if last == "empty" else None
        elif last.startswith("retry-after:"):
            with LOCK:
                first = last not in STATE["seen"]
                STATE["seen"][last] = True
            if first:
                return self._send(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "1"})
            text = "ok " + last.split(":", 1)[1]
        elif last.startswith("hold:"):
            with LOCK:
                first = last not in STATE["seen"]
                STATE["seen"][last] = True
                STATE["held"] += first
            if first:
                RELEASE.wait()  # no reply until the test releases it: the client has given up long before
            text = "ok " + last.split(":", 1)[1]
        elif last.startswith(("words:", "loop")):
            n = int(last.split(":")[1]) if last.startswith("words:") else None
            budget = int(req.get("max_tokens") or 16)
            words = [f"w{i + 1}" for i in range(budget if n is None else min(n, budget))]
            finish = "length" if n is None or n > budget else "stop"
            return self._reply(req, " ".join(words), finish)
        else:
            text = last
        self._reply(req, text, "stop")

    def _rerank(self, req: dict) -> None:
        docs = req.get("documents") or []
        with LOCK:
            STATE["chat"].append(f"rerank:{self.path}:{req.get('query')}:{len(docs)}")
            flaky = [d for d in docs if d.startswith("flaky:") and d not in STATE["seen"]]
            STATE["seen"].update({d: True for d in flaky})
        if flaky:
            return self._send(503, {"error": {"message": "overloaded"}})
        q = str(req.get("query"))
        results = [{"index": i, "document": {"text": d}, "relevance_score": _score(q, d)} for i, d in enumerate(docs)]
        defect = STATE.get("rerank_defect")
        if defect == "repeat-index" and len(results) > 1:  # 0, 0, 1, ..., n-2: every score after the first moved
            for i, r in enumerate(results):
                r["index"] = max(0, i - 1)
        elif defect == "nan" and results:
            results[-1]["relevance_score"] = float("nan")
        elif str(defect).startswith("scale:"):  # another cross-encoder: every score times f
            for r in results:
                r["relevance_score"] *= float(defect.split(":")[1])
        self._send(200, {"id": "r", "model": req.get("model"), "results": sorted(results,
                                                                                 key=lambda r: -r["relevance_score"])})

    def _reply(self, req: dict, text, finish: str) -> None:
        self._send(200, {"id": "x", "object": "chat.completion", "model": req.get("model"),
                         "choices": [{"index": 0, "finish_reason": finish,
                                      "message": {"role": "assistant", "content": text}}],
                         "usage": usage(req, text)})


def _score(query: str, document: str) -> float:
    """A rerank score: the one a ``score:<hex>:...`` document names, else ``len(document) / (1 + len(query))``."""
    if document.startswith("score:"):
        return float.fromhex(document.split(":")[1])
    return len(document) / (1 + len(query))


def usage(req: dict, text) -> dict:
    """The reply's ``usage`` as vLLM sends it, counted in words: ``prompt_tokens`` = the words of every message
    plus 4 per message (a chat template's role markers), ``completion_tokens`` = the reply's words (one token
    each, as ``words:<n>`` replies are)."""
    prompt = sum(len(str(m.get("content") or "").split()) + 4 for m in req.get("messages") or [])
    done = len(text.split()) if isinstance(text, str) else 0
    return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}


def _exit_once(code: int, path: str) -> None:
    """End the process with ``code`` once ``path`` exists (a file the test creates: an event, not a deadline)."""
    while not os.path.exists(path):
        time.sleep(0.05)
    os._exit(code)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # as a real server's backlog: 128 clients connecting at once are all accepted

    def verify_request(self, request, client_address) -> bool:
        return not DYING.is_set()  # a dying server: the connection is closed with no answer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lifetime", type=float, default=120.0, help="exit after this many seconds (safety bound)")
    ap.add_argument("--models", default="served-model", help="comma-separated model ids GET /models lists")
    ap.add_argument("--failing", action="store_true", help="start failing prompts that contain FAILME")
    ap.add_argument("--port", type=int, default=0, help="port to bind (default: an ephemeral one)")
    ap.add_argument("--canary-reply", default=STATE["canary_reply"],
                    help="the model's reply to the canary prompt (another reply: another model behind the name)")
    ap.add_argument("--embed-dims", type=int, default=3,
                    help="the dimension of the embedding model it serves (as vLLM's --dim; zeros after the third)")
    ap.add_argument("--until-stdin-closes", action="store_true",
                    help="also exit when standard input closes (the test that started it ended), whatever its age")
    a = ap.parse_args()
    STATE["models"] = a.models.split(",")
    STATE["failing"] = a.failing
    STATE["canary_reply"] = a.canary_reply
    EMB_STATE["defect"] = f"dims:{a.embed_dims}" if a.embed_dims != 3 else None
    srv = Server(("127.0.0.1", a.port), EmbeddingsHandler)  # the chat and rerank routes, and /v1/embeddings
    print(f"PORT {srv.server_address[1]}", flush=True)
    timer = threading.Timer(a.lifetime, srv.shutdown)
    timer.daemon = True
    timer.start()
    if a.until_stdin_closes:
        threading.Thread(target=lambda: (sys.stdin.read(), srv.shutdown()), daemon=True).start()
    srv.serve_forever()
    sys.exit(0)



# ------------------------------------------------------------------------------------------------- /v1/embeddings
# A separate route (and state) for the embedding backend's tests (tests/test_embed.py), kept apart from the chat
# route above. Start it in process: ThreadingHTTPServer(("127.0.0.1", 0), EmbeddingsHandler). Any path ending in
# /embeddings is served (so a base_url with a proxy prefix works); other paths fall through to the chat route.
# Each input text's vector is [len(text), text.count("a"), 1.0]. Behaviour is chosen by the texts of a request:
#
# * ``flaky:<id>``        the first request holding it gets HTTP 503, later ones succeed;
# * ``busy:<secs>:<id>``  the first request holding it gets HTTP 429 with ``Retry-After: <secs>``;
# * ``fail``              HTTP 500, every time;
# * ``slow:<secs>[:<id>]`` sleep ``<secs>`` before answering;
# * ``gather:<n>[:<id>]``  wait until n requests have been in flight at once (concurrency tests, ``max_in_flight``);
# * ``long:<n>``          stands for a text of n tokens: HTTP 400 ("maximum context length") when n > 16, unless
#                         the request asks vLLM-style truncation (``truncate_prompt_tokens``), which then cuts it;
# * ``zero:<id>`` / ``nan:<id>``  its vector is all zero / holds a NaN (a server gone wrong for one text);
# * ``hold:<id>``         no reply until the test sets ``EMB_RELEASE`` (a server that never answers).
#
# ``EMB_STATE["defect"]`` (set by a test) makes the whole server go wrong: ``"zero"`` or ``"nan"``: the first text of
# every request gets a zero or NaN vector; ``"dims:<n>"``: every vector has n dimensions (zeros after the third: a
# server whose model was replaced); ``"alternate"``: requests alternate between 3 and 4 dimensions; ``"same"``: every
# text gets one vector (a server that embeds nothing of its input); ``"repeat-index"``: the reply's ``index`` fields
# are 0, 0, 1, ..., n-2 (the last text's vector numbered as the first's); ``"scale:<f>"``: every vector times f
# (1e-30, 1e25: a server that does not normalise, at a scale float32 squares cannot hold); None: healthy.
# ``EMB_STATE["model_dims"]`` is the dimension of the healthy model (3; ``dims:<n>`` overrides it), and
# ``EMB_STATE["max_model_len"]``, when set, is what ``GET .../models`` reports for every model (as vLLM does).
# GET .../embeddings-stats returns the state: requests, paths, bodies, max_in_flight.

EMB_STATE: dict = {"requests": 0, "paths": [], "bodies": [], "seen": set(), "in_flight": 0, "max_in_flight": 0,
                   "defect": None, "answered": 0, "max_model_len": None}
EMB_LOCK = threading.Lock()
EMB_RELEASE = threading.Event()  # hold:<id> embedding requests wait on it
EMB_ENTERED = threading.Condition(EMB_LOCK)
EMB_MAX_TOKENS = 16


def reset_embeddings_state() -> None:
    with EMB_LOCK:
        EMB_STATE.update(requests=0, paths=[], bodies=[], seen=set(), in_flight=0, max_in_flight=0, defect=None,
                         answered=0, max_model_len=None)
    EMB_RELEASE.clear()


def embedding_of(text: str, dims: int = 3) -> list[float]:
    """``[len(text), text.count("a"), 1 + h]`` (unnormalised; zeros after the third up to ``dims``), ``h`` in
    [0, 64) drawn from the text's sha256: texts of one length and as many a's still point apart, as a real model's
    vectors of different texts do."""
    import hashlib

    h = int.from_bytes(hashlib.sha256(text.encode()).digest()[:2], "big") / 1024.0
    return ([float(len(text)), float(text.count("a")), 1.0 + h] + [0.0] * dims)[:max(3, dims)]


def _vectors(texts: list) -> list[list[float]]:
    """The vectors of one request's texts, with the defects above."""
    with EMB_LOCK:
        defect, nth = EMB_STATE["defect"], EMB_STATE["answered"]
        EMB_STATE["answered"] += 1
    dims = int(defect.split(":")[1]) if str(defect).startswith("dims:") else 3 + nth % 2 if defect == "alternate" else 3
    out = [embedding_of(texts[0] if defect == "same" else t, dims) for t in texts]
    for i, t in enumerate(texts):
        if t.startswith("zero:") or (defect == "zero" and i == 0):
            out[i] = [0.0] * dims
        if t.startswith("nan:") or (defect == "nan" and i == 0):
            out[i] = [float("nan")] + out[i][1:]
    if str(defect).startswith("scale:"):
        f = float(defect.split(":")[1])
        out = [[x * f for x in v] for v in out]
    return out


class EmbeddingsHandler(Handler):
    def do_GET(self):
        if self.path.rstrip("/").endswith("/embeddings-stats"):
            with EMB_LOCK:
                return self._send(200, {k: (sorted(v) if isinstance(v, set) else v) for k, v in EMB_STATE.items()})
        if self.path.rstrip("/").endswith("/models") and EMB_STATE["max_model_len"] is not None:
            return self._send(200, {"object": "list", "data": [{"id": m, "object": "model", "max_model_len":
                                                                EMB_STATE["max_model_len"]} for m in STATE["models"]]})
        return super().do_GET()

    def do_POST(self):
        if not self.path.rstrip("/").endswith("/embeddings"):
            return super().do_POST()
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        texts = req.get("input") or []
        texts = [texts] if isinstance(texts, str) else texts
        with EMB_LOCK:
            EMB_STATE["requests"] += 1
            EMB_STATE["paths"].append(self.path)
            EMB_STATE["bodies"].append({k: v for k, v in req.items() if k != "input"} | {"n_input": len(texts)})
        self._enter(EMB_STATE, "in_flight", EMB_ENTERED)
        try:
            self._embeddings(req, texts)
        finally:
            self._leave()

    def _first_time(self, text: str) -> bool:
        with EMB_LOCK:
            first = text not in EMB_STATE["seen"]
            EMB_STATE["seen"].add(text)
        return first

    def _embeddings(self, req: dict, texts: list) -> None:
        for t in texts:
            if t == "fail":
                return self._send(500, {"error": {"message": "internal error"}})
            if t.startswith("flaky:") and self._first_time(t):
                return self._send(503, {"error": {"message": "overloaded, try again"}})
            if t.startswith("busy:") and self._first_time(t):
                return self._send(429, {"error": {"message": "rate limited"}}, headers={"Retry-After": t.split(":")[1]})
            if t.startswith("slow:"):
                time.sleep(float(t.split(":")[1]))
            if t.startswith("hold:"):
                EMB_RELEASE.wait()
            if t.startswith("gather:"):
                gather(EMB_ENTERED, EMB_STATE, "max_in_flight", int(t.split(":")[1]))
            if t.startswith("long:") and int(t.split(":")[1]) > EMB_MAX_TOKENS and req.get("truncate_prompt_tokens") is None:
                return self._send(400, {"error": {"message": f"This model's maximum context length is "
                                                             f"{EMB_MAX_TOKENS} tokens; the input has "
                                                             f"{t.split(':')[1]}"}})
        vecs = _vectors(texts)
        index = list(range(len(vecs)))
        if EMB_STATE["defect"] == "repeat-index" and len(index) > 1:  # 0, 0, 1, ..., n-2: the vectors shifted by one
            index = [0] + index[:-1]
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in zip(index, vecs)][::-1]
        self._send(200, {"object": "list", "data": data, "model": req.get("model")})


@contextmanager
def embeddings_in_thread():
    """The embeddings, rerank and chat routes (:class:`EmbeddingsHandler`) on 127.0.0.1 in this process, its state
    reset first: yields the base URL with /v1; shut down and closed on exit."""
    reset_embeddings_state()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), EmbeddingsHandler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


if __name__ == "__main__":  # last: main serves the embeddings route, defined above
    main()
