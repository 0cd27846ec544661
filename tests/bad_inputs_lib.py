"""What the tests/test_bad_inputs_*.py files of a new user's first hour share: the plugin directory
given as ``--user-dir``, a task set up from command-line arguments, and checkpoints loaded into it
(through fairseq's loader, as the CLIs load them)."""
import fairseq_local  # noqa: F401  (first: fairseq_local._quiet runs before fairseq is imported)
from fairseq import checkpoint_utils, options, tasks

from contract_lib import REPO

USER_DIR = REPO / "fairseq_local"


def load_ensemble(paths, task):
    return checkpoint_utils.load_model_ensemble_and_task([str(p) for p in paths], task=task)


def setup_task(name, data, task_args, extra=(), parser="generation"):
    """The task ``name`` over ``data`` as fairseq-generate (``parser="generation"``),
    fairseq-eval-lm (``"eval_lm"``) or fairseq-interactive (``"interactive"``) sets it up."""
    get_parser = {"generation": options.get_generation_parser, "eval_lm": options.get_eval_lm_parser,
                  "interactive": options.get_interactive_generation_parser}[parser]
    argv = [str(data), "--user-dir", str(USER_DIR), "--task", name, "--cpu", *task_args, *extra]
    return tasks.setup_task(options.parse_args_and_arch(get_parser(), argv))
