"""SWL-/DWL-GRU encoders: chain == torch.nn.GRU, batching invariance, Eq. 21 weights."""
import itertools

import pytest
import torch
import torch.nn as nn

from fairseq_local.data.lattice import Lattice, merge_tokenizations
from fairseq_local.data.lattice_dataset import collate_lattices
from fairseq_local.modules.lattice_gru import BiLatticeGRU

PAD = 1
COMBOS = list(itertools.product(["swl", "dwl"], ["pooling", "gating"]))


def _vocab(lattices):
    words = sorted({w for lat in lattices for w in lat.words()})
    return {w: i + 4 for i, w in enumerate(words)}


def _batch(lattices, vocab):
    packed = [torch.from_numpy(lat.pack([vocab[w] for w in lat.words()])) for lat in lattices]
    return collate_lattices(packed, PAD, left_pad=False)


def _encode(enc, embed, batch):
    keys = ["lat_in_words", "lat_in_prev", "lat_in_mask", "lat_out_words", "lat_out_next", "lat_out_mask"]
    return enc(embed, *[batch[k] for k in keys])


def _lattices():
    return [
        merge_tokenizations("下雨天地面积水", [["下雨天", "地面", "积水"], ["下", "雨天", "地面", "积水"],
                                             ["下雨天", "地", "面积", "水"]]),
        merge_tokenizations("我们的被告人", [["我们", "的", "被告人"], ["我们", "的", "被告", "人"]]),
        Lattice.chain(["你好"]),
        merge_tokenizations("他说不服", [["他", "说", "不服"], ["他说", "不", "服"], list("他说不服")]),
    ]


@pytest.mark.parametrize("variant,composition", COMBOS)
def test_chain_lattice_equals_bidirectional_gru(variant, composition):
    torch.manual_seed(0)
    chains = [Lattice.chain(t) for t in (["我们", "的", "两", "个", "被告人"], ["法庭", "上"], ["不服"])]
    vocab = _vocab(chains)
    embed = nn.Embedding(len(vocab) + 4, 5, padding_idx=PAD).double()
    enc = BiLatticeGRU(5, 6, variant, composition, init_scale=0.5).double()
    gru = nn.GRU(5, 6, bidirectional=True).double()
    with torch.no_grad():
        for suffix, d in (("", enc.forward_gru), ("_reverse", enc.backward_gru)):
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(gru, f"{name}_l0{suffix}").copy_(getattr(d, name))
    anno, pad, final, _ = _encode(enc, embed, _batch(chains, vocab))
    for b, chain in enumerate(chains):
        ids = torch.tensor([vocab[w] for w in chain.words()])
        ref, h_n = gru(embed(ids).unsqueeze(1))
        n = len(ids)
        assert not pad[b, :n].any() and pad[b, n:].all()
        torch.testing.assert_close(anno[:n, b], ref[:, 0], rtol=0, atol=1e-12)
        torch.testing.assert_close(anno[n:, b], torch.zeros_like(anno[n:, b]), rtol=0, atol=0)
        torch.testing.assert_close(final[b], torch.cat([h_n[0, 0], h_n[1, 0]]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("variant,composition", COMBOS)
def test_batching_invariance_outputs_and_grads(variant, composition):
    torch.manual_seed(1)
    lattices = _lattices()
    vocab = _vocab(lattices)
    embed = nn.Embedding(len(vocab) + 4, 4, padding_idx=PAD).double()
    enc = BiLatticeGRU(4, 5, variant, composition, init_scale=0.5).double()
    anno, pad, final, _ = _encode(enc, embed, _batch(lattices, vocab))
    (anno.sin().sum() + final.cos().sum()).backward()
    batch_grads = [p.grad.clone() for p in enc.parameters()]
    alone_grads = [torch.zeros_like(p) for p in enc.parameters()]
    for b, lat in enumerate(lattices):
        enc.zero_grad()
        a1, p1, f1, _ = _encode(enc, embed, _batch([lat], vocab))
        m = len(lat.nodes()) - 1
        assert a1.size(0) == m and not p1.any() and pad[b, m:].all()
        torch.testing.assert_close(anno[:m, b], a1[:, 0], rtol=0, atol=1e-12)
        torch.testing.assert_close(final[b], f1[0], rtol=0, atol=1e-12)
        (a1.sin().sum() + f1.cos().sum()).backward()
        for acc, p in zip(alone_grads, enc.parameters()):
            acc += p.grad
    for g_batch, g_alone in zip(batch_grads, alone_grads):
        torch.testing.assert_close(g_batch, g_alone, rtol=0, atol=1e-10)
    assert all(g.abs().sum() > 0 for g in batch_grads)


def test_dwl_gating_matches_hand_computed_node():
    """v_3 of the Figure-1 lattice: h_3 = sum_k w_k GRU(x_k, h_pre_k), w from Eq. 21."""
    torch.manual_seed(2)
    lat = _lattices()[0]
    vocab = _vocab([lat])
    embed = nn.Embedding(len(vocab) + 4, 3, padding_idx=PAD).double()
    enc = BiLatticeGRU(3, 4, "dwl", "gating", init_scale=0.5).double()
    d = enc.forward_gru
    batch = _batch([lat], vocab)
    _, _, _, extras = _encode(enc, embed, batch)
    cell = nn.GRUCell(3, 4).double()
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(cell, name).copy_(getattr(d, name))

    def x(w):
        return embed(torch.tensor([vocab[w]]))

    h0 = torch.zeros(1, 4, dtype=torch.float64)
    h1 = cell(x("下"), h0)  # v_1 has one incoming edge: gating weight 1
    k1, k2 = cell(x("下雨天"), h0), cell(x("雨天"), h1)
    a = torch.sigmoid(d.gate_h(torch.cat([k1, k2]))).squeeze(1)
    h3 = (a[0] * k1 + a[1] * k2) / a.sum()
    buf, gates = d(embed(extras["schedules"][0].edge_words), extras["schedules"][0], 1, 8, record_gates=True)
    torch.testing.assert_close(buf[0, 3], h3[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(buf[0, 1], h1[0], rtol=0, atol=1e-12)
    assert buf[0, 2].abs().sum() == 0  # v_2 is not a word boundary
    sched = extras["schedules"][0]
    per_node = torch.zeros(sched.node_batch.numel(), dtype=torch.float64).index_add(0, sched.edge_node, gates)
    torch.testing.assert_close(per_node, torch.ones_like(per_node))


def test_gating_parameter_count_within_paper_bound():
    for variant in ("swl", "dwl"):
        gated = BiLatticeGRU(320, 512, variant, "gating")
        pooled = BiLatticeGRU(320, 512, variant, "pooling")
        extra = sum(p.numel() for p in gated.parameters()) - sum(p.numel() for p in pooled.parameters())
        assert 0 < extra < 2700


def test_bad_options():
    with pytest.raises(ValueError, match="--lattice-variant"):
        BiLatticeGRU(3, 3, "deep", "gating")
    with pytest.raises(ValueError, match="--lattice-composition"):
        BiLatticeGRU(3, 3, "dwl", "mean")
