#!/usr/bin/env bash
# scripts/lock_serve_env.sh         rewrite constraints/serve-lock.txt: the exact versions `pip install -r
#                                   constraints/serve.txt` resolves to today (metadata only, nothing is installed)
# scripts/lock_serve_env.sh --cpu   rewrite constraints/serve-cpu-lock.txt from constraints/serve-cpu.txt: exact
#                                   versions with sha256 hashes (uv pip compile --generate-hashes, for CPython 3.11
#                                   on manylinux_2_28 x86_64), without torchvision, torchaudio and torchcodec
#                                   (CUDA builds on PyPI that break `import vllm` beside the +cpu torch; a text
#                                   model needs none), installed by scripts/serve_llm.sh --cpu with --no-deps.
#                                   Needs uv (`pip install uv`); torch 2.13.0+cpu comes from pip's find-links
#                                   (PIP_FIND_LINKS or global.find-links) or the PyTorch CPU index, as in lock.sh.
# Rerun after changing serve.txt / serve-cpu.txt. SERVE_PYTHON picks the interpreter (python3; vLLM needs 3.11+).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--cpu" ]; then
  uv="${UV:-uv}"
  links="${PIP_FIND_LINKS:-$(python3 -m pip config get global.find-links 2>/dev/null || true)}"
  src=()
  if [ -n "$links" ]; then
    for l in $links; do src+=(--find-links "$l"); done
  else
    src+=(--extra-index-url "${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}" --index-strategy unsafe-best-match)
  fi
  "$uv" pip compile constraints/serve-cpu.txt "${src[@]}" --generate-hashes --python-version 3.11 \
    --python-platform x86_64-manylinux_2_28 --no-emit-find-links --no-emit-index-url --quiet \
    --no-emit-package torchvision --no-emit-package torchaudio --no-emit-package torchcodec \
    --custom-compile-command "scripts/lock_serve_env.sh --cpu" -o constraints/serve-cpu-lock.txt
  echo "lock: $(grep -c '^[a-zA-Z]' constraints/serve-cpu-lock.txt) packages -> constraints/serve-cpu-lock.txt"
  exit 0
fi
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
