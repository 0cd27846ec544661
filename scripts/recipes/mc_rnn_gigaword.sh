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
ROW=table3_mc_rnn_3 DATA="" REFS="" CPU=() SAVE="" SCORE_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --row) need_val "$@"; ROW=$2; shift 2 ;;
    --data) need_val "$@"; DATA=$2; shift 2 ;;
    --refs-dir) need_val "$@"; REFS=$2; shift 2 ;;
    --save-dir) need_val "$@"; SAVE=$2; shift 2 ;;
    --cpu) CPU=(--cpu); shift ;;
    --small) set_small; shift ;;
    --score-only) SCORE_ONLY=1; shift ;;
    --) shift; break ;;
    -h|--help) usage_from_header; exit 0 ;;
    *) die "unknown option $1" ;;
  esac
done
[ -n "$DATA" ] || die "--data BIN_DIR is required (see scripts/recipes/prepare_gigaword.sh)"
need_dir "$DATA" "--data"
CFG="$REPO_ROOT/configs/mc_rnn/$ROW.yaml"
need_file "$CFG" "config of --row $ROW"
activate_env
DATA=$(abs_dir "$DATA"); REFS=${REFS:-$DATA/../refs}; need_file "$REFS/test.ref0" "test reference"
SAVE=$(abs_dir "${SAVE:-$REPO_ROOT/checkpoints/mc_rnn/$ROW}")
if [ "$SCORE_ONLY" = 0 ]; then
  bash "$REPO_ROOT/scripts/train.sh" --data "$DATA" --save-dir "$SAVE" --config "$CFG" "${CPU[@]}" \
    -- "${SMALL_HYDRA[@]}" "$@"
  fairseq-generate "$DATA" --user-dir "$USER_DIR" --path "$SAVE/checkpoint_best.pt" \
    --gen-subset test --beam 10 --batch-size 64 "${CPU[@]}" "${SMALL_GEN[@]}" >"$SAVE/test.gen.tmp"
  mv "$SAVE/test.gen.tmp" "$SAVE/test.gen"
fi
refs=(); for r in "$REFS"/test.ref*; do refs+=(--ref "$r"); done
echo "== $ROW: Gigaword test"
score_summaries "$SAVE/test.gen" "$SAVE/test" "${refs[@]}"
