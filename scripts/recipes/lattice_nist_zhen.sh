#!/usr/bin/env bash
# LatticeNMT on NIST Chinese-English (Su et al. 2017, Tables 1-2): train Table 1 rows on data made by
# scripts/recipes/prepare_nist_zhen.sh --mode lattice, decode every test set (MT02/03/04/06/08) and
# score case-insensitive BLEU against the four references with scripts/score.sh.
#
#   bash scripts/recipes/lattice_nist_zhen.sh --data NIST/bin-lattice --refs-dir NIST/refs \
#       [--rows "dwl_gating dwl_pooling swl_gating swl_pooling"] [--beam 10] [--one-best] [--cpu] [-- HYDRA_OVERRIDES...]
#
# Rows are configs/lattice/ROW.yaml.  The word-level rows (rnnsearch_word) need chain data: run
# prepare_nist_zhen.sh with --segmenters jieba (or thulac, snownlp; the char row: --segmenters char)
# into another --out and pass that bin-lattice dir.  --one-best decodes with each lattice's primary
# path as a chain (Table 2).  Test sets: DATA/test_sets.txt maps test, test1, ... to names.
set -euo pipefail
# use the project venv unless fairseq is already on PATH
command -v fairseq-train >/dev/null 2>&1 || source "$(dirname "$0")/../setup_env.sh"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
DATA="" REFS="" ROWS="dwl_gating" BEAM=10 ONEBEST=() CPU=() CPU_H=()
die() { echo "lattice_nist_zhen.sh: error: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --data) DATA=$2; shift 2 ;;
    --refs-dir) REFS=$2; shift 2 ;;
    --rows) ROWS=$2; shift 2 ;;
    --beam) BEAM=$2; shift 2 ;;
    --one-best) ONEBEST=(--lattice-one-best); shift ;;
    --cpu) CPU=(--cpu); CPU_H=(common.cpu=true); shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) die "unknown option $1" ;;
  esac
done
[ -d "$DATA" ] && [ -f "$DATA/test_sets.txt" ] || die "--data must be a bin-lattice dir of prepare_nist_zhen.sh"
[ -d "$REFS" ] || die "--refs-dir DIR (prepare_nist_zhen.sh's OUT/refs) is required"
DATA=$(cd "$DATA" && pwd)
mapfile -t NAMES < "$DATA/test_sets.txt"
tok_lc() {  # tokenize + lowercase references like the training targets
  python - "$1" "$2" <<'EOF'
import sys
from sacremoses import MosesTokenizer
t = MosesTokenizer(lang="en")
with open(sys.argv[1], encoding="utf-8") as f, open(sys.argv[2], "w", encoding="utf-8") as g:
    for line in f:
        g.write(t.tokenize(line.strip().lower(), return_str=True, escape=False) + "\n")
EOF
}
for row in $ROWS; do
  [ -f "$REPO/configs/lattice/$row.yaml" ] || die "no configs/lattice/$row.yaml"
  SAVE="$REPO/checkpoints/lattice/$row"
  mkdir -p "$SAVE"
  if [ ! -f "$SAVE/checkpoint_best.pt" ]; then
    fairseq-hydra-train --config-dir "$REPO/configs/lattice" --config-name "$row" task.data="$DATA" \
      common.user_dir="$REPO/fairseq_local" checkpoint.save_dir="$SAVE" hydra.run.dir="$SAVE/hydra" \
      "${CPU_H[@]}" "$@"
  fi
  for k in "${!NAMES[@]}"; do
    name=${NAMES[$k]}; subset=test; [ "$k" -gt 0 ] && subset=test$k
    out="$SAVE/$name${ONEBEST:+.1best}"
    fairseq-generate "$DATA" --user-dir "$REPO/fairseq_local" --task lattice_translation --path "$SAVE/checkpoint_best.pt" \
      --gen-subset "$subset" --beam "$BEAM" --batch-size 64 "${ONEBEST[@]}" "${CPU[@]}" > "$out.gen.tmp"
    mv "$out.gen.tmp" "$out.gen"
    grep '^H-' "$out.gen" | sed 's/^H-//' | sort -n -k1,1 | cut -f3 > "$out.hyp"
    refs=()
    for r in "$REFS/$name".ref*; do tok_lc "$r" "$out.$(basename "$r").tok"; refs+=(--ref "$out.$(basename "$r").tok"); done
    [ ${#refs[@]} -gt 0 ] || die "no references $REFS/$name.ref*"
    echo "== $row $name${ONEBEST:+ (1-best chains)}"
    bash "$REPO/scripts/score.sh" --lowercase "${refs[@]}" --hyp "$out.hyp" | tee "$out.score"
  done
done
