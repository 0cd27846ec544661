"""The parts of fairseq-local that need neither torch nor fairseq (standard library and numpy only).

Errors and their one-line form (:mod:`.errors`), atomic writes and output-folder claims
(:mod:`.file_io`), the lattice text format (:mod:`.lattice`), the corpus manifest
(:mod:`.corpus_manifest`) and blank-line checks (:mod:`.blank_lines`).  The plugin
(``fairseq_local``) and the harness (``fairseq_local_repro``) import them alike; importing them
starts neither torch nor fairseq, and this package imports nothing of the other two.
"""
