"""A new user's first hour, options: impossible values of fairseq's options (training, generation,
dropout, fairseq-eval-lm's ``--context-window``) and of our models' options, misspelled registry
choices (did you mean), a misspelled key under a Hydra YAML's ``model:``, and argparse errors of
our options: one line naming the option, in-process and through the real CLIs.

Most cases run the code path in-process and finish it as the plugin's excepthook does (``call`` of
tests/test_bad_inputs.py); a few run the real CLIs to check the hook.  The tiny checkpoints come
from the session fixture ``tiny_checkpoints`` (tests/conftest.py).
"""
import sys
from argparse import Namespace

from fairseq import options, tasks
from fairseq.dataclass.configs import GenerationConfig
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from omegaconf import OmegaConf
import pytest
import torch

from bad_inputs_lib import USER_DIR, load_ensemble, setup_task
from contract_lib import REPO
from fairseq_local.config_checks import HELP_POINTER, check_common_options
from fairseq_local.data.stateful_bptt_dataset import StatefulBPTTDataset
from test_bad_inputs import BIN, assert_one_line, call, run


def _train_cfg(data, args, extra, arch="lstm"):
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
    data, args = tiny_checkpoints["mt"][1:]
    code, err = call(capsys, check_common_options, _train_cfg(data, args, extra))
    assert_one_line(code, err, needle)


def test_tokens_per_sample_zero(capsys, tiny_checkpoints):
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
    path, data, args = tiny_checkpoints["mt"]
    t = setup_task("translation", data, args)
    models, _ = load_ensemble([path], t)[:2]
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
    data, args = tiny_checkpoints["mt"][1:]
    argv = [str(data), "--user-dir", str(USER_DIR), "--arch", "lstm", *args, option, value]
    code, err = call(capsys, options.parse_args_and_arch, options.get_training_parser(), argv)
    line = assert_one_line(code, err, f"error: {option}: unknown choice '{value}'")
    assert (f"did you mean {close}" in line) if close else ("did you mean" not in line)


def test_non_stateful_namespace_checks_do_not_fire_on_plain_values():
    """Values fairseq leaves unset (None) and list-valued options pass the common checks."""
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
    data, args = tiny_checkpoints["mt"][1:]
    t = setup_task("translation", data, args)
    code, err = call(capsys, t.build_model, OmegaConf.create(model))
    assert_one_line(code, err, needle)


GENCNN_TINY = ["--arch", "gencnn", "--decoder-embed-dim", "8", "--alpha-layers", "(3,4,4)", "--beta-layers", "(3,4,0)",
               "--fc-dim", "8", "--alpha-length", "6", "--beta-length", "4"]

S2S_TINY = ["--encoder-embed-dim", "8", "--encoder-hidden-size", "8", "--decoder-embed-dim", "8",
            "--decoder-hidden-size", "8"]

PLM_TINY = ["--arch", "parallel_lstm_lm", "--decoder-embed-dim", "8", "--decoder-hidden-size", "8"]


def _build(tiny_checkpoints, family, task, argv):
    """``fairseq-train``'s parse and build of a model of ``argv`` on the tiny data of ``family``."""
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
    assert len(err.strip().splitlines()) == 1 and line.endswith(f"({HELP_POINTER})"), err


@pytest.mark.parametrize("extra,needle", [
    (["--context-window", "-1"], "--context-window must be >= 0 (got -1)"),
    (["--context-window", "16"], "--context-window 16 must be smaller than --tokens-per-sample 16"),
    (["--context-window", "600", "--tokens-per-sample", "512"],
     "--context-window 600 must be smaller than --tokens-per-sample 512 (each block scores --tokens-per-sample minus "
     "--context-window new tokens)"),
])
def test_eval_lm_context_window(capsys, tiny_checkpoints, extra, needle):
    path, data, args = tiny_checkpoints["lm"]
    argv = [str(data), "--user-dir", str(USER_DIR), "--task", "language_modeling", "--cpu", "--path", str(path),
            *args, *extra]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_eval_lm_parser(), argv))
    code, err = call(capsys, check_common_options, cfg)
    assert_one_line(code, err, needle)


def test_stateful_eval_lm_errors_are_user_errors(capsys, tiny_checkpoints):
    """--context-window with the stateful task, and a split too short for the streams: one line each."""
    data, args = tiny_checkpoints["lm"][1:]
    t = setup_task("stateful_language_modeling", data, args, parser="eval_lm")
    t.load_dataset("valid")
    code, err = call(capsys, t.eval_lm_dataloader, t.dataset("valid"), None, 1, None, 1, 0, 0, 10, 5)
    assert_one_line(code, err, "--context-window: stateful_language_modeling carries the recurrent state across "
                               "windows already; leave --context-window at 0")
    code, err = call(capsys, StatefulBPTTDataset, torch.arange(11), 20, 10, 1, "test", 0, 1, True)
    assert_one_line(code, err, "split test: 11 tokens cannot fill 20 streams of at least 2 tokens; lower --batch-size")


def test_second_round_through_the_clis(tmp_path, tiny_checkpoints):
    """The real fairseq-eval-lm, fairseq-train (argparse) and fairseq-hydra-train (a value of the wrong type)."""
    path, data, args = tiny_checkpoints["lm"]
    code, err = run(BIN / "fairseq-eval-lm", data, "--user-dir", USER_DIR, "--cpu", "--path", path, *args,
                    "--task", "stateful_language_modeling", "--context-window", "-1")
    assert_one_line(code, err, "fairseq-eval-lm: error: --context-window must be >= 0 (got -1)")
    code, err = run(BIN / "fairseq-train", data, "--user-dir", USER_DIR, "--task", "stateful_language_modeling",
                    *PLM_TINY, "--wide", "x", "--cpu")
    assert len(err.strip().splitlines()) == 1
    assert_one_line(code, err, f"fairseq-train: error: argument --wide: invalid int value: 'x' ({HELP_POINTER})")
    mt_data = tiny_checkpoints["mt"][1]
    code, err = run(BIN / "fairseq-hydra-train", "--config-dir", REPO / "configs" / "mc_rnn",
                    "--config-name", "table2_mc_rnn_2", f"task.data={mt_data}", "task.source_lang=src",
                    "task.target_lang=tgt", f"common.user_dir={USER_DIR}", "common.cpu=true",
                    "model.mc_channels=two", f"checkpoint.save_dir={tmp_path / 'ckpt'}",
                    f"hydra.run.dir={tmp_path / 'hydra'}", "distributed_training.distributed_world_size=1")
    assert len(err.strip().splitlines()) == 1, err
    assert_one_line(code, err, "fairseq-hydra-train: error: model.mc_channels: Value 'two' of type 'str' could not be "
                               "converted to Integer")
