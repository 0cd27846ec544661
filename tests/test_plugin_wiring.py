"""The plugin's wiring reads at a glance: every ``__init__.py`` of fairseq_local's registering
folders names each module it imports (registration order is the order written there, not the
order of a directory listing), ``patches.install_all`` installs every patch module, imports run
one way (no module imports from a higher floor of :data:`FLOORS`), no module of the plugin imports
one of the plugin's own modules inside a function body, and the modules of :data:`NO_DEFERRED`
import nothing inside a function body beyond :data:`DEFERRED`.  ``fairseq_local_core`` is the floor
below them all: it imports nothing of ours, and importing it starts neither torch nor fairseq."""
import ast
import subprocess
import sys
from pathlib import Path

from fairseq.dataclass import initialize
from fairseq.distributed import utils as distributed_utils
from fairseq.tasks import FairseqTask
from fairseq.trainer import Trainer

import fairseq_local
import fairseq_local_core
from fairseq_local import hook_points, patches
from fairseq_local.patches import shared_targets

PACKAGE = Path(fairseq_local.__file__).parent
CORE = Path(fairseq_local_core.__file__).parent
FOLDERS = ("data", "models", "modules", "tasks", "criterions", "optim", "patches")
# The floors of fairseq_local, bottom up: a module imports from its own floor or lower ones only.
# A folder is a floor; so is a top-level module.  Patches change fairseq's behaviour and nothing
# imports them (fairseq_local/__init__.py installs them).  Below them all: fairseq_local_core.
FLOORS = (
    ("version", "_quiet", "hook_points", "checkpoint_loads", "safe_loading", "config_checks", "ownership",
     "save_dir_lock"),
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
NO_DEFERRED = ("_cli_startup.py", "config_checks.py", "hub.py", "data/text_input.py",
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
    assert sorted(m.__name__.rpartition(".")[2] for m in patches.ORDER) == named
    assert all(callable(m.install) for m in patches.ORDER)
    assert [m.__name__.rpartition(".")[2] for m in patches.ORDER] != named  # an order stated, not the alphabet
    for m in patches.ORDER:  # each docstring names what it changes, for whom and why
        assert m.__doc__ and len(m.__doc__.split()) >= 20, m.__name__


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
                     "from fairseq_local.data import lattice_dataset\n"
                     "from . import arch_defaults\n")
    found = list(_plugin_imports(tree, "models/x.py"))
    assert found == ["patches/interactive_input.py", "data/lattice_dataset.py", "models/arch_defaults.py"]
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


# ------------------------------------------------------------------------------------------------
# fairseq_local_core: the bottom floor, importable without torch, fairseq or the plugin's start-up
# ------------------------------------------------------------------------------------------------
HEAVY = ("torch", "fairseq", "fairseq_cli", "hydra", "omegaconf", "fairseq_local", "fairseq_local_repro")
# what the harness and the shell doors import for text work: none of it may start torch or fairseq
TEXT_TOOLS = ("fairseq_local_repro.text.corpus_manifest", "fairseq_local_repro.text.gen_text",
              "fairseq_local_repro.text.lattice_builder", "fairseq_local_repro.text.output_claim",
              "fairseq_local_repro.text.text_input", "fairseq_local_repro.tools.build_lattices",
              "fairseq_local_repro.tools.rerank_nbest", "fairseq_local_repro.tools.score")


def _top_level_names(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.module.split(".")[0]


def test_core_imports_nothing_of_ours_nor_torch_or_fairseq():
    found = {(path.name, name) for path in sorted(CORE.glob("*.py"))
             for name in _top_level_names(ast.parse(path.read_text(encoding="utf-8"))) if name in HEAVY}
    assert not found, sorted(found)


def _loaded_after_importing(modules):
    code = ("import importlib, sys\n"
            f"for m in {list(modules)!r}:\n    importlib.import_module(m)\n"
            f"print(' '.join(sorted(n for n in {HEAVY!r} if n in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_core_and_text_tools_import_without_torch_or_fairseq():
    core = [f"fairseq_local_core.{p.stem}" for p in sorted(CORE.glob("*.py")) if p.stem != "__init__"]
    assert {"fairseq_local_core.errors", "fairseq_local_core.file_io", "fairseq_local_core.lattice",
            "fairseq_local_core.corpus_manifest", "fairseq_local_core.blank_lines"} <= set(core)
    assert _loaded_after_importing(core) == []
    assert _loaded_after_importing(TEXT_TOOLS) == ["fairseq_local_repro"]
    # the check sees an import of the plugin: importing fairseq_local starts torch and fairseq
    assert {"torch", "fairseq", "fairseq_local"} <= set(_loaded_after_importing(["fairseq_local"]))


def test_no_module_is_loaded_by_its_path():
    repo = PACKAGE.parent
    found = []
    for folder in ("fairseq_local", "fairseq_local_core", "fairseq_local_repro", "scripts"):
        for path in sorted((repo / folder).rglob("*")):
            if path.suffix in (".py", ".sh") and path.is_file():
                text = path.read_text(encoding="utf-8")
                found += [f"{path.relative_to(repo)}: {what}" for what in
                          ("spec_from_file_location", "SourceFileLoader", "sys.path.insert", "sys.path.append")
                          if what in text]
    assert not found, found


# ------------------------------------------------------------------------------------------------
# assignments into other libraries: in patches/ only, each target wrapped once
# ------------------------------------------------------------------------------------------------
# (file, target) assignments into another library outside patches/, each with its reason
OUTSIDE_PATCHES = {
    # the start-up hook runs before fairseq is imported (it cannot live on a floor that imports fairseq)
    ("_cli_startup.py", "hydra._internal.utils.run_and_report"): "start-up hook: before fairseq",
    # (it owns both hooks: patches/one_line_errors.py adds its handler there, add_error_handler)
    ("_cli_startup.py", "hydra.core.utils.JobReturn.return_value"): "start-up hook: before fairseq",
    ("_cli_startup.py", "sys.excepthook"): "start-up hook: before fairseq",
    # installed when a run builds this scheduler, on fairseq-train's module (see DEFERRED)
    ("optim/plateau_every_n_updates.py", "fairseq_cli.train.validate"): "the scheduler's own hook",
    # a setting, not a wrapper: torch.compile's recompile limit, raised for --rnn-impl compiled only
    ("modules/fast_path.py", "torch.<cfg>.<attr>"): "--rnn-impl compiled's recompile limit",
}
# A target that several behaviours change is wrapped by one module, which runs their layers
# (fairseq_local/hook_points.py): the owner of each hook point, and the layers there in install order.
POINT_OWNERS = {point: "patches/shared_targets.py" for point in hook_points.POINTS}
LAYERS = {
    hook_points.LOAD_CHECKPOINT_TO_CPU: ["safe_loading", "checkpoint_fit"],  # safe loading before the patches
    hook_points.TRAINER_LOAD_CHECKPOINT: ["checkpoint_fit", "exact_resume"],
    hook_points.TRAINER_SAVE_CHECKPOINT: ["dictionary_fingerprint", "exact_resume"],
    hook_points.TRAINER_GET_TRAIN_ITERATOR: ["shape_plan_batching", "exact_resume"],
    hook_points.CALL_MAIN: ["option_checks", "precision"],
    hook_points.ADD_DEFAULTS: ["option_checks", "hydra_arch_defaults"],
    hook_points.PREPROCESS_MAIN: ["option_checks", "preprocess_input"],
    hook_points.GET_BATCH_ITERATOR: ["complete_batches", "shape_plan_batching"],
    hook_points.BUILD_GENERATOR: ["option_checks", "shape_plan_batching"],
}


def _foreign_names(tree):
    """name -> the dotted origin of every name a file binds by importing another library."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if not a.name.startswith("fairseq_local"):
                    names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module and \
                not node.module.startswith("fairseq_local"):
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _foreign_assignments(source: str):
    """The dotted targets of the assignments (``X.attr = ...``, ``setattr(X, "attr", ...)``) a file
    makes into another library: X an imported library name, ``sys.modules`` or a name bound from an
    expression of one (``cls = getattr(torch.nn, cell)``)."""
    tree = ast.parse(source)
    origin = _foreign_names(tree)
    derived = {}
    for node in ast.walk(tree):  # names bound by looking a foreign object up (not by constructing one)
        value = getattr(node, "value", None) if isinstance(node, ast.Assign) else \
            getattr(node, "iter", None) if isinstance(node, ast.For) else None
        lookup = isinstance(node, ast.For) or isinstance(value, (ast.Name, ast.Attribute)) or \
            isinstance(value, ast.Call) and (isinstance(value.func, ast.Name) and value.func.id == "getattr" or
                                             isinstance(value.func, ast.Attribute) and value.func.attr == "get")
        if value is None or not lookup:
            continue
        bases = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} & set(origin)
        if bases:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ([t] if isinstance(t, ast.Name) else t.elts if isinstance(t, ast.Tuple) else []):
                    if isinstance(n, ast.Name) and n.id != "self":
                        derived[n.id] = f"{origin[sorted(bases)[0]]}.<{n.id}>"
    found = []

    def dotted(expr):
        if isinstance(expr, ast.Name):
            return origin.get(expr.id) or derived.get(expr.id)
        if isinstance(expr, ast.Attribute):
            base = dotted(expr.value)
            return None if base is None else f"{base}.{expr.attr}"
        return None

    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else []
        targets = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
        for t in targets:
            if isinstance(t, ast.Attribute) and dotted(t.value) is not None:
                found.append(f"{dotted(t.value)}.{t.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and \
                len(node.args) >= 2 and dotted(node.args[0]) is not None:
            attr = node.args[1].value if isinstance(node.args[1], ast.Constant) else "<attr>"
            found.append(f"{dotted(node.args[0])}.{attr}")
    return found


def _all_foreign_assignments():
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for target in _foreign_assignments(path.read_text(encoding="utf-8")):
            out.setdefault(target, set()).add(rel)
    return out


def test_assignments_into_other_libraries_live_in_patches_each_target_once():
    found = _all_foreign_assignments()
    outside = {(rel, target) for target, rels in found.items() for rel in rels if not rel.startswith("patches/")}
    assert outside == set(OUTSIDE_PATCHES), (sorted(outside - set(OUTSIDE_PATCHES)),
                                             sorted(set(OUTSIDE_PATCHES) - outside))
    twice = {target: sorted(rels) for target, rels in found.items() if len(rels) > 1}
    assert not twice, twice


def test_each_hook_point_is_wrapped_by_its_owner_and_layered_in_install_order():
    found = _all_foreign_assignments()
    for point in hook_points.POINTS:
        if point == hook_points.PREPROCESS_MAIN:  # wrapped on the module fairseq-preprocess imported
            assert "sys.<preprocess>.main" in found and found["sys.<preprocess>.main"] == {POINT_OWNERS[point]}
        else:
            assert found[point] == {POINT_OWNERS[point]}, (point, found.get(point))
        layers = [layer.__module__.rpartition(".")[2] for layer in hook_points.layers(point)]
        assert layers == LAYERS[point], (point, layers)
        order = ["safe_loading"] + [m.__name__.rpartition(".")[2] for m in patches.ORDER]
        assert sorted(layers, key=order.index) == layers, point
    for target in ("Trainer.load_checkpoint", "Trainer.save_checkpoint", "Trainer.get_train_iterator",
                   "FairseqTask.get_batch_iterator", "FairseqTask.build_generator"):
        owner, attr = target.split(".")
        cls = Trainer if owner == "Trainer" else FairseqTask
        assert shared_targets.wrapped_point(getattr(cls, attr)).endswith(target)
    assert shared_targets.wrapped_point(distributed_utils.call_main) == hook_points.CALL_MAIN
    assert shared_targets.wrapped_point(initialize.add_defaults) == hook_points.ADD_DEFAULTS


def test_assignment_scan_finds_what_it_must():
    source = ("import sys\nfrom fairseq import checkpoint_utils as cu\nimport torch\nfrom fairseq.trainer import Trainer\n"
              "cu.load_checkpoint = f\nTrainer.save_checkpoint = g\nsetattr(Trainer, 'x', 1)\nsys.excepthook = h\n"
              "cls = getattr(torch.nn, 'LSTM')\ncls.forward = k\nm = sys.modules.get('a')\nm.main = k\n"
              "def f(args):\n    args.x = 1\n    self_made = object()\n    self_made.y = 2\n")
    assert _foreign_assignments(source) == [
        "fairseq.checkpoint_utils.load_checkpoint", "fairseq.trainer.Trainer.save_checkpoint", "sys.excepthook",
        "torch.<cls>.forward", "sys.<m>.main", "fairseq.trainer.Trainer.x"]
    tuple_source = "from fairseq.trainer import Trainer\nTrainer.a, Trainer.b = f, g\n"
    assert _foreign_assignments(tuple_source) == ["fairseq.trainer.Trainer.a", "fairseq.trainer.Trainer.b"]


def test_nothing_imports_a_patch_module():
    """What two floors share lives on a lower floor: only the package's __init__.py (which installs
    them) and patches/__init__.py import the patch modules."""
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in ("__init__.py", "patches/__init__.py"):
            continue
        found.update((rel, target) for target in _plugin_imports(ast.parse(path.read_text(encoding="utf-8")), rel)
                     if target.startswith("patches/"))
    repro = PACKAGE.parent / "fairseq_local_repro"
    for path in sorted(repro.rglob("*.py")):
        if "fairseq_local.patches" in path.read_text(encoding="utf-8"):
            found.add((path.relative_to(repro.parent).as_posix(), "fairseq_local.patches"))
    assert not found, sorted(found)
