"""The harness's child processes: one thread each, their output appended to a log, ended with the
harness; and its progress lines and one-line errors."""
import os
import subprocess
import sys
import threading
import time
from typing import Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_DIR = os.path.join(REPO, "fairseq_local")
_print_lock = threading.Lock()
_children = set()  # running subprocesses (each in its own session): ended with the harness


class ReproError(Exception):
    """A failure reported as one line (``reproduce.py: error: ...``)."""


def say(msg: str):
    with _print_lock:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def stop_children():
    """Terminate the running fairseq processes (called when the harness is interrupted), so that a
    resumed run never finds a stale trainer writing into the same checkpoint folder."""
    for proc in list(_children):
        try:
            os.killpg(proc.pid, 15)
        except OSError:
            pass


def child_env() -> Dict[str, str]:
    """One thread per process; the venv's executables first on PATH (scripts/lib/common.sh's
    activate_env then uses them)."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def raise_priority(pid: int):
    """Best effort: give the child's own autogroup (it runs in a new session) a higher share of a
    shared machine.  Errors (no permission, no autogroup support) are ignored."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write("-10")
    except OSError:
        pass


def run_logged(cmd: List[str], log_path: str, on_line=None) -> int:
    """Run ``cmd`` in its own session, appending its output to ``log_path`` and passing each line
    to ``on_line``; returns the exit status."""
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=child_env(),
                                text=True, bufsize=1, start_new_session=True, cwd=REPO)
        _children.add(proc)
        raise_priority(proc.pid)
        try:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if on_line is not None:
                    on_line(line)
            return proc.wait()
        finally:
            _children.discard(proc)


def tail(path: str, n: int = 1) -> str:
    """The last ``n`` non-empty lines of ``path``, joined by " / " ("" when it cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.rstrip() for line in f if line.strip()]
    except OSError:
        return ""
    return " / ".join(lines[-n:])


def run_or_fail(cmd: List[str], log_path: str, what: str, on_line=None):
    """:func:`run_logged`; a non-zero exit is a :class:`ReproError` ``"{what}: <last log line> (full log: ...)"``."""
    if run_logged(cmd, log_path, on_line) != 0:
        raise ReproError(f"{what}: {tail(log_path)} (full log: {log_path})")


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def cpu_flag() -> List[str]:
    """``--cpu`` for fairseq and the analysis scripts where no GPU is visible."""
    return [] if cuda_available() else ["--cpu"]
