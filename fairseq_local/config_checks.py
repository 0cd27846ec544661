"""Model options that cannot work are refused when the model is built, naming the option.

Every model's ``build_model`` calls :func:`check_sizes` with its config dataclass: each integer
option whose name says it is a size (``*_dim``, ``*_size``, ``*_layers``, ``*_channels``,
``*_heads``, ``*_length``, ``*_positions``, ``wide``) must be >= 1 (>= 0 for the names in
``allow_zero``, >= ``metadata["min"]`` where the field says so; ``None`` where the option is
optional).  A zero or negative size would otherwise
fail deep inside torch ("cannot reshape tensor of 0 elements").  The error is a
:class:`~fairseq_local.errors.ConfigError`, printed as one line by every entry point.
"""
import dataclasses
import re
import typing

from fairseq_local.errors import ConfigError

SIZE_RE = re.compile(r"(_dim|_size|_layers|_channels|_heads|_length|_positions)$|^wide$")


def _is_int_field(f) -> bool:
    t = f.type
    if t is int or t == "int":
        return True
    return typing.get_origin(t) is typing.Union and int in typing.get_args(t)


def option(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_sizes(cfg, config_class, allow_zero=(), extra=()):
    """Raise :class:`ConfigError` for the first impossible size option of ``cfg``.

    ``extra``: more option names to check besides the size-like int fields of ``config_class``."""
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    names = [n for n, f in fields.items() if _is_int_field(f) and SIZE_RE.search(n)]
    for name in list(names) + [n for n in extra if n not in names]:
        value = getattr(cfg, name, None)
        if value is None:
            continue
        low = 0 if name in allow_zero else fields[name].metadata.get("min", 1) if name in fields else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{option(name)} must be an integer >= {low} (got {value!r})")


def check_divides(cfg, whole: str, part: str):
    """``--whole`` must split into ``--part`` equal pieces (e.g. hidden units into parallel cells)."""
    w, p = getattr(cfg, whole), getattr(cfg, part)
    if p and w % p:
        raise ConfigError(f"{option(whole)} {w} must be divisible by {option(part)} {p}")
