#!/usr/bin/env bash
# Download and prepare IWSLT14 German-English (the split of Ranzato et al. 2015 / fairseq's
# examples/translation/prepare-iwslt14.sh: ~160k train, ~7k valid, ~6.8k test), learn a joint
# subword-nmt BPE of --bpe-size merges (MC-RNN paper: ~25k), and binarize with fairseq-preprocess.
#
#   bash scripts/recipes/prepare_iwslt14.sh [--out DIR] [--bpe-size 25000] [--workers N]
#        [--tgz de-en.tgz | --url URL] [--sha256 HASH] [--require-checksum]
#
# --tgz FILE     a local copy of de-en.tgz;  --url URL: a mirror (http(s):// or file://) instead of
#                fairseq's; either is checked against scripts/recipes/SHA256SUMS (or --sha256 HASH,
#                for a repackaged archive) before it is used.
# --require-checksum  refuse a file whose sha256 is not recorded (same as REQUIRE_CHECKSUM=1)
# Output: DIR/raw/test.{de,en} (untokenized text of the test split: the references that
# scores are computed against), DIR/tok (Moses-tokenized, lowercased text), DIR/bin (data-bin,
# languages de -> en; DIR/bin/bpe holds the BPE codes and text), made by scripts/preprocess.sh.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
opt --out OUT data/iwslt14.de-en; opt --bpe-size BPE_SIZE 25000; opt --tgz TGZ
opt --url URL "http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz"; opt --sha256 SHA
flag_call --require-checksum require_checksum; opt --workers WORKERS 4
parse_options "$@"
[[ "$BPE_SIZE" =~ ^[1-9][0-9]*$ ]] || die "--bpe-size must be a positive integer (got $BPE_SIZE)"
[[ "$WORKERS" =~ ^[1-9][0-9]*$ ]] || die "--workers must be a positive integer (got $WORKERS)"
activate_env
SHA=${SHA:-$(known_sha256 "$URL")}
OUT=$(abs_dir "$OUT"); ORIG="$OUT/orig" TOK="$OUT/tok" RAW="$OUT/raw" BIN="$OUT/bin"
mkdir -p "$ORIG" "$TOK" "$RAW"
if [ -n "$TGZ" ]; then
  need_file "$TGZ" "--tgz"
  check_sha256 "$TGZ" "$SHA" "--tgz $TGZ"
else
  TGZ="$ORIG/de-en.tgz"
  if [ ! -s "$TGZ" ]; then say "downloading $URL"; download "$URL" "$TGZ" "$SHA"; fi
fi
rm -rf "$ORIG/de-en"
tar -xzf "$TGZ" -C "$ORIG" || die "$TGZ: not a readable .tgz archive"
SRC_DIR="$ORIG/de-en"
need_file "$SRC_DIR/train.tags.de-en.de" "the archive's train.tags.de-en.de"

say "extracting text (train.tags without its metadata lines, the XML sets' <seg> elements)"
for l in de en; do
  grep -v -e '<url>' -e '<talkid>' -e '<keywords>' -e '<speaker>' -e '<reviewer' -e '<translator' \
      -e '<doc' -e '</doc>' "$SRC_DIR/train.tags.de-en.$l" \
    | sed -e 's/<title>//g' -e 's/<\/title>//g' -e 's/<description>//g' -e 's/<\/description>//g' \
    >"$RAW/train.tags.$l"
  for o in "$SRC_DIR"/IWSLT14.TED*."$l".xml; do
    grep '<seg id' "$o" | sed -e 's/<seg id="[0-9]*">\s*//g' -e 's/\s*<\/seg>\s*//g' -e "s/\’/\'/g" \
      >"$RAW/$(basename "$o" ".$l.xml").$l"
  done
done

say "Moses tokenization + lowercasing (sacremoses)"
for f in "$RAW"/train.tags.* "$RAW"/IWSLT14.*; do moses_tok "${f##*.}" "$f" "$TOK/$(basename "$f")" --lowercase; done
# clean: drop empty lines, > 175 tokens, length ratio > 1.5 (Moses clean-corpus-n.perl 1 175)
python - "$TOK/train.tags.de" "$TOK/train.tags.en" "$TOK/train.clean.de" "$TOK/train.clean.en" <<'EOF'
import os, sys
de, en, out_de, out_en = sys.argv[1:]
with open(de, encoding="utf-8") as fd, open(en, encoding="utf-8") as fe, \
        open(out_de + ".tmp", "w", encoding="utf-8") as od, open(out_en + ".tmp", "w", encoding="utf-8") as oe:
    a, b = fd.readlines(), fe.readlines()
    if len(a) != len(b):
        sys.exit(f"prepare_iwslt14.sh: error: {de}: {len(a)} lines but {en}: {len(b)} lines")
    for x, y in zip(a, b):
        nx, ny = len(x.split()), len(y.split())
        if 1 <= nx <= 175 and 1 <= ny <= 175 and nx / ny <= 1.5 and ny / nx <= 1.5:
            od.write(x); oe.write(y)
os.replace(out_de + ".tmp", out_de); os.replace(out_en + ".tmp", out_en)
EOF

say "splitting (valid = every 23rd training pair; test = dev2010 + dev2012 + tst2010-2012)"
TESTSETS=(IWSLT14.TED.dev2010.de-en IWSLT14.TEDX.dev2012.de-en IWSLT14.TED.tst2010.de-en
          IWSLT14.TED.tst2011.de-en IWSLT14.TED.tst2012.de-en)
for l in de en; do
  awk '{if (NR%23 == 0) print $0; }' "$TOK/train.clean.$l" >"$TOK/valid.$l"
  awk '{if (NR%23 != 0) print $0; }' "$TOK/train.clean.$l" >"$TOK/train.$l"
  for s in "${TESTSETS[@]}"; do need_file "$TOK/$s.$l" "the archive's $s.$l.xml"; done
  (cd "$TOK" && cat "${TESTSETS[@]/%/.$l}") >"$TOK/test.$l"
  (cd "$RAW" && cat "${TESTSETS[@]/%/.$l}") >"$RAW/test.$l"
done

say "joint BPE ($BPE_SIZE merges) and binarizing (scripts/preprocess.sh)"
bash "$REPO_ROOT/scripts/preprocess.sh" --src de --tgt en --train "$TOK/train" --valid "$TOK/valid" --test "$TOK/test" \
  --destdir "$BIN" --bpe subword-nmt --bpe-size "$BPE_SIZE" --workers "$WORKERS" --force
say "done: $BIN ($(wc -l <"$TOK/train.de") train, $(wc -l <"$TOK/valid.de") valid, $(wc -l <"$TOK/test.de") test)"
