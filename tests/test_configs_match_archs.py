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

The reproduction harness (``scripts/reproduce.py``) trains each system from its row: at ``--scale
paper`` its command's training sections equal the Hydra-composed row's, every option, and its model
is the row's arch; at ``--scale cpu`` they differ only where the family's CPU scale names an override.
"""
import ast
import glob
import logging
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

import fairseq_local  # noqa: F401  (registers the archs)
from contract_lib import REPO, USER_DIR, arch_model_config, force_overrides
from fairseq_local_repro import families, schedule
from fairseq_local_repro.context import Data, RunContext, SystemPlan
from fairseq_local_repro.plan import width_options
from fairseq_local_repro.processes import ReproError
from fairseq_local_repro.train import train_command

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


def hydra_config(config: str, data: Path):
    """The row's config as fairseq-hydra-train composes it (over fairseq's schema, interpolations
    resolved, the model filled from its arch by ``add_defaults``)."""
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
    return cfg


def hydra_model(config: str, data: Path):
    """(model config, parameter count) as fairseq-hydra-train builds them."""
    from fairseq import tasks

    cfg = hydra_config(config, data)
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


# ---------------------------------------------------------------------------------------------
# The reproduction harness trains each system from its row: at --scale paper the row's arch and
# schedule, at --scale cpu the row's schedule with the family's named overrides
# ---------------------------------------------------------------------------------------------
SYSTEMS = [(f.name, s.name) for f in families.FAMILIES.values() for s in f.systems]
PAPER_SYSTEMS = [(f.name, s.name) for f in families.FAMILIES.values() if "paper" in f.scales for s in f.systems]
# What the harness sets for one run, not the row: its data, checkpoint folder and how many
# checkpoints it keeps, data-loading workers
HARNESS_OPTIONS = {"data", "save_dir", "no_epoch_checkpoints", "keep_last_epochs", "num_workers"}
# fairseq-train fills these from the training batch size when unset (parse_args_and_arch)
VALID_BATCH = {"max_tokens_valid": "max_tokens", "batch_size_valid": "batch_size"}
# Model options fairseq's transformer derives from another when unset
DERIVED = {"decoder_output_dim": "decoder_embed_dim", "decoder_input_dim": "decoder_embed_dim"}
# The scale's values (Scale: lr, clip_norm, max_epoch, max_tokens, patience) as fairseq options
SCALE_OPTIONS = {"lr", "clip_norm", "max_epoch", "max_tokens", "patience"}


def harness_command(family, system, scale_name: str, data: Path):
    """The harness's fairseq-train command for ``system`` at ``scale_name``, on a data folder
    holding the dictionaries (a size-matched system at the width of the system it matches)."""
    fam = families.FAMILIES[family]
    scale = fam.scales[scale_name]
    lm = fam.kind == "lm"
    src, tgt = ("", "") if lm else (("zh", "en") if fam.name == "lattice" else ("de", "en"))
    kinds = {s.data for s in fam.systems if s.data}
    data_info = Data(bin=str(data), src=src, tgt=tgt, test_ref="", description="", sizes={},
                     bins={k: str(data) for k in kinds})
    plan = {s.name: SystemPlan(width_options(s, scale.width), None) for s in fam.systems}
    ctx = RunContext(family=fam, scale=scale, scale_name=scale_name, out=str(data / "out"), max_epoch=scale.max_epoch,
                     max_tokens=scale.max_tokens, command="", cpu=True, data=data_info, plan=plan)
    return fam, fam.system(system), train_command(ctx, fam.system(system), 1)


def parsed(cmd):
    """(flat namespace, model config) of a ``python -m fairseq_cli.train ...`` command."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(options.get_training_parser(), cmd[3:])
    model = convert_namespace_to_omegaconf(args).model
    model = OmegaConf.to_container(model) if OmegaConf.is_config(model) else vars(model)
    return vars(args), flat_model_keys(model)


def same(a, b) -> bool:
    return a == b or str(a) == str(b)


def schedule_differences(cfg, args: dict) -> dict:
    """``{option: (row's value, command's value)}`` over every training section of the composed row
    (every key fairseq's schema gives, the row's own and its defaults), the harness's options left out."""
    differ = {}
    for section in schedule.TRAIN_SECTIONS:
        node = cfg[section]
        node = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else dict(vars(node))
        for key, value in node.items():
            name = section if key == "_name" else key
            if name in HARNESS_OPTIONS or name in SHARED_WITH_TASK or key.startswith("_") and key != "_name":
                continue
            if name not in args and value is None:  # a schema key that is no command-line option
                continue
            got = args.get(name, "<unset>")
            if value is None and key in VALID_BATCH:  # filled from the training batch size
                value = args.get(VALID_BATCH[key])
            if not same(value, got):
                differ[name] = (value, got)
    return differ


def test_harness_options_are_the_schedules_harness_keys():
    """The options the test leaves to the harness are exactly the keys ``schedule.py`` does not read."""
    assert {key for _, key in schedule.HARNESS_KEYS} | {"num_workers", "no_epoch_checkpoints"} == HARNESS_OPTIONS


@pytest.mark.parametrize("family,system", PAPER_SYSTEMS)
def test_paper_scale_trains_the_rows_arch_and_schedule(family, system, dictionaries):
    """``--scale paper``: the command's schedule is its row's YAML as Hydra composes it, every option of
    its sections (a value restated or changed in families.py shows as a difference), and its model is
    the row's arch (plus a labelled variant's ``paper_options``; a control the paper has no row for
    keeps its own model)."""
    fam, s, cmd = harness_command(family, system, "paper", dictionaries)
    row = Path(s.row).relative_to("configs").with_suffix("").as_posix()
    assert row in CONFIGS, f"{family}/{system}: {s.row} is not a row under configs/"
    args, model = parsed(cmd)
    cfg = hydra_config(row, dictionaries)
    assert not schedule_differences(cfg, args), (
        f"{family}/{system}: --scale paper trains another schedule than {s.row}: {schedule_differences(cfg, args)}")
    if s.own_model:
        assert args["arch"] == s.arch and s.arch != cfg.model._name
        return
    hydra_keys, _ = hydra_model(row, dictionaries)
    variant = {k.lstrip("-").replace("-", "_"): v for k, v in zip(s.paper_options[::2], s.paper_options[1::2])}
    differ = {k: (v, model.get(k, "<unset>")) for k, v in hydra_keys.items()
              if k not in SHARED_WITH_TASK and k not in variant and not same(v, model.get(k, "<unset>"))}
    assert args["arch"] == cfg.model._name, f"{family}/{system}: --arch {args['arch']}, its row's is {cfg.model._name}"
    assert not differ, f"{family}/{system}: the model differs from {s.row}'s arch: {differ}"
    assert {k: str(model[k]) for k in variant} == variant


def named_overrides(fam, s, cfg) -> set:
    """The options ``--scale cpu`` names as changed: the scale's values, every option of a section its
    overrides replace (the corpus's task included), the keys they set."""
    names = set(SCALE_OPTIONS)
    for path, value in fam.scales["cpu"].overrides.items():
        section, _, key = path.partition(".")
        if key:
            names.add(key)
            continue
        names.add(section)
        node = cfg[section]
        names |= set(OmegaConf.to_container(node) if OmegaConf.is_config(node) else vars(node))
        names |= set(value) if isinstance(value, dict) else set()
    return (names | {k for k, src in VALID_BATCH.items() if src in names}) - {"_name"}


@pytest.mark.parametrize("family,system", SYSTEMS)
def test_cpu_scale_differs_from_the_row_only_by_named_overrides(family, system, dictionaries):
    """``--scale cpu``: every option of the row's training sections is the row's, except those the
    family's CPU scale names; the model is the row's arch except the options the system names (its
    CPU arch, widths, options, the scale's dropout)."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    fam, s, cmd = harness_command(family, system, "cpu", dictionaries)
    row = Path(s.row).relative_to("configs").with_suffix("").as_posix()
    args, model = parsed(cmd)
    cfg = hydra_config(row, dictionaries)
    differ = schedule_differences(cfg, args)
    unnamed = {k: v for k, v in differ.items() if k not in named_overrides(fam, s, cfg)}
    assert not unnamed, f"{family}/{system}: --scale cpu changes {unnamed} of {s.row} without naming them"
    for key in SCALE_OPTIONS - {"lr"}:  # the scale's values are what it trains with
        assert same(args[key], getattr(fam.scales["cpu"], key)), key
    assert args["lr"] == [fam.scales["cpu"].lr]
    named = {o.lstrip("-").replace("-", "_") for o in (*width_options(s, 8), *s.options)[::2]} | {"dropout"}
    if s.arch != cfg.model._name:  # a CPU arch of its own: what it sets differently from the row's arch
        assert s.own_model or ARCH_MODEL_NAME_REGISTRY[s.arch] == ARCH_MODEL_NAME_REGISTRY[cfg.model._name]
        if s.own_model:
            return
        row_arch, cpu_arch = arch_model_config({"_name": cfg.model._name}), arch_model_config({"_name": s.arch})
        named |= {k for k in row_arch if not same(row_arch[k], cpu_arch.get(k))}
    named |= {k for k, src in DERIVED.items() if src in named}
    hydra_keys, _ = hydra_model(row, dictionaries)
    differ = {k: (v, model.get(k, "<unset>")) for k, v in hydra_keys.items()
              if k not in {*SHARED_WITH_TASK, *named, "_name"} and not same(v, model.get(k, "<unset>"))}
    assert not differ, f"{family}/{system}: the CPU model differs from {s.row}'s arch in unnamed keys {differ}"


@pytest.mark.parametrize("family", [f for f in families.FAMILIES if "paper" in families.FAMILIES[f].scales])
def test_paper_scale_records_every_rows_values(family):
    """The paper scale's recorded values are read from the rows (no value restated in families.py),
    and every row of the family trains with them."""
    fam = families.FAMILIES[family]
    scale = fam.scales["paper"]
    assert scale.paper and not scale.overrides and scale.dropout is None
    for s in fam.systems:
        expect = families.paper_scale(s.row, scale.width, scale.notes)
        assert scale == expect, f"{family}/{s.name}: {s.row} trains with {expect}, the family's paper scale is {scale}"


def test_fairseq_defaults_are_fairseqs():
    """``schedule.FAIRSEQ_DEFAULTS`` (a row's value where its YAML sets none) are fairseq's."""
    from fairseq.dataclass.configs import FairseqConfig

    cfg = OmegaConf.structured(FairseqConfig)
    for path, value in schedule.FAIRSEQ_DEFAULTS.items():
        section, key = path.split(".")
        got = cfg[section][key]
        assert same(OmegaConf.to_container(got) if OmegaConf.is_config(got) else got, value), path


def test_cli_args_from_yaml_overrides_and_values(tmp_path):
    """Overrides replace a section or one key (UNSET removes it); booleans are flags, None and
    interpolations are left out; two sections giving one option different values is one error."""
    row = {"task": {"_name": "translation", "data": "???", "source_lang": "de"},
           "optimizer": {"_name": "sgd", "lr": "${optimization.lr}", "momentum": 0.9},
           "optimization": {"lr": [0.25], "sentence_avg": True, "clip_norm": 0.1},
           "dataset": {"batch_size": 20, "max_tokens": None},
           "checkpoint": {"save_dir": "x", "patience": 5},
           "common": {"seed": 3}, "generation": {"beam": 5},
           "model": {"_name": "fconv_iwslt_de_en", "dropout": 0.3}}
    assert schedule.cli_args_from_yaml(row) == [
        "--task", "translation", "--source-lang", "de", "--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.25",
        "--sentence-avg", "--clip-norm", "0.1", "--batch-size", "20", "--patience", "5",
        "--arch", "fconv_iwslt_de_en", "--dropout", "0.3"]
    overrides = {"optimizer": {"_name": "adam"}, "optimization.sentence_avg": schedule.UNSET,
                 "optimization.lr": [0.001], "dataset.max_tokens": 100}
    assert schedule.cli_args_from_yaml(row, overrides) == [
        "--task", "translation", "--source-lang", "de", "--optimizer", "adam", "--lr", "0.001", "--clip-norm", "0.1",
        "--batch-size", "20", "--max-tokens", "100", "--patience", "5", "--arch", "fconv_iwslt_de_en",
        "--dropout", "0.3"]
    row["optimizer"]["lr"] = [0.5]
    with pytest.raises(ReproError, match=r"optimization.lr: \[0.25\] differs from \[0.5\] given for the same "
                                         r"fairseq-train option --lr"):
        schedule.cli_args_from_yaml(row)
    bad = tmp_path / "bad.yaml"
    bad.write_text("optimizer:\n  _name: adam\n", encoding="utf-8")
    with pytest.raises(ReproError, match="not a row's YAML"):
        schedule.load_row(str(bad))


def test_families_restate_no_paper_schedule():
    """families.py builds every paper scale with ``paper_scale`` (the values read from the row) and no
    Scale by hand, and names no system's arch where it is its row's."""
    tree = ast.parse((REPO / "fairseq_local_repro" / "families.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "scales" and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values):
                if isinstance(key, ast.Constant) and key.value == "paper":
                    assert isinstance(value, ast.Call) and value.func.id == "paper_scale", (
                        f"families.py line {value.lineno}: a paper scale not read from its row by paper_scale")
        if isinstance(node, ast.FunctionDef) and node.name not in ("paper_scale", "cpu_scale"):
            calls = [c for c in ast.walk(node) if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "Scale"]
            assert not calls, f"families.py line {calls[0].lineno}: a Scale built by hand"
    assert not [c for c in tree.body if isinstance(c, (ast.Assign, ast.Expr)) for n in ast.walk(c)
                if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "Scale"], (
        "families.py: a Scale built by hand")
    for fam in families.FAMILIES.values():
        for s in fam.systems:
            default = families.System(s.name, s.label, s.row)
            named = [a for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "System"
                     for a in [*n.args, *(k.value for k in n.keywords)] if isinstance(a, ast.Constant)]
            assert s.arch != default.arch or s.arch not in [a.value for a in named], (
                f"families.py: {fam.name}/{s.name} restates its row's arch {s.arch}")
