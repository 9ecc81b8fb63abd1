#!/usr/bin/env bash
# scripts/lock_serve_env.sh   rewrite constraints/serve-lock.txt: the exact versions `pip install -r
# constraints/serve.txt` resolves to today (metadata only, nothing is installed), after changing serve.txt.
# SERVE_PYTHON picks the interpreter (python3; vLLM needs 3.11+).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${SERVE_PYTHON:-python3}" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --dry-run --ignore-installed --report "$tmp/report.json" -r constraints/serve.txt
"$tmp/venv/bin/python" - "$tmp/report.json" constraints/serve-lock.txt <<'PY'
import json, platform, sys
report = json.load(open(sys.argv[1]))
pins = sorted((i["metadata"]["name"].lower(), i["metadata"]["version"]) for i in report["install"])
head = (f"# Exact versions of everything `pip install -r constraints/serve.txt` resolved to (PyPI, CPython "
        f"{platform.python_version()}, {platform.system()} {platform.machine()}), so the serving environment is the\n"
        "# same next year: scripts/serve_llm.sh installs serve.txt under these constraints. Written by\n"
        "# scripts/lock_serve_env.sh; rerun it after changing serve.txt.\n")
open(sys.argv[2], "w").write(head + "".join(f"{n}=={v}\n" for n, v in pins))
print(f"lock: {len(pins)} packages -> {sys.argv[2]}")
PY
