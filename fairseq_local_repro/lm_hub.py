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
    dict_dir = data or os.path.dirname(os.path.abspath(path))
    if not os.path.isfile(os.path.join(dict_dir, "dict.txt")):
        raise FileNotFoundError(f"{dict_dir}: no dict.txt (give --data, the LM's binarized data folder)")
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


def _start_token(hub) -> int:
    """The token an LM reads before the first word (as ``LanguageModelingTask.inference_step``)."""
    d = hub.task.source_dictionary
    return d.bos() if getattr(getattr(hub.task, "args", None), "add_bos_token", False) else d.eos()


def token_log_probs(hub, rows, batch_size: int = 64):
    """The model's own (untempered) log-probability of every token of each 1-D tensor of ``rows``
    (words and the end of sentence), teacher-forced: the LM reads ``</s> w1 .. wn`` and predicts
    ``w1 .. wn </s>``, as in fairseq LM training. Returns one float tensor per row."""
    import torch

    model = hub.models[0]
    pad, start = hub.task.source_dictionary.pad(), _start_token(hub)
    out = [None] * len(rows)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    with torch.no_grad():
        for first in range(0, len(order), batch_size):
            idx = order[first:first + batch_size]
            T = max(len(rows[i]) for i in idx)
            prev = torch.full((len(idx), T), pad, dtype=torch.long)
            tgt = torch.full((len(idx), T), pad, dtype=torch.long)
            for r, i in enumerate(idx):
                toks = rows[i].cpu()
                prev[r, 0] = start
                prev[r, 1:len(toks)] = toks[:-1]
                tgt[r, :len(toks)] = toks
            prev, tgt = prev.to(hub.device), tgt.to(hub.device)
            net_output = model(prev, src_lengths=tgt.ne(pad).sum(1))
            lprobs = model.get_normalized_probs(net_output, log_probs=True, sample={"target": tgt})
            tok = lprobs.gather(-1, tgt.unsqueeze(-1)).squeeze(-1).float().cpu()
            for r, i in enumerate(idx):
                out[i] = tok[r, :len(rows[i])]
    return out


def tempered_sampling(tgt_dict, temperature: float, topk: int = -1, topp: float = -1.0):
    """fairseq's sampling search with the temperature applied to the step's log-probabilities after
    the generator has masked the tokens it forbids (padding, an end of sentence before --min-len) and
    renormalised over the rest. fairseq divides the logits first and exponentiates without
    renormalising, so at a small temperature the whole mass sits on a masked token and
    ``torch.multinomial`` gets all zeros; here the most likely allowed token always keeps
    probability 1 before normalisation, so any temperature > 0 works (a tiny one is greedy)."""
    from fairseq import search

    class TemperedSampling(search.Sampling):
        def step(self, step, lprobs, scores, prev_output_tokens=None, original_batch_idxs=None):
            import torch

            shifted = lprobs - lprobs.max(dim=-1, keepdim=True)[0]  # 0 for the best allowed token
            # a temperature below the dtype's range divides by 0: the best tokens keep 0, the rest -inf
            tempered = torch.where(shifted == 0, shifted, shifted / temperature)
            return super().step(step, torch.log_softmax(tempered, dim=-1), scores, prev_output_tokens,
                                original_batch_idxs)

    return TemperedSampling(tgt_dict, topk, topp)


def sample(hub, prompt_tokens, n: int, *, temperature: float = 1.0, topk: int = -1, topp: float = -1.0,
           max_len: int = 60, min_len: int = 1):
    """``n`` samples continuing ``prompt_tokens`` (a 1-D tensor ending in ``</s>``; ``[</s>]``: from
    scratch), each ``(tokens, log_probs)``: the tokens after the prompt (the end of sentence
    included) and the model's own log-probability of each (untempered, before --topk / --topp).
    ``max_len`` and ``min_len`` count the generated words, whatever the prompt's length."""
    import copy

    from fairseq import utils
    from omegaconf import open_dict

    n_prompt = len(prompt_tokens) - 1  # the prompt's words, without its end of sentence
    gen_args = copy.deepcopy(hub.cfg.generation)
    with open_dict(gen_args):  # fairseq's lengths count the prompt (the prefix): max_len and min_len do not
        for key, value in dict(beam=n, nbest=n, sampling=True, sampling_topk=topk, sampling_topp=topp,
                               temperature=1.0, max_len_a=0, max_len_b=n_prompt + max_len,
                               min_len=n_prompt + min_len).items():
            setattr(gen_args, key, value)
    generator = hub.task.build_generator(hub.models, gen_args)
    generator.search = tempered_sampling(hub.task.target_dictionary, temperature, topk, topp)
    hyps = []
    for batch in hub._build_batches([prompt_tokens], False):
        batch = utils.apply_to_sample(lambda t: t.to(hub.device), batch)
        hyps += hub.task.inference_step(generator, hub.models, batch)[0][:n]
    tokens = [h["tokens"] for h in hyps]
    return [(t[n_prompt:].cpu(), lp[n_prompt:]) for t, lp in zip(tokens, token_log_probs(hub, tokens))]
