"""Safe checkpoint loading: ``torch.load(weights_only=True)`` with an explicit allow-list.

torch >= 2.6 loads with ``weights_only=True`` by default, which refuses every pickled global not
on its allow-list.  A fairseq checkpoint pickles a few non-tensor objects besides the weights:

* ``argparse.Namespace`` (the legacy ``args`` of CLI-trained checkpoints),
* numpy scalars and arrays (meters and ``best_loss`` logged as numpy values, ``--eval-bleu``
  counts), which pickle through ``numpy.core.multiarray`` reconstruct / scalar and dtype classes,
* omegaconf containers (Hydra-trained checkpoints and ``cfg`` of distributed resumes),
* ``fairseq.distributed.utils._TensorPlaceholder``: on a distributed resume rank 0 loads the
  checkpoint and broadcasts it to the other ranks as a pickle whose tensors are placeholders,
* a few builtins and ``collections`` types used inside those.

:func:`install` adds exactly these to torch's allow-list (``torch.serialization.add_safe_globals``);
safe loading stays on for everything else.  A checkpoint that needs any other global is refused by
torch, and :func:`install` adds :func:`loading_layer` to fairseq's ``load_checkpoint_to_cpu`` (the
innermost layer there; ``patches/shared_targets.py`` owns the wrapper) so that refusal becomes one
line naming the checkpoint and the offending global.  The layer also checks the file first
(:func:`check_integrity`: empty, truncated, or a CRC-32 mismatch from a flipped bit), so a damaged
file is one line "FILE is not a complete checkpoint (...)" rather than zip or pickle internals;
the checks of ``patches/checkpoint_fit.py`` are the next layer, around the safe load.
:func:`require_model` lets a tool that needs one kind of model (an LM, an MC-RNN...) say which
arch a checkpoint holds and which one it needs.
"""
import argparse
import collections
import errno
import os
import pickle
import re
import struct
import typing
import zipfile
import zlib

import numpy as np
import torch

from fairseq_local import hook_points
from fairseq_local_core.errors import CheckpointError, UserError, prog_name

__all__ = ["SAFE_GLOBALS", "install", "UnsafeCheckpointError", "safe_load", "check_integrity",
           "checkpoint_model", "require_model", "load_model_checked", "is_language_model"]


class UnsafeCheckpointError(UserError, pickle.UnpicklingError):
    """A checkpoint pickles a global that is not on fairseq_local's allow-list."""


def _numpy_globals():
    out = [np.ndarray, np.dtype]
    try:  # numpy >= 1.25 keeps the per-type dtype classes in numpy.dtypes
        import numpy.dtypes as npd

        out += [getattr(npd, n) for n in dir(npd) if n.endswith("DType")]
    except ImportError:  # pragma: no cover
        pass
    from numpy.core import multiarray

    out += [multiarray._reconstruct, multiarray.scalar]
    # scalar types (np.float64, np.int64, ...) that appear as pickled meter values
    out += [np.float64, np.float32, np.float16, np.int64, np.int32, np.bool_]
    return out


def _omegaconf_globals():
    try:
        import omegaconf
        from omegaconf import nodes
        from omegaconf.base import ContainerMetadata, Metadata
    except ImportError:  # pragma: no cover
        return []
    out = [omegaconf.DictConfig, omegaconf.ListConfig, ContainerMetadata, Metadata]
    out += [getattr(nodes, n) for n in ("AnyNode", "StringNode", "IntegerNode", "FloatNode",
                                        "BooleanNode", "EnumNode", "ValueNode") if hasattr(nodes, n)]
    return out


def _builtin_globals():
    return [
        argparse.Namespace,
        collections.OrderedDict,
        collections.defaultdict,
        dict, list, set, tuple, int, float, bool, str, bytes, slice, object, type(None),
        typing.Any,
    ]


def _fairseq_globals():
    """Resuming across ranks broadcasts the loaded state as a pickle with tensor placeholders."""
    from fairseq.distributed import utils as dist_utils

    return [dist_utils._TensorPlaceholder]


def _enum_globals():
    """fairseq's ChoiceEnum values and a few config enums pickled inside omegaconf configs."""
    out = []
    try:
        from fairseq.dataclass import constants

        for name in dir(constants):
            obj = getattr(constants, name)
            if isinstance(obj, type) and issubclass(obj, constants.StrEnum) and obj is not constants.StrEnum:
                out.append(obj)
        out.append(constants.StrEnum)
    except Exception:  # pragma: no cover
        pass
    return out


SAFE_GLOBALS = []


def install():
    """Register the allow-list with torch and make refusals one readable line.  Idempotent."""
    if SAFE_GLOBALS:
        return SAFE_GLOBALS
    SAFE_GLOBALS.extend(_builtin_globals() + _numpy_globals() + _omegaconf_globals() + _enum_globals()
                        + _fairseq_globals())
    torch.serialization.add_safe_globals(SAFE_GLOBALS)
    hook_points.add(hook_points.LOAD_CHECKPOINT_TO_CPU, loading_layer)  # before the patches: innermost
    return SAFE_GLOBALS


# torch words a refused global "Unsupported global: GLOBAL fractions.Fraction was not an allowed
# global" or "Trying to load unsupported GLOBAL posix.system whose module posix is blocked"
_GLOBAL_RE = re.compile(r"GLOBAL ([\w.]+)")


def _explain(path, err):
    """The one-line error for a refused ``torch.load``: an unsafe global, or a damaged file."""
    m = _GLOBAL_RE.search(str(err))
    if m is None:  # not a refused global: a damaged pickle ("Unsupported operand 182", ...)
        return not_complete(path, _first_line(err))
    return UnsafeCheckpointError(
        f"{path}: refused to unpickle global '{m.group(1)}': it is not on fairseq_local's safe-loading "
        f"allow-list (fairseq_local.safe_loading.SAFE_GLOBALS); only load checkpoints you trust, and add "
        f"the global with torch.serialization.add_safe_globals if you do"
    )


def _first_line(err) -> str:
    """The informative line of an exception (torch's weights_only errors start with boilerplate)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    specific = [line for line in lines if re.search(r"Unsupported|error: \S", line)]
    line = (specific or lines or [""])[0]
    return f"{type(err).__name__}: {line}" if line else type(err).__name__


def not_complete(path, reason) -> CheckpointError:
    return CheckpointError(f"{path} is not a complete checkpoint ({reason})")


def check_integrity(path):
    """Raise :class:`CheckpointError` for an empty, truncated or bit-flipped checkpoint file.

    torch's zip reader checks no CRC: a flipped bit in a tensor loads silently as a wrong weight.
    ``zipfile.testzip`` reads every member and checks its CRC-32 (about as fast as reading)."""
    size = os.path.getsize(path)
    if size == 0:
        raise not_complete(path, "empty file")
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error, ValueError) as err:
            raise not_complete(path, f"damaged zip archive: {_first_line(err)}") from None
        if bad is not None:
            raise not_complete(path, f"CRC-32 mismatch in {bad}: the file is damaged")
        return
    with open(path, "rb") as f:
        if f.read(4) == b"PK\x03\x04":
            raise not_complete(path, f"truncated zip archive of {size} bytes, no central directory")


_DAMAGED = (EOFError, zipfile.BadZipFile, zlib.error, struct.error, UnicodeDecodeError)


def _load(path, load):
    """Run ``load()`` (a torch.load of ``path``), turning every failure into one line."""
    if not os.path.isfile(path):
        raise FileNotFoundError(errno.ENOENT, "no such checkpoint", path)
    check_integrity(path)
    try:
        return load()
    except UnsafeCheckpointError:
        raise
    except pickle.UnpicklingError as err:
        raise _explain(path, err) from None
    except _DAMAGED as err:
        raise not_complete(path, _first_line(err)) from None
    except (RuntimeError, OSError) as err:
        if isinstance(err, FileNotFoundError) or not re.search(
                r"PytorchStreamReader|zip archive|Invalid argument|invalid load key|corrupt", str(err)):
            raise
        raise not_complete(path, _first_line(err)) from None
    except Exception as err:  # noqa: BLE001 -- only what torch's unpickler raised on a non-zip file
        if zipfile.is_zipfile(path) or not _raised_by_unpickler(err):
            raise
        raise not_complete(path, f"not a torch checkpoint: {_first_line(err)}") from None


_UNPICKLER_FILES = ("_weights_only_unpickler.py", "serialization.py", "pickle.py")


def _raised_by_unpickler(err) -> bool:
    """Whether ``err`` was raised inside torch's (weights-only) unpickler: random or foreign bytes read
    as a legacy (non-zip) checkpoint end in IndexError, KeyError, ValueError... from its stack machine."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and os.path.basename(tb.tb_frame.f_code.co_filename) in _UNPICKLER_FILES


def safe_load(path, map_location="cpu", mmap=False):
    """``torch.load(path, weights_only=True)`` with the allow-list, and one-line refusals."""
    install()
    return _load(path, lambda: torch.load(path, map_location=map_location, weights_only=True, mmap=mmap))


def loading_layer(call, path, *args, **kwargs):
    """The innermost layer of fairseq's ``load_checkpoint_to_cpu`` (owned by
    ``patches/shared_targets.py``): a local file loads with the allow-list and one-line refusals."""
    if not _is_local(path):
        return call(path, *args, **kwargs)
    try:
        state = _load(path, lambda: call(path, *args, **kwargs))
    except (KeyError, TypeError, AttributeError) as err:
        # fairseq's upgrade code fails on a torch file that is not a fairseq checkpoint
        raise not_complete(path, f"not a fairseq checkpoint: {_first_line(err)}") from None
    if not isinstance(state, dict) or "model" not in state:
        raise not_complete(path, "no 'model' entry: not a fairseq checkpoint")
    return state


def _is_local(path) -> bool:
    from fairseq.file_io import PathManager

    return isinstance(path, str) and not PathManager.path_requires_pathmanager(path)


# ------------------------------------------------------------------------------------------------
# which model a checkpoint holds, for tools that need one kind
# ------------------------------------------------------------------------------------------------
def checkpoint_model(path):
    """``(arch, model name, task)`` of a fairseq checkpoint (CLI- or Hydra-trained)."""
    from fairseq import checkpoint_utils

    return state_model(checkpoint_utils.load_checkpoint_to_cpu(path))


def state_model(state):
    """``(arch, model name, task)`` of a loaded checkpoint ``state``."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    def get(obj, key):  # omegaconf node, dict or (CLI-trained cfg.model) argparse.Namespace
        if obj is None:
            return None
        return obj.get(key, None) if hasattr(obj, "get") else getattr(obj, key, None)

    cfg, args = state.get("cfg"), state.get("args")
    arch = get(get(cfg, "model"), "arch") or get(get(cfg, "model"), "_name") or get(args, "arch")
    task = get(get(cfg, "task"), "_name") or get(get(cfg, "task"), "task") or get(args, "task")
    return arch, ARCH_MODEL_NAME_REGISTRY.get(arch, arch), task


def require_model(path, accept, need: str):
    """Stop with one line unless the checkpoint's model is one ``accept`` takes.

    ``accept``: model names (``{"mc_rnn", "mc_rnn_lm"}``) or a predicate on the model class;
    ``need`` completes the sentence "..., but PROG needs ..." (e.g. "an mc_rnn model")."""
    from fairseq.models import MODEL_REGISTRY

    arch, model, task = checkpoint_model(path)
    ok = accept(MODEL_REGISTRY.get(model)) if callable(accept) else model in accept
    if not ok:
        raise CheckpointError(f"{path} holds a '{arch}' model (model {model}, task {task}), but {prog_name()} "
                              f"needs {need}")
    return arch, model, task


def is_language_model(model_cls) -> bool:
    from fairseq.models import FairseqLanguageModel

    return model_cls is not None and issubclass(model_cls, FairseqLanguageModel)


def load_model_checked(path, accept, need: str, arg_overrides=None):
    """``checkpoint_utils.load_model_ensemble_and_task([path])`` after :func:`require_model`."""
    from fairseq import checkpoint_utils

    require_model(path, accept, need)
    return checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides=arg_overrides)
