"""genCNN (fairseq_local/modules/gencnn_layers.py, fairseq_local/models/gencnn.py).

The vectorised model is checked against a literal, window-by-window reference of Eq. 3-5 and of
the βCNN recursion (Section 3.3) written plainly below with Python loops and lists.
"""
import struct

import pytest
import torch

import fairseq_local  # noqa: F401
from fairseq.data import Dictionary
from fairseq_local.models.gencnn import GenCNNConfig, GenCNNDecoder, GenCNNLanguageModel, load_word2vec
from fairseq_local.modules.gencnn_layers import GatedConvStack, GenCNNBody, LayerShape, parse_layers

L_ALPHA, L_BETA, E = 9, 6, 5
ALPHA = [(3, 4, 3), (2, 3, 2)]  # window 10 -> conv 8 -> gate 4 -> conv 3 -> gate 2 (1 passes through)
BETA = [(3, 4, 0), (2, 3, 0)]  # window 7 -> conv 5 -> gate 3 (1 passes) -> conv 2 -> gate 1


# ------------------------------------------------------------------------------------------
# the plain reference: one window at a time, one location at a time
# ------------------------------------------------------------------------------------------
def ref_unit(stack, window):
    """Eq. 3-5 for one window given as a list of vectors (slot first), then the FC layer; with
    pooling (Section 3.2), the larger of the pair per feature map instead of Eq. 5."""
    w, H = stack.w, list(window)
    for li, s in enumerate(stack.shapes):
        k = s.kernel

        def segment(start, width, channels):  # ẑ: concatenation of lower-layer vectors
            return torch.cat([H[start + q][:channels] for q in range(width)])

        Z = []
        for i in range(s.n_conv):
            maps = []
            if s.n_tf:  # Eq. 3: shared weights
                maps.append(stack.act(w[f"conv_tf_w{li}"].reshape(s.n_tf, -1) @ segment(i, k, s.c_tf)
                                      + w[f"conv_tf_b{li}"]))
            if s.n_ta:  # Eq. 4: weights of location i
                maps.append(stack.act(w[f"conv_ta_w{li}"][i].reshape(s.n_ta, -1) @ segment(i, k, s.c_ta)
                                      + w[f"conv_ta_b{li}"][i]))
            Z.append(torch.cat(maps))
        out = [Z[0]] if s.offset else []  # odd count: the oldest location passes through
        for j in range(s.n_pairs):
            a = s.offset + 2 * j  # the pair (2j-1, 2j) of the paper, 0-based
            if not stack.gated:  # max-pooling; a tie selects the older location
                out.append(torch.where(Z[a] >= Z[a + 1], Z[a], Z[a + 1]))
                continue
            gates = []
            if s.n_tf:
                gates.append(torch.sigmoid(w[f"gate_tf_w{li}"].reshape(s.n_tf, -1) @ segment(a, k + 1, s.c_tf)
                                           + w[f"gate_tf_b{li}"]))
            if s.n_ta:
                gates.append(torch.sigmoid(w[f"gate_ta_w{li}"][j].reshape(s.n_ta, -1) @ segment(a, k + 1, s.c_ta)
                                           + w[f"gate_ta_b{li}"][j]))
            g = torch.cat(gates)
            out.append(g * Z[a] + (1 - g) * Z[a + 1])  # Eq. 5
        H = out
    return stack.out_act(stack.fc(torch.cat(H)))


def ref_body(body, emb, nonpad):
    """genCNN on one sentence emb (T, E): αCNN at each t, βCNN recursion written as recursion."""
    T = emb.shape[0]
    La, Lb = body.L_alpha, body.L_beta
    zero = emb.new_zeros(emb.shape[1])

    def word(p):
        return emb[p] if p >= 0 else zero

    def S(e):  # βCNN summary of the history ending at e; the switch gives "/" when there is none
        if e < 0 or not bool(nonpad[: e + 1].any()):
            return zero
        return ref_unit(body.beta, [S(e - Lb)] + [word(p) for p in range(e - Lb + 1, e + 1)])

    feats = []
    for t in range(T):
        slot = S(t - La) if body.use_beta else zero
        feats.append(ref_unit(body.alpha, [slot] + [word(p) for p in range(t - La + 1, t + 1)]))
    return torch.stack(feats)


def make_body(tf_input="tf", alpha=ALPHA, beta=BETA, seed=0):
    torch.manual_seed(seed)
    return GenCNNBody(E, L_ALPHA, alpha, 7, L_beta=L_BETA, beta_layers=beta, tf_input=tf_input,
                      init_range=0.4).double()


VARIANTS = {
    "both": (ALPHA, BETA),
    "time_flow_only": ([(3, 7, 0), (2, 5, 0)], BETA),
    "time_arrow_only": ([(3, 0, 7), (2, 0, 5)], BETA),
    "alpha_only": (ALPHA, None),
}


@pytest.mark.parametrize("tf_input", ["tf", "all"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_vectorised_forward_equals_window_by_window_reference(tf_input, variant):
    if variant == "time_arrow_only" and tf_input == "tf":
        tf_input = "tf"  # nothing TIME-FLOW to read: both settings coincide
    body = make_body(tf_input, *VARIANTS[variant])
    # shorter than L_α, = L_α, between, = L_α + L_β, longer, and long enough for 3 βCNN levels
    for T in (4, L_ALPHA, 12, L_ALPHA + L_BETA, L_ALPHA + L_BETA + 1, L_ALPHA + 3 * L_BETA + 2):
        emb = torch.randn(2, T, E, dtype=torch.float64)
        nonpad = torch.ones(2, T, dtype=torch.bool)
        nonpad[1, :3] = False  # a left-padded row: pads are zero vectors, the switch stays off
        emb[1, :3] = 0
        out, S = body(emb, nonpad)
        assert out.shape == (2, T, 7) and S.shape == (2, max(T - L_ALPHA, 0), E)
        for b in range(2):
            torch.testing.assert_close(out[b], ref_body(body, emb[b], nonpad[b]), rtol=0, atol=1e-12)


def _left_padded_batch(B, T):
    """Embeddings [B, T, E] (row 1 left-padded by 3), its non-pad mask and an output weighting."""
    emb = torch.randn(B, T, E, dtype=torch.float64)
    nonpad = torch.ones(B, T, dtype=torch.bool)
    nonpad[1, :3] = False
    emb[1, :3] = 0
    return emb, nonpad, torch.randn(B, T, 7, dtype=torch.float64)


def _output_and_grads(body, fn, emb, weight, missing_grad_zero=False):
    """[output, d/d emb, d/d every parameter] of sum(fn(emb) * weight).  ``missing_grad_zero``:
    a parameter the output does not reach (the βCNN's, for sentences up to L_α) counts as 0."""
    x = emb.clone().requires_grad_(True)
    body.zero_grad(set_to_none=True)
    out = fn(x)
    (out * weight).sum().backward()
    grads = [torch.zeros_like(p) if p.grad is None and missing_grad_zero else p.grad.clone()
             for p in body.parameters()]
    return [out.detach(), x.grad] + grads


@pytest.mark.parametrize("tf_input", ["tf", "all"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_vectorised_gradients_equal_reference_gradients(tf_input, variant):
    """The hand-written backward passes (strided window products, shared TIME-FLOW streams,
    index gathers) give the reference's gradients, for parameters and embeddings."""
    body = make_body(tf_input, *VARIANTS[variant])
    emb, nonpad, weight = _left_padded_batch(2, L_ALPHA + 2 * L_BETA + 1)
    got = _output_and_grads(body, lambda x: body(x, nonpad)[0], emb, weight)[1:]
    expected = _output_and_grads(
        body, lambda x: torch.stack([ref_body(body, x[b], nonpad[b]) for b in range(2)]), emb, weight)[1:]
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=1e-10)


def explicit_windows_body(body, emb, nonpad):
    """genCNN over every window of emb (B, T, E) gathered explicitly and run through
    ``forward_windows`` (the incremental decoder's per-window path), the βCNN recursion one
    block of L_β positions at a time: the whole-sentence path without shared streams or the
    location-0 chain."""
    B, T, _ = emb.shape
    La, Lb = body.L_alpha, body.L_beta

    def windows(seq, L, slot):  # window t = seq[t .. t+L] with location 0 replaced by slot[:, t]
        w = seq.unfold(1, L + 1, 1).transpose(2, 3)[:, : slot.shape[1]]
        return torch.cat([slot[:, :, None], w[:, :, 1:]], 2)

    n = max(T - La, 0)
    S = emb.new_zeros(B, n, E)
    if body.use_beta and n:
        has_hist = (nonpad.cumsum(1) > 0)[:, :n, None].to(emb.dtype)
        seq = torch.cat([emb.new_zeros(B, Lb, E), emb[:, :n]], 1)
        blocks = []
        for b0 in range(0, n, Lb):
            m = min(Lb, n - b0)
            slot = blocks[-1][:, :m] if blocks else emb.new_zeros(B, m, E)
            X = windows(seq[:, b0:], Lb, slot)
            blocks.append(body.beta.forward_windows(X.reshape(B * m, Lb + 1, E)).view(B, m, E)
                          * has_hist[:, b0:b0 + m])
        S = torch.cat(blocks, 1)
    slot = torch.cat([emb.new_zeros(B, T - n, E), S], 1)
    X = windows(torch.cat([emb.new_zeros(B, La, E), emb], 1), La, slot)
    return body.alpha.forward_windows(X.reshape(B * T, La + 1, E)).view(B, T, -1)


@pytest.mark.parametrize("merge", ["gating", "pooling"])
@pytest.mark.parametrize("tf_input", ["tf", "all"])
def test_whole_sentence_forward_equals_explicit_windows_every_length(tf_input, merge):
    """The whole-sentence forward (every window of a batch at once: shared TIME-FLOW streams, the
    βCNN's location-0 chain per recursion block) equals the explicit per-window path, outputs and
    gradients, in float64, for every sentence length 1 .. 3·L_α (no, one, two and three βCNN
    blocks; partial last blocks)."""
    torch.manual_seed(0)
    body = GenCNNBody(E, L_ALPHA, ALPHA, 7, L_beta=L_BETA, beta_layers=BETA, tf_input=tf_input,
                      init_range=0.4, merge=merge).double()
    g = torch.Generator().manual_seed(2)
    for T in range(1, 3 * L_ALPHA + 1):
        emb = torch.randn(3, T, E, dtype=torch.float64, generator=g)
        nonpad = torch.ones(3, T, dtype=torch.bool)
        pad = min(4, T - 1)
        nonpad[1, :pad] = False
        emb[1, :pad] = 0
        weight = torch.randn(3, T, 7, dtype=torch.float64, generator=g)
        got, expected = (_output_and_grads(body, fn, emb, weight, missing_grad_zero=T <= L_ALPHA) for fn in (
            lambda x: body(x, nonpad)[0], lambda x: explicit_windows_body(body, x, nonpad)))
        for i, (a, b) in enumerate(zip(got, expected)):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12, msg=lambda m: f"T={T}, tensor {i}: {m}")


@pytest.mark.parametrize("variant", ["both", "time_flow_only", "alpha_only"])
def test_max_pooling_equals_reference(variant):
    """``merge="pooling"`` (Section 3.2's direct pooling): max over each pair of convolution
    locations, per feature map, after the activation; equals the literal float64 reference
    (outputs and gradients) and has no gate parameters."""
    alpha, beta = VARIANTS[variant]
    torch.manual_seed(0)
    body = GenCNNBody(E, L_ALPHA, alpha, 7, L_beta=L_BETA, beta_layers=beta, init_range=0.4,
                      merge="pooling").double()
    assert body.alpha.gated is False and not any("gate" in n for n, _ in body.named_parameters())
    emb, nonpad, weight = _left_padded_batch(2, L_ALPHA + 2 * L_BETA + 1)
    got = _output_and_grads(body, lambda x: body(x, nonpad)[0], emb, weight)
    expected = _output_and_grads(
        body, lambda x: torch.stack([ref_body(body, x[b], nonpad[b]) for b in range(2)]), emb, weight)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=1e-12)
    # the larger activated candidate of each pair, per feature map (ReLU: -2, -5 -> 0)
    stack = body.alpha
    z = torch.tensor([[[1.0, -2.0]], [[3.0, -5.0]]], dtype=torch.float64)  # (2 locations, 1, 2 maps)
    s = LayerShape(kernel=1, n_tf=2, n_ta=0, n_in=2, c_tf=1, c_ta=1, n_conv=2, offset=0, n_pairs=1, n_out=1)
    torch.testing.assert_close(stack.activate_and_merge(s, z, None), torch.tensor([[[3.0, 0.0]]], dtype=torch.float64))


def test_max_pooling_decoder_option():
    """``--gencnn-gate pooling``: incremental decoding equals the full pass; parameter count is
    the gating model's minus exactly the gate parameters."""
    gated, pooled = make_decoder(), make_decoder(gencnn_gate="pooling")
    n_gate = sum(p.numel() for n, p in gated.named_parameters() if ".gate_" in n)
    assert n_gate > 0
    assert sum(p.numel() for p in pooled.parameters()) == sum(p.numel() for p in gated.parameters()) - n_gate
    tokens = random_tokens()
    full, _ = pooled(tokens)
    state, steps = {}, []
    for t in range(tokens.shape[1]):
        steps.append(pooled(tokens[:, : t + 1], incremental_state=state)[0])
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-10)
    assert not torch.allclose(full, gated(tokens)[0])


def test_forward_windows_equals_forward_sequence():
    stack = make_body().alpha
    seq = torch.randn(3, 16, E, dtype=torch.float64)
    R = 16 - stack.window + 1
    slot = torch.randn(3, R, E, dtype=torch.float64)
    windows = seq.unfold(1, stack.window, 1).transpose(2, 3).clone()
    windows[:, :, 0] = slot
    expected = stack.forward_windows(windows.reshape(-1, stack.window, E)).reshape(3, R, -1)
    torch.testing.assert_close(stack.forward_sequence(seq, slot), expected, rtol=0, atol=1e-12)


def test_time_arrow_is_location_dependent_time_flow_is_not():
    torch.manual_seed(0)
    stack = GatedConvStack(12, E, [(3, 4, 3)], 6, init_range=0.4).double()
    X = torch.randn(1, 12, E, dtype=torch.float64)
    shifted = torch.roll(X, 2, dims=1)  # every segment moves two positions = one gating pair later
    H, H2 = stack._layer_windows(0, X), stack._layer_windows(0, shifted)
    # TIME-FLOW maps (shared weights and shared gates) just move with the input ...
    torch.testing.assert_close(H2[:, 2:, :4], H[:, 1:-1, :4], rtol=0, atol=1e-12)
    # ... TIME-ARROW maps (weights per location) do not
    assert (H2[:, 2:, 4:] - H[:, 1:-1, 4:]).abs().max() > 1e-3
    # permuting TIME-ARROW's per-location weights changes the output
    out = stack.forward_windows(X)
    with torch.no_grad():
        w = stack.w["conv_ta_w0"]
        w.copy_(w[torch.randperm(w.shape[0], generator=torch.Generator().manual_seed(1))])
    assert (stack.forward_windows(X) - out).abs().max() > 1e-4


# ------------------------------------------------------------------------------------------
# the fairseq decoder
# ------------------------------------------------------------------------------------------
def make_dict(n=20):
    d = Dictionary()
    for i in range(n):
        d.add_symbol(f"w{i}")
    return d


def make_decoder(**overrides):
    cfg = GenCNNConfig(decoder_embed_dim=E, alpha_length=L_ALPHA, beta_length=L_BETA,
                       alpha_layers="(3,4,3),(2,3,2)", beta_layers="(3,4,0),(2,3,0)", fc_dim=8,
                       init_range=0.3)
    for key, value in overrides.items():
        setattr(cfg, key, value)
    torch.manual_seed(0)
    return GenCNNDecoder(cfg, make_dict()).double().eval()


def random_tokens(d_size=24, B=3, T=L_ALPHA + 2 * L_BETA + 3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, d_size, (B, T), generator=g)


def test_decoder_equals_reference_and_pads_are_zero():
    dec = make_decoder()
    tokens = random_tokens()
    tokens[1, :2] = dec.padding_idx
    logits, _ = dec(tokens)
    for b in range(3):
        emb = dec.embed_tokens(tokens[b]) * tokens[b].ne(dec.padding_idx)[:, None]
        feats = ref_body(dec.body, emb, tokens[b].ne(dec.padding_idx))
        torch.testing.assert_close(logits[b], dec.output_projection(feats), rtol=0, atol=1e-12)


@pytest.mark.parametrize("overrides", [{}, {"no_beta": True}, {"alpha_map_kinds": "time_arrow"}])
def test_incremental_equals_full_with_reorder(overrides):
    dec = make_decoder(**overrides)
    tokens = random_tokens()
    full, _ = dec(tokens)
    state = {}
    order = torch.tensor([2, 0, 1])
    steps = []
    for t in range(tokens.shape[1]):
        out, _ = dec(tokens[:, : t + 1], incremental_state=state)
        steps.append(out)
        if t == L_ALPHA + L_BETA:  # beam-like reordering mid-sentence
            dec.reorder_incremental_state(state, order)
            tokens = tokens[order]
            full = full[order]
            steps = [s[order] for s in steps]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-10)
    # a first call with a long prefix builds the same state as stepping through it
    state2 = {}
    dec(tokens[:, :-1], incremental_state=state2)
    last, _ = dec(tokens, incremental_state=state2)
    torch.testing.assert_close(last, full[:, -1:], rtol=0, atol=1e-10)


def test_causality():
    dec = make_decoder()
    tokens = random_tokens(B=1)
    base, _ = dec(tokens)
    for t in (0, 5, L_ALPHA + 3, tokens.shape[1] - 2):
        changed = tokens.clone()
        changed[0, t + 1] = 4 + (changed[0, t + 1] - 3) % 20
        out, _ = dec(changed)
        torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], rtol=0, atol=0)
        assert (out[:, t + 1] - base[:, t + 1]).abs().max() > 0


def test_beta_parameters_matter_only_beyond_alpha_window():
    dec = make_decoder()
    tokens = random_tokens(B=2)
    base, _ = dec(tokens)
    with torch.no_grad():
        for p in dec.body.beta.parameters():
            p.add_(torch.randn_like(p))
    out, _ = dec(tokens)
    # history of position t is t + 1 words: up to L_α words, the model is αCNN alone
    torch.testing.assert_close(out[:, :L_ALPHA], base[:, :L_ALPHA], rtol=0, atol=0)
    assert (out[:, L_ALPHA:] - base[:, L_ALPHA:]).abs().amax(-1).min() > 0


def test_variants_have_the_right_parameters():
    names = lambda dec: {n.split(".")[-1] for n, _ in dec.body.alpha.named_parameters()}  # noqa: E731
    assert not any(n.startswith("conv_ta") for n in names(make_decoder(alpha_map_kinds="time_flow")))
    assert not any(n.startswith("conv_tf") for n in names(make_decoder(alpha_map_kinds="time_arrow")))
    assert make_decoder(no_beta=True).body.beta is None
    dec = make_decoder(alpha_map_kinds="time_arrow")
    assert dec.body.alpha.shapes[0].n_ta == 7 and dec.body.alpha.shapes[1].n_ta == 5


def test_adaptive_softmax_option():
    dec = make_decoder(adaptive_softmax_cutoff="8,16")
    tokens = random_tokens()
    out = dec(tokens)
    lprobs = dec.get_normalized_probs(out, log_probs=True)
    assert lprobs.shape == (3, tokens.shape[1], len(dec.dictionary))
    torch.testing.assert_close(lprobs.exp().sum(-1), torch.ones(3, tokens.shape[1], dtype=torch.float64))


def test_seeded_sampling_is_reproducible():
    from fairseq import search
    from fairseq.sequence_generator import SequenceGenerator

    d = make_dict()
    dec = make_decoder()
    model = GenCNNLanguageModel(dec).eval()
    gen = SequenceGenerator([model], d, beam_size=3, max_len_b=25, temperature=1.2,
                            search_strategy=search.Sampling(d, sampling_topk=8))
    src = torch.full((2, 1), d.eos())
    sample = {"net_input": {"src_tokens": src, "src_lengths": torch.ones(2, dtype=torch.long)}}

    def run(seed):
        torch.manual_seed(seed)
        hyps = gen.generate([model], sample)
        return [[h["tokens"].tolist() for h in beam] for beam in hyps]

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_word2vec_initialisation(tmp_path):
    d = make_dict()
    text = tmp_path / "vec.txt"
    text.write_text("2 5\nw3 1 2 3 4 5\nunseen 0 0 0 0 0\n", encoding="utf-8")
    dec = make_decoder()
    assert load_word2vec(str(text), d, dec.embed_tokens) == 1
    assert dec.embed_tokens.weight[d.index("w3")].tolist() == [1, 2, 3, 4, 5]
    binary = tmp_path / "vec.bin"
    binary.write_bytes(b"1 5\nw4 " + struct.pack("<5f", 5, 4, 3, 2, 1) + b"\n")
    assert load_word2vec(str(binary), d, dec.embed_tokens) == 1
    assert dec.embed_tokens.weight[d.index("w4")].tolist() == [5, 4, 3, 2, 1]
    bad = tmp_path / "bad.txt"
    bad.write_text("w3 1 2 3 4 5\nw4 1 2\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.txt:2: expected a word and 5 numbers"):
        load_word2vec(str(bad), d, dec.embed_tokens)
    with pytest.raises(ValueError, match=r"vec.txt:1: vectors have dimension 5 but --decoder-embed-dim is 4"):
        load_word2vec(str(text), d, torch.nn.Embedding(len(d), 4))


def test_bad_configurations_fail_clearly():
    with pytest.raises(ValueError, match="bad layer spec"):
        parse_layers("(3,4)")
    with pytest.raises(ValueError, match="too short"):
        GenCNNBody(E, 3, [(3, 4, 4), (3, 4, 4)], 4)
    with pytest.raises(ValueError, match="TIME-FLOW maps only"):
        make_decoder(beta_layers="(3,4,2),(2,3,0)")


@pytest.mark.parametrize("name", ["table2_ptb_gencnn", "table3_fbis_gencnn", "table3_fbis_time_arrow_only",
                                  "table3_fbis_time_flow_only", "table3_fbis_alpha_only"])
def test_hydra_yaml_rows(name):
    """Every Table 2-3 YAML names its row's arch and only real config fields, and its row's switch is set."""
    import dataclasses
    from pathlib import Path

    from omegaconf import OmegaConf

    from contract_lib import arch_model_config

    cfg = OmegaConf.load(Path(__file__).resolve().parent.parent / "configs" / "gencnn" / f"{name}.yaml")
    assert cfg.model._name == {"time_arrow_only": "gencnn_time_arrow_only", "time_flow_only": "gencnn_time_flow_only",
                               "alpha_only": "gencnn_alpha_only"}.get(name.split("fbis_")[-1], "gencnn_paper")
    fields = {f.name for f in dataclasses.fields(GenCNNConfig)}
    assert set(cfg.model) - {"_name"} <= fields, set(cfg.model) - fields
    model = arch_model_config(cfg.model)
    assert (model["alpha_length"], model["beta_length"], model["fc_dim"]) == (30, 20, 400)
    expect = {"time_arrow_only": ("time_arrow", False), "time_flow_only": ("time_flow", False),
              "alpha_only": ("both", True)}.get(name.split("fbis_")[-1], ("both", False))
    assert (model["alpha_map_kinds"], model["no_beta"]) == expect
    assert cfg.optimizer._name == "adagrad" and cfg.task.sample_break_mode == "eos"
    dec = make_decoder(alpha_map_kinds=model["alpha_map_kinds"], no_beta=model["no_beta"],
                       adaptive_softmax_cutoff="8,16" if model["adaptive_softmax_cutoff"] else None)
    assert (dec.adaptive_softmax is not None) == name.startswith("table3")


# ------------------------------------------------------------------------------------------
# every sentence length, including L_α + 1 (one βCNN block: the shared βCNN stream is exactly one
# window long and shorter than its last dilated gate convolution)
# ------------------------------------------------------------------------------------------
RERANK_DEMO = ([(3, 6, 5), (3, 4, 3)], [(3, 6, 0), (3, 5, 0)], 12, 8)  # recipe shape, fewer maps


@pytest.mark.parametrize("shape", ["tests", "rerank_demo"])
def test_every_length_equals_reference(shape):
    """Whole-sentence forward equals the literal reference for every longest length 1 .. 3·L_α."""
    if shape == "tests":
        body, La = make_body(), L_ALPHA
    else:
        alpha, beta, La, Lb = RERANK_DEMO
        torch.manual_seed(0)
        body = GenCNNBody(E, La, alpha, 7, L_beta=Lb, beta_layers=beta, init_range=0.4).double()
    g = torch.Generator().manual_seed(1)
    for T in range(1, 3 * La + 1):
        emb = torch.randn(2, T, E, dtype=torch.float64, generator=g)
        nonpad = torch.ones(2, T, dtype=torch.bool)
        pad = min(3, T - 1)
        nonpad[1, :pad] = False
        emb[1, :pad] = 0
        out, _ = body(emb, nonpad)
        for b in range(2):
            torch.testing.assert_close(out[b], ref_body(body, emb[b], nonpad[b]), rtol=0, atol=1e-12,
                                       msg=lambda m: f"T={T}, row {b}: {m}")


def test_every_length_full_equals_incremental():
    dec = make_decoder()
    for T in range(1, 3 * L_ALPHA + 1):
        tokens = random_tokens(B=2, T=T, seed=T)
        full, _ = dec(tokens)
        state, steps = {}, []
        for t in range(T):
            steps.append(dec(tokens[:, : t + 1], incremental_state=state)[0])
        torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-10,
                                   msg=lambda m: f"T={T}: {m}")


def test_eval_lm_every_sentence_length(tmp_path):
    """fairseq-train + fairseq-eval-lm (one sentence per batch, so each length is the longest of
    its batch) on sentences of every length 1 .. 3·L_α: eval-lm's loss equals the incremental
    decoder's loss on the same sentences."""
    import math
    import subprocess
    import sys
    from pathlib import Path

    from fairseq import checkpoint_utils

    La, Lb = L_ALPHA, L_BETA
    words = [f"w{i}" for i in range(12)]
    g = torch.Generator().manual_seed(0)
    # a sentence of n words is n + 1 tokens with its </s>: lengths 1 .. 3·L_α
    lines = [" ".join(words[int(i)] for i in torch.randint(0, 12, (n,), generator=g))
             for n in range(3 * La)]
    raw = tmp_path / "raw.txt"
    raw.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bindir = tmp_path / "bin"
    binpath = Path(sys.executable).parent
    env = {"OMP_NUM_THREADS": "1", "PATH": str(binpath) + ":/usr/bin:/bin"}
    repo = Path(__file__).resolve().parent.parent
    user_dir = str(repo / "fairseq_local")

    def run(*cmd):
        proc = subprocess.run([str(binpath / cmd[0]), *cmd[1:]], env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout + proc.stderr

    run("fairseq-preprocess", "--only-source", "--trainpref", str(raw), "--validpref", str(raw),
        "--destdir", str(bindir), "--workers", "1")
    lm = ["--task", "language_modeling", "--sample-break-mode", "eos", "--tokens-per-sample", "64"]
    run("fairseq-train", str(bindir), "--user-dir", user_dir, *lm, "--arch", "gencnn", "--cpu",
        "--alpha-length", str(La), "--beta-length", str(Lb), "--decoder-embed-dim", str(E),
        "--alpha-layers", "(3,4,3),(2,3,2)", "--beta-layers", "(3,4,0),(2,3,0)", "--fc-dim", "8",
        "--optimizer", "adagrad", "--lr", "0.05", "--batch-size", "4", "--max-update", "2",
        "--required-batch-size-multiple", "1", "--save-dir", str(tmp_path / "ckpt"),
        "--no-epoch-checkpoints", "--disable-validation", "--seed", "1")
    ckpt = tmp_path / "ckpt" / "checkpoint_last.pt"
    out = run("fairseq-eval-lm", str(bindir), "--user-dir", user_dir, *lm, "--path", str(ckpt), "--cpu",
              "--gen-subset", "valid", "--batch-size", "1", "--required-batch-size-multiple", "1")
    reported = float(out.split("Loss (base 2): ")[1].split(",")[0])

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(ckpt)])
    model, d = models[0].eval(), task.dictionary
    total, count = 0.0, 0
    with torch.no_grad():
        for line in lines:
            target = d.encode_line(line, add_if_not_exist=False).long()[None]
            source = torch.cat([target.new_full((1, 1), d.eos()), target[:, :-1]], 1)
            state, lp = {}, []
            for t in range(source.shape[1]):
                step = model(source[:, : t + 1], incremental_state=state)
                lp.append(model.get_normalized_probs(step, log_probs=True)[0, -1, target[0, t]])
            total -= float(sum(lp))
            count += target.shape[1]
    assert count == sum(n + 1 for n in range(3 * La))
    assert abs(reported - total / count / math.log(2)) < 1e-3, (reported, total / count / math.log(2))
