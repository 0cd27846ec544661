#!/usr/bin/env bash
# DPN-S2S (Song et al., 2018): train one paper-table row with its Hydra config (configs/dpn_s2s/ROW.yaml,
# Section 4.3 training), decode a test subset and score it; for DPN rows also the alignment-entropy
# table (Table 5) and the four-flow heatmaps of one sentence (Figure 2).
#
#   bash scripts/recipes/dpn_s2s.sh --row ROW --data BIN_DIR [--subset test] [--refs "R1 R2 .."] [--cpu]
#        [--source-lang L --target-lang L] [--save-dir DIR] [--no-train] [-- HYDRA_OVERRIDES...]
#
# ROW: table1_{dpn_s2s,wider_cnn,deeper_cnn,wider_san,deeper_san} (IWSLT14, beam 5),
#      table2_{dpn_s2s,cnn,san} (NIST, beam 10), table3_dpn_s2s (Gigaword, beam 5, min length 14,
#      ROUGE), table4_m1 .. table4_m9 (IWSLT14 ablations).  --refs: reference files for multi-reference
#      BLEU (NIST); default: the references stored in the binarized subset.
# Checkpoints and outputs: checkpoints/dpn_s2s/ROW/ (or --save-dir DIR).
set -euo pipefail
# use the project venv unless fairseq is already on PATH
command -v fairseq-train >/dev/null 2>&1 || source "$(dirname "$0")/../setup_env.sh"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
ROW=""; DATA=""; SUBSET=test; REFS=""; CPU=(); TRAIN=1; SRC=""; TGT=""; SAVE=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --row) ROW="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --subset) SUBSET="$2"; shift 2 ;;
    --refs) REFS="$2"; shift 2 ;;
    --source-lang) SRC="$2"; shift 2 ;;
    --target-lang) TGT="$2"; shift 2 ;;
    --cpu) CPU=(common.cpu=true); shift ;;
    --no-train) TRAIN=0; shift ;;
    --save-dir) SAVE="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "dpn_s2s.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
CFG="$REPO/configs/dpn_s2s/$ROW.yaml"
[[ -n "$ROW" && -f "$CFG" ]] || { echo "dpn_s2s.sh: --row '$ROW': no $CFG" >&2; exit 2; }
[[ -n "$DATA" && -d "$DATA" ]] || { echo "dpn_s2s.sh: --data BIN_DIR is required and must exist (got '$DATA')" >&2; exit 2; }
DATA="$(cd "$DATA" && pwd)"
SAVE="${SAVE:-$REPO/checkpoints/dpn_s2s/$ROW}"
mkdir -p "$SAVE"; SAVE="$(cd "$SAVE" && pwd)"
GEN=(--beam 5); SCORE=(); LANGS=()
case "$ROW" in
  table2_*) GEN=(--beam 10); SCORE=(--lowercase) ;;
  table3_*) GEN=(--beam 5 --min-len 14); SCORE=(--rouge) ;;
esac
SRC=${SRC:-$(sed -n 's/^  source_lang: //p' "$CFG")}; TGT=${TGT:-$(sed -n 's/^  target_lang: //p' "$CFG")}
[[ -f "$DATA/dict.$SRC.txt" && -f "$DATA/dict.$TGT.txt" ]] || {
  echo "dpn_s2s.sh: $DATA has no dict.$SRC.txt / dict.$TGT.txt (pass --source-lang/--target-lang)" >&2; exit 2; }
LANGS=(--source-lang "$SRC" --target-lang "$TGT")

if [[ $TRAIN == 1 ]]; then
  fairseq-hydra-train --config-dir "$REPO/configs/dpn_s2s" --config-name "$ROW" \
    task.data="$DATA" common.user_dir="$REPO/fairseq_local" checkpoint.save_dir="$SAVE" \
    task.source_lang="$SRC" task.target_lang="$TGT" hydra.run.dir="$SAVE/hydra" "${CPU[@]}" "$@"
fi
CKPT="$SAVE/checkpoint_best.pt"
[[ -f "$CKPT" ]] || { echo "dpn_s2s.sh: no checkpoint $CKPT (train first, without --no-train)" >&2; exit 1; }

fairseq-generate "$DATA" --user-dir "$REPO/fairseq_local" --path "$CKPT" "${LANGS[@]}" --gen-subset "$SUBSET" \
  "${GEN[@]}" --batch-size 64 --remove-bpe ${CPU:+--cpu} > "$SAVE/$SUBSET.gen.tmp"
mv "$SAVE/$SUBSET.gen.tmp" "$SAVE/$SUBSET.gen"
grep '^H-' "$SAVE/$SUBSET.gen" | sed 's/^H-//' | sort -n -k1,1 | cut -f3 > "$SAVE/$SUBSET.hyp"
grep '^T-' "$SAVE/$SUBSET.gen" | sed 's/^T-//' | sort -n -k1,1 | cut -f2 > "$SAVE/$SUBSET.ref"
tail -n 1 "$SAVE/$SUBSET.gen"  # fairseq's tokenized BLEU (the paper's multi-bleu.perl setting)
if [[ -n "$REFS" ]]; then REF_ARGS=(); for r in $REFS; do REF_ARGS+=(--ref "$r"); done
else REF_ARGS=(--ref "$SAVE/$SUBSET.ref"); fi
bash "$REPO/scripts/score.sh" "${SCORE[@]}" "${REF_ARGS[@]}" --hyp "$SAVE/$SUBSET.hyp" | tee "$SAVE/$SUBSET.score"

if grep -q '_name: dpn_s2s' "$CFG"; then  # Table 5 and Figure 2 for DPN models
  python "$REPO/scripts/analysis/dpn_alignment_entropy.py" "$DATA" --path "$CKPT" "${LANGS[@]}" \
    --gen-subset "$SUBSET" --json "$SAVE/$SUBSET.entropy.json" --heatmap "$SAVE/$SUBSET.alignment.png" \
    ${CPU:+--cpu} | tee "$SAVE/$SUBSET.entropy"
fi
