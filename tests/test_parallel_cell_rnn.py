"""Parallel-cell recurrent layer: equivalence with torch RNNs, masking, padding, parameter counts."""
import pytest
import torch
from torch import nn

from fairseq_local.modules.parallel_cell_rnn import (
    ParallelCellRNNLayer,
    bidirectional_parallel_cells,
    recurrent_parameter_count,
)

TORCH_RNN = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}


def _torch_state(cell, h0, c0):
    return (h0, c0) if cell == "lstm" else h0


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_wide1_equals_torch_rnn(cell):
    torch.manual_seed(0)
    T, B, I, m = 7, 3, 5, 6
    ref = TORCH_RNN[cell](I, m).double()
    layer = ParallelCellRNNLayer(I, m, wide=1, cell=cell).double()
    layer.load_cell_from_torch(0, ref)
    x = torch.randn(T, B, I, dtype=torch.float64)
    h0 = torch.randn(B, m, dtype=torch.float64)
    c0 = torch.randn(B, m, dtype=torch.float64)
    state = (h0, c0) if cell == "lstm" else (h0,)
    out, new_state = layer(x, state)
    ref_out, ref_state = ref(x, _torch_state(cell, h0[None], c0[None]))
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-12)
    ref_state = ref_state if cell == "lstm" else (ref_state,)
    for a, b in zip(new_state, ref_state):
        torch.testing.assert_close(a, b[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_wide_n_equals_separate_rnns_concatenated(cell):
    torch.manual_seed(1)
    T, B, I, n, k = 6, 4, 5, 3, 4
    refs = [TORCH_RNN[cell](I, k).double() for _ in range(n)]
    layer = ParallelCellRNNLayer(I, n * k, wide=n, cell=cell).double()
    for j, r in enumerate(refs):
        layer.load_cell_from_torch(j, r)
    x = torch.randn(T, B, I, dtype=torch.float64)
    h0 = torch.randn(B, n * k, dtype=torch.float64)
    c0 = torch.randn(B, n * k, dtype=torch.float64)
    out, state = layer(x, (h0, c0) if cell == "lstm" else (h0,))
    ref_outs, ref_h, ref_c = [], [], []
    for j, r in enumerate(refs):  # one by one, then concatenated
        sl = slice(j * k, (j + 1) * k)
        o, s = r(x, _torch_state(cell, h0[None, :, sl], c0[None, :, sl]))
        ref_outs.append(o)
        ref_h.append((s[0] if cell == "lstm" else s)[0])
        if cell == "lstm":
            ref_c.append(s[1][0])
    torch.testing.assert_close(out, torch.cat(ref_outs, -1), rtol=0, atol=1e-12)
    torch.testing.assert_close(state[0], torch.cat(ref_h, -1), rtol=0, atol=1e-12)
    if cell == "lstm":
        torch.testing.assert_close(state[1], torch.cat(ref_c, -1), rtol=0, atol=1e-12)


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_masking_cell_changes_only_its_slice(cell):
    torch.manual_seed(2)
    T, B, I, n, k = 5, 2, 4, 3, 3
    layer = ParallelCellRNNLayer(I, n * k, wide=n, cell=cell).double()
    x = torch.randn(T, B, I, dtype=torch.float64)
    full, _ = layer(x)
    for i in range(n):
        layer.mask_cells([i])
        masked, state = layer(x)
        sl = slice(i * k, (i + 1) * k)
        assert torch.equal(masked[..., sl], torch.zeros_like(masked[..., sl]))
        assert torch.equal(state[0][:, sl], torch.zeros_like(state[0][:, sl]))
        others = [j for j in range(n * k) if not sl.start <= j < sl.stop]
        torch.testing.assert_close(masked[..., others], full[..., others], rtol=0, atol=1e-12)
        assert not torch.allclose(full[..., sl], masked[..., sl])
    layer.mask_cells([])
    torch.testing.assert_close(layer(x)[0], full, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="cannot mask cell 3"):
        layer.mask_cells([3])


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_padding_keeps_state_and_incremental_equals_full(cell):
    torch.manual_seed(3)
    T, B, I, m, n = 6, 3, 4, 6, 2
    layer = ParallelCellRNNLayer(I, m, wide=n, cell=cell).double()
    x = torch.randn(T, B, I, dtype=torch.float64)
    # left padding: sequence b has its first b positions padded
    pad = torch.zeros(T, B, dtype=torch.bool)
    for b in range(B):
        pad[:b, b] = True
    out, state = layer(x, padding_mask=pad)
    for b in range(B):  # each sequence alone, unpadded
        ob, sb = layer(x[b:, b : b + 1])
        torch.testing.assert_close(out[b:, b : b + 1], ob, rtol=0, atol=1e-12)
        assert torch.equal(out[:b, b], torch.zeros_like(out[:b, b]))
        for s_full, s_one in zip(state, sb):
            torch.testing.assert_close(s_full[b : b + 1], s_one, rtol=0, atol=1e-12)
    # T=1 steps with the carried state == one full pass
    st, steps = None, []
    for t in range(T):
        o, st = layer(x[t : t + 1], st, pad[t : t + 1])
        steps.append(o)
    torch.testing.assert_close(torch.cat(steps), out, rtol=0, atol=1e-12)
    # reorder_state follows a permutation of the batch
    order = torch.tensor([2, 0, 1])
    re = layer.reorder_state(state, order)
    torch.testing.assert_close(re[0], state[0][order])


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
@pytest.mark.parametrize("wide", [1, 2, 3, 5])
def test_parameter_count_formula(cell, wide):
    I, m = 7, 30
    layer = ParallelCellRNNLayer(I, m, wide=wide, cell=cell)
    g = {"lstm": 4, "gru": 3, "rnn": 1}[cell]
    expected = g * m * I + g * m * m // wide + (4 * m if cell == "gru" else g * m)
    n_params = sum(p.numel() for p in layer.parameters())
    assert n_params == expected == ParallelCellRNNLayer.count_parameters(I, m, wide, cell)
    assert layer.weight_hh.numel() == recurrent_parameter_count(m, wide, cell=cell)
    if cell == "lstm" and wide == 1:  # wide=1 is exactly a standard LSTM (minus torch's 2nd bias)
        ref = nn.LSTM(I, m)
        assert n_params == sum(p.numel() for p in ref.parameters()) - 4 * m


def test_paper_table2_recurrent_parameter_sizes():
    # Table 2: 2 layers x 1950 hidden; recurrent weights 4 m^2 / n per layer
    paper = {1: 30.4, 2: 15.2, 3: 10.1, 4: 7.6, 5: 6.1}
    for wide, millions in paper.items():
        assert round(recurrent_parameter_count(1950, wide, num_layers=2) / 1e6, 1) == millions
    # the LSTM part of the paper's Section 2.2 formula: 8m^2/n + 4m with I = m/n per cell would be
    # the weights of n cells T_{2m/n -> 4m/n}; with every cell reading the full input x (Fig. 3)
    # the input half is 4m^2 instead
    m, n = 1950, 3
    layer_params = ParallelCellRNNLayer.count_parameters(m, m, n)
    assert layer_params == 4 * m * m + 4 * m * m // n + 4 * m


def test_bad_options_have_clear_errors():
    with pytest.raises(ValueError, match="not divisible by wide=4"):
        ParallelCellRNNLayer(4, 10, wide=4)
    with pytest.raises(ValueError, match="expected one of"):
        ParallelCellRNNLayer(4, 8, cell="qrnn")


def test_gradients_flow_to_every_parameter():
    torch.manual_seed(4)
    for cell in ("lstm", "gru", "rnn"):
        layer = ParallelCellRNNLayer(3, 6, wide=3, cell=cell)
        out, _ = layer(torch.randn(4, 2, 3))
        out.pow(2).sum().backward()
        for name, p in layer.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_bidirectional_layer_equals_torch_bidirectional_lstm_with_left_padding():
    torch.manual_seed(5)
    T, B, I, k = 6, 3, 4, 3
    ref = nn.LSTM(I, k, bidirectional=True).double()
    layer = bidirectional_parallel_cells(I, 2 * k, wide=1).double()
    fwd, bwd = nn.LSTM(I, k).double(), nn.LSTM(I, k).double()
    for src, dst in ((fwd, ""), (bwd, "_reverse")):
        for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
            getattr(src, name).data.copy_(getattr(ref, name + dst))
    layer.forward_layer.load_cell_from_torch(0, fwd)
    layer.backward_layer.load_cell_from_torch(0, bwd)
    x = torch.randn(T, B, I, dtype=torch.float64)
    pad = torch.zeros(T, B, dtype=torch.bool)
    pad[:2, 1] = True  # left padding of 2 in column 1
    out, _ = layer(x, padding_mask=pad)
    assert out.shape == (T, B, 2 * k)
    full, _ = ref(x)
    torch.testing.assert_close(out[:, [0, 2]], full[:, [0, 2]], rtol=0, atol=1e-12)
    alone, _ = ref(x[2:, 1:2])
    torch.testing.assert_close(out[2:, 1:2], alone, rtol=0, atol=1e-12)
    assert torch.equal(out[:2, 1], torch.zeros_like(out[:2, 1]))
    with pytest.raises(ValueError, match="divisible by wide=3"):
        bidirectional_parallel_cells(I, 1024, wide=3)


def _grads(layer, x, state, pad, w_out):
    for p in layer.parameters():
        p.grad = None
    x = x.clone().requires_grad_(True)
    state = tuple(s.clone().requires_grad_(True) for s in state)
    out, new_state = layer(x, state, pad)
    loss = (out * w_out).sum() + sum((s * (i + 2)).sum() for i, s in enumerate(new_state))
    loss.backward()
    return [x.grad] + [s.grad for s in state] + [p.grad.clone() for p in layer.parameters()]


@pytest.mark.parametrize("wide", [1, 3])
def test_fused_lstm_backward_equals_autograd(wide):
    """The hand-written backward of the LSTM recurrence (_BlockDiagonalLSTM) == autograd through
    the step loop, with left padding, gradients w.r.t. input, initial state and every weight."""
    torch.manual_seed(6)
    T, B, I, m = 6, 3, 4, 6
    layer = ParallelCellRNNLayer(I, m, wide=wide).double()
    x = torch.randn(T, B, I, dtype=torch.float64)
    state = (torch.randn(B, m, dtype=torch.float64), torch.randn(B, m, dtype=torch.float64))
    pad = torch.zeros(T, B, dtype=torch.bool)
    pad[:2, 1] = True
    pad[:5, 2] = True
    w_out = torch.randn(T, B, m, dtype=torch.float64)
    for mask in (None, pad):
        fused = _grads(layer, x, state, mask, w_out)
        layer.force_autograd = True
        ref = _grads(layer, x, state, mask, w_out)
        layer.force_autograd = False
        for a, b in zip(fused, ref):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_fused_lstm_gradients_equal_torch_lstm():
    torch.manual_seed(7)
    T, B, I, m = 5, 2, 3, 4
    ref = nn.LSTM(I, m).double()
    layer = ParallelCellRNNLayer(I, m, wide=1).double()
    layer.load_cell_from_torch(0, ref)
    x = torch.randn(T, B, I, dtype=torch.float64)
    w_out = torch.randn(T, B, m, dtype=torch.float64)
    (layer(x)[0] * w_out).sum().backward()
    (ref(x)[0] * w_out).sum().backward()
    torch.testing.assert_close(layer.weight_ih.grad, ref.weight_ih_l0.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(layer.weight_hh.grad[0], ref.weight_hh_l0.grad.t(), rtol=0, atol=1e-12)
    torch.testing.assert_close(layer.bias.grad, ref.bias_ih_l0.grad, rtol=0, atol=1e-12)
