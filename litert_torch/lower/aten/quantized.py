"""PT2E quantize / dequantize nodes (torchao's `convert_pt2e` output) as TFLite QUANTIZE / DEQUANTIZE.

A PT2E-quantized module computes in float between `quantize_per_tensor` (float -> int8, rounded and clamped)
and `dequantize_per_tensor` (int8 -> float) pairs. Here each quantize is a QUANTIZE whose int8 output carries
the scale and zero point, and each dequantize a DEQUANTIZE of that tensor; quantized weights (a constant
quantized at conversion) stay int8 in the file with their per-tensor or per-channel parameters and are
dequantized by the runtime. The model's arithmetic between the pairs stays float, as in the PyTorch module.

    x -> QUANTIZE -> x_q[int8, scale, zp] -> DEQUANTIZE -> CONV_2D(., DEQUANTIZE(w_q[int8, per-channel])) -> ...

Limits: int8 and uint8 (TFLite's QUANTIZE takes no other 8-bit ranges wider than the type); quant_min/quant_max
must be the type's full range for activations (a narrower clamp has no QUANTIZE form); dequantizing an
integer tensor that no QUANTIZE made (and that is not a constant) is refused.
"""

from __future__ import annotations

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.common.registry import lowers, out_meta

try:
    import torch.ao.quantization.fx._decomposed  # noqa: F401 (defines the quantized_decomposed ops PT2E emits)

    _qd = torch.ops.quantized_decomposed
    QUANTIZE_PER_TENSOR = [_qd.quantize_per_tensor.default, _qd.quantize_per_tensor.tensor]
    DEQUANTIZE_PER_TENSOR = [_qd.dequantize_per_tensor.default, _qd.dequantize_per_tensor.tensor]
    DEQUANTIZE_PER_CHANNEL = [_qd.dequantize_per_channel.default]
except (AttributeError, ImportError, RuntimeError):  # a torch without the quantized_decomposed library
    QUANTIZE_PER_TENSOR, DEQUANTIZE_PER_TENSOR, DEQUANTIZE_PER_CHANNEL = [], [], []

# Dequantize nodes are never folded at conversion, so that quantized weights stay int8 in the file.
RUN_TIME_ONLY = frozenset(DEQUANTIZE_PER_TENSOR + DEQUANTIZE_PER_CHANNEL)

_RANGES = {torch.int8: (-128, 127), torch.uint8: (0, 255)}


def _scalar(ctx, value, what: str) -> float:
    if isinstance(value, ir.Tensor):
        if value.data is None or value.data.size != 1:
            raise ctx.fail(f"the {what} of a quantize/dequantize must be known at conversion (a constant)")
        return value.data.reshape(()).item()
    return value


def _params(ctx, scale, zero_point, quant_min, quant_max, dtype, activation: bool) -> ir.Quantization:
    if dtype not in _RANGES:
        raise ctx.fail(f"quantization to {dtype} has no TFLite form here (int8 and uint8 do)")
    low, high = _RANGES[dtype]
    if activation and (int(quant_min), int(quant_max)) != (low, high):
        raise ctx.fail(f"an activation quantized to [{quant_min}, {quant_max}] (narrower than {dtype}'s "
                       f"[{low}, {high}]) has no QUANTIZE form")
    scale = float(_scalar(ctx, scale, "scale"))
    zero_point = int(_scalar(ctx, zero_point, "zero point"))
    if not scale > 0 or not np.isfinite(scale):
        raise ctx.fail(f"quantization scale {scale} is not a positive finite number")
    return ir.Quantization((scale,), (zero_point,))


@lowers(*QUANTIZE_PER_TENSOR)
def lower_quantize_per_tensor(ctx, node, x, scale, zero_point, quant_min, quant_max, dtype) -> ir.Tensor:
    """quantized_decomposed::quantize_per_tensor(Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype) -> Tensor

    QUANTIZE: round(x / scale) + zero_point, clamped to the type's range; the output carries the parameters."""
    params = _params(ctx, scale, zero_point, quant_min, quant_max, dtype, activation=True)
    shape, _ = out_meta(node)
    out = ctx.emit("QUANTIZE", [x], shape, np.dtype(str(dtype).removeprefix("torch.")))
    out.quantization = params
    return out


@lowers(*DEQUANTIZE_PER_TENSOR)
def lower_dequantize_per_tensor(ctx, node, x, scale, zero_point, quant_min, quant_max, dtype, out_dtype=None) -> ir.Tensor:
    """quantized_decomposed::dequantize_per_tensor(Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None) -> Tensor

    DEQUANTIZE: (q - zero_point) * scale. A constant int8 tensor (a weight quantized at conversion) gets the
    parameters here and stays int8 in the file."""
    params = _params(ctx, scale, zero_point, quant_min, quant_max, dtype, activation=x.data is None)
    return _dequantize(ctx, node, x, params)


@lowers(*DEQUANTIZE_PER_CHANNEL)
def lower_dequantize_per_channel(ctx, node, x, scales, zero_points, axis, quant_min, quant_max, dtype,
                                 out_dtype=None) -> ir.Tensor:
    """quantized_decomposed::dequantize_per_channel(Tensor input, Tensor scales, Tensor? zero_points, int axis, int quant_min, int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None) -> Tensor

    DEQUANTIZE of a per-channel quantized constant (a weight): one scale and zero point per slice along
    `axis`."""
    if x.data is None or not isinstance(scales, ir.Tensor) or scales.data is None:
        raise ctx.fail("per-channel dequantize is lowered for constant weights with constant scales only")
    if dtype not in _RANGES:
        raise ctx.fail(f"quantization to {dtype} has no TFLite form here (int8 and uint8 do)")
    zps = zero_points.data if isinstance(zero_points, ir.Tensor) else np.zeros_like(scales.data)
    axis = int(axis) % x.rank
    params = ir.Quantization(tuple(float(s) for s in scales.data.reshape(-1)),
                             tuple(int(z) for z in np.asarray(zps).reshape(-1)), axis)
    return _dequantize(ctx, node, x, params)


def _dequantize(ctx, node, x: ir.Tensor, params: ir.Quantization) -> ir.Tensor:
    if x.data is not None:
        x = ir.Tensor(ctx._name("quantized"), x.shape, x.dtype, x.data, quantization=params)
    elif x.quantization is None:
        raise ctx.fail("dequantizing an integer tensor that no quantize node made (its scale and zero point are "
                       "not known to the runtime)")
    elif (x.quantization.scale, x.quantization.zero_point) != (params.scale, params.zero_point):
        raise ctx.fail(f"dequantizing with scale/zero point {params.scale}/{params.zero_point} a tensor quantized "
                       f"with {x.quantization.scale}/{x.quantization.zero_point}")
    shape, _ = out_meta(node)
    return ctx.emit("DEQUANTIZE", [x], shape, np.float32)
