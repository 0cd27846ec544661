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
opt --data DATA data/ptb; flag --no-word2vec W2V "" 1; opt --dynamic-lr DYN_LR; run_options
parse_options "$@"
start_row gencnn table2_ptb_gencnn
DATA=$(abs_dir "$DATA")
prepare_once "$DATA/bin/dict.txt" prepare_ptb --out "$DATA"
EMBED=(); [ -z "$W2V" ] || word2vec_embeddings "$DATA/raw/ptb.train.txt" "$DATA/bin/dict.txt" "$DATA"
train_row "$DATA/bin" "$SAVE" "$CFG" "${EMBED[@]}"
valid_test_perplexities table2_ptb_gencnn "$DATA/bin" "$SAVE" --task language_modeling --sample-break-mode eos --batch-size 64
if [ -n "$DYN_LR" ]; then
  python "$REPO_ROOT/scripts/gencnn_dynamic_eval.py" "$DATA/bin" --user-dir "$USER_DIR" --task language_modeling \
    --sample-break-mode eos --path "$SAVE/checkpoint_best.pt" --gen-subset test --batch-size 1 \
    --dynamic-lr "$DYN_LR" "${CPU[@]}" 2>&1 | grep -E "^Loss" | sed "s/^/table2_ptb_gencnn test dynamic: /" \
    | tee "$SAVE/test.dynamic.ppl"
fi
