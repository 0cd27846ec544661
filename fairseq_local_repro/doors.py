"""What the Python commands behind the shell doors share: their one option parser, one-line
errors, progress lines and child processes that Ctrl-C or ``kill`` end as a whole tree.

An options object is a dataclass whose fields declare their option (:func:`opt`, :func:`flag`):
:func:`parse_options` fills it from a command line with the rules of every door: ``--name VALUE``
or ``--name=VALUE``; ``-h`` prints the usage and exits 0; a value option without a value, an option
given twice, an unknown option (with the closest known one), a flag with a value or a stray argument
is one line and exit status 2.
"""
import dataclasses
import os
import signal
import subprocess
import sys
import time
from typing import IO, Callable, List, Optional, Sequence


class DoorError(Exception):
    """A user's mistake or a failed step, reported as one line ``PROG: error: MESSAGE`` (status 2)."""

    is_user_error = True


class Interrupted(Exception):
    """Ctrl-C or SIGTERM while a door's command ran (status 130)."""


def opt(name: str, default=None, convert=str):
    """A value option ``--name VALUE``; ``convert`` turns the command-line text into the field's type
    (checks of the value belong to the options object's ``check``)."""
    return dataclasses.field(default=default, metadata={"option": name, "kind": "opt", "convert": convert})


def opt_list(name: str):
    """A repeatable value option: each ``--name VALUE`` appended to the field's list."""
    return dataclasses.field(default_factory=list, metadata={"option": name, "kind": "list", "convert": str})


def flag(name: str, default: bool = False):
    """``--name`` sets the field to ``not default``."""
    return dataclasses.field(default=default, metadata={"option": name, "kind": "flag"})


def rest(hint: str = ""):
    """What follows ``--`` (a list of words handed on to another command); ``hint`` names what
    belongs there in the unknown-option message."""
    return dataclasses.field(default_factory=list, metadata={"kind": "rest", "hint": hint})


def number(text: str):
    """An integer option's value: an int where the text is one (``007``, ``-1``), else the text, which
    the options object's check names in its message."""
    body = text[1:] if text.startswith("-") else text
    return int(text) if body.isascii() and body.isdigit() else text


def _distance(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def closest_option(word: str, names: Sequence[str]) -> Optional[str]:
    """The option nearest to ``word``: a typo or two, or up to a third of the name."""
    best, best_d = None, 999
    for name in list(names) + ["--help"]:
        d = _distance(word, name)
        if d < best_d:
            best, best_d = name, d
    return best if best is not None and (best_d <= 2 or best_d * 3 <= len(best)) else None


def parse_options(cls, argv: Sequence[str], usage: str):
    """``(cls(**given values), set of the options given)``; raises :class:`DoorError`.  ``-h`` prints
    ``usage`` and exits 0."""
    fields = {f.metadata["option"]: f for f in dataclasses.fields(cls) if "option" in f.metadata}
    rest_field = next((f for f in dataclasses.fields(cls) if f.metadata.get("kind") == "rest"), None)
    hint = f"; {rest_field.metadata['hint']}" if rest_field and rest_field.metadata["hint"] else ""
    values, seen, args = {}, set(), list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-h", "--help"):
            print(usage.strip("\n"))
            sys.exit(0)
        if arg == "--":
            if rest_field is None:
                raise DoorError("'--' is not accepted here: this script passes nothing on (see -h)")
            values[rest_field.name] = args
            break
        if arg.startswith("--") and "=" in arg:
            name, value, has = *arg.split("=", 1), True
        elif arg.startswith("-") and len(arg) > 1:
            name, value, has = arg, "", False
        else:
            raise DoorError(f"unexpected argument '{arg}' (options start with --; see -h)")
        field = fields.get(name)
        if field is None:
            near = closest_option(name, list(fields))
            raise DoorError(f"unknown option '{name}' ({f'did you mean {near}? ' if near else ''}see -h{hint})")
        if name in seen and field.metadata["kind"] != "list":
            raise DoorError(f"option {name} is given twice")
        seen.add(name)
        if field.metadata["kind"] == "flag":
            if has:
                raise DoorError(f"option {name} takes no value (got '{arg}')")
            values[field.name] = not field.default
            continue
        if not has and args and (args[0] == "" or args[0] not in fields):
            value = args.pop(0)
        if value == "":
            raise DoorError(f"option {name} needs a value")
        if field.metadata["kind"] == "list":
            values.setdefault(field.name, []).append(value)
        else:
            values[field.name] = field.metadata["convert"](value)
    return cls(**values), seen


def usage_of(doc: str) -> str:
    """A command module's usage: its docstring after the first paragraph."""
    return doc.split("\n\n", 1)[1] if "\n\n" in doc else doc


class Console:
    """Where a command writes its progress, warnings and its children's output: the terminal, or a
    log file when the harness calls it as a function."""

    def __init__(self, prog: str, log: Optional[IO] = None):
        self.prog, self.log = prog, log

    def line(self, line: str):
        """One line as it is."""
        stream = self.log or sys.stderr
        stream.write(line + "\n")
        stream.flush()

    def say(self, msg: str):
        self.line(f"[{time.strftime('%H:%M:%S')}] {msg}")

    def warn(self, msg: str, kind: str = "warning"):
        self.line(f"{self.prog}: {kind}: {msg}")

    def run(self, cmd: List[str], stdin: Optional[IO] = None, stdout: Optional[IO] = None,
            on_line: Optional[Callable[[str], None]] = None) -> int:
        """Run ``cmd`` (its output to the log, if any); it ignores SIGINT, so that Ctrl-C, which reaches
        the whole process group, is answered here: its process tree is ended and :class:`Interrupted`
        raised.  With ``on_line``, each line of its stderr goes there (not to the log)."""
        out = stdout or self.log
        proc = subprocess.Popen(cmd, stdin=stdin, stdout=out, stderr=subprocess.PIPE if on_line else self.log,
                                text=True, errors="replace",
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        try:
            for line in proc.stderr if on_line else ():
                on_line(line)
            return proc.wait()
        except BaseException:
            end_tree(proc.pid)
            proc.wait()
            raise


def _children() -> dict:
    kids = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(pid))
    return kids


def end_tree(pid: int):
    """SIGTERM to ``pid`` and every process below it."""
    kids, todo, tree = _children(), [pid], []
    while todo:
        p = todo.pop()
        tree.append(p)
        todo += kids.get(p, [])
    for p in tree:
        try:
            os.kill(p, signal.SIGTERM)
        except OSError:
            pass


def _raise_interrupted(signum, frame):
    raise Interrupted()


def main_door(prog: str, run, interrupted_message) -> int:
    """A door's command: ``run()``; a :class:`DoorError` is one line and status 2, Ctrl-C or SIGTERM
    (after ``run``'s clean-up) the line ``interrupted_message()`` and status 130."""
    signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        run()
    except DoorError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Interrupted):
        print(interrupted_message(), file=sys.stderr)
        return 130
    return 0


def command(prog: str, cls, step, doc: str, argv=None, interrupted=None) -> int:
    """A door's command: ``step(options)`` with the options of ``cls`` parsed from ``argv`` (usage: ``doc``
    after its first paragraph), through :func:`main_door`; ``interrupted(options)`` is the line
    Ctrl-C prints (default ``PROG: interrupted``)."""
    parsed = []

    def run():
        parsed.append(parse_options(cls, sys.argv[1:] if argv is None else argv, usage_of(doc))[0])
        step(parsed[0])

    return main_door(prog, run, lambda: interrupted(parsed[0]) if interrupted and parsed else f"{prog}: interrupted")
