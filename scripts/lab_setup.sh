#!/usr/bin/env bash
# scripts/lab_setup.sh [PREFIX]   write the two settings ./lab.sh's JupyterLab reads, under PREFIX (default: .venv,
# the prefix Jupyter searches first when it runs from .venv). Starts no server; tests/test_lab.py calls it with a
# temporary PREFIX and reads what it wrote.
#   PREFIX/share/jupyter/kernels/chunkstudy/kernel.json   the kernel the notebooks' headers name (kernelspec:
#       chunkstudy): this .venv's python by its absolute path, PYTHONHASHSEED=0 as the runner's kernels have it;
#   PREFIX/etc/jupyter/labconfig/default_setting_overrides.json   defaultViewers: python -> "Jupytext Notebook",
#       so a double-click opens a .py file as a notebook; no Jupyter news (fetchNews "false": no pop-up asking at
#       every start, no request to the news feed, none for updates); and no autosave, so an edit made in the browser
#       (params_file pointed at another corpus) reaches the tracked notebooks/NN_*.py only when saved on purpose.
#       These are defaults: a user's own JupyterLab settings win.
# Rewritten on every call, so a moved checkout gets its kernel's new path the next time ./lab.sh starts.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${1:-$here/.venv}"
py="$here/.venv/bin/python"
[ -x "$py" ] || { echo "lab_setup: no $py (./lab.sh or ./run_tests.sh creates it)" >&2; exit 2; }
"$py" -m ipykernel install --prefix "$prefix" --name chunkstudy --display-name "chunkstudy (.venv)" \
  --env PYTHONHASHSEED 0 >/dev/null 2>&1 \
  || { echo "lab_setup: ipykernel could not install the kernelspec under $prefix" >&2; exit 1; }
overrides="$prefix/etc/jupyter/labconfig/default_setting_overrides.json"
"$here/.venv/bin/jupytext-config" --settings-file "$overrides" set-default-viewer python
"$py" - "$overrides" <<'EOF'
import json, sys
path = sys.argv[1]
with open(path, encoding="utf-8") as f:
    settings = json.load(f)
settings.setdefault("@jupyterlab/apputils-extension:notification", {}).update(fetchNews="false", checkForUpdates=False)
settings.setdefault("@jupyterlab/docmanager-extension:plugin", {})["autosave"] = False
with open(path, "w", encoding="utf-8") as f:
    json.dump(settings, f, indent=2)
    f.write("\n")
EOF
