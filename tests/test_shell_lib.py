"""scripts/lib/options.sh, the one option parser of the shell scripts: values, flags, lists, options
handed on, side effects, `--`, help and the one-line errors; and that no script parses its options
by hand."""
import re
import subprocess

import pytest

from contract_lib import REPO

SCRIPTS = REPO / "scripts"
TINY = f"""#!/usr/bin/env bash
# A tiny script.
#
# usage: tiny.sh [--row ROW] [--cpu] [--ref R]... [-- OVERRIDES]
set -euo pipefail
source "{SCRIPTS}/lib/common.sh"
shout() {{ echo "shout: $1"; }}
opt --row ROW table2_mc_rnn_3; opt --data DATA; flag --cpu CPU_FLAG; flag --separate-bpe joint 0 1
opt_list --ref REFS; opt_args --set SETS; flag_args --one-best ONEBEST --lattice-one-best
opt_call --shout shout; flag_call --small set_small; positional TARGET TARGET
rest_args EXTRA "Hydra overrides go after --"
parse_options "$@"
echo "ROW=$ROW DATA=$DATA CPU=$CPU_FLAG joint=$joint TARGET=$TARGET SMALL=${{SMALL:-0}}"
printf 'REFS=%s\\n' "${{REFS[@]}}"; printf 'SETS=%s\\n' "${{SETS[@]}}"; printf 'ONEBEST=%s\\n' "${{ONEBEST[@]}}"
printf 'EXTRA=%s\\n' "${{EXTRA[@]}}"; printf 'SMALL_GEN=%s\\n' "${{SMALL_GEN[*]}}"
if given --row; then echo "row given"; fi
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("shell_lib") / "tiny.sh"
    path.write_text(TINY)

    def run(*args):
        proc = subprocess.run(["bash", str(path), *args], capture_output=True, text=True, timeout=60)
        return proc.returncode, proc.stdout, proc.stderr
    return run


def test_defaults(tiny):
    code, out, err = tiny()
    assert code == 0 and err == ""
    assert out.splitlines()[0] == "ROW=table2_mc_rnn_3 DATA= CPU=0 joint=1 TARGET= SMALL=0"
    assert "row given" not in out and "EXTRA=\n" in out and "REFS=\n" in out


def test_values_flags_lists_and_rest(tiny):
    code, out, err = tiny("--row", "r1", "--data=d with space", "--cpu", "--separate-bpe", "--ref", "a", "--ref", "b",
                          "--set", "mt02=x", "--set", "mt03=y", "--one-best", "--small", "--shout", "hi", "tgt",
                          "--", "model.x=1", "--row", "--unknown")
    assert code == 0, err
    lines = out.splitlines()
    assert "shout: hi" in lines
    assert "ROW=r1 DATA=d with space CPU=1 joint=0 TARGET=tgt SMALL=1" in lines
    assert [l for l in lines if l.startswith("REFS=")] == ["REFS=a", "REFS=b"]
    assert [l for l in lines if l.startswith("SETS=")] == ["SETS=--set", "SETS=mt02=x", "SETS=--set", "SETS=mt03=y"]
    assert "ONEBEST=--lattice-one-best" in lines
    # everything after -- is handed on untouched, options of the script included
    assert [l for l in lines if l.startswith("EXTRA=")] == ["EXTRA=model.x=1", "EXTRA=--row", "EXTRA=--unknown"]
    assert "SMALL_GEN=--beam 2 --max-len-a 0 --max-len-b 16" in lines  # --small ran set_small
    assert "row given" in lines


def test_a_value_may_start_with_a_dash(tiny):
    code, out, _ = tiny("--row", "-1")
    assert code == 0 and out.startswith("ROW=-1 ")


@pytest.mark.parametrize("args,message", [
    (["--row"], "option --row needs a value"),
    (["--row", "--cpu"], "option --row needs a value"),
    (["--row", ""], "option --row needs a value"),
    (["--row="], "option --row needs a value"),
    (["--rwo", "x"], "unknown option '--rwo' (did you mean --row? see -h; Hydra overrides go after --)"),
    (["--refs", "x"], "unknown option '--refs' (did you mean --ref? see -h; Hydra overrides go after --)"),
    (["--frobnicate"], "unknown option '--frobnicate' (see -h; Hydra overrides go after --)"),
    (["--row", "a", "--row", "b"], "option --row is given twice"),
    (["--cpu", "--cpu"], "option --cpu is given twice"),
    (["--cpu=yes"], "option --cpu takes no value (got '--cpu=yes')"),
    (["one", "two"], "one TARGET only (got 'one' and 'two')"),
])
def test_one_line_errors(tiny, args, message):
    code, out, err = tiny(*args)
    assert code == 2 and out == ""
    assert err.splitlines() == [f"tiny.sh: error: {message}"]


def test_help_is_the_header(tiny):
    for flag in ("-h", "--help"):
        code, out, _ = tiny("--row", "x", flag, "--bogus")
        assert code == 0
        assert out.splitlines() == ["A tiny script.", "", "usage: tiny.sh [--row ROW] [--cpu] [--ref R]... [-- OVERRIDES]"]


def test_without_rest_args_or_positional(tmp_path):
    script = tmp_path / "plain.sh"
    script.write_text(f'set -euo pipefail\nsource "{SCRIPTS}/lib/common.sh"\nopt --out OUT\nparse_options "$@"\necho "$OUT"\n')
    for args, message in ((["--", "x"], "'--' is not accepted here: this script passes nothing on (see -h)"),
                          (["stray"], "unexpected argument 'stray' (options start with --; see -h)"),
                          (["--outt", "o"], "unknown option '--outt' (did you mean --out? see -h)")):
        proc = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and proc.stderr.splitlines() == [f"plain.sh: error: {message}"]


def _shell_scripts():
    return sorted(p for p in SCRIPTS.rglob("*.sh") if "lib" not in p.relative_to(SCRIPTS).parts)


OPTION_LOOP = re.compile(r'while \[\[? \$# -gt 0 \]\]?|case "?\$1"? in|case "\$\{1\}" in')


def test_no_script_parses_its_options_by_hand():
    looping = [str(p.relative_to(REPO)) for p in _shell_scripts() if OPTION_LOOP.search(p.read_text())]
    assert looping == [], f"option loops outside scripts/lib (declare the options, then parse_options): {looping}"


# the scripts that take options (the others read their configuration from the environment or
# hand every argument to a Python program)
PARSED = [p for p in _shell_scripts() if "parse_options" in p.read_text()]


# the doors: scripts that hand their command line to a Python command, whose options object parses it
# (fairseq_local_repro/doors.py, tests/test_doors.py)
DOORS = [p for p in _shell_scripts() if re.search(r"^exec python -m fairseq_local_repro\.", p.read_text(), re.M)]


def test_every_script_with_options_uses_the_parser():
    assert {str(p.relative_to(SCRIPTS)) for p in DOORS} >= {"preprocess.sh"}
    names = {str(p.relative_to(SCRIPTS)) for p in PARSED + DOORS}
    assert {"preprocess.sh", "generate.sh", "train.sh", "demo.sh", "recipes/dpn_s2s.sh",
            "recipes/mc_rnn_iwslt14.sh", "gpu/bootstrap.sh"} <= names
    assert len(names) >= 24, sorted(names)


@pytest.mark.parametrize("script", PARSED + DOORS, ids=lambda p: str(p.relative_to(SCRIPTS)))
def test_each_script_declares_a_valid_parser(script):
    """Its declarations are well formed (a name declared twice is an error) and an unknown option
    is one line naming it, before anything runs."""
    proc = subprocess.run(["bash", str(script), "--frobnicate"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{script.name}: error: unknown option '--frobnicate' (see -h"), lines
    proc = subprocess.run(["bash", str(script), "-h"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr
