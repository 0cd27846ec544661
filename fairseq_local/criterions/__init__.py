"""Our criterions, imported (so registered)."""
from fairseq_local.criterions import ar_tar_cross_entropy  # noqa: F401
