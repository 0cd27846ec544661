"""Every Hydra YAML under configs/ trains through ``fairseq-hydra-train``: two updates and one
validation, on tiny real data shaped like its row's dataset (tests/real_data.py).  The YAMLs are
globbed when the tests are collected, so a new YAML is covered without editing this file.

Each YAML runs inside the test process (a new interpreter per YAML spent most of its time importing
torch and fairseq): fairseq's schema registered under the YAML's name and Hydra's compose API over
the YAML's directory with the same overrides, as ``fairseq-hydra-train --config-dir DIR
--config-name NAME`` does, then that command's own entry (``fairseq_cli.hydra_train._hydra_main``:
defaults, resolution, ``fairseq_cli.train.main``, which resets fairseq's metrics), with the other
cross-run state (Hydra's global instance, the best-checkpoint and early-stopping memories) fresh for
each YAML.  ``test_in_process_equals_the_console_script`` checks that this trains the same weights
as the ``fairseq-hydra-train`` process.

Which data a row gets: language-modelling tasks -> PTB text (``lm``); ``lattice_translation`` ->
Tatoeba Zh-En lattices (character chains for ``*char*`` rows, jieba chains for the other RNNSearch
baselines, jieba + thulac + snownlp lattices otherwise); ``translation`` -> by the row's languages:
de/en Multi30k, zh/en jieba-segmented Tatoeba (its dev set holds a pair longer than the recipes'
50-word training limit), article/headline Gigaword-shaped pairs.

Overrides, and why (nothing else of the YAML changes):
* data path, ``common.user_dir``, ``checkpoint.save_dir``, Hydra's run dir: the test's own paths;
* ``common.cpu``, ``distributed_training.distributed_world_size=1``, ``dataset.num_workers=0``,
  simple logging without progress bar: a CPU CI machine, a log that can be parsed;
* ``optimization.max_update=2``: a couple of updates (fairseq validates when it stops);
* batch size (8 sentences / rows) or ``max_tokens`` (300): the YAMLs' batches are larger than
  the tiny splits;
* widths (every embedding / hidden / convolution / FFN / FC size above 120 -> 120, fconv layer
  widths alike, genCNN feature maps -> at most 12): paper-size layers take minutes per update on
  CPU.  120 keeps every divisibility of the rows (parallel cells' wide 1-15 and bidirectional
  halves, attention heads 4 and 8).  Depths, cell types, channels, wides, kernels, windows,
  dropouts, optimizers, schedules and loss settings are the YAML's own;
* genCNN Table 3 rows: ``adaptive_softmax_cutoff`` -> ``100,200``: cutoffs are vocabulary ranks,
  and the tiny vocabulary (~400 types) is smaller than the YAML's 10000.
"""
import glob
import logging
import math
import re
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

import fairseq_local  # noqa: F401  (the safe-loading allow-list for checkpoints)
from contract_lib import REPO, USER_DIR, arch_model_config, force_overrides, hydra_train
from real_data import RealData

CONFIGS = sorted(Path(p).relative_to(REPO / "configs").with_suffix("").as_posix()
                 for p in glob.glob(str(REPO / "configs" / "**" / "*.yaml"), recursive=True))
WIDTH = 120
WIDTH_KEYS = ("embed_dim", "hidden_size", "conv_dim", "ffn_embed_dim", "fc_dim", "attention_dim")
UPDATES = 2


@pytest.fixture(scope="session")
def real_data(shared_data, tmp_path_factory):
    return RealData(shared_data, tmp_path_factory.mktemp("real_data"))


def load(config: str):
    return OmegaConf.load(REPO / "configs" / f"{config}.yaml")


def data_kind(config: str, cfg) -> str:
    task = cfg.task._name
    if "language_modeling" in task:
        return "lm"
    if task == "lattice_translation":
        if "char" in Path(config).name:
            return "lattice_char"
        return "lattice_word" if cfg.model._name == "rnnsearch" else "lattice"
    langs = (cfg.task.get("source_lang"), cfg.task.get("target_lang"))
    return {("zh", "en"): "zh_en", ("article", "headline"): "gigaword"}.get(langs, "de_en")


def _shrink_layers(spec: str, maps: bool) -> str:
    if maps:  # genCNN (kernel, TIME-FLOW maps, TIME-ARROW maps)
        return re.sub(r"\((\d+),\s*(\d+),\s*(\d+)\)",
                      lambda m: f"({m[1]},{min(int(m[2]), 12)},{min(int(m[3]), 12)})", spec)
    return re.sub(r"\((\d+),", lambda m: f"({min(int(m[1]), WIDTH)},", spec)  # fconv (width, kernel)


def width_overrides(cfg) -> list:
    out = []

    def walk(node, prefix):
        for key, value in node.items():
            name = f"{prefix}.{key}"
            if isinstance(value, dict):
                walk(value, name)
            elif isinstance(value, int) and not isinstance(value, bool) and value > WIDTH \
                    and key.endswith(WIDTH_KEYS):
                out.append(f"{name}={WIDTH}")
            elif isinstance(value, str) and key in ("encoder_layers", "decoder_layers", "alpha_layers",
                                                     "beta_layers") and "(" in value:
                out.append(f"{name}='{_shrink_layers(value, key in ('alpha_layers', 'beta_layers'))}'")
            elif key == "adaptive_softmax_cutoff" and value:
                out.append(f"{name}='100,200'")

    walk(arch_model_config(cfg.model), "model")  # the arch's sizes, which the YAML does not restate
    return out


def batch_overrides(cfg) -> list:
    ds = cfg.get("dataset", {})
    if ds.get("batch_size"):
        return ["dataset.batch_size=8", "dataset.batch_size_valid=8"]
    return ["dataset.max_tokens=300", "dataset.batch_size=null"]


def hydra_train_in_process(config: Path, overrides, caplog) -> str:
    """``fairseq-hydra-train --config-dir config.parent --config-name config.stem ++overrides`` in
    this process; returns its log."""
    from fairseq import checkpoint_utils
    from fairseq.dataclass.initialize import hydra_init
    from fairseq_cli import train as train_cli
    from fairseq_cli.hydra_train import _hydra_main
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    for fn, attr in ((checkpoint_utils.save_checkpoint, "best"), (train_cli.should_stop_early, "best"),
                     (train_cli.should_stop_early, "num_runs")):
        if hasattr(fn, attr):
            delattr(fn, attr)
    GlobalHydra.instance().clear()
    hydra_init(config.stem)  # fairseq's schema under the YAML's name, as fairseq-hydra-train does
    caplog.clear()
    from hydra.version import VersionBase

    saved_base = VersionBase.instance().getbase()
    try:
        with caplog.at_level(logging.INFO):
            # version_base 1.1, as fairseq-hydra-train's @hydra.main gets: a newer base stays set for
            # the whole process and makes fairseq's later hydra.experimental calls raise ImportError
            with initialize_config_dir(config_dir=str(config.parent), version_base="1.1"):
                cfg = compose(config_name=config.stem, overrides=force_overrides(overrides))
            _hydra_main(cfg)
    finally:
        VersionBase.instance().setbase(saved_base)
        GlobalHydra.instance().clear()
    return caplog.text


@pytest.mark.parametrize("config", CONFIGS)
def test_yaml_trains_and_validates(config, real_data, tmp_path, caplog):
    cfg = load(config)
    data = real_data(data_kind(config, cfg))
    save = tmp_path / "ckpt"
    log = hydra_train_in_process(REPO / "configs" / f"{config}.yaml", [
        f"task.data={data}", f"common.user_dir={USER_DIR}", f"checkpoint.save_dir={save}",
        "common.cpu=true", "common.log_format=simple", "common.log_interval=1", "common.no_progress_bar=true",
        "distributed_training.distributed_world_size=1", "dataset.num_workers=0",
        f"optimization.max_update={UPDATES}", *batch_overrides(cfg), *width_overrides(cfg),
    ], caplog)
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=True)
    assert state["optimizer_history"][-1]["num_updates"] == UPDATES, f"{config}: not {UPDATES} updates"
    valid = re.findall(r"valid on 'valid' subset \| loss ([^ |]+)", log)
    assert valid, f"{config}: no validation in the log:\n{log[-2000:]}"
    assert math.isfinite(float(valid[-1])), f"{config}: validation loss {valid[-1]}"
    # nothing of the dev set is dropped for its length (fairseq warns "... will be skipped")
    assert "will be skipped" not in log, f"{config}: validation skipped sentences"


# ------------------------------------------------------------------------------------------------
# what each row's paper says about the loss normalisation (see the comment in each YAML)
# ------------------------------------------------------------------------------------------------
SENTENCE_AVG = {  # family / row prefix -> the paper's normaliser is the batch's sentences (rows)
    "parallel_cells/table2_": True, "parallel_cells/section41_": True,  # Zaremba et al.
    "parallel_cells/table3_zh_en_": True,  # recurrent NMT convention, SGD lr 0.5 + clip 5
    "lattice/": True,  # GroundHog / dl4mt RNNSearch: per-sentence cost, clip 1.0
    "baselines/": True,  # Zaremba et al. (and the genCNN tables' RNN/LSTM rows on Zaremba's recipe)
    "mc_rnn/table4_": False,  # AWD-LSTM: per-token mean
    "mc_rnn/": False, "dpn_s2s/": False, "gencnn/": False, "_selftest/": False,  # fairseq's per-token mean
}


@pytest.mark.parametrize("config", CONFIGS)
def test_loss_normalisation_is_the_papers(config):
    expected = next((v for k, v in SENTENCE_AVG.items() if config.startswith(k)), None)
    assert expected is not None, f"{config}: add its folder's paper normaliser to SENTENCE_AVG"
    cfg = load(config)
    assert bool(cfg.get("optimization", {}).get("sentence_avg", False)) == expected, config
    if not config.startswith("_selftest/"):
        text = (REPO / "configs" / f"{config}.yaml").read_text(encoding="utf-8")
        assert "Loss normalisation" in text, f"{config}: its comment does not give the loss normalisation"


@pytest.mark.parametrize("config", [CONFIGS[0], "mc_rnn/table5_baseline_rnn_deep"])
def test_in_process_equals_the_console_script(config, real_data, tmp_path, caplog):
    """The in-process run above and a ``fairseq-hydra-train`` process train the same weights, and
    the process's model has every option of the YAML's arch that no override changes (a YAML of
    ours names its arch and leaves the sizes to it)."""
    cfg = load(config)
    states = []
    for how in ("process", "in_process"):
        save = tmp_path / how
        overrides = [f"task.data={real_data(data_kind(config, cfg))}", f"common.user_dir={USER_DIR}",
                     f"checkpoint.save_dir={save}", "common.cpu=true", "common.log_format=simple",
                     "distributed_training.distributed_world_size=1", "dataset.num_workers=0",
                     f"optimization.max_update={UPDATES}", *batch_overrides(cfg), *width_overrides(cfg)]
        if how == "process":
            proc = hydra_train(REPO / "configs" / f"{config}.yaml", overrides, tmp_path)
            assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
        else:
            hydra_train_in_process(REPO / "configs" / f"{config}.yaml", overrides, caplog)
        state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=True)
        states.append(state["model"])
        if how == "process" and not config.startswith("_selftest/"):  # ours: fairseq's derives from the widths
            overridden = {o.split("=")[0][len("model."):] for o in overrides if o.startswith("model.")}
            model = state["cfg"]["model"]
            arch = arch_model_config({"_name": cfg.model._name})
            differ = {k: (model.get(k), v) for k, v in arch.items() if k not in overridden and k in model
                      and not isinstance(v, dict) and str(model.get(k)) != str(v)}
            assert not differ, f"{config}: the console's model (left) is not its arch's (right): {differ}"
    assert states[0].keys() == states[1].keys()
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0]), config
