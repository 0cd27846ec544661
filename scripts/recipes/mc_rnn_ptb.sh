#!/usr/bin/env bash
# MC-RNN paper, Penn Treebank language modelling (Table 4): prepare PTB (scripts/recipes/prepare_ptb.sh),
# train mc_rnn_lm_ptb (3 x 1150 MC-RNN-3 LSTM, 400-d tied embeddings, AWD-LSTM regularisation) with
# truncated BPTT (stateful_language_modeling) and report valid/test perplexity with fairseq-eval-lm.
#
#   bash scripts/recipes/mc_rnn_ptb.sh [--data data/ptb] [--cpu] [--baseline] [-- HYDRA_OVERRIDES...]
# --baseline trains Table 4's "AWD-LSTM w/o finetune" row (mc_rnn_lm_ptb_awd_lstm) instead.
set -euo pipefail
# use the project venv unless fairseq is already on PATH
command -v fairseq-train >/dev/null 2>&1 || source "$(dirname "$0")/../setup_env.sh"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
DATA=data/ptb; CPU=(); NAME=table4_mc_rnn_ptb
while [[ $# -gt 0 ]]; do
  case "$1" in
    --data) DATA="$2"; shift 2 ;;
    --cpu) CPU=(common.cpu=true); shift ;;
    --baseline) NAME=table4_awd_lstm_ptb; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "mc_rnn_ptb.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ ! -f "$DATA/bin/dict.txt" ]]; then
  [[ -f "$REPO/scripts/recipes/prepare_ptb.sh" ]] || { echo "mc_rnn_ptb.sh: $DATA/bin missing and no prepare_ptb.sh" >&2; exit 2; }
  bash "$REPO/scripts/recipes/prepare_ptb.sh" --out "$DATA"
fi
DATA="$(cd "$DATA" && pwd)"
SAVE="$REPO/checkpoints/mc_rnn/$NAME"
fairseq-hydra-train --config-dir "$REPO/configs/mc_rnn" --config-name "$NAME" \
  task.data="$DATA/bin" common.user_dir="$REPO/fairseq_local" checkpoint.save_dir="$SAVE" \
  hydra.run.dir="$SAVE/hydra" "${CPU[@]}" "$@"
for split in valid test; do
  fairseq-eval-lm "$DATA/bin" --user-dir "$REPO/fairseq_local" --task stateful_language_modeling \
    --path "$SAVE/checkpoint_best.pt" --gen-subset "$split" --batch-size 1 --tokens-per-sample 70 \
    ${CPU:+--cpu} 2>&1 | grep -E "Loss|Perplexity" | tee "$SAVE/$split.ppl"
done
