"""Impossible options are one line naming the option, in every entry point that builds a model or
a generator.

* ``FairseqTask.build_generator`` (the base of ``translation``, ``language_modeling`` and our
  tasks; used by ``fairseq-generate``, ``fairseq-interactive``, ``--eval-bleu`` validation and
  the hub interface of ``scripts/sample_lm.py``): ``--beam`` and ``--nbest`` must be >= 1,
  ``--nbest`` <= ``--beam``, ``--max-len-b``/``--min-len`` >= 0.  fairseq itself accepts
  ``--beam 0`` and fails inside beam search.
* ``fairseq.models.build_model``: a ``ValueError`` whose message starts with an option name
  (``"--cell must be one of ..."``, the convention of our models' checks, see
  ``fairseq_local/config_checks.py``) becomes a :class:`~fairseq_local.errors.ConfigError`, printed
  as one line.
"""
import functools

from fairseq_local.errors import ConfigError, UserError

_STATE = {}


def check_generation_options(args):
    def get(name, default=None):
        return getattr(args, name, default)

    beam, nbest = get("beam"), get("nbest")
    if beam is not None and beam < 1:
        raise ConfigError(f"--beam must be >= 1 (got {beam})")
    if nbest is not None and nbest < 1:
        raise ConfigError(f"--nbest must be >= 1 (got {nbest})")
    if beam is not None and nbest is not None and nbest > beam:
        raise ConfigError(f"--nbest {nbest} must not exceed --beam {beam}")
    for name in ("max_len_b", "min_len"):
        value = get(name)
        if value is not None and value < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 0 (got {value})")


def install():
    if _STATE:
        return
    from fairseq import models
    from fairseq.tasks import FairseqTask

    build_generator = FairseqTask.build_generator

    @functools.wraps(build_generator)
    def checked_build_generator(self, models_, args, *rest, **kwargs):
        check_generation_options(args)
        return build_generator(self, models_, args, *rest, **kwargs)

    build_model = models.build_model

    @functools.wraps(build_model)
    def checked_build_model(cfg, task, *rest, **kwargs):
        try:
            return build_model(cfg, task, *rest, **kwargs)
        except ValueError as err:
            if isinstance(err, UserError) or not str(err).startswith("--"):
                raise
            raise ConfigError(str(err)) from err

    _STATE.update(build_generator=build_generator, build_model=build_model)
    FairseqTask.build_generator = checked_build_generator
    models.build_model = checked_build_model
