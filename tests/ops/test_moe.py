"""Mixture-of-experts layers as Hugging Face transformers writes them (tokens sorted by expert, torch.histc for
the tokens per expert, the grouped matrix product `transformers::grouped_mm_fallback`, the inverse permutation
written into torch.empty; JetMoE's split by expert counts read with .tolist()), converted through the general
path; and torch.histc itself."""

import numpy as np
import pytest
import torch

import litert_torch
from litert_torch.lower.aten import moe
from tests.ops.cases import Fn

transformers = pytest.importorskip("transformers")


def _causal_lm(model_type, **extra):
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(model_type, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                                               num_attention_heads=4, num_key_value_heads=2, vocab_size=100, **extra)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids, use_cache=False).logits

    return Logits().eval()


MODELS = {
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                      shared_expert_intermediate_size=32),
}


@pytest.mark.parametrize("gathered", [True, False], ids=["chosen_experts", "every_expert"])
@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_mixture_of_experts_causal_lm(model_type, gathered, monkeypatch):
    if not gathered:  # the path for large blocks: every expert on every row, then selected
        monkeypatch.setattr(moe, "_GATHER_LIMIT", 0)
    model = _causal_lm(model_type, **MODELS[model_type])
    ids = torch.randint(0, 100, (1, 12))
    edge = litert_torch.convert(model, (ids,))
    with torch.no_grad():
        want = model(ids).numpy()
    np.testing.assert_allclose(np.asarray(edge(ids)), want, rtol=1e-5, atol=1e-5)


def test_jetmoe_experts_grouped_by_a_split_of_counts_read_with_tolist():
    """JetMoE groups each expert's rows with `split(expert_size.tolist())`: sizes read from values, followed
    when the model runs; each new prompt routes differently."""
    model = _causal_lm("jetmoe", num_local_experts=4, num_experts_per_tok=2, kv_channels=16)
    edge = litert_torch.convert(model, (torch.randint(0, 100, (1, 12)),))
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        ids = torch.randint(0, 100, (1, 12), generator=g)
        with torch.no_grad():
            want = model(ids).numpy()
        np.testing.assert_allclose(np.asarray(edge(ids)), want, rtol=1e-5, atol=1e-5)


HISTC = {
    "range": (lambda x: torch.histc(x, bins=7, min=-1.5, max=2.0), lambda: torch.randn(4, 30)),
    "data_range": (lambda x: torch.histc(x, bins=5), lambda: torch.randn(50)),
    "constant_input": (lambda x: torch.histc(x * 0 + 3, bins=4), lambda: torch.randn(9)),
    "edges_and_nan": (lambda x: torch.histc(x, bins=4, min=0, max=4),
                      lambda: torch.tensor([0.0, 1.0, 4.0, 3.999, -0.001, 4.001, float("nan"), 2.0, 2.0])),
    "expert_ids": (lambda x: torch.histc(x, bins=8, min=0, max=7), lambda: torch.randint(0, 8, (40,)).float()),
}


@pytest.mark.parametrize("name", sorted(HISTC))
def test_histc(name):
    f, make = HISTC[name]
    x = make()
    edge = litert_torch.convert(Fn(f), (x,))
    np.testing.assert_array_equal(np.asarray(edge(x)), f(x).numpy())
