#!/usr/bin/env bash
# MC-RNN paper, IWSLT14 De-En (Tables 2 and 5): prepare (if needed), train one table row with its
# Hydra config, translate the test set with beam 5 and score it.
#
#   bash scripts/recipes/mc_rnn_iwslt14.sh [--row table2_mc_rnn_3] [--data data/iwslt14.de-en]
#        [--bpe-size 25000] [--save-dir DIR] [--cpu] [--small] [--score-only] [-- HYDRA_OVERRIDES...]
#
# Rows: table2_baseline_rnn table2_mc_rnn_{2,3,4} table5_baseline_rnn_large table5_baseline_rnn_deep
# (configs/mc_rnn/<row>.yaml).  Training: Adam 1e-3, learning rate halved when the validation loss
# stops improving, early stop after 5 stale validations (the paper's schedule).  Scores (the one
# path of scripts/lib/common.sh score_translation): detokenized, case-insensitive sacrebleu against
# the raw test references (DATA/raw/test.en), and, labelled "tokenized", BLEU on the tokenized,
# lowercased, BPE-removed text (the IWSLT14 literature's multi-bleu.perl number).
# --small: a smoke run (2 updates, beam 2); --score-only: re-score DIR/test.gen.
# Outputs in --save-dir (default checkpoints/mc_rnn/<row>/): test.gen, test.hyp, test.score.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
opt --row ROW table2_mc_rnn_3; opt --data DATA data/iwslt14.de-en; opt --bpe-size BPE_SIZE 25000
run_options --score-only
parse_options "$@"
start_row mc_rnn "$ROW"
DATA=$(abs_dir "$DATA")
prepare_once "$DATA/bin/dict.de.txt" prepare_iwslt14 --out "$DATA" --bpe-size "$BPE_SIZE"
need_file "$DATA/raw/test.en" "raw test references (re-run prepare_iwslt14.sh)"
mapfile -t RM_BPE < <(remove_bpe_args "$DATA/bin")  # the BPE scripts/preprocess.sh left in DATA/bin/bpe
train_and_translate "$DATA/bin" "$SAVE/test.gen" --gen-subset test --beam 5 "${RM_BPE[@]}"
echo "== $ROW: IWSLT14 test"
score_translation "$SAVE/test.gen" "$SAVE/test" --lowercase --tokenized --ref "$DATA/raw/test.en"
