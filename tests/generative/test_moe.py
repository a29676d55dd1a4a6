"""The routed-experts layer of the LLM models: a prefill chunk sorted by expert into a first tile per expert (the
weights read in place) and gathered overflow tiles, a token alone gathering its experts, both equal to each token
running its chosen experts, for any routing the runtime can meet."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import litert_torch
from litert_torch.flatbuffer.reader import read_model
from litert_torch.generative.model import MoE, expert_tile_rows, expert_tiles, first_tile_rows, overflow_tiles

HIDDEN, INTER = 24, 16


def moe(experts: int, k: int, in_place: bool = True) -> MoE:
    cfg = SimpleNamespace(moe_intermediate_size=INTER, num_experts_per_tok=k, norm_topk_prob=True,
                          activation="silu")
    torch.manual_seed(0)
    gate_up, down = torch.randn(experts, 2 * INTER, HIDDEN) * 0.2, torch.randn(experts, HIDDEN, INTER) * 0.2
    layer = MoE(cfg, torch.randn(experts, HIDDEN), gate_up[:, :INTER], gate_up[:, INTER:], down,
                in_place=in_place).eval()
    layer.hf_tables = gate_up, down  # Hugging Face's layout, for the reference
    return layer


def each_token(layer: MoE, x: torch.Tensor) -> torch.Tensor:
    """Each token through its chosen experts, one at a time."""
    flat = x.reshape(-1, HIDDEN)
    weights, chosen = torch.topk(torch.softmax(layer.router(flat), -1), layer.top_k, -1)
    weights = weights / weights.sum(-1, keepdim=True)
    gate_up, down = layer.hf_tables
    out = torch.zeros_like(flat)
    for t in range(flat.shape[0]):
        for w, e in zip(weights[t], chosen[t]):
            gate, up = (gate_up[e] @ flat[t]).chunk(2)
            out[t] += w * (down[e] @ (torch.nn.functional.silu(gate) * up))
    return out.reshape(x.shape)


def test_tile_rows_bound_every_routing():
    """A token alone gathers its experts (1 row a tile); a chunk takes several rows a tile; and the overflow tiles
    sized for a chunk hold every routing, from spread evenly, through each expert just past its first tile, to
    all tokens on the same experts."""
    assert expert_tile_rows(4, 32) == 1
    assert expert_tile_rows(128 * 4, 32) > 1
    rng = np.random.default_rng(0)
    for tokens, experts, k in [(16, 4, 2), (128, 32, 4), (33, 8, 2), (5, 3, 3), (64, 4, 2), (200, 16, 2)]:
        rows = first_tile_rows(tokens * k, experts)
        assert rows % 8 == 0
        tiles = overflow_tiles(tokens * k, rows)
        routings = [np.array([tokens] * k + [0] * (experts - k))]  # every token on the same k experts
        just_past = np.zeros(experts, int)  # as many experts as can be, one pair past their first tile
        for e in range(min(experts, tokens * k // (rows + 1))):
            just_past[e] = rows + 1
        just_past[0] += tokens * k - just_past.sum()
        if just_past.max() <= tokens:
            routings.append(just_past)
        for _ in range(50):
            picks = np.stack([rng.choice(experts, k, replace=False) for _ in range(tokens)])
            routings.append(np.bincount(picks.ravel(), minlength=experts))
        for counts in routings:
            assert sum(math.ceil(max(c - rows, 0) / rows) for c in counts) <= tiles


@pytest.mark.parametrize("in_place", [True, False])
@pytest.mark.parametrize("experts,k,tokens", [(4, 2, 16), (8, 2, 12), (4, 2, 64), (8, 3, 1)])
def test_converted_layer_matches_each_token_for_spread_and_piled_routing(experts, k, tokens, in_place):
    layer = moe(experts, k, in_place)
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
    ops = [op for g in model.subgraphs for op in g.ops]
    gathers = [op for op in ops if op.opcode == "GATHER" and op.inputs[0].is_constant and op.inputs[0].rank == 3]
    picks = {op.inputs[1].shape[0] for op in gathers}
    in_place = [op for op in ops if op.opcode == "BATCH_MATMUL" and any(t is not None and t.is_constant
                                                                       for t in op.inputs)]
    pairs = tokens * k
    if tokens > 1 and layer.in_place:  # each expert's first tile against its weights in place, a copy per overflow
        assert len(in_place) == 3
        assert max(picks, default=0) == overflow_tiles(pairs, first_tile_rows(pairs, experts)) < pairs
    elif tokens > 1:  # one copy of an expert's weights per tile, fewer than the (token, expert) pairs
        assert not in_place
        assert max(picks) == expert_tiles(pairs, experts, expert_tile_rows(pairs, experts)) < pairs
    else:
        assert picks == {k} and not in_place



@pytest.mark.parametrize("experts,k,tokens", [(8, 3, 1), (32, 2, 3)])
def test_int8_tables_of_a_few_tokens_are_multiplied_as_int8_rows(experts, k, tokens):
    """A token alone, or a few tokens each gathering their experts, with int8 expert tables: every product is a
    hybrid FULLY_CONNECTED of float rows by gathered int8 rows (one for a token's row by all its experts' gate
    rows, one per (token, expert) pair otherwise), no table is widened to float, and the layer stays within
    int8 error of each token through its experts."""
    from litert_torch.flatbuffer.writer import serialize
    from litert_torch.quantization.weights import int8_gathered_tables
    from litert_torch.runtime.edge_model import EdgeModel

    layer = moe(experts, k)
    assert expert_tile_rows(tokens * k, experts) == 1
    x = torch.randn(1, tokens, HIDDEN)
    model = read_model(litert_torch.convert(layer, (x,)).flatbuffer)
    assert int8_gathered_tables(model.subgraphs) == 3
    ops = [op for g in model.subgraphs for op in g.ops]
    assert not any(op.opcode == "CAST" and op.inputs[0].dtype == np.int8 for op in ops)
    products = [op for op in ops if op.opcode == "FULLY_CONNECTED" and op.inputs[1].dtype == np.int8]
    pairs = tokens * k
    assert len(products) == (2 if tokens == 1 else 2 * pairs) + pairs
    edge = EdgeModel(serialize(model))
    for sample in (x, torch.randn(1, tokens, HIDDEN) * 3):
        with torch.no_grad():
            want = each_token(layer, sample).numpy()
        got = np.asarray(edge(sample))
        assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()


@pytest.mark.parametrize("experts,k,tokens", [(8, 3, 1), (8, 2, 64)])
def test_int4_tables_are_gathered_as_int4_and_widened(experts, k, tokens):
    """int4 expert tables in blocks (`int4_gathered_tables`): a token alone gathers its experts' int4 rows, a
    chunk reads each expert's first tile against the table widened whole and gathers its overflow tiles' experts
    (three tiles here); no float32 expert table is left, and
    the layer equals each token through its experts with the dequantized tables, within int4 error of float."""
    from litert_torch.flatbuffer.writer import serialize
    from litert_torch.quantization.int4_tables import int4_blocks, int4_gathered_tables
    from litert_torch.runtime.edge_model import EdgeModel

    layer = moe(experts, k)
    x = torch.randn(1, tokens, HIDDEN)
    model = read_model(litert_torch.convert(layer, (x,)).flatbuffer)
    assert int4_gathered_tables(model.subgraphs, 8) == 3
    ops = [op for g in model.subgraphs for op in g.ops]
    tables = {id(t): t for op in ops for t in op.inputs if t is not None and t.is_constant and t.rank == 3}
    assert not [t.name for t in tables.values() if t.dtype == np.float32]
    assert sum(t.dtype.name == "int4" for t in tables.values()) == 3
    widened = [op for op in ops if op.opcode == "CAST" and op.inputs[0].dtype.name == "int4"]
    assert widened and sum(op.inputs[0].is_constant for op in widened) == (3 if tokens > 1 else 0)

    def dequantized(w: torch.Tensor) -> torch.Tensor:
        q, scale = int4_blocks(w.numpy(), 8)
        blocks = q.astype(np.float32).reshape(*w.shape[:2], -1, 8) * scale.astype(np.float32)
        return torch.from_numpy(blocks.reshape(w.shape))

    edge = EdgeModel(serialize(model))
    gate_up, down = layer.hf_tables
    float_tables = layer.hf_tables
    quantized = (torch.cat([dequantized(gate_up[:, :INTER]), dequantized(gate_up[:, INTER:])], 1), dequantized(down))
    for sample in (x, torch.randn(1, tokens, HIDDEN) * 3):
        got = np.asarray(edge(sample))
        with torch.no_grad():
            layer.hf_tables = quantized
            np.testing.assert_allclose(got, each_token(layer, sample).numpy(), rtol=1e-4, atol=1e-4)
            layer.hf_tables = float_tables
            want = each_token(layer, sample).numpy()
        assert np.abs(got - want).max() <= 0.2 * np.abs(want).max()
