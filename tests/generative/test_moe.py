"""The routed-experts layer of the LLM models: a prefill chunk sorted by expert into tiles, a token alone gathering
its experts, both equal to each token running its chosen experts, for any routing the runtime can meet."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import litert_torch
from litert_torch.flatbuffer.reader import read_model
from litert_torch.generative.model import MoE, expert_tile_rows

HIDDEN, INTER = 24, 16


def moe(experts: int, k: int) -> MoE:
    cfg = SimpleNamespace(moe_intermediate_size=INTER, num_experts_per_tok=k, norm_topk_prob=True,
                          activation="silu")
    torch.manual_seed(0)
    return MoE(cfg, torch.randn(experts, HIDDEN), torch.randn(experts, 2 * INTER, HIDDEN) * 0.2,
               torch.randn(experts, HIDDEN, INTER) * 0.2).eval()


def each_token(layer: MoE, x: torch.Tensor) -> torch.Tensor:
    """Each token through its chosen experts, one at a time."""
    flat = x.reshape(-1, HIDDEN)
    weights, chosen = torch.topk(torch.softmax(layer.router(flat), -1), layer.top_k, -1)
    weights = weights / weights.sum(-1, keepdim=True)
    out = torch.zeros_like(flat)
    for t in range(flat.shape[0]):
        for w, e in zip(weights[t], chosen[t]):
            inner = torch.nn.functional.silu(layer.gate_w[e] @ flat[t]) * (layer.up_w[e] @ flat[t])
            out[t] += w * (layer.down_w[e] @ inner)
    return out.reshape(x.shape)


def test_tile_rows_bound_every_routing():
    """A token alone gathers its experts (1 row a tile); a chunk takes several rows a tile; and the tiles sized
    for a chunk hold every routing, from spread evenly to all tokens on the same experts."""
    assert expert_tile_rows(4, 32) == 1
    assert expert_tile_rows(128 * 4, 32) > 1
    rng = np.random.default_rng(0)
    for tokens, experts, k in [(16, 4, 2), (128, 32, 4), (33, 8, 2), (5, 3, 3)]:
        rows = expert_tile_rows(tokens * k, experts)
        tiles = math.ceil((tokens * k + experts * (rows - 1)) / rows)
        routings = [np.array([tokens] * k + [0] * (experts - k))]  # every token on the same k experts
        for _ in range(50):
            picks = np.stack([rng.choice(experts, k, replace=False) for _ in range(tokens)])
            routings.append(np.bincount(picks.ravel(), minlength=experts))
        for counts in routings:
            assert sum(math.ceil(c / rows) for c in counts) <= tiles


@pytest.mark.parametrize("experts,k,tokens", [(4, 2, 16), (8, 2, 12), (8, 3, 1)])
def test_converted_layer_matches_each_token_for_spread_and_piled_routing(experts, k, tokens):
    layer = moe(experts, k)
    x = torch.randn(1, tokens, HIDDEN)
    edge = litert_torch.convert(layer, (x,))
    # every token piled onto the same experts: inputs along one router row
    piled = layer.router.weight[experts - 1].detach() * 4 + 0.05 * torch.randn(1, tokens, HIDDEN)
    for sample in (x, torch.randn(1, tokens, HIDDEN) * 3, piled):
        with torch.no_grad():
            want = each_token(layer, sample)
            torch.testing.assert_close(layer(sample), want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(torch.as_tensor(edge(sample)), want, rtol=1e-4, atol=1e-4)
    model = read_model(edge.flatbuffer)
    gathers = [op for g in model.subgraphs for op in g.ops
               if op.opcode == "GATHER" and op.inputs[0].is_constant and op.inputs[0].rank == 3]
    picks = {op.inputs[1].shape[0] for op in gathers}
    if tokens > 1:  # one copy of an expert's weights per tile, fewer than the (token, expert) pairs
        assert picks and max(picks) < tokens * k
    else:
        assert picks == {k}
