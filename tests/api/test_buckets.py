"""Bucketed signatures: one static signature per size of a dynamic dimension, weights shared, calls routed by
shape."""


import pytest
import torch
from torch import nn
from torch.export import Dim

import litert_torch
from litert_torch import metadata
from litert_torch.delegates.plan import PLAN_KEY
from litert_torch.flatbuffer.reader import read_metadata
from tests.helpers import assert_matches


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0)

    def forward(self, tokens):
        return self.layer(tokens)


def test_batch_buckets_share_weights_and_route_calls():
    torch.manual_seed(0)
    model = ConvNet().eval()
    batch = Dim("batch", min=1, max=8)
    x = torch.randn(2, 3, 8, 8)
    edge = litert_torch.convert(model, (x,), dynamic_shapes={"x": {0: batch}}, buckets={batch: [4, 1, 2]})
    assert sorted(edge.signatures) == ["batch_1", "batch_2", "batch_4"]
    for size in (1, 2, 4):
        inputs = torch.randn(size, 3, 8, 8)
        assert_matches(model(inputs), edge(inputs))
    single = litert_torch.convert(model, (x,))
    weights = sum(p.numel() for p in model.parameters()) * 4
    assert len(edge.flatbuffer) < 3 * len(single.flatbuffer) - 1.9 * weights  # the weights once, not three times
    with pytest.raises(litert_torch.ModelInputError, match=r"batch in \[1, 2, 4\]"):
        edge(torch.randn(3, 3, 8, 8))
    plan = metadata.decode(read_metadata(edge.flatbuffer)[PLAN_KEY])
    assert plan["buckets"] == {"dim": "batch", "sizes": [1, 2, 4], "signatures": ["batch_1", "batch_2", "batch_4"]}
    assert set(edge.delegate_plans) == {"batch_1", "batch_2", "batch_4"}


def test_sequence_buckets_for_a_transformer():
    torch.manual_seed(0)
    model = Encoder().eval()
    seq = Dim("seq", min=4, max=64)
    tokens = torch.randn(1, 16, 32)
    edge = litert_torch.convert(model, (tokens,), dynamic_shapes={"tokens": {1: seq}}, buckets={"seq": [8, 16, 32]})
    for length in (8, 16, 32):
        t = torch.randn(1, length, 32)
        assert_matches(model(t), edge(t))


def test_bad_buckets_are_refused():
    model, x = ConvNet().eval(), torch.randn(2, 3, 8, 8)
    batch = Dim("batch", min=1, max=8)
    with pytest.raises(ValueError, match="outside batch's range"):
        litert_torch.convert(model, (x,), dynamic_shapes={"x": {0: batch}}, buckets={"batch": [4, 16]})
    with pytest.raises(ValueError, match="does not use"):
        litert_torch.convert(model, (x,), dynamic_shapes={"x": {0: batch}}, buckets={"seq": [4]})
    with pytest.raises(ValueError, match="need dynamic_shapes"):
        litert_torch.convert(model, (x,), buckets={"batch": [4]})
    with pytest.raises(ValueError, match="not an argument of forward"):
        litert_torch.convert(model, (x,), dynamic_shapes={"y": {0: batch}}, buckets={"batch": [4]})
