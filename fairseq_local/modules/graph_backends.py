"""How a loop is captured and replayed (:mod:`.cuda_graphs`): CUDA graphs, and a stand-in on CPU
that fails where a real graph fails.

* :class:`CudaBackend`: stream capture with ``torch.cuda.CUDAGraph`` in ``thread_local`` capture
  mode (fairseq's loader thread pins host memory while a capture may run; ``global`` mode would
  abort the capture from that thread), without emptying the pinned-memory cache that
  ``torch.cuda.graph`` empties on entry.  Warm-up on a side stream, as
  ``torch.cuda.make_graphed_callables`` does.  A pool's bytes are the growth of the reserved device
  memory while graphs are captured into it.
* :class:`ReplayBackend`: a CUDA graph's contract without CUDA, for the tests.  A "capture" runs the
  code under :class:`NoHostSync` (nothing may synchronise with the host); a "replay" runs it again
  into the same static buffers, and fails where a real replay would read memory it does not own:

  - *the shared pool*: the variants of one loop share a pool, so the forward replay of one variant
    overwrites the saved activations of another; a backward replayed after another variant of its
    pool replayed its forward fails (:class:`PoolError`);
  - *ownership*: during a replay every tensor an operation reads must lie in the graph's own slots
    of its loop's arena (its bytes, not the whole buffer the loop's variants share), in a parameter
    or buffer of its module, or be made during this replay (for a backward: during its own
    forward's replay); anything else (a tensor kept by a cache or a memo, whose memory the
    cache may free) fails with a message naming the operation, the tensor and the code that read it
    (:class:`OwnershipError`);
  - *released buffers*: an arena released by its last holder, or taken over by another variant of
    its loop, is poisoned (all bytes ones: NaN in every floating view), so a stale read shows.
"""
import sys
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
from torch import Tensor
from torch.utils._pytree import tree_flatten
from torch.utils._python_dispatch import TorchDispatchMode

_aten = torch.ops.aten
SYNC_OPS = {_aten._local_scalar_dense, _aten.nonzero, _aten.is_nonzero, _aten.masked_select, _aten.unique_consecutive,
            _aten._unique2, _aten.unique_dim, _aten.equal, _aten.allclose, _aten.nonzero_static}
INT_POISON = -(2 ** 30) + 7  # what a released integer buffer holds


class HostSyncError(RuntimeError):
    pass


class OwnershipError(RuntimeError):
    """A replay read a tensor that its graph does not own."""


class PoolError(RuntimeError):
    """A backward replay whose saved activations another variant of its pool overwrote."""


def _check_sync(func, args, kwargs):
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


class NoHostSync(TorchDispatchMode):
    """Fails on every operation that makes the host wait for the device: reading a value
    (``.item()``, ``bool(t)``, ``if t.any()``), a result whose shape depends on values (``nonzero``,
    boolean indexing, ``unique``), and copies from a device to the host."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        _check_sync(func, args, kwargs)
        return func(*args, **kwargs)


def _storage(t: Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _extent(t: Tensor) -> Tuple[int, int]:
    """The bytes ``[lo, hi)`` of its storage that a (non-empty) tensor reads."""
    lo = t.storage_offset() * t.element_size()
    span = 1 + sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride()))
    return lo, lo + span * t.element_size()


class Owned:
    """What a replay may read: whole storages (``whole``: parameters, buffers, what the replay made)
    and byte ranges of shared ones (``slots``: a variant's views into its loop's arena, which the
    other variants' slots share)."""

    def __init__(self, slots: Sequence[Tensor] = (), whole: Sequence[Tensor] = ()):
        self.whole = {_storage(t) for t in whole if t.numel() > 0}
        self.ranges: dict = {}
        for t in slots:
            if t.numel() > 0:
                self.ranges.setdefault(_storage(t), []).append(_extent(t))

    def covers(self, t: Tensor, made: set) -> bool:
        p = _storage(t)
        if p in self.whole or p in made:
            return True
        lo, hi = _extent(t)
        return any(a <= lo and hi <= b for a, b in self.ranges.get(p, ()))


_OWN_FILES = ("graph_backends.py", "graph_variants.py", "cuda_graphs.py")


def _caller() -> str:
    """The innermost frame of the plugin's code (or of the tests) on the stack."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        base = path.rsplit("/", 1)[-1]
        if ("fairseq_local" in path or "/tests/" in path) and base not in _OWN_FILES:
            return f"{base}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return "unknown code"


class Recorder(NoHostSync):
    """:class:`NoHostSync` that also records the storages and bytes every operation makes, and with
    ``owned`` (:class:`Owned`) fails on an operation that reads a tensor neither owned nor made here
    (``made``: storages made by this replay, or for a backward by its forward's replay)."""

    LIFTS = (_aten.lift_fresh, _aten.lift_fresh_copy)  # a literal ``torch.tensor(...)``: made here

    def __init__(self, name: str, owned: Optional[Owned] = None, made: Optional[set] = None):
        super().__init__()
        self.name, self.owned, self.made, self.bytes = name, owned, set(made or ()), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        _check_sync(func, args, kwargs)
        ins = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, Tensor) and a.numel() > 0]
        if self.owned is not None and func.overloadpacket not in self.LIFTS:
            for t in ins:
                if not self.owned.covers(t, self.made):
                    raise OwnershipError(
                        f"the replay of {self.name} read a tensor it does not own ({func.overloadpacket.__name__} "
                        f"of a {tuple(t.shape)} {t.dtype} tensor made outside the graph, read at {_caller()}): "
                        "a cache or memo may free or replace it; compute it inside the captured code or make "
                        "it a buffer of the module")
        out = func(*args, **kwargs)
        seen = {_storage(t) for t in ins}
        for o in tree_flatten(out)[0]:
            if isinstance(o, Tensor) and o.numel() > 0:
                p = _storage(o)
                if p not in seen and p not in self.made:
                    self.made.add(p)
                    self.bytes += o.untyped_storage().nbytes()
        return out


class CudaBackend:
    """Stream capture and replay with ``torch.cuda.CUDAGraph``."""

    CAPTURE_ERROR_MODE = "thread_local"
    PEAK_BYTES = False  # a capture reports how much the pool grew
    CHECKS_OWNERSHIP = False

    def __init__(self):
        self._stream = None

    def new_pool(self):
        return torch.cuda.graph_pool_handle()

    def warmup(self, fn: Callable):
        """Runs ``fn`` before a capture, on a side stream (as ``torch.cuda.make_graphed_callables``
        does); returns what it returned."""
        torch.cuda.synchronize()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            out = fn()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        return out

    def capture(self, fn: Callable, pool, name: str, forward=None, outputs=None) -> Tuple[Any, Any, int]:
        """``torch.cuda.graph``'s capture without its cache clearing: synchronise, capture ``fn()``
        (a backward: ``fn(outputs)``, the forward's outputs) on a side stream into ``pool`` in
        thread-local mode; returns the graph, what ``fn`` returned and the bytes the pool grew by."""
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        before = torch.cuda.memory_reserved()
        if self._stream is None:  # one capture stream, as torch.cuda.graph keeps one
            self._stream = torch.cuda.Stream()
        stream = self._stream
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            graph.capture_begin(pool=pool, capture_error_mode=self.CAPTURE_ERROR_MODE)
            try:
                out = fn() if forward is None else fn(outputs)
            except BaseException:
                try:  # end the invalidated capture; the captured code's error is the one to report
                    graph.capture_end()
                except Exception:  # noqa: BLE001
                    pass
                raise
            graph.capture_end()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        return graph, out, max(0, torch.cuda.memory_reserved() - before)

    def replay(self, graph, static: List[Tensor], owned: Sequence[Tensor], name: str):
        graph.replay()

    def release(self, tensors: Sequence[Tensor]):
        """Nothing to do: the memory goes back to the pool with the last reference."""


class StandInPool:
    """The stand-in's memory pool: which variant's saved activations it holds (the last forward
    replayed in it)."""

    def __init__(self):
        self.saved: Optional[Tuple[int, Any, set]] = None  # (graph id, fresh outputs, storages made)


class StandInGraph:
    """What the stand-in "captured": the code, its grad mode, its pool and (for a backward) the
    forward graph whose activations it reads."""

    def __init__(self, fn: Callable, grad: bool, pool: StandInPool, forward: Optional["StandInGraph"]):
        self.fn, self.grad, self.pool, self.forward = fn, grad, pool, forward


class ReplayBackend:
    """A CUDA graph's contract without CUDA (see the module doc).  ``corrupt`` (tests) alters the
    replayed outputs, as a faulty graph would."""

    PEAK_BYTES = True  # a capture reports all it allocated; the pool holds the largest capture's
    CHECKS_OWNERSHIP = True  # a replay gets what it may read besides what it makes

    def __init__(self, corrupt: Optional[Callable[[List[Tensor]], None]] = None):
        self.corrupt = corrupt

    def new_pool(self):
        return StandInPool()

    def warmup(self, fn: Callable):
        return fn()

    def capture(self, fn: Callable, pool: StandInPool, name: str, forward: Optional[StandInGraph] = None,
                outputs=None) -> Tuple[Any, Any, int]:
        """A forward ``fn()`` or (``forward`` given) a backward ``fn(outputs)`` (the forward's); the
        bytes: everything the capture allocated (a pool without reuse)."""
        rec = Recorder(name)
        with rec:
            out = fn() if forward is None else fn(outputs)
        return StandInGraph(fn, torch.is_grad_enabled(), pool, forward), out, rec.bytes

    def replay(self, graph: StandInGraph, static: List[Tensor], owned: Tuple[Sequence[Tensor], Sequence[Tensor]],
               name: str):
        """Runs the graph's code again into ``static``; ``owned``: (arena slots, whole tensors) it may
        read besides what it makes."""
        pool = graph.pool
        owned = Owned(*owned)
        if graph.forward is not None:
            if pool.saved is None or pool.saved[0] != id(graph.forward):
                raise PoolError(f"the backward graph of {name} replayed after another graph of its memory pool "
                                "replayed its forward (its saved activations are overwritten)")
            _, outs, made = pool.saved
            pool.saved = None
            rec = Recorder(name, owned, made)
            with torch.set_grad_enabled(graph.grad), rec:
                fresh = graph.fn(outs)
        else:
            rec = Recorder(name, owned)
            with torch.set_grad_enabled(graph.grad), rec:
                fresh = graph.fn()
            pool.saved = (id(graph), tree_flatten(fresh)[0], rec.made) if graph.grad else None
        with torch.no_grad():
            for s, f in zip(static, tree_flatten(fresh)[0]):
                if isinstance(s, Tensor):
                    s.copy_(f)
            if self.corrupt is not None:
                self.corrupt(static)

    def release(self, tensors: Sequence[Tensor]):
        """Poisons released static buffers: NaN, or :data:`INT_POISON` (bool buffers stay); a byte
        buffer (an arena) all ones, which every floating view of it reads as NaN."""
        with torch.no_grad():
            for t in tensors:
                if isinstance(t, Tensor) and t.numel() > 0:
                    if t.dtype == torch.uint8:
                        t.detach().fill_(255)
                    elif t.is_floating_point() or t.is_complex():
                        t.detach().fill_(float("nan"))
                    elif t.dtype != torch.bool:
                        t.detach().fill_(INT_POISON)


__all__ = ["HostSyncError", "OwnershipError", "PoolError", "NoHostSync", "Recorder", "Owned", "CudaBackend",
           "ReplayBackend", "StandInPool", "INT_POISON"]
