"""torch.nn.LSTM / GRU / RNN wrapped to the fairseq_local recurrent-layer contract.

Contract (see :mod:`fairseq_local.modules.recurrent_seq2seq`): ``forward(x[T,B,I], state,
padding_mask[T,B]) -> (out[T,B,H], state)``; padded positions leave the state unchanged and output
zeros.  Full sequences without padding go straight through the fused ``nn.LSTM``/``nn.GRU``
kernel (cuDNN on GPU, MKL/oneDNN on CPU; in float32 where this CPU lacks its bf16/fp16 kernel:
:mod:`fairseq_local.modules.rnn_precision`).  When every column's real tokens form one contiguous
run (left padding, right padding, or a flipped left-padded source in a backward encoder) the
columns are shifted to start at 0, packed with ``pack_padded_sequence`` and shifted back, which
is exact.  Any other mask runs a masked loop of torch's own cell steps (:meth:`TorchRNNLayer._step`),
eager, compiled or captured (``--rnn-impl``, :mod:`fairseq_local.modules.fast_path`); inside a
compiled or captured decoder step the layer always runs that loop.  State is batch-first:
LSTM ``(h[B,H], c[B,H])``, GRU/RNN ``h[B,H]``.
"""
from typing import Optional, Tuple, Union

import torch
import torch.nn as nn
from torch import Tensor

from fairseq_local.modules import rnn_precision
from fairseq_local.modules.amp import autocast_dtype
from fairseq_local.modules.fast_path import FastPathMixin, in_trace, scan

CELL_TYPES = ("lstm", "gru", "rnn")
State = Union[Tensor, Tuple[Tensor, Tensor]]


def check_cell_type(cell: str, option: str = "--cell"):
    if cell not in CELL_TYPES:
        raise ValueError(f"{option} must be one of {', '.join(CELL_TYPES)} (got {cell!r})")


class TorchRNNLayer(FastPathMixin, nn.Module):
    """One unidirectional layer of a standard LSTM, GRU or tanh RNN."""

    def __init__(self, cell: str, input_size: int, hidden_size: int, init_scale: float = 0.1):
        super().__init__()
        check_cell_type(cell)
        self.cell, self.input_size, self.hidden_size = cell, input_size, hidden_size
        self.rnn = rnn_precision.CLASSES[cell](input_size, hidden_size)  # torch's, with the fp32 fallback
        for p in self.rnn.parameters():
            nn.init.uniform_(p, -init_scale, init_scale)

    # ---- state helpers -------------------------------------------------------------------
    def _to_torch(self, state: Optional[State]):
        if state is None:
            return None
        if self.cell == "lstm":
            return (state[0].unsqueeze(0).contiguous(), state[1].unsqueeze(0).contiguous())
        return state.unsqueeze(0).contiguous()

    def _from_torch(self, hx) -> State:
        if self.cell == "lstm":
            return (hx[0].squeeze(0), hx[1].squeeze(0))
        return hx.squeeze(0)

    def zero_state(self, x: Tensor) -> State:
        h = x.new_zeros(x.size(1), self.hidden_size)
        return (h, h.clone()) if self.cell == "lstm" else h

    def state_from_hidden(self, h0: Tensor) -> State:
        return (h0, torch.zeros_like(h0)) if self.cell == "lstm" else h0

    def reorder_state(self, state: State, new_order: Tensor) -> State:
        if isinstance(state, tuple):
            return tuple(s.index_select(0, new_order) for s in state)
        return state.index_select(0, new_order)

    # ---- forward -------------------------------------------------------------------------
    def forward(self, x: Tensor, state: Optional[State] = None, padding_mask: Optional[Tensor] = None):
        if in_trace():  # inside a compiled or captured decoder step: the cell steps, never cuDNN's module
            return self._stepped(x, state, None if padding_mask is None else ~padding_mask)
        if padding_mask is None or not bool(padding_mask.any()):
            out, hn = self.rnn(x, self._to_torch(state))
            return out, self._from_torch(hn)
        T, B, _ = x.shape
        valid = ~padding_mask
        lengths = valid.sum(0)
        steps = torch.arange(T, device=x.device).unsqueeze(1)
        start = torch.where(valid, steps, T).min(0).values  # first real position per column
        contiguous = bool(((steps >= start) & (steps < start + lengths)).eq(valid).all())
        if contiguous and bool((lengths > 0).all()):
            return self._packed(x, state, valid, start, lengths)
        return self._stepped(x, state, valid)

    def _packed(self, x, state, valid, start, lengths):
        T, B, C = x.shape
        steps = torch.arange(T, device=x.device).unsqueeze(1)
        idx = (steps + start).clamp(max=T - 1)  # shift each column left by its start
        xs = x.gather(0, idx.unsqueeze(-1).expand(T, B, C))
        packed = nn.utils.rnn.pack_padded_sequence(xs, lengths.cpu(), enforce_sorted=False)
        out, hn = self.rnn(packed, self._to_torch(state))
        out, _ = nn.utils.rnn.pad_packed_sequence(out, total_length=T)
        back = (steps - start).clamp(min=0)  # shift back to the original positions
        out = out.gather(0, back.unsqueeze(-1).expand(T, B, self.hidden_size))
        out = out * valid.unsqueeze(-1).to(out.dtype)
        return out, self._from_torch(hn)

    def _stepped(self, x, state, valid):
        """The masked step loop (any mask), eager, compiled or captured (``--rnn-impl``).  Under
        autocast every operand is cast to its dtype first (``torch.lstm_cell`` & co. are not autocast
        operations on every device)."""
        state = state if state is not None else self.zero_state(x)
        carry = state if isinstance(state, tuple) else (state,)
        rnn = self.rnn
        dtype = autocast_dtype(x) or x.dtype
        weights = tuple(w.to(dtype) for w in (rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0))
        (out,), carry = scan(self, "_step", tuple(c.to(dtype) for c in carry), (x.to(dtype),), valid, weights)
        return out, (carry if self.cell == "lstm" else carry[0])

    def _step(self, carry, x, valid: Optional[Tensor], consts):
        """The layer's step (:mod:`.fast_path`): torch's own cell (``torch.lstm_cell`` /
        ``gru_cell`` / ``rnn_tanh_cell``, the equations of ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN``);
        carry ``(h[B, H], c[B, H])`` or ``(h,)``, x ``(x[B, I],)``, consts the module's ``(W_ih,
        W_hh, b_ih, b_hh)``; padded positions keep the state and output zeros."""
        (x,) = x
        if self.cell == "lstm":
            new = torch.lstm_cell(x, carry, *consts)
        elif self.cell == "gru":
            new = (torch.gru_cell(x, carry[0], *consts),)
        else:
            new = (torch.rnn_tanh_cell(x, carry[0], *consts),)
        if valid is None:
            return (new[0],), tuple(new)
        keep = valid.unsqueeze(-1)
        return (new[0] * keep.to(new[0].dtype),), tuple(torch.where(keep, n, c) for n, c in zip(new, carry))
