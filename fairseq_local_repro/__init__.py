"""The reproduction harness: each paper's central comparison trained, evaluated and tested on real
data (``python scripts/reproduce.py FAMILY``, or ``python -m fairseq_local_repro FAMILY``).

One module per job, in the order a run goes through them:

* :mod:`~fairseq_local_repro.families`: the registry, each paper's systems, data, schedule and claim;
* :mod:`~fairseq_local_repro.cli`: the command line (options, the run's overrides, the dry run);
* :mod:`~fairseq_local_repro.context`: the typed run context (the prepared data, the plan, the run's settings);
* :mod:`~fairseq_local_repro.processes`: child processes, their logs and one-line errors;
* :mod:`~fairseq_local_repro.prepare`: data preparation and the train / dev / test splits;
* :mod:`~fairseq_local_repro.plan`: widths and parameter counts (size matching);
* :mod:`~fairseq_local_repro.train`: fairseq-train on the paper's schedule, resumable;
* :mod:`~fairseq_local_repro.evaluate`: test BLEU or perplexity, the papers' analyses;
* :mod:`~fairseq_local_repro.run`: every (system, seed), ``results.json`` and ``comparison.json``;
* :mod:`~fairseq_local_repro.extra`: test sets of the user's;
* :mod:`~fairseq_local_repro.compare`: the statistics (significance tests that hold their level) and
  the command that recomputes every p-value and interval of ``docs/results.md`` from committed files
  (``python -m fairseq_local_repro.compare --recompute docs/results/reproduce``);
* :mod:`~fairseq_local_repro.page` and :mod:`~fairseq_local_repro.tables`: ``docs/results.md`` and
  its appendices, written from the published JSON.

The other tools of the project, also importable; each command's file in ``scripts/`` is a front door
that imports its ``main`` from here and calls it, and each runs as ``python -m MODULE`` too:

* :mod:`~fairseq_local_repro.tools`: one module per command of ``scripts/`` (``score``,
  ``build_lattices``, ``preprocess_lattices``, ``average_checkpoints``, ``make_synthetic_corpus``,
  ``sample_lm``, ``rerank_nbest``, ``gencnn_word2vec``, ``gencnn_dynamic_eval``, ``gencnn_op_count``,
  ``docs_speed_table``);
* :mod:`~fairseq_local_repro.bench` (``scripts/bench.py``) and :mod:`~fairseq_local_repro.bench_entries`
  (each family's speed comparison, read by the GPU kit and
  :mod:`~fairseq_local_repro.tools.docs_speed_table`);
* :mod:`~fairseq_local_repro.startup` (``scripts/startup_cost.py``): the start-up cost of ``--rnn-impl``;
* :mod:`~fairseq_local_repro.gpu`: the GPU kit's runner and install check (``scripts/gpu/``);
* :mod:`~fairseq_local_repro.analysis`: the papers' analyses (``scripts/analysis/``);
* :mod:`~fairseq_local_repro.text`: text and lattice preparation helpers of the shell scripts;
* :mod:`~fairseq_local_repro.lm_hub`: loading a trained language model for sampling and reranking.

Importing the package imports nothing beyond the standard library: a bad family name is reported
before fairseq is loaded.
"""
