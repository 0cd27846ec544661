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
DATA="" REFS="" ROWS="dwl_gating" BEAM=10 ONEBEST=() CPU=() SAVE_ROOT="" SCORE_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --data) need_val "$@"; DATA=$2; shift 2 ;;
    --refs-dir) need_val "$@"; REFS=$2; shift 2 ;;
    --rows) need_val "$@"; ROWS=$2; shift 2 ;;
    --beam) need_val "$@"; BEAM=$2; shift 2 ;;
    --one-best) ONEBEST=(--lattice-one-best); shift ;;
    --save-dir) need_val "$@"; SAVE_ROOT=$2; shift 2 ;;
    --cpu) CPU=(--cpu); shift ;;
    --small) set_small; shift ;;
    --score-only) SCORE_ONLY=1; shift ;;
    --) shift; break ;;
    -h|--help) usage_from_header; exit 0 ;;
    *) die "unknown option $1" ;;
  esac
done
[ -d "$DATA" ] && [ -f "$DATA/test_sets.txt" ] || die "--data must be a bin-lattice dir of prepare_nist_zhen.sh"
[ -n "$REFS" ] && [ -d "$REFS" ] || die "--refs-dir DIR (prepare_nist_zhen.sh's OUT/refs) is required"
for row in $ROWS; do need_file "$REPO_ROOT/configs/lattice/$row.yaml" "config of --rows $row"; done
activate_env
DATA=$(abs_dir "$DATA"); REFS=$(abs_dir "$REFS"); SAVE_ROOT=$(abs_dir "${SAVE_ROOT:-$REPO_ROOT/checkpoints/lattice}")
mapfile -t NAMES <"$DATA/test_sets.txt"
for row in $ROWS; do
  SAVE="$SAVE_ROOT/$row"; mkdir -p "$SAVE"
  if [ "$SCORE_ONLY" = 0 ] && [ ! -f "$SAVE/train.done" ]; then
    [ ! -f "$SAVE/checkpoint_last.pt" ] || say "$row: resuming the interrupted training from $SAVE/checkpoint_last.pt"
    bash "$REPO_ROOT/scripts/train.sh" --data "$DATA" --save-dir "$SAVE" --config "$REPO_ROOT/configs/lattice/$row.yaml" \
      "${CPU[@]}" -- "${SMALL_HYDRA[@]}" "$@"
    touch "$SAVE/train.done"
  fi
  for k in "${!NAMES[@]}"; do
    name=${NAMES[$k]}; subset=test$(nsuffix "$k")
    out="$SAVE/$name${ONEBEST:+.1best}"
    if [ "$SCORE_ONLY" = 0 ]; then
      fairseq-generate "$DATA" --user-dir "$USER_DIR" --task lattice_translation --path "$SAVE/checkpoint_best.pt" \
        --gen-subset "$subset" --beam "$BEAM" --batch-size 64 "${ONEBEST[@]}" "${CPU[@]}" "${SMALL_GEN[@]}" >"$out.gen.tmp"
      mv "$out.gen.tmp" "$out.gen"
    fi
    refs=(); for r in "$REFS/$name".ref*; do [ -f "$r" ] && refs+=(--ref "$r"); done
    [ ${#refs[@]} -gt 0 ] || die "no references $REFS/$name.ref*"
    echo "== $row $name${ONEBEST:+ (1-best chains)}"
    score_translation "$out.gen" "$out" --lowercase "${refs[@]}"
  done
done
