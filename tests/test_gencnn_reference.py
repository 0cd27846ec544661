"""The layer shapes the genCNN reference of tests/test_gencnn.py reads from the code (``stack.shapes``),
written by hand from the paper's description: a convolution of kernel k over n locations gives
n - k + 1; gating pairs adjacent locations (an odd oldest one passes through ungated); TIME-FLOW
maps read the TIME-FLOW maps below (``tf_input="tf"``) or all of them (``"all"``), TIME-ARROW maps
read all and have one filter per location.  So a wrong shape calculation cannot hide behind a
reference that reuses it."""
import pytest

from test_gencnn import make_body

# (kernel, n_tf, n_ta, n_in, c_tf, c_ta, n_conv, offset, n_pairs, n_out) per layer, by hand:
# αCNN window L_α + 1 = 10 of E = 5: conv 3 -> 8 locations -> 4 pairs; conv 2 -> 3 -> 1 pair + 1 ungated
ALPHA_TF = [(3, 4, 3, 10, 5, 5, 8, 0, 4, 4), (2, 3, 2, 4, 4, 7, 3, 1, 1, 2)]
ALPHA_ALL = [(3, 4, 3, 10, 5, 5, 8, 0, 4, 4), (2, 3, 2, 4, 7, 7, 3, 1, 1, 2)]
# βCNN window L_β + 1 = 7: conv 3 -> 5 -> 2 pairs + 1 ungated = 3; conv 2 -> 2 -> 1 pair
BETA = [(3, 4, 0, 7, 5, 5, 5, 1, 2, 3), (2, 3, 0, 3, 4, 4, 2, 0, 1, 1)]


@pytest.mark.parametrize("tf_input,alpha", [("tf", ALPHA_TF), ("all", ALPHA_ALL)])
def test_layer_shapes_by_hand(tf_input, alpha):
    body = make_body(tf_input)
    for stack, table in ((body.alpha, alpha), (body.beta, BETA)):
        got = [(s.kernel, s.n_tf, s.n_ta, s.n_in, s.c_tf, s.c_ta, s.n_conv, s.offset, s.n_pairs, s.n_out)
               for s in stack.shapes]
        assert got == table
    w = body.alpha.w
    assert tuple(w["conv_tf_w0"].shape) == (4, 3, 5) and tuple(w["conv_ta_w0"].shape) == (8, 3, 3, 5)
    assert tuple(w["gate_tf_w0"].shape) == (4, 4, 5) and tuple(w["gate_ta_w0"].shape) == (4, 3, 4, 5)
    assert tuple(w["conv_ta_w1"].shape) == (3, 2, 2, 7) and tuple(w["gate_ta_w1"].shape) == (1, 2, 3, 7)
    assert body.alpha.fc.in_features == 2 * (3 + 2) and body.beta.fc.in_features == 1 * 3
    assert "conv_ta_w0" not in body.beta.w  # no TIME-ARROW maps: no parameters
