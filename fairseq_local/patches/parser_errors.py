"""fairseq's command-line parsers end an error in one line, not after their 130 lines of usage.

What it changes: ``argparse.ArgumentParser.error``, for the parsers fairseq's CLIs build
(``fairseq.options.get_parser``: every one carries fairseq's ``--user-dir`` option) and for no other
parser in the process (our own tools', a notebook's, a library's keep argparse's behaviour).
For whom: everyone who runs a fairseq CLI with ``--user-dir fairseq_local``.  Why: a misspelled
registry choice (``--arch``, ``--task``, ``--optimizer``...) is argparse's list of several hundred
choices after the whole usage; here it is one line with the closest names (``difflib``), and any
other error of such a parser is the error line alone, pointing to ``--help``.  Exit status 2, as
argparse's.  Numbers of a run are untouched (the parser either fails or parses as before).
"""
import argparse
import functools

from fairseq_local.config_checks import did_you_mean

_MARK = "_fairseq_local_parser_errors"
_USAGE_LINES = 5  # a longer usage (fairseq's parsers: over 100 lines) is left to --help


def is_fairseq_parser(parser) -> bool:
    """True for a parser fairseq's ``options.get_parser`` built (it has fairseq's ``--user-dir``)."""
    return any("--user-dir" in action.option_strings for action in getattr(parser, "_actions", ()))


def install():
    error = argparse.ArgumentParser.error
    if getattr(error, _MARK, False):
        return

    @functools.wraps(error)
    def parser_error(self, message):
        if not is_fairseq_parser(self):
            return error(self, message)
        short = did_you_mean(message)
        if short is None:
            if self.format_usage().count("\n") <= _USAGE_LINES:
                return error(self, message)
            short = f"{message} ({self.prog} --help lists the options)"
        self.exit(2, f"{self.prog}: error: {short}\n")

    setattr(parser_error, _MARK, True)
    argparse.ArgumentParser.error = parser_error
