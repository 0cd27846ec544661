"""MC-RNN analysis commands: BLEU by source length (Figure 4) and the channel-attention map (Figure 3),
plus the seq2seq / LM models' arch defaults."""
import pytest
import torch
from fairseq import options
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY

import fairseq_local  # noqa: F401
from fairseq_local_repro.analysis import mc_rnn_bleu_by_length as bbl
from fairseq_local_repro.analysis import mc_rnn_channel_attention as cha


def _gen(path, items):
    lines = []
    for i, (src, ref, hyp) in enumerate(items):
        lines += [f"S-{i}\t{src}", f"T-{i}\t{ref}", f"H-{i}\t-0.5\t{hyp}", f"P-{i}\t-0.1 -0.2"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_bleu_by_length_buckets_and_scores(tmp_path):
    short = [("a b@@ c", "the cat sat on the mat", "the cat sat on the mat")] * 3
    long_ = [(" ".join(["w"] * 15), "a dog ran in the big park", "a dog ran in the big park")] * 2
    a = tmp_path / "a.gen"
    b = tmp_path / "b.gen"
    _gen(a, short + long_)
    _gen(b, [(s, r, "the cat sat") for s, r, _ in short] + long_)
    rows = bbl.bleu_by_length(bbl.read_generate(a), bbl.read_generate(b), [10, 20])
    assert [(r[0], r[1]) for r in rows] == [("1-10", 3), ("11-20", 2)]  # "a b@@ c" is 2 words
    assert rows[0][2] == pytest.approx(100) and rows[0][3] < 50
    assert rows[1][2] == pytest.approx(100) and rows[1][3] == pytest.approx(100)
    png = tmp_path / "fig4.png"
    bbl.main(["--gen-a", str(a), "--gen-b", str(b), "--buckets", "10,20", "--png", str(png)])
    assert png.stat().st_size > 1000


def test_bleu_by_length_rejects_bad_input(tmp_path):
    a, b = tmp_path / "a.gen", tmp_path / "b.gen"
    _gen(a, [("x y", "r", "r")] * 2)
    _gen(b, [("x y", "r", "r")])
    with pytest.raises(SystemExit, match="different sentence ids"):
        bbl.bleu_by_length(bbl.read_generate(a), bbl.read_generate(b), [10])
    (tmp_path / "c.gen").write_text("S-x\tfoo\n")
    with pytest.raises(SystemExit, match="c.gen:1"):
        bbl.read_generate(tmp_path / "c.gen")


def _dict():
    d = Dictionary()
    for w in "home-grown champions have been few and far between".split():
        d.add_symbol(w)
    return d


def _build(arch, extra=(), task="translation"):
    d = _dict()
    args = options.parse_args_and_arch(options.get_training_parser(),
                                       ["/dev/null", "--task", task, "--arch", arch, *extra])

    class Task:
        source_dictionary = target_dictionary = dictionary = d

    return ARCH_MODEL_REGISTRY[arch].build_model(args, Task()), Task(), args


def test_channel_attention_map(tmp_path):
    torch.manual_seed(0)
    model, task, _ = _build("mc_rnn_iwslt_de_en_3", ["--encoder-embed-dim", "8", "--encoder-hidden-size", "8",
                                                     "--decoder-embed-dim", "8", "--decoder-hidden-size", "8"])
    model.eval()
    sent = "home-grown champions have been few"
    tokens, alpha = cha.channel_weights(model, task, sent, "encoder", 1, "backward")
    assert tokens[-1] == "</s>" and alpha.shape == (6, 3)
    torch.testing.assert_close(alpha.sum(-1), torch.ones(6))
    tokens, alpha = cha.channel_weights(model, task, sent, "decoder", 0, target="and far between")
    assert alpha.shape == (4, 3)
    cha.draw(tokens, alpha, str(tmp_path / "fig3.png"), "test")
    assert (tmp_path / "fig3.png").stat().st_size > 1000


def test_arch_defaults_and_cli_override():
    model, _, args = _build("mc_rnn_iwslt_de_en_4")
    assert args.mc_channels == 4 and args.dropout == 0.2 and args.encoder_layers == 2
    assert model.encoder.layers[0].channels == 4 and model.decoder.layers[1].hidden_size == 256
    _, _, args = _build("mc_rnn_gigaword_2", ["--mc-channels", "3", "--mc-cell-memory", "block_mean"])
    assert args.mc_channels == 3 and args.encoder_layers == 4 and args.mc_cell_memory == "block_mean"
    gates, _, args = _build("mc_rnn_iwslt_de_en_3")  # table rows: gate space, h0 in every lag slot
    assert (args.mc_weight_space, args.mc_init_state) == ("gates", "all")
    assert gates.decoder.layers[0].weight_hh is None and gates.decoder.layers[0].block_weight.shape == (3, 1024, 256)
    assert gates.decoder.layers[0].init_state == "all"
    hidden, _, args = _build("mc_rnn_gigaword_3", ["--mc-weight-space", "hidden", "--mc-init-state", "first"])
    assert hidden.decoder.layers[0].block_weight.shape == (3, 256, 256) and hidden.decoder.layers[0].init_state == "first"
    _, _, args = _build("rnnsearch_iwslt_de_en_large")
    assert args.encoder_hidden_size == 364 and args.dropout == 0.2
    lm, _, args = _build("mc_rnn_lm_ptb", task="language_modeling")
    assert (args.decoder_layers, args.decoder_hidden_size, args.decoder_embed_dim) == (3, 1150, 400)
    assert lm.decoder.fc_out is None and lm.decoder.layers[0].dropconnect == 0.5  # tied, DropConnect


@pytest.mark.parametrize("arch,extra,option", [
    ("mc_rnn_iwslt_de_en_3", ["--mc-channels", "0"], "--mc-channels"),
    ("mc_rnn_iwslt_de_en_3", ["--cell", "lstn"], "--cell"),
    ("mc_rnn_iwslt_de_en_3", ["--mc-cell-memory", "mean"], "--mc-cell-memory"),
    ("mc_rnn_lm_ptb", ["--mc-channels", "-1"], "--mc-channels"),
    ("mc_rnn_gigaword_3", ["--mc-weight-space", "gate"], "--mc-weight-space"),
])
def test_models_reject_impossible_options(arch, extra, option):
    task = "language_modeling" if "lm" in arch else "translation"
    with pytest.raises(ValueError, match=option):
        _build(arch, extra, task)


def test_table5_controls_are_size_matched_to_mc_rnn_3():
    """Table 5's point: Baseline-RNN-large and -deep have MC-RNN-3's size (within 2 %) at the
    paper's ~25k BPE types; MC-RNN-2/3/4 add about the paper's +3/+4/+6M to the baseline."""
    from fairseq_local_repro.analysis import mc_rnn_param_counts as counts

    src, tgt = counts._dict(25000), counts._dict(25000)
    n = {arch: counts.count(arch, src, tgt) for arch in (
        "rnnsearch_iwslt_de_en", "rnnsearch_iwslt_de_en_large", "rnnsearch_iwslt_de_en_deep",
        "mc_rnn_iwslt_de_en_2", "mc_rnn_iwslt_de_en_3", "mc_rnn_iwslt_de_en_4")}
    mc3 = n["mc_rnn_iwslt_de_en_3"]
    assert abs(n["rnnsearch_iwslt_de_en_large"] / mc3 - 1) < 0.02, n
    assert abs(n["rnnsearch_iwslt_de_en_deep"] / mc3 - 1) < 0.02, n
    increments = [(n[f"mc_rnn_iwslt_de_en_{k}"] - n["rnnsearch_iwslt_de_en"]) / 1e6 for k in (2, 3, 4)]
    for ours, paper in zip(increments, (3, 4, 6)):
        assert abs(ours - paper) < 0.5, increments
