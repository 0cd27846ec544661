"""Parallel-cell recurrent layer (Zhu et al., "Going Wider: Recurrent Neural Network With Parallel
Cells", Section 2.2).

A layer of total hidden size ``m`` with ``wide = n`` runs n independent cells of ``k = m / n`` units.
Cell j's recurrence sees only its own previous state h^j_{t-1}; the layer output is the
concatenation h_t = [h^1_t; ...; h^n_t] (paper Fig. 2-3). What a cell reads is ``cell_input``:

* ``"full"`` (Figure 3: "the small cells accept input x"): every cell reads the whole x_t;
* ``"slice"`` (Section 2.2's count, each cell a T_{2m/n -> 4m/n}): cell j reads only the j-th of n
  consecutive slices x^j_t of the input (torch.tensor_split sizes when n does not divide it), so
  the input projection is block-diagonal like the recurrence.

For an LSTM cell (paper Section 2.1, Graves 2013), per cell j (x^j_t = x_t in the full reading):

    (i, f, g, o)^j = (sigm, sigm, tanh, sigm)( W^j x^j_t + U^j h^j_{t-1} + b^j )
    c^j_t = f * c^j_{t-1} + i * g,         h^j_t = o * tanh(c^j_t)

so the full recurrent matrix is block-diagonal: U = diag(U^1, ..., U^n). ``wide = 1`` is exactly a
standard LSTM (``torch.nn.LSTM`` with the same weights) in either reading. GRU and vanilla-tanh
cells are supported with torch's equations.

Vectorisation: the input projection of all cells for all steps is one matrix product before the time
loop (for ``"slice"`` one batched product over the cells, ``[n, T*B, I/n] x [n, I/n, G*k]``), and
each step's block-diagonal recurrence is one ``torch.baddbmm`` over the cell dimension (weights
``[n, k, G*k]``); there is no loop over cells. For LSTM cells the time loop is one autograd
node (``_BlockDiagonalLSTM``) with a hand-written backward: the recurrent weight gradient is one
batched product over all steps instead of T small ones (tested against autograd and nn.LSTM).
With ``wide = 1`` (a standard LSTM), unpadded multi-step calls use torch's fused LSTM kernel.

Parameters per layer (input size I, G = 4 gates for LSTM, 3 for GRU, 1 for vanilla):
    input weights      G * m * I   (full: every cell reads the whole input)
                       G * m * I / n   (slice: cell j's G*k x |x^j| weights, n blocks in all)
    recurrent weights  G * m^2 / n        (block-diagonal; the paper's Table 2 "recurrent parameters"
                                          = 2 layers * 4 * 1950^2 / n = 30.4M, 15.2M, 10.1M, ...)
    biases             G * m (LSTM, vanilla: one bias; b_ih + b_hh of torch are redundant),
                       4 * m (GRU: 3m input bias + torch's m-sized b_hn, which sits inside r * (.))
For an LSTM with I = m: full 4m^2 + 4m^2/n + 4m; slice 8m^2/n + 4m, the paper's Section 2.2 count,
the only reading in which "PCs with wide=n reduce the parameter size of the LSTM cell to about 1/n"
(and Section 3.1's "when wide=10 the LSTM cell contains about only 10% of parameters") holds.
``ParallelCellRNNLayer.count_parameters`` gives the formula; the tests check it.

Weight layout: ``weight_ih`` is ``[n*G*k, I]`` (rows of cell j: ``[j*G*k, (j+1)*G*k)``) in the full
reading and ``[G*k, I]`` in the slice reading (the columns of input slice j are cell j's weights).

Layer contract (shared by fairseq_local's recurrent layers):
    ``forward(x[T, B, I], state=None, padding_mask=None[T, B] bool) -> (out[T, B, m], state)``
    state is a tuple of batch-first tensors: ``(h[B, m], c[B, m])`` for LSTM, ``(h[B, m],)`` for
    GRU / vanilla, cells concatenated in order like the output. Positions where padding_mask is
    True keep the state unchanged and output zeros, so left-padded batches are exact and T=1 calls
    are incremental decoding. ``reorder_state(state, new_order)`` follows beam reordering.

Cell masking (paper Section 4.1, Figure 4): ``layer.mask_cells([i])`` zeroes cell i's hidden state
h^i_t at every step at test time (its output slice is 0 and its recurrence sees 0);
``layer.mask_cells([])`` restores the layer. Other cells' outputs are unaffected by construction.
"""
from typing import Iterable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq_local.modules.amp import autocast_inputs
from fairseq_local.modules.fast_path import FastPathMixin, Layout, in_trace, scan

State = Tuple[Tensor, ...]

CELL_GATES = {"lstm": 4, "gru": 3, "rnn": 1}
CELL_INPUTS = ("full", "slice")
STEP_LAYOUT = Layout(carry=(1, 1), seq=(2,))  # the step loop's batch axes: cells come first


def input_slices(input_size: int, wide: int) -> Tuple[int, ...]:
    """Widths of the n consecutive input slices of the slice reading (``torch.tensor_split`` sizes:
    the first ``input_size % wide`` slices are one unit wider)."""
    return tuple(input_size // wide + (1 if j < input_size % wide else 0) for j in range(wide))


class ParallelCellRNNLayer(FastPathMixin, nn.Module):
    """``wide`` independent LSTM / GRU / tanh-RNN cells of ``hidden_size // wide`` units each."""

    def __init__(self, input_size: int, hidden_size: int, wide: int = 1, cell: str = "lstm",
                 cell_input: str = "full"):
        super().__init__()
        if cell not in CELL_GATES:
            raise ValueError(f"--cell-type {cell!r}: expected one of {sorted(CELL_GATES)}")
        if wide < 1 or hidden_size % wide != 0:
            raise ValueError(
                f"parallel cells: hidden size {hidden_size} is not divisible by wide={wide}"
            )
        if cell_input not in CELL_INPUTS:
            raise ValueError(f"--cell-input {cell_input!r}: expected 'full' or 'slice'")
        if cell_input == "slice" and input_size < wide:
            raise ValueError(f"--cell-input slice: a layer input of {input_size} units cannot be split "
                             f"among wide={wide} cells (each cell needs at least one input unit)")
        self.input_size, self.hidden_size, self.wide, self.cell = input_size, hidden_size, wide, cell
        self.cell_input = cell_input
        self.cell_size = k = hidden_size // wide
        self.num_gates = g = CELL_GATES[cell]
        # full: rows [j*g*k, (j+1)*g*k) belong to cell j, gates in torch order (i,f,g,o) / (r,z,n);
        # slice: [g*k, I], the columns of input slice j are cell j's weights
        rows = wide * g * k if cell_input == "full" else g * k
        self.weight_ih = nn.Parameter(torch.empty(rows, input_size))
        if cell_input == "slice":
            widths = input_slices(input_size, wide)
            owner = torch.repeat_interleave(torch.arange(wide), torch.tensor(widths), output_size=input_size)
            offset = torch.arange(input_size) - torch.cumsum(torch.tensor((0,) + widths[:-1]), 0)[owner]
            # input unit i -> its cell, and its column in the [n, max width] padded layout
            self.register_buffer("input_cell", owner, persistent=False)
            self.register_buffer("input_padded_index", owner * widths[0] + offset, persistent=False)
        self.weight_hh = nn.Parameter(torch.empty(wide, k, g * k))  # cell j: h^j @ weight_hh[j]
        self.bias = nn.Parameter(torch.empty(wide * g * k))
        # GRU's hidden bias of the candidate, b_hn (inside r * (U h + b_hn)), laid out [n, 1, k]
        self.bias_hn = nn.Parameter(torch.empty(wide, 1, k)) if cell == "gru" else None
        self.masked_cells: Tuple[int, ...] = ()
        self.force_autograd = False  # LSTM: step with autograd instead of _BlockDiagonalLSTM (tests)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / self.cell_size ** 0.5  # torch.nn.LSTM's default for a cell of k units
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}, wide={self.wide}, cell={self.cell}, cell_input={self.cell_input}"

    @staticmethod
    def count_parameters(input_size: int, hidden_size: int, wide: int, cell: str = "lstm",
                         cell_input: str = "full") -> int:
        g, m = CELL_GATES[cell], hidden_size
        bias = 4 * m if cell == "gru" else g * m
        inputs = g * m * input_size if cell_input == "full" else g * (m // wide) * input_size
        return inputs + g * m * m // wide + bias

    # ------------------------------------------------------------------ state helpers
    def mask_cells(self, cells: Iterable[int]):
        cells = tuple(sorted(set(int(c) for c in cells)))
        for c in cells:
            if not 0 <= c < self.wide:
                raise ValueError(f"cannot mask cell {c}: the layer has wide={self.wide} cells")
        self.masked_cells = cells

    def zero_state(self, batch_size: int, like: Tensor) -> State:
        z = like.new_zeros(batch_size, self.hidden_size)
        return (z, z.clone()) if self.cell == "lstm" else (z,)

    def state_from_hidden(self, h0: Tensor) -> State:
        """The state whose previous hidden output is h0 (decoders initialised from the encoder)."""
        return (h0, torch.zeros_like(h0)) if self.cell == "lstm" else (h0,)

    @staticmethod
    def reorder_state(state: Optional[State], new_order: Tensor) -> Optional[State]:
        if state is None:
            return None
        return tuple(s.index_select(0, new_order) for s in state)

    def _cells_first(self, s: Tensor) -> Tensor:  # [B, m] -> [n, B, k]
        return s.view(s.size(0), self.wide, self.cell_size).transpose(0, 1).contiguous()

    def _batch_first(self, s: Tensor) -> Tensor:  # [n, B, k] -> [B, m]
        return s.transpose(0, 1).reshape(s.size(1), self.hidden_size)

    # ------------------------------------------------------------------ forward
    def input_projection_parameters(self) -> Tuple[Tensor, Tensor]:
        """(weight, bias) of the input projection, for callers that compute it themselves
        (``forward(..., input_proj=...)``, e.g. a ``StepwiseLinear`` in a decoder loop). In the slice
        reading the weight is the block-diagonal ``[n*G*k, I]`` matrix, built from ``weight_ih``
        (differentiable; its off-block entries are zeros and pass no gradient)."""
        if self.cell_input == "full":
            return self.weight_ih, self.bias
        n = self.wide
        own = self.input_cell.view(1, 1, -1) == torch.arange(n, device=self.input_cell.device).view(n, 1, 1)
        dense = self.weight_ih.unsqueeze(0) * own.to(self.weight_ih.dtype)  # [n, G*k, I]
        return dense.reshape(n * self.weight_ih.size(0), self.input_size), self.bias

    def _input_projection(self, x: Tensor) -> Tensor:
        """``W x + b`` of every cell at every step, ``[T, B, n*G*k]`` (cells in order)."""
        if self.cell_input == "full":
            return F.linear(x, self.weight_ih, self.bias)
        T, B, I = x.shape
        n, gk = self.wide, self.weight_ih.size(0)
        width = -(-I // n)
        weight = self.weight_ih
        if width * n != I:  # uneven slices: zero-pad every slice to the widest one
            index = self.input_padded_index
            x = x.new_zeros(T, B, n * width).index_copy(2, index, x)
            weight = weight.new_zeros(gk, n * width).index_copy(1, index, weight)
        xs = x.reshape(T * B, n, width).transpose(0, 1)  # [n, T*B, width]
        proj = torch.bmm(xs, weight.view(gk, n, width).permute(1, 2, 0))  # [n, T*B, G*k]
        return proj.transpose(0, 1).reshape(T, B, n * gk) + self.bias.to(proj.dtype)

    def forward(
        self, x: Tensor, state: Optional[State] = None, padding_mask: Optional[Tensor] = None,
        input_proj: Optional[Tensor] = None,
    ) -> Tuple[Tensor, State]:
        """``input_proj``: ``W x + b`` computed by the caller (``[T, B, wide*G*k]``), or None."""
        T, B, _ = x.shape
        if state is None:
            state = self.zero_state(B, x)
        if T == 0:
            return x.new_zeros(0, B, self.hidden_size), tuple(state)
        return getattr(self, self.implementation(x, padding_mask, input_proj))(x, state, padding_mask, input_proj)

    def implementation(self, x: Tensor, padding_mask: Optional[Tensor], input_proj: Optional[Tensor]) -> str:
        """The method that runs this call:

        * ``_fused_standard_lstm``: wide = 1 LSTM cells (a standard LSTM), an unpadded multi-step
          call, nothing masked: torch's fused kernel (oneDNN, cuDNN);
        * ``_block_diagonal_lstm``: LSTM cells on the eager path: the time loop is one autograd node
          with a hand-written backward;
        * ``_stepped``: the step loop (:meth:`_step`): GRU and tanh cells, masked cells,
          ``force_autograd``, the compiled or captured path (``--rnn-impl``) and inside a compiled
          or captured decoder step."""
        plain_lstm = self.cell == "lstm" and not self.masked_cells and not self.force_autograd
        if plain_lstm and self.wide == 1 and x.size(0) > 1 and padding_mask is None and input_proj is None:
            return "_fused_standard_lstm"
        if plain_lstm and not self.execution(x).fast and not in_trace():
            return "_block_diagonal_lstm"
        return "_stepped"

    def _projected(self, x: Tensor, input_proj: Optional[Tensor]) -> Tensor:
        """The input projection of every cell at every step, ``[T, B, n, G*k]``."""
        xproj = input_proj if input_proj is not None else self._input_projection(x)
        return xproj.view(x.size(0), x.size(1), self.wide, self.num_gates * self.cell_size)

    def _block_diagonal_lstm(self, x: Tensor, state: State, padding_mask: Optional[Tensor],
                             input_proj: Optional[Tensor]) -> Tuple[Tensor, State]:
        T, B, _ = x.shape
        h, c = state
        keep = None if padding_mask is None else (~padding_mask).view(T, 1, B, 1).to(x.dtype)
        out, h, c = _BlockDiagonalLSTM.apply(*autocast_inputs(self._projected(x, input_proj), self._cells_first(h),
                                                              self._cells_first(c), self.weight_hh, keep))
        return out.view(T, B, self.hidden_size), (self._batch_first(h), self._batch_first(c))

    def _stepped(self, x: Tensor, state: State, padding_mask: Optional[Tensor],
                 input_proj: Optional[Tensor]) -> Tuple[Tensor, State]:
        T, B, _ = x.shape
        keep_cells = None
        if self.masked_cells:
            keep_cells = x.new_ones(self.wide, 1, 1)
            keep_cells[list(self.masked_cells)] = 0
        h, *rest = state
        carry = (self._cells_first(h), self._cells_first(rest[0]) if rest else None)
        # [T, n, B, G*k]: one contiguous block per step
        xsteps = self._projected(x, input_proj).transpose(1, 2).contiguous()
        valid = None if padding_mask is None else ~padding_mask
        (out,), (h, c) = scan(self, "_step", carry, (xsteps,), valid, (keep_cells,), layout=STEP_LAYOUT)
        out = out.transpose(1, 2).reshape(T, B, self.hidden_size)
        return out, ((self._batch_first(h), self._batch_first(c)) if self.cell == "lstm" else (self._batch_first(h),))

    def _step(self, carry, x, valid: Optional[Tensor], consts):
        """One time step of every cell (the equations of the module doc), the layer's step
        (:mod:`.fast_path`): carry ``(h[n, B, k], c[n, B, k] or None)`` (cells first), x
        ``(xproj[n, B, G*k],)``, ``valid[B]`` or None, consts ``(keep_cells[n, 1, 1] or None,)``;
        returns ``((out[n, B, k],), (h, c))``."""
        h, c = carry
        (xt,) = x
        (keep_cells,) = consts
        if self.cell == "lstm":
            gates = torch.baddbmm(xt, h, self.weight_hh)  # block-diagonal recurrence
            # chunk, not slicing: a slice's backward allocates a zero tensor of the full size
            i, f, g_, o = gates.chunk(4, dim=-1)
            c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g_)
            h_new = torch.sigmoid(o) * torch.tanh(c_new)
        elif self.cell == "gru":
            h_r, h_z, h_n = torch.bmm(h, self.weight_hh).chunk(3, dim=-1)
            x_r, x_z, x_n = xt.chunk(3, dim=-1)
            r, z = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
            cand = torch.tanh(x_n + r * (h_n + self.bias_hn))
            h_new = cand + z * (h - cand)
            c_new = None
        else:
            h_new = torch.tanh(torch.baddbmm(xt, h, self.weight_hh))
            c_new = None
        if keep_cells is not None:
            h_new = h_new * keep_cells
        if valid is None:
            return (h_new,), (h_new, c_new)
        pad = ~valid.view(1, -1, 1)
        return (h_new.masked_fill(pad, 0.0),), (torch.where(pad, h, h_new),
                                                None if c is None else torch.where(pad, c, c_new))

    def _fused_standard_lstm(self, x: Tensor, state: State, padding_mask: None = None,
                             input_proj: None = None) -> Tuple[Tensor, State]:
        """wide=1 is exactly a standard LSTM: run whole unpadded sequences through torch's fused
        kernel (oneDNN on CPU, cuDNN on GPU), as ``torch.nn.LSTM`` does."""
        h0, c0 = state
        weights = [self.weight_ih, self.weight_hh[0].t().contiguous(), self.bias, self.bias.new_zeros(self.bias.shape)]
        out, h, c = torch.lstm(x, (h0.unsqueeze(0).contiguous(), c0.unsqueeze(0).contiguous()), weights,
                               True, 1, 0.0, self.training, False, False)
        return out, (h[0], c[0])

    # ------------------------------------------------------------------ conversion
    @torch.no_grad()
    def load_cell_from_torch(self, j: int, rnn: nn.Module):
        """Copy a one-layer unidirectional ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` (tanh) of
        ``cell_size`` units into cell j (e.g. to import pretrained weights; wide=1 takes a whole
        standard RNN)."""
        k, g = self.cell_size, self.num_gates
        cols = slice(0, self.input_size)
        if self.cell_input == "slice":
            widths = input_slices(self.input_size, self.wide)
            cols = slice(sum(widths[:j]), sum(widths[: j + 1]))
        if rnn.hidden_size != k or rnn.input_size != cols.stop - cols.start or rnn.num_layers != 1:
            raise ValueError(
                f"cannot load a {type(rnn).__name__}({rnn.input_size}, {rnn.hidden_size}, "
                f"num_layers={rnn.num_layers}) into a cell of {k} units with input {cols.stop - cols.start}"
            )
        rows = slice(j * g * k, (j + 1) * g * k)
        if self.cell_input == "slice":
            self.weight_ih[:, cols] = rnn.weight_ih_l0
        else:
            self.weight_ih[rows] = rnn.weight_ih_l0
        self.weight_hh[j] = rnn.weight_hh_l0.t()
        b_ih = getattr(rnn, "bias_ih_l0", None)
        b_hh = getattr(rnn, "bias_hh_l0", None)
        b_ih = torch.zeros(g * k) if b_ih is None else b_ih
        b_hh = torch.zeros(g * k) if b_hh is None else b_hh
        if self.cell == "gru":
            self.bias[rows] = b_ih + torch.cat([b_hh[: 2 * k], b_hh.new_zeros(k)])
            self.bias_hn[j, 0] = b_hh[2 * k :]
        else:
            self.bias[rows] = b_ih + b_hh


class _BlockDiagonalLSTM(torch.autograd.Function):
    """The LSTM recurrence of all cells over all steps with a hand-written backward pass.

    forward(xproj[T, B, n, 4k], h0[n, B, k], c0[n, B, k], W[n, k, 4k], keep[T, 1, B, 1] or None)
    -> (out[T, B, n, k], h_T, c_T). ``keep`` is 1 at real positions and 0 at padding (state kept,
    output 0). Compared with autograd through the step loop, the backward pass keeps one node for
    the whole sequence and computes the recurrent weight gradient as one batched product over all
    steps, sum_t h_{t-1}^T dgates_t = bmm(H_prev^T, dGates), instead of T small ones.  Input,
    output and the input gradient stay in the layout of the layer's input projection and output
    ([T, B, cells, units]); each step reads and writes them through cell-major views, so no
    sequence-sized transposed copy is made.
    """

    @staticmethod
    def forward(ctx, xproj, h, c, weight, keep):
        T = xproj.size(0)
        acts = xproj.new_empty((T,) + h.shape[:2] + (weight.size(-1),))  # sigm(i), sigm(f), tanh(g), sigm(o)
        h_prev = xproj.new_empty((T,) + h.shape)
        c_prev = xproj.new_empty((T,) + c.shape)
        tanh_c = xproj.new_empty((T,) + c.shape)
        out = xproj.new_empty((T, h.size(1), h.size(0), h.size(2)))
        keep_bool = None if keep is None else keep.bool()
        for t in range(T):
            h_prev[t], c_prev[t] = h, c
            gates = torch.baddbmm(xproj[t].transpose(0, 1), h, weight)
            i, f, g, o = gates.chunk(4, dim=-1)
            a = acts[t]
            ai, af, ag, ao = a.chunk(4, dim=-1)
            torch.sigmoid(i, out=ai), torch.sigmoid(f, out=af), torch.tanh(g, out=ag), torch.sigmoid(o, out=ao)
            c_new = af * c + ai * ag
            torch.tanh(c_new, out=tanh_c[t])
            h_new = ao * tanh_c[t]
            if keep is None:
                out[t] = h_new.transpose(0, 1)
                h, c = h_new, c_new
            else:
                real = keep_bool[t]
                out[t] = (h_new * keep[t]).transpose(0, 1)
                h, c = torch.where(real, h_new, h), torch.where(real, c_new, c)
        ctx.save_for_backward(acts, h_prev, c_prev, tanh_c, weight, keep)
        return out, h, c

    @staticmethod
    def backward(ctx, d_out, d_h, d_c):
        acts, h_prev, c_prev, tanh_c, weight, keep = ctx.saved_tensors
        T, n, B, k = h_prev.shape
        d_gates = acts.new_empty((T, B, n, 4 * k))  # the layout of xproj
        d_h = torch.zeros_like(h_prev[0]) if d_h is None else d_h.clone()
        d_c = torch.zeros_like(c_prev[0]) if d_c is None else d_c.clone()
        w_t = weight.transpose(1, 2)
        for t in range(T - 1, -1, -1):
            dh_new = d_h if d_out is None else d_h + d_out[t].transpose(0, 1)
            dc_new = d_c
            if keep is not None:
                k_t = keep[t]
                dh_new, dc_new = dh_new * k_t, d_c * k_t
                d_h_skip, d_c_skip = d_h * (1 - k_t), d_c * (1 - k_t)
            ai, af, ag, ao = acts[t].chunk(4, dim=-1)
            tc = tanh_c[t]
            dc_tot = dc_new + dh_new * ao * (1 - tc * tc)
            d_gates_t = d_gates[t].transpose(0, 1)  # [n, B, 4k] view
            gi, gf, gg, go = d_gates_t.chunk(4, dim=-1)
            torch.mul(dc_tot * ag, ai * (1 - ai), out=gi)
            torch.mul(dc_tot * c_prev[t], af * (1 - af), out=gf)
            torch.mul(dc_tot * ai, 1 - ag * ag, out=gg)
            torch.mul(dh_new * tc, ao * (1 - ao), out=go)
            d_c = dc_tot * af
            d_h = torch.bmm(d_gates_t, w_t)
            if keep is not None:
                d_h, d_c = d_h + d_h_skip, d_c + d_c_skip
        d_weight = None
        if ctx.needs_input_grad[3]:  # one product over all steps: [n, k, T*B] @ [n, T*B, 4k]
            hs = h_prev.permute(1, 3, 0, 2).reshape(n, k, T * B)
            d_weight = torch.bmm(hs, d_gates.permute(2, 0, 1, 3).reshape(n, T * B, 4 * k))
        return d_gates, d_h, d_c, d_weight, None


def recurrent_parameter_count(hidden_size: int, wide: int, num_layers: int = 1, cell="lstm") -> int:
    """The paper's Table 2 "recurrent parameters size": G * m^2 / n per layer."""
    return num_layers * CELL_GATES[cell] * hidden_size * hidden_size // wide



class BidirectionalLayer(nn.Module):
    """Two layers of the contract, one on the time-reversed input, outputs concatenated
    ([forward; backward], each ``hidden_size // 2`` wide here when built by
    :func:`bidirectional_parallel_cells`). Padded positions stay exact (the mask is reversed with
    the input). The state is ``(forward_state, backward_state)``; it serves encoders, which start
    from zero states."""

    def __init__(self, forward_layer: nn.Module, backward_layer: nn.Module):
        super().__init__()
        self.forward_layer, self.backward_layer = forward_layer, backward_layer
        self.hidden_size = forward_layer.hidden_size + backward_layer.hidden_size

    def forward(self, x: Tensor, state=None, padding_mask: Optional[Tensor] = None):
        fwd_state, bwd_state = (None, None) if state is None else state
        fwd, fwd_state = self.forward_layer(x, fwd_state, padding_mask)
        rev_mask = None if padding_mask is None else padding_mask.flip(0)
        bwd, bwd_state = self.backward_layer(x.flip(0), bwd_state, rev_mask)
        return torch.cat([fwd, bwd.flip(0)], dim=-1), (fwd_state, bwd_state)

    def reorder_state(self, state, new_order: Tensor):
        if state is None:
            return None
        return (self.forward_layer.reorder_state(state[0], new_order),
                self.backward_layer.reorder_state(state[1], new_order))


def bidirectional_parallel_cells(input_size: int, hidden_size: int, wide: int, cell: str = "lstm",
                                 cell_input: str = "full"):
    """A bidirectional parallel-cell layer of ``hidden_size`` outputs: two directions of
    ``hidden_size // 2`` units, each with ``wide`` cells reading the input as ``cell_input`` says."""
    if hidden_size % 2 or (hidden_size // 2) % wide:
        raise ValueError(f"bidirectional parallel cells: hidden size {hidden_size} must split into two "
                         f"directions divisible by wide={wide} (e.g. {2 * wide * max(1, hidden_size // (2 * wide))})")
    half = hidden_size // 2
    return BidirectionalLayer(ParallelCellRNNLayer(input_size, half, wide, cell, cell_input),
                              ParallelCellRNNLayer(input_size, half, wide, cell, cell_input))
