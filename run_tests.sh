#!/usr/bin/env bash
# ./run_tests.sh            the default suite (fast; real-data tests skip when ../shared/data is absent)
# ./run_tests.sh --slow     only the slow tests (real-data runs, long simulations)
# ./run_tests.sh --all      everything
# Extra arguments go to pytest, e.g. ./run_tests.sh tests/test_metrics.py -k worked
set -euo pipefail
cd "$(dirname "$0")"
source scripts/ensure_env.sh
marker=()
case "${1:-}" in
  --slow) marker=(-m slow); shift ;;
  --all) marker=(-m "slow or not slow"); shift ;;
esac
exec .venv/bin/python -m pytest -q -ra -p no:cacheprovider "${marker[@]}" "$@"
