"""Shared machinery for the contract suite (tests/test_contract.py).

Every model family registered by fairseq_local describes itself once, in
``tests/contract_specs/<family>.py``, as ``SPECS = {"<fairseq model name>": ContractSpec(...)}``.
The contract suite then runs every *architecture* of that model (every
``@register_model_architecture`` of it) through the same checks, with ``tiny_args`` appended to
the command line so paper-size archs stay small on CPU while their own arch function (cell type,
number of channels, ablation switches...) still runs.
"""
import dataclasses
import glob
import importlib
import os
import random
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


@dataclasses.dataclass
class ContractSpec:
    """How the contract suite exercises one registered fairseq model (all its archs)."""

    task: str  # "translation", "language_modeling", "lattice_translation", ...
    tiny_args: List[str]  # CLI args that shrink every arch of this model for CPU tests
    # make_data(tmpdir) -> (data_dir, extra task args); None = default builder for ``task``
    make_data: Optional[Callable[[Path], Tuple[Path, List[str]]]] = None
    hydra_config: Optional[str] = None  # name of a YAML under configs/ (without .yaml)
    hydra_overrides: List[str] = dataclasses.field(default_factory=list)
    # regexes of parameters that legitimately receive no gradient on the tiny batch
    no_grad_params: List[str] = dataclasses.field(default_factory=list)
    train_args: List[str] = dataclasses.field(default_factory=list)  # extra fairseq-train args
    generate_args: List[str] = dataclasses.field(default_factory=list)  # extra fairseq-generate args


def load_specs() -> Dict[str, ContractSpec]:
    specs: Dict[str, ContractSpec] = {}
    for path in sorted(glob.glob(str(HERE / "contract_specs" / "*.py"))):
        name = Path(path).stem
        if name.startswith("_") and not os.environ.get("FAIRSEQ_LOCAL_CONTRACT_EXTRA"):
            continue
        mod = importlib.import_module(f"contract_specs.{name}")
        for model_name, spec in getattr(mod, "SPECS", {}).items():
            assert model_name not in specs, f"model {model_name} has two contract specs"
            specs[model_name] = spec
    return specs


# ---------------------------------------------------------------------------------------------
# tiny synthetic data, made with the project's own generator and binarized by fairseq-preprocess
# ---------------------------------------------------------------------------------------------
def _write_lines(path: Path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def make_translation_data(tmp: Path, n_train=48, n_valid=8, seed=0) -> Tuple[Path, List[str]]:
    from fairseq_local.data.synthetic import SyntheticTranslationCorpus

    raw = tmp / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    corpus = SyntheticTranslationCorpus(seed=seed, max_len=9)
    for split, n in (("train", n_train), ("valid", n_valid), ("test", n_valid)):
        pairs = corpus.sample(n)
        _write_lines(raw / f"{split}.src", [s for s, _ in pairs])
        _write_lines(raw / f"{split}.tgt", [t for _, t in pairs])
    out = tmp / "bin"
    _preprocess([
        "--source-lang", "src", "--target-lang", "tgt",
        "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
        "--testpref", str(raw / "test"), "--destdir", str(out), "--workers", "1",
    ])
    return out, ["--source-lang", "src", "--target-lang", "tgt"]


def make_lm_data(tmp: Path, n_train=48, n_valid=40, seed=0) -> Tuple[Path, List[str]]:
    from fairseq_local.data.synthetic import SyntheticTranslationCorpus

    raw = tmp / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    corpus = SyntheticTranslationCorpus(seed=seed, max_len=9)
    for split, n in (("train", n_train), ("valid", n_valid), ("test", n_valid)):
        _write_lines(raw / f"{split}.txt", [t for _, t in corpus.sample(n)])
    out = tmp / "bin"
    _preprocess([
        "--only-source", "--trainpref", str(raw / "train.txt"), "--validpref", str(raw / "valid.txt"),
        "--testpref", str(raw / "test.txt"), "--destdir", str(out), "--workers", "1",
    ])
    # valid: ~25 blocks of 16 tokens, so fairseq's batching (multiples of 8) keeps a batch
    return out, ["--tokens-per-sample", "16"]


def _preprocess(argv):
    from fairseq import options
    from fairseq_cli import preprocess

    parser = options.get_preprocessing_parser()
    preprocess.main(parser.parse_args(argv))


DEFAULT_DATA = {"translation": make_translation_data, "language_modeling": make_lm_data}


def data_for(spec: ContractSpec, tmp: Path):
    maker = spec.make_data or DEFAULT_DATA.get(spec.task)
    if maker is None:
        raise AssertionError(f"task {spec.task} has no default data builder: give the spec make_data")
    return maker(tmp)


def seed_all(seed=1):
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def float64_default():
    """Exactness checks in float64; restores the default so other tests in the process see float32
    (wrap with ``pytest.fixture(autouse=True)`` in a test module)."""
    import torch

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def small_dictionary(n=20):
    """A fairseq Dictionary of ``n`` words w0 ... w{n-1} after the special symbols."""
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(n):
        d.add_symbol(f"w{i}")
    return d


def left_padded_tokens(d, lengths, seed=0):
    """A (B, max(lengths)) batch of random words of ``d``, row b left-padded to length ``lengths[b]``."""
    import torch

    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    toks = torch.full((len(lengths), T), d.pad(), dtype=torch.long)
    for b, n in enumerate(lengths):
        toks[b, T - n:] = torch.randint(d.nspecial, len(d), (n,), generator=g)
    return toks


def torch_layer_factory(cell):
    """A layer factory (layer index, input size, hidden size) -> torch's ``cell`` under the layer contract."""
    from fairseq_local.modules.torch_rnn_layer import TorchRNNLayer

    return lambda i, inp, hid: TorchRNNLayer(cell, inp, hid)


# ---------------------------------------------------------------------------------------------
# launching the console scripts (fairseq-train, fairseq-hydra-train, ...) in a subprocess
# ---------------------------------------------------------------------------------------------
USER_DIR = str(REPO / "fairseq_local")


def console_script(name: str) -> str:
    """Path of a console script of the running venv (``fairseq-hydra-train``, ...)."""
    import sys

    return str(Path(sys.executable).parent / name)


def run_cmd(cmd, cwd=None, timeout=600):
    """Run ``cmd`` single-threaded; fail the test with its output when it exits non-zero."""
    import subprocess

    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def force_overrides(overrides):
    """``key=value`` -> ``++key=value`` (override or add, whether or not the YAML sets the key)."""
    return [o if o.startswith("+") else f"++{o}" for o in overrides]


def hydra_task_overrides(task_args):
    """``["--source-lang", "src"]`` -> ``["task.source_lang=src"]``."""
    out, it = [], iter(task_args)
    for flag in it:
        out.append(f"task.{flag.lstrip('-').replace('-', '_')}={next(it)}")
    return out


def hydra_train(config: Path, overrides, run_dir: Path, timeout=600):
    """``fairseq-hydra-train`` with the YAML ``config`` (a path) and ``overrides`` (forced with
    ``++``), run from ``run_dir`` (Hydra's output folder goes there too).  Returns the process."""
    config = Path(config)
    return run_cmd([
        console_script("fairseq-hydra-train"), "--config-dir", str(config.parent), "--config-name", config.stem,
        *force_overrides(overrides), f"hydra.run.dir={run_dir / 'hydra'}",
    ], cwd=run_dir, timeout=timeout)


# ---------------------------------------------------------------------------------------------
# fairseq-hydra-train's config path, in this process
# ---------------------------------------------------------------------------------------------
def arch_model_config(model_cfg) -> dict:
    """The model options a YAML's ``model:`` section gives once its arch has run: the YAML's keys,
    then the arch function's (unset keys only), then the model's dataclass defaults, as building
    the model does."""
    import dataclasses

    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY, MODEL_DATACLASS_REGISTRY
    from omegaconf import OmegaConf, open_dict

    node = OmegaConf.create(OmegaConf.to_container(model_cfg) if OmegaConf.is_config(model_cfg) else dict(model_cfg))
    name = node.get("_name")
    with open_dict(node):
        if name in ARCH_CONFIG_REGISTRY:
            ARCH_CONFIG_REGISTRY[name](node)
        dc = MODEL_DATACLASS_REGISTRY.get(ARCH_MODEL_NAME_REGISTRY.get(name, name))
        for f in dataclasses.fields(dc) if dc is not None else ():
            if node.get(f.name) is None and not f.name.startswith("_") and f.default is not dataclasses.MISSING:
                node[f.name] = f.default
    return OmegaConf.to_container(node)
