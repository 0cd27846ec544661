"""Specs for fairseq built-ins, used only with FAIRSEQ_LOCAL_CONTRACT_EXTRA (harness self-check)."""
from contract_lib import ContractSpec

SPECS = {
    "lstm": ContractSpec(
        task="translation",
        tiny_args=["--encoder-embed-dim", "8", "--encoder-hidden-size", "8", "--decoder-embed-dim", "8",
                   "--decoder-hidden-size", "8", "--decoder-out-embed-dim", "8"],
    ),
}
SPECS["transformer"] = ContractSpec(
    task="translation",
    tiny_args=["--encoder-embed-dim", "8", "--encoder-ffn-embed-dim", "16", "--encoder-layers", "1",
               "--encoder-attention-heads", "2", "--decoder-embed-dim", "8", "--decoder-ffn-embed-dim", "16",
               "--decoder-layers", "1", "--decoder-attention-heads", "2"],
    hydra_config="_selftest/transformer_tiny",
)
