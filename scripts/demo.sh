#!/usr/bin/env bash
# End-to-end demo on an embedded default: synthetic corpus -> BPE -> fairseq-preprocess ->
# fairseq-train (one of our architectures) -> fairseq-generate --beam 5 -> sacrebleu.
#
# usage: bash scripts/demo.sh [--out DIR] [--arch ARCH] [--minutes M] [--train-size N]
#   --out DIR        work directory (default: demo_out/); it is replaced on each run
#   --arch ARCH      architecture to train (default: mc_rnn_demo, a small MC-RNN-3)
#   --minutes M      training time budget in minutes (default: 3)
#   --train-size N   synthetic training pairs (default: 6000)
# Needs nothing installed: the first run builds .venv (see scripts/setup_env.sh).
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
out="$REPO_ROOT/demo_out" arch="${DEMO_ARCH:-mc_rnn_demo}" minutes=3 ntrain=6000
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage_from_header; exit 0 ;;
    --out) need_val "$@"; out=$2; shift 2 ;;
    --arch) need_val "$@"; arch=$2; shift 2 ;;
    --minutes) need_val "$@"; minutes=$2; shift 2 ;;
    --train-size) need_val "$@"; ntrain=$2; shift 2 ;;
    *) die "unknown option '$1' (see -h)" ;;
  esac
done
[[ "$minutes" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--minutes must be a number, not '$minutes'"
[[ "$ntrain" =~ ^[1-9][0-9]*$ ]] || die "--train-size must be a positive integer, not '$ntrain'"
start=$(date +%s)
say "step 0/5: environment"
source "$REPO_ROOT/scripts/setup_env.sh"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"
python -c "import fairseq_local; from fairseq.models import ARCH_MODEL_REGISTRY as R; import sys; sys.exit(0 if '$arch' in R else 1)" \
  || die "--arch '$arch' is not a registered architecture"
rm -rf "$out"; mkdir -p "$out"

say "step 1/5: synthetic parallel corpus ($ntrain train pairs; reordering + agreement, see fairseq_local/data/synthetic.py)"
python "$REPO_ROOT/scripts/make_synthetic_corpus.py" "$out/raw" --train "$ntrain" --valid 300 --test 300
echo "  e.g.  src: $(head -1 "$out/raw/test.src")" >&2
echo "        tgt: $(head -1 "$out/raw/test.tgt")" >&2

say "step 2/5: sentencepiece BPE + fairseq-preprocess"
bash "$REPO_ROOT/scripts/preprocess.sh" --src src --tgt tgt --train "$out/raw/train" --valid "$out/raw/valid" \
  --test "$out/raw/test" --destdir "$out/bin" --bpe sentencepiece --bpe-size 300 2>"$out/preprocess.log" \
  || { tail -5 "$out/preprocess.log" >&2; die "preprocessing failed (log: $out/preprocess.log)"; }

say "step 3/5: fairseq-train --arch $arch (budget ${minutes} min; progress below)"
hours=$(python -c "print($minutes/60)")
bash "$REPO_ROOT/scripts/train.sh" --data "$out/bin" --save-dir "$out/checkpoints" --arch "$arch" --cpu -- \
  --optimizer adam --lr 0.003 --clip-norm 1.0 --lr-scheduler inverse_sqrt --warmup-updates 100 \
  --max-tokens 2000 --max-epoch 30 --stop-time-hours "$hours" --criterion label_smoothed_cross_entropy \
  --label-smoothing 0.1 --no-epoch-checkpoints --log-format simple --log-interval 50 --num-workers 0 \
  --seed 1 2>&1 | grep --line-buffered -E "epoch [0-9]+ \| (loss|valid)|\| valid on|done training|Error|error" \
  | sed -u 's/^.*| INFO | //' >&2
[ -f "$out/checkpoints/checkpoint_best.pt" ] || die "training produced no checkpoint (see above)"

say "step 4/5: fairseq-generate --beam 5 on the test split"
bash "$REPO_ROOT/scripts/generate.sh" --data "$out/bin" --path "$out/checkpoints/checkpoint_best.pt" \
  --out "$out/gen" --subset test --beam 5 -- --max-len-a 1.5 --max-len-b 10 2>"$out/generate.log" \
  || { tail -5 "$out/generate.log" >&2; die "generation failed (log: $out/generate.log)"; }
echo "  e.g.  hyp: $(head -1 "$out/gen/hyp.txt")" >&2
echo "        ref: $(head -1 "$out/gen/ref.txt")" >&2

say "step 5/5: sacrebleu"
python "$REPO_ROOT/scripts/score.py" --hyp "$out/gen/hyp.txt" --ref "$out/gen/ref.txt"
echo "  (for scale: an untrained system that copies the source scores" \
  "$(python "$REPO_ROOT/scripts/score.py" --hyp "$out/raw/test.src" --ref "$out/raw/test.tgt" | head -1 | sed 's/.*= \([0-9.]*\).*/\1/') BLEU)" >&2
say "demo finished in $(( $(date +%s) - start )) s; outputs in $out"
