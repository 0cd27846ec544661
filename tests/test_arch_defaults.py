"""The arch-default helpers (fairseq_local/models/arch_defaults.py): command-line values win, unset
options take the arch's value, then the base arch's, then the dataclass default; unknown option
names fail; a generated arch is registered under its name with its doc."""
import argparse
from dataclasses import dataclass, field
from typing import List, Optional

import pytest
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_INV_REGISTRY, ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY

import fairseq_local  # noqa: F401
from fairseq_local.models.arch_defaults import fill_defaults, register_arch, set_defaults


@dataclass
class _Cfg:
    size: int = field(default=8)
    cell: Optional[str] = field(default=None)
    layers: List[int] = field(default_factory=lambda: [1, 2])
    _private: int = 5


def test_fill_defaults_order_and_unknown_names():
    args = argparse.Namespace(size=None, cell="gru")
    fill_defaults(args, _Cfg, size=16)
    assert (args.size, args.cell, args.layers) == (16, "gru", [1, 2])
    assert not hasattr(args, "_private")
    with pytest.raises(ValueError, match=r"unknown options: \['sise'\]"):
        fill_defaults(argparse.Namespace(), _Cfg, sise=3)


def test_set_defaults_sets_only_unset():
    args = argparse.Namespace(a=None, b=2)
    set_defaults(args, a=1, b=3, c=4)
    assert vars(args) == {"a": 1, "b": 2, "c": 4}


def test_register_arch_with_base_and_config():
    def base(args):
        set_defaults(args, size=32, cell="lstm")

    fn = register_arch("rnnsearch", "_test_arch_defaults_probe", "probe doc.", config=_Cfg, base=base, cell="gru")
    try:
        assert ARCH_CONFIG_REGISTRY["_test_arch_defaults_probe"] is fn
        assert ARCH_MODEL_NAME_REGISTRY["_test_arch_defaults_probe"] == "rnnsearch"
        assert (fn.__name__, fn.__doc__) == ("_test_arch_defaults_probe", "probe doc.")
        args = argparse.Namespace()
        fn(args)
        assert (args.size, args.cell, args.layers) == (32, "gru", [1, 2])
        args = argparse.Namespace(cell="rnn", size=4)  # the command line wins
        fn(args)
        assert (args.size, args.cell) == (4, "rnn")
    finally:
        for reg in (ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY):
            reg.pop("_test_arch_defaults_probe", None)
        ARCH_MODEL_REGISTRY.pop("_test_arch_defaults_probe", None)
        ARCH_MODEL_INV_REGISTRY["rnnsearch"].remove("_test_arch_defaults_probe")

