"""The project's command-line tools, one module per command; each runs as ``python scripts/<module>.py``
(its front door) or ``python -m fairseq_local_repro.tools.<module>``, ``--help`` describes it, and its
``main(argv=None)`` returns the exit status:

* :mod:`.score`: sacrebleu BLEU (with its signature) and ROUGE of hypotheses against references.
"""
