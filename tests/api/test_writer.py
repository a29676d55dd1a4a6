"""The flatbuffer writer: identical constants share one buffer, and only identical ones."""

import numpy as np

from litert_torch import EdgeModel, ir
from litert_torch.flatbuffer.writer import serialize
from ai_edge_litert import schema_py_generated as schema


def model_adding(*constants: np.ndarray) -> ir.Model:
    x = ir.Tensor("x", list(constants[0].shape), np.float32)
    ops, cur = [], x
    for i, value in enumerate(constants):
        out = ir.Tensor(f"y{i}", list(value.shape), np.float32)
        ops.append(ir.Op("ADD", [cur, ir.Tensor(f"c{i}", list(value.shape), np.float32, value)], [out],
                         {"fused_activation_function": "NONE"}))
        cur = out
    return ir.Model([ir.Graph("main", [x], [cur], ops)], [ir.Signature("serving_default", 0, ["x"], ["y"])])


def data_buffers(data: bytes) -> int:
    return sum(1 for b in schema.ModelT.InitFromPackedBuf(data, 0).buffers
               if b.data is not None and len(b.data) > 64)  # weights, not metadata or empty buffers


def test_identical_constants_share_one_buffer_and_near_identical_ones_do_not():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(100_000).astype(np.float32)
    # Same size and the same first and last bytes as `a` (what the writer's fingerprint reads): only the full
    # comparison tells it apart.
    b = a.copy()
    b[50_000] += 1.0
    model = model_adding(a, a.copy(), b)
    data = serialize(model)
    assert data_buffers(data) == 2
    x = rng.standard_normal(100_000).astype(np.float32)
    np.testing.assert_allclose(EdgeModel(data)(x)["y"], x + a + a + b, rtol=1e-6)  # named outputs: a dict
