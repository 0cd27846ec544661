# Shared helpers for the fairseq-local shell scripts (sourced, not run).
die() { echo "$(basename "$0"): error: $*" >&2; exit 2; }
need_file() { [ -f "$1" ] || die "${2:-file} '$1' does not exist"; }
need_dir() { [ -d "$1" ] || die "${2:-directory} '$1' does not exist"; }
need_val() { [ $# -ge 2 ] && [ -n "$2" ] || die "option $1 needs a value"; }
say() { echo "[$(date +%H:%M:%S)] $*" >&2; }
same_lines() {  # same_lines FILE_A FILE_B: error unless both have the same number of lines
  local a b; a=$(wc -l <"$1"); b=$(wc -l <"$2")
  [ "$a" -eq "$b" ] || die "line counts differ: $1 has $a lines, $2 has $b"
}
usage_from_header() { sed -n '2,/^set /p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
USER_DIR="$REPO_ROOT/fairseq_local"
activate_env() {  # use .venv when the caller has no fairseq on PATH
  if ! command -v fairseq-train >/dev/null 2>&1; then
    # shellcheck disable=SC1091
    source "$REPO_ROOT/scripts/setup_env.sh"
  fi
}
nsuffix() { if [ "$1" -gt 0 ]; then echo "$1"; fi; }  # 0 -> "", 1 -> "1" (fairseq test split names)
