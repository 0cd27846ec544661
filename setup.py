"""fairseq-local: a fairseq --user-dir plugin with five published sequence models.

Install with ``bash scripts/test.sh`` / ``bash scripts/demo.sh`` (they build ``.venv``), or by hand:

    pip install torch==2.13.0            # or any torch >= 2.1 build you prefer, first
    pip install "numpy<2" cython "setuptools<81" wheel
    pip install --no-build-isolation -e ".[test]"

fairseq itself: PyPI's ``fairseq==0.12.2`` cannot be imported on Python >= 3.11 (dataclass
mutable defaults), so on 3.11+ we depend on ``fairseq-fixed==0.12.3.1``, which installs the same
``fairseq`` module.  On Python 3.8-3.10 we depend on upstream ``fairseq==0.12.2``.  An upstream ``fairseq``
distribution that is already installed (a source checkout installed with ``pip install -e``, say)
is kept; ``FAIRSEQ_LOCAL_SKIP_FAIRSEQ_DEP=1`` skips the dependency altogether.
"""
import os
import re
import sys

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def read_version():
    with open(os.path.join(HERE, "fairseq_local", "version.py"), encoding="utf-8") as f:
        return re.search(r'__version__ = "([^"]+)"', f.read()).group(1)


install_requires = [
    "torch>=2.1",
    "numpy<2",
    "sacrebleu>=2.0",
    "sacremoses",
    "sentencepiece>=0.1.99",
    "subword-nmt>=0.3.8",
    "rouge-score>=0.1.2",
    "matplotlib>=3.5",
    "tqdm",
    "tensorboardX",  # fairseq logs a notice on import without it; also enables --tensorboard-logdir
    "jieba>=0.42",
    "thulac>=0.2",
    "snownlp>=0.12",
]


def fairseq_requirement():
    """Which distribution should provide the ``fairseq`` module (None: leave the installed one).

    * ``FAIRSEQ_LOCAL_SKIP_FAIRSEQ_DEP=1``: never touch fairseq;
    * an upstream ``fairseq`` distribution already installed (a source checkout, 0.12.2 on an
      older Python): keep it, rather than installing a second distribution of the same module;
    * otherwise ``fairseq-fixed==0.12.3.1`` on Python >= 3.11 (PyPI's fairseq 0.12.2 does not
      import there) and ``fairseq==0.12.2`` on Python 3.8-3.10.
    """
    if os.environ.get("FAIRSEQ_LOCAL_SKIP_FAIRSEQ_DEP"):
        return None
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover  (Python < 3.8)
        return "fairseq==0.12.2"
    try:
        found = version("fairseq")
        print(f"fairseq-local: keeping the installed fairseq {found}", file=sys.stderr)
        return None
    except PackageNotFoundError:
        pass
    return "fairseq-fixed==0.12.3.1" if sys.version_info >= (3, 11) else "fairseq==0.12.2"


_fairseq = fairseq_requirement()
if _fairseq:
    install_requires.append(_fairseq)

setup(
    name="fairseq-local",
    version=read_version(),
    description="fairseq plugin: MC-RNN, parallel-cell LSTM, lattice encoders, genCNN, DPN-S2S",
    long_description=__doc__,
    python_requires=">=3.8",
    packages=find_packages(include=["fairseq_local", "fairseq_local.*"]),
    install_requires=install_requires,
    extras_require={"test": ["pytest>=7", "pytest-timeout", "pytest-xdist"]},
)
