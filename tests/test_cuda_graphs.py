"""The CUDA-graph side of the fast path (fairseq_local/modules/cuda_graphs.py, graph_variants.py), on CPU.

CI has no GPU, so ``cuda_graphs.ReplayBackend`` stands in for the graphs (the ``graphs`` fixture, in
strict mode: a capture failure or a mismatch is an error): it records each "capture" under
``NoHostSync``, which fails on any host synchronisation, "replays" into the same static buffers,
and fails on a replay that reads a tensor its graph does not own (tests/test_graph_backends.py).
Checked here: ``auto`` is eager on CUDA and ``cuda-graphs`` captures, never compiling; padding to
buckets and the variants it makes; the first-call check that falls back to eager with one warning
(a replay or a gradient that differs, a capture that fails), per variant and on the unpadded
inputs, or raises in strict mode; a second forward before a backward, parameters whose storage is
replaced, training over optimizer steps, autocast; memory: one pool per loop, the count and byte
bounds, an evicted variant freed with the garbage collector off; genCNN's and DPN-S2S's
whole-model graphs == eager.  The real CUDA graphs are checked on a GPU by
``scripts/gpu/check_install.py --fast-path``.
"""
import gc
import warnings
import weakref

import pytest
import torch
import torch.nn as nn

from fairseq_local.modules import cuda_graphs, fast_path
from fairseq_local.modules.multi_channel_rnn import MultiChannelRNNLayer
from fairseq_local.modules.parallel_cell_rnn import ParallelCellRNNLayer
from fairseq_local.modules.torch_rnn_layer import TorchRNNLayer
from fast_path_lib import (  # noqa: F401  (graphs and _single_thread are fixtures)
    TINY_S2S,
    _FakeCuda,
    _single_thread,
    assert_close,
    assert_grads_close,
    build,
    dictionary_dir,
    graphs,
    padding,
    run_layer,
    set_impl,
    translation_batch,
)


def test_buckets():
    assert [fast_path.length_bucket(t) for t in (1, 2, 8, 9, 33, 64, 65, 130)] == [1, 8, 8, 16, 64, 64, 128, 192]
    assert [fast_path.batch_bucket(b) for b in (1, 4, 5, 7, 9, 13, 100, 160)] == [4, 4, 6, 8, 12, 16, 128, 192]


def test_graph_variants_are_the_padded_shapes(graphs):
    """(T, B) pairs in the same (time, batch) buckets replay one graph: T 3, 5, 8 pad to 8 and B 3,
    4 to 4; T 1 is its own bucket and B 5 is bucket 6.  Each call equals eager (state included)."""
    torch.manual_seed(0)
    layer = ParallelCellRNNLayer(3, 4, wide=2, cell="gru")
    with torch.no_grad():
        for T, B in ((3, 3), (5, 4), (8, 3), (1, 3), (1, 5)):
            x, state = torch.randn(T, B, 3), (torch.randn(B, 4),)
            mask = padding(T, B, "left") if T > 1 else None
            set_impl(layer, "eager")
            out_e, st_e = layer(x, state, mask)
            set_impl(layer, "graphs")
            out_g, st_g = layer(x, state, mask)
            assert_close(out_e, out_g, f"T={T} B={B}: output")
            assert_close(st_e[0], st_g[0], f"T={T} B={B}: state")
    st = fast_path.stats()
    assert st["graphs_captured"] == 3 and st["graphs_live"] == 3, st


def test_auto_is_eager_on_cuda_and_cuda_graphs_captures(graphs, monkeypatch, tmp_path):
    """On a CUDA tensor (mocked) ``auto``, the default, runs the eager loop (the captured path has not
    finished a real GPU training run); ``cuda-graphs`` captures the eager loop and ``compiled``
    compiles the step without capturing.  A training step under ``cuda-graphs`` (the stand-in
    backend) never calls the compiler; under ``auto`` it captures nothing."""
    assert fast_path.execution("auto", _FakeCuda()) == fast_path.EAGER
    assert fast_path.execution("cuda-graphs", _FakeCuda()) == fast_path.Execution(compiled=False, graphs=True)
    assert fast_path.execution("compiled", _FakeCuda()) == fast_path.Execution(compiled=True, graphs=False)
    assert fast_path.execution("eager", _FakeCuda()) == fast_path.EAGER
    assert fast_path.RecurrentImplConfig().rnn_impl == "auto"
    monkeypatch.setattr(fast_path, "compiled_step", lambda *a: pytest.fail("cuda-graphs called the compiler"))
    data = dictionary_dir(tmp_path)
    cfg, model, task = build(data, "translation", "mc_rnn_iwslt_de_en_2", TINY_S2S)
    net, tgt = translation_batch(task)
    model.train()
    model(**net)[0].sum().backward()  # auto: eager, even with graphs available
    assert fast_path.stats()["graphs_captured"] == 0
    set_impl(model, "graphs")
    model(**net)[0].sum().backward()
    st = fast_path.stats()
    assert st["graphs_captured"] >= 2 and st["compiles"] == 0 and st["graph_fallbacks"] == 0, st


# ------------------------------------------------------------------------------------------------
# the graph machinery
# ------------------------------------------------------------------------------------------------


def test_no_host_sync_mode_names_every_synchronisation():
    x = torch.randn(4)
    for what, fn in (("_local_scalar_dense", lambda: x.sum().item()), ("_local_scalar_dense", lambda: bool(x.sum() > 0)),
                     ("nonzero", lambda: x.nonzero()), ("nonzero", lambda: x[x > 0])):
        with pytest.raises(cuda_graphs.HostSyncError, match=what), cuda_graphs.NoHostSync():
            fn()
    with cuda_graphs.NoHostSync():  # masked arithmetic stays on the device
        torch.where(x > 0, x, -x).masked_fill(x < 0, 0).index_select(0, torch.tensor([1, 2]))


class SyncingLayer(fast_path.FastPathMixin, nn.Module):
    """A layer whose step reads a value on the host (not capturable)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, x):
        return fast_path.scan(self, "_step", (x.new_zeros(x.size(1), 3),), (x,), None)

    def _step(self, carry, x, valid, consts):
        h = carry[0] * 0.5 + x[0] * self.w
        if float(h.sum()) > 1e9:
            h = h * 0
        return (h,), (h,)


def test_a_capture_that_fails_warns_once_and_runs_eagerly(graphs):
    """Outside strict mode: one warning naming the variant, then eager; strict: an error."""
    layer = set_impl(SyncingLayer(), "graphs")
    x = torch.randn(5, 2, 3)
    with pytest.raises(cuda_graphs.GraphFallbackError, match=r"--graph-fallback error: the CUDA graph of "
                       r"SyncingLayer\._step \[.*\] could not be captured \(HostSyncError"):
        layer(x)
    cuda_graphs.set_strict(False)
    with pytest.warns(UserWarning, match=r"SyncingLayer\._step \[4x3, 8x4x3, 8x4; training\] could not be captured "
                      r"\(HostSyncError"):
        (out,), _ = layer(x)
    set_impl(layer, "eager")
    (ref,), _ = layer(x)
    assert torch.equal(out, ref)
    set_impl(layer, "graphs")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer(x)  # no second warning
    assert fast_path.stats()["graph_fallbacks"] == 2


def test_a_replay_that_differs_from_eager_falls_back_with_one_warning():
    """A graph whose replay is wrong (the stand-in backend corrupts its outputs) is caught at its
    first call: one warning, the eager result, and eager from then on."""
    def corrupt(static):
        static[0].add_(1.0)

    with cuda_graphs.use_backend("cpu", cuda_graphs.ReplayBackend(corrupt=corrupt)):
        torch.manual_seed(0)
        layer = MultiChannelRNNLayer(4, 6, 2, cell="gru")
        x = torch.randn(5, 3, 4)
        with pytest.warns(UserWarning, match=r"MultiChannelRNNLayer\._step \[.*; training\] gave outputs that differ"):
            out = run_layer(layer, "graphs", x, None)
        ref = run_layer(layer, "eager", x, None)
        assert torch.equal(out[0], ref[0]) and assert_grads_close(ref[2], out[2], "fallback") is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            again = run_layer(layer, "graphs", x, None)
        assert torch.equal(again[0], ref[0]) and fast_path.stats()["graph_fallbacks"] == 1


def test_a_backward_that_differs_from_eager_falls_back():
    """The first backward of a training variant is compared with eager autograd too."""
    calls = {"n": 0}

    def corrupt_grads(static):
        calls["n"] += 1
        if calls["n"] == 2:  # the forward replay, then the backward graph's first replay
            static[-1].add_(1.0)

    with cuda_graphs.use_backend("cpu", cuda_graphs.ReplayBackend(corrupt=corrupt_grads)):
        torch.manual_seed(0)
        layer = MultiChannelRNNLayer(4, 6, 2, cell="gru")
        x = torch.randn(5, 3, 4)
        ref = run_layer(layer, "eager", x, None)
        with pytest.warns(UserWarning, match="gave gradients that differ"):
            got = run_layer(layer, "graphs", x, None)
        assert_grads_close(ref[2], got[2], "eager gradients after the fallback")


def test_training_over_optimizer_steps_equals_eager(graphs):
    """Five SGD steps (parameters updated in place, so the graphs read the new values), one batch
    shape with a second forward before a backward in between (it runs eagerly), and a parameter whose
    storage is replaced (captured again): the parameters end equal to eager training's."""
    def train(impl):
        torch.manual_seed(0)
        layer = MultiChannelRNNLayer(4, 6, 3, cell="lstm", weight_space="gates")
        set_impl(layer, impl)
        opt = torch.optim.SGD(layer.parameters(), lr=0.5)
        g = torch.Generator().manual_seed(1)
        for i in range(5):
            x = torch.randn(6, 3, 4, generator=g)
            mask = padding(6, 3, "left")
            opt.zero_grad()
            loss = layer(x, None, mask)[0].pow(2).sum()
            if i == 2:
                loss = loss + layer(x * 2, None, mask)[0].pow(2).sum()  # same variant, pending backward
            loss.backward()
            opt.step()
            if i == 3:
                layer.bias_hh.data = layer.bias_hh.data.clone()
        return {n: p.detach() for n, p in layer.named_parameters()}
    eager, fast = train("eager"), train("graphs")
    for n in eager:
        assert_close(eager[n], fast[n], f"parameter {n} after training", rtol=1e-5)
    st = fast_path.stats()
    assert st["graphs_captured"] == 2 and st["graph_fallbacks"] == 0, st


def test_graphs_under_autocast(graphs):
    """Under bf16 autocast (captured without autocast's cache of cast weights, which a graph would
    otherwise replay after the weights changed) the captured loop equals eager's in bf16, and the
    same shapes without autocast are another variant."""
    torch.manual_seed(0)
    layer = MultiChannelRNNLayer(4, 6, 3, cell="lstm", weight_space="gates")
    x, mask = torch.randn(6, 3, 4), padding(6, 3, "left")
    fp32 = run_layer(layer, "eager", x, mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        eager = run_layer(layer, "eager", x, mask)
        fast = run_layer(layer, "graphs", x, mask)
    assert (eager[0] - fp32[0]).abs().max() > 1e-4  # the step ran in bf16
    assert_close(eager[0].float(), fast[0].float(), "bf16 output", rtol=1e-2)
    assert_grads_close(eager[2], fast[2], "bf16 training step", rtol=1e-2)
    run_layer(layer, "graphs", x, mask)  # fp32
    st = fast_path.stats()
    assert st["graphs_captured"] == 2 and st["graph_fallbacks"] == 0, st


def test_live_graphs_are_bounded(graphs, monkeypatch):
    monkeypatch.setattr(cuda_graphs, "MAX_LIVE_GRAPHS", 2)
    layer = TorchRNNLayer("gru", 4, 6)
    for T in (33, 17, 9, 2):  # the largest first: the loop's arena fits every later variant
        x, mask = torch.randn(T, 3, 4), padding(T, 3, "holes")
        set_impl(layer, "eager")
        with torch.no_grad():
            ref = layer(x, None, mask)[0]
            set_impl(layer, "graphs")
            assert_close(ref, layer(x, None, mask)[0], f"T={T}")
    st = fast_path.stats()
    assert st["graphs_captured"] == 4 and st["graphs_live"] == 2, st


GENCNN_TINY = ["--decoder-embed-dim", "6", "--alpha-length", "6", "--beta-length", "4", "--alpha-layers",
               "(2,3,3),(2,2,2)", "--beta-layers", "(2,3,0),(1,3,0)", "--fc-dim", "8", "--dropout", "0",
               "--tokens-per-sample", "32"]


def test_gencnn_graphs_equal_eager(graphs, tmp_path):
    """genCNN (no time loop; its body runs as one CUDA graph per (batch, length) bucket and its
    generation step as one per batch bucket): a training step's logits and every gradient, and
    step-by-step decoding (the βCNN recursion reached) == the eager full pass, with the length and
    the batch padded (T 13 -> 16, B 3 -> 4); nothing synchronises with the host."""
    data = dictionary_dir(tmp_path)
    cfg, model, task = build(data, "language_modeling", "gencnn", GENCNN_TINY)
    tokens = torch.randint(4, 20, (3, 13), generator=torch.Generator().manual_seed(0))
    tokens[2, :3] = task.target_dictionary.pad()
    results = {}
    for impl in ("eager", "graphs"):
        set_impl(model, impl)
        model.train()
        model.zero_grad(set_to_none=True)
        logits = model(tokens)[0]
        (logits * torch.linspace(-1, 1, logits.numel()).view_as(logits)).sum().backward()
        results[impl] = (logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert_close(results["eager"][0], results["graphs"][0], "genCNN logits")
    assert_grads_close(results["eager"][1], results["graphs"][1], "genCNN training step")
    model.eval()
    with torch.no_grad():
        set_impl(model, "eager")
        full = model.decoder(tokens)[0]
        set_impl(model, "graphs")
        state, steps = {}, []
        for t in range(tokens.size(1)):
            steps.append(model.decoder(tokens[:, : t + 1], incremental_state=state)[0][:, -1])
    assert_close(full, torch.stack(steps, 1), "genCNN: captured steps vs the eager full pass")
    st = fast_path.stats()
    assert st["graphs_captured"] >= 3 and st["graph_fallbacks"] == 0 and st["compiles"] == 0, st


DPN_TINY = ["--encoder-embed-dim", "8", "--decoder-embed-dim", "8", "--encoder-conv-dim", "8", "--decoder-conv-dim", "8",
            "--encoder-conv-layers", "2", "--decoder-conv-layers", "2", "--encoder-san-layers", "1",
            "--decoder-san-layers", "1", "--encoder-ffn-embed-dim", "16", "--decoder-ffn-embed-dim", "16",
            "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--dropout", "0"]


def test_dpn_graphs_equal_eager(graphs, tmp_path):
    """DPN-S2S (no time loop; its training and validation forward runs as one CUDA graph per
    (batch, source, target) bucket): logits and every gradient of a left-padded batch (source 5 ->
    8, target 4 -> 8, batch 3 -> 4 with a copy of the first sentence) == eager, in training and in
    evaluation; a second batch (2 sentences of 3 words) falls in the same buckets and replays both
    graphs."""
    data = dictionary_dir(tmp_path)
    cfg, model, task = build(data, "translation", "dpn_s2s", DPN_TINY)
    for net, _ in (translation_batch(task), translation_batch(task, B=2, S=3, T=3, seed=1)):
        for train in (True, False):
            results = {}
            for impl in ("eager", "graphs"):
                set_impl(model, impl)
                model.train(train)
                model.zero_grad(set_to_none=True)
                with torch.set_grad_enabled(train):
                    logits = model(**net)[0]
                    if train:
                        (logits * torch.linspace(-1, 1, logits.numel()).view_as(logits)).sum().backward()
                results[impl] = (logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                                   if p.grad is not None})
            assert_close(results["eager"][0], results["graphs"][0], f"DPN logits (train={train})")
            if train:
                assert_grads_close(results["eager"][1], results["graphs"][1], "DPN training step")
    st = fast_path.stats()
    assert st["graphs_captured"] == 2 and st["graph_fallbacks"] == 0 and st["compiles"] == 0, st


class ScaledLayer(fast_path.FastPathMixin, nn.Module):
    """A step that reads a buffer."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.full((3,), 2.0))

    def forward(self, x):
        return fast_path.scan(self, "_step", (x.new_zeros(x.size(1), 3),), (x,), None)[0][0]

    def _step(self, carry, x, valid, consts):
        h = carry[0] * 0.5 + x[0] * self.scale
        return (h,), (h,)


def test_a_buffer_with_new_storage_is_captured_again(graphs):
    """A graph reads a buffer at the address it had at capture: a buffer reassigned (new storage)
    makes the variant capture again, so the new values are used."""
    layer = set_impl(ScaledLayer(), "graphs")
    x = torch.randn(5, 2, 3)
    with torch.no_grad():
        first = layer(x)
        layer.scale = torch.full((3,), -1.0)
        second = layer(x)
        set_impl(layer, "eager")
        assert torch.equal(second, layer(x)) and not torch.equal(first, second)
    assert fast_path.stats()["graphs_captured"] == 2


# ------------------------------------------------------------------------------------------------
# memory: one pool per loop, a byte budget, eviction without garbage collection
# ------------------------------------------------------------------------------------------------
def train_call(layer, T, B=3, seed=0):
    """One training forward + backward of ``layer`` at (T, B); returns the output and the grads."""
    x = torch.randn(T, B, 4, generator=torch.Generator().manual_seed(seed))
    return run_layer(layer, "graphs", x, padding(T, B, "left"))


def test_an_evicted_variant_is_gone_without_garbage_collection(graphs, monkeypatch):
    """With the garbage collector off, a variant pushed out by the count cap is freed at once (no
    reference cycle); the loop's pool and arena live on while another variant of the loop uses them
    (the arena's bytes unchanged: the smaller variant's slots fit the larger one's); when the last
    variant goes, the arena is poisoned and freed with the pool."""
    monkeypatch.setattr(cuda_graphs, "MAX_LIVE_GRAPHS", 1)
    torch.manual_seed(0)
    layer = MultiChannelRNNLayer(4, 6, 2, cell="gru")
    gc.collect()
    gc.disable()
    try:
        train_call(layer, 9)
        (first,) = cuda_graphs._LIVE.values()
        static = next(t for t in first.static_in if isinstance(t, torch.Tensor) and t.is_floating_point())
        variant, pool, arena = weakref.ref(first), weakref.ref(first.pool), weakref.ref(first.arena)
        held = fast_path.stats()["graph_bytes"]
        assert held == first.pool.bytes + first.arena.bytes and first.arena.bytes == first.arena.buf.numel()
        del first
        assert variant() is not None and torch.isfinite(static).all()
        train_call(layer, 5)  # another time bucket: a second variant, the first is evicted
        assert variant() is None, gc.get_referrers(variant())
        assert pool() is not None and fast_path.stats()["graph_evictions"] == 1
        (second,) = cuda_graphs._LIVE.values()
        assert second.pool is pool() and second.arena is arena()  # the loop's variants share both
        assert fast_path.stats()["graph_bytes"] == held
        del second
        cuda_graphs.reset()
        assert torch.isnan(static).all()  # poisoned: a read of the released arena shows
        assert pool() is None and arena() is None
    finally:
        gc.enable()


def test_variants_of_a_loop_share_a_pool_and_an_arena_and_bytes_are_budgeted(graphs, monkeypatch):
    """Two shapes of one layer hold one pool and one arena: what the larger shape alone holds, not the
    sum; a smaller arena is replaced by the larger shape's, and the variants laid out in it go with it.
    Two layers hold two.  ``graph_bytes`` is what the live variants hold, and a byte budget evicts the
    least recently used variants until they fit."""
    torch.manual_seed(0)
    a, b = MultiChannelRNNLayer(4, 6, 2, cell="gru"), MultiChannelRNNLayer(4, 6, 2, cell="gru")
    alone, arenas = {}, {}
    for T in (5, 30):
        cuda_graphs.reset()
        train_call(a, T)
        alone[T] = fast_path.stats()["graph_bytes"]
        arenas[T] = next(iter(cuda_graphs._LIVE.values())).arena.bytes
    cuda_graphs.reset()
    train_call(a, 30)
    train_call(a, 5)
    both = fast_path.stats()["graph_bytes"]
    assert 0 < alone[5] < alone[30] and both < alone[5] + alone[30] and arenas[5] < arenas[30], (alone, both, arenas)
    live = list(cuda_graphs._LIVE.values())
    assert len(live) == 2 and live[0].pool is live[1].pool and live[0].arena is live[1].arena
    assert both == live[0].pool.bytes + live[0].arena.bytes and live[0].arena.bytes == arenas[30]
    cuda_graphs.reset()
    train_call(a, 5)
    train_call(a, 30)  # outgrows the arena: the variant of T 5 is discarded, its arena freed
    st = fast_path.stats()
    (only,) = cuda_graphs._LIVE.values()
    assert st["graphs_live"] == 1 and only.arena.bytes == arenas[30], st
    assert st["graph_bytes"] == only.pool.bytes + arenas[30]
    train_call(a, 5)
    assert fast_path.stats()["graphs_live"] == 2 and fast_path.stats()["graph_bytes"] == st["graph_bytes"]
    train_call(b, 5)
    three = fast_path.stats()
    assert three["graphs_live"] == 3 and three["graph_bytes"] > both and three["graph_evictions"] == 0
    monkeypatch.setattr(cuda_graphs, "MAX_GRAPH_BYTES", three["graph_bytes"] - 1)
    train_call(b, 30)
    st = fast_path.stats()
    assert st["graph_bytes"] <= cuda_graphs.MAX_GRAPH_BYTES and st["graph_evictions"] >= 1, st
    assert st["variants"] == {"MultiChannelRNNLayer._step": 4}, st


def test_a_pending_backward_makes_the_other_variants_of_its_loop_run_eagerly(graphs):
    """A training replay's activations stay in the loop's pool until its backward: a forward of
    another variant of the loop in between runs eagerly (captures nothing); the gradients equal
    eager's, and after the backward that variant is captured."""
    torch.manual_seed(0)
    layer = MultiChannelRNNLayer(4, 6, 2, cell="gru")
    xa, xb = torch.randn(5, 3, 4), torch.randn(9, 3, 4)
    grads = {}
    for impl in ("eager", "graphs"):
        set_impl(layer, impl)
        layer.zero_grad(set_to_none=True)
        loss = layer(xa, None, None)[0].pow(2).sum() + layer(xb, None, None)[0].pow(2).sum()
        if impl == "graphs":
            assert fast_path.stats()["graphs_captured"] == 1
        loss.backward()
        grads[impl] = {n: p.grad.clone() for n, p in layer.named_parameters()}
    assert_grads_close(grads["eager"], grads["graphs"], "two forwards before one backward")
    train_call(layer, 9)
    assert fast_path.stats()["graphs_captured"] == 2


def test_the_stand_in_fails_a_backward_whose_pool_another_variant_overwrote(graphs, monkeypatch):
    """Without the rule above (the pool never counts as busy) the stand-in fails as a GPU would: the
    second variant's forward replay overwrites the first one's saved activations."""
    torch.manual_seed(0)
    layer = set_impl(MultiChannelRNNLayer(4, 6, 2, cell="gru"), "graphs")
    train_call(layer, 5)
    train_call(layer, 9)
    monkeypatch.setattr(cuda_graphs.Pool, "busy", lambda self: False)
    loss = layer(torch.randn(5, 3, 4), None, None)[0].sum() + layer(torch.randn(9, 3, 4), None, None)[0].sum()
    with pytest.raises(cuda_graphs.PoolError, match=r"the backward graph of MultiChannelRNNLayer\._step \[.*\] "
                       r"replayed after another graph of its memory pool replayed its forward"):
        loss.backward()


# ------------------------------------------------------------------------------------------------
# fallbacks: per variant, to the unpadded loop; strict mode
# ------------------------------------------------------------------------------------------------
class WideSyncLayer(fast_path.FastPathMixin, nn.Module):
    """Synchronises with the host only for batches of more than 4 rows (so only their variants
    cannot be captured); records the batch size every step sees."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))
        self.seen = []

    def forward(self, x):
        return fast_path.scan(self, "_step", (x.new_zeros(x.size(1), 3),), (x,), None)[0][0]

    def _step(self, carry, x, valid, consts):
        self.seen.append(x[0].size(0))
        h = carry[0] * 0.5 + x[0] * self.w
        if x[0].size(0) > 4 and float(h.sum()) > 1e9:
            h = h * 0
        return (h,), (h,)


def test_a_fallback_is_per_variant_and_runs_the_unpadded_loop(graphs):
    """The variant of batch bucket 6 cannot be captured: one warning naming it, then the eager loop
    on the unpadded batch of 5 (not 6); the variant of batch bucket 4 of the same loop keeps its
    graph.  In strict mode the same failure is an error."""
    cuda_graphs.set_strict(False)
    layer = set_impl(WideSyncLayer(), "graphs")
    with torch.no_grad():
        small, wide = torch.randn(5, 3, 3), torch.randn(5, 5, 3)
        layer(small)
        with pytest.warns(UserWarning, match=r"WideSyncLayer\._step \[6x3, 8x6x3, 8x6; no grad\] could not be "
                          r"captured \(HostSyncError: _local_scalar_dense"):
            layer.seen.clear()
            out = layer(wide)
        assert layer.seen[-5:] == [5] * 5  # the fallback: 5 steps of the unpadded batch
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            layer.seen.clear()
            again = layer(wide)
            assert layer.seen == [5] * 5 and torch.equal(out, again)
            layer.seen.clear()
            layer(small)
            assert layer.seen == [4] * 8  # the graph (the stand-in re-runs it): padded to T 8, B 4
        set_impl(layer, "eager")
        assert torch.equal(out, layer(wide))
    st = fast_path.stats()
    assert st["graphs_live"] == 1 and st["graph_fallbacks"] == 1, st
    cuda_graphs.set_strict(True)
    cuda_graphs.reset()
    with pytest.raises(cuda_graphs.GraphFallbackError, match=r"WideSyncLayer\._step \[6x3, 8x6x3, 8x6; no grad\]"):
        with torch.no_grad():
            set_impl(layer, "graphs")(wide)


@pytest.mark.parametrize("how", ["strict_mode", "--graph-fallback error"])
def test_model_graph_tests_fail_when_captures_fail(graphs, monkeypatch, tmp_path, how):
    """The model-level graph tests run strict: with every capture failing, a training step of a
    translation model under ``cuda-graphs`` raises instead of quietly running eager.  The model
    option ``--graph-fallback error`` does the same without the global switch; ``warn`` falls back
    with a warning and the eager result."""
    def broken(self, fn, pool, name, forward=None, outputs=None):
        raise RuntimeError("capture refused")

    monkeypatch.setattr(cuda_graphs.ReplayBackend, "capture", broken)
    data = dictionary_dir(tmp_path)
    extra = ["--rnn-impl", "cuda-graphs"]
    if how != "strict_mode":
        cuda_graphs.set_strict(False)
        extra += ["--graph-fallback", "error"]
    cfg, model, task = build(data, "translation", "mc_rnn_iwslt_de_en_2", TINY_S2S + extra)
    assert {m.graph_fallback for m in model.modules() if isinstance(m, fast_path.FastPathMixin)} == \
        {"warn" if how == "strict_mode" else "error"}
    net, _ = translation_batch(task)
    with pytest.raises(cuda_graphs.GraphFallbackError, match=r"could not be captured \(RuntimeError: capture refused"):
        model(**net)[0].sum().backward()
    if how != "strict_mode":
        fast_path.set_rnn_impl(model, "cuda-graphs", "warn")
        with pytest.warns(UserWarning, match="capture refused"):
            out = model(**net)[0]
        assert torch.equal(out, set_impl(model, "eager")(**net)[0])
