"""Contract specs of the MC-RNN family: ``rnnsearch`` (Baseline-RNN rows), ``mc_rnn`` (seq2seq,
Tables 2, 3, 5) and ``mc_rnn_lm`` (Table 4).  tiny_args shrink every arch (the arch functions still
pick layers, channels and cell)."""
from contract_lib import ContractSpec

_S2S_TINY = ["--encoder-embed-dim", "8", "--encoder-hidden-size", "8", "--decoder-embed-dim", "8",
             "--decoder-hidden-size", "8", "--attention-dim", "8"]
_S2S_HYDRA = ["model.encoder_embed_dim=8", "model.encoder_hidden_size=8", "model.decoder_embed_dim=8",
              "model.decoder_hidden_size=8", "model.attention_dim=8"]

SPECS = {
    "rnnsearch": ContractSpec(task="translation", tiny_args=_S2S_TINY,
                              hydra_config="mc_rnn/table2_baseline_rnn", hydra_overrides=_S2S_HYDRA),
    "mc_rnn": ContractSpec(task="translation", tiny_args=_S2S_TINY,
                           hydra_config="mc_rnn/table2_mc_rnn_3", hydra_overrides=_S2S_HYDRA),
    "mc_rnn_lm": ContractSpec(task="language_modeling",
                              tiny_args=["--decoder-embed-dim", "8", "--decoder-hidden-size", "8"],
                              hydra_config="mc_rnn/table4_mc_rnn_ptb",
                              hydra_overrides=["model.decoder_embed_dim=8", "model.decoder_hidden_size=8",
                                               "task.tokens_per_sample=16", "dataset.batch_size=4"]),
}
