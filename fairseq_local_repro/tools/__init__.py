"""The project's command-line tools, one module per command; each runs as ``python scripts/<module>.py``
(its front door) or ``python -m fairseq_local_repro.tools.<module>``, ``--help`` describes it, and its
``main(argv=None)`` returns the exit status:

* :mod:`.score`: sacrebleu BLEU (with its signature) and ROUGE of hypotheses against references;
* :mod:`.make_synthetic_corpus`: the synthetic parallel corpus of the demo and the tests;
* :mod:`.average_checkpoints`: the parameter average of fairseq checkpoints, loaded safely;
* lattices: :mod:`.build_lattices` (segmenters or tokenized files merged into word lattices) and
  :mod:`.preprocess_lattices` (binarized for ``--task lattice_translation``);
* language models and genCNN: :mod:`.sample_lm` (sampling), :mod:`.rerank_nbest` (n-best
  re-ranking), :mod:`.gencnn_word2vec` (word2vec initialisation), :mod:`.gencnn_dynamic_eval`
  (dynamic evaluation), :mod:`.gencnn_op_count` (kernel launches and host syncs per training step);
* :mod:`.docs_speed_table`: the speed and results tables embedded in ``docs/*.md``, from the JSON
  in ``docs/results/``.

Importing the package imports nothing; each module imports what its command needs.
"""
