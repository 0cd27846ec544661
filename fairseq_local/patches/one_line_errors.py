"""Print a user error (:class:`fairseq_local_core.errors.UserError`) as one line, exit status 2.

What it changes: ``sys.excepthook`` and Hydra's ``JobReturn.return_value``, through the handler it
adds to the start-up hook's (:func:`fairseq_local._cli_startup.add_error_handler`, which wraps
each once and runs this handler before its own messages).  For whom: errors of
the plugin's own kind (``UserError``) only; every other exception reaches the previous hook, as
without the plugin.  Why:

The handler is added once, on plugin import, for every entry point:

* plain CLIs (``fairseq-train``/``-generate``/``-interactive``/``-eval-lm``, our scripts):
  ``sys.excepthook``, which Python calls for an exception that ends the program;
* ``fairseq-hydra-train``: Hydra stores the job's exception and re-raises it from
  ``JobReturn.return_value`` (then prints a trimmed traceback); the plugin is imported inside the
  job, before that property is read, so wrapping the property turns a user error into one line.

Ctrl-C (``KeyboardInterrupt``) is ``PROG: interrupted``, status 130.  Any other exception keeps
Python's (or Hydra's) full traceback.
"""
import atexit
import os
import sys

from fairseq_local import _cli_startup
from fairseq_local_core.errors import prog_name, report


def _exit(code):
    """The interpreter would exit with status 1 after the hook: run the exit handlers it would run
    (logging, multiprocessing, temp files) and leave with ``code``."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def handle(exc, hydra):
    """One line and the exit status for a user error (``hydra``: a failed Hydra job, which exits
    through ``sys.exit``); Ctrl-C is ``PROG: interrupted``, status 130.  Anything else returns."""
    if hydra:
        code = report(exc)
        if code is not None:
            sys.exit(code)
        return
    if isinstance(exc, KeyboardInterrupt):  # Ctrl-C: one line, status 130 (checkpoints are written atomically)
        sys.stderr.write(f"{prog_name()}: interrupted\n")
        _exit(130)
    if exc is not None:
        code = report(exc)
        if code is not None:
            _exit(code)


def install():
    _cli_startup.add_error_handler(handle)
