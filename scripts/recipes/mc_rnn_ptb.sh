#!/usr/bin/env bash
# MC-RNN paper, Penn Treebank language modelling (Table 4): prepare PTB (scripts/recipes/prepare_ptb.sh),
# train mc_rnn_lm_ptb (3 x 1150 MC-RNN-3 LSTM, 400-d tied embeddings, AWD-LSTM regularisation) with
# truncated BPTT (stateful_language_modeling) and report valid/test perplexity with fairseq-eval-lm.
#
#   bash scripts/recipes/mc_rnn_ptb.sh [--data data/ptb] [--save-dir DIR] [--cpu] [--baseline] [--small]
#        [-- HYDRA_OVERRIDES...]
# --baseline trains Table 4's "AWD-LSTM w/o finetune" row (mc_rnn_lm_ptb_awd_lstm) instead; --small:
# a smoke run (2 updates).  Outputs in --save-dir (default checkpoints/mc_rnn/ROW): {valid,test}.ppl.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
opt --data DATA data/ptb; flag --baseline NAME table4_awd_lstm_ptb table4_mc_rnn_ptb; run_options
parse_options "$@"
start_row mc_rnn "$NAME"
DATA=$(abs_dir "$DATA")
prepare_once "$DATA/bin/dict.txt" prepare_ptb --out "$DATA"
train_row "$DATA/bin" "$SAVE" "$CFG"
valid_test_perplexities "$NAME" "$DATA/bin" "$SAVE" --task stateful_language_modeling --batch-size 1 --tokens-per-sample 70
