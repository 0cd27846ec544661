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
opt --data DATA data/ptb; opt --wide WIDE 3; flag --masking NAME section41_masking_420h_wide3 ""; run_options
parse_options "$@"
NAME=${NAME:-table2_ptb_wide$WIDE}
start_row parallel_cells "$NAME" "--wide $WIDE (use 1 2 3 4 5 10 15)"
DATA=$(abs_dir "$DATA")
prepare_once "$DATA/bin/dict.txt" prepare_ptb --out "$DATA"
train_row "$DATA/bin" "$SAVE" "$CFG"
valid_test_perplexities "$NAME" "$DATA/bin" "$SAVE" --task stateful_language_modeling --batch-size 1 --tokens-per-sample 35
