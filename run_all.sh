#!/usr/bin/env bash
# ./run_all.sh CORPUS [--from NN] [--until NN] [--only NN] [--force]
# Runs notebooks/NN_*.py with papermill and params/CORPUS.yaml; skips stages whose parameters, inputs and
# library are unchanged. Executed copies land in build/executed/CORPUS/.
set -euo pipefail
cd "$(dirname "$0")"
if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  echo "usage: ./run_all.sh CORPUS [--from NN] [--until NN] [--only NN] [--force]   (CORPUS: demo, qasper, wikipedia_fa, qasper_local, qasper_local_fast, wikipedia_local, markdown_example)"
  exit 2
fi
source scripts/ensure_env.sh
exec .venv/bin/python -m chunkstudy.runner "$@"
