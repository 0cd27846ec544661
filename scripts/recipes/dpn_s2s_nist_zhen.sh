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
#        [--cpu] [-- HYDRA_OVERRIDES...]
#
# --subsets maps fairseq subsets of BIN_DIR to test-set names; with --refs-dir the references are
# DIR/NAME.ref0 .. DIR/NAME.ref3 (multi-reference BLEU), otherwise the binarized single reference.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
DATA=""; ROWS="table2_dpn_s2s table2_cnn table2_san"; REFS_DIR=""; CPU=()
SUBSETS="test:mt04 test1:mt05 test2:mt06 test3:mt08 test4:mt12"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --data) DATA="$2"; shift 2 ;;
    --rows) ROWS="$2"; shift 2 ;;
    --subsets) SUBSETS="$2"; shift 2 ;;
    --refs-dir) REFS_DIR="$2"; shift 2 ;;
    --cpu) CPU=(--cpu); shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "dpn_s2s_nist_zhen.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -n "$DATA" && -d "$DATA" ]] || { echo "dpn_s2s_nist_zhen.sh: --data BIN_DIR is required (see scripts/recipes/prepare_nist_zhen.sh)" >&2; exit 2; }
for row in $ROWS; do
  [[ $row == table2_* ]] || { echo "dpn_s2s_nist_zhen.sh: $row is not a Table 2 row" >&2; exit 2; }
  train=()  # train once per row, then decode every test set
  for pair in $SUBSETS; do
    subset=${pair%%:*}; name=${pair#*:}
    refs=()
    if [[ -n "$REFS_DIR" ]]; then
      refs=(--refs "$(ls "$REFS_DIR/$name".ref* 2>/dev/null | tr '\n' ' ')")
      [[ -n "${refs[1]// /}" ]] || { echo "dpn_s2s_nist_zhen.sh: no references $REFS_DIR/$name.ref*" >&2; exit 2; }
    fi
    echo "== $row on $name ($subset)"
    bash "$REPO/scripts/recipes/dpn_s2s.sh" --row "$row" --data "$DATA" --subset "$subset" "${refs[@]}" \
      "${CPU[@]}" "${train[@]}" -- "$@"
    train=(--no-train)
  done
done
