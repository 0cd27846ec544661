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
    return enc(embed, *batch["lattice"])


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


def _depth(lat, backward=False):
    """Longest path in edges from v_0 (backward: from v_N) to any node, by a scan over nodes."""
    depth = {lat.n_chars if backward else 0: 0}
    edges = sorted(lat.edges, key=lambda e: -e[0] if backward else e[1])
    for i, j in edges:
        start, end = (j, i) if backward else (i, j)
        depth[end] = max(depth.get(end, 0), depth[start] + 1)
    return max(depth.values())


def _count_cell_calls(enc, monkeypatch):
    calls = []
    for d in (enc.forward_gru, enc.backward_gru):
        cell = d._cell

        def counted(gi, h, cell=cell, d=d):
            calls.append((d, gi.size(0)))
            return cell(gi, h)
        monkeypatch.setattr(d, "_cell", counted)
    return calls


@pytest.mark.parametrize("variant,composition", COMBOS)
def test_sequential_steps_equal_the_batch_lattice_depth(variant, composition, monkeypatch):
    """One GRU step per topological level of the whole batch: the number of sequential steps of
    each direction is the batch's largest lattice depth, not its number of positions or nodes."""
    torch.manual_seed(3)
    lattices = _lattices()
    vocab = _vocab(lattices)
    embed = nn.Embedding(len(vocab) + 4, 3, padding_idx=PAD).double()
    enc = BiLatticeGRU(3, 4, variant, composition, init_scale=0.5).double()
    calls = _count_cell_calls(enc, monkeypatch)
    _, _, _, extras = _encode(enc, embed, _batch(lattices, vocab))
    for direction, (d, sched) in enumerate(zip((enc.forward_gru, enc.backward_gru), extras["schedules"])):
        depth = max(_depth(lat, backward=direction == 1) for lat in lattices)
        assert depth == 5 and max(lat.n_chars for lat in lattices) == 7  # 下 雨天 地 面积 水
        assert len(sched.steps) == depth and [s[0] for s in sched.steps] == list(range(1, depth + 1))
        rows = [n for c, n in calls if c is d]
        assert len(rows) == depth
        # every node (DWL: every edge) of the batch is computed exactly once
        assert sum(rows) == (sched.edge_words.numel() if variant == "dwl" else sched.node_batch.numel())


def test_a_lattice_shallower_than_its_nodes_in_one_step_per_level(monkeypatch):
    """下雨天 | 地 面积 水 and 下雨天 | 地面 | 积水: 7 characters, 5 nodes after v_0, depth 4 (the
    path 下雨天 地 面积 水) in both directions; the states equal the node-by-node reference."""
    from test_lattice_gru_reference import reference_direction

    torch.manual_seed(4)
    lat = merge_tokenizations("下雨天地面积水", [["下雨天", "地面", "积水"], ["下雨天", "地", "面积", "水"]])
    assert lat.n_chars == 7 and len(lat.nodes()) - 1 == 5 and _depth(lat) == _depth(lat, True) == 4
    vocab = _vocab([lat])
    embed = nn.Embedding(len(vocab) + 4, 3, padding_idx=PAD).double()
    enc = BiLatticeGRU(3, 4, "dwl", "gating", init_scale=0.5).double()
    calls = _count_cell_calls(enc, monkeypatch)
    _, _, _, extras = _encode(enc, embed, _batch([lat], vocab))
    # forward levels {v_3}, {v_4, v_5}, {v_6}, {v_7}; backward {v_5, v_6}, {v_4}, {v_3}, {v_0}:
    # one GRU step per level over the edges entering (leaving) its nodes
    assert [n for _, n in calls] == [1, 2, 1, 2] + [2, 1, 2, 1]
    sched_f, sched_b = extras["schedules"]
    assert [(lv, sched_f.node_pos[n0:n1].tolist()) for lv, _, _, n0, n1 in sched_f.steps] == \
        [(1, [3]), (2, [4, 5]), (3, [6]), (4, [7])]
    assert [(7 - sched_b.node_pos[n0:n1]).tolist() for _, _, _, n0, n1 in sched_b.steps] == [[6, 5], [4], [3], [0]]
    emb = embed(torch.tensor([vocab[w] for w in lat.words()]))
    for backward, (d, sched) in enumerate(zip((enc.forward_gru, enc.backward_gru), extras["schedules"])):
        buf, _ = d(embed(sched.edge_words), sched, 1, 8)
        for node, h in reference_direction(d, lat, emb, backward=bool(backward)).items():
            torch.testing.assert_close(buf[0, 7 - node if backward else node], h, rtol=0, atol=1e-12)
