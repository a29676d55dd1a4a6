"""int64 PyTorch tensors are int32 inside the model; EdgeModel hides that from the user, without wrap-around."""

import numpy as np
import pytest
import torch
from torch import nn

import litert_torch
from litert_torch import ConversionError, ModelInputError


class Lookup(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 4)

    def forward(self, ids):
        vectors = self.emb(ids)
        return vectors, vectors.sum(-1).argmax(-1), ids * 2


def test_int64_inputs_are_int32_in_the_signature_and_int64_for_the_user():
    model = Lookup().eval()
    ids = torch.randint(0, 100, (2, 5))
    edge = litert_torch.convert(model, (ids,))
    edge.output_style = "pytorch"
    sig = edge.signatures["serving_default"]
    assert sig.inputs[0].dtype == np.int32
    vectors, best, doubled = edge(ids)
    ref_vectors, ref_best, ref_doubled = model(ids)
    assert best.dtype == torch.int64 and doubled.dtype == torch.int64
    assert torch.equal(best, ref_best) and torch.equal(doubled, ref_doubled)
    torch.testing.assert_close(vectors, ref_vectors)
    # int32 inputs are taken as they are.
    assert torch.equal(edge(ids.to(torch.int32))[2], ref_doubled)


def test_int64_inputs_outside_int32_are_an_error_not_a_wrap_around():
    edge = litert_torch.convert(Lookup().eval(), (torch.randint(0, 100, (2, 5)),))
    too_big = torch.full((2, 5), 2**31, dtype=torch.int64)
    with pytest.raises(ModelInputError, match="outside the int32 range"):
        edge(too_big)
    with pytest.raises(ModelInputError, match=r"expects dtype int64 \(or int32\), got float32"):
        edge(torch.zeros(2, 5))


class BigConstant(nn.Module):
    def forward(self, x):
        return x + torch.tensor([2**40], dtype=torch.int64)


def test_int64_constants_outside_int32_fail_conversion():
    with pytest.raises(ConversionError, match="outside the int32 range"):
        litert_torch.convert(BigConstant(), (torch.ones(1, dtype=torch.int64),))


class RelativeBuckets(nn.Module):
    """T5's relative-position buckets: log(0) becomes the int64 minimum on the way, which a where discards; only
    the buckets, all small, reach the model."""

    def forward(self, x):
        distance = torch.arange(8)[None, :] - torch.arange(8)[:, None]
        large = 4 + (torch.log(distance.abs().float() / 4) * 2).to(torch.long)
        return x + torch.where(distance.abs() < 4, distance.abs(), torch.clamp(large, max=7))


def test_int64_intermediates_between_constants_need_not_fit_int32():
    model = RelativeBuckets()
    x = torch.randint(0, 5, (8, 8))
    edge = litert_torch.convert(model, (x,))
    np.testing.assert_array_equal(np.asarray(edge(x)), model(x).numpy())
