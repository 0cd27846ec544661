"""fairseq_local/config_checks.py, the one home of the option checks: a float option given as nan or
inf, which argparse's ``float`` accepts and every range check lets through (``nan < 0`` is False),
is one line naming the option; a choice option names its choices; a model is refused for a task of
the other kind, ours included; the hooks of fairseq_local/patches/option_checks.py call these
functions.  (The range checks through fairseq's entry points: tests/test_bad_inputs_options.py.)"""
import argparse
import math

import pytest
from fairseq import models
from fairseq.tasks import FairseqTask

from fairseq_local import config_checks
from fairseq_local.config_checks import (
    check_choice,
    check_common_options,
    check_generation_options,
    check_task_fits_arch,
    task_name,
)
from fairseq_local_core.errors import ConfigError
from fairseq_local.patches import option_checks
from fairseq_local.tasks.stateful_language_modeling import StatefulLanguageModelingTask


def _generation(**options):
    base = dict(beam=5, nbest=1, max_len_a=0.0, max_len_b=200, min_len=1, lenpen=1.0, unkpen=0.0, temperature=1.0,
                sampling=False, sampling_topk=-1, sampling_topp=-1.0, diversity_rate=-1.0)
    return argparse.Namespace(**{**base, **options})


@pytest.mark.parametrize("name,value", [("lenpen", math.nan), ("unkpen", math.inf), ("temperature", math.nan),
                                        ("max_len_a", math.inf), ("diversity_rate", -math.inf)])
def test_generation_option_not_finite(name, value):
    with pytest.raises(ConfigError, match=rf"^--{name.replace('_', '-')} must be a finite number \(got {value}\)$"):
        check_generation_options(_generation(**{name: value}))


@pytest.mark.parametrize("name,value", [("clip_norm", math.nan), ("lr", [math.nan]), ("lr", [0.001, math.inf]),
                                        ("label_smoothing", math.nan), ("weight_decay", math.nan)])
def test_common_option_not_finite(name, value):
    args = _generation(clip_norm=1.0, lr=[0.001], label_smoothing=0.0, weight_decay=0.0, update_freq=[1])
    setattr(args, name, value)
    bad = value if not isinstance(value, list) else next(v for v in value if not math.isfinite(v))
    with pytest.raises(ConfigError, match=rf"^--{name.replace('_', '-')} must be a finite number \(got {bad}\)$"):
        check_common_options(args)


def test_finite_values_pass():
    check_generation_options(_generation(lenpen=0.5, unkpen=-1.0))
    check_common_options(_generation(clip_norm=0.0, lr=[0.25], label_smoothing=0.1, weight_decay=0.0, update_freq=[2]))


def test_choice_names_the_option_and_its_choices():
    check_choice("lattice_variant", "dwl", ("dwl", "wl"))
    with pytest.raises(ConfigError, match=r"^--lattice-variant must be one of dwl, wl \(got 'dlw'\)$"):
        check_choice("lattice_variant", "dlw", ("dwl", "wl"))


def test_our_language_model_refused_for_translation_and_translation_model_for_the_stateful_task():
    class Stateful(StatefulLanguageModelingTask):
        def __init__(self):  # no data: only the class and the name matter
            self.cfg = argparse.Namespace(_name="stateful_language_modeling")

    lm = argparse.Namespace(arch="mc_rnn_lm")
    check_task_fits_arch(lm, Stateful())
    with pytest.raises(ConfigError, match=r"^--arch mc_rnn_iwslt_de_en_2 is a translation model: train it with --task "
                                          r"translation on parallel data, not --task stateful_language_modeling$"):
        check_task_fits_arch(argparse.Namespace(arch="mc_rnn_iwslt_de_en_2"), Stateful())
    assert task_name(Stateful()) == "stateful_language_modeling"


def test_the_hooks_call_these_checks():
    """The patch installs hooks in fairseq's entry points; what they refuse is refused here."""
    option_checks.install()
    assert option_checks.check_generation_options is config_checks.check_generation_options
    with pytest.raises(ConfigError, match=r"^--beam must be >= 1 \(got 0\)$"):
        FairseqTask.build_generator(None, [], _generation(beam=0))
    with pytest.raises(ConfigError, match=r"^--dropout must be in \[0, 1\) \(got 1.5\)$"):
        models.build_model(argparse.Namespace(arch="lstm", dropout=1.5), None)
