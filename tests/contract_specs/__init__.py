"""One file per model family: ``SPECS = {"<fairseq model name>": ContractSpec(...)}``."""
