"""genCNN (fairseq_local/modules/gencnn_layers.py): the options, bounds and error messages the
reference tests of tests/test_gencnn.py do not reach, each checked against values written by hand
(activations from their formulas, layer specs, the initialisation bounds of Section 4.1 / fan-in
scaling per parameter, the βCNN switch for L_β = 0 and L_β = 1)."""
import math
from collections import Counter

import pytest
import torch

from fairseq_local.modules import gencnn_kernels
from fairseq_local.modules.gencnn_layers import GatedConvStack, GenCNNBody, get_activation, parse_layers
from test_gencnn import make_decoder, random_tokens, ref_body, ref_unit

E = 5


# ------------------------------------------------------------------------------ activations
def test_activations_follow_their_formulas():
    xs = [-2.5, -0.3, 0.0, 0.7, 3.0]
    refs = {
        "relu": lambda v: v if v > 0 else 0.0,
        "sigmoid": lambda v: 1.0 / (1.0 + math.exp(-v)),
        "tanh": lambda v: (math.exp(v) - math.exp(-v)) / (math.exp(v) + math.exp(-v)),
        "linear": lambda v: v,
    }
    x = torch.tensor(xs, dtype=torch.float64)
    for name, ref in refs.items():
        got = get_activation(name)(x)
        torch.testing.assert_close(got, torch.tensor([ref(v) for v in xs], dtype=torch.float64),
                                   rtol=0, atol=1e-15, msg=name)
    with pytest.raises(ValueError) as err:
        get_activation("gelu")
    assert str(err.value) == ("genCNN: unknown activation 'gelu' "
                              "(choose from ['linear', 'relu', 'sigmoid', 'tanh'])")


def _assert_body_equals_reference(body, lengths, seed):
    """Whole-sentence forward of ``body`` = the literal recursion, for two sentences of each length
    (the second with two leading pads)."""
    g = torch.Generator().manual_seed(seed)
    for T in lengths:
        emb = torch.randn(2, T, E, dtype=torch.float64, generator=g)
        nonpad = torch.ones(2, T, dtype=torch.bool)
        nonpad[1, :2] = False
        emb[1, :2] = 0
        out, _ = body(emb, nonpad)
        for b in range(2):
            torch.testing.assert_close(out[b], ref_body(body, emb[b], nonpad[b]), rtol=0, atol=1e-12,
                                       msg=lambda m: f"T={T}: {m}")


def test_stack_uses_the_activations_it_is_given():
    """activation (Eq. 3-4) and out_activation (the FC layer) as named, against the plain reference
    with the activations written out."""
    torch.manual_seed(0)
    stack = GatedConvStack(8, E, [(3, 3, 2), (2, 2, 1)], 4, activation="tanh", out_activation="linear",
                           init_range=0.4).double()
    X = torch.randn(3, 8, E, dtype=torch.float64)
    got = stack.forward_windows(X)

    class Plain:  # the same parameters, activations by formula
        w, shapes, gated, fc = stack.w, stack.shapes, True, stack.fc

        @staticmethod
        def act(v):
            return (v.exp() - (-v).exp()) / (v.exp() + (-v).exp())

        @staticmethod
        def out_act(v):
            return v

    for m in range(3):
        torch.testing.assert_close(got[m], ref_unit(Plain, list(X[m])), rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------ layer specs
@pytest.mark.parametrize("spec,expected", [
    ("(3,150,150),(3,100,100)", [(3, 150, 150), (3, 100, 100)]),
    ("(3,4,0)", [(3, 4, 0)]),
    ("[(2,0,1)]", [(2, 0, 1)]),
    ("  [(2,0,1), (1,1,0)]", [(2, 0, 1), (1, 1, 0)]),
    ("(1,1,0),(1,0,1)", [(1, 1, 0), (1, 0, 1)]),
])
def test_parse_layers_accepts(spec, expected):
    assert parse_layers(spec) == expected


@pytest.mark.parametrize("spec", ["(0,4,4)", "(3,0,0)", "(3,-1,2)", "(3,2,-1)", "(-1,2,2)", "(3,4)",
                                  "(3,4,5,6)", "", "[]", "abc", "(3,4,3),(2,3)"])
def test_parse_layers_rejects(spec):
    with pytest.raises(ValueError) as err:
        parse_layers(spec)
    assert str(err.value) == (f"genCNN: bad layer spec {spec!r}: expected "
                              "'(kernel, time_flow_maps, time_arrow_maps), ...'")


# --------------------------------------------------------------------- construction checks
def test_bad_options_fail_with_one_clear_line():
    with pytest.raises(ValueError) as err:
        GatedConvStack(10, E, [(3, 4, 3)], 6, tf_input="both")
    assert str(err.value) == "genCNN: tf_input must be 'tf' or 'all', got 'both'"
    with pytest.raises(ValueError) as err:
        GatedConvStack(10, E, [(3, 4, 3)], 6, merge="average")
    assert str(err.value) == "genCNN: merge must be one of ('gating', 'pooling'), got 'average'"


@pytest.mark.parametrize("n_tf", [1, 3])
def test_time_flow_maps_above_time_arrow_only_layer_need_tf_input_all(n_tf):
    with pytest.raises(ValueError) as err:
        GatedConvStack(10, E, [(3, 0, 4), (2, n_tf, 0)], 6, tf_input="tf", name="βCNN")
    assert str(err.value) == ("βCNN: layer 2 has TIME-FLOW maps but nothing TIME-FLOW below to read "
                              "(use tf_input='all')")
    stack = GatedConvStack(10, E, [(3, 0, 4), (2, n_tf, 0)], 6, tf_input="all")
    assert stack.shapes[1].c_tf == 4


def test_time_arrow_only_stack_builds_and_equals_reference():
    """No TIME-FLOW maps anywhere (nothing TIME-FLOW to read is fine when no layer has any)."""
    torch.manual_seed(1)
    stack = GatedConvStack(10, E, [(3, 0, 4), (2, 0, 3)], 6, tf_input="tf", init_range=0.4).double()
    assert [s.c_tf for s in stack.shapes] == [E, 0]
    X = torch.randn(2, 10, E, dtype=torch.float64)
    got = stack.forward_windows(X)
    for m in range(2):
        torch.testing.assert_close(got[m], ref_unit(stack, list(X[m])), rtol=0, atol=1e-12)


def test_window_length_bound():
    """A layer needs at least two convolution locations (one gating pair): kernel 2 on a window of
    3 gives 2 and builds; kernel 3 on 3 gives 1 and is refused with the numbers in the message."""
    stack = GatedConvStack(3, E, [(2, 1, 0)], 4)
    s = stack.shapes[0]
    assert (s.n_conv, s.offset, s.n_pairs, s.n_out) == (2, 0, 1, 1)
    with pytest.raises(ValueError) as err:
        GatedConvStack(3, E, [(3, 1, 0)], 4)
    assert str(err.value) == ("αCNN: window of 3 positions is too short for layer 1 (kernel 3 on 3 "
                              "locations); enlarge L or shrink kernels")
    with pytest.raises(ValueError) as err:
        GatedConvStack(8, E, [(3, 2, 1), (3, 2, 1)], 4, name="βCNN")  # 8 -> 6 -> 3 -> conv 3: 1
    assert str(err.value) == ("βCNN: window of 8 positions is too short for layer 2 (kernel 3 on 3 "
                              "locations); enlarge L or shrink kernels")



@pytest.mark.parametrize("layers,bad", [([(2, 0, 0)], "layer 1 needs at least one feature map, got 0 TIME-FLOW "
                                                      "and 0 TIME-ARROW"),
                                        ([(2, 2, 1), (2, 0, 0)], "layer 2 needs at least one feature map, got 0 "
                                                                 "TIME-FLOW and 0 TIME-ARROW"),
                                        ([(2, -1, 2)], "layer 1 needs at least one feature map, got -1 TIME-FLOW "
                                                       "and 2 TIME-ARROW")])
def test_a_layer_without_feature_maps_is_refused(layers, bad):
    """A layer with no maps (or a negative count) would hand the next layer nothing to read: the
    constructor refuses it as parse_layers refuses the spec."""
    with pytest.raises(ValueError) as err:
        GatedConvStack(6, E, layers, 4)
    assert str(err.value) == "αCNN: " + bad
    with pytest.raises(ValueError, match="bad layer spec"):
        parse_layers(",".join(str(layer) for layer in layers))


# --------------------------------------------------------------------------- initialisation
LAYERS = [(3, 6, 5), (2, 4, 1)]  # window 12 -> conv 10 -> 5 -> conv 4 -> 2


def _fan_in_by_hand(name, c_in):
    """Inputs per output unit of each parameter, by hand for LAYERS on a window of 12 with E = 5
    inputs (tf_input="tf": layer 2's TIME-FLOW maps read the 6 TIME-FLOW maps, its TIME-ARROW maps
    all 11); a bias counts its own last dimension."""
    table = {
        "conv_tf_w0": 3 * E, "gate_tf_w0": 4 * E, "conv_ta_w0": 3 * E, "gate_ta_w0": 4 * E,
        "conv_tf_b0": 6, "gate_tf_b0": 6, "conv_ta_b0": 5, "gate_ta_b0": 5,
        "conv_tf_w1": 2 * 6, "gate_tf_w1": 3 * 6, "conv_ta_w1": 2 * 11, "gate_ta_w1": 3 * 11,
        "conv_tf_b1": 4, "gate_tf_b1": 4, "conv_ta_b1": 1, "gate_ta_b1": 1,
        "fc.weight": 2 * 5, "fc.bias": c_in,
    }
    return table[name]


def test_initialisation_ranges():
    """Section 4.1: uniform in [-0.1, 0.1] (here 0.3); ``init_range <= 0``: uniform in
    +-1/sqrt(fan-in) per parameter.  Each parameter spans its range (many draws)."""
    torch.manual_seed(0)
    big = GatedConvStack(12, E, [(3, 60, 50), (2, 40, 30)], 300, init_range=0.3)
    for name, p in big.named_parameters():
        assert p.abs().max() <= 0.3, name
        if p.numel() >= 500:
            assert p.max() > 0.27 and p.min() < -0.27, name
    for init in (0.0, -1.0):
        torch.manual_seed(0)
        stack = GatedConvStack(12, E, LAYERS, 40, init_range=init)
        for name, p in stack.named_parameters():
            key = name.split(".", 1)[1] if name.startswith("w.") else name
            bound = 1.0 / math.sqrt(_fan_in_by_hand(key, 40))
            assert p.abs().max() <= bound, (name, float(p.abs().max()), bound)
            if p.numel() >= 60:  # enough draws to come near both ends
                assert p.max() > 0.8 * bound and p.min() < -0.8 * bound, (name, bound)


def test_fan_in_bound_of_a_single_input_parameter():
    """A parameter whose last dimension is 1 (one TIME-ARROW map: conv_ta_b is (n_conv, 1)) has
    fan-in 1, so its values span [-1, 1]."""
    torch.manual_seed(0)
    stack = GatedConvStack(80, E, [(3, 0, 1)], 4, init_range=0.0)
    b = stack.w["conv_ta_b0"]
    assert b.shape == (78, 1)
    assert b.abs().max() <= 1.0 and b.max() > 0.85 and b.min() < -0.85


# ------------------------------------------------------------------------- the βCNN switch
def test_beta_needs_layers_and_a_positive_length():
    """L_β = 0 (or no βCNN layers) is the αCNN-only model: no βCNN, history L_α."""
    alpha, beta = [(3, 4, 3), (2, 3, 2)], [(3, 4, 0), (2, 3, 0)]
    torch.manual_seed(0)
    only = GenCNNBody(E, 9, alpha, 7, L_beta=0, beta_layers=beta, init_range=0.4).double()
    assert only.beta is None and not only.use_beta and only.L_beta == 0 and only.history_size == 9
    torch.manual_seed(0)
    none = GenCNNBody(E, 9, alpha, 7, L_beta=6, beta_layers=None, init_range=0.4).double()
    assert none.beta is None and none.L_beta == 0 and none.history_size == 9
    torch.manual_seed(0)
    unset = GenCNNBody(E, 9, alpha, 7, beta_layers=beta, init_range=0.4).double()  # L_β defaults to 0
    assert unset.beta is None and not unset.use_beta and unset.L_beta == 0 and unset.history_size == 9
    torch.manual_seed(0)
    full = GenCNNBody(E, 9, alpha, 7, L_beta=6, beta_layers=beta, init_range=0.4).double()
    assert full.use_beta and full.L_beta == 6 and full.history_size == 15
    emb = torch.randn(2, 14, E, dtype=torch.float64)
    nonpad = torch.ones(2, 14, dtype=torch.bool)
    out, S = only(emb, nonpad)
    assert S.shape == (2, 5, E) and S.abs().max() == 0
    for b in range(2):
        torch.testing.assert_close(out[b], ref_body(only, emb[b], nonpad[b]), rtol=0, atol=1e-12)


def test_beta_of_length_one_equals_reference_and_incremental():
    """L_β = 1: the βCNN reads its own previous summary and one word; whole-sentence forward,
    the literal recursion and step-by-step decoding agree."""
    torch.manual_seed(0)
    body = GenCNNBody(E, 5, [(2, 3, 2), (2, 2, 1)], 6, L_beta=1, beta_layers=[(1, 2, 0)],
                      init_range=0.4).double()
    assert body.use_beta and body.L_beta == 1 and body.history_size == 6
    g = torch.Generator().manual_seed(3)
    for T in (1, 5, 6, 7, 12):
        emb = torch.randn(2, T, E, dtype=torch.float64, generator=g)
        nonpad = torch.ones(2, T, dtype=torch.bool)
        pad = min(2, T - 1)
        nonpad[1, :pad] = False
        emb[1, :pad] = 0
        out, _ = body(emb, nonpad)
        for b in range(2):
            torch.testing.assert_close(out[b], ref_body(body, emb[b], nonpad[b]), rtol=0, atol=1e-12,
                                       msg=lambda m: f"T={T}: {m}")
    dec = make_decoder(alpha_length=5, beta_length=1, alpha_layers="(2,3,2),(2,2,1)", beta_layers="(1,2,0)")
    tokens = random_tokens(B=2, T=12)
    full, _ = dec(tokens)
    state, steps = {}, []
    for t in range(tokens.shape[1]):
        steps.append(dec(tokens[:, : t + 1], incremental_state=state)[0])
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-10)


def test_single_map_time_flow_layers_are_shared_streams():
    """TIME-FLOW layers of one map reading only TIME-FLOW maps are computed as shared streams (one
    per layer, plus the stream after the last) and make a location-0 chain; a layer reading
    TIME-ARROW maps (tf_input="all") is not shareable."""
    torch.manual_seed(0)
    stack = GatedConvStack(7, E, [(3, 1, 0), (2, 1, 0)], E, init_range=0.4).double()
    assert stack.is_chain
    seq = torch.randn(2, 12, E, dtype=torch.float64)
    streams = stack.shared_streams(seq)
    assert len(streams) == 3 and streams[-1][1] is None
    assert [(a, d) for _, _, a, d in streams] == [(0, 1), (-1, 2), (-1, 4)]
    mixed = GatedConvStack(10, E, [(3, 1, 2), (2, 1, 1)], E, tf_input="all")
    assert not mixed.is_chain and len(mixed.shared_streams(torch.randn(1, 12, E))) == 2


def test_defaults_follow_the_paper():
    """Defaults: ReLU convolutions, sigmoid FC (Section 3), gating (Eq. 5), TIME-FLOW maps reading
    TIME-FLOW maps, weights uniform in [-0.1, 0.1] (Section 4.1); the βCNN is named in its errors
    and summarises into the embedding size."""
    x = torch.tensor([-1.5, 0.0, 2.0], dtype=torch.float64)
    torch.manual_seed(0)
    stack = GatedConvStack(12, E, [(3, 40, 30), (2, 30, 20)], 200)
    assert stack.tf_input == "tf" and stack.gated and stack.shapes[1].c_tf == 40
    torch.testing.assert_close(stack.act(x), torch.tensor([0.0, 0.0, 2.0], dtype=torch.float64))
    torch.testing.assert_close(stack.out_act(x), 1 / (1 + torch.exp(-x)))
    for name, p in stack.named_parameters():
        assert p.abs().max() <= 0.1 and (p.numel() < 500 or p.abs().max() > 0.09), name
    torch.manual_seed(0)
    body = GenCNNBody(E, 9, [(3, 40, 30), (2, 30, 20)], 200)
    assert body.beta is None and body.L_beta == 0 and body.history_size == 9
    torch.manual_seed(0)
    body = GenCNNBody(E, 9, [(3, 40, 30), (2, 30, 20)], 200, L_beta=6, beta_layers=[(3, 40, 0), (2, 30, 0)])
    for stack in (body.alpha, body.beta):
        assert stack.tf_input == "tf" and stack.gated
        torch.testing.assert_close(stack.act(x), torch.tensor([0.0, 0.0, 2.0], dtype=torch.float64))
        torch.testing.assert_close(stack.out_act(x), 1 / (1 + torch.exp(-x)))
    assert body.beta.out_dim == E and body.beta.window == 7 and body.alpha.window == 10
    for name, p in body.named_parameters():
        assert p.abs().max() <= 0.1 and (p.numel() < 500 or p.abs().max() > 0.09), name
    with pytest.raises(ValueError) as err:
        GenCNNBody(E, 9, [(3, 4, 3)], 7, L_beta=2, beta_layers=[(3, 1, 0)])
    assert str(err.value) == ("βCNN: window of 3 positions is too short for layer 1 (kernel 3 on 3 "
                              "locations); enlarge L or shrink kernels")
    with pytest.raises(ValueError) as err:
        GenCNNBody(E, 2, [(3, 4, 3)], 7)
    assert str(err.value).startswith("αCNN: window of 3 positions is too short for layer 1")


@pytest.mark.parametrize("merge", ["gating", "pooling"])
@pytest.mark.parametrize("tf_input", ["tf", "all"])
def test_body_options_reach_both_stacks(merge, tf_input):
    """tf_input, merge, the activations and init_range given to the body reach αCNN and βCNN."""
    torch.manual_seed(0)
    body = GenCNNBody(E, 9, [(3, 4, 3), (2, 3, 2)], 7, L_beta=6, beta_layers=[(3, 4, 0), (2, 3, 0)],
                      tf_input=tf_input, activation="tanh", fc_activation="linear", init_range=0.5,
                      merge=merge)
    x = torch.tensor([-1.5, 0.0, 2.0], dtype=torch.float64)
    for stack in (body.alpha, body.beta):
        assert stack.tf_input == tf_input and stack.gated == (merge == "gating")
        assert any(n.startswith("gate_") for n in stack.w) == (merge == "gating")
        torch.testing.assert_close(stack.act(x), torch.tanh(x))
        torch.testing.assert_close(stack.out_act(x), x)
        assert max(float(p.detach().abs().max()) for p in stack.parameters()) > 0.4
        assert all(float(p.detach().abs().max()) <= 0.5 for p in stack.parameters())
    assert body.alpha.shapes[1].c_tf == (4 if tf_input == "tf" else 7)


@pytest.mark.parametrize("frozen", ["weights", "input"])
def test_gradients_when_only_the_input_or_only_the_weights_need_them(frozen):
    """Frozen weights (gradient for the embeddings only) or a constant input (gradients for the
    weights only): the hand-written backward gives the plain reference's gradients either way."""
    from test_gencnn import make_body

    body = make_body("all")
    g = torch.Generator().manual_seed(4)
    emb = torch.randn(2, 16, E, dtype=torch.float64, generator=g)
    nonpad = torch.ones(2, 16, dtype=torch.bool)
    weight = torch.randn(2, 16, 7, dtype=torch.float64, generator=g)
    for p in body.parameters():
        p.requires_grad_(frozen != "weights")

    def grads(fn):
        x = emb.clone().requires_grad_(frozen != "input")
        body.zero_grad(set_to_none=True)
        (fn(x) * weight).sum().backward()
        if frozen == "weights":
            return [x.grad]
        assert x.grad is None
        return [p.grad for p in body.parameters()]

    got = grads(lambda x: body(x, nonpad)[0])
    expected = grads(lambda x: torch.stack([ref_body(body, x[b], nonpad[b]) for b in range(2)]))
    assert all(e is not None for e in expected)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


@pytest.mark.parametrize("tf_input,layers", [("tf", [(3, 4, 3), (2, 3, 2)]), ("all", [(3, 4, 3), (2, 3, 2)]),
                                             ("tf", [(3, 0, 4), (2, 0, 3)]), ("tf", [(3, 4, 0), (2, 3, 1)])])
def test_layer_by_layer_windows_equal_reference(tf_input, layers):
    """``_layer_windows`` applied layer after layer (each layer's maps split into the kinds the next
    layer reads), then the FC layer written out, equals the literal reference of Eq. 3-5."""
    torch.manual_seed(0)
    stack = GatedConvStack(10, E, layers, 6, tf_input=tf_input, init_range=0.4).double()
    X = torch.randn(3, 10, E, dtype=torch.float64)
    H = X
    for li in range(len(stack.shapes)):
        H = stack._layer_windows(li, H)
        assert H.shape == (3, stack.shapes[li].n_out, stack.shapes[li].channels)
    out = torch.sigmoid(H.flatten(1) @ stack.fc.weight.t() + stack.fc.bias)
    for m in range(3):
        torch.testing.assert_close(out[m], ref_unit(stack, list(X[m])), rtol=0, atol=1e-12)


@pytest.mark.parametrize("L_beta,beta", [(9, [(2, 3, 0), (2, 2, 0)]), (6, [(3, 4, 0)])])
def test_beta_with_several_final_locations_equals_reference(L_beta, beta):
    """A βCNN whose last layer keeps several locations (the FC reads more than location 0):
    9 -> conv 9 -> 5 -> conv 4 -> 2, and 7 -> conv 5 -> 3; whole-sentence forward = the recursion."""
    torch.manual_seed(0)
    body = GenCNNBody(E, 5, [(2, 3, 2), (2, 2, 1)], 6, L_beta=L_beta, beta_layers=beta, init_range=0.4).double()
    assert body.beta.is_chain and body.beta.shapes[-1].n_out >= 2
    _assert_body_equals_reference(body, (7, 5 + L_beta, 5 + 2 * L_beta + 3), seed=5)


def test_chain_computes_its_own_weights_when_not_given():
    """``chain(terms, slot)`` slices the location-0 weights itself; the βCNN outputs equal the
    explicit windows' (slot at location 0)."""
    torch.manual_seed(0)
    stack = GatedConvStack(7, E, [(3, 4, 0), (2, 3, 0)], E, init_range=0.4).double()
    seq = torch.randn(2, 12, E, dtype=torch.float64)
    R = 12 - 7 + 1
    slot = torch.randn(R * 2, E, dtype=torch.float64)  # rows r*B + b
    terms = stack.chain_terms(stack.shared_streams(seq), R)
    got = stack.chain(terms, slot)
    torch.testing.assert_close(got, stack.chain(terms, slot, stack.chain_weights()), rtol=0, atol=0)
    windows = seq.unfold(1, 7, 1).transpose(2, 3).clone()  # (B, R, 7, E)
    windows[:, :, 0] = slot.view(R, 2, E).transpose(0, 1)
    expected = stack.forward_windows(windows.reshape(-1, 7, E)).view(2, R, E).transpose(0, 1).reshape(R * 2, E)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_beta_with_time_arrow_maps_equals_reference():
    """A βCNN with TIME-ARROW maps is no location-0 chain: its recursion runs block by block
    through the per-window path, and equals the literal recursion."""
    torch.manual_seed(0)
    body = GenCNNBody(E, 5, [(2, 3, 2), (2, 2, 1)], 6, L_beta=5, beta_layers=[(2, 2, 2), (2, 2, 1)],
                      init_range=0.4).double()
    assert not body.beta.is_chain
    _assert_body_equals_reference(body, (6, 10, 5 + 2 * 5 + 1), seed=6)


# ----------------------------------------------------------- layer patterns of the per-window path
@pytest.mark.parametrize("alpha", [
    [(3, 0, 2), (2, 1, 0)],  # TIME-FLOW maps above a TIME-ARROW-only layer: no TIME-FLOW input below
    [(3, 0, 2), (2, 2, 1)],
    [(3, 2, 2), (2, 1, 0)],  # one TIME-FLOW map reading both kinds (no shared stream), no TIME-ARROW
    [(3, 2, 2), (2, 0, 2)],  # TIME-ARROW maps only, above both kinds
    [(3, 1, 2), (2, 1, 1)],  # a single TIME-FLOW map below
])
def test_tf_input_all_layer_patterns_equal_reference(alpha):
    """tf_input="all": every pattern of map kinds over two layers (the second layer's TIME-FLOW maps
    read the TIME-ARROW maps below, so only the first layer is a shared stream), with a βCNN of the
    same kind (TIME-ARROW maps, then one TIME-FLOW map), whole-sentence forward = the recursion."""
    torch.manual_seed(0)
    body = GenCNNBody(E, 6, alpha, 4, L_beta=3, beta_layers=[(2, 0, 2), (1, 1, 0)], tf_input="all",
                      init_range=0.4).double()
    assert not body.alpha.is_chain and not body.beta.is_chain
    _assert_body_equals_reference(body, (3, 7, 13), seed=8)


def test_single_layer_stacks_with_several_final_locations_equal_reference():
    """One layer of both kinds in αCNN and βCNN (window 5 -> conv 4 -> 2 final locations, location 1
    read from the shared TIME-FLOW stream); the βCNN has TIME-ARROW maps, so its recursion runs
    through the per-window path block by block (blocks at r0 = 0, 4, 8): sentences shorter than
    L_α (no βCNN), one, two and three blocks."""
    torch.manual_seed(0)
    body = GenCNNBody(E, 4, [(2, 2, 1)], 4, L_beta=4, beta_layers=[(2, 2, 1)], init_range=0.4).double()
    assert body.alpha.shapes[0].n_out == 2 and body.beta.shapes[0].n_out == 2 and not body.beta.is_chain
    _assert_body_equals_reference(body, (2, 4, 7, 11, 15), seed=9)


def test_forward_sequence_refuses_windows_past_the_end():
    """A sequence of P positions has P - window + 1 windows: asking for more (from r0) is refused
    with the numbers (r0, windows asked, P, window); within the bound the windows equal the
    explicit ones."""
    torch.manual_seed(0)
    stack = GatedConvStack(4, E, [(2, 2, 1)], 3, init_range=0.4).double()
    seq = torch.randn(2, 7, E, dtype=torch.float64)  # windows r = 0 .. 3
    slot = torch.randn(2, 2, E, dtype=torch.float64)
    got = stack.forward_sequence(seq, slot, r0=2)
    windows = torch.stack([seq[:, r:r + 4] for r in (2, 3)], 1).clone()
    windows[:, :, 0] = slot
    torch.testing.assert_close(got, stack.forward_windows(windows.view(4, 4, E)).view(2, 2, 3), rtol=0, atol=1e-12)
    for r0, R in ((0, 6), (3, 2)):
        with pytest.raises(AssertionError) as err:
            stack.forward_sequence(seq, torch.zeros(2, R, E, dtype=torch.float64), r0=r0)
        assert err.value.args == ((r0, R, 7, 4),)


def test_whole_sentence_forward_does_not_depend_on_the_default_device():
    """The gather indices are built on the input's device: under another default device (here
    "meta") the forward of CPU tensors gives the same values (no index tensor of the default device
    is mixed in)."""
    torch.manual_seed(0)
    body = GenCNNBody(E, 6, [(2, 2, 1), (2, 1, 1)], 4, L_beta=3, beta_layers=[(2, 2, 0)], init_range=0.4).double()
    emb = torch.randn(2, 13, E, dtype=torch.float64)
    nonpad = torch.ones(2, 13, dtype=torch.bool)
    gencnn_kernels.row_index.cache_clear()  # indices are cached per shape: build them in the context
    with torch.device("meta"):
        out, _ = body(emb, nonpad)
    assert out.device.type == "cpu"
    for b in range(2):
        torch.testing.assert_close(out[b], ref_body(body, emb[b], nonpad[b]), rtol=0, atol=1e-12)


def test_whole_sentence_forward_computes_each_map_once(monkeypatch):
    """The vectorisation's cost: TIME-FLOW layers reading only TIME-FLOW maps are shared dilated
    convolutions (never per-window products), every other kind of map goes through one per-window
    product per layer (convolution and gate; once per recursion block in the βCNN), and the βCNN's
    shared streams are computed once for all blocks of its recursion."""
    torch.manual_seed(0)
    body = GenCNNBody(E, 6, [(2, 2, 1), (2, 1, 1)], 4, L_beta=3, beta_layers=[(2, 2, 1)], tf_input="all",
                      init_range=0.4).double()
    names = {id(p): n for n, p in body.named_parameters()}
    products, streams = Counter(), Counter()
    conv, shared_streams = GatedConvStack.window_maps, GatedConvStack.shared_streams

    def counting_conv(self, parts, W, *args):
        products[names[id(W)]] += 1
        return conv(self, parts, W, *args)

    def counting_streams(self, seq):
        streams["beta" if self is body.beta else "alpha"] += 1
        return shared_streams(self, seq)

    monkeypatch.setattr(GatedConvStack, "window_maps", counting_conv)
    monkeypatch.setattr(GatedConvStack, "shared_streams", counting_streams)
    emb = torch.randn(2, 13, E, dtype=torch.float64)  # 7 βCNN positions: blocks of 3, 3, 1
    nonpad = torch.ones(2, 13, dtype=torch.bool)
    out, _ = body(emb, nonpad)
    assert streams == {"alpha": 1, "beta": 1}
    # αCNN: layer 1's TIME-FLOW maps are a shared stream, layer 2's read the TIME-ARROW maps too
    alpha = ["alpha.w.conv_ta_w0", "alpha.w.gate_ta_w0", "alpha.w.conv_ta_w1", "alpha.w.gate_ta_w1",
             "alpha.w.conv_tf_w1", "alpha.w.gate_tf_w1"]
    assert products == Counter({**{n: 1 for n in alpha}, "beta.w.conv_ta_w0": 3, "beta.w.gate_ta_w0": 3})
    for b in range(2):
        torch.testing.assert_close(out[b], ref_body(body, emb[b], nonpad[b]), rtol=0, atol=1e-12)
