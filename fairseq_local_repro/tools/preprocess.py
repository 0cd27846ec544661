"""Tokenize (optional), learn and apply BPE, binarize with fairseq-preprocess (``scripts/preprocess.sh``).

usage: scripts/preprocess.sh --src L1 --tgt L2 --train PREFIX --valid PREFIX [--test PREFIX[,PREFIX2...]]
                             --destdir DIR [options]
       scripts/preprocess.sh --lm --train FILE --valid FILE [--test FILE] --destdir DIR [options]
  PREFIX.L1 / PREFIX.L2 are raw UTF-8 text files, one sentence per line (same line counts; the
  last line may lack its newline); the training files must not be empty. A pair with one blank
  side is an error; blank pairs (and blank lines of an --lm corpus) get a warning naming them.
options:
  --bpe subword-nmt|sentencepiece|none   sub-word model (default: sentencepiece)
  --bpe-size N          merges / vocabulary size (default 8000; sentencepiece: where the training
                        text allows fewer pieces than the default, as many as it allows)
  --separate-bpe        one BPE model per language (default: joint)
  --tokenize moses      Moses-tokenize with sacremoses before BPE (default: none)
  --lowercase           lowercase before everything
  --nwords N            cap each dictionary at N words (fairseq --nwordssrc/--nwordstgt)
  --workers N           fairseq-preprocess workers (default 2)
  --force               replace an existing --destdir that preprocess.sh made (one it did not make is
                        never removed)
Output: DIR/ holds the binarized data, dictionaries and DIR/bpe/ (the BPE model and the
BPE-applied text), and fairseq's DIR/preprocess.log. With sentencepiece the dictionary is the
sentencepiece vocabulary (every piece a valid or test sentence can be cut into is in it);
otherwise fairseq builds it from the training split. A warning names each split with more
than 1% of its tokens replaced by <unk>. DIR/corpus.json records what DIR was made from: each
split's raw files (path, line count, SHA-256) and the transforms (--tokenize, --lowercase, --bpe
and its size); generate.sh, score.sh, the hub and checkpoints check against it. Everything is
built in DIR.tmp.PID and moved into place only when complete; DIR is claimed for the whole run (a second
run into DIR is one line naming the first one's pid).
"""
import collections
import contextlib
import dataclasses
import itertools
import os
import re
import shutil
import sys
from typing import IO, List, Optional

import sentencepiece as spm
from sacremoses import MosesTokenizer
from subword_nmt.apply_bpe import BPE
from subword_nmt.learn_bpe import learn_bpe

from fairseq_local_core import corpus_manifest, file_io
from fairseq_local_repro.doors import Console, DoorError, command, flag, number, opt
from fairseq_local_repro.text import normal_form, text_input
from fairseq_local_repro.text.unk_rate import log_rates, unk_warning

PROG = "preprocess.sh"
DEFAULT_BPE_SIZE = 8000
# what a --destdir holds (--force replaces it whole; anything else in it is refused, not deleted)
WRITES = ("dict*.txt", "*.bin", "*.idx", "bpe", "corpus.json", "preprocess.log",
          "test_sets.txt")  # test_sets.txt: the NIST recipe's order of its test sets


def _tests(text: str) -> List[str]:
    return text.split(",")


@dataclasses.dataclass
class PreprocessOptions:
    """Every option of preprocess.sh; :meth:`check` holds their checks."""

    train: Optional[str] = opt("--train")
    valid: Optional[str] = opt("--valid")
    destdir: Optional[str] = opt("--destdir")
    src: Optional[str] = opt("--src")
    tgt: Optional[str] = opt("--tgt")
    test: List[str] = opt("--test", (), _tests)
    bpe: str = opt("--bpe", "sentencepiece")
    bpe_size: Optional[int] = opt("--bpe-size", None, number)  # None: DEFAULT_BPE_SIZE, not chosen
    separate_bpe: bool = flag("--separate-bpe")
    tokenize: str = opt("--tokenize", "none")
    lowercase: bool = flag("--lowercase")
    nwords: int = opt("--nwords", -1, number)
    workers: int = opt("--workers", 2, number)
    force: bool = flag("--force")
    lm: bool = flag("--lm")

    @property
    def size(self) -> int:
        return DEFAULT_BPE_SIZE if self.bpe_size is None else self.bpe_size

    @property
    def joint(self) -> bool:
        return not self.separate_bpe or self.lm

    @property
    def langs(self) -> List[str]:
        return ["txt"] if self.lm else [self.src, self.tgt]

    def splits(self):
        """``[(split, prefix)]``: train, valid, test, test1, ..."""
        return [("train", self.train), ("valid", self.valid)] + [
            (f"test{i or ''}", prefix) for i, prefix in enumerate(self.test)]

    def infile(self, prefix: str, lang: str) -> str:
        return prefix if self.lm else f"{prefix}.{lang}"

    def check(self):
        """The options' checks, in the order of their messages (raises :class:`DoorError`)."""
        for name in ("train", "valid", "destdir"):
            if not getattr(self, name):
                raise DoorError(f"--{name} is required")
        if self.bpe not in ("subword-nmt", "sentencepiece", "none"):
            raise DoorError(f"--bpe must be subword-nmt, sentencepiece or none, not '{self.bpe}'")
        if self.tokenize not in ("moses", "none"):
            raise DoorError(f"--tokenize must be moses or none, not '{self.tokenize}'")
        if not _positive(self.size):
            raise DoorError(f"--bpe-size must be a positive integer, not '{self.size}'")
        if not (_positive(self.nwords) or self.nwords == -1):
            raise DoorError(f"--nwords must be a positive integer (or -1: no cap), not '{self.nwords}'")
        if not _positive(self.workers):
            raise DoorError(f"--workers must be a positive integer, not '{self.workers}'")
        if not self.lm and not (self.src and self.tgt):
            raise DoorError("--src and --tgt are required (or --lm for a language-model corpus)")
        for split, prefix in self.splits():
            for lang in self.langs:
                path = self.infile(prefix, lang)
                if not os.path.isfile(path):
                    raise DoorError(f"--{split.rstrip('0123456789')} file '{path}' does not exist")
        dest = self.destdir
        if os.path.isdir(dest) and os.listdir(dest) and not self.force:  # a file: check_ours' line
            raise DoorError(f"--destdir '{dest}' exists and is not empty (use --force to replace it)")


def _positive(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check_inputs(o: PreprocessOptions, console: Console):
    """Every input UTF-8, the training text not empty, source and target line counts equal, blank
    lines (a pair with one blank side an error, others a warning)."""
    files, nonempty, pairs, lm_files = [], [], [], []
    for i, (split, prefix) in enumerate(o.splits()):
        sides = [o.infile(prefix, lang) for lang in o.langs]
        files += sides
        if i == 0:
            nonempty += sides
        if o.lm:
            lm_files.append(sides[0])
        else:
            pairs.append(tuple(sides))
    try:
        text_input.check(files + lm_files, nonempty, pairs)
        for warning in text_input.check_blank(pairs, lm_files):
            console.warn(warning)
    except text_input.TextInputError as err:
        raise DoorError(str(err)) from None


def _count_lines(path: str) -> int:
    return corpus_manifest.file_entry(path)["lines"]


def _same_count(step: str, raw: str, out: str):
    """What ``step`` made of ``raw`` (``out``) keeps its lines, so the pairs stay aligned."""
    a, b = _count_lines(raw), _count_lines(out)
    if a != b:
        raise DoorError(f"{step} turned the {a} lines of {raw} into {b}: the sentence pairs would no longer be "
                        f"aligned (a line separator inside a sentence?); fix that line of {raw}")


def normalise_file(path: str, out: str):
    """``path`` without byte-order marks, CRLF as LF and a lone CR as a space (Python's and the Moses
    tokenizer's line readers would split a sentence at a CR), every line ending in a newline, in
    Unicode NFC (:mod:`fairseq_local_repro.text.normal_form`)."""
    with open(path, "rb") as f:
        data = f.read().replace(b"\xef\xbb\xbf", b"")
    lines = data.split(b"\n")
    if data.endswith(b"\n") or not data:
        lines.pop()
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            line = line[:-1] if line.endswith(b"\r") else line
            f.write(normal_form.normalise(line.replace(b"\r", b" ").decode("utf-8")) + "\n")


def moses_tokenize(lang: str, path: str, lowercase: bool = False) -> List[str]:
    """The lines of ``path`` Moses-tokenized as ``sacremoses -l LANG tokenize`` writes them (XML
    special characters escaped as tokenizer.perl does, which sacremoses does with or without ``-x``),
    lowercased on request; each ends in a newline."""
    moses = MosesTokenizer(lang=lang)
    with open(path, encoding="utf-8") as f:
        out = [moses.tokenize(line, return_str=True, escape=True) + "\n" for line in f]
    return [line.lower() for line in out] if lowercase else out


def apply_subword_nmt(codes: str, lines: List[str]) -> List[str]:
    """``lines`` cut by the subword-nmt BPE ``codes`` (``subword-nmt apply-bpe -c CODES``)."""
    with open(codes, encoding="utf-8") as f:
        bpe = BPE(f)
    return [bpe.process_line(line) for line in lines]


def tool(name: str) -> str:
    """An executable on PATH, else the one beside this Python (the environment's)."""
    return shutil.which(name) or os.path.join(os.path.dirname(sys.executable), name)


def _normalise(o: PreprocessOptions, work: str, console: Console):
    for split, prefix in o.splits():
        for lang in o.langs:
            raw, out = o.infile(prefix, lang), os.path.join(work, "bpe", f"{split}.raw.{lang}")
            normalise_file(raw, out)
            if o.tokenize == "moses":
                with open(out, "rb") as fin, open(out + ".tok", "wb") as fout:
                    code = console.run([tool("sacremoses"), "-l", "en" if o.lm else lang, "-j", str(o.workers),
                                        "tokenize", "-x"], stdin=fin, stdout=fout)
                if code != 0:
                    raise DoorError(f"Moses tokenization of {raw} failed (sacremoses exit status {code})")
                os.replace(out + ".tok", out)
                _same_count("--tokenize moses", raw, out)
            if o.lowercase:
                with open(out, encoding="utf-8", newline="\n") as fin, \
                        open(out + ".lc", "w", encoding="utf-8", newline="\n") as fout:
                    fout.writelines(line.lower() for line in fin)
                os.replace(out + ".lc", out)
                _same_count("--lowercase", raw, out)


def _train_sentencepiece(prefix: str, size: int, given: bool, named: str, inputs: List[str], console: Console):
    def train(**kw):  # no normalisation of sentencepiece's own: the references keep full-width punctuation
        spm.SentencePieceTrainer.train(input=",".join(inputs), model_prefix=prefix, vocab_size=size,
                                       character_coverage=1.0, model_type="bpe", input_sentence_size=2000000,
                                       shuffle_input_sentence=True, minloglevel=2,
                                       normalization_rule_name=normal_form.SPM_RULE, **kw)
    try:
        train()
    except RuntimeError as e:
        msg = str(e).splitlines()[-1]
        most = re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", msg)
        if most is None:
            raise DoorError(f"sentencepiece training on {named} failed: {msg}") from None
        if given:
            raise DoorError(f"--bpe-size {size} is more than sentencepiece can build from the training text ({named}: "
                            f"at most {most.group(2)} pieces): pass --bpe-size {most.group(2)} or less") from None
        train(hard_vocab_limit=False)
        console.warn(f"the training text allows at most {most.group(2)} sentencepiece pieces, fewer than the default "
                     f"--bpe-size {size}: using {most.group(2)} (--bpe-size chooses)", kind="note")


def _sentencepiece_dict(model: str, out: str, nwords: int, texts: List[str]):
    """fairseq's dictionary as the sentencepiece vocabulary, counted on the training text (most
    frequent first, ties in sentencepiece's order), so every piece of every split is in it."""
    sp = spm.SentencePieceProcessor(model_file=model)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]
    counts = collections.Counter()
    for path in texts:
        with open(path, encoding="utf-8") as f:
            for line in f:
                counts.update(line.split())
    order = sorted((p for p in pieces if p not in {"<s>", "<pad>", "</s>", "<unk>"}), key=lambda p: -counts[p])
    if nwords > 0:
        order = order[:nwords]
    with open(out, "w", encoding="utf-8") as f:
        f.writelines(f"{p} {counts[p]}\n" for p in order)


def _bpe(o: PreprocessOptions, work: str, console: Console) -> List[str]:
    """Learn and apply the BPE models; fairseq-preprocess's dictionary options."""
    bpe_dir = os.path.join(work, "bpe")
    models = ["joint"] if o.joint else list(o.langs)
    langs_of = {m: (o.langs if m == "joint" else [m]) for m in models}
    model_for = {lang: "joint" if o.joint else lang for lang in o.langs}
    for m in models:
        ins = [os.path.join(bpe_dir, f"train.raw.{lang}") for lang in langs_of[m]]
        if o.bpe == "subword-nmt":
            with open(os.path.join(bpe_dir, f"codes.{m}"), "w", encoding="utf-8") as out:
                files = [open(p, encoding="utf-8") for p in ins]
                try:  # its progress bar goes where the console writes (the harness's log)
                    with contextlib.redirect_stderr(console.log) if console.log else contextlib.nullcontext():
                        learn_bpe(itertools.chain(*files), out, o.size)
                finally:
                    for f in files:
                        f.close()
        elif o.bpe == "sentencepiece":
            named = ",".join(o.infile(o.train, lang) for lang in langs_of[m])
            _train_sentencepiece(os.path.join(bpe_dir, f"spm.{m}"), o.size, o.bpe_size is not None, named, ins,
                                 console)
    for split, prefix in o.splits():
        for lang in o.langs:
            m, src, out = model_for[lang], os.path.join(bpe_dir, f"{split}.raw.{lang}"), os.path.join(bpe_dir, f"{split}.{lang}")
            if o.bpe == "subword-nmt":
                with open(src, encoding="utf-8") as fin:
                    lines = apply_subword_nmt(os.path.join(bpe_dir, f"codes.{m}"), fin)
                with open(out, "w", encoding="utf-8") as fout:
                    fout.writelines(lines)
            elif o.bpe == "sentencepiece":
                sp = spm.SentencePieceProcessor(model_file=os.path.join(bpe_dir, f"spm.{m}.model"))
                with open(src, encoding="utf-8") as fin, open(out, "w", encoding="utf-8") as fout:
                    fout.writelines(" ".join(sp.encode(line.rstrip("\n"), out_type=str)) + "\n" for line in fin)
            else:
                shutil.copyfile(src, out)
            _same_count(f"--bpe {o.bpe}", o.infile(prefix, lang), out)
    if o.bpe != "sentencepiece":
        return []
    for m in models:
        _sentencepiece_dict(os.path.join(bpe_dir, f"spm.{m}.model"), os.path.join(bpe_dir, f"dict.{m}.txt"), o.nwords,
                            [os.path.join(bpe_dir, f"train.{lang}") for lang in langs_of[m]])
    if o.joint:
        return ["--srcdict", os.path.join(bpe_dir, "dict.joint.txt")]
    return ["--srcdict", os.path.join(bpe_dir, f"dict.{o.src}.txt"), "--tgtdict", os.path.join(bpe_dir, f"dict.{o.tgt}.txt")]


def _binarize(o: PreprocessOptions, work: str, dicts: List[str], console: Console):
    bpe_dir = os.path.join(work, "bpe")
    args = ["--destdir", work, "--workers", str(o.workers), "--trainpref", os.path.join(bpe_dir, "train"),
            "--validpref", os.path.join(bpe_dir, "valid")]
    tests = [os.path.join(bpe_dir, split) for split, _ in o.splits()[2:]]
    if o.lm:
        for split, _ in o.splits():
            os.replace(os.path.join(bpe_dir, f"{split}.txt"), os.path.join(bpe_dir, split))
        cmd = [tool("fairseq-preprocess"), "--only-source", *args]
        if tests:
            cmd += ["--testpref", os.path.join(bpe_dir, "test")]
        cmd += [*dicts, "--nwordssrc", str(o.nwords)]
    else:
        if tests:
            args += ["--testpref", ",".join(tests)]
        if o.joint:
            args.append("--joined-dictionary")
        cmd = [tool("fairseq-preprocess"), "--source-lang", o.src, "--target-lang", o.tgt, *args, *dicts,
               "--nwordssrc", str(o.nwords), "--nwordstgt", str(o.nwords)]
    code = console.run(cmd)
    if code != 0:
        raise DoorError(f"fairseq-preprocess failed (exit status {code})")
    for name in os.listdir(bpe_dir):
        if ".raw." in name:
            os.remove(os.path.join(bpe_dir, name))


def _finish_log(o: PreprocessOptions, work: str, console: Console):
    """fairseq's log names DIR, where everything will be, not DIR.tmp.PID; a warning for each split
    with more than 1% <unk>."""
    log = os.path.join(work, "preprocess.log")
    with open(log, encoding="utf-8") as f:
        text = f.read().replace(os.path.abspath(work), os.path.abspath(o.destdir)).replace(work, o.destdir)
    file_io.write_text(log, text)
    for lang, path, toks, pct, unk in log_rates(text):
        split = os.path.basename(path).split(".")[0]
        line = unk_warning(PROG, split if lang is None else f"{split} ({lang})", pct, toks,
                           "check --nwords, --bpe-size, or the split's language and script", unk)
        if line:
            console.line(line)


def preprocess(o: PreprocessOptions, log: Optional[IO] = None, release: bool = True):
    """Preprocess as ``o`` says (progress and the tools' output to ``log``, else stderr); raises
    :class:`DoorError` (one line) and, on Ctrl-C or SIGTERM, leaves ``--destdir`` as it was.
    ``--destdir`` is claimed until the end (``release=False``: until this process ends)."""
    console = Console(PROG, log)
    o.check()
    dest = o.destdir
    lock = file_io.lock_path(dest, create=True)
    try:
        file_io.claim(dest, "--destdir", lock=lock, run=f"{PROG} run")
        file_io.check_ours(dest, "--destdir", ["corpus.json"], writes=WRITES)
    except (file_io.OutputInUseError, file_io.NotOursError) as err:
        raise DoorError(str(err)) from None
    work = f"{dest}.tmp.{os.getpid()}"
    try:
        _check_inputs(o, console)
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(os.path.join(work, "bpe"))
        console.say(f"1/3 normalise (Unicode NFC, tokenize: {o.tokenize}, lowercase: {int(o.lowercase)})")
        _normalise(o, work, console)
        console.say(f"2/3 BPE: {o.bpe} (size {o.size}, {'joint' if not o.separate_bpe else 'separate'})")
        dicts = _bpe(o, work, console)
        console.say("3/3 fairseq-preprocess")
        _binarize(o, work, dicts, console)
        _finish_log(o, work, console)
        files = {}
        for split, prefix in o.splits():
            for lang in o.langs:
                files.setdefault(split, {})[lang] = o.infile(prefix, lang)
        transforms = {"tokenize": o.tokenize, "lowercase": o.lowercase, "bpe": o.bpe,
                      "bpe_size": o.size if o.bpe != "none" else None, "joint_bpe": o.joint and o.bpe != "none"}
        try:
            corpus_manifest.write(work, corpus_manifest.build(files, o.langs, transforms))
        except (corpus_manifest.CorpusManifestError, OSError) as err:
            raise DoorError(err if isinstance(err, corpus_manifest.CorpusManifestError)
                            else f"{err.filename}: {err.strerror}") from None
        old = f"{dest}.old.{os.getpid()}"
        if os.path.exists(dest):
            shutil.rmtree(old, ignore_errors=True)
            os.replace(dest, old)
        os.replace(work, dest)
        shutil.rmtree(old, ignore_errors=True)
        console.say(f"done: {dest}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if release:
            file_io.release(dest, lock)


def main(argv=None) -> int:
    return command(PROG, PreprocessOptions, lambda o: preprocess(o, release=False), __doc__, argv,
                   lambda o: f"{PROG}: interrupted; {o.destdir} was left as it was")


if __name__ == "__main__":
    sys.exit(main())
