"""Evaluation of a trained system: beam-5 translation scored by sacrebleu, or test perplexity with
every sentence's log-probability; the paper's analyses of the best checkpoint (DPN-S2S's alignment
entropies, parallel cells' cell masking); and the per-sentence statistics of the runs' test outputs
that :mod:`fairseq_local_repro.compare` tests."""
import os
import re
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np

from fairseq_local_core.file_io import mark_ours, read_json, write_json, write_lines
from fairseq_local_repro import compare as stats, significance
from fairseq_local_repro.context import Data
from fairseq_local_repro.prepare import read_lines
from fairseq_local_repro.processes import USER_DIR, ReproError, cpu_flag, run_logged, run_or_fail, tail
from fairseq_local_repro.doors import DoorError
from fairseq_local_repro.tools.generate import GenerateOptions, generate


def _fresh(*paths: str):
    """``paths`` with any file an earlier attempt left there removed (the one path when one is given)."""
    for path in paths:
        if os.path.exists(path):
            os.remove(path)
    return paths[0] if len(paths) == 1 else paths


def _analysis(cmd: List[str], log: str, out_json: str, what: str) -> dict:
    """Run an analysis script that writes ``out_json``; its JSON, or a :class:`ReproError` ``what: ...``."""
    if run_logged(cmd, log) != 0 or not os.path.isfile(out_json):
        raise ReproError(f"{what}: {tail(log)} (full log: {log})")
    return read_json(out_json)


def translate_and_score(tag: str, data: Data, ckpt: str, out_dir: str, subset: str, ref: str,
                        bin_dir: Optional[str] = None, task: str = "translation") -> dict:
    """Beam 5 with :mod:`fairseq_local_repro.tools.generate` (BPE removed, Moses-detokenized), scored by
    :mod:`fairseq_local_repro.tools.score` against the raw references: detokenized,
    case-insensitive sacrebleu (the data are lowercased, or the paper reports case-insensitive
    BLEU), with its signature."""
    os.makedirs(out_dir, exist_ok=True)
    mark_ours(out_dir, "reproduce.py")  # the harness made it: generate may write into it again
    log = os.path.join(out_dir, "generate.log")
    options = GenerateOptions(data=bin_dir or data.bin, path=ckpt, out=out_dir, subset=subset, beam=5, detok="moses",
                              lang=data.tgt, task=task, extra=["--source-lang", data.src, "--target-lang", data.tgt])
    with open(log, "a", encoding="utf-8") as f:
        try:
            generate(options, log=f)
        except DoorError as err:
            raise ReproError(f"{tag}: generation failed: {err} (full log: {log})") from None
    score_json = os.path.join(out_dir, "score.json")
    cmd = [sys.executable, "-m", "fairseq_local_repro.tools.score", "--hyp", os.path.join(out_dir, "hyp.txt"),
           "--ref", ref, "--lowercase", "--json", score_json]
    run_or_fail(cmd, log, f"{tag}: scoring failed")
    s = read_json(score_json)
    return {"bleu": round(s["bleu"], 2), "signature": s["bleu_signature"], "label": s["bleu_label"],
            "hyp": os.path.join(out_dir, "hyp.txt")}


# fairseq-eval-lm --output-word-probs: "<sample id> word [logprob]\tword [logprob]..." after the logger name
_WORD_PROBS = re.compile(r"fairseq_cli\.eval_lm(?::| \| )(\d+) (.*\])$")


def word_logprobs(line: str):
    """``(sample id, [natural-log probability of each word, EOS included, in order])`` of one
    ``fairseq-eval-lm --output-word-probs`` log line; None for any other line."""
    m = _WORD_PROBS.search(line.rstrip("\n"))
    if not m:
        return None
    return int(m.group(1)), [float(item.rsplit(" [", 1)[1][:-1]) for item in m.group(2).split("\t")]


def eval_lm(tag: str, data: Data, ckpt: str, out_dir: str, subset: str = "test", bin_dir: Optional[str] = None) -> dict:
    """Test perplexity with fairseq-eval-lm (one sentence, or one block of running text, per sample,
    as trained), and every sample's summed log-probability (``--output-word-probs``) for the
    per-sentence tests."""
    os.makedirs(out_dir, exist_ok=True)
    log = _fresh(os.path.join(out_dir, "eval_lm.log"))
    cmd = [sys.executable, "-m", "fairseq_cli.eval_lm", bin_dir or data.bin, "--user-dir", USER_DIR,
           "--task", "language_modeling", *data.lm_options(), "--path", ckpt, "--gen-subset", subset,
           "--max-tokens", "4000", "--output-word-probs", "--num-workers", "0", *cpu_flag()]
    sentences: Dict[int, List[float]] = {}
    summary = {}

    def on_line(line: str):
        if "Loss (base 2):" in line:
            text = line.split("Loss (base 2):")[1]
            summary["loss_bits"] = float(text.split(",")[0])
            summary["ppl"] = float(text.split("Perplexity:")[1])
            return
        words = word_logprobs(line)
        if words:  # natural-log probabilities of each word (EOS included), summed per sentence (nats)
            sentences[words[0]] = [-sum(words[1]), len(words[1])]

    if run_logged(cmd, log, on_line) != 0 or "ppl" not in summary:
        raise ReproError(f"{tag}: fairseq-eval-lm failed: {tail(log)} (full log: {log})")
    scores = [sentences[i] for i in sorted(sentences)]
    write_json(os.path.join(out_dir, "sentence_nll.json"), scores)
    return {"ppl": round(summary["ppl"], 2), "loss_bits": summary["loss_bits"], "sentences": len(scores),
            "label": (f"perplexity (fairseq-eval-lm, {data.lm_block}-token blocks of running text, EOS counted)"
                      if data.lm_block else "perplexity (fairseq-eval-lm, one sentence per sample, EOS counted)"),
            "nll": os.path.join(out_dir, "sentence_nll.json")}


def alignment_entropy(tag: str, data: Data, ckpt: str, out_dir: str, subset: str = "test") -> dict:
    """Table 5 of the DPN-S2S paper: :mod:`fairseq_local_repro.analysis.dpn_alignment_entropy` on
    ``subset`` with teacher forcing on the references (the last decoder layer's alignments; per target token
    -sum_i a_i log a_i, averaged over the sentence's tokens, then over sentences).  Returns the
    tool's JSON: the mean entropy per flow (``cc``, ``ca``, ``ac``, ``aa``: decoder path, encoder
    path; c = CNN, a = SAN), the layer, the subset and the number of sentences."""
    os.makedirs(out_dir, exist_ok=True)
    log, out_json = _fresh(os.path.join(out_dir, "alignment_entropy.log"),
                           os.path.join(out_dir, "alignment_entropy.json"))
    cmd = [sys.executable, "-m", "fairseq_local_repro.analysis.dpn_alignment_entropy", data.bin,
           "--path", ckpt, "--user-dir", USER_DIR, "--gen-subset", subset, "--source-lang", data.src,
           "--target-lang", data.tgt, "--layer", "last", "--json", out_json] + cpu_flag()
    return _analysis(cmd, log, out_json, f"{tag}: alignment entropy failed")


def cell_masking(tag: str, data: Data, ckpt: str, out_dir: str, groups, subset: str = "test") -> dict:
    """Section 4.1 of the parallel-cells paper: :mod:`fairseq_local_repro.analysis.parallel_cells_masking`
    on ``subset``, cell i's hidden state zeroed in every layer for each i in turn.  Returns the tool's
    JSON (perplexity overall, per word group and per word, for "none" and each "mask<i>") with the
    subset and the masked layers."""
    os.makedirs(out_dir, exist_ok=True)
    log, out_json = _fresh(os.path.join(out_dir, "cell_masking.log"), os.path.join(out_dir, "cell_masking.json"))
    groups_file = os.path.join(out_dir, "word_groups.txt")
    write_lines(groups_file, (f"{name}: {' '.join(words)}" for name, words in groups))
    cmd = [sys.executable, "-m", "fairseq_local_repro.analysis.parallel_cells_masking", "--path", ckpt,
           "--data", data.bin, "--gen-subset", subset, "--word-groups", groups_file, "--layer", "all",
           "--out", os.path.join(out_dir, "cell_masking.png"), "--json", out_json] + cpu_flag()
    return dict(_analysis(cmd, log, out_json, f"{tag}: cell masking failed"), subset=subset, layer="all")


def run_statistics(kind: str, out: str, test_ref: str, published: Sequence[str] = ()):
    """``stats_of`` (fairseq_local_repro.compare.analyse) for the runs under ``out``: per-sentence
    BLEU statistics of ``<run>/test/hyp.txt`` against ``test_ref``, or the ``(nll, tokens)`` of
    ``<run>/test/sentence_nll.json``; a run with no folder under ``out`` (read from one of the
    published folders ``published``) from its committed outputs in the folder that published it
    (``compare.published_in``, ``compare.folder_stats``)."""
    refs = []
    readers = {}

    def stats_of(r: dict):
        if published and not os.path.isdir(os.path.join(out, f"{r['system']}-s{r['seed']}")):
            folder = stats.published_in(published, r) or published[0]
            if folder not in readers:
                readers[folder] = stats.folder_stats(folder, kind)
            try:
                return readers[folder](r)
            except ValueError as e:
                raise ReproError(str(e))
        tdir = os.path.join(out, f"{r['system']}-s{r['seed']}", "test")
        if kind == "lm":
            path = os.path.join(tdir, "sentence_nll.json")
            return np.asarray(read_json(path), dtype=np.float64) if os.path.isfile(path) else None
        path = os.path.join(tdir, "hyp.txt")
        if not os.path.isfile(path):
            return None
        if not refs:
            refs.extend(read_lines(test_ref))
        try:
            return significance.bleu_statistics(read_lines(path), refs)
        except ValueError as e:
            raise ReproError(f"{path}: {e} in {test_ref}")

    return stats_of
