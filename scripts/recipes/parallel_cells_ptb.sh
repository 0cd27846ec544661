#!/usr/bin/env bash
# Parallel-cells paper (Zhu et al., "Going Wider"), Penn Treebank language modelling (Tables 1-2):
# prepare PTB (prepare_ptb.sh), train the 2 x 1950 parallel-cell LSTM with --wide W
# (configs/parallel_cells/table2_ptb_wideW.yaml: stateful truncated BPTT of 35 steps, batch 20,
# dropout 0.65, SGD lr 1 then /1.15 per epoch after epoch 14, 55 epochs, clip 5) and report the
# valid / test perplexity with fairseq-eval-lm (state carried across windows, batch 1 as Zaremba).
#
#   bash scripts/recipes/parallel_cells_ptb.sh [--wide 3] [--data data/ptb] [--save-dir DIR] [--cpu]
#        [--small] [-- HYDRA_OVERRIDES...]
#
# --wide W   one of 1 2 3 4 5 10 15 (Table 2 rows; 3 is Table 1's model)
# --masking  the Section 4.1 model instead (1 layer x 420, wide 3, dropout 0.2)
# --small    a smoke run (2 updates).  Outputs in --save-dir (default checkpoints/parallel_cells/ROW).
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
DATA=data/ptb WIDE=3 CPU=() NAME="" SAVE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --data) need_val "$@"; DATA=$2; shift 2 ;;
    --wide) need_val "$@"; WIDE=$2; shift 2 ;;
    --masking) NAME=section41_masking_420h_wide3; shift ;;
    --save-dir) need_val "$@"; SAVE=$2; shift 2 ;;
    --cpu) CPU=(--cpu); shift ;;
    --small) set_small; shift ;;
    --) shift; break ;;
    -h|--help) usage_from_header; exit 0 ;;
    *) die "unknown option $1" ;;
  esac
done
NAME=${NAME:-table2_ptb_wide$WIDE}
need_file "$REPO_ROOT/configs/parallel_cells/$NAME.yaml" "config for --wide $WIDE (use 1 2 3 4 5 10 15)"
activate_env
DATA=$(abs_dir "$DATA"); SAVE=$(abs_dir "${SAVE:-$REPO_ROOT/checkpoints/parallel_cells/$NAME}")
[ -f "$DATA/bin/dict.txt" ] || bash "$REPO_ROOT/scripts/recipes/prepare_ptb.sh" --out "$DATA"
bash "$REPO_ROOT/scripts/train.sh" --data "$DATA/bin" --save-dir "$SAVE" \
  --config "$REPO_ROOT/configs/parallel_cells/$NAME.yaml" "${CPU[@]}" -- "${SMALL_HYDRA[@]}" "$@"
for split in valid test; do
  fairseq-eval-lm "$DATA/bin" --user-dir "$USER_DIR" --task stateful_language_modeling \
    --path "$SAVE/checkpoint_best.pt" --gen-subset "$split" --batch-size 1 --tokens-per-sample 35 \
    "${CPU[@]}" 2>&1 | grep -E "Loss|Perplexity" | sed "s/^/$NAME $split: /" | tee "$SAVE/$split.ppl"
done
