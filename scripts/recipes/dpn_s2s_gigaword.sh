#!/usr/bin/env bash
# DPN-S2S on Gigaword headline generation (Table 3): prepare Rush et al.'s data with a 30k vocabulary
# per side (prepare_gigaword.sh), train the table3_dpn_s2s row, decode the 2000-pair test set with
# beam 5 and a minimum length of 14 words, and report ROUGE-1/2/L F1 against the release's test
# references (scripts/lib/common.sh score_summaries).
#
#   bash scripts/recipes/dpn_s2s_gigaword.sh (--sumdata DIR [--out data/gigaword] | --data OUT/bin)
#        [--valid-size N] [--save-dir DIR] [--cpu] [--small] [--score-only] [-- HYDRA_OVERRIDES...]
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
opt --sumdata SUMDATA; opt --data DATA; opt --out OUT data/gigaword; opt_args --valid-size VALID
forward_options; opt_args --save-dir PASS
parse_options "$@"
if [ -z "$DATA" ]; then
  [ -n "$SUMDATA" ] || die "give --sumdata DIR (Rush et al. release) or --data BIN_DIR"
  OUT=$(abs_dir "$OUT")
  bash "$REPO_ROOT/scripts/recipes/prepare_gigaword.sh" --sumdata "$SUMDATA" --out "$OUT" "${VALID[@]}"
  DATA="$OUT/bin"
fi
need_dir "$DATA" "--data"
bash "$REPO_ROOT/scripts/recipes/dpn_s2s.sh" --row table3_dpn_s2s --data "$DATA" \
  --refs "$(ls "$(abs_dir "$DATA")"/../refs/test.ref* | tr '\n' ' ')" "${PASS[@]}" -- "${HYDRA[@]}"
