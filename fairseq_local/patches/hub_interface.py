"""``from_pretrained`` of every plugin model returns a hub interface that serves its task (stateful
language models, lattice input): see :mod:`fairseq_local.hub`."""
from fairseq_local import hub


def install():
    hub.install()
