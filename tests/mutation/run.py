"""Mutation testing of the code that implements the papers' equations, with mutmut.

Entry point: ``tests/mutation/mutation.sh [MODULE ...]`` (``--list`` names the modules).  For each module
the working tree is copied to a scratch directory (mutmut rewrites the copy, never the checkout),
the ``[mutmut]`` section of ``setup.cfg`` is completed with the module's files and test files, and
``mutmut run`` tries every mutant of the module's functions against the tests that call them.  The
report gives killed / survived / equivalent / timed out per module and the diff of every surviving
mutant.  A survivor that cannot change behaviour is listed, with its reason, in
``tests/mutation/equivalents.txt``::

    fairseq_local/modules/lattice_gru.py::xǁLatticeGRUǁforward
    - if outs:
    + if not outs:
    reason: one line saying why no input can tell the two apart

(the function is mutmut's name for it; the ``-``/``+`` lines are the changed lines, stripped).
The kill rate is (killed + timed out) / (mutants - equivalent); ``--min-kill-rate`` makes the
command fail below it.
"""
import argparse
import configparser
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[2]
EQUIVALENTS = REPO / "tests" / "mutation" / "equivalents.txt"


@dataclass
class Module:
    """Files to mutate (path -> mutmut function-name globs; ``x*`` = every function) and the test
    files that exercise them."""

    files: Dict[str, Sequence[str]]
    tests: Sequence[str]
    doc: str = ""
    # test ids (``file::name``) of those files left out of the mutation run: end-to-end tests that
    # take most of a run's time while faster tests of the same files cover the mutated code
    deselect: Sequence[str] = ()


ALL = ("x*",)
MODULES: Dict[str, Module] = {
    "mc_rnn": Module(
        {"fairseq_local/modules/multi_channel_rnn.py": ALL},
        ["tests/test_multi_channel_rnn.py"],
        "MC-RNN layer: Eq. 1-6, DropConnect"),
    "parallel_cells": Module(
        {"fairseq_local/modules/parallel_cell_rnn.py": ALL},
        ["tests/test_parallel_cell_rnn.py"],
        "parallel-cell LSTM layer"),
    "stateful_lm": Module(
        {"fairseq_local/tasks/stateful_language_modeling.py": ALL,
         "fairseq_local/data/stateful_bptt_dataset.py": ALL},
        ["tests/test_stateful_bptt_dataset.py", "tests/test_stateful_language_modeling_task.py",
         "tests/test_stateful_language_modeling.py"],
        "stateful truncated-BPTT task: windows and state carrying",
        # fairseq-train / fairseq-eval-lm / fairseq-hydra-train end to end and the real LM's validation
        # (15-90 s a run); the same windows, losses and carried state are checked in process, with a
        # tiny float64 LM, by tests/test_stateful_language_modeling_task.py
        deselect=("tests/test_stateful_language_modeling.py::test_carried_state_equals_whole_stream",
                  "tests/test_stateful_language_modeling.py::test_training_carries_state_and_eval_lm_matches",
                  "tests/test_stateful_language_modeling.py::test_yaml_gradient_norm_is_the_papers")),
    "lattice_gru": Module(
        {"fairseq_local/modules/lattice_gru.py": ALL},
        ["tests/test_lattice_gru_reference.py", "tests/test_lattice_gru.py"],
        "SWL-/DWL-GRU, pooling and gating (Eq. 10-21)"),
    # small enough for CI (tests/test_mutation.py): the composition g (max pooling / Eq. 21) and the cell
    "lattice_compose": Module(
        {"fairseq_local/modules/lattice_gru.py": ("x_compose", "xǁLatticeGRUǁ_cell")},
        ["tests/test_lattice_gru_reference.py"],
        "lattice composition g (Eq. 21 / max pooling) and the GRU cell (Eq. 12-15)"),
    "lattice_data": Module(
        {"fairseq_local_core/lattice.py": ALL, "fairseq_local_repro/text/lattice_builder.py": ALL},
        # tests/test_lattice.py (the scripts, dataset and task end to end, minutes a run) is left
        # out: the fast files check every function of lattice.py and lattice_builder.py value by value
        ["tests/test_lattice_data.py", "tests/test_lattice_builder.py"],
        "lattice builder: format, validation, merging"),
    "gencnn": Module(
        {"fairseq_local/modules/gencnn_layers.py": ALL, "fairseq_local/modules/gencnn_kernels.py": ALL},
        ["tests/test_gencnn_layers.py", "tests/test_gencnn_reference.py", "tests/test_gencnn.py"],
        "genCNN alpha/beta CNN layers",
        # fairseq-train + fairseq-eval-lm in subprocesses (14-48 s a run); the same lengths are
        # checked in process by test_every_length_full_equals_incremental
        deselect=("tests/test_gencnn.py::test_eval_lm_every_sentence_length",)),
    "dpn": Module(
        {"fairseq_local/modules/dpn_gate.py": ALL,
         "fairseq_local/modules/dpn_paths.py": ALL,
         "fairseq_local/models/dpn_s2s.py": ("xǁDPNEncoderǁforward", "xǁDPNDecoderǁextract_features",
                                              "xǁDPNDecoderǁforward", "xǁ_Embedderǁforward")},
        ["tests/test_dpn_paths.py", "tests/test_dpn_s2s_reference.py", "tests/test_dpn_s2s.py"],
        "DPN-S2S paths, gates (Eq. 4-10) and the flows' labels"),
    "analysis": Module(
        {"fairseq_local_repro/analysis/parallel_cells_masking.py": ("x_perplexity", "x_masking_table",
                                                                     "x_score_tokens"),
         "fairseq_local_repro/analysis/mc_rnn_bleu_by_length.py": ("x_bucket_of", "x_bleu_by_length")},
        ["tests/test_analysis_reference.py"],
        "analysis aggregation: cell-masking table, BLEU by length (Figure 5)"),
}


def die(msg: str, code: int = 2):
    print(f"mutation.sh: error: {msg}", file=sys.stderr)
    sys.exit(code)


# ---------------------------------------------------------------------------------------- names
def module_name(path: str) -> str:
    return path[: -len(".py")].replace("/", ".")


def mutant_globs(module: Module) -> List[str]:
    return [f"{module_name(p)}.{f}__mutmut_*" for p, funcs in module.files.items() for f in funcs]


def function_of(mutant: str) -> Tuple[str, str]:
    """``pkg.mod.xǁCǁf__mutmut_3`` -> (``pkg/mod.py``, ``xǁCǁf``)."""
    mangled = mutant.partition("__mutmut_")[0]
    mod, _, func = mangled.rpartition(".")
    return mod.replace(".", "/") + ".py", func


# ---------------------------------------------------------------------------------- equivalents
@dataclass
class Equivalent:
    where: str  # path::function
    removed: Tuple[str, ...]
    added: Tuple[str, ...]
    reason: str
    line: int
    used: bool = False


def load_equivalents(path: Path = EQUIVALENTS) -> List[Equivalent]:
    if not path.exists():
        return []
    records, cur = [], None
    for no, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            if cur is not None and not line:
                records.append(cur)
                cur = None
            continue
        if cur is None:
            if "::" not in line:
                die(f"{path}:{no}: expected 'path::function' to start a record, got {line!r}")
            cur = {"where": line, "-": [], "+": [], "reason": "", "line": no}
        elif line.startswith(("- ", "+ ")) or line in ("-", "+"):
            cur[line[0]].append(line[1:].strip())
        elif line.startswith("reason:"):
            cur["reason"] = line[len("reason:"):].strip()
        else:
            die(f"{path}:{no}: expected '- old', '+ new' or 'reason: ...', got {line!r}")
    if cur is not None:
        records.append(cur)
    out = []
    for r in records:
        if not r["reason"]:
            die(f"{path}:{r['line']}: record {r['where']} has no 'reason:' line")
        if not r["-"] and not r["+"]:
            die(f"{path}:{r['line']}: record {r['where']} has no '-'/'+' lines")
        out.append(Equivalent(r["where"], tuple(r["-"]), tuple(r["+"]), r["reason"], r["line"]))
    return out


def changed_lines(diff: str) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    removed, added = [], []
    for line in diff.splitlines():
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("-"):
            removed.append(line[1:].strip())
        elif line.startswith("+"):
            added.append(line[1:].strip())
    return tuple(removed), tuple(added)


def match_equivalent(mutant: str, diff: str, equivalents: List[Equivalent]) -> Optional[Equivalent]:
    path, func = function_of(mutant)
    removed, added = changed_lines(diff)
    for eq in equivalents:
        if eq.where == f"{path}::{func}" and eq.removed == removed and eq.added == added:
            eq.used = True
            return eq
    return None


# ------------------------------------------------------------------------------------ work tree
def copy_tree(dest: Path):
    """Copy the working tree (tracked and untracked, not ignored files) to ``dest``."""
    try:
        listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                                check=True, capture_output=True).stdout.decode().split("\0")
        files = [f for f in listed if f and (REPO / f).is_file()]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", "__pycache__", "mutants"}
        files = [str(p.relative_to(REPO)) for p in REPO.rglob("*")
                 if p.is_file() and not skip.intersection(p.relative_to(REPO).parts)]
    for f in files:
        target = dest / f
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, target)


def write_config(work: Path, module: Module):
    """The repository's [mutmut] section plus this module's files and test files."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg", encoding="utf-8")
    if not cfg.has_section("mutmut"):
        die(f"{REPO / 'setup.cfg'}: no [mutmut] section")
    cfg.set("mutmut", "only_mutate", "\n" + "\n".join(module.files))
    selection = list(module.tests) + [arg for test in module.deselect for arg in ("--deselect", test)]
    cfg.set("mutmut", "pytest_add_cli_args_test_selection", "\n" + "\n".join(selection))
    with open(work / "setup.cfg", "w", encoding="utf-8") as f:
        cfg.write(f)


# ------------------------------------------------------------------------------------- running
@dataclass
class Result:
    name: str
    status: Dict[str, str] = field(default_factory=dict)  # mutant -> status
    equivalent: Dict[str, Equivalent] = field(default_factory=dict)
    diffs: Dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    error: str = ""

    def count(self, *statuses) -> int:
        return sum(1 for m, s in self.status.items() if s in statuses and m not in self.equivalent)

    @property
    def considered(self) -> int:
        return len(self.status) - len(self.equivalent)

    @property
    def kill_rate(self) -> float:
        return (self.count("killed", "timeout") / self.considered) if self.considered else 1.0


def mutmut_env() -> Dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               PYTHONDONTWRITEBYTECODE="1")
    shared = REPO.parent / "shared" / "data"
    if "FAIRSEQ_LOCAL_SHARED_DATA" not in env and shared.is_dir():
        env["FAIRSEQ_LOCAL_SHARED_DATA"] = str(shared)
    return env


def run_module(name: str, module: Module, work_root: Path, jobs: int, equivalents: List[Equivalent],
               deadline: Optional[float]) -> Result:
    from mutmut.stats import status_by_exit_code

    res = Result(name)
    work = work_root / name
    work.mkdir(parents=True)
    copy_tree(work)
    missing = [p for p in list(module.files) + list(module.tests) if not (work / p).is_file()]
    if missing:
        res.error = f"module {name}: missing file(s) {', '.join(missing)}"
        return res
    write_config(work, module)
    start = time.time()
    timeout = None if deadline is None else max(1.0, deadline - start)
    log = work / "mutmut.log"
    with open(log, "w", encoding="utf-8") as out:
        cmd = ["nice", "-n", os.environ.get("MUTATION_NICE", "15"), sys.executable, "-c",
               "from mutmut.__main__ import cli; cli()", "run",
               "--max-children", str(jobs), *mutant_globs(module)]
        try:
            proc = subprocess.run(cmd, cwd=work, env=mutmut_env(), stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout)
            if proc.returncode != 0:
                res.error = f"module {name}: mutmut exited with {proc.returncode} (log: {log})"
        except subprocess.TimeoutExpired:
            res.error = f"module {name}: time limit reached; results are partial (log: {log})"
    res.seconds = time.time() - start
    globs = mutant_globs(module)
    for meta in sorted((work / "mutants").rglob("*.py.meta")):
        data = json.loads(meta.read_text(encoding="utf-8"))
        for mutant, code in data.get("exit_code_by_key", {}).items():
            if any(fnmatch.fnmatchcase(mutant, g) for g in globs):
                res.status[mutant] = status_by_exit_code[code]
    if not res.status and not res.error:
        res.error = f"module {name}: no mutants were generated (log: {log})"
    for mutant, status in sorted(res.status.items()):
        if status in ("killed", "timeout", "not checked"):
            continue
        show = subprocess.run([sys.executable, "-c", "from mutmut.__main__ import cli; cli()", "show", mutant],
                              cwd=work, env=mutmut_env(), capture_output=True, text=True)
        diff = "\n".join(line for line in show.stdout.splitlines() if not line.startswith("# "))
        eq = match_equivalent(mutant, diff, equivalents)
        if eq is not None:
            res.equivalent[mutant] = eq
        else:
            res.diffs[mutant] = diff
    return res


def report(results: List[Result], equivalents: List[Equivalent], show_diffs: bool = True) -> str:
    lines = []
    if show_diffs:
        for r in results:
            for mutant, diff in r.diffs.items():
                lines += [f"=== {r.name}: {r.status[mutant]}: {mutant}", diff, ""]
    header = (f"{'module':<15}{'mutants':>8}{'killed':>8}{'survived':>9}{'no tests':>9}{'equiv':>7}"
              f"{'timeout':>8}{'other':>7}{'kill rate':>10}{'seconds':>9}")
    lines += [header, "-" * len(header)]
    total = Result("total")
    for r in results:
        other = r.considered - r.count("killed", "timeout", "survived", "no tests")
        lines.append(f"{r.name:<15}{len(r.status):>8}{r.count('killed'):>8}{r.count('survived'):>9}"
                     f"{r.count('no tests'):>9}{len(r.equivalent):>7}{r.count('timeout'):>8}{other:>7}"
                     f"{100 * r.kill_rate:>9.1f}%{r.seconds:>9.0f}")
        total.status.update(r.status)
        total.equivalent.update(r.equivalent)
        total.seconds += r.seconds
    if len(results) > 1:
        lines.append(f"{'total':<15}{len(total.status):>8}{total.count('killed'):>8}"
                     f"{total.count('survived'):>9}{total.count('no tests'):>9}{len(total.equivalent):>7}"
                     f"{total.count('timeout'):>8}{'':>7}{100 * total.kill_rate:>9.1f}%{total.seconds:>9.0f}")
    for r in results:
        if r.error:
            lines.append(f"warning: {r.error}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="mutation.sh", description="Mutation testing (mutmut) of the equation code, one module at a time.")
    p.add_argument("modules", nargs="*", help=f"modules to run (default: all): {', '.join(MODULES)}")
    p.add_argument("--list", action="store_true", help="list the modules, their files and test files")
    p.add_argument("--jobs", type=int, default=int(os.environ.get("MUTATION_JOBS", "1")),
                   help="mutants tested in parallel (default 1, or $MUTATION_JOBS)")
    p.add_argument("--work-dir", help="scratch directory kept after the run (default: a temporary one, removed)")
    p.add_argument("--time-limit", type=float, help="seconds for the whole run; a module cut short is an error")
    p.add_argument("--min-kill-rate", type=float, default=0.0,
                   help="exit 1 when a module's kill rate (0..1) is below this")
    p.add_argument("--json", help="also write the per-module counts to this JSON file")
    p.add_argument("--no-diffs", action="store_true", help="do not print the surviving mutants' diffs")
    args = p.parse_args(argv)
    if args.list:
        for name, m in MODULES.items():
            print(f"{name}: {m.doc}\n  mutates: {', '.join(m.files)}\n  tests:   {', '.join(m.tests)}")
        return 0
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        die(f"unknown module(s) {', '.join(unknown)}; choose from {', '.join(MODULES)}")
    if args.jobs < 1:
        die(f"--jobs must be >= 1 (got {args.jobs})")
    if not 0.0 <= args.min_kill_rate <= 1.0:
        die(f"--min-kill-rate must be in [0, 1] (got {args.min_kill_rate})")
    try:
        import mutmut  # noqa: F401
    except ImportError:
        die("mutmut is not installed (pip install -e '.[test]')")
    names = args.modules or list(MODULES)
    equivalents = load_equivalents()
    deadline = None if args.time_limit is None else time.time() + args.time_limit
    if args.work_dir:
        work_root = Path(args.work_dir).resolve()
        if work_root.exists() and any(work_root.iterdir()):
            die(f"--work-dir {work_root} exists and is not empty")
        work_root.mkdir(parents=True, exist_ok=True)
    else:
        work_root = Path(tempfile.mkdtemp(prefix="fairseq-local-mutation-"))
    results = []
    try:
        for name in names:
            print(f"[mutation] {name}: {MODULES[name].doc}", file=sys.stderr, flush=True)
            results.append(run_module(name, MODULES[name], work_root, args.jobs, equivalents, deadline))
    finally:
        if not args.work_dir:
            shutil.rmtree(work_root, ignore_errors=True)
    print(report(results, equivalents, show_diffs=not args.no_diffs))
    if args.json:
        data = {r.name: {"mutants": len(r.status), "killed": r.count("killed"), "survived": r.count("survived"),
                         "no_tests": r.count("no tests"), "equivalent": len(r.equivalent),
                         "timeout": r.count("timeout"), "kill_rate": r.kill_rate, "seconds": r.seconds,
                         "error": r.error, "survivors": sorted(r.diffs)} for r in results}
        from fairseq_local_core.file_io import atomic_open

        with atomic_open(args.json) as f:
            json.dump(data, f, indent=1, ensure_ascii=False)
    if set(names) == set(MODULES):
        for eq in equivalents:
            if not eq.used:
                print(f"warning: {EQUIVALENTS.name}:{eq.line}: {eq.where} matches no surviving mutant",
                      file=sys.stderr)
    failed = [r for r in results if r.error or r.kill_rate < args.min_kill_rate]
    for r in failed:
        if not r.error:
            print(f"mutation.sh: {r.name}: kill rate {100 * r.kill_rate:.1f}% is below "
                  f"{100 * args.min_kill_rate:.0f}%", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
