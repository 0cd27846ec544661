#!/usr/bin/env bash
# MC-RNN paper, Gigaword headline generation (Table 3): train one table row with its Hydra config on
# data prepared by scripts/recipes/prepare_gigaword.sh, decode the test set with beam 10 and
# report ROUGE-1/2/L F1 (rouge-score) through scripts/score.sh --rouge.
#
#   bash scripts/recipes/mc_rnn_gigaword.sh --data BIN_DIR [--row table3_mc_rnn_3] [--cpu] [-- HYDRA_OVERRIDES...]
#
# Rows: table3_baseline_rnn table3_mc_rnn_{2,3,4}.  BIN_DIR holds fairseq-preprocess output with
# languages article -> headline (override with -- task.source_lang=.. task.target_lang=..).
set -euo pipefail
# use the project venv unless fairseq is already on PATH
command -v fairseq-train >/dev/null 2>&1 || source "$(dirname "$0")/../setup_env.sh"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
ROW=table3_mc_rnn_3; DATA=""; CPU=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --row) ROW="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --cpu) CPU=(common.cpu=true); shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "mc_rnn_gigaword.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -n "$DATA" && -d "$DATA" ]] || { echo "mc_rnn_gigaword.sh: --data BIN_DIR is required (see scripts/recipes/prepare_gigaword.sh)" >&2; exit 2; }
CFG="$REPO/configs/mc_rnn/$ROW.yaml"
[[ -f "$CFG" ]] || { echo "mc_rnn_gigaword.sh: --row $ROW: no $CFG" >&2; exit 2; }
DATA="$(cd "$DATA" && pwd)"
SAVE="$REPO/checkpoints/mc_rnn/$ROW"
fairseq-hydra-train --config-dir "$REPO/configs/mc_rnn" --config-name "$ROW" \
  task.data="$DATA" common.user_dir="$REPO/fairseq_local" checkpoint.save_dir="$SAVE" \
  hydra.run.dir="$SAVE/hydra" "${CPU[@]}" "$@"
fairseq-generate "$DATA" --user-dir "$REPO/fairseq_local" --path "$SAVE/checkpoint_best.pt" \
  --gen-subset test --beam 10 --batch-size 64 --remove-bpe ${CPU:+--cpu} > "$SAVE/test.gen.tmp"
mv "$SAVE/test.gen.tmp" "$SAVE/test.gen"
grep '^H-' "$SAVE/test.gen" | sed 's/^H-//' | sort -n -k1,1 | cut -f3 > "$SAVE/test.hyp"
grep '^T-' "$SAVE/test.gen" | sed 's/^T-//' | sort -n -k1,1 | cut -f2 > "$SAVE/test.ref"
bash "$REPO/scripts/score.sh" --rouge --ref "$SAVE/test.ref" --hyp "$SAVE/test.hyp" | tee "$SAVE/test.rouge"
