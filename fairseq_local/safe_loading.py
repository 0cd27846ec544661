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
torch, and :func:`install` also wraps fairseq's ``load_checkpoint_to_cpu`` so that refusal becomes
one line naming the checkpoint and the offending global.
"""
import argparse
import collections
import functools
import pickle
import re
import typing

import numpy as np
import torch

__all__ = ["SAFE_GLOBALS", "install", "UnsafeCheckpointError", "safe_load"]


class UnsafeCheckpointError(pickle.UnpicklingError):
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
    _wrap_fairseq_loader()
    return SAFE_GLOBALS


_GLOBAL_RE = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")


def _explain(path, err):
    m = _GLOBAL_RE.search(str(err))
    what = f"global '{m.group(1)}'" if m else "an object"
    return UnsafeCheckpointError(
        f"{path}: refused to unpickle {what}: it is not on fairseq_local's safe-loading allow-list "
        f"(fairseq_local.safe_loading.SAFE_GLOBALS); only load checkpoints you trust, and add the "
        f"global with torch.serialization.add_safe_globals if you do"
    )


def safe_load(path, map_location="cpu"):
    """``torch.load(path, weights_only=True)`` with the allow-list, and a one-line refusal."""
    install()
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        raise _explain(path, err) from None


def _wrap_fairseq_loader():
    from fairseq import checkpoint_utils

    original = checkpoint_utils.load_checkpoint_to_cpu
    if getattr(original, "_fairseq_local_wrapped", False):
        return

    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            return original(path, *args, **kwargs)
        except pickle.UnpicklingError as err:
            if isinstance(err, UnsafeCheckpointError):
                raise
            raise _explain(path, err) from None

    load_checkpoint_to_cpu._fairseq_local_wrapped = True
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
