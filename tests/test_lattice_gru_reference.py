"""SWL-/DWL-GRU (Su et al. 2017, Eq. 10-21) against a reference written from the paper, node by node
and edge by edge, in both directions, on lattices whose nodes have several incoming and several
outgoing edges; the composition (element-wise max pooling or the Eq. 21 gate); and the reading of
Eq. 15 (the update interpolates with h_pre, not with the literal h_{t-1})."""
import itertools

import pytest
import torch
import torch.nn as nn

from fairseq_local_core.lattice import Lattice, merge_tokenizations
from fairseq_local.modules.lattice_gru import BiLatticeGRU, compose
from test_lattice_gru import _batch, _encode, _vocab

DT = torch.float64
COMBOS = list(itertools.product(["swl", "dwl"], ["pooling", "gating"]))


def _lattices():
    return [
        merge_tokenizations("他说不服", [["他", "说", "不服"], ["他说", "不", "服"], list("他说不服")]),
        merge_tokenizations("下雨天地面积水", [["下雨天", "地面", "积水"], ["下", "雨天", "地面", "积水"],
                                             ["下雨天", "地", "面积", "水"]]),
        Lattice.chain(["你好", "吗"]),
    ]


def gru_cell(d, x, h):
    """The GRU step (torch.nn.GRU's gate order r, z, n and reset after U h, as documented), with the
    update interpolating between h (= h_pre) and the candidate: Eq. 12-15 / 16-19."""
    H = d.hidden_size
    W, U, bw, bu = d.weight_ih, d.weight_hh, d.bias_ih, d.bias_hh
    r = torch.sigmoid(W[:H] @ x + bw[:H] + U[:H] @ h + bu[:H])
    z = torch.sigmoid(W[H:2 * H] @ x + bw[H:2 * H] + U[H:2 * H] @ h + bu[H:2 * H])
    n = torch.tanh(W[2 * H:] @ x + bw[2 * H:] + r * (U[2 * H:] @ h + bu[2 * H:]))
    return (1 - z) * n + z * h


def g(vectors, gate):
    """Composition: Eq. 21 with the gate, element-wise max pooling without."""
    if gate is None:
        out = vectors[0]
        for v in vectors[1:]:
            out = torch.maximum(out, v)
        return out
    a = [torch.sigmoid(gate.weight[0] @ v + gate.bias[0]) for v in vectors]
    return sum(ak * v for ak, v in zip(a, vectors)) / sum(a)


def reference_direction(d, lat, emb, backward, literal_eq15=False):
    """States of one direction at every node it reaches, {node: h}.

    Forward: node t from its incoming edges e_{i:t} (h_pre^(k) = h(i), h(0) = 0); backward: node t
    from its outgoing edges e_{t:j} (h_pre^(k) = h(j), h(N) = 0), scanning right to left.
    ``literal_eq15``: SWL's update interpolates with the state of the previous scanned node."""
    N = lat.n_chars
    zero = torch.zeros(d.hidden_size, dtype=DT)
    states = {N if backward else 0: zero}
    last = zero
    for t in (range(N - 1, -1, -1) if backward else range(1, N + 1)):
        edges = [(j if backward else i, k) for k, (i, j) in enumerate(lat.edges) if (i if backward else j) == t]
        if not edges:
            continue
        xs = [emb[k] for _, k in edges]
        hs = [states[other] for other, _ in edges]
        if d.variant == "swl":  # Eq. 10-15: compose inputs and preceding states, one GRU step
            x, h_pre = g(xs, d.gate_x), g(hs, d.gate_h)
            h = gru_cell(d, x, h_pre)
            if literal_eq15:  # h_t = z h_{t-1} + (1 - z) h~ with h_{t-1} the previous node's state
                h = h - gru_cell_z(d, x, h_pre) * (h_pre - last)
        else:  # Eq. 16-20: one GRU step per edge, then compose
            h = g([gru_cell(d, x, hp) for x, hp in zip(xs, hs)], d.gate_h)
        states[t] = last = h
    return states


def gru_cell_z(d, x, h):
    H = d.hidden_size
    return torch.sigmoid(d.weight_ih[H:2 * H] @ x + d.bias_ih[H:2 * H] + d.weight_hh[H:2 * H] @ h
                         + d.bias_hh[H:2 * H])


def reference(enc, embed, lat, vocab, literal_eq15=False):
    emb = embed(torch.tensor([vocab[w] for w in lat.words()]))
    fwd = reference_direction(enc.forward_gru, lat, emb, False, literal_eq15)
    bwd = reference_direction(enc.backward_gru, lat, emb, True, literal_eq15)
    b = lat.nodes()  # boundaries 0 = b_0 < ... < b_m = N
    anno = torch.stack([torch.cat([fwd[b[k]], bwd[b[k - 1]]]) for k in range(1, len(b))])
    return anno, torch.cat([fwd[lat.n_chars], bwd[0]])


def _setup(variant, composition, seed=0):
    torch.manual_seed(seed)
    lattices = _lattices()
    vocab = _vocab(lattices)
    embed = nn.Embedding(len(vocab) + 4, 4, padding_idx=1).to(DT)
    enc = BiLatticeGRU(4, 5, variant, composition, init_scale=0.6).to(DT)
    return lattices, vocab, embed, enc


def test_pooling_is_elementwise_max_over_each_nodes_rows():
    v = torch.tensor([[1.0, -2.0], [3.0, -5.0], [0.5, 7.0], [-1.0, -1.0], [2.0, 2.0]], dtype=DT)
    local = torch.tensor([0, 0, 1, 1, 1])
    out, w = compose(v, local, 2, None)
    assert w is None
    assert torch.equal(out, torch.tensor([[3.0, -2.0], [2.0, 7.0]], dtype=DT))
    # one row per node: the rows themselves
    out1, _ = compose(v[:2], torch.tensor([0, 1]), 2, None)
    assert torch.equal(out1, v[:2])


def test_gating_weights_are_eq21_normalised_per_node():
    torch.manual_seed(0)
    gate = nn.Linear(2, 1).to(DT)
    v = torch.tensor([[1.0, -2.0], [3.0, -5.0], [0.5, 7.0], [-1.0, -1.0], [2.0, 2.0]], dtype=DT)
    local = torch.tensor([0, 0, 1, 1, 1])
    out, w = compose(v, local, 2, gate)
    a = torch.sigmoid(v @ gate.weight[0] + gate.bias[0])
    expected_w = torch.cat([a[:2] / a[:2].sum(), a[2:] / a[2:].sum()])
    torch.testing.assert_close(w, expected_w, rtol=0, atol=1e-15)
    torch.testing.assert_close(out, torch.stack([(expected_w[:2, None] * v[:2]).sum(0),
                                                 (expected_w[2:, None] * v[2:]).sum(0)]), rtol=0, atol=1e-14)
    out1, w1 = compose(v[:2], torch.tensor([0, 1]), 2, gate)  # one edge per node: weight 1
    torch.testing.assert_close(w1, torch.ones(2, dtype=DT), rtol=0, atol=1e-15)
    torch.testing.assert_close(out1, v[:2], rtol=0, atol=1e-15)


def test_lattices_have_multi_edge_nodes_in_both_directions():
    lat = _lattices()[0]
    incoming = [sum(1 for _, j in lat.edges if j == t) for t in range(lat.n_chars + 1)]
    outgoing = [sum(1 for i, _ in lat.edges if i == t) for t in range(lat.n_chars + 1)]
    assert max(incoming) >= 2 and max(outgoing) >= 2


@pytest.mark.parametrize("variant,composition", COMBOS)
def test_encoder_equals_reference_in_both_directions(variant, composition):
    lattices, vocab, embed, enc = _setup(variant, composition)
    anno, pad, final, _ = _encode(enc, embed, _batch(lattices, vocab))
    for b, lat in enumerate(lattices):
        ref_anno, ref_final = reference(enc, embed, lat, vocab)
        m = ref_anno.size(0)
        assert not pad[b, :m].any() and pad[b, m:].all()
        torch.testing.assert_close(anno[:m, b], ref_anno, rtol=0, atol=1e-12)
        torch.testing.assert_close(final[b], ref_final, rtol=0, atol=1e-12)


@pytest.mark.parametrize("composition", ["pooling", "gating"])
def test_swl_update_uses_h_pre_not_the_literal_previous_state(composition):
    """Eq. 15 writes z h_{t-1}; we read it as z h_pre (the composed preceding state, as Eq. 19 does for
    DWL, and as a chain lattice requires).  The literal reading gives different annotations."""
    lattices, vocab, embed, enc = _setup("swl", composition, seed=3)
    anno, _, _, _ = _encode(enc, embed, _batch(lattices[:1], vocab))
    ours, _ = reference(enc, embed, lattices[0], vocab)
    literal, _ = reference(enc, embed, lattices[0], vocab, literal_eq15=True)
    torch.testing.assert_close(anno[:, 0], ours, rtol=0, atol=1e-12)
    assert (anno[:, 0] - literal).abs().max() > 1e-3
