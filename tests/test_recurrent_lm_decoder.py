"""Tests for the recurrent LM decoder (fairseq_local/modules/recurrent_lm_decoder.py): incremental decoding
equals the full pass, truncated BPTT over two windows with a carried state equals one pass, and the AWD
dropouts are active only in training."""
import pytest
import torch

import fairseq_local  # noqa: F401
from fairseq_local.modules.recurrent_lm_decoder import RecurrentLMDecoder
from fairseq_local.modules.recurrent_seq2seq import Embedding
from fairseq_local.tasks.stateful_language_modeling import BPTTState

from contract_lib import float64_default, left_padded_tokens as _left_padded, small_dictionary as _dict
from contract_lib import torch_layer_factory as _factory

_float64 = pytest.fixture(autouse=True)(float64_default)


def test_lm_decoder_incremental_bptt_and_regularisation():
    torch.manual_seed(0)
    d = _dict()
    dec = RecurrentLMDecoder(d, Embedding(len(d), 6, d.pad()), _factory("lstm"), 3, 8, dropout_embed=0.5,
                             dropout_in=0.3, dropout_hidden=0.3, dropout_out=0.3, share_input_output_embed=True)
    assert dec.fc_out is None and dec.layers[-1].hidden_size == 6
    toks = _left_padded(d, [8, 8])
    dec.eval()
    full, _ = dec(toks)
    state = {}
    steps = [dec(toks[:, :t + 1], incremental_state=state)[0] for t in range(8)]
    torch.testing.assert_close(torch.cat(steps, 1), full)
    carry = BPTTState()  # truncated BPTT: two windows with a carried state == one pass
    a, _ = dec(toks[:, :3], bptt_state=carry)
    b, _ = dec(toks[:, 3:], bptt_state=carry)
    torch.testing.assert_close(torch.cat([a, b], 1), full)
    dec.train()
    torch.manual_seed(1)
    o1, _ = dec(toks)
    assert not torch.allclose(o1, full)  # dropout active in training
