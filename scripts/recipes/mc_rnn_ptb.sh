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
DATA=data/ptb CPU=() NAME=table4_mc_rnn_ptb SAVE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --data) need_val "$@"; DATA=$2; shift 2 ;;
    --save-dir) need_val "$@"; SAVE=$2; shift 2 ;;
    --cpu) CPU=(--cpu); shift ;;
    --baseline) NAME=table4_awd_lstm_ptb; shift ;;
    --small) set_small; shift ;;
    --) shift; break ;;
    -h|--help) usage_from_header; exit 0 ;;
    *) die "unknown option $1" ;;
  esac
done
activate_env
DATA=$(abs_dir "$DATA"); SAVE=$(abs_dir "${SAVE:-$REPO_ROOT/checkpoints/mc_rnn/$NAME}")
[ -f "$DATA/bin/dict.txt" ] || bash "$REPO_ROOT/scripts/recipes/prepare_ptb.sh" --out "$DATA"
bash "$REPO_ROOT/scripts/train.sh" --data "$DATA/bin" --save-dir "$SAVE" --config "$REPO_ROOT/configs/mc_rnn/$NAME.yaml" \
  "${CPU[@]}" -- "${SMALL_HYDRA[@]}" "$@"
for split in valid test; do
  fairseq-eval-lm "$DATA/bin" --user-dir "$USER_DIR" --task stateful_language_modeling \
    --path "$SAVE/checkpoint_best.pt" --gen-subset "$split" --batch-size 1 --tokens-per-sample 70 \
    "${CPU[@]}" 2>&1 | grep -E "Loss|Perplexity" | sed "s/^/$NAME $split: /" | tee "$SAVE/$split.ppl"
done
