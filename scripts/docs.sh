#!/usr/bin/env bash
# scripts/docs.sh [build|serve]   the docs/ pages as a site with search and navigation (mkdocs + mkdocs-material)
#   build (default): into build/site/ (open build/site/index.html); serve: on http://127.0.0.1:8000
# Optional: the pages are plain Markdown; tests/test_docs.py checks them without this. The site's tools live in an
# environment of their own, .venv-docs, created from PyPI on first use, so the project's .venv carries nothing for it.
set -euo pipefail
cd "$(dirname "$0")/.."
PINS=(mkdocs==1.6.1 mkdocs-material==9.8.1)
venv=.venv-docs
if [ ! -x "$venv/bin/mkdocs" ] || [ "$(cat "$venv/.pins" 2>/dev/null)" != "${PINS[*]}" ]; then
  echo "docs: creating $venv (${PINS[*]}) ..."
  "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/python" -m pip install -q "${PINS[@]}"
  echo "${PINS[*]}" > "$venv/.pins"
fi
export NO_MKDOCS_2_WARNING=1
case "${1:-build}" in
  build) exec "$venv/bin/mkdocs" build --clean ;;
  serve) exec "$venv/bin/mkdocs" serve -a 127.0.0.1:8000 ;;
  *) echo "docs: usage: scripts/docs.sh [build|serve]" >&2; exit 2 ;;
esac
