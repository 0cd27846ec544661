"""tests/mutation/mutation.sh: the equivalents list, the module table, and one module's mutation run in CI
(the lattice composition and GRU cell: max pooling / Eq. 21 and Eq. 12-15), whose kill rate must
stay at or above 90% of the non-equivalent mutants."""
import configparser
import json
import os
import subprocess

import pytest

from contract_lib import REPO
from mutation import run as mutation

CI_MODULE = "lattice_compose"
CI_SECONDS = 170


def test_every_module_names_existing_files_and_tests():
    for name, module in mutation.MODULES.items():
        for path in list(module.files) + list(module.tests):
            assert (REPO / path).is_file(), f"{name}: {path}"
        assert all(funcs for funcs in module.files.values()), name
        prefixes = tuple(mutation.module_name(path) + "." for path in module.files)
        for glob in mutation.mutant_globs(module):
            assert glob.startswith(prefixes) and glob.endswith("__mutmut_*"), glob


def test_deselected_tests_exist_and_reach_mutmut(tmp_path):
    for name, module in mutation.MODULES.items():
        for test in module.deselect:
            path, _, func = test.partition("::")
            assert path in module.tests, f"{name}: {test} is not in one of the module's test files"
            assert f"def {func}(" in (REPO / path).read_text(encoding="utf-8"), f"{name}: no test {test}"
    mutation.write_config(tmp_path, mutation.MODULES["gencnn"])
    cfg = configparser.ConfigParser()
    cfg.read(tmp_path / "setup.cfg", encoding="utf-8")
    args = cfg.get("mutmut", "pytest_add_cli_args_test_selection").split()
    assert args == list(mutation.MODULES["gencnn"].tests) + [
        "--deselect", "tests/test_gencnn.py::test_eval_lm_every_sentence_length"]


def test_mutant_names_map_back_to_file_and_function():
    assert mutation.function_of("fairseq_local.modules.lattice_gru.xǁLatticeGRUǁ_cell__mutmut_12") == (
        "fairseq_local/modules/lattice_gru.py", "xǁLatticeGRUǁ_cell")
    assert mutation.function_of("fairseq_local_repro.analysis.x.x_main__mutmut_1") == (
        "fairseq_local_repro/analysis/x.py", "x_main")


def test_equivalents_file_parses_and_matches_by_changed_lines(tmp_path):
    entries = mutation.load_equivalents()  # the checked-in list is well formed
    assert all(e.reason for e in entries)
    f = tmp_path / "eq.txt"
    f.write_text("# comment\n\nfairseq_local/m.py::x_f\n- a = b + 1\n+ a = b + 2\nreason: only a's parity is read\n",
                 encoding="utf-8")
    (eq,) = mutation.load_equivalents(f)
    diff = "--- fairseq_local/m.py\n+++ fairseq_local/m.py\n@@ -1,2 +1,2 @@\n def f(b):\n-    a = b + 1\n+    a = b + 2\n"
    assert mutation.match_equivalent("fairseq_local.m.x_f__mutmut_4", diff, [eq]) is eq and eq.used
    assert mutation.match_equivalent("fairseq_local.m.x_g__mutmut_4", diff, [eq]) is None
    other = diff.replace("b + 2", "b - 1")
    assert mutation.match_equivalent("fairseq_local.m.x_f__mutmut_5", other, [eq]) is None


@pytest.mark.parametrize("text,message", [
    ("no separator here\n- a\nreason: r\n", "expected 'path::function'"),
    ("p.py::x_f\n- a\n", "has no 'reason:' line"),
    ("p.py::x_f\nreason: r\n", "has no '-'/'+' lines"),
    ("p.py::x_f\n- a\nsomething else\n", "expected '- old', '+ new' or 'reason: ...'"),
])
def test_bad_equivalents_file_is_a_one_line_error(tmp_path, capsys, text, message):
    f = tmp_path / "eq.txt"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        mutation.load_equivalents(f)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err and f"{f}:" in err


def test_unknown_module_is_a_one_line_error():
    proc = subprocess.run(["bash", str(REPO / "tests/mutation/mutation.sh"), "no_such_module"], capture_output=True,
                          text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("mutation.sh: error: unknown module(s) no_such_module; choose from "
                                   + ", ".join(mutation.MODULES))


@pytest.mark.slow
def test_ci_module_kill_rate(tmp_path):
    """One module's mutants against its tests, within CI's budget (the full sweep, every module, is
    ``bash tests/mutation/mutation.sh``)."""
    out = tmp_path / "report.json"
    env = dict(os.environ, MUTATION_NICE="0")
    proc = subprocess.run(["bash", str(REPO / "tests/mutation/mutation.sh"), CI_MODULE, "--time-limit", str(CI_SECONDS),
                           "--min-kill-rate", "0.9", "--json", str(out), "--jobs", "1"],
                          capture_output=True, text=True, env=env, timeout=CI_SECONDS + 60)
    assert out.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text(encoding="utf-8"))[CI_MODULE]
    assert not report["error"], report["error"]
    assert report["mutants"] >= 50, report
    assert report["kill_rate"] >= 0.9, proc.stdout[-6000:]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
