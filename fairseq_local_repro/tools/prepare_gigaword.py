"""Prepare English Gigaword headline generation as Rush et al. (2015) (``scripts/recipes/prepare_gigaword.sh``).

First sentence -> headline, tokenized, lowercased, digits mapped to '#', rare words 'UNK' (the
preprocessing of the harvardnlp "sumdata" release, which is what the DPN-S2S, ConvS2S and MC-RNN
papers used: ~3.8M train, ~190k valid, 2000 test pairs), then binarized with a 30k-word vocabulary
per side.

  bash scripts/recipes/prepare_gigaword.sh --sumdata DIR [--out data/gigaword] [--nwords 30000]
       [--valid-size N] [--workers N]

DIR is the unpacked release (https://github.com/harvardnlp/sent-summary), i.e. it holds
  train/train.article.txt train/train.title.txt train/valid.article.filter.txt
  train/valid.title.filter.txt Giga/input.txt Giga/task1_ref0.txt
each either as such or gzipped as the release ships them (train/train.article.txt.gz, ...).
(LDC2011T07 licence required; the data cannot be downloaded here.)  --valid-size keeps the first N
validation pairs (validating on all 190k is slow).  Output: OUT/text/{train,valid,test}.{article,headline},
OUT/refs/test.ref0 (.ref1 ... when the release has Giga/task1_ref1.txt ...: the references ROUGE
is scored against, never fairseq's binarized targets) and OUT/bin (fairseq-preprocess, languages
article -> headline).
"""
import dataclasses
import gzip
import os
import shutil
import sys
from typing import IO, List, Optional

from fairseq_local_repro.doors import Console, DoorError, command, number, opt
from fairseq_local_repro.tools.preprocess import tool

PROG = "prepare_gigaword.sh"
# split -> (article file, headline file) in the release, plain or gzipped
RELEASE = {"train": ("train/train.article.txt", "train/train.title.txt"),
           "valid": ("train/valid.article.filter.txt", "train/valid.title.filter.txt"),
           "test": ("Giga/input.txt", "Giga/task1_ref0.txt")}


@dataclasses.dataclass
class GigawordOptions:
    sumdata: Optional[str] = opt("--sumdata")
    out: str = opt("--out", "data/gigaword")
    nwords: int = opt("--nwords", 30000, number)
    valid_size: int = opt("--valid-size", 0, number)
    workers: int = opt("--workers", 4, number)

    def check(self):
        if not self.sumdata:
            raise DoorError("--sumdata DIR is required (see --help)")
        if not os.path.isdir(self.sumdata):
            raise DoorError(f"--sumdata '{self.sumdata}' does not exist")
        for n in (self.nwords, self.valid_size, self.workers):
            if not (isinstance(n, int) and n >= 0):
                raise DoorError(f"--nwords/--valid-size/--workers take integers (got {n})")

    def release_file(self, name: str) -> str:
        """The release's file ``name``, plain or .gz."""
        for path in (os.path.join(self.sumdata, name), os.path.join(self.sumdata, name + ".gz")):
            if os.path.isfile(path) and os.path.getsize(path) > 0:
                return path
        raise DoorError(f"{self.sumdata}/{name} (or {name}.gz): missing or empty")


def read_lines(path: str) -> List[str]:
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            return f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise DoorError(f"{path}: cannot read ({e})") from None


def write_split(art: str, tit: str, out_a: str, out_t: str, limit: int, split: str, refdir: str, refs: List[str],
                console: Console):
    """Checks line counts, drops pairs with an empty side in train/valid, writes atomically."""
    a, t = read_lines(art), read_lines(tit)
    if len(a) != len(t):
        raise DoorError(f"{art} has {len(a)} lines but {tit} has {len(t)}")
    pairs = list(zip(a, t))
    if split != "test":  # the test set stays complete (2000 pairs) so scores compare with the papers
        pairs = [(x, y) for x, y in pairs if x.strip() and y.strip()]
    if limit:
        pairs = pairs[:limit]
    outs = [(out_a, [p[0] for p in pairs]), (out_t, [p[1] for p in pairs])]
    for k, ref in enumerate(refs):  # the test references, as the release has them
        r = read_lines(ref)
        if len(r) != len(a):
            raise DoorError(f"{ref} has {len(r)} lines but {art} has {len(a)}")
        outs.append((os.path.join(refdir, f"test.ref{k}"), r))
    for path, text in outs:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.writelines(" ".join(x.split()) + "\n" for x in text)
    for path, _ in outs:
        os.replace(path + ".tmp", path)
    console.line(f"{split}: {len(pairs)} pairs")


def prepare_gigaword(o: GigawordOptions, log: Optional[IO] = None) -> str:
    """Gigaword under ``o.out`` (see the module's docstring); returns the binarized folder."""
    console = Console(PROG, log)
    o.check()
    out = os.path.abspath(o.out)
    text, bin_dir, refs = os.path.join(out, "text"), os.path.join(out, "bin"), os.path.join(out, "refs")
    for split in RELEASE:  # every input checked before anything is written
        for name in RELEASE[split]:
            o.release_file(name)
    os.makedirs(text, exist_ok=True)
    os.makedirs(refs, exist_ok=True)
    test_refs = [o.release_file("Giga/task1_ref0.txt")]
    for k in (1, 2, 3):
        name = f"Giga/task1_ref{k}.txt"
        if any(os.path.isfile(p) and os.path.getsize(p) > 0
               for p in (os.path.join(o.sumdata, name), os.path.join(o.sumdata, name + ".gz"))):
            test_refs.append(o.release_file(name))
    for split, (art, tit) in RELEASE.items():
        write_split(o.release_file(art), o.release_file(tit), os.path.join(text, f"{split}.article"),
                    os.path.join(text, f"{split}.headline"), o.valid_size if split == "valid" else 0, split, refs,
                    test_refs if split == "test" else [], console)
    console.say(f"binarizing (vocabulary: {o.nwords} words per side)")
    shutil.rmtree(bin_dir + ".tmp", ignore_errors=True)
    plog = os.path.join(out, "preprocess.log")
    with open(plog, "w", encoding="utf-8") as f:
        code = Console(PROG, f).run([tool("fairseq-preprocess"), "--source-lang", "article", "--target-lang", "headline",
                                     "--trainpref", os.path.join(text, "train"), "--validpref", os.path.join(text, "valid"),
                                     "--testpref", os.path.join(text, "test"), "--nwordssrc", str(o.nwords),
                                     "--nwordstgt", str(o.nwords), "--destdir", bin_dir + ".tmp",
                                     "--workers", str(o.workers)])
    if code != 0:
        with open(plog, encoding="utf-8", errors="replace") as f:
            for line in f.read().splitlines()[-5:]:
                console.line(line)
        raise DoorError(f"fairseq-preprocess failed (log: {plog})")
    shutil.rmtree(bin_dir, ignore_errors=True)
    os.replace(bin_dir + ".tmp", bin_dir)
    console.say(f"done: {bin_dir} (test references: {refs}/test.ref*)")
    return bin_dir


def main(argv=None) -> int:
    return command(PROG, GigawordOptions, prepare_gigaword, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
