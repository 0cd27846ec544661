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

Two paths, one cell definition and one set of weights:

* **the library's fused kernel** (``torch.lstm`` / ``torch.gru`` / ``torch.rnn_tanh``: oneDNN on CPU,
  cuDNN on GPU), once per cell over the whole sequence, where no per-step input intervenes: eager
  calls of more than one step on the layer's own input (language models, encoders, decoders without
  input feeding), unpadded or with each column's real positions one contiguous run (left- or
  right-padded: packed, so padded positions keep the state), wide <= ``MAX_FUSED_CELLS``;
* **the step** (:meth:`ParallelCellRNNLayer._step`) through ``fast_path.scan`` otherwise: an
  input-feeding decoder's steps (``input_proj``), the compiled or captured paths (``--rnn-impl``),
  other masks, wider layers.  Its input projection of all cells for all steps is one product before
  the loop (for ``"slice"`` one batched product over the cells), and each step's block-diagonal
  recurrence is one ``torch.baddbmm`` over the cell dimension (weights ``[n, k, G*k]``).

Both give the same outputs, final states and gradients (tested in float64).

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
at every step at test time, the incoming one included (its output slice is 0 and its recurrence
sees 0); ``layer.mask_cells([])`` restores the layer. Other cells' outputs are unaffected by
construction.
"""
from typing import Iterable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq_local.modules.amp import autocast_inputs
from fairseq_local.modules.fast_path import FastPathMixin, Layout, active_mask, in_trace, scan

State = Tuple[Tensor, ...]

CELL_GATES = {"lstm": 4, "gru": 3, "rnn": 1}
FUSED_KERNELS = {"lstm": torch.lstm, "gru": torch.gru, "rnn": torch.rnn_tanh}  # torch.nn.LSTM / GRU / RNN's
MAX_FUSED_CELLS = 5  # wider layers run the step, whose recurrence is one product over all cells
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
        if self.masked_cells:  # a masked cell's incoming hidden state is zero too
            state = (state[0] * self._cell_keep(state[0]).repeat_interleave(self.cell_size),) + tuple(state[1:])
        runs = self.fused_runs(x, padding_mask, input_proj)
        if runs is not None:
            return self._fused(x, state, runs)
        return self._stepped(x, state, padding_mask, input_proj)

    def _cell_keep(self, like: Tensor) -> Tensor:
        """``[n]``: 0 for the masked cells, 1 for the others."""
        keep = like.new_ones(self.wide)
        keep[list(self.masked_cells)] = 0
        return keep

    def fused_runs(self, x: Tensor, padding_mask: Optional[Tensor], input_proj: Optional[Tensor]):
        """Whether this call runs the fused kernel (module doc): None for the step; else ``()`` when
        every position is real, or each column's one run of real positions, ``(start[B], length[B])``
        and the lengths on the host."""
        if (input_proj is not None or x.size(0) < 2 or self.wide > MAX_FUSED_CELLS or in_trace()
                or self.execution(x).fast):
            return None
        mask = active_mask(padding_mask)
        if mask is None:
            return ()
        T = x.size(0)
        valid = ~mask
        steps = torch.arange(T, device=x.device).unsqueeze(1)
        length = valid.sum(0)
        start = torch.where(valid, steps, T).min(0).values.masked_fill(length == 0, 0)
        one_run = ((steps >= start) & (steps < start + length)).eq(valid).all()
        host = torch.cat([one_run.view(1).to(length.dtype), length]).cpu()  # one transfer for both
        return (start, length, host[1:]) if bool(host[0]) else None

    def _input_columns(self, j: int) -> slice:
        """The input units cell j reads."""
        if self.cell_input == "full":
            return slice(0, self.input_size)
        widths = input_slices(self.input_size, self.wide)
        return slice(sum(widths[:j]), sum(widths[: j + 1]))

    def _cell_weights(self, j: int, dtype: torch.dtype):
        """Cell j's weights as torch's RNNs take them: ``[W_ih, W_hh, b_ih, b_hh]``; a masked cell's
        recurrent weights are zero (its recurrence sees h = 0)."""
        k, g = self.cell_size, self.num_gates
        rows = slice(j * g * k, (j + 1) * g * k)
        w_ih = self.weight_ih[rows] if self.cell_input == "full" else self.weight_ih[:, self._input_columns(j)]
        w_hh = self.weight_hh[j].t()
        if j in self.masked_cells:
            w_hh = torch.zeros_like(w_hh)
        b_ih = self.bias[rows]
        b_hh = b_ih.new_zeros(g * k) if self.cell != "gru" else torch.cat([b_ih.new_zeros(2 * k), self.bias_hn[j, 0]])
        return [w.to(dtype).contiguous() for w in (w_ih, w_hh, b_ih, b_hh)]

    def _fused(self, x: Tensor, state: State, runs) -> Tuple[Tensor, State]:
        """The fused kernel once per cell over the whole sequence (``runs``: :meth:`fused_runs`);
        a left- or right-padded batch is shifted so each column starts at 0, packed, and shifted back."""
        T, B, _ = x.shape
        x, *state = autocast_inputs(x, *state)
        n, k = self.wide, self.cell_size
        if runs:
            start, lengths, host_lengths = runs
            steps = torch.arange(T, device=x.device).unsqueeze(1)
            shifted = x.gather(0, (steps + start).clamp(max=T - 1).unsqueeze(-1).expand_as(x))
            packed = nn.utils.rnn.pack_padded_sequence(shifted, host_lengths.clamp(min=1), enforce_sorted=False)
            seq, order = packed.data, packed.sorted_indices
        else:
            seq, order = x, None
        kernel, outs, finals = FUSED_KERNELS[self.cell], [], []
        # a loop over cells: n <= MAX_FUSED_CELLS kernel calls, each over the whole sequence
        for j in range(n):
            hx = [s[:, j * k:(j + 1) * k] for s in state]
            hx = [(h if order is None else h.index_select(0, order)).unsqueeze(0).contiguous() for h in hx]
            inp = seq[..., self._input_columns(j)]
            args = (inp,) if order is None else (inp, packed.batch_sizes)
            hx = tuple(hx) if self.cell == "lstm" else hx[0]
            flags = (True, 1, 0.0, self.training, False) + ((False,) if order is None else ())
            out, *final = kernel(*args, hx, self._cell_weights(j, x.dtype), *flags)
            outs.append(out)
            finals.append([f[0] for f in final])
        out = torch.cat(outs, -1)
        final = [torch.cat(parts, -1) for parts in zip(*finals)]
        if order is not None:
            out, _ = nn.utils.rnn.pad_packed_sequence(packed._replace(data=out), total_length=T)
            out = out.gather(0, (steps - start).clamp(min=0).unsqueeze(-1).expand(T, B, self.hidden_size))
            valid = (steps >= start) & (steps < start + lengths)
            out = out * valid.unsqueeze(-1).to(out.dtype)
            final = [torch.where((lengths > 0).unsqueeze(-1), f.index_select(0, packed.unsorted_indices), s)
                     for f, s in zip(final, state)]
        if self.masked_cells:
            keep = self._cell_keep(out).repeat_interleave(k)
            out, final[0] = out * keep, final[0] * keep
        return out, tuple(final)

    def _projected(self, x: Tensor, input_proj: Optional[Tensor]) -> Tensor:
        """The input projection of every cell at every step, ``[T, B, n, G*k]``."""
        xproj = input_proj if input_proj is not None else self._input_projection(x)
        return xproj.view(x.size(0), x.size(1), self.wide, self.num_gates * self.cell_size)

    def _stepped(self, x: Tensor, state: State, padding_mask: Optional[Tensor],
                 input_proj: Optional[Tensor]) -> Tuple[Tensor, State]:
        """The step loop (:meth:`_step`) through ``fast_path.scan``: eager, compiled or captured."""
        T, B, _ = x.shape
        keep_cells = self._cell_keep(x).view(self.wide, 1, 1) if self.masked_cells else None
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

    # ------------------------------------------------------------------ conversion
    @torch.no_grad()
    def load_cell_from_torch(self, j: int, rnn: nn.Module):
        """Copy a one-layer unidirectional ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` (tanh) of
        ``cell_size`` units into cell j (e.g. to import pretrained weights; wide=1 takes a whole
        standard RNN)."""
        k, g = self.cell_size, self.num_gates
        cols = self._input_columns(j)
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
