"""The one wrapper on each fairseq function that more than one behaviour of the plugin changes.

What it changes: ``checkpoint_utils.load_checkpoint_to_cpu``, ``Trainer.load_checkpoint``, ``save_checkpoint`` and ``get_train_iterator``,
``FairseqTask.get_batch_iterator`` and ``build_generator``, ``distributed_utils.call_main``,
``fairseq.dataclass.initialize.add_defaults`` (and the name ``add_defaults`` that
``fairseq_cli.train``, ``hydra_train`` and ``hydra_validate`` import from it) and
``fairseq_cli.preprocess.main``.  For whom: nobody by itself: each wrapper calls fairseq's function
through the layers the behaviour modules add (:mod:`fairseq_local.hook_points`), and with no layer
it is fairseq's call.  Why: two patches wrapping one function would each wrap the other's wrapper,
in an order set by whichever installed last; here each target is wrapped once and its layers run
in the order of ``patches.ORDER`` (the first installed innermost):

* ``Trainer.load_checkpoint``: ``checkpoint_fit`` (the checks of a resumed checkpoint), then
  ``exact_resume`` (restores our runs' stopping state after them);
* ``Trainer.save_checkpoint``: ``dictionary_fingerprint`` (every checkpoint's dictionaries), then
  ``exact_resume`` (our runs' stale count and batches);
* ``Trainer.get_train_iterator``: ``shape_plan_batching`` (capture ahead for our ``--rnn-impl
  cuda-graphs`` models), then ``exact_resume`` (the batches of a resumed run of ours);
* ``distributed_utils.call_main``: ``option_checks`` (the checks of every run), then ``precision``
  (``--bf16`` without a TPU, ``--fp16`` without CUDA);
* ``add_defaults``: ``option_checks`` (the checks of every run, after fairseq fills the defaults:
  ``fairseq-hydra-train``'s ``call_main`` runs before the plugin is imported), then
  ``hydra_arch_defaults`` (a YAML's model filled from its arch first);
* ``fairseq_cli.preprocess.main``: ``option_checks`` (the preprocessing options), then
  ``preprocess_input`` (blank lines in the input files);
* ``FairseqTask.get_batch_iterator``: ``complete_batches`` (our tasks keep every sentence), then
  ``shape_plan_batching`` (the declared shapes of our ``--rnn-impl cuda-graphs`` models);
* ``FairseqTask.build_generator``: ``option_checks`` (the generation options), then
  ``shape_plan_batching`` (the beam of our ``--rnn-impl cuda-graphs`` models).

* ``checkpoint_utils.load_checkpoint_to_cpu``: :mod:`fairseq_local.safe_loading` (the allow-list
  and one-line refusals; added when the plugin is imported, before the patches), then
  ``checkpoint_fit`` (which model and task a checkpoint holds).  The modules of
fairseq's command-line programs are wrapped where they are imported before the plugin (the CLIs
import the plugin from their ``main``), whenever :func:`install` runs.
"""
import functools
import sys

from fairseq import checkpoint_utils
from fairseq.dataclass import initialize
from fairseq.distributed import utils as distributed_utils
from fairseq.tasks import FairseqTask
from fairseq.trainer import Trainer

from fairseq_local import hook_points

_MARK = "_fairseq_local_hook_point"
_DEFAULTS_USERS = ("fairseq_cli.train", "fairseq_cli.hydra_train", "fairseq_cli.hydra_validate")
_STATE = {}


def _layered(point, function):
    """``function`` through the layers at ``point``."""
    @functools.wraps(function)
    def layered(*args, **kwargs):
        return hook_points.run(point, function, *args, **kwargs)

    setattr(layered, _MARK, point)
    return layered


def wrapped_point(function):
    """The hook point whose wrapper ``function`` is (None for any other function)."""
    return getattr(function, _MARK, None)


def _wrap_cli_modules():
    preprocess = sys.modules.get("fairseq_cli.preprocess")
    if preprocess is not None and wrapped_point(preprocess.main) is None:
        preprocess.main = _layered(hook_points.PREPROCESS_MAIN, preprocess.main)
    for name in _DEFAULTS_USERS:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "add_defaults", None) is _STATE["add_defaults"]:
            module.add_defaults = initialize.add_defaults


def install():
    if not _STATE:
        _STATE["add_defaults"] = initialize.add_defaults
        checkpoint_utils.load_checkpoint_to_cpu = _layered(hook_points.LOAD_CHECKPOINT_TO_CPU,
                                                           checkpoint_utils.load_checkpoint_to_cpu)
        Trainer.load_checkpoint = _layered(hook_points.TRAINER_LOAD_CHECKPOINT, Trainer.load_checkpoint)
        Trainer.save_checkpoint = _layered(hook_points.TRAINER_SAVE_CHECKPOINT, Trainer.save_checkpoint)
        Trainer.get_train_iterator = _layered(hook_points.TRAINER_GET_TRAIN_ITERATOR, Trainer.get_train_iterator)
        FairseqTask.get_batch_iterator = _layered(hook_points.GET_BATCH_ITERATOR, FairseqTask.get_batch_iterator)
        FairseqTask.build_generator = _layered(hook_points.BUILD_GENERATOR, FairseqTask.build_generator)
        distributed_utils.call_main = _layered(hook_points.CALL_MAIN, distributed_utils.call_main)
        initialize.add_defaults = _layered(hook_points.ADD_DEFAULTS, initialize.add_defaults)
    _wrap_cli_modules()
