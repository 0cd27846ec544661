"""Parallel-cell layer details the equivalence tests leave open: integer parameter counts, the state
built from an encoder's hidden output, the bidirectional wrapper (sizes, given states, no padding
mask, beam reordering of both directions) and its size check and suggestion."""
import pytest
import torch
from torch import nn

from fairseq_local.modules.parallel_cell_rnn import (
    BidirectionalLayer,
    ParallelCellRNNLayer,
    bidirectional_parallel_cells,
    recurrent_parameter_count,
)


def test_parameter_counts_are_integers():
    # 4 * 30 * 7 / 4 is not an integer, and 4 * 30 * 30 / 4 of a 4-cell layer of 30 units would be
    # a float: a count of parameters is an exact int in every case
    for wide in (1, 2, 3, 5):
        for cell_input in ("full", "slice"):
            n = ParallelCellRNNLayer.count_parameters(7, 30, wide, "lstm", cell_input)
            assert type(n) is int
        assert type(recurrent_parameter_count(30, wide, num_layers=2)) is int
    assert ParallelCellRNNLayer.count_parameters(7, 30, 3, "gru", "slice") == 3 * 10 * 7 + 3 * 30 * 30 // 3 + 4 * 30
    assert recurrent_parameter_count(1950, 3, num_layers=2) == 2 * 4 * 1950 * 1950 // 3 == 10140000


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_state_from_hidden(cell):
    h0 = torch.randn(2, 6)
    state = ParallelCellRNNLayer(3, 6, wide=2, cell=cell).state_from_hidden(h0)
    assert isinstance(state, tuple) and state[0] is h0
    if cell == "lstm":  # (h, c) with a zero memory cell
        assert len(state) == 2 and torch.equal(state[1], torch.zeros(2, 6))
    else:
        assert len(state) == 1


def _bidirectional(I=3, hidden=8, wide=2, cell="lstm", cell_input="full"):
    torch.manual_seed(11)
    return bidirectional_parallel_cells(I, hidden, wide, cell, cell_input).double()


def test_bidirectional_given_state_and_no_mask_equal_the_two_directions_run_alone():
    layer = _bidirectional()
    assert layer.hidden_size == 8 and layer.forward_layer.hidden_size == layer.backward_layer.hidden_size == 4
    T, B = 5, 2
    x = torch.randn(T, B, 3, dtype=torch.float64)
    fs = (torch.randn(B, 4, dtype=torch.float64), torch.randn(B, 4, dtype=torch.float64))
    bs = (torch.randn(B, 4, dtype=torch.float64), torch.randn(B, 4, dtype=torch.float64))
    out, (f_state, b_state) = layer(x, (fs, bs))  # no padding mask
    f_ref, f_ref_state = layer.forward_layer(x, fs)
    b_ref, b_ref_state = layer.backward_layer(x.flip(0), bs)
    torch.testing.assert_close(out, torch.cat([f_ref, b_ref.flip(0)], -1), rtol=0, atol=0)
    for a, b in zip(f_state + b_state, f_ref_state + b_ref_state):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    # the given states matter in both directions
    zero_out, _ = layer(x)
    assert not torch.allclose(zero_out[..., :4], out[..., :4]) and not torch.allclose(zero_out[..., 4:], out[..., 4:])


def test_bidirectional_reorder_state_follows_the_beam_in_both_directions():
    layer = _bidirectional()
    B = 3
    state = tuple(tuple(torch.randn(B, 4, dtype=torch.float64) for _ in range(2)) for _ in range(2))
    order = torch.tensor([2, 2, 0])
    fwd, bwd = layer.reorder_state(state, order)
    for got, given in zip(fwd + bwd, state[0] + state[1]):
        assert torch.equal(got, given[order])
    assert layer.reorder_state(None, order) is None


def test_bidirectional_layers_share_the_cell_reading():
    layer = _bidirectional(I=5, hidden=12, wide=3, cell="gru", cell_input="slice")
    for direction in (layer.forward_layer, layer.backward_layer):
        assert (direction.cell, direction.cell_input, direction.wide, direction.hidden_size) == ("gru", "slice", 3, 6)
    assert isinstance(layer, BidirectionalLayer)


def test_bidirectional_size_check_and_suggestion():
    for hidden, wide in ((8, 2), (4, 2), (14, 7), (6, 1)):  # valid: two directions of hidden/2, divisible by wide
        assert bidirectional_parallel_cells(3, hidden, wide).hidden_size == hidden
    for hidden, wide, example in ((7, 1, 6), (1024, 3, 1020), (4, 3, 6), (10, 2, 8)):
        with pytest.raises(ValueError) as err:
            bidirectional_parallel_cells(3, hidden, wide)
        assert str(err.value) == (f"bidirectional parallel cells: hidden size {hidden} must split into two "
                                  f"directions divisible by wide={wide} (e.g. {example})")
        bidirectional_parallel_cells(3, example, wide)  # the suggestion is a valid size


def test_defaults_and_initialisation_bound():
    layer = ParallelCellRNNLayer(3, 6)
    assert (layer.wide, layer.cell, layer.cell_input, layer.cell_size) == (1, "lstm", "full", 6)
    assert layer.masked_cells == () and layer.force_autograd is False
    torch.manual_seed(12)
    layer = ParallelCellRNNLayer(40, 64, wide=4)  # cells of k = 16 units: U(-1/sqrt(k), 1/sqrt(k)) = U(-0.25, 0.25)
    for name, p in layer.named_parameters():
        assert p.min() >= -0.25 and p.max() <= 0.25, name
        if p.numel() >= 1000:
            assert p.min() < -0.24 and p.max() > 0.24, name


def test_full_reading_projection_parameters_are_the_layer_weights():
    layer = ParallelCellRNNLayer(3, 6, wide=2)
    weight, bias = layer.input_projection_parameters()
    assert weight is layer.weight_ih and bias is layer.bias


def test_slice_projection_parameters_stay_on_the_layer_device():
    with torch.device("meta"):
        layer = ParallelCellRNNLayer(6, 6, wide=3, cell_input="slice")
    weight, _ = layer.input_projection_parameters()
    assert weight.device.type == "meta" and weight.shape == (3 * 4 * 2, 6)


def test_slice_projection_under_autocast_keeps_the_product_dtype():
    torch.manual_seed(13)
    layer = ParallelCellRNNLayer(6, 6, wide=3, cell_input="slice")
    x = torch.randn(4, 2, 6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        proj = layer._input_projection(x)
    assert proj.dtype == torch.bfloat16
    torch.testing.assert_close(proj.float(), layer._input_projection(x), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_empty_input_returns_the_state_unchanged(cell):
    layer = ParallelCellRNNLayer(3, 6, wide=2, cell=cell)
    state = [torch.randn(4, 6) for _ in range(2 if cell == "lstm" else 1)]
    out, new_state = layer(torch.randn(0, 4, 3), state)
    assert out.shape == (0, 4, 6) and isinstance(new_state, tuple) and len(new_state) == len(state)
    assert all(a is b for a, b in zip(new_state, state))


@pytest.mark.parametrize("wide,cell", [(1, "lstm"), (3, "lstm"), (3, "gru")])
def test_given_input_projection_is_the_one_used(wide, cell):
    """forward(x, input_proj=P) runs the recurrence on P, whatever x is (wide=1 included)."""
    torch.manual_seed(14)
    T, B, I, m = 4, 3, 5, 6
    layer = ParallelCellRNNLayer(I, m, wide=wide, cell=cell).double()
    x, x2 = torch.randn(2, T, B, I, dtype=torch.float64)
    proj = torch.nn.functional.linear(x2, layer.weight_ih, layer.bias)
    given, given_state = layer(x, input_proj=proj)
    ref, ref_state = layer(x2)
    torch.testing.assert_close(given, ref, rtol=0, atol=1e-12)
    for a, b in zip(given_state, ref_state):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("wide", [1, 2])
def test_masking_with_any_batch_size(wide):
    """A masked cell is zero for every sequence of the batch, a standard LSTM's only cell too."""
    torch.manual_seed(15)
    T, B, m = 4, 3, 4
    layer = ParallelCellRNNLayer(3, m, wide=wide).double()
    x = torch.randn(T, B, 3, dtype=torch.float64)
    full, _ = layer(x)
    layer.mask_cells([wide - 1])
    masked, (h, c) = layer(x)
    k = m // wide
    assert torch.equal(masked[..., m - k:], torch.zeros(T, B, k, dtype=torch.float64))
    assert torch.equal(h[:, m - k:], torch.zeros(B, k, dtype=torch.float64))
    torch.testing.assert_close(masked[..., : m - k], full[..., : m - k], rtol=0, atol=1e-12)


def test_lstm_backward_with_frozen_recurrent_weights():
    torch.manual_seed(16)
    layer = ParallelCellRNNLayer(3, 6, wide=3).double()
    layer.weight_hh.requires_grad_(False)
    x = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    layer(x)[0].sum().backward()
    layer.force_autograd = True
    x_ref = x.detach().clone().requires_grad_(True)
    layer(x_ref)[0].sum().backward()
    assert layer.weight_hh.grad is None
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=0, atol=1e-12)


def test_slice_index_buffers_are_not_saved():
    """The slice reading's index buffers are rebuilt from the sizes: checkpoints hold the weights only."""
    layer = ParallelCellRNNLayer(7, 6, wide=3, cell_input="slice")
    assert set(layer.state_dict()) == {"weight_ih", "weight_hh", "bias"}
    assert torch.equal(layer.input_cell, torch.tensor([0, 0, 0, 1, 1, 2, 2]))
