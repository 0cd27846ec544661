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

Batching: edges of all sentences are flattened once; the input projections W x of all edges are
one matmul; then one GRU step per topological level for the whole batch.  The level of a node is
its depth, the longest path from v_0 to it in edges, so every edge enters a node of a higher level
than the one it leaves, and all nodes of one level (of every sentence) can be advanced together:
the number of sequential steps is the batch's largest lattice depth, not its number of character
positions (a word of n characters spans n positions but one level).  Each step handles exactly
the edges (DWL) or nodes (SWL) of its level.  Preceding states are gathered from the outputs of
the (few) earlier steps that hold them, planned once per batch (``make_schedule``, vectorised over
edges: its only loop runs over levels), so each step costs O(its edges), never O(batch x positions).

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

from fairseq_local.modules import cuda_graphs, fast_path
from fairseq_local.modules.fast_path import FastPathMixin

VARIANTS = ("swl", "dwl")
COMPOSITIONS = ("pooling", "gating")


class Schedule(NamedTuple):
    """Flattened edges of a padded ``B x P x K`` lattice batch, grouped by topological level.

    The level of a node is its depth, the number of edges on the longest path from v_0 to it; every
    edge enters a node of a higher level than the one it leaves, so all nodes of one level, in every
    sentence of the batch, are advanced together as one step, and the number of sequential steps is
    the batch's largest lattice depth.  Nodes are ordered by (level, position, sentence), edges by
    (their node, slot): each step's edges and nodes are contiguous ranges."""

    edge_batch: Tensor  # E: sentence of each edge
    edge_other: Tensor  # E: the edge's other end (preceding node)
    edge_words: Tensor  # E: word id
    edge_node: Tensor  # E: index of the node it enters (into node_* below)
    node_batch: Tensor  # Nn
    node_pos: Tensor  # Nn
    steps: List[Tuple[int, int, int, int, int]]  # (level, e0, e1, n0, n1), levels 1 .. depth
    # per step: the earlier steps holding its edges' preceding states (-1: the zero initial state)
    # and, for each edge, its row in the concatenation of those steps' outputs
    sources: List[Tuple[List[int], Tensor]]
    edge_local: Tensor  # E: edge_node minus the first node of the edge's step
    edge_pred: Tensor  # E: index of the node the edge leaves (into node_*), -1 for v_0


def _node_levels(pred: np.ndarray, edge_node: np.ndarray, node_start: np.ndarray) -> np.ndarray:
    """Depth of every node (longest path from v_0, in edges), nodes with at least one incoming edge.

    ``pred``: each edge's preceding node (-1: v_0), ``edge_node``: the node it enters, edges grouped
    by node with ``node_start`` the first edge of each node.  Relaxation over all edges at once,
    depth(v) = max over incoming edges (depth(u) + 1), repeated until nothing changes: after pass
    ``i`` every node of depth <= i is final, so the loop runs over levels, not edges."""
    level = np.zeros(node_start.size, dtype=np.int64)
    if pred.size == 0:
        return level
    while True:
        cand = np.where(pred < 0, 0, level[np.maximum(pred, 0)]) + 1
        new = np.maximum.reduceat(cand, node_start)
        if np.array_equal(new, level):
            return level
        level = new


def make_schedule(words: Tensor, other: Tensor, mask: Tensor) -> Schedule:
    """Plan one direction of a padded lattice batch (``words``/``other``/``mask``: B x P x K; slot
    ``k`` of node ``p`` is an edge from node ``other[b, p, k]``): every step of ``LatticeGRU`` is
    one topological level of every lattice at once (see ``Schedule``)."""
    P, B = mask.size(1), mask.size(0)
    device = mask.device
    m = mask.transpose(0, 1)  # P x B x K
    p_e, b_e, k_e = m.nonzero(as_tuple=True)  # sorted by position, sentence, slot
    p_n, b_n = m.any(-1).nonzero(as_tuple=True)
    node_id = torch.full((P, B), -1, dtype=torch.long, device=device)
    node_id[p_n, b_n] = torch.arange(p_n.numel(), device=device)
    other_e = other.transpose(0, 1)[p_e, b_e, k_e]
    pred = node_id[other_e, b_e]  # the preceding node's id; -1 where it has no incoming edge (v_0)
    node_e = node_id[p_e, b_e]
    # the only host sync: small integer arrays
    pred_h, node_h = pred.cpu().numpy(), node_e.cpu().numpy()
    n_nodes = p_n.numel()
    node_start = np.searchsorted(node_h, np.arange(n_nodes))  # edges are grouped by node
    level = _node_levels(pred_h, node_h, node_start)
    depth = int(level.max()) if n_nodes else 0
    # renumber nodes by (level, position, sentence) and edges by (their node, slot): stable sorts
    node_order = np.argsort(level, kind="stable")
    rank = np.empty_like(node_order)
    rank[node_order] = np.arange(n_nodes)
    edge_order = np.argsort(rank[node_h], kind="stable")
    new_node = rank[node_h[edge_order]]  # E: node of each edge, nondecreasing
    n_end = np.cumsum(np.bincount(level, minlength=depth + 1))  # level 0 holds no node
    e_end = np.searchsorted(new_node, n_end, side="left")
    steps = [(lv, int(e_end[lv - 1]), int(e_end[lv]), int(n_end[lv - 1]), int(n_end[lv]))
             for lv in range(1, depth + 1)]
    # where each edge's preceding state lives: step level(u) - 1, row rank(u) - first node of it
    pr = pred_h[edge_order]
    src = np.where(pr < 0, -1, level[np.maximum(pr, 0)] - 1)
    row = np.where(pr < 0, 0, rank[np.maximum(pr, 0)] - n_end[np.maximum(src, 0)])
    step_of_edge = level[node_h[edge_order]] - 1
    # per step, its distinct sources in increasing order, each a block of the concatenation
    pairs, pair_of_edge = np.unique(step_of_edge * (depth + 1) + src + 1, return_inverse=True)
    pair_step, pair_src = pairs // (depth + 1), pairs % (depth + 1) - 1
    size = np.where(pair_src < 0, 1, np.diff(n_end)[np.maximum(pair_src, 0)])
    ends = np.cumsum(size)
    first_pair = np.searchsorted(pair_step, np.arange(depth))
    offset = ends - size - (ends - size)[first_pair][pair_step]
    local = torch.from_numpy(offset[pair_of_edge.reshape(-1)] + row).to(device)
    pair_end = np.append(first_pair[1:], pairs.size)
    sources = [(pair_src[first_pair[s]:pair_end[s]].tolist(), local[e0:e1])
               for s, (_, e0, e1, _, _) in enumerate(steps)]
    edge_index = torch.from_numpy(edge_order).to(device)
    node_index = torch.from_numpy(node_order).to(device)
    edge_local = torch.from_numpy(new_node - n_end[step_of_edge]).to(device)
    edge_pred = torch.from_numpy(np.where(pr < 0, -1, rank[np.maximum(pr, 0)])).to(device)
    return Schedule(b_e[edge_index], other_e[edge_index], words.transpose(0, 1)[p_e, b_e, k_e][edge_index],
                    torch.from_numpy(new_node).to(device), b_n[node_index], p_n[node_index], steps, sources,
                    edge_local, edge_pred)


class PaddedLevels(NamedTuple):
    """A ``Schedule`` laid out for the level loop of the fast path: ``L`` levels (padded to ``Lp``
    on the captured path) and each level's edges and nodes padded to ``W`` slots, ``W`` at least the
    widest level's edge count (a level has at least as many edges as nodes, so one width serves
    both); :func:`grid_shape` gives (``Lp``, ``W``).
    States live in one buffer of ``1 + Lp * W`` rows: row 0 is the zero initial state, row
    ``1 + s * W + j`` the state of node slot ``j`` of level ``s``.  Padded edge slots read row 0 and
    are composed into node slot ``W - 1``, which is padding whenever a level has a padded edge slot
    (it then has fewer than ``W`` edges, so fewer than ``W`` nodes); padded levels and node slots
    write rows that no real edge reads, so real states are the same as in the eager loop."""

    width: int  # W
    levels: int  # Lp
    edge_slot: Tensor  # E: the edge's slot s * W + j
    node_slot: Tensor  # Nn: the node's slot s * W + j (its state buffer row is 1 + node_slot)
    pre_row: Tensor  # Lp x W: state buffer row of each edge slot's preceding state
    local: Tensor  # Lp x W: node slot (0..W-1) each edge slot is composed into
    write_row: Tensor  # Lp x W: state buffer row of each node slot


EDGE_FACTORS = (1, 2, 3, 4, 6, 8)  # declared widths of a level: a plan's batch size times one of these


def declared_grids(plan) -> List[Tuple[int, int]]:
    """The (levels, width) grids of the captured level loop under a shape plan: each declared
    length ``L_j`` with the widths ``B_j * f``, f in :data:`EDGE_FACTORS`; at most
    ``K * len(EDGE_FACTORS)``, whatever the corpus."""
    return sorted({(length, rows * f) for length, rows in plan.shapes for f in EDGE_FACTORS})


def describe_grids(plan) -> str:
    grids = declared_grids(plan)
    return (f"lattice level grids: at most {len(grids)} (levels x width) per direction, the plan's lengths with "
            f"their batch size times {', '.join(map(str, EDGE_FACTORS))}")


def grid_shape(levels: int, width: int, plan=None) -> Tuple[int, int]:
    """The padded (levels, width) of a level grid on the captured path.  With a shape plan: the
    smallest declared length ``L_j >= levels`` and the smallest of its widths ``B_j * f >= width``
    (a batch whose depth fits ``L_j`` has at most ``B_j`` sentences, as its characters fit a bucket
    at least as long, so ``f`` is at most the edges of one sentence in one level), the next longer
    length where none is wide enough; without a plan, or beyond every declared grid, a time bucket
    and a batch bucket (:func:`~fairseq_local.modules.fast_path.length_bucket`, ``batch_bucket``)."""
    if plan is not None:
        for length, rows in plan.shapes:
            fit = [rows * f for f in EDGE_FACTORS if rows * f >= width]
            if length >= levels and fit:
                return length, fit[0]
    return fast_path.length_bucket(levels), fast_path.batch_bucket(width)


def pad_levels(sched: Schedule, bucket_levels: bool = True) -> PaddedLevels:
    """Lay a schedule out in the padded ``Lp x W`` level grid of ``PaddedLevels`` (``bucket_levels``:
    pad to :func:`grid_shape` under the run's shape plan, for the captured path, so that the number
    of graphs is bounded; otherwise the levels stay as they are and the width is a batch bucket)."""
    steps = sched.steps
    device = sched.edge_local.device
    widest = max(e1 - e0 for _, e0, e1, _, _ in steps)
    if bucket_levels:
        n_levels, width = grid_shape(len(steps), widest, cuda_graphs.shape_plan())
    else:
        n_levels, width = len(steps), fast_path.batch_bucket(widest)

    def slots(bounds: List[Tuple[int, int]]) -> Tensor:
        counts = torch.tensor([b - a for a, b in bounds])
        first = torch.tensor([a for a, _ in bounds])
        level = torch.repeat_interleave(torch.arange(len(bounds)), counts)
        return (level * width + torch.arange(int(counts.sum())) - first[level]).to(device)

    edge_slot = slots([(e0, e1) for _, e0, e1, _, _ in steps])
    node_slot = slots([(n0, n1) for _, _, _, n0, n1 in steps])
    pred = sched.edge_pred
    pre = torch.where(pred < 0, 0, 1 + node_slot[pred.clamp(min=0)])
    grid = n_levels * width
    pre_row = torch.zeros(grid, dtype=torch.long, device=device).index_copy(0, edge_slot, pre)
    local = torch.full((grid,), width - 1, dtype=torch.long, device=device).index_copy(0, edge_slot, sched.edge_local)
    write_row = torch.arange(1, grid + 1, device=device)
    return PaddedLevels(width, n_levels, edge_slot, node_slot, pre_row.view(n_levels, width),
                        local.view(n_levels, width), write_row.view(n_levels, width))


def compose(v: Tensor, local: Tensor, n: int, gate: Optional[nn.Linear],
            padded: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
    """Eq. 21 (gate given) or max pooling over the rows of ``v`` grouped by ``local`` (0..n-1).

    Returns the n composed vectors and, for gating, each row's normalised weight.  ``padded``: rows
    and groups are padded slots (``PaddedLevels``), so n rows are not one row per group.
    """
    identity = n == v.size(0) and not padded  # one edge per node (rows are sorted by node)
    if gate is None:
        if identity:
            return v, None
        idx = local.unsqueeze(1).expand_as(v)
        return v.new_zeros(n, v.size(1)).scatter_reduce(0, idx, v, "amax", include_self=False), None
    a = torch.sigmoid(gate(v)).squeeze(1)
    denom = a.new_zeros(n).index_add(0, local, a)
    w = a / denom[local]
    if identity:
        return w.unsqueeze(1) * v, w
    return v.new_zeros(n, v.size(1)).index_add(0, local, w.unsqueeze(1) * v), w


# the level grid is padded by pad_levels; its "batch" is a level's slots: no further padding
LEVEL_LAYOUT = fast_path.Layout(carry=(0,), seq=(1, 1, 1, 1), pad=False)


class LatticeGRU(FastPathMixin, nn.Module):
    """One direction of an SWL-/DWL-GRU with pooling or gating composition.

    ``--rnn-impl`` (``fairseq_local.modules.fast_path``): eagerly, one step per level handles
    exactly that level's edges and nodes; on the fast path the same level computation (``_level``)
    runs as the step ``_level_step`` over the padded level grid of ``pad_levels`` (compiled once,
    or captured once per padded grid, :func:`grid_shape`).  Recording the gate weights (analysis)
    always runs eagerly."""

    grid_description = staticmethod(describe_grids)  # logged with the shape plan at start-up

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

    def _level(self, gi: Tensor, h_pre: Tensor, local: Tensor, n: int,
               padded: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        """One topological level: the states of its n nodes from the input projections ``gi`` (DWL:
        of its edges, SWL: of its nodes) and the preceding states ``h_pre`` of its edges."""
        if self.variant == "dwl":  # Eq. 16-20
            return compose(self._cell(gi, h_pre), local, n, self.gate_h, padded)
        h_pre, w = compose(h_pre, local, n, self.gate_h, padded)  # Eq. 11-15
        return self._cell(gi, h_pre), w

    def _level_step(self, carry, x, valid, consts):
        """One level of the padded grid, the step of the fast path (:mod:`.fast_path`): carry the
        state buffer, x (gi ``[W, G*H]``, pre_row, local, write_row ``[W]``)."""
        (states,) = carry
        gi, pre_row, local, write_row = x
        h, _ = self._level(gi, states.index_select(0, pre_row), local, gi.size(0), padded=True)
        return (), (states.index_copy(0, write_row, h),)

    def _fast_levels(self, gi: Tensor, sched: Schedule, how: "fast_path.Execution") -> Tensor:
        """Every node's state (schedule order) from the level loop over the padded grid."""
        grid = pad_levels(sched, bucket_levels=how.graphs)
        rows = grid.edge_slot if self.variant == "dwl" else grid.node_slot
        gi = gi.new_zeros(grid.levels * grid.width, gi.size(1)).index_copy(0, rows, gi).view(grid.levels, grid.width, -1)
        states = gi.new_zeros(1 + grid.levels * grid.width, self.hidden_size)
        _, (states,) = fast_path.scan(self, "_level_step", (states,), (gi, grid.pre_row, grid.local, grid.write_row),
                                      None, (), LEVEL_LAYOUT, how=how)
        return states.index_select(0, 1 + grid.node_slot)

    def capture_grids(self, plan, like: Tensor) -> int:
        """Forward and backward of the captured level loop at every grid ``plan`` declares
        (:func:`declared_grids`), each on an all-padding grid (every edge slot reads the zero state
        into the padded node slot), with the inputs a training batch gives it (edge projections that
        need gradients, a state buffer that does not): the capture ahead of training
        (``patches/shape_plan_batching.py``) captures every grid a batch may meet, not only its
        samples'.  ``like``: a tensor of the run's device.  Returns the grids run (0 off graphs)."""
        how = self.execution(like)
        if not how.graphs:
            return 0
        # the largest grid first: the loop's arena gets its final size at the first capture
        grids = sorted(declared_grids(plan), key=lambda g: -g[0] * g[1])
        for levels, width in grids:  # a loop over the declared grids: one capture each
            slots = levels * width
            gi = F.linear(like.new_zeros(slots, self.input_size, dtype=self.weight_ih.dtype), self.weight_ih,
                          self.bias_ih).view(levels, width, -1)
            pre = torch.zeros(levels, width, dtype=torch.long, device=like.device)
            write = torch.arange(1, slots + 1, device=like.device).view(levels, width)
            states = gi.new_zeros(1 + slots, self.hidden_size)
            seq = (gi, pre, torch.full_like(pre, width - 1), write)
            _, (states,) = fast_path.scan(self, "_level_step", (states,), seq, None, (), LEVEL_LAYOUT, how=how)
            states.sum().backward()
        return len(grids)

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
        how = self.execution(embed)
        if sched.steps and not record_gates and how.fast:
            outs.append(self._fast_levels(gi, sched, how))
        else:
            for (_, e0, e1, n0, n1), (srcs, local_rows) in zip(sched.steps, sched.sources):  # one level per step
                parts = [zero if s < 0 else outs[s] for s in srcs]
                h_pre = (torch.cat(parts) if len(parts) > 1 else parts[0]).index_select(0, local_rows)
                h, w = self._level(gi[e0:e1] if self.variant == "dwl" else gi[n0:n1], h_pre,
                                   sched.edge_local[e0:e1], n1 - n0)
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


__all__ = ["LatticeGRU", "BiLatticeGRU", "make_schedule", "pad_levels", "grid_shape", "declared_grids",
           "describe_grids", "EDGE_FACTORS", "compose", "Schedule", "PaddedLevels", "multiply_adds_per_token",
           "VARIANTS", "COMPOSITIONS"]
