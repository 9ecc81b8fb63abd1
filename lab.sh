#!/usr/bin/env bash
# ./lab.sh [JUPYTERLAB OPTIONS]   JupyterLab on this project, in its own environment (.venv, from the lock, created on
# first use as ./run_all.sh does). A double-click on notebooks/NN_*.py opens it as a notebook (jupytext's "Jupytext
# Notebook" viewer) on the project's kernel, "chunkstudy (.venv)", with no kernel to pick.
# Options go to `jupyter lab`, e.g. ./lab.sh --no-browser --port 8899. docs/jupyterlab.md says what this sets up.
#
# JupyterLab comes from constraints/lab-lock.txt (the [lab] extra, exact versions with hashes, installed on top of
# the project's lock); scripts/lab_setup.sh writes the kernelspec and the default viewer inside .venv, which Jupyter
# reads before ~/.jupyter and ~/.local/share/jupyter (nothing of yours there is written; your settings still win).
set -euo pipefail
cd "$(dirname "$0")"
source scripts/ensure_env.sh
want="$(sha256sum constraints/lab-lock.txt | cut -c1-16)"
if [ "$(cat .venv/.lab-hash 2>/dev/null)" != "$want" ] || ! .venv/bin/python -c 'import jupyterlab' 2>/dev/null; then
  echo "lab: installing JupyterLab into .venv (constraints/lab-lock.txt) ..." >&2
  pip_quiet install -q --require-hashes --no-deps -r constraints/lab-lock.txt
  echo "$want" > .venv/.lab-hash
fi
scripts/lab_setup.sh .venv
# ensure_env.sh sets Agg for the runner's kernels (figures go to files); here ipykernel's inline backend shows them
unset MPLBACKEND
root=()
[ "$(id -u)" = 0 ] && root=(--allow-root)  # a container or CI runs as root; Jupyter refuses to unless told
exec .venv/bin/jupyter lab --LabApp.default_url=/lab/tree/notebooks "${root[@]}" "$@"
