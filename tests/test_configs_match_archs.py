"""A row's sizes live in its arch, its schedule in its YAML: every YAML under ``configs/`` (globbed
when the tests are collected) names its row's arch in ``model._name`` and builds the model that
``--arch`` builds.

The model is built twice, with the same dictionaries, on the meta device (paper sizes cost no memory
and no initialisation):

* as ``fairseq-hydra-train --config-dir DIR --config-name NAME`` builds it: Hydra composes the YAML
  over fairseq's schema, ``fairseq_cli.train``'s ``add_defaults`` fills the model's config (the
  plugin's ``patches/hydra_arch_defaults.py`` runs the arch on the YAML's keys first), then
  ``fairseq.tasks.setup_task`` and ``task.build_model``;
* as ``fairseq-train DATA --task TASK ... --arch NAME`` builds it: ``options.parse_args_and_arch``
  with the YAML's task options and its :data:`ROW_OPTIONS` on the command line, nothing else of
  the model.

Every key of the Hydra model config must equal the command line's, and the parameter counts must
agree: a size the YAML sets differently from its arch fails, and so does a key that restates the
arch's value (:func:`test_yaml_model_keys_are_not_the_archs`).
"""
import glob
import logging
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

import fairseq_local  # noqa: F401  (registers the archs)
from contract_lib import REPO, USER_DIR, arch_model_config, force_overrides

CONFIGS = sorted(Path(p).relative_to(REPO / "configs").with_suffix("").as_posix()
                 for p in glob.glob(str(REPO / "configs" / "**" / "*.yaml"), recursive=True))
# Model keys a YAML may set beside ``_name``, and why they are not its arch's
ROW_OPTIONS = {
    # the cutoffs are ranks in the row's vocabulary (genCNN's FBIS rows; the PTB row has none)
    "adaptive_softmax_cutoff": "vocabulary ranks of the row's corpus",
}
# Options the command line shares between the task and the model (one namespace): there the model's
# value is the task's, under Hydra the model keeps its own (the smaller of the two applies either way)
SHARED_WITH_TASK = ("max_source_positions", "max_target_positions")
# Not a paper row: fairseq's own transformer at a tiny size, the contract suite's check of the
# Hydra path for a model that is not ours; its sizes are the YAML's
OWN_SIZES = ("_selftest/",)
VOCAB = 12000  # above every adaptive-softmax cutoff of the rows


def load(config: str):
    return OmegaConf.load(REPO / "configs" / f"{config}.yaml")


def flat_model_keys(model: dict, prefix="") -> dict:
    """``{"encoder": {"embed_dim": 8}}`` -> ``{"encoder_embed_dim": 8}`` (fairseq's command-line names).
    A nested key wins over a flat one of the same name, as in fairseq's ``TransformerConfig.from_namespace``
    (fairseq's legacy transformer arch adds the flat ones to a nested Hydra config)."""
    out = {f"{prefix}{key}": value for key, value in model.items() if not isinstance(value, dict)}
    for key, value in model.items():
        if isinstance(value, dict):
            out.update(flat_model_keys(value, f"{prefix}{key}_"))
    return out


@pytest.fixture(scope="module")
def dictionaries(tmp_path_factory):
    """A data folder with a ``VOCAB``-word dictionary under every name a row's task reads."""
    data = tmp_path_factory.mktemp("dicts")
    words = "".join(f"w{i} 1\n" for i in range(VOCAB))
    for lang in ("", ".de", ".en", ".zh", ".article", ".headline", ".src", ".tgt"):
        (data / f"dict{lang}.txt").write_text(words, encoding="utf-8")
    return data


def hydra_model(config: str, data: Path):
    """(model config, parameter count) as fairseq-hydra-train builds them."""
    from fairseq import tasks
    from fairseq.dataclass.initialize import hydra_init
    from fairseq.dataclass.utils import omegaconf_no_object_check
    from fairseq_cli import train as train_cli
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.version import Version, VersionBase

    path = REPO / "configs" / f"{config}.yaml"
    saved_base = VersionBase.instance().getbase()
    GlobalHydra.instance().clear()
    hydra_init(path.stem)
    try:
        with initialize_config_dir(config_dir=str(path.parent), version_base="1.1"):
            cfg = compose(config_name=path.stem, overrides=force_overrides(
                [f"task.data={data}", f"common.user_dir={USER_DIR}", f"checkpoint.save_dir={data}",
                 *lang_overrides(config)]))
    finally:
        if isinstance(saved_base, Version):  # a base set before (a fresh process has none)
            VersionBase.instance().setbase(saved_base)
        GlobalHydra.instance().clear()
    with omegaconf_no_object_check():  # as fairseq_cli.hydra_train._hydra_main
        cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    OmegaConf.set_struct(cfg, True)
    train_cli.add_defaults(cfg)  # as fairseq_cli.train.main, once common.user_dir has imported the plugin
    task = tasks.setup_task(cfg.task)
    with torch.device("meta"):
        model = task.build_model(cfg.model)
    return flat_model_keys(OmegaConf.to_container(cfg.model)), sum(p.numel() for p in model.parameters())


def lang_overrides(config: str):
    """A translation YAML that leaves its languages to the data folder gets the test's."""
    task = load(config).task
    if "translation" in task._name and task.get("source_lang") is None:
        return ["task.source_lang=src", "task.target_lang=tgt"]
    return []


def cli_options(values: dict):
    """``{"source_lang": "de", "eval_bleu": True}`` -> ``["--source-lang", "de", "--eval-bleu"]``."""
    argv = []
    for key, value in values.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            argv += [flag] if value else []
        elif value is not None:
            argv += [flag, ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    return argv


def cli_model(config: str, data: Path):
    """(model config, parameter count) as ``fairseq-train DATA --task ... --arch NAME`` builds them."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    cfg = load(config)
    task = OmegaConf.to_container(cfg.task)
    task_name = task.pop("_name")
    task.pop("data")
    task.update({k.split("=")[0][len("task."):]: k.split("=")[1] for k in lang_overrides(config)})
    model = OmegaConf.to_container(cfg.model)
    arch = model.pop("_name")
    extra = flat_model_keys(model) if config.startswith(OWN_SIZES) else {
        k: v for k, v in model.items() if k in ROW_OPTIONS}
    argv = [str(data), "--user-dir", USER_DIR, "--task", task_name, "--arch", arch,
            *cli_options(task), *cli_options(extra)]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    ns = convert_namespace_to_omegaconf(args)
    fairseq_task = tasks.setup_task(ns.task)
    with torch.device("meta"):
        built = fairseq_task.build_model(ns.model)
    model_cfg = OmegaConf.to_container(ns.model) if OmegaConf.is_config(ns.model) else vars(ns.model)
    return flat_model_keys(model_cfg), sum(p.numel() for p in built.parameters())


@pytest.fixture(autouse=True)
def _quiet():
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


@pytest.mark.parametrize("config", CONFIGS)
def test_yaml_builds_its_archs_model(config, dictionaries):
    hydra_cfg, hydra_params = hydra_model(config, dictionaries)
    cli_cfg, cli_params = cli_model(config, dictionaries)
    keys = hydra_cfg
    if config.startswith(OWN_SIZES):  # fairseq's legacy transformer arch adds flat keys it derives
        keys = flat_model_keys(OmegaConf.to_container(load(config).model))  # from the flat defaults
    differ = {key: (hydra_cfg[key], cli_cfg.get(key, "<unset>")) for key in keys
              if key not in SHARED_WITH_TASK and str(hydra_cfg[key]) != str(cli_cfg.get(key, "<unset>"))}
    assert not differ, (f"configs/{config}.yaml: model keys (YAML, --arch {hydra_cfg['_name']}) differ: {differ}; "
                        "a row's sizes live in its arch")
    assert hydra_params == cli_params, (f"configs/{config}.yaml: {hydra_params} parameters, --arch "
                                        f"{hydra_cfg['_name']}: {cli_params}")


@pytest.mark.parametrize("config", CONFIGS)
def test_yaml_model_keys_are_not_the_archs(config):
    """``model:`` names an arch of the row and sets only :data:`ROW_OPTIONS`, each to a value its
    arch does not already set."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, MODEL_REGISTRY

    model = OmegaConf.to_container(load(config).model)
    name = model.pop("_name", None)
    assert name in ARCH_CONFIG_REGISTRY, f"configs/{config}.yaml: model._name {name!r} is not a registered arch"
    if config.startswith(OWN_SIZES):
        return
    assert name not in MODEL_REGISTRY, (
        f"configs/{config}.yaml: model._name {name!r} names a model; name the row's arch")
    extra = sorted(set(model) - set(ROW_OPTIONS))
    assert not extra, (f"configs/{config}.yaml: model keys {extra} belong in the arch {name} (a row's sizes live "
                       f"in its arch; a YAML sets only {sorted(ROW_OPTIONS)})")
    archs = arch_model_config({"_name": name})
    for key, value in model.items():
        assert str(value) != str(archs.get(key)), (
            f"configs/{config}.yaml: model.{key}: {value} restates the arch {name}'s value: remove it")
