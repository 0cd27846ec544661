"""A checkpoint given to a tool that cannot use it is one line naming the checkpoint and the fix.

What it changes: ``checkpoint_utils.load_model_ensemble_and_task``, and through layers
(:mod:`fairseq_local.hook_points`) ``checkpoint_utils.load_checkpoint_to_cpu`` (around
:mod:`fairseq_local.safe_loading`'s safe load) and ``Trainer.load_checkpoint``.  For whom: every load,
fairseq's own models included: each check refuses only what fairseq would load wrongly or fail on
(an ensemble whose members have other dictionaries of the same size is refused on purpose: it
would decode with the wrong words); a checkpoint that fits loads as in fairseq.  Why:

Every tool that loads models for a task it has already set up (``fairseq-generate``,
``-interactive``, ``-eval-lm``, ``-validate``, ``--eval-bleu``'s scorers, our scripts) goes through
``checkpoint_utils.load_model_ensemble_and_task(filenames, task=TASK)``.  fairseq builds the
checkpoint's model inside ``TASK`` whatever the two are: a language model "translates" a test set
(exit status 0), a translation model given to ``fairseq-eval-lm`` fails with an
``AttributeError``, a lattice model without ``--task lattice_translation`` fails in its encoder,
and a checkpoint trained on other dictionaries fails in ``load_state_dict`` ("size mismatch ...").
:func:`install` wraps that function (and, for the file being loaded, ``load_checkpoint_to_cpu``)
so that, before any model is built:

* a missing file is ``FILE: no such checkpoint file`` (with the ``.pt`` files next to it);
* a lattice checkpoint (trained with ``--task lattice_translation``) needs that task;
* a translation task needs an encoder-decoder model, a language-modelling task a language model;
* a translation model asked for the opposite direction (``--source-lang``/``--target-lang``
  swapped) is refused: with a joined dictionary it would translate silently, and badly;
* a checkpoint trained with ``--task stateful_language_modeling`` used with another task gets a
  warning (every window then starts from a zero state: a different perplexity);

and a weight-shape mismatch names the checkpoint, the first mismatching parameter and the data
directory whose dictionaries it does not fit; dictionaries of the same size but other entries are
caught by their fingerprint (:mod:`fairseq_local.data.checkpoint_dictionaries`).  The loads in progress,
with what each is for, are :mod:`fairseq_local.checkpoint_loads`.  Without ``task`` (the hub) the
checkpoint's own task is used: only the shape and fingerprint checks apply, against the task the
hub sets up.

``Trainer.load_checkpoint`` (fairseq-train resuming from ``checkpoint_last.pt``, ``--restore-file``,
``--finetune-from-model``) gets the fingerprint check against the training task, and a checkpoint
whose weights do not fit the model the run builds (another ``--arch`` or other sizes in the same
``--save-dir``: fairseq's "Cannot load model parameters" after a long traceback) is one line naming
what the checkpoint holds, the first mismatching weight and the fix.
"""
import functools
import logging
import os
import re

from fairseq import checkpoint_utils
from fairseq.models import MODEL_REGISTRY, FairseqEncoderDecoderModel, FairseqLanguageModel
from fairseq.tasks.language_modeling import LanguageModelingTask
from fairseq.tasks.translation import TranslationTask

from fairseq_local import checkpoint_loads, hook_points
from fairseq_local.config_checks import task_name
from fairseq_local.data import checkpoint_dictionaries
from fairseq_local_core.errors import CheckpointError, prog_name
from fairseq_local_core.file_io import checkpoint_listing
from fairseq_local.safe_loading import state_model
from fairseq_local.tasks.lattice_translation import LatticeTranslationTask
from fairseq_local.tasks.stateful_language_modeling import StatefulLanguageModelingTask

logger = logging.getLogger(__name__)

_STATE = {}


def check_exists(filename):
    if isinstance(filename, str) and "://" not in filename and not os.path.exists(filename):
        raise CheckpointError(f"{filename}: no such checkpoint file ({checkpoint_listing(filename)})")


def check_fits_task(path, state, task):
    """Raise :class:`CheckpointError` when the model of ``state`` cannot serve ``task``."""
    arch, model, trained_task = state_model(state)
    current = task_name(task)
    model_cls = MODEL_REGISTRY.get(model)
    held = f"{path} holds a '{arch}' model trained with --task {trained_task}"
    if trained_task == "lattice_translation" and not isinstance(task, LatticeTranslationTask):
        raise CheckpointError(f"{held}: add --task lattice_translation (and the data directory of "
                              f"scripts/preprocess_lattices.py); {prog_name()} was given --task {current}")
    if model_cls is None:
        return
    is_lm = issubclass(model_cls, FairseqLanguageModel)
    if isinstance(task, TranslationTask) and is_lm:
        raise CheckpointError(f"{held}, a language model: {prog_name()} with --task {current} needs a "
                              "translation model (evaluate language models with fairseq-eval-lm)")
    if isinstance(task, (LanguageModelingTask, StatefulLanguageModelingTask)) and \
            issubclass(model_cls, FairseqEncoderDecoderModel):
        raise CheckpointError(f"{held}, a translation model: {prog_name()} with --task {current} needs a "
                              "language model (translate with fairseq-generate or fairseq-interactive)")
    if isinstance(task, TranslationTask):
        check_direction(path, state, task)
    if trained_task == "stateful_language_modeling" and not isinstance(task, StatefulLanguageModelingTask):
        logger.warning(f"{path} was trained with --task stateful_language_modeling but runs with --task "
                       f"{current}: every window starts from a zero state, so the perplexity differs; "
                       "pass --task stateful_language_modeling")
    if trained_task == "language_modeling" and isinstance(task, StatefulLanguageModelingTask):
        logger.warning(f"{path} was trained with --task language_modeling but runs with --task {current}: "
                       "windows of --tokens-per-sample tokens cut through sentences, so the perplexity differs; "
                       "pass --task language_modeling with the --sample-break-mode it was trained with")


def check_direction(path, state, task):
    """A translation checkpoint asked for the opposite direction (trained ``--source-lang de
    --target-lang en``, run with ``en``/``de``): with a joined dictionary the weights fit and
    fairseq would "translate" with exit status 0, so this is one line.  Other language names
    (``src``/``tgt`` data of the same languages) are left alone."""
    cfg, args = state.get("cfg"), state.get("args")
    trained = cfg.get("task", None) if hasattr(cfg, "get") else None
    pair = tuple((trained.get(k, None) if hasattr(trained, "get") else getattr(args, k, None))
                 for k in ("source_lang", "target_lang"))
    now = (getattr(task.cfg, "source_lang", None), getattr(task.cfg, "target_lang", None))
    if all(pair) and all(now) and pair != now and pair == now[::-1]:
        raise CheckpointError(f"{path} translates {pair[0]} -> {pair[1]} (trained with --source-lang {pair[0]} "
                              f"--target-lang {pair[1]}), but {prog_name()} was given --source-lang {now[0]} "
                              f"--target-lang {now[1]}: pass --source-lang {pair[0]} --target-lang {pair[1]}, "
                              f"or a checkpoint trained {now[0]} -> {now[1]}")


_SIZE_RE = re.compile(r"size mismatch for ([\w.]+): copying a param with shape torch\.Size\(\[([\d, ]*)\]\) "
                      r"from checkpoint, the shape in current model is torch\.Size\(\[([\d, ]*)\]\)")


def _mismatch(err):
    """``(detail, is_size)`` of a ``load_state_dict`` error: the first mismatching weight and its shapes,
    or the missing / unexpected weights."""
    m = _SIZE_RE.search(str(err))
    if m:
        return (f"{m.group(1)} is {m.group(2).replace(', ', ' x ')} in the checkpoint but "
                f"{m.group(3).replace(', ', ' x ')} here"), True
    missing = re.search(r"(Missing|Unexpected) key\(s\) in state_dict: ([^\n]*)", str(err))
    if missing:
        return f"{missing.group(1).lower()} weights {missing.group(2)[:120]}", False
    return (str(err).splitlines() or [type(err).__name__])[0], False


def _state_dict_error(path, task, err, arg_overrides=None) -> CheckpointError:
    data = getattr(getattr(task, "cfg", None), "data", None) or (arg_overrides or {}).get("data")
    detail, is_size = _mismatch(err)
    if is_size:
        where = f"the dictionaries of {data}" if data else "this data"
        return CheckpointError(
            f"{path} does not fit {where}: {detail} (trained with other dictionaries or languages?); give the data "
            "directory the checkpoint was trained with")
    return CheckpointError(f"{path} does not fit the model its configuration builds here ({detail}); was it "
                           "trained with another version of the model or another --user-dir?")


def _resume_error(path, state, trainer, err) -> CheckpointError:
    """fairseq-train's checkpoint whose weights do not fit the model this run builds."""
    arch, _, task = state_model(state) if state is not None else (None, None, None)
    now = getattr(getattr(trainer.cfg, "model", None), "_name", None) or getattr(trainer.cfg.model, "arch", None)
    held = f"{path} holds a '{arch}' model (trained with --task {task})" if arch else f"{path} holds a model"
    return CheckpointError(f"{held} that does not fit the '{now}' model this run builds ({_mismatch(err)[0]}): resume "
                           "with the options and data it was trained with, or train the new model in another --save-dir")


def install():
    if _STATE:
        return
    load_ensemble = checkpoint_utils.load_model_ensemble_and_task

    def load_checkpoint_to_cpu(load_to_cpu, path, *args, **kwargs):
        state = load_to_cpu(path, *args, **kwargs)
        context = checkpoint_loads.current()  # {"task", "path"} (+ "train_task", "states")
        if context is not None:
            context["path"] = path
            context.setdefault("states", []).append((path, state))
            if context["task"] is not None:
                check_fits_task(path, state, context["task"])
                checkpoint_dictionaries.check(path, state, context["task"])
            if context.get("train_task") is not None:
                checkpoint_dictionaries.check(path, state, context["train_task"])
        return state

    @functools.wraps(load_ensemble)
    def load_model_ensemble_and_task(filenames, arg_overrides=None, task=None, strict=True, suffix="",
                                     num_shards=1, state=None):
        if state is None and num_shards == 1 and not suffix:
            for filename in filenames:
                check_exists(filename)
        with checkpoint_loads.loading(task=task, path=filenames[0] if filenames else None) as context:
            try:
                if state is not None and task is not None and filenames:
                    check_fits_task(filenames[0], state, task)
                    checkpoint_dictionaries.check(filenames[0], state, task)
                out = load_ensemble(filenames, arg_overrides, task, strict, suffix, num_shards, state)
                if task is None:  # the hub: the task set up from the checkpoint and data_name_or_path
                    data = (arg_overrides or {}).get("data")
                    for path, loaded in context.get("states", []):
                        checkpoint_dictionaries.check(path, loaded, out[2], data)
                return out
            except RuntimeError as err:
                if "Error(s) in loading state_dict" not in str(err):
                    raise
                raise _state_dict_error(context["path"], task, err, arg_overrides) from None

    def load_checkpoint(trainer_load, self, filename, *args, **kwargs):
        with checkpoint_loads.loading(task=None, train_task=self.task, path=filename) as context:
            try:
                return trainer_load(self, filename, *args, **kwargs)
            except Exception as err:
                cause = err.__context__
                if type(err) is not Exception or not str(err).startswith("Cannot load model parameters") or \
                        not isinstance(cause, RuntimeError):
                    raise
                states = context.get("states") or [(filename, None)]
                raise _resume_error(filename, states[-1][1], self, cause) from None

    _STATE.update(load_ensemble=load_ensemble)
    checkpoint_utils.load_model_ensemble_and_task = load_model_ensemble_and_task
    hook_points.add(hook_points.LOAD_CHECKPOINT_TO_CPU, load_checkpoint_to_cpu)
    hook_points.add(hook_points.TRAINER_LOAD_CHECKPOINT, load_checkpoint)
