"""Modules of the plugin that import only numpy and the standard library, loaded without torch.

``fairseq_local/data/lattice.py`` and ``fairseq_local/file_io.py`` need nothing beyond numpy, but
importing them as ``fairseq_local.*`` runs the plugin's ``__init__``, which loads torch and fairseq
(seconds and hundreds of MB that text tools never use).  :func:`plugin_module` loads such a module
by its path under a name of its own (pool workers find functions by it), or returns the package's
module where the plugin is imported already.
"""
import importlib
import importlib.util
import os
import sys

_PLUGIN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "fairseq_local")


def plugin_module(name: str):
    """``fairseq_local.<name>`` (e.g. ``"data.lattice"``, ``"file_io"``) without running the
    plugin's ``__init__`` unless the plugin is imported already."""
    if "fairseq_local" in sys.modules:
        return importlib.import_module(f"fairseq_local.{name}")
    alias = "_fairseq_local_" + name.replace(".", "_")
    if alias not in sys.modules:
        spec = importlib.util.spec_from_file_location(alias, os.path.join(_PLUGIN, *name.split(".")) + ".py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[alias] = module
        spec.loader.exec_module(module)
    return sys.modules[alias]
