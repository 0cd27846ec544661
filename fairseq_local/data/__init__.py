"""Our datasets: blank lines of a corpus, the dictionaries a checkpoint was trained with, the corpus manifest (what a data directory was made from),
lattices (the text format, packed batches), the shape plan of the CUDA-graph path, the stateful BPTT windows, the synthetic demo/test corpus,
and the text input of fairseq-interactive and the hub."""
from fairseq_local.data import blank_lines  # noqa: F401
from fairseq_local.data import checkpoint_dictionaries  # noqa: F401  (imports corpus_manifest)
from fairseq_local.data import corpus_manifest  # noqa: F401
from fairseq_local.data import lattice  # noqa: F401
from fairseq_local.data import lattice_dataset  # noqa: F401
from fairseq_local.data import shape_buckets  # noqa: F401
from fairseq_local.data import stateful_bptt_dataset  # noqa: F401
from fairseq_local.data import synthetic  # noqa: F401
from fairseq_local.data import text_input  # noqa: F401
