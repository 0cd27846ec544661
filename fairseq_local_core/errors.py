"""One-line errors for bad input, whichever entry point meets them.

Code that finds bad input (an impossible option, a malformed or incomplete file, a checkpoint of
the wrong kind) raises a :class:`UserError` whose message names the file, line or option.  Entry
points never catch these one by one: importing the plugin installs one hook
(``fairseq_local/patches/one_line_errors.py``) that prints ``PROG: error: MESSAGE`` and exits
with status 2 for them, whether the program is a fairseq CLI (``fairseq-train``, ``-generate``,
``-interactive``, ``-eval-lm``), ``fairseq-hydra-train`` or one of our scripts.  Any other
exception is a bug and keeps its full traceback, except a full disk (``OSError`` ENOSPC or
EDQUOT): ``FILE: no space left on device``, the file that was being written.
"""
import errno
import io
import os
import sys
from typing import Optional

__all__ = ["UserError", "ConfigError", "InputFileError", "CheckpointError", "one_line", "report"]


class UserError(Exception):
    """Bad input or options; the message (one line) names the file, line or option."""

    exit_code = 2


class ConfigError(UserError, ValueError):
    """An impossible option value (the message names the option)."""


class InputFileError(UserError, ValueError):
    """A missing, incomplete or malformed input file (the message names the file and line)."""


class CheckpointError(UserError, ValueError):
    """A checkpoint that cannot be used: not a complete checkpoint, or of the wrong model family."""


def _marker(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}: "


def one_line(exc: BaseException) -> Optional[str]:
    """The message a CLI prints for ``exc`` as its one error line, or None for a bug."""
    if isinstance(exc, UserError):
        return " ".join(str(exc).split("\n"))
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):  # a write outside file_io's
        what = "disk quota exceeded" if exc.errno == errno.EDQUOT else "no space left on device"
        name = exc.filename or _file_being_written(exc.__traceback__)
        return f"{name}: {what}" if name else what
    if isinstance(exc, FileNotFoundError):  # fairseq: "Dataset not found: test (DIR)", missing --path...
        if exc.filename is not None:
            return f"{exc.filename}: {exc.strerror or 'no such file or directory'}"
        return " ".join(str(exc).split("\n"))
    if type(exc) is OSError and str(exc).startswith("file ") and str(exc).endswith(" not found"):
        return f"{str(exc)[5:-10]}: no such file"  # fairseq's cached_path: --bpe-codes, --sentencepiece-model...
    if type(exc).__name__ == "ProcessRaisedException":  # torch.multiprocessing.spawn: a child's traceback
        last = str(exc).rstrip().splitlines()[-1] if str(exc).strip() else ""
        for cls in _all_subclasses(UserError):
            if last.startswith(_marker(cls)):
                return last[len(_marker(cls)):]
    return None


def _file_being_written(tb) -> Optional[str]:
    """The name of the file the failed write went to: a file opened for writing in the innermost
    frame of ``tb`` that holds one (``f.write`` raises ENOSPC without a file name)."""
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for value in list(frame.f_locals.values()):
            if (isinstance(value, io.IOBase) and isinstance(getattr(value, "name", None), str)
                    and any(c in getattr(value, "mode", "") for c in "wax+")
                    and value not in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)):
                return value.name
    return None


def _all_subclasses(cls):
    out = [cls]
    for sub in cls.__subclasses__():
        out += _all_subclasses(sub)
    return out


def prog_name() -> str:
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] not in ("", "-c") else "fairseq_local"


def report(exc: BaseException, prog: Optional[str] = None, stream=None) -> Optional[int]:
    """Print ``PROG: error: MESSAGE`` for a user error and return its exit status; None for a bug."""
    msg = one_line(exc)
    if msg is None:
        return None
    stream = stream or sys.stderr
    try:
        stream.flush()
    except Exception:  # pragma: no cover
        pass
    stream.write(f"{prog or prog_name()}: error: {msg}\n")
    stream.flush()
    return getattr(exc, "exit_code", 2)
