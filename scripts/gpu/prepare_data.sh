#!/usr/bin/env bash
# Binarize the data that scripts/gpu/run_all.sh needs on a GPU box that cannot read ../shared/data.
#
# usage: scripts/gpu/prepare_data.sh [--shared DIR] [--dest DIR] [--lattice-sentences N]
#   --shared DIR            the small real corpora (default: ../shared/data beside the checkout,
#                           or $FAIRSEQ_LOCAL_SHARED_DATA)
#   --dest DIR              output folder (default: gpu_kit/data, ignored by git; carried to the box)
#   --lattice-sentences N   training pairs of Tatoeba zh-en turned into lattices (default 4000: the
#                           lattice benchmark reads a few dozen batches of them)
# Writes DEST/multi30k (Moses-tokenized, lowercased, joint subword-nmt BPE 8000, fairseq-binarized
# Multi30k De-En train/valid: the paper-scale training run) and DEST/lattice (jieba+thulac+snownlp
# lattices of Tatoeba zh-en, binarized for --task lattice_translation, with the corpus'
# attribution files: CC-BY 2.0 FR, keep them with the data), and DEST/acceptance (the corpora of
# the GPU acceptance run: synthetic text with IWSLT14's sentence lengths, scripts/gpu/acceptance_corpus.py,
# which builds it alone without the shared corpora).  Each is built under DEST/NAME.tmp and moved
# into place when complete; an existing one is kept (delete it to rebuild).
set -euo pipefail
source "$(dirname "$0")/../lib/common.sh"
opt --shared shared "${FAIRSEQ_LOCAL_SHARED_DATA:-$(dirname "$REPO_ROOT")/shared/data}"
opt --dest dest "$REPO_ROOT/gpu_kit/data"; opt --lattice-sentences nlat 4000
parse_options "$@"
[[ "$nlat" =~ ^[1-9][0-9]*$ ]] || die "--lattice-sentences must be a positive integer, not '$nlat'"
m30k="$shared/multi30k-de-en" tatoeba="$shared/tatoeba-zh-en"
for f in "$m30k"/{train,valid}.{de,en} "$tatoeba"/{train,valid}.{zh,en}; do need_file "$f" "corpus file"; done
activate_env
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"

if [ ! -f "$dest/multi30k/dict.de.txt" ]; then
  say "multi30k: Moses, lowercase, joint BPE 8000, binarize"
  rm -rf "$dest/multi30k.tmp"
  bash "$REPO_ROOT/scripts/preprocess.sh" --src de --tgt en --train "$m30k/train" --valid "$m30k/valid" \
    --destdir "$dest/multi30k.tmp" --tokenize moses --lowercase --bpe subword-nmt --bpe-size 8000 --force
  # keep the BPE codes (generate.sh finds the BPE kind there); the BPE-applied text is the bulk of the size
  find "$dest/multi30k.tmp/bpe" -type f ! -name 'codes.*' -delete
  mv "$dest/multi30k.tmp" "$dest/multi30k"
fi

if [ ! -f "$dest/lattice/dict.zh.txt" ]; then
  say "lattice: $nlat Tatoeba pairs -> jieba+thulac+snownlp lattices -> binarize"
  work="$dest/lattice.tmp"
  rm -rf "$work"
  mkdir -p "$work/corpus"
  for l in zh en; do
    head -n "$nlat" "$tatoeba/train.$l" >"$work/corpus/train.$l"
    cp "$tatoeba/valid.$l" "$work/corpus/valid.$l"
  done
  cp "$tatoeba"/*.attribution "$work/corpus/" 2>/dev/null || true
  same_lines "$work/corpus/train.zh" "$work/corpus/train.en"
  # the recipe's stages 1-3 (tokenize, lattices, binarize); only the lattice corpus is carried
  PREP_ONLY=1 WORKERS=1 bash "$REPO_ROOT/scripts/recipes/lattice_zh_en_small.sh" "$work/corpus" "$work/w"
  mv "$work/w/bin/lattice" "$dest/lattice"
  rm -rf "$work"
fi
if [ ! -f "$dest/acceptance/corpus.json" ]; then
  say "acceptance: synthetic corpus with IWSLT14's sentence lengths (translation, lm, lattice), binarized"
  python "$REPO_ROOT/scripts/gpu/acceptance_corpus.py" "$dest/acceptance"
fi
du -sh "$dest"/* >&2
