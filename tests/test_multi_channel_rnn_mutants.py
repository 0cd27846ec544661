"""MC-RNN DropConnect (AWD-LSTM weight drop): one mask per forward call, on W_hh only by default
(on the W_j in ``weight_space="gates"``), only in training; checked against the loop-by-loop
reference of tests/test_multi_channel_rnn.py run with the masked weight."""
import copy

import pytest
import torch
import torch.nn.functional as F

from fairseq_local.modules.multi_channel_rnn import MultiChannelRNNLayer
from test_multi_channel_rnn import DT, _randomise, reference

P = 0.5


@pytest.fixture
def dropout_calls(monkeypatch):
    """Every F.dropout call made by the code under test: (input, p, training, output)."""
    calls, real = [], F.dropout

    def spy(input, p=0.5, training=True, inplace=False):
        out = real(input, p, training, inplace)
        calls.append((input, p, training, out))
        return out

    monkeypatch.setattr(torch.nn.functional, "dropout", spy)
    return calls


def _layer(cell, space, k=2):
    torch.manual_seed(0)
    layer = MultiChannelRNNLayer(3, 4, k, cell=cell, dropconnect=P, weight_space=space).to(DT)
    return _randomise(layer, seed=3)


def _reference_with(layer, dropped_name, dropped, x):
    """Reference outputs of every sentence of x[T, B, I] with parameter ``dropped_name`` replaced."""
    ref = copy.deepcopy(layer).eval()
    ref.dropconnect = 0.0
    with torch.no_grad():
        if dropped is not None:
            getattr(ref, dropped_name).copy_(dropped)
        return torch.stack([reference(ref, x[:, b])[0] for b in range(x.size(1))], 1)


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
@pytest.mark.parametrize("space,dropped_name", [("hidden", "weight_hh"), ("gates", "block_weight")])
def test_dropconnect_one_mask_per_forward_on_the_recurrent_weight(dropout_calls, cell, space, dropped_name):
    layer = _layer(cell, space).train()
    x = torch.rand(6, 2, 3, dtype=DT, generator=torch.Generator().manual_seed(1)) - 0.5
    out, _ = layer(x)
    # exactly one draw per forward call (not per time step), of the recurrent weight only
    assert len(dropout_calls) == 1, [tuple(c[0].shape) for c in dropout_calls]
    w_in, p, training, masked = dropout_calls[0]
    assert w_in is getattr(layer, dropped_name) and p == P and training
    kept = masked != 0
    assert 0 < kept.sum() < kept.numel()  # a real mask: some entries dropped, some kept
    assert torch.allclose(masked[kept], w_in.detach()[kept] / (1 - P))
    # the whole sequence ran with that one masked matrix (and every other weight intact)
    expected = _reference_with(layer, dropped_name, masked.detach(), x)
    assert torch.allclose(out, expected, atol=1e-10), (out - expected).abs().max()
    # the next forward call draws a new mask
    layer(x)
    assert len(dropout_calls) == 2 and not torch.equal(dropout_calls[1][3] != 0, kept)


@pytest.mark.parametrize("space,dropped_name", [("hidden", "weight_hh"), ("gates", "block_weight")])
def test_dropconnect_off_in_eval(dropout_calls, space, dropped_name):
    layer = _layer("lstm", space).eval()
    x = torch.rand(5, 2, 3, dtype=DT, generator=torch.Generator().manual_seed(2)) - 0.5
    out, _ = layer(x)
    assert all(not training for _, _, training, _ in dropout_calls)
    assert torch.allclose(out, _reference_with(layer, dropped_name, None, x), atol=1e-10)


def test_dropconnect_leaves_block_weights_and_inputs_alone_by_default(dropout_calls):
    """Default weight space ("hidden"): W_j (block_weight), W_ih and the attention are never dropped."""
    layer = _layer("lstm", "hidden", k=3).train()
    before = {n: p.detach().clone() for n, p in layer.named_parameters()}
    layer(torch.rand(4, 2, 3, dtype=DT))
    dropped = [c[0] for c in dropout_calls]
    assert len(dropped) == 1 and dropped[0] is layer.weight_hh
    for n, p in layer.named_parameters():  # and nothing is changed in place
        assert torch.equal(p, before[n]), n


def test_model_passes_weight_dropout_to_every_layer():
    from argparse import Namespace
    from types import SimpleNamespace

    from fairseq.data import Dictionary

    from fairseq_local.models.mc_rnn_lm import MCRNNLanguageModel

    d = Dictionary()
    for i in range(8):
        d.add_symbol(f"w{i}")
    cfg = Namespace(decoder_embed_dim=4, decoder_hidden_size=4, decoder_layers=2, weight_dropout=0.3,
                    mc_channels=2)
    model = MCRNNLanguageModel.build_model(cfg, SimpleNamespace(target_dictionary=d, source_dictionary=d))
    layers = [m for m in model.modules() if isinstance(m, MultiChannelRNNLayer)]
    assert len(layers) == 2 and all(layer.dropconnect == 0.3 for layer in layers)
