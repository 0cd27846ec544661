"""Building lattice files in parallel (scripts/build_lattices.py): merging tokenized files line by
line, the ordered parallel map with its progress bar, and the atomic writer, checked value by value."""
import multiprocessing as mp
import os
import re
import time

import pytest

from fairseq_local_core.file_io import TMP_RE
from fairseq_local_repro.text import lattice_builder as B
from fairseq_local_repro.text.lattice_builder import LatticeError


@pytest.fixture(autouse=True)
def _own_tqdm_lock(monkeypatch):
    """Each test's progress bars get a lock of their own.  tqdm's default lock holds a semaphore
    shared by every process forked after it was made: a forked test run killed while holding it
    (mutation testing kills the runs that time out) would block every later run's bars."""
    import threading

    import tqdm.std

    monkeypatch.setattr(tqdm.std.tqdm, "_lock", threading.RLock(), raising=False)


def _err(fn, *args, **kwargs):
    with pytest.raises(LatticeError) as e:
        fn(*args, **kwargs)
    return str(e.value)


def test_write_lines_is_atomic(tmp_path):
    out = tmp_path / "o.txt"
    B.write_lines(str(out), ["a", "下雨"])
    assert out.read_bytes() == "a\n下雨\n".encode("utf-8")
    assert os.listdir(tmp_path) == ["o.txt"]

    seen = []

    def failing():
        yield "new"
        seen.append((out.read_text(encoding="utf-8"), sorted(os.listdir(tmp_path))))
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        B.write_lines(str(out), failing())
    # while writing, the target still holds the old content and the new lines go to a temporary file
    assert seen[0][0] == "a\n下雨\n" and len(seen[0][1]) == 2 and "o.txt" in seen[0][1]
    assert TMP_RE.match(next(n for n in seen[0][1] if n != "o.txt"))
    assert out.read_text(encoding="utf-8") == "a\n下雨\n" and os.listdir(tmp_path) == ["o.txt"]


def test_merge_items():
    named = [("a.ctb", ["下雨", "天"]), ("a.pku", ["下", "雨天"])]
    assert B.merge_item((1, "raw:1", None, named)) == (True, "下 雨 天\t0:1 0:2 1:3 2:3\t0 2 3")
    assert B.merge_item((1, "raw:1", "下雨天", named)) == (True, "下 雨 天\t0:1 0:2 1:3 2:3\t0 2 3")
    assert B.merge_item((2, "raw:2", " ", named)) == (False, "raw:2: empty line")
    assert B.merge_item((3, "raw:3", "下雨天", [named[0], ("a.pku", [])])) == (False, "a.pku:3: empty line")
    assert B.merge_item((4, "raw:4", "下雨天", [named[0], ("a.pku", ["下", "雪天"])])) == (
        False, "a.pku:4: tokenization does not match its sentence at character 2: token '雪天' vs sentence '雨天'")
    assert B.merge_item((5, "raw:5", "下雨地", named)) == (
        False, "a.ctb:5: tokenization does not match its sentence at character 3: token '天' vs sentence '地'")
    assert B.merge_item((6, "raw:6", "下雨", [("a.ctb", ["下雨"])])) == (True, "下 雨\t0:2\t0 2")
    # without a raw file the sentence is the first tokenization's characters
    assert B.merge_item((7, "a.ctb:7", None, [("a.ctb", ["下雨", "天"])])) == (True, "下 雨 天\t0:2 2:3\t0 2 3")
    assert B.merge_item((8, "a.ctb:8", None, [("a.ctb", ["\u3000"])])) == (False, "a.ctb:8: empty line")


def _double(x):
    return True, str(2 * x)


def _fail_on_odd(x):
    return (x % 2 == 0), f"bad {x}"


_INIT = []


def _init(*args):
    _INIT.append(args)


def test_parallel_map_order_errors_and_initializer(capsys):
    assert B.parallel_map(_double, [3, 1, 2]) == ["6", "2", "4"]
    _INIT.clear()
    assert B.parallel_map(_double, [5], 1, _init, ("a", 1)) == ["10"]
    assert _INIT == [("a", 1)]
    assert _err(B.parallel_map, _fail_on_odd, [2, 4, 5, 7]) == "bad 5"
    assert B.parallel_map(_double, list(range(70)), workers=2) == [str(2 * x) for x in range(70)]
    assert _err(B.parallel_map, _fail_on_odd, [2, 4, 5, 7], 2) == "bad 5"
    assert capsys.readouterr().err == ""  # fewer than 1000 items: no progress bar


def _pid(x):
    return True, str(os.getpid())


def test_parallel_map_one_worker_runs_here_more_run_in_worker_processes():
    assert B.parallel_map(_pid, [0, 1]) == [str(os.getpid())] * 2  # default: one worker, this process
    pids = B.parallel_map(_pid, [0, 1], workers=2)
    assert len(pids) == 2 and str(os.getpid()) not in pids


_PROBE = {"tag": ("not-initialised",), "count": None, "workers": None}


def _probe_init(*tag):
    _PROBE["tag"] = tag


def _chunk_probe(x):
    """The first item of every chunk of 32 waits until each worker holds a chunk."""
    if x % 32 == 0:
        count = _PROBE["count"]
        with count.get_lock():
            count.value += 1
        deadline = time.monotonic() + 60
        while count.value < _PROBE["workers"]:
            if time.monotonic() > deadline:
                return True, "timeout"
            time.sleep(0.01)
    return True, f"{'/'.join(_PROBE['tag'])} {os.getpid()}"


def test_parallel_map_sends_chunks_of_32_items_to_that_many_initialised_workers(monkeypatch):
    workers = 3 if os.cpu_count() == 2 else 2  # not the machine's CPU count (Pool's default)
    monkeypatch.setitem(_PROBE, "count", mp.get_context("fork").Value("i", 0))
    monkeypatch.setitem(_PROBE, "workers", workers)
    out = B.parallel_map(_chunk_probe, list(range(32 * workers)), workers, _probe_init, ("a", "b"))
    assert "timeout" not in out
    tags, pids = zip(*(x.rsplit(" ", 1) for x in out))
    assert set(tags) == {"a/b"}  # every worker ran the initializer with initargs
    assert all(len(set(pids[k:k + 32])) == 1 for k in range(0, len(pids), 32))  # one worker per chunk
    assert len(set(pids)) == workers and str(os.getpid()) not in pids


def _fork_probe(x):
    return True, _PROBE["tag"][0]


def test_parallel_map_forks_whatever_the_default_start_method(monkeypatch):
    # the workers inherit this process's state (e.g. segmenters registered at run time) even where
    # the default start method is not fork (Python 3.14 defaults to forkserver)
    monkeypatch.setitem(_PROBE, "tag", ("set at run time",))
    previous = mp.get_start_method(allow_none=True)
    mp.set_start_method("spawn", force=True)
    try:
        assert B.parallel_map(_fork_probe, [0, 1], workers=2) == ["set at run time"] * 2
    finally:
        mp.set_start_method(previous, force=True)


def test_parallel_map_progress_bar_redraws_once_a_second(capsys, monkeypatch):
    import tqdm.std

    clock = [0.0]
    monkeypatch.setattr(tqdm.std, "time", lambda: clock[0])

    def half_a_second(x):
        clock[0] += 0.5
        return True, str(x)

    assert B.parallel_map(half_a_second, list(range(1000))) == [str(x) for x in range(1000)]
    shown = [int(m) for m in re.findall(r"\| *(\d+)/1000 ", capsys.readouterr().err)]
    assert sorted(set(shown)) == list(range(0, 1001, 2))  # every 2 items = every second


def test_parallel_map_progress_bar_from_1000_items(capsys):
    assert B.parallel_map(_double, list(range(999))) == [str(2 * x) for x in range(999)]
    assert capsys.readouterr().err == ""
    assert B.parallel_map(_double, list(range(1000)))[-1] == "1998"
    err = capsys.readouterr().err
    assert "lattices: 100%" in err and "1000/1000" in err and "sent/s" in err
