#!/usr/bin/env bash
# DPN-S2S (Song et al., 2018): train one paper-table row with its Hydra config (configs/dpn_s2s/ROW.yaml,
# Section 4.3 training), decode a test subset and score it; for DPN rows also the alignment-entropy
# table (Table 5) and the four-flow heatmaps of one sentence (Figure 2).
#
#   bash scripts/recipes/dpn_s2s.sh --row ROW --data BIN_DIR [--subset test] [--refs "R1 R2 .."] [--cpu]
#        [--source-lang L --target-lang L] [--save-dir DIR] [--no-train] [--small] [--score-only]
#        [-- HYDRA_OVERRIDES...]
#
# ROW: table1_{dpn_s2s,wider_cnn,deeper_cnn,wider_san,deeper_san} (IWSLT14, beam 5),
#      table2_{dpn_s2s,cnn,san} (NIST, beam 10), table3_dpn_s2s (Gigaword, beam 5, min length 14,
#      ROUGE), table4_m1 .. table4_m9 (IWSLT14 ablations).
# --refs: the raw reference files of the subset (NIST: its four references).  BLEU is scored by
#      scripts/lib/common.sh score_translation: Moses-detokenized hypotheses against the raw references
#      (sacrebleu, case-insensitive); without --refs only the tokenized BLEU against the binarized
#      references, labelled as such.  Gigaword (table3): ROUGE against the --refs files (required).
# --no-train decodes an existing checkpoint; --score-only re-scores DIR/SUBSET.gen; --small: a smoke
# run (2 updates, beam 2).  Checkpoints and outputs: checkpoints/dpn_s2s/ROW/ (or --save-dir DIR).
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
opt --row ROW; opt --data DATA; opt --subset SUBSET test; opt --refs REFS; opt --source-lang SRC
opt --target-lang TGT; flag --no-train TRAIN 0 1
run_options --score-only
parse_options "$@"
[ -n "$ROW" ] || die "--row is required"
row_config dpn_s2s "$ROW"
[ -n "$DATA" ] || die "--data BIN_DIR is required"
need_dir "$DATA" "--data"
start_row dpn_s2s "$ROW"
DATA=$(abs_dir "$DATA")
GEN=(--beam 5)
case "$ROW" in
  table2_*) GEN=(--beam 10) ;;
  table3_*) GEN=(--beam 5 --min-len 14) ;;
esac
REF_ARGS=(); for r in $REFS; do need_file "$r" "--refs file"; REF_ARGS+=(--ref "$(abs_path "$r")"); done
[[ $ROW != table3_* || ${#REF_ARGS[@]} -gt 0 ]] || die "--refs is required for $ROW (the Gigaword release's reference files)"
SRC=${SRC:-$(sed -n 's/^  source_lang: //p' "$CFG")}; TGT=${TGT:-$(sed -n 's/^  target_lang: //p' "$CFG")}
[[ -f "$DATA/dict.$SRC.txt" && -f "$DATA/dict.$TGT.txt" ]] \
  || die "$DATA has no dict.$SRC.txt / dict.$TGT.txt (pass --source-lang/--target-lang)"
LANGS=(--source-lang "$SRC" --target-lang "$TGT")
CKPT="$SAVE/checkpoint_best.pt"
mapfile -t RM_BPE < <(remove_bpe_args "$DATA")  # the BPE scripts/preprocess.sh left in DATA/bpe
if [ "$SCORE_ONLY" = 0 ]; then
  if [ "$TRAIN" = 1 ]; then train_row "$DATA" "$SAVE" "$CFG" "task.source_lang=$SRC" "task.target_lang=$TGT"; fi
  need_file "$CKPT" "checkpoint (train first, without --no-train)"
  translate "$DATA" "$CKPT" "$SAVE/$SUBSET.gen" "${LANGS[@]}" --gen-subset "$SUBSET" "${GEN[@]}" "${RM_BPE[@]}"
fi
echo "== $ROW on $SUBSET"
if [[ $ROW == table3_* ]]; then
  score_summaries "$SAVE/$SUBSET.gen" "$SAVE/$SUBSET" "${REF_ARGS[@]}"
else
  score_translation "$SAVE/$SUBSET.gen" "$SAVE/$SUBSET" --lowercase --lang "$TGT" "${REF_ARGS[@]}"
fi
if [ "$SCORE_ONLY" = 0 ] && grep -q '_name: dpn_s2s' "$CFG"; then  # Table 5 and Figure 2 for DPN models
  python "$REPO_ROOT/scripts/analysis/dpn_alignment_entropy.py" "$DATA" --path "$CKPT" "${LANGS[@]}" \
    --gen-subset "$SUBSET" --json "$SAVE/$SUBSET.entropy.json" --heatmap "$SAVE/$SUBSET.alignment.png" \
    "${CPU[@]}" | tee "$SAVE/$SUBSET.entropy"
fi
