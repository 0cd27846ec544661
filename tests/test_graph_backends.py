"""How loops are captured and replayed (fairseq_local/modules/graph_backends.py), on CPU.

The stand-in for CUDA graphs (``ReplayBackend``) must fail where a real graph fails: a replay that
reads a tensor the graph does not own (a cached or memoised tensor, one made by an earlier call),
and a read of a released buffer (poisoned).  ``CudaBackend``'s capture is checked against a mock of
``torch.cuda``: thread-local capture mode, the pool passed on, no emptying of the pinned-memory
cache, and the capture ended even when the captured code fails.
"""
import functools

import pytest
import torch
import torch.nn as nn

from fairseq_local.modules import cuda_graphs, fast_path, graph_backends
from fast_path_lib import _single_thread, graphs, set_impl  # noqa: F401  (fixtures)


@functools.lru_cache(maxsize=4)
def cached_scale(n: int) -> torch.Tensor:
    """A tensor kept by a cache (as genCNN's index tensors were): it may be freed or replaced."""
    return torch.linspace(1.0, 2.0, n)


class ReadsLayer(fast_path.FastPathMixin, nn.Module):
    """A loop whose step reads, besides its input and state, ``kind``: ``buffer`` (a registered
    buffer: owned), ``memo`` (a tensor kept on the module, not a buffer), ``cache`` (from an
    ``lru_cache``) or ``previous`` (the output of the previous call, kept on the module)."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.register_buffer("scale", torch.linspace(1.0, 2.0, 3))
        self.memo = torch.linspace(1.0, 2.0, 3)
        self.previous = torch.zeros(3)

    def forward(self, x):
        out = fast_path.scan(self, "_step", (x.new_zeros(x.size(1), 3),), (x,), None)[0][0]
        self.previous = out[-1, 0].detach()
        return out

    def _step(self, carry, x, valid, consts):
        read = {"buffer": self.scale, "memo": self.memo, "cache": cached_scale(3), "previous": self.previous}[self.kind]
        h = carry[0] * 0.5 + x[0] * read
        return (h,), (h,)


def test_a_replay_may_read_its_inputs_parameters_and_buffers(graphs):
    layer = set_impl(ReadsLayer("buffer"), "graphs")
    x = torch.randn(5, 2, 3)
    with torch.no_grad():
        got = [layer(x), layer(x * 2)]
        set_impl(layer, "eager")
        assert torch.equal(got[0], layer(x)) and torch.equal(got[1], layer(x * 2))
    assert fast_path.stats()["graphs_captured"] == 1


@pytest.mark.parametrize("kind", ["memo", "cache", "previous"])
def test_a_replay_that_reads_a_tensor_it_does_not_own_fails(graphs, kind):
    """Strict: an error naming the variant, the operation, the tensor and the line that read it.
    Otherwise: one warning and the eager loop (its result)."""
    layer = set_impl(ReadsLayer(kind), "graphs")
    x = torch.randn(5, 2, 3)
    with torch.no_grad(), pytest.raises(cuda_graphs.GraphFallbackError) as e:
        layer(x)
    assert (r"the CUDA graph of ReadsLayer._step [4x3, 8x4x3, 8x4; no grad] failed to replay (OwnershipError: the "
            r"replay of ReadsLayer._step [4x3, 8x4x3, 8x4; no grad] read a tensor it does not own (mul of a (3,) "
            r"torch.float32 tensor made outside the graph, read at test_graph_backends.py:") in str(e.value)
    assert "in _step): a cache or memo may free or replace it" in str(e.value)
    cuda_graphs.set_strict(False)
    cuda_graphs.reset()
    with torch.no_grad():
        with pytest.warns(UserWarning, match=r"ReadsLayer\._step \[.*\] failed to replay \(OwnershipError"):
            out = layer(x)
        layer.previous = out[-1, 0]
        set_impl(layer, "eager")
        assert torch.equal(out, layer(x))


def test_released_buffers_are_poisoned():
    """Floating buffers become NaN, integer ones the sentinel; boolean ones cannot be poisoned; a
    byte buffer (an arena) all ones, NaN in every floating view of it."""
    f, i, b = torch.randn(3), torch.arange(4), torch.ones(2, dtype=torch.bool)
    arena = torch.zeros(16, dtype=torch.uint8)
    graph_backends.ReplayBackend().release([f, i, b, arena])
    assert torch.isnan(f).all() and (i == graph_backends.INT_POISON).all() and b.all()
    assert (arena == 255).all() and torch.isnan(arena.view(torch.float32)).all()
    assert torch.isnan(arena.view(torch.float16)).all() and torch.isnan(arena.view(torch.bfloat16)).all()


def test_a_stale_read_of_a_reused_arena_fails(graphs):
    """The variants of a loop share one arena.  When a smaller variant takes it over, the slots of
    the larger one that it does not write are poisoned (a stale read outside a graph shows NaN), and
    a replay that reads the larger variant's slot (kept as a memo) fails the stand-in, although the
    tensor lies in the arena its own slots are in: a replay owns the bytes of its slots, not the
    whole shared buffer."""
    layer = set_impl(ReadsLayer("memo"), "graphs")
    layer.memo = layer.scale
    with torch.no_grad():
        layer(torch.randn(9, 2, 3))  # padded to 16 x 4: the arena fits every smaller variant
        (large,) = cuda_graphs._LIVE.values()
        stale = large.static_out[-1][0]  # the final state's slot, beyond the smaller variant's slots
        assert torch.isfinite(stale).all()
        small = torch.randn(5, 2, 3)
        got = layer(small)  # padded to 8 x 4: a new variant in the same arena
        assert torch.isnan(stale).all() and len(cuda_graphs._LIVE) == 2
        (_, other) = cuda_graphs._LIVE.values()
        assert other.arena is large.arena and stale.untyped_storage().data_ptr() == other.arena.buf.data_ptr()
        set_impl(layer, "eager")
        assert torch.equal(got, layer(small))
        layer.memo = stale
        set_impl(layer, "graphs")
        with pytest.raises(cuda_graphs.GraphFallbackError, match=r"ReadsLayer\._step \[4x3, 8x4x3, 8x4; no grad\] "
                           r"failed to replay \(OwnershipError: .* read a tensor it does not own \(mul of a \(3,\)"):
            layer(small)


class FakeGraph:
    def __init__(self, log):
        self.log = log

    def capture_begin(self, **kwargs):
        self.log.append(("begin", kwargs))

    def capture_end(self):
        self.log.append(("end", {}))
        if self.log[-2][0] == "failed":
            raise RuntimeError("operation failed due to a previous error during capture")


class FakeStream:
    def wait_stream(self, other):
        pass


def fake_cuda(monkeypatch, log):
    reserved = iter(range(1000, 10 ** 6, 4096))
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: FakeGraph(log))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: log.append(("sync", {})))
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "current_stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: next(reserved))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: pytest.fail("the capture emptied the device cache"))
    monkeypatch.setattr(torch._C, "_host_emptyCache", lambda: pytest.fail("the capture emptied the pinned-memory cache"),
                        raising=False)


def test_cuda_capture_is_thread_local_and_keeps_the_pinned_memory_cache(monkeypatch):
    """``CudaBackend.capture`` begins the capture in ``thread_local`` mode (fairseq's loader thread
    may pin host memory meanwhile), into the given pool, never empties a cache, reports how much
    reserved memory the pool grew by, and ends the capture when the captured code fails (reporting
    that failure, not the invalidated capture's)."""
    log = []
    fake_cuda(monkeypatch, log)
    cuda = graph_backends.CudaBackend()
    graph, out, grown = cuda.capture(lambda: "outputs", pool=("pool", 7), name="L._step")
    assert out == "outputs" and grown == 4096 and isinstance(graph, FakeGraph)
    begins = [kw for what, kw in log if what == "begin"]
    assert begins == [{"pool": ("pool", 7), "capture_error_mode": "thread_local"}]
    assert [what for what, _ in log] == ["sync", "begin", "end", "sync"]
    log.clear()
    fake_cuda(monkeypatch, log)

    def failing():
        log.append(("failed", {}))
        raise RuntimeError("operation not permitted when stream is capturing")

    with pytest.raises(RuntimeError, match="not permitted"):  # the captured code's error, not capture_end's
        cuda.capture(failing, pool=None, name="L._step")
    assert [what for what, _ in log] == ["sync", "begin", "failed", "end"]
    _, grads, _ = cuda.capture(lambda outs: outs[::-1], pool=None, name="L._step", forward=graph, outputs=[1, 2])
    assert grads == [2, 1]  # a backward capture runs on the forward's outputs
