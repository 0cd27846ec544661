"""``fairseq-interactive`` reads its input as the model was trained to see it
(:mod:`fairseq_local.data.text_input`).

:func:`install` replaces ``fairseq_cli.interactive.buffered_read`` by
:func:`~fairseq_local.data.text_input.buffered_read` (a line that is not UTF-8 stops it with one
line naming it) and applies :func:`~fairseq_local.data.text_input.lowercase_input` in
``FairseqTask.get_interactive_tokens_and_lengths`` (before ``--tokenizer``/``--bpe``), so a
source dictionary built from lowercased text gets lowercased input.
"""
import functools
import sys

from fairseq.tasks import FairseqTask

from fairseq_local.data.text_input import buffered_read, lowercase_input


def install():
    original = FairseqTask.get_interactive_tokens_and_lengths
    if not getattr(original, "_fairseq_local", False):
        @functools.wraps(original)
        def get_interactive_tokens_and_lengths(self, lines, encode_fn):
            lines = [lowercase_input(line, self.source_dictionary) for line in lines]
            return original(self, lines, encode_fn)

        get_interactive_tokens_and_lengths._fairseq_local = True
        FairseqTask.get_interactive_tokens_and_lengths = get_interactive_tokens_and_lengths
    # fairseq-interactive's module is imported before the plugin (the CLI's entry point); when it
    # is imported later (in-process use), calling install() again patches it then
    interactive = sys.modules.get("fairseq_cli.interactive")
    if interactive is not None and interactive.buffered_read is not buffered_read:
        interactive.buffered_read = buffered_read
