"""nn.EmbeddingBag over a 2-D input of a run-time batch: the equal bags are a RESHAPE and one reduction, for
every batch size the model is given."""

import numpy as np
import pytest
import torch
from torch import nn

import litert_torch
from tests.helpers import op_counts


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_with_a_dynamic_batch(mode):
    torch.manual_seed(0)
    model = nn.EmbeddingBag(50, 8, mode=mode).eval()
    edge = litert_torch.convert(model, (torch.randint(0, 50, (3, 5)),),
                                dynamic_shapes=({0: torch.export.Dim("batch", max=64)},))
    assert "BATCH_MATMUL" not in op_counts(edge)
    for batch in (1, 7, 64):
        ids = torch.randint(0, 50, (batch, 5))
        with torch.no_grad():
            want = model(ids).numpy()
        np.testing.assert_allclose(np.asarray(edge(ids)), want, rtol=1e-6, atol=1e-6)
