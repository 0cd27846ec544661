"""Our tasks, imported (so registered) in this order."""
from fairseq_local.tasks import lattice_translation  # noqa: F401
from fairseq_local.tasks import stateful_language_modeling  # noqa: F401
