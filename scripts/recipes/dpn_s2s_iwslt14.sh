#!/usr/bin/env bash
# DPN-S2S on IWSLT14 De-En (Tables 1, 4 and 5): prepare the data with joint BPE 10k (Section 4.1;
# test = dev2010 + dev2012 + tst2010-2012, 6750 sentences) via prepare_iwslt14.sh, then train, decode
# (beam 5) and score each row against the raw test references; DPN rows also get the alignment
# entropy table and heatmaps.
#
#   bash scripts/recipes/dpn_s2s_iwslt14.sh [--rows "table1_dpn_s2s table1_wider_cnn ..."]
#        [--tgz de-en.tgz | --url URL] [--sha256 HASH] [--out data/iwslt14.de-en.bpe10k]
#        [--save-dir DIR] [--cpu] [--small] [--score-only] [-- HYDRA_OVERRIDES...]
#
# Default rows: every Table 1 and Table 4 row; each in --save-dir/ROW (default checkpoints/dpn_s2s/ROW).
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
opt --rows ROWS "table1_dpn_s2s table1_wider_cnn table1_deeper_cnn table1_wider_san table1_deeper_san $(echo table4_m{1..9})"
opt_args --tgz PREP; opt_args --url PREP; opt_args --sha256 PREP; opt --out OUT data/iwslt14.de-en.bpe10k
opt --save-dir SAVE; forward_options
parse_options "$@"
for row in $ROWS; do [[ $row == table1_* || $row == table4_* ]] || die "--rows: $row is not an IWSLT14 row"; done
OUT=$(abs_dir "$OUT")
prepare_once "$OUT/bin/dict.de.txt" prepare_iwslt14 --out "$OUT" --bpe-size 10000 "${PREP[@]}"
[ -z "$SAVE" ] || SAVE=$(abs_dir "$SAVE")
for row in $ROWS; do
  bash "$REPO_ROOT/scripts/recipes/dpn_s2s.sh" --row "$row" --data "$OUT/bin" --refs "$OUT/raw/test.en" \
    ${SAVE:+--save-dir "$SAVE/$row"} "${PASS[@]}" -- "${HYDRA[@]}"
done
