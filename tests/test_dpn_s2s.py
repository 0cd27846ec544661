"""Tests of DPN-S2S (fairseq_local/models/dpn_s2s.py, modules/dpn_paths.py, modules/dpn_gate.py).

The generic checks (CLI build, train + generate, incremental decoding after reorder, checkpoint
round trip, Hydra) are in the contract suite; here: the gate (Eq. 9-10: its options, one-line
errors and initialisation), forcing gates to 0/1 reproduces each single-flow model exactly,
ablations, parameter counts, causality, batching, the encoder's output fields, beam-style
reordering of the cached encoder projections, where each dropout rate lands, and the decoder's
extras (output gate, alignments). The paths against their references: tests/test_dpn_paths.py.
"""
import argparse
import math
import warnings

import pytest
import torch

import fairseq_local  # noqa: F401
from fairseq.data import Dictionary
from fairseq.models import ARCH_CONFIG_REGISTRY
from fairseq_local.models.dpn_s2s import DPNS2SConfig, DPNS2SModel
from fairseq_local.modules.dpn_gate import DPNGate

warnings.filterwarnings("ignore", category=FutureWarning)

TINY = dict(encoder_embed_dim=8, decoder_embed_dim=8, encoder_conv_dim=6, decoder_conv_dim=10,
            encoder_conv_layers=2, decoder_conv_layers=3, encoder_san_layers=1, decoder_san_layers=2,
            encoder_ffn_embed_dim=12, decoder_ffn_embed_dim=14, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_kernel_size=3, decoder_kernel_size=2)
ABLATIONS = {1: ("cnn", "cnn"), 2: ("cnn", "san"), 3: ("cnn", "cnn,san"), 4: ("san", "cnn"), 5: ("san", "san"),
             6: ("san", "cnn,san"), 7: ("cnn,san", "cnn"), 8: ("cnn,san", "san"), 9: ("cnn,san", "cnn,san")}


class _Task:
    def __init__(self, src, tgt):
        self.source_dictionary, self.target_dictionary = src, tgt


def _dict(n, prefix):
    d = Dictionary()
    for i in range(n):
        d.add_symbol(f"{prefix}{i}")
    return d


SRC, TGT = _dict(17, "s"), _dict(13, "t")


def build(arch=None, seed=0, **overrides):
    """Build through the registered arch function (defaults only), tiny sizes, float64, eval mode."""
    args = argparse.Namespace(**{**TINY, **overrides})
    if arch is not None:
        ARCH_CONFIG_REGISTRY[arch](args)
    cfg = DPNS2SConfig.from_namespace(args)
    torch.manual_seed(seed)
    return DPNS2SModel.build_model(cfg, _Task(SRC, TGT)).double().eval()


def batch(seed=0, bsz=3, src_len=7, tgt_len=6):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(SRC.nspecial, len(SRC), (bsz, src_len), generator=g)
    src[0, :3] = SRC.pad()  # left padding, as fairseq's translation task
    lengths = src.ne(SRC.pad()).sum(1)
    tgt = torch.randint(TGT.nspecial, len(TGT), (bsz, tgt_len), generator=g)
    tgt[:, 0] = TGT.eos()
    return src, lengths, tgt


def logits(model, src, lengths, tgt):
    return model(src, lengths, tgt)[0]


# ------------------------------------------------------------------------------------------ gate
def test_gate_matches_eq9_and_lies_in_open_unit_interval():
    torch.manual_seed(0)
    gate = DPNGate(5).double()
    a, b = torch.randn(4, 3, 5, dtype=torch.double), torch.randn(4, 3, 5, dtype=torch.double)
    fused, g = gate(a, b)
    w, bias = gate.proj.weight.view(-1), gate.proj.bias
    g_ref = torch.sigmoid(torch.cat([a, b], -1) @ w + bias).unsqueeze(-1)
    assert g.shape == (4, 3, 1)
    assert torch.allclose(g, g_ref)
    assert torch.allclose(fused, a * (1 - g_ref) + b * g_ref)
    assert (g > 0).all() and (g < 1).all() and g.std() > 0


def test_gate_forcing():
    gate = DPNGate(4)
    a, b = torch.randn(2, 4), torch.randn(2, 4)
    gate.force(0.0)
    assert torch.equal(gate(a, b)[0], a)
    gate.force(1.0)
    assert torch.equal(gate(a, b)[0], b)
    gate.force(0.25)
    assert torch.allclose(gate(a, b)[0], 0.75 * a + 0.25 * b)
    gate.force(None)
    assert not torch.equal(gate(a, b)[0], a)
    with pytest.raises(ValueError, match="must lie in"):
        gate.force(1.5)
    with pytest.raises(ValueError, match="same shape"):
        gate(a, b[:, :3])


def test_model_gates_lie_in_open_unit_interval():
    model = build("dpn_s2s_m9")
    seen = []
    hooks = [g.register_forward_hook(lambda m, i, o: seen.append(o[1])) for g in model.decoder.gates().values()]
    logits(model, *batch())
    for h in hooks:
        h.remove()
    # 3 CNN layers + 2 SAN layers context gates + the output gate
    assert len(seen) == 6 and set(model.decoder.gates()) == {"cnn.0", "cnn.1", "cnn.2", "san.0", "san.1", "output"}
    for g in seen:
        assert ((g > 0) & (g < 1)).all()


# --------------------------------------------------------- forcing gates = the single-flow model
@pytest.mark.parametrize("gates,single", [
    ((0.0, None, 0.0), 1),  # CNN decoder reads the CNN encoder: M1
    ((1.0, None, 0.0), 4),  # CNN decoder reads the SAN encoder: M4
    ((None, 1.0, 1.0), 2),  # SAN decoder reads the CNN encoder: M2
    ((None, 0.0, 1.0), 5),  # SAN decoder reads the SAN encoder: M5
])
def test_forced_gates_reproduce_single_flow_model(gates, single):
    full = build("dpn_s2s_m9", seed=3)
    full.force_gates(*gates)
    small = build(f"dpn_s2s_m{single}", seed=4)
    missing, _unexpected = small.load_state_dict(full.state_dict(), strict=False)
    assert missing == [], f"M{single} has parameters M9 lacks: {missing}"
    data = batch(seed=1)
    out_full, out_small = logits(full, *data), logits(small, *data)
    assert torch.equal(out_full, out_small)
    full.force_gates(None, None, None)  # learned gates mix the flows: the output changes
    assert (logits(full, *data) - out_small).abs().max() > 1e-3


def test_forcing_via_config_option():
    model = build("dpn_s2s_m9", force_output_gate=0.0, force_cnn_context_gate=1.0)
    gates = model.decoder.gates()
    assert gates["output"].forced == 0.0 and gates["cnn.0"].forced == 1.0 and gates["san.0"].forced is None


# ------------------------------------------------------------------------------- ablations
def expected_params(enc, dec, cfg=TINY, vs=len(SRC), vt=len(TGT), output="tied", cross="shared", proj="auto"):
    """Parameter count of DPN-S2S written out from Section 3 (weight-normalised CNN layers carry
    an extra gain per output unit) for a reading of Section 4: ``output`` tied / separate W^s
    (Eq. 10), ``cross`` shared / per-path SAN decoder-to-encoder attention, ``proj`` auto / always
    (the CNN path's fc1/fc2, absent under "auto" where the widths agree: Eq. 5 with h^0 = e)."""
    d = cfg["encoder_embed_dim"]

    def wn_linear(i, o):
        return i * o + 2 * o

    def conv_path(h, k, n, n_mem):
        per_layer = k * h * 2 * h + 2 * (2 * h)
        if n_mem:
            per_layer += wn_linear(h, d) + wn_linear(d, h) + (2 * d + 1 if n_mem == 2 else 0)
        io = wn_linear(d, h) + wn_linear(h, d) if (proj == "always" or h != d) else 0
        return io + n * per_layer

    def san_path(ffn, n, n_mem):
        mha, ln = 4 * (d * d + d), 2 * d
        per_layer = mha + ln + d * ffn + ffn + ffn * d + d + ln
        if n_mem:
            per_layer += (1 if cross == "shared" else n_mem) * mha + ln + (2 * d + 1 if n_mem == 2 else 0)
        return n * per_layer

    enc_p, dec_p = enc.split(","), dec.split(",")
    total = vs * d + vt * d + (vt * d if output == "separate" else 0)  # embeddings, output projection
    total += 2 * (1024 + 2) * d  # learned positions: 1024 + padding index + 1 rows per side
    if "cnn" in enc_p:
        total += conv_path(cfg["encoder_conv_dim"], cfg["encoder_kernel_size"], cfg["encoder_conv_layers"], 0)
    if "san" in enc_p:
        total += san_path(cfg["encoder_ffn_embed_dim"], cfg["encoder_san_layers"], 0)
    if "cnn" in dec_p:
        total += conv_path(cfg["decoder_conv_dim"], cfg["decoder_kernel_size"], cfg["decoder_conv_layers"], len(enc_p))
    if "san" in dec_p:
        total += san_path(cfg["decoder_ffn_embed_dim"], cfg["decoder_san_layers"], len(enc_p))
    if len(dec_p) == 2:
        total += 2 * d + 1  # output gate, Eq. 10
    return total


@pytest.mark.parametrize("m", sorted(ABLATIONS))
def test_ablation_builds_trains_and_counts_parameters(m):
    enc, dec = ABLATIONS[m]
    model = build(f"dpn_s2s_m{m}")
    assert model.encoder.paths == enc.split(",") and model.decoder.paths == dec.split(",")
    assert (model.encoder.cnn is not None) == ("cnn" in enc) and (model.encoder.san is not None) == ("san" in enc)
    assert (model.decoder.cnn is not None) == ("cnn" in dec) and (model.decoder.san is not None) == ("san" in dec)
    assert sum(p.numel() for p in model.parameters()) == expected_params(enc, dec)
    # one SGD step on a fixed batch lowers its loss; every parameter gets a finite gradient
    model.train()
    src, lengths, tgt = batch(seed=2)
    target = torch.roll(tgt, -1, dims=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def loss_fn():
        lp = model.get_normalized_probs(model(src, lengths, tgt), log_probs=True)
        return -lp.gather(-1, target.unsqueeze(-1)).mean()

    torch.manual_seed(0)
    model.apply(lambda mod: setattr(mod, "p", 0.0) if hasattr(mod, "apply_during_inference") else None)
    loss = loss_fn()
    loss.backward()
    for name, p in model.named_parameters():
        if name.endswith("embed_tokens.weight"):
            continue  # rows of unused types get zero gradient, which is fine
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
    opt.step()
    assert loss_fn().item() < loss.item()


def test_paper_archs_fill_defaults_and_cli_wins():
    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY["dpn_s2s_nist_zh_en"](args)
    assert (args.encoder_conv_layers, args.encoder_san_layers, args.dropout, args.decoder_ffn_embed_dim) == (12, 6, 0.2, 1024)
    args = argparse.Namespace(dropout=0.3, decoder_paths="san")
    ARCH_CONFIG_REGISTRY["dpn_s2s_m7"](args)
    assert args.dropout == 0.3 and args.decoder_paths == "san" and args.encoder_paths == "cnn,san"


def test_bad_paths_option_is_a_clear_error():
    with pytest.raises(ValueError, match="--encoder-paths must be"):
        build(encoder_paths="cnn,rnn")
    with pytest.raises(ValueError, match="--decoder-paths must be"):
        build(decoder_paths="")
    with pytest.raises(ValueError, match="must equal --decoder-embed-dim"):
        build(decoder_embed_dim=4)


# ------------------------------------------------------------------- causality and batching
@pytest.mark.parametrize("m", [7, 8, 9])  # decoder CNN path only, SAN path only, both
def test_decoder_paths_are_causal(m):
    model = build(f"dpn_s2s_m{m}")
    src, lengths, tgt = batch(seed=5)
    base = logits(model, src, lengths, tgt)
    for t in range(1, tgt.size(1)):
        changed = tgt.clone()
        changed[:, t] = (changed[:, t] - TGT.nspecial + 1) % (len(TGT) - TGT.nspecial) + TGT.nspecial
        out = logits(model, src, lengths, changed)
        assert torch.equal(out[:, :t], base[:, :t]), f"position {t} leaks into earlier outputs"
        assert (out[:, t] - base[:, t]).abs().max() > 1e-6, f"position {t} has no effect on its own output"


def test_left_padded_batch_equals_single_sentences():
    model = build("dpn_s2s_m9")
    src, lengths, tgt = batch(seed=6)
    out = logits(model, src, lengths, tgt)
    for i in range(src.size(0)):
        s = src[i : i + 1, src.size(1) - lengths[i]:]
        single = logits(model, s, lengths[i : i + 1], tgt[i : i + 1])
        assert (single - out[i : i + 1]).abs().max() < 1e-10


def test_incremental_equals_full_after_reorder():
    model = build("dpn_s2s_m9")
    src, lengths, tgt = batch(seed=7)
    enc = model.encoder(src, lengths)
    full = model.decoder(tgt, enc)[0]
    order = torch.tensor([2, 0, 0])
    state, steps = {}, []
    for t in range(tgt.size(1)):
        if t == 3:
            model.decoder.reorder_incremental_state_scripting(state, order)
            enc = model.encoder.reorder_encoder_out(enc, order)
            full, tgt = full.index_select(0, order), tgt.index_select(0, order)
            steps = [s.index_select(0, order) for s in steps]
        steps.append(model.decoder(tgt[:, : t + 1], enc, incremental_state=state)[0][:, -1])
    # fairseq's MultiheadAttention takes its incremental softmax in float32, hence 1e-6 and not 1e-12
    assert (full - torch.stack(steps, 1)).abs().max() < 1e-6


def _incremental(model, src, lengths, tgt):
    enc, state = model.encoder(src, lengths), {}
    return torch.stack([model.decoder(tgt[:, : t + 1], enc, incremental_state=state)[0][:, -1]
                        for t in range(tgt.size(1))], 1)


def test_decoding_weight_is_a_view_that_follows_the_parameters():
    """The causal convolutions' linearized decoding weight is a view of the kernel (no per-step
    copy), with and without weight norm, and so follows in-place updates."""
    model = build("dpn_s2s_m9")
    src, lengths, tgt = batch(seed=3)
    conv = model.decoder.cnn.convolutions[0]
    k, d_in, d_out = conv.weight.shape
    x = torch.randn(2, k * d_in, dtype=torch.double)
    for generation_fast in (False, True):
        if generation_fast:
            model.make_generation_fast_()  # what fairseq-generate's prepare_for_inference_ runs
            assert isinstance(conv.weight, torch.nn.Parameter)  # weight norm removed
        logits(model, src, lengths, tgt)  # under weight norm, the forward pre-hook sets conv.weight
        lin = conv._get_linearized_weight()
        assert lin.data_ptr() == conv.weight.data_ptr()  # a view
        ref = conv.weight.permute(2, 0, 1).contiguous().view(d_out, -1)  # fairseq's copy
        assert torch.equal(lin, ref) and torch.allclose(x @ lin.t(), x @ ref.t(), atol=1e-12)
    with torch.no_grad():
        before = _incremental(model, src, lengths, tgt)
        assert (model.decoder(tgt, model.encoder(src, lengths))[0] - before).abs().max() < 1e-6
        conv.weight.mul_(-0.5)  # an in-place update (optimizer step, load_state_dict)
        after = _incremental(model, src, lengths, tgt)
        assert (after - before).abs().max() > 1e-3
        assert (model.decoder(tgt, model.encoder(src, lengths))[0] - after).abs().max() < 1e-6


def test_alignment_flows_are_distributions_over_real_source_tokens():
    model = build("dpn_s2s_m9")
    src, lengths, tgt = batch(seed=8)
    _, extra = model(src, lengths, tgt, return_all_attn=True)
    assert set(extra["flows"]) == {"cc", "ca", "ac", "aa"}
    assert len(extra["flows"]["cc"]) == TINY["decoder_conv_layers"] and len(extra["flows"]["aa"]) == TINY["decoder_san_layers"]
    for flow in extra["flows"].values():
        for a in flow:
            assert a.shape == (3, tgt.size(1), src.size(1))
            assert torch.allclose(a.sum(-1), torch.ones_like(a.sum(-1)))
            assert a[0, :, :3].abs().max() == 0  # padded source positions get no attention


# ------------------------------------------------------------------------------------------ alignment
@pytest.mark.parametrize("m", [9, 1, 5, 6])
def test_alignment_is_the_mean_of_the_last_layer_flows(m):
    """extra["attn"] (what fairseq's --print-alignment / --replace-unk read) is the mean of the last
    decoder layer's decoder->encoder distributions over the flows the model has, in the full
    forward and step by step."""
    model = build(f"dpn_s2s_m{m}")
    src, lengths, tgt = batch(seed=3)
    _, extra = model(src, lengths, tgt)
    flows = extra["flows"]
    expected = torch.stack([layers[-1] for layers in flows.values()]).mean(0)
    torch.testing.assert_close(extra["attn"][0], expected, rtol=0, atol=0)
    assert torch.allclose(expected.sum(-1), torch.ones_like(expected.sum(-1)))
    assert expected[0, :, :3].abs().max() == 0
    enc = model.encoder(src, lengths)
    state, steps = {}, []
    for t in range(tgt.size(1)):
        steps.append(model.decoder(tgt[:, : t + 1], enc, incremental_state=state)[1]["attn"][0])
    # fairseq's multi-head attention takes its softmax in float32, hence 1e-6
    torch.testing.assert_close(torch.cat(steps, 1), extra["attn"][0], rtol=0, atol=1e-6)


def test_generate_print_alignment(tmp_path):
    """fairseq-generate --print-alignment prints an A- line for every DPN hypothesis, with source
    and target indices inside the sentence pair."""
    from contract_lib import REPO, console_script, make_translation_data, run_cmd

    data, lang_args = make_translation_data(tmp_path / "data", n_train=24, n_valid=6)
    user_dir = str(REPO / "fairseq_local")
    tiny = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()]
    run_cmd([console_script("fairseq-train"), data, "--user-dir", user_dir, "--arch", "dpn_s2s_m9", *tiny,
             *lang_args, "--cpu", "--optimizer", "adam", "--lr", "0.001", "--max-tokens", "200",
             "--max-update", "2", "--save-dir", tmp_path / "ckpt", "--no-epoch-checkpoints",
             "--disable-validation", "--seed", "1"])
    proc = run_cmd([console_script("fairseq-generate"), data, "--user-dir", user_dir, *lang_args,
                    "--path", tmp_path / "ckpt" / "checkpoint_last.pt", "--cpu", "--gen-subset", "valid",
                    "--beam", "3", "--max-len-b", "12", "--batch-size", "6", "--print-alignment"])
    lines = proc.stdout.splitlines()
    src_len = {l.split("\t")[0][2:]: len(l.split("\t")[1].split()) for l in lines if l.startswith("S-")}
    hyp_len = {l.split("\t")[0][2:]: len(l.split("\t")[2].split()) for l in lines if l.startswith("H-")}
    aligns = {l.split("\t")[0][2:]: l.split("\t")[1].split() for l in lines if l.startswith("A-")}
    assert hyp_len and set(aligns) == set(hyp_len), f"A- lines for {sorted(aligns)}, H- for {sorted(hyp_len)}"
    for sid, pairs in aligns.items():
        assert pairs, f"sentence {sid}: empty alignment"
        for pair in pairs:
            i, j = map(int, pair.split("-"))
            assert 0 <= i < src_len[sid] and 0 <= j <= hyp_len[sid], (sid, pair)


# ------------------------------------------------------------------------------- sizes (Table 1)
EQUAL_WIDTHS = {**TINY, "encoder_conv_dim": 8, "decoder_conv_dim": 8}  # conv width = embedding width, as Section 4.2
READINGS = [(o, c, p) for o in ("tied", "separate") for c in ("shared", "per-path") for p in ("auto", "always")]


@pytest.mark.parametrize("output,cross,proj", READINGS)
def test_each_reading_builds_the_parameters_it_names(output, cross, proj):
    model = build("dpn_s2s_m9", decoder_output_embed=output, san_cross_attention=cross, cnn_path_projections=proj,
                  **EQUAL_WIDTHS)
    assert sum(p.numel() for p in model.parameters()) == expected_params(
        "cnn,san", "cnn,san", EQUAL_WIDTHS, output=output, cross=cross, proj=proj)
    dec = model.decoder
    assert (dec.output_projection.weight is dec.embed.embed_tokens.weight) == (output == "tied")
    for layer in dec.san.layers:
        a, c = layer.encoder_attn["a"], layer.encoder_attn["c"]
        assert a is not c  # each path keeps its own incremental cache of projected encoder states
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            assert (getattr(a, name).weight is getattr(c, name).weight) == (cross == "shared"), name
    for path in (model.encoder.cnn, dec.cnn):
        assert (path.fc1 is None and path.fc2 is None) == (proj == "auto")


def test_paper_archs_default_to_the_table1_reading():
    for arch in ["dpn_s2s_iwslt_de_en", "dpn_s2s_nist_zh_en", "dpn_s2s_gigaword"] + [f"dpn_s2s_m{i}" for i in range(1, 10)]:
        args = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[arch](args)
        cfg = DPNS2SConfig.from_namespace(args)
        assert (cfg.decoder_output_embed, cfg.san_cross_attention, cfg.cnn_path_projections) == (
            "tied", "shared", "auto"), arch


def test_shared_cross_attention_equals_per_path_attention_with_equal_weights():
    """One set of SAN decoder-to-encoder projections for both encoder paths is the per-path model
    whose two attentions hold the same weights (full pass and incremental decoding); a per-path
    model whose CNN-path attention differs gives different outputs, so that path's projections are
    used."""
    shared = build("dpn_s2s_m9", seed=3, san_cross_attention="shared")
    per_path = build("dpn_s2s_m9", seed=4, san_cross_attention="per-path")
    per_path.load_state_dict(shared.state_dict())
    for layer in per_path.decoder.san.layers:
        assert layer.encoder_attn["a"].k_proj.weight is not layer.encoder_attn["c"].k_proj.weight
    src, lengths, tgt = batch(seed=8)
    out = logits(shared, src, lengths, tgt)
    assert (logits(per_path, src, lengths, tgt) - out).abs().max() < 1e-12
    assert (_incremental(shared, src, lengths, tgt) - out).abs().max() < 1e-6
    with torch.no_grad():
        per_path.decoder.san.layers[0].encoder_attn["c"].v_proj.weight.mul_(1.5)
    assert (logits(per_path, src, lengths, tgt) - out).abs().max() > 1e-4


def test_cnn_path_without_projections_is_eq5_on_the_embeddings():
    """--cnn-path-projections auto with equal widths: h^0 = e (Eq. 5), the encoder keys are the last
    GLU layer's output, written out here layer by layer from the path's own convolutions."""
    model = build("dpn_s2s_m9", **EQUAL_WIDTHS)
    src, lengths, _ = batch(seed=9)
    enc = model.encoder(src, lengths)
    pad = src.eq(SRC.pad()).t().unsqueeze(-1)
    e = (model.encoder.embed.embed_tokens(src) + model.encoder.embed.embed_positions(src)).transpose(0, 1)
    h = e
    for conv in model.encoder.cnn.convolutions:
        h = (torch.nn.functional.glu(conv(h.masked_fill(pad, 0.0)), dim=2) + h) * 0.5 ** 0.5
    keys = h.masked_fill(pad, 0.0)
    torch.testing.assert_close(enc["cnn_keys"][0], keys, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(enc["cnn_values"][0], (keys + e) * 0.5 ** 0.5, rtol=1e-12, atol=1e-12)


def _param_counts():
    from fairseq_local_repro.analysis import dpn_param_counts

    return dpn_param_counts


def test_table1_parameter_counts_match_the_paper():
    """Table 1 (IWSLT14 De-En, fairseq's 10k joint BPE: 8848 de / 6632 en types): the four baselines
    within 0.2% of the paper, DPN-S2S within 3% and below the deeper CNN and SAN (the paper's
    "fewer parameters"); the other reading of Section 4 (separate W^s, one SAN cross attention per
    encoder path, ConvS2S fc1/fc2) stays buildable and is the 14.35M model."""
    pc = _param_counts()
    ours = {arch: pc.count(arch, 8848, 6632) for arch in pc.PAPER}
    for arch, paper in pc.PAPER.items():
        tol = 0.03 if arch == "dpn_s2s_iwslt_de_en" else 0.002
        assert abs(ours[arch] - paper) <= tol * paper, (arch, ours[arch], paper)
    dpn = ours["dpn_s2s_iwslt_de_en"]
    assert dpn < ours["dpn_baseline_deeper_cnn_iwslt"] and dpn < ours["dpn_baseline_deeper_san_iwslt"]
    assert round(dpn / 1e6, 2) == 11.86
    other = pc.count("dpn_s2s_iwslt_de_en", 8848, 6632, **pc.FAIRSEQ_READING)
    assert round(other / 1e6, 2) == 14.35


def test_table2_sizes_as_documented():
    """Table 2 (NIST, 37k / 25k vocabularies): the sizes docs/dpn_s2s.md reports; the stated widths
    do not make them "approximately similar" (DPN < CNN < SAN under every embedding reading)."""
    pc = _param_counts()
    sizes = {arch: round(pc.count(arch, 37000, 25000) / 1e6, 2) for arch in pc.NIST}
    assert sizes == {"dpn_s2s_nist_zh_en": 38.51, "dpn_baseline_cnn_nist": 64.34, "dpn_baseline_san_nist": 89.73}


# ------------------------------------------------------------------------------ fused attention
@pytest.mark.parametrize("m,fused_cnn", [(9, True), (3, True), (8, True), (9, False)])
def test_fused_attention_equals_the_weighted_path_outputs_and_gradients(m, fused_cnn, monkeypatch):
    """Without return_all_attn the decoder-to-encoder attentions that return no weights are fused
    (scaled_dot_product_attention; the CNN path's where FUSED_DEVICES says so, here forced on CPU);
    they give the explicit softmax path's outputs and gradients, in eval and in training (no
    dropout), and the flows hold weights exactly where they are read."""
    from fairseq_local.modules import dpn_paths

    if fused_cnn:
        monkeypatch.setattr(dpn_paths, "FUSED_DEVICES", ("cpu", "cuda"))
    sdpa, scales = torch.nn.functional.scaled_dot_product_attention, []

    def spy(*args, **kwargs):  # the CNN path's Eq. 4 passes scale=1
        scales.append(kwargs.get("scale"))
        return sdpa(*args, **kwargs)
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    model = build(f"dpn_s2s_m{m}", dropout=0.0)
    src, lengths, tgt = batch(seed=5)
    n_layers = {"c": TINY["decoder_conv_layers"], "a": TINY["decoder_san_layers"]}

    def run(train, all_attn):
        model.train(train)
        model.zero_grad()
        out, extra = model(src, lengths, tgt, return_all_attn=all_attn)
        out.sin().sum().backward()
        return out.detach(), extra, [p.grad.clone() for p in model.parameters() if p.grad is not None]

    ref, extra_all, grads_ref = run(False, True)
    assert 1.0 not in scales
    for flow, layers in extra_all["flows"].items():
        assert len(layers) == n_layers[flow[0]] and all(a is not None for a in layers)
    for train in (False, True):
        out, extra, grads = run(train, False)
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
        assert len(grads) == len(grads_ref)
        for g, g_ref in zip(grads, grads_ref):
            torch.testing.assert_close(g, g_ref, rtol=1e-10, atol=1e-12)
        for flow, layers in extra["flows"].items():
            assert len(layers) == n_layers[flow[0]] and all(a is None for a in layers[:-1])
            if train:
                assert layers[-1] is None
            else:  # the alignment's layer: the weights of the full computation
                torch.testing.assert_close(layers[-1], extra_all["flows"][flow][-1], rtol=0, atol=1e-12)
        assert (extra["attn"][0] is None) == train
    # CNN layers fused: 2 of 3 in eval (the last gives the alignment), 3 in training
    assert scales.count(1.0) == (5 if fused_cnn and "c" in [f[0] for f in extra["flows"]] else 0)


def test_attention_layers_choice():
    from fairseq_local.modules.dpn_paths import attention_layers

    assert attention_layers(True, 3) == [True] * 3 and attention_layers(False, 2) == [False] * 2
    assert attention_layers("last", 3) == [False, False, True] and attention_layers("last", 0) == []
    with pytest.raises(ValueError) as e:
        attention_layers("first", 2)
    assert str(e.value) == "need_attn must be False, True or 'last', got 'first'"


# ------------------------------------------------------------------------------------- the gate
def test_gate_options_and_messages():
    gate = DPNGate(4)
    assert gate.extra_repr() == "" and "forced" not in repr(gate)
    for v in (0.0, 0.25, 1.0):
        gate.force(v)
        assert gate.forced == v and gate.extra_repr() == f"forced={v}"
    gate.force(None)
    assert gate.forced is None and gate.extra_repr() == ""
    for bad in (-0.01, 1.01, 1.5):
        with pytest.raises(ValueError) as err:
            gate.force(bad)
        assert str(err.value) == f"DPNGate: a forced gate value must lie in [0, 1], got {bad}"
    a, b = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    with pytest.raises(ValueError) as err:
        gate(a, b[..., :3])
    assert str(err.value) == "DPNGate: inputs must have the same shape, got (2, 3, 4) and (2, 3, 3)"
    gate.force(0.25)
    fused, g = gate(a, b)
    assert g.shape == (2, 3, 1) and g.dtype == a.dtype and bool((g == 0.25).all())
    torch.testing.assert_close(fused, a + 0.25 * (b - a))
    assert DPNGate(4, forced=1.0).forced == 1.0 and DPNGate(4, forced=0).forced == 0.0


def test_gate_initialisation():
    """W ~ N(0, 1/(2d)) (unit-variance pre-activation for unit inputs), b = 0: g = 0.5 on average."""
    torch.manual_seed(0)
    d = 2000
    gate = DPNGate(d)
    w = gate.proj.weight.detach()
    assert w.shape == (1, 2 * d) and gate.proj.bias.shape == (1,) and float(gate.proj.bias.detach()) == 0.0
    assert abs(float(w.std()) * math.sqrt(2 * d) - 1) < 0.05 and abs(float(w.mean())) < 0.01
    assert gate.forced is None


# --------------------------------------------------------------------------- encoder output
@pytest.mark.parametrize("m,names", [(9, ("cnn_keys", "san_out")), (1, ("cnn_keys",)), (5, ("san_out",))])
def test_encoder_output_fields(m, names):
    """encoder_out is the SAN path's output when there is one, else the CNN keys; src_lengths and
    the padding mask are passed through (B first)."""
    model = build(f"dpn_s2s_m{m}")
    src, lengths, _ = batch(seed=1)
    enc = model.encoder(src, lengths)
    assert set(enc) == {"encoder_out", "encoder_padding_mask", "cnn_keys", "cnn_values", "san_out", "src_lengths"}
    assert enc["encoder_out"][0] is enc[names[-1]][0]
    assert bool(enc["cnn_values"]) == ("cnn_keys" in names)
    assert enc["src_lengths"][0] is lengths and torch.equal(enc["encoder_padding_mask"][0], src.eq(SRC.pad()))
    assert model.encoder(src)["src_lengths"] == []
    for key in ("cnn_keys", "san_out"):
        assert bool(enc[key]) == (key in names)
    if "san_out" in names:
        assert enc["san_out"][0].shape == (src.size(1), src.size(0), 8)


# --------------------------------------------------------------------- beam-style reordering
def test_beamable_cross_attention_keeps_one_copy_per_sentence():
    """With fairseq's beamable encoder-decoder attention (set_beam_size(2), as SequenceGenerator
    sets it) the cached projected encoder states hold one copy per sentence and a reorder within
    each sentence's beams leaves them alone; step-by-step decoding still equals the full pass."""
    model = build("dpn_s2s_m9")
    src, lengths, tgt = batch(seed=5, bsz=2)
    src, lengths = src.repeat_interleave(2, 0), lengths.repeat_interleave(2, 0)  # 2 sentences x 2 beams
    tgt = batch(seed=6, bsz=4)[2]
    enc = model.encoder(src, lengths)
    full = model.decoder(tgt, enc)[0]
    model.decoder.set_beam_size(2)
    order = torch.tensor([1, 1, 3, 2])  # beams move only within their sentence
    state, steps = {}, []
    for t in range(tgt.size(1)):
        if t == 4:
            model.decoder.reorder_incremental_state_scripting(state, order)
            full, tgt = full.index_select(0, order), tgt.index_select(0, order)
            steps = [s.index_select(0, order) for s in steps]
        steps.append(model.decoder(tgt[:, : t + 1], enc, incremental_state=state)[0][:, -1])
    cached = [v for k, v in state.items() if "attn_state" in k and v.get("prev_key") is not None
              and v["prev_key"].size(2) == src.size(1)]
    assert cached and all(v["prev_key"].size(0) == 2 for v in cached)  # one copy per sentence
    assert (full - torch.stack(steps, 1)).abs().max() < 1e-6
    model.decoder.set_beam_size(1)


# -------------------------------------------------------------------------------- dropout rates
def test_each_dropout_rate_reaches_its_module():
    """dropout (residual branches, embeddings), attention_dropout (attention weights) and
    activation_dropout (after the FFN ReLU) land on their own modules, named for fairseq's
    --retain-dropout-modules."""
    model = build("dpn_s2s_m9", dropout=0.15, attention_dropout=0.25, activation_dropout=0.35)
    for side in (model.encoder, model.decoder):
        assert side.cnn.dropout_module.p == 0.15 and side.cnn.dropout_module.module_name == "ConvPath"
        for layer in side.san.layers:
            assert layer.dropout_module.p == 0.15 and layer.dropout_module.module_name == "SANLayer"
            assert layer.activation_dropout_module.p == 0.35
            assert layer.activation_dropout_module.module_name == "SANLayer"
            assert layer.self_attn.dropout_module.p == 0.25
            assert all(att.dropout_module.p == 0.25 for att in layer.encoder_attn.values())
            assert not layer.normalize_before
    for layer in model.decoder.san.layers:
        assert set(layer.encoder_attn) == {"a", "c"} and layer.paths == ("a", "c")


# ------------------------------------------------------------------------- decoder extras
@pytest.mark.parametrize("m", [9, 7, 8])
def test_output_gate_is_reported_batch_first(m):
    """extra["output_gate"]: g^o of Eq. 10 per target position (B x T x 1), the value the gate
    computed; None when the decoder has one path (no output gate)."""
    model = build(f"dpn_s2s_m{m}")
    src, lengths, tgt = batch(seed=4)
    seen = []
    hook = model.decoder.output_gate.register_forward_hook(lambda mod, i, o: seen.append(o[1])) \
        if model.decoder.output_gate is not None else None
    _, extra = model(src, lengths, tgt)
    if hook is None:
        assert "output_gate" in extra and extra["output_gate"] is None
        return
    hook.remove()
    assert extra["output_gate"].shape == (src.size(0), tgt.size(1), 1)
    torch.testing.assert_close(extra["output_gate"], seen[0].transpose(0, 1), rtol=0, atol=0)
    assert extra["output_gate"].std() > 0


def test_alignment_with_one_layer_per_decoder_path():
    """A decoder with one layer per path: each flow has one alignment, and extra["attn"] is their mean."""
    model = build("dpn_s2s_m9", decoder_conv_layers=1, decoder_san_layers=1)
    src, lengths, tgt = batch(seed=3)
    _, extra = model(src, lengths, tgt)
    flows = extra["flows"]
    assert set(flows) == {"cc", "ca", "ac", "aa"} and all(len(v) == 1 for v in flows.values())
    torch.testing.assert_close(extra["attn"][0], sum(v[0] for v in flows.values()) / 4, rtol=1e-6, atol=1e-7)


def test_decoder_accepts_an_empty_padding_mask_list():
    """fairseq's encoders may give encoder_padding_mask = [] for 'no padding': the decoder reads it
    as an unpadded source."""
    model = build("dpn_s2s_m9")
    src, lengths, tgt = batch(seed=2)
    src[0, :3] = src[0, 3]  # no padding
    enc = model.encoder(src, lengths)
    out = model.decoder(tgt, enc)[0]
    torch.testing.assert_close(model.decoder(tgt, {**enc, "encoder_padding_mask": []})[0], out, rtol=0, atol=0)
