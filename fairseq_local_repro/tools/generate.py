"""Beam-search translation of a binarized split, with BPE removed and hypotheses in corpus order.

usage: scripts/generate.sh --data BIN_DIR --path CHECKPOINT[:CHECKPOINT2...] --out DIR
                           [--subset test] [--beam 5] [--lenpen 1.0] [--task translation]
                           [--bpe sentencepiece|subword-nmt|none] [--detok moses|none] [--lang L]
                           [--ref RAW_REFERENCE] [--batch-size 64] [-- EXTRA fairseq-generate ARGS]
Writes, one line per sentence in the original order:
  DIR/hyp.txt      the best hypotheses, BPE removed (Moses-detokenized for language L with --detok moses)
  DIR/ref.tok.txt  the binarized targets as fairseq read them (tokenized and lowercased as preprocessed,
                   <<unk>> for words outside the dictionary): for tokenized BLEU only (score.sh --tokenize none)
  DIR/ref.txt      with --ref: a copy of RAW_REFERENCE, the split's raw target text (e.g. raw/test.en),
                   the reference of detokenized BLEU: score.sh --hyp DIR/hyp.txt --ref DIR/ref.txt
  DIR/generate-SUBSET.txt  fairseq-generate's log
  DIR/gen.json     what these hypotheses translate: BIN_DIR, SUBSET, its languages and (from BIN_DIR/corpus.json,
                   written by preprocess.sh) its raw target file; score.sh refuses a --ref that is another
                   split's or the source side's raw file
Every sentence of the split must get a hypothesis: when fairseq-generate returns fewer (e.g.
--skip-invalid-size-inputs-valid-test skipped sentences longer than the model's positions: the
error says which and how to raise the limits) it fails and DIR is left as it was; so does a
--ref whose line count is not the split's.  fairseq-generate batches with
--required-batch-size-multiple 1, so no sentence is left out of the batches.
DIR is claimed for the whole run (a second run into DIR is one line naming the first one's pid); an
existing DIR that generate.sh did not make (no .fairseq-local or gen.json in it) is left as it is.
A full disk, or an --out that cannot be created (read-only, under a file), is one line naming --out;
everything is written beside DIR first, so DIR is left as it was.  Ctrl-C or kill ends
fairseq-generate with it and removes the work folder.
--bpe defaults to what scripts/preprocess.sh left in BIN_DIR/bpe (sentencepiece if spm.*.model);
--detok to moses when BIN_DIR/corpus.json says the corpus was Moses-tokenized, and --lang to its
target language (else en).
"""
import argparse
import dataclasses
import errno
import glob
import os
import re
import shutil
import sys
from typing import IO, List, Optional

from fairseq_local_core import corpus_manifest, file_io
from fairseq_local_repro.doors import Console, DoorError, main_door, number, opt, parse_options, rest
from fairseq_local_repro.processes import USER_DIR, cuda_available
from fairseq_local_repro.text import gen_text, text_input

PROG = "generate.sh"
BPE_KINDS = ("sentencepiece", "subword-nmt", "none")


@dataclasses.dataclass
class GenerateOptions:
    data: str = opt("--data", "")
    path: str = opt("--path", "")
    out: str = opt("--out", "")
    subset: str = opt("--subset", "test")
    beam: int = opt("--beam", 5, number)
    lenpen: str = opt("--lenpen", "1.0")
    task: str = opt("--task", "translation")
    bpe: str = opt("--bpe", "auto")
    detok: str = opt("--detok", "auto")
    lang: str = opt("--lang", "")
    batch_size: int = opt("--batch-size", 64, number)
    ref: str = opt("--ref", "")
    extra: List[str] = rest("fairseq options go after --")

    def checked(self) -> "GenerateOptions":
        """These options with ``auto`` values resolved from the data folder; :class:`DoorError` for
        the first mistake.  Nothing is written."""
        if not self.data:
            raise DoorError("--data is required")
        if not os.path.isdir(self.data):
            raise DoorError(f"--data '{self.data}' does not exist")
        if not self.path:
            raise DoorError("--path is required")
        for ckpt in self.path.split(":"):
            if not os.path.isfile(ckpt):
                raise DoorError(f"checkpoint '{ckpt}' does not exist")
        if not self.out:
            raise DoorError("--out is required")
        for name, value in (("--beam", self.beam), ("--batch-size", self.batch_size)):
            if not isinstance(value, int) or value < 1:
                raise DoorError(f"{name} must be a positive integer, not '{value}'")
        if self.ref and not os.path.isfile(self.ref):
            raise DoorError(f"--ref '{self.ref}' does not exist")
        bpe = bpe_kind(self.data) if self.bpe == "auto" else self.bpe
        if bpe not in BPE_KINDS:
            raise DoorError(f"--bpe must be sentencepiece, subword-nmt or none, not '{self.bpe}'")
        if self.detok not in ("moses", "none", "auto"):
            raise DoorError(f"--detok must be moses or none, not '{self.detok}'")
        if os.path.exists(self.out) and not os.path.isdir(self.out):
            raise DoorError(f"--out {self.out}: cannot create {self.out}: a file stands in its path")
        return dataclasses.replace(self, bpe=bpe)


def bpe_kind(data: str) -> str:
    """sentencepiece, subword-nmt or none: what scripts/preprocess.sh left in ``data``/bpe."""
    if glob.glob(os.path.join(data, "bpe", "spm.*.model")):
        return "sentencepiece"
    return "subword-nmt" if glob.glob(os.path.join(data, "bpe", "codes.*")) else "none"


def remove_bpe_args(kind: str) -> List[str]:
    """fairseq-generate's option that undoes the BPE ``kind``."""
    return {"sentencepiece": ["--remove-bpe", "sentencepiece"], "subword-nmt": ["--remove-bpe"]}.get(kind, [])


def languages(extra: List[str]):
    """``(source, target)`` named by fairseq-generate's options ``extra`` (None where not given)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("-s", "--source-lang")
    p.add_argument("-t", "--target-lang")
    given, _ = p.parse_known_args(extra)
    return given.source_lang, given.target_lang


def split_size(data: str, subset: str, extra: List[str]) -> int:
    """The number of sentences of ``subset``, from the binarized source side fairseq-generate reads."""
    from fairseq.data import data_utils, indexed_dataset

    src, tgt = languages(extra)
    if src is None or tgt is None:
        src, tgt = data_utils.infer_language_pair(data)
    if src is None or tgt is None:
        raise DoorError(f"cannot tell the languages of --data {data} (no train.SRC-TGT.* files): "
                         "pass --source-lang/--target-lang after --")
    prefixes = [os.path.join(data, f"{subset}.{a}-{b}.{src}") for a, b in ((src, tgt), (tgt, src))]
    for prefix in prefixes:
        impl = indexed_dataset.infer_dataset_impl(prefix)
        if impl == "raw":
            with open(prefix, encoding="utf-8") as f:
                return sum(1 for _ in f)
        if impl is not None:
            return len(indexed_dataset.make_dataset(prefix, impl=impl))
    raise DoorError(f"subset '{subset}' not found in --data {data}: no {prefixes[0]}.idx")


def make_dir(path: str, name: str):
    """``os.makedirs(path)``; a full disk, a read-only file system, no permission or a file in the
    way is one line naming ``name`` (the option or destination ``path`` is for)."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        why = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
               errno.EROFS: "read-only file system", errno.EACCES: "permission denied"}.get(err.errno)
        if why:
            raise DoorError(f"{name}: {why} (cannot create {path})") from None
        if err.errno in (errno.ENOTDIR, errno.EEXIST):
            raise DoorError(f"{name}: cannot create {path}: a file stands in its path") from None
        raise DoorError(f"{name}: cannot create {path} ({err.strerror})") from None


def full_disk(path: str) -> bool:
    """The file system of ``path`` (or of its nearest existing parent) has no room left."""
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path).free == 0
    except OSError:
        return False


# fairseq's warning about the sentences --skip-invalid-size-inputs-valid-test dropped
SKIPPED = re.compile(r"[^0-9](\d+) samples have invalid sizes and will be skipped, max_positions=(.*), "
                     r"first few sample ids=\[([0-9, ]*)\]")


def skipped_error(stderr: List[str], n_split: int, subset: str) -> Optional[str]:
    """The one-line error naming the sentences fairseq-generate skipped as too long, or None."""
    found = [m for m in map(SKIPPED.search, stderr) if m]
    if not found:
        return None
    n_skip, maxpos, ids = found[-1].groups()
    ids = ids + (", ..." if int(n_skip) > 10 else "")
    return (f"{n_skip} of the {n_split} sentences of subset '{subset}' (ids {ids}) are longer than the model's "
            f"positions (max_positions={maxpos}: --max-source-positions / --max-target-positions, source and target "
            "tokens) and were skipped by --skip-invalid-size-inputs-valid-test: BLEU needs every sentence; drop that "
            "option and, for a model without position embeddings (the RNN, lattice and genCNN models), raise the "
            "limits after --: --max-source-positions N --max-target-positions N --model-overrides "
            "\"{'max_source_positions': N, 'max_target_positions': N}\"; otherwise shorten or split those sentences")


def write_lines(path: str, lines: List[str], dest: str):
    """``lines`` into ``path`` (a full disk: one line naming ``dest``, where they are going)."""
    try:
        file_io.write_lines(path, lines)
    except file_io.DiskFullError as err:
        raise DoorError(str(file_io.DiskFullError(dest, err.errno))) from None


def detokenize(lines: List[str], lang: str) -> List[str]:
    """Moses detokenization (sacremoses, XML unescaped), as ``sacremoses -l LANG detokenize``."""
    from sacremoses import MosesDetokenizer

    md = MosesDetokenizer(lang=lang)
    return [md.detokenize(line.split(), unescape=True) for line in lines]


def decode(o: GenerateOptions, tmp: str, console: Console) -> List[str]:
    """fairseq-generate into ``tmp``; its stderr shown on the console and kept in ``tmp``/stderr (the
    cause of sentences it skipped is only there); returns its stderr's lines."""
    cmd = ["fairseq-generate", o.data, "--user-dir", USER_DIR, "--task", o.task, "--path", o.path,
           "--gen-subset", o.subset, "--beam", str(o.beam), "--lenpen", o.lenpen, "--batch-size", str(o.batch_size),
           "--required-batch-size-multiple", "1", *remove_bpe_args(o.bpe), "--results-path", tmp,
           *([] if cuda_available() else ["--cpu"]), *o.extra]
    lines: List[str] = []
    shown = console.log or sys.stderr
    with open(os.path.join(tmp, "stderr"), "w", encoding="utf-8") as kept:
        def show(line):
            lines.append(line)
            for stream in (shown, kept):
                stream.write(line)
                stream.flush()

        try:
            rc = console.run(cmd, stdout=console.log, on_line=show)
        except OSError as err:
            if err.errno not in (errno.ENOSPC, errno.EDQUOT) and not full_disk(tmp):
                raise DoorError(f"cannot run fairseq-generate ({err.strerror or err})") from None
            rc = 1
    if rc != 0:
        if full_disk(tmp):
            raise DoorError(f"{o.out}: no space left on device (writing {tmp}, beside it; {o.out} was left as it was)")
        raise DoorError(f"fairseq-generate failed (exit status {rc}): {lines[-1].strip() if lines else ''}")
    return lines


def write_outputs(o: GenerateOptions, tmp: str, n_split: int, lines: List[str]) -> List[str]:
    """hyp.txt, ref.tok.txt, ref.txt (with --ref) and gen.json in ``tmp``; their names."""
    error = skipped_error(lines, n_split, o.subset)
    if error:
        raise DoorError(error)
    gen_log = os.path.join(tmp, f"generate-{o.subset}.txt")
    try:
        hyps = gen_text.extract(gen_log, "H", n_split)
        refs = gen_text.extract(gen_log, "T", n_split)
    except gen_text.GenTextError as err:
        raise DoorError(str(err)) from None
    if o.detok == "moses":
        hyps = detokenize(hyps, o.lang)
    write_lines(os.path.join(tmp, "hyp.txt"), hyps, os.path.join(o.out, "hyp.txt"))
    write_lines(os.path.join(tmp, "ref.tok.txt"), refs, os.path.join(o.out, "ref.tok.txt"))
    files = [f"generate-{o.subset}.txt", "hyp.txt", "ref.tok.txt"]
    if o.ref:
        try:
            shutil.copyfile(o.ref, os.path.join(tmp, "ref.txt"))
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DoorError(str(file_io.DiskFullError(os.path.join(o.out, "ref.txt"), err.errno))) from None
            raise
        files.append("ref.txt")
    outputs = {name: os.path.join(tmp, name) for name in ("hyp.txt", "ref.tok.txt")}
    record = corpus_manifest.gen_record(o.data, o.subset, outputs, *languages(o.extra))
    try:
        file_io.write_json(os.path.join(tmp, "gen.json"), record, indent=1)
    except file_io.DiskFullError as err:
        raise DoorError(str(file_io.DiskFullError(os.path.join(o.out, "gen.json"), err.errno))) from None
    return files + ["gen.json"]


def generate(options: GenerateOptions, log: Optional[IO] = None) -> str:
    """Translate as the module's docstring says; returns ``options.out``.  Progress lines and
    fairseq-generate's output go to ``log`` (the terminal by default); every mistake is a
    :class:`DoorError` with ``out`` left as it was."""
    console = Console(PROG, log)
    o = options.checked()
    try:
        file_io.claim(o.out, "--out", run=f"{PROG} run")
    except file_io.OutputInUseError as err:
        raise DoorError(str(err)) from None
    try:
        file_io.check_ours(o.out, "--out", markers=("gen.json",))
        manifest = corpus_manifest.read(o.data.split(":")[0]) or {}
        transforms = manifest.get("transforms") or {}
        if o.detok == "auto":
            o.detok = "moses" if transforms.get("tokenize") == "moses" else "none"
        if not o.lang:
            langs = manifest.get("languages") or []
            o.lang = (langs[1] if len(langs) == 2 else None) or "en"
        n_ref = text_input.scan(o.ref) if o.ref else None
        n_split = split_size(o.data.split(":")[0], o.subset, o.extra)
        if o.ref and n_ref != n_split:
            raise DoorError(f"--ref {o.ref} has {n_ref} lines but subset '{o.subset}' of {o.data} has "
                             f"{n_split} sentences")
        tmp = f"{o.out}.tmp.{os.getpid()}"
        try:
            console.say(f"generating {o.subset} ({n_split} sentences) with beam {o.beam} into {o.out}")
            make_dir(tmp, f"--out {o.out}")
            lines = decode(o, tmp, console)
            files = write_outputs(o, tmp, n_split, lines)
            make_dir(o.out, f"--out {o.out}")
            if os.path.exists(os.path.join(o.out, "ref.txt")):
                os.remove(os.path.join(o.out, "ref.txt"))  # an earlier run's reference never stands beside these
            for name in files:
                os.replace(os.path.join(tmp, name), os.path.join(o.out, name))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except (corpus_manifest.CorpusManifestError, text_input.TextInputError, file_io.NotOursError) as err:
        raise DoorError(str(err)) from None
    finally:
        file_io.release(o.out)
    hyp = os.path.join(o.out, "hyp.txt")
    console.say(f"wrote {hyp} ({n_split} lines) and {o.out}/ref.tok.txt (the binarized targets: tokenized BLEU "
                "only)")
    if o.ref:
        console.say(f"raw references: {o.out}/ref.txt (a copy of {o.ref}); detokenized BLEU: scripts/score.sh "
                    f"--hyp {hyp} --ref {o.out}/ref.txt")
    else:
        console.say("no raw references (--ref): detokenized BLEU needs the split's raw target text: "
                    f"scripts/score.sh --hyp {hyp} --ref RAW_TARGET_FILE")
    return o.out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    given = {}

    def run():
        given["options"], _ = parse_options(GenerateOptions, argv, __doc__)
        generate(given["options"])

    return main_door(PROG, run, lambda: f"{PROG}: interrupted; {given['options'].out} was left as it was"
                     if "options" in given else f"{PROG}: interrupted")


if __name__ == "__main__":
    sys.exit(main())
