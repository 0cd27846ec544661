#!/usr/bin/env bash
# LatticeNMT on NIST Chinese-English (Su et al. 2017, Tables 1-2): train Table 1 rows on data made by
# scripts/recipes/prepare_nist_zhen.sh --mode lattice, decode every test set (MT02/03/04/06/08) and
# score case-insensitive BLEU of the detokenized output against the four raw references
# (scripts/lib/common.sh score_translation).
#
#   bash scripts/recipes/lattice_nist_zhen.sh --data NIST/bin-lattice --refs-dir NIST/refs \
#       [--rows "dwl_gating dwl_pooling swl_gating swl_pooling"] [--beam 10] [--one-best] [--save-dir DIR]
#       [--cpu] [--small] [--score-only] [-- HYDRA_OVERRIDES...]
#
# Rows are configs/lattice/ROW.yaml.  The word-level rows (rnnsearch_word) need chain data: run
# prepare_nist_zhen.sh with --segmenters jieba (or thulac, snownlp; the char row: --segmenters char)
# into another --out and pass that bin-lattice dir.  --one-best decodes with each lattice's primary
# path as a chain (Table 2).  Test sets: DATA/test_sets.txt maps test, test1, ... to names.
# Each row trains in --save-dir/ROW (default checkpoints/lattice/ROW); an interrupted training
# resumes from its checkpoint_last.pt when the recipe runs again, and only a finished one (ROW/train.done)
# is skipped.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
opt --data DATA; opt --refs-dir REFS; opt --rows ROWS dwl_gating; opt --beam BEAM 10
flag_args --one-best ONEBEST --lattice-one-best; run_options --score-only
parse_options "$@"
[ -d "$DATA" ] && [ -f "$DATA/test_sets.txt" ] || die "--data must be a bin-lattice dir of prepare_nist_zhen.sh"
[ -n "$REFS" ] && [ -d "$REFS" ] || die "--refs-dir DIR (prepare_nist_zhen.sh's OUT/refs) is required"
for row in $ROWS; do row_config lattice "$row" "--rows $row"; done
activate_env
DATA=$(abs_dir "$DATA"); REFS=$(abs_dir "$REFS"); SAVE_ROOT=$(abs_dir "${SAVE:-$REPO_ROOT/checkpoints/lattice}")
mapfile -t NAMES <"$DATA/test_sets.txt"
for row in $ROWS; do
  SAVE="$SAVE_ROOT/$row"; mkdir -p "$SAVE"
  if [ "$SCORE_ONLY" = 0 ] && [ ! -f "$SAVE/train.done" ]; then
    [ ! -f "$SAVE/checkpoint_last.pt" ] || say "$row: resuming the interrupted training from $SAVE/checkpoint_last.pt"
    row_config lattice "$row"; train_row "$DATA" "$SAVE" "$CFG"
    touch "$SAVE/train.done"
  fi
  for k in "${!NAMES[@]}"; do
    name=${NAMES[$k]}; subset=test$(nsuffix "$k")
    out="$SAVE/$name${ONEBEST:+.1best}"
    if [ "$SCORE_ONLY" = 0 ]; then
      translate "$DATA" "$SAVE/checkpoint_best.pt" "$out.gen" --task lattice_translation --gen-subset "$subset" \
        --beam "$BEAM" "${ONEBEST[@]}"
    fi
    reference_args "$REFS/$name.ref"
    echo "== $row $name${ONEBEST:+ (1-best chains)}"
    score_translation "$out.gen" "$out" --lowercase "${REF_ARGS[@]}"
  done
done
