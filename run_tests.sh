#!/usr/bin/env bash
# ./run_tests.sh            the default suite (fast; real-data tests skip when ../shared/data is absent)
# ./run_tests.sh --slow     only the slow tests (real-data runs, long simulations)
# ./run_tests.sh --all      everything
# Extra arguments go to pytest, e.g. ./run_tests.sh tests/test_metrics.py -k worked
# CHUNKSTUDY_RANDOM_ORDER=random runs the tests in a random order (pytest-randomly) and prints the seed;
# CHUNKSTUDY_RANDOM_ORDER=<seed> repeats that order. Unset: file order (pyproject.toml's addopts: -p no:randomly).
# First the static checks: the pinned ruff over the repository ([tool.ruff] in pyproject.toml), then the pinned mypy
# over lib/ ([tool.mypy]); any finding stops the run. CHUNKSTUDY_TYPECHECK=0 skips both (a quick targeted rerun);
# CI and the full suite keep them.
# CHUNKSTUDY_TEST_WORKERS=N runs the tests on N processes (pytest-xdist, --dist loadfile: each test file stays on
# one process; the session's tiny run is built once for all of them, tests/conftest.py). Default: the machine's CPUs, at
# most 4 (each process may hold torch and a model), for the default suite; 1 for --slow and --all (their real
# servers and real-data runs each want the machine). 1 runs the tests in this process (docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")"
source scripts/ensure_env.sh
marker=()
default_workers=$(n=$(nproc); echo $(( n < 4 ? n : 4 )))
case "${1:-}" in
  --slow) marker=(-m slow); default_workers=1; shift ;;
  --all) marker=(-m "slow or not slow"); default_workers=1; shift ;;
esac
order=()
if [ -n "${CHUNKSTUDY_RANDOM_ORDER:-}" ]; then
  seed="$CHUNKSTUDY_RANDOM_ORDER"
  [ "$seed" = random ] && seed=$(( (RANDOM << 15) | RANDOM ))
  case "$seed" in *[!0-9]*)
    echo "tests: CHUNKSTUDY_RANDOM_ORDER must be 'random' or a number, got '$CHUNKSTUDY_RANDOM_ORDER'" >&2; exit 2 ;;
  esac
  echo "tests: random order, seed $seed (repeat it: CHUNKSTUDY_RANDOM_ORDER=$seed ./run_tests.sh ...)"
  order=(-p randomly --randomly-seed="$seed")
fi
if [ "${CHUNKSTUDY_TYPECHECK:-1}" != 0 ]; then
  .venv/bin/python -m ruff check --quiet . || {
    echo "tests: ruff found problems (.venv/bin/ruff check --fix mends the safe ones; CHUNKSTUDY_TYPECHECK=0 skips)" >&2
    exit 1; }
  .venv/bin/python -m mypy || { echo "tests: mypy found type errors in lib/ (fix them, or CHUNKSTUDY_TYPECHECK=0 to skip)" >&2; exit 1; }
fi
workers="${CHUNKSTUDY_TEST_WORKERS:-$default_workers}"
case "$workers" in ''|*[!0-9]*|0)
  echo "tests: CHUNKSTUDY_TEST_WORKERS must be a positive number, got '$workers'" >&2; exit 2 ;;
esac
if [ "$workers" -gt 1 ]; then parallel=(-n "$workers" --dist loadfile); else parallel=(-p no:xdist); fi
exec .venv/bin/python -m pytest -q -ra -p no:cacheprovider "${parallel[@]}" "${order[@]}" "${marker[@]}" "$@"
