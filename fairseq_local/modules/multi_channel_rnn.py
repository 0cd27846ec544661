"""Multi-Channel RNN layer (Xu, Huang, Wang, Wang and Liu, "Modeling Local Dependence in Natural
Language with Multi-Channel Recurrent Neural Networks", AAAI 2019), Section 3.

An MC-RNN-k layer has k channels and block size n = k + 1.  With 1-based positions t:

    m_t^k     = (t - k - 1) mod (n - 1) + 1                                  (Eq. 1)
    s_{t-1}^k = (1 / m_t^k) * sum_{j=1..m_t^k} W_j h_{t-j}^k,   h_t^k = 0 for t <= 0   (Eq. 2)
    h_t^k     = f(s_{t-1}^k, x_t)        f = LSTM, GRU or tanh-RNN cell        (Eq. 3)
    e_t^k     = r^T tanh(V [h_t^k; x_t]),  alpha_t = softmax_k(e_t),          (Eq. 5, 6)
    h_t^att   = sum_k alpha_t^k h_t^k     (the layer output, fed to the next layer)   (Eq. 4)

W_j (H x H, one per distance j = 1..n-1), the cell and the attention (V, r) are shared by all
channels.  The cell f is the standard one with s in place of h_{t-1}:
LSTM gates = W_ih x_t + b_ih + W_hh s + b_hh; GRU h_t = (1 - z) n + z s with
n = tanh(W_in x + b_in + r * (W_hn s + b_hn)); RNN h_t = tanh(W_ih x + b_ih + W_hh s + b_hh).

**LSTM memory cell.**  The paper only defines the temporal input s of the hidden state.  We
default to ``cell_memory="chain"``: channel k's memory cell c_t^k continues from its immediate
predecessor c_{t-1}^k.  Reasons: (i) the paper states that MC-RNN "does not require any
modification to the traditional RNN formulation" and only replaces the hidden input; the memory
cell is the LSTM's internal carry, not a hidden output; (ii) each channel's blocks are "joined
head-to-end in a single line, thus the sequential property and temporal order information can be
retained" -- the chain carries that order; (iii) with the blocks overlapping on one node, the
forget-gate path stays a plain LSTM path, so long-range gradient flow is unchanged while W_j add
the local shortcuts.  ``cell_memory="block_mean"`` instead feeds the block average
(1/m) sum_{j<=m} c_{t-j}^k (no W_j: the cell state is not projected), mirroring Eq. 2.

**Vectorisation (Section 5.3).**  All k channels advance together as one ``B x k`` batch; the
input projection W_ih x_t (shared by the channels) and V_x x_t are one matrix product over all
time steps before the loop; the state keeps the last n-1 hidden states of every channel,
``hist[B, k, n-1, H]``; m_t^k becomes a coefficient tensor ``coef[T, B, k, n-1]`` (1/m for
j <= m, else 0), computed from each sentence's own position (so left padding is exact), so each
step is ``s = (coef * hist).view(B*k, (n-1)*H) @ [W_1; ...; W_{n-1}]^T`` followed by
``s @ W_hh^T``: two batched matrix products, no loop over channels, batch items or j.  The
channel attention does not feed back into the recurrence, so it is computed after the loop for
all steps and channels at once.  Folding W_hh W_j into one gate-space matrix would make it one
product per step but cost 4k^2 H^2 instead of k^2 H^2 + 4k H^2 multiply-adds per item (more for
every k >= 2), so we keep the two products.

**Weight space.**  ``weight_space="hidden"`` (default) is Eq. 2 literally: W_j is H x H (Table 1:
s lives in R^{N_h}) and the cell keeps its own W_hh; DropConnect drops entries of W_hh.
``weight_space="gates"`` learns W_j directly in the cell's gate space (G*H x H, i.e. the folded
W_hh W_j; no separate W_hh; k = 1 is then exactly a standard cell), one product per step, and the
GRU interpolates with the block mean (1/m) sum_j h_{t-j}; DropConnect drops entries of the W_j.
Its parameter increments over the baseline match the paper's IWSLT14 rows (Tables 2/5:
+3M/+4M/+6M; the Gigaword rows are closer to "hidden"), at 4k^2 H^2 instead of k^2 H^2 + 4k H^2
multiply-adds per step.
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq_local.modules.fast_path import FastPathMixin, active_mask, scan

CELL_GATES = {"lstm": 4, "gru": 3, "rnn": 1}
CELL_MEMORY = ("chain", "block_mean")
WEIGHT_SPACES = ("hidden", "gates")
BLOCK_INITS = ("identity", "uniform")
INIT_STATES = ("first", "all")


def channel_in_degree(positions: Tensor, channels: int) -> Tensor:
    """Eq. 1: m_t^k for 1-based positions ``t`` (any shape) and k = 1..channels -> ``[..., k]``."""
    k = torch.arange(1, channels + 1, device=positions.device)
    return torch.remainder(positions.unsqueeze(-1) - k - 1, channels) + 1


class MultiChannelRNNLayer(FastPathMixin, nn.Module):
    """One MC-RNN-k layer under the fairseq_local recurrent-layer contract.

    State (batch-first tuple): ``hist[B, k, n-1, H]`` (slot j-1 holds h_{t-j}),
    for LSTM ``cmem[B, k, 1 or n-1, H]`` (memory cells), and ``pos[B]`` (tokens consumed so far,
    so m_t^k is right in incremental decoding and for left-padded batches).
    ``dropconnect`` (AWD-LSTM) drops entries of the hidden-to-hidden matrix (W_hh, or the W_j in
    ``weight_space="gates"``) once per forward call in training.
    Set ``record_attention = True`` to keep the last channel weights alpha ``[T, B, k]``.
    """

    def __init__(self, input_size: int, hidden_size: int, channels: int, cell: str = "lstm",
                 cell_memory: str = "chain", dropconnect: float = 0.0, init_scale: float = 0.1,
                 weight_space: str = "hidden", block_init: str = "identity", init_state: str = "first"):
        super().__init__()
        if not isinstance(channels, int) or channels < 1:
            raise ValueError(f"channels must be an integer >= 1 (got {channels!r})")
        if cell not in CELL_GATES:
            raise ValueError(f"cell must be one of {', '.join(CELL_GATES)} (got {cell!r})")
        if cell_memory not in CELL_MEMORY:
            raise ValueError(f"cell_memory must be one of {', '.join(CELL_MEMORY)} (got {cell_memory!r})")
        if weight_space not in WEIGHT_SPACES:
            raise ValueError(f"weight_space must be one of {', '.join(WEIGHT_SPACES)} (got {weight_space!r})")
        if block_init not in BLOCK_INITS:
            raise ValueError(f"block_init must be one of {', '.join(BLOCK_INITS)} (got {block_init!r})")
        if init_state not in INIT_STATES:
            raise ValueError(f"init_state must be one of {', '.join(INIT_STATES)} (got {init_state!r})")
        if not 0.0 <= dropconnect < 1.0:
            raise ValueError(f"dropconnect must be in [0, 1) (got {dropconnect})")
        self.input_size, self.hidden_size, self.channels = input_size, hidden_size, channels
        self.lags = channels  # n - 1
        self.cell, self.cell_memory, self.dropconnect = cell, cell_memory, dropconnect
        self.weight_space, self.block_init, self.init_state = weight_space, block_init, init_state
        G, H = CELL_GATES[cell], hidden_size
        u = lambda *shape: nn.Parameter(torch.empty(*shape).uniform_(-init_scale, init_scale))  # noqa: E731
        self.weight_ih, self.bias_ih = u(G * H, input_size), u(G * H)
        self.bias_hh = u(G * H)
        if weight_space == "hidden":
            self.weight_hh = u(G * H, H)
            # W_j, j = 1..n-1; identity init: at start s is the block mean of the previous states
            self.block_weight = (nn.Parameter(torch.eye(H).repeat(self.lags, 1, 1)) if block_init == "identity"
                                 else u(self.lags, H, H))
        else:  # W_j in the cell's gate space (W_hh W_j folded and learned directly)
            self.register_parameter("weight_hh", None)
            self.block_weight = u(self.lags, G * H, H)
        if channels > 1:
            self.att_v_h, self.att_v_x, self.att_r = u(H, H), u(H, input_size), u(H)
        else:  # one channel: alpha = 1 whatever e is (Eq. 5), so V and r would be inert parameters
            self.att_v_h = self.att_v_x = self.att_r = None
        self.record_attention = False
        self.last_attention: Optional[Tensor] = None

    # ---- contract helpers ------------------------------------------------------------------
    def _mem_slots(self):
        return self.lags if self.cell_memory == "block_mean" else 1

    def zero_state(self, batch_size: int, like: Tensor) -> Tuple[Tensor, ...]:
        hist = like.new_zeros(batch_size, self.channels, self.lags, self.hidden_size)
        pos = torch.zeros(batch_size, dtype=torch.long, device=like.device)
        if self.cell == "lstm":
            return hist, like.new_zeros(batch_size, self.channels, self._mem_slots(), self.hidden_size), pos
        return hist, pos

    def state_from_hidden(self, h0: Tensor) -> Tuple[Tensor, ...]:
        """Decoder initialisation: every channel's h_0 is ``h0``; with ``init_state="first"`` the
        older lag slots h_{-1}, h_{-2}, ... are zero (Eq. 2's h_t = 0 for t <= 0, so a block that
        reaches back past the start averages h0 with zeros), with ``"all"`` they are ``h0`` too.
        Memory cells start at zero."""
        state = self.zero_state(h0.size(0), h0)
        if self.init_state == "all":
            state[0][:] = h0[:, None, None, :]
        else:
            state[0][:, :, 0] = h0.unsqueeze(1)
        return state

    def reorder_state(self, state, new_order: Tensor):
        return tuple(s.index_select(0, new_order) for s in state)

    # ---- forward -----------------------------------------------------------------------------
    def coefficients(self, positions: Tensor, dtype) -> Tensor:
        """``coef[..., k, j] = 1/m_t^k if j <= m_t^k else 0`` (Eq. 1-2) for 1-based positions."""
        m = channel_in_degree(positions, self.channels).unsqueeze(-1)  # [..., k, 1]
        j = torch.arange(1, self.lags + 1, device=positions.device)
        return (j <= m).to(dtype) / m.to(dtype)

    def input_projection_parameters(self) -> Tuple[Tensor, Tensor]:
        """(weight, bias) of W_ih x_t + b_ih, for callers that compute it (``input_proj``)."""
        return self.weight_ih, self.bias_ih

    def forward(self, x: Tensor, state=None, padding_mask: Optional[Tensor] = None,
                input_proj: Optional[Tensor] = None):
        """``input_proj``: ``W_ih x + b_ih`` computed by the caller (``[T, B, G*H]``), or None."""
        T, B, _ = x.shape
        K, J, H = self.channels, self.lags, self.hidden_size
        if state is None:
            state = self.zero_state(B, x)
        hist, pos = state[0], state[-1]
        cmem = state[1] if self.cell == "lstm" else None
        mask = active_mask(padding_mask)
        valid = None if mask is None else ~mask
        if valid is None:
            steps = torch.arange(1, T + 1, device=x.device).unsqueeze(1).expand(T, B)
        else:
            steps = valid.long().cumsum(0)
        coef = self.coefficients(pos.unsqueeze(0) + steps, x.dtype)  # [T, B, K, J]

        x_proj = input_proj if input_proj is not None else F.linear(x, self.weight_ih, self.bias_ih)
        x_proj = x_proj.unsqueeze(2)  # [T, B, 1, G*H]
        gates_space = self.weight_space == "gates"
        w_hh = None if gates_space else self._dropconnect(self.weight_hh)
        w_block = self.block_weight if not gates_space else self._dropconnect(self.block_weight)
        w_block = self._stacked_block_weight(w_block)  # sum_j h_j W_j^T

        (hs,), (hist, cmem) = scan(self, "_step", (hist, cmem), (coef, x_proj), valid, (w_hh, w_block))
        if K == 1:
            alpha, out = hs.new_ones(T, B, 1), hs[:, :, 0]
        else:  # Eq. 4-6 for every step and channel at once: e = r^T tanh(V_h h + V_x x)
            e = torch.tanh(F.linear(hs, self.att_v_h) + F.linear(x, self.att_v_x).unsqueeze(2)) @ self.att_r
            alpha = torch.softmax(e, dim=-1)  # [T, B, K]
            out = (alpha.unsqueeze(-1) * hs).sum(2)
        if valid is not None:
            out = out * valid.unsqueeze(-1).to(out.dtype)
            alpha = alpha * valid.unsqueeze(-1).to(alpha.dtype)
        if self.record_attention:
            self.last_attention = alpha.detach()
        pos = pos + (steps[-1] if T > 0 else 0)
        new_state = (hist, cmem, pos) if self.cell == "lstm" else (hist, pos)
        return out, new_state

    def _step(self, carry, x, valid: Optional[Tensor], consts):
        """One time step (Eq. 2-3 for every channel), the layer's step (:mod:`.fast_path`): carry
        ``(hist, cmem or None)``, x ``(coef[B, K, J], x_proj[B, 1, G*H])``, ``valid[B]`` or None,
        consts ``(W_hh or None, [W_1; ...; W_{n-1}]^T)``; returns ``((h[B, K, H],), (hist, cmem))``."""
        hist, cmem = carry
        coef, gi = x
        w_hh, w_block = consts
        B, K, J = coef.shape
        H = self.hidden_size
        c_t = coef.unsqueeze(-1)  # [B, K, J, 1]
        weighted = hist * c_t
        if self.weight_space == "gates":  # W_j h in gate space; the GRU interpolates with the block mean
            rec = torch.addmm(self.bias_hh, weighted.reshape(B * K, J * H), w_block).view(B, K, -1)
            s = weighted.sum(2) if self.cell == "gru" else None
        else:
            s = torch.mm(weighted.reshape(B * K, J * H), w_block)  # Eq. 2, all channels
            rec = F.linear(s, w_hh, self.bias_hh).view(B, K, -1)
        if self.cell == "lstm":
            i, f, g, o = (gi + rec).chunk(4, dim=-1)
            c_prev = cmem[:, :, 0] if self.cell_memory == "chain" else (cmem * c_t).sum(2)
            c_new = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
            h_new = torch.sigmoid(o) * torch.tanh(c_new)
        elif self.cell == "gru":
            gi_r, gi_z, gi_n = gi.chunk(3, dim=-1)
            gh_r, gh_z, gh_n = rec.chunk(3, dim=-1)
            r, z = torch.sigmoid(gi_r + gh_r), torch.sigmoid(gi_z + gh_z)
            h_new = (1 - z) * torch.tanh(gi_n + r * gh_n) + z * s.reshape(B, K, H)
        else:
            h_new = torch.tanh(gi + rec)
        new_hist = torch.cat([h_new.unsqueeze(2), hist[:, :, :-1]], dim=2)
        new_cmem = torch.cat([c_new.unsqueeze(2), cmem[:, :, :-1]], dim=2) if self.cell == "lstm" else None
        if valid is not None:  # padded positions leave the state unchanged
            keep = valid.view(B, 1, 1, 1)
            new_hist = torch.where(keep, new_hist, hist)
            if new_cmem is not None:
                new_cmem = torch.where(keep, new_cmem, cmem)
        return (h_new,), (new_hist, new_cmem)

    def _stacked_block_weight(self, w: Tensor) -> Tensor:
        """``[W_1^T; ...; W_{n-1}^T]`` as one ``(n-1)H x out`` matrix (a transposed copy, made on
        every call).  It is deliberately not cached across calls: fairseq's optimizers update
        ``p.data`` in place, which leaves the parameter's version counter unchanged, so a cache keyed
        on it served stale weights to validation and ``--eval-bleu`` during training."""
        return w.transpose(1, 2).reshape(self.lags * self.hidden_size, -1)

    def _dropconnect(self, w: Tensor) -> Tensor:
        return F.dropout(w, self.dropconnect, self.training) if self.dropconnect else w

    def extra_repr(self):
        return (f"input_size={self.input_size}, hidden_size={self.hidden_size}, channels={self.channels}, "
                f"cell={self.cell}, cell_memory={self.cell_memory}, weight_space={self.weight_space}, "
                f"block_init={self.block_init}, init_state={self.init_state}, dropconnect={self.dropconnect}")
