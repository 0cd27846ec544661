#!/usr/bin/env bash
# Prepare English Gigaword headline generation as Rush et al. (2015): first sentence -> headline,
# tokenized, lowercased, digits mapped to '#', rare words 'UNK' (the preprocessing of the
# harvardnlp "sumdata" release, which is what the DPN-S2S, ConvS2S and MC-RNN papers used:
# ~3.8M train, ~190k valid, 2000 test pairs), then binarize with a 30k-word vocabulary per side.
#
#   bash scripts/recipes/prepare_gigaword.sh --sumdata DIR [--out data/gigaword] [--nwords 30000]
#        [--valid-size N] [--workers N]
#
# DIR is the unpacked release (https://github.com/harvardnlp/sent-summary), i.e. it holds
#   train/train.article.txt train/train.title.txt train/valid.article.filter.txt
#   train/valid.title.filter.txt Giga/input.txt Giga/task1_ref0.txt
# (LDC2011T07 licence required; the data cannot be downloaded here.)  --valid-size keeps the first N
# validation pairs (validating on all 190k is slow).  Output: OUT/text/{train,valid,test}.{article,headline}
# and OUT/bin (fairseq-preprocess, languages article -> headline).
set -euo pipefail
# use the project venv unless fairseq is already on PATH
command -v fairseq-train >/dev/null 2>&1 || source "$(dirname "$0")/../setup_env.sh"

SUMDATA=""; OUT=data/gigaword; NWORDS=30000; VALID_SIZE=0; WORKERS=4
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sumdata) SUMDATA="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --nwords) NWORDS="$2"; shift 2 ;;
    --valid-size) VALID_SIZE="$2"; shift 2 ;;
    --workers) WORKERS="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "prepare_gigaword.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -n "$SUMDATA" ]] || { echo "prepare_gigaword.sh: --sumdata DIR is required (see --help)" >&2; exit 2; }
[[ -d "$SUMDATA" ]] || { echo "prepare_gigaword.sh: --sumdata $SUMDATA: no such directory" >&2; exit 2; }
for n in "$NWORDS" "$VALID_SIZE" "$WORKERS"; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "prepare_gigaword.sh: --nwords/--valid-size/--workers take integers (got $n)" >&2; exit 2; }
done
command -v fairseq-preprocess >/dev/null || { echo "prepare_gigaword.sh: fairseq-preprocess not found (activate .venv)" >&2; exit 2; }

TEXT="$OUT/text"; BIN="$OUT/bin"
mkdir -p "$TEXT"
# split -> (article file, headline file) in the release
declare -A ART=([train]=train/train.article.txt [valid]=train/valid.article.filter.txt [test]=Giga/input.txt)
declare -A TIT=([train]=train/train.title.txt [valid]=train/valid.title.filter.txt [test]=Giga/task1_ref0.txt)
for split in train valid test; do  # check every input before writing anything
  for f in "$SUMDATA/${ART[$split]}" "$SUMDATA/${TIT[$split]}"; do
    [[ -s "$f" ]] || { echo "prepare_gigaword.sh: $f: missing or empty" >&2; exit 2; }
  done
done
for split in train valid test; do
  a="$SUMDATA/${ART[$split]}"; t="$SUMDATA/${TIT[$split]}"
  limit=0; [[ $split == valid ]] && limit=$VALID_SIZE
  # checks line counts, drops pairs with an empty side in train/valid, writes atomically
  python - "$a" "$t" "$TEXT/$split.article" "$TEXT/$split.headline" "$limit" "$split" <<'EOF'
import os, sys
art, tit, out_a, out_t, limit, split = sys.argv[1:]
limit = int(limit)
with open(art, encoding="utf-8") as fa, open(tit, encoding="utf-8") as ft:
    a, t = fa.read().splitlines(), ft.read().splitlines()
if len(a) != len(t):
    sys.exit(f"prepare_gigaword.sh: {art} has {len(a)} lines but {tit} has {len(t)}")
pairs = list(zip(a, t))
if split != "test":  # the test set stays complete (2000 pairs) so scores compare with the papers
    pairs = [(x, y) for x, y in pairs if x.strip() and y.strip()]
if limit:
    pairs = pairs[:limit]
for path, side in ((out_a, 0), (out_t, 1)):
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.writelines(" ".join(p[side].split()) + "\n" for p in pairs)
for path in (out_a, out_t):
    os.replace(path + ".tmp", path)
print(f"{split}: {len(pairs)} pairs")
EOF
done

echo "binarizing (vocabulary: $NWORDS words per side)"
rm -rf "$BIN.tmp"
fairseq-preprocess --source-lang article --target-lang headline --trainpref "$TEXT/train" \
  --validpref "$TEXT/valid" --testpref "$TEXT/test" --nwordssrc "$NWORDS" --nwordstgt "$NWORDS" \
  --destdir "$BIN.tmp" --workers "$WORKERS" > "$OUT/preprocess.log" 2>&1 \
  || { tail -n 5 "$OUT/preprocess.log" >&2; echo "prepare_gigaword.sh: fairseq-preprocess failed (log: $OUT/preprocess.log)" >&2; exit 1; }
rm -rf "$BIN"; mv "$BIN.tmp" "$BIN"
echo "done: $BIN"
