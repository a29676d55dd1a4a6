"""ONNX convolution and pooling: Conv and ConvTranspose through aten.convolution (explicit pads, SAME auto
padding, asymmetric and output_shape crops), MaxPool / AveragePool through the 2-D ATen pools where TFLite's
kernels take them and `pool.pool_by_taps` elsewhere (other ranks, dilations, asymmetric average pads, indices),
LpPool, the global pools, and CausalConvWithState."""

from __future__ import annotations

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.aten import pool
from litert_torch.lower.onnx.registry import aten_fn, onnx_op, operand, out_shape, sub, tensor
from litert_torch.symbolic import all_static

aten = torch.ops.aten


def _pads(ctx, node, x, attrs, kernel, strides, dilations):
    """Symmetric (begin, end) pads per spatial axis; an asymmetric pad becomes an explicit zero PAD first."""
    spatial = x.rank - 2
    auto = attrs.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for i in range(spatial):
            size = x.shape[2 + i]
            out = -(-size // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size, 0)
            small, big = total // 2, total - total // 2
            pads.append((small, big) if auto == "SAME_UPPER" else (big, small))
    elif auto == "VALID":
        pads = [(0, 0)] * spatial
    else:
        flat = list(attrs.get("pads", [0] * (2 * spatial)))
        pads = [(flat[i], flat[i + spatial]) for i in range(spatial)]
    return pads


def _explicit_pad(ctx, node, x, pads, value=0.0):
    if all(b == e for b, e in pads):
        return x, [b for b, _ in pads]
    torch_pad = []
    for b, e in reversed(pads):
        torch_pad += [b, e]
    shape = list(x.shape[:2]) + [x.shape[2 + i] + b + e for i, (b, e) in enumerate(pads)]
    y = aten_fn(aten.constant_pad_nd.default)(ctx, sub(node, shape, x.dtype), x, torch_pad, value)
    return y, [0] * len(pads)


def _conv_operands(inputs, attrs):
    """(x, w, bias or None, spatial rank, kernel, strides, dilations) of a Conv or ConvTranspose node."""
    x, w = inputs[0], inputs[1]
    spatial = x.rank - 2
    return (x, w, inputs[2] if len(inputs) > 2 else None, spatial, list(w.shape[2:]),
            list(attrs.get("strides", [1] * spatial)), list(attrs.get("dilations", [1] * spatial)))


@onnx_op("Conv")
def conv(ctx, node, inputs, attrs) -> ir.Tensor:
    """Conv (opsets 13-28).

    as aten.convolution (1-D, 2-D, 3-D; groups; pads, SAME auto-padding; an asymmetric pad is an explicit PAD)."""
    x, w, b, spatial, kernel, strides, dilations = _conv_operands(inputs, attrs)
    x, padding = _explicit_pad(ctx, node, x, _pads(ctx, node, x, attrs, kernel, strides, dilations))
    return aten_fn(aten.convolution.default)(ctx, node, x, w, b, strides, padding, dilations, False,
                                             [0] * spatial, attrs.get("group", 1))


def _transposed_pads(ctx, x, attrs, kernel, strides, dilations, output_padding) -> list[tuple[int, int]]:
    """(begin, end) crop of the full transposed-convolution output per spatial axis, as ONNX defines it: the
    `pads`, or from `output_shape` / SAME auto padding the total split with the larger half at the start
    (at the end for SAME_UPPER)."""
    spatial = x.rank - 2
    auto = attrs.get("auto_pad", "NOTSET")
    target = list(attrs.get("output_shape", []))[-spatial:] if attrs.get("output_shape") else None
    if target is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        target = [size * s for size, s in zip(x.shape[2:], strides)]
    if target is None:
        if auto == "VALID":
            return [(0, 0)] * spatial
        flat = list(attrs.get("pads", [0] * (2 * spatial)))
        return [(flat[i], flat[i + spatial]) for i in range(spatial)]
    pads = []
    for size, k, s, d, extra, want in zip(x.shape[2:], kernel, strides, dilations, output_padding, target):
        # an output larger than the full one (by less than a stride) is zero-extended at the end, as ONNX
        # Runtime computes; by more, no input of this size gives it
        total = s * (size - 1) + extra + (k - 1) * d + 1 - want
        if total <= -s:
            raise ctx.fail(f"ConvTranspose output_shape {target} does not follow from an input of spatial "
                                f"size {list(x.shape[2:])} with strides {strides}")
        total = max(total, 0)
        half = total // 2
        pads.append((half, total - half) if auto == "SAME_UPPER" else (total - half, half))
    return pads


@onnx_op("ConvTranspose")
def conv_transpose(ctx, node, inputs, attrs) -> ir.Tensor:
    """ConvTranspose (opsets 13-28).

    as aten.convolution transposed (pads, output_padding); asymmetric pads, `output_shape` and SAME auto
    padding as the full transposed convolution cropped (or zero-extended) to the output, then the bias."""
    x, w, b, spatial, kernel, strides, dilations = _conv_operands(inputs, attrs)
    output_padding = list(attrs.get("output_padding", [0] * spatial))
    groups = attrs.get("group", 1)
    pads = _transposed_pads(ctx, x, attrs, kernel, strides, dilations, output_padding)
    if any(p < 0 or e < 0 for p, e in pads):
        raise ctx.fail(f"ConvTranspose pads {pads} must not be negative")
    if all(p == e for p, e in pads):
        return aten_fn(aten.convolution.default)(ctx, node, x, w, b, strides, [p for p, _ in pads], dilations, True,
                                                 output_padding, groups)
    out = out_shape(node)
    if not all_static([*x.shape[2:], *out[2:]]):
        raise ctx.fail("ConvTranspose with asymmetric pads over dynamic sizes has no lowering")
    full = [s * (size - 1) + (k - 1) * d + 1 for size, k, s, d in zip(x.shape[2:], kernel, strides, dilations)]
    y = aten_fn(aten.convolution.default)(ctx, sub(node, (*out[:2], *full), x.dtype), x, w, None, strides,
                                          [0] * spatial, dilations, True, [0] * spatial, groups)
    after = [max(0, p + o - f) for (p, _), o, f in zip(pads, out[2:], full)]
    if any(after):  # output_padding, or an output_shape past the full output: zeros at the end
        padded = (*out[:2], *[f + a for f, a in zip(full, after)])
        paddings = np.array([[0, 0], [0, 0], *[(0, a) for a in after]], np.int32)
        y = ctx.emit("PAD", [y, ctx.const(paddings, name="paddings")], padded, y.dtype)
    y = ctx.slice(y, [0, 0] + [p for p, _ in pads], list(out))
    if b is not None:
        y = ctx.emit("ADD", [y, ctx.reshape(b, (1, b.shape[0]) + (1,) * spatial)], like=y,
                     fused_activation_function="NONE")
    return y


def _pool_window(ctx, node, x, attrs):
    """(x, kernel, strides, symmetric pads) of a pooling node. Asymmetric pads (SAME_UPPER / SAME_LOWER) of a
    MaxPool become an explicit PAD with -inf first; of an AveragePool they are refused."""
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides", [1] * len(kernel)))
    pads = _pads(ctx, node, x, attrs, kernel, strides, list(attrs.get("dilations", [1] * len(kernel))))
    if any(b != e for b, e in pads):
        if node.op_type != "MaxPool" or x.rank != 4:
            raise ctx.fail(f"{node.op_type} with asymmetric pads has no lowering yet")
        x, symmetric = _explicit_pad(ctx, node, x, pads, float("-inf"))
        return x, kernel, strides, symmetric
    return x, kernel, strides, [b for b, _ in pads]


def _pool(ctx, node, x, attrs, lower_2d):
    """A 1-D or 2-D pooling node through the 2-D ATen lowering (a 1-D one over a unit height)."""
    x, kernel, strides, pads = _pool_window(ctx, node, x, attrs)
    dilations = list(attrs.get("dilations", [1] * len(kernel)))
    if x.rank == 4:
        return lower_2d(sub(node, out_shape(node), x.dtype), x, kernel, strides, pads, dilations)
    if x.rank != 3:
        raise ctx.fail(f"{node.op_type} over {x.rank - 2} spatial axes has no lowering yet (1-D and 2-D do)")
    n, c, length = x.shape
    out = out_shape(node)
    y = lower_2d(sub(node, (n, c, 1, out[2]), x.dtype), ctx.reshape(x, [n, c, 1, length]), [1] + kernel,
                 [1] + strides, [0] + pads, [1] + dilations)
    return ctx.reshape(y, list(out))


def _check_window_count(ctx, node, x, attrs):
    """ceil_mode: a window that would start in the right padding is dropped (ONNX's definition, as its reference
    and ONNX Runtime compute); onnx's shape inference keeps it. Refused where the two disagree."""
    if not attrs.get("ceil_mode", 0):
        return
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides", [1] * len(kernel)))
    dilations = list(attrs.get("dilations", [1] * len(kernel)))
    pads = _pads(ctx, node, x, attrs, kernel, strides, dilations)
    for axis, (size, k, s, d, (b, e), declared) in enumerate(
            zip(x.shape[2:], kernel, strides, dilations, pads, out_shape(node)[2:])):
        if not isinstance(size, int) or not isinstance(declared, int):
            continue
        count = -(-(size + b + e - d * (k - 1) - 1) // s) + 1
        if (count - 1) * s >= size + b:
            count -= 1
        if count != declared:
            raise ctx.fail(f"{node.op_type} with ceil_mode: the output is declared with {declared} windows along "
                           f"spatial axis {axis}, but its last window starts in the padding and ONNX drops it "
                           f"({count}); give the model an output shape of {count}")


def _by_taps(ctx, node, x, attrs, kind, **options) -> ir.Tensor | tuple[ir.Tensor, ir.Tensor]:
    """A pooling node through `pool.pool_by_taps` (any rank, dilations, asymmetric pads, indices)."""
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides", [1] * len(kernel)))
    dilations = list(attrs.get("dilations", [1] * len(kernel)))
    pads = _pads(ctx, node, x, attrs, kernel, strides, dilations)
    return pool.pool_by_taps(ctx, x, list(out_shape(node)[2:]), kernel, strides, dilations, pads, kind, **options)


def _needs_taps(node, x, attrs) -> bool:
    """Pooling the 2-D TFLite kernels cannot do: not 1-D or 2-D, dilated, or (averaging) asymmetrically padded."""
    kernel = list(attrs["kernel_shape"])
    if x.rank not in (3, 4) or any(d != 1 for d in attrs.get("dilations", [])):
        return True
    if node.op_type == "AveragePool":
        strides = list(attrs.get("strides", [1] * len(kernel)))
        return any(b != e for b, e in _pads(None, node, x, attrs, kernel, strides, [1] * len(kernel)))
    return False


@onnx_op("MaxPool")
def max_pool(ctx, node, inputs, attrs) -> ir.Tensor | tuple[ir.Tensor, ir.Tensor]:
    """MaxPool (opsets 13-28).

    as aten.max_pool2d (1-D and 2-D; pads, ceil_mode); other ranks, dilations and the indices output as
    the MAXIMUM of one strided slice per kernel tap."""
    x = inputs[0]
    _check_window_count(ctx, node, x, attrs)
    if 1 in node.used:
        order = "F" if attrs.get("storage_order", 0) else "C"
        return _by_taps(ctx, node, x, attrs, "max", indices="flat", order=order)
    if _needs_taps(node, x, attrs):
        return _by_taps(ctx, node, x, attrs, "max")
    ceil_mode = bool(attrs.get("ceil_mode", 0))
    return _pool(ctx, node, x, attrs, lambda n, x, k, s, p, d: aten_fn(aten.max_pool2d.default)(
        ctx, n, x, k, s, p, d, ceil_mode))


@onnx_op("AveragePool")
def avg_pool(ctx, node, inputs, attrs) -> ir.Tensor | tuple[ir.Tensor, ir.Tensor]:
    """AveragePool (opsets 13-28).

    as aten.avg_pool2d (1-D and 2-D; pads, ceil_mode, count_include_pad); other ranks, dilations and
    asymmetric pads as the sum of one strided slice per kernel tap over the count ONNX divides by."""
    x = inputs[0]
    _check_window_count(ctx, node, x, attrs)
    include = bool(attrs.get("count_include_pad", 0))
    if _needs_taps(node, x, attrs):
        return _by_taps(ctx, node, x, attrs, "avg", count_include_pad=include)
    ceil_mode = bool(attrs.get("ceil_mode", 0))
    return _pool(ctx, node, x, attrs, lambda n, x, k, s, p, d: aten_fn(aten.avg_pool2d.default)(
        ctx, n, x, k, s, p, ceil_mode, include))


@onnx_op("LpPool")
def lp_pool(ctx, node, inputs, attrs) -> ir.Tensor:
    """LpPool (opsets 13-28).

    (sum of |x|^p over each window)^(1/p): |x|^p (MUL for p = 2, else POW), the window sums as one strided
    slice per kernel tap, then SQRT or POW 1/p."""
    x = inputs[0]
    if x.dtype.kind != "f":
        raise ctx.fail("LpPool of integers is not defined")
    _check_window_count(ctx, node, x, attrs)
    p = float(attrs.get("p", 2))
    if p <= 0:
        raise ctx.fail(f"LpPool with p = {p} has no lowering (p must be positive)")
    magnitude = ctx.emit("ABS", [x], like=x)
    powered = (ctx.emit("MUL", [magnitude, magnitude], like=x, fused_activation_function="NONE") if p == 2
               else ctx.emit("POW", [magnitude, ctx.scalar_like(p, x)], like=x))
    total = _by_taps(ctx, node, powered, attrs, "sum")
    if p == 2:
        return ctx.emit("SQRT", [total], like=total)
    return ctx.emit("POW", [total, ctx.scalar_like(1.0 / p, total)], like=total)


@onnx_op("GlobalAveragePool")
def global_avg_pool(ctx, node, inputs, attrs) -> ir.Tensor:
    """GlobalAveragePool (opsets 13-28).

    as aten.mean over the spatial axes, keeping them."""
    x = inputs[0]
    return aten_fn(aten.mean.dim)(ctx, node, x, list(range(2, x.rank)), True)


@onnx_op("GlobalMaxPool")
def global_max_pool(ctx, node, inputs, attrs) -> ir.Tensor:
    """GlobalMaxPool (opsets 13-28).

    as aten.amax over the spatial axes, keeping them."""
    x = inputs[0]
    return aten_fn(aten.amax.default)(ctx, node, x, list(range(2, x.rank)), True)


@onnx_op("CausalConvWithState")
def causal_conv_with_state(ctx, node, inputs, attrs) -> tuple[ir.Tensor, ir.Tensor | None]:
    """CausalConvWithState (opsets 27-28).

    The past state (zeros when absent) and the input joined along the length, a depthwise 1-D convolution
    over them without padding (aten.convolution), an optional SiLU; present_state is the joined sequence's last
    k - 1 positions."""
    x, w = inputs[0], operand(ctx, inputs[1])
    b = tensor(ctx, inputs[2]) if len(inputs) > 2 else None
    past = tensor(ctx, inputs[3]) if len(inputs) > 3 else None
    activation = attrs.get("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise ctx.fail(f"CausalConvWithState activation {activation!r} is not one of 'none', 'silu', 'swish'")
    if x.rank != 3 or w.rank != 3 or w.shape[0] != x.shape[1] or w.shape[1] != 1:
        raise ctx.fail(f"CausalConvWithState of an input {list(x.shape)} with a weight {list(w.shape)} (it takes "
                       "[batch, channels, length] and [channels, 1, k])")
    n, c, length = x.shape
    k = int(w.shape[2])
    if not all_static([length]) and k > 1:
        raise ctx.fail("CausalConvWithState over a dynamic length has no lowering")
    if past is None:
        joined = ctx.emit("PAD", [x, ctx.const(np.array([[0, 0], [0, 0], [k - 1, 0]], np.int32), name="paddings")],
                          (n, c, length + k - 1), x.dtype) if k > 1 else x
    else:
        if tuple(past.shape[1:]) != (c, k - 1):
            raise ctx.fail(f"CausalConvWithState past_state {list(past.shape)} for {c} channels and a kernel of {k}")
        joined = ctx.emit("CONCATENATION", [past, x], (n, c, length + k - 1), x.dtype, axis=2,
                          fused_activation_function="NONE") if k > 1 else x
    y = aten_fn(aten.convolution.default)(ctx, sub(node, (n, c, length), x.dtype), joined, w, b, [1], [0], [1],
                                          False, [0], c)
    if activation != "none":
        y = ctx.emit("MUL", [y, ctx.emit("LOGISTIC", [y], like=y)], like=y)
    if 1 not in node.used:
        return y, None
    present = ctx.slice(joined, [0, 0, length], [n, c, k - 1]) if k > 1 else ctx.empty((n, c, 0), x.dtype)
    return y, present
