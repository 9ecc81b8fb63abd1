#!/usr/bin/env bash
# scripts/serve_llm.sh PARAMS [WEIGHTS]   serve PARAMS' llm.model with vLLM and wait until it answers
# scripts/serve_llm.sh --stop              stop the server this script started
#
# The server runs from its own environment (.venv-serve: vllm pinned in constraints/serve.txt, every other
# package in constraints/serve-lock.txt), never from the pipeline's .venv. Its flags come from the parameter file
# (python -m chunkstudy.gpu serve-args PARAMS): --served-model-name = llm.model, host/port from llm.base_url,
# --max-model-len = llm.context_tokens, --seed = llm.seed, then llm.vllm_engine (gpu_memory_utilization,
# max_num_seqs, language_model_only, ...). WEIGHTS serves a local folder under the name llm.model.
# Runs in the background (log: build/serve/vllm.log) and returns once GET {llm.base_url}/models lists llm.model.
# The weights must be in the Hugging Face cache (scripts/prefetch_models.sh PARAMS) or a local folder: the
# scripts keep HF_HUB_OFFLINE=1 unless you set it to 0.
#
# Environment: SERVE_VENV (default .venv-serve), SERVE_PYTHON (python3; vLLM needs 3.11+), SERVE_TIMEOUT_S
# (1800: loading and compiling a 26B model takes minutes), VLLM_EXTRA_ARGS (appended verbatim), SERVE_STATE (the
# folder of the pid file and the log, default build/serve).
set -euo pipefail
cd "$(dirname "$0")/.."
state=${SERVE_STATE:-build/serve}
pidfile=$state/vllm.pid
log=$state/vllm.log
mkdir -p "$state"

stop() {
  [ -f "$pidfile" ] || { echo "serve: no server started by this script is running"; return 0; }
  local pid; pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    echo "serve: stopping vLLM (process group $pid)"
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && { kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; }
  fi
  rm -f "$pidfile"
}

if [ "${1:-}" = "--stop" ]; then stop; exit 0; fi
if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  sed -n '2,3p' "$0"; exit 2
fi
params=$1
weights=${2:-}

source scripts/ensure_env.sh   # the pipeline's .venv computes the flags and waits for readiness

if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "serve: a server started by this script is running (pid $(cat "$pidfile")); scripts/serve_llm.sh --stop first" >&2
  exit 1
fi

venv=${SERVE_VENV:-.venv-serve}
want="$(cat constraints/serve.txt constraints/serve-lock.txt | sha256sum | cut -c1-16)"
if [ ! -x "$venv/bin/vllm" ] || [ "$(cat "$venv/.deps-hash" 2>/dev/null)" != "$want" ]; then
  echo "serve: installing $(grep -E '^vllm==' constraints/serve.txt) into $venv (once; several GB) ..." >&2
  t0=$SECONDS
  [ -x "$venv/bin/python" ] || "${SERVE_PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -r constraints/serve.txt -c constraints/serve-lock.txt
  echo "$want" > "$venv/.deps-hash"
  echo "serve: $venv ready in $((SECONDS - t0)) s" >&2
fi

mapfile -t args < <(.venv/bin/python -m chunkstudy.gpu serve-args "$params" ${weights:+--weights "$weights"})
[ "${#args[@]}" -gt 0 ] || { echo "serve: no arguments for $params" >&2; exit 1; }
# shellcheck disable=SC2206
extra=(${VLLM_EXTRA_ARGS:-})
echo "serve: $venv/bin/vllm ${args[*]} ${extra[*]:-}  (log: $log)"
setsid nohup "$venv/bin/vllm" "${args[@]}" "${extra[@]}" >"$log" 2>&1 < /dev/null &
echo $! > "$pidfile"
.venv/bin/python -m chunkstudy.gpu wait "$params" --pid "$(cat "$pidfile")" --log "$log" --timeout "${SERVE_TIMEOUT_S:-1800}"
