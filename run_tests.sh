#!/usr/bin/env bash
# ./run_tests.sh            the default suite (fast; real-data tests skip when ../shared/data is absent)
# ./run_tests.sh --slow     only the slow tests (real-data runs, long simulations)
# ./run_tests.sh --all      everything
# Extra arguments go to pytest, e.g. ./run_tests.sh tests/test_metrics.py -k worked
# CHUNKSTUDY_RANDOM_ORDER=random runs the tests in a random order (pytest-randomly) and prints the seed;
# CHUNKSTUDY_RANDOM_ORDER=<seed> repeats that order. Unset: file order (pyproject.toml's addopts: -p no:randomly).
set -euo pipefail
cd "$(dirname "$0")"
source scripts/ensure_env.sh
marker=()
case "${1:-}" in
  --slow) marker=(-m slow); shift ;;
  --all) marker=(-m "slow or not slow"); shift ;;
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
exec .venv/bin/python -m pytest -q -ra -p no:cacheprovider "${order[@]}" "${marker[@]}" "$@"
