"""The fast execution path of the recurrent layers and decoders: ``--rnn-impl auto|eager|compiled``.

**Why.**  A recurrent layer advances one time step at a time, and each step is a handful of small
operations (a matrix product, a few element-wise gates, a masked state update).  Run eagerly on a
GPU, every one of them is its own kernel launch, so a step costs the launch latency of dozens of
kernels, not their arithmetic, and the GPU mostly waits.  Compiling the loop over time with
``torch.compile`` fuses each step's element-wise work into a few kernels, and on CUDA
``mode="reduce-overhead"`` records the whole unrolled loop (forward, and backward in training) as
one CUDA graph that is replayed with a single launch.

**One definition of each recurrence.**  A layer's time loop is one method, its *scan*, with the
signature ``scan(self, carry, seq, valid, consts) -> (outputs, carry)``:

* ``carry``: the recurrent state, a tuple of batch-first tensors (``None`` entries allowed);
* ``seq``: the per-step inputs, a tuple of ``[T, B, ...]`` tensors;
* ``valid``: ``[T, B]`` bool, False at padded positions (whose steps must leave the state unchanged
  and whose outputs are ignored: the layer contract of
  :mod:`fairseq_local.modules.recurrent_seq2seq`), or None (every position is real);
* ``consts``: everything else (weights, encoder outputs), passed unchanged;
* ``outputs``: a tuple of ``[T, B, ...]`` tensors.

The eager path calls the scan directly.  The compiled path (:func:`run_scan`) compiles *that same
method* (the function object of the layer's class, with the layer as its first argument) and calls
it on padded inputs, so the two paths cannot drift apart: there is no second copy of any equation.
The decoders' step loops (:class:`~fairseq_local.modules.recurrent_seq2seq.RecurrentAttentionDecoder`'s
input-feeding loop, which beam search runs once per generated token, and
:class:`~fairseq_local.modules.recurrent_lm_decoder.RecurrentLMDecoder`'s layer stack) are scans too;
inside them the layers run their eager code, which is traced into the decoder's graph.

**A bounded number of compiled variants.**  Compiling is slow (seconds on CPU, tens of seconds for
a paper-size layer on a GPU), and a graph compiled with ``dynamic=False`` is specialised to its
shapes.  So the time and batch axes are padded up to a few bucket sizes before the call, and the
padded positions are marked invalid, which the contract already makes exact (the state is left
unchanged; the padded outputs are sliced away):

* time: the smallest of :data:`TIME_BUCKETS` (1, 8, 16, 32, 64) that holds T; longer sequences run
  as consecutive chunks of 64 steps, the state carried from one chunk to the next.  T = 1, the
  incremental decoding step, is its own bucket (no padding).
* batch: the smallest ``m * 2^e >= B`` with m in (4, 6) (4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128,
  ...): two buckets per octave, at most 50 % padding (:func:`batch_bucket`).  Padding the batch
  costs little on a launch-bound GPU; padding time costs sequential steps, hence finer time buckets.
* other lengths a scan depends on (the source length seen by a decoder's attention) are padded
  with :func:`length_bucket` by the caller (the attention masks the padded source positions).
* the lattice GRU's level loop (:class:`~fairseq_local.modules.lattice_gru.LatticeGRU`) advances
  one topological level per step: its levels are padded like time and each level's edges and nodes
  to the batch bucket of the widest level (:func:`~fairseq_local.modules.lattice_gru.pad_levels`).

Every distinct (function, shapes, dtype, device, grad mode, train/eval, autocast) combination is
one *variant*, recorded in :func:`variants` (so tests and ``scripts/bench.py`` can count them and
the time they took to compile).  Dynamo's per-function recompile limit is raised to
:data:`RECOMPILE_LIMIT` so that the bucketed variants never fall back to eager silently.

**The switch.**  Every layer and decoder that has a scan mixes in :class:`FastPathMixin`, whose
``rnn_impl`` attribute (a plain attribute: no parameter or buffer, so checkpoints are the same under
either implementation) is set for a whole model by :func:`set_rnn_impl` from the model option
``--rnn-impl`` (:class:`RecurrentImplConfig`, shared by every recurrent model's config):

* ``eager``: the Python loop, always;
* ``compiled``: the compiled scans on any device (``mode="reduce-overhead"``, i.e. CUDA graphs, on
  CUDA; inductor's default mode on CPU); a compilation failure is an error;
* ``auto`` (default): compiled on CUDA, eager on CPU (where the loop is compute-bound and
  compiling would only add start-up time).  A compilation failure warns once and falls back to
  eager.

Inside a scan that is being compiled, layers always run their eager code (it is what gets traced),
so a compiled decoder step contains its layers' steps.  With dropout in training, compiled code
draws its random masks from inductor's generator, not eager's: the same distribution, not the same
masks.  Never ``max-autotune``: its benchmarking multiplies the compile time for kernels this small.
"""
import dataclasses
import math
import time
import warnings
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from torch import Tensor

RNN_IMPLS = ("auto", "eager", "compiled")
RNN_IMPL_CHOICES = ChoiceEnum(list(RNN_IMPLS))
TIME_BUCKETS = (1, 8, 16, 32, 64)
RECOMPILE_LIMIT = 256

RNN_IMPL_HELP = ("execution of the recurrent loops: 'eager' (a Python loop over time), 'compiled' "
                 "(torch.compile of the same loop, time and batch padded to a few bucket sizes; CUDA graphs "
                 "on GPU) or 'auto' (compiled on CUDA, eager on CPU); checkpoints and outputs are the same "
                 "under each")


@dataclasses.dataclass
class RecurrentImplConfig(FairseqDataclass):
    """The option every recurrent model's config inherits (``--rnn-impl``)."""

    rnn_impl: RNN_IMPL_CHOICES = dataclasses.field(default="auto", metadata={"help": RNN_IMPL_HELP})


def check_rnn_impl(impl) -> str:
    impl = "auto" if impl is None else str(impl)
    if impl not in RNN_IMPLS:
        raise ValueError(f"--rnn-impl must be one of {', '.join(RNN_IMPLS)} (got {impl!r})")
    return impl


class FastPathMixin:
    """Mixed into modules with a scan: ``rnn_impl`` selects the implementation (see module doc)."""

    rnn_impl: str = "auto"

    def use_compiled(self, like: Tensor) -> bool:
        """Whether this call takes the compiled path (``like``: a tensor on the call's device)."""
        return use_compiled(self.rnn_impl, like)


def set_rnn_impl(module: nn.Module, impl) -> nn.Module:
    """Set ``--rnn-impl`` on every :class:`FastPathMixin` module inside ``module``; returns it."""
    impl = check_rnn_impl(impl)
    for m in module.modules():
        if isinstance(m, FastPathMixin):
            m.rnn_impl = impl
    return module


def is_compiling() -> bool:
    return torch.compiler.is_compiling()


def use_compiled(impl: str, like: Tensor) -> bool:
    """``compiled`` anywhere, ``auto`` on CUDA; never while already being traced by a compiled scan."""
    if impl == "eager" or is_compiling():
        return False
    if impl == "compiled":
        return True
    return like.is_cuda


def active_mask(mask: Optional[Tensor]) -> Optional[Tensor]:
    """``mask`` unless it is None or (eagerly) has no True entry.  While compiling the mask is kept
    as it is: testing its content would be a data-dependent branch, and applying an all-False mask
    is exact."""
    if mask is None:
        return None
    if is_compiling():
        return mask
    return mask if bool(mask.any()) else None


# ------------------------------------------------------------------------------------------------
# buckets
# ------------------------------------------------------------------------------------------------
def time_bucket(length: int) -> int:
    """The padded length of one chunk of at most ``TIME_BUCKETS[-1]`` steps."""
    for b in TIME_BUCKETS:
        if length <= b:
            return b
    raise ValueError(f"a chunk has at most {TIME_BUCKETS[-1]} steps (got {length})")


def length_bucket(length: int) -> int:
    """A padded length for a whole axis (e.g. the source seen by attention): a time bucket, or a
    multiple of the largest one."""
    if length <= TIME_BUCKETS[-1]:
        return time_bucket(max(1, length))
    return -(-length // TIME_BUCKETS[-1]) * TIME_BUCKETS[-1]


BATCH_BUCKET_MANTISSAS = (4, 6)


def batch_bucket(size: int) -> int:
    """The smallest ``m * 2^e >= size`` with m in ``BATCH_BUCKET_MANTISSAS``, e >= 0."""
    if size <= BATCH_BUCKET_MANTISSAS[0]:
        return BATCH_BUCKET_MANTISSAS[0]
    e = max(0, int(math.floor(math.log2(size))) - 2)
    while True:
        for m in BATCH_BUCKET_MANTISSAS:
            if m << e >= size:
                return m << e
        e += 1


def time_chunks(length: int) -> List[Tuple[int, int]]:
    step = TIME_BUCKETS[-1]
    return [(s, min(length, s + step)) for s in range(0, length, step)]


def pad_dim(t: Optional[Tensor], dim: int, size: int, value=0) -> Optional[Tensor]:
    """``t`` padded with ``value`` at the end of ``dim`` up to ``size`` (unchanged if already)."""
    if t is None or t.size(dim) == size:
        return t
    shape = list(t.shape)
    shape[dim] = size - t.size(dim)
    return torch.cat([t, t.new_full(shape, value)], dim)


# ------------------------------------------------------------------------------------------------
# compile cache and variants
# ------------------------------------------------------------------------------------------------
_COMPILED: Dict[Tuple[Callable, Optional[str]], Callable] = {}
_VARIANTS: Dict[tuple, Dict[str, Any]] = {}
_FAILED: Dict[Callable, str] = {}


def compile_mode(device: torch.device) -> Optional[str]:
    """CUDA graphs on CUDA; inductor's default elsewhere; never max-autotune."""
    return "reduce-overhead" if device.type == "cuda" else None


def _raise_recompile_limit():
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name) and getattr(cfg, name) < RECOMPILE_LIMIT:
            setattr(cfg, name, RECOMPILE_LIMIT)
            break
    if hasattr(cfg, "accumulated_recompile_limit"):
        cfg.accumulated_recompile_limit = max(cfg.accumulated_recompile_limit, 4 * RECOMPILE_LIMIT)
    elif hasattr(cfg, "accumulated_cache_size_limit"):
        cfg.accumulated_cache_size_limit = max(cfg.accumulated_cache_size_limit, 4 * RECOMPILE_LIMIT)


def compiled(fn: Callable, device: torch.device) -> Callable:
    """``torch.compile(fn, dynamic=False)`` in the device's mode, made once per (fn, mode)."""
    mode = compile_mode(device)
    key = (fn, mode)
    if key not in _COMPILED:
        _raise_recompile_limit()
        _COMPILED[key] = torch.compile(fn, dynamic=False, fullgraph=True, mode=mode)
    return _COMPILED[key]


def _signature(args) -> tuple:
    leaves, _ = torch.utils._pytree.tree_flatten(args)
    return tuple((tuple(t.shape), t.dtype) if isinstance(t, Tensor) else type(t).__name__ for t in leaves)


def variants() -> Dict[tuple, Dict[str, Any]]:
    """Every compiled variant called so far: key -> {"name", "calls", "first_call_s"} (the first
    call's wall time includes compiling it)."""
    return _VARIANTS


def reset():
    """Forget every compiled function and variant (tests; also resets dynamo's caches)."""
    _COMPILED.clear()
    _VARIANTS.clear()
    _FAILED.clear()
    torch._dynamo.reset()


def call_compiled(owner: nn.Module, method: str, impl: str, *args):
    """``type(owner).method(owner, *args)`` compiled (see module doc); falls back to eager with a
    warning under ``auto`` if compiling fails."""
    fn = getattr(type(owner), method)
    device = next((t.device for t in torch.utils._pytree.tree_leaves(args) if isinstance(t, Tensor)),
                  torch.device("cpu"))
    if fn in _FAILED:
        return fn(owner, *args)
    key = (fn.__qualname__, _signature(args), device.type, torch.is_grad_enabled(), owner.training,
           torch.is_autocast_enabled(device.type) and torch.get_autocast_dtype(device.type))
    record = _VARIANTS.get(key)
    start = time.perf_counter()
    try:
        # allow_rnn: dynamo refuses to even read the weights of an nn.LSTM/GRU/RNN (TorchRNNLayer's)
        patch = {"allow_rnn": True} if hasattr(torch._dynamo.config, "allow_rnn") else {}
        with torch._dynamo.config.patch(**patch):
            out = compiled(fn, device)(owner, *args)
    except Exception as e:  # noqa: BLE001  (any compiler failure: eager is always available)
        if impl == "compiled":
            raise RuntimeError(f"--rnn-impl compiled: torch.compile of {fn.__qualname__} failed: "
                               f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
        _FAILED[fn] = f"{type(e).__name__}: {e}"
        warnings.warn(f"--rnn-impl auto: torch.compile of {fn.__qualname__} failed ({type(e).__name__}); "
                      "running it eagerly")
        return fn(owner, *args)
    if record is None:
        _VARIANTS[key] = {"name": fn.__qualname__, "calls": 1, "first_call_s": time.perf_counter() - start}
    else:
        record["calls"] += 1
    if compile_mode(device) == "reduce-overhead":
        # a CUDA graph's outputs live in its memory pool and are overwritten by its next replay
        out = torch.utils._pytree.tree_map(lambda t: t.clone() if isinstance(t, Tensor) else t, out)
    return out


def run_scan(owner: nn.Module, method: str, carry: Sequence[Optional[Tensor]], seq: Sequence[Tensor],
             valid: Optional[Tensor], consts: Sequence[Any] = (), batch_dims: Optional[Sequence] = None,
             impl: Optional[str] = None):
    """Run the scan ``owner.method(carry, seq, valid, consts)`` compiled, on inputs padded to the
    time and batch buckets (see the module doc), in chunks of at most ``TIME_BUCKETS[-1]`` steps.

    ``batch_dims``: for each entry of ``consts``, None (not batched) or ``(dim, fill)``: the entry is
    a tensor whose batch axis ``dim`` is padded with ``fill``.  Returns exactly what the eager call
    returns: the outputs ``[T, B, ...]`` and the final carry, unpadded."""
    impl = impl or getattr(owner, "rnn_impl", "compiled")
    T, B = seq[0].shape[:2]
    if T == 0:
        return getattr(owner, method)(tuple(carry), tuple(seq), valid, tuple(consts))
    Bp = batch_bucket(B)
    device = seq[0].device
    if valid is None:
        valid = torch.ones(T, B, dtype=torch.bool, device=device)
    carry = tuple(pad_dim(c, 0, Bp) for c in carry)
    batch_dims = batch_dims or [None] * len(consts)
    consts = tuple(c if bd is None else pad_dim(c, bd[0], Bp, bd[1]) for c, bd in zip(consts, batch_dims))
    chunks = []
    for start, stop in time_chunks(T):
        Tp = time_bucket(stop - start)
        s = tuple(pad_dim(pad_dim(x[start:stop], 0, Tp), 1, Bp) for x in seq)
        v = pad_dim(pad_dim(valid[start:stop], 0, Tp, False), 1, Bp, False)
        outs, carry = call_compiled(owner, method, impl, tuple(carry), s, v, consts)
        chunks.append([o[: stop - start] for o in outs])
    outs = tuple((torch.cat(parts) if len(parts) > 1 else parts[0])[:, :B] for parts in zip(*chunks))
    return outs, tuple(None if c is None else c[:B] for c in carry)


def flatten_states(states: Iterable) -> Tuple[List[Optional[Tensor]], List[int]]:
    """Layer states (tensor or tuple of tensors each) -> one flat list and the tuple sizes (0: a
    bare tensor), for a scan's carry."""
    flat, kinds = [], []
    for s in states:
        if isinstance(s, tuple):
            kinds.append(len(s))
            flat.extend(s)
        else:
            kinds.append(0)
            flat.append(s)
    return flat, kinds


def unflatten_states(flat: Sequence, kinds: Sequence[int]) -> List:
    out, i = [], 0
    for k in kinds:
        if k == 0:
            out.append(flat[i])
            i += 1
        else:
            out.append(tuple(flat[i:i + k]))
            i += k
    return out


__all__ = ["RNN_IMPLS", "TIME_BUCKETS", "RecurrentImplConfig", "FastPathMixin", "set_rnn_impl", "use_compiled",
           "active_mask", "time_bucket", "length_bucket", "batch_bucket", "run_scan", "variants", "reset",
           "flatten_states", "unflatten_states", "check_rnn_impl"]
