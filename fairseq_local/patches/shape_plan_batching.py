"""Few batch shapes, captured before the first update: the batching of ``--rnn-impl cuda-graphs``.

**For whom.**  Our models (classes of ``fairseq_local``) built with ``--rnn-impl cuda-graphs``
(:func:`graphs_requested`); fairseq's models and every other ``--rnn-impl`` keep fairseq's batching
untouched, byte for byte.  ``build_model`` is wrapped here; the other three targets, which other
patches change too, get this module's layers (:mod:`fairseq_local.hook_points`, wrapped once by
``patches/shared_targets.py``).

**What changes.**  A CUDA graph is specialised to its shapes: with fairseq's ``batch_by_size`` a
captured module meets about a hundred padded shapes in an IWSLT-like epoch and keeps capturing
mid-run.  :func:`install` wraps

* ``FairseqTask.build_model``: a task that builds such a model (fairseq-train, fairseq-generate's
  ``load_model_ensemble``, the hub) batches with the shape plan from then on;
* ``FairseqTask.get_batch_iterator`` (training, validation, generation): for such a task the
  dataset's ``batch_by_size`` becomes :func:`fairseq_local.data.shape_buckets.plan_batches` (K
  declared (length, batch) shapes made from ``--max-tokens`` and the longest sentence; every
  sentence kept) and its collater pads source and target to the batch's declared length; the plan
  is logged once (one line: K and the shapes) and declared to the captured loops
  (``cuda_graphs.set_shape_plan``), which pad every call to a declared shape;
* ``FairseqTask.build_generator``: beam search's one-token steps have ``B * beam`` rows, declared
  with the plan's batch sizes;
* ``Trainer.get_train_iterator`` (fairseq-train builds the first epoch's iterator before its data
  loader's worker and pinning threads start): :func:`capture_ahead` runs forward and backward of one
  batch of each training shape, and of every level grid the plan declares for the lattice encoder's
  loops (``LatticeGRU.capture_grids``), so every training variant is captured before those threads exist
  (CUDA's capture must not race another thread's allocations; a second pass captures again the
  variants dropped when a later capture outgrew their loop's arena), then restores the gradients, the
  buffers and the random state, so training goes on exactly as without it.  The count cap of live
  variants is at least what it captured (``cuda_graphs.keep_live``; the byte budget still holds).
  Its seconds are logged and kept in ``fast_path.stats()["capture_ahead_s"]``.

**Why.**  A bounded number of graphs per module (K training variants, whatever the corpus), no
capture in the middle of an epoch, and epoch 2 captures nothing new.
"""
import contextlib
import functools
import logging
import sys
import time

import torch
from fairseq.data import FairseqDataset
from fairseq.tasks import FairseqTask

from fairseq_local import hook_points
from fairseq_local.data.shape_buckets import collate_to_plan, dataset_sizes, make_plan, plan_batches
from fairseq_local.modules import cuda_graphs, fast_path

logger = logging.getLogger(__name__)

GRAPHS_IMPL = "cuda-graphs"
_MARK = "_fairseq_local_shape_plan_batching"
_TASK_GRAPHS = "_fairseq_local_graphs_model"  # task attribute: it built a model with graphs on
_TASK_PLAN = "_fairseq_local_shape_plan"  # task attribute: the plan its batches follow
_TASK_GRIDS = "_fairseq_local_grid_descriptions"  # task attribute: its model's own padded grids, per plan
_WARMED = "_fairseq_local_captured_ahead"  # trainer attribute


def graphs_requested(model) -> bool:
    """Whether ``model`` is one of ours with a loop set to ``--rnn-impl cuda-graphs``."""
    if not type(model).__module__.startswith("fairseq_local."):
        return False
    return any(isinstance(m, fast_path.FastPathMixin) and getattr(m, "rnn_impl", None) == GRAPHS_IMPL
               for m in model.modules())


def _declare(task, plan, new: bool):
    setattr(task, _TASK_PLAN, plan)
    cuda_graphs.set_shape_plan(plan)
    if new:
        logger.info(plan.describe())
        for describe in getattr(task, _TASK_GRIDS, ()):
            logger.info(describe(plan))


def _planned_batch_by_size(task, dataset):
    """``dataset.batch_by_size`` for a task with graphs: the plan's batches."""

    def batch_by_size(indices, max_tokens=None, max_sentences=None, required_batch_size_multiple=1):
        sizes = dataset_sizes(dataset, indices)
        plan = getattr(task, _TASK_PLAN, None)
        new = plan is None and len(sizes) > 0
        if new:
            plan = make_plan(max_tokens, sizes, max_sentences=max_sentences, multiple=required_batch_size_multiple)
        if plan is None:
            return []
        batches, plan = plan_batches(indices, sizes, plan)
        _declare(task, plan, new)
        return batches

    return batch_by_size


def _planned_collater(task, dataset, collater):
    def collate(samples, **kwargs):
        plan = getattr(task, _TASK_PLAN, None)
        if plan is None or kwargs:
            return collater(samples, **kwargs)
        return collate_to_plan(collater, dataset, plan, samples)

    return collate


def _use_plan(task, dataset):
    """Make ``dataset`` batch and collate with ``task``'s plan (once per dataset)."""
    if getattr(dataset, _MARK, False) or not isinstance(dataset, FairseqDataset):
        return
    dataset.batch_by_size = _planned_batch_by_size(task, dataset)
    dataset.collater = _planned_collater(task, dataset, dataset.collater)
    setattr(dataset, _MARK, True)


def _training_samples(epoch_itr):
    """One batch of each training shape of the plan: the largest batch of each bucket, collated."""
    batches = epoch_itr.frozen_batches
    if not batches:
        return []
    plan = cuda_graphs.shape_plan()
    sizes = [dataset_sizes(epoch_itr.dataset, b) for b in batches]
    largest = {}
    for batch, size in zip(batches, sizes):  # a loop over batches
        k = int(plan.bucket_of([int(size.max())])[0])
        if k not in largest or len(batch) > len(largest[k]):
            largest[k] = batch
    return [epoch_itr.collate_fn([epoch_itr.dataset[int(i)] for i in largest[k]]) for k in sorted(largest)]


def capture_ahead(trainer, samples) -> float:
    """Forward and backward of each of ``samples`` (the training shapes), as training runs them,
    leaving gradients, buffers and random state as they were; returns its seconds."""
    model, criterion = trainer.model, trainer.criterion
    device = next(model.parameters()).device
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if device.type == "cuda" else None
    grads = [(p, p.grad) for p in model.parameters()]
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    modes = [(m, m.training) for m in (model, criterion)]
    amp = bool(getattr(trainer.cfg.common, "amp", False))
    start = time.perf_counter()
    model.train()
    criterion.train()
    sync = model.no_sync if hasattr(model, "no_sync") else None
    cuda_graphs.keep_live(sys.maxsize)  # no count cap while the declared shapes are captured
    try:
        for m in model.modules():  # loops that pad to grids of their own: every declared grid
            if hasattr(m, "capture_grids"):
                with sync() if sync is not None else contextlib.nullcontext():
                    with torch.autocast(device.type, enabled=amp):
                        m.capture_grids(cuda_graphs.shape_plan(), next(model.parameters()))
        # a second pass when a capture outgrew its loop's arena (the variants laid out in the smaller
        # one were dropped): the arenas have their final sizes then, so it captures those again
        for _ in range(2):
            outgrown = cuda_graphs.stats()["arenas_outgrown"]
            for sample in samples:
                sample, _ = trainer._prepare_sample(sample)
                for p, _ in grads:
                    p.grad = None
                with sync() if sync is not None else contextlib.nullcontext():
                    with torch.autocast(device.type, enabled=amp):
                        loss = criterion(model, sample)[0]
                    loss.backward()
            if cuda_graphs.stats()["arenas_outgrown"] == outgrown:
                break
    finally:
        cuda_graphs.keep_live(cuda_graphs.stats()["graphs_live"])
        with torch.no_grad():
            for p, g in grads:
                p.grad = g
            for b, saved in buffers:
                b.copy_(saved)
        for m, mode in modes:
            m.train(mode)
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
    seconds = time.perf_counter() - start
    fast_path.add_capture_ahead(seconds)
    return seconds


def install():
    if getattr(FairseqTask.build_model, _MARK, False):
        return
    build_model = FairseqTask.build_model

    @functools.wraps(build_model)
    def build_model_marking(self, *args, **kwargs):
        model = build_model(self, *args, **kwargs)
        if graphs_requested(model):
            setattr(self, _TASK_GRAPHS, True)
            # loops that pad to grids of their own (the lattice levels) say their bound with the plan
            setattr(self, _TASK_GRIDS, list(dict.fromkeys(
                type(m).grid_description for m in model.modules() if hasattr(type(m), "grid_description"))))
        return model

    def get_batch_iterator(get_iterator, self, dataset, *args, **kwargs):
        if getattr(self, _TASK_GRAPHS, False):
            _use_plan(self, dataset)
        return get_iterator(self, dataset, *args, **kwargs)

    def build_generator_declaring_beam(build_generator, self, models, args, *rest, **kwargs):
        plan = getattr(self, _TASK_PLAN, None)
        if plan is not None:
            _declare(self, plan._replace(beam=max(1, int(getattr(args, "beam", 1) or 1))), False)
        return build_generator(self, models, args, *rest, **kwargs)

    def get_train_iterator_capturing_ahead(get_train_iterator, self, *args, **kwargs):
        epoch_itr = get_train_iterator(self, *args, **kwargs)
        if getattr(self.task, _TASK_PLAN, None) is not None and not getattr(self, _WARMED, False) \
                and cuda_graphs.available(next(self.model.parameters())):
            setattr(self, _WARMED, True)
            samples = _training_samples(epoch_itr)
            seconds = capture_ahead(self, samples)
            logger.info(f"capture ahead: {len(samples)} training shapes captured in {seconds:.1f} s "
                        "before the first update")
        return epoch_itr

    setattr(build_model_marking, _MARK, True)
    FairseqTask.build_model = build_model_marking
    # the targets other patches change too: layers (fairseq_local/hook_points.py, patches/shared_targets.py)
    hook_points.add(hook_points.GET_BATCH_ITERATOR, get_batch_iterator)
    hook_points.add(hook_points.BUILD_GENERATOR, build_generator_declaring_beam)
    hook_points.add(hook_points.TRAINER_GET_TRAIN_ITERATOR, get_train_iterator_capturing_ahead)
