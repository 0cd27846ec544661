#!/usr/bin/env bash
# DPN-S2S on Gigaword headline generation (Table 3): prepare Rush et al.'s data with a 30k vocabulary
# per side (prepare_gigaword.sh), train the table3_dpn_s2s row, decode the 2000-pair test set with
# beam 5 and a minimum length of 14 words, and report ROUGE-1/2/L F1 (scripts/score.sh --rouge).
#
#   bash scripts/recipes/dpn_s2s_gigaword.sh (--sumdata DIR | --data BIN_DIR) [--valid-size N] [--cpu]
#        [-- HYDRA_OVERRIDES...]
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
SUMDATA=""; DATA=""; VALID=(); CPU=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sumdata) SUMDATA="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --valid-size) VALID=(--valid-size "$2"); shift 2 ;;
    --cpu) CPU=(--cpu); shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "dpn_s2s_gigaword.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ -z "$DATA" ]]; then
  [[ -n "$SUMDATA" ]] || { echo "dpn_s2s_gigaword.sh: give --sumdata DIR (Rush et al. release) or --data BIN_DIR" >&2; exit 2; }
  bash "$REPO/scripts/recipes/prepare_gigaword.sh" --sumdata "$SUMDATA" --out "$REPO/data/gigaword" "${VALID[@]}"
  DATA="$REPO/data/gigaword/bin"
fi
bash "$REPO/scripts/recipes/dpn_s2s.sh" --row table3_dpn_s2s --data "$DATA" "${CPU[@]}" -- "$@"
