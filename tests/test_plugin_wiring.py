"""The plugin's wiring reads at a glance: every ``__init__.py`` of fairseq_local's registering
folders names each module it imports (registration order is the order written there, not the
order of a directory listing), ``patches.install_all`` installs every patch module, and no module
of the plugin imports one of the plugin's own modules inside a function body, beyond the few
listed here."""
import ast
from pathlib import Path

import fairseq_local
from fairseq_local import patches

PACKAGE = Path(fairseq_local.__file__).parent
FOLDERS = ("data", "models", "modules", "tasks", "criterions", "optim", "patches")
# (file, imported module): imports inside function bodies that remain
DEFERRED = {
    ("hub.py", "fairseq_local.patches.interactive_input"),
    ("hub.py", "fairseq_local.data.lattice_dataset"),
    ("hub.py", "fairseq_local.tasks.lattice_translation"),
    ("hub.py", "fairseq_local.tasks.stateful_language_modeling"),
    ("patches/checkpoint_fit.py", "fairseq_local.safe_loading"),
    ("patches/checkpoint_fit.py", "fairseq_local.tasks.lattice_translation"),
    ("patches/checkpoint_fit.py", "fairseq_local.tasks.stateful_language_modeling"),
    ("patches/training_paths.py", "fairseq_local.patches.checkpoint_fit"),
    ("tasks/lattice_translation.py", "fairseq_local.patches.interactive_input"),
}


def _imported_modules(init: Path, package: str):
    names = []
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.module == package:
            names += [a.name for a in node.names]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            raise AssertionError(f"{init}: imports {ast.unparse(node)!r}, not a module of its own folder")
    return names


def test_every_init_names_each_module_of_its_folder():
    for folder in FOLDERS:
        files = sorted(p.stem for p in (PACKAGE / folder).glob("*.py") if not p.name.startswith("_"))
        named = _imported_modules(PACKAGE / folder / "__init__.py", f"fairseq_local.{folder}")
        assert len(named) == len(set(named)), (folder, named)
        assert sorted(named) == files, (folder, sorted(set(files) - set(named)), sorted(set(named) - set(files)))


def test_install_all_installs_every_patch_module():
    named = _imported_modules(PACKAGE / "patches" / "__init__.py", "fairseq_local.patches")
    assert [m.__name__.rpartition(".")[2] for m in patches._MODULES] == named
    assert all(callable(m.install) for m in patches._MODULES)


def test_models_register_after_what_they_build_on():
    named = _imported_modules(PACKAGE / "models" / "__init__.py", "fairseq_local.models")
    assert named.index("rnnsearch") < named.index("lattice_rnnsearch") < named.index("baselines")
    assert named.index("parallel_lstm_lm") < named.index("baselines")
    assert named[0] == "arch_defaults"


def test_no_other_plugin_import_hides_in_a_function_body():
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith("fairseq_local"):
                    found.add((rel, inner.module))
                elif isinstance(inner, ast.Import):
                    found.update((rel, a.name) for a in inner.names if a.name.startswith("fairseq_local"))
    assert found <= DEFERRED, sorted(found - DEFERRED)
