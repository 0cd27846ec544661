#!/usr/bin/env bash
# Beam-search translation of a binarized split, with BPE removed and hypotheses in corpus order.
#
# usage: scripts/generate.sh --data BIN_DIR --path CHECKPOINT[:CHECKPOINT2...] --out DIR
#                            [--subset test] [--beam 5] [--lenpen 1.0] [--task translation]
#                            [--bpe sentencepiece|subword-nmt|none] [--detok moses|none] [--lang L]
#                            [--ref RAW_REFERENCE] [--batch-size 64] [-- EXTRA fairseq-generate ARGS]
# Writes, one line per sentence in the original order:
#   DIR/hyp.txt      the best hypotheses, BPE removed (Moses-detokenized for language L with --detok moses)
#   DIR/ref.tok.txt  the binarized targets as fairseq read them (tokenized and lowercased as preprocessed,
#                    <<unk>> for words outside the dictionary): for tokenized BLEU only (score.sh --tokenize none)
#   DIR/ref.txt      with --ref: a copy of RAW_REFERENCE, the split's raw target text (e.g. raw/test.en),
#                    the reference of detokenized BLEU: score.sh --hyp DIR/hyp.txt --ref DIR/ref.txt
#   DIR/generate-SUBSET.txt  fairseq-generate's log
#   DIR/gen.json     what these hypotheses translate: BIN_DIR, SUBSET, its languages and (from BIN_DIR/corpus.json,
#                    written by preprocess.sh) its raw target file; score.sh refuses a --ref that is another
#                    split's or the source side's raw file
# Every sentence of the split must get a hypothesis: when fairseq-generate returns fewer (e.g.
# --skip-invalid-size-inputs-valid-test skipped sentences longer than the model's positions: the
# error says which and how to raise the limits) it fails and DIR is left as it was; so does a
# --ref whose line count is not the split's.
# A full disk is one line naming the file; DIR is left as it was (everything is written beside it first).
# DIR is claimed for the whole run (a second run into DIR is one line naming the first one's pid); an
# existing DIR that generate.sh did not make (no .fairseq-local or gen.json in it) is left as it is.
# A full disk, or an --out that cannot be created (read-only, under a file), is one line naming --out.
# --bpe defaults to what scripts/preprocess.sh left in BIN_DIR/bpe (sentencepiece if spm.*.model);
# --detok to moses when BIN_DIR/corpus.json says the corpus was Moses-tokenized, and --lang to its
# target language (else en).
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
opt --data data; opt --path path; opt --out out; opt --subset subset test; opt --beam beam 5
opt --lenpen lenpen 1.0; opt --task task translation; opt --bpe bpe auto; opt --detok detok auto; opt --lang lang
opt --batch-size bs 64; opt --ref ref; rest_args extra "fairseq options go after --"
parse_options "$@"
[ -n "$data" ] || die "--data is required"; need_dir "$data" "--data"
[ -n "$path" ] || die "--path is required"
IFS=: read -r -a ckpts <<<"$path"; for c in "${ckpts[@]}"; do need_file "$c" "checkpoint"; done
[ -n "$out" ] || die "--out is required"
[[ "$beam" =~ ^[1-9][0-9]*$ ]] || die "--beam must be a positive integer, not '$beam'"
[ -z "$ref" ] || need_file "$ref" "--ref"
if [ "$bpe" = auto ]; then bpe=$(bpe_kind "$data"); fi
case "$bpe" in sentencepiece|subword-nmt|none) mapfile -t rm_bpe < <(remove_bpe_args "$bpe") ;;
  *) die "--bpe must be sentencepiece, subword-nmt or none, not '$bpe'" ;; esac
case "$detok" in moses|none|auto) ;; *) die "--detok must be moses or none, not '$detok'" ;; esac
activate_env
[ ! -e "$out" ] || [ -d "$out" ] || die "--out $out: cannot create $out: a file stands in its path"
claim_output "$out" --out --check-ours --marker gen.json
corpus_get() { python -m fairseq_local_repro.text.corpus_manifest --prog generate.sh get "${data%%:*}" "$1"; }
if [ "$detok" = auto ]; then detok=$(corpus_get tokenize) || exit 2; [ "$detok" = moses ] || detok=none; fi
if [ -z "$lang" ]; then lang=$(corpus_get target_lang) || exit 2; lang=${lang:-en}; fi
if [ -n "$ref" ]; then python -m fairseq_local_repro.text.text_input generate.sh "$ref" || exit 2; fi
cpu=(); python -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" || cpu=(--cpu)
# the split's size, from the binarized source side fairseq-generate reads (first data path)
n_split=$(python - "${data%%:*}" "$subset" "${extra[@]}" <<'PY'
import argparse, os, sys
from fairseq.data import data_utils, indexed_dataset
data, subset, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
p = argparse.ArgumentParser(add_help=False)
p.add_argument("-s", "--source-lang"); p.add_argument("-t", "--target-lang")
langs, _ = p.parse_known_args(rest)
src, tgt = langs.source_lang, langs.target_lang
if src is None or tgt is None:
    src, tgt = data_utils.infer_language_pair(data)
if src is None or tgt is None:
    sys.exit(f"generate.sh: error: cannot tell the languages of --data {data} (no train.SRC-TGT.* files): "
             "pass --source-lang/--target-lang after --")
prefixes = [os.path.join(data, f"{subset}.{a}-{b}.{src}") for a, b in ((src, tgt), (tgt, src))]
for prefix in prefixes:
    impl = indexed_dataset.infer_dataset_impl(prefix)
    if impl == "raw":
        with open(prefix, encoding="utf-8") as f:
            print(sum(1 for _ in f))
        sys.exit(0)
    if impl is not None:
        print(len(indexed_dataset.make_dataset(prefix, impl=impl)))
        sys.exit(0)
sys.exit(f"generate.sh: error: subset '{subset}' not found in --data {data}: no {prefixes[0]}.idx")
PY
) || exit 2
if [ -n "$ref" ]; then
  n_ref=$(count_lines "$ref")
  [ "$n_ref" -eq "$n_split" ] || die "--ref $ref has $n_ref lines but subset '$subset' of $data has $n_split sentences"
fi
tmp="$out.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
steps() {
say "generating $subset ($n_split sentences) with beam $beam into $out"
# fairseq-generate's stderr is shown and kept: the cause of sentences it skipped is only there;
# --required-batch-size-multiple 1: no sentence left out of the batches, for fairseq's own models too
make_dir "$tmp" "--out $out"
{ fairseq-generate "$data" --user-dir "$USER_DIR" --task "$task" --path "$path" --gen-subset "$subset" \
  --beam "$beam" --lenpen "$lenpen" --batch-size "$bs" --required-batch-size-multiple 1 "${rm_bpe[@]}" \
  --results-path "$tmp" \
  "${cpu[@]}" "${extra[@]}" 2>&1 1>&3 | tee "$tmp/stderr" >&2; } 3>&1 || { rc=$?
  ! full_disk "$tmp" || die "$out: no space left on device (writing $tmp, beside it; $out was left as it was)"
  exit "$rc"; }
# one line per sentence id 0..n_split-1, or a one-line error when generation lost sentences
skipped=$(sed -n 's/.*[^0-9]\([0-9][0-9]*\) samples have invalid sizes and will be skipped, max_positions=\(.*\), first few sample ids=\[\([0-9, ]*\)\].*/\1|\2|\3/p' "$tmp/stderr" | tail -1)
if [ -n "$skipped" ]; then
  IFS='|' read -r n_skip maxpos ids <<<"$skipped"
  [ "$n_skip" -le 10 ] || ids="$ids, ..."
  die "$n_skip of the $n_split sentences of subset '$subset' (ids $ids) are longer than the model's \
positions (max_positions=$maxpos: --max-source-positions / --max-target-positions, source and target tokens) and \
were skipped by --skip-invalid-size-inputs-valid-test: BLEU needs every sentence; drop that option and, for a model \
without position embeddings (the RNN, lattice and genCNN models), raise the limits after --: \
--max-source-positions N --max-target-positions N --model-overrides \"{'max_source_positions': N, \
'max_target_positions': N}\"; otherwise shorten or split those sentences"
fi
gen_text "$tmp/generate-$subset.txt" H "$tmp/hyp.tok" --expect "$n_split"
gen_text "$tmp/generate-$subset.txt" T "$tmp/ref.tok" --expect "$n_split"
post() { if [ "$detok" = moses ]; then sacremoses -l "$lang" detokenize; else cat; fi; }
to_file "$tmp/hyp.txt" "$out/hyp.txt" post <"$tmp/hyp.tok"; mv "$tmp/ref.tok" "$tmp/ref.tok.txt"
files=("generate-$subset.txt" hyp.txt ref.tok.txt)
if [ -n "$ref" ]; then to_file "$tmp/ref.txt" "$out/ref.txt" cat "$ref"; files+=(ref.txt); fi
python -m fairseq_local_repro.text.corpus_manifest --prog generate.sh gen-record "$tmp/gen.json" --data "$data" \
  --subset "$subset" --output "$tmp/hyp.txt" --output "$tmp/ref.tok.txt" -- "${extra[@]}" || exit 2
files+=(gen.json)
make_dir "$out" "--out $out"
rm -f "$out/ref.txt"  # a reference of an earlier run never stands next to these hypotheses
for f in "${files[@]}"; do mv "$tmp/$f" "$out/$f"; done
say "wrote $out/hyp.txt ($(wc -l <"$out/hyp.txt") lines) and $out/ref.tok.txt (the binarized targets: tokenized BLEU only)"
if [ -n "$ref" ]; then
  say "raw references: $out/ref.txt (a copy of $ref); detokenized BLEU: scripts/score.sh --hyp $out/hyp.txt --ref $out/ref.txt"
else
  say "no raw references (--ref): detokenized BLEU needs the split's raw target text: scripts/score.sh --hyp $out/hyp.txt --ref RAW_TARGET_FILE"
fi
}
# Ctrl-C or kill: fairseq-generate is ended with the script, the EXIT trap removes the work folder
run_interruptible steps "generate.sh: interrupted; $out was left as it was"
