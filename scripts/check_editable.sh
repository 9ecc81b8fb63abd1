#!/usr/bin/env bash
# scripts/check_editable.sh VENV CHECKOUT — is VENV's chunkstudy CHECKOUT's lib/chunkstudy? Run by ensure_env.sh.
# A .venv copied (or moved) from another checkout keeps an editable install that points at that checkout's lib/:
# every stage would run that library, the runner's library hash would not see this checkout's edits ("library
# unchanged") and the manifests would record that checkout's git state. Reinstall the project editable from here
# (--no-deps: the dependencies are the venv's, as ensure_env.sh installed them), check again, refuse if it still
# points away. Costs one Python start when all is well (the package is located, not imported).
set -euo pipefail
venv="$1"
here="$(cd "$2" && pwd -P)"
if [ ! -d "$here/lib/chunkstudy" ]; then
  echo "env: $here has no lib/chunkstudy: not a chunkstudy checkout" >&2
  exit 2
fi
want="$(cd "$here/lib/chunkstudy" && pwd -P)"
where() {
  "$venv/bin/python" -c 'import importlib.util, pathlib
spec = importlib.util.find_spec("chunkstudy")
print(pathlib.Path(spec.origin).resolve().parent if spec is not None and spec.origin else "")' 2>/dev/null || true
}
got="$(where)"
[ "$got" = "$want" ] && exit 0
echo "env: $venv imports chunkstudy from ${got:-nowhere}, not this checkout's $want (a .venv copied from another" \
     "checkout?); reinstalling it editable from here ..." >&2
"$venv/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$here" >&2 || true
got="$(where)"
if [ "$got" != "$want" ]; then
  echo "env: FAILED: $venv still imports chunkstudy from ${got:-nowhere}, not $want: a run would execute that" \
       "library and record that checkout's git state. Remove $venv and run again (it is rebuilt from the lock)," \
       "or: $venv/bin/python -m pip install --no-deps -e $here" >&2
  exit 2
fi
echo "env: chunkstudy now imports from $want" >&2
