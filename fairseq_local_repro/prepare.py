"""Data preparation: each family's corpus split into train, dev and test (held-out parts cleaned of
every pair whose source occurs in training), then tokenized, BPE'd and binarized once per family by
the project's own recipes.  ``OUT/<family>/data/prepared.json`` marks a finished preparation and
records its settings: a later run with the same settings reuses it, one with other settings stops
with one line."""
import dataclasses
import os
import shutil
from typing import Dict, List, Optional

from fairseq_local_core.file_io import read_json, write_json, write_lines
from fairseq_local_repro.context import Data
from fairseq_local_repro.family_types import Family, Scale
from fairseq_local_repro.doors import DoorError
from fairseq_local_repro.processes import REPO, ReproError, run_or_fail, say
from fairseq_local_repro.tools.prepare_iwslt14 import Iwslt14Options, prepare_iwslt14
from fairseq_local_repro.tools.prepare_ptb import PtbOptions, prepare_ptb
from fairseq_local_repro.tools.preprocess import PreprocessOptions, preprocess


def read_lines(path: str) -> List[str]:
    if not os.path.isfile(path):
        raise ReproError(f"data file '{path}' does not exist (see --data-root)")
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def _in_log(log_path: str, what: str, step, options):
    """``step(options, log)`` with its progress and tools' output appended to ``log_path``; an error is
    one line naming the log."""
    with open(log_path, "a", encoding="utf-8") as log:
        try:
            return step(options, log)
        except DoorError as err:
            raise ReproError(f"{what}: {err} (full log: {log_path})") from None


def run_preprocess(log_path: str, **options):
    """:func:`fairseq_local_repro.tools.preprocess.preprocess` with ``options`` (:func:`_in_log`)."""
    _in_log(log_path, "data preparation failed", preprocess, PreprocessOptions(**options))


def prepared_data(out: str) -> Optional[Data]:
    """The data a finished preparation under ``out`` (``OUT/<family>``) recorded (None if there is none)."""
    marker = os.path.join(out, "data", "prepared.json")
    return Data(**read_json(marker)["data"]) if os.path.isfile(marker) else None


def prepare(family: Family, scale_name: str, scale: Scale, out: str, data_root: str, limit_train: Optional[int],
            limit_eval: Optional[int], iwslt_tgz: Optional[str], running_text: bool = False) -> Data:
    """The family's data at ``--scale scale_name``, prepared under ``out/data`` (or the earlier
    preparation with the same settings); ``running_text``: a language-model family's running-text
    corpus (``--running-text``) instead of its sentences."""
    limit_train = limit_train or scale.train_pairs
    if running_text:
        return prepare_running_text(family, out, data_root, limit_train, limit_eval)
    if family.kind == "lm":
        return (prepare_lm_cpu(family, out, data_root, limit_train, limit_eval) if scale_name == "cpu"
                else prepare_lm_paper(family, out))
    if scale_name == "cpu" and family.task == "lattice_translation":
        return prepare_lattice_cpu(family, out, data_root, limit_train, limit_eval)
    if scale_name == "cpu":
        return prepare_translation_cpu(family, out, data_root, limit_train, limit_eval)
    return prepare_translation_paper(family, out, iwslt_tgz)


def _prepared_earlier(ddir: str, settings: dict) -> Optional[Data]:
    """The data a finished preparation in ``ddir`` recorded in ``prepared.json`` (None if there is
    none); one line when it was prepared with other settings."""
    marker = os.path.join(ddir, "prepared.json")
    if not os.path.isfile(marker):
        return None
    info = read_json(marker)
    if info.get("settings") != settings:
        raise ReproError(f"{marker} was prepared with {info.get('settings')}, not {settings}: "
                         f"use another --out or delete {ddir}")
    return Data(**info["data"])


def _read_parallel(corpus: str, src: str, tgt: str, dev_size: int):
    """A corpus's ``train.*`` and ``valid.*`` (= our test set) sides and its number of training
    pairs; one line when the sides' line counts differ or there are too few pairs for the dev set."""
    train = {l: read_lines(os.path.join(corpus, f"train.{l}")) for l in (src, tgt)}
    test = {l: read_lines(os.path.join(corpus, f"valid.{l}")) for l in (src, tgt)}
    n = len(train[src])
    if len(train[tgt]) != n or len(test[src]) != len(test[tgt]):
        raise ReproError(f"{corpus}: source and target line counts differ")
    if n <= dev_size:
        raise ReproError(f"{corpus}/train.{src}: {n} pairs, need more than the {dev_size} dev pairs")
    return train, test, n


def normalise_source(line: str) -> str:
    """A source sentence as the overlap check compares it: case-folded, whitespace runs collapsed."""
    return " ".join(line.casefold().split())


def drop_seen_sources(train_sources: List[str], parts: Dict[str, Dict[str, List[str]]], src: str):
    """Clean held-out parts: from each part (``{name: {side: lines}}``, ``side`` ``src`` being the
    source) drop every pair whose normalised source (:func:`normalise_source`) occurs among
    ``train_sources``, all sides of the pair together.  Returns the cleaned parts and, per part,
    how many pairs were dropped."""
    seen = {normalise_source(x) for x in train_sources}
    cleaned, dropped = {}, {}
    for name, sides in parts.items():
        keep = [i for i, x in enumerate(sides[src]) if normalise_source(x) not in seen]
        cleaned[name] = {k: [v[i] for i in keep] for k, v in sides.items()}
        dropped[name] = len(sides[src]) - len(keep)
    return cleaned, dropped


def _clean_note(dropped: Dict[str, int], unit: str = "pairs") -> str:
    return (f"dev and test cleaned of every {unit[:-1]} whose source (case-folded, whitespace collapsed) occurs in the "
            f"training part: {dropped['dev']} dev and {dropped['test']} test {unit} dropped")


def prepare_translation_cpu(family: Family, out: str, data_root: str, limit_train: Optional[int],
                            limit_eval: Optional[int], dev_size: int = 1000) -> Data:
    """Multi30k De-En split as ``families.MULTI30K_CPU`` says, then :mod:`fairseq_local_repro.tools.preprocess`
    (done once per family; ``data/prepared.json`` marks it complete)."""
    src, tgt = "de", "en"
    ddir = os.path.join(out, "data")
    settings = {"limit_train": limit_train, "limit_eval": limit_eval, "dev_size": dev_size, "clean_eval": True}
    if (done := _prepared_earlier(ddir, settings)) is not None:
        return done
    corpus = os.path.join(data_root, "multi30k-de-en")
    train, test, n = _read_parallel(corpus, src, tgt, dev_size)
    raw = os.path.join(ddir, "raw")
    os.makedirs(raw, exist_ok=True)
    n_train = n - dev_size if limit_train is None else min(limit_train, n - dev_size)
    n_eval = None if limit_eval is None else limit_eval
    held, dropped = drop_seen_sources(train[src][:n - dev_size], {
        "dev": {l: train[l][n - dev_size:] for l in (src, tgt)}, "test": test}, src)
    for l in (src, tgt):
        write_lines(os.path.join(raw, f"train.{l}"), train[l][:n_train])
        write_lines(os.path.join(raw, f"dev.{l}"), held["dev"][l][:n_eval])
        write_lines(os.path.join(raw, f"test.{l}"), held["test"][l][:n_eval])
    sizes = {"train": n_train, "dev": len(held["dev"][src][:n_eval]), "test": len(held["test"][src][:n_eval]),
             "dev_dropped": dropped["dev"], "test_dropped": dropped["test"]}
    bin_dir = os.path.join(ddir, "bin")
    say(f"{family.name}: preparing data ({sizes['train']} train / {sizes['dev']} dev / {sizes['test']} test pairs)")
    run_preprocess(os.path.join(ddir, "preprocess.log"), src=src, tgt=tgt, train=os.path.join(raw, "train"),
                   valid=os.path.join(raw, "dev"), test=[os.path.join(raw, "test")], destdir=bin_dir,
                   tokenize="moses", lowercase=True, bpe="subword-nmt", bpe_size=8000, force=True)
    desc = (f"Multi30k De-En: training pairs 1-{n_train} = train, the last {dev_size} training pairs = dev"
            f"{'' if n_eval is None else f' (first {n_eval})'}, the official validation set = test"
            f"{'' if n_eval is None else f' (first {n_eval})'}; {_clean_note(dropped)} ({sizes['dev']} dev / "
            f"{sizes['test']} test pairs); Moses-tokenized, lowercased, joint subword-nmt BPE 8000")
    data = Data(bin=bin_dir, src=src, tgt=tgt, test_ref=os.path.join(raw, f"test.{tgt}"), description=desc,
                sizes=sizes)
    write_json(os.path.join(ddir, "prepared.json"), {"settings": settings, "data": dataclasses.asdict(data)})
    return data


# the Chinese of each data kind of scripts/recipes/lattice_zh_en_small.sh: the segmenters of
# scripts/build_lattices.py (the first gives the primary path)
LATTICE_SEGMENTERS = {"lattice": "jieba,thulac,snownlp", "word": "jieba", "word_thulac": "thulac",
                      "word_snownlp": "snownlp", "char": "char"}


def systematic_dev_indices(n: int, dev_size: int) -> List[int]:
    """The dev pairs of an ordered corpus: every (n // dev_size)-th pair, the last of each stride,
    ``dev_size`` of them, so that the dev set spans the corpus's order (Tatoeba's training file is
    sorted by length: its last pairs are twice as long as the rest and as the test set)."""
    stride = n // dev_size
    return [stride * k + stride - 1 for k in range(dev_size)]


def split_tatoeba(train: Dict[str, List[str]], test: Dict[str, List[str]], dev_size: int, src: str = "zh"):
    """The lattice family's split of Tatoeba (every side of ``train``/``test``: ``zh``, ``en`` and the
    attribution lines): the systematic dev pairs (:func:`systematic_dev_indices`), the other training
    pairs = train, the official validation set = test; then dev and test cleaned of every pair whose
    normalised source occurs in the training part (:func:`drop_seen_sources`).  Returns
    ``({"train"|"dev"|"test": {side: lines}}, {"dev"|"test": pairs dropped})``."""
    n = len(train[src])
    dev_idx = set(systematic_dev_indices(n, dev_size))
    rest = {k: [x for i, x in enumerate(v) if i not in dev_idx] for k, v in train.items()}
    dev = {k: [v[i] for i in sorted(dev_idx)] for k, v in train.items()}
    held, dropped = drop_seen_sources(rest[src], {"dev": dev, "test": test}, src)
    return {"train": rest, **held}, dropped


def prepare_lattice_cpu(family: Family, out: str, data_root: str, limit_train: Optional[int],
                        limit_eval: Optional[int], dev_size: int = 1000) -> Data:
    """Tatoeba Zh-En split as ``families.TATOEBA_ZH_EN_CPU`` says (each pair's attribution line
    goes with it), then scripts/recipes/lattice_zh_en_small.sh with PREP_ONLY=1: the English side
    Moses-tokenized once, the length filter on the training pairs, and per data kind of the family's
    systems (lattices, jieba chains, character chains) the Chinese and a binarized dir
    ``data/bin/KIND`` with the same English side.  Every kind is prepared whatever ``--systems``
    selects, so that a later run with more systems reuses the data."""
    src, tgt = "zh", "en"
    kinds = list(dict.fromkeys(s.data for s in family.systems))  # in registry order
    unknown = [k for k in kinds if k not in LATTICE_SEGMENTERS]
    if unknown:
        raise ReproError(f"family '{family.name}': unknown lattice data kind(s) {', '.join(unknown)} "
                         f"(known: {', '.join(sorted(LATTICE_SEGMENTERS))})")
    ddir = os.path.join(out, "data")
    settings = {"limit_train": limit_train, "limit_eval": limit_eval, "dev_size": dev_size, "kinds": kinds,
                "dev_split": "systematic", "clean_eval": True}
    if (done := _prepared_earlier(ddir, settings)) is not None:
        return done
    corpus = os.path.join(data_root, "tatoeba-zh-en")
    train, test, n = _read_parallel(corpus, src, tgt, dev_size)
    for split, count in (("train", n), ("valid", len(test[src]))):  # CC-BY: the authors go with the pairs
        path = os.path.join(corpus, f"{split}.attribution")
        if os.path.isfile(path):
            lines = read_lines(path)
            if len(lines) != count:
                raise ReproError(f"{path}: {len(lines)} lines for {count} sentence pairs")
            (train if split == "train" else test)["attribution"] = lines
    # an interrupted preparation with other settings leaves nothing behind that the recipe would reuse
    marker = os.path.join(ddir, "preparing.json")
    if os.path.isfile(marker) and read_json(marker) != settings:
        for name in ("split", "raw", "bin"):
            shutil.rmtree(os.path.join(ddir, name), ignore_errors=True)
    os.makedirs(ddir, exist_ok=True)
    write_json(marker, settings)
    split_dir = os.path.join(ddir, "split")
    os.makedirs(split_dir, exist_ok=True)
    parts, dropped = split_tatoeba(train, test, dev_size)
    n_train = len(parts["train"][src]) if limit_train is None else min(limit_train, len(parts["train"][src]))
    for key in train:
        write_lines(os.path.join(split_dir, f"train.{key}"), parts["train"][key][:n_train])
        write_lines(os.path.join(split_dir, f"valid.{key}"), parts["dev"][key][:limit_eval])
    for key in test:
        write_lines(os.path.join(split_dir, f"test.{key}"), parts["test"][key][:limit_eval])
    n_dev, n_test = len(parts["dev"][src][:limit_eval]), len(parts["test"][src][:limit_eval])
    say(f"{family.name}: preparing data ({n_train} train / {n_dev} dev / {n_test} test pairs; "
        f"Chinese as {', '.join(kinds)})")
    cmd = ["env", "PREP_ONLY=1", "WORKERS=1", f"SYSTEMS={' '.join(kinds)}", "bash",
           os.path.join(REPO, "scripts", "recipes", "lattice_zh_en_small.sh"), split_dir, ddir]
    log = os.path.join(ddir, "prepare.log")
    run_or_fail(cmd, log, "data preparation failed")
    kept = len(read_lines(os.path.join(ddir, "raw", f"train.{tgt}")))
    limited = "" if limit_eval is None else f" (first {limit_eval})"
    desc = (f"Tatoeba Zh-En (CC-BY 2.0 France, tatoeba.org; authors in the *.attribution files beside the data): "
            f"every {n // dev_size}th training pair = dev candidate ({dev_size} pairs spread over the corpus, which is "
            f"ordered by length), the first {n_train} others = train ({kept} kept by the paper's length "
            f"filter: <= 70 characters, <= 50 words), the official validation set = test; {_clean_note(dropped)}, "
            f"leaving {n_dev} dev and {n_test} test pairs{limited}; English Moses-tokenized (cased, no BPE), Chinese as "
            + ", ".join({"lattice": "jieba+thulac+snownlp lattices", "word": "jieba word chains",
                         "word_thulac": "thulac word chains", "word_snownlp": "snownlp word chains",
                         "char": "character chains"}[k] for k in kinds)
            + ", word types seen >= 2 times (scripts/recipes/lattice_zh_en_small.sh)")
    bins = {k: os.path.join(ddir, "bin", k) for k in kinds}
    data = Data(bin=bins[family.baseline.data], src=src, tgt=tgt, test_ref=os.path.join(split_dir, f"test.{tgt}"),
                description=desc, sizes={"train": kept, "dev": n_dev, "test": n_test, "dev_dropped": dropped["dev"],
                                         "test_dropped": dropped["test"]}, bins=bins)
    write_json(os.path.join(ddir, "prepared.json"), {"settings": settings, "data": dataclasses.asdict(data)})
    os.remove(marker)
    return data


def prepare_translation_paper(family: Family, out: str, iwslt_tgz: Optional[str]) -> Data:
    """IWSLT14 De-En through :mod:`fairseq_local_repro.tools.prepare_iwslt14` (download or ``--iwslt-tgz``)."""
    if (done := prepared_data(out)) is not None:
        return done
    ddir = os.path.join(out, "data")
    os.makedirs(ddir, exist_ok=True)
    log = os.path.join(ddir, "prepare.log")
    say(f"{family.name}: preparing IWSLT14 De-En (fairseq_local_repro/tools/prepare_iwslt14.py)")
    _in_log(log, "IWSLT14 preparation failed", prepare_iwslt14, Iwslt14Options(out=ddir, bpe_size=family.bpe_paper,
                                                                             tgz=iwslt_tgz or None))
    data = Data(bin=os.path.join(ddir, "bin"), src="de", tgt="en", test_ref=os.path.join(ddir, "raw", "test.en"),
                description=family.data_paper, sizes={})
    write_json(os.path.join(ddir, "prepared.json"), {"settings": {}, "data": dataclasses.asdict(data)})
    return data


def prepare_lm_cpu(family: Family, out: str, data_root: str, limit_train: Optional[int],
                   limit_eval: Optional[int], dev_size: int = 1000) -> Data:
    """The English side of Multi30k as a language-model corpus (``families.MULTI30K_EN_LM``),
    split as the translation families split it, through :mod:`fairseq_local_repro.tools.preprocess` (``lm``)."""
    ddir = os.path.join(out, "data")
    settings = {"limit_train": limit_train, "limit_eval": limit_eval, "dev_size": dev_size, "clean_eval": True}
    if (done := _prepared_earlier(ddir, settings)) is not None:
        return done
    corpus = os.path.join(data_root, "multi30k-de-en")
    train = read_lines(os.path.join(corpus, "train.en"))
    test = read_lines(os.path.join(corpus, "valid.en"))
    n = len(train)
    if n <= dev_size:
        raise ReproError(f"{corpus}/train.en: {n} lines, need more than the {dev_size} dev lines")
    n_train = n - dev_size if limit_train is None else min(limit_train, n - dev_size)
    raw = os.path.join(ddir, "raw")
    os.makedirs(raw, exist_ok=True)
    held, dropped = drop_seen_sources(train[:n - dev_size], {"dev": {"en": train[n - dev_size:]},
                                                              "test": {"en": test}}, "en")
    splits = {"train": train[:n_train], "dev": held["dev"]["en"][:limit_eval], "test": held["test"]["en"][:limit_eval]}
    for name, lines in splits.items():
        write_lines(os.path.join(raw, f"{name}.txt"), lines)
    sizes = {**{k: len(v) for k, v in splits.items()}, "dev_dropped": dropped["dev"], "test_dropped": dropped["test"]}
    bin_dir = os.path.join(ddir, "bin")
    say(f"{family.name}: preparing data ({sizes['train']} train / {sizes['dev']} dev / {sizes['test']} test sentences)")
    run_preprocess(os.path.join(ddir, "preprocess.log"), lm=True, train=os.path.join(raw, "train.txt"),
                   valid=os.path.join(raw, "dev.txt"), test=[os.path.join(raw, "test.txt")], destdir=bin_dir,
                   tokenize="moses", lowercase=True, bpe="none", force=True)
    limited = "" if limit_eval is None else f" (first {limit_eval})"
    desc = (f"English side of Multi30k as a language-model corpus: training captions 1-{n_train} = train, the last "
            f"{dev_size} training captions = dev{limited}, the official validation set = test{limited}; "
            f"{_clean_note(dropped, 'captions')} ({sizes['dev']} dev / {sizes['test']} test captions); "
            "Moses-tokenized, lowercased, word-level (no BPE), one caption per sample")
    data = Data(bin=bin_dir, src="", tgt="", test_ref=os.path.join(raw, "test.txt"), description=desc, sizes=sizes)
    write_json(os.path.join(ddir, "prepared.json"), {"settings": settings, "data": dataclasses.asdict(data)})
    return data


RUNNING_TEXT_FILES = ("ptb.valid.txt", "wikitext2.valid.txt")  # under DATA_ROOT/lm
RUNNING_TEXT_BLOCK = 256  # tokens per sample, across sentence and article boundaries


def split_running_text(texts: List[List[str]], dev_share: float = 0.1, test_share: float = 0.1):
    """Running texts cut into contiguous parts (``families.RUNNING_TEXT_SPLIT``): of each text its
    non-blank lines (stripped), the first ``1 - dev_share - test_share`` of them to train, the next
    ``dev_share`` to dev, the rest to test, so that dev and test continue each text where its train
    part stops; the texts' parts concatenated in order; then dev and test cleaned of every line whose
    normalised form (:func:`normalise_source`) occurs anywhere in train.  Returns
    ``({"train"|"dev"|"test": lines}, {"dev"|"test": lines dropped})``."""
    parts = {"train": [], "dev": [], "test": []}
    for i, lines in enumerate(texts):
        text = [x.strip() for x in lines if x.strip()]
        n_dev, n_test = round(dev_share * len(text)), round(test_share * len(text))
        n_train = len(text) - n_dev - n_test
        if min(n_train, n_dev, n_test) < 1:
            raise ValueError(f"text {i + 1}: {len(text)} non-blank lines, too few for a train, dev and test part")
        parts["train"] += text[:n_train]
        parts["dev"] += text[n_train:n_train + n_dev]
        parts["test"] += text[n_train + n_dev:]
    held, dropped = drop_seen_sources(parts["train"], {k: {"text": parts[k]} for k in ("dev", "test")}, "text")
    return {"train": parts["train"], "dev": held["dev"]["text"], "test": held["test"]["text"]}, dropped


def prepare_running_text(family: Family, out: str, data_root: str, limit_train: Optional[int],
                         limit_eval: Optional[int]) -> Data:
    """``--running-text``: the language-model corpus of ``families.RUNNING_TEXT_SPLIT``, the files
    ``RUNNING_TEXT_FILES`` split by :func:`split_running_text`; already tokenized (``<unk>`` kept),
    lowercased, no BPE, through :mod:`fairseq_local_repro.tools.preprocess` (``lm``); trained and evaluated in
    ``RUNNING_TEXT_BLOCK``-token blocks (``Data.lm_block``)."""
    if family.kind != "lm":
        raise ReproError(f"--running-text is a language-model corpus; '{family.name}' is a translation family")
    ddir = os.path.join(out, "data")
    settings = {"limit_train": limit_train, "limit_eval": limit_eval, "running_text": list(RUNNING_TEXT_FILES),
                "block": RUNNING_TEXT_BLOCK}
    if (done := _prepared_earlier(ddir, settings)) is not None:
        return done
    paths = [os.path.join(data_root, "lm", name) for name in RUNNING_TEXT_FILES]
    try:
        parts, dropped = split_running_text([read_lines(p) for p in paths])
    except ValueError as e:
        raise ReproError(f"{', '.join(paths)}: {e}")
    parts = {k: v[:limit_train if k == "train" else limit_eval] for k, v in parts.items()}
    raw = os.path.join(ddir, "raw")
    os.makedirs(raw, exist_ok=True)
    for k, lines in parts.items():
        write_lines(os.path.join(raw, f"{k}.txt"), lines)
    sizes = {**{k: len(v) for k, v in parts.items()}, "dev_dropped": dropped["dev"], "test_dropped": dropped["test"],
             "unit": "lines"}
    say(f"{family.name}: preparing running text ({sizes['train']} train / {sizes['dev']} dev / {sizes['test']} test "
        "lines)")
    bin_dir = os.path.join(ddir, "bin")
    run_preprocess(os.path.join(ddir, "preprocess.log"), lm=True, train=os.path.join(raw, "train.txt"),
                   valid=os.path.join(raw, "dev.txt"), test=[os.path.join(raw, "test.txt")], destdir=bin_dir,
                   tokenize="none", lowercase=True, bpe="none", force=True)
    limited = "" if limit_train is None and limit_eval is None else (
        f" (limited to the first {limit_train or 'all'} train and {limit_eval or 'all'} dev and test lines)")
    desc = (f"running text: {' and '.join(RUNNING_TEXT_FILES)} (tokenized, <unk> kept), blank lines removed, each cut "
            f"into contiguous parts: its first 80 % of lines = train, the next 10 % = dev, the last 10 % = test; "
            f"{sizes['train']} train / {sizes['dev']} dev / {sizes['test']} test lines{limited}, dev and test cleaned "
            f"of every line that (case-folded, whitespace collapsed) occurs in train: {dropped['dev']} dev and "
            f"{dropped['test']} test lines dropped; lowercased, no BPE, {RUNNING_TEXT_BLOCK}-token blocks that run "
            "across sentence and article boundaries")
    data = Data(bin=bin_dir, src="", tgt="", test_ref=os.path.join(raw, "test.txt"), description=desc, sizes=sizes,
                lm_block=RUNNING_TEXT_BLOCK)
    write_json(os.path.join(ddir, "prepared.json"), {"settings": settings, "data": dataclasses.asdict(data)})
    return data


def prepare_lm_paper(family: Family, out: str) -> Data:
    """PTB through :mod:`fairseq_local_repro.tools.prepare_ptb` (downloaded)."""
    if (done := prepared_data(out)) is not None:
        return done
    ddir = os.path.join(out, "data")
    os.makedirs(ddir, exist_ok=True)
    log = os.path.join(ddir, "prepare.log")
    say(f"{family.name}: preparing PTB (fairseq_local_repro/tools/prepare_ptb.py)")
    _in_log(log, "PTB preparation failed", prepare_ptb, PtbOptions(out=ddir))
    data = Data(bin=os.path.join(ddir, "bin"), src="", tgt="", test_ref="", description=family.data_paper, sizes={})
    write_json(os.path.join(ddir, "prepared.json"), {"settings": {}, "data": dataclasses.asdict(data)})
    return data


