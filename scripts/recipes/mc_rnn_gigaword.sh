#!/usr/bin/env bash
# MC-RNN paper, Gigaword headline generation (Table 3): train one table row with its Hydra config on
# data prepared by scripts/recipes/prepare_gigaword.sh, decode the test set with beam 10 and
# report ROUGE-1/2/L F1 (rouge-score) against the release's test references
# (scripts/lib/common.sh score_summaries).
#
#   bash scripts/recipes/mc_rnn_gigaword.sh --data OUT/bin [--refs-dir OUT/refs] [--row table3_mc_rnn_3]
#        [--save-dir DIR] [--cpu] [--small] [--score-only] [-- HYDRA_OVERRIDES...]
#
# Rows: table3_baseline_rnn table3_mc_rnn_{2,3,4}.  --data: prepare_gigaword.sh's OUT/bin (languages
# article -> headline; override with -- task.source_lang=.. task.target_lang=..); --refs-dir: its
# OUT/refs (default: next to --data).  Outputs in --save-dir (default checkpoints/mc_rnn/ROW).
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
opt --row ROW table3_mc_rnn_3; opt --data DATA; opt --refs-dir REFS
run_options --score-only
parse_options "$@"
[ -n "$DATA" ] || die "--data BIN_DIR is required (see scripts/recipes/prepare_gigaword.sh)"
need_dir "$DATA" "--data"
REFS=${REFS:-$DATA/../refs}; need_file "$REFS/test.ref0" "test reference"
start_row mc_rnn "$ROW"
DATA=$(abs_dir "$DATA")
train_and_translate "$DATA" "$SAVE/test.gen" --gen-subset test --beam 10
reference_args "$REFS/test.ref"
echo "== $ROW: Gigaword test"
score_summaries "$SAVE/test.gen" "$SAVE/test" "${REF_ARGS[@]}"
