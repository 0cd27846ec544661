#!/usr/bin/env bash
# Real-data sanity check (issue "real-data check"): train MC-RNN-3 and the Baseline-RNN for the SAME
# wall time on Multi30k De-En (same BPE for both), then report valid BLEU (sacrebleu, beam 5).
#
#   bash scripts/recipes/mc_rnn_multi30k_check.sh [--src /work/shared/data/multi30k-de-en] [--out work/m30k]
#        [--minutes 4] [--bpe-size 8000] [--dims 256] [--cpu-threads 1] [--archs "mc_rnn_iwslt_de_en_3 rnnsearch_iwslt_de_en"]
#
# The raw files (train/valid .de/.en) are read in place; scripts/preprocess.sh tokenizes (Moses,
# lowercased), learns a joint subword-nmt BPE and binarizes; then fairseq-train with --stop-time-hours for each arch
# (Adam 1e-3, dropout 0.2, --dims embedding/hidden units), fairseq-generate --beam 5 --remove-bpe
# on valid and sacrebleu --tokenize none.  Results: OUT/<arch>/valid.bleu and a summary on stdout.
set -euo pipefail
# use the project venv unless fairseq is already on PATH
command -v fairseq-train >/dev/null 2>&1 || source "$(dirname "$0")/../setup_env.sh"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
SRC=/work/shared/data/multi30k-de-en; OUT=work/m30k; MINUTES=4; BPE_SIZE=8000; DIMS=256; THREADS=1
ARCHS="mc_rnn_iwslt_de_en_3 rnnsearch_iwslt_de_en"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --src) SRC="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --minutes) MINUTES="$2"; shift 2 ;;
    --bpe-size) BPE_SIZE="$2"; shift 2 ;;
    --dims) DIMS="$2"; shift 2 ;;
    --cpu-threads) THREADS="$2"; shift 2 ;;
    --archs) ARCHS="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "mc_rnn_multi30k_check.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
for f in train.de train.en valid.de valid.en; do
  [[ -s "$SRC/$f" ]] || { echo "mc_rnn_multi30k_check.sh: --src $SRC: missing $f" >&2; exit 2; }
done
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
[[ -f "$OUT/bin/dict.de.txt" ]] || bash "$REPO/scripts/preprocess.sh" --src de --tgt en --train "$SRC/train" \
  --valid "$SRC/valid" --destdir "$OUT/bin" --tokenize moses --lowercase --bpe subword-nmt --bpe-size "$BPE_SIZE" --force
HOURS=$(python -c "print($MINUTES / 60)")
for arch in $ARCHS; do
  SAVE="$OUT/$arch"; mkdir -p "$SAVE"
  OMP_NUM_THREADS=$THREADS nice -n 10 fairseq-train "$OUT/bin" --user-dir "$REPO/fairseq_local" --arch "$arch" --cpu \
    --encoder-embed-dim "$DIMS" --decoder-embed-dim "$DIMS" --encoder-hidden-size "$DIMS" --decoder-hidden-size "$DIMS" \
    --optimizer adam --lr 0.001 --clip-norm 1.0 --dropout 0.2 --max-tokens 2000 --stop-time-hours "$HOURS" \
    --max-epoch 100 --save-dir "$SAVE" --no-epoch-checkpoints --no-progress-bar --log-format simple --log-interval 50 \
    --seed 1 --num-workers 0 --disable-validation > "$SAVE/train.log" 2>&1
  OMP_NUM_THREADS=$THREADS nice -n 10 fairseq-generate "$OUT/bin" --user-dir "$REPO/fairseq_local" --cpu \
    --path "$SAVE/checkpoint_last.pt" --gen-subset valid --beam 5 --batch-size 64 --remove-bpe > "$SAVE/valid.gen"
  grep '^H-' "$SAVE/valid.gen" | sed 's/^H-//' | sort -n -k1,1 | cut -f3 > "$SAVE/valid.hyp"
  grep '^T-' "$SAVE/valid.gen" | sed 's/^T-//' | sort -n -k1,1 | cut -f2 > "$SAVE/valid.ref"
  sacrebleu "$SAVE/valid.ref" -i "$SAVE/valid.hyp" --tokenize none -b > "$SAVE/valid.bleu"  # tokenized BLEU
  UPDATES=$(grep -o "num_updates [0-9]*\|num_updates\": \"[0-9]*" "$SAVE/train.log" | tail -1 | grep -o "[0-9]*$" || echo "?")
  echo "$arch: valid BLEU $(cat "$SAVE/valid.bleu") after $MINUTES min ($UPDATES updates)"
done
