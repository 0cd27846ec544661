#!/usr/bin/env bash
# Real-data sanity check (issue "real-data check"): train MC-RNN-3 and the Baseline-RNN for the SAME
# wall time on Multi30k De-En (same BPE for both), then report valid BLEU (sacrebleu, beam 5).
#
#   bash scripts/recipes/mc_rnn_multi30k_check.sh [--src ../shared/data/multi30k-de-en] [--out work/m30k]
#        [--minutes 4] [--bpe-size 8000] [--dims 256] [--cpu-threads 1] [--archs "mc_rnn_iwslt_de_en_3 rnnsearch_iwslt_de_en"]
#        [--small] [--score-only]
#
# --src defaults to ../shared/data/multi30k-de-en next to the project (the shared real-data folder).
# The raw files (train/valid .de/.en) are read in place; scripts/preprocess.sh tokenizes (Moses,
# lowercased), learns a joint subword-nmt BPE and binarizes; then fairseq-train with --stop-time-hours for each arch
# (Adam 1e-3, dropout 0.2, --dims embedding/hidden units), fairseq-generate --beam 5 on valid with the
# BPE of OUT/bin removed (an OUT/bin from scripts/preprocess.sh's default sentencepiece works too); BLEU
# of the detokenized output against the raw valid.en (case-insensitive sacrebleu, scripts/lib/common.sh
# score_translation).  Results: OUT/<arch>/valid.score and a summary on stdout.
# --small: a smoke run (2 updates, beam 2); --score-only re-scores OUT/<arch>/valid.gen.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
opt --src SRC "$REPO_ROOT/../shared/data/multi30k-de-en"; opt --out OUT work/m30k; opt --minutes MINUTES 4
opt --bpe-size BPE_SIZE 8000; opt --dims DIMS 256; opt --cpu-threads THREADS 1
opt --archs ARCHS "mc_rnn_iwslt_de_en_3 rnnsearch_iwslt_de_en"; flag_call --small set_small; flag --score-only SCORE_ONLY
parse_options "$@"
for f in train.de train.en valid.de valid.en; do
  [ -s "$SRC/$f" ] || die "--src $SRC: missing $f (give the Multi30k folder with --src)"
done
activate_env
SRC=$(cd "$SRC" && pwd); OUT=$(abs_dir "$OUT")
[[ -f "$OUT/bin/dict.de.txt" ]] || bash "$REPO_ROOT/scripts/preprocess.sh" --src de --tgt en --train "$SRC/train" \
  --valid "$SRC/valid" --destdir "$OUT/bin" --tokenize moses --lowercase --bpe subword-nmt --bpe-size "$BPE_SIZE" --force
HOURS=$(python -c "print($MINUTES / 60)")
mapfile -t RM_BPE < <(remove_bpe_args "$OUT/bin")  # the BPE of OUT/bin (subword-nmt when made here)
BUDGET=(--stop-time-hours "$HOURS" --max-epoch 100); [ "${SMALL:-0}" = 1 ] && BUDGET=()
for arch in $ARCHS; do
  SAVE="$OUT/$arch"; mkdir -p "$SAVE"
  if [ "$SCORE_ONLY" = 0 ]; then
    OMP_NUM_THREADS=$THREADS nice -n 10 fairseq-train "$OUT/bin" --user-dir "$USER_DIR" --arch "$arch" --cpu \
      --encoder-embed-dim "$DIMS" --decoder-embed-dim "$DIMS" --encoder-hidden-size "$DIMS" --decoder-hidden-size "$DIMS" \
      --optimizer adam --lr 0.001 --clip-norm 1.0 --dropout 0.2 --max-tokens 2000 "${BUDGET[@]}" \
      --save-dir "$SAVE" --no-epoch-checkpoints --no-progress-bar --log-format simple --log-interval 50 \
      --seed 1 --num-workers 0 --disable-validation "${SMALL_CLI[@]}" >"$SAVE/train.log" 2>&1 \
      || { tail -n 5 "$SAVE/train.log" >&2; die "training $arch failed (log: $SAVE/train.log)"; }
    OMP_NUM_THREADS=$THREADS nice -n 10 fairseq-generate "$OUT/bin" --user-dir "$USER_DIR" --cpu \
      --path "$SAVE/checkpoint_last.pt" --gen-subset valid --beam 5 --batch-size 64 "${RM_BPE[@]}" \
      "${SMALL_GEN[@]}" >"$SAVE/valid.gen"
  fi
  UPDATES=$(grep -o "num_updates [0-9]*\|num_updates\": \"[0-9]*" "$SAVE/train.log" | tail -1 | grep -o "[0-9]*$" || echo "?")
  echo "== $arch after $MINUTES min ($UPDATES updates): valid"
  score_translation "$SAVE/valid.gen" "$SAVE/valid" --lowercase --ref "$SRC/valid.en"
done
