"""The speed comparisons of the family pages: each one's ``scripts/bench.py`` arguments, the
issue's goal and the CPU multiply-add ceilings.  Read by the GPU kit's runner
(:mod:`fairseq_local_repro.gpu.run_all`, which runs them) and by ``scripts/docs_speed_table.py``
(which renders their results).  Standard library only.
"""

# the model arguments of docs/<family>.md "Speed"; the batch sizes are the runner's PROFILES
_IWSLT_LSTM = ("--encoder-layers 2 --decoder-layers 2 --encoder-embed-dim 256 --encoder-hidden-size 256 "
               "--decoder-embed-dim 256 --decoder-hidden-size 256 --decoder-out-embed-dim 256 "
               "--encoder-bidirectional --dropout 0.2")
_LM648 = "--decoder-hidden-size 648 --decoder-embed-dim 648 --decoder-layers 2"
_MT = ("--encoder-embed-dim {d} --encoder-hidden-size {d} --encoder-layers 2 --decoder-embed-dim {d} "
       "--decoder-hidden-size {d} --decoder-layers 2 --dropout 0.2")
# compiled vs eager: fewer timed steps (both sides pay the Python loop or the compilation)
_FAST = "--steps 10 --warmup 2 --rounds 2 --gen-sentences 64"
ENTRIES = [
    # name, family, issue goal (train ratio A/B), bench arguments; cpu: one of the family's main
    # comparisons, run by the CPU profile (--cpu); ceiling (gen_ceiling): the CPU multiply-add ceiling
    # of the training (beam-search) ratio A/B that the family page's "Speed" section counts: forward
    # multiply-adds per token of B over A, which a compute-bound CPU cannot beat
    dict(name="mc_rnn3_vs_lstm", family="mc_rnn", goal=0.7, cpu=True,
         ceiling=0.30,  # docs/mc_rnn.md: 19.2M + 256·V (gates space) vs 4.3M + 256·V, V = 8k
         args=f"--arch mc_rnn_iwslt_de_en_3 --baseline lstm --baseline-args '{_IWSLT_LSTM}' --lengths 10,20,40,80"),
    dict(name="parallel_lm648_wide3_vs_lstm_lm", family="parallel_cells", goal=1.0, cpu=True,
         ceiling=1.20,  # docs/parallel_cells.md: the baseline needs 1.20 x ours for the 2 x 648 LM
         args=f"--task language_modeling --arch parallel_lstm_lm --arch-args '--wide 3 {_LM648} --dropout 0.1' "
              f"--baseline lstm_lm --baseline-args '{_LM648} --decoder-out-embed-dim 648 --dropout 0.1' "
              "--vocab 10000 --tgt-len 35"),
    dict(name="parallel_mt510_wide3_vs_lstm", family="parallel_cells", goal=1.0, cpu=True,
         ceiling=1.19,  # docs/parallel_cells.md: 1.19 x for the 2 + 2 x 510 translation model
         args=f"--arch parallel_lstm --arch-args '--wide 3 --encoder-bidirectional-layers 0 {_MT.format(d=510)}' "
              f"--baseline lstm --baseline-args '{_MT.format(d=510)} --decoder-out-embed-dim 510' --lengths 10,20,40,80"),
    dict(name="lattice_dwl_gating_vs_word", family="lattice", goal=0.67, data="lattice", cpu=True,
         ceiling=0.93,  # docs/lattice.md: 65.2M vs 70.1M multiply-adds per sentence pair
         args="--arch lattice_dwl_gating --baseline rnnsearch_zh_word --task lattice_translation --subset train"),
    dict(name="gencnn_vs_fconv_lm", family="gencnn", goal=1.0, cpu=True,
         ceiling=0.86,  # docs/gencnn.md: 8.6M vs 7.4M per token at |V| = 8000
         args="--task language_modeling --arch gencnn_paper --baseline fconv_lm --baseline-args "
              "'--decoder-embed-dim 400 --decoder-layers [(400,3)]*4 --decoder-out-embed-dim 400' --tgt-len 50 "
              "--no-generate --lengths 25,50,100"),
    dict(name="dpn_vs_transformer", family="dpn_s2s", goal=0.9, cpu=True,
         ceiling=0.92, gen_ceiling=0.89,  # docs/dpn_s2s.md: 10.4M vs 9.5M per token; decoding step 6.55M vs 5.82M
         args="--arch dpn_s2s_iwslt_de_en --baseline dpn_baseline_deeper_san_iwslt --lengths 10,20,40,80"),

    # the fast path (--rnn-impl compiled, fairseq_local/modules/fast_path.py) against the eager loop on
    # the same arch and batches, every family with the option (--part fastpath, its own call):
    # training, beam-5 generation and the time to the first update (compilation and capture included)
    dict(name="mc_rnn3_compiled_vs_eager", family="mc_rnn", goal=None, fastpath=True,
         args=f"--arch mc_rnn_iwslt_de_en_3 --arch-args '--rnn-impl compiled' --baseline mc_rnn_iwslt_de_en_3 "
              f"--baseline-args '--rnn-impl eager' {_FAST}"),
    dict(name="rnnsearch_compiled_vs_eager", family="mc_rnn", goal=None, fastpath=True,
         args=f"--arch rnnsearch_iwslt_de_en --arch-args '--rnn-impl compiled' --baseline rnnsearch_iwslt_de_en "
              f"--baseline-args '--rnn-impl eager' {_FAST}"),
    dict(name="parallel_lm648_compiled_vs_eager", family="parallel_cells", goal=None, fastpath=True,
         args=f"--task language_modeling --arch parallel_lstm_lm --arch-args '--wide 3 {_LM648} --dropout 0.1 "
              f"--rnn-impl compiled' --baseline parallel_lstm_lm --baseline-args '--wide 3 {_LM648} --dropout 0.1 "
              f"--rnn-impl eager' --vocab 10000 --tgt-len 35 {_FAST}"),
    dict(name="parallel_mt510_compiled_vs_eager", family="parallel_cells", goal=None, fastpath=True,
         args=f"--arch parallel_lstm --arch-args '--wide 3 --encoder-bidirectional-layers 0 {_MT.format(d=510)} "
              f"--rnn-impl compiled' --baseline parallel_lstm --baseline-args '--wide 3 "
              f"--encoder-bidirectional-layers 0 {_MT.format(d=510)} --rnn-impl eager' {_FAST}"),
    dict(name="lattice_dwl_compiled_vs_eager", family="lattice", goal=None, fastpath=True, data="lattice",
         args="--arch lattice_dwl_gating --arch-args '--rnn-impl compiled' --baseline lattice_dwl_gating "
              f"--baseline-args '--rnn-impl eager' --task lattice_translation --subset train {_FAST}"),
    # genCNN and DPN-S2S: no time loop; on CUDA the model's forward runs as CUDA graphs
    dict(name="gencnn_compiled_vs_eager", family="gencnn", goal=None, fastpath=True,
         args="--task language_modeling --arch gencnn_paper --arch-args '--rnn-impl compiled' --baseline gencnn_paper "
              f"--baseline-args '--rnn-impl eager' --tgt-len 50 {_FAST}"),
    dict(name="dpn_compiled_vs_eager", family="dpn_s2s", goal=None, fastpath=True,
         args=f"--arch dpn_s2s_iwslt_de_en --arch-args '--rnn-impl compiled' --baseline dpn_s2s_iwslt_de_en "
              f"--baseline-args '--rnn-impl eager' {_FAST}"),

    # secondary comparisons (other sizes and baselines): run after every family's main one
    dict(name="mc_rnn3_vs_lstm_v25k", family="mc_rnn", goal=0.7,
         ceiling=0.42,  # docs/mc_rnn.md: 0.42 x at V = 25k
         args=f"--arch mc_rnn_iwslt_de_en_3 --baseline lstm --baseline-args '{_IWSLT_LSTM}' --vocab 25000"),
    dict(name="parallel_mt1026_wide3_vs_lstm", family="parallel_cells", goal=1.0,
         ceiling=1.23,  # docs/parallel_cells.md: 1.23 x for 2 + 2 x 1026
         args=f"--arch parallel_lstm --arch-args '--wide 3 --encoder-bidirectional-layers 0 {_MT.format(d=1026)}' "
              f"--baseline lstm --baseline-args '{_MT.format(d=1026)} --decoder-out-embed-dim 1026'"),
    dict(name="parallel_lm1950_wide3_vs_lstm_lm", family="parallel_cells", goal=1.0,
         ceiling=1.34,  # docs/parallel_cells.md: 1.34 x for 2 x 1950
         args="--task language_modeling --arch parallel_lstm_lm --arch-args '--wide 3 --decoder-hidden-size 1950 "
              "--decoder-embed-dim 1950 --decoder-layers 2 --dropout 0.65' --baseline lstm_lm --baseline-args "
              "'--decoder-hidden-size 1950 --decoder-embed-dim 1950 --decoder-out-embed-dim 1950 --decoder-layers 2 "
              "--dropout 0.65' --vocab 10000 --tgt-len 35 --no-generate"),
    dict(name="gencnn_vs_lstm_lm", family="gencnn", goal=None, cpu=True,
         ceiling=0.52,  # docs/gencnn.md: 8.6M vs 4.5M per token at |V| = 8000
         args="--task language_modeling --arch gencnn_paper --baseline lstm_lm --baseline-args "
              "'--decoder-embed-dim 400 --decoder-hidden-size 400 --decoder-out-embed-dim 400' --tgt-len 50 "
              "--gen-len 40"),
]
