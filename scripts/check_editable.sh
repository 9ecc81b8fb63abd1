#!/usr/bin/env bash
# scripts/check_editable.sh VENV CHECKOUT — is VENV's chunkstudy CHECKOUT's lib/chunkstudy? Run by ensure_env.sh.
# A .venv copied (or moved) from another checkout keeps an editable install that points at that checkout's lib/:
# every stage would run that library, the runner's library hash would not see this checkout's edits ("library
# unchanged") and the manifests would record that checkout's git state. Reinstall the project editable from here
# (--no-deps: the dependencies are the venv's, as ensure_env.sh installed them), check again, refuse if it still
# points away. Costs one Python start when all is well (the package is located, not imported).
#
# It never repoints an install that another checkout or another process uses:
# * a VENV that is a link resolving outside CHECKOUT (one .venv shared by two checkouts) is refused, not repaired:
#   repointing it would make the other checkout's runs execute this checkout's library;
# * the repair takes VENV's lock (<VENV, links resolved>.lock) exclusively, without waiting: every ./run_all.sh,
#   ./run_tests.sh and ./lab.sh holds it shared for as long as it runs (ensure_env.sh), so a repair while one of
#   them uses the environment is refused, naming the lock. CHUNKSTUDY_VENV_LOCK_FD: the caller's open descriptor on
#   that lock (ensure_env.sh's, held shared): the repair converts it to exclusive, then back to shared.
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
real="$(cd "$venv" && pwd -P)"
given="$(cd "$(dirname "$venv")" && pwd -P)/$(basename "$venv")"
case "$real/" in "$here"/*) outside= ;; *) outside=1 ;; esac
if [ "$real" != "$given" ] && [ -n "$outside" ]; then
  echo "env: FAILED: $venv is a link to $real, outside this checkout, and imports chunkstudy from ${got:-nowhere}," \
       "not this checkout's $want: one environment shared by two checkouts. Repointing it here would make the" \
       "other checkout's runs execute this checkout's library (while their manifests name their own commit), so it" \
       "is left as it is. Give this checkout its own environment: rm $venv (the link), then run again (it is" \
       "rebuilt from the lock)." >&2
  exit 2
fi
own_fd=
if command -v flock >/dev/null 2>&1; then
  if [ -n "${CHUNKSTUDY_VENV_LOCK_FD:-}" ]; then fd="$CHUNKSTUDY_VENV_LOCK_FD"; else exec {fd}>>"$real.lock"; own_fd=1; fi
  if ! flock -x -n "$fd"; then
    echo "env: FAILED: $venv imports chunkstudy from ${got:-nowhere}, not this checkout's $want, and another process" \
         "is using that environment now (a run, the tests or JupyterLab hold $real.lock): repointing it under them" \
         "would make their next stage execute another library. Wait for them to end and run again, or give this" \
         "checkout its own environment (rm $venv, then run again)." >&2
    exit 2
  fi
fi
echo "env: $venv imports chunkstudy from ${got:-nowhere}, not this checkout's $want (a .venv copied from another" \
     "checkout?); reinstalling it editable from here ..." >&2
"$venv/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$here" >&2 || true
[ -n "${fd:-}" ] && [ -z "$own_fd" ] && flock -s "$fd"  # the caller's hold goes back to shared
got="$(where)"
if [ "$got" != "$want" ]; then
  echo "env: FAILED: $venv still imports chunkstudy from ${got:-nowhere}, not $want: a run would execute that" \
       "library and record that checkout's git state. Remove $venv and run again (it is rebuilt from the lock)," \
       "or: $venv/bin/python -m pip install --no-deps -e $here" >&2
  exit 2
fi
echo "env: chunkstudy now imports from $want" >&2
