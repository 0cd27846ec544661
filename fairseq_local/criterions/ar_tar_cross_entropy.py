"""``--criterion ar_tar_cross_entropy``: cross entropy plus activation regularisation (AR) and
temporal activation regularisation (TAR) (Merity, Keskar and Socher, "Regularizing and Optimizing
LSTM Language Models", ICLR 2018, Section 4.6; AWD-LSTM, used by the MC-RNN paper's Table 4):

    AR  = alpha * mean(m_t^2)                       m_t: the last layer's output after its dropout
    TAR = beta  * mean((h_t - h_{t-1})^2)           h_t: the last layer's output before the dropout

The means run over every element (time steps, batch rows and units) of the BPTT window, as in
AWD-LSTM's ``dropped_rnn_hs[-1].pow(2).mean()`` and ``(rnn_hs[-1][1:] - rnn_hs[-1][:-1]).pow(2).mean()``;
padding targets (the evaluation layout's row ends) and the pairs touching them are left out.  TAR
compares steps inside one window (the first step of a window has no predecessor here).  Defaults
alpha = 2, beta = 1 (AWD-LSTM's PTB settings).  Both terms are added in training only; validation
and ``fairseq-eval-lm`` report the plain cross entropy, as AWD-LSTM's evaluation does.

Scale: AWD-LSTM adds AR + TAR to the per-token mean cross entropy.  fairseq's criteria return sums
that the trainer divides by ``sample_size``, so the terms enter as ``ntokens * (AR + TAR)``: with
``optimization.sentence_avg`` false (``sample_size`` = ntokens) this is AWD-LSTM's objective
exactly; with it true the whole objective is scaled alike, so the weights relative to the cross
entropy stay AWD-LSTM's.  The logged ``loss`` / ``ppl`` are the cross entropy's; ``ar`` and ``tar``
are logged per token of the batch.

The model exposes the two tensors in the second element of its output:
``extra["raw_output"]`` and ``extra["dropped_output"]``, ``B x T x C`` (the MC-RNN LM does, see
:mod:`fairseq_local.models.mc_rnn_lm`).
"""
from dataclasses import dataclass, field

import torch
from fairseq.criterions import register_criterion
from fairseq.criterions.cross_entropy import CrossEntropyCriterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics
from omegaconf import II

from fairseq_local_core.errors import ConfigError


@dataclass
class ARTARCrossEntropyConfig(FairseqDataclass):
    ar_alpha: float = field(default=2.0, metadata={"help": "AR weight alpha on the dropped last-layer output"})
    tar_beta: float = field(default=1.0, metadata={"help": "TAR weight beta on h_t - h_{t-1} of the last layer"})
    sentence_avg: bool = II("optimization.sentence_avg")


def activation_regularisation(dropped: torch.Tensor, raw: torch.Tensor, mask: torch.Tensor):
    """(mean of m^2, mean of (h_t - h_{t-1})^2) over the unmasked elements; ``dropped`` and ``raw``
    are ``B x T x C``, ``mask`` ``B x T`` (True = a real target)."""
    units = dropped.size(-1)
    keep = mask.to(dropped.dtype).unsqueeze(-1)
    ar = (dropped.pow(2) * keep).sum() / (keep.sum() * units).clamp(min=1)
    pairs = (mask[:, 1:] & mask[:, :-1]).to(raw.dtype).unsqueeze(-1)
    tar = ((raw[:, 1:] - raw[:, :-1]).pow(2) * pairs).sum() / (pairs.sum() * units).clamp(min=1)
    return ar, tar


@register_criterion("ar_tar_cross_entropy", dataclass=ARTARCrossEntropyConfig)
class ARTARCrossEntropyCriterion(CrossEntropyCriterion):
    def __init__(self, task, ar_alpha, tar_beta, sentence_avg):
        super().__init__(task, sentence_avg)
        if ar_alpha < 0 or tar_beta < 0:
            raise ConfigError(f"--ar-alpha and --tar-beta must be >= 0 (got {ar_alpha}, {tar_beta})")
        self.ar_alpha, self.tar_beta = ar_alpha, tar_beta

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        loss, _ = self.compute_loss(model, net_output, sample, reduce=reduce)
        ntokens = sample["ntokens"]
        sample_size = sample["target"].size(0) if self.sentence_avg else ntokens
        logging_output = {"loss": loss.data, "ntokens": ntokens, "nsentences": sample["target"].size(0),
                          "sample_size": sample_size}
        if model.training and (self.ar_alpha or self.tar_beta):
            extra = net_output[1] if isinstance(net_output[1], dict) else {}
            if extra.get("raw_output") is None or extra.get("dropped_output") is None:
                raise ConfigError(f"--criterion ar_tar_cross_entropy: model {type(model).__name__} does not expose "
                                  "its last layer's output (raw_output / dropped_output); use an MC-RNN LM (mc_rnn_lm)")
            mask = sample["target"].ne(self.padding_idx)
            ar, tar = activation_regularisation(extra["dropped_output"], extra["raw_output"], mask)
            ar, tar = self.ar_alpha * ar, self.tar_beta * tar
            if reduce:
                loss = loss + (ar + tar) * ntokens
            logging_output["ar"] = ar.data * ntokens
            logging_output["tar"] = tar.data * ntokens
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        CrossEntropyCriterion.reduce_metrics(logging_outputs)
        ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        for key in ("ar", "tar"):
            if any(key in log for log in logging_outputs):
                total = sum(log.get(key, 0) for log in logging_outputs)
                metrics.log_scalar(key, float(total) / max(ntokens, 1), ntokens, round=4)

