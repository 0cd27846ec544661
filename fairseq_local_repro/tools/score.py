"""Score hypotheses against one or more references: sacrebleu BLEU (with its signature) and
optionally ROUGE-1/2/L F1 (rouge-score), case-insensitive on request, multi-reference.

    python scripts/score.py --hyp hyp.txt --ref ref0.txt [--ref ref1.txt ...] [--lowercase]
                            [--tokenize 13a|intl|zh|char|none] [--rouge] [--json OUT]

The one scoring convention of the recipes: detokenized hypotheses against the raw references,
scored with sacrebleu's own tokenizer (default 13a; zh for Chinese targets), printed as
"BLEU (detokenized, ...)".  ``--tokenize none`` scores the whitespace tokens as given (= multi-bleu.perl
on tokenized text) and is printed as "BLEU (tokenized, ...)": never compare the two.
ROUGE is rouge-score's F1 (stemmed) in [0, 1]; with several references each sentence takes its
best reference (``RougeScorer.score_multi``), averaged over sentences.

Detokenized BLEU is only ever computed against raw references: a reference that carries what
only binarized or BPE-applied text holds (fairseq's ``<<unk>>``/``<unk>``, subword-nmt's ``@@``,
sentencepiece's ``\u2581``), or that the pipeline itself names as tokenized (``*.tok``,
``*.tok.txt``: scripts/generate.sh's ``ref.tok.txt``), is refused with one line; score such a file
with ``--tokenize none`` (labelled tokenized) or pass the raw reference.  A hypothesis with BPE
marks left in is refused too (BPE was not removed), and so is a reference that is the hypothesis
file itself.  Hypotheses written by scripts/generate.sh
(listed in the ``gen.json`` beside them) are checked against the corpus they translate: a reference
that is the raw file of another split or of the source side (``corpus.json`` of the data directory)
is refused with one line naming both; a reference the corpus does not know is scored with a note.
Hypotheses and references are scored in Unicode NFC, the normal form preprocess.sh trains on
(:mod:`fairseq_local_repro.text.normal_form`); a note names each file that was not in it.
"""
import argparse
import os
import re
import sys

from fairseq_local_core import corpus_manifest, file_io
from fairseq_local_repro.text import normal_form, text_input

PROG = "score.py"


def fail(msg):
    """One error line, exit status 2 (as every tool here: a usage or input error)."""
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(2)


def read_lines(path, what):
    """Lines of a UTF-8 text file or pipe (``--hyp <(cmd)``; newline stripped); one clear error for a
    missing or non-UTF-8 file."""
    if os.path.isdir(path):
        fail(f"{what} '{path}' is a directory, not a file")
    if not os.path.exists(path):
        fail(f"{what} file '{path}' does not exist")
    try:
        return text_input.read_lines(path, what)
    except text_input.TextInputError as e:
        fail(str(e))


# what a raw reference never holds: (pattern, what it is)
NOT_RAW = [
    (re.compile(r"(?<!\S)<<?unk>>?(?!\S)"), "fairseq's unknown-word mark: a binarized target"),
    (re.compile(r"(?<=\S)@@(?!\S)"), "a subword-nmt BPE mark"),
    (re.compile("\u2581"), "a sentencepiece BPE mark"),
]
TOKENIZED_NAME = re.compile(r"\.tok(\.txt)?$")


def not_raw(lines, bpe_only=False):
    """(line number, mark, what it is) of the first line holding a mark of non-raw text, or None."""
    marks = NOT_RAW[1:] if bpe_only else NOT_RAW
    for n, line in enumerate(lines, 1):
        for pattern, what in marks:
            m = pattern.search(line)
            if m:
                return n, m.group(0).strip(), what
    return None


def check_raw(hyp_path, hyps, ref_paths, refs, tokenize):
    """One-line errors for BLEU that would be mislabelled: detokenized BLEU against a reference
    that is not raw text, or a hypothesis whose BPE was never removed."""
    found = not_raw(hyps, bpe_only=True)
    if found:
        n, mark, what = found
        fail(f"{hyp_path}:{n}: '{mark}' is {what}: remove the BPE first (fairseq-generate --remove-bpe, "
             "scripts/generate.sh does)")
    if tokenize == "none":
        return
    for path, lines in zip(ref_paths, refs):
        how = ("score the raw reference text of the split (scripts/generate.sh --ref RAW writes it to ref.txt), "
               "or give --tokenize none for tokenized BLEU of the tokens as they are")
        if TOKENIZED_NAME.search(path):
            fail(f"--ref {path} is tokenized text (its name says so) and detokenized BLEU needs a raw reference: {how}")
        found = not_raw(lines)
        if found:
            n, mark, what = found
            fail(f"{path}:{n}: '{mark}' is {what}, not raw text; detokenized BLEU needs a raw reference: {how}")


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--hyp", required=True)
    p.add_argument("--ref", required=True, action="append", help="reference file; repeat for multi-reference")
    p.add_argument("--lowercase", action="store_true", help="case-insensitive scores (NIST-style)")
    p.add_argument("--tokenize", default="13a", choices=["13a", "intl", "zh", "char", "none"],
                   help="sacrebleu tokenizer (default 13a); none = tokenized BLEU on the given tokens")
    p.add_argument("--rouge", action="store_true", help="also report ROUGE-1/2/L F1 (summarization)")
    p.add_argument("--json", help="write the scores to this JSON file too")
    return p.parse_args(argv)


def bleu_label(tokenize, lowercase):
    case = "case-insensitive" if lowercase else "case-sensitive"
    if tokenize == "none":
        return f"BLEU (tokenized: whitespace tokens as given, as multi-bleu.perl, {case})"
    return f"BLEU (detokenized: sacrebleu tokenize {tokenize}, {case})"


def score(hyps, refs, lowercase=False, tokenize="13a", rouge=False):
    """Scores of `hyps` against the reference streams `refs` (a list of lists, one per reference)."""
    import sacrebleu

    out = {}
    bleu = sacrebleu.metrics.BLEU(lowercase=lowercase, tokenize=tokenize)
    out["bleu"] = bleu.corpus_score(hyps, refs).score
    out["bleu_signature"] = str(bleu.get_signature())
    out["bleu_kind"] = "tokenized" if tokenize == "none" else "detokenized"
    out["bleu_label"] = bleu_label(tokenize, lowercase)
    if rouge:
        from rouge_score import rouge_scorer

        keys = ("rouge1", "rouge2", "rougeL")
        scorer = rouge_scorer.RougeScorer(list(keys), use_stemmer=True)
        totals = dict.fromkeys(keys, 0.0)
        for i, h in enumerate(hyps):
            best = scorer.score_multi([r[i] for r in refs], h)  # best reference per sentence
            for k in keys:
                totals[k] += best[k].fmeasure
        out.update({f"{k}_f1": v / max(1, len(hyps)) for k, v in totals.items()})
    return out


def format_scores(s):
    lines = [f"{s['bleu_label']} = {s['bleu']:.2f}   [{s['bleu_signature']}]"]
    if "rouge1_f1" in s:
        lines.append(f"ROUGE F1 (rouge-score, stemmed): R-1 {s['rouge1_f1']:.4f}  R-2 {s['rouge2_f1']:.4f}"
                     f"  R-L {s['rougeL_f1']:.4f}")
    return lines


def read_inputs(hyp_path, ref_paths):
    """The hypotheses and one list of lines per reference file, every file as long as the
    hypotheses, none of them empty and none the hypothesis file itself (one-line errors otherwise)."""
    hyps = read_lines(hyp_path, "--hyp")
    refs = [read_lines(r, "--ref") for r in ref_paths]
    for path in ref_paths:
        if os.path.samefile(path, hyp_path):  # BLEU 100 of the hypotheses against themselves
            fail(f"--ref {path} is the --hyp file itself: give the reference translations (the split's raw "
                 "target text)")
    for path, r in zip(ref_paths, refs):
        if len(r) != len(hyps):
            fail(f"{path} has {len(r)} lines but {hyp_path} has {len(hyps)}")
    if not hyps:
        fail(f"{hyp_path} is empty")
    return in_normal_form(hyp_path, hyps, ref_paths, refs)


def in_normal_form(hyp_path, hyps, ref_paths, refs):
    """Hypotheses and references in the one Unicode normal form of preprocessing and scoring
    (:mod:`fairseq_local_repro.text.normal_form`), with a note naming each file that was not in it
    (text that differs only in normal form would otherwise count as different words)."""
    out = []
    for path, lines in [(hyp_path, hyps)] + list(zip(ref_paths, refs)):
        lines, changed = normal_form.normalise_lines(lines)
        if changed:
            print(f"{PROG}: note: {changed} of the {len(lines)} lines of {path} are not in Unicode "
                  f"{normal_form.FORM}: scored in {normal_form.FORM}, as preprocess.sh trains", file=sys.stderr)
        out.append(lines)
    return out[0], out[1:]


def write_scores(path, s):
    """The scores as JSON at ``path``, atomically; on a full disk the earlier file is left as it was."""
    try:
        file_io.write_json(path, s, indent=2)
    except file_io.DiskFullError as e:
        fail(str(e))
    except OSError as e:  # a missing folder, no permission, a folder in the way
        folder = os.path.dirname(os.path.abspath(path))
        fail(f"--json {path}: cannot write it ({e.strerror or e if os.path.isdir(folder) else 'no folder ' + folder})")


def check_corpus(hyp_path, ref_paths, lowercase):
    """Hypotheses of scripts/generate.sh (its ``gen.json`` beside them) against a reference that is
    another split's or the source side's raw file of their corpus (``corpus.json``): one line naming
    both; a reference the corpus does not know, or cased BLEU of a lowercased corpus: a note
    (:func:`fairseq_local_core.corpus_manifest.check_reference`)."""
    notes = []
    for path in ref_paths:
        try:
            notes += [n for n in corpus_manifest.check_reference(hyp_path, path, lowercase) if n not in notes]
        except corpus_manifest.CorpusManifestError as err:
            fail(str(err))
    for note in notes:
        print(f"{PROG}: note: {note}", file=sys.stderr)


def score_files(a):
    """The scores of the parsed command line ``a`` (also written to ``--json``), printed; returns them."""
    hyps, refs = read_inputs(a.hyp, a.ref)
    check_raw(a.hyp, hyps, a.ref, refs, a.tokenize)
    check_corpus(a.hyp, a.ref, a.lowercase)
    s = score(hyps, refs, a.lowercase, a.tokenize, a.rouge)
    s["nrefs"] = len(refs)
    if a.json:
        write_scores(a.json, s)
    for line in format_scores(s):
        print(line)
    return s


def main(argv=None):
    """The command line: 0 once the scores are printed, 1 when the reader of the output stopped
    early (``score.py ... | head -1``: no traceback), 2 for bad input (one line)."""
    a = parse_args(argv)
    try:
        score_files(a)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # for the flush at exit
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
