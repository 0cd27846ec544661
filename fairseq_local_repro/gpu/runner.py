"""What the GPU kit's parts share: the run (its deadline, its log ``OUT/run_all.log`` and the child
processes it starts), paths as a command shows them, and JSON written atomically."""
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time

from fairseq_local_core.file_io import write_json as _write_json

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def shown(path):
    """A path as a command shows it: relative to the repository when inside it (bench.py runs there)."""
    rel = os.path.relpath(os.path.abspath(path), REPO)
    return path if rel.startswith("..") else rel


class Run:
    def __init__(self, args):
        self.args = args
        self.t0 = time.time()
        self.deadline = self.t0 + 60 * args.budget_minutes
        os.makedirs(args.out, exist_ok=True)
        self.log = open(os.path.join(args.out, "run_all.log"), "a", encoding="utf-8")
        self.env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + self.env.get("PATH", "")
        if args.cpu:
            self.env.setdefault("OMP_NUM_THREADS", "1")
            self.env.setdefault("MKL_NUM_THREADS", "1")

    def left(self):
        return self.deadline - time.time()

    def say(self, msg):
        line = f"[{time.strftime('%H:%M:%S')} +{time.time() - self.t0:5.0f}s] {msg}"
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    def sh(self, cmd, timeout):
        """Run ``cmd``; its output goes to run_all.log.  Returns (returncode or None on timeout, tail)."""
        tmp = tempfile.gettempdir() + os.sep
        words = ["python" if c == sys.executable else "$TMP/" + c[len(tmp):] if c.startswith(tmp)
                 else shown(c) if os.path.isabs(c) else c for c in map(str, cmd)]
        self.say("$ " + shlex.join(words))  # paths inside the checkout relative to it, as it runs there
        try:
            proc = subprocess.run([str(c) for c in cmd], env=self.env, cwd=REPO, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=max(1.0, timeout))
            out, rc = proc.stdout, proc.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            out += f"\nrun_all: timed out after {timeout:.0f} s\n"
            rc = None
        self.log.write(out)
        self.log.flush()
        return rc, "\n".join(out.strip().splitlines()[-6:])


def write_json(path, obj):
    _write_json(path, obj, indent=2)


def children_cpu_seconds():
    """User + system CPU seconds of the finished child processes (the bench.py runs)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime
