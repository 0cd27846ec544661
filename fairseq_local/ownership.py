"""Which models, tasks and training runs are the plugin's own.

The patches (``fairseq_local/patches/``) change fairseq's behaviour for the plugin's models and
tasks only: a user who adds ``--user-dir fairseq_local`` to a working setup keeps fairseq's own
numbers for fairseq's own architectures.  Something is *ours* when its class (or function) is
defined in ``fairseq_local``; a model is ours also when its ``--arch`` is registered here (the
paper baselines of ``models/baselines.py`` are archs of fairseq's ``fconv`` and ``transformer``); a
task is ours also once a model of ours was built for it (fairseq's ``translation`` task training one
of our models).  :func:`note_model` records the models fairseq builds (``patches/option_checks.py``
calls it from ``fairseq.models.build_model``, which ``FairseqTask.build_model`` calls for training,
validation, generation and the hub alike).
"""
import types
import weakref

from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

PACKAGE = "fairseq_local"

_TASKS = weakref.WeakKeyDictionary()  # task -> True once a model of ours was built for it
_MODELS = weakref.WeakKeyDictionary()  # task -> weak reference to the model fairseq built last for it
_LAST = {"ours": False}  # whether the model fairseq built last is ours


def is_ours(obj) -> bool:
    """True when ``obj`` (a class, function or instance) is defined in the plugin."""
    module = obj.__module__ if isinstance(obj, (type, types.FunctionType)) else type(obj).__module__
    return isinstance(module, str) and module.split(".")[0] == PACKAGE


def arch_of(cfg):
    """The ``--arch`` of a model config (argparse ``Namespace`` or a dataclass/Hydra config)."""
    for key in ("arch", "_name"):
        try:
            value = getattr(cfg, key, None)
        except Exception:  # an OmegaConf node that refuses a key it does not have
            value = None
        if isinstance(value, str):
            return value
    return None


def arch_is_ours(arch) -> bool:
    """True when ``arch`` is registered by the plugin (our models' archs and the baselines')."""
    if not isinstance(arch, str):
        return False
    function, model_cls = ARCH_CONFIG_REGISTRY.get(arch), ARCH_MODEL_REGISTRY.get(arch)
    return (function is not None and is_ours(function)) or (model_cls is not None and is_ours(model_cls))


def unwrap(model):
    """The model inside fairseq's and torch's wrappers (DDP, ``ModuleProxyWrapper``...)."""
    seen = 0
    while hasattr(model, "module") and seen < 8:
        model, seen = model.module, seen + 1
    return model


def model_is_ours(model, cfg=None) -> bool:
    return is_ours(unwrap(model)) or arch_is_ours(arch_of(cfg)) or arch_is_ours(arch_of(getattr(model, "cfg", None)))


def note_model(task, model, cfg=None):
    """Record that fairseq built ``model`` (from config ``cfg``) for ``task``."""
    ours = model_is_ours(model, cfg)
    if task is not None:
        try:
            _MODELS[task] = weakref.ref(model)
            if ours:
                _TASKS[task] = True
        except TypeError:  # a task or model that takes no weak reference
            pass
    _LAST["ours"] = ours or is_ours(task)


def task_is_ours(task) -> bool:
    """True for our tasks and for tasks a model of ours was built for."""
    if task is None:
        return False
    if is_ours(task):
        return True
    try:
        return _TASKS.get(task, False)
    except TypeError:
        return False


def trainer_is_ours(trainer) -> bool:
    """True when a fairseq ``Trainer`` trains a model of ours or runs a task of ours."""
    if task_is_ours(getattr(trainer, "task", None)):
        return True
    model = getattr(trainer, "_model", None)
    cfg = getattr(trainer, "cfg", None)
    model_cfg = getattr(cfg, "model", None) if cfg is not None else None
    return model is not None and model_is_ours(model, model_cfg)


def model_of(task):
    """The model fairseq built last for ``task`` (None when none is alive)."""
    try:
        ref = _MODELS.get(task) if task is not None else None
    except TypeError:
        return None
    return ref() if ref is not None else None


def last_model_is_ours() -> bool:
    """Whether the model fairseq built last (e.g. the ensemble fairseq-interactive loaded) is ours."""
    return _LAST["ours"]
