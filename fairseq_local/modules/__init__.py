"""The reusable layers, each recurrence, gate and attention once, and the fast path of the
recurrent loops (``fast_path``, ``cuda_graphs``); modules register nothing with fairseq."""
from fairseq_local.modules import graph_backends  # noqa: F401
from fairseq_local.modules import graph_variants  # noqa: F401
from fairseq_local.modules import cuda_graphs  # noqa: F401  (imports graph_backends, graph_variants)
from fairseq_local.modules import fast_path  # noqa: F401  (imports cuda_graphs)
from fairseq_local.modules import amp  # noqa: F401
from fairseq_local.modules import awd_dropout  # noqa: F401
from fairseq_local.modules import stepwise_linear  # noqa: F401
from fairseq_local.modules import rnn_attention  # noqa: F401  (imports fast_path)
from fairseq_local.modules import rnn_precision  # noqa: F401
from fairseq_local.modules import torch_rnn_layer  # noqa: F401  (imports rnn_precision)
from fairseq_local.modules import multi_channel_rnn  # noqa: F401
from fairseq_local.modules import parallel_cell_rnn  # noqa: F401
from fairseq_local.modules import lattice_gru  # noqa: F401
from fairseq_local.modules import recurrent_seq2seq  # noqa: F401
from fairseq_local.modules import recurrent_lm_decoder  # noqa: F401
from fairseq_local.modules import dpn_gate  # noqa: F401
from fairseq_local.modules import dpn_paths  # noqa: F401
from fairseq_local.modules import gencnn_kernels  # noqa: F401
from fairseq_local.modules import gencnn_layers  # noqa: F401
