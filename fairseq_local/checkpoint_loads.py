"""The checkpoint loads in progress in this process, innermost last.

``patches/checkpoint_fit.py`` opens one (:func:`loading`) for each ``load_model_ensemble_and_task``
and ``Trainer.load_checkpoint`` call: the task the checkpoint is loaded for, the file, and the
states ``load_checkpoint_to_cpu`` read for it, which its checks use.  Other code asks
:func:`in_progress` (``patches/option_checks.py``: a model built from a checkpoint is checked
against its training task, not warned about as a new one).  Imports nothing of the plugin.
"""
import contextlib

_LOADS = []


@contextlib.contextmanager
def loading(**entry):
    """A load in progress for the ``with`` block: ``entry`` (a dict of what the load is for), which
    :func:`current` returns inside it."""
    _LOADS.append(entry)
    try:
        yield entry
    finally:
        _LOADS.pop()


def current():
    """The innermost load in progress (its entry), or None."""
    return _LOADS[-1] if _LOADS else None


def in_progress() -> bool:
    """Whether a checkpoint load is in progress."""
    return bool(_LOADS)
