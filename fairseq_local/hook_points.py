"""The fairseq functions that more than one patch changes, and the layers each patch adds there.

A target of fairseq that two behaviours change (``Trainer.load_checkpoint``: the checkpoint checks
of ``patches/checkpoint_fit.py`` and the resumption of ``patches/exact_resume.py``) is wrapped by
one module alone, its owner (``patches/shared_targets.py``).  The owner's wrapper
calls :func:`run`; each behaviour adds a *layer* with :func:`add`, a function
``layer(call, *args, **kwargs)`` whose ``call(*args, **kwargs)`` runs the layers added before it and
then fairseq's function.  Layers run in the order their modules are installed (``patches.ORDER``):
the first added is innermost, next to fairseq's function.  Adding a layer twice keeps the first.

This module imports nothing of the plugin (safe loading, on the lowest floor, adds a layer).
"""
import functools

LOAD_CHECKPOINT_TO_CPU = "fairseq.checkpoint_utils.load_checkpoint_to_cpu"
TRAINER_LOAD_CHECKPOINT = "fairseq.trainer.Trainer.load_checkpoint"
TRAINER_SAVE_CHECKPOINT = "fairseq.trainer.Trainer.save_checkpoint"
TRAINER_GET_TRAIN_ITERATOR = "fairseq.trainer.Trainer.get_train_iterator"
CALL_MAIN = "fairseq.distributed.utils.call_main"
ADD_DEFAULTS = "fairseq.dataclass.initialize.add_defaults"
PREPROCESS_MAIN = "fairseq_cli.preprocess.main"
GET_BATCH_ITERATOR = "fairseq.tasks.FairseqTask.get_batch_iterator"
BUILD_GENERATOR = "fairseq.tasks.FairseqTask.build_generator"
POINTS = (LOAD_CHECKPOINT_TO_CPU, TRAINER_LOAD_CHECKPOINT, TRAINER_SAVE_CHECKPOINT, TRAINER_GET_TRAIN_ITERATOR,
          CALL_MAIN, ADD_DEFAULTS, PREPROCESS_MAIN, GET_BATCH_ITERATOR, BUILD_GENERATOR)

_LAYERS = {}


def add(point: str, layer) -> None:
    """Add ``layer`` at ``point`` (one of :data:`POINTS`), outside the layers added before it."""
    if point not in POINTS:
        raise ValueError(f"{point}: not a hook point (one of {', '.join(POINTS)})")
    layers = _LAYERS.setdefault(point, [])
    if all(known is not layer for known in layers):
        layers.append(layer)


def layers(point: str) -> tuple:
    """The layers at ``point``, innermost first."""
    return tuple(_LAYERS.get(point, ()))


def run(point: str, function, *args, **kwargs):
    """``function(*args, **kwargs)`` through the layers at ``point``."""
    call = function
    for layer in _LAYERS.get(point, ()):
        call = functools.partial(layer, call)
    return call(*args, **kwargs)
