"""Contract spec of the genCNN language model (fairseq_local/models/gencnn.py).

tiny_args shrink L_α / L_β with the layer sizes, so the synthetic sentences (--tokens-per-sample 16)
are longer than L_α + L_β and the βCNN recursion runs (two βCNN levels at the last positions):
every parameter then gets a gradient.  The arch variants (TIME-FLOW only, TIME-ARROW only, αCNN only)
are switches, not sizes, so they survive the shrinking.
"""
from contract_lib import ContractSpec

_TINY = {
    "decoder_embed_dim": "6",
    "alpha_length": "6",  # αCNN window 7 -> conv 6 -> gate 3 -> conv 2 -> gate 1
    "beta_length": "4",  # βCNN window 5 -> conv 4 -> gate 2 -> conv 2 (k=1) -> gate 1
    "alpha_layers": "(2,3,3),(2,2,2)",
    "beta_layers": "(2,3,0),(1,3,0)",
    "fc_dim": "8",
}

SPECS = {
    "gencnn": ContractSpec(
        task="language_modeling",
        tiny_args=[arg for key, value in _TINY.items() for arg in ("--" + key.replace("_", "-"), value)],
        # the tiny valid split has 4 blocks: fairseq's batch_by_size drops a batch smaller than
        # --required-batch-size-multiple (8 by default), which leaves validation empty
        train_args=["--required-batch-size-multiple", "1"],
        hydra_config="gencnn/table2_ptb_gencnn",
        hydra_overrides=[f"model.{key}={value}" if "(" not in value else f"model.{key}='{value}'"
                         for key, value in _TINY.items()] + ["dataset.required_batch_size_multiple=1"],
    ),
}
