"""The shape plan of ``--rnn-impl cuda-graphs`` (fairseq_local/data/shape_buckets.py), the padding
to its shapes (``cuda_graphs.padded_shape``) and the patch that batches with it and captures ahead
(fairseq_local/patches/shape_plan_batching.py)."""
import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn as nn
from fairseq.data import Dictionary, LanguagePairDataset, data_utils
from fairseq.trainer import Trainer

from fairseq_local.data.shape_buckets import (
    ShapePlan,
    batch_length,
    collate_to_plan,
    grid_length,
    make_plan,
    plan_batches,
)
from fairseq_local.modules import cuda_graphs, fast_path, lattice_gru
from fairseq_local.patches import shape_plan_batching
from contract_lib import make_translation_data
from fast_path_lib import TINY_S2S, _single_thread, build, dictionary_dir  # noqa: F401  (a fixture)

GRAPHS = "cuda-graphs" if "cuda-graphs" in fast_path.RNN_IMPLS else "auto"


@pytest.fixture(autouse=True)
def _no_plan():
    cuda_graphs.set_shape_plan(None)
    yield
    cuda_graphs.set_shape_plan(None)


def test_grid_and_batch_sizes():
    assert [grid_length(n) for n in (1, 8, 9, 11, 13, 17, 25, 33, 49, 176)] == [8, 8, 10, 12, 16, 20, 32, 40, 64, 192]
    plan = make_plan(1000, [3, 9, 30], multiple=8)
    assert plan.shapes == ((8, 120), (10, 96), (12, 80), (16, 56), (20, 48), (24, 40), (32, 24))
    assert make_plan(1000, [3, 9, 30], max_sentences=50).shapes[0] == (8, 50)
    assert make_plan(100, [90, 300], max_positions=100).shapes == ((96, 1), (128, 1))


def test_every_sentence_in_the_smallest_bucket_that_holds_it_nothing_dropped():
    rng = np.random.RandomState(0)
    sizes = rng.randint(1, 70, 500)
    plan = make_plan(640, sizes)
    indices = rng.permutation(500)
    batches, same = plan_batches(indices, sizes[indices], plan)
    assert same == plan
    assert sorted(np.concatenate(batches).tolist()) == list(range(500))
    lengths = [n for n, _ in plan.shapes]
    seen = {}
    for b in batches:
        k = int(np.searchsorted(lengths, sizes[b].max()))
        assert sizes[b].min() > (lengths[k - 1] if k else 0), "a sentence in a bucket larger than its own"
        seen.setdefault(k, []).append(len(b))
    for k, rows in seen.items():  # full batches of B_k, the last of a bucket smaller
        assert all(r == plan.shapes[k][1] for r in rows[:-1]) and 0 < rows[-1] <= plan.shapes[k][1], (k, rows)
    # fairseq's order inside a bucket
    order = {int(i): j for j, i in enumerate(indices)}
    assert all(np.all(np.diff([order[int(i)] for i in b]) > 0) for b in batches)


def test_a_sentence_longer_than_every_bucket_gets_its_own_and_the_log_says_so(caplog):
    plan = make_plan(400, [5, 20])
    with caplog.at_level(logging.WARNING):
        batches, longer = plan_batches(np.arange(3), np.array([5, 20, 70]), plan)
    assert longer.shapes[:len(plan.shapes)] == plan.shapes and longer.shapes[-1] == (80, 5)
    assert [sorted(b.tolist()) for b in batches] == [[0], [1], [2]]
    assert "a sentence of 70 tokens is longer than the largest declared bucket (20)" in caplog.text
    assert "nothing truncated" in caplog.text


def test_padded_shape_pads_to_the_first_declared_shape_that_holds_the_call():
    assert cuda_graphs.padded_shape(9, 5) == (cuda_graphs.length_bucket(9), cuda_graphs.batch_bucket(5))
    cuda_graphs.set_shape_plan(ShapePlan(((8, 50), (16, 25), (32, 12)), beam=4))
    assert cuda_graphs.padded_shape(9, 5) == (16, 25)
    assert cuda_graphs.padded_shape(9, 30) == (16, cuda_graphs.batch_bucket(30))  # no shape holds it
    assert cuda_graphs.padded_shape(3, 50) == (8, 50) and cuda_graphs.padded_shape(20, 1) == (32, 12)
    assert cuda_graphs.padded_shape(1, 13) == (1, 25) and cuda_graphs.padded_shape(1, 60) == (1, 100)
    assert cuda_graphs.padded_shape(1, 500) == (1, cuda_graphs.batch_bucket(500))


def test_the_collater_pads_source_and_target_to_the_declared_length():
    src = [torch.tensor([5, 6, 2]), torch.tensor([7, 2])]
    tgt = [torch.tensor([8, 9, 5, 6, 2]), torch.tensor([4, 2])]
    dic = Dictionary()
    for i in range(10):
        dic.add_symbol(f"w{i}")
    ds = LanguagePairDataset(src, torch.tensor([3, 2]), dic, tgt, torch.tensor([5, 2]), dic)
    plan = ShapePlan(((4, 8), (8, 4)))
    assert batch_length(plan, [5, 2]) == 8
    batch = collate_to_plan(ds.collater, ds, plan, [ds[0], ds[1]])
    assert batch["net_input"]["src_tokens"].shape == (2, 8) and batch["target"].shape == (2, 8)
    plain = ds.collater([ds[0], ds[1]])
    assert torch.equal(batch["net_input"]["src_tokens"][:, -3:], plain["net_input"]["src_tokens"])  # left padded
    assert torch.equal(batch["target"][:, :5], plain["target"]) and batch["ntokens"] == plain["ntokens"]


# ------------------------------------------------------------------------------------------------
# the patch: batching of fairseq-train's trainer, capture ahead
# ------------------------------------------------------------------------------------------------
def _trainer(data, lang_args, impl, monkeypatch):
    if impl == "cuda-graphs" and GRAPHS != "cuda-graphs":  # a branch whose --rnn-impl has no opt-in name yet
        monkeypatch.setattr(fast_path, "check_rnn_impl", lambda value: "cuda-graphs")
        impl = "auto"
    extra = TINY_S2S + lang_args + ["--rnn-impl", impl, "--max-tokens", "40", "--seed", "3"]
    cfg, model, task = build(str(data), "translation", "mc_rnn_iwslt_de_en_3", extra)
    task.load_dataset("train")
    return Trainer(cfg, task, model, task.build_criterion(cfg.criterion)), task


def _losses(trainer, n=4):
    itr = trainer.get_train_iterator(epoch=1).next_epoch_itr(shuffle=True)
    return [trainer.train_step([sample])["loss"] for _, sample in zip(range(n), itr)]


@pytest.fixture(scope="module")
def translation_data(tmp_path_factory):
    return make_translation_data(tmp_path_factory.mktemp("data"), n_train=40)


def test_plain_models_keep_fairseqs_batches_graph_models_get_the_plan(translation_data, monkeypatch):
    data, lang_args = translation_data
    eager, task = _trainer(data, lang_args, "eager", monkeypatch)
    batches = eager.get_train_iterator(epoch=1).frozen_batches
    ds = task.dataset("train")
    sizes = np.maximum(ds.src_sizes, ds.tgt_sizes).astype(np.int64)
    with data_utils.numpy_seed(3 + 1):
        indices = ds.ordered_indices()
    expected = data_utils.batch_by_size(indices, ds.num_tokens, sizes[indices].astype(np.int64), max_tokens=40,
                                        required_batch_size_multiple=8)
    expected = [list(b) for b in expected]
    # fairseq's batches, then the sentences fairseq would drop, which complete_batches keeps for our models
    seen = {i for b in expected for i in b}
    dropped = [int(i) for i in indices if i not in seen]
    got = [b.tolist() for b in batches]
    assert got[:len(expected)] == expected and sorted(i for b in got[len(expected):] for i in b) == sorted(dropped)
    assert cuda_graphs.shape_plan() is None
    with cuda_graphs.use_backend("cpu", cuda_graphs.ReplayBackend()):
        graphs, task = _trainer(data, lang_args, "cuda-graphs", monkeypatch)
        itr = graphs.get_train_iterator(epoch=1)
    plan = cuda_graphs.shape_plan()
    assert plan is not None and plan == make_plan(40, sizes, multiple=8)
    assert [b.tolist() for b in itr.frozen_batches] == [b.tolist() for b in plan_batches(indices, sizes[indices], plan)[0]]
    sample = itr.first_batch
    assert sample["net_input"]["src_tokens"].size(1) == batch_length(plan, sizes[sample["id"].numpy()])


def test_capture_ahead_captures_every_training_shape_and_changes_no_loss(translation_data, monkeypatch, caplog):
    data, lang_args = translation_data
    runs = {}
    for ahead in (True, False):
        fast_path.reset()
        with cuda_graphs.use_backend("cpu", cuda_graphs.ReplayBackend()):
            trainer, _ = _trainer(data, lang_args, "cuda-graphs", monkeypatch)
            if not ahead:
                setattr(trainer, shape_plan_batching._WARMED, True)
            rng = torch.get_rng_state()
            params = [p.detach().clone() for p in trainer.model.parameters()]
            with caplog.at_level(logging.INFO):
                itr = trainer.get_train_iterator(epoch=1)
            assert torch.equal(torch.get_rng_state(), rng)
            assert all(torch.equal(a, p) for a, p in zip(params, trainer.model.parameters()))
            assert all(p.grad is None for p in trainer.model.parameters())
            captured = fast_path.stats()["graphs_captured"]
            losses = _losses(trainer)
            runs[ahead] = (losses, captured, fast_path.stats())
        assert itr is not None
    (warm, captured, stats), (cold, none, _) = runs[True], runs[False]
    assert warm == cold, (warm, cold)
    assert none == 0 and captured > 0 and stats["graphs_captured"] == captured, stats  # training captured nothing new
    assert stats["capture_ahead_s"] > 0 and stats["graph_fallbacks"] == 0
    assert "capture ahead: " in caplog.text and "shape plan: K=" in caplog.text


def test_capture_ahead_captures_again_what_an_outgrown_arena_dropped(translation_data, monkeypatch):
    """In either order of the training shapes, every training variant is live after the capture
    ahead and training captures nothing new; in one order a later shape outgrows a loop's arena
    (its earlier variants are dropped), and the second pass captures them again."""
    data, lang_args = translation_data
    outgrown = []
    planned = shape_plan_batching._training_samples
    for order in (1, -1):
        fast_path.reset()
        monkeypatch.setattr(shape_plan_batching, "_training_samples", lambda itr, o=order: planned(itr)[::o])
        with cuda_graphs.use_backend("cpu", cuda_graphs.ReplayBackend()):
            trainer, _ = _trainer(data, lang_args, "cuda-graphs", monkeypatch)
            trainer.get_train_iterator(epoch=1)
            ahead = fast_path.stats()
            _losses(trainer)
            after = fast_path.stats()
        assert ahead["graphs_live"] == ahead["graphs_captured"] - ahead["arenas_outgrown"] == 6, ahead
        assert after["graphs_captured"] == ahead["graphs_captured"] and after["graphs_live"] == 6, after
        outgrown.append(ahead["arenas_outgrown"])
    assert min(outgrown) == 0 < max(outgrown), outgrown


def test_capture_ahead_captures_every_declared_lattice_grid_and_keeps_them_live(monkeypatch):
    """A model with a bidirectional lattice encoder: the capture ahead captures every level grid the
    plan declares, in both directions, whatever grids its sampled batches meet (none here); all of
    them stay live past the count cap, and the gradients are left as they were."""
    monkeypatch.setattr(cuda_graphs, "MAX_LIVE_GRAPHS", 4)
    plan = ShapePlan(((8, 2), (16, 1)))
    model = lattice_gru.BiLatticeGRU(4, 5)
    fast_path.set_rnn_impl(model, "cuda-graphs")
    trainer = SimpleNamespace(model=model, criterion=nn.Identity(), cfg=SimpleNamespace(common=SimpleNamespace()))
    fast_path.reset()
    cuda_graphs.set_shape_plan(plan)
    try:
        with cuda_graphs.use_backend("cpu", cuda_graphs.ReplayBackend()), cuda_graphs.strict_mode():
            shape_plan_batching.capture_ahead(trainer, [])
            st = fast_path.stats()
            declared = len(lattice_gru.declared_grids(plan))
            assert st["graphs_captured"] == st["graphs_live"] == 2 * declared == 24, st
            assert st["variants"] == {"LatticeGRU._level_step": 24} and st["graph_fallbacks"] == 0, st
            assert cuda_graphs._KEEP[0] == 24 and all(p.grad is None for p in model.parameters())
    finally:
        cuda_graphs.set_shape_plan(None)


def test_a_lattice_model_names_its_level_grid_bound_with_the_plan(tmp_path, caplog):
    """With graphs on, the plan's start-up line is followed by the lattice encoder's bound on its
    level grids (``lattice_gru.describe_grids``); a model without lattices logs the plan alone."""
    plan = ShapePlan(((8, 40), (16, 24)))
    data = dictionary_dir(tmp_path)
    for arch, task_name, extra, want in [
            ("lattice_dwl_gating", "lattice_translation", ["--source-lang", "src", "--target-lang", "tgt"], True),
            ("mc_rnn", "translation", TINY_S2S, False)]:
        _, _, task = build(data, task_name, arch, extra + ["--rnn-impl", "cuda-graphs"])
        caplog.clear()
        with caplog.at_level(logging.INFO):
            shape_plan_batching._declare(task, plan, True)
        assert "shape plan: K=2 batch shapes (length x batch) 8x40 16x24" in caplog.text
        assert ("lattice level grids: at most 12 (levels x width) per direction" in caplog.text) == want, arch
