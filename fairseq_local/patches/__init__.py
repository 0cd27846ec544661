"""Guards the plugin installs on fairseq itself when it is imported (``--user-dir fairseq_local``).

Each module here fixes one fairseq behaviour that would otherwise cost users data or give wrong
numbers, whichever entry point started the run (``fairseq-train``/``-generate``/``-eval-lm``,
``fairseq-hydra-train``, our scripts). Every module is imported automatically and exposes
``install()``, which is idempotent; ``fairseq_local/__init__.py`` calls :func:`install_all`.
"""
import importlib
import os

_MODULES = [
    importlib.import_module(f"{__name__}.{_file[:-3]}")
    for _file in sorted(os.listdir(os.path.dirname(__file__)))
    if _file.endswith(".py") and not _file.startswith("_")
]


def install_all():
    for module in _MODULES:
        module.install()
