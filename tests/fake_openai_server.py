"""A minimal OpenAI-compatible chat-completions server for the HTTP tests (127.0.0.1 only, standard library).

Run as ``python tests/fake_openai_server.py``: it binds an ephemeral port on 127.0.0.1, prints ``PORT <n>`` on
stdout and serves until killed (or ``--lifetime`` seconds, a safety bound). Behaviour is chosen by the last
user message, so one server covers the cases the tests need:

* ``echo:<text>``   reply ``<text>``;
* ``json``          reply a JSON object that satisfies the request's ``response_format`` schema (it echoes back
                    the schema's required keys with type-correct dummy values and the request's ``seed``);
* ``flaky:<id>``    HTTP 500 on the first request for ``<id>``, then ``ok <id>``;
* ``slow:<secs>``   sleep ``<secs>`` seconds, then reply ``slow done``;
* ``bad``           HTTP 400.

``GET /stats`` returns ``{"requests": n, "auth": [authorization headers seen]}`` so tests can check counts
and that the key arrived as a bearer token.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE = {"requests": 0, "seen": {}, "auth": []}
LOCK = threading.Lock()


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

    def _send(self, code: int, obj) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self):
        if self.path.rstrip("/").endswith("/stats"):
            with LOCK:
                self._send(200, {"requests": STATE["requests"], "auth": STATE["auth"]})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        req = json.loads(self.rfile.read(n) or b"{}")
        with LOCK:
            STATE["requests"] += 1
            STATE["auth"].append(self.headers.get("Authorization"))
        if not self.path.endswith("/chat/completions"):
            return self._send(404, {"error": "not found"})
        last = req["messages"][-1]["content"]
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
            time.sleep(float(last.split(":", 1)[1]))
            text = "slow done"
        elif last == "json":
            rf = req.get("response_format") or {}
            schema = (rf.get("json_schema") or {}).get("schema") or {}
            obj = _dummy(schema) if schema else {}
            text = json.dumps({"response_format_type": rf.get("type"), "seed": req.get("seed"), "value": obj})
        elif last.startswith("echo:"):
            text = last.split(":", 1)[1]
        else:
            text = last
        self._send(200, {"id": "x", "object": "chat.completion", "model": req.get("model"),
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": text}}]})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lifetime", type=float, default=120.0, help="exit after this many seconds (safety bound)")
    a = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    print(f"PORT {srv.server_address[1]}", flush=True)
    timer = threading.Timer(a.lifetime, srv.shutdown)
    timer.daemon = True
    timer.start()
    srv.serve_forever()
    sys.exit(0)


if __name__ == "__main__":
    main()
