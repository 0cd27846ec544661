"""SWL-/DWL-GRU encoders: chain == torch.nn.GRU, batching invariance, Eq. 21 weights; and the
batching details checked value by value: the edge/node schedule of a padded lattice batch, batches
with more sentences than positions or with empty trailing positions, embedding dropout, the recorded
Eq. 21 gate weights and annotation boundaries, constructor defaults and errors, and the encoder cost
formula (multiply-adds per node and direction)."""
import itertools

import pytest
import torch
import torch.nn as nn

from fairseq_local_core.lattice import Lattice, merge_tokenizations
from fairseq_local.data.lattice_dataset import collate_lattices
from fairseq_local.modules import cuda_graphs
from fairseq_local.modules.lattice_gru import (BiLatticeGRU, LatticeGRU, make_schedule, multiply_adds_per_token,
                                              pad_levels)

PAD = 1
DT = torch.float64
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


def _two():
    # A: c = 下雨天, edges 0:1, 0:3, 1:3 (v_3 has two incoming edges); B: chain 他 | 说
    return [merge_tokenizations("下雨天", [["下雨天"], ["下", "雨天"]]), Lattice.chain(["他", "说"])]


def test_schedule_of_a_two_sentence_batch():
    lats = _two()
    vocab = _vocab(lats)
    batch = _batch(lats, vocab)
    s = make_schedule(batch["lattice"].in_words, batch["lattice"].in_prev, batch["lattice"].in_mask)
    # levels (longest path from v_0): A v_1 = 1, v_3 = 2 (via 0:1, 1:3); B v_1 = 1, v_2 = 2
    # edges ordered by level of their end node, position, sentence: A 0:1, B 0:1, B 1:2, A 0:3, A 1:3
    assert s.edge_batch.tolist() == [0, 1, 1, 0, 0]
    assert s.edge_other.tolist() == [0, 0, 1, 0, 1]
    assert s.edge_words.tolist() == [vocab[w] for w in ["下", "他", "说", "下雨天", "雨天"]]
    # nodes: (v_1, A), (v_1, B) at level 1; (v_2, B), (v_3, A) at level 2
    assert s.node_batch.tolist() == [0, 1, 1, 0] and s.node_pos.tolist() == [1, 1, 2, 3]
    assert s.edge_node.tolist() == [0, 1, 2, 3, 3]
    assert s.edge_local.tolist() == [0, 1, 0, 1, 1]
    # two sequential steps (the batch's depth), not three (its positions)
    assert s.steps == [(1, 0, 2, 0, 2), (2, 2, 5, 2, 4)]
    srcs = [(u, rows.tolist()) for u, rows in s.sources]
    # step 0: both from the zero state; step 1 reads [zero; step 0]: B's 1:2 from B's v_1 (row 1 of
    # step 0 -> row 2), A's 0:3 from the zero state (row 0), A's 1:3 from A's v_1 (row 0 of step 0 -> row 1)
    assert srcs == [([-1], [0, 0]), ([-1, 0], [2, 0, 1])]
    assert s.edge_pred.tolist() == [-1, -1, 1, -1, 0]  # the node each edge leaves (-1: v_0)


def test_padded_level_grid_of_a_two_sentence_batch(monkeypatch):
    """The fast path's level grid (``pad_levels``) for the batch above: 2 levels (time bucket 2),
    3 edges in the widest level (width bucket 4); state buffer row 0 is the zero state, row
    1 + 4 s + j node slot j of level s."""
    monkeypatch.setattr(cuda_graphs, "TIME_BUCKETS", (1, 2, 4))
    lats = _two()
    batch = _batch(lats, _vocab(lats))
    g = pad_levels(make_schedule(*batch["lattice"][:3]))
    assert g.width == 4 and g.levels == 2
    assert g.edge_slot.tolist() == [0, 1, 4, 5, 6] and g.node_slot.tolist() == [0, 1, 4, 5]
    # level 2: B's 1:2 reads B's v_1 (row 2), A's 0:3 the zero state, A's 1:3 A's v_1 (row 1)
    assert g.pre_row.tolist() == [[0, 0, 0, 0], [2, 0, 1, 0]]
    # padded edge slots are composed into the padded node slot 3
    assert g.local.tolist() == [[0, 1, 3, 3], [0, 1, 1, 3]]
    assert g.write_row.tolist() == [[1, 2, 3, 4], [5, 6, 7, 8]]


def _direction_alone(d, embed, lat, vocab):
    b = _batch([lat], vocab)
    s = make_schedule(b["lattice"].in_words, b["lattice"].in_prev, b["lattice"].in_mask)
    return d(embed(s.edge_words), s, 1, lat.n_chars + 1)[0][0]


@pytest.mark.parametrize("variant", ["swl", "dwl"])
def test_more_sentences_than_positions_and_empty_trailing_positions(variant):
    torch.manual_seed(0)
    lats = [Lattice.chain([c]) for c in "他说不服好"] + [merge_tokenizations("下雨", [["下雨"], ["下", "雨"]])]
    vocab = _vocab(lats)
    embed = nn.Embedding(len(vocab) + 4, 3).to(DT)
    d = LatticeGRU(3, 4, variant, "gating", init_scale=0.5).to(DT)
    batch = _batch(lats, vocab)  # B = 6 sentences, P = 3 positions
    extra = 2  # two trailing positions where no sentence has a node
    words, prev, mask = (torch.cat([t, t.new_zeros(6, extra, t.size(2))], 1) for t in batch["lattice"][:3])
    s = make_schedule(words, prev, mask)
    buf, _ = d(embed(s.edge_words), s, 6, 3 + extra)
    assert buf[:, 3:].abs().sum() == 0
    for b, lat in enumerate(lats):
        alone = _direction_alone(d, embed, lat, vocab)
        torch.testing.assert_close(buf[b, :lat.n_chars + 1], alone, rtol=0, atol=1e-12)
        assert alone[lat.n_chars].abs().sum() > 0


class _Double(nn.Module):
    def forward(self, x):
        return 2 * x


def test_embed_dropout_module_is_applied_to_the_edge_embeddings():
    torch.manual_seed(1)
    lats = _two()
    vocab = _vocab(lats)
    embed = nn.Embedding(len(vocab) + 4, 3).to(DT)
    embed2 = nn.Embedding(len(vocab) + 4, 3).to(DT)
    with torch.no_grad():
        embed2.weight.copy_(2 * embed.weight)
    enc = BiLatticeGRU(3, 4, "dwl", "gating", init_scale=0.5).to(DT)
    batch = _batch(lats, vocab)
    a, _, f, _ = enc(embed, *batch["lattice"], embed_dropout=_Double())
    a2, _, f2, _ = _encode(enc, embed2, batch)
    a1, _, _, _ = _encode(enc, embed, batch)
    torch.testing.assert_close(a, a2, rtol=0, atol=1e-12)
    torch.testing.assert_close(f, f2, rtol=0, atol=1e-12)
    assert (a - a1).abs().max() > 1e-3


@pytest.mark.parametrize("variant", ["swl", "dwl"])
def test_recorded_gates_and_node_positions(variant):
    torch.manual_seed(2)
    lats = _two()
    vocab = _vocab(lats)
    embed = nn.Embedding(len(vocab) + 4, 3).to(DT)
    enc = BiLatticeGRU(3, 4, variant, "gating", init_scale=0.5).to(DT)
    batch = _batch(lats, vocab)
    _, _, _, plain = _encode(enc, embed, batch)
    assert plain["gates"] == (None, None)
    _, _, _, extras = enc(embed, *batch["lattice"], record_gates=True)
    assert sorted(extras) == ["gates", "node_pos", "schedules"]
    # boundaries of A: 0, 1, 3; of B: 0, 1, 2
    assert extras["node_pos"].tolist() == [[0, 1, 3], [0, 1, 2]]
    for sched, gates in zip(extras["schedules"], extras["gates"]):
        assert gates.shape == (sched.edge_words.numel(),)
        per_node = torch.zeros(sched.node_batch.numel(), dtype=DT).index_add(0, sched.edge_node, gates)
        torch.testing.assert_close(per_node, torch.ones_like(per_node), rtol=0, atol=1e-12)
        multi = sched.edge_node.bincount()[sched.edge_node] > 1
        assert multi.any() and (gates[multi] - 0.5).abs().min() > 0 and (gates[~multi] == 1).all()
    # one direction called directly: no gates unless asked for
    sched_f = extras["schedules"][0]
    buf, gates = enc.forward_gru(embed(sched_f.edge_words), sched_f, 2, 4)
    assert gates is None
    buf2, gates2 = enc.forward_gru(embed(sched_f.edge_words), sched_f, 2, 4, record_gates=True)
    torch.testing.assert_close(gates2, extras["gates"][0], rtol=0, atol=0)
    torch.testing.assert_close(buf, buf2, rtol=0, atol=0)


def test_constructor_defaults_and_errors():
    torch.manual_seed(3)
    d = LatticeGRU(6, 8)
    assert d.variant == "dwl" and d.composition == "gating"
    assert d.gate_h is not None and d.gate_x is None
    w = torch.cat([p.detach().flatten() for p in d.parameters()])
    assert w.abs().max() <= 0.1 and w.abs().max() > 0.09  # uniform(-0.1, 0.1) initialisation
    enc = BiLatticeGRU(6, 8)
    for g in (enc.forward_gru, enc.backward_gru):
        assert g.variant == "dwl" and g.composition == "gating" and g.hidden_size == 8
        w = torch.cat([p.detach().flatten() for p in g.parameters()])
        assert w.abs().max() <= 0.1 and w.abs().max() > 0.09
    # the Eq. 10 input gate exists for SWL with gating only; init_scale reaches both directions
    assert LatticeGRU(6, 8, "swl", "gating").gate_x.weight.shape == (1, 6)
    assert LatticeGRU(6, 8, "swl", "pooling").gate_x is None and LatticeGRU(6, 8, "dwl", "gating").gate_x is None
    big = BiLatticeGRU(6, 8, "swl", "gating", init_scale=0.5)
    for g in (big.forward_gru, big.backward_gru):
        w = torch.cat([p.detach().flatten() for p in g.parameters()])
        assert 0.4 < w.abs().max() <= 0.5
    with pytest.raises(ValueError) as e:
        LatticeGRU(3, 3, "deep", "gating")
    assert str(e.value) == "--lattice-variant must be one of swl, dwl (got 'deep')"
    with pytest.raises(ValueError) as e:
        LatticeGRU(3, 3, "swl", "mean")
    assert str(e.value) == "--lattice-composition must be one of pooling, gating (got 'mean')"


def test_multiply_adds_per_node_and_direction():
    E, H, k = 3, 5, 2.5
    gru = 3 * H * E + 3 * H * H  # W x and U h of the three gates
    # DWL: one GRU step per edge, plus one state gate u.h_k per edge with gating
    assert multiply_adds_per_token("dwl", "pooling", E, H, k) == k * gru
    assert multiply_adds_per_token("dwl", "gating", E, H, k) == k * (gru + H)
    # SWL: one GRU step per node, plus an input gate and a state gate per edge with gating
    assert multiply_adds_per_token("swl", "pooling", E, H, k) == gru
    assert multiply_adds_per_token("swl", "gating", E, H, k) == gru + k * (H + E)
