"""The fast path (``--rnn-impl``, fairseq_local/modules/fast_path.py), on CPU.

Two fast executions of the same step code, each checked against the eager loop: ``compiled`` (the
step compiled once by torch.compile, inductor on CPU, batch dynamic) and the CUDA-graph path
(``cuda-graphs`` on CUDA; here ``cuda_graphs.ReplayBackend`` stands in for the graphs, in strict
mode, whose machinery tests/test_cuda_graphs.py checks).  Outputs, states and every gradient within 1e-5 relative for
every family's layer (captures under ``NoHostSync``: nothing in a loop synchronises with the host),
the lattice GRU, a translation model's training step, incremental decoding, beam search and the LM
decoder's step; checkpoints under either implementation.

Cost: no compiled region unrolls the loop (its traced graph is the same at T 8 and T 64), and after
two warm-up shapes the batch shapes of a real epoch (Multi30k through fairseq's ``batch_by_size``)
compile nothing new (``error_on_recompile``); a compiled step says that it compiles and a compiler
failure is one line.  The real CUDA graphs are checked on a GPU by
``scripts/gpu/check_install.py --fast-path``.
"""
import copy
import os
import tempfile

import numpy as np
import pytest
import torch

import fairseq_local  # noqa: F401  (registers everything)
from fairseq import checkpoint_utils
from fairseq.data import data_utils
from fairseq_local.data.shape_buckets import ShapePlan
from fairseq_local.modules import cuda_graphs, fast_path
from fairseq_local.modules.lattice_gru import (EDGE_FACTORS, LatticeGRU, declared_grids, describe_grids, grid_shape,
                                              make_schedule, pad_levels)
from fairseq_local.modules.multi_channel_rnn import MultiChannelRNNLayer
from fairseq_local.modules.parallel_cell_rnn import ParallelCellRNNLayer
from fairseq_local.modules.recurrent_lm_decoder import RecurrentLMDecoder
from fairseq_local.modules.recurrent_seq2seq import RecurrentAttentionDecoder
from fairseq_local.modules.torch_rnn_layer import TorchRNNLayer
from fairseq_local_repro.gpu import check_install
from fast_path_lib import (  # noqa: F401  (graphs and _single_thread are fixtures)
    TINY_S2S,
    _single_thread,
    assert_close,
    assert_grads_close,
    build,
    dictionary_dir,
    graphs,
    padding,
    parse,
    run_layer,
    set_impl,
    translation_batch,
)

# inductor's on-disk cache, one per xdist worker: workers compiling the same kernel at once must not
# read each other's half-written files
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(
    tempfile.gettempdir(), f"torchinductor_fairseq_local_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"))

RECURRENT_MODELS = ["rnnsearch", "mc_rnn", "parallel_lstm", "mc_rnn_lm", "parallel_lstm_lm", "lattice_rnnsearch", "gencnn",
                    "dpn_s2s"]


LAYERS = {
    # one per family; MC-RNN in gate space with an LSTM (the table rows) and a GRU in hidden space
    "mc_rnn_lstm_gates": lambda: MultiChannelRNNLayer(4, 6, 3, cell="lstm", weight_space="gates"),
    "mc_rnn_gru_hidden": lambda: MultiChannelRNNLayer(4, 6, 2, cell="gru", weight_space="hidden"),
    "parallel_lstm": lambda: ParallelCellRNNLayer(4, 6, wide=2, cell="lstm", cell_input="slice"),
    "torch_gru": lambda: TorchRNNLayer("gru", 4, 6),
}


def check_layer(name, impl):
    torch.manual_seed(0)
    layer = LAYERS[name]()
    T, B = 5, 3
    for layout in (("holes",) if name.startswith("torch") else ("left", "right")):
        x = torch.randn(T, B, 4)
        mask = padding(T, B, layout)
        eager = run_layer(layer, "eager", x, mask)
        fast = run_layer(layer, impl, x, mask)
        assert_close(eager[0], fast[0], f"{name} {layout}: output")
        for i, (a, b) in enumerate(zip(eager[1], fast[1])):
            assert_close(a, b, f"{name} {layout}: state {i}")
        assert_grads_close(eager[2], fast[2], f"{name} {layout}")
        assert_close(eager[3], fast[3], f"{name} {layout}: grad of the input")
        assert torch.equal(fast[0][mask], torch.zeros_like(fast[0][mask]))  # padded outputs are zero


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_compiled_equals_eager(name):
    """Outputs, final state and every gradient (see assert_grads_close), left and right padding
    (the parallel LSTM's eager path is torch's fused kernel per cell, so this also checks the step
    loop against it; the torch layer's mask has a hole, the only case it does not hand to cuDNN)."""
    check_layer(name, "compiled")


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_graphs_equal_eager_and_never_sync(name, graphs):
    """The same on the CUDA-graph path: every loop was captured (under NoHostSync: nothing in it
    synchronises with the host), none fell back to eager, and the first call of each variant was
    checked against eager."""
    check_layer(name, "graphs")
    st = fast_path.stats()
    assert st["graphs_captured"] >= 1 and st["graph_fallbacks"] == 0, st
    assert st["graphs_verified"] == st["graphs_captured"] and st["compiles"] == 0, st


def random_lattices(seed, lengths):
    """The forward-direction schedule of ``check_install.random_lattices`` (the GPU kit's lattice
    batches: the merges of 1 to 3 random segmentations of random characters, so nodes have 1 to 3
    incoming edges and words span 1 to n characters), the batch size and the number of nodes."""
    lattice, _ = check_install.random_lattices(seed, lengths)
    return make_schedule(*lattice[:3]), len(lengths), lattice.in_mask.size(1)


PLAN = ShapePlan(((8, 2), (16, 1)))  # a shape plan for batches of 3 sentences of up to 7 characters


@pytest.mark.parametrize("variant,composition,impl", [("swl", "pooling", "compiled"), ("dwl", "gating", "compiled"),
                                                       ("swl", "pooling", "graphs"), ("dwl", "gating", "graphs"),
                                                       ("swl", "gating", "graphs-plan"), ("dwl", "pooling", "graphs-plan")])
def test_lattice_fast_paths_equal_eager(variant, composition, impl, request, monkeypatch):
    """One direction of the lattice GRU over a padded batch of random lattices: the level loop over
    the padded grid (compiled, or captured with the levels padded to a time bucket, or to the
    declared grid of a shape plan) equals the eager level loop in every node's state, every
    parameter's gradient and the gradient of the edge inputs; positions without a node stay zero."""
    if impl.startswith("graphs"):
        request.getfixturevalue("graphs")
    if impl == "graphs-plan":
        monkeypatch.setattr(cuda_graphs, "_PLAN", [PLAN])
        impl = "graphs"
    torch.manual_seed(0)
    sched, B, P = random_lattices(3, (7, 3, 5))
    layer = LatticeGRU(4, 5, variant, composition, init_scale=0.5)
    x = torch.randn(sched.edge_words.numel(), 4)
    results = {}
    for name in ("eager", impl):
        set_impl(layer, name)
        layer.zero_grad(set_to_none=True)
        xi = x.clone().requires_grad_(True)
        out, _ = layer(xi, sched, B, P)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results[name] = (out.detach(), {n: p.grad.clone() for n, p in layer.named_parameters()}, xi.grad)
    (out_e, grads_e, gx_e), (out_c, grads_c, gx_c) = results["eager"], results[impl]
    assert_close(out_e, out_c, f"{variant} {composition}: states")
    assert_grads_close(grads_e, grads_c, f"{variant} {composition}")
    assert_close(gx_e, gx_c, f"{variant} {composition}: grad of the edge inputs")
    node = torch.zeros(B, P, dtype=torch.bool)
    node[sched.node_batch, sched.node_pos] = True
    assert out_c[~node].abs().sum() == 0 and out_c[node].abs().min() > 0
    if impl == "graphs":
        assert fast_path.stats()["graph_fallbacks"] == 0


def test_capture_grids_captures_every_declared_grid_and_a_batch_then_captures_nothing(graphs, monkeypatch):
    """``capture_grids`` (the capture ahead's for the level loop) captures one training variant per
    grid the plan declares, largest first (one arena, never outgrown); a batch under the plan then
    replays one of them (nothing new captured) and equals the eager level loop."""
    torch.manual_seed(0)
    layer = set_impl(LatticeGRU(4, 5, "dwl", "gating", init_scale=0.5), "graphs")
    n = layer.capture_grids(PLAN, torch.zeros(1))
    st = fast_path.stats()
    assert n == len(declared_grids(PLAN)) == st["graphs_captured"] == st["graphs_live"] == 12, st
    assert st["arenas_outgrown"] == 0 and st["graph_fallbacks"] == 0, st
    monkeypatch.setattr(cuda_graphs, "_PLAN", [PLAN])
    sched, B, P = random_lattices(3, (7, 3, 5))
    x = torch.randn(sched.edge_words.numel(), 4)
    outs = {}
    for name in ("graphs", "eager"):
        set_impl(layer, name)
        layer.zero_grad(set_to_none=True)
        out, _ = layer(x.clone().requires_grad_(True), sched, B, P)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        outs[name] = (out.detach(), {k: p.grad.clone() for k, p in layer.named_parameters()})
    assert fast_path.stats()["graphs_captured"] == 12
    assert_close(outs["eager"][0], outs["graphs"][0], "states")
    assert_grads_close(outs["eager"][1], outs["graphs"][1], "capture_grids then a batch")


def test_lattice_level_grid():
    """Batches of any depth and width map to a few grids: the levels padded to a time bucket (on the
    captured path), the width to a batch bucket of the widest level; every real edge slot reads a
    real node's row (or the zero row); padded slots read the zero row."""
    for seed, lengths in enumerate([(2,), (3, 1), (4, 4, 2), (5, 2), (6, 6, 6, 1), (9, 3), (3, 3, 3, 3, 3)]):
        sched, _, _ = random_lattices(seed, lengths)
        grid = pad_levels(sched)
        assert grid.levels == fast_path.length_bucket(len(sched.steps)) and grid.pre_row.shape == (grid.levels, grid.width)
        assert pad_levels(sched, bucket_levels=False).levels == len(sched.steps)
        assert grid.width in (4, 6, 8, 12, 16)
        real = torch.zeros(grid.levels * grid.width, dtype=torch.bool)
        real[grid.edge_slot] = True
        assert grid.pre_row.view(-1)[~real].eq(0).all() and grid.local.view(-1)[~real].eq(grid.width - 1).all()
        assert set(grid.pre_row.view(-1)[real].tolist()) <= {0} | set((1 + grid.node_slot).tolist())


def test_lattice_level_grid_under_a_shape_plan(monkeypatch):
    """Under a shape plan the captured grid is a declared one: the smallest declared length that
    holds the levels, with its batch size times the smallest edge factor that holds the widest
    level (the next longer length where none does; beyond every declared grid the generic
    buckets); at most K * len(EDGE_FACTORS) grids; the grid of a random batch is declared and
    without a plan the buckets are as before."""
    plan = ShapePlan(((8, 40), (16, 24), (32, 8)))
    assert grid_shape(5, 30, plan) == (8, 40) and grid_shape(8, 41, plan) == (8, 80)
    assert grid_shape(9, 30, plan) == (16, 48) and grid_shape(5, 200, plan) == (8, 240)
    assert grid_shape(20, 30, plan) == (32, 32) and grid_shape(5, 330, plan) == (8, 384)
    assert grid_shape(40, 3, plan) == (64, 4) and grid_shape(40, 3) == (64, 4) and grid_shape(5, 30) == (8, 32)
    grids = declared_grids(plan)
    assert len(grids) <= len(plan.shapes) * len(EDGE_FACTORS) and (16, 24 * 6) in grids
    assert describe_grids(plan).startswith(f"lattice level grids: at most {len(grids)} (levels x width)")
    monkeypatch.setattr(cuda_graphs, "_PLAN", [PLAN])
    for seed, lengths in enumerate([(2,), (3, 1), (7, 4), (5, 2), (6, 6), (7,)]):
        sched, _, _ = random_lattices(seed, lengths)
        grid = pad_levels(sched)
        assert (grid.levels, grid.width) in declared_grids(PLAN), (grid.levels, grid.width)
        widest = max(e1 - e0 for _, e0, e1, _, _ in sched.steps)
        assert (grid.levels, grid.width) == grid_shape(len(sched.steps), widest, PLAN)
        assert pad_levels(sched, bucket_levels=False).levels == len(sched.steps)


# ------------------------------------------------------------------------------------------------
# start-up cost: no unrolling, no recompiles, no compiler under auto
# ------------------------------------------------------------------------------------------------
class GraphSizes:
    """A dynamo backend that records each compiled graph's node count and runs it as traced."""

    def __init__(self):
        self.sizes = []

    def __call__(self, gm, example_inputs):
        self.sizes.append(len(gm.graph.nodes))
        return gm.forward


@pytest.fixture
def counting(monkeypatch):
    fast_path.reset()
    sizes = GraphSizes()
    monkeypatch.setattr(fast_path, "COMPILE_BACKEND", sizes)
    yield sizes
    fast_path.reset()


def _family_runs():
    """One call per family at a given length T: layer steps, the lattice level step, the
    input-feeding decoder step and the LM stack step."""
    torch.manual_seed(0)
    mc = MultiChannelRNNLayer(4, 6, 3, cell="lstm", weight_space="gates")
    pc = ParallelCellRNNLayer(4, 6, wide=2, cell="gru")
    tr = TorchRNNLayer("lstm", 4, 6)

    def layer_run(layer, holes=False):
        def run(T):
            mask = padding(T, 3, "left")
            if holes:
                mask[T // 2, 0] = True
            return layer(torch.randn(T, 3, 4), None, mask)[0]
        return run

    def lattice_run(T):
        layer = LatticeGRU(4, 5, "dwl", "gating")
        set_impl(layer, "compiled")
        sched, B, P = random_lattices(T, (T, max(1, T // 2), 3))
        return layer(torch.randn(sched.edge_words.numel(), 4), sched, B, P)[0]
    return {"mc_rnn": (mc, layer_run(mc)), "parallel": (pc, layer_run(pc)), "torch": (tr, layer_run(tr, True)),
            "lattice": (None, lattice_run)}


@pytest.mark.parametrize("family", ["mc_rnn", "parallel", "torch", "lattice"])
def test_compiled_region_does_not_unroll(family, counting):
    """The compiled region is one step: the same graph, compiled once, runs sequences of 8 and 64
    steps (and lattices of 8 and 64 levels); an unrolled loop would grow with T."""
    module, run = _family_runs()[family]
    if module is not None:
        set_impl(module, "compiled")
    with torch.no_grad():
        run(8)
        after_first = list(counting.sizes)
        run(64)
    assert len(after_first) >= 1 and counting.sizes == after_first, (after_first, counting.sizes)


def test_compiling_says_so_and_a_failure_is_one_line(monkeypatch, caplog):
    """The first call of a compiled step logs that it compiles (a CPU run is otherwise silent for
    tens of seconds); a compiler failure (here a damaged cache's EOFError) is one line (status 2)
    naming the step, the error, ``--rnn-impl eager`` and the cache folder to remove."""
    from fairseq_local_core import errors

    fast_path.reset()

    def damaged(gm, example_inputs):
        raise EOFError("Ran out of input")

    monkeypatch.setattr(fast_path, "COMPILE_BACKEND", damaged)
    layer = set_impl(MultiChannelRNNLayer(4, 6, 2, cell="gru"), "compiled")
    with caplog.at_level("INFO", logger="fairseq_local.modules.fast_path"), \
            pytest.raises(fast_path.CompileError) as e:
        layer(torch.randn(3, 2, 4))
    assert "compiling MultiChannelRNNLayer._step (once per cell" in caplog.text
    line = errors.one_line(e.value)
    assert line.startswith("--rnn-impl compiled: torch.compile of MultiChannelRNNLayer._step failed: EOFError: "
                           "Ran out of input (use --rnn-impl eager; if an interrupted run damaged the compile "
                           "cache, remove ") and "\n" not in line and e.value.exit_code == 2
    fast_path.reset()


def epoch_shapes(shared_data, max_tokens=4000):
    """(B, S, T) of every batch of Multi30k's training set batched by fairseq's ``batch_by_size``
    (words + </s>; sorted by target then source length, as LanguagePairDataset does)."""
    lengths = {}
    for lang in ("de", "en"):
        with open(shared_data / "multi30k-de-en" / f"train.{lang}", encoding="utf-8") as f:
            lengths[lang] = np.array([len(line.split()) + 1 for line in f])
    src, tgt = lengths["de"], lengths["en"]
    order = np.lexsort((src, tgt))
    batches = data_utils.batch_by_size(order, lambda i: max(src[i], tgt[i]), max_tokens=max_tokens,
                                       required_batch_size_multiple=8)
    return [(len(b), int(src[b].max()), int(tgt[b].max())) for b in batches]


def test_a_real_epoch_compiles_nothing_after_two_shapes(shared_data, counting, tmp_path):
    """A tiny MC-RNN-3 translation model (the paper rows' layers, tiny sizes) trains on every batch
    shape of a Multi30k epoch under ``--rnn-impl compiled``: after two warm-up shapes (which differ
    in batch, source and target length) dynamo compiles nothing new (``error_on_recompile``), and the
    whole epoch compiled at most four graphs per step function (grad and no grad, first variants)."""
    shapes = sorted(set(epoch_shapes(shared_data)))
    assert len(shapes) >= 20, len(shapes)
    data = dictionary_dir(tmp_path)
    cfg, model, task = build(data, "translation", "mc_rnn_iwslt_de_en_3", TINY_S2S + ["--rnn-impl", "compiled"])
    model.train()
    g = torch.Generator().manual_seed(0)

    def step(B, S, T):
        src = torch.randint(4, 20, (B, S), generator=g)
        src[1:, :S // 3] = task.source_dictionary.pad()  # left padding, as fairseq batches sources
        prev = torch.randint(4, 20, (B, T), generator=g)
        out = model(src, (src != task.source_dictionary.pad()).sum(1), prev)[0]
        out.float().pow(2).mean().backward()

    warm = [shapes[0], next(s for s in reversed(shapes) if len({*shapes[0], *s}) == 6)]
    for shape in warm:
        step(*shape)
    compiled = len(counting.sizes)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for shape in shapes:
            step(*shape)
    assert len(counting.sizes) == compiled <= 8, counting.sizes


def test_option_parses_and_auto_resolves(tmp_path):
    """--rnn-impl and --graph-fallback are options of every recurrent model (shared dataclass fields)
    and are set on every layer and decoder; auto is eager on CPU (and on CUDA); no parameter or
    buffer depends on them."""
    data = dictionary_dir(tmp_path)
    for model_name in RECURRENT_MODELS:
        task = "language_modeling" if model_name.endswith("_lm") else (
            "lattice_translation" if model_name.startswith("lattice") else "translation")
        args = parse(data, task, model_name, ["--rnn-impl", "compiled"])
        assert args.rnn_impl == "compiled", model_name
        args = parse(data, task, model_name, ["--rnn-impl", "cuda-graphs", "--graph-fallback", "error"])
        assert (args.rnn_impl, args.graph_fallback) == ("cuda-graphs", "error"), model_name
        assert getattr(parse(data, task, model_name, []), "rnn_impl", None) in (None, "auto"), model_name
    with pytest.raises(SystemExit):
        parse(data, "translation", "mc_rnn", ["--rnn-impl", "fast"])
    with pytest.raises(SystemExit):
        parse(data, "translation", "mc_rnn", ["--graph-fallback", "maybe"])
    with pytest.raises(ValueError, match="--rnn-impl must be one of auto, eager, compiled, cuda-graphs"):
        fast_path.check_rnn_impl("fast")
    with pytest.raises(ValueError, match=r"--graph-fallback must be one of warn, error \(got 'maybe'\)"):
        fast_path.check_graph_fallback("maybe")
    cpu = torch.zeros(1)
    assert fast_path.execution("auto", cpu) == fast_path.EAGER
    assert fast_path.execution("cuda-graphs", cpu) == fast_path.EAGER  # no CUDA, no stand-in installed
    assert fast_path.execution("compiled", cpu) == fast_path.Execution(compiled=True, graphs=False)
    assert fast_path.execution("auto", torch.empty(1, device="meta")) == fast_path.EAGER
    models = {impl: build(data, "translation", "mc_rnn_iwslt_de_en_2", TINY_S2S + ["--rnn-impl", impl])[1]
              for impl in ("eager", "compiled")}
    default = build(data, "language_modeling", "mc_rnn_lm", ["--decoder-embed-dim", "6", "--decoder-hidden-size", "6"])
    assert {m.rnn_impl for m in default[1].modules() if isinstance(m, fast_path.FastPathMixin)} == {"auto"}
    assert default[0].model.rnn_impl == "auto" and default[0].model.graph_fallback == "warn"
    strict = build(data, "translation", "mc_rnn_iwslt_de_en_2", TINY_S2S + ["--rnn-impl", "cuda-graphs",
                                                                              "--graph-fallback", "error"])[1]
    assert {(m.rnn_impl, m.strict_graphs) for m in strict.modules() if isinstance(m, fast_path.FastPathMixin)} == \
        {("cuda-graphs", True)}
    impls = {m.rnn_impl for m in models["compiled"].modules() if isinstance(m, fast_path.FastPathMixin)}
    kinds = {type(m).__name__ for m in models["compiled"].modules() if isinstance(m, fast_path.FastPathMixin)}
    assert impls == {"compiled"} and kinds == {"MultiChannelRNNLayer", "RecurrentAttentionDecoder"}
    a, b = (m.state_dict() for m in models.values())
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def s2s(tmp_path_factory):
    data = dictionary_dir(tmp_path_factory.mktemp("dict"))
    cfg, model, task = build(data, "translation", "mc_rnn_iwslt_de_en_2", TINY_S2S)
    return data, cfg, model, task


@pytest.mark.parametrize("impl", ["compiled", "graphs"])
def test_seq2seq_training_step_equals_eager(s2s, impl, request):
    """Loss and every parameter's gradient of a padded batch (encoder layers: layer steps; decoder:
    the input-feeding step, which replaces the StepwiseLinear of the eager loop)."""
    if impl == "graphs":
        request.getfixturevalue("graphs")
    data, cfg, model, task = s2s
    net, tgt = translation_batch(task)
    results = {}
    for impl in ("eager", impl):
        set_impl(model, impl)
        model.train()
        model.zero_grad(set_to_none=True)
        logits = model(**net)[0]
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tgt, ignore_index=task.target_dictionary.pad())
        loss.backward()
        results[impl] = (logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    assert_close(results["eager"][0], results[impl][0], "logits")
    assert_grads_close(results["eager"][1], results[impl][1], "training step")


def incremental(model, net, order=None):
    """Full pass and step-by-step decoding (reordered halfway when ``order``), eval, no grad."""
    tokens = net["prev_output_tokens"]
    enc = model.encoder(net["src_tokens"], net["src_lengths"])
    full = model.decoder(tokens, encoder_out=enc)[0]
    state, steps = {}, []
    for t in range(tokens.size(1)):
        if order is not None and t == tokens.size(1) // 2:
            model.decoder.reorder_incremental_state_scripting(state, order)
            enc = model.encoder.reorder_encoder_out(enc, order)
            tokens, steps = tokens.index_select(0, order), [s.index_select(0, order) for s in steps]
        steps.append(model.decoder(tokens[:, : t + 1], encoder_out=enc, incremental_state=state)[0][:, -1])
    return full, torch.stack(steps, 1)


@pytest.mark.parametrize("impl", ["compiled", "graphs"])
def test_seq2seq_incremental_equals_full(s2s, impl, request):
    if impl == "graphs":
        request.getfixturevalue("graphs")
    data, cfg, model, task = s2s
    net, _ = translation_batch(task)
    set_impl(model, impl)
    model.eval()
    with torch.no_grad():
        full, inc = incremental(model, net)
        assert_close(full, inc, f"incremental vs full ({impl})")
        order = torch.tensor([2, 0, 2])
        full2, inc2 = incremental(model, net, order)
        assert_close(full2.index_select(0, order), inc2, f"incremental after reorder ({impl})")
        set_impl(model, "eager")
        assert_close(incremental(model, net)[1], inc, f"{impl} vs eager incremental")


@pytest.mark.parametrize("impl", ["compiled", "graphs"])
def test_beam_search_same_hypotheses(s2s, impl, request):
    from fairseq.sequence_generator import SequenceGenerator

    if impl == "graphs":
        request.getfixturevalue("graphs")
    data, cfg, model, task = s2s
    net, _ = translation_batch(task)
    sample = {"net_input": {k: v for k, v in net.items() if k != "prev_output_tokens"}}
    model.eval()
    hyps = {}
    for name in ("eager", impl):
        set_impl(model, name)
        gen = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=5)
        with torch.no_grad():
            out = gen.generate([model], sample)
        hyps[name] = [[(h["tokens"].tolist(), h["score"].item()) for h in sent] for sent in out]
    for sent_e, sent_c in zip(hyps["eager"], hyps[impl]):
        assert [t for t, _ in sent_e] == [t for t, _ in sent_c]
        assert [s for _, s in sent_e] == pytest.approx([s for _, s in sent_c], rel=1e-5, abs=1e-6)


def test_checkpoint_loads_under_either_impl(s2s, tmp_path):
    """Saved under ``compiled``, loaded as saved, as ``eager`` (--model-overrides), and with the
    option deleted (a checkpoint older than it: loads as ``auto``): identical outputs."""
    from fairseq.trainer import Trainer

    data, cfg, model, task = s2s
    cfg = copy.deepcopy(cfg)
    cfg.model.rnn_impl = "compiled"
    fast_path.set_rnn_impl(model, "compiled")
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    path = str(tmp_path / "checkpoint.pt")
    trainer.consolidate_optimizer()
    trainer.save_checkpoint(path, {"train_iterator": {"epoch": 1}, "val_loss": None})
    old = torch.load(path, map_location="cpu", weights_only=True)
    del old["cfg"]["model"]["rnn_impl"]
    old_path = str(tmp_path / "old.pt")
    torch.save(old, old_path)
    net, _ = translation_batch(task)
    model.eval()
    with torch.no_grad():
        ref = model(**net)[0]
    for p, overrides, impl in ((path, {}, "compiled"), (path, {"rnn_impl": "eager"}, "eager"), (old_path, {}, "auto")):
        (loaded,), _, _ = checkpoint_utils.load_model_ensemble_and_task([p], arg_overrides={"data": data, **overrides})
        assert {m.rnn_impl for m in loaded.modules() if isinstance(m, fast_path.FastPathMixin)} == {impl}
        loaded.eval()
        with torch.no_grad():
            out = loaded(**net)[0]
        assert_close(ref, out, f"{impl}: output after loading", rtol=1e-6)
        if impl != "compiled":
            assert torch.equal(out, run_eager(model, net)), impl  # eager on CPU: bit-identical


def run_eager(model, net):
    fast_path.set_rnn_impl(model, "eager")
    with torch.no_grad():
        out = model(**net)[0]
    fast_path.set_rnn_impl(model, "compiled")
    return out


@pytest.mark.parametrize("impl", ["compiled", "graphs"])
def test_lm_incremental_step(tmp_path, impl, request):
    """The LM decoder's incremental step is one step of the whole layer stack (compiled, or
    captured with the batch padded to its bucket): step-by-step == the full pass and == eager, also
    after reorder."""
    if impl == "graphs":
        request.getfixturevalue("graphs")
    data = dictionary_dir(tmp_path)
    cfg, model, task = build(data, "language_modeling", "parallel_lstm_lm",
                             ["--decoder-embed-dim", "6", "--decoder-hidden-size", "6", "--wide", "2",
                              "--dropout", "0", "--tokens-per-sample", "8"])
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(4, 20, (3, 4), generator=g)
    model.eval()
    results = {}
    with torch.no_grad():
        for name in ("eager", impl):
            set_impl(model, name)
            full = model.decoder(tokens)[0]
            state, steps = {}, []
            order = torch.tensor([1, 1, 0])
            toks = tokens
            for t in range(tokens.size(1)):
                if t == 2:
                    model.decoder.reorder_incremental_state_scripting(state, order)
                    toks, steps = toks.index_select(0, order), [s.index_select(0, order) for s in steps]
                steps.append(model.decoder(toks[:, : t + 1], incremental_state=state)[0][:, -1])
            results[name] = (full, torch.stack(steps, 1))
            assert_close(full.index_select(0, order), results[name][1], f"{name}: incremental vs full")
    assert_close(results["eager"][1], results[impl][1], f"{impl} vs eager steps")


def test_fast_path_classes_are_the_recurrent_modules():
    """Every layer and decoder with a time loop has the switch and one step method (the lattice
    encoder's loop runs over topological levels; its decoder is a RecurrentAttentionDecoder)."""
    steps = {MultiChannelRNNLayer: "_step", ParallelCellRNNLayer: "_step", TorchRNNLayer: "_step",
             RecurrentAttentionDecoder: "_feed_step", RecurrentLMDecoder: "_stack_step", LatticeGRU: "_level_step"}
    for cls, step in steps.items():
        assert issubclass(cls, fast_path.FastPathMixin) and callable(getattr(cls, step)), cls


def test_gpu_kit_fast_path_check_on_cpu(tmp_path):
    """scripts/gpu/check_install.py --fast-path (what ``run_all.sh --part check`` runs on a GPU) at
    its tiny sizes on CPU (``compiled`` only: CPU has no CUDA graphs): every check passes and reports
    its timings and start-up costs.  The lattice encoder's batch has several levels and sentences of
    different lengths, and both directions share one level grid."""
    report = check_install.fast_path_check("cpu", tiny=True)
    assert report["device"] == "cpu" and report["sizes"] == dict(T=5, B=3, I=4, H=6)
    assert set(report["checks"]) == {"mc_rnn3_lstm_gates", "parallel_lstm_wide2", "torch_gru_masked",
                                     "lattice_dwl_gating", "mc_rnn2_model_step_and_beam5"}
    for name, rec in report["checks"].items():
        assert rec["ok"], (name, rec)
        if name != "mc_rnn2_model_step_and_beam5":
            assert rec["eager_fwd_bwd_ms"] >= 0 and rec["compiled_fwd_bwd_ms"] >= 0
            assert set(rec["compiled_startup"]) >= {"compiles", "compile_fwd_s", "capture_s", "kernels"}
    lattice = report["checks"]["lattice_dwl_gating"]
    assert lattice["lattices"] == 3 and lattice["characters"] == [3, 6]
    assert lattice["grids"] == [{"levels": 4, "padded_levels": 8, "width": 4, "edges": 13}] * 2
    assert report["fast_path_stats"]["compiles"] >= 4
