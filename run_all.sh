#!/usr/bin/env bash
# ./run_all.sh CORPUS [--from NN] [--until NN] [--only NN] [--force]
# Runs notebooks/NN_*.py with papermill and params/CORPUS.yaml; skips stages whose parameters, inputs and
# library are unchanged. Executed copies land in build/executed/CORPUS/.
set -euo pipefail
cd "$(dirname "$0")"
if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  corpora=(params/*.yaml)  # every parameter file is a corpus to run: listed, never copied by hand
  corpora=("${corpora[@]#params/}")
  echo "usage: ./run_all.sh CORPUS [--from NN] [--until NN] [--only NN] [--force]   (CORPUS: the name of a file params/CORPUS.yaml: ${corpora[*]%.yaml})"
  exit 2
fi
source scripts/ensure_env.sh
exec .venv/bin/python -m chunkstudy.runner "$@"
