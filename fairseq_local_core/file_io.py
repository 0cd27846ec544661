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

Output folders are claimed for a whole run by :func:`claim` (every tool: the ``--save-dir`` of
training, ``preprocess.sh``'s ``--destdir``, ``generate.sh``'s ``--out``, the demos' ``--out``):
an exclusive ``flock`` on a lock file (:func:`lock_path`) that holds the claiming process's pid, kept
until the process (or, for a shell script, the script's open file descriptor) ends; a second run on the same folder
is one line naming the folder and the holder.  A folder a tool made holds :data:`OURS`
(:func:`mark_ours`); :func:`check_ours` refuses to replace an existing folder without it.

Standard library only.
"""
import contextlib
import errno
import fcntl
import fnmatch
import gzip
import hashlib
import json
import os
import re
import signal
import socket
import tempfile
import threading
import uuid
from typing import Any, Iterable, Iterator, IO

from fairseq_local_core.errors import UserError

TMP_RE = re.compile(r"^\..+\.fairseq-local-\d+-[0-9a-f]{8}\.tmp$")
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFullError(UserError, OSError):
    """No room left for ``filename`` (the destination, not the temporary file): one line,
    ``FILE: no space left on device``, printed by ``fairseq_local_core.errors`` as a user error."""

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


@contextlib.contextmanager
def sigterm_as_interrupt():
    """Within the block, SIGTERM (``kill``) raises ``KeyboardInterrupt`` in the main thread as Ctrl-C
    does, so a tool's ``atomic_open`` and temporary folders are removed on the way out and it ends
    with its own "interrupted" line; the previous handler is restored afterwards (outside the main
    thread: nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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


# ------------------------------------------------------------------------------------------------
# output folders: one run at a time, and only what a tool made is replaced
# ------------------------------------------------------------------------------------------------
OURS = ".fairseq-local"  # the marker file of a folder a tool of the plugin made
_HELD = {}  # realpath(lock file) -> fd held for the life of the process
_NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


class OutputInUseError(UserError, RuntimeError):
    """Another live run holds the claim on an output folder."""


class NotOursError(UserError, RuntimeError):
    """An existing folder that no tool of the plugin made would be replaced."""


def lock_path(folder: str, create: bool = False) -> str:
    """The lock file of an output folder that a run replaces or fills as a whole: named by the
    folder's real path (the same folder by any path, the folder itself not needed yet) in
    ``TMPDIR/fairseq-local-claims``, so that nothing is left beside the user's folders."""
    key = hashlib.sha256(os.path.realpath(folder).encode("utf-8", "surrogateescape")).hexdigest()[:24]
    claims = os.path.join(tempfile.gettempdir(), "fairseq-local-claims")
    if create and not os.path.isdir(claims):
        os.makedirs(claims, exist_ok=True)
        with contextlib.suppress(OSError):
            os.chmod(claims, 0o1777)  # shared by every user, like /tmp
    return os.path.join(claims, f"{key}.lock")


def _owner(lock: str):
    try:
        with open(lock) as f:
            return (f.read().split() + ["unknown", ""])[:2]
    except OSError:
        return ["unknown", ""]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(folder: str, what: str, lock: str = None, run: str = "run", fd: int = None, pid: int = None) -> str:
    """Claim ``folder`` (named ``what`` in messages: the option) for this process's life; returns the
    lock file (``lock``, by default :func:`lock_path`).  With ``fd`` (an open descriptor of the lock
    file, inherited from a shell script) the claim lasts as long as that descriptor stays open, and
    the lock file names ``pid`` (the script's).  Re-entrant within a process.  A live holder is
    :class:`OutputInUseError`: ``WHAT FOLDER is in use by another RUN (pid N, lock file L); ...``.
    A dead holder never blocks (the kernel drops its ``flock``; without ``flock``, its pid is checked)."""
    lock = lock or lock_path(folder, create=True)
    key = os.path.realpath(lock)
    if key in _HELD and fd is None:
        return lock
    own = fd is None
    if own:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)

    def in_use(owner):
        if own:
            os.close(fd)
        return OutputInUseError(f"{what} {folder} is in use by another {run} (pid {owner}, lock file {lock}); "
                                f"wait for it to finish or choose another {what}")

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise in_use(_owner(lock)[0]) from None
    except OSError as err:
        if err.errno not in _NO_FLOCK:
            if own:
                os.close(fd)
            raise
        owner, host = _owner(lock)  # no flock on this file system: a live pid on this host blocks
        if (owner.isdigit() and int(owner) not in (os.getpid(), pid) and host == socket.gethostname()
                and _pid_alive(int(owner))):
            raise in_use(owner) from None
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, f"{pid or os.getpid()} {socket.gethostname()} {os.path.realpath(folder)}\n".encode())
    os.fsync(fd)
    if own:
        _HELD[key] = fd
    return lock


def release(folder: str, lock: str = None):
    """Give up this process's claim on ``folder`` (taken with the same ``lock``)."""
    fd = _HELD.pop(os.path.realpath(lock or lock_path(folder)), None)
    if fd is not None:
        os.close(fd)  # closing the last descriptor drops the flock


def is_ours(folder: str, markers=()) -> bool:
    """``folder`` holds :data:`OURS` or one of ``markers`` (a tool's own record, e.g. ``corpus.json``)."""
    return any(os.path.exists(os.path.join(folder, name)) for name in (OURS, *markers))


def check_ours(folder: str, what: str, markers=(), writes=None):
    """An existing, non-empty ``folder`` that no tool of the plugin made (:func:`is_ours`) is
    :class:`NotOursError`: a tool replaces only what it made earlier; so is a ``folder`` that is a file.
    ``writes`` (glob patterns of the names a tool that replaces the whole folder writes there): an
    entry of the folder that matches none (another run's output put inside it, a user's file) is
    :class:`NotOursError` too, since replacing the folder would delete it."""
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise NotOursError(f"{what} {folder} is a file, not a folder: it is left as it is; choose a folder")
    if not os.path.isdir(folder) or not os.listdir(folder):
        return
    if is_ours(folder, markers):
        foreign = [e for e in sorted(os.listdir(folder))
                   if writes is not None and not any(fnmatch.fnmatch(e, p) for p in (*writes, OURS))]
        if foreign:
            raise NotOursError(f"{what} {folder} holds {os.path.join(folder, foreign[0])}, which this tool does "
                               f"not write: replacing the folder would delete it, so it is left as it is; move "
                               f"it out first, or choose another {what}")
        return
    raise NotOursError(f"{what} {folder} is a folder that no fairseq-local tool made (no {OURS} in it): it is "
                       f"left as it is; choose a new folder, or empty or remove it yourself")


def mark_ours(folder: str, tool: str):
    """Mark ``folder`` as made by ``tool`` (:func:`check_ours` lets a later run replace it)."""
    write_text(os.path.join(folder, OURS), f"made by {tool}; a later run of it may replace this folder\n")
