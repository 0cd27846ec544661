"""Impossible options are one line naming the option, in every entry point that builds a model or
a generator, reads data or trains: :func:`install` puts the checks of
:mod:`fairseq_local.config_checks` where fairseq passes.

What it changes: ``fairseq.models.build_model`` and the ``main`` of fairseq-generate, and as
layers (:mod:`fairseq_local.hook_points`, the innermost at each) ``FairseqTask.build_generator``,
``distributed_utils.call_main``, ``add_defaults`` and the ``main`` of fairseq-preprocess.  For
whom: every run; each check refuses only values with which fairseq fails later or silently does
something else, so a run that fairseq completes completes the same.  ``build_model`` also records
which models are ours (:mod:`fairseq_local.ownership`), for the scoped patches.  Why:

* ``FairseqTask.build_generator`` (the base of ``translation``, ``language_modeling`` and our
  tasks; used by ``fairseq-generate``, ``fairseq-interactive``, ``--eval-bleu`` validation and
  the hub interface of ``scripts/sample_lm.py``): ``--beam`` and ``--nbest`` must be >= 1,
  ``--nbest`` <= ``--beam``, ``--max-len-a``/``--max-len-b``/``--min-len`` >= 0 with room for
  ``--min-len`` tokens, ``--temperature`` > 0, ``--sampling-topk``/``--sampling-topp`` -1 or in
  range.  fairseq itself accepts ``--beam 0`` and fails inside beam search; its own assertions
  ("--sampling requires --nbest to be equal to --beam") become one line too.
* Options of every run (``check_common_options``, from ``distributed_utils.call_main``, which
  fairseq-train, -hydra-train, -eval-lm, -interactive and -validate call, and from
  ``fairseq_cli.generate.main``): ``--max-tokens``/``--batch-size`` (and their ``-valid``
  variants) >= 1 (fairseq reads 0 as "unset" and a negative value as an empty dataset),
  ``--update-freq`` >= 1, ``--lr`` >= 0, ``--clip-norm`` >= 0, ``--label-smoothing`` in [0, 1),
  ``--tokens-per-sample`` >= 1, ``--num-workers`` >= 0, ``fairseq-eval-lm --context-window`` >= 0 and
  below ``--tokens-per-sample``; a float option given as ``nan`` or ``inf`` (which passes every
  range check) is refused, here and among the generation options (``--lenpen``, ``--unkpen``...);
  a translation task on a language-model corpus (``dict.txt`` only) or a language-modeling task on a
  parallel one (``dict.L.txt`` only) names what the data directory holds.
* ``add_defaults``, which ``fairseq_cli.train.main`` calls (``fairseq-train`` and ``fairseq-hydra-train``,
  and so ``train.sh`` and the recipes): the checks of every run again once the plugin is imported
  (``fairseq-hydra-train`` imports it only there).
* ``fairseq.models.build_model``: every model option whose name holds ``dropout`` must be in
  [0, 1); a ``ValueError`` whose message starts with an option name (``"--cell must be one of
  ..."``, the convention of our models' checks, see ``fairseq_local/config_checks.py``) becomes a
  :class:`~fairseq_local_core.errors.ConfigError`; a YAML key the model does not have (Hydra's
  ``ConfigKeyError``) names the key and the closest option.  A recurrent language model that
  carries its state across windows (the parallel-cell and MC-RNN LMs) built for another task than
  ``stateful_language_modeling`` gets a warning naming that task.  One of our language models built
  for a translation task, or one of our translation models for a language-modeling task, is refused
  (fairseq builds both and fails in the first forward pass).
* ``fairseq-preprocess --user-dir fairseq_local``: ``--nwordssrc``/``--nwordstgt`` must be -1 (no
  cap) or >= 1 (fairseq ignores 0).

(fairseq's command-line parsers' errors: ``parser_errors.py``.)
"""
import functools
import logging
import re
import sys

from fairseq import models
from omegaconf.errors import ConfigKeyError

from fairseq_local.config_checks import (
    check_common_options,
    check_dropout,
    check_generation_options,
    check_model_keys,
    check_preprocess_options,
    check_task_fits_arch,
    unknown_key,
)
from fairseq_local import checkpoint_loads, hook_points, ownership
from fairseq_local_core.errors import ConfigError, UserError
from fairseq_local.tasks.stateful_language_modeling import StatefulLanguageModelingTask, supports_bptt_state

logger = logging.getLogger(__name__)

_STATE = {}


def _warn_stateless(model, task):
    if checkpoint_loads.in_progress() or isinstance(task, StatefulLanguageModelingTask) or not supports_bptt_state(model):
        return  # a loaded checkpoint is checked against its training task (checkpoint_fit.py)
    logger.warning(f"{type(model).__name__} carries its recurrent state across windows only with --task "
                   "stateful_language_modeling; with this task every window starts from a zero state (a "
                   "different perplexity than the paper's): pass --task stateful_language_modeling")


def _wrap_cli_main(module_name, check):
    module = sys.modules.get(module_name)
    if module is None or getattr(module.main, "_fairseq_local", False):
        return
    main = module.main

    @functools.wraps(main)
    def checked_main(args, *rest, **kwargs):
        check(args)
        return main(args, *rest, **kwargs)

    checked_main._fairseq_local = True
    module.main = checked_main


def add_defaults_checking_options(add_defaults, cfg):
    """``fairseq_cli.train.main`` imports the plugin (``common.user_dir``), then calls
    ``add_defaults``: the checks of every run follow there, so that ``fairseq-hydra-train`` (whose
    ``call_main`` ran before the plugin was imported) checks the options ``fairseq-train`` checks."""
    result = add_defaults(cfg)
    check_common_options(cfg)
    return result


def preprocess_checking_options(main, args, *rest, **kwargs):
    check_preprocess_options(args)
    return main(args, *rest, **kwargs)


def call_main_checking_options(call_main, cfg, main, **kwargs):
    check_common_options(cfg)
    return call_main(cfg, main, **kwargs)


def install():
    # CLIs imported before the plugin (their entry point modules): wrapped whenever install runs
    _wrap_cli_main("fairseq_cli.generate", check_common_options)
    if _STATE:
        return

    def checked_build_generator(build_generator, self, models_, args, *rest, **kwargs):
        check_generation_options(args)
        try:
            return build_generator(self, models_, args, *rest, **kwargs)
        except AssertionError as err:  # fairseq's own checks: "--sampling requires --nbest to be ..."
            if not str(err).startswith("--"):
                raise
            raise ConfigError(str(err)) from None

    build_model = models.build_model

    @functools.wraps(build_model)
    def checked_build_model(cfg, task, *rest, **kwargs):
        check_dropout(cfg)
        from_checkpoint = kwargs.get("from_checkpoint", rest[0] if rest else False)
        check_model_keys(cfg, from_checkpoint)
        if not from_checkpoint:
            check_task_fits_arch(cfg, task)
        try:
            model = build_model(cfg, task, *rest, **kwargs)
        except ConfigKeyError as err:
            key = getattr(err, "key", None) or (re.findall(r"Key '([^']+)'", str(err)) or [None])[0]
            raise unknown_key(key, cfg.get("_name", None) if hasattr(cfg, "get") else None) from None
        except ValueError as err:
            if isinstance(err, UserError) or not str(err).startswith("--"):
                raise
            raise ConfigError(str(err)) from err
        ownership.note_model(task, model, cfg)  # which later patches apply (fairseq_local/ownership.py)
        _warn_stateless(model, task)
        return model

    _STATE.update(build_model=build_model)
    models.build_model = checked_build_model
    hook_points.add(hook_points.BUILD_GENERATOR, checked_build_generator)
    hook_points.add(hook_points.CALL_MAIN, call_main_checking_options)
    hook_points.add(hook_points.ADD_DEFAULTS, add_defaults_checking_options)
    hook_points.add(hook_points.PREPROCESS_MAIN, preprocess_checking_options)
