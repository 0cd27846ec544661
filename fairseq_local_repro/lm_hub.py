"""A language model checkpoint as fairseq's hub interface, for scripts/sample_lm.py (sampling) and
scripts/rerank_nbest.py (n-best reranking)."""
import os


def load_hub(path, data=None, bpe=None, bpe_codes=None, tokenizer=None, cpu=False, **overrides):
    """Any fairseq LM checkpoint as a ``GeneratorHubInterface``."""
    import torch
    from fairseq import hub_utils

    import fairseq_local
    from fairseq_local.safe_loading import is_language_model, require_model

    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such checkpoint")
    # a damaged checkpoint or one of a translation model: one line naming its arch
    require_model(path, is_language_model, "a language model (e.g. gencnn_paper, lstm_lm, transformer_lm)")
    # the package already imported (fairseq refuses a second copy of the same name as --user-dir)
    kwargs = dict(overrides, user_dir=os.path.dirname(os.path.abspath(fairseq_local.__file__)))
    if bpe:
        kwargs["bpe"] = bpe
        if bpe_codes:
            kwargs["bpe_codes"] = bpe_codes
            kwargs["sentencepiece_model"] = bpe_codes
    if tokenizer:
        kwargs["tokenizer"] = tokenizer
    loaded = hub_utils.from_pretrained(os.path.dirname(os.path.abspath(path)), os.path.basename(path),
                                       data or os.path.dirname(os.path.abspath(path)), **kwargs)
    hub = hub_utils.GeneratorHubInterface(loaded["args"], loaded["task"], loaded["models"]).eval()
    if torch.cuda.is_available() and not cpu:
        hub.cuda()
    return hub
