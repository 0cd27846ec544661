"""StepwiseLinear (modules/stepwise_linear.py): per-step values and every gradient equal plain
F.linear in a recurrent loop; the decoders that use it give the same gradients as without it."""
import pytest
import torch
import torch.nn.functional as F

from fairseq.data import Dictionary

from fairseq_local.modules.multi_channel_rnn import MultiChannelRNNLayer
from fairseq_local.modules.parallel_cell_rnn import ParallelCellRNNLayer
from fairseq_local.modules.recurrent_seq2seq import Embedding, RecurrentAttentionDecoder, RecurrentEncoder
from fairseq_local.modules.stepwise_linear import StepwiseLinear
from fairseq_local.modules.torch_rnn_layer import TorchRNNLayer

DT = torch.float64


def _loop(weight, bias, xs, stepwise, steps=None):
    """A recurrence whose step input depends on the previous output, as in input feeding."""
    lin = StepwiseLinear(weight, bias, steps or len(xs), xs[0].size(1)) if stepwise else None
    h = torch.zeros(1, xs[0].size(1), weight.size(0), dtype=DT)
    outs = []
    for x in xs:
        inp = x + 0.3 * h[..., : x.size(-1)]
        o = lin(inp) if stepwise else F.linear(inp, weight, bias)
        h = torch.tanh(o)
        outs.append(h)
    return torch.cat(outs)


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("extra_steps", [0, 2])  # built for more steps than run: unused taps get no gradient
def test_values_and_gradients_equal_plain_linear(with_bias, extra_steps):
    torch.manual_seed(0)
    w = torch.randn(7, 5, dtype=DT, requires_grad=True)
    b = torch.randn(7, dtype=DT, requires_grad=True) if with_bias else None
    xs = [torch.randn(1, 3, 5, dtype=DT, requires_grad=True) for _ in range(4)]
    params = [w] + ([b] if with_bias else []) + xs
    results = []
    for stepwise in (False, True):
        out = _loop(w, b, xs, stepwise, steps=len(xs) + extra_steps)
        grads = torch.autograd.grad((out * torch.linspace(-1, 2, out.numel(), dtype=DT).view_as(out)).sum(), params)
        results.append((out.detach(), grads))
    (out_ref, g_ref), (out, g) = results
    torch.testing.assert_close(out, out_ref, rtol=0, atol=1e-12)
    for a, r in zip(g, g_ref):
        torch.testing.assert_close(a, r, rtol=0, atol=1e-12)


def test_without_gradients_it_is_plain_linear_and_keeps_nothing():
    w, b = torch.randn(4, 3), torch.randn(4)
    x = torch.randn(2, 3)
    with torch.no_grad():
        lin = StepwiseLinear(w.requires_grad_(), b, 3, 2)
        assert not lin.deferred
        assert torch.equal(lin(x), F.linear(x, w, b))


def test_more_calls_than_steps_is_an_error():
    w = torch.randn(4, 3, requires_grad=True)
    lin = StepwiseLinear(w, None, 1, 2)
    lin(torch.randn(2, 3))
    with pytest.raises(IndexError, match="built for 1 steps"):
        lin(torch.randn(2, 3))


def test_parallel_layer_input_proj_equals_own_projection():
    torch.manual_seed(1)
    layer = ParallelCellRNNLayer(5, 6, wide=3).to(DT)
    x = torch.randn(4, 2, 5, dtype=DT)
    w, b = layer.input_projection_parameters()
    torch.testing.assert_close(layer(x, input_proj=F.linear(x, w, b))[0], layer(x)[0], rtol=0, atol=1e-12)


LAYERS = {
    "parallel": lambda i, inp, hid: ParallelCellRNNLayer(inp, hid, wide=3),
    "mc_rnn": lambda i, inp, hid: MultiChannelRNNLayer(inp, hid, 3, dropconnect=0.2),
}


@pytest.mark.parametrize("layers", sorted(LAYERS))
def test_decoder_gradients_equal_those_without_stepwise_projection(layers, monkeypatch):
    """The input-feeding decoder with StepwiseLinear projections gives the gradients of the same
    decoder computing its projections inside the layers (the per-step weight-gradient path)."""
    torch.manual_seed(0)
    d = Dictionary()
    for i in range(15):
        d.add_symbol(f"w{i}")
    enc = RecurrentEncoder(d, Embedding(len(d), 6, d.pad()), lambda i, inp, hid: TorchRNNLayer("lstm", inp, hid),
                           1, 6, bidirectional=False).to(DT)
    dec = RecurrentAttentionDecoder(d, Embedding(len(d), 6, d.pad()), LAYERS[layers], 2, 6, enc.output_dim,
                                    dropout_in=0.1, dropout_out=0.1).to(DT)
    enc.train(), dec.train()
    src = torch.randint(d.nspecial, len(d), (3, 5))
    src[0, :2] = d.pad()
    tgt = torch.randint(d.nspecial, len(d), (3, 6))
    params = list(enc.parameters()) + list(dec.parameters())

    def grads():
        torch.manual_seed(3)  # same dropout masks in both runs
        out = dec(tgt, enc(src, src.ne(d.pad()).sum(1)))[0]
        loss = (out.log_softmax(-1) * torch.linspace(0, 1, out.size(-1), dtype=DT)).sum()
        return torch.autograd.grad(loss, params)

    with_stepwise = grads()
    monkeypatch.setattr(RecurrentAttentionDecoder, "_stepwise_projections",
                        lambda self, seqlen, bsz: [None] * self.num_layers)
    without = grads()
    for a, r in zip(with_stepwise, without):
        torch.testing.assert_close(a, r, rtol=1e-9, atol=1e-11)
    assert any(a.abs().sum() > 0 for a in with_stepwise)
