"""fairseq_local_repro/doors.py: the options parser of the Python commands behind the shell doors
(the rules of scripts/lib/options.sh, tests/test_shell_lib.py), and the process tree a door ends."""
import dataclasses
import os
import subprocess
import sys
import time
from typing import List, Optional

import pytest

from fairseq_local_repro.doors import Console, DoorError, closest_option, end_tree, flag, number, opt, parse_options


@dataclasses.dataclass
class Tiny:
    out: Optional[str] = opt("--out")
    size: int = opt("--size", 8, number)
    lang: List[str] = opt("--lang", (), lambda s: s.split(","))
    force: bool = flag("--force")


def test_defaults_values_and_flags():
    assert parse_options(Tiny, [], "u") == (Tiny(), set())
    o, seen = parse_options(Tiny, ["--out", "o", "--size=007", "--lang", "de,en", "--force"], "u")
    assert o == Tiny(out="o", size=7, lang=["de", "en"], force=True) and seen == {"--out", "--size", "--lang", "--force"}
    assert parse_options(Tiny, ["--size", "-1"], "u")[0].size == -1  # a value may start with a dash
    assert parse_options(Tiny, ["--size", "two"], "u")[0].size == "two"  # left for the options' check to name


@pytest.mark.parametrize("args,message", [
    (["--out"], "option --out needs a value"),
    (["--out", "--force"], "option --out needs a value"),
    (["--out", ""], "option --out needs a value"),
    (["--out", "a", "--out", "b"], "option --out is given twice"),
    (["--force=1"], "option --force takes no value (got '--force=1')"),
    (["--outt", "o"], "unknown option '--outt' (did you mean --out? see -h)"),
    (["--frobnicate"], "unknown option '--frobnicate' (see -h)"),
    (["stray"], "unexpected argument 'stray' (options start with --; see -h)"),
    (["--", "x"], "'--' is not accepted here: this script passes nothing on (see -h)"),
])
def test_one_line_errors(args, message):
    with pytest.raises(DoorError) as err:
        parse_options(Tiny, args, "u")
    assert str(err.value) == message


def test_help_prints_the_usage(capsys):
    with pytest.raises(SystemExit) as done:
        parse_options(Tiny, ["--out", "o", "-h"], "\nusage: tiny --out DIR\n")
    assert done.value.code == 0 and capsys.readouterr().out == "usage: tiny --out DIR\n"


def test_closest_option_is_near_or_none():
    assert closest_option("--sorce-lang", ["--source-lang", "--out"]) == "--source-lang"
    assert closest_option("--lang", ["--source-lang"]) is None
    assert closest_option("--hlep", ["--out"]) == "--help"


def test_end_tree_ends_children_and_grandchildren():
    proc = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen([sys.executable, "
                             "'-c', 'import time; time.sleep(600)']); print(flush=True); time.sleep(600)"],
                            stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()
    time.sleep(0.5)
    kids = [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == proc.pid]
    assert len(kids) == 1
    end_tree(proc.pid)
    assert proc.wait(timeout=30) != 0
    deadline = time.time() + 30
    while os.path.exists(f"/proc/{kids[0]}") and _state(kids[0]) != "Z" and time.time() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{kids[0]}") or _state(kids[0]) == "Z"


def test_console_run_writes_the_childs_output_to_the_log(tmp_path):
    with open(tmp_path / "log", "w") as log:
        console = Console("tiny", log)
        assert console.run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"]) == 0
        console.warn("careful")
    assert sorted((tmp_path / "log").read_text().splitlines()) == ["err", "out", "tiny: warning: careful"]


def _stat(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return ["X", "0"]


def _ppid(pid):
    return int(_stat(pid)[1])


def _state(pid):
    return _stat(pid)[0]
