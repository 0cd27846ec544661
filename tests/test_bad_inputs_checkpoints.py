"""A new user's first hour, checkpoints: a checkpoint of another family or task given to
fairseq-generate or -eval-lm, a missing checkpoint, one trained on other dictionaries or for the
opposite direction, and a stateful language model evaluated without its task (or a window
language model with it): one line, or a warning naming the task.

Most cases run the code path in-process and finish it as the plugin's excepthook does (``call`` of
tests/test_bad_inputs.py); a few run the real CLIs to check the hook.  The tiny checkpoints come
from the session fixture ``tiny_checkpoints`` (tests/conftest.py).
"""
import logging
import sys

from fairseq import options, tasks
import pytest

from bad_inputs_lib import USER_DIR, load_ensemble, setup_task
from contract_lib import make_translation_data
from fairseq_local_core.errors import prog_name
from fairseq_local.patches.checkpoint_fit import check_fits_task
from test_bad_inputs import BIN, assert_one_line, call, run


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
    t = setup_task(task, source[1], source[2])
    code, err = call(capsys, load_ensemble, [path], t)
    assert_one_line(code, err, f"{path} {needle}")


def test_generate_cli_language_model_and_lattice_checkpoints(tiny_checkpoints):
    """The real fairseq-generate: an LM checkpoint does not 'translate' with exit status 0."""
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
    t = setup_task("translation", data, args)
    wrong = path.parent / "checkpoint_bset.pt"
    code, err = call(capsys, load_ensemble, [wrong], t)
    assert_one_line(code, err, f"{wrong}: no such checkpoint file ({path.parent} holds checkpoint_best.pt, "
                               "checkpoint_last.pt)")
    code, err = call(capsys, load_ensemble, [path.parent / "nodir" / "x.pt"], t)
    assert_one_line(code, err, "no such checkpoint file (no directory")


def test_checkpoint_with_other_dictionaries(capsys, tmp_path, tiny_checkpoints):
    path = tiny_checkpoints["mt"][0]
    other, args = make_translation_data(tmp_path, n_train=6, n_valid=2, seed=3)
    t = setup_task("translation", other, args)
    code, err = call(capsys, load_ensemble, [path], t)
    line = assert_one_line(code, err, f"{path} does not fit the dictionaries of {other}: ",
                           "give the data directory the checkpoint was trained with")
    assert "in the checkpoint but" in line


def test_checkpoint_asked_for_the_opposite_direction(capsys, tiny_checkpoints):
    """src -> tgt weights fit a tgt -> src task when the dictionaries are the same size; fairseq
    would translate the wrong way with exit status 0."""
    path, data, args = tiny_checkpoints["mt"]
    assert args == ["--source-lang", "src", "--target-lang", "tgt"]
    t = setup_task("translation", data, ["--source-lang", "tgt", "--target-lang", "src"])
    code, err = call(capsys, load_ensemble, [path], t)
    assert_one_line(code, err, f"{path} translates src -> tgt (trained with --source-lang src --target-lang tgt), "
                               f"but {prog_name()} was given --source-lang tgt --target-lang src: pass --source-lang src "
                               "--target-lang tgt, or a checkpoint trained tgt -> src")


def test_stateful_checkpoint_evaluated_with_language_modeling_warns(caplog, tiny_checkpoints):
    path, data, args = tiny_checkpoints["lm"]
    with caplog.at_level(logging.WARNING):
        load_ensemble([path], setup_task("language_modeling", data, args, parser="eval_lm"))
    warned = [r.getMessage() for r in caplog.records if "stateful" in r.getMessage()]
    assert warned == [f"{path} was trained with --task stateful_language_modeling but runs with --task "
                      "language_modeling: every window starts from a zero state, so the perplexity differs; pass "
                      "--task stateful_language_modeling"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        load_ensemble([path], setup_task("stateful_language_modeling", data, args, parser="eval_lm"))
    assert not [r for r in caplog.records if "stateful" in r.getMessage()]


@pytest.mark.parametrize("arch,task,warns", [
    ("mc_rnn_lm_ptb", "language_modeling", True),
    ("parallel_lstm_lm_1950h_wide2", "language_modeling", True),
    ("mc_rnn_lm_ptb", "stateful_language_modeling", False),
    ("lstm_lm", "language_modeling", False),
])
def test_stateful_arch_trained_without_its_task_warns(caplog, tiny_checkpoints, arch, task, warns):
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


@pytest.mark.parametrize("trained,task,warns", [
    ("language_modeling", "stateful_language_modeling", "was trained with --task language_modeling but runs with "
                                                        "--task stateful_language_modeling"),
    ("language_modeling", "language_modeling", None),
    ("stateful_language_modeling", "stateful_language_modeling", None),
])
def test_window_language_model_under_the_stateful_task_warns(caplog, tiny_checkpoints, trained, task, warns):
    data, args = tiny_checkpoints["lm"][1:]
    state = {"cfg": {"model": {"_name": "gencnn"}, "task": {"_name": trained}}}
    with caplog.at_level(logging.WARNING):
        check_fits_task("lm.pt", state, setup_task(task, data, args, parser="eval_lm"))
    warned = [r.getMessage() for r in caplog.records if "was trained with" in r.getMessage()]
    assert warned == ([f"lm.pt {warns}: windows of --tokens-per-sample tokens cut through sentences, so the "
                       "perplexity differs; pass --task language_modeling with the --sample-break-mode it was trained "
                       "with"] if warns else [])
