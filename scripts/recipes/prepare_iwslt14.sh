#!/usr/bin/env bash
# Download and prepare IWSLT14 German-English (the split of Ranzato et al. 2015 / fairseq's
# examples/translation/prepare-iwslt14.sh: ~160k train, ~7k valid, ~6.8k test), learn a joint
# subword-nmt BPE of --bpe-size merges (MC-RNN paper: ~25k), and binarize with fairseq-preprocess.
#
#   bash scripts/recipes/prepare_iwslt14.sh [--out DIR] [--bpe-size 25000] [--tgz de-en.tgz] [--workers N]
#
# Output: DIR/tok (tokenized, lowercased text), DIR/bin (data-bin for fairseq-train, languages
# de -> en; DIR/bin/bpe holds the BPE codes and text), made by scripts/preprocess.sh.  Tokenization uses sacremoses (Moses rules), as the original.
# Without network access, download http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz
# elsewhere and pass it with --tgz.
set -euo pipefail
# use the project venv unless fairseq is already on PATH
command -v fairseq-train >/dev/null 2>&1 || source "$(dirname "$0")/../setup_env.sh"

OUT=data/iwslt14.de-en
BPE_SIZE=25000
TGZ=""
WORKERS=4
URL="http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --bpe-size) BPE_SIZE="$2"; shift 2 ;;
    --tgz) TGZ="$2"; shift 2 ;;
    --workers) WORKERS="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "prepare_iwslt14.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ "$BPE_SIZE" =~ ^[0-9]+$ ]] || { echo "prepare_iwslt14.sh: --bpe-size must be a positive integer (got $BPE_SIZE)" >&2; exit 2; }
for tool in subword-nmt fairseq-preprocess python; do  # used here and by scripts/preprocess.sh
  command -v "$tool" >/dev/null || { echo "prepare_iwslt14.sh: $tool not found (activate .venv)" >&2; exit 2; }
done
python -c "import sacremoses" 2>/dev/null || { echo "prepare_iwslt14.sh: pip install sacremoses" >&2; exit 2; }

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
ORIG="$OUT/orig"; TOK="$OUT/tok"; BIN="$OUT/bin"
mkdir -p "$ORIG" "$TOK"
if [[ -z "$TGZ" ]]; then
  TGZ="$ORIG/de-en.tgz"
  if [[ ! -s "$TGZ" ]]; then
    echo "downloading $URL"
    if ! (curl -fsSL "$URL" -o "$TGZ.part" || wget -q "$URL" -O "$TGZ.part"); then
      rm -f "$TGZ.part"
      echo "prepare_iwslt14.sh: cannot download $URL; fetch it elsewhere and pass --tgz PATH" >&2; exit 1
    fi
    mv "$TGZ.part" "$TGZ"
  fi
fi
[[ -s "$TGZ" ]] || { echo "prepare_iwslt14.sh: --tgz $TGZ: no such file" >&2; exit 2; }
tar -xzf "$TGZ" -C "$ORIG"
SRC_DIR="$ORIG/de-en"

# Moses tokenization + lowercasing (sacremoses); one python process per file
tokenize() {  # lang < in > out
  python -c '
import sys
from sacremoses import MosesTokenizer
tok = MosesTokenizer(lang=sys.argv[1])
for line in sys.stdin:
    sys.stdout.write(tok.tokenize(line.strip(), return_str=True, escape=False).lower() + "\n")
' "$1"
}

echo "tokenizing train"
for l in de en; do
  grep -v '<url>' "$SRC_DIR/train.tags.de-en.$l" | grep -v '<talkid>' | grep -v '<keywords>' \
    | grep -v '<speaker>' | grep -v '<reviewer' | grep -v '<translator' | grep -v '<doc' | grep -v '</doc>' \
    | sed -e 's/<title>//g' -e 's/<\/title>//g' -e 's/<description>//g' -e 's/<\/description>//g' \
    | tokenize "$l" > "$TOK/train.tags.$l"
done
# clean: drop empty lines, > 175 tokens, length ratio > 1.5 (Moses clean-corpus-n.perl 1 175)
python - "$TOK/train.tags.de" "$TOK/train.tags.en" "$TOK/train.clean.de" "$TOK/train.clean.en" <<'EOF'
import os, sys
de, en, out_de, out_en = sys.argv[1:]
with open(de, encoding="utf-8") as fd, open(en, encoding="utf-8") as fe, \
        open(out_de + ".tmp", "w", encoding="utf-8") as od, open(out_en + ".tmp", "w", encoding="utf-8") as oe:
    a, b = fd.readlines(), fe.readlines()
    if len(a) != len(b):
        sys.exit(f"{de}: {len(a)} lines but {en}: {len(b)} lines")
    for x, y in zip(a, b):
        nx, ny = len(x.split()), len(y.split())
        if 1 <= nx <= 175 and 1 <= ny <= 175 and nx / ny <= 1.5 and ny / nx <= 1.5:
            od.write(x); oe.write(y)
os.replace(out_de + ".tmp", out_de); os.replace(out_en + ".tmp", out_en)
EOF

echo "tokenizing valid/test"
for l in de en; do
  for o in "$SRC_DIR"/IWSLT14.TED*."$l".xml; do
    f="$TOK/$(basename "$o" ".$l.xml").$l"
    grep '<seg id' "$o" | sed -e 's/<seg id="[0-9]*">\s*//g' -e 's/\s*<\/seg>\s*//g' -e "s/\’/\'/g" \
      | tokenize "$l" > "$f"
  done
done

echo "splitting"
for l in de en; do
  awk '{if (NR%23 == 0) print $0; }' "$TOK/train.clean.$l" > "$TOK/valid.$l"
  awk '{if (NR%23 != 0) print $0; }' "$TOK/train.clean.$l" > "$TOK/train.$l"
  cat "$TOK"/IWSLT14.TED.dev2010.de-en.$l "$TOK"/IWSLT14.TEDX.dev2012.de-en.$l \
      "$TOK"/IWSLT14.TED.tst2010.de-en.$l "$TOK"/IWSLT14.TED.tst2011.de-en.$l \
      "$TOK"/IWSLT14.TED.tst2012.de-en.$l > "$TOK/test.$l"
done

echo "joint BPE ($BPE_SIZE merges) and binarizing (scripts/preprocess.sh)"
bash "$REPO/scripts/preprocess.sh" --src de --tgt en --train "$TOK/train" --valid "$TOK/valid" --test "$TOK/test" \
  --destdir "$BIN" --bpe subword-nmt --bpe-size "$BPE_SIZE" --workers "$WORKERS" --force
echo "done: $BIN ($(wc -l < "$TOK/train.de") train, $(wc -l < "$TOK/valid.de") valid, $(wc -l < "$TOK/test.de") test)"
