"""Our models and their archs, imported (so registered) in this order: an arch registers after the
model it belongs to, and ``baselines`` (archs of fairseq's models and of ours) after the models it
fills from."""
from fairseq_local.models import arch_defaults  # noqa: F401
from fairseq_local.models import rnnsearch  # noqa: F401
from fairseq_local.models import lattice_rnnsearch  # noqa: F401  (reuses rnnsearch's config and archs)
from fairseq_local.models import parallel_lstm_lm  # noqa: F401
from fairseq_local.models import baselines  # noqa: F401
from fairseq_local.models import dpn_s2s  # noqa: F401
from fairseq_local.models import gencnn  # noqa: F401
from fairseq_local.models import mc_rnn  # noqa: F401
from fairseq_local.models import mc_rnn_lm  # noqa: F401
from fairseq_local.models import parallel_lstm  # noqa: F401
