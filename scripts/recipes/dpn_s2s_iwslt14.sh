#!/usr/bin/env bash
# DPN-S2S on IWSLT14 De-En (Tables 1, 4 and 5): prepare the data with joint BPE 10k (Section 4.1;
# test = dev2010 + dev2012 + tst2010-2012, 6750 sentences) via prepare_iwslt14.sh, then train, decode
# (beam 5) and score each row; DPN rows also get the alignment entropy table and heatmaps.
#
#   bash scripts/recipes/dpn_s2s_iwslt14.sh [--rows "table1_dpn_s2s table1_wider_cnn ..."] [--tgz de-en.tgz]
#        [--out data/iwslt14.de-en.bpe10k] [--cpu] [-- HYDRA_OVERRIDES...]
#
# Default rows: every Table 1 and Table 4 row.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="$REPO/data/iwslt14.de-en.bpe10k"; TGZ=(); CPU=()
ROWS="table1_dpn_s2s table1_wider_cnn table1_deeper_cnn table1_wider_san table1_deeper_san $(echo table4_m{1..9})"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --tgz) TGZ=(--tgz "$2"); shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --cpu) CPU=(--cpu); shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "dpn_s2s_iwslt14.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ ! -f "$OUT/bin/dict.de.txt" ]]; then
  bash "$REPO/scripts/recipes/prepare_iwslt14.sh" --out "$OUT" --bpe-size 10000 "${TGZ[@]}"
fi
for row in $ROWS; do
  [[ $row == table1_* || $row == table4_* ]] || { echo "dpn_s2s_iwslt14.sh: $row is not an IWSLT14 row" >&2; exit 2; }
  bash "$REPO/scripts/recipes/dpn_s2s.sh" --row "$row" --data "$OUT/bin" "${CPU[@]}" -- "$@"
done
