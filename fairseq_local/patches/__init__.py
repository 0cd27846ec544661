"""Guards the plugin installs on fairseq itself when it is imported (``--user-dir fairseq_local``).

Each module here fixes one fairseq behaviour that would otherwise cost users data or give wrong
numbers, whichever entry point started the run (``fairseq-train``/``-generate``/``-eval-lm``,
``fairseq-hydra-train``, our scripts). Every module exposes ``install()``, which is idempotent;
``fairseq_local/__init__.py`` calls :func:`install_all`, which installs them in the order below.
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
    precision,
    preprocess_input,
    save_dir_lock,
    shape_plan_batching,
    training_paths,
)

_MODULES = [atomic_checkpoints, checkpoint_fit, complete_batches, complete_splits, dictionary_fingerprint,
            exact_resume, hub_interface, hydra_arch_defaults, interactive_input, one_line_errors, option_checks,
            precision, preprocess_input, save_dir_lock, shape_plan_batching, training_paths]


def install_all():
    for module in _MODULES:
        module.install()
