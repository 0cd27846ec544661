"""Keep ``import fairseq`` from changing the process's logging configuration.

fairseq's wav2vec module calls ``logging.basicConfig(level=DEBUG)`` at import time, which turns
on DEBUG output from every library (matplotlib, PIL, urllib3...).  We remember the root logger's
level and handlers as they were before fairseq is imported and put them back afterwards.
"""
import logging
import os
import sys

_root = logging.getLogger()
_FAIRSEQ_ALREADY_IMPORTED = "fairseq" in sys.modules
_saved_level = _root.level
_saved_handlers = list(_root.handlers)

# tensorboardX prints a notice on import when it is missing; nothing of ours uses it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


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
