"""A new user's first hour, text: empty splits, blank training lines, ``--nwordssrc 0``, and what
``fairseq-interactive`` reads (UTF-8 only, the hub's lattice formats for the lattice task, input
lowercased when the training text was): one line naming the file or the input line.

Most cases run the code path in-process and finish it as the plugin's excepthook does (``call`` of
tests/test_bad_inputs.py); a few run the real CLIs to check the hook.  The tiny checkpoints come
from the session fixture ``tiny_checkpoints`` (tests/conftest.py).
"""
import io
import logging
import shutil
import subprocess
import sys

from fairseq import checkpoint_utils
from fairseq.data import Dictionary
import pytest
import torch

from bad_inputs_lib import USER_DIR, setup_task
from contract_lib import _preprocess
from fairseq_local.data import text_input
from fairseq_local_core.lattice import Lattice
from fairseq_local.data.text_input import buffered_read, is_lowercased, lowercase_input
from fairseq_local.models.lattice_rnnsearch import LatticeRNNSearchModel
from fairseq_local.models.mc_rnn import MCRNNModel
from test_bad_inputs import BIN, ENV, GB18030, assert_one_line, call, run


def _binarize(tmp_path, lines_by_split, extra=()):
    raw = tmp_path / "raw"
    raw.mkdir(exist_ok=True)
    argv = ["--only-source", "--destdir", str(tmp_path / "bin"), "--workers", "1", *extra]
    for split, lines in lines_by_split.items():
        (raw / f"{split}.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        argv += [f"--{split}pref", str(raw / f"{split}.txt")]
    _preprocess(argv)
    return tmp_path / "bin"


@pytest.mark.parametrize("task", ["language_modeling", "stateful_language_modeling"])
def test_empty_split(capsys, tmp_path, task):
    d = _binarize(tmp_path, {"train": ["a b c", "d e"], "valid": ["a b"], "test": []})
    t = setup_task(task, d, ["--tokens-per-sample", "4"], parser="eval_lm")
    code, err = call(capsys, t.load_dataset, "test")
    assert_one_line(code, err, f"binarized split {d / 'test'} is empty (0 sentences: binarized from an empty file)")


def test_empty_translation_test_split(capsys, tmp_path, tiny_checkpoints):
    data, args = tiny_checkpoints["mt"][1:]
    d = tmp_path / "bin"
    shutil.copytree(data, d)
    for lang in ("src", "tgt"):
        (tmp_path / f"empty.{lang}").write_text("")
    _preprocess(["--source-lang", "src", "--target-lang", "tgt", "--testpref", str(tmp_path / "empty"), "--destdir",
                 str(d), "--srcdict", str(d / "dict.src.txt"), "--tgtdict", str(d / "dict.tgt.txt"), "--workers", "1"])
    code, err = call(capsys, setup_task("translation", d, args).load_dataset, "test")
    assert_one_line(code, err, f"binarized split {d / 'test.src-tgt.src'} is empty")


def test_blank_training_lines_warn_once_naming_the_line(caplog, tmp_path):
    d = _binarize(tmp_path, {"train": ["a b c", "d e", "", "f", ""], "valid": ["a b"]})
    t = setup_task("language_modeling", d, ["--tokens-per-sample", "4"], parser="eval_lm")
    with caplog.at_level(logging.WARNING):
        t.load_dataset("train")
        t.load_dataset("train")
        t.load_dataset("valid")
    warned = [r.getMessage() for r in caplog.records if "empty sentence" in r.getMessage()]
    assert warned == [f"{d / 'train'}: 2 empty sentence(s), the first is line 3 of the text it was binarized from "
                      "(blank lines there?): remove them before fairseq-preprocess unless they are meant (paragraph "
                      "breaks of a language-model corpus)"]


@pytest.mark.parametrize("option", ["--nwordssrc", "--nwordstgt"])
def test_preprocess_nwords_zero(tmp_path, option):
    raw = tmp_path / "train"
    for lang in ("src", "tgt"):
        (tmp_path / f"train.{lang}").write_text("a b\n")
    code, err = run(BIN / "fairseq-preprocess", "--user-dir", USER_DIR, "--source-lang", "src", "--target-lang", "tgt",
                    "--trainpref", raw, "--destdir", tmp_path / "bin", option, "0")
    assert_one_line(code, err, f"fairseq-preprocess: error: {option} must be -1 (no cap) or >= 1 (got 0)",
                    leftovers=[tmp_path / "bin" / "dict.src.txt"])


def _read_all(data: bytes, monkeypatch, name="-"):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    return [line for chunk in buffered_read(name, 2) for line in chunk]


def test_interactive_reads_utf8_and_refuses_the_rest(capsys, monkeypatch, tmp_path):
    assert _read_all("下雨天\n  a b \r\n\nc\n".encode(), monkeypatch) == ["下雨天", "a b", "", "c"]
    code, err = call(capsys, _read_all, "下雨天\n".encode() + GB18030, monkeypatch)
    assert_one_line(code, err, "input line 2: not UTF-8 (", "byte 0xd5 at byte 1 of the line")
    path = tmp_path / "in.txt"
    path.write_bytes(b"ok\nok\n" + "é\n".encode("latin-1"))
    code, err = call(capsys, _read_all, b"", monkeypatch, str(path))
    assert_one_line(code, err, f"{path}:3: not UTF-8")
    code, err = call(capsys, _read_all, b"", monkeypatch, str(tmp_path / "missing.txt"))
    assert_one_line(code, err, f"--input {tmp_path / 'missing.txt'}: no such file")


@pytest.fixture(scope="module")
def lattice_task(tiny_checkpoints):
    text_input._INPUT["name"] = "-"
    data, args = tiny_checkpoints["lattice"][1:]
    return setup_task("lattice_translation", data, args, ["--lattice-segmenters", "char"], parser="interactive")


def test_lattice_interactive_reads_lattice_lines_like_the_hub(lattice_task, tiny_checkpoints):
    raw = tiny_checkpoints["lattice"][1].parent / "raw"
    line = (raw / "test.zh").read_text(encoding="utf-8").splitlines()[0]
    lattice = Lattice.from_line(line)
    toks, lengths = lattice_task.get_interactive_tokens_and_lengths([line, "".join(lattice.chars)], None)
    n, e = int(toks[0][0]), int(toks[0][1])
    assert lengths[0] == n == lattice.n_chars
    assert list(zip(toks[0][2:2 + e].tolist(), toks[0][2 + e:2 + 2 * e].tolist())) == list(lattice.edges)
    assert toks[0][2 + 2 * e:2 + 3 * e].tolist() == [lattice_task.src_dict.index(w) for w in lattice.words()]
    # the raw sentence is segmented by --lattice-segmenters (char): a chain of its characters
    assert int(toks[1][1]) == lattice.n_chars and lengths[1] == lattice.n_chars


@pytest.mark.parametrize("lines,needle", [
    (["下 雨\t0:1 1:2\t0 1 2", "a\tb\tc\td"], "input line 2: expected 2 or 3 tab-separated fields"),
    (["下 雨 天\t0:1 0:5"], "input line 1: edge 0:5 out of range (sentence has 3 characters)"),
    (["下 雨 天 0:1 1:2 2:3 0 1 2 3"], "input line 1: looks like a lattice line without its tabs"),
    (["下雨天", "下\udcb0天"], "input line 2: not UTF-8 text (undecodable byte at character 2)"),
])
def test_lattice_interactive_refuses_what_it_cannot_read(capsys, lattice_task, lines, needle):
    lattice_task._interactive_lines = 0
    code, err = call(capsys, lattice_task.get_interactive_tokens_and_lengths, lines, None)
    assert_one_line(code, err, needle)


def test_lattice_interactive_cli_lattice_line_and_gb18030(tmp_path, tiny_checkpoints):
    """The real fairseq-interactive: a lattice line is translated as its lattice (its source line
    shows the lattice's primary-path words, not '0:1' tokens), the same as the hub translates it;
    a GB18030 line stops it with one line."""

    path, data, args = tiny_checkpoints["lattice"]
    line = (data.parent / "raw" / "test.zh").read_text(encoding="utf-8").splitlines()[1]
    cmd = [str(BIN / "fairseq-interactive"), str(data), "--user-dir", str(USER_DIR), "--task", "lattice_translation",
           *args, "--cpu", "--path", str(path), "--lattice-segmenters", "char", "--beam", "2"]
    proc = subprocess.run(cmd, input=(line + "\n").encode(), capture_output=True, env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    out = proc.stdout.decode()
    source = [x for x in out.splitlines() if x.startswith("S-0\t")][0]
    assert ":" not in source
    hypo = [x for x in out.splitlines() if x.startswith("D-0\t")][0].split("\t")[2]
    hub = LatticeRNNSearchModel.from_pretrained(path.parent, data_name_or_path=str(data), lattice_segmenters="char")
    assert hub.translate(line, beam=2) == hypo

    proc = subprocess.run(cmd, input=GB18030, capture_output=True, env=ENV, timeout=300)
    assert_one_line(proc.returncode, proc.stderr.decode(), "fairseq-interactive: error: input line 1: not UTF-8")
    assert "H-0" not in proc.stdout.decode()


def test_input_is_lowercased_when_the_training_text_was(tiny_checkpoints):
    path, data, args = tiny_checkpoints["mt"]
    t = setup_task("translation", data, args, parser="interactive")
    assert is_lowercased(t.source_dictionary)
    words = t.source_dictionary.symbols[t.source_dictionary.nspecial:t.source_dictionary.nspecial + 3]
    lower, upper = " ".join(words), " ".join(w.capitalize() for w in words)
    plain, _ = t.get_interactive_tokens_and_lengths([upper], lambda x: x)  # no model of ours yet: fairseq's
    assert t.source_dictionary.unk() in plain[0].tolist()
    checkpoint_utils.load_model_ensemble([str(path)], task=t)  # fairseq-interactive loads its model first
    a, _ = t.get_interactive_tokens_and_lengths([upper], lambda x: x)
    b, _ = t.get_interactive_tokens_and_lengths([lower], lambda x: x)
    assert torch.equal(a[0], b[0]) and t.source_dictionary.unk() not in a[0].tolist()

    cased = Dictionary()
    for w in words + ["Berlin"] + [f"w{i}x" for i in range(30)]:
        cased.add_symbol(w)
    assert not is_lowercased(cased) and lowercase_input(upper, cased) == upper
    few = Dictionary()
    for w in words:
        few.add_symbol(w)
    assert not is_lowercased(few)  # too few cased words to tell
    # lattice offsets survive: a character whose lowercase is longer stays as it is
    assert lowercase_input("İA\t0:1 1:2", t.source_dictionary) == "İa\t0:1 1:2"

    hub = MCRNNModel.from_pretrained(path.parent, data_name_or_path=str(data))
    assert torch.equal(hub.encode(upper), hub.encode(lower))
