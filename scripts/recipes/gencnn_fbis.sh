#!/usr/bin/env bash
# genCNN paper, FBIS-style perplexity (Table 3): the English side of a parallel corpus (user-supplied,
# tokenized, one sentence per line), 40k-word vocabulary (<unk> for the rest, EOS counted), then each
# Table 3 row (genCNN, TIME-ARROW only, TIME-FLOW only, αCNN only) trained with its YAML from
# configs/gencnn/ and evaluated with fairseq-eval-lm on the test file.  The paper's 200-cluster
# softmax is replaced by fairseq's adaptive softmax (cutoffs 2000,10000).
#
#   bash scripts/recipes/gencnn_fbis.sh --train fbis.en --valid mt06.en --test mt08.en \
#        [--out data/fbis] [--rows "gencnn time_arrow_only time_flow_only alpha_only"] [--cpu] [-- OVERRIDES...]
set -euo pipefail
# use the project venv unless fairseq is already on PATH
command -v fairseq-train >/dev/null 2>&1 || source "$(dirname "$0")/../setup_env.sh"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
OUT=data/fbis; TRAIN=; VALID=; TEST=; CPU=(); ROWS="gencnn time_arrow_only time_flow_only alpha_only"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --train) TRAIN="$2"; shift 2 ;;
    --valid) VALID="$2"; shift 2 ;;
    --test) TEST="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --rows) ROWS="$2"; shift 2 ;;
    --cpu) CPU=(common.cpu=true); shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "gencnn_fbis.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
for f in TRAIN VALID TEST; do
  [[ -n "${!f}" ]] || { echo "gencnn_fbis.sh: --${f,,} FILE is required" >&2; exit 2; }
  [[ -f "${!f}" ]] || { echo "gencnn_fbis.sh: --${f,,} ${!f}: no such file" >&2; exit 2; }
done
for row in $ROWS; do
  [[ -f "$REPO/configs/gencnn/table3_fbis_$row.yaml" ]] || { echo "gencnn_fbis.sh: --rows: unknown row '$row'" >&2; exit 2; }
done
if [[ ! -f "$OUT/bin/dict.txt" ]]; then
  bash "$REPO/scripts/preprocess.sh" --lm --train "$TRAIN" --valid "$VALID" --test "$TEST" --bpe none \
    --nwords 40000 --destdir "$OUT/bin"
fi
OUT="$(cd "$OUT" && pwd)"
for row in $ROWS; do
  SAVE="$REPO/checkpoints/gencnn/table3_fbis_$row"
  fairseq-hydra-train --config-dir "$REPO/configs/gencnn" --config-name "table3_fbis_$row" \
    task.data="$OUT/bin" common.user_dir="$REPO/fairseq_local" checkpoint.save_dir="$SAVE" \
    hydra.run.dir="$SAVE/hydra" "${CPU[@]}" "$@"
  fairseq-eval-lm "$OUT/bin" --user-dir "$REPO/fairseq_local" --task language_modeling \
    --sample-break-mode eos --path "$SAVE/checkpoint_best.pt" --gen-subset test --batch-size 64 \
    ${CPU:+--cpu} 2>&1 | grep -E "Loss|Perplexity" | sed "s/^/$row: /" | tee "$SAVE/test.ppl"
done
