"""Computes fairseq-local's dependencies; all other metadata is in pyproject.toml.

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

HERE = os.path.dirname(os.path.abspath(__file__))


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
    setup(install_requires=dependencies(_meta))
