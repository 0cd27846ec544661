"""Prepare NIST Chinese-English from user-supplied LDC data (``scripts/recipes/prepare_nist_zhen.sh``; no
download: LDC licences).

  bash scripts/recipes/prepare_nist_zhen.sh --out DIR \\
      --train-zh "ldc/LDC2002E18.zh ldc/LDC2003E07.zh ..." --train-en "ldc/LDC2002E18.en ldc/LDC2003E07.en ..." \\
      --set mt05=nist/mt05.src.sgm,nist/mt05.ref.sgm --set mt02=... --set mt03=... [--set ...] \\
      [--valid mt05] [--mode lattice|bpe|both] [--segmenters jieba,thulac,snownlp]
      [--bpe-size 25000] [--max-chars 70] [--max-words 50] [--workers 2]

--train-zh/--train-en: sentence-aligned plain-text files (one sentence per line, same order; the
LDC corpora of Su et al. 2017 are LDC2002E18, LDC2003E07, LDC2003E14, Hansards of LDC2004T07,
LDC2004T08, LDC2005T06: extract each to aligned text first, their formats differ).
--set NAME=SRC_SGM,REF_SGM: a NIST evaluation set (source SGML, and the SGML holding its four
references, told apart by refid/sysid).  The paper: MT05 valid, MT02/03/04/06/08 test.
Output:
  DIR/raw/train.{zh,en}   training pairs, <= --max-chars source characters, <= --max-words words
  DIR/raw/NAME.zh, DIR/refs/NAME.ref0..ref3 (raw English), DIR/raw/NAME.en (= ref0, tokenized)
  --mode lattice: DIR/raw/lattice/*.zh (scripts/build_lattices.py) and DIR/bin-lattice (for
                  --task lattice_translation; valid = --valid, test, test1, ... = the other sets
                  in --set order, listed in DIR/bin-lattice/test_sets.txt)
  --mode bpe:     jieba-segmented Chinese and DIR/bin-bpe from scripts/preprocess.sh (separate
                  subword-nmt BPE of --bpe-size per side, lowercased), same subset naming.
Chinese is NFKC-normalised (full-width Latin letters and digits become ASCII) and spaces are kept
only between two non-Chinese characters (fairseq_local_repro/text/zh_text.py: "Bill Clinton" stays two words).
English is Moses-tokenized and lowercased (BLEU is case-insensitive in the paper).  A finished
segmentation is reused when the recipe runs again; the binarized dirs are rebuilt.
"""
import dataclasses
import os
import re
import shutil
import sys
from typing import IO, List, Optional

from fairseq_local_core.file_io import write_text
from fairseq_local_core.lattice import read_lattices
from fairseq_local_repro.doors import Console, DoorError, command, number, opt, opt_list
from fairseq_local_repro.text.zh_text import normalize
from fairseq_local_repro.tools.preprocess import PreprocessOptions, moses_tokenize, preprocess

PROG = "prepare_nist_zhen.sh"
TAG = re.compile(r"<(refset|srcset|tstset|doc)\b([^>]*)>|<seg\b([^>]*)>(.*?)</seg>", re.I | re.S)


@dataclasses.dataclass
class NistOptions:
    out: Optional[str] = opt("--out")
    train_zh: Optional[str] = opt("--train-zh")  # files separated by spaces
    train_en: Optional[str] = opt("--train-en")
    set: List[str] = opt_list("--set")
    valid: str = opt("--valid", "mt05")
    mode: str = opt("--mode", "lattice")
    segmenters: str = opt("--segmenters", "jieba,thulac,snownlp")
    bpe_size: int = opt("--bpe-size", 25000, number)
    max_chars: int = opt("--max-chars", 70, number)
    max_words: int = opt("--max-words", 50, number)
    workers: int = opt("--workers", 2, number)

    def check(self):
        if not self.out:
            raise DoorError("--out is required")
        if not (self.train_zh and self.train_en):
            raise DoorError("--train-zh and --train-en are required")
        if not self.set:
            raise DoorError("at least one --set NAME=SRC_SGM,REF_SGM is required")
        if self.mode not in ("lattice", "bpe", "both"):
            raise DoorError(f"--mode must be lattice, bpe or both (got {self.mode})")
        for f in self.train_zh.split() + self.train_en.split():
            if not os.path.isfile(f):
                raise DoorError(f"{f}: no such file")


def training_pairs(out: str, maxc: int, maxw: int, zh_files: List[str], en_files: List[str], console: Console):
    """Concatenate, check line counts, clean and filter (written atomically)."""
    if len(zh_files) != len(en_files):
        raise DoorError(f"{len(zh_files)} --train-zh files but {len(en_files)} --train-en files")
    kept, total, zh_out, en_out = 0, 0, [], []
    for zf, ef in zip(zh_files, en_files):
        with open(zf, encoding="utf-8") as f:
            zl = f.read().splitlines()
        with open(ef, encoding="utf-8") as f:
            el = f.read().splitlines()
        if len(zl) != len(el):
            raise DoorError(f"{zf} has {len(zl)} lines, {ef} has {len(el)}")
        for z, e in zip(zl, el):
            total += 1
            z, e = normalize(z), " ".join(e.split())
            if z and e and len(z.replace(" ", "")) <= maxc and len(e.split()) <= maxw:
                zh_out.append(z + "\n")
                en_out.append(e + "\n")
                kept += 1
    write_text(out + ".zh", "".join(zh_out))
    write_text(out + ".en", "".join(en_out))
    console.line(f"train: kept {kept} of {total} pairs (<= {maxc} characters, <= {maxw} words)")


def _attr(s, k):
    m = re.search(k + r'\s*=\s*"?([^"\s>]+)', s or "", re.I)
    return m.group(1) if m else None


def segments(path: str) -> dict:
    """``{set id: {(docid, segid): text}}`` of an SGML file."""
    out, setid, doc = {}, None, None
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    for m in TAG.finditer(text):
        if m.group(1):
            if m.group(1).lower() == "doc":
                doc = _attr(m.group(2), "docid")
                setid = _attr(m.group(2), "sysid") or setid
            else:
                setid = _attr(m.group(2), "refid") or _attr(m.group(2), "sysid") or setid
        else:
            out.setdefault(setid, {})[(doc, _attr(m.group(3), "id"))] = " ".join(re.sub(r"<[^>]+>", "", m.group(4)).split())
    return out


def nist_set(src: str, ref: str, out_zh: str, out_ref: str, console: Console):
    """Source segments and their references, aligned by (docid, segid)."""
    srcs = segments(src)
    if len(srcs) != 1:
        raise DoorError(f"{src}: expected one source set, found {len(srcs)}")
    keys, zh = zip(*list(next(iter(srcs.values())).items()))
    refs = segments(ref)
    if len(refs) < 1:
        raise DoorError(f"{ref}: no reference segments")
    for k, (rid, segs) in enumerate(sorted(refs.items(), key=lambda x: str(x[0]))):
        missing = [key for key in keys if key not in segs]
        if missing:
            raise DoorError(f"{ref}: reference {rid} lacks segment {missing[0]} of {src}")
        write_text(f"{out_ref}.ref{k}", "".join(segs[key] + "\n" for key in keys))
    write_text(out_zh, "".join(normalize(z) + "\n" for z in zh))
    console.line(f"{os.path.basename(out_zh)}: {len(zh)} segments, {len(refs)} references")


def _python(console: Console, module: str, *args: str):
    code = console.run([sys.executable, "-m", f"fairseq_local_repro.tools.{module}", *args])
    if code != 0:
        raise DoorError(f"{module} failed (exit status {code}; its error is above)")


def _link(target: str, link: str):
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(target, link)


def prepare_nist_zhen(o: NistOptions, log: Optional[IO] = None) -> str:
    """NIST Zh-En under ``o.out`` (see the module's docstring); returns ``o.out`` made absolute."""
    console = Console(PROG, log)
    o.check()
    out = os.path.abspath(o.out)
    raw, refs = os.path.join(out, "raw"), os.path.join(out, "refs")
    os.makedirs(raw, exist_ok=True)
    os.makedirs(refs, exist_ok=True)
    training_pairs(os.path.join(raw, "train"), o.max_chars, o.max_words, o.train_zh.split(), o.train_en.split(),
                   console)
    names = []
    for spec in o.set:
        name, files = spec.split("=", 1) if "=" in spec else (spec, spec)
        src, ref = files.split(",", 1) if "," in files else (files, files)
        for path in (src, ref):
            if not os.path.isfile(path):
                raise DoorError(f"--set {name}: {path}: no such file")
        names.append(name)
        nist_set(src, ref, os.path.join(raw, f"{name}.zh"), os.path.join(refs, name), console)
    if o.valid not in names:
        raise DoorError(f"--valid {o.valid} is not one of the --set names ({' '.join(names)})")
    tests = [n for n in names if n != o.valid]
    # English: Moses tokenization + lowercase (targets; ref0 doubles as the binarized target of a set)
    write_text(os.path.join(raw, "train.tok.en"), "".join(moses_tokenize("en", os.path.join(raw, "train.en"), True)))
    for n in names:
        write_text(os.path.join(raw, f"{n}.tok.en"), "".join(moses_tokenize("en", os.path.join(refs, f"{n}.ref0"), True)))
    if o.mode in ("lattice", "both"):
        lat = os.path.join(raw, "lattice")
        os.makedirs(lat, exist_ok=True)
        for n in ["train"] + names:
            if not os.path.isfile(os.path.join(lat, f"{n}.zh")):
                _python(console, "build_lattices", "--input", os.path.join(raw, f"{n}.zh"), "--output",
                        os.path.join(lat, f"{n}.zh"), "--segmenters", o.segmenters, "--workers", str(o.workers))
            _link(os.path.join(raw, f"{n}.tok.en"), os.path.join(lat, f"{n}.en"))
        new = os.path.join(out, "bin-lattice.new")
        shutil.rmtree(new, ignore_errors=True)
        _python(console, "preprocess_lattices", "--source-lang", "zh", "--target-lang", "en", "--trainpref",
                os.path.join(lat, "train"), "--validpref", os.path.join(lat, o.valid),
                *(["--testpref", ",".join(os.path.join(lat, t) for t in tests)] if tests else []),
                "--destdir", new, "--workers", str(o.workers))
        write_text(os.path.join(new, "test_sets.txt"), "".join(t + "\n" for t in tests))
        shutil.rmtree(os.path.join(out, "bin-lattice"), ignore_errors=True)
        os.replace(new, os.path.join(out, "bin-lattice"))
    if o.mode in ("bpe", "both"):
        seg = os.path.join(raw, "seg")
        os.makedirs(seg, exist_ok=True)
        for n in ["train"] + names:
            if not os.path.isfile(os.path.join(seg, f"{n}.lat")):
                _python(console, "build_lattices", "--input", os.path.join(raw, f"{n}.zh"), "--output",
                        os.path.join(seg, f"{n}.lat"), "--segmenters", "jieba", "--workers", str(o.workers))
            write_text(os.path.join(seg, f"{n}.zh"), "".join(" ".join(lattice.path_words()) + "\n"
                                                              for lattice in read_lattices(os.path.join(seg, f"{n}.lat"))))
            _link(os.path.join(raw, f"{n}.tok.en"), os.path.join(seg, f"{n}.en"))
        preprocess(PreprocessOptions(src="zh", tgt="en", train=os.path.join(seg, "train"),
                                     valid=os.path.join(seg, o.valid), test=[os.path.join(seg, t) for t in tests],
                                     destdir=os.path.join(out, "bin-bpe"), bpe="subword-nmt", bpe_size=o.bpe_size,
                                     separate_bpe=True, workers=o.workers, force=True), log)
        write_text(os.path.join(out, "bin-bpe", "test_sets.txt"), "".join(t + "\n" for t in tests))
    console.line(f"done: {out} (references in {out}/refs/NAME.ref0..3)")
    return out


def main(argv=None) -> int:
    return command(PROG, NistOptions, prepare_nist_zhen, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
