"""Every Python command under ``scripts/`` is a front door: a docstring, the import of its ``main``
from the installed package and the call of it, at most ``MAX_CODE_LINES`` lines of code; the code
lives in ``fairseq_local_repro`` (importable, testable, runnable with ``python -m``), and no module
of ``fairseq_local`` or ``fairseq_local_repro`` runs a Python file under ``scripts/``."""
import ast
import importlib
import re
from pathlib import Path
from typing import List, Optional

import pytest

REPO = Path(__file__).resolve().parent.parent
FRONT_DOORS = sorted((REPO / "scripts").rglob("*.py"))
PACKAGE_FILES = sorted(p for pkg in ("fairseq_local", "fairseq_local_repro") for p in (REPO / pkg).rglob("*.py"))
MAX_CODE_LINES = 10
# the tail of a path built into scripts/ (f"{REPO}/scripts/x.py"); a command shown to people
# ("python scripts/x.py --help", ["python", "scripts/reproduce.py", ...]) names it from the checkout
SCRIPT_PATH = re.compile(r"/scripts/[\w/.-]*\.py")


def _calls_main(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "main"
               for n in ast.walk(node))


def _is_main_guard(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":``"""
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


def code_lines(source: str) -> int:
    """Lines holding code: not blank, not a comment, not the module docstring."""
    tree = ast.parse(source)
    doc = set()
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant):
        doc = set(range(tree.body[0].lineno, tree.body[0].end_lineno + 1))
    return sum(1 for n, line in enumerate(source.splitlines(), 1)
               if n not in doc and line.strip() and not line.strip().startswith("#"))


def front_door_problems(source: str) -> List[str]:
    """Why ``source`` is not a front door (an empty list when it is one)."""
    tree = ast.parse(source)
    problems = []
    if code_lines(source) > MAX_CODE_LINES:
        problems.append(f"{code_lines(source)} lines of code (a front door has at most {MAX_CODE_LINES})")
    body = tree.body
    if not (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        problems.append("no docstring naming the module it runs")
    else:
        body = body[1:]
    mains = [n for n in body if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("fairseq_local_repro")
             and [a.name for a in n.names] == ["main"]]
    if len(mains) != 1:
        problems.append("does not import its main from fairseq_local_repro (from fairseq_local_repro.X import main)")
    for node in body:
        if isinstance(node, ast.ImportFrom) and node in mains:
            continue
        if isinstance(node, ast.Import) and [a.name for a in node.names] == ["sys"]:
            continue
        if _is_main_guard(node) and not node.orelse and len(node.body) == 1 and _calls_main(node.body[0]):
            continue
        problems.append(f"line {node.lineno}: {ast.unparse(node).splitlines()[0]!r} is more than importing and "
                        "calling main")
    if not any(_is_main_guard(n) for n in body):
        problems.append('no `if __name__ == "__main__":` calling main')
    return problems


def main_module(source: str) -> Optional[str]:
    """The module a front door imports its main from."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and [a.name for a in node.names] == ["main"]:
            return node.module
    return None


def script_paths(source: str) -> List[str]:
    """Paths into scripts/ naming a Python file that ``source`` builds: a joined path with a
    ``"scripts"`` part and a ``*.py`` part (``os.path.join(REPO, "scripts", "x.py")``, ``REPO /
    "scripts" / "x.py"``), or an f-string ``f"{REPO}/scripts/x.py"``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            parts = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if "scripts" in parts and any(p.endswith(".py") for p in parts):
                found.append(ast.unparse(node))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
            if "scripts" in parts and any(p.endswith(".py") for p in parts):
                found.append(ast.unparse(node))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and SCRIPT_PATH.fullmatch(node.value):
            found.append(repr(node.value))
    return found


# ------------------------------------------------------------------------------------------------
# the checks themselves, on a front door and on a script that carries its logic
# ------------------------------------------------------------------------------------------------
FRONT_DOOR = '''#!/usr/bin/env python
"""Score hypotheses (``--help``; the code: fairseq_local_repro/tools/score.py)."""
import sys

from fairseq_local_repro.tools.score import main

if __name__ == "__main__":
    sys.exit(main())
'''
FAT_SCRIPT = '''"""Score hypotheses."""
import argparse
import sys

from fairseq_local_repro.text import text_input


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--hyp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def test_the_front_door_check():
    assert front_door_problems(FRONT_DOOR) == [] and main_module(FRONT_DOOR) == "fairseq_local_repro.tools.score"
    problems = front_door_problems(FAT_SCRIPT)
    assert "does not import its main from fairseq_local_repro (from fairseq_local_repro.X import main)" in problems
    assert "line 8: 'def main(argv=None):' is more than importing and calling main" in problems
    assert "line 2: 'import argparse' is more than importing and calling main" in problems
    padded = FRONT_DOOR.replace("import sys\n", "import sys\n" + "x = 1\n" * 7)
    assert f"11 lines of code (a front door has at most {MAX_CODE_LINES})" in front_door_problems(padded)
    assert "no docstring naming the module it runs" in front_door_problems(FRONT_DOOR.replace('"""', "#", 2))
    no_call = FRONT_DOOR.replace("sys.exit(main())", "sys.exit(0)")
    assert """line 7: "if __name__ == '__main__':" is more than importing and calling main""" in \
        front_door_problems(no_call)


def test_the_script_path_check():
    source = '''import os, sys
from pathlib import Path
REPO = "r"
a = [sys.executable, os.path.join(REPO, "scripts", "build_lattices.py"), "--input", "x"]
b = Path(REPO) / "scripts" / "analysis" / "lattice_gates.py"
c = f"{REPO}/scripts/score.py"
d = "python scripts/score.py --hyp h"                  # a command shown to the user
e = ["bash", os.path.join(REPO, "scripts", "generate.sh")]
f = [sys.executable, "-m", "fairseq_local_repro.tools.score"]
'''
    assert sorted(script_paths(source)) == ["'/scripts/score.py'",
                                            "Path(REPO) / 'scripts' / 'analysis' / 'lattice_gates.py'",
                                            "os.path.join(REPO, 'scripts', 'build_lattices.py')"]


# ------------------------------------------------------------------------------------------------
# the tree
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", FRONT_DOORS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_python_command_is_a_front_door(path):
    source = path.read_text(encoding="utf-8")
    assert front_door_problems(source) == [], f"{path.relative_to(REPO)}: move its code into fairseq_local_repro"
    module = importlib.import_module(main_module(source))
    assert callable(module.main)
    # the module runs as `python -m MODULE` too (the harness runs it so)
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    runs = [n for n in tree.body if _is_main_guard(n) and _calls_main(n)]
    package_main = REPO / module.__name__.split(".")[0] / "__main__.py"
    assert runs or f"from {module.__name__} import main" in package_main.read_text(encoding="utf-8"), \
        f"{module.__name__} has no `if __name__ == \"__main__\":` calling main"


def test_front_doors_exist():
    names = {str(p.relative_to(REPO)) for p in FRONT_DOORS}
    assert {"scripts/score.py", "scripts/reproduce.py", "scripts/gpu/run_all.py",
            "scripts/analysis/lattice_gates.py"} <= names


def test_the_packages_run_no_file_under_scripts():
    """The harness and the kit run the package's modules (``python -m ...`` or a call), never a
    file under scripts/ (a front door is for people)."""
    found = {str(p.relative_to(REPO)): script_paths(p.read_text(encoding="utf-8")) for p in PACKAGE_FILES}
    assert PACKAGE_FILES and {p: paths for p, paths in found.items() if paths} == {}
