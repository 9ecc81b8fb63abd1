#!/usr/bin/env bash
# scripts/lock.sh [all|cpu|gpu|lab]   regenerate the locks (exact versions with sha256 hashes) from pyproject.toml and
# constraints/. Needs uv (`pip install uv`) and the package index. Default: all.
#
#   cpu  constraints/cpu-lock.txt (the project with its [dev] and [chunkers] extras, torch 2.13.0+cpu) and
#        constraints/nodeps-lock.txt (the packages installed with --no-deps);
#   gpu  constraints/gpu-lock.txt: the same packages at the CPU lock's versions and hashes, but torch 2.13.0 from
#        PyPI (its Linux x86_64 wheel is the CUDA 13.0 build; only that wheel's hash is kept) with the nvidia-* CUDA
#        libraries, cuda-* and triton it depends on. Run it after `cpu`: it pins everything else to the CPU lock.
#   lab  constraints/lab-lock.txt: the [lab] extra (JupyterLab, ipywidgets) resolved against the CPU lock's
#        versions, keeping only the packages that lock lacks; ./lab.sh installs it with --no-deps on top of either
#        lock (no torch in it). Run it after `cpu`.
#
# The locks target CPython 3.11 on Linux x86_64 (manylinux_2_28), the development, CI and GPU machines. The CPU
# build of torch (2.13.0+cpu) is not on PyPI: it comes from a folder of wheels when pip has one configured
# (PIP_FIND_LINKS or pip's global.find-links, as on the development machines), else from the PyTorch CPU index
# (TORCH_INDEX_URL, default https://download.pytorch.org/whl/cpu); its hash is that of the wheel found there. The
# GPU lock reads PyPI only.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
uv="${UV:-uv}"
py="${PYTHON:-.venv/bin/python}"
common=(--generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 --no-emit-find-links
        --no-emit-index-url --quiet)
if [ "$what" = all ] || [ "$what" = cpu ]; then
  links="${PIP_FIND_LINKS:-$("$py" -m pip config get global.find-links 2>/dev/null || true)}"
  src=()
  if [ -n "$links" ]; then
    for l in $links; do src+=(--find-links "$l"); done
  else
    src+=(--extra-index-url "${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}" --index-strategy unsafe-best-match)
  fi
  "$uv" pip compile pyproject.toml --extra dev --extra chunkers -c constraints/cpu.txt "${src[@]}" "${common[@]}" \
    --custom-compile-command "scripts/lock.sh" -o constraints/cpu-lock.txt
  "$uv" pip compile constraints/nodeps.txt --no-deps "${src[@]}" "${common[@]}" \
    --custom-compile-command "scripts/lock.sh" -o constraints/nodeps-lock.txt
  echo "lock: wrote constraints/cpu-lock.txt ($(grep -c '^[a-z0-9]' constraints/cpu-lock.txt) packages) and constraints/nodeps-lock.txt"
fi
if [ "$what" = all ] || [ "$what" = gpu ]; then
  pins="$(mktemp)"
  trap 'rm -f "$pins"' EXIT
  grep -E '^[a-z0-9]' constraints/cpu-lock.txt | grep -v '^torch==' | sed 's/ .*//' > "$pins"
  "$uv" pip compile pyproject.toml --extra dev --extra chunkers -c constraints/gpu.txt -c "$pins" --index-url https://pypi.org/simple \
    "${common[@]}" --custom-compile-command "scripts/lock.sh gpu" -o constraints/gpu-lock.txt
  sed -i "s|-c $pins\$|-c constraints/cpu-lock.txt|" constraints/gpu-lock.txt  # where the pins came from
  # keep only the hash of the wheel a GPU box installs (uv lists every platform's)
  "$py" - <<'PY'
import json, re, urllib.request
path = "constraints/gpu-lock.txt"
text = open(path).read()
m = re.search(r"^torch==(\S+) \\\n((?:    --hash=sha256:\w+ \\\n)*    --hash=sha256:\w+\n)", text, re.M)
want = f"torch-{m.group(1)}-cp311-cp311-manylinux_2_28_x86_64.whl"
req = urllib.request.Request("https://pypi.org/simple/torch/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
files = json.load(urllib.request.urlopen(req, timeout=60))["files"]
(digest,) = [f["hashes"]["sha256"] for f in files if f["filename"] == want]
assert f"sha256:{digest}" in m.group(2), (want, digest)
open(path, "w").write(text.replace(m.group(0), f"torch=={m.group(1)} \\\n    --hash=sha256:{digest}\n"))
print(f"lock: torch {m.group(1)}: the hash of {want} only")
PY
  echo "lock: wrote constraints/gpu-lock.txt ($(grep -c '^[a-z0-9]' constraints/gpu-lock.txt) packages)"
fi
if [ "$what" = all ] || [ "$what" = lab ]; then
  pins="$(mktemp)" all="$(mktemp)"
  trap 'rm -f "$pins" "$all"' EXIT
  grep -E '^[a-z0-9]' constraints/cpu-lock.txt | sed 's/ .*//' > "$pins"
  links="${PIP_FIND_LINKS:-$("$py" -m pip config get global.find-links 2>/dev/null || true)}"
  src=()
  for l in $links; do src+=(--find-links "$l"); done
  [ -n "$links" ] || src+=(--extra-index-url "${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}" --index-strategy unsafe-best-match)
  "$uv" pip compile pyproject.toml --extra lab -c constraints/cpu.txt -c "$pins" "${src[@]}" "${common[@]}" -o "$all"
  # keep the packages the CPU lock lacks (each with its hashes and "via" lines)
  "$py" - "$all" "$pins" <<'PY'
import re, sys
text, have = open(sys.argv[1]).read(), set(open(sys.argv[2]).read().split())
blocks = re.findall(r"^([a-z0-9][^\n]*\n(?:[ ]+[^\n]*\n)*)", text, re.M)
keep = [b for b in blocks if b.split(" ", 1)[0] not in have]
head = ("# The [lab] extra's packages beyond constraints/cpu-lock.txt (exact versions, sha256 hashes), resolved against\n"
        "# that lock's versions by `scripts/lock.sh lab`. ./lab.sh installs them with --require-hashes --no-deps.\n")
open("constraints/lab-lock.txt", "w").write(head + "".join(keep))
print(f"lock: wrote constraints/lab-lock.txt ({len(keep)} packages)")
PY
fi
