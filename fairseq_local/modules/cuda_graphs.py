"""CUDA graphs of the recurrent loops: the capture side of ``--rnn-impl`` (:mod:`.fast_path`).

A loop over time launches dozens of small kernels per step.  :func:`captured_scan` records the loop
once per padded shape as a CUDA graph (stream capture of the very code the eager path runs, so no
compiler is involved) and replays it with one launch per call:

* **Variants.**  The time and batch axes are padded to buckets (:func:`length_bucket`,
  :func:`batch_bucket`; padded positions are invalid, which the layer contract makes exact), so a
  whole run meets a few dozen shapes.  Each (module, loop, shapes, dtypes, grad mode, train/eval,
  autocast) is one *variant*: a forward graph, and in training a backward graph that computes the
  gradients of the loop's inputs and of the module's parameters.  At most :data:`MAX_LIVE_GRAPHS`
  variants stay alive; the least recently used is released.
* **Memory.**  Graphs without a backward (evaluation, the one-token beam step) share one memory
  pool: they keep nothing between replays but their inputs and outputs, which stay allocated.  A
  training variant keeps its forward's saved activations until its backward replays, while other
  graphs replay in between, so its two graphs share a pool of their own that no other capture can
  take memory from.
* **Inputs and outputs.**  A replay copies the call's tensors into the graph's static inputs
  (skipped when they already are those tensors) and returns copies of the static outputs (the next
  replay overwrites them).  Module parameters and buffers are read in place (an optimizer's in-place
  update is seen); one whose storage was replaced (``model.to``, ``p.data = ...``) makes the variant
  capture again.  Code inside a loop must not keep other tensors across calls (a cache that is
  reallocated would leave a graph reading freed memory): under :func:`is_capturing` it computes them.
* **Nothing silently wrong.**  The first call of every variant replays the new graph and compares it
  with the eager loop on the same inputs (outputs, and in training the gradients of its first
  backward) within the dtype's tolerance; a mismatch, or a capture that fails (an operation that
  synchronises with the host, say), warns once and runs that loop eagerly from then on.  A second
  forward of a training variant before the backward of the first (which would overwrite the saved
  activations the first still needs) runs eagerly instead.
* **No host synchronisation inside a loop.**  While capturing, :func:`is_capturing` is True: layers
  run their step code and skip the checks that read a tensor on the host.  On CPU, where there is no
  CUDA graph, :class:`ReplayBackend` stands in for one in the tests: it runs each "capture" under
  :class:`NoHostSync` (which fails on ``.item()``, ``nonzero`` and every other synchronising
  operation) and "replays" by running the recorded closure into the same static buffers.
"""
import collections
import contextlib
import math
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.utils._pytree import tree_flatten, tree_unflatten
from torch.utils._python_dispatch import TorchDispatchMode

TIME_BUCKETS = (1, 8, 16, 32, 64)
BATCH_BUCKET_MANTISSAS = (4, 6)
MAX_LIVE_GRAPHS = 64


# ------------------------------------------------------------------------------------------------
# buckets
# ------------------------------------------------------------------------------------------------
def length_bucket(length: int) -> int:
    """The padded length of a time axis: the smallest of :data:`TIME_BUCKETS` that holds it, or a
    multiple of the largest."""
    for b in TIME_BUCKETS:
        if length <= b:
            return b
    return -(-length // TIME_BUCKETS[-1]) * TIME_BUCKETS[-1]


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


_PLAN: List[Any] = [None]  # the declared shapes of the run (fairseq_local.data.shape_buckets.ShapePlan) or None


def set_shape_plan(plan) -> None:
    """Declare the run's batch shapes (a ``ShapePlan``: ``shapes`` of (length, batch), lengths
    increasing, and ``beam``), or None: :func:`padded_shape` then pads to them."""
    _PLAN[0] = plan


def shape_plan():
    return _PLAN[0]


def padded_shape(T: int, B: int) -> Tuple[int, int]:
    """The (time, batch) a call of ``T`` steps and ``B`` rows is padded to.  With a plan: the first
    declared shape (lengths increasing) that holds it; ``T = 1`` (a one-token decoding step) pads
    the batch only, to the smallest declared batch size or batch size times the beam that holds it.
    Calls that no declared shape holds, and every call without a plan: :func:`length_bucket` and
    :func:`batch_bucket`."""
    plan = _PLAN[0]
    if plan is not None:
        if T == 1:
            rows = sorted({b * m for _, b in plan.shapes for m in (1, plan.beam)})
            fit = [r for r in rows if r >= B]
            return 1, (fit[0] if fit else batch_bucket(B))
        for length, rows in plan.shapes:
            if length >= T and rows >= B:
                return length, rows
        longer = [length for length, _ in plan.shapes if length >= T]
        return (longer[0] if longer else length_bucket(T)), batch_bucket(B)
    return length_bucket(T), batch_bucket(B)


def pad_dim(t: Optional[Tensor], dim: int, size: int, value=0) -> Optional[Tensor]:
    """``t`` padded with ``value`` at the end of ``dim`` up to ``size`` (unchanged if already)."""
    if t is None or t.size(dim) == size:
        return t
    shape = list(t.shape)
    shape[dim] = size - t.size(dim)
    return torch.cat([t, t.new_full(shape, value)], dim)


def pad_rows(t: Tensor, size: int) -> Tensor:
    """``t`` with copies of its first row appended along dim 0 up to ``size`` rows: padding for a batch
    whose rows attend over their own positions (a row of padding only would attend to nothing)."""
    if t.size(0) == size:
        return t
    return torch.cat([t, t[:1].expand(size - t.size(0), *t.shape[1:])], 0)


class Layout(NamedTuple):
    """Where the batch axis of a loop's inputs is: for each carry and seq entry its dim (``seq``
    entries are ``[T, ...]``, so a dim >= 1; the outputs share the first seq entry's), for each const
    None (not batched) or ``(dim, fill)`` (the value padded rows get).  ``lengths``: for each const,
    the dims of another length that varies from call to call (the source seen by attention), which
    the compiled step treats as dynamic from its first call.  ``pad=False``: the caller already
    padded every axis (a lattice grid)."""

    carry: Optional[Sequence[int]] = None  # default: 0 for every entry
    seq: Optional[Sequence[int]] = None  # default: 1 for every entry
    consts: Optional[Sequence[Optional[Tuple[int, Any]]]] = None  # default: none batched
    pad: bool = True
    lengths: Optional[Sequence[Sequence[int]]] = None  # default: none


# ------------------------------------------------------------------------------------------------
# capture state and host synchronisation
# ------------------------------------------------------------------------------------------------
_STATE = threading.local()


def is_capturing() -> bool:
    return getattr(_STATE, "depth", 0) > 0


@contextlib.contextmanager
def capturing():
    """Marks code that runs under (or exactly as under) a capture: layers take their step paths."""
    _STATE.depth = getattr(_STATE, "depth", 0) + 1
    try:
        yield
    finally:
        _STATE.depth -= 1


class HostSyncError(RuntimeError):
    pass


_aten = torch.ops.aten
SYNC_OPS = {_aten._local_scalar_dense, _aten.nonzero, _aten.is_nonzero, _aten.masked_select, _aten.unique_consecutive,
            _aten._unique2, _aten.unique_dim, _aten.equal, _aten.allclose, _aten.nonzero_static}


class NoHostSync(TorchDispatchMode):
    """Fails on every operation that makes the host wait for the device: reading a value
    (``.item()``, ``bool(t)``, ``if t.any()``), a result whose shape depends on values (``nonzero``,
    boolean indexing, ``unique``), and copies from a device to the host."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket in SYNC_OPS:
            raise HostSyncError(f"{func.overloadpacket.__name__} synchronises with the host")
        if func.overloadpacket in (_aten.index, _aten.index_put, _aten.index_put_) and any(
                isinstance(i, Tensor) and i.dtype in (torch.bool, torch.uint8) for i in (args[1] or ())):
            raise HostSyncError("boolean indexing (a nonzero) synchronises with the host")
        if func.overloadpacket in (_aten._to_copy, _aten.copy_):
            src = args[1] if func.overloadpacket is _aten.copy_ else args[0]
            dst = (args[0].device if func.overloadpacket is _aten.copy_ else kwargs.get("device"))
            if isinstance(src, Tensor) and src.device.type != "cpu" and dst is not None \
                    and torch.device(dst).type == "cpu":
                raise HostSyncError(f"{func.overloadpacket.__name__} copies from {src.device} to the host")
        return func(*args, **kwargs)


# ------------------------------------------------------------------------------------------------
# backends: CUDA graphs, and a stand-in on CPU for the tests
# ------------------------------------------------------------------------------------------------
class CudaBackend:
    """Stream capture and replay with ``torch.cuda.CUDAGraph``."""

    def __init__(self):
        self._shared = None

    def pool(self, private: bool):
        if private:
            return torch.cuda.graph_pool_handle()
        if self._shared is None:
            self._shared = torch.cuda.graph_pool_handle()
        return self._shared

    def warmup(self, fn: Callable):
        """Runs before a capture, on a side stream (as ``torch.cuda.make_graphed_callables`` does)."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
        torch.cuda.current_stream().wait_stream(stream)

    def capture(self, fn: Callable, pool) -> Tuple[Any, Any]:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            out = fn()
        return graph, out

    def replay(self, graph, fn: Callable, static: List[Tensor]):
        graph.replay()


class ReplayBackend:
    """A CUDA graph's contract without CUDA: "capture" runs ``fn`` under :class:`NoHostSync` and
    keeps its outputs as the static outputs; "replay" runs ``fn`` again (from the static inputs) and
    writes its results into those outputs.  The tests use it to check everything around the graphs
    (buffers, padding, gradients, the first-call check, eviction, fallbacks) on CPU."""

    def __init__(self, corrupt: Optional[Callable[[List[Tensor]], None]] = None):
        self.corrupt = corrupt  # tests: alters the replayed outputs, as a faulty graph would

    def pool(self, private: bool):
        return None

    def warmup(self, fn: Callable):
        fn()

    def capture(self, fn: Callable, pool) -> Tuple[Any, Any]:
        with NoHostSync():
            return (fn, torch.is_grad_enabled()), fn()

    def replay(self, graph, fn: Callable, static: List[Tensor]):
        fn, grad = graph  # a training graph recomputes its saved activations, as a CUDA graph's replay does
        with torch.set_grad_enabled(grad), NoHostSync():
            fresh = fn()
        with torch.no_grad():
            for s, f in zip(static, tree_flatten(fresh)[0]):
                if isinstance(s, Tensor):
                    s.copy_(f)
            if self.corrupt is not None:
                self.corrupt(static)


_BACKENDS: Dict[str, Any] = {}


def available(like) -> bool:
    """Whether a call with tensors like ``like`` runs captured: on CUDA, or where a test installed a
    stand-in backend (:func:`use_backend`)."""
    device = getattr(like, "device", None)
    kind = "cuda" if getattr(like, "is_cuda", False) else getattr(device, "type", None)
    return kind == "cuda" or kind in _BACKENDS


def backend(device_type: str):
    if device_type not in _BACKENDS and device_type == "cuda":
        _BACKENDS["cuda"] = CudaBackend()
    return _BACKENDS[device_type]


@contextlib.contextmanager
def use_backend(device_type: str, impl):
    """Capture the loops of ``device_type`` tensors with ``impl`` (tests: :class:`ReplayBackend` on
    CPU)."""
    old = _BACKENDS.get(device_type)
    _BACKENDS[device_type] = impl
    try:
        yield impl
    finally:
        if old is None:
            _BACKENDS.pop(device_type, None)
        else:
            _BACKENDS[device_type] = old
        reset()


# ------------------------------------------------------------------------------------------------
# variants
# ------------------------------------------------------------------------------------------------
_LIVE: "collections.OrderedDict[tuple, _Variant]" = collections.OrderedDict()
_FAILED: Dict[str, str] = {}
_STATS = {"graphs_captured": 0, "capture_s": 0.0, "graph_fallbacks": 0, "graphs_verified": 0}


def stats() -> Dict[str, Any]:
    return {**_STATS, "graphs_live": len(_LIVE)}


def reset():
    _LIVE.clear()
    _FAILED.clear()
    _STATS.update(graphs_captured=0, capture_s=0.0, graph_fallbacks=0, graphs_verified=0)


def _tolerance(dtype, low_precision: bool = False) -> float:
    return 3e-2 if low_precision or dtype in (torch.float16, torch.bfloat16) else 1e-3


def _mismatch(ref: Sequence, got: Sequence, low_precision: bool = False) -> Optional[str]:
    """None if every tensor of ``got`` is within the dtype's tolerance of ``ref`` (relative to the
    largest entry of the tensor; half precision's under autocast, whatever the tensor's dtype), else
    a description of the worst one."""
    for i, (a, b) in enumerate(zip(ref, got)):
        if not isinstance(a, Tensor) or not a.is_floating_point():
            if isinstance(a, Tensor) and not torch.equal(a, b):
                return f"tensor {i} differs"
            continue
        if a.numel() == 0:
            continue
        a, b = a.detach().double(), b.detach().double()
        err = (a - b).abs().max()
        scale = a.abs().max().clamp(min=1e-6)
        if not bool(torch.isfinite(err)) or bool(err > _tolerance(ref[i].dtype, low_precision) * scale):
            return f"tensor {i}: max difference {float(err):.3g} at scale {float(scale):.3g}"
    return None


def _warn_once(name: str, why: str):
    if name not in _FAILED:
        _FAILED[name] = why
        warnings.warn(f"--rnn-impl: the CUDA graph of {name} {why}; running it eagerly", stacklevel=3)


class _Token:
    """Lives as long as the autograd node of one training replay (pending backward)."""


class _Variant:
    """One captured loop: static inputs, the forward graph and (training) the backward graph."""

    def __init__(self, owner: nn.Module, name: str, run: Callable, args: List, spec, train: bool, impl):
        self.name, self.run, self.spec, self.train, self.backend = name, run, spec, train, impl
        self.params = [p for p in owner.parameters() if p.requires_grad] if train else []
        # a graph reads every parameter and buffer at the address it had at capture
        self.watched = list(owner.parameters()) + list(owner.buffers())
        self.watched_ptrs = [t.data_ptr() for t in self.watched]
        self.static_in = [a.detach().clone().requires_grad_(train and a.requires_grad and a.is_floating_point())
                          if isinstance(a, Tensor) else a for a in args]
        self.tensor_idx = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        self.pending: Optional[weakref.ref] = None
        self.generation = 0
        self.check: Optional[Tuple] = None  # the first backward's eager reference
        pool = impl.pool(private=train)

        device = next(a.device for a in args if isinstance(a, Tensor))
        autocast = self.autocast = torch.is_autocast_enabled(device.type)
        dtype = torch.get_autocast_dtype(device.type) if autocast else None

        def forward():
            # under autocast, without its cache of cast weights: a cached cast would be recorded into
            # the graph and replayed after the optimizer has changed the weights
            cast = (torch.autocast(device.type, dtype=dtype, cache_enabled=False) if autocast
                    else contextlib.nullcontext())
            with capturing(), cast:
                out = run(*tree_unflatten(self.static_in, spec))
            self._live_out = out
            return out

        impl.warmup(lambda: self._backward_of(forward()) if train else forward())
        self.fwd_graph, out = impl.capture(forward, pool)
        self.out_spec = tree_flatten(out)[1]
        self.static_out = tree_flatten(out)[0]
        self.fwd = forward
        if train:
            self.diff_out = [i for i, o in enumerate(self.static_out) if isinstance(o, Tensor) and o.requires_grad]
            self.diff_in = [self.static_in[i] for i in self.tensor_idx if self.static_in[i].requires_grad] + self.params
            self.static_grad_out = [torch.zeros_like(self.static_out[i]) for i in self.diff_out]

            def backward():
                live = tree_flatten(self._live_out)[0]
                return self._backward_of(self._live_out, [self.static_grad_out[k] for k in range(len(self.diff_out))],
                                         live)

            self.bwd_graph, grads = impl.capture(backward, pool)
            self.static_grads = list(grads)
            self.bwd = backward

    def _backward_of(self, out, grad_out=None, flat=None):
        flat = tree_flatten(out)[0] if flat is None else flat
        outs = [flat[i] for i, o in enumerate(flat) if isinstance(o, Tensor) and o.requires_grad]
        diff_in = [self.static_in[i] for i in self.tensor_idx if self.static_in[i].requires_grad] + self.params
        if grad_out is None:
            grad_out = [torch.ones_like(o) for o in outs]
        with capturing():
            grads = torch.autograd.grad(outs, diff_in, grad_out, retain_graph=True, allow_unused=True)
        return tuple(torch.zeros_like(x) if g is None else g for g, x in zip(grads, diff_in))

    def stale(self) -> bool:
        """Whether a parameter or buffer of the module has new storage (``model.to``, ``p.data = ...``,
        a buffer reassigned): the graph would read the old address."""
        watched = list(self.owner().parameters()) + list(self.owner().buffers())
        return len(watched) != len(self.watched_ptrs) or any(
            t.data_ptr() != q for t, q in zip(watched, self.watched_ptrs))

    def replay(self, tensors: Sequence[Tensor]) -> List[Tensor]:
        with torch.no_grad():
            for i, t in zip(self.tensor_idx, tensors):
                s = self.static_in[i]
                if s.data_ptr() != t.data_ptr() or s.stride() != t.stride():
                    s.copy_(t)
        self.backend.replay(self.fwd_graph, self.fwd, self.static_out)
        self.generation += 1
        return [o.detach().clone() if isinstance(o, Tensor) else o for o in self.static_out]

    def replay_backward(self, grads: Sequence[Optional[Tensor]]) -> List[Tensor]:
        with torch.no_grad():
            for k, i in enumerate(self.diff_out):
                g = grads[i]
                if g is None:
                    self.static_grad_out[k].zero_()
                else:
                    self.static_grad_out[k].copy_(g)
        self.backend.replay(self.bwd_graph, self.bwd, self.static_grads)
        return [g.clone() for g in self.static_grads]


class _Replay(torch.autograd.Function):
    """A training variant's forward replay, whose backward replays its backward graph."""

    @staticmethod
    def forward(ctx, variant: "_Variant", n_inputs: int, *tensors):
        outs = variant.replay(tensors[:n_inputs])
        ctx.variant, ctx.generation, ctx.n_inputs = variant, variant.generation, n_inputs
        ctx.token = _Token()
        variant.pending = weakref.ref(ctx.token)
        ctx.mark_non_differentiable(*[o for o, s in zip(outs, variant.static_out)
                                      if isinstance(o, Tensor) and not s.requires_grad])
        return tuple(outs)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        v: _Variant = ctx.variant
        if v.generation != ctx.generation:
            raise RuntimeError(f"--rnn-impl: backward through the CUDA graph of {v.name} after it was replayed "
                               "again (a second backward of an old step); use --rnn-impl eager")
        got = v.replay_backward(grads)
        v.pending = None
        if v.check is not None:  # the first backward: compare with eager autograd
            got = _check_backward(v, grads, got)
        it = iter(got)
        diff = {i for i in v.tensor_idx if v.static_in[i].requires_grad}
        per_input = [next(it) if i in diff else None for i in v.tensor_idx]
        per_param = list(it)
        return (None, None, *per_input, *per_param)


def _check_backward(v: _Variant, grads, got):
    eager_out, eager_in = v.check
    v.check = None
    outs = [o for o in eager_out if isinstance(o, Tensor) and o.requires_grad]
    grad_out = [torch.zeros_like(v.static_out[i]) if grads[i] is None else grads[i] for i in v.diff_out]
    ref = torch.autograd.grad(outs, eager_in + v.params, grad_out, allow_unused=True)
    ref = [torch.zeros_like(x) if g is None else g for g, x in zip(ref, eager_in + v.params)]
    bad = _mismatch(ref, got, v.autocast)
    if bad is None:
        return got
    _discard(v)
    _warn_once(v.name, f"gave gradients that differ from the eager loop's ({bad})")
    _STATS["graph_fallbacks"] += 1
    return ref


def _discard(v: _Variant):
    for key, live in list(_LIVE.items()):
        if live is v:
            del _LIVE[key]


def _signature(args) -> tuple:
    return tuple((tuple(a.shape), a.dtype, a.requires_grad, a.device.type) if isinstance(a, Tensor) else a
                 for a in args)


def call(owner: nn.Module, fn: Callable, args: tuple, name: str):
    """``fn(*args)`` (a loop over time; ``args`` a pytree of tensors, None and ints) run as a CUDA
    graph of its shapes: captured on the first call of a variant, replayed after."""
    flat, spec = tree_flatten(args)
    tensors = [a for a in flat if isinstance(a, Tensor)]
    device = tensors[0].device
    if name in _FAILED:
        return fn(*args)
    params = [p for p in owner.parameters() if p.requires_grad]
    train = torch.is_grad_enabled() and (any(t.requires_grad for t in tensors) or bool(params))
    autocast = torch.is_autocast_enabled(device.type) and torch.get_autocast_dtype(device.type)
    key = (id(owner), name, spec, _signature(flat), train, owner.training, autocast)
    variant = _LIVE.get(key)
    if variant is not None and (variant.owner() is not owner or variant.stale()):
        del _LIVE[key]
        variant = None
    if variant is not None and train and variant.pending is not None and variant.pending() is not None:
        return fn(*args)  # its saved activations still wait for a backward
    first = variant is None
    if first:
        start = time.perf_counter()
        try:
            variant = _Variant(owner, name, fn, flat, spec, train, backend(device.type))
        except Exception as e:  # noqa: BLE001  (any capture failure: the eager loop is always there)
            first_line = str(e).splitlines()[0] if str(e) else ""
            _warn_once(name, f"could not be captured ({type(e).__name__}: {first_line})")
            _STATS["graph_fallbacks"] += 1
            return fn(*args)
        variant.owner = weakref.ref(owner)
        _LIVE[key] = variant
        while len(_LIVE) > MAX_LIVE_GRAPHS:
            _LIVE.popitem(last=False)
        _STATS["graphs_captured"] += 1
    else:
        _LIVE.move_to_end(key)
    if train:
        rng = _rng_state(device)
        outs = _Replay.apply(variant, len(tensors), *tensors, *variant.params)
    else:
        rng = _rng_state(device)
        outs = variant.replay(tensors)
    if first:
        outs = _check_forward(variant, fn, flat, spec, outs, rng, device, train)
        _STATS["capture_s"] += time.perf_counter() - start
    return tree_unflatten(list(outs), variant.out_spec)


def _rng_state(device):
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()


def _check_forward(v: _Variant, fn, flat, spec, outs, rng, device, train):
    """The first replay against the eager loop from the same inputs and random state."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        if device.type == "cuda":
            torch.cuda.set_rng_state(rng, device)
        else:
            torch.set_rng_state(rng)
        if train:
            clones = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, Tensor) else a for a in flat]
            with capturing():
                ref = tree_flatten(fn(*tree_unflatten(clones, spec)))[0]
            eager_in = [c for c in clones if isinstance(c, Tensor) and c.requires_grad]
        else:
            with torch.no_grad(), capturing():
                ref = tree_flatten(fn(*tree_unflatten(list(flat), spec)))[0]
    bad = _mismatch(ref, outs, v.autocast)
    if bad is None:
        _STATS["graphs_verified"] += 1
        if train:
            v.check = (ref, eager_in)
        return outs
    _discard(v)
    v.pending = None
    _warn_once(v.name, f"gave outputs that differ from the eager loop's ({bad})")
    _STATS["graph_fallbacks"] += 1
    return tree_flatten(fn(*tree_unflatten(list(flat), spec)))[0]


# ------------------------------------------------------------------------------------------------
# the entry point of fast_path.scan
# ------------------------------------------------------------------------------------------------
def captured_scan(owner: nn.Module, step: Callable, loop: Callable, carry: Sequence, seq: Sequence[Tensor],
                  valid: Optional[Tensor], consts: Sequence, layout: Layout, name: str):
    """``loop(step, owner, carry, seq, valid, consts)`` captured, on inputs padded to the time and
    batch buckets (see the module doc); returns exactly what the unpadded call returns."""
    carry_dims = list(layout.carry or [0] * len(carry))
    seq_dims = list(layout.seq or [1] * len(seq))
    T, B = seq[0].size(0), seq[0].size(seq_dims[0])
    Tp, Bp = padded_shape(T, B) if layout.pad else (T, B)
    if layout.pad and valid is None:  # one variant whether or not this call needed padding
        valid = torch.ones(T, B, dtype=torch.bool, device=seq[0].device)
    if (Tp, Bp) != (T, B):
        valid = pad_dim(pad_dim(valid, 0, Tp, False), 1, Bp, False)
        carry = tuple(pad_dim(c, d, Bp) for c, d in zip(carry, carry_dims))
        seq = tuple(pad_dim(pad_dim(s, 0, Tp), d, Bp) for s, d in zip(seq, seq_dims))
        consts = tuple(c if bd is None else pad_dim(c, bd[0], Bp, bd[1])
                       for c, bd in zip(consts, layout.consts or [None] * len(consts)))
    def run(carry, seq, valid, consts):
        return loop(step, owner, carry, seq, valid, consts)

    outs, carry = call(owner, run, (tuple(carry), tuple(seq), valid, tuple(consts)), name)
    if (Tp, Bp) == (T, B):
        return outs, carry
    outs = tuple(o[:T].narrow(seq_dims[0], 0, B) for o in outs)
    return outs, tuple(None if c is None else c.narrow(d, 0, B) for c, d in zip(carry, carry_dims))


__all__ = ["TIME_BUCKETS", "MAX_LIVE_GRAPHS", "Layout", "length_bucket", "batch_bucket", "pad_dim", "pad_rows", "is_capturing",
           "capturing", "NoHostSync", "HostSyncError", "CudaBackend", "ReplayBackend", "available", "use_backend",
           "captured_scan", "call", "stats", "reset", "set_shape_plan", "shape_plan", "padded_shape"]
