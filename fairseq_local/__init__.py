"""fairseq-local: MC-RNN, parallel-cell LSTM, lattice encoders, genCNN and DPN-S2S for fairseq.

Use with any fairseq CLI through ``--user-dir fairseq_local`` (or ``common.user_dir`` in Hydra).
Importing the package registers every model, architecture, task and criterion in its
sub-packages, allow-lists the globals fairseq checkpoints need for ``torch.load(weights_only=True)``
and undoes fairseq's import-time DEBUG root logger.
"""
from fairseq_local.version import __version__  # noqa: F401
from fairseq_local import _quiet  # noqa: F401  (must run before fairseq is imported)
from fairseq_local import safe_loading  # noqa: F401
from fairseq_local import data, modules, models, optim, tasks, criterions  # noqa: F401
from fairseq_local import patches  # noqa: F401  (patches fairseq and uses the floors above)

safe_loading.install()
patches.install_all()
_quiet.restore_root_logger()
