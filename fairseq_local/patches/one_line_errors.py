"""Print a user error (:class:`fairseq_local_core.errors.UserError`) as one line, exit status 2.

What it changes: ``sys.excepthook`` and Hydra's ``JobReturn.return_value``.  For whom: errors of
the plugin's own kind (``UserError``) only; every other exception reaches the previous hook, as
without the plugin.  Why:

The hook is installed once, on plugin import, for every entry point:

* plain CLIs (``fairseq-train``/``-generate``/``-interactive``/``-eval-lm``, our scripts):
  ``sys.excepthook``, which Python calls for an exception that ends the program;
* ``fairseq-hydra-train``: Hydra stores the job's exception and re-raises it from
  ``JobReturn.return_value`` (then prints a trimmed traceback); the plugin is imported inside the
  job, before that property is read, so wrapping the property turns a user error into one line.

Ctrl-C (``KeyboardInterrupt``) is ``PROG: interrupted``, status 130.  Any other exception keeps
Python's (or Hydra's) full traceback.
"""
import sys

from fairseq_local_core.errors import prog_name, report

_STATE = {}


def _exit(code):
    """The interpreter would exit with status 1 after the hook: run the exit handlers it would run
    (logging, multiprocessing, temp files) and leave with ``code``."""
    import atexit
    import os

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def _excepthook(exc_type, exc, tb):
    if isinstance(exc, KeyboardInterrupt):  # Ctrl-C: one line, status 130 (checkpoints are written atomically)
        sys.stderr.write(f"{prog_name()}: interrupted\n")
        _exit(130)
    if exc is not None:
        code = report(exc)
        if code is not None:
            _exit(code)
    _STATE["previous_excepthook"](exc_type, exc, tb)


def _install_hydra():
    try:
        from hydra.core.utils import JobReturn, JobStatus
    except ImportError:  # pragma: no cover - Hydra is a fairseq dependency
        return
    prop = JobReturn.__dict__.get("return_value")
    if prop is None or getattr(prop.fget, "_fairseq_local", False):
        return

    def return_value(self):
        if self.status == JobStatus.FAILED:
            code = report(self._return_value)
            if code is not None:
                sys.exit(code)
        return prop.fget(self)

    return_value._fairseq_local = True
    JobReturn.return_value = property(return_value, prop.fset)


def install():
    if "previous_excepthook" not in _STATE:
        _STATE["previous_excepthook"] = sys.excepthook
        sys.excepthook = _excepthook
    _install_hydra()
