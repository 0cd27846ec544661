"""Test sets of the user's (``--test-src/--test-ref``, ``--test-text``): prepared as the family's
data were, scored by every trained system, with each score's bootstrap interval and the paired
randomization test against the baseline's run of the same seed; written to
``OUT/<family>/extra/<name>/scores.json``."""
import os
import shutil
import sys
from typing import Dict, List

import numpy as np

from fairseq_local_core.file_io import read_json, write_json, write_text
from fairseq_local_repro import significance as stats
from fairseq_local_repro.context import RunContext
from fairseq_local_repro.evaluate import eval_lm, translate_and_score
from fairseq_local_repro.prepare import LATTICE_SEGMENTERS, read_lines
from fairseq_local_repro.processes import ReproError, run_or_fail, say
from fairseq_local_repro.tools.preprocess import apply_subword_nmt, moses_tokenize


def _tokenized(lang: str, path: str, log: str, lowercase: bool = False) -> List[str]:
    """``path`` Moses-tokenized (:func:`fairseq_local_repro.tools.preprocess.moses_tokenize`); an
    unreadable file is one line."""
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"Moses-tokenizing {path} ({lang})\n")
    try:
        return moses_tokenize(lang, path, lowercase=lowercase)
    except (OSError, UnicodeDecodeError) as err:
        raise ReproError(f"preparing {path} failed: {err}") from None


def prepare_extra(ctx: RunContext, src_file: str, ref_file: str) -> str:
    """Binarize a raw parallel test set as the family's data were (Moses tokenization, lowercase,
    the family's BPE codes and dictionaries); returns the binarized folder."""
    data = ctx.data
    edir = ctx.extra_dir(src_file)
    bin_dir = os.path.join(edir, "bin")
    if os.path.isfile(os.path.join(bin_dir, f"test.{data.src}-{data.tgt}.{data.src}.idx")):
        return bin_dir
    os.makedirs(edir, exist_ok=True)
    codes = sorted(f for f in os.listdir(os.path.join(data.bin, "bpe")) if f.startswith("codes."))
    if not codes:
        raise ReproError(f"{data.bin}/bpe has no subword-nmt codes to apply to {src_file}")
    log = os.path.join(edir, "prepare.log")
    for lang, path in ((data.src, src_file), (data.tgt, ref_file)):
        text = apply_subword_nmt(os.path.join(data.bin, "bpe", codes[0]),
                                 _tokenized(lang, path, log, lowercase=True))
        write_text(os.path.join(edir, f"test.{lang}"), "".join(text))
    cmd = [sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", data.src, "--target-lang", data.tgt,
           "--testpref", os.path.join(edir, "test"), "--destdir", bin_dir, "--workers", "1",
           "--srcdict", os.path.join(data.bin, f"dict.{data.src}.txt"),
           "--tgtdict", os.path.join(data.bin, f"dict.{data.tgt}.txt")]
    run_or_fail(cmd, log, f"binarizing {src_file} failed")
    return bin_dir


def prepare_extra_lattice(ctx: RunContext, src_file: str, ref_file: str, kinds: List[str]) -> Dict[str, str]:
    """A raw Chinese-English test set prepared as ``prepare_lattice_cpu`` prepared its data, for each
    data kind in ``kinds``: the Chinese through :mod:`fairseq_local_repro.tools.build_lattices` with
    the kind's segmenters, the English Moses-tokenized as the recipe does, binarized with that kind's
    dictionaries (:mod:`fairseq_local_repro.tools.preprocess_lattices`).  Returns the binarized
    folder of each kind."""
    data = ctx.data
    edir = ctx.extra_dir(src_file)
    os.makedirs(edir, exist_ok=True)
    log = os.path.join(edir, "prepare.log")
    tok = os.path.join(edir, f"test.{data.tgt}")
    if not os.path.isfile(tok):
        write_text(tok, "".join(_tokenized(data.tgt, ref_file, log)))
    bins = {}
    for kind in kinds:
        kind_bin = data.bins[kind]
        kdir = os.path.join(edir, kind)
        bins[kind] = os.path.join(kdir, "bin")
        if os.path.isfile(os.path.join(bins[kind], f"test.{data.src}-{data.tgt}.{data.src}.idx")):
            continue
        os.makedirs(kdir, exist_ok=True)
        shutil.copy(tok, os.path.join(kdir, f"test.{data.tgt}"))
        cmd = [sys.executable, "-m", "fairseq_local_repro.tools.build_lattices", "--input", src_file,
               "--output", os.path.join(kdir, f"test.{data.src}"), "--segmenters", LATTICE_SEGMENTERS[kind]]
        run_or_fail(cmd, log, f"segmenting {src_file} ({kind}) failed")
        cmd = [sys.executable, "-m", "fairseq_local_repro.tools.preprocess_lattices", "--source-lang", data.src,
               "--target-lang", data.tgt, "--testpref", os.path.join(kdir, "test"), "--destdir", bins[kind],
               "--workers", "1", "--srcdict", os.path.join(kind_bin, f"dict.{data.src}.txt"),
               "--tgtdict", os.path.join(kind_bin, f"dict.{data.tgt}.txt")]
        run_or_fail(cmd, log, f"binarizing {src_file} ({kind}) failed")
    return bins


def _extra_tests(ctx: RunContext, rows: List[dict], run_stats: dict, score):
    """Per row of an extra test set: the 95% bootstrap half-width of its score and the paired
    randomization test against the baseline's run of the same seed (fairseq_local_repro.compare)."""
    base = ctx.family.baseline.name
    for r in rows:
        key = f"{r['system']}-s{r['seed']}"
        r["ci95"] = round(stats.score_interval(run_stats[key], score), 2)
        bkey = f"{base}-s{r['seed']}"
        if r["system"] != base and bkey in run_stats:
            r["p_vs_baseline"] = round(stats.sentence_test(run_stats[key], run_stats[bkey], score)["p"], 4)


def score_extra(ctx: RunContext, results: List[dict], src_file: str, ref_file: str) -> List[dict]:
    """Every trained system's beam-5 BLEU on a raw test set of the user's (``--test-src/--test-ref``),
    with the paired randomization test against the baseline; written to ``OUT/FAMILY/extra/NAME/scores.json``."""
    data, family = ctx.data, ctx.family
    if data.bins:  # one binarized folder per data kind (lattice family)
        kinds = list(dict.fromkeys(family.system(r["system"]).data for r in results))
        bins = prepare_extra_lattice(ctx, src_file, ref_file, kinds)
    else:
        bins = {"": prepare_extra(ctx, src_file, ref_file)}
    edir = ctx.extra_dir(src_file)
    hyps = {}
    rows = []
    for r in results:
        key = f"{r['system']}-s{r['seed']}"
        system = family.system(r["system"])
        s = translate_and_score(key, data.for_system(system), ctx.best_checkpoint(r["system"], r["seed"]),
                                os.path.join(edir, key), "test", ref_file, bin_dir=bins[system.data], task=family.task)
        hyps[key] = s.pop("hyp")
        rows.append({"system": r["system"], "seed": r["seed"], **s})
    refs = read_lines(ref_file)
    extra_stats = {key: stats.bleu_statistics(read_lines(path), refs) for key, path in hyps.items()}
    _extra_tests(ctx, rows, extra_stats, stats.corpus_bleu)
    write_json(os.path.join(edir, "scores.json"), {"src": os.path.abspath(src_file), "ref": os.path.abspath(ref_file),
                                                   "systems": rows})
    for r in rows:
        say(f"{os.path.basename(src_file)}: {r['system']}-s{r['seed']} BLEU {r['bleu']:.2f}"
            + f" ± {r['ci95']:.2f}" + (f", p {r['p_vs_baseline']}" if "p_vs_baseline" in r else ""))
    return rows


def score_extra_lm(ctx: RunContext, results: List[dict], text_file: str) -> List[dict]:
    """Every trained language model's perplexity on a raw text of the user's (``--test-text``),
    tokenized as the family's data and binarized with its dictionary, with the paired randomization test
    against the baseline; written to ``OUT/FAMILY/extra/NAME/scores.json``."""
    data = ctx.data
    edir = ctx.extra_dir(text_file)
    bin_dir = os.path.join(edir, "bin")
    os.makedirs(edir, exist_ok=True)
    log = os.path.join(edir, "prepare.log")
    if not os.path.isfile(os.path.join(bin_dir, "test.idx")):
        tok = os.path.join(edir, "test.tok")
        write_text(tok, "".join(_tokenized("en", text_file, log, lowercase=True)))
        cmd = [sys.executable, "-m", "fairseq_cli.preprocess", "--only-source", "--testpref", tok, "--destdir", bin_dir,
               "--workers", "1", "--srcdict", os.path.join(data.bin, "dict.txt")]
        run_or_fail(cmd, log, f"binarizing {text_file} failed")
    rows, nll = [], {}
    for r in results:
        key = f"{r['system']}-s{r['seed']}"
        s = eval_lm(key, data, ctx.best_checkpoint(r["system"], r["seed"]), os.path.join(edir, key), bin_dir=bin_dir)
        nll[key] = s.pop("nll")
        rows.append({"system": r["system"], "seed": r["seed"], **s})
    _extra_tests(ctx, rows, {k: np.asarray(read_json(v), dtype=np.float64) for k, v in nll.items()}, stats.corpus_ppl)
    write_json(os.path.join(edir, "scores.json"), {"text": os.path.abspath(text_file), "systems": rows})
    for r in rows:
        say(f"{os.path.basename(text_file)}: {r['system']}-s{r['seed']} perplexity {r['ppl']:.2f}")
    return rows
