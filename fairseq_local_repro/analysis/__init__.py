"""The papers' analyses, one module per figure or table (each runs as
``python scripts/analysis/<module>.py``, ``--help`` describes it):

* MC-RNN: :mod:`.mc_rnn_channel_attention` (Figure 3), :mod:`.mc_rnn_bleu_by_length` (Figure 4),
  :mod:`.mc_rnn_param_counts`, :mod:`.mc_rnn_learning_probe` and :mod:`.mc_rnn_learning_report`;
* parallel cells: :mod:`.parallel_cells_masking` (Section 4.1), :mod:`.parallel_cells_ensemble` (Section 4.2);
* lattices: :mod:`.lattice_coverage` (Table 3), :mod:`.lattice_gates` (the Eq. 21 gate weights);
* DPN-S2S: :mod:`.dpn_alignment_entropy` (Table 5, Figure 2), :mod:`.dpn_param_counts` (Table 1).

Figures are written atomically by :mod:`.figures`.
"""
