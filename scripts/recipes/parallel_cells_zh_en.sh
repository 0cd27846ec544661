#!/usr/bin/env bash
# Parallel-cells paper, Chinese-English translation (Section 3.2, Table 3), from user-supplied LDC
# data: word-level (jieba-segmented Chinese, Moses-tokenized lowercased English), pairs with fewer
# than 50 words on both sides, 30k-word vocabularies (the rest -> <unk>); train the baseline
# (wide=1) or parallel-cell (wide=3) model of configs/parallel_cells/table3_zh_en_ROW.yaml, decode
# every NIST test set and report case-insensitive BLEU against the four references (sacrebleu,
# scripts/score.sh --lowercase).  Training follows the YAML: SGD lr 0.5, clip 5, batches of 32
# sentences, a validation every 3000 updates and lr x 0.93 after each one whose loss is not below
# the previous one's (--lr-scheduler reduce_lr_on_plateau_updates, see the YAML's comment).
#
#   bash scripts/recipes/parallel_cells_zh_en.sh --row baseline|wide3 --out data/nist_zh_en \
#       --train-zh "ldc/LDC2002E18.zh ..." --train-en "ldc/LDC2002E18.en ..." \
#       --set mt02=nist/mt02.src.sgm,nist/mt02.ref.sgm --set mt03=... --set mt04=... --set mt05=... \
#       [--valid mt02] [--beam 10] [--save-dir DIR] [--cpu] [--small] [--score-only] [-- HYDRA_OVERRIDES...]
#
# The paper: NIST02 dev; NIST03/04/05 (and 06) test. Data preparation is
# scripts/recipes/prepare_nist_zhen.sh (it also leaves a small BPE by-product in OUT/bin-bpe);
# the word-level binarized data goes to OUT/bin-word30k.  Checkpoints and decodings: --save-dir
# (default checkpoints/parallel_cells/table3_zh_en_ROW), NAME/generate-SUBSET.txt and NAME.score.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
opt --row ROW wide3; opt --out OUT; opt --train-zh TRAIN_ZH; opt --train-en TRAIN_EN; opt_args --set SETS
opt --valid VALID mt02; opt --beam BEAM 10; run_options --score-only
parse_options "$@"
case "$ROW" in baseline|wide3) ;; *) die "--row must be baseline or wide3 (got $ROW)" ;; esac
[ -n "$OUT" ] || die "--out is required"
activate_env
OUT=$(abs_dir "$OUT"); BIN="$OUT/bin-word30k"
if [ ! -f "$BIN/dict.en.txt" ]; then
  [ -n "$TRAIN_ZH" ] && [ -n "$TRAIN_EN" ] || die "--train-zh and --train-en are required to prepare $OUT"
  bash "$REPO_ROOT/scripts/recipes/prepare_nist_zhen.sh" --out "$OUT" --mode bpe --bpe-size 1000 \
    --train-zh "$TRAIN_ZH" --train-en "$TRAIN_EN" "${SETS[@]}" --valid "$VALID" --max-chars 1000 --max-words 49
  S="$OUT/raw/seg" W="$OUT/raw/word"
  mkdir -p "$W"
  # fewer than 50 words on both sides (Chinese counted after jieba segmentation)
  python - "$S/train.zh" "$S/train.en" "$W/train" <<'PY'
import os, sys
zh, en, out = sys.argv[1:]
kept = total = 0
with open(zh, encoding="utf-8") as fz, open(en, encoding="utf-8") as fe, \
        open(out + ".zh.tmp", "w", encoding="utf-8") as gz, open(out + ".en.tmp", "w", encoding="utf-8") as ge:
    for z, e in zip(fz, fe):
        total += 1
        if len(z.split()) < 50 and len(e.split()) < 50:
            gz.write(z); ge.write(e); kept += 1
os.replace(out + ".zh.tmp", out + ".zh"); os.replace(out + ".en.tmp", out + ".en")
print(f"train: kept {kept} of {total} pairs with < 50 words per side", file=sys.stderr)
PY
  TESTS=(); while read -r n; do TESTS+=("$n"); done <"$OUT/bin-bpe/test_sets.txt"
  for n in "$VALID" "${TESTS[@]}"; do ln -sf "$S/$n.zh" "$W/$n.zh"; ln -sf "$S/$n.en" "$W/$n.en"; done
  TESTPREFS=$(printf ",$W/%s" "${TESTS[@]}"); TESTPREFS=${TESTPREFS#,}
  bash "$REPO_ROOT/scripts/preprocess.sh" --src zh --tgt en --train "$W/train" --valid "$W/$VALID" \
    ${TESTPREFS:+--test "$TESTPREFS"} --destdir "$BIN" --bpe none --nwords 30000
  cp "$OUT/bin-bpe/test_sets.txt" "$BIN/test_sets.txt"
fi
start_row parallel_cells "table3_zh_en_$ROW"
[ "$SCORE_ONLY" = 1 ] || train_row "$BIN" "$SAVE" "$CFG"
i=0
while read -r n; do
  subset=test$(nsuffix $i); i=$((i + 1))
  if [ "$SCORE_ONLY" = 0 ]; then
    bash "$REPO_ROOT/scripts/generate.sh" --data "$BIN" --path "$SAVE/checkpoint_best.pt" --out "$SAVE/$n" \
      --subset "$subset" --beam "$BEAM" --bpe none -- "${CPU[@]}" "${SMALL_GEN[@]}"
  fi
  reference_args "$OUT/refs/$n.ref"
  echo "== table3_zh_en_$ROW $n"
  score_translation "$SAVE/$n/generate-$subset.txt" "$SAVE/$n" --lowercase "${REF_ARGS[@]}"
done <"$BIN/test_sets.txt"
