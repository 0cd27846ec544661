"""The genCNN kernels with hand-written backwards (fairseq_local/modules/gencnn_kernels.py):
Eq. 5's pair merge (gating and Section 3.2's max-pooling) and the channels-last dilated
convolution, against plain formulas on slices, and ``torch.autograd.gradcheck`` in float64."""
import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck

from fairseq_local.modules.gencnn_kernels import Pairs, dilated_conv, merge, merge_pairs

# (shape of the candidates, pairs, axis, output axis): a gating layer's window locations (pairs
# (o+2j, o+2j+1), the oldest passing through when their count is odd, moved behind the window
# axis), and shared streams whose pairs (q, q+d) overlap (n > d), touch (n = d) or leave a gap (n < d)
GEOMETRIES = [
    ((7, 3, 2), Pairs(1, 2, 1, 3), 0, 1),
    ((6, 2, 3), Pairs(0, 2, 1, 3), 0, 1),
    ((2, 9, 3), Pairs(0, 1, 2, 7), 1, 1),
    ((2, 4, 3), Pairs(0, 1, 2, 2), 1, 1),
    ((2, 5, 3), Pairs(0, 1, 4, 1), 1, 1),
]


def plain_merge(a, g, pairs, dim, out_dim):
    """Eq. 5 on slices: g * older + (1 - g) * newer, g = sigmoid(gate), or the larger of the two
    (a tie keeps the older), after the pass-through locations."""
    idx = torch.arange(pairs.count)
    older = a.index_select(dim, pairs.start + pairs.step * idx)
    newer = a.index_select(dim, pairs.start + pairs.step * idx + pairs.gap)
    if g is None:
        merged = torch.where(older >= newer, older, newer)
    else:
        s = torch.sigmoid(g)
        merged = s * older + (1 - s) * newer
    return torch.cat([a.narrow(dim, 0, pairs.start), merged], dim).movedim(dim, out_dim)


@pytest.mark.parametrize("shape,pairs,dim,out_dim", GEOMETRIES)
def test_merge_pairs_equals_plain_formula_and_passes_gradcheck(shape, pairs, dim, out_dim):
    torch.manual_seed(0)
    a = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    g_shape = list(shape)
    g_shape[dim] = pairs.count
    g = torch.randn(g_shape, dtype=torch.float64, requires_grad=True)
    weight = torch.randn_like(plain_merge(a, g, pairs, dim, out_dim))
    for gate in (g, None):  # gating, max-pooling
        got = merge_pairs(a, gate, pairs, dim, out_dim)
        want = plain_merge(a, gate, pairs, dim, out_dim)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-15)
        inputs = (a, g) if gate is not None else (a,)
        grads = torch.autograd.grad((got * weight).sum(), inputs)
        expected = torch.autograd.grad((want * weight).sum(), inputs)
        for x, y in zip(grads, expected):
            torch.testing.assert_close(x, y, rtol=0, atol=1e-14)
    assert gradcheck(lambda a, g: merge_pairs(a, g, pairs, dim, out_dim), (a, g))
    assert gradcheck(lambda a: merge_pairs(a, None, pairs, dim, out_dim), (a,))


def test_merge_of_two_tensors_and_pooling_ties():
    torch.manual_seed(0)
    older, newer, g = (torch.randn(4, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    s = torch.sigmoid(g)
    torch.testing.assert_close(merge(older, newer, g), s * older + (1 - s) * newer, rtol=0, atol=1e-15)
    assert gradcheck(merge, (older, newer, g))
    assert gradcheck(lambda o, n: merge(o, n, None), (older, newer))
    # a tie (two positions before the sentence start) sends the whole gradient to the older one
    tie = torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)
    other = torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)
    merge(tie, other, None).sum().backward()
    assert tie.grad.eq(1).all() and other.grad.eq(0).all()
    a = torch.zeros(4, 1, 1, dtype=torch.float64, requires_grad=True)
    merge_pairs(a, None, Pairs(0, 2, 1, 2), 0).sum().backward()
    assert a.grad.flatten().tolist() == [1.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize("d", [1, 2])
def test_dilated_conv_equals_conv1d_on_channels_first_copies(d):
    torch.manual_seed(0)
    x = torch.randn(2, 11, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64, requires_grad=True)
    want = F.conv1d(x.transpose(1, 2).contiguous(), w.permute(0, 2, 1).contiguous(), b, dilation=d).transpose(1, 2)
    torch.testing.assert_close(dilated_conv(x, w, b, d), want, rtol=0, atol=1e-12)
    assert gradcheck(lambda x, w, b: dilated_conv(x, w, b, d), (x, w, b))
    assert dilated_conv(x[:, : 2 * d], w, b, d).shape == (2, 0, 5)  # shorter than the dilated kernel
