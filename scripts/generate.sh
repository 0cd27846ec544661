#!/usr/bin/env bash
# Beam-search translation of a binarized split, with BPE removed and hypotheses in corpus order.
#
# usage: scripts/generate.sh --data BIN_DIR --path CHECKPOINT[:CHECKPOINT2...] --out DIR
#                            [--subset test] [--beam 5] [--lenpen 1.0] [--task translation]
#                            [--bpe sentencepiece|subword-nmt|none] [--detok moses|none] [--lang L]
#                            [--batch-size 64] [-- EXTRA fairseq-generate ARGS]
# Writes DIR/generate-SUBSET.txt (fairseq's log), DIR/hyp.txt and DIR/ref.txt (one line per
# sentence, in the original order, BPE removed, optionally Moses-detokenized for language L).
# --bpe defaults to what scripts/preprocess.sh left in BIN_DIR/bpe (sentencepiece if spm.*.model).
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
data="" path="" out="" subset=test beam=5 lenpen=1.0 task=translation bpe=auto detok=none lang=en bs=64 extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage_from_header; exit 0 ;;
    --data) need_val "$@"; data=$2; shift 2 ;;
    --path) need_val "$@"; path=$2; shift 2 ;;
    --out) need_val "$@"; out=$2; shift 2 ;;
    --subset) need_val "$@"; subset=$2; shift 2 ;;
    --beam) need_val "$@"; beam=$2; shift 2 ;;
    --lenpen) need_val "$@"; lenpen=$2; shift 2 ;;
    --task) need_val "$@"; task=$2; shift 2 ;;
    --bpe) need_val "$@"; bpe=$2; shift 2 ;;
    --detok) need_val "$@"; detok=$2; shift 2 ;;
    --lang) need_val "$@"; lang=$2; shift 2 ;;
    --batch-size) need_val "$@"; bs=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option '$1' (see -h; fairseq options go after --)" ;;
  esac
done
[ -n "$data" ] || die "--data is required"; need_dir "$data" "--data"
[ -n "$path" ] || die "--path is required"
IFS=: read -r -a ckpts <<<"$path"; for c in "${ckpts[@]}"; do need_file "$c" "checkpoint"; done
[ -n "$out" ] || die "--out is required"
[[ "$beam" =~ ^[1-9][0-9]*$ ]] || die "--beam must be a positive integer, not '$beam'"
if [ "$bpe" = auto ]; then
  if ls "$data"/bpe/spm.*.model >/dev/null 2>&1; then bpe=sentencepiece
  elif ls "$data"/bpe/codes.* >/dev/null 2>&1; then bpe=subword-nmt; else bpe=none; fi
fi
case "$bpe" in sentencepiece) rm_bpe=(--remove-bpe sentencepiece) ;; subword-nmt) rm_bpe=(--remove-bpe) ;;
  none) rm_bpe=() ;; *) die "--bpe must be sentencepiece, subword-nmt or none, not '$bpe'" ;; esac
case "$detok" in moses|none) ;; *) die "--detok must be moses or none, not '$detok'" ;; esac
activate_env
cpu=(); python -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" || cpu=(--cpu)
mkdir -p "$out"
say "generating $subset with beam $beam into $out"
fairseq-generate "$data" --user-dir "$USER_DIR" --task "$task" --path "$path" --gen-subset "$subset" \
  --beam "$beam" --lenpen "$lenpen" --batch-size "$bs" "${rm_bpe[@]}" --results-path "$out.tmp.$$" \
  "${cpu[@]}" "${extra[@]}"
mv "$out.tmp.$$/generate-$subset.txt" "$out/generate-$subset.txt"; rmdir "$out.tmp.$$"
post() { if [ "$detok" = moses ]; then sacremoses -l "$lang" detokenize; else cat; fi; }
grep '^H-' "$out/generate-$subset.txt" | sed 's/^H-//' | sort -n -k1,1 -s | cut -f3 | post >"$out/hyp.txt.tmp"
grep '^T-' "$out/generate-$subset.txt" | sed 's/^T-//' | sort -n -k1,1 -s | cut -f2 | post >"$out/ref.txt.tmp"
mv "$out/hyp.txt.tmp" "$out/hyp.txt"; mv "$out/ref.txt.tmp" "$out/ref.txt"
say "wrote $out/hyp.txt ($(wc -l <"$out/hyp.txt") lines) and $out/ref.txt"
