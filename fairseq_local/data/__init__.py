"""Our datasets: the dictionaries a checkpoint was trained with, packed lattice batches, the shape
plan of the CUDA-graph path, the stateful BPTT windows, the synthetic demo/test corpus, and the text
input of fairseq-interactive and the hub (blank lines, the corpus manifest and the lattice text format
live in ``fairseq_local_core``)."""
from fairseq_local.data import checkpoint_dictionaries  # noqa: F401
from fairseq_local.data import lattice_dataset  # noqa: F401
from fairseq_local.data import shape_buckets  # noqa: F401
from fairseq_local.data import stateful_bptt_dataset  # noqa: F401
from fairseq_local.data import synthetic  # noqa: F401
from fairseq_local.data import text_input  # noqa: F401
