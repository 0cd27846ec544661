#!/usr/bin/env bash
# MC-RNN paper, IWSLT14 De-En (Tables 2 and 5): prepare (if needed), train one table row with its
# Hydra config, translate the test set with beam 5 and score with sacrebleu.
#
#   bash scripts/recipes/mc_rnn_iwslt14.sh [--row table2_mc_rnn_3] [--data data/iwslt14.de-en]
#        [--bpe-size 25000] [--cpu] [-- HYDRA_OVERRIDES...]
#
# Rows: table2_baseline_rnn table2_mc_rnn_{2,3,4} table5_baseline_rnn_large table5_baseline_rnn_deep
# (configs/mc_rnn/<row>.yaml).  Training: Adam 1e-3, learning rate halved when the validation loss
# stops improving, early stop after 5 stale validations (the paper's schedule).  BLEU is
# sacrebleu with --tokenize none on the tokenized, lowercased, BPE-removed test set (the metric of
# the IWSLT14 literature, = multi-bleu.perl).  Outputs under checkpoints/mc_rnn/<row>/.
set -euo pipefail
# use the project venv unless fairseq is already on PATH
command -v fairseq-train >/dev/null 2>&1 || source "$(dirname "$0")/../setup_env.sh"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
ROW=table2_mc_rnn_3; DATA=data/iwslt14.de-en; BPE_SIZE=25000; CPU=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --row) ROW="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --bpe-size) BPE_SIZE="$2"; shift 2 ;;
    --cpu) CPU=(common.cpu=true); shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "mc_rnn_iwslt14.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
CFG="$REPO/configs/mc_rnn/$ROW.yaml"
[[ -f "$CFG" ]] || { echo "mc_rnn_iwslt14.sh: --row $ROW: no $CFG" >&2; exit 2; }
DATA="$(mkdir -p "$DATA" && cd "$DATA" && pwd)"
[[ -f "$DATA/bin/dict.de.txt" ]] || bash "$REPO/scripts/recipes/prepare_iwslt14.sh" --out "$DATA" --bpe-size "$BPE_SIZE"
SAVE="$REPO/checkpoints/mc_rnn/$ROW"
fairseq-hydra-train --config-dir "$REPO/configs/mc_rnn" --config-name "$ROW" \
  task.data="$DATA/bin" common.user_dir="$REPO/fairseq_local" checkpoint.save_dir="$SAVE" \
  hydra.run.dir="$SAVE/hydra" "${CPU[@]}" "$@"
fairseq-generate "$DATA/bin" --user-dir "$REPO/fairseq_local" --path "$SAVE/checkpoint_best.pt" \
  --gen-subset test --beam 5 --batch-size 64 --remove-bpe ${CPU:+--cpu} > "$SAVE/test.gen.tmp"
mv "$SAVE/test.gen.tmp" "$SAVE/test.gen"
grep '^H-' "$SAVE/test.gen" | sed 's/^H-//' | sort -n -k1,1 | cut -f3 > "$SAVE/test.hyp"
grep '^T-' "$SAVE/test.gen" | sed 's/^T-//' | sort -n -k1,1 | cut -f2 > "$SAVE/test.ref"
bash "$REPO/scripts/score.sh" --hyp "$SAVE/test.hyp" --ref "$SAVE/test.ref" --tokenize none | tee "$SAVE/test.bleu"
echo "BLEU of $ROW written to $SAVE/test.bleu"
