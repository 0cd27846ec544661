"""SWL-/DWL-GRU batching details checked value by value: the edge/node schedule of a padded lattice
batch, batches with more sentences than positions or with empty trailing positions, embedding
dropout, the recorded Eq. 21 gate weights and annotation boundaries, constructor defaults and errors,
and the encoder cost formula (multiply-adds per node and direction)."""
import pytest
import torch
import torch.nn as nn

from fairseq_local.data.lattice import Lattice, merge_tokenizations
from fairseq_local.modules import cuda_graphs, fast_path
from fairseq_local.modules.lattice_gru import BiLatticeGRU, LatticeGRU, make_schedule, multiply_adds_per_token, pad_levels
from test_lattice_gru import _batch, _encode, _vocab

DT = torch.float64


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
