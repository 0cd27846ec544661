"""Architecture defaults: the two ways an arch function fills ``args``, and the one helper that
registers a generated arch.

An arch (``--arch NAME``) only fills options the command line left unset (missing or None), so
command-line values always win:

* :func:`fill_defaults` fills every field of a model's dataclass config, from the arch's own
  values where given, else from the dataclass default; it rejects values naming unknown options.
* :func:`set_defaults` sets only the given options; archs that extend another arch call it, then
  the base arch, which fills the rest.
* :func:`register_arch` builds and registers an arch from a table row (sizes, variants, channels).
"""
import dataclasses
from typing import Callable, Optional

from fairseq.models import register_model_architecture


def fill_defaults(args, dataclass_cls, **arch_defaults):
    """For every field of ``dataclass_cls`` still unset on ``args``, set the arch default if given,
    else the dataclass default."""
    for f in dataclasses.fields(dataclass_cls):
        if f.name.startswith("_"):
            continue
        if getattr(args, f.name, None) is None:
            if f.name in arch_defaults:
                value = arch_defaults[f.name]
            elif f.default is not dataclasses.MISSING:
                value = f.default
            elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                value = f.default_factory()  # type: ignore[misc]
            else:
                continue
            setattr(args, f.name, value)
    unknown = set(arch_defaults) - {f.name for f in dataclasses.fields(dataclass_cls)}
    if unknown:
        raise ValueError(f"arch defaults name unknown options: {sorted(unknown)}")


def set_defaults(args, **arch_defaults):
    """Set only these options (where unset); the base arch called next fills everything else."""
    for name, value in arch_defaults.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)


def register_arch(model_name: str, arch_name: str, doc: str, *, config=None,
                  base: Optional[Callable] = None, **defaults):
    """Register ``arch_name`` for ``model_name`` and return its arch function.

    The arch sets ``defaults`` (where unset), then runs the ``base`` arch if given, then fills the
    remaining fields of the dataclass ``config`` if given (without ``base``, ``defaults`` are
    checked against ``config`` by :func:`fill_defaults`)."""

    def arch(args):
        if base is None and config is not None:
            fill_defaults(args, config, **defaults)
            return
        set_defaults(args, **defaults)
        if base is not None:
            base(args)
        if config is not None:
            fill_defaults(args, config)

    arch.__name__ = arch.__qualname__ = arch_name
    arch.__doc__ = doc
    return register_model_architecture(model_name, arch_name)(arch)
