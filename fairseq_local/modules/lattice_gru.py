"""Word-lattice based GRU encoders (Su et al., AAAI 2017): SWL-GRU and DWL-GRU, batched.

The encoder scans character positions (lattice nodes v_0..v_T) and computes a hidden state only at
word boundaries, from every edge e_{i:j} ending there (forward direction; the backward direction
uses the edges leaving a node and scans right to left).

* SWL-GRU (Eq. 10-15): x_t = g({x_t^(k)}), h_pre = g({h_pre^(k)}), then one GRU step.
* DWL-GRU (Eq. 16-20): one GRU step per edge k from (x_t^(k), h_pre^(k)), then h_t = g({h_t^(k)}).
* Composition g (Eq. 21): ``gating``: h = sum_k sigma(u.h_k + b) / sum_k' sigma(u.h_k' + b) h_k (one
  scalar gate per edge, normalised over the node's edges; SWL has a gate for inputs and one for
  states, DWL one for states, per direction: < 2.7k parameters at the paper's sizes); ``pooling``:
  element-wise max over the node's edges.

GRU formulation: the cell is torch.nn.GRU's (r, z, n gate order; n = tanh(W_n x + b_in +
r * (U_n h + b_hn))), i.e. the reset gate applied after the recurrent matmul rather than before it
as in Eq. 8/14/18.  This lets U h of all three gates be one matmul per step and makes a chain
lattice *exactly* a torch.nn.GRU (tested), so word-level baselines and lattice models share one
cell definition.

Batching: edges of all sentences are flattened once, sorted by position; the input projections
W x of all edges are one matmul; then one GRU step per position for the whole batch, over exactly
the edges (DWL) or nodes (SWL) present there; positions where no sentence has a word boundary are
skipped.  Preceding states are gathered from the outputs of the (few) earlier steps that hold
them, planned once per batch, so each step costs O(its edges), never O(batch x positions).

Annotations (what the decoder attends to): with the boundaries 0 = b_0 < ... < b_m = N of a lattice
(nodes with an incoming edge, plus v_0), annotation k = 1..m is [f(b_k); g(b_{k-1})]: the forward
state at the right end and the backward state at the left end of the k-th minimal segment.  On a
chain this is exactly the bidirectional RNNSearch annotation of the k-th word.  The final hidden
state (decoder initialisation) is [f(N); g(0)].
"""
from typing import List, NamedTuple, Optional, Tuple

import numpy as np

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

VARIANTS = ("swl", "dwl")
COMPOSITIONS = ("pooling", "gating")


class Schedule(NamedTuple):
    """Flattened edges of a padded ``B x P x K`` lattice batch, grouped by position."""

    edge_batch: Tensor  # E: sentence of each edge
    edge_other: Tensor  # E: the edge's other end (preceding node)
    edge_words: Tensor  # E: word id
    edge_node: Tensor  # E: index of the node it enters (into node_* below)
    node_batch: Tensor  # Nn
    node_pos: Tensor  # Nn
    steps: List[Tuple[int, int, int, int, int]]  # (position, e0, e1, n0, n1) for non-empty positions
    # per step: the earlier steps holding its edges' preceding states (-1: the zero initial state)
    # and, for each edge, its row in the concatenation of those steps' outputs
    sources: List[Tuple[List[int], Tensor]]


def make_schedule(words: Tensor, other: Tensor, mask: Tensor) -> Schedule:
    P, B = mask.size(1), mask.size(0)
    m = mask.transpose(0, 1)  # P x B x K
    p_e, b_e, k_e = m.nonzero(as_tuple=True)  # sorted by position, sentence, slot
    p_n, b_n = m.any(-1).nonzero(as_tuple=True)
    node_id = torch.full((P, B), -1, dtype=torch.long, device=mask.device)
    node_id[p_n, b_n] = torch.arange(p_n.numel(), device=mask.device)
    other_e = other.transpose(0, 1)[p_e, b_e, k_e]
    pred = node_id[other_e, b_e]  # the preceding node's id; -1 where it has no incoming edge (v_0)
    e_end = torch.bincount(p_e, minlength=P).cumsum(0)
    n_end = torch.bincount(p_n, minlength=P).cumsum(0)
    # the only host sync: small integer arrays
    e_end, n_end, pred_h = e_end.cpu().numpy(), n_end.cpu().numpy(), pred.cpu().numpy()
    steps, e0, n0 = [], 0, 0
    for p in range(P):
        e1, n1 = int(e_end[p]), int(n_end[p])
        if e1 > e0:
            steps.append((p, e0, e1, n0, n1))
        e0, n0 = e1, n1
    step_n0 = np.array([s[3] for s in steps], dtype=np.int64)
    step_rows = np.array([s[4] - s[3] for s in steps], dtype=np.int64)
    sources = []
    for p, e0, e1, _, _ in steps:
        pr = pred_h[e0:e1]
        src = np.where(pr < 0, -1, np.searchsorted(step_n0, pr, side="right") - 1)
        uniq = np.unique(src)
        sizes = np.where(uniq < 0, 1, step_rows[np.maximum(uniq, 0)])
        offset = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        slot = np.searchsorted(uniq, src)
        local = offset[slot] + np.where(src < 0, 0, pr - step_n0[np.maximum(src, 0)])
        sources.append((uniq.tolist(), torch.from_numpy(local).to(mask.device)))
    return Schedule(b_e, other_e, words.transpose(0, 1)[p_e, b_e, k_e], node_id[p_e, b_e], b_n, p_n, steps, sources)


def compose(v: Tensor, local: Tensor, n: int, gate: Optional[nn.Linear]) -> Tuple[Tensor, Optional[Tensor]]:
    """Eq. 21 (gate given) or max pooling over the rows of ``v`` grouped by ``local`` (0..n-1).

    Returns the n composed vectors and, for gating, each row's normalised weight.
    """
    if gate is None:
        if n == v.size(0):  # one edge per node (rows are sorted by node): identity
            return v, None
        idx = local.unsqueeze(1).expand_as(v)
        return v.new_zeros(n, v.size(1)).scatter_reduce(0, idx, v, "amax", include_self=False), None
    a = torch.sigmoid(gate(v)).squeeze(1)
    denom = a.new_zeros(n).index_add(0, local, a)
    w = a / denom[local]
    if n == v.size(0):
        return w.unsqueeze(1) * v, w
    return v.new_zeros(n, v.size(1)).index_add(0, local, w.unsqueeze(1) * v), w


class LatticeGRU(nn.Module):
    """One direction of an SWL-/DWL-GRU with pooling or gating composition."""

    def __init__(self, input_size: int, hidden_size: int, variant: str = "dwl", composition: str = "gating",
                 init_scale: float = 0.1):
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"--lattice-variant must be one of {', '.join(VARIANTS)} (got {variant!r})")
        if composition not in COMPOSITIONS:
            raise ValueError(f"--lattice-composition must be one of {', '.join(COMPOSITIONS)} (got {composition!r})")
        self.input_size, self.hidden_size = input_size, hidden_size
        self.variant, self.composition = variant, composition
        H = hidden_size
        self.weight_ih = nn.Parameter(torch.empty(3 * H, input_size))
        self.weight_hh = nn.Parameter(torch.empty(3 * H, H))
        self.bias_ih = nn.Parameter(torch.empty(3 * H))
        self.bias_hh = nn.Parameter(torch.empty(3 * H))
        gating = composition == "gating"
        self.gate_h = nn.Linear(H, 1) if gating else None  # Eq. 21 U^(g), b^(g) for states
        self.gate_x = nn.Linear(input_size, 1) if gating and variant == "swl" else None  # Eq. 10
        for p in self.parameters():
            nn.init.uniform_(p, -init_scale, init_scale)

    def _cell(self, gi: Tensor, h: Tensor) -> Tensor:
        gh = F.linear(h, self.weight_hh, self.bias_hh)
        i_r, i_z, i_n = gi.chunk(3, 1)
        h_r, h_z, h_n = gh.chunk(3, 1)
        r = torch.sigmoid(i_r + h_r)
        z = torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        return (1 - z) * n + z * h

    def forward(self, embed: Tensor, sched: Schedule, bsz: int, n_pos: int,
                record_gates: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        """Args: ``embed`` E x I word vectors of the schedule's edges.  Returns the state buffer
        ``B x P x H`` (zeros where a sentence has no node) and, with ``record_gates``, the gating
        weight of every edge (E; DWL: of its state h_t^(k), SWL: of its preceding state)."""
        if self.variant == "dwl":
            gi = F.linear(embed, self.weight_ih, self.bias_ih)  # W x for every edge at once
        else:  # SWL: inputs do not depend on the recurrence, compose them all at once (Eq. 10)
            x, _ = compose(embed, sched.edge_node, sched.node_batch.numel(), self.gate_x)
            gi = F.linear(x, self.weight_ih, self.bias_ih)
        weights = [] if record_gates else None
        zero = embed.new_zeros(1, self.hidden_size)
        outs: List[Tensor] = []  # node states of each step (no B x P buffer: O(E) work per step)
        for (p, e0, e1, n0, n1), (srcs, local_rows) in zip(sched.steps, sched.sources):
            parts = [zero if s < 0 else outs[s] for s in srcs]
            h_pre = (torch.cat(parts) if len(parts) > 1 else parts[0]).index_select(0, local_rows)
            local = sched.edge_node[e0:e1] - n0
            if self.variant == "dwl":  # Eq. 16-20
                h, w = compose(self._cell(gi[e0:e1], h_pre), local, n1 - n0, self.gate_h)
            else:  # Eq. 11-15
                h_pre, w = compose(h_pre, local, n1 - n0, self.gate_h)
                h = self._cell(gi[n0:n1], h_pre)
            outs.append(h)
            if record_gates and w is not None:
                weights.append(w)
        buf = embed.new_zeros(bsz, n_pos, self.hidden_size)
        if outs:
            buf = buf.index_put((sched.node_batch, sched.node_pos), torch.cat(outs))
        gates = torch.cat(weights) if weights else None
        return buf, gates


class BiLatticeGRU(nn.Module):
    """Bidirectional lattice GRU: per-node padded lattice tensors in, RNNSearch annotations out."""

    def __init__(self, input_size: int, hidden_size: int, variant: str = "dwl", composition: str = "gating",
                 init_scale: float = 0.1):
        super().__init__()
        self.hidden_size = hidden_size
        self.forward_gru = LatticeGRU(input_size, hidden_size, variant, composition, init_scale)
        self.backward_gru = LatticeGRU(input_size, hidden_size, variant, composition, init_scale)

    def forward(self, embed_tokens: nn.Module, in_words, in_prev, in_mask, out_words, out_next, out_mask,
                embed_dropout: Optional[nn.Module] = None, record_gates: bool = False):
        """Returns (annotations M x B x 2H, padding mask B x M, final hidden B x 2H, extras).

        ``extras`` holds the schedules and (with ``record_gates``) the gate weights per direction,
        for analysis (scripts/analysis/lattice_gates.py)."""
        B, P, _ = in_mask.shape
        T = P - 1
        # backward direction = forward scan of the mirrored lattice (node t -> T - t)
        sched_f = make_schedule(in_words, in_prev, in_mask)
        sched_b = make_schedule(out_words.flip(1), T - out_next.flip(1), out_mask.flip(1))
        ids = torch.cat([sched_f.edge_words, sched_b.edge_words])
        emb = embed_tokens(ids)
        if embed_dropout is not None:
            emb = embed_dropout(emb)
        n_f = sched_f.edge_words.numel()
        fwd, gates_f = self.forward_gru(emb[:n_f], sched_f, B, P, record_gates)
        bwd, gates_b = self.backward_gru(emb[n_f:], sched_b, B, P, record_gates)
        bwd = bwd.flip(1)  # back to node coordinates: bwd[:, t] = backward state at v_t

        node = in_mask.any(-1)
        node[:, 0] = True  # boundaries b_0 = 0 < b_1 < ... < b_m = N
        count = node.sum(1)
        M = int(count.max()) - 1
        rank = node.long().cumsum(1) - 1
        pos = torch.zeros(B, M + 1, dtype=torch.long, device=node.device)
        b_idx, p_idx = node.nonzero(as_tuple=True)
        pos[b_idx, rank[b_idx, p_idx]] = p_idx
        valid = torch.arange(M, device=node.device).unsqueeze(0) < (count - 1).unsqueeze(1)  # B x M
        H = self.hidden_size
        right = fwd.gather(1, pos[:, 1:].unsqueeze(-1).expand(B, M, H))
        left = bwd.gather(1, pos[:, :-1].unsqueeze(-1).expand(B, M, H))
        annotations = torch.cat([right, left], -1) * valid.unsqueeze(-1).to(fwd.dtype)
        ends = pos.gather(1, (count - 1).unsqueeze(1)).squeeze(1)
        final = torch.cat([fwd[torch.arange(B, device=node.device), ends], bwd[:, 0]], -1)
        extras = {"schedules": (sched_f, sched_b), "gates": (gates_f, gates_b), "node_pos": pos}
        return annotations.transpose(0, 1), ~valid, final, extras


def multiply_adds_per_token(variant: str, composition: str, emb: int, hidden: int, edges_per_node: float) -> float:
    """Encoder multiply-adds per lattice node and direction (for FLOP ratios in docs/bench)."""
    gru_in, gru_hh = 3 * hidden * emb, 3 * hidden * hidden
    gate = (hidden + (emb if variant == "swl" else 0)) if composition == "gating" else 0
    if variant == "dwl":
        return edges_per_node * (gru_in + gru_hh + gate)
    return gru_in + gru_hh + edges_per_node * gate


__all__ = ["LatticeGRU", "BiLatticeGRU", "make_schedule", "compose", "Schedule", "multiply_adds_per_token",
           "VARIANTS", "COMPOSITIONS"]
