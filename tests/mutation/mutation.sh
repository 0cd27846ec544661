#!/usr/bin/env bash
# Mutation testing (mutmut) of the code implementing the papers' equations, one module at a time:
#   bash tests/mutation/mutation.sh [MODULE ...] [--jobs N] [--time-limit S] [--min-kill-rate R] [--json F]
#   bash tests/mutation/mutation.sh --list        # the modules, the files they mutate and their test files
# Prints killed / survived / equivalent / timed out per module and the diff of every survivor;
# survivors that cannot change behaviour are listed in tests/mutation/equivalents.txt.
# The checkout is never modified: mutmut runs in a scratch copy (--work-dir DIR keeps it).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0
fi
source scripts/lib/common.sh
if ! python -c "import mutmut" >/dev/null 2>&1; then
  # shellcheck disable=SC1091
  source scripts/setup_env.sh
fi
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
# mutmut itself runs under nice -n ${MUTATION_NICE:-15} (a shared machine)
exec python tests/mutation/run.py "$@"
