#!/usr/bin/env bash
# Regenerate the locks of the CPU environment (exact versions with sha256 hashes) from pyproject.toml and
# constraints/: constraints/cpu-lock.txt (the project with its [dev] extra) and constraints/nodeps-lock.txt (the
# packages installed with --no-deps). Needs uv (`pip install uv`) and the package index.
#
# The lock targets CPython 3.11 on Linux x86_64 (the development and CI machines). torch is the CPU build
# (2.13.0+cpu), which PyPI does not carry: it comes from a folder of wheels when pip has one configured
# (PIP_FIND_LINKS or pip's global.find-links, as on the development machines), else from the PyTorch CPU index
# (TORCH_INDEX_URL, default https://download.pytorch.org/whl/cpu). Its hash is that of the wheel found there.
set -euo pipefail
cd "$(dirname "$0")/.."
uv="${UV:-uv}"
py="${PYTHON:-.venv/bin/python}"
links="${PIP_FIND_LINKS:-$("$py" -m pip config get global.find-links 2>/dev/null || true)}"
src=()
if [ -n "$links" ]; then
  for l in $links; do src+=(--find-links "$l"); done
else
  src+=(--extra-index-url "${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}" --index-strategy unsafe-best-match)
fi
common=(--generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 --no-emit-find-links
        --no-emit-index-url --quiet)
"$uv" pip compile pyproject.toml --extra dev -c constraints/cpu.txt "${src[@]}" "${common[@]}" \
  --custom-compile-command "scripts/lock.sh" -o constraints/cpu-lock.txt
"$uv" pip compile constraints/nodeps.txt --no-deps "${src[@]}" "${common[@]}" \
  --custom-compile-command "scripts/lock.sh" -o constraints/nodeps-lock.txt
echo "lock: wrote constraints/cpu-lock.txt ($(grep -c '^[a-z0-9]' constraints/cpu-lock.txt) packages) and constraints/nodeps-lock.txt"
