"""The GPU kit's Python (``scripts/gpu/``, docs/gpu.md): :mod:`.check_install` checks an offline
install of fairseq + the plugin on a GPU box, :mod:`.run_all` runs the speed comparisons of
:mod:`fairseq_local_repro.bench_entries` and drives the parts of its own modules (:mod:`.train_runs`:
a time-boxed training run and the precision check; :mod:`.startup_runs`: the start-up cost of
``--rnn-impl``; :mod:`.runner`: the run, its log and child processes they share)."""
