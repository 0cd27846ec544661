#!/usr/bin/env bash
# DPN-S2S on NIST Chinese-English (Table 2): train a row on data prepared by
# scripts/recipes/prepare_nist_zhen.sh (user-supplied LDC corpora; the paper learns a separate 25k BPE
# per side and uses NIST03 as valid, NIST04/05/06/08/12 as test sets), decode each test set with
# beam 10 and score it against its four references (lowercased BLEU). Prepare with
#   bash scripts/recipes/prepare_nist_zhen.sh --out NIST --mode bpe --bpe-size 25000 --valid mt03 \
#     --train-zh "..." --train-en "..." --set mt03=..,.. --set mt04=..,.. --set mt05=..,.. \
#     --set mt06=..,.. --set mt08=..,.. --set mt12=..,..
# then: bash scripts/recipes/dpn_s2s_nist_zhen.sh --data NIST/bin-bpe --refs-dir NIST/refs
#
#   bash scripts/recipes/dpn_s2s_nist_zhen.sh --data BIN_DIR [--rows "table2_dpn_s2s table2_cnn table2_san"]
#        [--subsets "test:mt04 test1:mt05 test2:mt06 test3:mt08 test4:mt12"] [--refs-dir DIR]
#        [--save-dir DIR] [--cpu] [--small] [--score-only] [-- HYDRA_OVERRIDES...]
#
# --subsets maps fairseq subsets of BIN_DIR to test-set names; with --refs-dir the references are
# DIR/NAME.ref0 .. DIR/NAME.ref3: detokenized hypotheses against those raw references,
# case-insensitive multi-reference sacrebleu (scripts/lib/common.sh score_translation); without
# --refs-dir only tokenized BLEU against the binarized reference, labelled as such.
# Each row in --save-dir/ROW (default checkpoints/dpn_s2s/ROW); decodings in it as SUBSET.gen.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
opt --data DATA; opt --rows ROWS "table2_dpn_s2s table2_cnn table2_san"
opt --subsets SUBSETS "test:mt04 test1:mt05 test2:mt06 test3:mt08 test4:mt12"; opt --refs-dir REFS_DIR
opt --save-dir SAVE; forward_options
parse_options "$@"
[ -n "$DATA" ] || die "--data BIN_DIR is required (see scripts/recipes/prepare_nist_zhen.sh)"
need_dir "$DATA" "--data"
[ -z "$REFS_DIR" ] || need_dir "$REFS_DIR" "--refs-dir"
for row in $ROWS; do [[ $row == table2_* ]] || die "--rows: $row is not a Table 2 row"; done
[ -z "$SAVE" ] || SAVE=$(abs_dir "$SAVE")
for row in $ROWS; do
  train=()  # train once per row, then decode every test set
  for pair in $SUBSETS; do
    subset=${pair%%:*}; name=${pair#*:}
    refs=()
    if [ -n "$REFS_DIR" ]; then
      mapfile -t files < <(ls "$REFS_DIR/$name".ref* 2>/dev/null)
      [ ${#files[@]} -gt 0 ] || die "no references $REFS_DIR/$name.ref*"
      refs=(--refs "${files[*]}")
    fi
    bash "$REPO_ROOT/scripts/recipes/dpn_s2s.sh" --row "$row" --data "$DATA" --subset "$subset" "${refs[@]}" \
      ${SAVE:+--save-dir "$SAVE/$row"} "${PASS[@]}" "${train[@]}" -- "${HYDRA[@]}"
    train=(--no-train)
  done
done
