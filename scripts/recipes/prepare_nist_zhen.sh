#!/usr/bin/env bash
# Prepare NIST Chinese-English from user-supplied LDC data (no download: LDC licences).
#
#   bash scripts/recipes/prepare_nist_zhen.sh --out DIR \
#       --train-zh "ldc/LDC2002E18.zh ldc/LDC2003E07.zh ..." --train-en "ldc/LDC2002E18.en ldc/LDC2003E07.en ..." \
#       --set mt05=nist/mt05.src.sgm,nist/mt05.ref.sgm --set mt02=... --set mt03=... [--set ...] \
#       [--valid mt05] [--mode lattice|bpe|both] [--segmenters jieba,thulac,snownlp]
#       [--bpe-size 25000] [--max-chars 70] [--max-words 50] [--workers 2] [--force]
#
# --train-zh/--train-en: sentence-aligned plain-text files (one sentence per line, same order; the
# LDC corpora of Su et al. 2017 are LDC2002E18, LDC2003E07, LDC2003E14, Hansards of LDC2004T07,
# LDC2004T08, LDC2005T06: extract each to aligned text first, their formats differ).
# --set NAME=SRC_SGM,REF_SGM: a NIST evaluation set (source SGML, and the SGML holding its four
# references, told apart by refid/sysid).  The paper: MT05 valid, MT02/03/04/06/08 test.
# Output:
#   DIR/raw/train.{zh,en}   training pairs, <= --max-chars source characters, <= --max-words words
#   DIR/raw/NAME.zh, DIR/refs/NAME.ref0..ref3 (raw English), DIR/raw/NAME.en (= ref0, tokenized)
#   --mode lattice: DIR/raw/lattice/*.zh (scripts/build_lattices.py) and DIR/bin-lattice (for
#                   --task lattice_translation; valid = --valid, test, test1, ... = the other sets
#                   in --set order, listed in DIR/bin-lattice/test_sets.txt)
#   --mode bpe:     jieba-segmented Chinese and DIR/bin-bpe from scripts/preprocess.sh (separate
#                   subword-nmt BPE of --bpe-size per side, lowercased), same subset naming.
# Chinese is NFKC-normalised (full-width Latin letters and digits become ASCII) and spaces are kept
# only between two non-Chinese characters (fairseq_local_repro/text/zh_text.py: "Bill Clinton" stays two words).
# English is Moses-tokenized and lowercased (BLEU is case-insensitive in the paper).  A finished
# segmentation is reused when the recipe runs again; the binarized dirs are rebuilt.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
PY=${PYTHON:-python}
opt --out OUT; opt --train-zh TRAIN_ZH; opt --train-en TRAIN_EN; opt_list --set SETS; opt --valid VALID mt05
opt --mode MODE lattice; opt --segmenters SEG jieba,thulac,snownlp; opt --bpe-size BPE 25000; opt --max-chars MAXC 70
opt --max-words MAXW 50; opt --workers WORKERS 2
parse_options "$@"
[ -n "$OUT" ] || die "--out is required"
[ -n "$TRAIN_ZH" ] && [ -n "$TRAIN_EN" ] || die "--train-zh and --train-en are required"
[ ${#SETS[@]} -gt 0 ] || die "at least one --set NAME=SRC_SGM,REF_SGM is required"
case "$MODE" in lattice|bpe|both) ;; *) die "--mode must be lattice, bpe or both (got $MODE)" ;; esac
for f in $TRAIN_ZH $TRAIN_EN; do [ -f "$f" ] || die "$f: no such file"; done
activate_env
OUT=$(abs_dir "$OUT"); mkdir -p "$OUT/raw" "$OUT/refs"

# training pairs: concatenate, check line counts, clean and filter (written atomically)
$PY - "$OUT/raw/train" "$MAXC" "$MAXW" "$TRAIN_ZH" "$TRAIN_EN" <<'EOF'
import os, sys
from fairseq_local_repro.text.zh_text import normalize
out, maxc, maxw, zh_files, en_files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(), sys.argv[5].split()
if len(zh_files) != len(en_files):
    sys.exit(f"prepare_nist_zhen.sh: error: {len(zh_files)} --train-zh files but {len(en_files)} --train-en files")
kept = total = 0
with open(out + ".zh.tmp", "w", encoding="utf-8") as fz, open(out + ".en.tmp", "w", encoding="utf-8") as fe:
    for zf, ef in zip(zh_files, en_files):
        zl = open(zf, encoding="utf-8").read().splitlines()
        el = open(ef, encoding="utf-8").read().splitlines()
        if len(zl) != len(el):
            sys.exit(f"prepare_nist_zhen.sh: error: {zf} has {len(zl)} lines, {ef} has {len(el)}")
        for z, e in zip(zl, el):
            total += 1
            z, e = normalize(z), " ".join(e.split())
            if z and e and len(z.replace(" ", "")) <= maxc and len(e.split()) <= maxw:
                fz.write(z + "\n"); fe.write(e + "\n"); kept += 1
os.replace(out + ".zh.tmp", out + ".zh"); os.replace(out + ".en.tmp", out + ".en")
print(f"train: kept {kept} of {total} pairs (<= {maxc} characters, <= {maxw} words)", file=sys.stderr)
EOF

# NIST sets: source segments and their four references, aligned by (docid, segid)
NAMES=()
for spec in "${SETS[@]}"; do
  name=${spec%%=*}; files=${spec#*=}; src=${files%%,*}; ref=${files#*,}
  [ -f "$src" ] || die "--set $name: $src: no such file"
  [ -f "$ref" ] || die "--set $name: $ref: no such file"
  NAMES+=("$name")
  $PY - "$src" "$ref" "$OUT/raw/$name.zh" "$OUT/refs/$name" <<'EOF'
import os, re, sys
from fairseq_local_repro.text.zh_text import normalize
src, ref, out_zh, out_ref = sys.argv[1:]
TAG = re.compile(r"<(refset|srcset|tstset|doc)\b([^>]*)>|<seg\b([^>]*)>(.*?)</seg>", re.I | re.S)
def attr(s, k):
    m = re.search(k + r'\s*=\s*"?([^"\s>]+)', s or "", re.I)
    return m.group(1) if m else None
def segments(path):
    out, setid, doc = {}, None, None
    for m in TAG.finditer(open(path, encoding="utf-8", errors="replace").read()):
        if m.group(1):
            if m.group(1).lower() == "doc":
                doc = attr(m.group(2), "docid")
                setid = attr(m.group(2), "sysid") or setid
            else:
                setid = attr(m.group(2), "refid") or attr(m.group(2), "sysid") or setid
        else:
            key = (doc, attr(m.group(3), "id"))
            out.setdefault(setid, {})[key] = " ".join(re.sub(r"<[^>]+>", "", m.group(4)).split())
    return out
srcs = segments(src)
if len(srcs) != 1:
    sys.exit(f"prepare_nist_zhen.sh: error: {src}: expected one source set, found {len(srcs)}")
keys, zh = zip(*list(next(iter(srcs.values())).items()))
refs = segments(ref)
if len(refs) < 1:
    sys.exit(f"prepare_nist_zhen.sh: error: {ref}: no reference segments")
for k, (rid, segs) in enumerate(sorted(refs.items(), key=lambda x: str(x[0]))):
    missing = [key for key in keys if key not in segs]
    if missing:
        sys.exit(f"prepare_nist_zhen.sh: error: {ref}: reference {rid} lacks segment {missing[0]} of {src}")
    with open(f"{out_ref}.ref{k}.tmp", "w", encoding="utf-8") as f:
        f.writelines(segs[key] + "\n" for key in keys)
    os.replace(f"{out_ref}.ref{k}.tmp", f"{out_ref}.ref{k}")
with open(out_zh + ".tmp", "w", encoding="utf-8") as f:
    f.writelines(normalize(z) + "\n" for z in zh)
os.replace(out_zh + ".tmp", out_zh)
print(f"{os.path.basename(out_zh)}: {len(zh)} segments, {len(refs)} references", file=sys.stderr)
EOF
done
[[ " ${NAMES[*]} " == *" $VALID "* ]] || die "--valid $VALID is not one of the --set names (${NAMES[*]})"
TESTS=(); for n in "${NAMES[@]}"; do [ "$n" = "$VALID" ] || TESTS+=("$n"); done

# English: Moses tokenization + lowercase (targets; ref0 doubles as the binarized target of a set)
moses_tok en "$OUT/raw/train.en" "$OUT/raw/train.tok.en" --lowercase
for n in "${NAMES[@]}"; do moses_tok en "$OUT/refs/$n.ref0" "$OUT/raw/$n.tok.en" --lowercase; done
TESTPREFS=$(printf ",%s" "${TESTS[@]/#/PFX/}"); TESTPREFS=${TESTPREFS#,}

if [ "$MODE" = lattice ] || [ "$MODE" = both ]; then
  L="$OUT/raw/lattice"; mkdir -p "$L"
  for n in train "${NAMES[@]}"; do
    [ -f "$L/$n.zh" ] || $PY "$REPO_ROOT/scripts/build_lattices.py" --input "$OUT/raw/$n.zh" --output "$L/$n.zh" \
        --segmenters "$SEG" --workers "$WORKERS"
    ln -sf "$OUT/raw/$n.tok.en" "$L/$n.en"
  done
  rm -rf "$OUT/bin-lattice.new"
  $PY "$REPO_ROOT/scripts/preprocess_lattices.py" --source-lang zh --target-lang en --trainpref "$L/train" \
      --validpref "$L/$VALID" ${TESTS:+--testpref "${TESTPREFS//PFX/$L}"} --destdir "$OUT/bin-lattice.new" \
      --workers "$WORKERS"
  printf "%s\n" "${TESTS[@]}" > "$OUT/bin-lattice.new/test_sets.txt"
  rm -rf "$OUT/bin-lattice"; mv "$OUT/bin-lattice.new" "$OUT/bin-lattice"
fi

if [ "$MODE" = bpe ] || [ "$MODE" = both ]; then
  S="$OUT/raw/seg"; mkdir -p "$S"
  for n in train "${NAMES[@]}"; do
    [ -f "$S/$n.lat" ] || $PY "$REPO_ROOT/scripts/build_lattices.py" --input "$OUT/raw/$n.zh" --output "$S/$n.lat" \
        --segmenters jieba --workers "$WORKERS"
    $PY -c "
import sys
from fairseq_local_core.lattice import read_lattices
print(''.join(' '.join(l.path_words()) + '\n' for l in read_lattices(sys.argv[1])), end='')" "$S/$n.lat" > "$S/$n.zh.tmp"
    mv "$S/$n.zh.tmp" "$S/$n.zh"
    ln -sf "$OUT/raw/$n.tok.en" "$S/$n.en"
  done
  bash "$REPO_ROOT/scripts/preprocess.sh" --src zh --tgt en --train "$S/train" --valid "$S/$VALID" \
      ${TESTS:+--test "${TESTPREFS//PFX/$S}"} --destdir "$OUT/bin-bpe" --bpe subword-nmt --bpe-size "$BPE" \
      --separate-bpe --workers "$WORKERS" --force
  printf "%s\n" "${TESTS[@]}" > "$OUT/bin-bpe/test_sets.txt"
fi
echo "done: $OUT (references in $OUT/refs/NAME.ref0..3)" >&2
