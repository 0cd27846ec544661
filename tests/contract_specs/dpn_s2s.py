"""Contract specs of the DPN-S2S family: the ``dpn_s2s`` model (M1-M9, IWSLT14, NIST, Gigaword
archs) and the Tables 1-2 baselines, which are archs of fairseq's ``fconv`` and ``transformer``
registered in ``fairseq_local/models/dpn_s2s.py`` (so the suite treats them as ours)."""
from contract_lib import ContractSpec

SPECS = {
    # the ablation switches (--encoder-paths / --decoder-paths) are left to each arch
    "dpn_s2s": ContractSpec(
        task="translation",
        tiny_args=["--encoder-embed-dim", "8", "--decoder-embed-dim", "8", "--encoder-conv-dim", "8",
                   "--decoder-conv-dim", "8", "--encoder-conv-layers", "2", "--decoder-conv-layers", "2",
                   "--encoder-san-layers", "1", "--decoder-san-layers", "1", "--encoder-ffn-embed-dim", "16",
                   "--decoder-ffn-embed-dim", "16", "--encoder-attention-heads", "2",
                   "--decoder-attention-heads", "2"],
        hydra_config="dpn_s2s/table1_dpn_s2s",
        hydra_overrides=["model.encoder_embed_dim=8", "model.decoder_embed_dim=8", "model.encoder_conv_dim=8",
                         "model.decoder_conv_dim=8", "model.encoder_conv_layers=1", "model.decoder_conv_layers=1",
                         "model.encoder_san_layers=1", "model.decoder_san_layers=1",
                         "model.encoder_ffn_embed_dim=16", "model.decoder_ffn_embed_dim=16",
                         "model.encoder_attention_heads=2", "model.decoder_attention_heads=2"],
    ),
    "fconv": ContractSpec(
        task="translation",
        tiny_args=["--encoder-embed-dim", "8", "--decoder-embed-dim", "8", "--decoder-out-embed-dim", "8",
                   "--encoder-layers", "[(8, 3)] * 2", "--decoder-layers", "[(8, 3)] * 2"],
        hydra_config="dpn_s2s/table1_deeper_cnn",
        hydra_overrides=["model.encoder_embed_dim=8", "model.decoder_embed_dim=8", "model.decoder_out_embed_dim=8",
                         "model.encoder_layers='[(8, 3)] * 2'", "model.decoder_layers='[(8, 3)] * 2'"],
    ),
    "transformer": ContractSpec(
        task="translation",
        tiny_args=["--encoder-embed-dim", "8", "--encoder-ffn-embed-dim", "16", "--encoder-layers", "1",
                   "--encoder-attention-heads", "2", "--decoder-embed-dim", "8", "--decoder-ffn-embed-dim", "16",
                   "--decoder-layers", "1", "--decoder-attention-heads", "2"],
        hydra_config="dpn_s2s/table1_deeper_san",
        hydra_overrides=["model.encoder_embed_dim=8", "model.encoder_ffn_embed_dim=16", "model.encoder_layers=1",
                         "model.encoder_attention_heads=2", "model.decoder_embed_dim=8",
                         "model.decoder_ffn_embed_dim=16", "model.decoder_layers=1",
                         "model.decoder_attention_heads=2"],
    ),
}
