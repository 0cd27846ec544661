#!/usr/bin/env bash
# Small LatticeNMT recipe on any parallel zh-en corpus given by path (Su et al., AAAI 2017).
#
#   bash scripts/recipes/lattice_zh_en_small.sh CORPUS_DIR WORK_DIR
#
# CORPUS_DIR holds train.zh train.en valid.zh valid.en (optionally test.zh test.en), raw text, one
# sentence per line, e.g. ../shared/data/tatoeba-zh-en.  Tatoeba sentences are CC-BY 2.0 (France),
# tatoeba.org; each pair's authors are listed in CORPUS_DIR/*.attribution: this recipe copies those
# files next to everything it derives from the corpus, keep them with the data.
#
# Stages (skip finished ones by leaving their outputs in place):
#   1. English: Moses tokenization (sacremoses); the paper's length filter (<= MAX_CHARS source
#      characters, <= MAX_WORDS target words) on the training pairs only: no dev sentence is dropped;
#   2. Chinese: lattices from jieba+thulac+snownlp (jieba = primary path), jieba chains (word-level
#      baseline) and character chains (character-level baseline), scripts/build_lattices.py;
#   3. binarize each with scripts/preprocess_lattices.py (word types seen >= THRESHOLD times, 50k cap);
#   4. unless PREP_ONLY=1: train DWL+gating, word-level and char-level RNNSearch for MINUTES minutes
#      each (same wall time) with ARCH_ARGS, then decode valid (beam 5) and print case-insensitive
#      BLEU of the detokenized output against CORPUS_DIR/valid.en (scripts/lib/common.sh score_translation).
# What to expect: a quick look, not the page's results. After MINUTES (4) minutes of CPU each the
# systems are far from trained: about 0-2 valid BLEU each. The lattice page's ~30 BLEU
# (docs/lattice.md, Results) comes from training every system to early stopping:
#   python scripts/reproduce.py lattice --scale cpu
# about 20 minutes of training per system and seed on CPU (16-39 min on the page), over an hour for
# its four systems.
# Environment: WORKERS (2), THRESHOLD (2), MINUTES (4), MAX_CHARS (70), MAX_WORDS (50), ARCH_ARGS
# (smaller than the paper's sizes, for CPU), EXTRA_TRAIN_ARGS, PREP_ONLY, SYSTEMS ("lattice word char"), SMALL=1 (a smoke run:
# 2 updates, beam 2), SCORE_ONLY=1 (re-score WORK/gen.KIND/generate-valid.txt).
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
case "${1:-}" in -h|--help) usage_from_header; exit 0 ;; esac
[ $# -eq 2 ] || die "usage: lattice_zh_en_small.sh CORPUS_DIR WORK_DIR"
activate_env
CORPUS=$(cd "$1" 2>/dev/null && pwd) || die "CORPUS_DIR '$1' does not exist"
WORK=$(abs_dir "$2")
REPO=$REPO_ROOT
PY=${PYTHON:-python}
SYSTEMS=${SYSTEMS:-lattice word char}
WORKERS=${WORKERS:-2}
THRESHOLD=${THRESHOLD:-2}
MINUTES=${MINUTES:-4}
MAX_CHARS=${MAX_CHARS:-70}
MAX_WORDS=${MAX_WORDS:-50}
ARCH_ARGS=${ARCH_ARGS:---encoder-embed-dim 128 --decoder-embed-dim 128 --encoder-hidden-size 256 --decoder-hidden-size 256 --dropout 0.2}
SPLITS="train valid"
[ -f "$CORPUS/test.zh" ] && SPLITS="$SPLITS test"
for s in $SPLITS; do
  for l in zh en; do [ -f "$CORPUS/$s.$l" ] || { echo "error: $CORPUS/$s.$l not found" >&2; exit 1; }; done
done
mkdir -p "$WORK/raw"
cp "$CORPUS"/*.attribution "$WORK/raw/" 2>/dev/null || true

# 1. English tokenization (written atomically); the paper's length filter applies to the training
#    pairs only (WORK/raw/train.zh + train.en): dev sentences of any length are validated and translated
for s in $SPLITS; do
  tok=$WORK/raw/$s.en; [ "$s" = train ] && tok=$WORK/raw/train.all.en
  [ -f "$tok" ] || moses_tok en "$CORPUS/$s.en" "$tok"
done
[ -f "$WORK/raw/train.en" ] || $PY - "$CORPUS/train.zh" "$WORK/raw/train.all.en" "$WORK/raw/train" "$MAX_CHARS" "$MAX_WORDS" <<'EOF'
import os, sys
zh_path, en_path, out, maxc, maxw = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
zh = open(zh_path, encoding="utf-8").read().splitlines()
en = open(en_path, encoding="utf-8").read().splitlines()
if len(zh) != len(en):
    sys.exit(f"lattice_zh_en_small.sh: error: {zh_path} has {len(zh)} lines, {en_path} has {len(en)}")
kept = [(z, e) for z, e in zip(zh, en)
        if z.strip() and e.strip() and len("".join(z.split())) <= maxc and len(e.split()) <= maxw]
for lang, k in (("zh", 0), ("en", 1)):  # train.en last: its presence marks the stage as done
    with open(f"{out}.{lang}.tmp", "w", encoding="utf-8") as f:
        f.writelines(pair[k] + "\n" for pair in kept)
    os.replace(f"{out}.{lang}.tmp", f"{out}.{lang}")
print(f"train: kept {len(kept)} of {len(zh)} pairs (<= {maxc} characters, <= {maxw} words)", file=sys.stderr)
EOF

# 2. lattices and chains
for kind in $SYSTEMS; do
  case $kind in lattice) SEG=jieba,thulac,snownlp;; word) SEG=jieba;; word_*) SEG=${kind#word_};; char) SEG=char;;
    *) die "SYSTEMS: unknown data kind '$kind' (lattice, word, word_thulac, word_snownlp, char)";; esac
  mkdir -p "$WORK/raw/$kind"
  for s in $SPLITS; do
    src=$CORPUS/$s.zh; [ "$s" = train ] && src=$WORK/raw/train.zh
    [ -f "$WORK/raw/$kind/$s.zh" ] || nice -n 10 $PY "$REPO/scripts/build_lattices.py" --input "$src" \
        --output "$WORK/raw/$kind/$s.zh" --segmenters $SEG --workers "$WORKERS"
    ln -sf "$WORK/raw/$s.en" "$WORK/raw/$kind/$s.en"
  done
done

# 3. binarize
for kind in $SYSTEMS; do
  if [ ! -f "$WORK/bin/$kind/dict.zh.txt" ]; then
    ARGS=(--source-lang zh --target-lang en --trainpref "$WORK/raw/$kind/train" --validpref "$WORK/raw/$kind/valid"
          --destdir "$WORK/bin/$kind" --thresholdsrc "$THRESHOLD" --thresholdtgt "$THRESHOLD" --workers "$WORKERS")
    [ -f "$WORK/raw/$kind/test.zh" ] && ARGS+=(--testpref "$WORK/raw/$kind/test")
    $PY "$REPO/scripts/preprocess_lattices.py" "${ARGS[@]}"
    cp "$WORK"/raw/*.attribution "$WORK/bin/$kind/" 2>/dev/null || true
  fi
done
[ "${PREP_ONLY:-0}" = 1 ] && exit 0

# 4. same wall time for each system, then valid BLEU
HOURS=$($PY -c "print($MINUTES / 60)")
BUDGET=(--stop-time-hours "$HOURS" --max-epoch 1000); [ "${SMALL:-0}" = 1 ] && BUDGET=()
for sys in lattice:lattice_dwl_gating word:rnnsearch_zh_word char:rnnsearch_zh_char; do
  kind=${sys%%:*}; arch=${sys#*:}
  [[ " $SYSTEMS " == *" $kind "* ]] || continue
  ckpt=$WORK/ckpt/$kind
  if [ "${SCORE_ONLY:-0}" != 1 ]; then
    nice -n 10 fairseq-train "$WORK/bin/$kind" --user-dir "$USER_DIR" --task lattice_translation \
        --arch "$arch" $ARCH_ARGS --optimizer rmsprop --lr 5e-4 --clip-norm 1.0 --sentence-avg --batch-size 80 \
        "${BUDGET[@]}" --save-dir "$ckpt" --no-epoch-checkpoints \
        --log-format simple --log-interval 50 --num-workers 0 --cpu "${SMALL_CLI[@]}" ${EXTRA_TRAIN_ARGS:-} \
        > "$WORK/train.$kind.log" 2>&1 || { tail -n 5 "$WORK/train.$kind.log" >&2; die "training $kind failed (log: $WORK/train.$kind.log)"; }
    nice -n 10 fairseq-generate "$WORK/bin/$kind" --user-dir "$USER_DIR" --task lattice_translation \
        --path "$ckpt/checkpoint_last.pt" --gen-subset valid --beam 5 --batch-size 64 --cpu \
        --max-len-a 1.5 --max-len-b 10 "${SMALL_GEN[@]}" --results-path "$WORK/gen.$kind" > "$WORK/gen.$kind.log" 2>&1 \
        || { tail -n 5 "$WORK/gen.$kind.log" >&2; die "decoding $kind failed (log: $WORK/gen.$kind.log)"; }
  fi
  updates=$(grep -o "num_updates [0-9]*" "$WORK/train.$kind.log" | tail -1 || true)
  echo "== $kind ($arch) after $MINUTES min, $updates: valid BLEU"
  score_translation "$WORK/gen.$kind/generate-valid.txt" "$WORK/gen.$kind/valid" --lowercase --ref "$CORPUS/valid.en"
done
echo "== expect about 0-2 BLEU here: $MINUTES minutes of CPU per system is far from trained. The lattice page's" \
     "~30 BLEU comes from training each system to early stopping: python scripts/reproduce.py lattice --scale cpu" \
     "(about 20 minutes of training per system and seed on CPU, over an hour for its four systems; docs/lattice.md, Results)"
