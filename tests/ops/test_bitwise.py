"""Bitwise ops of integers and bools (TFLite has BITWISE_XOR and RIGHT_SHIFT only: AND, OR and left shifts are
built from them and from sums), compared with PyTorch exactly over each type's whole range, shift counts
outside the type's width and negative ones included."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import litert_torch
from tests.helpers import Fn

INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
OPS = {
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
    "not": lambda a, b: ~a,
    "and_scalar": lambda a, b: a & 0x5A,
    "or_scalar": lambda a, b: (a | 3) ^ b,
    "mixed": lambda a, b: (a & b) | (~a & (b ^ 0x33)),
}


def _values(dtype, seed, shape=(4, 64)):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    # int64 tensors compute in int32 (values must fit)
    info = torch.iinfo(torch.int32 if dtype == torch.int64 else dtype)
    x = torch.randint(info.min, info.max, shape, generator=g, dtype=torch.int64)
    x[0, :4] = torch.tensor([info.min, info.max, 0, -1 if info.min < 0 else 1])  # the extremes
    return x.to(dtype)


@pytest.mark.parametrize("dtype", INTS + [torch.bool], ids=str)
@pytest.mark.parametrize("name", list(OPS))
def test_bitwise_ops_match_pytorch(name, dtype):
    fn = OPS[name]
    a, b = _values(dtype, 0), _values(dtype, 1)
    try:
        fn(a, b)
    except RuntimeError:
        pytest.skip(f"PyTorch has no {name} of {dtype}")
    model = Fn(fn)
    edge = litert_torch.convert(model, (a, b))
    for x, y in ((a, b), (_values(dtype, 2), _values(dtype, 3))):
        np.testing.assert_array_equal(np.asarray(edge(x, y)), model(x, y).numpy())


def _counts(dtype, seed, shape=(4, 64)):
    bits = 32 if dtype == torch.int64 else torch.iinfo(dtype).bits
    g = torch.Generator().manual_seed(seed)
    low = 0 if dtype == torch.uint8 else -3
    return torch.randint(low, bits + 4, shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", INTS, ids=str)
@pytest.mark.parametrize("direction", ["left", "right"])
def test_shifts_match_pytorch_for_every_count(direction, dtype):
    """Counts below 0 and of the type's width or more included: PyTorch gives 0 for a left shift there, and the
    sign (signed) or 0 (unsigned) for a right one."""
    fn = (lambda x, s: x << s) if direction == "left" else (lambda x, s: x >> s)
    model = Fn(fn)
    x, s, s2 = _values(dtype, 0), _counts(dtype, 1), _counts(dtype, 2)
    if dtype == torch.int64 and direction == "left":
        # int64 computes in int32, so results must fit there: 8-bit values, counts below 23 or of 64 and more
        x, s, s2 = x % 256, torch.where(s > 22, s + 42, s), torch.where(s2 > 22, s2 + 42, s2)
    edge = litert_torch.convert(model, (x, s))
    for feeds in ((x, s), (x.flip(1), s2)):
        np.testing.assert_array_equal(np.asarray(edge(*feeds)), model(*feeds).numpy())


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_shifts_by_a_number_unpack_nibbles(dtype):
    """(w >> 4) & 15 and w << 4, as int4 weight unpacking writes them."""
    def unpack(w, _):
        return ((w >> 4) & 15) | ((w & 15) << 4)

    model = Fn(unpack)
    w = _values(dtype, 5)
    if dtype == torch.int64:
        w = w % 4096
    edge = litert_torch.convert(model, (w, w))
    np.testing.assert_array_equal(np.asarray(edge(w, w)), model(w, w).numpy())
