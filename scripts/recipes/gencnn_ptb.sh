#!/usr/bin/env bash
# genCNN paper, Penn Treebank perplexity (Table 2): prepare PTB (10k vocabulary, <unk>, EOS counted)
# with scripts/recipes/prepare_ptb.sh, train the Section 4.1 genCNN (configs/gencnn/table2_ptb_gencnn:
# AdaGrad, mini-batches of 500 sentences), report valid/test perplexity with fairseq-eval-lm.
#
#   bash scripts/recipes/gencnn_ptb.sh [--data data/ptb] [--cpu] [-- HYDRA_OVERRIDES...]
#   e.g. ... -- model.no_beta=true optimization.max_epoch=5
set -euo pipefail
# use the project venv unless fairseq is already on PATH
command -v fairseq-train >/dev/null 2>&1 || source "$(dirname "$0")/../setup_env.sh"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
DATA=data/ptb; CPU=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --data) DATA="$2"; shift 2 ;;
    --cpu) CPU=(common.cpu=true); shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "gencnn_ptb.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ ! -f "$DATA/bin/dict.txt" ]]; then
  [[ -f "$REPO/scripts/recipes/prepare_ptb.sh" ]] || {
    echo "gencnn_ptb.sh: $DATA/bin missing and scripts/recipes/prepare_ptb.sh not found; binarize PTB with" >&2
    echo "  scripts/preprocess.sh --lm --train ptb.train.txt --valid ptb.valid.txt --test ptb.test.txt --bpe none --destdir $DATA/bin" >&2
    exit 2; }
  bash "$REPO/scripts/recipes/prepare_ptb.sh" --out "$DATA"
fi
DATA="$(cd "$DATA" && pwd)"
SAVE="$REPO/checkpoints/gencnn/table2_ptb_gencnn"
fairseq-hydra-train --config-dir "$REPO/configs/gencnn" --config-name table2_ptb_gencnn \
  task.data="$DATA/bin" common.user_dir="$REPO/fairseq_local" checkpoint.save_dir="$SAVE" \
  hydra.run.dir="$SAVE/hydra" "${CPU[@]}" "$@"
for split in valid test; do
  fairseq-eval-lm "$DATA/bin" --user-dir "$REPO/fairseq_local" --task language_modeling \
    --sample-break-mode eos --path "$SAVE/checkpoint_best.pt" --gen-subset "$split" --batch-size 64 \
    ${CPU:+--cpu} 2>&1 | grep -E "Loss|Perplexity" | tee "$SAVE/$split.ppl"
done
