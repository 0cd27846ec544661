"""Under Hydra, a YAML whose ``model._name`` is one of our archs gets that arch's values, as
``--arch`` does.

What it changes: ``fairseq.dataclass.initialize.add_defaults`` (its outermost layer,
:mod:`fairseq_local.hook_points`: the names fairseq's CLIs import of it included).  For whom: Hydra runs of our
archs (``model._name`` registered by the plugin); fairseq's archs are filled as in fairseq.  Why:

``fairseq-hydra-train`` fills a model's config with ``fairseq.dataclass.initialize.add_defaults``
(again in ``fairseq_cli.train.main``, once ``common.user_dir`` has imported the plugin): the YAML's
keys over the model's dataclass defaults.  The arch function runs only later, when the model is
built, and sets only unset keys, so it finds none: ``model: {_name: rnnsearch_iwslt_de_en_large}``
would build 256 hidden units (the dataclass default) instead of the arch's 364.  :func:`install`
layers ``add_defaults`` so that, for our archs, the arch function first fills the YAML's unset keys
and the dataclass defaults fill the rest: a YAML names its row's arch and sets only what the arch
does not (tests/test_configs_match_archs.py builds every YAML both ways).
"""
from fairseq_local import hook_points


def apply_arch(cfg):
    """Run the arch function named by ``cfg.model._name`` (one of ours) on the model's keys."""
    from fairseq.models import ARCH_CONFIG_REGISTRY
    from omegaconf import open_dict

    model = cfg.get("model") if hasattr(cfg, "get") else None
    name = model.get("_name", None) if hasattr(model, "get") else None
    arch = ARCH_CONFIG_REGISTRY.get(name)
    if arch is None or not arch.__module__.startswith("fairseq_local."):
        return
    with open_dict(model):
        arch(model)


def add_arch_defaults(add_defaults, cfg):
    apply_arch(cfg)
    return add_defaults(cfg)


def install():
    hook_points.add(hook_points.ADD_DEFAULTS, add_arch_defaults)
