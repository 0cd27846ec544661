#!/usr/bin/env bash
# Run the fairseq-local test suite: `bash scripts/test.sh [pytest args...]`.
# Creates or reuses .venv (see scripts/setup_env.sh), then runs pytest over tests/.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k contract -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit 0
fi
source scripts/setup_env.sh
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
workers="${TEST_WORKERS:-$(python -c 'import os; print(max(1, min(4, os.cpu_count() or 1)))')}"
args=(tests -q -p no:cacheprovider --durations=40)
[ "$workers" -gt 1 ] && args+=(-n "$workers" --dist load)
set +e
python -m pytest "${args[@]}" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "error: pytest collected no tests (is tests/ present?)" >&2
  exit 1
fi
exit "$rc"
