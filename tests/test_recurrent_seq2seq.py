"""Tests for the shared recurrent seq2seq machinery: torch RNN layers under the layer contract,
RNNSearch attention, the generic encoder / attentional decoder, and the rnnsearch model
(the LM decoder has its own file, tests/test_recurrent_lm_decoder.py)."""
import argparse

import pytest
import torch
import torch.nn.functional as F

import fairseq_local  # noqa: F401
from fairseq_local.modules.recurrent_seq2seq import Embedding, RecurrentAttentionDecoder, RecurrentEncoder
from fairseq_local.modules.rnn_attention import RNNSearchAttention
from fairseq_local.modules.torch_rnn_layer import TorchRNNLayer

from contract_lib import float64_default, left_padded_tokens as _left_padded, small_dictionary as _dict
from contract_lib import torch_layer_factory as _factory


_float64 = pytest.fixture(autouse=True)(float64_default)


# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
@pytest.mark.parametrize("layout", ["left", "right", "holes"])
def test_torch_layer_padding_is_exact(cell, layout):
    torch.manual_seed(0)
    layer = TorchRNNLayer(cell, 5, 7)
    T, B = 6, 4
    x = torch.randn(T, B, 5)
    lengths = [6, 3, 1, 4]
    mask = torch.ones(T, B, dtype=torch.bool)
    for b, n in enumerate(lengths):
        if layout == "left":
            mask[T - n:, b] = False
        elif layout == "right":
            mask[:n, b] = False
        else:
            mask[torch.randperm(T)[:n], b] = False
    h0 = torch.randn(B, 7)
    state0 = layer.state_from_hidden(h0)
    out, state = layer(x, state0, mask)
    for b in range(B):
        keep = ~mask[:, b]
        ref, ref_state = layer(x[keep, b:b + 1], layer.reorder_state(state0, torch.tensor([b])))
        torch.testing.assert_close(out[keep, b], ref[:, 0])
        assert out[mask[:, b], b].abs().max() == 0 if mask[:, b].any() else True
        hs = state[0] if cell == "lstm" else state
        rs = ref_state[0] if cell == "lstm" else ref_state
        torch.testing.assert_close(hs[b], rs[0])


def test_torch_layer_bad_cell_names_option():
    with pytest.raises(ValueError, match="--cell"):
        TorchRNNLayer("lstmx", 3, 3)


# ---------------------------------------------------------------------------------------------
def test_attention_matches_formula_and_masks():
    torch.manual_seed(0)
    att = RNNSearchAttention(4, 6, 5)
    S, B, T = 5, 3, 2
    enc = torch.randn(S, B, 6)
    q = torch.randn(T, B, 4)
    mask = torch.zeros(B, S, dtype=torch.bool)
    mask[1, :2] = True
    ctx, a = att(q, enc, mask)
    for t in range(T):
        for b in range(B):
            e = torch.stack([att.score.weight[0] @ torch.tanh(att.query_proj.weight @ q[t, b]
                                                             + att.key_proj.weight @ enc[s, b] + att.key_proj.bias)
                             for s in range(S)])
            e = e.masked_fill(mask[b], float("-inf"))
            w = F.softmax(e, 0)
            torch.testing.assert_close(a[t, b], w)
            torch.testing.assert_close(ctx[t, b], (w[:, None] * enc[:, b]).sum(0))
    assert a[:, 1, :2].abs().max() == 0
    ctx1, a1 = att(q[1], enc, mask)  # single-step query gives the same
    torch.testing.assert_close(ctx1, ctx[1])
    torch.testing.assert_close(a1, a[1])


# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bidirectional", [False, True])
def test_encoder_left_padding_is_exact(bidirectional):
    torch.manual_seed(0)
    d = _dict()
    enc = RecurrentEncoder(d, Embedding(len(d), 6, d.pad()), _factory("lstm"), 2, 5, bidirectional=bidirectional)
    enc.eval()
    toks = _left_padded(d, [7, 4, 2])
    out = enc(toks, None)
    for b, n in enumerate([7, 4, 2]):
        alone = enc(toks[b:b + 1, -n:], None)
        torch.testing.assert_close(out["encoder_out"][0][-n:, b], alone["encoder_out"][0][:, 0])
        torch.testing.assert_close(out["encoder_final_hidden"][0][b], alone["encoder_final_hidden"][0][0])
    assert out["encoder_padding_mask"][0].sum() == 3 + 5


def _seq2seq(d, input_feeding, cell="lstm"):
    enc = RecurrentEncoder(d, Embedding(len(d), 6, d.pad()), _factory(cell), 2, 5, bidirectional=True)
    dec = RecurrentAttentionDecoder(d, Embedding(len(d), 6, d.pad()), _factory(cell), 2, 7, enc.output_dim,
                                    input_feeding=input_feeding)
    return enc.eval(), dec.eval()


@pytest.mark.parametrize("input_feeding", [True, False])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_decoder_incremental_equals_full_and_reorders(input_feeding, cell):
    torch.manual_seed(0)
    d = _dict()
    enc, dec = _seq2seq(d, input_feeding, cell)
    src = _left_padded(d, [5, 3, 4])
    tgt = _left_padded(d, [6, 6, 6], seed=1)
    eo = enc(src, None)
    full, extra = dec(tgt, eo)
    state = {}
    steps = [dec(tgt[:, :t + 1], eo, incremental_state=state)[0] for t in range(tgt.size(1))]
    torch.testing.assert_close(torch.cat(steps, 1), full)
    # beam-like reorder halfway through
    order = torch.tensor([2, 0, 0])
    state = {}
    for t in range(3):
        dec(tgt[:, :t + 1], eo, incremental_state=state)
    dec.reorder_incremental_state_scripting(state, order)
    eo_r = enc.reorder_encoder_out(eo, order)
    tgt_r = tgt.index_select(0, order)
    rest = [dec(tgt_r[:, :t + 1], eo_r, incremental_state=state)[0] for t in range(3, tgt.size(1))]
    torch.testing.assert_close(torch.cat(rest, 1), full.index_select(0, order)[:, 3:])
    attn = extra["attn"][0]
    assert attn.shape == (3, 6, 5)
    torch.testing.assert_close(attn.sum(-1), torch.ones(3, 6))
    assert attn[1, :, :2].abs().max() == 0  # padding of the 3-token source


# ---------------------------------------------------------------------------------------------
def _build(arch, extra=()):
    from fairseq import options

    d = _dict()
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, ["/dev/null", "--task", "translation", "--arch", arch,
                                                "--user-dir", "fairseq_local", *extra])

    class Task:
        source_dictionary = target_dictionary = d

    from fairseq.models import ARCH_MODEL_REGISTRY

    return ARCH_MODEL_REGISTRY[arch].build_model(args, Task()), args


@pytest.mark.parametrize("arch,layers,hidden", [("rnnsearch_iwslt_de_en", 2, 256), ("rnnsearch_iwslt_de_en_large", 2, 364),
                                                ("rnnsearch_iwslt_de_en_deep", 3, 296), ("rnnsearch_gigaword", 4, 256)])
def test_rnnsearch_archs(arch, layers, hidden):
    model, args = _build(arch)
    assert len(model.encoder.layers) == len(model.decoder.layers) == layers
    assert model.decoder.hidden_size == hidden and model.encoder.bidirectional
    model2, _ = _build(arch, ["--encoder-layers", "1", "--cell", "gru"])  # CLI wins over the arch
    assert len(model2.encoder.layers) == 1 and model2.encoder.layers[0].cell == "gru"


def test_rnnsearch_bad_cell_fails_at_build():
    with pytest.raises(ValueError, match="--cell"):
        _build("rnnsearch", ["--cell", "lstn"])
