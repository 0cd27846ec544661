"""A new user's first hour, round 5: the lattice binarizer's claim on its ``--destdir``, documented
examples that print the page's figures, pointers to the options that exist, and the members of
issue #71's classes that round 4 did not list (an output that is a file, ...).
"""
import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest

from contract_lib import REPO
from doc_snippets import doc_files, extract_blocks, simple_commands
from fairseq_local_core import file_io
from fairseq_local.config_checks import HELP_POINTER
from fairseq_local_repro.bench_entries import ENTRIES
from fairseq_local_repro.tools import preprocess_lattices
from test_bad_inputs import BIN, ENV, SCRIPTS, _lattice_corpus, assert_one_line, call

USER_DIR = REPO / "fairseq_local"


# ------------------------------------------------------------------------------------------------
# 2/3. preprocess_lattices.py: one run at a time on --destdir, and only its own output replaced
# ------------------------------------------------------------------------------------------------
def test_preprocess_lattices_second_run_on_a_claimed_destdir_is_one_line(tmp_path):
    argv = _lattice_corpus(tmp_path)
    dest = tmp_path / "bin"
    lock = file_io.claim(str(dest), "--destdir")  # another live run holds it
    try:
        proc = subprocess.run([sys.executable, str(SCRIPTS / "preprocess_lattices.py"), *argv],
                              capture_output=True, text=True, env=ENV)
    finally:
        file_io.release(str(dest))
    assert_one_line(proc.returncode, proc.stderr, f"preprocess_lattices.py: error: --destdir {dest} is in use by "
                                                  f"another preprocess_lattices.py run (pid {os.getpid()}, lock file {lock})")
    assert not dest.exists()


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_preprocess_lattices_leaves_a_users_destdir_as_it_is(tmp_path, capsys, kind):
    dest = tmp_path / "bin"
    if kind == "folder":
        dest.mkdir()
        (dest / "thesis.tex").write_text("mine\n")
        (dest / "dict.zh.txt").write_text("mine 1\n")
        needle = f"--destdir {dest} is a folder that no fairseq-local tool made"
    else:
        dest.write_text("mine\n")
        needle = f"--destdir {dest} is a file, not a folder: it is left as it is"
    before = {p.name: p.read_bytes() for p in dest.iterdir()} if kind == "folder" else dest.read_bytes()
    code, err = call(capsys, preprocess_lattices.main, _lattice_corpus(tmp_path))
    assert_one_line(code, err, "preprocess_lattices.py: error: " + needle)
    after = {p.name: p.read_bytes() for p in dest.iterdir()} if kind == "folder" else dest.read_bytes()
    assert after == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".bin")] == []


def test_preprocess_lattices_rerun_replaces_its_own_output(tmp_path, capsys):
    argv = _lattice_corpus(tmp_path)
    dest = tmp_path / "bin"
    code, err = call(capsys, preprocess_lattices.main, argv + ["--testpref", str(tmp_path / "valid")])
    assert code == 0, err
    assert (dest / "test.zh-en.zh.idx").is_file() and (dest / file_io.OURS).is_file()
    first = (dest / "dict.zh.txt").read_text()
    (tmp_path / "train.zh").write_text("下 雨\t0:1 1:2\t0 1 2\n" * 3, encoding="utf-8")
    code, err = call(capsys, preprocess_lattices.main, argv)  # the same folder, no test split this time
    assert code == 0, err
    assert not (dest / "test.zh-en.zh.idx").exists()  # replaced as a whole, nothing of the first run kept
    assert (dest / "dict.zh.txt").read_text() != first and "天" not in (dest / "dict.zh.txt").read_text()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


# ------------------------------------------------------------------------------------------------
# 9. pointers that lead somewhere, and input files named by file and line
# ------------------------------------------------------------------------------------------------
def _help(*argv):
    proc = subprocess.run([str(BIN / "fairseq-train"), *argv, "--help"], capture_output=True, text=True, env=ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_fairseq_train_help_lists_the_options_of_the_arch_and_task_given():
    """fairseq prints --help before it adds the options of --arch and --task; the error line's pointer
    ("the same command with --help") must list them."""
    ours = _help("--user-dir", str(USER_DIR), "--arch", "mc_rnn_iwslt_de_en_2", "--task", "translation")
    for option in ("--encoder-hidden-size", "--attention-dim", "--left-pad-source"):
        assert option in ours, option
    lm = _help("--user-dir", str(USER_DIR), "--arch", "parallel_lstm_lm", "--task", "stateful_language_modeling")
    assert "--cell-type" in lm and "--encoder-hidden-size" not in lm


def test_a_misspelled_model_option_names_the_closest_and_the_pointer(tmp_path):
    proc = subprocess.run([str(BIN / "fairseq-train"), str(tmp_path), "--user-dir", str(USER_DIR), "--arch",
                           "mc_rnn_iwslt_de_en_2", "--encoder-hiden-size", "8", "--cpu"],
                          capture_output=True, text=True, env=ENV)
    line = assert_one_line(proc.returncode, proc.stderr, "fairseq-train: error: unrecognized arguments: "
                           "--encoder-hiden-size 8; --encoder-hiden-size: did you mean --encoder-hidden-size")
    assert line.endswith(f"({HELP_POINTER})") and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("text,needle", [
    (b"copular verbs: is was\nprepositions of in\n", "groups.txt:2: expected 'NAME: word word ...'"),
    (b"verbs: is\n: of in\n", "groups.txt:2: a group needs a name and at least one word"),
    (b"verbs: is\nverbes: \xe9t\xe9\n", "groups.txt:2: not UTF-8"),
    (b"# nothing\n\n", "groups.txt: no word groups found"),
])
def test_masking_word_groups_file_is_one_line(tmp_path, text, needle):
    groups = tmp_path / "groups.txt"
    groups.write_bytes(text)
    proc = subprocess.run([sys.executable, str(SCRIPTS / "analysis" / "parallel_cells_masking.py"), "--path",
                           str(tmp_path / "lm.pt"), "--data", str(tmp_path), "--word-groups", str(groups), "--out",
                           str(tmp_path / "m.png")], capture_output=True, text=True, env=ENV)
    assert_one_line(proc.returncode, proc.stderr, f"parallel_cells_masking.py: error: {tmp_path / needle}")
    assert sorted(os.listdir(tmp_path)) == ["groups.txt"]


# ------------------------------------------------------------------------------------------------
# 4. a documented example prints the figures of the page it stands for
# ------------------------------------------------------------------------------------------------
def _bench_models(argv):
    """What decides the two models a ``scripts/bench.py`` command compares (its parameters, its
    speed): the task, both archs with their options, the synthetic vocabulary."""
    p = argparse.ArgumentParser(add_help=False)
    for name, default in (("--task", "translation"), ("--task-args", ""), ("--arch", None), ("--arch-args", ""),
                          ("--baseline", None), ("--baseline-args", ""), ("--vocab", "8000")):
        p.add_argument(name, default=default)
    a, _ = p.parse_known_args(argv)
    return (a.task, shlex.split(a.task_args), a.arch, shlex.split(a.arch_args), a.baseline,
            shlex.split(a.baseline_args), int(a.vocab))


def test_every_documented_bench_command_builds_the_models_of_a_page_entry():
    """README's benchmark example once left out the baseline's widths: fairseq's 512-wide ``lstm``
    (30.4M parameters against MC-RNN-3's 15.1M) instead of docs/mc_rnn.md's 256-wide one (10.7M),
    reversing the page's comparison.  Every documented bench.py command builds the models of one of
    the entries whose results the pages show (fairseq_local_repro/bench_entries.py)."""
    measured = [_bench_models(shlex.split(e["args"])) for e in ENTRIES]
    documented = [(b.where, argv) for path in doc_files() for b in extract_blocks(path) if "scripts/bench.py" in b.code
                  for _, argv in simple_commands(b.code) if "scripts/bench.py" in argv]
    assert len(documented) >= 10
    for where, argv in documented:
        assert _bench_models(argv) in measured, (where, argv)
    readme = [argv for where, argv in documented if where.startswith("README")]
    assert readme and "256" in _bench_models(readme[0])[5]


# ------------------------------------------------------------------------------------------------
# 9. a warning that contradicts the error after it
# ------------------------------------------------------------------------------------------------
def _lm_task(folder, words, corpus):
    from fairseq.data import Dictionary

    folder.mkdir()
    (folder / "corpus.json").write_text(json.dumps({"corpus": corpus}))
    d = Dictionary()
    for w in words:
        d.add_symbol(w)
    return SimpleNamespace(cfg=SimpleNamespace(data=str(folder)), source_dictionary=None, target_dictionary=d)


@pytest.mark.parametrize("other_words,warned", [(["a", "b"], True), (["a", "b", "c"], False)])
def test_another_corpus_is_said_to_match_only_when_its_dictionaries_do(tmp_path, caplog, other_words, warned):
    """eval-lm of a checkpoint on another run's data folder: "their dictionaries match, so it runs"
    only where they do; dictionaries of another size are the weight-shape check's one-line error."""
    from fairseq_local.data import checkpoint_dictionaries as fp

    trained = _lm_task(tmp_path / "trained", ["a", "b"], "1" * 64)
    other = _lm_task(tmp_path / "other", other_words, "2" * 64)
    state = {"extra_state": {fp.KEY: fp.task_fingerprints(trained), fp.CORPUS_KEY: fp.task_corpus(trained)}}
    with caplog.at_level("WARNING"):
        fp.check("lm.pt", state, other)
    said = [r.getMessage() for r in caplog.records if "their dictionaries match" in r.getMessage()]
    assert len(said) == warned, said


def test_preprocess_sh_destdir_that_is_a_file_is_one_line(tmp_path):
    """Not "exists and is not empty (use --force to replace it)": --force would not replace a file."""
    for name in ("train", "valid"):
        for lang in ("de", "en"):
            (tmp_path / f"{name}.{lang}").write_text("ein satz\n")
    dest = tmp_path / "data"
    dest.write_text("mine\n")
    proc = subprocess.run(["bash", str(SCRIPTS / "preprocess.sh"), "--src", "de", "--tgt", "en", "--train",
                           str(tmp_path / "train"), "--valid", str(tmp_path / "valid"), "--destdir", str(dest),
                           "--bpe", "none"], capture_output=True, text=True, env=ENV)
    assert_one_line(proc.returncode, proc.stderr, f"preprocess.sh: error: --destdir {dest} is a file, not a folder")
    assert dest.read_text() == "mine\n"


def test_preprocess_sh_force_never_deletes_another_runs_output_inside_destdir(tmp_path):
    """generate.sh --out inside the data folder, then preprocess.sh --force on that folder: refused in
    one line naming what it would delete, everything left as it was; without it, --force replaces."""
    for name in ("train", "valid"):
        for lang in ("de", "en"):
            (tmp_path / f"{name}.{lang}").write_text("ein satz\nnoch ein satz\n" if lang == "de" else "a b\nc d\n")
    dest = tmp_path / "data"
    cmd = ["bash", str(SCRIPTS / "preprocess.sh"), "--src", "de", "--tgt", "en", "--train", str(tmp_path / "train"),
           "--valid", str(tmp_path / "valid"), "--destdir", str(dest), "--bpe", "none"]
    subprocess.run(cmd, capture_output=True, text=True, env=ENV, check=True)
    gen = dest / "gen"
    gen.mkdir()
    (gen / "gen.json").write_text("{}\n")
    (gen / "hyp.txt").write_text("mine\n")
    before = sorted(p.name for p in dest.iterdir())
    proc = subprocess.run(cmd + ["--force"], capture_output=True, text=True, env=ENV)
    assert_one_line(proc.returncode, proc.stderr, f"preprocess.sh: error: --destdir {dest} holds {gen}, which this "
                                                  "tool does not write")
    assert sorted(p.name for p in dest.iterdir()) == before and (gen / "hyp.txt").read_text() == "mine\n"
    (gen / "gen.json").unlink()
    (gen / "hyp.txt").unlink()
    gen.rmdir()
    proc = subprocess.run(cmd + ["--force"], capture_output=True, text=True, env=ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in dest.iterdir()) == before_without(before, "gen")


def before_without(names, name):
    return [n for n in names if n != name]


# ------------------------------------------------------------------------------------------------
# 6. kill (SIGTERM) of a Python tool: as Ctrl-C, nothing half-written and no temporary left
# ------------------------------------------------------------------------------------------------
def _killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    raise AssertionError("SIGTERM did not stop the tool")


def test_kill_of_preprocess_lattices_leaves_its_earlier_output(tmp_path, capsys, monkeypatch):
    argv = _lattice_corpus(tmp_path)
    code, err = call(capsys, preprocess_lattices.main, argv)
    assert code == 0, err
    before = {p.name: p.read_bytes() for p in (tmp_path / "bin").iterdir()}
    monkeypatch.setattr(preprocess_lattices, "write_lattices", _killed)
    handler = signal.getsignal(signal.SIGTERM)
    code, err = call(capsys, preprocess_lattices.main, argv)
    assert code == 130 and err.splitlines()[-1] == (f"preprocess_lattices.py: interrupted; {tmp_path / 'bin'} was "
                                                    "left as it was")
    assert {p.name: p.read_bytes() for p in (tmp_path / "bin").iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert signal.getsignal(signal.SIGTERM) is handler


def test_kill_of_average_checkpoints_leaves_no_temporary_file(tmp_path, capsys, monkeypatch):
    import torch

    from fairseq_local_repro.tools import average_checkpoints as avg

    inputs = [tmp_path / "a.pt", tmp_path / "b.pt"]
    for path in inputs:
        path.write_bytes(b"x")
    out = tmp_path / "avg.pt"
    out.write_bytes(b"earlier average")
    monkeypatch.setattr(avg, "average_checkpoints", lambda paths: {"model": {}})

    def save(obj, f):
        f.write(b"half")
        _killed()

    monkeypatch.setattr(torch, "save", save)
    code, err = call(capsys, avg.main, ["--inputs", *map(str, inputs), "--output", str(out)])
    assert code == 130 and err.splitlines()[-1] == f"average_checkpoints.py: interrupted; {out} was left as it was"
    assert out.read_bytes() == b"earlier average"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt", "avg.pt", "b.pt"]


# ------------------------------------------------------------------------------------------------
# 4. a number that changes nothing is said to
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("max_tokens,said", [(None, 0), (4000, 1)])
def test_stateful_lm_says_once_that_max_tokens_is_unused(caplog, max_tokens, said):
    """A stateful batch is --batch-size rows of --tokens-per-sample tokens; a --max-tokens (fairseq's
    habit) left the perplexity as it was without a word."""
    import torch
    from fairseq.data import Dictionary

    from fairseq_local.data.stateful_bptt_dataset import StatefulBPTTDataset
    from fairseq_local.tasks.stateful_language_modeling import StatefulLanguageModelingTask

    task = StatefulLanguageModelingTask(SimpleNamespace(variable_bptt=False, train_subset="train"), Dictionary())
    dataset = StatefulBPTTDataset(torch.arange(4, 40), 2, 4, 1, name="valid")
    with caplog.at_level("WARNING"):
        for _ in range(2):
            batches = list(task.get_batch_iterator(dataset, max_tokens=max_tokens).next_epoch_itr(shuffle=False))
    lines = [r.getMessage() for r in caplog.records if "--max-tokens" in r.getMessage()]
    assert len(lines) == said and len(batches) == len(dataset)
    if said:
        assert lines[0].startswith("--max-tokens 4000 is not used by --task stateful_language_modeling")
