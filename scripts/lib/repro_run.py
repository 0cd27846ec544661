"""Data preparation, training, evaluation and comparison for ``scripts/reproduce.py``.

Layout of ``OUT/<family>/`` (never committed):

* ``data/raw``: the split raw text; ``data/bin``: ``scripts/preprocess.sh`` output (binarized
  splits, dictionaries, ``bpe/codes.*``); ``data/prepared.json`` marks it complete;
* ``<system>-s<seed>/``: ``checkpoints/`` (``checkpoint_best.pt``, ``checkpoint_last.pt``, a copy
  of the dictionaries and BPE codes), ``train.log`` (fairseq's log), ``curve.jsonl`` (one dev
  point per validation), ``train_done.json``, ``test/`` (hypotheses, score; DPN-S2S M9's alignment
  entropies, parallel cells' cell-masking table) and ``results.json``;
* ``comparison.json`` (every system's results + the statistics of ``fairseq_local_repro.compare``).

A system with a ``results.json`` is finished and skipped; an interrupted one resumes from
fairseq's ``checkpoint_last.pt``; one whose training ended (``train_done.json``) goes straight to
evaluation.
"""
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from repro_families import Family, Scale, System

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:  # fairseq_local_repro, also in an environment installed before that package existed
    sys.path.append(REPO)
USER_DIR = os.path.join(REPO, "fairseq_local")
_print_lock = threading.Lock()
_children = set()  # running subprocesses (each in its own session): ended with the harness


def stop_children():
    """Terminate the running fairseq processes (called when the harness is interrupted), so that a
    resumed run never finds a stale trainer writing into the same checkpoint folder."""
    for proc in list(_children):
        try:
            os.killpg(proc.pid, 15)
        except OSError:
            pass


class ReproError(Exception):
    """A failure reported as one line (``reproduce.py: error: ...``)."""


def say(msg: str):
    with _print_lock:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def write_json(path: str, obj):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def write_json_if_changed(path: str, obj):
    """As write_json, leaving the file (and its time stamp) alone when it already holds ``obj``."""
    if os.path.isfile(path) and read_json(path) == json.loads(json.dumps(obj)):
        return
    write_json(path, obj)


def read_json(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def child_env() -> Dict[str, str]:
    """One thread per process; the venv's executables first on PATH (scripts/lib/common.sh's
    activate_env then uses them)."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def raise_priority(pid: int):
    """Best effort: give the child's own autogroup (it runs in a new session) a higher share of a
    shared machine.  Errors (no permission, no autogroup support) are ignored."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write("-10")
    except OSError:
        pass


def run_logged(cmd: List[str], log_path: str, on_line=None, what: str = "") -> int:
    """Run ``cmd`` in its own session, appending its output to ``log_path`` and passing each line
    to ``on_line``; returns the exit status."""
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=child_env(),
                                text=True, bufsize=1, start_new_session=True, cwd=REPO)
        _children.add(proc)
        raise_priority(proc.pid)
        try:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if on_line is not None:
                    on_line(line)
            return proc.wait()
        finally:
            _children.discard(proc)


def tail(path: str, n: int = 1) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.rstrip() for line in f if line.strip()]
    except OSError:
        return ""
    return " / ".join(lines[-n:])


# ---- data ----------------------------------------------------------------------------------------
@dataclass
class Data:
    bin: str
    src: str
    tgt: str
    test_ref: str          # raw (untokenized) test references
    description: str
    sizes: Dict[str, int]
    bins: Dict[str, str] = field(default_factory=dict)  # a family whose systems read different sources: key -> dir

    def for_system(self, system: System) -> "Data":
        """The data ``system`` reads: the binarized dir of its ``data`` key (the one dir when it has none)."""
        if not system.data:
            return self
        if system.data not in self.bins:
            raise ReproError(f"{system.name} reads the '{system.data}' data, which the prepared data lack "
                             f"({', '.join(sorted(self.bins)) or 'one data dir only'})")
        return dataclasses.replace(self, bin=self.bins[system.data])


def _read_lines(path: str) -> List[str]:
    if not os.path.isfile(path):
        raise ReproError(f"data file '{path}' does not exist (see --data-root)")
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def _write_lines(path: str, lines: List[str]):
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


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
    train = {l: _read_lines(os.path.join(corpus, f"train.{l}")) for l in (src, tgt)}
    test = {l: _read_lines(os.path.join(corpus, f"valid.{l}")) for l in (src, tgt)}
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
    """Multi30k De-En split as ``repro_families.MULTI30K_CPU`` says, then scripts/preprocess.sh
    (done once per family; ``data/prepared.json`` marks it complete)."""
    src, tgt = "de", "en"
    ddir = os.path.join(out, "data")
    settings = {"limit_train": limit_train, "limit_eval": limit_eval, "dev_size": dev_size, "clean_eval": True}
    done = _prepared_earlier(ddir, settings)
    if done is not None:
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
        _write_lines(os.path.join(raw, f"train.{l}"), train[l][:n_train])
        _write_lines(os.path.join(raw, f"dev.{l}"), held["dev"][l][:n_eval])
        _write_lines(os.path.join(raw, f"test.{l}"), held["test"][l][:n_eval])
    sizes = {"train": n_train, "dev": len(held["dev"][src][:n_eval]), "test": len(held["test"][src][:n_eval]),
             "dev_dropped": dropped["dev"], "test_dropped": dropped["test"]}
    bin_dir = os.path.join(ddir, "bin")
    say(f"{family.name}: preparing data ({sizes['train']} train / {sizes['dev']} dev / {sizes['test']} test pairs)")
    cmd = ["bash", os.path.join(REPO, "scripts", "preprocess.sh"), "--src", src, "--tgt", tgt,
           "--train", os.path.join(raw, "train"), "--valid", os.path.join(raw, "dev"),
           "--test", os.path.join(raw, "test"), "--destdir", bin_dir, "--tokenize", "moses", "--lowercase",
           "--bpe", "subword-nmt", "--bpe-size", "8000", "--force"]
    log = os.path.join(ddir, "preprocess.log")
    if run_logged(cmd, log) != 0:
        raise ReproError(f"data preparation failed: {tail(log)} (full log: {log})")
    desc = (f"Multi30k De-En: training pairs 1-{n_train} = train, the last {dev_size} training pairs = dev"
            f"{'' if n_eval is None else f' (first {n_eval})'}, the official validation set = test"
            f"{'' if n_eval is None else f' (first {n_eval})'}; {_clean_note(dropped)} ({sizes['dev']} dev / "
            f"{sizes['test']} test pairs); Moses-tokenized, lowercased, joint subword-nmt BPE 8000")
    data = Data(bin=bin_dir, src=src, tgt=tgt, test_ref=os.path.join(raw, f"test.{tgt}"), description=desc,
                sizes=sizes)
    write_json(os.path.join(ddir, "prepared.json"), {"settings": settings, "data": data.__dict__})
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
    """Tatoeba Zh-En split as ``repro_families.TATOEBA_ZH_EN_CPU`` says (each pair's attribution line
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
    done = _prepared_earlier(ddir, settings)
    if done is not None:
        return done
    corpus = os.path.join(data_root, "tatoeba-zh-en")
    train, test, n = _read_parallel(corpus, src, tgt, dev_size)
    for split, count in (("train", n), ("valid", len(test[src]))):  # CC-BY: the authors go with the pairs
        path = os.path.join(corpus, f"{split}.attribution")
        if os.path.isfile(path):
            lines = _read_lines(path)
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
        _write_lines(os.path.join(split_dir, f"train.{key}"), parts["train"][key][:n_train])
        _write_lines(os.path.join(split_dir, f"valid.{key}"), parts["dev"][key][:limit_eval])
    for key in test:
        _write_lines(os.path.join(split_dir, f"test.{key}"), parts["test"][key][:limit_eval])
    n_dev, n_test = len(parts["dev"][src][:limit_eval]), len(parts["test"][src][:limit_eval])
    say(f"{family.name}: preparing data ({n_train} train / {n_dev} dev / {n_test} test pairs; "
        f"Chinese as {', '.join(kinds)})")
    cmd = ["env", "PREP_ONLY=1", "WORKERS=1", f"SYSTEMS={' '.join(kinds)}", "bash",
           os.path.join(REPO, "scripts", "recipes", "lattice_zh_en_small.sh"), split_dir, ddir]
    log = os.path.join(ddir, "prepare.log")
    if run_logged(cmd, log) != 0:
        raise ReproError(f"data preparation failed: {tail(log)} (full log: {log})")
    kept = len(_read_lines(os.path.join(ddir, "raw", f"train.{tgt}")))
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
    write_json(os.path.join(ddir, "prepared.json"), {"settings": settings, "data": data.__dict__})
    os.remove(marker)
    return data


def prepare_translation_paper(family: Family, out: str, iwslt_tgz: Optional[str]) -> Data:
    """IWSLT14 De-En through scripts/recipes/prepare_iwslt14.sh (download or ``--iwslt-tgz``)."""
    ddir = os.path.join(out, "data")
    marker = os.path.join(ddir, "prepared.json")
    if os.path.isfile(marker):
        return Data(**read_json(marker)["data"])
    os.makedirs(ddir, exist_ok=True)
    cmd = ["bash", os.path.join(REPO, "scripts", "recipes", "prepare_iwslt14.sh"), "--out", ddir, "--bpe-size",
           str(family.bpe_paper)]
    if iwslt_tgz:
        cmd += ["--tgz", iwslt_tgz]
    log = os.path.join(ddir, "prepare.log")
    say(f"{family.name}: preparing IWSLT14 De-En (scripts/recipes/prepare_iwslt14.sh)")
    if run_logged(cmd, log) != 0:
        raise ReproError(f"IWSLT14 preparation failed: {tail(log)} (full log: {log})")
    data = Data(bin=os.path.join(ddir, "bin"), src="de", tgt="en", test_ref=os.path.join(ddir, "raw", "test.en"),
                description=family.data_paper, sizes={})
    write_json(marker, {"settings": {}, "data": data.__dict__})
    return data


def prepare_lm_cpu(family: Family, out: str, data_root: str, limit_train: Optional[int],
                   limit_eval: Optional[int], dev_size: int = 1000) -> Data:
    """The English side of Multi30k as a language-model corpus (``repro_families.MULTI30K_EN_LM``),
    split as the translation families split it, through scripts/preprocess.sh --lm."""
    ddir = os.path.join(out, "data")
    settings = {"limit_train": limit_train, "limit_eval": limit_eval, "dev_size": dev_size, "clean_eval": True}
    done = _prepared_earlier(ddir, settings)
    if done is not None:
        return done
    corpus = os.path.join(data_root, "multi30k-de-en")
    train = _read_lines(os.path.join(corpus, "train.en"))
    test = _read_lines(os.path.join(corpus, "valid.en"))
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
        _write_lines(os.path.join(raw, f"{name}.txt"), lines)
    sizes = {**{k: len(v) for k, v in splits.items()}, "dev_dropped": dropped["dev"], "test_dropped": dropped["test"]}
    bin_dir = os.path.join(ddir, "bin")
    say(f"{family.name}: preparing data ({sizes['train']} train / {sizes['dev']} dev / {sizes['test']} test sentences)")
    cmd = ["bash", os.path.join(REPO, "scripts", "preprocess.sh"), "--lm", "--train", os.path.join(raw, "train.txt"),
           "--valid", os.path.join(raw, "dev.txt"), "--test", os.path.join(raw, "test.txt"), "--destdir", bin_dir,
           "--tokenize", "moses", "--lowercase", "--bpe", "none", "--force"]
    log = os.path.join(ddir, "preprocess.log")
    if run_logged(cmd, log) != 0:
        raise ReproError(f"data preparation failed: {tail(log)} (full log: {log})")
    limited = "" if limit_eval is None else f" (first {limit_eval})"
    desc = (f"English side of Multi30k as a language-model corpus: training captions 1-{n_train} = train, the last "
            f"{dev_size} training captions = dev{limited}, the official validation set = test{limited}; "
            f"{_clean_note(dropped, 'captions')} ({sizes['dev']} dev / {sizes['test']} test captions); "
            "Moses-tokenized, lowercased, word-level (no BPE), one caption per sample")
    data = Data(bin=bin_dir, src="", tgt="", test_ref=os.path.join(raw, "test.txt"), description=desc, sizes=sizes)
    write_json(os.path.join(ddir, "prepared.json"), {"settings": settings, "data": data.__dict__})
    return data


def prepare_lm_paper(family: Family, out: str) -> Data:
    """PTB through scripts/recipes/prepare_ptb.sh (downloaded)."""
    ddir = os.path.join(out, "data")
    marker = os.path.join(ddir, "prepared.json")
    if os.path.isfile(marker):
        return Data(**read_json(marker)["data"])
    os.makedirs(ddir, exist_ok=True)
    log = os.path.join(ddir, "prepare.log")
    say(f"{family.name}: preparing PTB (scripts/recipes/prepare_ptb.sh)")
    if run_logged(["bash", os.path.join(REPO, "scripts", "recipes", "prepare_ptb.sh"), "--out", ddir], log) != 0:
        raise ReproError(f"PTB preparation failed: {tail(log)} (full log: {log})")
    data = Data(bin=os.path.join(ddir, "bin"), src="", tgt="", test_ref="", description=family.data_paper, sizes={})
    write_json(marker, {"settings": {}, "data": data.__dict__})
    return data


# ---- widths and parameter counts -----------------------------------------------------------------
def width_options(system: System, width: Optional[int], hidden: Optional[int] = None) -> List[str]:
    """The system's width templates filled in with the common width ``width``, the hidden width
    ``hidden`` (default: ``width``) and the filter width ``4 * width`` ({f}); none when the scale
    keeps the architectures' widths."""
    if width is None:
        return []
    h = width if hidden is None else hidden
    return [t.format(w=width, h=h, f=4 * width) for t in system.widths]


def _value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def count_params(system: System, options: List[str], data: Data) -> int:
    """Parameters of the system's arch with ``options`` (its own options and width options) on the
    family's dictionaries, built through fairseq's architecture registry as fairseq-train builds it."""
    from types import SimpleNamespace

    from fairseq.data import Dictionary
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    data = data.for_system(system)
    args = SimpleNamespace(tokens_per_sample=512, criterion="cross_entropy")
    options = list(system.options) + list(options)
    for key, value in zip(options[::2], options[1::2]):
        setattr(args, key.lstrip("-").replace("-", "_"), _value(value))
    ARCH_CONFIG_REGISTRY[system.arch](args)
    config = getattr(ARCH_MODEL_REGISTRY[system.arch], "__dataclass", None)
    if config is not None:  # what the arch leaves unset takes its config's default, as in fairseq-train
        for f in dataclasses.fields(config):
            if not hasattr(args, f.name) and f.default is not dataclasses.MISSING and not (
                    isinstance(f.default, str) and f.default.startswith("${")):  # not an interpolation
                setattr(args, f.name, f.default)
    if data.src:
        src = Dictionary.load(os.path.join(data.bin, f"dict.{data.src}.txt"))
        tgt = Dictionary.load(os.path.join(data.bin, f"dict.{data.tgt}.txt"))
    else:  # a language-model corpus: one dictionary
        src = tgt = Dictionary.load(os.path.join(data.bin, "dict.txt"))
    task = SimpleNamespace(source_dictionary=src, target_dictionary=tgt, dictionary=tgt)
    try:
        model = ARCH_MODEL_REGISTRY[system.arch].build_model(args, task)
    except Exception as e:  # a bad option value: one line naming the system and its options
        raise ReproError(f"cannot build {system.name} ({system.arch} {' '.join(options)}): {e}")
    return sum(p.numel() for p in model.parameters())


def plan_options(family: Family, scale: Scale, systems: List[System], data: Optional[Data]) -> Dict[str, dict]:
    """Per system: its width options and parameter count under the family's width rule.  A
    size-matched system gets the hidden width whose parameter count is closest to its target's
    (a bisection over widths; parameters grow with the width)."""
    import logging

    import fairseq_local  # noqa: F401  (registers the architectures)

    logging.getLogger().setLevel(logging.WARNING)  # importing fairseq sets the root logger to DEBUG
    plan = {}
    for s in systems:
        if s.size_match is None:
            opts = width_options(s, scale.width)
            plan[s.name] = {"width_options": opts, "params": count_params(s, opts, data) if data else None}
    for s in systems:
        if s.size_match is None:
            continue
        if scale.width is None or data is None:  # the architecture's own size-matched width
            plan[s.name] = {"width_options": [] if scale.width is None else ["(hidden width matched after data "
                                                                              "preparation)"],
                            "params": count_params(s, [], data) if data else None}
            continue
        target_sys = family.system(s.size_match)
        target = plan[s.size_match]["params"] if s.size_match in plan else count_params(
            target_sys, width_options(target_sys, scale.width), data)
        lo, hi = 8, 2 * scale.width
        while count_params(s, width_options(s, scale.width, hi), data) <= target:  # parameters grow with width
            lo, hi = hi, 2 * hi
            if hi > 1 << 16:
                raise ReproError(f"{s.name}: no hidden width up to {hi} reaches {s.size_match}'s {target:,} parameters")
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if count_params(s, width_options(s, scale.width, mid), data) <= target:
                lo = mid
            else:
                hi = mid
        counts = {h: count_params(s, width_options(s, scale.width, h), data) for h in (lo, hi)}
        best = min(counts, key=lambda h: abs(counts[h] - target))
        plan[s.name] = {"width_options": width_options(s, scale.width, best), "params": counts[best],
                        "size_matched_to": s.size_match, "target_params": target}
    return plan


# ---- training ------------------------------------------------------------------------------------
def task_options(family: Family, data: Data) -> List[str]:
    if family.kind == "lm":  # one sentence per sample: Multi30k captions / PTB sentences are independent
        return ["--task", "language_modeling", "--sample-break-mode", "eos", "--tokens-per-sample", "512"]
    return ["--task", family.task, "--source-lang", data.src, "--target-lang", data.tgt]


def train_command(family: Family, scale: Scale, system: System, data: Data, width_opts: List[str], seed: int,
                  save_dir: str, max_epoch: int, max_tokens: int, cpu: bool) -> List[str]:
    """fairseq-train with the paper's schedule (Section 4.1 of Xu et al.): Adam, learning rate
    halved whenever the dev loss does not improve (reduce_lr_on_plateau, lr-patience 0), early
    stop after ``scale.patience`` stale validations, capped at ``max_epoch`` epochs."""
    data = data.for_system(system)
    cmd = [sys.executable, "-m", "fairseq_cli.train", data.bin, "--user-dir", USER_DIR, *task_options(family, data),
           "--arch", system.arch, *width_opts, *system.options,
           "--optimizer", "adam", "--adam-betas", "(0.9, 0.999)", "--lr", str(scale.lr),
           "--clip-norm", str(scale.clip_norm), "--dropout", str(scale.dropout), "--criterion", "cross_entropy",
           "--lr-scheduler", "reduce_lr_on_plateau", "--lr-shrink", "0.5", "--lr-patience", "0",
           "--stop-min-lr", "1e-06", "--patience", str(scale.patience), "--max-epoch", str(max_epoch),
           "--max-tokens", str(max_tokens), "--seed", str(seed), "--save-dir", save_dir,
           "--no-epoch-checkpoints", "--best-checkpoint-metric", "loss",
           "--log-format", "json", "--log-interval", "25", "--num-workers", "0"]
    if cpu:
        cmd.append("--cpu")
    return cmd


def _stats(line: str, tag: str) -> Optional[dict]:
    marker = f"| {tag} | {{"
    if marker not in line:
        return None
    try:
        return json.loads(line[line.index(marker) + len(marker) - 1:])
    except ValueError:
        return None


def read_curve(path: str) -> List[dict]:
    """Dev points of ``curve.jsonl``, one per epoch (a repeated epoch after a resume: the last)."""
    if not os.path.isfile(path):
        return []
    by_epoch = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                p = json.loads(line)
                by_epoch[p["epoch"]] = p
    return [by_epoch[e] for e in sorted(by_epoch)]


def train_system(tag: str, cmd: List[str], sdir: str, max_epoch: int) -> dict:
    """Run (or resume) fairseq-train; record one curve point per validation with the wall time
    accumulated over resumes; return and store ``train_done.json``."""
    done_path = os.path.join(sdir, "train_done.json")
    if os.path.isfile(done_path):
        return read_json(done_path)
    curve_path = os.path.join(sdir, "curve.jsonl")
    previous = read_curve(curve_path)
    offset = previous[-1]["wall_s"] if previous else 0.0
    t0 = time.time()
    state = {"lr": None, "early_stop": False, "min_lr": False, "params": None, "epoch": 0}

    def on_line(line: str):
        if "num. shared model params:" in line:
            state["params"] = int(line.split("num. shared model params:")[1].split("(")[0].replace(",", "").strip())
        elif "early stop since valid performance" in line:
            state["early_stop"] = True
        elif "stopping training because current learning rate" in line:
            state["min_lr"] = True
        inner = _stats(line, "train_inner")
        if inner is not None and "lr" in inner:  # the learning rate of the epoch being trained
            state["lr"] = float(inner["lr"])
        valid = _stats(line, "valid")
        if valid is not None and "valid_loss" in valid:
            point = {"epoch": int(valid["epoch"]), "updates": int(float(valid["valid_num_updates"])),
                     "dev_loss": float(valid["valid_loss"]), "dev_ppl": float(valid["valid_ppl"]),
                     "lr": state["lr"], "wall_s": round(offset + time.time() - t0, 1)}
            state["epoch"] = point["epoch"]
            with open(curve_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(point) + "\n")
            say(f"{tag}: epoch {point['epoch']} ({point['updates']} updates, {point['wall_s'] / 60:.1f} min): "
                f"dev loss {point['dev_loss']:.3f} bits, ppl {point['dev_ppl']:.2f}, lr {point['lr']}")

    log = os.path.join(sdir, "train.log")
    say(f"{tag}: training{' (resuming from checkpoint_last.pt)' if previous else ''}")
    rc = run_logged(cmd, log, on_line)
    if rc != 0:
        raise ReproError(f"{tag}: fairseq-train exited with status {rc}: {tail(log)} (full log: {log})")
    curve = read_curve(curve_path)
    if not curve:
        raise ReproError(f"{tag}: fairseq-train ran no validation (full log: {log})")
    stopped = "early_stop" if state["early_stop"] else "min_lr" if state["min_lr"] else (
        "max_epoch" if curve[-1]["epoch"] >= max_epoch else "unknown")
    done = {"stopped": stopped, "hit_max_epoch": stopped == "max_epoch", "epochs": curve[-1]["epoch"],
            "updates": curve[-1]["updates"], "wall_s": curve[-1]["wall_s"], "params": state["params"]}
    write_json(done_path, done)
    return done


# ---- evaluation ----------------------------------------------------------------------------------
def translate_and_score(tag: str, data: Data, ckpt: str, out_dir: str, subset: str, ref: str,
                        bin_dir: Optional[str] = None, task: str = "translation") -> dict:
    """Beam 5 with scripts/generate.sh (BPE removed, Moses-detokenized), scored by
    scripts/score.py against the raw references: detokenized, case-insensitive sacrebleu (the
    data are lowercased, or the paper reports case-insensitive BLEU), with its signature."""
    os.makedirs(out_dir, exist_ok=True)
    log = os.path.join(out_dir, "generate.log")
    cmd = ["bash", os.path.join(REPO, "scripts", "generate.sh"), "--data", bin_dir or data.bin, "--path", ckpt,
           "--out", out_dir, "--subset", subset, "--beam", "5", "--detok", "moses", "--lang", data.tgt, "--task", task,
           "--", "--source-lang", data.src, "--target-lang", data.tgt]
    if run_logged(cmd, log) != 0:
        raise ReproError(f"{tag}: generation failed: {tail(log)} (full log: {log})")
    score_json = os.path.join(out_dir, "score.json")
    cmd = [sys.executable, os.path.join(REPO, "scripts", "score.py"), "--hyp", os.path.join(out_dir, "hyp.txt"),
           "--ref", ref, "--lowercase", "--json", score_json]
    if run_logged(cmd, log) != 0:
        raise ReproError(f"{tag}: scoring failed: {tail(log)} (full log: {log})")
    s = read_json(score_json)
    return {"bleu": round(s["bleu"], 2), "signature": s["bleu_signature"], "label": s["bleu_label"],
            "hyp": os.path.join(out_dir, "hyp.txt")}


# fairseq-eval-lm --output-word-probs: "<sample id> word [logprob]\tword [logprob]..." after the logger name
_WORD_PROBS = re.compile(r"fairseq_cli\.eval_lm(?::| \| )(\d+) (.*\])$")


def eval_lm(tag: str, data: Data, ckpt: str, out_dir: str, subset: str = "test", bin_dir: Optional[str] = None) -> dict:
    """Test perplexity with fairseq-eval-lm (one sentence per sample, as trained), and every
    sentence's summed log-probability (``--output-word-probs``) for the per-sentence tests."""
    os.makedirs(out_dir, exist_ok=True)
    log = os.path.join(out_dir, "eval_lm.log")
    if os.path.exists(log):
        os.remove(log)
    cmd = [sys.executable, "-m", "fairseq_cli.eval_lm", bin_dir or data.bin, "--user-dir", USER_DIR,
           "--task", "language_modeling", "--sample-break-mode", "eos", "--tokens-per-sample", "512",
           "--path", ckpt, "--gen-subset", subset, "--max-tokens", "4000", "--output-word-probs", "--num-workers", "0"]
    try:
        import torch

        if not torch.cuda.is_available():
            cmd.append("--cpu")
    except ImportError:
        cmd.append("--cpu")
    sentences: Dict[int, List[float]] = {}
    summary = {}

    def on_line(line: str):
        if "Loss (base 2):" in line:
            text = line.split("Loss (base 2):")[1]
            summary["loss_bits"] = float(text.split(",")[0])
            summary["ppl"] = float(text.split("Perplexity:")[1])
            return
        m = _WORD_PROBS.search(line.rstrip("\n"))
        if m:  # natural-log probabilities of each word (EOS included), summed per sentence (nats)
            lps = [float(item.rsplit(" [", 1)[1][:-1]) for item in m.group(2).split("\t")]
            sentences[int(m.group(1))] = [-sum(lps), len(lps)]

    if run_logged(cmd, log, on_line) != 0 or "ppl" not in summary:
        raise ReproError(f"{tag}: fairseq-eval-lm failed: {tail(log)} (full log: {log})")
    scores = [sentences[i] for i in sorted(sentences)]
    write_json(os.path.join(out_dir, "sentence_nll.json"), scores)
    return {"ppl": round(summary["ppl"], 2), "loss_bits": summary["loss_bits"], "sentences": len(scores),
            "label": "perplexity (fairseq-eval-lm, one sentence per sample, EOS counted)",
            "nll": os.path.join(out_dir, "sentence_nll.json")}


def cpu_flag() -> List[str]:
    """``--cpu`` for the analysis scripts where no GPU is visible."""
    try:
        import torch

        return [] if torch.cuda.is_available() else ["--cpu"]
    except ImportError:
        return ["--cpu"]


def alignment_entropy(tag: str, data: Data, ckpt: str, out_dir: str, subset: str = "test") -> dict:
    """Table 5 of the DPN-S2S paper: scripts/analysis/dpn_alignment_entropy.py on ``subset`` with
    teacher forcing on the references (the last decoder layer's alignments; per target token
    -sum_i a_i log a_i, averaged over the sentence's tokens, then over sentences).  Returns the
    tool's JSON: the mean entropy per flow (``cc``, ``ca``, ``ac``, ``aa``: decoder path, encoder
    path; c = CNN, a = SAN), the layer, the subset and the number of sentences."""
    os.makedirs(out_dir, exist_ok=True)
    log = os.path.join(out_dir, "alignment_entropy.log")
    out_json = os.path.join(out_dir, "alignment_entropy.json")
    for stale in (log, out_json):
        if os.path.exists(stale):
            os.remove(stale)
    cmd = [sys.executable, os.path.join(REPO, "scripts", "analysis", "dpn_alignment_entropy.py"), data.bin,
           "--path", ckpt, "--user-dir", USER_DIR, "--gen-subset", subset, "--source-lang", data.src,
           "--target-lang", data.tgt, "--layer", "last", "--json", out_json] + cpu_flag()
    if run_logged(cmd, log) != 0 or not os.path.isfile(out_json):
        raise ReproError(f"{tag}: alignment entropy failed: {tail(log)} (full log: {log})")
    return read_json(out_json)


def cell_masking(tag: str, data: Data, ckpt: str, out_dir: str, groups, subset: str = "test") -> dict:
    """Section 4.1 of the parallel-cells paper: scripts/analysis/parallel_cells_masking.py on
    ``subset``, cell i's hidden state zeroed in every layer for each i in turn.  Returns the tool's
    JSON (perplexity overall, per word group and per word, for "none" and each "mask<i>") with the
    subset and the masked layers."""
    os.makedirs(out_dir, exist_ok=True)
    log, out_json = os.path.join(out_dir, "cell_masking.log"), os.path.join(out_dir, "cell_masking.json")
    groups_file = os.path.join(out_dir, "word_groups.txt")
    for stale in (log, out_json):
        if os.path.exists(stale):
            os.remove(stale)
    with open(groups_file, "w", encoding="utf-8") as f:
        f.writelines(f"{name}: {' '.join(words)}\n" for name, words in groups)
    cmd = [sys.executable, os.path.join(REPO, "scripts", "analysis", "parallel_cells_masking.py"), "--path", ckpt,
           "--data", data.bin, "--gen-subset", subset, "--word-groups", groups_file, "--layer", "all",
           "--out", os.path.join(out_dir, "cell_masking.png"), "--json", out_json] + cpu_flag()
    if run_logged(cmd, log) != 0 or not os.path.isfile(out_json):
        raise ReproError(f"{tag}: cell masking failed: {tail(log)} (full log: {log})")
    return dict(read_json(out_json), subset=subset, layer="all")


def keep_vocabulary(data: Data, ckpt_dir: str):
    """The BPE codes and dictionaries beside the checkpoint, so that it can be used on its own (with
    the corpus's attribution files, where the data dir has them: the dictionaries derive from it)."""
    if not data.src:
        shutil.copy(os.path.join(data.bin, "dict.txt"), os.path.join(ckpt_dir, "dict.txt"))
        return
    for name in (f"dict.{data.src}.txt", f"dict.{data.tgt}.txt"):
        shutil.copy(os.path.join(data.bin, name), os.path.join(ckpt_dir, name))
    for name in sorted(os.listdir(data.bin)):
        if name.endswith(".attribution"):
            shutil.copy(os.path.join(data.bin, name), os.path.join(ckpt_dir, name))
    bpe = os.path.join(data.bin, "bpe")
    for name in sorted(os.listdir(bpe)) if os.path.isdir(bpe) else []:
        if name.startswith("codes."):
            shutil.copy(os.path.join(bpe, name), os.path.join(ckpt_dir, name))


SWEPT_OPTIONS = ("--lr", "--dropout", "--clip-norm")


def check_same_settings(tag: str, sdir: str, cmd: List[str]):
    """A run folder holds one setting: refuse to resume or reuse a run that ``train.log`` shows was
    trained with another learning rate, dropout or clipping threshold (a sweep point needs its own ``--out``)."""
    log = os.path.join(sdir, "train.log")
    if not os.path.isfile(log):
        return
    with open(log, encoding="utf-8", errors="replace") as f:
        first = next((line for line in f if line.startswith("$ ")), None)
    if first is None:
        return
    earlier = first[2:].split()
    for opt in SWEPT_OPTIONS:
        if opt in earlier and opt in cmd:
            was, now = earlier[earlier.index(opt) + 1], cmd[cmd.index(opt) + 1]
            if float(was) != float(now):
                raise ReproError(f"{tag}: {sdir} was trained with {opt} {was}, this run asks for {now}; "
                                 "give this setting its own --out")


def run_system(ctx: dict, system: System, seed: int) -> dict:
    family, scale, data = ctx["family"], ctx["scale"], ctx["data"]
    sdata = data.for_system(system)
    sdir = os.path.join(ctx["out"], f"{system.name}-s{seed}")
    res_path = os.path.join(sdir, "results.json")
    tag = f"{family.name}/{system.name}-s{seed}"
    plan = ctx["plan"][system.name]
    ckpt_dir = os.path.join(sdir, "checkpoints")
    cmd = train_command(family, scale, system, data, plan["width_options"], seed, ckpt_dir, ctx["max_epoch"],
                        ctx["max_tokens"], ctx["cpu"])
    check_same_settings(tag, sdir, cmd)
    if os.path.isfile(res_path):
        earlier = read_json(res_path)
        if not (earlier["hit_max_epoch"] and ctx["max_epoch"] > earlier["max_epoch"]):
            if system.masking_groups and "cell_masking" not in earlier:  # an analysis added after the run
                say(f"{tag}: finished earlier; cell masking on the test set (scripts/analysis/parallel_cells_masking.py)")
                earlier["cell_masking"] = cell_masking(
                    tag, data, os.path.join(sdir, "checkpoints", "checkpoint_best.pt"), os.path.join(sdir, "test"),
                    system.masking_groups)
                write_json(res_path, earlier)
            if "dropout" not in earlier or "clip_norm" not in earlier:  # a run from before results.json
                earlier.update(lr=scale.lr, dropout=scale.dropout, clip_norm=scale.clip_norm)  # recorded them
                write_json(res_path, earlier)  # (check_same_settings has matched them against train.log)
            say(f"{tag}: finished earlier ({res_path}), skipped")
            return earlier
        # stopped by a lower cap: train on from checkpoint_last.pt up to the new cap, then re-evaluate
        say(f"{tag}: stopped by --max-epoch {earlier['max_epoch']} earlier; continuing to {ctx['max_epoch']}")
        for name in ("train_done.json", "results.json"):
            os.remove(os.path.join(sdir, name))
    os.makedirs(sdir, exist_ok=True)
    done = train_system(tag, cmd, sdir, ctx["max_epoch"])
    if done["hit_max_epoch"]:
        say(f"{tag}: WARNING: stopped by the --max-epoch {ctx['max_epoch']} cap, not by early stopping")
    keep_vocabulary(sdata, ckpt_dir)
    if family.kind == "lm":
        say(f"{tag}: test perplexity (fairseq-eval-lm)")
        test = eval_lm(tag, data, os.path.join(ckpt_dir, "checkpoint_best.pt"), os.path.join(sdir, "test"))
    else:
        say(f"{tag}: translating the test set (beam 5)")
        test = translate_and_score(tag, sdata, os.path.join(ckpt_dir, "checkpoint_best.pt"),
                                   os.path.join(sdir, "test"), "test", data.test_ref, task=family.task)
    entropy = None
    if system.alignment_entropy:
        say(f"{tag}: alignment entropies on the test set (scripts/analysis/dpn_alignment_entropy.py)")
        entropy = alignment_entropy(tag, sdata, os.path.join(ckpt_dir, "checkpoint_best.pt"), os.path.join(sdir, "test"))
    masking = None
    if system.masking_groups:
        say(f"{tag}: cell masking on the test set (scripts/analysis/parallel_cells_masking.py)")
        masking = cell_masking(tag, data, os.path.join(ckpt_dir, "checkpoint_best.pt"), os.path.join(sdir, "test"),
                               system.masking_groups)
    curve = read_curve(os.path.join(sdir, "curve.jsonl"))
    best = min(curve, key=lambda p: p["dev_loss"])
    results = {
        "family": family.name, "system": system.name, "label": system.label, "arch": system.arch,
        "options": plan["width_options"] + list(system.options), "scale": ctx["scale_name"], "seed": seed,
        "params": done["params"] or plan["params"], "size_matched_to": plan.get("size_matched_to"),
        "epochs": done["epochs"], "updates": done["updates"], "wall_s": done["wall_s"],
        "stopped": done["stopped"], "hit_max_epoch": done["hit_max_epoch"], "max_epoch": ctx["max_epoch"],
        "patience": scale.patience, "max_tokens": ctx["max_tokens"], "lr": scale.lr, "dropout": scale.dropout,
        "clip_norm": scale.clip_norm, "best_epoch": best["epoch"],
        "dev_loss_bits": best["dev_loss"], "dev_ppl": best["dev_ppl"],
        "metric": "ppl" if family.kind == "lm" else "bleu",
        "test": {k: v for k, v in test.items() if k not in ("hyp", "nll")},
        "data": data.description, "split": data.sizes, "curve": curve, "command": ctx["command"],
        "threads": 1, "device": "cpu" if ctx["cpu"] else "cuda",
    }
    if entropy is not None:
        results["alignment_entropy"] = entropy
    if masking is not None:
        results["cell_masking"] = masking
    write_json(res_path, results)
    score = f"perplexity {test['ppl']:.2f}" if family.kind == "lm" else f"BLEU {test['bleu']:.2f}"
    say(f"{tag}: test {score} ({done['epochs']} epochs, {done['updates']} updates, "
        f"{done['wall_s'] / 60:.1f} min, stopped by {done['stopped']})")
    return results


def run_all(ctx: dict, systems: List[System], seeds: List[int], jobs: int) -> List[dict]:
    """Every (system, seed), ``jobs`` at a time in registry order (the next starts when one ends)."""
    tasks = [(s, seed) for seed in seeds for s in systems]
    errors = []
    results = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_system, ctx, s, seed) for s, seed in tasks]
        for fut in futures:
            try:
                results.append(fut.result())
            except ReproError as e:
                errors.append(str(e))
    if errors:
        raise ReproError(errors[0] + (f" (and {len(errors) - 1} more failures)" if len(errors) > 1 else ""))
    return results


# ---- comparison ----------------------------------------------------------------------------------
def run_statistics(kind: str, out: str, test_ref: str):
    """``stats_of`` (fairseq_local_repro.compare.analyse) for the runs under ``out``: per-sentence
    BLEU statistics of ``<run>/test/hyp.txt`` against ``test_ref``, or the ``(nll, tokens)`` of
    ``<run>/test/sentence_nll.json``."""
    import numpy as np

    from fairseq_local_repro import compare as stats

    refs = []

    def stats_of(r: dict):
        tdir = os.path.join(out, f"{r['system']}-s{r['seed']}", "test")
        if kind == "lm":
            path = os.path.join(tdir, "sentence_nll.json")
            return np.asarray(read_json(path), dtype=np.float64) if os.path.isfile(path) else None
        path = os.path.join(tdir, "hyp.txt")
        if not os.path.isfile(path):
            return None
        if not refs:
            refs.extend(_read_lines(test_ref))
        try:
            return stats.bleu_statistics(_read_lines(path), refs)
        except ValueError as e:
            raise ReproError(f"{path}: {e} in {test_ref}")

    return stats_of


def compare(ctx: dict, results: List[dict]) -> dict:
    """The family's comparison (``comparison.json``): every run's results and the statistics of
    ``fairseq_local_repro.compare`` (seed-level t-test, two-level test, per-sentence randomization
    test, Holm-corrected) computed from the runs' test outputs."""
    from fairseq_local_repro import compare as stats

    family, out = ctx["family"], ctx["out"]
    comparison = {"family": family.name, "kind": family.kind, "paper": family.paper, "claim": family.claim,
                  "baseline": family.baseline.name, "system_order": [s.name for s in family.systems],
                  "scale": ctx["scale_name"], "data": ctx["data"].description, "split": ctx["data"].sizes,
                  "scale_notes": ctx["scale"].notes, "command": ctx["command"], "systems": results}
    if family.comparisons:
        comparison["comparisons"] = [list(p) for p in family.comparisons]
    if family.reference:
        comparison["paper_reference"] = family.reference
    try:
        comparison["statistics"] = stats.analyse(comparison, results,
                                                 run_statistics(family.kind, out, ctx["data"].test_ref))
    except ValueError as e:
        raise ReproError(f"{family.name}: {e}")
    write_json(os.path.join(out, "comparison.json"), comparison)
    return comparison


# ---- extra test sets -----------------------------------------------------------------------------
def prepare_extra(ctx: dict, src_file: str, ref_file: str) -> str:
    """Binarize a raw parallel test set as the family's data were (Moses tokenization, lowercase,
    the family's BPE codes and dictionaries); returns the binarized folder."""
    data = ctx["data"]
    name = os.path.splitext(os.path.basename(src_file))[0]
    edir = os.path.join(ctx["out"], "extra", name)
    bin_dir = os.path.join(edir, "bin")
    if os.path.isfile(os.path.join(bin_dir, f"test.{data.src}-{data.tgt}.{data.src}.idx")):
        return bin_dir
    os.makedirs(edir, exist_ok=True)
    codes = sorted(f for f in os.listdir(os.path.join(data.bin, "bpe")) if f.startswith("codes."))
    if not codes:
        raise ReproError(f"{data.bin}/bpe has no subword-nmt codes to apply to {src_file}")
    log = os.path.join(edir, "prepare.log")
    for lang, path in ((data.src, src_file), (data.tgt, ref_file)):
        script = ("set -euo pipefail; sacremoses -l \"$1\" tokenize -x <\"$2\" | "
                  "python -c 'import sys; sys.stdout.writelines(l.lower() for l in sys.stdin)' | "
                  "subword-nmt apply-bpe -c \"$3\" >\"$4\"")
        cmd = ["bash", "-c", script, "bash", lang, path, os.path.join(data.bin, "bpe", codes[0]),
               os.path.join(edir, f"test.{lang}")]
        if run_logged(cmd, log) != 0:
            raise ReproError(f"preparing {path} failed: {tail(log)} (full log: {log})")
    cmd = [sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", data.src, "--target-lang", data.tgt,
           "--testpref", os.path.join(edir, "test"), "--destdir", bin_dir, "--workers", "1",
           "--srcdict", os.path.join(data.bin, f"dict.{data.src}.txt"),
           "--tgtdict", os.path.join(data.bin, f"dict.{data.tgt}.txt")]
    if run_logged(cmd, log) != 0:
        raise ReproError(f"binarizing {src_file} failed: {tail(log)} (full log: {log})")
    return bin_dir


def prepare_extra_lattice(ctx: dict, src_file: str, ref_file: str, kinds: List[str]) -> Dict[str, str]:
    """A raw Chinese-English test set prepared as ``prepare_lattice_cpu`` prepared its data, for each
    data kind in ``kinds``: the Chinese through scripts/build_lattices.py with the kind's segmenters, the English
    Moses-tokenized as the recipe does, binarized with that kind's dictionaries.  Returns the
    binarized folder of each kind."""
    data = ctx["data"]
    name = os.path.splitext(os.path.basename(src_file))[0]
    edir = os.path.join(ctx["out"], "extra", name)
    os.makedirs(edir, exist_ok=True)
    log = os.path.join(edir, "prepare.log")
    tok = os.path.join(edir, f"test.{data.tgt}")
    if not os.path.isfile(tok):
        script = ("set -euo pipefail; source \"$1/scripts/lib/common.sh\"; activate_env; "
                  "moses_tok \"$2\" \"$3\" \"$4\"")
        if run_logged(["bash", "-c", script, "bash", REPO, data.tgt, ref_file, tok], log) != 0:
            raise ReproError(f"preparing {ref_file} failed: {tail(log)} (full log: {log})")
    bins = {}
    for kind in kinds:
        kind_bin = data.bins[kind]
        kdir = os.path.join(edir, kind)
        bins[kind] = os.path.join(kdir, "bin")
        if os.path.isfile(os.path.join(bins[kind], f"test.{data.src}-{data.tgt}.{data.src}.idx")):
            continue
        os.makedirs(kdir, exist_ok=True)
        shutil.copy(tok, os.path.join(kdir, f"test.{data.tgt}"))
        cmd = [sys.executable, os.path.join(REPO, "scripts", "build_lattices.py"), "--input", src_file,
               "--output", os.path.join(kdir, f"test.{data.src}"), "--segmenters", LATTICE_SEGMENTERS[kind]]
        if run_logged(cmd, log) != 0:
            raise ReproError(f"segmenting {src_file} ({kind}) failed: {tail(log)} (full log: {log})")
        cmd = [sys.executable, os.path.join(REPO, "scripts", "preprocess_lattices.py"), "--source-lang", data.src,
               "--target-lang", data.tgt, "--testpref", os.path.join(kdir, "test"), "--destdir", bins[kind],
               "--workers", "1", "--srcdict", os.path.join(kind_bin, f"dict.{data.src}.txt"),
               "--tgtdict", os.path.join(kind_bin, f"dict.{data.tgt}.txt")]
        if run_logged(cmd, log) != 0:
            raise ReproError(f"binarizing {src_file} ({kind}) failed: {tail(log)} (full log: {log})")
    return bins


def _extra_tests(ctx: dict, rows: List[dict], run_stats: dict, score):
    """Per row of an extra test set: the 95% bootstrap half-width of its score and the paired
    randomization test against the baseline's run of the same seed (fairseq_local_repro.compare)."""
    from fairseq_local_repro import compare as stats

    base = ctx["family"].baseline.name
    for r in rows:
        key = f"{r['system']}-s{r['seed']}"
        r["ci95"] = round(stats.score_interval(run_stats[key], score), 2)
        bkey = f"{base}-s{r['seed']}"
        if r["system"] != base and bkey in run_stats:
            r["p_vs_baseline"] = round(stats.sentence_test(run_stats[key], run_stats[bkey], score)["p"], 4)


def score_extra(ctx: dict, results: List[dict], src_file: str, ref_file: str) -> List[dict]:
    """Every trained system's beam-5 BLEU on a raw test set of the user's (``--test-src/--test-ref``),
    with the paired randomization test against the baseline; written to ``OUT/FAMILY/extra/NAME/scores.json``."""
    data, family = ctx["data"], ctx["family"]
    if data.bins:  # one binarized folder per data kind (lattice family)
        kinds = list(dict.fromkeys(family.system(r["system"]).data for r in results))
        bins = prepare_extra_lattice(ctx, src_file, ref_file, kinds)
    else:
        bins = {"": prepare_extra(ctx, src_file, ref_file)}
    edir = os.path.join(ctx["out"], "extra", os.path.splitext(os.path.basename(src_file))[0])
    hyps = {}
    rows = []
    for r in results:
        key = f"{r['system']}-s{r['seed']}"
        system = family.system(r["system"])
        ckpt = os.path.join(ctx["out"], key, "checkpoints", "checkpoint_best.pt")
        s = translate_and_score(key, data.for_system(system), ckpt, os.path.join(edir, key), "test", ref_file,
                                bin_dir=bins[system.data], task=family.task)
        hyps[key] = s.pop("hyp")
        rows.append({"system": r["system"], "seed": r["seed"], **s})
    from fairseq_local_repro import compare as stats

    refs = _read_lines(ref_file)
    extra_stats = {key: stats.bleu_statistics(_read_lines(path), refs) for key, path in hyps.items()}
    _extra_tests(ctx, rows, extra_stats, stats.corpus_bleu)
    write_json(os.path.join(edir, "scores.json"), {"src": os.path.abspath(src_file), "ref": os.path.abspath(ref_file),
                                                   "systems": rows})
    for r in rows:
        say(f"{os.path.basename(src_file)}: {r['system']}-s{r['seed']} BLEU {r['bleu']:.2f}"
            + f" ± {r['ci95']:.2f}" + (f", p {r['p_vs_baseline']}" if "p_vs_baseline" in r else ""))
    return rows


def score_extra_lm(ctx: dict, results: List[dict], text_file: str) -> List[dict]:
    """Every trained language model's perplexity on a raw text of the user's (``--test-text``),
    tokenized as the family's data and binarized with its dictionary, with the paired randomization test
    against the baseline; written to ``OUT/FAMILY/extra/NAME/scores.json``."""
    data = ctx["data"]
    name = os.path.splitext(os.path.basename(text_file))[0]
    edir = os.path.join(ctx["out"], "extra", name)
    bin_dir = os.path.join(edir, "bin")
    os.makedirs(edir, exist_ok=True)
    log = os.path.join(edir, "prepare.log")
    if not os.path.isfile(os.path.join(bin_dir, "test.idx")):
        tok = os.path.join(edir, "test.tok")
        script = ("set -euo pipefail; sacremoses -l en tokenize -x <\"$1\" | "
                  "python -c 'import sys; sys.stdout.writelines(l.lower() for l in sys.stdin)' >\"$2\"")
        if run_logged(["bash", "-c", script, "bash", text_file, tok], log) != 0:
            raise ReproError(f"preparing {text_file} failed: {tail(log)} (full log: {log})")
        cmd = [sys.executable, "-m", "fairseq_cli.preprocess", "--only-source", "--testpref", tok, "--destdir", bin_dir,
               "--workers", "1", "--srcdict", os.path.join(data.bin, "dict.txt")]
        if run_logged(cmd, log) != 0:
            raise ReproError(f"binarizing {text_file} failed: {tail(log)} (full log: {log})")
    rows, nll = [], {}
    for r in results:
        key = f"{r['system']}-s{r['seed']}"
        ckpt = os.path.join(ctx["out"], key, "checkpoints", "checkpoint_best.pt")
        s = eval_lm(key, data, ckpt, os.path.join(edir, key), bin_dir=bin_dir)
        nll[key] = s.pop("nll")
        rows.append({"system": r["system"], "seed": r["seed"], **s})
    import numpy as np

    from fairseq_local_repro import compare as stats

    _extra_tests(ctx, rows, {k: np.asarray(read_json(v), dtype=np.float64) for k, v in nll.items()}, stats.corpus_ppl)
    write_json(os.path.join(edir, "scores.json"), {"text": os.path.abspath(text_file), "systems": rows})
    for r in rows:
        say(f"{os.path.basename(text_file)}: {r['system']}-s{r['seed']} perplexity {r['ppl']:.2f}")
    return rows
