"""Our optimizers and learning-rate schedulers, imported (so registered) in this order."""
from fairseq_local.optim import nt_asgd  # noqa: F401
from fairseq_local.optim import plateau_every_n_updates  # noqa: F401
from fairseq_local.optim import rmsprop  # noqa: F401
