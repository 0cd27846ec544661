"""Files that appear complete or not at all: the one atomic-write helper of the plugin and its tools.

Every file the plugin, the scripts and the reproduction harness write goes through
:func:`atomic_open`: the bytes go to a unique hidden temporary file in the destination's
directory, which (optionally fsync'ed) is ``os.replace``'d over the destination.  A process killed
at any moment leaves the previous complete file (or none), never a truncated one; the temporary
file is removed when the write fails, and a full disk is :class:`DiskFullError`, naming the
destination.  Temporary names match :data:`TMP_RE`
(``.NAME.fairseq-local-PID-XXXXXXXX.tmp``), so a later run can recognise and remove leftovers of
a killed one (``save_dir_lock.py``).  :func:`checkpoint_listing` says what a missing
checkpoint's directory holds, for the messages that name it.

This module imports nothing beyond the standard library.
"""
import contextlib
import errno
import gzip
import json
import os
import re
import uuid
from typing import Any, Iterable, Iterator, IO

TMP_RE = re.compile(r"^\..+\.fairseq-local-\d+-[0-9a-f]{8}\.tmp$")
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFullError(OSError):
    """No room left for ``filename`` (the destination, not the temporary file): one line,
    ``FILE: no space left on device``, printed by ``fairseq_local.errors`` as a user error."""

    is_user_error = True  # fairseq_local.errors: one line, exit status 2 (this module imports no plugin code)
    exit_code = 2

    def __init__(self, filename: str, code: int = errno.ENOSPC):
        super().__init__(code, os.strerror(code), filename)

    def __str__(self):
        what = "disk quota exceeded" if self.errno == errno.EDQUOT else "no space left on device"
        return f"{self.filename}: {what}"


def temp_name(path: str) -> str:
    """A unique hidden temporary file beside ``path`` (same directory, so ``os.replace`` is atomic)."""
    directory, base = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{base}.fairseq-local-{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")


def fsync_dir(directory: str):
    """fsync a directory so a rename in it survives a crash (a no-op where that is impossible)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - a platform without directory file descriptors
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w", encoding: str = "utf-8", fsync: bool = False) -> Iterator[IO]:
    """``with atomic_open(path) as f: f.write(...)``: ``path`` is replaced only when the block ends
    without an exception.  ``mode`` is ``"w"`` (text, ``encoding``) or ``"wb"``; ``fsync=True``
    also flushes the file and its directory to disk (checkpoints)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode must be 'w' or 'wb', not {mode!r}")
    tmp = temp_name(path)
    kwargs = {} if "b" in mode else {"encoding": encoding, "newline": ""}
    try:
        # "x": O_EXCL, mode 0666 & ~umask like any new file
        with open(tmp, mode.replace("w", "x"), **kwargs) as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        if isinstance(e, OSError) and e.errno in DISK_FULL and not isinstance(e, DiskFullError):
            raise DiskFullError(path, e.errno) from None  # name the destination; the previous file is intact
        raise
    if fsync:
        fsync_dir(os.path.dirname(os.path.abspath(path)))


def write_text(path: str, text: str):
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_open(path) as f:
        f.write(text)


def write_lines(path: str, lines: Iterable[str]):
    """Write one line per item (each followed by a newline) to ``path`` atomically."""
    with atomic_open(path) as f:
        for line in lines:
            f.write(line + "\n")


def write_gz(path: str, text: str):
    """Byte-for-byte reproducible gzip of ``text`` (no time stamp, no name), written atomically."""
    with atomic_open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as f:
            f.write(text.encode("utf-8"))


def read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_json(path: str, obj: Any, indent: int = 1, if_changed: bool = False):
    """Write ``obj`` as JSON (``indent``, trailing newline) to ``path`` atomically.  With
    ``if_changed``, a file that already holds ``obj`` is left alone (its time stamp too)."""
    if if_changed and os.path.isfile(path):
        try:
            if read_json(path) == json.loads(json.dumps(obj)):
                return
        except ValueError:
            pass
    with atomic_open(path) as f:
        json.dump(obj, f, indent=indent)
        f.write("\n")


def checkpoint_listing(path: str) -> str:
    """What the directory of ``path`` holds for a message about a missing checkpoint:
    ``DIR holds a.pt, b.pt``, ``DIR holds no .pt file`` or ``no directory DIR``."""
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        return f"no directory {directory}"
    names = sorted(n for n in os.listdir(directory) if n.endswith(".pt"))
    if not names:
        return f"{directory} holds no .pt file"
    shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
    return f"{directory} holds {shown}"
