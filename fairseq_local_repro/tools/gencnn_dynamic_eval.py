"""Dynamic evaluation of a language model (genCNN paper, Section 6.1.1 and Table 2's "Dynamic"
column, after Mikolov et al., 2010): the test text is read in order, each segment is scored with
the current parameters and only then is one SGD step taken on it, so every word is predicted by
a model that has seen the text before it, never the word itself.

    python scripts/gencnn_dynamic_eval.py data-bin/ptb --user-dir fairseq_local \
        --path checkpoints/checkpoint_best.pt --gen-subset test --batch-size 1 --dynamic-lr 0.05

Every ``fairseq-eval-lm`` option applies (same parser, same data path: ``task.load_dataset``,
``--context-window``, ``--max-tokens`` / ``--batch-size``, ``--cpu``).  Differences, all forced by
the method: the split is read in corpus order (``fairseq-eval-lm`` sorts sentences by length), a
segment is one batch (``--batch-size 1``: one sentence, Mikolov's setting), and one model is
evaluated (no ensembles).  The update is plain SGD, ``p <- p - lr * grad``, of the segment's mean
token negative log-likelihood (fairseq's training loss), with dropout off.  The paper gives no
learning rate for it; the default is the learning rate of our Table 2 training config (0.05,
``configs/gencnn/table2_ptb_gencnn.yaml``).  ``--dynamic-lr 0`` reproduces ``fairseq-eval-lm``.
The last line is ``Loss (base 2): X, Perplexity: Y`` as ``fairseq-eval-lm`` prints it.
"""
import json
import logging
import math
import os
import sys
from typing import Dict, Iterable, List

import numpy as np
import torch
from fairseq import checkpoint_utils, options, tasks, utils
from fairseq.data import BaseWrapperDataset, LMContextWindowDataset
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.sequence_scorer import SequenceScorer

logger = logging.getLogger("gencnn_dynamic_eval")
PROG = "gencnn_dynamic_eval.py"


class CorpusOrder(BaseWrapperDataset):
    """The wrapped dataset with its items in corpus order (no sorting by length)."""

    def ordered_indices(self):
        return np.arange(len(self))


def segments(task, cfg, max_positions) -> Iterable[dict]:
    """Batches of ``cfg.dataset.gen_subset`` in corpus order, as ``fairseq-eval-lm`` builds them."""
    task.load_dataset(cfg.dataset.gen_subset)
    dataset = task.dataset(cfg.dataset.gen_subset)
    if cfg.eval_lm.context_window > 0:
        dataset = LMContextWindowDataset(dataset=dataset, tokens_per_sample=cfg.task.tokens_per_sample,
                                         context_window=cfg.eval_lm.context_window,
                                         pad_idx=task.source_dictionary.pad())
    else:
        dataset = CorpusOrder(dataset)
    return task.get_batch_iterator(
        dataset=dataset, max_tokens=cfg.dataset.max_tokens or 36000, max_sentences=cfg.dataset.batch_size,
        max_positions=max_positions, ignore_invalid_inputs=True,
    ).next_epoch_itr(shuffle=False)


def segment_nll(model, sample) -> torch.Tensor:
    """Mean negative log-likelihood of the segment's target tokens (padding left out)."""
    net_output = model(**sample["net_input"])
    lprobs = model.get_normalized_probs(net_output, log_probs=True)
    target = model.get_targets(sample, net_output)
    pad = model.decoder.dictionary.pad()
    return torch.nn.functional.nll_loss(lprobs.reshape(-1, lprobs.shape[-1]).float(), target.reshape(-1),
                                        ignore_index=pad, reduction="mean")


def dynamic_eval(model, batches: Iterable[dict], lr: float, scorer: SequenceScorer,
                 device=None, remove_bos_token: bool = False) -> Dict[str, object]:
    """Score each segment of ``batches`` with the current parameters (``SequenceScorer``, as
    ``fairseq-eval-lm``), then take one SGD step of learning rate ``lr`` on it.  Returns the
    summed log-probability (natural log) and token count of every segment and in total."""
    if lr < 0:
        raise ValueError(f"--dynamic-lr {lr}: must be >= 0")
    model.eval()
    device = device or next(model.parameters()).device
    params = [p for p in model.parameters() if p.requires_grad]
    per_segment: List[tuple] = []
    for sample in batches:
        if "net_input" not in sample:
            continue
        sample = utils.move_to_cuda(sample, device=device) if device.type == "cuda" else sample
        hypos = scorer.generate([model], sample)
        seg_sum, seg_count = 0.0, 0
        for hypos_i in hypos:
            scores = hypos_i[0]["positional_scores"].float()
            if remove_bos_token:
                scores = scores[1:]
            finite = torch.isfinite(scores)  # eval-lm skips tokens with infinite scores
            seg_sum += float(scores[finite].sum())
            seg_count += int(finite.sum())
        per_segment.append((seg_sum, seg_count))
        if lr > 0:  # only now, after the segment was scored: one SGD step on it
            model.zero_grad(set_to_none=True)
            segment_nll(model, sample).backward()
            with torch.no_grad():
                for p in params:
                    if p.grad is not None:
                        p.add_(p.grad, alpha=-lr)
            model.zero_grad(set_to_none=True)
    total = sum(s for s, _ in per_segment)
    count = sum(c for _, c in per_segment)
    loss2 = -total / count / math.log(2) if count else 0.0
    return {"segments": per_segment, "logprob_sum": total, "tokens": count, "loss_base2": loss2,
            "perplexity": 2 ** loss2}


def get_parser():
    parser = options.get_eval_lm_parser()
    parser.prog = PROG
    group = parser.add_argument_group("dynamic evaluation")
    group.add_argument("--dynamic-lr", type=float, default=0.05,
                       help="SGD learning rate of the step taken after scoring each segment (0: static)")
    group.add_argument("--dynamic-json", help="also write the per-segment scores and totals to this JSON file")
    return parser


def main(argv=None):
    parser = get_parser()
    args = options.parse_args_and_arch(parser, argv)
    if args.dynamic_lr < 0:
        parser.error(f"--dynamic-lr {args.dynamic_lr}: must be >= 0")
    if args.post_process:
        parser.error("--post-process: not supported by dynamic evaluation (score whole tokens)")
    if not args.path or os.pathsep in args.path:
        parser.error(f"--path {args.path!r}: dynamic evaluation updates one model (give one checkpoint)")
    if not os.path.isfile(args.path):
        parser.error(f"--path {args.path}: no such checkpoint file")
    cfg = convert_namespace_to_omegaconf(args)
    utils.import_user_module(cfg.common)
    if cfg.eval_lm.context_window > 0:
        cfg.task.tokens_per_sample -= cfg.eval_lm.context_window
    task = tasks.setup_task(cfg.task)
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [cfg.common_eval.path], arg_overrides=eval(cfg.common_eval.model_overrides), task=task)
    model = models[0]
    use_cuda = torch.cuda.is_available() and not cfg.common.cpu
    if use_cuda:
        model.cuda()
    batches = segments(task, cfg, model.max_positions())
    res = dynamic_eval(model, batches, args.dynamic_lr, SequenceScorer(task.target_dictionary,
                                                                        cfg.eval_lm.softmax_batch),
                       remove_bos_token=getattr(cfg.task, "add_bos_token", False))
    if args.dynamic_json:
        with open(args.dynamic_json, "w") as f:
            json.dump({"dynamic_lr": args.dynamic_lr, **res}, f)
    print(f"dynamic evaluation of {cfg.dataset.gen_subset}: {len(res['segments'])} segments, "
          f"{res['tokens']} tokens, lr {args.dynamic_lr}")
    print("Loss (base 2): {:.4f}, Perplexity: {:.2f}".format(res["loss_base2"], res["perplexity"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
