#!/usr/bin/env bash
# genCNN paper, Section 6.2 end to end on the synthetic corpus: train one of our translation models
# (rnnsearch, 1 layer), write n-best lists with fairseq-generate --nbest, train a genCNN LM on the
# target side, tune the LM weight on the dev n-best and re-rank the test n-best (sacrebleu before/after).
#
#   bash scripts/recipes/gencnn_rerank_demo.sh [--out DIR] [--minutes M] [--nbest N] [--lm-arch A --lm-args "..."]
#   --out DIR      work directory (default: gencnn_rerank_demo/), replaced on each run
#   --minutes M    training budget of each model (default 3)
#   --mt-minutes M training budget of the translation model only (default: --minutes)
#   --nbest N      hypotheses per sentence (default 10)
#   --lm-arch A    LM architecture (default: gencnn, small: L_α 12, L_β 8); any fairseq LM works,
#   --lm-args S    with its own size arguments (default: the small genCNN's)
#   --small        a smoke run: 300/30/30 sentences, 2 updates per model, 2-best lists
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
REPO=$REPO_ROOT
SIZES=(--train 4000 --valid 300 --test 300)
small_run() { set_small; NBEST=2; SIZES=(--train 300 --valid 30 --test 30); }  # --small
opt --out OUT gencnn_rerank_demo; opt --minutes MIN 3; opt --mt-minutes MT_MIN; opt --nbest NBEST 10
opt --lm-arch LM_ARCH gencnn
opt --lm-args LM_ARGS '--alpha-length 12 --beta-length 8 --decoder-embed-dim 64 --alpha-layers (3,64,64),(3,48,48) --beta-layers (3,64,0),(3,64,0) --fc-dim 128'
flag_call --small small_run
parse_options "$@"
MT_MIN=${MT_MIN:-$MIN}
for m in "$MIN" "$MT_MIN"; do
  [[ "$m" =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "gencnn_rerank_demo.sh: --minutes/--mt-minutes must be numbers" >&2; exit 2; }
done
[[ "$NBEST" =~ ^[1-9][0-9]*$ ]] || { echo "gencnn_rerank_demo.sh: --nbest must be a positive integer" >&2; exit 2; }
activate_env
HOURS=$(python -c "print($MIN / 60)"); MT_HOURS=$(python -c "print($MT_MIN / 60)")
claim_output "$OUT" --out --check-ours
rm -rf "$OUT"; mkdir -p "$OUT"; mark_output "$OUT"; OUT="$(cd "$OUT" && pwd)"
python "$REPO/scripts/make_synthetic_corpus.py" "$OUT/raw" "${SIZES[@]}" --seed 1
fairseq-preprocess --source-lang src --target-lang tgt --trainpref "$OUT/raw/train" --validpref "$OUT/raw/valid" \
  --testpref "$OUT/raw/test" --destdir "$OUT/mt-bin" --workers 1 > "$OUT/preprocess.log" 2>&1
# the LM shares the translation model's target dictionary, so it reads the hypotheses as they are
fairseq-preprocess --only-source --srcdict "$OUT/mt-bin/dict.tgt.txt" --trainpref "$OUT/raw/train.tgt" \
  --validpref "$OUT/raw/valid.tgt" --destdir "$OUT/lm-bin" --workers 1 >> "$OUT/preprocess.log" 2>&1
fairseq-train "$OUT/mt-bin" --user-dir "$USER_DIR" --arch rnnsearch --encoder-layers 1 --decoder-layers 1 \
  --encoder-embed-dim 64 --encoder-hidden-size 64 --decoder-embed-dim 64 --decoder-hidden-size 64 \
  --optimizer adam --lr 0.003 --clip-norm 1 --max-tokens 2000 --stop-time-hours "$MT_HOURS" --max-epoch 50 \
  --save-dir "$OUT/mt-ckpt" --no-epoch-checkpoints --no-progress-bar --log-format simple --log-interval 50 \
  "${SMALL_CLI[@]}" > "$OUT/mt-train.log" 2>&1
for split in valid test; do
  fairseq-generate "$OUT/mt-bin" --user-dir "$USER_DIR" --path "$OUT/mt-ckpt/checkpoint_last.pt" --gen-subset "$split" \
    --beam "$NBEST" --nbest "$NBEST" --batch-size 64 "${SMALL_GEN[@]}" --results-path "$OUT/nbest-$split" > /dev/null 2>&1
done
fairseq-train "$OUT/lm-bin" --user-dir "$USER_DIR" --task language_modeling --sample-break-mode eos \
  --arch "$LM_ARCH" $LM_ARGS \
  --optimizer adam --lr 0.002 --clip-norm 1 --max-tokens 2000 --stop-time-hours "$HOURS" --max-epoch 50 \
  --save-dir "$OUT/lm-ckpt" --no-epoch-checkpoints --no-progress-bar --log-format simple --log-interval 50 \
  "${SMALL_CLI[@]}" > "$OUT/lm-train.log" 2>&1
python "$REPO/scripts/rerank_nbest.py" --lm "$OUT/lm-ckpt/checkpoint_last.pt" --lm-data "$OUT/lm-bin" \
  --dev-nbest "$OUT/nbest-valid/generate-valid.txt" --test-nbest "$OUT/nbest-test/generate-test.txt" \
  --lm-weights 0:2:0.1 --output "$OUT/test.reranked.txt" 2> "$OUT/rerank.log" | tee "$OUT/rerank.txt"
