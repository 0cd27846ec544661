"""A new user's first hour, our scripts: degenerate options, an empty input and Ctrl-C in
``scripts/preprocess.sh``, ``scripts/build_lattices.py`` and ``scripts/preprocess_lattices.py``:
one line, nothing half-written.

Most cases run the code path in-process and finish it as the plugin's excepthook does (``call`` of
tests/test_bad_inputs.py); a few run the real CLIs to check the hook.  The tiny checkpoints come
from the session fixture ``tiny_checkpoints`` (tests/conftest.py).
"""
import sys

import pytest

from contract_lib import REPO
from fairseq_local_repro.tools import build_lattices, preprocess_lattices
from test_bad_inputs import assert_one_line, call, run


@pytest.mark.parametrize("value", ["0", "two"])
def test_preprocess_sh_workers(tmp_path, value):
    code, err = run("bash", REPO / "scripts" / "preprocess.sh", "--src", "de", "--tgt", "en", "--train", tmp_path / "t",
                    "--valid", tmp_path / "v", "--destdir", tmp_path / "bin", "--workers", value)
    assert_one_line(code, err, f"preprocess.sh: error: --workers must be a positive integer, not '{value}'",
                    leftovers=[tmp_path / "bin"])


def test_preprocess_sh_ctrl_c_leaves_destdir_as_it_was(tmp_path):
    """Ctrl-C (SIGINT to the whole process group) while fairseq-preprocess runs: one line, status
    130, no --destdir and no work folder, no child's traceback, and the child is ended (fault
    injection: a Python fairseq-preprocess that presses Ctrl-C, then would run for an hour)."""
    import os
    import signal
    import subprocess

    from test_bad_inputs import ENV

    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "fairseq-preprocess").write_text(f"#!{sys.executable}\nimport os, signal, time\n"
                                             "os.kill(0, signal.SIGINT)\ntime.sleep(3600)\n")
    (stub / "fairseq-preprocess").chmod(0o755)
    for split, n in (("train", 4), ("valid", 2)):
        for lang in ("de", "en"):
            (tmp_path / f"{split}.{lang}").write_text("".join(f"satz {i}\n" for i in range(n)))
    dest = tmp_path / "bin"
    # the stub sleeps an hour: a script that waited for it would outlast the timeout, whatever the machine's speed
    proc = subprocess.run(["bash", str(REPO / "scripts" / "preprocess.sh"), "--src", "de", "--tgt", "en", "--train",
                           str(tmp_path / "train"), "--valid", str(tmp_path / "valid"), "--destdir", str(dest),
                           "--bpe", "none"], capture_output=True, text=True, timeout=300, start_new_session=True,
                          env={**ENV, "PATH": f"{stub}{os.pathsep}{ENV['PATH']}"},
                          # as at a terminal, even where the test runner ignores SIGINT (started in the
                          # background), which a script would inherit and could not trap
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert proc.stderr.splitlines()[-1] == f"preprocess.sh: interrupted; {dest} was left as it was"
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stub", "train.de", "train.en", "valid.de", "valid.en"]


@pytest.mark.parametrize("argv,needle", [
    (["--input", "{empty}", "--segmenters", "char"],
     "{empty}: the file is empty (no sentences to build lattices from)"),
    (["--merge", "{empty}", "{empty}"], "{empty}: the file is empty (no sentences to build lattices from)"),
])
def test_build_lattices_empty_input(tmp_path, capsys, argv, needle):
    mod = build_lattices
    empty = tmp_path / "empty.zh"
    empty.write_bytes(b"")
    out = tmp_path / "out.lat"
    code, err = call(capsys, mod.main, [a.format(empty=empty) for a in argv] + ["--output", str(out)])
    assert_one_line(code, err, "build_lattices.py: error: " + needle.format(empty=empty), leftovers=[out])


def test_build_lattices_output_in_a_missing_directory(tmp_path, capsys, monkeypatch):
    """Refused before segmenting (not a FileNotFoundError traceback once all the work is done)."""
    mod = build_lattices
    monkeypatch.setattr(mod, "build_lines", None)  # never reached
    (tmp_path / "in.zh").write_text("下雨天\n")
    out = tmp_path / "nodir" / "o.lat"
    code, err = call(capsys, mod.main, ["--input", str(tmp_path / "in.zh"), "--output", str(out)])
    assert_one_line(code, err, f"build_lattices.py: error: --output {out}: no such directory {out.parent}")


def test_build_lattices_workers_zero(tmp_path, capsys):
    mod = build_lattices
    (tmp_path / "in.zh").write_text("下雨天\n")
    code, err = call(capsys, mod.main, ["--input", str(tmp_path / "in.zh"), "--output", str(tmp_path / "o.lat"),
                                        "--workers", "0"])
    assert_one_line(code, err, "error: --workers must be >= 1 (got 0)",
                    leftovers=[tmp_path / "o.lat"])


def test_build_lattices_ctrl_c(tmp_path, capsys, monkeypatch):
    """Ctrl-C while segmenting: one line, status 130, no output file (fault injection)."""
    mod = build_lattices

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(mod, "build_lines", interrupted)
    (tmp_path / "in.zh").write_text("下雨天\n")
    out = tmp_path / "o.lat"
    code, err = call(capsys, mod.main, ["--input", str(tmp_path / "in.zh"), "--output", str(out),
                                        "--segmenters", "char"])
    assert code == 130 and err.splitlines()[-1] == f"build_lattices.py: interrupted; {out} was not written"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.zh"]


def _sigint_handler(_):
    import signal

    return True, str(signal.getsignal(signal.SIGINT))


def test_lattice_pool_workers_leave_ctrl_c_to_the_parent():
    """A pool worker ignores SIGINT (the parent answers Ctrl-C in one line and ends its workers)."""
    import signal

    from fairseq_local_repro.text import lattice_builder

    previous = signal.getsignal(signal.SIGINT)
    assert lattice_builder.parallel_map(_sigint_handler, [0, 1, 2], workers=2) == [str(signal.SIG_IGN)] * 3
    assert signal.getsignal(signal.SIGINT) is previous
    assert lattice_builder.parallel_map(_sigint_handler, [0], workers=1) == [str(previous)]


@pytest.mark.parametrize("stage", ["dictionary", "binarize"])
def test_preprocess_lattices_ctrl_c(tmp_path, capsys, monkeypatch, stage):
    """Ctrl-C while binarizing: one line, status 130, --destdir not created (fault injection)."""
    from test_bad_inputs import _lattice_corpus

    mod = preprocess_lattices

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    stages = {"dictionary": "build_source_dictionary", "binarize": "write_lattices"}
    monkeypatch.setattr(mod, stages[stage], interrupted)
    argv = _lattice_corpus(tmp_path)
    code, err = call(capsys, mod.main, argv)
    assert code == 130
    assert err.splitlines()[-1] == f"preprocess_lattices.py: interrupted; {tmp_path / 'bin'} was not written"
    assert not (tmp_path / "bin").exists()


@pytest.mark.parametrize("option,value,needle", [
    ("--nwordssrc", "0", "--nwordssrc must be -1 (no cap) or >= 1 (got 0)"),
    ("--nwordstgt", "-5", "--nwordstgt must be -1 (no cap) or >= 1 (got -5)"),
    ("--padding-factor", "0", "--padding-factor must be >= 1 (got 0)"),
    ("--thresholdsrc", "-1", "--thresholdsrc must be >= 0 (got -1)"),
    ("--workers", "0", "--workers must be >= 1 (got 0)"),  # fairseq: ZeroDivisionError
])
def test_preprocess_lattices_degenerate_numbers(tmp_path, capsys, option, value, needle):
    """Refused before anything is read or written (--nwordssrc 0 would keep every word)."""
    from test_bad_inputs import _lattice_corpus

    mod = preprocess_lattices
    code, err = call(capsys, mod.main, _lattice_corpus(tmp_path) + [option, value])
    assert_one_line(code, err, "preprocess_lattices.py: error: " + needle)
    assert not (tmp_path / "bin").exists()
