"""Download and prepare IWSLT14 German-English (``scripts/recipes/prepare_iwslt14.sh``).

The split of Ranzato et al. 2015 / fairseq's examples/translation/prepare-iwslt14.sh (~160k train,
~7k valid, ~6.8k test), a joint subword-nmt BPE of --bpe-size merges (MC-RNN paper: ~25k),
binarized with fairseq-preprocess.

  bash scripts/recipes/prepare_iwslt14.sh [--out DIR] [--bpe-size 25000] [--workers N]
       [--tgz de-en.tgz | --url URL] [--sha256 HASH] [--require-checksum]

--tgz FILE     a local copy of de-en.tgz;  --url URL: a mirror (http(s):// or file://) instead of
               fairseq's; either is checked against scripts/recipes/SHA256SUMS (or --sha256 HASH,
               for a repackaged archive) before it is used.
--require-checksum  refuse a file whose sha256 is not recorded (same as REQUIRE_CHECKSUM=1)
Output: DIR/raw/test.{de,en} (untokenized text of the test split: the references that
scores are computed against), DIR/tok (Moses-tokenized, lowercased text), DIR/bin (data-bin,
languages de -> en; DIR/bin/bpe holds the BPE codes and text), made by scripts/preprocess.sh.
"""
import dataclasses
import glob
import os
import re
import shutil
import sys
from typing import IO, Optional

from fairseq_local_core.file_io import write_text
from fairseq_local_repro.doors import Console, DoorError, command, flag, number, opt
from fairseq_local_repro.downloads import check_sha256, download, known_sha256
from fairseq_local_repro.tools.prepare_ptb import extract, need_file
from fairseq_local_repro.tools.preprocess import PreprocessOptions, moses_tokenize, preprocess

PROG = "prepare_iwslt14.sh"
URL = "http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz"
TESTSETS = ["IWSLT14.TED.dev2010.de-en", "IWSLT14.TEDX.dev2012.de-en", "IWSLT14.TED.tst2010.de-en",
            "IWSLT14.TED.tst2011.de-en", "IWSLT14.TED.tst2012.de-en"]
METADATA = [b"<url>", b"<talkid>", b"<keywords>", b"<speaker>", b"<reviewer", b"<translator", b"<doc", b"</doc>"]
TAGS = re.compile(rb"</?title>|</?description>")
SEG_OPEN, SEG_CLOSE = re.compile(rb'<seg id="[0-9]*">\s*'), re.compile(rb"\s*</seg>\s*")


@dataclasses.dataclass
class Iwslt14Options:
    out: str = opt("--out", "data/iwslt14.de-en")
    bpe_size: int = opt("--bpe-size", 25000, number)
    tgz: Optional[str] = opt("--tgz")
    url: str = opt("--url", URL)
    sha256: Optional[str] = opt("--sha256")
    require_checksum: bool = flag("--require-checksum")
    workers: int = opt("--workers", 4, number)

    def check(self):
        for name, value in (("--bpe-size", self.bpe_size), ("--workers", self.workers)):
            if not (isinstance(value, int) and value > 0):
                raise DoorError(f"{name} must be a positive integer (got {value})")


def _lines(path: str):
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    return lines[:-1] if data.endswith(b"\n") or not data else lines


def extract_text(src_dir: str, raw: str):
    """train.tags without its metadata lines, the XML sets' <seg> elements (fairseq's recipe)."""
    for lang in ("de", "en"):
        kept = [TAGS.sub(b"", x) for x in _lines(os.path.join(src_dir, f"train.tags.de-en.{lang}"))
                if not any(m in x for m in METADATA)]
        with open(os.path.join(raw, f"train.tags.{lang}"), "wb") as f:
            f.write(b"".join(x + b"\n" for x in kept))
        for xml in sorted(glob.glob(os.path.join(src_dir, f"IWSLT14.TED*.{lang}.xml"))):
            segs = [SEG_CLOSE.sub(b"", SEG_OPEN.sub(b"", x)).replace("\u2019".encode(), b"'")
                    for x in _lines(xml) if b"<seg id" in x]
            with open(os.path.join(raw, os.path.basename(xml)[:-len(f".{lang}.xml")] + f".{lang}"), "wb") as f:
                f.write(b"".join(x + b"\n" for x in segs))


def clean(tok: str):
    """Drop empty lines, > 175 tokens, length ratio > 1.5 (Moses clean-corpus-n.perl 1 175)."""
    pairs = {}
    for lang in ("de", "en"):
        with open(os.path.join(tok, f"train.tags.{lang}"), encoding="utf-8") as f:
            pairs[lang] = f.readlines()
    if len(pairs["de"]) != len(pairs["en"]):
        raise DoorError(f"{tok}/train.tags.de: {len(pairs['de'])} lines but {tok}/train.tags.en: {len(pairs['en'])} lines")
    kept = [(x, y) for x, y in zip(pairs["de"], pairs["en"])
            if 1 <= len(x.split()) <= 175 and 1 <= len(y.split()) <= 175
            and len(x.split()) / len(y.split()) <= 1.5 and len(y.split()) / len(x.split()) <= 1.5]
    for k, lang in enumerate(("de", "en")):
        write_text(os.path.join(tok, f"train.clean.{lang}"), "".join(p[k] for p in kept))


def prepare_iwslt14(o: Iwslt14Options, log: Optional[IO] = None) -> str:
    """IWSLT14 De-En under ``o.out`` (see the module's docstring); returns the binarized folder."""
    console = Console(PROG, log)
    o.check()
    sha = o.sha256 or known_sha256(o.url)
    out = os.path.abspath(o.out)
    orig, tok, raw, bin_dir = (os.path.join(out, d) for d in ("orig", "tok", "raw", "bin"))
    for d in (orig, tok, raw):
        os.makedirs(d, exist_ok=True)
    tgz = o.tgz
    if tgz:
        need_file(tgz, "--tgz file")
        check_sha256(tgz, sha, f"--tgz {tgz}", console, o.require_checksum)
    else:
        tgz = os.path.join(orig, "de-en.tgz")
        if not (os.path.isfile(tgz) and os.path.getsize(tgz) > 0):
            console.say(f"downloading {o.url}")
            download(o.url, tgz, sha, console, o.require_checksum)
    src_dir = os.path.join(orig, "de-en")
    shutil.rmtree(src_dir, ignore_errors=True)
    extract(tgz, orig, tgz)
    need_file(os.path.join(src_dir, "train.tags.de-en.de"), "the archive's train.tags.de-en.de")
    console.say("extracting text (train.tags without its metadata lines, the XML sets' <seg> elements)")
    extract_text(src_dir, raw)
    console.say("Moses tokenization + lowercasing (sacremoses)")
    for path in sorted(glob.glob(os.path.join(raw, "train.tags.*")) + glob.glob(os.path.join(raw, "IWSLT14.*"))):
        write_text(os.path.join(tok, os.path.basename(path)),
                   "".join(moses_tokenize(path.rsplit(".", 1)[1], path, lowercase=True)))
    clean(tok)
    console.say("splitting (valid = every 23rd training pair; test = dev2010 + dev2012 + tst2010-2012)")
    for lang in ("de", "en"):
        with open(os.path.join(tok, f"train.clean.{lang}"), encoding="utf-8") as f:
            lines = f.readlines()
        write_text(os.path.join(tok, f"valid.{lang}"), "".join(x for n, x in enumerate(lines, 1) if n % 23 == 0))
        write_text(os.path.join(tok, f"train.{lang}"), "".join(x for n, x in enumerate(lines, 1) if n % 23 != 0))
        for s in TESTSETS:
            need_file(os.path.join(tok, f"{s}.{lang}"), f"the archive's {s}.{lang}.xml")
        for d in (tok, raw):
            text = b""
            for s in TESTSETS:
                with open(os.path.join(d, f"{s}.{lang}"), "rb") as f:
                    text += f.read()
            with open(os.path.join(d, f"test.{lang}"), "wb") as f:
                f.write(text)
    console.say(f"joint BPE ({o.bpe_size} merges) and binarizing (fairseq_local_repro/tools/preprocess.py)")
    preprocess(PreprocessOptions(src="de", tgt="en", train=os.path.join(tok, "train"), valid=os.path.join(tok, "valid"),
                                 test=[os.path.join(tok, "test")], destdir=bin_dir, bpe="subword-nmt",
                                 bpe_size=o.bpe_size, workers=o.workers, force=True), log)
    counts = []
    for split in ("train", "valid", "test"):
        with open(os.path.join(tok, f"{split}.de"), encoding="utf-8") as f:
            counts.append(f"{sum(1 for _ in f)} {split}")
    console.say(f"done: {bin_dir} ({', '.join(counts)})")
    return bin_dir


def main(argv=None) -> int:
    return command(PROG, Iwslt14Options, prepare_iwslt14, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
