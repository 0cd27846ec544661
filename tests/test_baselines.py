"""Baseline LM architectures (fairseq_local/models/baselines.py): every arch builds with the
sizes of its paper row, its parameter count equals the closed formula and, for Zaremba et al.'s
models, the 20M / 66M that the literature lists for them (Merity et al. 2018, Table 1)."""
import pytest
import torch

import fairseq_local  # noqa: F401
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

USER_DIR = str(fairseq_local.__path__[0])
V = 10000  # PTB's vocabulary (fairseq's <s>, <pad>, </s>, <unk> + 9996 words)


@pytest.fixture(scope="module")
def ptb_dict(tmp_path_factory):
    data = tmp_path_factory.mktemp("ptb_dict")
    (data / "dict.txt").write_text("".join(f"w{i} 1\n" for i in range(V - 4)), encoding="utf-8")
    return data


def build(arch, data, task="stateful_language_modeling", *extra):
    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(data), "--user-dir", USER_DIR, "--task", task, "--arch", arch, "--cpu", *extra])
    cfg = convert_namespace_to_omegaconf(args)
    t = tasks.setup_task(cfg.task)
    assert len(t.dictionary) == V
    torch.manual_seed(0)
    return t.build_model(cfg.model)


def count(model):
    return sum(p.numel() for p in model.parameters())


def lstm_layer(inp, h, biases):  # 4 gates: W_ih, W_hh and 1 or 2 bias vectors
    return 4 * h * (inp + h) + biases * 4 * h


def untied_lm(embed, layers, hidden):  # embedding + layers + softmax (weight and bias)
    return V * embed + layers + hidden * V + V


@pytest.mark.parametrize("size,units,paper_m,dropout,scale", [("medium", 650, 20, 0.5, 0.05),
                                                              ("large", 1500, 66, 0.65, 0.04)])
def test_zaremba_lstm_lms(ptb_dict, size, units, paper_m, dropout, scale):
    model = build(f"zaremba_lstm_lm_{size}", ptb_dict)
    dec = model.decoder
    assert len(dec.layers) == 2 and all(layer.wide == 1 and layer.cell == "lstm" for layer in dec.layers)
    assert dec.embed_tokens.embedding_dim == units and dec.fc_out is not None  # untied
    assert dec.drop_in.p == dec.drop_hidden.p == dec.drop_out.p == dropout
    bound = max(p.abs().max().item() for p in dec.layers.parameters())
    assert 0.99 * scale < bound <= scale * (1 + 1e-6)  # uniform [-s, s] init (torch's would be 1/sqrt(H))
    expected = untied_lm(units, 2 * lstm_layer(units, units, biases=1), units)
    assert count(model) == expected
    assert abs(count(model) / 1e6 - paper_m) < 0.5, count(model)  # 19.78M / 66.02M


@pytest.mark.parametrize("arch,cell", [("wang_gencnn_rnn_lm", "rnn"), ("wang_gencnn_lstm_lm", "lstm")])
def test_gencnn_baseline_rows(ptb_dict, arch, cell):
    model = build(arch, ptb_dict)
    (layer,) = model.decoder.layers
    assert layer.cell == cell and layer.hidden_size == 600 and model.decoder.fc_out is not None
    gates = {"rnn": 1, "lstm": 4}[cell]
    expected = untied_lm(600, gates * 600 * (600 + 600) + gates * 600, 600)
    assert count(model) == expected  # rnn: 12.73M, lstm: 14.89M with the 10k vocabulary
    assert model.decoder.drop_out.p == 0.0


def test_arch_defaults_yield_to_the_command_line(ptb_dict):
    model = build("zaremba_lstm_lm_medium", ptb_dict, "stateful_language_modeling", "--dropout", "0.3",
                  "--decoder-hidden-size", "200", "--decoder-embed-dim", "200")
    assert model.decoder.drop_in.p == 0.3 and model.decoder.layers[0].hidden_size == 200
