"""The flatbuffer writer: identical constants share one buffer, and only identical ones."""

import numpy as np
import pytest

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


@pytest.mark.parametrize("name", ["int4", "uint4", "int2"])
def test_sub_byte_values_pack_low_bits_first_and_unpack_to_themselves(name):
    """Every value of the type, at every position in a byte and an odd count: packed the first value in the
    lowest bits (TFLite's layout: int4 [1, -2] is the byte 0xE1), unpacked to the same values."""
    import ml_dtypes

    from litert_torch.flatbuffer import schema as tables

    dtype = np.dtype(getattr(ml_dtypes, name))
    bits = tables.SUB_BYTE_BITS[name]
    low = 0 if name.startswith("u") else -(1 << (bits - 1))
    values = np.array([v for v in range(low, low + (1 << bits)) for _ in range(8 // bits)] + [low], dtype)
    packed = tables.pack_sub_byte(values)
    assert len(packed) == tables.packed_size(dtype, values.size) == -(-values.size * bits // 8)
    unpacked = tables.unpack_sub_byte(packed.tobytes(), dtype, values.size)
    assert unpacked.dtype == dtype and np.array_equal(unpacked.astype(int), values.astype(int))
    if name == "int4":
        assert tables.pack_sub_byte(np.array([1, -2], dtype)).tolist() == [0xE1]
