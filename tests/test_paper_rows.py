"""Every registered arch of ours against the paper row it implements (tests/paper_rows.py, written from
the papers' text): sizes, activations, feature-map counts, paths and dropout as the arch builds
them, so an arch that drifts from its paper fails here even when its own tests still pass."""
import argparse
import ast

import pytest
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY

import fairseq_local  # noqa: F401
from fairseq_local.models.gencnn import alpha_layer_spec, beta_layer_spec

from paper_rows import DEPARTURES, NOT_ROWS, ROWS

OURS = sorted(a for a, fn in ARCH_CONFIG_REGISTRY.items() if fn.__module__.startswith("fairseq_local."))


def _both(args, enc: str, dec: str):
    """One value where encoder and decoder agree, both where they do not (which no row matches)."""
    a, b = getattr(args, enc), getattr(args, dec)
    return a if a == b else (a, b)


def _fconv_layers(spec: str):
    layers = ast.literal_eval(spec) if "*" not in spec else \
        ast.literal_eval(spec.split("*")[0].strip()) * int(spec.split("*")[1])
    return len(layers), sorted({dim for dim, _ in layers})


def built(arch: str) -> dict:
    """What ``arch`` sets, in the papers' terms, read from the arch's filled options."""
    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[arch](args)
    model = ARCH_MODEL_NAME_REGISTRY[arch]
    if model == "gencnn":
        alpha, beta = alpha_layer_spec(args), beta_layer_spec(args)
        return dict(embed=args.decoder_embed_dim, alpha_words=args.alpha_length, beta_words=args.beta_length,
                    fc=args.fc_dim, conv_activation=args.conv_activation, fc_activation=args.fc_activation,
                    dropout=args.dropout, alpha_flow=tuple(f for _, f, _ in alpha),
                    alpha_arrow=tuple(a for _, _, a in alpha),
                    beta_flow=None if beta is None else tuple(f for _, f, _ in beta))
    if model == "dpn_s2s":
        return dict(embed=_both(args, "encoder_embed_dim", "decoder_embed_dim"),
                    cnn_layers=_both(args, "encoder_conv_layers", "decoder_conv_layers"),
                    cnn_dim=_both(args, "encoder_conv_dim", "decoder_conv_dim"),
                    san_layers=_both(args, "encoder_san_layers", "decoder_san_layers"),
                    san_ffn=_both(args, "encoder_ffn_embed_dim", "decoder_ffn_embed_dim"), dropout=args.dropout,
                    encoder=tuple(args.encoder_paths.split(",")), decoder=tuple(args.decoder_paths.split(",")))
    if model == "parallel_lstm_lm":
        return dict(wide=args.wide, hidden=args.decoder_hidden_size, layers=args.decoder_layers, dropout=args.dropout,
                    cell=args.cell_type)
    if model in ("mc_rnn", "rnnsearch"):
        return dict(channels=getattr(args, "mc_channels", None), layers=_both(args, "encoder_layers", "decoder_layers"),
                    embed=_both(args, "encoder_embed_dim", "decoder_embed_dim"),
                    hidden=_both(args, "encoder_hidden_size", "decoder_hidden_size"), cell=args.cell)
    if model == "mc_rnn_lm":
        return dict(layers=args.decoder_layers, hidden=args.decoder_hidden_size, embed=args.decoder_embed_dim)
    if model == "fconv":
        (n, dims) = _fconv_layers(args.encoder_layers)
        assert _fconv_layers(args.decoder_layers) == (n, dims), arch
        return dict(layers=n, dim=dims[0] if len(dims) == 1 else dims, dropout=args.dropout,
                    embed=_both(args, "encoder_embed_dim", "decoder_embed_dim"))
    if model == "transformer":
        return dict(layers=_both(args, "encoder_layers", "decoder_layers"),
                    dim=_both(args, "encoder_embed_dim", "decoder_embed_dim"),
                    ffn=_both(args, "encoder_ffn_embed_dim", "decoder_ffn_embed_dim"), dropout=args.dropout)
    raise AssertionError(f"{arch}: no reader for model {model}")


def test_every_registered_arch_of_ours_is_a_paper_row_or_says_why_not():
    assert OURS, "no arch of fairseq_local registered"
    unlisted = [a for a in OURS if a not in ROWS and a not in NOT_ROWS]
    assert not unlisted, f"archs with no paper row and no reason in tests/paper_rows.py: {unlisted}"
    assert not set(ROWS) & set(NOT_ROWS)
    assert not [a for a in list(ROWS) + list(NOT_ROWS) if a not in OURS], "rows of archs that are not registered"
    for arch, row in ROWS.items():
        assert ".txt, " in row["cite"], f"{arch}: the row cites no paper section or table"


@pytest.mark.parametrize("arch", sorted(ROWS))
def test_each_arch_builds_its_paper_row(arch):
    row = {k: v for k, v in ROWS[arch].items() if k != "cite"}
    ours = built(arch)
    for key, paper in row.items():
        expected = DEPARTURES.get((arch, key), (paper, None))[0]
        assert ours[key] == expected, (f"{arch}: {key} is {ours[key]!r}; the paper's row ({ROWS[arch]['cite']}) has "
                                       f"{paper!r}" + (f", our stated departure {expected!r}" if expected != paper
                                                       else ""))


def test_every_departure_names_a_row_value_that_differs():
    for (arch, key), (ours, why) in DEPARTURES.items():
        assert key in ROWS[arch] and ROWS[arch][key] != ours and why, (arch, key)
