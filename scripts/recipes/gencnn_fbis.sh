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
OUT=data/fbis TRAIN="" VALID="" TEST="" CPU=() ROWS="gencnn time_arrow_only time_flow_only alpha_only" SAVE="" W2V=1
while [ $# -gt 0 ]; do
  case "$1" in
    --train) need_val "$@"; TRAIN=$2; shift 2 ;;
    --valid) need_val "$@"; VALID=$2; shift 2 ;;
    --test) need_val "$@"; TEST=$2; shift 2 ;;
    --out) need_val "$@"; OUT=$2; shift 2 ;;
    --rows) need_val "$@"; ROWS=$2; shift 2 ;;
    --save-dir) need_val "$@"; SAVE=$2; shift 2 ;;
    --cpu) CPU=(--cpu); shift ;;
    --small) set_small; shift ;;
    --no-word2vec) W2V=""; shift ;;
    --) shift; break ;;
    -h|--help) usage_from_header; exit 0 ;;
    *) die "unknown option $1" ;;
  esac
done
for f in TRAIN VALID TEST; do
  [ -n "${!f}" ] || die "--${f,,} FILE is required"
  need_file "${!f}" "--${f,,}"
done
for row in $ROWS; do need_file "$REPO_ROOT/configs/gencnn/table3_fbis_$row.yaml" "config of --rows $row"; done
activate_env
OUT=$(abs_dir "$OUT"); SAVE=$(abs_dir "${SAVE:-$REPO_ROOT/checkpoints/gencnn}")
if [ ! -f "$OUT/bin/dict.txt" ]; then
  bash "$REPO_ROOT/scripts/preprocess.sh" --lm --train "$TRAIN" --valid "$VALID" --test "$TEST" --bpe none \
    --nwords 40000 --destdir "$OUT/bin" --force
fi
EMBED=()
if [ -n "$W2V" ]; then
  DIM=100  # the YAMLs' model.decoder_embed_dim, unless overridden
  for a in "$@"; do case "$a" in model.decoder_embed_dim=*) DIM=${a#*=} ;; esac; done
  VEC="$OUT/word2vec.${DIM}d.txt"
  [ -f "$VEC" ] || python "$REPO_ROOT/scripts/gencnn_word2vec.py" --train "$TRAIN" --dict "$OUT/bin/dict.txt" \
    --dim "$DIM" --out "$VEC"
  EMBED=("model.embed_path=$VEC")
fi
for row in $ROWS; do
  S="$SAVE/table3_fbis_$row"
  bash "$REPO_ROOT/scripts/train.sh" --data "$OUT/bin" --save-dir "$S" \
    --config "$REPO_ROOT/configs/gencnn/table3_fbis_$row.yaml" "${CPU[@]}" -- "${SMALL_HYDRA[@]}" "${EMBED[@]}" "$@"
  fairseq-eval-lm "$OUT/bin" --user-dir "$USER_DIR" --task language_modeling \
    --sample-break-mode eos --path "$S/checkpoint_best.pt" --gen-subset test --batch-size 64 \
    "${CPU[@]}" 2>&1 | grep -E "Loss|Perplexity" | sed "s/^/$row: /" | tee "$S/test.ppl"
done
