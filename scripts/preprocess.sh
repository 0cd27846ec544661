#!/usr/bin/env bash
# Tokenize (optional), learn and apply BPE, binarize with fairseq-preprocess.
#
# usage: scripts/preprocess.sh --src L1 --tgt L2 --train PREFIX --valid PREFIX [--test PREFIX[,PREFIX2...]]
#                              --destdir DIR [options]
#        scripts/preprocess.sh --lm --train FILE --valid FILE [--test FILE] --destdir DIR [options]
#   PREFIX.L1 / PREFIX.L2 are raw UTF-8 text files, one sentence per line (same line counts; the
#   last line may lack its newline); the training files must not be empty. A pair with one blank
#   side is an error; blank pairs (and blank lines of an --lm corpus) get a warning naming them.
# options:
#   --bpe subword-nmt|sentencepiece|none   sub-word model (default: sentencepiece)
#   --bpe-size N          merges / vocabulary size (default 8000; sentencepiece: where the training
#                         text allows fewer pieces than the default, as many as it allows)
#   --separate-bpe        one BPE model per language (default: joint)
#   --tokenize moses      Moses-tokenize with sacremoses before BPE (default: none)
#   --lowercase           lowercase before everything
#   --nwords N            cap each dictionary at N words (fairseq --nwordssrc/--nwordstgt)
#   --workers N           fairseq-preprocess workers (default 2)
#   --force               replace an existing --destdir that preprocess.sh made (one it did not make is
#                         never removed)
# Output: DIR/ holds the binarized data, dictionaries and DIR/bpe/ (the BPE model and the
# BPE-applied text), and fairseq's DIR/preprocess.log. With sentencepiece the dictionary is the
# sentencepiece vocabulary (every piece a valid or test sentence can be cut into is in it);
# otherwise fairseq builds it from the training split. A warning names each split with more
# than 1% of its tokens replaced by <unk>. DIR/corpus.json records what DIR was made from: each
# split's raw files (path, line count, SHA-256) and the transforms (--tokenize, --lowercase, --bpe
# and its size); generate.sh, score.sh, the hub and checkpoints check against it. Everything is
# built in DIR.tmp.PID and moved into place only when complete; DIR is claimed for the whole run (a second
# run into DIR is one line naming the first one's pid).
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
opt --src src; opt --tgt tgt; opt --train train; opt --valid valid; opt --test test; opt --destdir dest
opt --bpe bpe sentencepiece; opt --bpe-size size 8000; flag --separate-bpe joint 0 1; opt --tokenize tok none
flag --lowercase lower; opt --nwords nwords -1; opt --workers workers 2; flag --force force; flag --lm lm
parse_options "$@"
size_given=0; if given --bpe-size; then size_given=1; fi
[ -n "$train" ] || die "--train is required"
[ -n "$valid" ] || die "--valid is required"
[ -n "$dest" ] || die "--destdir is required"
case "$bpe" in subword-nmt|sentencepiece|none) ;; *) die "--bpe must be subword-nmt, sentencepiece or none, not '$bpe'" ;; esac
case "$tok" in moses|none) ;; *) die "--tokenize must be moses or none, not '$tok'" ;; esac
[[ "$size" =~ ^[0-9]+$ ]] && [ "$size" -gt 0 ] || die "--bpe-size must be a positive integer, not '$size'"
[[ "$nwords" =~ ^[0-9]+$ ]] && [ "$nwords" -gt 0 ] || [ "$nwords" = -1 ] || die "--nwords must be a positive integer (or -1: no cap), not '$nwords'"
[[ "$workers" =~ ^[0-9]+$ ]] && [ "$workers" -gt 0 ] || die "--workers must be a positive integer, not '$workers'"
if [ "$lm" = 1 ]; then langs=(txt); else
  [ -n "$src" ] && [ -n "$tgt" ] || die "--src and --tgt are required (or --lm for a language-model corpus)"
  langs=("$src" "$tgt")
fi
IFS=, read -r -a tests <<<"$test"
splits=(train valid); prefixes=("$train" "$valid")
for i in "${!tests[@]}"; do splits+=("test$(nsuffix "$i")"); prefixes+=("${tests[$i]}"); done
infile() { if [ "$lm" = 1 ]; then echo "$1"; else echo "$1.$2"; fi; }
same_count() {  # same_count STEP IN OUT: what STEP made of IN (OUT) keeps IN's lines, so the pairs stay aligned
  local a b; a=$(count_lines "$2"); b=$(count_lines "$3")
  [ "$a" -eq "$b" ] || die "$1 turned the $a lines of $2 into $b: the sentence pairs would no longer be aligned (a \
line separator inside a sentence?); fix that line of $2"
}
checks=()  # every input UTF-8, training text not empty, source/target line counts equal, blank lines
# (binarized as sentences without a word): a pair with one blank side an error, others a warning
for i in "${!splits[@]}"; do
  for l in "${langs[@]}"; do
    need_file "$(infile "${prefixes[$i]}" "$l")" "--${splits[$i]%%[0-9]*} file"
    checks+=("$(infile "${prefixes[$i]}" "$l")")
    [ "$i" != 0 ] || checks+=(--nonempty "$(infile "${prefixes[$i]}" "$l")")
  done
  if [ "$lm" = 1 ]; then checks+=(--blank-lines "$(infile "${prefixes[$i]}" txt)")
  else checks+=(--same-lines "$(infile "${prefixes[$i]}" "$src")" "$(infile "${prefixes[$i]}" "$tgt")"); fi
done
if [ -d "$dest" ] && [ -n "$(ls -A "$dest" 2>/dev/null)" ] && [ "$force" = 0 ]; then
  die "--destdir '$dest' exists and is not empty (use --force to replace it)"
fi
activate_env
claim_output "$dest" --destdir --check-ours --marker corpus.json
python -m fairseq_local_repro.text.text_input preprocess.sh "${checks[@]}" || exit 2
work="$dest.tmp.$$"; rm -rf "$work"; mkdir -p "$work/bpe"
trap 'rm -rf "$work"' EXIT

steps() {
say "1/3 normalise (Unicode NFC, tokenize: $tok, lowercase: $lower)"
for i in "${!splits[@]}"; do for l in "${langs[@]}"; do
  in=$(infile "${prefixes[$i]}" "$l"); out="$work/bpe/${splits[$i]}.raw.$l"
  # byte-order marks (U+FEFF) go, CRLF becomes LF and a lone CR a space: Python's and the Moses
  # tokenizer's line readers would split a sentence at a CR (the pairs after it shifted by one)
  LC_ALL=C sed 's/\xEF\xBB\xBF//g; s/\r$//; s/\r/ /g' "$in" >"$out"
  if [ -s "$out" ] && [ -n "$(tail -c1 "$out")" ]; then echo >>"$out"; fi  # a last line without newline
  # one Unicode normal form (NFC) for the text a model learns and the text score.py reads (normal_form.py)
  python -m fairseq_local_repro.text.normal_form <"$out" >"$out.nf"; mv "$out.nf" "$out"
  if [ "$tok" = moses ]; then
    ml=$l; [ "$lm" = 1 ] && ml=en
    sacremoses -l "$ml" -j "$workers" tokenize -x <"$out" >"$out.tok"; mv "$out.tok" "$out"
    same_count "--tokenize moses" "$in" "$out"
  fi
  if [ "$lower" = 1 ]; then
    python -c "import sys;[sys.stdout.write(l.lower()) for l in open(0, encoding='utf-8', newline='\n')]" <"$out" >"$out.lc"
    mv "$out.lc" "$out"; same_count "--lowercase" "$in" "$out"
  fi
done; done

say "2/3 BPE: $bpe (size $size, $([ $joint = 1 ] && echo joint || echo separate))"
models=()
if [ "$joint" = 1 ] || [ "$lm" = 1 ]; then models=(joint); else models=("${langs[@]}"); fi
model_input() { if [ "$1" = joint ]; then for l in "${langs[@]}"; do echo "$work/bpe/train.raw.$l"; done; else echo "$work/bpe/train.raw.$1"; fi; }
model_for() { if [ "$joint" = 1 ] || [ "$lm" = 1 ]; then echo joint; else echo "$1"; fi; }
for m in "${models[@]}"; do
  mapfile -t ins < <(model_input "$m")
  case "$bpe" in
    subword-nmt) cat "${ins[@]}" | subword-nmt learn-bpe -s "$size" -o "$work/bpe/codes.$m" ;;
    sentencepiece) python - "$work/bpe/spm.$m" "$size" "$size_given" "$(model_input "$m" | sed "s|^$work/bpe/train.raw.||" \
        | while read -r l; do infile "$train" "$l"; done | paste -sd,)" "${ins[@]}" <<'PY'
import re, sys, sentencepiece as spm
from fairseq_local_repro.text.normal_form import SPM_RULE
prefix, size, given, named, inputs = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4], sys.argv[5:]
def train(**kw):  # no normalisation of sentencepiece's own: the references keep full-width punctuation
    spm.SentencePieceTrainer.train(input=",".join(inputs), model_prefix=prefix, vocab_size=size,
        character_coverage=1.0, model_type="bpe", input_sentence_size=2000000, shuffle_input_sentence=True,
        minloglevel=2, normalization_rule_name=SPM_RULE, **kw)
try:
    train()
except RuntimeError as e:
    msg = str(e).splitlines()[-1]
    most = re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", msg)
    if most is None:
        sys.exit(f"preprocess.sh: error: sentencepiece training on {named} failed: {msg}")
    if given:
        sys.exit(f"preprocess.sh: error: --bpe-size {size} is more than sentencepiece can build from the training "
                 f"text ({named}: at most {most.group(2)} pieces): pass --bpe-size {most.group(2)} or less")
    train(hard_vocab_limit=False)
    print(f"preprocess.sh: note: the training text allows at most {most.group(2)} sentencepiece pieces, fewer than "
          f"the default --bpe-size {size}: using {most.group(2)} (--bpe-size chooses)", file=sys.stderr)
PY
    ;;
    none) ;;
  esac
done
for i in "${!splits[@]}"; do for l in "${langs[@]}"; do
  s=${splits[$i]}; m=$(model_for "$l"); in="$work/bpe/$s.raw.$l"; out="$work/bpe/$s.$l"
  case "$bpe" in
    subword-nmt) subword-nmt apply-bpe -c "$work/bpe/codes.$m" <"$in" >"$out" ;;
    sentencepiece) python -c "
import sys, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
for line in sys.stdin: print(' '.join(sp.encode(line.rstrip('\n'), out_type=str)))" "$work/bpe/spm.$m.model" <"$in" >"$out" ;;
    none) cp "$in" "$out" ;;
  esac
  same_count "--bpe $bpe" "$(infile "${prefixes[$i]}" "$l")" "$out"
done; done

# sentencepiece: fairseq's dictionary is the sentencepiece vocabulary (counted on the training text,
# most frequent first), so every piece of every split is in it; --nwords keeps the N most frequent
dicts=()
if [ "$bpe" = sentencepiece ]; then
  for m in "${models[@]}"; do
    mapfile -t ins < <(model_input "$m" | sed 's/\.raw\././')
    python - "$work/bpe/spm.$m.model" "$work/bpe/dict.$m.txt" "$nwords" "${ins[@]}" <<'PY'
import collections, sys, sentencepiece as spm
model, out, nwords, texts = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
sp = spm.SentencePieceProcessor(model_file=model)
pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]
counts = collections.Counter()
for path in texts:
    with open(path, encoding="utf-8") as f:
        for line in f:
            counts.update(line.split())
fairseq_specials = {"<s>", "<pad>", "</s>", "<unk>"}
order = sorted((p for p in pieces if p not in fairseq_specials), key=lambda p: -counts[p])  # stable: spm order
if nwords > 0:
    order = order[:nwords]
with open(out, "w", encoding="utf-8") as f:
    f.writelines(f"{p} {counts[p]}\n" for p in order)
PY
  done
  if [ "$joint" = 1 ] || [ "$lm" = 1 ]; then dicts=(--srcdict "$work/bpe/dict.joint.txt")
  else dicts=(--srcdict "$work/bpe/dict.$src.txt" --tgtdict "$work/bpe/dict.$tgt.txt"); fi
fi

say "3/3 fairseq-preprocess"
args=(--destdir "$work" --workers "$workers" --trainpref "$work/bpe/train" --validpref "$work/bpe/valid")
[ ${#tests[@]} -gt 0 ] && args+=(--testpref "$(for i in "${!tests[@]}"; do printf '%s,' "$work/bpe/test$(nsuffix "$i")"; done | sed 's/,$//')")
if [ "$lm" = 1 ]; then
  for s in "${splits[@]}"; do mv "$work/bpe/$s.txt" "$work/bpe/$s"; done
  args=(--only-source --destdir "$work" --workers "$workers" --trainpref "$work/bpe/train" --validpref "$work/bpe/valid")
  [ ${#tests[@]} -gt 0 ] && args+=(--testpref "$work/bpe/test")
  fairseq-preprocess "${args[@]}" "${dicts[@]}" --nwordssrc "$nwords"
else
  [ "$joint" = 1 ] && args+=(--joined-dictionary)
  fairseq-preprocess --source-lang "$src" --target-lang "$tgt" "${args[@]}" "${dicts[@]}" --nwordssrc "$nwords" --nwordstgt "$nwords"
fi
rm -f "$work"/bpe/*.raw.*
# fairseq's log names the folder it wrote, DIR.tmp.PID: name DIR, where everything will be; and a
# warning for each split with more than 1% <unk>
python - "$work" "$dest" <<'PY'
import os, sys
from fairseq_local_repro.text.unk_rate import log_rates, unk_warning
work, dest = sys.argv[1], sys.argv[2]
log = os.path.join(work, "preprocess.log")
with open(log, encoding="utf-8") as f:
    text = f.read().replace(os.path.abspath(work), os.path.abspath(dest)).replace(work, dest)
with open(log + ".tmp", "w", encoding="utf-8") as f:
    f.write(text)
os.replace(log + ".tmp", log)
for lang, path, toks, pct, unk in log_rates(text):
    split = os.path.basename(path).split(".")[0]
    line = unk_warning("preprocess.sh", split if lang is None else f"{split} ({lang})", pct, toks,
                       "check --nwords, --bpe-size, or the split's language and script", unk)
    if line:
        print(line, file=sys.stderr)
PY
# DIR/corpus.json: what DIR was made from (each raw file's path, lines and SHA-256; the transforms)
manifest=(); for i in "${!splits[@]}"; do for l in "${langs[@]}"; do
  manifest+=("${splits[$i]}:$l:$(infile "${prefixes[$i]}" "$l")"); done; done
python -m fairseq_local_repro.text.corpus_manifest --prog preprocess.sh write "$work" \
  --languages "$(IFS=,; echo "${langs[*]}")" --tokenize "$tok" --lowercase "$lower" --bpe "$bpe" --bpe-size "$size" \
  --joint "$joint" "${manifest[@]}" || exit 2
if [ -e "$dest" ]; then rm -rf "$dest.old.$$"; mv "$dest" "$dest.old.$$"; fi
mv "$work" "$dest"; rm -rf "$dest.old.$$"
say "done: $dest"
}
# Ctrl-C (or kill): the EXIT trap removes the unfinished work; --destdir is left as it was
run_interruptible steps "preprocess.sh: interrupted; $dest was left as it was"
