"""Parallel-cell recurrent layer: equivalence with torch RNNs, the fused kernel == the step (values
and gradients; padded, masked, float64 and float32) and which calls take which, checkpoints of the
weight layout, masking, padding, parameter counts (integers in every case), the state built from an
encoder's hidden output, and the bidirectional wrapper (sizes, given states, no padding mask, beam
reordering of both directions) with its size check and suggestion."""
import pytest
import torch
from torch import nn

from fairseq_local.modules import parallel_cell_rnn as pcr
from fairseq_local.modules.parallel_cell_rnn import (
    BidirectionalLayer,
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


@pytest.mark.parametrize("cell_input,I", [("full", 4), ("slice", 4), ("slice", 5)])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_padding_keeps_state_and_incremental_equals_full(cell, cell_input, I):
    torch.manual_seed(3)
    T, B, m, n = 6, 3, 6, 2
    layer = ParallelCellRNNLayer(I, m, wide=n, cell=cell, cell_input=cell_input).double()
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
    with pytest.raises(ValueError, match=r"^--cell-input 'half': expected 'full' or 'slice'$"):
        ParallelCellRNNLayer(4, 8, wide=2, cell_input="half")
    with pytest.raises(ValueError, match=r"^--cell-input slice: a layer input of 2 units cannot be split among "
                                         r"wide=3 cells \(each cell needs at least one input unit\)$"):
        ParallelCellRNNLayer(2, 6, wide=3, cell_input="slice")


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


# ------------------------------------------------------------------ the slice reading (--cell-input slice)
@pytest.mark.parametrize("I", [9, 8, 3])  # slices of 3; of 3, 3, 2 (uneven); of 1
@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_slice_reading_equals_separate_rnns_on_input_slices(cell, I):
    """Cell j is a torch RNN of k units that reads only the j-th slice of the input (float64):
    outputs, final states, and the gradients of the input, of each cell's input and recurrent
    weights (the hand-written LSTM backward included)."""
    torch.manual_seed(5)
    T, B, n, k = 5, 3, 3, 4
    cols = torch.arange(I).tensor_split(n)  # torch's split of I units into n consecutive slices
    refs = [TORCH_RNN[cell](len(c), k).double() for c in cols]
    layer = ParallelCellRNNLayer(I, n * k, wide=n, cell=cell, cell_input="slice").double()
    for j, r in enumerate(refs):
        layer.load_cell_from_torch(j, r)
    x = torch.randn(T, B, I, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(B, n * k, dtype=torch.float64)
    c0 = torch.randn(B, n * k, dtype=torch.float64)
    w_out = torch.randn(T, B, n * k, dtype=torch.float64)
    out, state = layer(x, (h0, c0) if cell == "lstm" else (h0,))
    (out * w_out).sum().backward()
    x_ref = x.detach().clone().requires_grad_(True)
    ref_outs, ref_h = [], []
    for j, (r, c) in enumerate(zip(refs, cols)):
        sl = slice(j * k, (j + 1) * k)
        o, st = r(x_ref[:, :, c], _torch_state(cell, h0[None, :, sl], c0[None, :, sl]))
        ref_outs.append(o)
        ref_h.append((st[0] if cell == "lstm" else st)[0])
    ref_out = torch.cat(ref_outs, -1)
    (ref_out * w_out).sum().backward()
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-12)
    torch.testing.assert_close(state[0], torch.cat(ref_h, -1), rtol=0, atol=1e-12)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=0, atol=1e-12)
    for j, (r, c) in enumerate(zip(refs, cols)):
        torch.testing.assert_close(layer.weight_ih.grad[:, c], r.weight_ih_l0.grad, rtol=0, atol=1e-12)
        torch.testing.assert_close(layer.weight_hh.grad[j], r.weight_hh_l0.grad.t(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("I", [6, 7])
def test_slice_input_projection_parameters_are_block_diagonal(I):
    """The dense ``[n*G*k, I]`` weight a decoder's StepwiseLinear uses is block-diagonal, gives the
    layer's own projection, and passes gradients only to the cells' own input weights."""
    torch.manual_seed(6)
    n, k, T, B = 3, 2, 4, 2
    layer = ParallelCellRNNLayer(I, n * k, wide=n, cell_input="slice").double()
    dense, bias = layer.input_projection_parameters()
    cols = torch.arange(I).tensor_split(n)
    for j in range(n):
        for jj, c in enumerate(cols):
            block = dense[j * 4 * k:(j + 1) * 4 * k, c]
            assert torch.equal(block, layer.weight_ih[:, c]) if jj == j else not block.any()
    x = torch.randn(T, B, I, dtype=torch.float64)
    own, _ = layer(x)
    g_own = torch.autograd.grad(own.sum(), layer.weight_ih)[0]
    given, _ = layer(x, input_proj=torch.nn.functional.linear(x, *layer.input_projection_parameters()))
    g_given = torch.autograd.grad(given.sum(), layer.weight_ih)[0]
    torch.testing.assert_close(given, own, rtol=0, atol=1e-12)
    torch.testing.assert_close(g_given, g_own, rtol=0, atol=1e-12)


@pytest.mark.parametrize("wide", [1, 2, 3, 5, 10])
def test_parameter_counts_of_both_readings_follow_the_papers_formula(wide):
    """LSTM with I = m (the paper's layers above the embeddings, and the first one with m-d
    embeddings): slice is Section 2.2's 8m^2/n + 4m, full is 4m^2 + 4m^2/n + 4m; for any input
    size and cell, count_parameters is the number of parameters built."""
    m = 30
    for cell_input, formula in (("slice", 8 * m * m // wide + 4 * m), ("full", 4 * m * m + 4 * m * m // wide + 4 * m)):
        layer = ParallelCellRNNLayer(m, m, wide=wide, cell_input=cell_input)
        assert sum(p.numel() for p in layer.parameters()) == formula == ParallelCellRNNLayer.count_parameters(
            m, m, wide, cell_input=cell_input)
        for cell in ("lstm", "gru", "rnn"):
            for I in (wide, 7 * wide + 1, 41):
                built = ParallelCellRNNLayer(I, m, wide=wide, cell=cell, cell_input=cell_input)
                assert sum(p.numel() for p in built.parameters()) == ParallelCellRNNLayer.count_parameters(
                    I, m, wide, cell, cell_input)


# ------------------------------------------------------------------ models: Table 2 rows, incremental decoding
def _dictionary(n):
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(n - d.nspecial):
        d.add_symbol(f"w{i}")
    return d


class _Task:
    def __init__(self, src, tgt=None):
        self.source_dictionary, self.target_dictionary = src, tgt or src


def _lm(arch, task, **overrides):
    import argparse

    from fairseq.models import ARCH_CONFIG_REGISTRY

    import fairseq_local  # noqa: F401
    from fairseq_local.models.parallel_lstm_lm import ParallelLSTMLanguageModel

    args = argparse.Namespace(**overrides)
    ARCH_CONFIG_REGISTRY[arch](args)
    return ParallelLSTMLanguageModel.build_model(args, task)


# Table 2, "Recurrent Parameters Size" (the paper prints 3.4m and 2.4m for wide 10 and 15, where
# 2 x 4 x 1950^2 / n is 3.0M and 2.0M)
PAPER_TABLE2 = {1: 30.4, 2: 15.2, 3: 10.1, 4: 7.6, 5: 6.1, 10: 3.4, 15: 2.4}
OURS_TABLE2 = {1: 30.4, 2: 15.2, 3: 10.1, 4: 7.6, 5: 6.1, 10: 3.0, 15: 2.0}


@pytest.mark.parametrize("wide", sorted(PAPER_TABLE2))
def test_table2_archs_read_input_slices_and_count_as_the_paper(wide):
    """Every Table 2 layer (1950 inputs, 1950 units; 1952 for wide 4) has Section 2.2's 8m^2/n + 4m
    parameters, and the two layers' recurrent weights are the paper's column."""
    with torch.device("meta"):
        model = _lm(f"parallel_lstm_lm_1950h_wide{wide}", _Task(_dictionary(10000)))
    m = 1952 if wide == 4 else 1950
    layers = model.decoder.layers
    assert len(layers) == 2 and all(lay.cell_input == "slice" and lay.wide == wide for lay in layers)
    for lay in layers:
        assert lay.input_size == m and sum(p.numel() for p in lay.parameters()) == 8 * m * m // wide + 4 * m
    recurrent = sum(lay.weight_hh.numel() for lay in layers)
    assert round(recurrent / 1e6, 1) == OURS_TABLE2[wide]
    if wide <= 5:
        assert OURS_TABLE2[wide] == PAPER_TABLE2[wide]


def test_section41_arch_reads_input_slices():
    with torch.device("meta"):
        model = _lm("parallel_lstm_lm_420h_wide3_1layer", _Task(_dictionary(10000)))
    (layer,) = model.decoder.layers
    assert layer.cell_input == "slice" and sum(p.numel() for p in layer.parameters()) == 8 * 420 * 420 // 3 + 4 * 420


def test_slice_language_model_incremental_equals_full_pass():
    torch.manual_seed(7)
    d = _dictionary(20)
    model = _lm("parallel_lstm_lm_1950h_wide3", _Task(d), decoder_embed_dim=8, decoder_hidden_size=9,
                dropout=0.0).double().eval()
    assert all(lay.cell_input == "slice" for lay in model.decoder.layers)
    tokens = torch.randint(d.nspecial, len(d), (3, 6))
    full = model.decoder(tokens)[0]
    state = {}
    steps = [model.decoder(tokens[:, : t + 1], incremental_state=state)[0][:, -1] for t in range(tokens.size(1))]
    torch.testing.assert_close(torch.stack(steps, 1), full, rtol=0, atol=1e-10)


def test_slice_translation_model_incremental_equals_full_pass():
    """parallel_lstm with --cell-input slice (uneven slices: 7-d embeddings, the first decoder layer
    reads [embedding; context] of 7 + 12): the training-mode full pass (input projections through
    StepwiseLinear with the block-diagonal weight) equals step-by-step decoding without gradients."""
    import argparse

    from fairseq.models import ARCH_CONFIG_REGISTRY

    from fairseq_local.models.parallel_lstm import ParallelLSTMModel

    torch.manual_seed(8)
    src_d, tgt_d = _dictionary(17), _dictionary(13)
    args = argparse.Namespace(cell_input="slice", encoder_embed_dim=7, decoder_embed_dim=7, encoder_hidden_size=12,
                              decoder_hidden_size=12, attention_dim=8, encoder_layers=2, decoder_layers=2, dropout=0.0)
    ARCH_CONFIG_REGISTRY["parallel_lstm_zh_en_wide3"](args)
    model = ParallelLSTMModel.build_model(args, _Task(src_d, tgt_d)).double()
    layers = list(model.decoder.layers) + [lay for lay in model.encoder.layers if hasattr(lay, "cell_input")]
    assert layers and all(lay.cell_input == "slice" for lay in layers)
    assert model.decoder.layers[0].input_size == 19
    src = torch.randint(src_d.nspecial, len(src_d), (3, 5))
    src[0, :2] = src_d.pad()
    lengths = src.ne(src_d.pad()).sum(1)
    tgt = torch.randint(tgt_d.nspecial, len(tgt_d), (3, 6))
    model.train()
    full = model(src, lengths, tgt)[0]
    full.sum().backward()  # the StepwiseLinear path carries gradients to every input weight
    assert all(lay.weight_ih.grad is not None and lay.weight_ih.grad.abs().sum() > 0 for lay in model.decoder.layers)
    model.eval()
    with torch.no_grad():
        enc, state = model.encoder(src, lengths), {}
        steps = [model.decoder(tgt[:, : t + 1], enc, incremental_state=state)[0][:, -1] for t in range(tgt.size(1))]
    torch.testing.assert_close(torch.stack(steps, 1), full.detach(), rtol=0, atol=1e-10)


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
    assert layer.masked_cells == ()
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


def test_slice_index_buffers_are_not_saved():
    """The slice reading's index buffers are rebuilt from the sizes: checkpoints hold the weights only."""
    layer = ParallelCellRNNLayer(7, 6, wide=3, cell_input="slice")
    assert set(layer.state_dict()) == {"weight_ih", "weight_hh", "bias"}
    assert torch.equal(layer.input_cell, torch.tensor([0, 0, 0, 1, 1, 2, 2]))


# ------------------------------------------------------------------ the fused kernel == the step
def _pad(T, B, layout):
    """None, or a [T, B] padding mask: column b padded by b positions at the end (right) or the
    start (left); "empty" is left padding with a column that is all padding."""
    if layout == "none":
        return None
    steps = torch.arange(T).unsqueeze(1)
    cut = torch.arange(B).unsqueeze(0)
    pad = steps >= T - cut if layout == "right" else steps < cut
    if layout == "empty":
        pad[:, 1] = True
    return pad


def _counted_kernels(monkeypatch):
    """Count the calls of the library's fused kernels the layer makes."""
    calls = []
    for cell, kernel in list(pcr.FUSED_KERNELS.items()):
        def counted(*args, _kernel=kernel, **kwargs):
            calls.append(args[0].shape)
            return _kernel(*args, **kwargs)
        monkeypatch.setitem(pcr.FUSED_KERNELS, cell, counted)
    return calls


def _run(layer, x, state, pad, monkeypatch, fused):
    """Outputs, final state and the gradients of the input, the initial state and every parameter
    of one call; ``fused=False`` forbids the fused kernel (no layer is narrow enough for it)."""
    layer.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_(True)
    state = tuple(s.clone().requires_grad_(True) for s in state)
    with monkeypatch.context() as m:
        if not fused:
            m.setattr(pcr, "MAX_FUSED_CELLS", 0)
        out, final = layer(x, state, pad)
    w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    ((out * w).sum() + sum(((i + 2) * f.cos()).sum() for i, f in enumerate(final))).backward()
    grads = [x.grad, *(s.grad for s in state), *(p.grad for p in layer.parameters())]
    return [out, *final], grads


@pytest.mark.parametrize("cell_input", ["full", "slice"])
@pytest.mark.parametrize("wide", [1, 3, 5])
@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_fused_kernel_equals_the_step(cell, wide, cell_input, monkeypatch):
    """float64: one library kernel call per cell (torch.lstm / gru / rnn_tanh) gives the step loop's
    outputs, final states and the gradients of the input, the initial state and every parameter,
    unpadded, right- and left-padded (a column all padding included), with masked cells."""
    torch.manual_seed(17)
    T, B, I = 6, 4, 7
    layer = ParallelCellRNNLayer(I, 2 * wide, wide=wide, cell=cell, cell_input=cell_input).double()
    x = torch.randn(T, B, I, dtype=torch.float64)
    state = tuple(torch.randn(B, 2 * wide, dtype=torch.float64) for _ in range(2 if cell == "lstm" else 1))
    calls = _counted_kernels(monkeypatch)
    for masked in ([], [wide - 1]) if wide > 1 else ([],):
        layer.mask_cells(masked)
        for layout in ("none", "right", "left", "empty"):
            pad = _pad(T, B, layout)
            del calls[:]
            fused, fused_grads = _run(layer, x, state, pad, monkeypatch, fused=True)
            assert len(calls) == wide, (layout, masked)  # the library's kernel, once per cell
            step, step_grads = _run(layer, x, state, pad, monkeypatch, fused=False)
            assert len(calls) == wide  # the reference ran no kernel
            for a, b in zip(fused + fused_grads, step + step_grads):
                torch.testing.assert_close(a, b, rtol=0, atol=1e-12, msg=f"{layout}, masked {masked}")
            if pad is not None:  # padding outputs zeros, an all-padding column keeps its state
                assert not fused[0][pad].any()
                for final, given in zip(fused[1:], state if not masked else ()):
                    assert torch.equal(final[1], given[1]) if layout == "empty" else not torch.equal(final[1], given[1])
            if masked:
                assert not fused[0][..., -2:].any() and not fused[1][:, -2:].any()


@pytest.mark.parametrize("layout", ["none", "left"])
def test_fused_kernel_in_float32_equals_the_step(layout, monkeypatch):
    """float32 runs oneDNN's LSTM on CPU (float64 runs torch's own kernel): the same results to
    float32 rounding, in training and in eval mode."""
    torch.manual_seed(18)
    T, B, I = 7, 5, 12
    layer = ParallelCellRNNLayer(I, 12, wide=3)
    x = torch.randn(T, B, I)
    state = (torch.randn(B, 12), torch.randn(B, 12))
    calls = _counted_kernels(monkeypatch)
    for training in (True, False):
        layer.train(training)
        fused, fused_grads = _run(layer, x, state, _pad(T, B, layout), monkeypatch, fused=True)
        step, step_grads = _run(layer, x, state, _pad(T, B, layout), monkeypatch, fused=False)
        for a, b in zip(fused + fused_grads, step + step_grads):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert len(calls) == 2 * 3


def test_the_step_runs_where_the_fused_kernel_does_not_apply(monkeypatch):
    """A caller's input projection (input feeding), one step, masks that are not one run per
    column, layers wider than MAX_FUSED_CELLS and the compiled path run the step."""
    torch.manual_seed(19)
    T, B, I = 5, 3, 4
    calls = _counted_kernels(monkeypatch)
    layer = ParallelCellRNNLayer(I, 6, wide=3).double()
    x = torch.randn(T, B, I, dtype=torch.float64)
    hole = torch.zeros(T, B, dtype=torch.bool)
    hole[2, 1] = True
    proj = torch.nn.functional.linear(x, layer.weight_ih, layer.bias)
    assert layer.fused_runs(x, None, None) == () and len(calls) == 0
    for args in ((x, None, proj), (x[:1], None, None), (x, hole, None)):
        assert layer.fused_runs(*args) is None
        out, _ = layer(args[0], None, args[1], input_proj=args[2])
    assert not out[2, 1].any()  # the hole keeps the state and outputs zeros
    wide = ParallelCellRNNLayer(I, 2 * (pcr.MAX_FUSED_CELLS + 1), wide=pcr.MAX_FUSED_CELLS + 1).double()
    assert wide.fused_runs(x, None, None) is None
    wide(x)
    layer.rnn_impl = "compiled"
    assert layer.fused_runs(x, None, None) is None
    assert len(calls) == 0


@pytest.mark.parametrize("cell,cell_input", [("lstm", "full"), ("lstm", "slice"), ("gru", "slice")])
def test_a_checkpoint_of_the_layout_loads_and_both_paths_give_its_outputs(cell, cell_input, tmp_path, monkeypatch):
    """Checkpoints hold the parallel cells in one layout (``weight_ih`` [n*G*k, I] or [G*k, I],
    ``weight_hh`` [n, k, G*k] with cell j's U^j transposed, ``bias`` [n*G*k], GRU's ``bias_hn``
    [n, 1, k]): a state dict written in it from n torch RNNs, saved and loaded with weights_only,
    gives the torch RNNs' outputs on the fused and on the step path."""
    torch.manual_seed(20)
    T, B, I, n, k = 5, 3, 6, 3, 2
    g = 4 if cell == "lstm" else 3
    widths = (I // n,) * n if cell_input == "slice" else (I,) * n
    refs = [TORCH_RNN[cell](widths[j], k).double() for j in range(n)]
    b_hh = [r.bias_hh_l0.detach() for r in refs]
    hidden_bias = [torch.cat([b[: 2 * k], b.new_zeros(k)]) if cell == "gru" else b for b in b_hh]
    written = {
        "weight_ih": (torch.cat([r.weight_ih_l0.detach() for r in refs]) if cell_input == "full"
                      else torch.cat([r.weight_ih_l0.detach() for r in refs], 1)),
        "weight_hh": torch.stack([r.weight_hh_l0.detach().t() for r in refs]),
        "bias": torch.cat([r.bias_ih_l0.detach() + b for r, b in zip(refs, hidden_bias)]),
    }
    if cell == "gru":
        written["bias_hn"] = torch.stack([b[2 * k:] for b in b_hh]).unsqueeze(1)
    torch.save(written, tmp_path / "layer.pt")
    layer = ParallelCellRNNLayer(I, n * k, wide=n, cell=cell, cell_input=cell_input).double()
    assert {name: tuple(t.shape) for name, t in layer.state_dict().items()} == {
        name: tuple(t.shape) for name, t in written.items()}
    layer.load_state_dict(torch.load(tmp_path / "layer.pt", weights_only=True))
    x = torch.randn(T, B, I, dtype=torch.float64)
    pad = _pad(T, B, "left")
    cols = torch.arange(I).tensor_split(n) if cell_input == "slice" else [torch.arange(I)] * n
    expected = torch.stack([torch.cat([torch.cat([x.new_zeros(b, k), refs[j](x[b:, b:b + 1, cols[j]])[0][:, 0]])
                                       for j in range(n)], -1) for b in range(B)], 1)
    calls = _counted_kernels(monkeypatch)
    with torch.no_grad():
        fused, _ = layer(x, None, pad)
        with monkeypatch.context() as m:
            m.setattr(pcr, "MAX_FUSED_CELLS", 0)
            step, _ = layer(x, None, pad)
    assert len(calls) == n
    torch.testing.assert_close(fused, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(step, expected, rtol=0, atol=1e-12)
