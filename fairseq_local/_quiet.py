"""Keep ``import fairseq`` from changing the process's logging configuration.

fairseq's wav2vec module calls ``logging.basicConfig(level=DEBUG)`` at import time, which turns
on DEBUG output from every library (matplotlib, PIL, urllib3...).  We remember the root logger's
level and handlers as they were before fairseq is imported and put them back afterwards, and
filter (by message) the framework deprecation notices every fairseq run would print.
"""
import logging
import os
import sys
import warnings

_root = logging.getLogger()
_FAIRSEQ_ALREADY_IMPORTED = "fairseq" in sys.modules
_saved_level = _root.level
_saved_handlers = list(_root.handlers)

# tensorboardX prints a notice on import when it is missing; nothing of ours uses it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Deprecation notices that every fairseq 0.12 run prints and that no user of fairseq can act on:
# fairseq's own calls into Hydra 1.0 APIs and torch.cuda.amp, and its DataLoader's pin_memory=True
# on a machine without a GPU.  Each filter matches one message; anything else still shows, and
# any -W option or PYTHONWARNINGS setting (sys.warnoptions) is left to decide alone.
FRAMEWORK_NOISE = (
    (UserWarning, r"hydra\.experimental\.(initialize|compose)\(\) is no longer experimental"),
    (UserWarning, r"\s*The version_base parameter is not specified"),
    (UserWarning, r"In '[^']*': Usage of deprecated keyword in package header '# @package _group_'"),
    (UserWarning, r"\s*'config' is validated against ConfigStore schema with the same name"),
    (UserWarning, r"\s*The strict flag in the compose API is deprecated"),
    (UserWarning, r"'pin_memory' argument is set as true but no accelerator is found"),
    (FutureWarning, r"`torch\.cuda\.amp\.(autocast|GradScaler)\(args\.\.\.\)` is deprecated"),
    (UserWarning, r"pkg_resources is deprecated as an API"),  # jieba's import (lattice input)
)


def filter_framework_noise():
    if sys.warnoptions:
        return
    for category, message in FRAMEWORK_NOISE:
        warnings.filterwarnings("ignore", message=message, category=category)


filter_framework_noise()


def restore_root_logger():
    """Put the root logger back as it was before fairseq's import-time ``basicConfig``."""
    if _FAIRSEQ_ALREADY_IMPORTED:
        # A fairseq CLI imported fairseq (and configured logging itself) before loading us:
        # only undo the DEBUG level, keep the CLI's handlers and format.
        if _root.level == logging.DEBUG:
            _root.setLevel(logging.INFO)
        return
    _root.setLevel(_saved_level)
    for handler in list(_root.handlers):
        if handler not in _saved_handlers:
            _root.removeHandler(handler)
