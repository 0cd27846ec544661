"""The plugin's wiring reads at a glance: every ``__init__.py`` of fairseq_local's registering
folders names each module it imports (registration order is the order written there, not the
order of a directory listing), ``patches.install_all`` installs every patch module, imports run
one way (no module imports from a higher floor of :data:`FLOORS`), no module of the plugin imports
one of the plugin's own modules inside a function body, and the modules of :data:`NO_DEFERRED`
import nothing inside a function body beyond :data:`DEFERRED`."""
import ast
from pathlib import Path

import fairseq_local
from fairseq_local import patches

PACKAGE = Path(fairseq_local.__file__).parent
FOLDERS = ("data", "models", "modules", "tasks", "criterions", "optim", "patches")
# The floors of fairseq_local, bottom up: a module imports from its own floor or lower ones only.
# A folder is a floor; so is a top-level module.  Patches change fairseq's behaviour and nothing
# imports them (fairseq_local/__init__.py installs them).
FLOORS = (
    ("version", "_quiet", "errors", "file_io", "safe_loading", "config_checks"),
    ("data",),
    ("modules",),
    ("models",),
    ("optim",),
    ("tasks",),
    ("criterions",),
    ("hub",),
    ("patches",),
)
# Modules outside the floors: the package's __init__ (imports every floor) and the start-up hook
# the .pth file loads by path before fairseq (it imports no module of the plugin at all).
OUTSIDE = {"__init__": None, "_cli_startup": -1}
# Modules that import everything at their top, but for the imports listed in DEFERRED.
NO_DEFERRED = ("_cli_startup.py", "config_checks.py", "file_io.py", "hub.py", "data/text_input.py",
               "optim/plateau_every_n_updates.py", "tasks/lattice_translation.py", "patches/checkpoint_fit.py",
               "patches/interactive_input.py", "patches/option_checks.py", "patches/training_paths.py")
# (file, imported module): imports inside function bodies that remain, and why
DEFERRED = {
    # the start-up hook runs before fairseq's CLI imports anything: fairseq, OmegaConf and Hydra load
    # on the way to an error exit only (fairseq's import-time logging set-up must come after
    # fairseq_local/_quiet.py), Hydra in fairseq-hydra-train alone
    ("_cli_startup.py", "fairseq.models"): "start-up order: error path only",
    ("_cli_startup.py", "fairseq.registry"): "start-up order: error path only",
    ("_cli_startup.py", "fairseq.tasks"): "start-up order: error path only",
    ("_cli_startup.py", "omegaconf.errors"): "start-up order: error path only",
    ("_cli_startup.py", "hydra._internal"): "fairseq-hydra-train only",
    ("_cli_startup.py", "hydra.core"): "fairseq-hydra-train only",
    # fairseq-train's module configures the root logger when imported (logging.basicConfig): it is
    # imported when a run builds this scheduler, by which time fairseq-train has imported it
    ("optim/plateau_every_n_updates.py", "fairseq_cli"): "import-time logging set-up of fairseq-train",
}


def _module_floor(rel: str):
    """The index in FLOORS of ``rel`` (a path relative to the package), or OUTSIDE's value."""
    parts = rel[:-len(".py")].split("/")
    name = parts[0]
    if len(parts) == 1 and name in OUTSIDE:
        return OUTSIDE[name]
    for i, floor in enumerate(FLOORS):
        if name in floor:
            return i
    raise AssertionError(f"fairseq_local/{rel}: on no floor of FLOORS; add it there")


def _plugin_imports(tree, rel: str):
    """The fairseq_local modules a file imports (anywhere in it), as paths relative to the package."""
    package = ["fairseq_local"] + rel.split("/")[:-1]
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                module = ".".join(package[:len(package) - node.level + 1] + ([module] if module else []))
            if module == "fairseq_local" or module.startswith("fairseq_local."):
                names = [f"{module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("fairseq_local.")]
        for name in names:
            parts = name.split(".")[1:]
            while parts:
                candidate = PACKAGE.joinpath(*parts)
                if candidate.with_suffix(".py").is_file():
                    yield "/".join(parts) + ".py"
                    break
                if (candidate / "__init__.py").is_file():
                    yield "/".join(parts) + "/__init__.py"
                    break
                parts = parts[:-1]


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


def test_every_module_is_on_a_floor_and_imports_run_one_way():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        floor = _module_floor(rel)
        if floor is None:
            continue
        for target in _plugin_imports(ast.parse(path.read_text(encoding="utf-8")), rel):
            target_floor = _module_floor(target)
            if floor == -1 or target_floor is None or target_floor > floor:
                upward.append(f"{rel} imports {target}")
    assert not upward, upward


def test_floors_check_finds_an_upward_import():
    tree = ast.parse("from fairseq_local.patches.interactive_input import install\n"
                     "from fairseq_local.data import lattice\n"
                     "from . import arch_defaults\n")
    found = list(_plugin_imports(tree, "models/x.py"))
    assert found == ["patches/interactive_input.py", "data/lattice.py", "models/arch_defaults.py"]
    assert _module_floor(found[0]) > _module_floor("models/x.py") == _module_floor(found[2]) > _module_floor(found[1])


def test_no_deferred_import_beyond_the_listed_ones():
    found = set()
    for rel in NO_DEFERRED:
        for node in ast.walk(ast.parse((PACKAGE / rel).read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom):
                        found.add((rel, ".".join((inner.module or "").split(".")[:2])))
                    elif isinstance(inner, ast.Import):
                        found.update((rel, ".".join(a.name.split(".")[:2])) for a in inner.names)
    assert found <= set(DEFERRED), sorted(found - set(DEFERRED))
    assert set(DEFERRED) <= found, sorted(set(DEFERRED) - found)  # the list holds only what remains


def test_no_plugin_import_hides_in_a_function_body():
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
    assert not found, sorted(found)
