"""One-line errors for the mistakes fairseq meets before it imports the plugin.

``--user-dir`` is what imports ``fairseq_local``, so a misspelled ``--user-dir fairseq_locl`` (fairseq:
``FileNotFoundError`` with a traceback) and a Hydra config that does not fit fairseq's schema (a
misspelled key under ``optimization:``, ``dataset:``, ``task:``..., an unknown top-level group, a
misspelled ``key=value`` override: Hydra prints its exception in several lines) end before any code
of ours has run.  This module is therefore loaded at interpreter start-up by ``fairseq_local.pth``,
which installing the package puts in ``site-packages`` (``setup.py``).  The ``.pth`` line only looks
at ``sys.argv`` and loads this file (standard library only, never the ``fairseq_local`` package, so
it registers nothing and changes nothing in fairseq) when the program's name holds ``fairseq``;
:func:`install` then acts only in fairseq's command-line programs (:data:`PROGRAMS`, as console
scripts or ``python -m fairseq_cli.<name>``):

* ``sys.excepthook``: a ``FileNotFoundError`` raised by ``fairseq.utils.import_user_module`` becomes
  ``PROG: error: --user-dir fairseq_locl: no such directory (/abs/fairseq_locl); did you mean
  --user-dir /abs/fairseq_local?``;
* ``fairseq-hydra-train``: Hydra's ``run_and_report`` (which prints what the job or the config
  composition raised) and ``JobReturn.return_value`` (which announces a failed job with ``Error
  executing job with overrides: [...]`` before re-raising its exception) are wrapped so that an
  unknown config key or a missing ``common.user_dir`` is one line, ours alone, naming the key with
  the closest keys of that group (or of another group: ``task.max_tokenz`` -> ``dataset.max_tokens``;
  an option of the chosen class that the YAML does not list: how to add it, ``++key=VALUE``), and a
  value its key's type refuses (``model.wide=two``) is one line naming the key.  A ``model.KEY=VALUE``
  override becomes ``++model.KEY=VALUE`` (:func:`model_overrides`): a row's YAML lists only what
  its arch does not set, and the model's options are overridable all the same.

Both end with exit status 2; every other exception, and every one under ``HYDRA_FULL_ERROR=1``,
keeps its traceback or Hydra's report.  In ``fairseq-hydra-train`` the hook also filters what Hydra
says about fairseq's own use of it (:data:`HYDRA_NOISE`) before our line or the training log.  Cost
(2 busy cores): about 15 microseconds of start-up in any other Python process; in a fairseq CLI,
the standard-library modules imported below, which fairseq imports next in any case.

The module imports only the standard library at its top: it runs before fairseq's CLI has imported
anything.  fairseq, OmegaConf and Hydra are imported inside the functions that need them: on the
way to an error exit (the messages), and Hydra in ``fairseq-hydra-train`` alone (:func:`_wrap_hydra`);
importing fairseq here would run its import-time logging set-up before the plugin's
``fairseq_local/_quiet.py``, and cost every other fairseq CLI the import of Hydra.
"""
import atexit
import dataclasses
import difflib
import importlib
import logging
import os
import sys
import warnings

PROGRAMS = ("train", "generate", "interactive", "eval_lm", "hydra_train", "validate", "preprocess", "score")
EXIT_STATUS = 2
_STATE = {}


def program(argv, orig_argv):
    """The fairseq CLI this process runs (``fairseq-train``, ``python -m fairseq_cli.train``...), or
    None for any other program."""
    if not argv:
        return None
    if argv[0] == "-m":
        if "-m" not in orig_argv:
            return None
        module = orig_argv[orig_argv.index("-m") + 1] if orig_argv.index("-m") + 1 < len(orig_argv) else ""
        name = module[len("fairseq_cli."):] if module.startswith("fairseq_cli.") else None
        return f"python -m {module}" if name in PROGRAMS else None
    name = os.path.basename(argv[0])
    if name.startswith("fairseq-") and name[len("fairseq-"):].replace("-", "_") in PROGRAMS:
        return name
    return None


def did_you_mean(word, candidates, prefix=""):
    close = difflib.get_close_matches(word, sorted(set(candidates)), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(prefix + c for c in close)}?" if close else ""


def _user_dir_frame(tb):
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "import_user_module" and code.co_filename.endswith(os.path.join("fairseq", "utils.py")):
            return tb.tb_frame
        tb = tb.tb_next
    return None


def user_dir_message(user_dir, hydra=False):
    """``--user-dir X`` that names no directory: the option, the path and the closest package
    directories beside it (the installed ``fairseq_local`` among them)."""
    option = "common.user_dir=" if hydra else "--user-dir "
    path = os.path.abspath(user_dir)
    parent, name = os.path.split(path.rstrip(os.sep))
    candidates = {}
    try:
        for entry in os.scandir(parent or "."):
            if entry.is_dir() and os.path.isfile(os.path.join(entry.path, "__init__.py")):
                candidates[entry.name] = os.path.join(os.path.dirname(user_dir), entry.name)
    except OSError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))  # the installed plugin
    candidates.setdefault(os.path.basename(here), here)
    close = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.6)
    hint = f"; did you mean {option}{candidates[close[0]]}?" if close else ""
    return f"{option}{user_dir}: no such directory ({path}){hint}"


def _dataclass_of(group, name):
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, MODEL_DATACLASS_REGISTRY
    from fairseq.registry import REGISTRIES
    from fairseq.tasks import TASK_DATACLASS_REGISTRY

    if group == "task":
        return TASK_DATACLASS_REGISTRY.get(name)
    if group == "model":
        return MODEL_DATACLASS_REGISTRY.get(ARCH_MODEL_NAME_REGISTRY.get(name, name))
    return REGISTRIES.get(group, {}).get("dataclass_registry", {}).get(name)


def _group_of(dataclass):
    """``"task."``, ``"model."``, ``"optimizer."``... for a config class registered there, else ""."""
    from fairseq.models import MODEL_DATACLASS_REGISTRY
    from fairseq.registry import REGISTRIES
    from fairseq.tasks import TASK_DATACLASS_REGISTRY

    registries = {"task": TASK_DATACLASS_REGISTRY, "model": MODEL_DATACLASS_REGISTRY}
    registries.update({g: r["dataclass_registry"] for g, r in REGISTRIES.items()})
    for group, registry in registries.items():
        if dataclass in registry.values():
            return group + "."
    return ""


def registered_options(group, name):
    """The options of the task, model, optimizer... registered as ``name`` in fairseq's registry
    for ``group`` (the plugin's own ones too: this runs only on the way to an error exit)."""
    try:
        dc = _dataclass_of(group, name)
        if dc is None:
            importlib.import_module("fairseq_local")
            dc = _dataclass_of(group, name)
    except Exception:
        return []
    return [f.name for f in dataclasses.fields(dc)] if dc is not None and dataclasses.is_dataclass(dc) else []


def config_key_message(exc):
    """A Hydra/OmegaConf error about a key that does not exist: the key and the closest keys of its
    group; None for anything else."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (ConfigKeyError, ConfigAttributeError)) and getattr(exc, "key", None) is not None:
            break
        exc = exc.__cause__ or exc.__context__
    else:
        return None
    if exc is None:
        return None
    key, full_key = str(exc.key), str(exc.full_key or exc.key)
    group = full_key[: -len(key)] if full_key.endswith(key) else ""
    if not group and exc.object_type is not None:  # a group's own config merged on its own (setup_task)
        group = _group_of(exc.object_type)
        full_key = group + key
    candidates = []
    parent = exc.parent_node
    if parent is not None and hasattr(parent, "keys"):
        candidates = [str(k) for k in parent.keys()]
        if "_name" in candidates:  # a group typed Any in fairseq's schema: the chosen class's options
            candidates += registered_options(group.rstrip("."), parent.get("_name"))
    if not candidates and exc.object_type is not None:
        if dataclasses.is_dataclass(exc.object_type):
            candidates = [f.name for f in dataclasses.fields(exc.object_type)]
    if group and key in candidates:  # an option of the chosen class that the YAML does not list
        return (f"{full_key}: not in the config file, so Hydra cannot override it; add it with ++{full_key}=VALUE "
                "(or write it into the YAML)")
    what = "no such config key" if group else "no such config group"
    hint = did_you_mean(key, candidates, group)
    if not hint and group and parent is not None:  # ``task.max_tokenz``: the key of another group
        hint = _in_other_groups(key, parent, group.rstrip("."))
    return f"{full_key}: {what}{hint}"


def _in_other_groups(key, node, group):
    """``; did you mean dataset.max_tokens?`` for ``task.max_tokenz``: the closest keys among the
    other groups of the config that ``node`` (the group ``group``) belongs to, or ""."""
    try:
        root = node._get_root()
        full = {}
        for g in root.keys():
            sub = root.get(g) if g != group else None
            for k in (sub.keys() if hasattr(sub, "keys") else ()):
                full.setdefault(str(k), []).append(f"{g}.{k}")
    except Exception:
        return ""
    close = difflib.get_close_matches(key, sorted(full), n=2, cutoff=0.8)
    names = [name for k in close for name in full[k]][:3]
    return f"; did you mean {' or '.join(names)}?" if names else ""


def message(exc, prog):
    """The one line for ``exc`` in ``prog``, or None where the exception keeps its report."""
    if isinstance(exc, FileNotFoundError):
        frame = _user_dir_frame(exc.__traceback__)
        if frame is not None:
            user_dir = getattr(frame.f_locals.get("args"), "user_dir", None)
            if user_dir is not None:
                return user_dir_message(user_dir, hydra=prog.endswith(("hydra-train", "hydra_train")))
    if "omegaconf" in sys.modules:
        return config_key_message(exc) or config_value_message(exc)
    return None


def config_value_message(exc):
    """A Hydra/OmegaConf error about a value its key's type refuses (``model.wide=two``: "Value
    'two' of type 'str' could not be converted to Integer"): the key and OmegaConf's reason in one
    line; None for anything else."""
    from omegaconf.errors import ValidationError

    seen = set()
    while exc is not None and id(exc) not in seen and not isinstance(exc, ValidationError):
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    if not isinstance(exc, ValidationError) or getattr(exc, "key", None) is None:
        return None
    key, full_key = str(exc.key), str(exc.full_key or exc.key)
    if full_key == key and exc.object_type is not None:  # a group's own config merged on its own
        full_key = _group_of(exc.object_type) + key
    reason = (str(getattr(exc, "msg", "") or exc).strip().splitlines() or [""])[0]
    return f"{full_key}: {reason}"



def _exit(prog, msg):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    sys.stderr.write(f"{prog}: error: {msg}\n")
    sys.stderr.flush()
    atexit._run_exitfuncs()
    os._exit(EXIT_STATUS)


# the plugin's error handlers (patches/one_line_errors.py, :func:`add_error_handler`): each
# ``handler(exc, hydra)`` runs before this module's own messages and may end the process
_HANDLERS = []


def _excepthook(exc_type, exc, tb):
    for handler in _HANDLERS:
        handler(exc, False)
    wanted = isinstance(exc, Exception) and not os.environ.get("HYDRA_FULL_ERROR")  # Hydra's switch for tracebacks
    msg = message(exc, _STATE["prog"]) if wanted and "prog" in _STATE else None
    if msg is not None:
        _exit(_STATE["prog"], msg)
    _STATE["excepthook"](exc_type, exc, tb)


_excepthook.fairseq_local_handlers = _HANDLERS


def add_error_handler(handler):
    """Run ``handler(exc, hydra)`` first for an exception that ends the program (``sys.excepthook``)
    or a failed Hydra job (``JobReturn.return_value``, ``hydra=True``), in this process whether or
    not it is a fairseq CLI (a notebook, a test, ``python -c``): the plugin's one-line errors
    (``patches/one_line_errors.py``).  This module owns both hooks: where the ``.pth`` line loaded it
    (its own copy, not the package's module) and installed them, the handler joins that copy's list."""
    handlers = getattr(sys.excepthook, "fairseq_local_handlers", None)
    if handlers is None:
        _STATE["excepthook"] = sys.excepthook
        sys.excepthook = _excepthook
        handlers = _HANDLERS
    if all(h is not handler for h in handlers):
        handlers.append(handler)
    try:
        from hydra.core.utils import JobReturn
    except ImportError:  # pragma: no cover - Hydra is a fairseq dependency
        return
    prop = JobReturn.__dict__.get("return_value")
    job_handlers = getattr(getattr(prop, "fget", None), "fairseq_local_handlers", None)
    if job_handlers is None:
        _wrap_job_return(handlers)
    elif all(h is not handler for h in job_handlers):
        job_handlers.append(handler)


def _wrap_hydra():
    from hydra._internal import utils as hydra_utils

    original = hydra_utils.run_and_report
    if getattr(original, "_fairseq_local", False):
        return

    def run_and_report(func):
        def checked():
            try:
                return func()
            except Exception as exc:
                msg = message(exc, _STATE["prog"])
                if msg is not None and not os.environ.get("HYDRA_FULL_ERROR"):
                    _exit(_STATE["prog"], msg)
                raise

        return original(checked)

    run_and_report._fairseq_local = True
    hydra_utils.run_and_report = run_and_report
    _wrap_job_return(_HANDLERS)


def _wrap_job_return(handlers):
    """Hydra reads a failed job's exception from ``JobReturn.return_value``, which first writes
    ``Error executing job with overrides: [...]``; for an exception that has our one line, that
    line would come before ours, so it is ours alone (``HYDRA_FULL_ERROR=1`` keeps Hydra's report
    and its traceback).  The plugin's handlers (``handlers``, :func:`add_error_handler`) answer its
    user errors first."""
    from hydra.core.utils import JobReturn, JobStatus

    prop = JobReturn.__dict__.get("return_value")
    if prop is None or getattr(prop.fget, "fairseq_local_handlers", None) is not None:
        return

    def return_value(self):
        if self.status == JobStatus.FAILED:
            for handler in handlers:
                handler(self._return_value, True)
            if "prog" in _STATE and not os.environ.get("HYDRA_FULL_ERROR"):
                msg = message(self._return_value, _STATE["prog"])
                if msg is not None:
                    _exit(_STATE["prog"], msg)
        return prop.fget(self)

    return_value.fairseq_local_handlers = handlers
    JobReturn.return_value = property(return_value, prop.fset)


def install(argv=None, orig_argv=None):
    """Install the hooks when this process is a fairseq CLI; returns its name (None otherwise)."""
    argv = sys.argv if argv is None else argv
    prog = program(argv, getattr(sys, "orig_argv", argv) if orig_argv is None else orig_argv)
    if prog is None or "prog" in _STATE:
        return prog
    _STATE["prog"] = prog
    if sys.excepthook is not _excepthook:
        _STATE["excepthook"] = sys.excepthook
        sys.excepthook = _excepthook
    if "hydra" in prog:
        argv[1:] = model_overrides(argv[1:])
        _quiet_hydra()
        _wrap_hydra()
    return prog


def model_overrides(args):
    """``model.KEY=VALUE`` overrides as ``++model.KEY=VALUE``.  A paper row's YAML lists only what its
    arch does not set (the arch fills the rest), so most model options are not in the file and
    Hydra would refuse to override them; ``++`` sets a listed key and adds an unlisted one.  A key
    the model does not have is still refused, in one line with the closest option, when fairseq
    merges the YAML's model into the model's config."""
    out = []
    for arg in args:
        key = arg.split("=", 1)[0]
        if "=" in arg and key.startswith("model.") and key.count(".") == 1 and not key[6:].startswith("_"):
            arg = "++" + arg
        out.append(arg)
    return out


# What Hydra 1.3 says about fairseq's own use of it, before the plugin (and its filters,
# fairseq_local/_quiet.py) is imported; nothing a user of fairseq-hydra-train can act on.
HYDRA_NOISE = (
    r"\s*The version_base parameter is not specified",
    r"\s*'[^']*' is validated against ConfigStore schema with the same name",  # fairseq's hydra_init
    r"\s*Future Hydra versions will no longer change working directory at job runtime by default",
)


def _quiet_hydra():
    """Filter :data:`HYDRA_NOISE` (unless ``-W`` or ``PYTHONWARNINGS`` decide) and keep Hydra's DEBUG
    lines off (``import fairseq`` sets the root logger to DEBUG before Hydra configures logging;
    ``hydra.verbose=hydra`` sets Hydra's logger back to DEBUG when the job starts)."""
    if not sys.warnoptions:
        for pattern in HYDRA_NOISE:
            warnings.filterwarnings("ignore", message=pattern, category=UserWarning)
    logging.getLogger("hydra").setLevel(logging.INFO)
