#!/usr/bin/env bash
# genCNN paper, FBIS-style perplexity (Table 3): the English side of a parallel corpus (user-supplied,
# tokenized, one sentence per line), 40k-word vocabulary (<unk> for the rest, EOS counted), then each
# Table 3 row (genCNN, TIME-ARROW only, TIME-FLOW only, αCNN only) trained with its YAML from
# configs/gencnn/ and evaluated with fairseq-eval-lm on the test file.  The embeddings start from
# word2vec trained on --train (Section 4.1; scripts/gencnn_word2vec.py, gensim; --no-word2vec: the
# uniform init instead), written once to --out/word2vec.DIMd.txt.  The paper's 200-cluster
# softmax is replaced by fairseq's adaptive softmax (cutoffs 2000,10000).
#
#   bash scripts/recipes/gencnn_fbis.sh --train fbis.en --valid mt06.en --test mt08.en \
#        [--out data/fbis] [--rows "gencnn time_arrow_only time_flow_only alpha_only"] [--save-dir DIR]
#        [--cpu] [--small] [--no-word2vec] [-- OVERRIDES...]
# Each row in --save-dir/table3_fbis_ROW (default checkpoints/gencnn/...); --small: a smoke run.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
opt --train TRAIN; opt --valid VALID; opt --test TEST; opt --out OUT data/fbis
opt --rows ROWS "gencnn time_arrow_only time_flow_only alpha_only"; flag --no-word2vec W2V "" 1; run_options
parse_options "$@"
for f in TRAIN VALID TEST; do
  [ -n "${!f}" ] || die "--${f,,} FILE is required"
  need_file "${!f}" "--${f,,}"
done
for row in $ROWS; do row_config gencnn "table3_fbis_$row" "--rows $row"; done
activate_env
OUT=$(abs_dir "$OUT"); SAVE=$(abs_dir "${SAVE:-$REPO_ROOT/checkpoints/gencnn}")
if [ ! -f "$OUT/bin/dict.txt" ]; then
  bash "$REPO_ROOT/scripts/preprocess.sh" --lm --train "$TRAIN" --valid "$VALID" --test "$TEST" --bpe none \
    --nwords 40000 --destdir "$OUT/bin" --force
fi
EMBED=(); [ -z "$W2V" ] || word2vec_embeddings "$TRAIN" "$OUT/bin/dict.txt" "$OUT"
for row in $ROWS; do
  S="$SAVE/table3_fbis_$row"
  row_config gencnn "table3_fbis_$row"; train_row "$OUT/bin" "$S" "$CFG" "${EMBED[@]}"
  perplexity "$row" "$S/test.ppl" "$OUT/bin" "$S/checkpoint_best.pt" \
    --task language_modeling --sample-break-mode eos --gen-subset test --batch-size 64
done
