"""DPN-S2S against the paper's equations, written loop by loop (Song et al. 2018, Eq. 4 and 9), the
inputs of every context gate (each sees its own path's context and the other path's), and the
labels of the four attention flows (cc, ca, ac, aa: decoder path first, encoder path second),
checked on inputs where only the labelled flow can be non-uniform."""
import math

import pytest
import torch

from fairseq_local.modules import dpn_paths
from fairseq_local.modules.dpn_paths import ConvPathAttention, SANLayer
from test_dpn_s2s import batch, build

DT = torch.float64


def _wn(linear):
    """A weight-normalised fairseq Linear as (W, b): W = g v / ||v|| per output row."""
    v, g = linear.weight_v, linear.weight_g
    return v * (g / v.norm(dim=1, keepdim=True)), linear.bias


def conv_attention_reference(att, x, emb, memory, pad):
    """Eq. 4 + Eq. 9 for one CNN decoder layer, one (sentence, step) at a time.

    x, emb: T x B x H / d; memory: {path: (keys S x B x d, values S x B x d)}; pad: B x S bool."""
    W_in, b_in = _wn(att.in_projection)
    W_out, b_out = _wn(att.out_projection)
    T, B, _ = x.shape
    out = torch.zeros_like(x)
    for b in range(B):
        real = [s for s in range(pad.size(1)) if not pad[b, s]]
        for t in range(T):
            q = (W_in @ x[t, b] + b_in + emb[t, b]) * math.sqrt(0.5)
            ctx = {}
            for p, (keys, values) in memory.items():
                e = torch.stack([q @ keys[s, b] for s in real])
                a = torch.exp(e - e.max()) / torch.exp(e - e.max()).sum()
                ctx[p] = sum(a[i] * values[s, b] for i, s in enumerate(real))
            if len(ctx) == 2:  # Eq. 9: g = sigmoid([ctx^cc, ctx^ca] W + b), own path first
                w, bias = att.gate.proj.weight[0], att.gate.proj.bias[0]
                g = torch.sigmoid(torch.cat([ctx["c"], ctx["a"]]) @ w + bias)
                c = ctx["c"] * (1 - g) + ctx["a"] * g
            else:
                (c,) = ctx.values()
            c = c * math.sqrt(len(real))  # ConvS2S: scaled by sqrt(number of real source tokens)
            out[t, b] = (W_out @ c + b_out + x[t, b]) * math.sqrt(0.5)
    return out


def _memory(S, B, d, seed, const=()):
    g = torch.Generator().manual_seed(seed)
    mem = {}
    for p in ("c", "a"):
        if p in const:
            k = torch.randn(1, B, d, generator=g, dtype=DT).expand(S, B, d)
            v = torch.randn(1, B, d, generator=g, dtype=DT).expand(S, B, d)
        else:
            k, v = torch.randn(S, B, d, generator=g, dtype=DT), torch.randn(S, B, d, generator=g, dtype=DT)
        mem[p] = (k, v)
    return mem


@pytest.mark.parametrize("paths", [("c", "a"), ("c",), ("a",)])
def test_cnn_path_attention_equals_eq4_eq9_reference(paths, monkeypatch):
    torch.manual_seed(0)
    att = ConvPathAttention(6, 5, paths).to(DT)
    with torch.no_grad():
        for prm in att.parameters():  # away from the zero-bias init, so every term is exercised
            prm.add_(torch.rand(prm.shape, dtype=DT) * 0.2 - 0.1)
    T, B, S = 4, 3, 6
    g = torch.Generator().manual_seed(1)
    x, emb = torch.randn(T, B, 6, generator=g, dtype=DT), torch.randn(T, B, 5, generator=g, dtype=DT)
    mem = {p: kv for p, kv in _memory(S, B, 5, seed=2).items() if p in paths}
    pad = torch.zeros(B, S, dtype=torch.bool)
    pad[0, :2] = True
    pad[2, -1] = True
    out, probs = att(x, emb, mem, pad)
    ref = conv_attention_reference(att, x, emb, mem, pad)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    assert sorted(probs) == sorted(paths)
    out_nomask, _ = att(x, emb, mem, None)
    ref_nomask = conv_attention_reference(att, x, emb, mem, torch.zeros(B, S, dtype=torch.bool))
    torch.testing.assert_close(out_nomask, ref_nomask, rtol=1e-10, atol=1e-10)
    # without weights: the explicit products on CPU, the fused attention where FUSED_DEVICES says
    # so (here forced on CPU): the same values
    explicit, none = att(x, emb, mem, pad, need_weights=False)
    torch.testing.assert_close(explicit, out, rtol=0, atol=0)
    assert none == {p: None for p in paths}
    monkeypatch.setattr(dpn_paths, "FUSED_DEVICES", ("cpu", "cuda"))
    fused, none = att(x, emb, mem, pad, need_weights=False)
    torch.testing.assert_close(fused, ref, rtol=1e-10, atol=1e-10)
    assert none == {p: None for p in paths}
    torch.testing.assert_close(att(x, emb, mem, None, need_weights=False)[0], ref_nomask, rtol=1e-10, atol=1e-10)


def _gate_values(module, call):
    seen = []
    hook = module.gate.register_forward_hook(lambda m, i, o: seen.append((i, o[1])))
    call()
    hook.remove()
    assert len(seen) == 1
    return seen[0]


def test_cnn_context_gate_sees_both_paths_own_first():
    torch.manual_seed(0)
    att = ConvPathAttention(6, 5, ("c", "a")).to(DT)
    g = torch.Generator().manual_seed(1)
    x, emb = torch.randn(4, 2, 6, generator=g, dtype=DT), torch.randn(4, 2, 5, generator=g, dtype=DT)
    mem = _memory(5, 2, 5, seed=3)
    (a, b), gate = _gate_values(att, lambda: att(x, emb, mem, None))
    assert not torch.allclose(a, b)
    for changed in ("c", "a"):  # the gate's value moves with either path's context
        other = dict(mem)
        other[changed] = (mem[changed][0], mem[changed][1] + torch.randn(mem[changed][1].shape, dtype=DT))
        (a2, b2), gate2 = _gate_values(att, lambda: att(x, emb, other, None))
        assert (gate2 - gate).abs().max() > 1e-6, changed
        # own path (CNN encoder) first, the other path second
        assert torch.equal(a2, a) == (changed == "a") and torch.equal(b2, b) == (changed == "c")


def test_san_context_gate_sees_both_paths_own_first():
    torch.manual_seed(0)
    layer = SANLayer(6, 8, 2, 0.0, 0.0, 0.0, paths=("a", "c")).to(DT).eval()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 2, 6, generator=g, dtype=DT)
    mem = _memory(5, 2, 6, seed=4)
    (a, b), gate = _gate_values(layer, lambda: layer(x, memory=mem))
    for changed in ("c", "a"):
        other = dict(mem)
        new_keys = mem[changed][0] + torch.randn(mem[changed][0].shape, dtype=DT)
        other[changed] = (new_keys, new_keys)
        (a2, b2), gate2 = _gate_values(layer, lambda: layer(x, memory=other))
        assert (gate2 - gate).abs().max() > 1e-6, changed
        # own path (SAN encoder) first, the other path second
        assert torch.equal(a2, a) == (changed == "c") and torch.equal(b2, b) == (changed == "a")


# ------------------------------------------------------------------------------- flow labels
def _encoder_out(model, src, varied):
    """Encoder outputs with the CNN keys (``varied == "c"``) or the SAN outputs (``"a"``) varying
    over the source positions and the other path's states the same at every position."""
    B, S = src.shape
    mem = _memory(S, B, model.decoder.embed.embed_tokens.embedding_dim, seed=5,
                  const={"c": "a", "a": "c"}[varied])
    return {"encoder_out": [mem["a"][0]], "encoder_padding_mask": [src.eq(model.encoder.embed.padding_idx)],
            "cnn_keys": [mem["c"][0]], "cnn_values": [mem["c"][1]], "san_out": [mem["a"][0]],
            "src_lengths": []}


def _blind(model, flow):
    """Make one decoder path unable to tell source positions apart (uniform attention):
    SAN decoder -> path p: its key projection of p is zero; CNN decoder: its queries are zero."""
    dec = model.decoder
    with torch.no_grad():
        if flow[0] == "a":
            for layer in dec.san.layers:
                layer.encoder_attn[flow[1]].k_proj.weight.zero_()
        else:  # zero target embeddings and input projections: q = 0 for both CNN flows
            dec.embed.embed_tokens.weight.zero_()
            dec.embed.embed_positions.weight.zero_()
            for att in dec.cnn.attention:
                att.in_projection.weight_g.zero_()
                att.in_projection.bias.zero_()
            for layer in dec.san.layers:  # the SAN path still sees non-zero inputs after LayerNorm
                for ln in (layer.self_attn_layer_norm, layer.encoder_attn_layer_norm, layer.final_layer_norm):
                    ln.bias.copy_(torch.randn(ln.bias.shape, dtype=DT))


@pytest.mark.parametrize("flow,varied,blind", [
    ("cc", "c", "ac"),  # CNN keys vary; the SAN decoder cannot see them; SAN outputs constant
    ("ac", "c", "cc"),  # CNN keys vary; the CNN decoder cannot see them
    ("ca", "a", "aa"),
    ("aa", "a", "ca"),
])
def test_each_flow_label_names_the_flow_that_computed_it(flow, varied, blind):
    model = build("dpn_s2s_m9", seed=2)
    src, lengths, tgt = batch(seed=6)
    src[0, :3] = src[0, 3]  # no padding: a uniform attention is exactly 1/S everywhere
    _blind(model, blind)
    _, extra = model.decoder(tgt, _encoder_out(model, src, varied), return_all_attn=True)
    flows = extra["flows"]
    assert set(flows) == {"cc", "ca", "ac", "aa"}
    S = src.size(1)
    for name, layers in flows.items():
        for a in layers:
            spread = (a - 1.0 / S).abs().max().item()
            if name == flow:
                assert spread > 1e-3, (name, spread)
            else:
                assert spread < 1e-6, (name, spread)


def test_model_context_gates_take_their_own_path_first():
    """In the first decoder layer (whose queries do not depend on the encoder), the CNN gate's
    first input moves only with the CNN encoder, the SAN gate's only with the SAN encoder."""
    model = build("dpn_s2s_m9", seed=1)
    src, lengths, tgt = batch(seed=2)
    enc = model.encoder(src, lengths)
    gates = model.decoder.gates()

    def inputs(encoder_out):
        seen = {}
        hooks = [gates[n].register_forward_hook(lambda m, i, o, n=n: seen.setdefault(n, i)) for n in ("cnn.0", "san.0")]
        model.decoder(tgt, encoder_out)
        for h in hooks:
            h.remove()
        return seen

    base = inputs(enc)
    moved_c = inputs({**enc, "cnn_keys": [enc["cnn_keys"][0] * 1.5], "cnn_values": [enc["cnn_values"][0] * 1.5]})
    moved_a = inputs({**enc, "san_out": [enc["san_out"][0] * 1.5]})
    own = {"cnn.0": moved_c["cnn.0"], "san.0": moved_a["san.0"]}
    other = {"cnn.0": moved_a["cnn.0"], "san.0": moved_c["san.0"]}
    for name in ("cnn.0", "san.0"):
        assert not torch.allclose(own[name][0], base[name][0]) and torch.equal(own[name][1], base[name][1]), name
        assert torch.equal(other[name][0], base[name][0]) and not torch.allclose(other[name][1], base[name][1]), name
