"""Contract specs of the parallel-cell family: ``parallel_lstm_lm`` (Tables 1-2 and the Section 4.1
masking model, on the stateful truncated-BPTT task) and ``parallel_lstm`` (Table 3 translation).
tiny_args keep every arch's wide / layer structure: 60 hidden units divide by every paper wide
(1, 2, 3, 4, 5, 10, 15), and 30-d embeddings give each of up to 15 cells an input slice (the LM
archs read the input in slices, --cell-input slice); 12 translation units split into two
directions of 3 cells."""
from contract_lib import ContractSpec, make_lm_data


def _stateful_lm_data(tmp):
    data_dir, _ = make_lm_data(tmp)
    return data_dir, ["--tokens-per-sample", "8"]


SPECS = {
    "parallel_lstm_lm": ContractSpec(
        task="stateful_language_modeling",
        make_data=_stateful_lm_data,
        tiny_args=["--decoder-embed-dim", "30", "--decoder-hidden-size", "60", "--decoder-layers", "1"],
        hydra_config="parallel_cells/table2_ptb_wide3",
        hydra_overrides=["model.decoder_embed_dim=8", "model.decoder_hidden_size=60", "model.decoder_layers=1",
                         "dataset.batch_size=4", "dataset.batch_size_valid=4"],
    ),
    "parallel_lstm": ContractSpec(
        task="translation",
        tiny_args=["--encoder-embed-dim", "8", "--encoder-hidden-size", "12", "--decoder-embed-dim", "8",
                   "--decoder-hidden-size", "12", "--attention-dim", "8"],
        hydra_config="parallel_cells/table3_zh_en_wide3",
        hydra_overrides=["model.encoder_embed_dim=8", "model.encoder_hidden_size=12", "model.decoder_embed_dim=8",
                         "model.decoder_hidden_size=12", "model.attention_dim=8", "model.encoder_layers=2",
                         "model.decoder_layers=1", "task.source_lang=src", "task.target_lang=tgt",
                         "task.max_source_positions=1024", "task.max_target_positions=1024"],
    ),
}
