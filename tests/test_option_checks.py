"""fairseq_local/patches/option_checks.py: a float option given as nan or inf, which argparse's
``float`` accepts and every range check lets through (``nan < 0`` is False), is one line naming the
option.  (The range checks themselves: tests/test_bad_inputs_first_hour.py.)"""
import argparse
import math

import pytest

from fairseq_local.errors import ConfigError
from fairseq_local.patches.option_checks import check_common_options, check_generation_options


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
