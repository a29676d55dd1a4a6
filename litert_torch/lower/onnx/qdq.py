"""ONNX quantize / dequantize nodes (the QDQ format of quantized ONNX models): DequantizeLinear,
QuantizeLinear and DynamicQuantizeLinear, computed in float32 exactly as ONNX defines them.

DequantizeLinear is (x - zero_point) * scale; QuantizeLinear is round-half-to-even(x / scale) + zero_point,
saturated to the integer type's range (NaN gives the range's low end, as ONNX's reference does); a scale is one
value, one per slice along `axis`, or one per block of `block_size` along `axis`. A dequantized constant
weight is folded into a float constant at conversion. Integer types of 8 and 16 bits; the 2- and 4-bit and
float8 types have no TFLite tensor type and are refused where the model is read.
"""

from __future__ import annotations

import numpy as np

from litert_torch import ir
from litert_torch.lower.onnx.registry import onnx_op, operand, tensor
from litert_torch.lower.common.registry import numpy_dtype
from litert_torch.symbolic import all_static

_RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127), np.dtype(np.uint16): (0, 65535),
           np.dtype(np.int16): (-32768, 32767)}


def _per_axis(ctx, node, value: ir.Tensor, x: ir.Tensor, axis: int, block: int) -> ir.Tensor:
    """A scale or zero point shaped to broadcast against x: as it is when it holds one value, along `axis`
    for one per slice, repeated `block` times along `axis` for blocked quantization."""
    if value.rank == 0 or (value.rank == 1 and value.shape[0] == 1 and not block):
        return ctx.reshape(value, [])
    if not all_static([*x.shape, *value.shape]):
        raise ctx.fail(f"{node.op_type} with a per-axis scale over dynamic sizes has no lowering")
    axis = axis % x.rank
    if not block:
        if value.rank != 1 or value.shape[0] != x.shape[axis]:
            raise ctx.fail(f"{node.op_type}: a scale of shape {list(value.shape)} for axis {axis} of "
                           f"{list(x.shape)}")
        return ctx.reshape(value, [1] * axis + [int(x.shape[axis])] + [1] * (x.rank - axis - 1))
    if value.rank != x.rank or value.shape[axis] * block < x.shape[axis]:
        raise ctx.fail(f"{node.op_type}: a blocked scale of shape {list(value.shape)} (block {block}) for "
                       f"{list(x.shape)}")
    index = ctx.const((np.arange(int(x.shape[axis])) // block).astype(np.int32), name="block")
    shape = [int(d) for d in value.shape]
    shape[axis] = int(x.shape[axis])
    return ctx.emit("GATHER", [value, index], shape, value.dtype, axis=axis, batch_dims=0)


def _block(attrs) -> int:
    return int(attrs.get("block_size", 0) or 0)


@onnx_op("DequantizeLinear")
def dequantize_linear(ctx, node, inputs, attrs) -> ir.Tensor:
    """DequantizeLinear (opsets 13-28).

    (x - zero_point) * scale in float32, the scale and zero point per tensor, per axis or per block."""
    x, scale = operand(ctx, inputs[0]), operand(ctx, inputs[1])
    zero = tensor(ctx, inputs[2]) if len(inputs) > 2 else None
    axis, block = int(attrs.get("axis", 1)), _block(attrs)
    out_dtype = numpy_dtype(node.value.dtype)
    y = ctx.cast(x, np.float32)
    if zero is not None:
        y = ctx.emit("SUB", [y, ctx.cast(_per_axis(ctx, node, zero, x, axis, block), np.float32)], x.shape,
                     np.float32, fused_activation_function="NONE")
    y = ctx.emit("MUL", [y, ctx.cast(_per_axis(ctx, node, scale, x, axis, block), np.float32)], x.shape,
                 np.float32, fused_activation_function="NONE")
    return ctx.cast(y, out_dtype)


def _saturate(ctx, q: ir.Tensor, dtype: np.dtype, carrier=None) -> ir.Tensor:
    """float32 values already rounded, clamped to `dtype`'s range (NaN to its low end) and cast to it (or to
    the `carrier` type that holds its values)."""
    low, high = _RANGES[dtype]
    clamped = ctx.emit("MAXIMUM", [ctx.emit("MINIMUM", [q, ctx.scalar_like(float(high), q)], like=q),
                                   ctx.scalar_like(float(low), q)], like=q)
    nan = ctx.emit("NOT_EQUAL", [q, q], q.shape, np.bool_)
    clamped = ctx.emit("SELECT_V2", [nan, ctx.scalar_like(float(low), q), clamped], like=q)
    return ctx.cast(clamped, carrier or dtype)


@onnx_op("QuantizeLinear", uint16_in_range=True)
def quantize_linear(ctx, node, inputs, attrs) -> ir.Tensor:
    """QuantizeLinear (opsets 13-28).

    round(x / scale) + zero_point (half to even), saturated to the output type's range: uint8 unless a zero
    point or `output_dtype` says otherwise; per tensor, per axis or per block."""
    x, scale = operand(ctx, inputs[0]), operand(ctx, inputs[1])
    zero = tensor(ctx, inputs[2]) if len(inputs) > 2 else None
    dtype = np.dtype(zero.dtype) if zero is not None else np.dtype(numpy_dtype(node.value.dtype))
    if dtype == np.int32:  # uint16 values are carried in int32 (lower.onnx.driver.WIDE_UNSIGNED)
        return _saturate(ctx, _quantized(ctx, node, x, scale, zero, attrs), np.dtype(np.uint16), np.int32)
    if dtype not in _RANGES:
        raise ctx.fail(f"QuantizeLinear to {dtype} has no lowering (8- and 16-bit integers)")
    return _saturate(ctx, _quantized(ctx, node, x, scale, zero, attrs), dtype)


def _quantized(ctx, node, x, scale, zero, attrs) -> ir.Tensor:
    """round(x / scale) + zero_point in float32."""
    axis, block = int(attrs.get("axis", 1)), _block(attrs)
    xf = ctx.cast(x, np.float32)
    q = ctx.emit("DIV", [xf, ctx.cast(_per_axis(ctx, node, scale, x, axis, block), np.float32)], x.shape,
                 np.float32, fused_activation_function="NONE")
    q = ctx.emit("ROUND", [q], like=q)
    if zero is not None:
        q = ctx.emit("ADD", [q, ctx.cast(_per_axis(ctx, node, zero, x, axis, block), np.float32)], x.shape,
                     np.float32, fused_activation_function="NONE")
    return q


@onnx_op("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx, node, inputs, attrs) -> tuple[ir.Tensor, ir.Tensor, ir.Tensor]:
    """DynamicQuantizeLinear (opsets 13-28).

    (y uint8, scale, zero point) from x's own range widened to include 0: scale = (max - min) / 255 (1 / 255
    when the range is empty), zero point = round(clamp(-min / scale, 0, 255)), y as QuantizeLinear."""
    x = operand(ctx, inputs[0])
    xf = ctx.cast(x, np.float32)
    axes = ctx.const(np.arange(x.rank, dtype=np.int32), name="axes")
    zero = ctx.scalar_like(0.0, xf)
    top = ctx.emit("MAXIMUM", [ctx.emit("REDUCE_MAX", [xf, axes], (), np.float32, keep_dims=False), zero], (),
                   np.float32)
    bottom = ctx.emit("MINIMUM", [ctx.emit("REDUCE_MIN", [xf, axes], (), np.float32, keep_dims=False), zero], (),
                      np.float32)
    span = ctx.emit("SUB", [top, bottom], (), np.float32, fused_activation_function="NONE")
    empty = ctx.emit("EQUAL", [top, bottom], (), np.bool_)
    span = ctx.emit("SELECT_V2", [empty, ctx.scalar_like(1.0, span), span], (), np.float32)
    scale = ctx.emit("DIV", [span, ctx.scalar_like(255.0, span)], (), np.float32, fused_activation_function="NONE")
    start = ctx.emit("NEG", [ctx.emit("DIV", [bottom, scale], (), np.float32, fused_activation_function="NONE")],
                     (), np.float32)
    start = ctx.emit("MAXIMUM", [ctx.emit("MINIMUM", [start, ctx.scalar_like(255.0, start)], like=start),
                                 ctx.scalar_like(0.0, start)], like=start)
    point = ctx.emit("ROUND", [start], like=start)
    q = ctx.emit("ROUND", [ctx.emit("DIV", [xf, scale], x.shape, np.float32, fused_activation_function="NONE")],
                 x.shape, np.float32)
    q = ctx.emit("ADD", [q, point], x.shape, np.float32, fused_activation_function="NONE")
    return _saturate(ctx, q, np.dtype(np.uint8)), ctx.cast(scale, x.dtype), ctx.cast(point, np.uint8)
