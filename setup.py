"""fairseq-local: a fairseq --user-dir plugin with five published sequence models.

Install with ``bash scripts/test.sh`` / ``bash scripts/demo.sh`` (they build ``.venv``), or by hand:

    pip install torch==2.13.0            # or any torch >= 2.1 build you prefer, first
    pip install "numpy<2" cython "setuptools<81" wheel
    pip install --no-build-isolation -e ".[test]"

fairseq itself: PyPI's ``fairseq==0.12.2`` cannot be imported on Python >= 3.11 (dataclass
mutable defaults), so on 3.11+ we depend on ``fairseq-fixed==0.12.3.1``, which installs the same
``fairseq`` module.  On Python 3.8-3.10 we depend on upstream ``fairseq==0.12.2``.  If a ``fairseq``
module is already importable (a source checkout installed with ``pip install -e``, say), set
``FAIRSEQ_LOCAL_SKIP_FAIRSEQ_DEP=1`` when installing and we leave it alone.
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
if not os.environ.get("FAIRSEQ_LOCAL_SKIP_FAIRSEQ_DEP"):
    if sys.version_info >= (3, 11):
        install_requires.append("fairseq-fixed==0.12.3.1")
    else:
        install_requires.append("fairseq==0.12.2")

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
