"""genCNN language model (Wang et al., ACL 2015): αCNN + recursive βCNN, TIME-FLOW / TIME-ARROW
convolutions with gating (layers in :mod:`fairseq_local.modules.gencnn_layers`).

    fairseq-train data-bin/ptb --user-dir fairseq_local --task language_modeling \
        --arch gencnn --optimizer adagrad --lr 0.05 --batch-size 500 ...
    fairseq-eval-lm data-bin/ptb --user-dir fairseq_local --path checkpoints/checkpoint_best.pt

Archs (Section 4.1 and Table 3): ``gencnn_paper`` (= ``gencnn``, the dataclass defaults; paper:
L_α 30, L_β 20, αCNN 150/100 TIME-FLOW + as many TIME-ARROW maps, FC 400 sigmoid, ReLU
convolutions, embeddings 100, βCNN 2 × 150 TIME-FLOW), ``gencnn_time_arrow_only`` /
``gencnn_time_flow_only`` (the same number of maps, all of one kind), ``gencnn_alpha_only`` (no
βCNN: history beyond L_α is dropped).  The variants are switches (``--alpha-map-kinds``,
``--no-beta``), so any size can be combined with any variant.

Softmax: full, or fairseq's adaptive softmax (``--adaptive-softmax-cutoff``, criterion
``adaptive_loss``) in place of the paper's 200-cluster factorisation.  ``--embed-path`` initialises
embeddings from a word2vec file (text or binary format), as the paper does.

Incremental decoding keeps ``L_α + L_β`` tokens, the last ``L_β`` βCNN summaries and one flag per
sentence, so each step costs the same at any length.
"""
import logging
import struct
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.dataclass import ChoiceEnum
from fairseq.models import (
    FairseqIncrementalDecoder,
    FairseqLanguageModel,
    register_model,
    register_model_architecture,
)
from fairseq.modules import AdaptiveSoftmax, FairseqDropout
from torch import Tensor

from fairseq_local.config_checks import check_sizes, option
from fairseq_local_core.errors import ConfigError
from fairseq_local.models.arch_defaults import fill_defaults, set_defaults
from fairseq_local.modules import cuda_graphs
from fairseq_local.modules.fast_path import (
    FastPathMixin,
    RecurrentImplConfig,
    apply_impl_config,
    pad_dim,
)
from fairseq_local.modules.gencnn_layers import GenCNNBody, get_activation, parse_layers

logger = logging.getLogger(__name__)

MAP_KINDS = ChoiceEnum(["both", "time_flow", "time_arrow"])
TF_INPUT = ChoiceEnum(["tf", "all"])
GATE = ChoiceEnum(["gating", "pooling"])


@dataclass
class GenCNNConfig(RecurrentImplConfig):
    decoder_embed_dim: int = field(default=100, metadata={"help": "word embedding size"})
    alpha_length: int = field(default=30, metadata={"help": "L_α: words αCNN reads"})
    beta_length: int = field(default=20, metadata={"help": "L_β: words each βCNN summarises"})
    alpha_layers: str = field(default="(3,150,150),(3,100,100)", metadata={
        "help": "αCNN convolution(+gating) layers: (kernel, TIME-FLOW maps, TIME-ARROW maps), ..."})
    alpha_map_kinds: MAP_KINDS = field(default="both", metadata={
        "help": "Table 3 ablations: 'time_flow' / 'time_arrow' turn every αCNN map into that kind "
                "(same number of maps per layer)"})
    beta_layers: str = field(default="(3,150,0),(3,150,0)", metadata={
        "help": "βCNN layers (TIME-FLOW only): (kernel, maps, 0), ..."})
    no_beta: bool = field(default=False, metadata={"help": "'αCNN only' (Table 3): no recursive βCNN"})
    tf_input: TF_INPUT = field(default="tf", metadata={
        "help": "lower maps TIME-FLOW maps read: 'tf' (only TIME-FLOW; TIME-ARROW reads all) or 'all'"})
    gencnn_gate: GATE = field(default="gating", metadata={
        "help": "Section 3.2: how each pair of convolution locations is merged: 'gating' (Eq. 5, the "
                "paper's genCNN) or 'pooling' (max over the pair, per feature map, no gate parameters: "
                "the 'direct pooling over feature-maps' the paper compares against)"})
    fc_dim: int = field(default=400, metadata={"help": "fully connected layer before the softmax"})
    conv_activation: str = field(default="relu", metadata={"help": "σ of Eq. 3-4"})
    fc_activation: str = field(default="sigmoid", metadata={"help": "activation of the FC layers"})
    init_range: float = field(default=0.1, metadata={
        "help": "uniform init in [-r, r] (paper: 0.1); <= 0 uses 1/sqrt(fan_in)"})
    dropout: float = field(default=0.0, metadata={"help": "dropout on embeddings and the FC output"})
    embed_path: Optional[str] = field(default=None, metadata={
        "help": "word2vec file (text or binary) to initialise the embeddings"})
    adaptive_softmax_cutoff: Optional[str] = field(default=None, metadata={
        "help": "comma separated adaptive softmax cutoffs (use with --criterion adaptive_loss)"})
    adaptive_softmax_dropout: float = field(default=0.0, metadata={"help": "adaptive softmax tail dropout"})
    max_target_positions: int = field(default=100000, metadata={"help": "max sentence length"})


def alpha_layer_spec(cfg) -> List[tuple]:
    layers = parse_layers(cfg.alpha_layers)
    kinds = cfg.alpha_map_kinds
    if kinds == "time_flow":
        return [(k, tf + ta, 0) for k, tf, ta in layers]
    if kinds == "time_arrow":
        return [(k, 0, tf + ta) for k, tf, ta in layers]
    return layers


def beta_layer_spec(cfg) -> Optional[List[tuple]]:
    if cfg.no_beta or cfg.beta_length <= 0:
        return None
    layers = parse_layers(cfg.beta_layers)
    if any(ta for _, _, ta in layers):
        raise ValueError(f"--beta-layers {cfg.beta_layers!r}: βCNN has TIME-FLOW maps only (use (k, maps, 0))")
    return layers


class GenCNNDecoder(FastPathMixin, FairseqIncrementalDecoder):
    """genCNN's body over the embedded words and the output layer.  ``--rnn-impl cuda-graphs`` (fast
    path, opt-in): on CUDA the body's full pass runs as one CUDA graph per (batch, length) bucket
    (:mod:`fairseq_local.modules.cuda_graphs`; padding the length at the end is exact, since every
    output reads only its past) and the generation step as one per batch bucket; a variant that
    cannot run as a graph runs eagerly on the unpadded batch.  The body has no step of its own to
    compile, so elsewhere it runs eagerly."""

    def __init__(self, cfg: GenCNNConfig, dictionary):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        E = cfg.decoder_embed_dim
        self.embed_tokens = nn.Embedding(len(dictionary), E, padding_idx=self.padding_idx)
        if cfg.init_range > 0:
            nn.init.uniform_(self.embed_tokens.weight, -cfg.init_range, cfg.init_range)
        else:
            nn.init.normal_(self.embed_tokens.weight, 0, E ** -0.5)
        with torch.no_grad():
            self.embed_tokens.weight[self.padding_idx].zero_()
        if cfg.embed_path:
            load_word2vec(cfg.embed_path, dictionary, self.embed_tokens)
        self.body = GenCNNBody(E, cfg.alpha_length, alpha_layer_spec(cfg), cfg.fc_dim,
                               L_beta=cfg.beta_length, beta_layers=beta_layer_spec(cfg),
                               tf_input=cfg.tf_input, activation=cfg.conv_activation,
                               fc_activation=cfg.fc_activation, init_range=cfg.init_range,
                               merge=cfg.gencnn_gate)
        self.dropout_module = FairseqDropout(cfg.dropout, module_name=self.__class__.__name__)
        self.max_target_positions = cfg.max_target_positions
        self.adaptive_softmax = None
        self.output_projection = None
        if cfg.adaptive_softmax_cutoff:
            self.adaptive_softmax = AdaptiveSoftmax(
                len(dictionary), cfg.fc_dim,
                utils.eval_str_list(cfg.adaptive_softmax_cutoff, type=int),
                dropout=cfg.adaptive_softmax_dropout)
        else:
            self.output_projection = nn.Linear(cfg.fc_dim, len(dictionary))  # Eq. 2: μ, b

    # ---------------------------------------------------------------------------------------
    def _embed(self, tokens: Tensor):
        nonpad = tokens.ne(self.padding_idx)
        x = self.embed_tokens(tokens) * nonpad.unsqueeze(-1).to(self.embed_tokens.weight.dtype)
        return self.dropout_module(x), nonpad

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                features_only: bool = False, src_lengths=None, **unused):
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None, **unused):
        body = self.body
        state = None if incremental_state is None else self.get_incremental_state(incremental_state, "state")
        if state is None:
            emb, nonpad = self._embed(prev_output_tokens)
            x, S = self._full(emb, nonpad)
            if incremental_state is not None:
                self.set_incremental_state(incremental_state, "state",
                                           self._state_from_full(prev_output_tokens, nonpad, S))
                x = x[:, -1:]
        else:
            tokens = torch.cat([state["tokens"][:, 1:], prev_output_tokens[:, -1:]], 1)
            emb, nonpad = self._embed(tokens)
            Lb = body.L_beta
            nonpad_e = nonpad[:, Lb - 1] if Lb > 0 else nonpad[:, 0]
            feat, s_buf, hist = self._step(emb, state["s_buf"], state["hist"], nonpad_e)
            self.set_incremental_state(incremental_state, "state",
                                       {"tokens": tokens, "s_buf": s_buf, "hist": hist})
            x = feat[:, None]
        return self.dropout_module(x), {"attn": [None], "inner_states": [x]}

    def _full(self, emb: Tensor, nonpad: Tensor):
        """The body over whole sequences: eager, or captured with batch and length padded."""
        if not self.execution(emb).graphs:
            return self.body(emb, nonpad)
        B, T, _ = emb.shape
        Tp, Bp = cuda_graphs.padded_shape(T, B)
        emb = pad_dim(pad_dim(emb, 1, Tp), 0, Bp)
        nonpad = pad_dim(pad_dim(nonpad, 1, Tp, False), 0, Bp, False)
        got = cuda_graphs.call(self.body, self.body, (emb, nonpad), "GenCNNBody.forward", strict=self.strict_graphs)
        if got is None:  # this variant runs eagerly, on the unpadded inputs
            return self.body(emb[:B, :T], nonpad[:B, :T])
        x, S = got
        return x[:B, :T], S[:B, :max(T - self.body.L_alpha, 0)]

    def _step(self, emb: Tensor, s_buf: Tensor, hist: Tensor, nonpad_e: Tensor):
        """One generation step of the body: eager, or captured with the batch padded."""
        if not self.execution(emb).graphs:
            return self.body.step(emb, s_buf, hist, nonpad_e)
        B = emb.size(0)
        Bp = cuda_graphs.padded_shape(1, B)[1]
        args = (pad_dim(emb, 0, Bp), pad_dim(s_buf, 0, Bp), pad_dim(hist, 0, Bp, False),
                pad_dim(nonpad_e, 0, Bp, False))
        got = cuda_graphs.call(self.body, self.body.step, args, "GenCNNBody.step", strict=self.strict_graphs)
        if got is None:
            return self.body.step(emb, s_buf, hist, nonpad_e)
        return tuple(t[:B] for t in got)

    def _state_from_full(self, tokens: Tensor, nonpad: Tensor, S: Tensor) -> Dict[str, Optional[Tensor]]:
        """Incremental state after reading ``tokens`` (B, T) in one full pass (S from it)."""
        body = self.body
        B, T = tokens.shape
        H, La, Lb = body.history_size, body.L_alpha, body.L_beta
        if T < H:
            tokens = torch.cat([tokens.new_full((B, H - T), self.padding_idx), tokens], 1)
        s_buf = torch.cat([S.new_zeros(B, Lb, S.shape[-1]), S], 1)[:, S.shape[1]:]
        hist = nonpad[:, :max(T - La, 0)].any(1)
        return {"tokens": tokens[:, -H:], "s_buf": s_buf, "hist": hist}

    def output_layer(self, features, **kwargs):
        if self.adaptive_softmax is not None:
            return features
        return self.output_projection(features)

    def reorder_incremental_state(self, incremental_state, new_order):
        state = self.get_incremental_state(incremental_state, "state")
        if state is None:
            return
        state = {k: v.index_select(0, new_order) for k, v in state.items()}
        self.set_incremental_state(incremental_state, "state", state)

    def max_positions(self):
        return self.max_target_positions


@register_model("gencnn", dataclass=GenCNNConfig)
class GenCNNLanguageModel(FairseqLanguageModel):
    @classmethod
    def build_model(cls, cfg, task):
        check_sizes(cfg, GenCNNConfig, allow_zero=("beta_length",))
        check_options(cfg, len(task.target_dictionary))
        try:
            decoder = apply_impl_config(GenCNNDecoder(cfg, task.target_dictionary), cfg)
        except ValueError as err:  # a window too short for its layers (GatedConvStack)
            short = _window_error(cfg, str(err))
            if short is None:
                raise
            raise short from None
        return cls(decoder)


def check_options(cfg, vocab_size: int):
    """The layer specs (Section 3: kernel >= 1, maps >= 0, at least one map per layer), the
    activations and the adaptive softmax cutoffs, each refused in one line naming its option."""
    for name in ("alpha_layers", "beta_layers"):
        spec = getattr(cfg, name)
        try:
            parse_layers(spec)
        except ValueError:
            raise ConfigError(f"{option(name)} {spec!r}: expected '(kernel, time_flow_maps, time_arrow_maps), ...' "
                              "with integers, kernel >= 1, maps >= 0 and at least one map per layer") from None
    for name in ("conv_activation", "fc_activation"):
        try:
            get_activation(getattr(cfg, name))
        except ValueError as err:  # "genCNN: unknown activation 'gelu' (choose from [...])"
            raise ConfigError(f"{option(name)} {getattr(cfg, name)!r}: {str(err).split(': ', 1)[1]}") from None
    if cfg.adaptive_softmax_cutoff:
        try:
            cutoff = list(utils.eval_str_list(cfg.adaptive_softmax_cutoff, type=int))
        except (ValueError, TypeError, SyntaxError, NameError):
            cutoff = None
        if not cutoff or cutoff[0] < 1 or cutoff != sorted(set(cutoff)) or cutoff[-1] > vocab_size:
            raise ConfigError(f"--adaptive-softmax-cutoff {cfg.adaptive_softmax_cutoff!r} must be increasing "
                              f"integers from 1 to the vocabulary size {vocab_size}, e.g. "
                              f"'{max(1, vocab_size // 10)},{max(2, vocab_size // 2)}'")


def _window_error(cfg, message: str) -> Optional[ConfigError]:
    """GatedConvStack's "αCNN: window of ... too short" with the options that set the window
    (None for another message)."""
    for unit, length, layers in (("αCNN", "alpha_length", "alpha_layers"), ("βCNN", "beta_length", "beta_layers")):
        if message.startswith(unit + ": "):
            reason = message[len(unit) + 2:].replace("enlarge L", "enlarge the length")
            return ConfigError(f"{option(length)} {getattr(cfg, length)} with {option(layers)} "
                               f"{getattr(cfg, layers)!r}: {reason}")
    return None


# -------------------------------------------------------------------------------------------
def load_word2vec(path: str, dictionary, embedding: nn.Embedding) -> int:
    """Copy the vectors of ``path`` (word2vec text or binary format) into ``embedding`` for the
    words of ``dictionary``; returns how many were found.  Errors name the file and line."""
    dim = embedding.embedding_dim
    with open(path, "rb") as f:
        raw = f.read()
    vectors: Dict[str, List[float]] = {}
    header = raw.split(b"\n", 1)[0].split()
    binary = False
    if len(header) == 2 and all(h.isdigit() for h in header):
        n, d = int(header[0]), int(header[1])
        if d != dim:
            raise ValueError(f"{path}:1: vectors have dimension {d} but --decoder-embed-dim is {dim}")
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            binary = True
    if binary:
        pos = raw.index(b"\n") + 1
        for i in range(n):
            sp = raw.find(b" ", pos)
            if sp < 0 or sp + 1 + 4 * d > len(raw):
                raise ValueError(f"{path}: binary word2vec truncated at vector {i + 1} of {n}")
            word = raw[pos:sp].decode("utf-8", errors="replace").strip()
            vectors[word] = list(struct.unpack(f"<{d}f", raw[sp + 1:sp + 1 + 4 * d]))
            pos = sp + 1 + 4 * d
    else:
        lines = raw.decode("utf-8").split("\n")
        start = 1 if len(header) == 2 and all(h.isdigit() for h in header) else 0
        for lineno, line in enumerate(lines[start:], start + 1):
            parts = line.rstrip().split(" ")
            if not line.strip():
                continue
            if len(parts) != dim + 1:
                raise ValueError(f"{path}:{lineno}: expected a word and {dim} numbers, got {len(parts) - 1} fields")
            try:
                vectors[parts[0]] = [float(v) for v in parts[1:]]
            except ValueError:
                raise ValueError(f"{path}:{lineno}: non-numeric vector value") from None
    found = 0
    with torch.no_grad():
        for idx in range(len(dictionary)):
            vec = vectors.get(dictionary[idx])
            if vec is not None and idx != dictionary.pad():
                embedding.weight[idx] = torch.tensor(vec, dtype=embedding.weight.dtype)
                found += 1
    logger.info(f"genCNN: initialised {found}/{len(dictionary)} embeddings from {path}")
    return found


# -------------------------------------------------------------------------------------------
@register_model_architecture("gencnn", "gencnn_paper")
def gencnn_paper(args):
    """Section 4.1 (Table 2 PTB row and Table 3 'genCNN')."""
    fill_defaults(args, GenCNNConfig, decoder_embed_dim=100, alpha_length=30, beta_length=20,
                  alpha_layers="(3,150,150),(3,100,100)", alpha_map_kinds="both",
                  beta_layers="(3,150,0),(3,150,0)", no_beta=False, tf_input="tf", gencnn_gate="gating", fc_dim=400,
                  conv_activation="relu", fc_activation="sigmoid", init_range=0.1, dropout=0.0,
                  embed_path=None, adaptive_softmax_cutoff=None, adaptive_softmax_dropout=0.0,
                  max_target_positions=100000)


@register_model_architecture("gencnn", "gencnn_time_arrow_only")
def gencnn_time_arrow_only(args):
    """Table 3 'TIME-ARROW only' (same number of feature maps)."""
    set_defaults(args, alpha_map_kinds="time_arrow")
    gencnn_paper(args)


@register_model_architecture("gencnn", "gencnn_time_flow_only")
def gencnn_time_flow_only(args):
    """Table 3 'TIME-FLOW only' (same number of feature maps)."""
    set_defaults(args, alpha_map_kinds="time_flow")
    gencnn_paper(args)


@register_model_architecture("gencnn", "gencnn_alpha_only")
def gencnn_alpha_only(args):
    """Table 3 'αCNN only' (L_α = 30, no βCNN)."""
    set_defaults(args, no_beta=True)
    gencnn_paper(args)
