"""Every change the plugin makes to another library (fairseq, Hydra, torch.nn, argparse, sys).

Each module here changes one behaviour of fairseq, installed by its ``install()`` (idempotent: each
target is wrapped once); its docstring names what it changes, for whom and why.  Changes meant for
our models and tasks apply to them alone (:mod:`fairseq_local.ownership`): fairseq's own
architectures and tasks train, resume, validate, generate and score bit for bit as without the
plugin (``tests/test_plain_fairseq.py``).  Nothing imports a patch module to use its functions:
what two floors share lives on a lower floor.

Each target is wrapped once: a fairseq function that several behaviours change is wrapped by
``shared_targets`` alone, and each behaviour module adds its *layer* there
(:mod:`fairseq_local.hook_points`); the layers of one target run in install order, the first
installed innermost (next to fairseq's function).

:data:`ORDER` is the install order, and why each comes where it does:

0. ``shared_targets``: the one wrapper on each shared target (it calls the layers at call time, so
   it could come anywhere; first, so that every later module finds its targets in place).
1. ``option_checks``: fairseq's model building (``fairseq.models.build_model``) records which models
   are ours, which every later, scoped patch asks; first, so that it is in place before anything
   builds a model.
2. ``parser_errors``: fairseq's command-line parsers' error lines (no dependency).
3. ``precision``: the bf16/fp16 options of ``call_main`` and the RNN kernel fallback.
4. ``hydra_arch_defaults``: Hydra fills a YAML's model from its arch (before any Hydra run).
5. ``preprocess_input``, ``complete_splits``: what fairseq-preprocess writes and reads.
6. ``complete_batches``, ``shape_plan_batching``: batching of our tasks (reads ownership), then the
   declared batch shapes of our ``--rnn-impl cuda-graphs`` models and their capture ahead of training.
7. ``checkpoint_fit``, ``dictionary_fingerprint``: what loading a checkpoint checks; before
   ``exact_resume``, whose ``Trainer.load_checkpoint`` wrapper restores state after the checks pass.
8. ``exact_resume``: resumption of our runs.
9. ``atomic_checkpoints``, ``training_paths``: how checkpoints are written and where a run starts
   (``training_paths`` also takes our runs' ``--save-dir`` lock, which removes the temporary files
   of ``atomic_checkpoints``).
10. ``interactive_input``, ``hub_interface``: the inference front ends.
11. ``one_line_errors``: last, so that an error any of the above raises is one line.
"""
from fairseq_local.patches import (
    atomic_checkpoints,
    checkpoint_fit,
    complete_batches,
    complete_splits,
    dictionary_fingerprint,
    exact_resume,
    hub_interface,
    hydra_arch_defaults,
    interactive_input,
    one_line_errors,
    option_checks,
    parser_errors,
    precision,
    preprocess_input,
    shape_plan_batching,
    shared_targets,
    training_paths,
)

ORDER = [shared_targets, option_checks, parser_errors, precision, hydra_arch_defaults, preprocess_input, complete_splits,
         complete_batches, shape_plan_batching, checkpoint_fit, dictionary_fingerprint, exact_resume, atomic_checkpoints,
         training_paths, interactive_input, hub_interface, one_line_errors]


def install_all():
    for module in ORDER:
        module.install()
