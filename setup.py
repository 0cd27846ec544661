"""Computes fairseq-local's dependencies and ships ``fairseq_local.pth`` (the start-up hook of
``fairseq_local/_cli_startup.py``, which static metadata cannot place in site-packages); all other
metadata is in pyproject.toml.

This shim stays because which distribution should provide the ``fairseq`` module depends on what
is already installed, which static metadata cannot express:

* ``FAIRSEQ_LOCAL_SKIP_FAIRSEQ_DEP=1``: never touch fairseq;
* an upstream ``fairseq`` distribution already installed (a source checkout installed with
  ``pip install -e``, say): keep it rather than install a second copy of the same module;
* ``fairseq-fixed`` already installed (``scripts/setup_env.sh`` installs it with ``--no-deps``, so
  that its unusable ``torchaudio`` requirement is never pulled in): keep it and require what it
  needs at import time (``[tool.fairseq-local] fairseq-runtime``);
* otherwise: require ``fairseq-fixed==0.12.3.1`` (PyPI's ``fairseq==0.12.2`` does not import on
  Python >= 3.11) plus the same runtime list.
"""
import os
import sys
from importlib.metadata import PackageNotFoundError, version

if sys.version_info[:2] not in ((3, 11), (3, 12)):
    sys.exit(f"fairseq-local supports Python 3.11 and 3.12, not {sys.version.split()[0]} "
             "(pyproject.toml requires-python); install with python3.11 or python3.12")
import tomllib  # noqa: E402  (Python >= 3.11)

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

HERE = os.path.dirname(os.path.abspath(__file__))

# ``site`` runs this line at every interpreter start: it reads only ``sys.argv`` and, in a program
# whose name holds "fairseq", loads ``fairseq_local/_cli_startup.py`` by its path (not the package),
# whose ``install`` acts in fairseq's CLIs only (one-line errors for a misspelled ``--user-dir`` and
# Hydra config keys, which fairseq meets before it imports the plugin).  Never fails start-up.
PTH_NAME = "fairseq_local.pth"
PTH_LINE = (
    "import sys; \"fairseq\" in (\" \".join(getattr(sys, \"orig_argv\", ())) if sys.argv[:1] == [\"-m\"] "
    "else sys.argv[0].rsplit(\"/\", 1)[-1] if sys.argv else \"\") and exec("
    "\"try:\\n import importlib.util as u\\n"
    " s = u.spec_from_file_location('_fairseq_local_cli_startup', "
    "u.find_spec('fairseq_local').submodule_search_locations[0] + '/_cli_startup.py')\\n"
    " m = u.module_from_spec(s)\\n s.loader.exec_module(m)\\n m.install()\\n"
    "except Exception:\\n pass\")\n"
)


class BuildPyWithPth(build_py):
    """A wheel (``pip install .``) carries ``fairseq_local.pth`` at its root, i.e. in site-packages."""

    def run(self):
        super().run()
        with open(os.path.join(self.build_lib, PTH_NAME), "w") as f:
            f.write(PTH_LINE)


class EditableWheelWithPth(editable_wheel):
    """An editable install (``pip install -e .``) carries it too, beside setuptools' own ``.pth``."""

    def _install_namespaces(self, installation_dir, pth_prefix):
        super()._install_namespaces(installation_dir, pth_prefix)
        with open(os.path.join(installation_dir, PTH_NAME), "w") as f:
            f.write(PTH_LINE)


def _installed(dist):
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def dependencies(meta, environ=os.environ, installed=_installed):
    """``install_requires`` from pyproject's ``[tool.fairseq-local]`` table ``meta``."""
    deps = list(meta["dependencies"])
    if environ.get("FAIRSEQ_LOCAL_SKIP_FAIRSEQ_DEP"):
        return deps
    upstream = installed("fairseq")
    if upstream:
        print(f"fairseq-local: keeping the installed fairseq {upstream}", file=sys.stderr)
        return deps
    fixed_name = meta["fairseq"].split("==")[0]
    fixed = installed(fixed_name)
    if fixed:
        print(f"fairseq-local: keeping the installed {fixed_name} {fixed}", file=sys.stderr)
        return deps + list(meta["fairseq-runtime"])
    return deps + list(meta["fairseq-runtime"]) + [meta["fairseq"]]


if __name__ == "__main__":
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        _meta = tomllib.load(f)["tool"]["fairseq-local"]
    setup(install_requires=dependencies(_meta),
          cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth})
