"""``fairseq-interactive`` reads its input as our models were trained to see it
(:mod:`fairseq_local.data.text_input`).

What it changes: ``fairseq_cli.interactive.buffered_read`` and
``FairseqTask.get_interactive_tokens_and_lengths``.  For whom: our models and tasks
(:mod:`fairseq_local.ownership`); for fairseq's own models both are fairseq's code, line for line.
Why: a line that is not UTF-8 stops the input with one line naming it (fairseq translates it as
``<unk>`` or fails with a traceback), and a source dictionary built from lowercased text
(``scripts/preprocess.sh --lowercase``) gets lowercased input (before ``--tokenizer``/``--bpe``).
Standard input may be any text stream (a replaced ``sys.stdin`` such as ``io.StringIO``, a
notebook's, a pipe, a file), as fairseq's reader allows.
"""
import functools
import sys

from fairseq.tasks import FairseqTask

from fairseq_local import ownership
from fairseq_local.data.text_input import buffered_read as checked_read
from fairseq_local.data.text_input import lowercase_input

_MARK = "_fairseq_local_interactive_input"


def _install_reader(interactive):
    original = interactive.buffered_read
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def buffered_read(input, buffer_size):
        # fairseq-interactive loads its ensemble (fairseq.models.build_model) before reading
        if ownership.last_model_is_ours():
            return checked_read(input, buffer_size)
        return original(input, buffer_size)

    setattr(buffered_read, _MARK, True)
    interactive.buffered_read = buffered_read


def install():
    original = FairseqTask.get_interactive_tokens_and_lengths
    if not getattr(original, _MARK, False):
        @functools.wraps(original)
        def get_interactive_tokens_and_lengths(self, lines, encode_fn):
            if ownership.task_is_ours(self):
                lines = [lowercase_input(line, self.source_dictionary) for line in lines]
            return original(self, lines, encode_fn)

        setattr(get_interactive_tokens_and_lengths, _MARK, True)
        FairseqTask.get_interactive_tokens_and_lengths = get_interactive_tokens_and_lengths
    # fairseq-interactive's module is imported before the plugin (the CLI's entry point); when it
    # is imported later (in-process use), calling install() again patches it then
    interactive = sys.modules.get("fairseq_cli.interactive")
    if interactive is not None:
        _install_reader(interactive)
