"""MC-RNN layer (Xu et al. 2019, Eq. 1-6) against a literal loop-by-loop reference, plus the
m_t^k table, the k = 1 reduction, incremental/reorder behaviour and option errors; and its
DropConnect (AWD-LSTM weight drop): one mask per forward call, on W_hh only by default (on the W_j
in ``weight_space="gates"``), only in training, checked against the same reference run with the
masked weight."""
import copy

import pytest
import torch
import torch.nn.functional as F

from fairseq_local.modules.multi_channel_rnn import MultiChannelRNNLayer, channel_in_degree

DT = torch.float64


def _randomise(layer, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.rand(p.shape, generator=g, dtype=DT) * 0.8 - 0.4)
    return layer


def reference(layer, xs, states=False):
    """Eq. 1-6 written plainly for ONE unpadded sentence xs[T, I]; returns outputs [T, H] and
    channel weights [T, k] (with ``states``, also every channel's h and c: ``h[k][t]``, 1-based).
    Loops over t, channels and j; 1-based t as in the paper."""
    K, H = layer.channels, layer.hidden_size
    n = K + 1
    W = [layer.block_weight[j] for j in range(K)]  # W[j-1] = W_j
    h = {k: {} for k in range(1, K + 1)}  # h[k][t]
    c = {k: {} for k in range(1, K + 1)}
    zero = torch.zeros(H, dtype=DT)
    outs, alphas = [], []
    for t in range(1, xs.size(0) + 1):
        x = xs[t - 1]
        hk_t = []
        for k in range(1, K + 1):
            m = (t - k - 1) % (n - 1) + 1  # Eq. 1
            s = sum(W[j - 1] @ h[k].get(t - j, zero) for j in range(1, m + 1)) / m  # Eq. 2
            gi = layer.weight_ih @ x + layer.bias_ih
            if layer.weight_space == "hidden":
                gh = layer.weight_hh @ s + layer.bias_hh
            else:  # W_j already in gate space; the GRU interpolates with the block mean
                gh = s + layer.bias_hh
                s = sum(h[k].get(t - j, zero) for j in range(1, m + 1)) / m
            if layer.cell == "lstm":  # Eq. 3 with an LSTM cell
                i, f, g, o = gi.add(gh).chunk(4)
                if layer.cell_memory == "chain":
                    c_prev = c[k].get(t - 1, zero)
                else:
                    c_prev = sum(c[k].get(t - j, zero) for j in range(1, m + 1)) / m
                c[k][t] = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
                h[k][t] = torch.sigmoid(o) * torch.tanh(c[k][t])
            elif layer.cell == "gru":
                ir, iz, inn = gi.chunk(3)
                hr, hz, hn = gh.chunk(3)
                r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
                h[k][t] = (1 - z) * torch.tanh(inn + r * hn) + z * s
            else:
                h[k][t] = torch.tanh(gi + gh)
            hk_t.append(h[k][t])
        if K == 1:  # softmax over one channel: the layer keeps no V, r
            a = torch.ones(1, dtype=DT)
        else:
            V = torch.cat([layer.att_v_h, layer.att_v_x], dim=1)  # V [h; x]
            e = torch.stack([layer.att_r @ torch.tanh(V @ torch.cat([hk, x])) for hk in hk_t])  # Eq. 6
            a = torch.exp(e) / torch.exp(e).sum()  # Eq. 5
        outs.append(sum(a[k] * hk_t[k] for k in range(K)))  # Eq. 4
        alphas.append(a)
    if states:
        return torch.stack(outs), torch.stack(alphas), h, c
    return torch.stack(outs), torch.stack(alphas)


def test_in_degree_table_n4():
    # hand-written from Eq. 1 with n = 4 (k = 3 channels), t = 1..7; rows are channels 1..3
    table = torch.tensor([[3, 1, 2, 3, 1, 2, 3],
                          [2, 3, 1, 2, 3, 1, 2],
                          [1, 2, 3, 1, 2, 3, 1]])
    got = channel_in_degree(torch.arange(1, 8), 3).t()
    assert torch.equal(got, table)
    # Figure 2: at the step where channels 1/2/3 see 4/3/2-word patterns, m = 3/2/1
    assert channel_in_degree(torch.tensor([4]), 3).tolist() == [[3, 2, 1]]


@pytest.mark.parametrize("cell,k,memory,space", [
    ("lstm", 1, "chain", "hidden"), ("lstm", 2, "chain", "hidden"), ("lstm", 3, "chain", "hidden"),
    ("lstm", 4, "block_mean", "hidden"), ("lstm", 3, "block_mean", "hidden"), ("gru", 3, "chain", "hidden"),
    ("rnn", 2, "chain", "hidden"), ("lstm", 3, "chain", "gates"), ("gru", 2, "chain", "gates"),
    ("rnn", 4, "chain", "gates")])
def test_fast_layer_equals_literal_reference(cell, k, memory, space):
    layer = _randomise(MultiChannelRNNLayer(3, 4, k, cell=cell, cell_memory=memory, weight_space=space).to(DT), seed=k)
    layer.record_attention = True
    lengths = [7, 5, 2, 6]
    T, B = max(lengths), len(lengths)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(T, B, 3, generator=g, dtype=DT)
    mask = torch.ones(T, B, dtype=torch.bool)
    for b, n in enumerate(lengths):
        mask[T - n:, b] = False  # left padding, as fairseq sources
    out, state = layer(x, None, mask)
    for b, n in enumerate(lengths):
        ref, ref_alpha = reference(layer, x[T - n:, b])
        torch.testing.assert_close(out[T - n:, b], ref)
        torch.testing.assert_close(layer.last_attention[T - n:, b], ref_alpha)
        assert out[:T - n, b].abs().max() == 0 if n < T else True
    assert state[-1].tolist() == lengths  # positions consumed per sentence


@pytest.mark.parametrize("space", ["hidden", "gates"])
def test_k1_reduces_to_rnn_with_recurrent_input_w1(space):
    """k = 1: one channel, m = 1, attention weight 1: an LSTM whose recurrent input is W_1 h_{t-1}
    (hidden space: recurrent matrix W_hh W_1; gate space: W_1 itself)."""
    layer = _randomise(MultiChannelRNNLayer(3, 5, 1, cell="lstm", weight_space=space).to(DT))
    cell = torch.nn.LSTMCell(3, 5).to(DT)
    with torch.no_grad():
        cell.weight_ih.copy_(layer.weight_ih)
        cell.bias_ih.copy_(layer.bias_ih)
        w1 = layer.block_weight[0]
        cell.weight_hh.copy_(layer.weight_hh @ w1 if space == "hidden" else w1)
        cell.bias_hh.copy_(layer.bias_hh)
    x = torch.randn(6, 2, 3, dtype=DT)
    out, _ = layer(x)
    h = c = torch.zeros(2, 5, dtype=DT)
    for t in range(6):
        h, c = cell(x[t], (h, c))
        torch.testing.assert_close(out[t], h)


@pytest.mark.parametrize("cell,space", [("lstm", "hidden"), ("gru", "hidden"), ("lstm", "gates")])
def test_incremental_and_reorder(cell, space):
    layer = _randomise(MultiChannelRNNLayer(3, 4, 3, cell=cell, cell_memory="block_mean", weight_space=space).to(DT))
    x = torch.randn(8, 3, 3, dtype=DT)
    h0 = torch.randn(3, 4, dtype=DT)
    full, _ = layer(x, layer.state_from_hidden(h0))
    state = layer.state_from_hidden(h0)
    steps = []
    for t in range(8):
        o, state = layer(x[t:t + 1], state)
        steps.append(o)
        assert state[0].shape == (3, 3, 3, 4)  # last n-1 hidden states of every channel
    torch.testing.assert_close(torch.cat(steps), full)
    state = layer.state_from_hidden(h0)
    _, state = layer(x[:4], state)
    order = torch.tensor([1, 1, 0])
    state = layer.reorder_state(state, order)
    rest, _ = layer(x[4:].index_select(1, order), state)
    full_r, _ = layer(x.index_select(1, order), layer.state_from_hidden(h0.index_select(0, order)))
    torch.testing.assert_close(rest, full_r[4:])


@pytest.mark.parametrize("space", ["hidden", "gates"])
def test_no_grad_calls_see_every_parameter_update(space):
    """Validation and beam search run without gradients between optimizer steps; the next call must
    see every update, including fairseq's optimizers' in-place updates of ``p.data`` (which do not
    bump the parameter's version counter) and ``load_state_dict``."""
    layer = _randomise(MultiChannelRNNLayer(3, 4, 3, weight_space=space).to(DT))
    x = torch.randn(6, 2, 3, dtype=DT)
    with torch.no_grad():
        before, _ = layer(x)
        again, _ = layer(x)
    torch.testing.assert_close(again, before)
    layer.block_weight.data.mul_(-1.5)  # what fairseq's Adam does: p.data.addcdiv_(...)
    with torch.no_grad():
        after, _ = layer(x)
    assert (after - before).abs().max() > 1e-3
    torch.testing.assert_close(after, layer(x)[0].detach())  # the grad-enabled path agrees
    state = {k: v.clone() for k, v in layer.state_dict().items()}
    state["block_weight"].mul_(0.5)
    layer.load_state_dict(state)
    with torch.no_grad():
        loaded, _ = layer(x)
    torch.testing.assert_close(loaded, layer(x)[0].detach())


def test_input_proj_from_caller_equals_own_projection():
    """``input_proj`` (what the decoder's StepwiseLinear passes) gives the layer's own result."""
    layer = _randomise(MultiChannelRNNLayer(3, 4, 2).to(DT))
    x = torch.randn(5, 2, 3, dtype=DT)
    w, b = layer.input_projection_parameters()
    torch.testing.assert_close(layer(x, input_proj=x @ w.t() + b)[0], layer(x)[0])


@pytest.mark.parametrize("space", ["hidden", "gates"])
def test_gradients_reach_every_parameter(space):
    layer = MultiChannelRNNLayer(3, 4, 2, dropconnect=0.3, weight_space=space).to(DT)
    out, _ = layer(torch.randn(5, 2, 3, dtype=DT))
    out.sum().backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("kwargs,argument", [({"channels": 0}, "channels"), ({"channels": -2}, "channels"),
                                             ({"cell": "lstn"}, "cell"), ({"cell_memory": "avg"}, "cell_memory"),
                                             ({"dropconnect": 1.0}, "dropconnect"),
                                             ({"weight_space": "gate"}, "weight_space"),
                                             ({"block_init": "eye"}, "block_init"),
                                             ({"init_state": "last"}, "init_state")])
def test_impossible_arguments_name_the_argument_not_a_flag(kwargs, argument):
    """The layer speaks of its own arguments; the flags' messages are the model config's checks."""
    args = dict(input_size=3, hidden_size=4, channels=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=rf"^{argument} ") as err:
        MultiChannelRNNLayer(**args)
    assert "--" not in str(err.value)


def test_lm_decoder_with_mc_layers_carries_bptt_state():
    from fairseq.data import Dictionary

    from fairseq_local.modules.recurrent_lm_decoder import RecurrentLMDecoder
    from fairseq_local.modules.recurrent_seq2seq import Embedding
    from fairseq_local.tasks.stateful_language_modeling import BPTTState

    torch.manual_seed(0)
    d = Dictionary()
    for i in range(12):
        d.add_symbol(f"w{i}")
    dec = RecurrentLMDecoder(d, Embedding(len(d), 4, d.pad()).to(DT),
                             lambda i, inp, hid: MultiChannelRNNLayer(inp, hid, 3).to(DT), 2, 5,
                             share_input_output_embed=True).eval()
    toks = torch.randint(d.nspecial, len(d), (2, 9))
    full, _ = dec(toks)
    carry = BPTTState()  # m_t^k keeps counting across windows: positions live in the state
    parts = [dec(toks[:, a:b], bptt_state=carry)[0] for a, b in ((0, 4), (4, 5), (5, 9))]
    torch.testing.assert_close(torch.cat(parts, 1), full)


@pytest.mark.parametrize("space", ["hidden", "gates"])
def test_init_state_all_fills_every_lag_slot_with_h0(space):
    """``init_state="all"``: h_{0}, h_{-1}, ... are all h0, so with identity W_j every channel's
    first temporal input is h0 whatever m_1^k; ``"first"`` averages h0 with zeros (Eq. 2)."""
    H, K = 4, 3
    layers = {mode: _randomise(MultiChannelRNNLayer(3, H, K, weight_space=space, init_state=mode).to(DT))
              for mode in ("first", "all")}
    h0 = torch.rand(2, H, dtype=DT)
    full = layers["all"].state_from_hidden(h0)[0]
    first = layers["first"].state_from_hidden(h0)[0]
    assert torch.equal(full, h0[:, None, None, :].expand(2, K, K, H))
    assert torch.equal(first[:, :, 0], h0[:, None, :].expand(2, K, H))
    assert not bool(first[:, :, 1:].any())
    x = torch.rand(1, 2, 3, dtype=DT)
    layers["first"].load_state_dict(layers["all"].state_dict())
    out_all, _ = layers["all"](x, layers["all"].state_from_hidden(h0))
    out_first, _ = layers["first"](x, layers["first"].state_from_hidden(h0))
    assert not torch.allclose(out_all, out_first)  # m_1^k > 1 for two of the three channels


def test_block_init_identity_or_uniform():
    eye = MultiChannelRNNLayer(3, 4, 2).block_weight
    assert torch.equal(eye, torch.eye(4).repeat(2, 1, 1))
    uni = MultiChannelRNNLayer(3, 4, 2, block_init="uniform", init_scale=0.1).block_weight
    assert uni.abs().max() <= 0.1 and not torch.equal(uni, eye) and uni.std() > 0


@pytest.mark.parametrize("sides,enc_mc,dec_mc", [("both", True, True), ("encoder", True, False),
                                                 ("decoder", False, True)])
def test_mc_sides_puts_mc_layers_where_asked(sides, enc_mc, dec_mc):
    from types import SimpleNamespace

    from fairseq.data import Dictionary
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    from fairseq_local.modules.torch_rnn_layer import TorchRNNLayer

    d = Dictionary()
    args = SimpleNamespace(mc_sides=sides, encoder_embed_dim=8, decoder_embed_dim=8, encoder_hidden_size=8,
                           decoder_hidden_size=8)
    ARCH_CONFIG_REGISTRY["mc_rnn_iwslt_de_en_3"](args)
    model = ARCH_MODEL_REGISTRY["mc_rnn_iwslt_de_en_3"].build_model(args, SimpleNamespace(
        source_dictionary=d, target_dictionary=d))
    kind = {True: MultiChannelRNNLayer, False: TorchRNNLayer}
    assert all(isinstance(l, kind[enc_mc]) for l in list(model.encoder.layers) + list(model.encoder.backward_layers))
    assert all(isinstance(l, kind[dec_mc]) for l in model.decoder.layers)


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


# ---- layer construction, state layout and the exact coefficients ----------------------------------
def test_default_initialisation_is_uniform_within_0_1():
    torch.manual_seed(0)
    layer = MultiChannelRNNLayer(20, 30, 3)
    for name, p in layer.named_parameters():
        if name == "block_weight":  # identity init: s starts as the block mean
            assert torch.equal(p, torch.eye(30).repeat(3, 1, 1))
            continue
        assert p.abs().max() <= 0.1 and p.abs().max() > 0.09 and p.min() < 0 < p.max(), name


@pytest.mark.parametrize("space", ["hidden", "gates"])
def test_parameters_of_each_configuration(space):
    """k = 1 has no attention (alpha = 1 whatever e); gate space has no separate W_hh."""
    names = {"weight_ih", "bias_ih", "bias_hh", "block_weight"} | ({"weight_hh"} if space == "hidden" else set())
    one = MultiChannelRNNLayer(3, 4, 1, weight_space=space)
    assert {n for n, _ in one.named_parameters()} == names
    assert one.att_v_h is None and one.att_v_x is None and one.att_r is None
    two = MultiChannelRNNLayer(3, 4, 2, weight_space=space)
    assert {n for n, _ in two.named_parameters()} == names | {"att_v_h", "att_v_x", "att_r"}
    if space == "gates":
        assert one.weight_hh is None and two.weight_hh is None


def test_uniform_block_init_runs_the_equations():
    """block_init="uniform": one random H x H matrix per distance j, used as drawn by Eq. 2."""
    torch.manual_seed(0)
    layer = MultiChannelRNNLayer(3, 4, 3, block_init="uniform", init_scale=0.3).to(DT)
    w = layer.block_weight
    assert w.shape == (3, 4, 4) and not torch.equal(w[0], w[1]) and w.abs().max() <= 0.3
    x = torch.rand(6, 1, 3, dtype=DT, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(layer(x)[0][:, 0], reference(layer, x[:, 0])[0])


def test_attention_is_recorded_only_when_asked():
    layer = _randomise(MultiChannelRNNLayer(3, 4, 2).to(DT))
    assert layer.record_attention is False and layer.last_attention is None
    x = torch.rand(4, 1, 3, dtype=DT)
    layer(x)
    assert layer.last_attention is None
    layer.record_attention = True
    layer(x)
    torch.testing.assert_close(layer.last_attention[:, 0], reference(layer, x[:, 0])[1])


@pytest.mark.parametrize("cell,memory,slots", [("lstm", "chain", 1), ("lstm", "block_mean", 3), ("gru", "chain", 0),
                                               ("rnn", "chain", 0)])
def test_state_layout(cell, memory, slots):
    """hist[B, k, n-1, H]; LSTM memory cells cmem[B, k, 1 (chain) or n-1 (block_mean), H];
    pos[B], an integer count of the tokens consumed."""
    layer = _randomise(MultiChannelRNNLayer(3, 4, 3, cell=cell, cell_memory=memory).to(DT))
    state = layer.zero_state(2, torch.zeros(1, dtype=DT))
    assert len(state) == (3 if cell == "lstm" else 2)
    assert torch.equal(state[0], torch.zeros(2, 3, 3, 4, dtype=DT))
    if cell == "lstm":
        assert torch.equal(state[1], torch.zeros(2, 3, slots, 4, dtype=DT))
    assert state[-1].dtype == torch.long and state[-1].tolist() == [0, 0]
    x = torch.rand(5, 2, 3, dtype=DT)
    out, new = layer(x, state)
    assert [s.shape for s in new] == [s.shape for s in state]
    assert new[-1].dtype == torch.long and new[-1].tolist() == [5, 5]
    # slot j-1 holds h_{t-j} (and the memory cells c_{t-j}) of every channel after the last step
    for b in range(2):
        _, _, h, c = reference(layer, x[:, b], states=True)
        for k in range(3):
            for j in range(1, 4):
                torch.testing.assert_close(new[0][b, k, j - 1], h[k + 1][5 - j + 1])
                if j <= slots and cell == "lstm":
                    torch.testing.assert_close(new[1][b, k, j - 1], c[k + 1][5 - j + 1])


@pytest.mark.parametrize("cell,memory", [("lstm", "chain"), ("lstm", "block_mean"), ("gru", "chain")])
def test_every_tensor_stays_on_the_input_device(cell, memory):
    """Positions, m_t^k, the coefficients and the state are made on the input's device (checked
    with PyTorch's meta device, which refuses to mix with CPU tensors as CUDA does)."""
    layer = MultiChannelRNNLayer(3, 4, 3, cell=cell, cell_memory=memory).to("meta")
    x = torch.empty(5, 2, 3, device="meta")
    out, state = layer(x)
    out, state = layer(x, state)
    assert out.device.type == "meta" and all(s.device.type == "meta" for s in state)
    assert state[-1].dtype == torch.long
    assert layer.coefficients(torch.arange(1, 4, device="meta"), torch.float32).device.type == "meta"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_coefficients_are_exactly_one_over_m(dtype):
    """coef[t, k, j] = 1/m_t^k for j <= m_t^k, else 0, with m from Eq. 1 (n = 4), in the asked dtype."""
    layer = MultiChannelRNNLayer(3, 4, 3)
    want = torch.zeros(7, 3, 3, dtype=dtype)
    for t in range(1, 8):
        for k in range(1, 4):
            m = (t - k - 1) % 3 + 1
            want[t - 1, k - 1, :m] = torch.tensor(1.0, dtype=dtype) / m
    got = layer.coefficients(torch.arange(1, 8), dtype)
    assert got.dtype == dtype and torch.equal(got, want)


@pytest.mark.parametrize("cell,memory", [("lstm", "chain"), ("lstm", "block_mean"), ("gru", "chain")])
def test_float64_layer_matches_reference_to_rounding(cell, memory):
    """In float64 the layer agrees with the reference to ~1e-15 (the block means are computed in
    the input's precision, not rounded through float32)."""
    layer = _randomise(MultiChannelRNNLayer(3, 4, 3, cell=cell, cell_memory=memory).to(DT), seed=5)
    x = torch.randn(7, 2, 3, dtype=DT, generator=torch.Generator().manual_seed(6))
    mask = torch.zeros(7, 2, dtype=torch.bool)
    mask[:2, 1] = True
    layer.record_attention = True
    out, _ = layer(x, None, mask)
    torch.testing.assert_close(out[:, 0], reference(layer, x[:, 0])[0], rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(out[2:, 1], reference(layer, x[2:, 1])[0], rtol=1e-13, atol=1e-13)
    # padded positions: zero output and zero channel weights
    assert torch.equal(out[:2, 1], torch.zeros(2, 4, dtype=DT))
    assert torch.equal(layer.last_attention[:2, 1], torch.zeros(2, 3, dtype=DT))
    torch.testing.assert_close(layer.last_attention[2:, 1], reference(layer, x[2:, 1])[1], rtol=1e-13, atol=1e-13)


def test_input_proj_from_caller_is_what_the_cell_uses():
    """A caller's ``input_proj`` replaces W_ih x + b_ih: shifting it by d equals shifting b_ih by d."""
    layer = _randomise(MultiChannelRNNLayer(3, 4, 2).to(DT))
    shifted = copy.deepcopy(layer)
    d = torch.linspace(-0.5, 0.5, 16, dtype=DT)
    with torch.no_grad():
        shifted.bias_ih.add_(d)
    x = torch.randn(5, 2, 3, dtype=DT)
    w, b = layer.input_projection_parameters()
    got = layer(x, input_proj=x @ w.t() + b + d)[0]
    torch.testing.assert_close(got, shifted(x)[0])
    assert (got - layer(x)[0]).abs().max() > 1e-3


@pytest.mark.parametrize("kwargs,message", [
    ({"cell": "lstn"}, "cell must be one of lstm, gru, rnn (got 'lstn')"),
    ({"cell_memory": "avg"}, "cell_memory must be one of chain, block_mean (got 'avg')"),
    ({"weight_space": "gate"}, "weight_space must be one of hidden, gates (got 'gate')"),
    ({"block_init": "eye"}, "block_init must be one of identity, uniform (got 'eye')"),
    ({"init_state": "last"}, "init_state must be one of first, all (got 'last')"),
    ({"channels": 0}, "channels must be an integer >= 1 (got 0)"),
    ({"dropconnect": -0.1}, "dropconnect must be in [0, 1) (got -0.1)")])
def test_option_errors_list_the_choices(kwargs, message):
    args = dict(input_size=3, hidden_size=4, channels=2)
    args.update(kwargs)
    with pytest.raises(ValueError) as e:
        MultiChannelRNNLayer(**args)
    assert str(e.value) == message


def test_chain_memory_continues_from_the_previous_cell_exactly():
    """cell_memory="chain": c_t^k = sigmoid(f) c_{t-1}^k + sigmoid(i) tanh(g), with c_{t-1}^k the
    channel's last memory cell itself (not a block mean of it), bit for bit.  With W_ih = W_hh = 0
    the gates are exactly b_ih + b_hh, so the expected value is computed in the same order."""
    K, H, B = 3, 16, 4
    layer = _randomise(MultiChannelRNNLayer(3, H, K).to(DT), seed=7)
    with torch.no_grad():
        layer.weight_ih.zero_()
        layer.weight_hh.zero_()
    g = torch.Generator().manual_seed(8)
    hist = torch.randn(B, K, K, H, generator=g, dtype=DT)
    c0 = torch.randn(B, K, 1, H, generator=g, dtype=DT) * 3
    pos = torch.tensor([0, 1, 2, 5])  # every channel meets blocks of m = 1, 2 and 3
    _, (_, cmem, _) = layer(torch.randn(1, B, 3, generator=g, dtype=DT), (hist, c0, pos))
    i, f, gg, _ = (layer.bias_ih + layer.bias_hh).chunk(4)
    want = torch.sigmoid(f) * c0[:, :, 0] + torch.sigmoid(i) * torch.tanh(gg)
    assert torch.equal(cmem[:, :, 0], want)


def test_one_channel_records_unit_attention_for_every_step():
    layer = _randomise(MultiChannelRNNLayer(3, 4, 1).to(DT))
    layer.record_attention = True
    layer(torch.rand(5, 2, 3, dtype=DT))
    assert torch.equal(layer.last_attention, torch.ones(5, 2, 1, dtype=DT))
