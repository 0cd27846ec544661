"""A new user's first hour: every ordinary mistake is one line, nothing is silently wrong.

Classes (several cases each): a checkpoint of another family or task given to fairseq-generate,
-eval-lm or the hub; misspelled paths; impossible option values; a misspelled ``--arch`` (did you
mean); empty splits and blank lines; a stateful language model without its task; lattice
``fairseq-interactive`` reading the hub's input formats (raw text, lattice lines) and refusing what
it cannot read; the training-time lowercasing applied to interactive and hub input.  Most cases run
the code path in-process and finish it as the plugin's excepthook does (``call`` of
tests/test_bad_inputs.py); a few run the real CLIs to check the hook.  The tiny checkpoints come
from the session fixture ``tiny_checkpoints`` (tests/conftest.py).
"""
import io
import logging
import shutil
import sys
from argparse import Namespace

import pytest
import torch

from contract_lib import REPO, make_translation_data
from test_bad_inputs import BIN, GB18030, assert_one_line, call, run

USER_DIR = REPO / "fairseq_local"


def _load(paths, task):
    from fairseq import checkpoint_utils

    return checkpoint_utils.load_model_ensemble_and_task([str(p) for p in paths], task=task)


def _task(name, data, task_args, extra=(), parser="generation"):
    from fairseq import options, tasks

    get_parser = {"generation": options.get_generation_parser, "eval_lm": options.get_eval_lm_parser,
                  "interactive": options.get_interactive_generation_parser}[parser]
    argv = [str(data), "--user-dir", str(USER_DIR), "--task", name, "--cpu", *task_args, *extra]
    return tasks.setup_task(options.parse_args_and_arch(get_parser(), argv))


# ------------------------------------------------------------------------------------------------
# a checkpoint of another family or task, a missing checkpoint, other dictionaries
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ckpt,task,needle", [
    ("lm", "translation", "holds a 'mc_rnn_lm_ptb' model trained with --task stateful_language_modeling, a "
                          "language model: prog with --task translation needs a translation model"),
    ("lattice", "translation", "holds a 'lattice_dwl_gating' model trained with --task lattice_translation: add "
                               "--task lattice_translation"),
    ("mt", "language_modeling", "holds a 'mc_rnn_iwslt_de_en_2' model trained with --task translation, a translation "
                                "model: prog with --task language_modeling needs a language model"),
    ("mt", "stateful_language_modeling", "holds a 'mc_rnn_iwslt_de_en_2' model trained with --task translation, a "
                                         "translation model: prog with --task stateful_language_modeling needs a "
                                         "language model"),
    ("lattice", "language_modeling", "holds a 'lattice_dwl_gating' model trained with --task lattice_translation: "
                                     "add --task lattice_translation"),
])
def test_checkpoint_of_another_task(capsys, monkeypatch, tiny_checkpoints, ckpt, task, needle):
    monkeypatch.setattr(sys, "argv", ["prog"])
    path = tiny_checkpoints[ckpt][0]
    source = tiny_checkpoints["mt" if task == "translation" else "lm"]
    t = _task(task, source[1], source[2])
    code, err = call(capsys, _load, [path], t)
    assert_one_line(code, err, f"{path} {needle}")


def test_generate_cli_language_model_and_lattice_checkpoints(tiny_checkpoints):
    """The real fairseq-generate: an LM checkpoint no longer 'translates' with exit status 0."""
    mt_data, mt_args = tiny_checkpoints["mt"][1:]
    lm = tiny_checkpoints["lm"][0]
    code, err = run(BIN / "fairseq-generate", mt_data, "--user-dir", USER_DIR, *mt_args, "--cpu", "--path", lm)
    assert_one_line(code, err, f"fairseq-generate: error: {lm} holds a 'mc_rnn_lm_ptb' model")
    lat, lat_data, lat_args = tiny_checkpoints["lattice"]
    code, err = run(BIN / "fairseq-generate", lat_data, "--user-dir", USER_DIR, *lat_args, "--cpu", "--path", lat)
    assert_one_line(code, err, f"fairseq-generate: error: {lat} holds a 'lattice_dwl_gating' model trained with "
                               "--task lattice_translation: add --task lattice_translation")


def test_eval_lm_cli_translation_checkpoint(tiny_checkpoints):
    mt = tiny_checkpoints["mt"][0]
    lm_data = tiny_checkpoints["lm"][1]
    code, err = run(BIN / "fairseq-eval-lm", lm_data, "--user-dir", USER_DIR, "--cpu", "--path", mt)
    assert_one_line(code, err, f"fairseq-eval-lm: error: {mt} holds a 'mc_rnn_iwslt_de_en_2' model",
                    "needs a language model")


def test_missing_checkpoint_lists_what_is_there(capsys, tiny_checkpoints):
    path, data, args = tiny_checkpoints["mt"]
    t = _task("translation", data, args)
    wrong = path.parent / "checkpoint_bset.pt"
    code, err = call(capsys, _load, [wrong], t)
    assert_one_line(code, err, f"{wrong}: no such checkpoint file ({path.parent} holds checkpoint_best.pt, "
                               "checkpoint_last.pt)")
    code, err = call(capsys, _load, [path.parent / "nodir" / "x.pt"], t)
    assert_one_line(code, err, "no such checkpoint file (no directory")


def test_checkpoint_with_other_dictionaries(capsys, tmp_path, tiny_checkpoints):
    path = tiny_checkpoints["mt"][0]
    other, args = make_translation_data(tmp_path, n_train=6, n_valid=2, seed=3)
    t = _task("translation", other, args)
    code, err = call(capsys, _load, [path], t)
    line = assert_one_line(code, err, f"{path} does not fit the dictionaries of {other}: ",
                           "give the data directory the checkpoint was trained with")
    assert "in the checkpoint but" in line


def test_checkpoint_asked_for_the_opposite_direction(capsys, tiny_checkpoints):
    """src -> tgt weights fit a tgt -> src task when the dictionaries are the same size; fairseq
    would translate the wrong way with exit status 0."""
    from fairseq_local.errors import prog_name  # the running program, as the message names it

    path, data, args = tiny_checkpoints["mt"]
    assert args == ["--source-lang", "src", "--target-lang", "tgt"]
    t = _task("translation", data, ["--source-lang", "tgt", "--target-lang", "src"])
    code, err = call(capsys, _load, [path], t)
    assert_one_line(code, err, f"{path} translates src -> tgt (trained with --source-lang src --target-lang tgt), "
                               f"but {prog_name()} was given --source-lang tgt --target-lang src: pass --source-lang src "
                               "--target-lang tgt, or a checkpoint trained tgt -> src")


def test_hub_wrong_class_and_other_data(tmp_path, tiny_checkpoints):
    from fairseq_local.errors import one_line
    from fairseq_local.models.mc_rnn import MCRNNModel

    lm, lm_data, _ = tiny_checkpoints["lm"]
    with pytest.raises(TypeError) as info:
        MCRNNModel.from_pretrained(lm.parent, data_name_or_path=str(lm_data))
    assert one_line(info.value) == (f"from_pretrained: {lm} holds a MCRNNLanguageModel model, not a MCRNNModel")
    mt = tiny_checkpoints["mt"][0]
    other, _ = make_translation_data(tmp_path, n_train=6, n_valid=2, seed=3)
    with pytest.raises(ValueError) as info:
        MCRNNModel.from_pretrained(mt.parent, data_name_or_path=str(other))
    assert one_line(info.value).startswith(f"{mt} does not fit the dictionaries of {other}: ")


# ------------------------------------------------------------------------------------------------
# stateful language models without their task
# ------------------------------------------------------------------------------------------------
def test_stateful_checkpoint_evaluated_with_language_modeling_warns(caplog, tiny_checkpoints):
    path, data, args = tiny_checkpoints["lm"]
    with caplog.at_level(logging.WARNING):
        _load([path], _task("language_modeling", data, args, parser="eval_lm"))
    warned = [r.getMessage() for r in caplog.records if "stateful" in r.getMessage()]
    assert warned == [f"{path} was trained with --task stateful_language_modeling but runs with --task "
                      "language_modeling: every window starts from a zero state, so the perplexity differs; pass "
                      "--task stateful_language_modeling"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _load([path], _task("stateful_language_modeling", data, args, parser="eval_lm"))
    assert not [r for r in caplog.records if "stateful" in r.getMessage()]


@pytest.mark.parametrize("arch,task,warns", [
    ("mc_rnn_lm_ptb", "language_modeling", True),
    ("parallel_lstm_lm_1950h_wide2", "language_modeling", True),
    ("mc_rnn_lm_ptb", "stateful_language_modeling", False),
    ("lstm_lm", "language_modeling", False),
])
def test_stateful_arch_trained_without_its_task_warns(caplog, tiny_checkpoints, arch, task, warns):
    from fairseq import options, tasks

    data, args = tiny_checkpoints["lm"][1:]
    argv = [str(data), "--user-dir", str(USER_DIR), "--task", task, "--arch", arch, *args, "--decoder-embed-dim",
            "8", "--decoder-hidden-size", "8", "--cpu"]
    parsed = options.parse_args_and_arch(options.get_training_parser(), argv)
    with caplog.at_level(logging.WARNING):
        tasks.setup_task(parsed).build_model(parsed)
    warned = [r.getMessage() for r in caplog.records if "stateful_language_modeling" in r.getMessage()]
    assert len(warned) == int(warns)
    if warns:
        assert warned[0].endswith("pass --task stateful_language_modeling")


# ------------------------------------------------------------------------------------------------
# impossible option values
# ------------------------------------------------------------------------------------------------
def _train_cfg(data, args, extra, arch="lstm"):
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    argv = [str(data), "--user-dir", str(USER_DIR), "--arch", arch, "--cpu", "--optimizer", "adam", *args, *extra]
    return convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))


@pytest.mark.parametrize("extra,needle", [
    (["--max-tokens", "0"], "--max-tokens must be >= 1 (got 0)"),
    (["--max-tokens", "-5"], "--max-tokens must be >= 1 (got -5)"),
    (["--batch-size", "0"], "--batch-size must be >= 1 (got 0)"),
    (["--batch-size-valid", "0"], "--batch-size-valid must be >= 1 (got 0)"),
    (["--update-freq", "0"], "--update-freq must be >= 1 (got 0)"),
    (["--lr", "-1"], "--lr must be >= 0 (got -1.0)"),
    (["--clip-norm", "-1"], "--clip-norm must be >= 0 (got -1.0)"),
    (["--num-workers", "-1"], "--num-workers must be >= 0 (got -1)"),
    (["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "1.5"],
     "--label-smoothing must be in [0, 1) (got 1.5)"),
])
def test_common_options(capsys, tiny_checkpoints, extra, needle):
    from fairseq_local.patches.option_checks import check_common_options

    data, args = tiny_checkpoints["mt"][1:]
    code, err = call(capsys, check_common_options, _train_cfg(data, args, extra))
    assert_one_line(code, err, needle)


def test_tokens_per_sample_zero(capsys, tiny_checkpoints):
    from fairseq_local.patches.option_checks import check_common_options

    data, _ = tiny_checkpoints["lm"][1:]
    cfg = _train_cfg(data, ["--task", "stateful_language_modeling", "--tokens-per-sample", "0"], [], "mc_rnn_lm_ptb")
    code, err = call(capsys, check_common_options, cfg)
    assert_one_line(code, err, "--tokens-per-sample must be >= 1 (got 0)")


@pytest.mark.parametrize("arch,extra,needle", [
    ("mc_rnn_iwslt_de_en_2", ["--dropout", "-0.1"], "--dropout must be in [0, 1) (got -0.1)"),
    ("mc_rnn_iwslt_de_en_2", ["--dropout", "1.5"], "--dropout must be in [0, 1) (got 1.5)"),
    ("dpn_s2s_iwslt_de_en", ["--attention-dropout", "1.0"], "--attention-dropout must be in [0, 1) (got 1.0)"),
    ("lstm", ["--encoder-dropout-out", "-0.5"], "--encoder-dropout-out must be in [0, 1) (got -0.5)"),
])
def test_dropout_out_of_range(capsys, tiny_checkpoints, arch, extra, needle):
    from fairseq import options, tasks

    data, args = tiny_checkpoints["mt"][1:]
    argv = [str(data), "--user-dir", str(USER_DIR), "--arch", arch, "--cpu", *args, *extra]

    def build():
        parsed = options.parse_args_and_arch(options.get_training_parser(), argv)
        return tasks.setup_task(parsed).build_model(parsed)

    code, err = call(capsys, build)
    assert_one_line(code, err, needle)


@pytest.mark.parametrize("options_,needle", [
    ({"temperature": 0}, "--temperature must be > 0 (got 0)"),
    ({"sampling": True, "beam": 1, "sampling_topk": 0}, "--sampling-topk must be -1 (off) or >= 1 (got 0)"),
    ({"sampling": True, "beam": 1, "sampling_topp": 1.5}, "--sampling-topp must be -1 (off) or in (0, 1] (got 1.5)"),
    ({"max_len_a": -1}, "--max-len-a must be >= 0 (got -1)"),
    ({"max_len_a": 0, "max_len_b": 2, "min_len": 5}, "--min-len 5 exceeds the longest output --max-len-a 0"),
    ({"sampling": True, "beam": 4, "nbest": 2}, "--sampling requires --nbest to be equal to --beam (got --nbest 2"),
    ({"sampling_topk": 3}, "--sampling-topk requires --sampling"),
])
def test_generation_option_values(capsys, tiny_checkpoints, options_, needle):
    from fairseq.dataclass.configs import GenerationConfig

    path, data, args = tiny_checkpoints["mt"]
    t = _task("translation", data, args)
    models, _ = _load([path], t)[:2]
    gen = GenerationConfig()
    for key, value in options_.items():
        setattr(gen, key, value)
    code, err = call(capsys, t.build_generator, models, gen)
    assert_one_line(code, err, needle)


def test_option_values_through_the_clis(tmp_path, tiny_checkpoints):
    """The hooks are in place in the real entry points (fairseq-train's call_main, fairseq-generate's main)."""
    path, data, args = tiny_checkpoints["mt"]
    code, err = run(BIN / "fairseq-train", data, "--user-dir", USER_DIR, *args, "--arch", "lstm", "--cpu",
                    "--optimizer", "adam", "--update-freq", "0", "--save-dir", tmp_path / "ck")
    assert_one_line(code, err, "fairseq-train: error: --update-freq must be >= 1 (got 0)")
    code, err = run(BIN / "fairseq-generate", data, "--user-dir", USER_DIR, *args, "--cpu", "--path", path,
                    "--max-tokens", "0")
    assert_one_line(code, err, "fairseq-generate: error: --max-tokens must be >= 1 (got 0)")


# ------------------------------------------------------------------------------------------------
# misspelled registry choices
# ------------------------------------------------------------------------------------------------
def test_arch_typo_did_you_mean_cli(tiny_checkpoints):
    data, args = tiny_checkpoints["mt"][1:]
    code, err = run(BIN / "fairseq-train", data, "--user-dir", USER_DIR, *args, "--arch", "mc_rnn_iwslt_de_en9",
                    "--cpu")
    line = assert_one_line(code, err, "fairseq-train: error: --arch: unknown choice 'mc_rnn_iwslt_de_en9'; did you "
                                      "mean mc_rnn_iwslt_de_en_4 or mc_rnn_iwslt_de_en_3 or mc_rnn_iwslt_de_en_2? (")
    assert "usage:" not in err and "transformer" not in err  # no usage text, no list of every arch
    assert line.endswith("choices, listed by --help)")


@pytest.mark.parametrize("option,value,close", [
    ("--task", "translatoin", "translation"),
    ("--optimizer", "adamm", "adam"),
    ("--arch", "lattice_dwl_gatting", "lattice_dwl_gating"),
    ("--arch", "zzzzzz", None),
])
def test_registry_typos(capsys, tiny_checkpoints, option, value, close):
    from fairseq import options

    data, args = tiny_checkpoints["mt"][1:]
    argv = [str(data), "--user-dir", str(USER_DIR), "--arch", "lstm", *args, option, value]
    code, err = call(capsys, options.parse_args_and_arch, options.get_training_parser(), argv)
    line = assert_one_line(code, err, f"error: {option}: unknown choice '{value}'")
    assert (f"did you mean {close}" in line) if close else ("did you mean" not in line)


# ------------------------------------------------------------------------------------------------
# data: empty splits, blank lines, --nwords 0
# ------------------------------------------------------------------------------------------------
def _binarize(tmp_path, lines_by_split, extra=()):
    from contract_lib import _preprocess

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
    t = _task(task, d, ["--tokens-per-sample", "4"], parser="eval_lm")
    code, err = call(capsys, t.load_dataset, "test")
    assert_one_line(code, err, f"binarized split {d / 'test'} is empty (0 sentences: binarized from an empty file)")


def test_empty_translation_test_split(capsys, tmp_path, tiny_checkpoints):
    from contract_lib import _preprocess

    data, args = tiny_checkpoints["mt"][1:]
    d = tmp_path / "bin"
    shutil.copytree(data, d)
    for lang in ("src", "tgt"):
        (tmp_path / f"empty.{lang}").write_text("")
    _preprocess(["--source-lang", "src", "--target-lang", "tgt", "--testpref", str(tmp_path / "empty"), "--destdir",
                 str(d), "--srcdict", str(d / "dict.src.txt"), "--tgtdict", str(d / "dict.tgt.txt"), "--workers", "1"])
    code, err = call(capsys, _task("translation", d, args).load_dataset, "test")
    assert_one_line(code, err, f"binarized split {d / 'test.src-tgt.src'} is empty")


def test_blank_training_lines_warn_once_naming_the_line(caplog, tmp_path):
    d = _binarize(tmp_path, {"train": ["a b c", "d e", "", "f", ""], "valid": ["a b"]})
    t = _task("language_modeling", d, ["--tokens-per-sample", "4"], parser="eval_lm")
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


# ------------------------------------------------------------------------------------------------
# fairseq-interactive input: UTF-8, the lattice formats of the hub, lowercasing
# ------------------------------------------------------------------------------------------------
def _read_all(data: bytes, monkeypatch, name="-"):
    from fairseq_local.patches.interactive_input import buffered_read

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
    from fairseq_local.patches import interactive_input

    interactive_input._INPUT["name"] = "-"
    data, args = tiny_checkpoints["lattice"][1:]
    return _task("lattice_translation", data, args, ["--lattice-segmenters", "char"], parser="interactive")


def test_lattice_interactive_reads_lattice_lines_like_the_hub(lattice_task, tiny_checkpoints):
    from fairseq_local.data.lattice import Lattice

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
    import subprocess

    from test_bad_inputs import ENV
    from fairseq_local.models.lattice_rnnsearch import LatticeRNNSearchModel

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
    from fairseq.data import Dictionary

    from fairseq_local.patches.interactive_input import is_lowercased, lowercase_input

    path, data, args = tiny_checkpoints["mt"]
    t = _task("translation", data, args, parser="interactive")
    assert is_lowercased(t.source_dictionary)
    words = t.source_dictionary.symbols[t.source_dictionary.nspecial:t.source_dictionary.nspecial + 3]
    lower, upper = " ".join(words), " ".join(w.capitalize() for w in words)
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

    from fairseq_local.models.mc_rnn import MCRNNModel

    hub = MCRNNModel.from_pretrained(path.parent, data_name_or_path=str(data))
    assert torch.equal(hub.encode(upper), hub.encode(lower))


def test_non_stateful_namespace_checks_do_not_fire_on_plain_values():
    """Values fairseq leaves unset (None) and list-valued options pass the common checks."""
    from fairseq_local.patches.option_checks import check_common_options

    check_common_options(Namespace(max_tokens=None, batch_size=None, update_freq=[1, 2], lr=[0.0, 0.1],
                                   clip_norm=0.0, label_smoothing=0.0))


@pytest.mark.parametrize("model,needle", [
    ({"_name": "mc_rnn_iwslt_de_en_2", "encoder_hiden_size": 8},
     "model.encoder_hiden_size: mc_rnn_iwslt_de_en_2 has no such option; did you mean model.encoder_hidden_size"),
    ({"_name": "lattice_rnnsearch", "lattice_varient": "dwl"},
     "model.lattice_varient: lattice_rnnsearch has no such option; did you mean model.lattice_variant"),
    ({"_name": "mc_rnn_iwslt_de_en_2", "dropout": 1.2}, "--dropout must be in [0, 1) (got 1.2)"),
])
def test_yaml_model_key_typo(capsys, tiny_checkpoints, model, needle):
    """A misspelled key under ``model:`` of a Hydra YAML (an arch name as ``_name``: fairseq would
    keep the key and ignore it; a model name: fairseq's ConfigKeyError)."""
    from omegaconf import OmegaConf

    data, args = tiny_checkpoints["mt"][1:]
    t = _task("translation", data, args)
    code, err = call(capsys, t.build_model, OmegaConf.create(model))
    assert_one_line(code, err, needle)


# ------------------------------------------------------------------------------------------------
# mistakes fairseq meets before it imports the plugin: --user-dir, Hydra config keys
# ------------------------------------------------------------------------------------------------
def test_startup_hook_is_installed_and_cheap_elsewhere():
    """Installing the package puts setup.py's ``.pth`` line in site-packages; in a program that is no
    fairseq CLI the line does not even load the hook module."""
    import runpy
    import site
    import subprocess

    line = runpy.run_path(str(REPO / "setup.py"), run_name="setup_under_test")["PTH_LINE"]
    installed = [p / "fairseq_local.pth" for p in map(type(REPO), site.getsitepackages()) if (p / "fairseq_local.pth").exists()]
    assert installed and installed[0].read_text() == line
    probe = "import sys; print('_fairseq_local_cli_startup' in sys.modules, sys.excepthook is sys.__excepthook__)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]


@pytest.mark.parametrize("argv,orig_argv,prog", [
    (["/venv/bin/fairseq-train", "data"], None, "fairseq-train"),
    (["/venv/bin/fairseq-hydra-train"], None, "fairseq-hydra-train"),
    (["/venv/bin/fairseq-eval-lm"], None, "fairseq-eval-lm"),
    (["-m", "x"], ["/venv/bin/python", "-m", "fairseq_cli.generate", "x"], "python -m fairseq_cli.generate"),
    (["-m"], ["/fairseq/.venv/bin/python", "-m", "json.tool"], None),
    (["/fairseq-local/scripts/train.sh"], None, None),
    (["/venv/bin/fairseq-trainer"], None, None),
    ([""], None, None),
])
def test_startup_hook_acts_in_fairseq_clis_only(argv, orig_argv, prog):
    from fairseq_local import _cli_startup

    assert _cli_startup.program(argv, orig_argv or argv) == prog


@pytest.mark.parametrize("cmd,needle", [
    (["fairseq-train", "DATA", "--user-dir", "fairseq_locl"], "fairseq-train: error: --user-dir fairseq_locl: no "
     "such directory ({tmp}/fairseq_locl); did you mean --user-dir {user_dir}?"),
    ([sys.executable, "-m", "fairseq_cli.generate", "DATA", "--user-dir", "./fairseq-local"],
     "python -m fairseq_cli.generate: error: --user-dir ./fairseq-local: no such directory ({tmp}/fairseq-local); "
     "did you mean --user-dir {user_dir}?"),
])
def test_misspelled_user_dir(tmp_path, cmd, needle):
    import subprocess

    from test_bad_inputs import ENV

    cmd = [str(BIN / c) if c.startswith("fairseq-") else c for c in cmd]
    proc = subprocess.run([c.replace("DATA", str(tmp_path)) for c in cmd], capture_output=True, text=True, env=ENV,
                          cwd=tmp_path, timeout=300)
    line = assert_one_line(proc.returncode, proc.stderr, needle.format(tmp=tmp_path, user_dir=USER_DIR))
    assert proc.returncode == 2 and ("did you mean" in line) == ("{user_dir}" in needle)


def _yaml_with(tmp_path, name, source, old, new):
    text = (REPO / "configs" / source).read_text()
    assert old in text
    (tmp_path / f"{name}.yaml").write_text(text.replace(old, new, 1))
    return name


@pytest.mark.parametrize("source,old,new,extra,needle", [
    ("_selftest/transformer_tiny.yaml", "  max_update: 2", "  max_updat: 2", [],
     "optimization.max_updat: no such config key; did you mean optimization.max_update?"),
    ("_selftest/transformer_tiny.yaml", "dataset:", "datasets:", [],
     "datasets: no such config group; did you mean dataset?"),
    ("_selftest/transformer_tiny.yaml", "", "", ["task.sourc_lang=de"],
     "task.sourc_lang: no such config key; did you mean task.source_lang?"),
    ("_selftest/transformer_tiny.yaml", "", "", ["common.user_dir=fairseq_locl"],
     "common.user_dir=fairseq_locl: no such directory"),
    ("_selftest/transformer_tiny.yaml", "", "", ["task.max_tokenz=5"],
     "task.max_tokenz: no such config key; did you mean dataset.max_tokens?"),
    ("lattice/dwl_gating.yaml", "  source_lang: zh", "  sorce_lang: zh", ["common.user_dir={user_dir}"],
     "task.sorce_lang: no such config key; did you mean task.source_lang or task.target_lang?"),
    ("lattice/dwl_gating.yaml", "  max_source_positions: 1000000", "  max_source_position: 1000000",
     ["common.user_dir={user_dir}"],
     "task.max_source_position: no such config key; did you mean task.max_source_positions or "
     "task.max_target_positions?"),
])
def test_hydra_config_key_typos_outside_the_model(tmp_path, source, old, new, extra, needle):
    """A YAML key or a ``key=value`` override that fairseq's schema does not have, in any group (the
    ``model:`` group is checked when the model is built: test_yaml_model_key_typo); a key of
    another group is named.  Ours is the only line after Hydra's warnings: a task key the plugin's
    task rejects fails inside the job, whose failure Hydra announces (``Error executing job with
    overrides``) before re-raising it; Hydra's notes on fairseq's use of it and its DEBUG lines are
    filtered by the start-up hook."""
    proc = _hydra_typo_run(tmp_path, source, old, new, extra)
    assert_one_line(proc.returncode, proc.stderr, f"fairseq-hydra-train: error: {needle}")
    assert proc.returncode == 2 and "Error executing job" not in proc.stderr
    assert not [line for line in proc.stderr.splitlines() if "Warning" in line or "DEBUG" in line], proc.stderr


def _hydra_typo_run(tmp_path, source, old, new, extra, **env):
    import subprocess

    from test_bad_inputs import ENV

    name = _yaml_with(tmp_path, "typo", source, old, new)
    cmd = [BIN / "fairseq-hydra-train", "--config-dir", tmp_path, "--config-name", name, f"task.data={tmp_path}",
           *[e.format(user_dir=USER_DIR) for e in extra]]
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env={**ENV, **env}, cwd=tmp_path,
                          timeout=600)


def test_hydra_full_error_keeps_the_traceback(tmp_path):
    """``HYDRA_FULL_ERROR=1`` is Hydra's switch for the whole story: Hydra's report and traceback."""
    proc = _hydra_typo_run(tmp_path, "lattice/dwl_gating.yaml", "  source_lang: zh", "  sorce_lang: zh",
                           ["common.user_dir={user_dir}"], HYDRA_FULL_ERROR="1")
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1 and "Traceback (most recent call last):" in lines, proc.stderr[-3000:]
    assert "Error executing job with overrides" in proc.stderr and "fairseq-hydra-train: error:" not in proc.stderr
    assert lines[-1].startswith("    object_type=LatticeTranslationConfig")


@pytest.mark.parametrize("bpe,option", [("subword_nmt", "bpe_codes"), ("sentencepiece", "sentencepiece_model")])
def test_misspelled_bpe_model_path(capsys, tmp_path, bpe, option):
    """fairseq-interactive / the hub with ``--bpe-codes`` naming no file (fairseq: an OSError traceback)."""
    from fairseq.data import encoders

    missing = tmp_path / "bpe" / "codess"
    args = Namespace(bpe=bpe, bpe_separator="@@", sentencepiece_enable_sampling=False, sentencepiece_alpha=None,
                     **{option: str(missing)})
    code, err = call(capsys, encoders.build_bpe, args)
    assert_one_line(code, err, f"prog: error: {missing}: no such file")


def test_score_given_a_directory(tmp_path):
    """``score.sh --ref DIR`` (the generate.sh output folder instead of its ref.txt): one line saying so."""
    (tmp_path / "hyp.txt").write_text("a b c\n")
    code, err = run("bash", REPO / "scripts" / "score.sh", "--hyp", tmp_path / "hyp.txt", "--ref", tmp_path)
    assert_one_line(code, err, f"--ref '{tmp_path}' is a directory, not a file")


# ------------------------------------------------------------------------------------------------
# our scripts: degenerate options, an empty input, Ctrl-C (nothing half-written, one line)
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["0", "two"])
def test_preprocess_sh_workers(tmp_path, value):
    code, err = run("bash", REPO / "scripts" / "preprocess.sh", "--src", "de", "--tgt", "en", "--train", tmp_path / "t",
                    "--valid", tmp_path / "v", "--destdir", tmp_path / "bin", "--workers", value)
    assert_one_line(code, err, f"preprocess.sh: error: --workers must be a positive integer, not '{value}'",
                    leftovers=[tmp_path / "bin"])


def test_preprocess_sh_ctrl_c_leaves_destdir_as_it_was(tmp_path):
    """Ctrl-C (SIGINT to the whole process group) while fairseq-preprocess runs: one line, status
    130, no --destdir and no work folder, no child's traceback, and the child is ended (fault
    injection: a Python fairseq-preprocess that presses Ctrl-C, then would run for a minute)."""
    import os
    import signal
    import subprocess
    import time

    from test_bad_inputs import ENV

    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "fairseq-preprocess").write_text(f"#!{sys.executable}\nimport os, signal, time\n"
                                             "os.kill(0, signal.SIGINT)\ntime.sleep(60)\n")
    (stub / "fairseq-preprocess").chmod(0o755)
    for split, n in (("train", 4), ("valid", 2)):
        for lang in ("de", "en"):
            (tmp_path / f"{split}.{lang}").write_text("".join(f"satz {i}\n" for i in range(n)))
    dest = tmp_path / "bin"
    started = time.monotonic()
    proc = subprocess.run(["bash", str(REPO / "scripts" / "preprocess.sh"), "--src", "de", "--tgt", "en", "--train",
                           str(tmp_path / "train"), "--valid", str(tmp_path / "valid"), "--destdir", str(dest),
                           "--bpe", "none"], capture_output=True, text=True, timeout=300, start_new_session=True,
                          env={**ENV, "PATH": f"{stub}{os.pathsep}{ENV['PATH']}"},
                          # as at a terminal, even where the test runner ignores SIGINT (started in the
                          # background), which a script would inherit and could not trap
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    elapsed = time.monotonic() - started
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert proc.stderr.splitlines()[-1] == f"preprocess.sh: interrupted; {dest} was left as it was"
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr, proc.stderr
    assert elapsed < 50  # the stub was ended, not waited for
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stub", "train.de", "train.en", "valid.de", "valid.en"]


@pytest.mark.parametrize("argv,needle", [
    (["--input", "{empty}", "--segmenters", "char"],
     "{empty}: the file is empty (no sentences to build lattices from)"),
    (["--merge", "{empty}", "{empty}"], "{empty}: the file is empty (no sentences to build lattices from)"),
])
def test_build_lattices_empty_input(tmp_path, capsys, argv, needle):
    from test_bad_inputs import load_script

    mod = load_script(REPO / "scripts" / "build_lattices.py")
    empty = tmp_path / "empty.zh"
    empty.write_bytes(b"")
    out = tmp_path / "out.lat"
    code, err = call(capsys, mod.main, [a.format(empty=empty) for a in argv] + ["--output", str(out)])
    assert_one_line(code, err, "build_lattices.py: error: " + needle.format(empty=empty), leftovers=[out])


def test_build_lattices_output_in_a_missing_directory(tmp_path, capsys, monkeypatch):
    """Refused before segmenting (not a FileNotFoundError traceback once all the work is done)."""
    from test_bad_inputs import load_script

    mod = load_script(REPO / "scripts" / "build_lattices.py")
    monkeypatch.setattr(mod, "build_lines", None)  # never reached
    (tmp_path / "in.zh").write_text("下雨天\n")
    out = tmp_path / "nodir" / "o.lat"
    code, err = call(capsys, mod.main, ["--input", str(tmp_path / "in.zh"), "--output", str(out)])
    assert_one_line(code, err, f"build_lattices.py: error: --output {out}: no such directory {out.parent}")


def test_build_lattices_workers_zero(tmp_path, capsys):
    from test_bad_inputs import load_script

    mod = load_script(REPO / "scripts" / "build_lattices.py")
    (tmp_path / "in.zh").write_text("下雨天\n")
    code, err = call(capsys, mod.main, ["--input", str(tmp_path / "in.zh"), "--output", str(tmp_path / "o.lat"),
                                        "--workers", "0"])
    assert_one_line(code, err, "error: --workers must be >= 1 (got 0)",
                    leftovers=[tmp_path / "o.lat"])


def test_build_lattices_ctrl_c(tmp_path, capsys, monkeypatch):
    """Ctrl-C while segmenting: one line, status 130, no output file (fault injection)."""
    from test_bad_inputs import load_script

    mod = load_script(REPO / "scripts" / "build_lattices.py")

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(mod, "build_lines", interrupted)
    (tmp_path / "in.zh").write_text("下雨天\n")
    out = tmp_path / "o.lat"
    code, err = call(capsys, mod.main, ["--input", str(tmp_path / "in.zh"), "--output", str(out),
                                        "--segmenters", "char"])
    assert code == 130 and err.splitlines()[-1] == f"build_lattices.py: interrupted; {out} was not written"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.zh"]


def _sigint_handler(_):
    import signal

    return True, str(signal.getsignal(signal.SIGINT))


def test_lattice_pool_workers_leave_ctrl_c_to_the_parent():
    """A pool worker ignores SIGINT (the parent answers Ctrl-C in one line and ends its workers)."""
    import signal

    from fairseq_local_repro.text import lattice_builder

    previous = signal.getsignal(signal.SIGINT)
    assert lattice_builder.parallel_map(_sigint_handler, [0, 1, 2], workers=2) == [str(signal.SIG_IGN)] * 3
    assert signal.getsignal(signal.SIGINT) is previous
    assert lattice_builder.parallel_map(_sigint_handler, [0], workers=1) == [str(previous)]


@pytest.mark.parametrize("stage", ["dictionary", "binarize"])
def test_preprocess_lattices_ctrl_c(tmp_path, capsys, monkeypatch, stage):
    """Ctrl-C while binarizing: one line, status 130, --destdir not created (fault injection)."""
    from test_bad_inputs import _lattice_corpus, load_script

    mod = load_script(REPO / "scripts" / "preprocess_lattices.py")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    stages = {"dictionary": "build_source_dictionary", "binarize": "write_lattices"}
    monkeypatch.setattr(mod, stages[stage], interrupted)
    argv = _lattice_corpus(tmp_path)
    code, err = call(capsys, mod.main, argv)
    assert code == 130
    assert err.splitlines()[-1] == f"preprocess_lattices.py: interrupted; {tmp_path / 'bin'} was not written"
    assert not (tmp_path / "bin").exists()


@pytest.mark.parametrize("option,value,needle", [
    ("--nwordssrc", "0", "--nwordssrc must be -1 (no cap) or >= 1 (got 0)"),
    ("--nwordstgt", "-5", "--nwordstgt must be -1 (no cap) or >= 1 (got -5)"),
    ("--padding-factor", "0", "--padding-factor must be >= 1 (got 0)"),
    ("--thresholdsrc", "-1", "--thresholdsrc must be >= 0 (got -1)"),
    ("--workers", "0", "--workers must be >= 1 (got 0)"),  # fairseq: ZeroDivisionError
])
def test_preprocess_lattices_degenerate_numbers(tmp_path, capsys, option, value, needle):
    """Refused before anything is read or written (--nwordssrc 0 used to keep every word)."""
    from test_bad_inputs import _lattice_corpus, load_script

    mod = load_script(REPO / "scripts" / "preprocess_lattices.py")
    code, err = call(capsys, mod.main, _lattice_corpus(tmp_path) + [option, value])
    assert_one_line(code, err, "preprocess_lattices.py: error: " + needle)
    assert not (tmp_path / "bin").exists()


# ------------------------------------------------------------------------------------------------
# second round: our model options, fairseq-eval-lm options, the hub's inputs
# ------------------------------------------------------------------------------------------------
GENCNN_TINY = ["--arch", "gencnn", "--decoder-embed-dim", "8", "--alpha-layers", "(3,4,4)", "--beta-layers", "(3,4,0)",
               "--fc-dim", "8", "--alpha-length", "6", "--beta-length", "4"]
S2S_TINY = ["--encoder-embed-dim", "8", "--encoder-hidden-size", "8", "--decoder-embed-dim", "8",
            "--decoder-hidden-size", "8"]
PLM_TINY = ["--arch", "parallel_lstm_lm", "--decoder-embed-dim", "8", "--decoder-hidden-size", "8"]


def _build(tiny_checkpoints, family, task, argv):
    """``fairseq-train``'s parse and build of a model of ``argv`` on the tiny data of ``family``."""
    from fairseq import options, tasks

    data, args = tiny_checkpoints[family][1:]
    full = [str(data), "--user-dir", str(USER_DIR), "--task", task, "--cpu", *args, *argv]
    parsed = options.parse_args_and_arch(options.get_training_parser(), full)
    return tasks.setup_task(parsed).build_model(parsed)


@pytest.mark.parametrize("family,task,argv,needle", [
    ("lm", "language_modeling", GENCNN_TINY + ["--alpha-layers", "(3,4)"],
     "--alpha-layers '(3,4)': expected '(kernel, time_flow_maps, time_arrow_maps), ...' with integers, kernel >= 1, "
     "maps >= 0 and at least one map per layer"),
    ("lm", "language_modeling", GENCNN_TINY + ["--alpha-layers", "(0,4,4)"], "--alpha-layers '(0,4,4)': expected"),
    ("lm", "language_modeling", GENCNN_TINY + ["--alpha-layers", "(3,0,0)"], "--alpha-layers '(3,0,0)': expected"),
    ("lm", "language_modeling", GENCNN_TINY + ["--beta-layers", "abc"], "--beta-layers 'abc': expected"),
    ("lm", "language_modeling", GENCNN_TINY + ["--alpha-layers", "(9,4,4)"],
     "--alpha-length 6 with --alpha-layers '(9,4,4)': window of 7 positions is too short for layer 1 (kernel 9 on 7 "
     "locations); enlarge the length or shrink kernels"),
    ("lm", "language_modeling", GENCNN_TINY + ["--beta-layers", "(3,4,0),(3,4,0)"],
     "--beta-length 4 with --beta-layers '(3,4,0),(3,4,0)': window of 5 positions is too short for layer 2 (kernel 3 "
     "on 2 locations)"),
    ("lm", "language_modeling", GENCNN_TINY + ["--conv-activation", "gelu"],
     "--conv-activation 'gelu': unknown activation 'gelu' (choose from ['linear', 'relu', 'sigmoid', 'tanh'])"),
    ("lm", "language_modeling", GENCNN_TINY + ["--fc-activation", "softmax"], "--fc-activation 'softmax': unknown"),
    ("lm", "language_modeling", GENCNN_TINY + ["--adaptive-softmax-cutoff", "5,2"],
     "--adaptive-softmax-cutoff '5,2' must be increasing integers from 1 to the vocabulary size"),
    ("lm", "language_modeling", GENCNN_TINY + ["--adaptive-softmax-cutoff", "5,100000"],
     "--adaptive-softmax-cutoff '5,100000' must be increasing integers"),
    ("lm", "stateful_language_modeling", PLM_TINY + ["--init-scale", "-1"], "--init-scale must be > 0 (got -1.0)"),
    ("lm", "stateful_language_modeling", PLM_TINY + ["--init-scale", "0"], "--init-scale must be > 0 (got 0.0)"),
    ("mt", "translation", ["--arch", "parallel_lstm", *S2S_TINY, "--wide", "3"],
     "--encoder-hidden-size 8 must be divisible by 2 x --wide 3: each of the --encoder-bidirectional-layers 1 splits "
     "it into two directions of --wide cells (e.g. --encoder-hidden-size 6)"),
    ("mt", "translation", ["--arch", "parallel_lstm", *S2S_TINY, "--wide", "3", "--encoder-bidirectional-layers", "0"],
     "--encoder-hidden-size 8 must be divisible by --wide 3"),
    ("mt", "translation", GENCNN_TINY, "--arch gencnn is a language model: train it with --task language_modeling or "
                                       "stateful_language_modeling, not --task translation"),
    ("mt", "translation", ["--arch", "lattice_dwl_gating", *S2S_TINY],
     "--arch lattice_dwl_gating reads word lattices: add --task lattice_translation"),
    ("lm", "language_modeling", ["--arch", "mc_rnn_iwslt_de_en_2", *S2S_TINY],
     "--arch mc_rnn_iwslt_de_en_2 is a translation model: train it with --task translation on parallel data, not "
     "--task language_modeling"),
    ("lattice", "lattice_translation", ["--arch", "lattice_dwl_gating", *S2S_TINY, "--cell", "lstm"],
     "--cell 'lstm': lattice_rnnsearch uses GRU decoder layers (--cell gru)"),
    ("lattice", "lattice_translation", ["--arch", "lattice_dwl_gating", *S2S_TINY, "--encoder-layers", "2"],
     "--encoder-layers must be 1, without --encoder-unidirectional or --encoder-output-dim"),
    ("lattice", "lattice_translation", ["--arch", "lattice_dwl_gating", *S2S_TINY, "--lattice-segmenters", "jieba,foo"],
     "--lattice-segmenters 'jieba,foo': unknown segmenter 'foo' (a comma-separated list of char, jieba, snownlp, "
     "thulac)"),
    ("lattice", "lattice_translation", ["--arch", "lattice_dwl_gating", *S2S_TINY, "--lattice-segmenters", ","],
     "--lattice-segmenters ',': no segmenter given"),
])
def test_model_options_refused_at_build(capsys, tiny_checkpoints, family, task, argv, needle):
    code, err = call(capsys, _build, tiny_checkpoints, family, task, argv)
    assert_one_line(code, err, needle)


@pytest.mark.parametrize("argv,needle", [
    (PLM_TINY + ["--wide", "x"], "argument --wide: invalid int value: 'x'"),
    (PLM_TINY + ["--cell-type", "foo"], "argument --cell-type: invalid choice: 'foo' (choose from 'lstm', 'gru', "
                                        "'rnn')"),
    (PLM_TINY + ["--rnn-impl", "fast"], "argument --rnn-impl: invalid choice: 'fast'"),
    (GENCNN_TINY + ["--beta-length", "two"], "argument --beta-length: invalid int value: 'two'"),
])
def test_argparse_errors_of_our_options_are_one_line(capsys, monkeypatch, tiny_checkpoints, argv, needle):
    """fairseq's parsers print 130 lines of usage before argparse's error; the plugin prints the error."""
    monkeypatch.setattr(sys, "argv", ["fairseq-train"])
    code, err = call(capsys, _build, tiny_checkpoints, "lm", "stateful_language_modeling", argv)
    line = assert_one_line(code, err, needle)
    assert len(err.strip().splitlines()) == 1 and line.endswith("(fairseq-train --help lists the options)"), err


@pytest.mark.parametrize("extra,needle", [
    (["--context-window", "-1"], "--context-window must be >= 0 (got -1)"),
    (["--context-window", "16"], "--context-window 16 must be smaller than --tokens-per-sample 16"),
    (["--context-window", "600", "--tokens-per-sample", "512"],
     "--context-window 600 must be smaller than --tokens-per-sample 512 (each block scores --tokens-per-sample minus "
     "--context-window new tokens)"),
])
def test_eval_lm_context_window(capsys, tiny_checkpoints, extra, needle):
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from fairseq_local.patches.option_checks import check_common_options

    path, data, args = tiny_checkpoints["lm"]
    argv = [str(data), "--user-dir", str(USER_DIR), "--task", "language_modeling", "--cpu", "--path", str(path),
            *args, *extra]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_eval_lm_parser(), argv))
    code, err = call(capsys, check_common_options, cfg)
    assert_one_line(code, err, needle)


def test_stateful_eval_lm_errors_are_user_errors(capsys, tiny_checkpoints):
    """--context-window with the stateful task, and a split too short for the streams: one line each."""
    from fairseq_local.data.stateful_bptt_dataset import StatefulBPTTDataset

    data, args = tiny_checkpoints["lm"][1:]
    t = _task("stateful_language_modeling", data, args, parser="eval_lm")
    t.load_dataset("valid")
    code, err = call(capsys, t.eval_lm_dataloader, t.dataset("valid"), None, 1, None, 1, 0, 0, 10, 5)
    assert_one_line(code, err, "--context-window: stateful_language_modeling carries the recurrent state across "
                               "windows already; leave --context-window at 0")
    code, err = call(capsys, StatefulBPTTDataset, torch.arange(11), 20, 10, 1, "test", 0, 1, True)
    assert_one_line(code, err, "split test: 11 tokens cannot fill 20 streams of at least 2 tokens; lower --batch-size")


@pytest.mark.parametrize("trained,task,warns", [
    ("language_modeling", "stateful_language_modeling", "was trained with --task language_modeling but runs with "
                                                        "--task stateful_language_modeling"),
    ("language_modeling", "language_modeling", None),
    ("stateful_language_modeling", "stateful_language_modeling", None),
])
def test_window_language_model_under_the_stateful_task_warns(caplog, tiny_checkpoints, trained, task, warns):
    from fairseq_local.patches.checkpoint_fit import check_fits_task

    data, args = tiny_checkpoints["lm"][1:]
    state = {"cfg": {"model": {"_name": "gencnn"}, "task": {"_name": trained}}}
    with caplog.at_level(logging.WARNING):
        check_fits_task("lm.pt", state, _task(task, data, args, parser="eval_lm"))
    warned = [r.getMessage() for r in caplog.records if "was trained with" in r.getMessage()]
    assert warned == ([f"lm.pt {warns}: windows of --tokens-per-sample tokens cut through sentences, so the "
                       "perplexity differs; pass --task language_modeling with the --sample-break-mode it was trained "
                       "with"] if warns else [])


@pytest.fixture(scope="module")
def hubs(tiny_checkpoints):
    from fairseq_local.models.mc_rnn import MCRNNModel
    from fairseq_local.models.mc_rnn_lm import MCRNNLanguageModel

    mt, mt_data, _ = tiny_checkpoints["mt"]
    lm, lm_data, _ = tiny_checkpoints["lm"]
    return (MCRNNModel.from_pretrained(mt.parent, data_name_or_path=str(mt_data)),
            MCRNNLanguageModel.from_pretrained(lm.parent, data_name_or_path=str(lm_data)))


@pytest.mark.parametrize("which,method,arg,needle", [
    ("mt", "translate", None, "translate(): expected a sentence (str) or a list of sentences, got NoneType None"),
    ("mt", "translate", 42, "translate(): expected a sentence (str) or a list of sentences, got int 42"),
    ("mt", "translate", ["w1", 3], "translate(): expected a sentence (str) or a list of sentences, got int 3"),
    ("mt", "translate", b"w1 w2", "translate(): expected a sentence (str) or a list of sentences, got bytes b'w1 w2'"),
    ("mt", "translate", " ".join(["w1"] * 600), "sentence 1 has 601 tokens, more than max_tokens=500 (the "
                                                "checkpoint's --max-tokens): pass max_tokens=601 or more to "
                                                "from_pretrained, or split the sentence"),
    ("lm", "score", "", "score(): the sentence is empty: there is nothing to score; leave out blank lines"),
    ("lm", "score", ["w1 w2", ""], "score(): sentence 2 of 2 is empty: there is nothing to score; leave out blank "
                                   "lines"),
    ("lm", "score", None, "score(): expected a sentence (str) or a list of sentences, got NoneType None"),
    ("lm", "sample", ("w1",), None),  # a tuple of sentences is fine
])
def test_hub_inputs(hubs, which, method, arg, needle):
    from fairseq_local.errors import one_line

    hub = hubs[0] if which == "mt" else hubs[1]
    if needle is None:
        out = getattr(hub, method)(arg, max_len_b=3)
        assert isinstance(out, list) and len(out) == 1 and isinstance(out[0], str)
        return
    with pytest.raises(Exception) as info:
        getattr(hub, method)(arg)
    assert one_line(info.value) == needle


def test_hub_blank_source_translates_into_nothing(hubs):
    """fairseq would decode max_len_b tokens from an empty source; a blank source gives "" (as
    the lattice hub and a blank line of fairseq-interactive), the other sentences their translation."""
    mt = hubs[0]
    assert mt.translate("") == "" and mt.translate("  ") == "" and mt.sample("") == ""
    alone = mt.translate("w1 w2", beam=2)
    assert mt.translate(["", "w1 w2", " "], beam=2) == ["", alone, ""]
    assert mt.translate(["\t"]) == [""]


def test_hub_language_model_samples_from_an_empty_prompt(hubs):
    """An empty prompt is not an error for a language model: it samples from scratch."""
    out = hubs[1].sample("", max_len_b=3)
    assert isinstance(out, str) and len(out.split()) <= 3


def test_hub_data_name_or_path(tmp_path, monkeypatch, tiny_checkpoints):
    import os

    from fairseq_local.errors import one_line
    from fairseq_local.models.mc_rnn_lm import MCRNNLanguageModel

    lm, lm_data, _ = tiny_checkpoints["lm"]
    with pytest.raises(FileNotFoundError) as info:
        MCRNNLanguageModel.from_pretrained(lm.parent, data_name_or_path="../no-such-data")
    assert one_line(info.value) == (f"from_pretrained: data_name_or_path ../no-such-data: no such directory (relative "
                                    f"to the model directory: {lm.parent.parent / 'no-such-data'}); give the "
                                    "binarized data directory the model was trained with (it holds the dictionaries)")
    with pytest.raises(FileNotFoundError) as info:
        MCRNNLanguageModel.from_pretrained(lm.parent)  # "." = the model directory, which holds no dictionary
    assert one_line(info.value) == (f"from_pretrained: data_name_or_path . (relative to the model directory: "
                                    f"{lm.parent}) holds no dictionary (dict*.txt); give the binarized data directory "
                                    "the model was trained with")
    # "./data" meant relative to the working directory (fairseq reads it relative to the model directory)
    monkeypatch.chdir(lm_data.parent)
    hub = MCRNNLanguageModel.from_pretrained(lm.parent, data_name_or_path=f"./{lm_data.name}")
    assert hub.task.dictionary.symbols == MCRNNLanguageModel.from_pretrained(
        lm.parent, data_name_or_path=str(lm_data)).task.dictionary.symbols
    assert os.path.isabs(hub.cfg.task.data) and os.path.samefile(hub.cfg.task.data, lm_data)


def test_second_round_through_the_clis(tmp_path, tiny_checkpoints):
    """The real fairseq-eval-lm, fairseq-train (argparse) and fairseq-hydra-train (a value of the wrong type)."""
    path, data, args = tiny_checkpoints["lm"]
    code, err = run(BIN / "fairseq-eval-lm", data, "--user-dir", USER_DIR, "--cpu", "--path", path, *args,
                    "--task", "stateful_language_modeling", "--context-window", "-1")
    assert_one_line(code, err, "fairseq-eval-lm: error: --context-window must be >= 0 (got -1)")
    code, err = run(BIN / "fairseq-train", data, "--user-dir", USER_DIR, "--task", "stateful_language_modeling",
                    *PLM_TINY, "--wide", "x", "--cpu")
    assert len(err.strip().splitlines()) == 1
    assert_one_line(code, err, "fairseq-train: error: argument --wide: invalid int value: 'x' (fairseq-train --help "
                               "lists the options)")
    mt_data = tiny_checkpoints["mt"][1]
    code, err = run(BIN / "fairseq-hydra-train", "--config-dir", REPO / "configs" / "mc_rnn",
                    "--config-name", "table2_mc_rnn_2", f"task.data={mt_data}", "task.source_lang=src",
                    "task.target_lang=tgt", f"common.user_dir={USER_DIR}", "common.cpu=true",
                    "model.mc_channels=two", f"checkpoint.save_dir={tmp_path / 'ckpt'}",
                    f"hydra.run.dir={tmp_path / 'hydra'}", "distributed_training.distributed_world_size=1")
    assert len(err.strip().splitlines()) == 1, err
    assert_one_line(code, err, "fairseq-hydra-train: error: model.mc_channels: Value 'two' of type 'str' could not be "
                               "converted to Integer")
