"""MC-RNN learns a small real task as fast per update as its Baseline-RNN (docs/mc_rnn.md,
"Learning per update").

The systems train on the first pairs of Multi30k De-En with the same batches, the same seed and
paired initial values (``scripts/analysis/mc_rnn_learning_probe.py --paired-init``): everything
the baseline and the MC-RNN model have in common starts from the same numbers, so what differs
is what the MC-RNN layer does differently from ``nn.LSTM``.
"""
import math
from types import SimpleNamespace

import pytest
import torch

from fairseq_local_repro.analysis import mc_rnn_learning_probe as probe

ARCH = "mc_rnn_iwslt_de_en_3"


def _opts(**kw):
    base = dict(dims=32, layers=1, dropout=0.0, lr=3e-3, clip_norm=1.0, label_smoothing=0.1, seed=1,
                updates=40, eval_every=40)  # one layer, no dropout: what differs is the recurrent layer
    base.update(kw)
    return SimpleNamespace(**base)


@pytest.fixture(scope="module")
def corpus(shared_data):
    pairs = probe.read_pairs(str(shared_data / "multi30k-de-en"), "de", "en", 2200)
    train, valid = pairs[:2000], pairs[2000:]
    src_dict = probe.build_dict([s for s, _ in train], 1000)
    tgt_dict = probe.build_dict([t for _, t in train], 1000)
    return SimpleNamespace(src=src_dict, tgt=tgt_dict,
                           train=probe.make_batches(train, src_dict, tgt_dict, 32, 1),
                           valid=probe.make_batches(valid, src_dict, tgt_dict, 64, 0))


def _train(corpus, systems, opts):
    reference = probe.build(systems[0][1], systems[0][2], opts.dims, opts.layers, opts.dropout,
                            corpus.src, corpus.tgt, opts.seed)
    return {name: probe.run_system(name, arch, overrides, opts, corpus.src, corpus.tgt, corpus.train,
                                   corpus.valid, log=lambda *a: None, reference=reference)
            for name, arch, overrides in systems}


def test_k1_in_gate_space_trains_exactly_like_the_lstm_baseline(corpus):
    """k = 1 in gate space is an LSTM: from the same initial values, every training loss and the
    held-out loss after 40 Adam updates equal the nn.LSTM baseline's."""
    runs = _train(corpus, [("lstm", "rnnsearch_iwslt_de_en", {}),
                           ("k1", ARCH, {"mc_channels": 1, "mc_weight_space": "gates"})], _opts())
    lstm, k1 = runs["lstm"], runs["k1"]
    assert lstm["train_nll_bits"][-1] < lstm["train_nll_bits"][0] - 1.0  # it did learn
    for a, b in zip(lstm["train_nll_bits"], k1["train_nll_bits"]):
        assert b == pytest.approx(a, rel=2e-4)
    assert k1["final_valid_nll_bits"] == pytest.approx(lstm["final_valid_nll_bits"], rel=2e-4)


def test_hidden_space_w1_changes_training_from_the_same_start(corpus):
    """k = 1 in hidden space computes the same function at initialisation (W_1 = I) but trains the
    product W_hh W_1: the curves part ways -- the test that the probe can see a parametrisation."""
    runs = _train(corpus, [("lstm", "rnnsearch_iwslt_de_en", {}),
                           ("k1h", ARCH, {"mc_channels": 1, "mc_weight_space": "hidden"})], _opts(updates=20))
    first = [runs[n]["train_nll_bits"][0] for n in ("lstm", "k1h")]
    assert first[1] == pytest.approx(first[0], rel=1e-5)
    assert abs(runs["k1h"]["train_nll_bits"][-1] - runs["lstm"]["train_nll_bits"][-1]) > 1e-3


@pytest.mark.slow
def test_table_row_default_learns_as_fast_per_update_as_the_baseline(corpus):
    """The table-row default (``mc_rnn_iwslt_de_en_3`` as registered, one layer of 64 units) after
    200 Adam updates on 2,000 real pairs: k = 1 within 3 % of the baseline's held-out loss and
    k = 3 within 3 % of k = 1 (mean of two paired seeds; measured: 6.35 / 6.21 / 6.33 bits, and the
    seeds alone move a system by ~0.15 bits, see docs/mc_rnn.md)."""
    losses = {"lstm": [], "k1": [], "k3": []}
    for seed in (1, 2):
        runs = _train(corpus, [("lstm", "rnnsearch_iwslt_de_en", {}), ("k1", ARCH, {"mc_channels": 1}),
                               ("k3", ARCH, {})], _opts(dims=64, updates=200, eval_every=200, seed=seed))
        for name in losses:
            losses[name].append(runs[name]["final_valid_nll_bits"])
    mean = {name: sum(v) / len(v) for name, v in losses.items()}
    assert all(math.isfinite(v) for v in mean.values())
    assert mean["lstm"] < 6.6, mean  # past the unigram plateau (~6.9 bits on this vocabulary)
    assert mean["k1"] <= 1.03 * mean["lstm"], mean
    assert mean["k3"] <= 1.03 * mean["k1"], mean


def test_paired_init_copies_what_the_models_share():
    from fairseq.data import Dictionary

    d = Dictionary()
    for w in "a b c d".split():
        d.add_symbol(w)
    torch.manual_seed(0)
    lstm = probe.build("rnnsearch_iwslt_de_en", {}, 8, 1, 0.0, d, d, 3)
    mc = probe.build(ARCH, {"mc_weight_space": "gates"}, 8, 1, 0.0, d, d, 4)
    probe.copy_shared_init(mc, lstm)
    enc_l, enc_m = lstm.encoder.layers[0].rnn, mc.encoder.layers[0]
    assert torch.equal(enc_m.weight_ih, enc_l.weight_ih_l0)
    assert torch.equal(enc_m.block_weight[0], enc_l.weight_hh_l0)
    assert not torch.equal(enc_m.block_weight[1], enc_l.weight_hh_l0)  # other lags keep their draw
    assert torch.equal(mc.decoder.readout.weight, lstm.decoder.readout.weight)
    assert torch.equal(mc.encoder.embed_tokens.weight, lstm.encoder.embed_tokens.weight)
