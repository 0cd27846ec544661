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
# each either as such or gzipped as the release ships them (train/train.article.txt.gz, ...).
# (LDC2011T07 licence required; the data cannot be downloaded here.)  --valid-size keeps the first N
# validation pairs (validating on all 190k is slow).  Output: OUT/text/{train,valid,test}.{article,headline},
# OUT/refs/test.ref0 (.ref1 ... when the release has Giga/task1_ref1.txt ...: the references ROUGE
# is scored against, never fairseq's binarized targets) and OUT/bin (fairseq-preprocess, languages
# article -> headline).
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
opt --sumdata SUMDATA; opt --out OUT data/gigaword; opt --nwords NWORDS 30000; opt --valid-size VALID_SIZE 0
opt --workers WORKERS 4
parse_options "$@"
[ -n "$SUMDATA" ] || die "--sumdata DIR is required (see --help)"
need_dir "$SUMDATA" "--sumdata"
for n in "$NWORDS" "$VALID_SIZE" "$WORKERS"; do
  [[ "$n" =~ ^[0-9]+$ ]] || die "--nwords/--valid-size/--workers take integers (got $n)"
done
activate_env
OUT=$(abs_dir "$OUT"); TEXT="$OUT/text" BIN="$OUT/bin" REFS="$OUT/refs"
mkdir -p "$TEXT" "$REFS"
# split -> (article file, headline file) in the release, plain or gzipped
declare -A ART=([train]=train/train.article.txt [valid]=train/valid.article.filter.txt [test]=Giga/input.txt)
declare -A TIT=([train]=train/train.title.txt [valid]=train/valid.title.filter.txt [test]=Giga/task1_ref0.txt)
release_file() {  # the release's file NAME, plain or .gz
  if [ -s "$SUMDATA/$1" ]; then echo "$SUMDATA/$1"; elif [ -s "$SUMDATA/$1.gz" ]; then echo "$SUMDATA/$1.gz"
  else die "$SUMDATA/$1 (or $1.gz): missing or empty"; fi
}
for split in train valid test; do  # check every input before writing anything
  release_file "${ART[$split]}" >/dev/null; release_file "${TIT[$split]}" >/dev/null
done
TEST_REFS=("$(release_file Giga/task1_ref0.txt)")
for k in 1 2 3; do
  if [ -s "$SUMDATA/Giga/task1_ref$k.txt" ] || [ -s "$SUMDATA/Giga/task1_ref$k.txt.gz" ]; then
    TEST_REFS+=("$(release_file "Giga/task1_ref$k.txt")")
  fi
done
for split in train valid test; do
  a=$(release_file "${ART[$split]}"); t=$(release_file "${TIT[$split]}")
  limit=0; [[ $split == valid ]] && limit=$VALID_SIZE
  refs=(); [[ $split == test ]] && refs=("${TEST_REFS[@]}")
  # checks line counts, drops pairs with an empty side in train/valid, writes atomically
  python - "$a" "$t" "$TEXT/$split.article" "$TEXT/$split.headline" "$limit" "$split" "$REFS" "${refs[@]}" <<'EOF'
import gzip, os, sys
art, tit, out_a, out_t, limit, split, refdir, *refs = sys.argv[1:]
limit = int(limit)
def lines(path):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            return f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        sys.exit(f"prepare_gigaword.sh: error: {path}: cannot read ({e})")
a, t = lines(art), lines(tit)
if len(a) != len(t):
    sys.exit(f"prepare_gigaword.sh: error: {art} has {len(a)} lines but {tit} has {len(t)}")
pairs = list(zip(a, t))
if split != "test":  # the test set stays complete (2000 pairs) so scores compare with the papers
    pairs = [(x, y) for x, y in pairs if x.strip() and y.strip()]
if limit:
    pairs = pairs[:limit]
outs = [(out_a, [p[0] for p in pairs]), (out_t, [p[1] for p in pairs])]
for k, ref in enumerate(refs):  # the test references, as the release has them
    r = lines(ref)
    if len(r) != len(a):
        sys.exit(f"prepare_gigaword.sh: error: {ref} has {len(r)} lines but {art} has {len(a)}")
    outs.append((os.path.join(refdir, f"test.ref{k}"), r))
for path, text in outs:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.writelines(" ".join(x.split()) + "\n" for x in text)
for path, _ in outs:
    os.replace(path + ".tmp", path)
print(f"{split}: {len(pairs)} pairs", file=sys.stderr)
EOF
done

say "binarizing (vocabulary: $NWORDS words per side)"
rm -rf "$BIN.tmp"
fairseq-preprocess --source-lang article --target-lang headline --trainpref "$TEXT/train" \
  --validpref "$TEXT/valid" --testpref "$TEXT/test" --nwordssrc "$NWORDS" --nwordstgt "$NWORDS" \
  --destdir "$BIN.tmp" --workers "$WORKERS" > "$OUT/preprocess.log" 2>&1 \
  || { tail -n 5 "$OUT/preprocess.log" >&2; echo "prepare_gigaword.sh: fairseq-preprocess failed (log: $OUT/preprocess.log)" >&2; exit 1; }
rm -rf "$BIN"; mv "$BIN.tmp" "$BIN"
say "done: $BIN (test references: $REFS/test.ref*)"
