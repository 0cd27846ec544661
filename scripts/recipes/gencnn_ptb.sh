#!/usr/bin/env bash
# genCNN paper, Penn Treebank perplexity (Table 2): prepare PTB (10k vocabulary, <unk>, EOS counted)
# with scripts/recipes/prepare_ptb.sh, train the Section 4.1 genCNN (configs/gencnn/table2_ptb_gencnn:
# AdaGrad, mini-batches of 500 sentences), report valid/test perplexity with fairseq-eval-lm.
#
#   bash scripts/recipes/gencnn_ptb.sh [--data data/ptb] [--save-dir DIR] [--cpu] [--small] [-- HYDRA_OVERRIDES...]
#   e.g. ... -- model.no_beta=true optimization.max_epoch=5
# Outputs in --save-dir (default checkpoints/gencnn/table2_ptb_gencnn); --small: a smoke run (2 updates).
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
DATA=data/ptb CPU=() SAVE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --data) need_val "$@"; DATA=$2; shift 2 ;;
    --save-dir) need_val "$@"; SAVE=$2; shift 2 ;;
    --cpu) CPU=(--cpu); shift ;;
    --small) set_small; shift ;;
    --) shift; break ;;
    -h|--help) usage_from_header; exit 0 ;;
    *) die "unknown option $1" ;;
  esac
done
activate_env
DATA=$(abs_dir "$DATA"); SAVE=$(abs_dir "${SAVE:-$REPO_ROOT/checkpoints/gencnn/table2_ptb_gencnn}")
[ -f "$DATA/bin/dict.txt" ] || bash "$REPO_ROOT/scripts/recipes/prepare_ptb.sh" --out "$DATA"
bash "$REPO_ROOT/scripts/train.sh" --data "$DATA/bin" --save-dir "$SAVE" \
  --config "$REPO_ROOT/configs/gencnn/table2_ptb_gencnn.yaml" "${CPU[@]}" -- "${SMALL_HYDRA[@]}" "$@"
for split in valid test; do
  fairseq-eval-lm "$DATA/bin" --user-dir "$USER_DIR" --task language_modeling \
    --sample-break-mode eos --path "$SAVE/checkpoint_best.pt" --gen-subset "$split" --batch-size 64 \
    "${CPU[@]}" 2>&1 | grep -E "Loss|Perplexity" | sed "s/^/table2_ptb_gencnn $split: /" | tee "$SAVE/$split.ppl"
done
