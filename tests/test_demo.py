"""scripts/demo.sh end to end: with every default it reaches the BLEU its usage states, its time cap
says so when it fires, a kill ends it with its children and work folders, and a scorer whose reader
stops early does not print a traceback."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contract_lib import REPO
from fairseq_local_repro.tools import demo as demo_module

ENV = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", OMP_NUM_THREADS="1")


def demo(tmp_path, *args):
    proc = subprocess.run(["bash", str(REPO / "scripts" / "demo.sh"), "--out", str(tmp_path / "demo"),
                           "--train-size", "120", "--test-size", "6", *args],
                          capture_output=True, text=True, env=ENV, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc


def test_demo_says_when_the_time_cap_fires(tmp_path):
    proc = demo(tmp_path, "--max-update", "3", "--minutes", "0.0001", "--seed", "7")
    out = tmp_path / "demo"
    log = (out / "train.log").read_text()
    assert "'seed': 7," in log and "updates, seed 7, on 1 thread(s)" in proc.stderr  # --seed reaches fairseq-train
    updates = int(re.findall(r"num_updates (\d+)", log)[-1])
    capped = re.search(r"time cap: training stopped after (\d+) of 3 updates \(--minutes 0\.0001\); "
                       r"the model is only partly trained", proc.stderr)
    # fairseq checks the cap after each update: the first one already exceeds 0.006 s
    assert updates == 1 and capped and capped.group(1) == "1", proc.stderr[-2000:]
    assert f"demo finished in" in proc.stderr and f"after {updates} updates" in proc.stderr
    assert "on 1 thread(s)" in proc.stderr
    bleu = json.loads((out / "bleu.json").read_text())
    assert f"{bleu['bleu_label']} = {bleu['bleu']:.2f}   [{bleu['bleu_signature']}]" in proc.stdout.splitlines()
    assert len((out / "gen" / "hyp.txt").read_text().splitlines()) == 6
    copy = json.loads((out / "copy_bleu.json").read_text())["bleu"]
    assert f"copies the source scores {copy:.2f} BLEU" in proc.stderr


@pytest.mark.parametrize("args,needle", [
    (["--max-update", "0"], "--max-update must be a positive integer, not '0'"),
    (["--minutes", "0"], "--minutes must be a positive number, not '0'"),
    (["--minutes", "abc"], "--minutes must be a positive number, not 'abc'"),
    (["--test-size", "-3"], "--test-size must be a positive integer, not '-3'"),
    (["--seed", "x1"], "--seed must be a non-negative integer, not 'x1'"),
])
def test_demo_bad_options_one_line(args, needle):
    proc = subprocess.run(["bash", str(REPO / "scripts" / "demo.sh"), *args], capture_output=True, text=True,
                          env=ENV, timeout=60)
    assert proc.returncode != 0 and proc.stderr.strip().splitlines() == [f"demo.sh: error: {needle}"]


def test_score_into_a_closed_pipe_is_no_traceback(tmp_path):
    """`score.py ... | head -1` when head has gone: exit status 1, no traceback, JSON still written."""
    (tmp_path / "h").write_text("a b c d\n")
    (tmp_path / "r").write_text("a b c d\n")  # a copy: the --hyp file itself is refused as a reference
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before score.py prints
    try:
        proc = subprocess.run([sys.executable, str(REPO / "scripts" / "score.py"), "--hyp", str(tmp_path / "h"),
                               "--ref", str(tmp_path / "r"), "--json", str(tmp_path / "s.json")],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert proc.returncode == 1 and proc.stderr == ""
    assert json.loads((tmp_path / "s.json").read_text())["bleu"] == pytest.approx(100.0)


# the claim of demo.sh's header about its defaults, e.g. "test BLEU after 500 updates is 80 to 100"
CLAIM = re.compile(r"With all the defaults, test BLEU after (\d+) updates is (\d+) to (\d+)")


def _claim():
    m = CLAIM.search(demo_module.__doc__)
    assert m, "demo.sh's usage states no BLEU range for its defaults"
    return demo_module.__doc__, int(m.group(1)), float(m.group(2)), float(m.group(3))


def test_demo_claim_is_about_its_defaults():
    """The stated range is for the update count the demo really defaults to, and README says the same count."""
    header, updates, low, high = _claim()
    assert demo_module.DemoOptions().max_update == updates, "the claim's update count is not the default"
    assert f"--max-update N   training stops after N updates of 1,000 tokens (default: {updates})" in header
    assert 0 <= low < high <= 100
    assert f"trains {updates} updates (`--max-update`)" in (REPO / "README.md").read_text(encoding="utf-8")


def test_demo_defaults_reach_the_stated_bleu(tmp_path):
    """README's first command as a new user runs it (every default): the BLEU its header promises, the
    score line, every test sentence translated, and the copy-the-source yardstick.  Several minutes."""
    _, updates, low, high = _claim()
    out = tmp_path / "demo"
    proc = subprocess.run(["bash", str(REPO / "scripts" / "demo.sh"), "--out", str(out)],
                          capture_output=True, text=True, env=ENV, timeout=3 * 3600)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "time cap" not in proc.stderr, proc.stderr[-3000:]
    log = (out / "train.log").read_text()
    assert int(re.findall(r"num_updates (\d+)", log)[-1]) == updates
    assert f"after {updates} updates" in proc.stderr and "on 1 thread(s)" in proc.stderr
    bleu = json.loads((out / "bleu.json").read_text())
    assert bleu["bleu_kind"] == "detokenized"
    assert f"{bleu['bleu_label']} = {bleu['bleu']:.2f}   [{bleu['bleu_signature']}]" in proc.stdout.splitlines()
    assert len((out / "gen" / "hyp.txt").read_text().splitlines()) == 300
    copy = json.loads((out / "copy_bleu.json").read_text())["bleu"]
    assert f"copies the source scores {copy:.2f} BLEU" in proc.stderr and copy < 10
    assert low <= round(bleu["bleu"], 2) <= high, f"demo BLEU {bleu['bleu']:.2f} outside the stated {low:g}-{high:g}"


def _descendants(pid):
    """The pids of every process below ``pid``."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in os.listdir(f"/proc/{p}/task") if os.path.exists(f"/proc/{p}/task") else ():
            try:
                kids = [int(k) for k in open(f"/proc/{p}/task/{task}/children").read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def kill_and_wait(proc, sig, children, name, grace=15):
    """``sig`` to ``proc``; its status and stderr once every one of ``children`` has ended (a child
    still alive ``grace`` seconds later fails the test)."""
    proc.send_signal(sig)
    code = proc.wait(timeout=60)
    err = proc.stderr.read()
    end = time.time() + grace
    while any(os.path.exists(f"/proc/{c}") for c in children) and time.time() < end:
        time.sleep(0.1)
    assert not [c for c in children if os.path.exists(f"/proc/{c}")], f"a child outlived {name}"
    return code, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_killing_the_demo_ends_its_children_and_leaves_no_work_folder(tmp_path, sig):
    """demo.sh killed while its fairseq-train runs: every process it started ends with it, no work
    folder is left, one line, status 130."""
    out = tmp_path / "demo"
    proc = subprocess.Popen(["bash", str(REPO / "scripts" / "demo.sh"), "--out", str(out), "--train-size", "120",
                             "--test-size", "6", "--max-update", "100000"], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True, env=ENV)
    log = out / "train.log"
    end = time.time() + 600
    while not (log.exists() and "num_updates" in log.read_text()) and proc.poll() is None and time.time() < end:
        time.sleep(0.2)
    assert proc.poll() is None, proc.stderr.read()[-3000:]
    children = _descendants(proc.pid)
    assert children, "no fairseq-train below demo.sh"
    code, err = kill_and_wait(proc, sig, children, "demo.sh")
    assert code == 130 and "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == "demo.sh: interrupted"
    assert not list(tmp_path.rglob("*.tmp.*"))
