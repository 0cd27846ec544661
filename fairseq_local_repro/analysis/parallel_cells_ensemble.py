"""Model averaging (parallel-cells paper Section 4.2, its second "Table 3"): the perplexity of an
ensemble that averages the members' next-word probabilities.

fairseq 0.12's ``fairseq-eval-lm`` loads only the first checkpoint of ``--path``; this command is
``fairseq-eval-lm`` with every checkpoint of ``--path a.pt:b.pt:...`` loaded (same arguments, same
output line ``Loss (base 2): ..., Perplexity: ...``). fairseq's SequenceScorer averages the
members' probabilities; with ``--task stateful_language_modeling`` each member carries its own
recurrent state across windows. Example::

    python scripts/analysis/parallel_cells_ensemble.py data-bin/ptb --user-dir fairseq_local \
        --task stateful_language_modeling --path ckpt/w3_seed1.pt:ckpt/w3_seed2.pt \
        --gen-subset test --batch-size 20 --tokens-per-sample 35
"""
import os
import sys

from fairseq import checkpoint_utils, distributed_utils, options, utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq_cli import eval_lm


def _load_every_member(load):
    def wrapped(filenames, *args, **kwargs):
        paths = [p for f in filenames for p in utils.split_paths(f)]
        missing = [p for p in paths if not os.path.exists(p)]
        if missing:
            raise FileNotFoundError(f"--path: checkpoint not found: {missing[0]}")
        return load(paths, *args, **kwargs)

    return wrapped


def main(argv=None):
    parser = options.get_eval_lm_parser()
    args = options.parse_args_and_arch(parser, argv)
    results = {}

    def run(cfg, **kwargs):
        results.update(eval_lm.main(cfg, **kwargs))

    load = checkpoint_utils.load_model_ensemble_and_task
    checkpoint_utils.load_model_ensemble_and_task = _load_every_member(load)
    try:
        distributed_utils.call_main(convert_namespace_to_omegaconf(args), run)
    finally:
        checkpoint_utils.load_model_ensemble_and_task = load
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
