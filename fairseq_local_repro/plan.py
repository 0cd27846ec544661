"""Planning: each system's model at the run's scale (:func:`model_options`: its row's arch at
``--scale paper``, the CPU model and its width options at ``--scale cpu``) and its parameter count,
counted by building the model as fairseq-train builds it; a size-matched system gets the hidden
width whose count is closest to its target's."""
import dataclasses
import os
from typing import Dict, List, Optional, Tuple

from fairseq_local_repro.context import Data, SystemPlan
from fairseq_local_repro.family_types import Family, Scale, System
from fairseq_local_repro.processes import ReproError
from fairseq_local_repro.schedule import load_row, model_values, options


def model_options(system: System, scale: Scale, widths: List[str]) -> Tuple[str, List[str]]:
    """(arch, model options) of ``system`` at ``scale`` with its width options ``widths``: at ``--scale
    paper`` its row's arch with the row's model keys and the system's ``paper_options`` (a control
    with ``own_model``: its arch and widths, as at every scale); at ``--scale cpu`` ``System.arch``,
    the widths and ``System.options``."""
    if scale.paper and not system.own_model:
        model = model_values(load_row(system.row))
        return model.pop("arch"), options(model) + list(system.paper_options)
    return system.arch, list(widths) + list(system.options)


def width_options(system: System, width: Optional[int], hidden: Optional[int] = None) -> List[str]:
    """The system's width templates filled in with the common width ``width``, the hidden width
    ``hidden`` (default: ``width``), the filter width ``4 * width`` ({f}) and a wider control's
    ``2 * width`` ({w2}) and ``8 * width`` ({f2}); none when the scale keeps the architectures' widths."""
    if width is None:
        return []
    h = width if hidden is None else hidden
    return [t.format(w=width, h=h, f=4 * width, w2=2 * width, f2=8 * width) for t in system.widths]


def _value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def count_params(system: System, scale: Scale, widths: List[str], data: Data) -> int:
    """Parameters of the system's model at ``scale`` with its width options ``widths``
    (:func:`model_options`) on the family's dictionaries, built through fairseq's architecture registry
    as fairseq-train builds it."""
    from types import SimpleNamespace

    from fairseq.data import Dictionary
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    data = data.for_system(system)
    args = SimpleNamespace(tokens_per_sample=512, criterion="cross_entropy")
    if data.src:  # the translation task's own options, which models without a dataclass (fconv) read
        args.max_source_positions = args.max_target_positions = 1024
    arch, opts = model_options(system, scale, widths)
    for key, value in zip(opts[::2], opts[1::2]):
        setattr(args, key.lstrip("-").replace("-", "_"), _value(value))
    ARCH_CONFIG_REGISTRY[arch](args)
    config = getattr(ARCH_MODEL_REGISTRY[arch], "__dataclass", None)
    if config is not None:  # what the arch leaves unset takes its config's default, as in fairseq-train
        for f in dataclasses.fields(config):
            if not hasattr(args, f.name) and f.default is not dataclasses.MISSING and not (
                    isinstance(f.default, str) and f.default.startswith("${")):  # not an interpolation
                setattr(args, f.name, f.default)
    if data.src:
        src = Dictionary.load(os.path.join(data.bin, f"dict.{data.src}.txt"))
        tgt = Dictionary.load(os.path.join(data.bin, f"dict.{data.tgt}.txt"))
    else:  # a language-model corpus: one dictionary
        src = tgt = Dictionary.load(os.path.join(data.bin, "dict.txt"))
    task = SimpleNamespace(source_dictionary=src, target_dictionary=tgt, dictionary=tgt)
    try:
        model = ARCH_MODEL_REGISTRY[arch].build_model(args, task)
    except Exception as e:  # a bad option value: one line naming the system and its options
        raise ReproError(f"cannot build {system.name} ({arch} {' '.join(opts)}): {e}")
    return sum(p.numel() for p in model.parameters())


def plan_options(family: Family, scale: Scale, systems: List[System],
                 data: Optional[Data]) -> Dict[str, SystemPlan]:
    """Per system: its width options and parameter count under the family's width rule.  A
    size-matched system gets the hidden width whose parameter count is closest to its target's
    (a bisection over widths; parameters grow with the width)."""
    import logging

    import fairseq_local  # noqa: F401  (registers the architectures)

    logging.getLogger().setLevel(logging.WARNING)  # importing fairseq sets the root logger to DEBUG
    plan = {}
    for s in systems:
        if s.size_match is None:
            opts = width_options(s, scale.width)
            plan[s.name] = SystemPlan(opts, count_params(s, scale, opts, data) if data else None)
    for s in systems:
        if s.size_match is None:
            continue
        if scale.width is None or data is None:  # the architecture's own size-matched width
            plan[s.name] = SystemPlan([] if scale.width is None else ["(hidden width matched after data preparation)"],
                                      count_params(s, scale, [], data) if data else None)
            continue
        target_sys = family.system(s.size_match)
        target = plan[s.size_match].params if s.size_match in plan else count_params(
            target_sys, scale, width_options(target_sys, scale.width), data)
        lo, hi = 8, 2 * scale.width
        while count_params(s, scale, width_options(s, scale.width, hi), data) <= target:  # parameters grow with width
            lo, hi = hi, 2 * hi
            if hi > 1 << 16:
                raise ReproError(f"{s.name}: no hidden width up to {hi} reaches {s.size_match}'s {target:,} parameters")
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if count_params(s, scale, width_options(s, scale.width, mid), data) <= target:
                lo = mid
            else:
                hi = mid
        counts = {h: count_params(s, scale, width_options(s, scale.width, h), data) for h in (lo, hi)}
        best = min(counts, key=lambda h: abs(counts[h] - target))
        plan[s.name] = SystemPlan(width_options(s, scale.width, best), counts[best], size_matched_to=s.size_match,
                                  target_params=target)
    return plan


def tuned_on_dev(family: Family, results_root: str) -> Dict[str, Dict[str, float]]:
    """``--tuned-on-dev``: per system, the learning rate and dropout of the point of the family's
    sweep grid (``Family.sweep``, one published variant per point: ``family_types.sweep_point``) where
    its seed-1 run reached the lowest dev loss; the test set is never read.  ReproError naming the
    missing point and its command when a point of the grid has no published clean-split run."""
    from fairseq_local_core.file_io import read_json
    from fairseq_local_repro.family_types import sweep_point, sweep_runsets

    if not family.sweep:
        raise ReproError(f"--tuned-on-dev: family '{family.name}' registers no learning-rate/dropout sweep")
    commands = {r.variant: r.command(family.name) for r in sweep_runsets(family.sweep, "")}
    best: Dict[str, Tuple[float, Dict[str, float]]] = {}
    for lr in family.sweep["lr"]:
        for dropout in family.sweep["dropout"]:
            point = sweep_point(lr, dropout)
            for s in family.systems:
                path = os.path.join(results_root, family.name, point, f"{s.name}-s1.json")
                run = read_json(path) if os.path.isfile(path) else None
                if run is None or "test_dropped" not in (run.get("split") or {}):
                    raise ReproError(f"--tuned-on-dev: {path} is not published (on the clean split) yet: "
                                     f"{commands[point]}")
                if s.name not in best or run["dev_loss_bits"] < best[s.name][0]:
                    best[s.name] = (run["dev_loss_bits"], {"lr": lr, "dropout": dropout})
    return {name: setting for name, (_, setting) in best.items()}