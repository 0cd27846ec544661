"""fairseq's command-line parsers end an error in one line, not after their 130 lines of usage.

What it changes: ``argparse.ArgumentParser.error``, for the parsers fairseq's CLIs build
(``fairseq.options.get_parser``: every one carries fairseq's ``--user-dir`` option) and for no other
parser in the process (our own tools', a notebook's, a library's keep argparse's behaviour).
For whom: everyone who runs a fairseq CLI with ``--user-dir fairseq_local``.  Why: a misspelled
registry choice (``--arch``, ``--task``, ``--optimizer``...) is argparse's list of several hundred
choices after the whole usage; here it is one line with the closest names (``difflib``), and any
other error of such a parser is the error line alone, pointing to ``--help``.  Exit status 2, as
argparse's.  Numbers of a run are untouched (the parser either fails or parses as before).

The same parsers' ``--help`` lists what that pointer promises: fairseq prints the help in its first
pass, before it adds the options of the command line's ``--arch``, ``--task`` and other registry
choices (so ``fairseq-train --help`` lists no model option at all); here ``print_help`` of such a
parser first adds them as fairseq's second pass does (``fairseq.options.parse_args_and_arch``).
An unknown option gets the closest known ones, the model's and the task's included.
"""
import argparse
import functools
import sys

from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
from fairseq.registry import REGISTRIES
from fairseq.tasks import TASK_REGISTRY

from fairseq_local.config_checks import HELP_POINTER, did_you_mean, unknown_options

_MARK = "_fairseq_local_parser_errors"
_USAGE_LINES = 5  # a longer usage (fairseq's parsers: over 100 lines) is left to --help
_CHOICES = "_fairseq_local_choice_options"


def is_fairseq_parser(parser) -> bool:
    """True for a parser fairseq's ``options.get_parser`` built (it has fairseq's ``--user-dir``)."""
    return any("--user-dir" in action.option_strings for action in getattr(parser, "_actions", ()))


def add_choice_options(parser, argv):
    """Add to ``parser`` the options of ``argv``'s ``--arch``, ``--task`` and registry choices, as
    fairseq's second parsing pass does (once per parser; an unknown choice adds nothing)."""
    if getattr(parser, _CHOICES, False):
        return
    setattr(parser, _CHOICES, True)
    first = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for action in parser._actions:
        if action.dest in ("arch", "task", *REGISTRIES) and action.option_strings:
            first.add_argument(*action.option_strings, dest=action.dest, default=action.default)
    args, _ = first.parse_known_args(argv)
    arch = getattr(args, "arch", None)
    cls = ARCH_MODEL_REGISTRY.get(arch) or MODEL_REGISTRY.get(arch)
    if cls is not None:
        cls.add_args(parser.add_argument_group("Model-specific configuration", argument_default=argparse.SUPPRESS))
    if getattr(args, "task", None) in TASK_REGISTRY:
        TASK_REGISTRY[args.task].add_args(parser)
    for name, registry in REGISTRIES.items():
        chosen = registry["registry"].get(getattr(args, name, None))
        if hasattr(chosen, "add_args"):
            chosen.add_args(parser)
        elif hasattr(chosen, "__dataclass"):
            gen_parser_from_dataclass(parser, chosen.__dataclass())


def install():
    error = argparse.ArgumentParser.error
    if getattr(error, _MARK, False):
        return
    print_help = argparse.ArgumentParser.print_help

    @functools.wraps(print_help)
    def print_full_help(self, file=None):
        if is_fairseq_parser(self):
            add_choice_options(self, [a for a in sys.argv[1:] if a not in ("-h", "--help")])
        return print_help(self, file)

    @functools.wraps(error)
    def parser_error(self, message):
        if not is_fairseq_parser(self):
            return error(self, message)
        short = did_you_mean(message) or unknown_options(message, self._option_string_actions)
        if short is None:
            if self.format_usage().count("\n") <= _USAGE_LINES:
                return error(self, message)
            short = f"{message} ({HELP_POINTER})"
        self.exit(2, f"{self.prog}: error: {short}\n")

    setattr(parser_error, _MARK, True)
    setattr(print_full_help, _MARK, True)
    argparse.ArgumentParser.error = parser_error
    argparse.ArgumentParser.print_help = print_full_help
