"""``from_pretrained`` of every plugin model returns a hub interface that serves its task (stateful
language models, lattice input): see :mod:`fairseq_local.hub`.

What it changes: the ``from_pretrained`` classmethod of the model classes the plugin registers.
For whom: our models only; fairseq's own classes keep theirs.  Why: fairseq's hub interface knows
neither the stateful language-modelling task nor lattice input.
"""
from fairseq.models import MODEL_REGISTRY

from fairseq_local import hub, ownership


def install():
    for model_cls in MODEL_REGISTRY.values():
        if ownership.is_ours(model_cls):
            model_cls.from_pretrained = classmethod(hub.from_pretrained_classmethod)
