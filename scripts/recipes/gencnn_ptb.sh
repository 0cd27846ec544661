#!/usr/bin/env bash
# genCNN paper, Penn Treebank perplexity (Table 2): prepare PTB (10k vocabulary, <unk>, EOS counted)
# with scripts/recipes/prepare_ptb.sh, train word2vec on the training text for the embeddings'
# starting state (Section 4.1; scripts/gencnn_word2vec.py, gensim), train the Section 4.1 genCNN
# (configs/gencnn/table2_ptb_gencnn: AdaGrad, mini-batches of 500 sentences) from it, report
# valid/test perplexity with fairseq-eval-lm, and with --dynamic-lr LR also the test perplexity in
# dynamic evaluation (Table 2's second column: scripts/gencnn_dynamic_eval.py, one sentence per
# segment, one SGD step of rate LR after scoring it; the paper gives no rate, ours is 0.05).
#
#   bash scripts/recipes/gencnn_ptb.sh [--data data/ptb] [--save-dir DIR] [--cpu] [--small]
#        [--no-word2vec] [--dynamic-lr LR] [-- HYDRA_OVERRIDES...]
#   e.g. ... -- model.no_beta=true optimization.max_epoch=5
# Outputs in --save-dir (default checkpoints/gencnn/table2_ptb_gencnn); the vectors in
# --data/word2vec.DIMd.txt; --small: a smoke run (2 updates).
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
DATA=data/ptb CPU=() SAVE="" W2V=1 DYN_LR=""
while [ $# -gt 0 ]; do
  case "$1" in
    --data) need_val "$@"; DATA=$2; shift 2 ;;
    --save-dir) need_val "$@"; SAVE=$2; shift 2 ;;
    --cpu) CPU=(--cpu); shift ;;
    --small) set_small; shift ;;
    --no-word2vec) W2V=""; shift ;;
    --dynamic-lr) need_val "$@"; DYN_LR=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) usage_from_header; exit 0 ;;
    *) die "unknown option $1" ;;
  esac
done
activate_env
DATA=$(abs_dir "$DATA"); SAVE=$(abs_dir "${SAVE:-$REPO_ROOT/checkpoints/gencnn/table2_ptb_gencnn}")
[ -f "$DATA/bin/dict.txt" ] || bash "$REPO_ROOT/scripts/recipes/prepare_ptb.sh" --out "$DATA"
EMBED=()
if [ -n "$W2V" ]; then
  DIM=100  # the YAML's model.decoder_embed_dim, unless overridden
  for a in "$@"; do case "$a" in model.decoder_embed_dim=*) DIM=${a#*=} ;; esac; done
  VEC="$DATA/word2vec.${DIM}d.txt"
  if [ ! -f "$VEC" ]; then
    need_file "$DATA/raw/ptb.train.txt" "training text for word2vec (or --no-word2vec)"
    python "$REPO_ROOT/scripts/gencnn_word2vec.py" --train "$DATA/raw/ptb.train.txt" \
      --dict "$DATA/bin/dict.txt" --dim "$DIM" --out "$VEC"
  fi
  EMBED=("model.embed_path=$VEC")
fi
bash "$REPO_ROOT/scripts/train.sh" --data "$DATA/bin" --save-dir "$SAVE" \
  --config "$REPO_ROOT/configs/gencnn/table2_ptb_gencnn.yaml" "${CPU[@]}" -- "${SMALL_HYDRA[@]}" "${EMBED[@]}" "$@"
for split in valid test; do
  fairseq-eval-lm "$DATA/bin" --user-dir "$USER_DIR" --task language_modeling \
    --sample-break-mode eos --path "$SAVE/checkpoint_best.pt" --gen-subset "$split" --batch-size 64 \
    "${CPU[@]}" 2>&1 | grep -E "Loss|Perplexity" | sed "s/^/table2_ptb_gencnn $split: /" | tee "$SAVE/$split.ppl"
done
if [ -n "$DYN_LR" ]; then
  python "$REPO_ROOT/scripts/gencnn_dynamic_eval.py" "$DATA/bin" --user-dir "$USER_DIR" --task language_modeling \
    --sample-break-mode eos --path "$SAVE/checkpoint_best.pt" --gen-subset test --batch-size 1 \
    --dynamic-lr "$DYN_LR" "${CPU[@]}" 2>&1 | grep -E "^Loss" | sed "s/^/table2_ptb_gencnn test dynamic: /" \
    | tee "$SAVE/test.dynamic.ppl"
fi
