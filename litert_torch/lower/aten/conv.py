"""Convolution lowerings. TFLite convolves in NHWC, so each lowering wraps itself in transposes
(NCHW -> NHWC before, NHWC -> NCHW after); the layout pass cancels them between neighbouring ops."""

from __future__ import annotations

import math

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.common.registry import LoweringContext, lowers, out_meta
from litert_torch.symbolic import DynamicSizeError, Sym, all_static, is_static, same_size, smax

aten = torch.ops.aten

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)


def pair(value, rank: int = 2) -> list[int]:
    if isinstance(value, int):
        return [value] * rank
    value = [int(v) for v in value]
    return value * rank if len(value) == 1 else value


def tflite_padding(size, out, kernel: int, stride: int, pad: int) -> str | None:
    """'VALID' or 'SAME' when TFLite's padding rule reproduces PyTorch's symmetric `pad` exactly, else None.

    `kernel` is the effective (dilated) kernel extent. SAME pads (total // 2) before and the rest after, where
    total = (out - 1) * stride + kernel - size; PyTorch pads `pad` before and uses what it needs after. A
    dynamic `size` (a Sym) takes a mode only when the rule holds at every size in its range.
    """
    if not is_static(size) or not is_static(out):
        if pad == 0 and same_size(out, (size - kernel) // stride + 1):
            return "VALID"
        total = smax((out - 1) * stride + kernel - size, 0)
        if same_size(out, (size + stride - 1) // stride) and same_size(total // 2, pad):
            return "SAME"
        return None
    if pad == 0 and out == (size - kernel) // stride + 1:
        return "VALID"
    total = max((out - 1) * stride + kernel - size, 0)
    if out == math.ceil(size / stride) and total // 2 == pad:
        return "SAME"
    return None


def explicit_padding(size, out, kernel: int, stride: int, pad: int) -> tuple[int, int]:
    """(before, after) padding after which a VALID window of `kernel` gives exactly `out` positions. For a
    dynamic `size`, `pad` on both sides where that gives `out` at every size (PyTorch's own rule without
    ceil_mode), else DynamicSizeError."""
    if not is_static(size) or not is_static(out):
        if same_size(out, (size + 2 * pad - kernel) // stride + 1):
            return pad, pad
        after = (out - 1) * stride + kernel - size - pad
        raise after.needed("needed as the padding after the input") if isinstance(after, Sym) else \
            DynamicSizeError(f"the output size {out} needs padding that changes with the input size")
    after = max((out - 1) * stride + kernel - size - pad, 0)
    return pad, after


def conv2d_nhwc(
    ctx: LoweringContext, x: ir.Tensor, weight: ir.Tensor, bias: ir.Tensor | None, stride, padding, dilation,
    groups: int, out_nchw: tuple[int, ...],
) -> ir.Tensor:
    """CONV_2D or DEPTHWISE_CONV_2D on an NCHW input, returning NCHW."""
    y = conv2d_channels_last(ctx, ctx.transpose(x, TO_NHWC), weight, bias, stride, padding, dilation, groups,
                             out_nchw[2], out_nchw[3])
    return ctx.transpose(y, TO_NCHW)


def conv2d_channels_last(
    ctx: LoweringContext, xh: ir.Tensor, weight: ir.Tensor, bias: ir.Tensor | None, stride, padding, dilation,
    groups: int, out_h, out_w,
) -> ir.Tensor:
    """CONV_2D or DEPTHWISE_CONV_2D on an NHWC input with a PyTorch [c_out, c_in / groups, kh, kw] weight,
    returning NHWC."""
    n, h, w, c_in = xh.shape
    c_out, _, kh, kw = weight.shape
    keff = [dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1]
    modes = {tflite_padding(h, out_h, keff[0], stride[0], padding[0]),
             tflite_padding(w, out_w, keff[1], stride[1], padding[1])}
    if len(modes) == 1 and None not in modes:
        mode = modes.pop()
    else:
        pads = [explicit_padding(h, out_h, keff[0], stride[0], padding[0]),
                explicit_padding(w, out_w, keff[1], stride[1], padding[1])]
        shape = [n, h + sum(pads[0]), w + sum(pads[1]), c_in]
        xh = ctx.emit("PAD", [xh, ctx.const(np.array([[0, 0], *pads, [0, 0]], np.int32), name="paddings")],
                      shape, xh.dtype)
        mode = "VALID"
    if bias is None:
        bias = ctx.const(np.zeros([c_out], xh.dtype), name="bias")
    out_shape = [n, out_h, out_w, c_out]
    common = dict(padding=mode, stride_h=stride[0], stride_w=stride[1], dilation_h_factor=dilation[0],
                  dilation_w_factor=dilation[1], fused_activation_function="NONE")
    # A convolution of a single input channel is a depthwise one with a channel multiplier, which XNNPACK runs
    # several times faster than CONV_2D with one input channel.
    if groups == c_in and c_out % c_in == 0 and (groups > 1 or c_in == 1):
        # Depthwise filters are [1, kh, kw, c_out], channel c_out = c_in * multiplier + m.
        filt = ctx.reshape(ctx.transpose(weight, (1, 2, 3, 0)), [1, kh, kw, c_out])
        return ctx.emit("DEPTHWISE_CONV_2D", [xh, filt, bias], out_shape, xh.dtype, depth_multiplier=c_out // c_in,
                        **common)
    filt = ctx.transpose(weight, (0, 2, 3, 1))
    return ctx.emit("CONV_2D", [xh, filt, bias], out_shape, xh.dtype, **common)


def _depth_tap(ctx: LoweringContext, weight: ir.Tensor, i: int) -> ir.Tensor:
    """weight[:, :, i] of a 3-D convolution's [a, b, kd, kh, kw] weight, as [a, b, kh, kw]."""
    a, b, _, kh, kw = weight.shape
    if weight.data is not None:
        return ctx.const(np.ascontiguousarray(np.asarray(weight.data)[:, :, i]), weight.dtype, "depth_tap")
    return ctx.reshape(ctx.slice(weight, [0, 0, i, 0, 0], [a, b, 1, kh, kw]), [a, b, kh, kw])


def conv3d_by_depth_taps(ctx: LoweringContext, x, weight, bias, stride, padding, dilation, groups,
                         out_shape) -> ir.Tensor:
    """A 3-D convolution as one 2-D convolution per depth tap of the kernel, summed. Tap i reads the input
    depths i * dilation + o * stride (o = 0 .. out_depth - 1) of the depth-padded input: one strided slice,
    whose depths become images of the 2-D convolution. Groups, depthwise filters, strides, padding and
    dilation in height and width are the 2-D convolution's own, so every case runs on the kernels XNNPACK
    accelerates (LiteRT's CONV_3D takes neither groups nor anything but float32)."""
    n, c_in, d, h, w = x.shape
    c_out, _, kd, _, _ = weight.shape
    od, oh, ow = out_shape[2:]
    sd, dd, pd = stride[0], dilation[0], padding[0]
    if not all_static([d, od]):
        raise ctx.fail("3-D convolution over a dynamic depth has no lowering")
    xt = ctx.transpose(x, (0, 2, 3, 4, 1))  # NDHWC
    after = max((od - 1) * sd + (kd - 1) * dd + 1 - d - pd, 0)
    if pd or after:
        paddings = np.array([[0, 0], [pd, after], [0, 0], [0, 0], [0, 0]], np.int32)
        xt = ctx.emit("PAD", [xt, ctx.const(paddings, name="paddings")], [n, d + pd + after, h, w, c_in], x.dtype)
    total = None
    for i in range(kd):
        start = i * dd
        if sd == 1:
            piece = ctx.slice(xt, [0, start, 0, 0, 0], [n, od, h, w, c_in])
        else:
            piece = ctx.emit("STRIDED_SLICE", [xt, ctx.const(np.array([0, start, 0, 0, 0], np.int32), name="begin"),
                                               ctx.const(np.array([0, start + (od - 1) * sd + 1, 0, 0, 0], np.int32),
                                                         name="end"),
                                               ctx.const(np.array([1, sd, 1, 1, 1], np.int32), name="strides")],
                             [n, od, h, w, c_in], x.dtype, begin_mask=0b11101, end_mask=0b11101,
                             shrink_axis_mask=0, ellipsis_mask=0, new_axis_mask=0, offset=False)
        y = conv2d_channels_last(ctx, ctx.reshape(piece, [n * od, h, w, c_in]), _depth_tap(ctx, weight, i),
                                 bias if i == 0 else None, stride[1:], padding[1:], dilation[1:], groups, oh, ow)
        total = y if total is None else ctx.emit("ADD", [total, y], like=y, fused_activation_function="NONE")
    if total is None:
        raise ctx.fail("3-D convolution with a kernel of depth 0")
    return ctx.transpose(ctx.reshape(total, [n, od, oh, ow, c_out]), (0, 4, 1, 2, 3))


@lowers(aten.convolution.default)
def lower_convolution(ctx, node, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups) -> ir.Tensor:
    """convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor

    1-D, 2-D and 3-D convolution (stride, padding, dilation, groups, depthwise) as CONV_2D /
    DEPTHWISE_CONV_2D; transposed convolution as TRANSPOSE_CONV. A 1-D convolution runs as a 2-D one over a
    height of 1, a 3-D one as one 2-D convolution per depth tap of its kernel.

    Limits: a 3-D convolution's depth must be static; a transposed convolution with groups or dilation runs as
    one dense filter of up to MAX_DENSE_FILTER elements.
    """
    out_shape, _ = out_meta(node)
    spatial = x.rank - 2
    if x.rank != weight.rank or len(out_shape) != x.rank:
        raise ctx.fail(f"convolution of a rank-{x.rank} input with a rank-{weight.rank} weight (an unbatched "
                       "input) has no lowering")
    if transposed:
        return conv_transpose(ctx, x, weight, bias, stride, padding, dilation, output_padding, groups, out_shape)
    if isinstance(padding, str):
        raise ctx.fail(f"string padding {padding!r} should have been resolved by torch.export")
    if spatial == 2:
        return conv2d_nhwc(ctx, x, weight, bias, pair(stride), pair(padding), pair(dilation), groups, out_shape)
    if spatial == 1:
        n, c, length = x.shape
        x4 = ctx.reshape(x, [n, c, 1, length])
        w4 = ctx.reshape(weight, [weight.shape[0], weight.shape[1], 1, weight.shape[2]])
        y4 = conv2d_nhwc(ctx, x4, w4, bias, [1, pair(stride, 1)[0]], [0, pair(padding, 1)[0]],
                         [1, pair(dilation, 1)[0]], groups, (out_shape[0], out_shape[1], 1, out_shape[2]))
        return ctx.reshape(y4, out_shape)
    if spatial == 3:
        return conv3d_by_depth_taps(ctx, x, weight, bias, pair(stride, 3), pair(padding, 3), pair(dilation, 3),
                                    groups, out_shape)
    raise ctx.fail(f"{spatial}-D convolution has no lowering (1-D, 2-D and 3-D are supported)")


# The largest filter (elements) a grouped transposed convolution is expanded to (block diagonal).
MAX_DENSE_FILTER = 1 << 22


def _dense_transposed_filter(ctx: LoweringContext, weight: ir.Tensor, groups: int, dilation: list[int]) -> ir.Tensor:
    """TRANSPOSE_CONV has neither groups nor dilation: the same result comes from one dense filter, dilated by
    zeros between the taps (a transposed convolution with dilation d is one with that spread kernel) and, for
    groups, block diagonal (input channels of group i reach only the output channels of group i). A constant
    weight is rewritten at conversion; a run-time one in the model (zeros padded between the taps, the weight
    tiled across the groups and multiplied by the block-diagonal mask)."""
    c_in, c_out_group, kh, kw = weight.shape
    dh, dw = dilation
    c_out = c_out_group * groups
    spread = ((kh - 1) * dh + 1, (kw - 1) * dw + 1)
    size = c_in * c_out * spread[0] * spread[1]
    if size > MAX_DENSE_FILTER:
        raise ctx.fail(f"transposed convolution with groups={groups}, dilation={dilation}: its dense filter would "
                       f"hold {size} elements (the limit is {MAX_DENSE_FILTER})")
    per_group = c_in // groups
    if weight.data is not None:
        dense = np.zeros((c_in, c_out, *spread), weight.data.dtype)
        for g in range(groups):
            rows = slice(g * per_group, (g + 1) * per_group)
            cols = slice(g * c_out_group, (g + 1) * c_out_group)
            dense[rows, cols, ::dh, ::dw] = weight.data[rows]
        return ctx.const(dense, name="dense_filter")
    w = weight
    if (dh, dw) != (1, 1):
        # [c_in, c_out_g, kh, 1, kw, 1], zeros after each tap, then the trailing zeros cut off
        w = ctx.reshape(w, (c_in, c_out_group, kh, 1, kw, 1))
        paddings = np.array([[0, 0], [0, 0], [0, 0], [0, dh - 1], [0, 0], [0, dw - 1]], np.int32)
        w = ctx.emit("PAD", [w, ctx.const(paddings, name="paddings")], (c_in, c_out_group, kh, dh, kw, dw), w.dtype)
        w = ctx.reshape(w, (c_in, c_out_group, kh * dh, kw * dw))
        w = ctx.slice(w, [0, 0, 0, 0], [c_in, c_out_group, *spread])
    if groups > 1:
        w = ctx.emit("TILE", [w, ctx.const(np.array([1, groups, 1, 1], np.int32), name="multiples")],
                     (c_in, c_out, *spread), w.dtype)
        mask = (np.arange(c_in)[:, None] // per_group == np.arange(c_out)[None, :] // c_out_group)
        w = ctx.emit("MUL", [w, ctx.const(mask.astype(w.dtype).reshape(c_in, c_out, 1, 1), name="groups")],
                     like=w, fused_activation_function="NONE")
    return w


def conv_transpose(ctx: LoweringContext, x, weight, bias, stride, padding, dilation, output_padding, groups,
                   out_shape) -> ir.Tensor:
    """TRANSPOSE_CONV in NHWC. PyTorch's padding crops the full output (SAME when TFLite's rule crops the same
    rows, else VALID and a SLICE); output_padding beyond the crop becomes zero rows before the bias ADD."""
    spatial = x.rank - 2
    if spatial == 1:
        n, c, length = x.shape
        y4 = conv_transpose(ctx, ctx.reshape(x, [n, c, 1, length]),
                            ctx.reshape(weight, [weight.shape[0], weight.shape[1], 1, weight.shape[2]]), bias,
                            [1, pair(stride, 1)[0]], [0, pair(padding, 1)[0]], [1, pair(dilation, 1)[0]],
                            [0, pair(output_padding, 1)[0]], groups, (out_shape[0], out_shape[1], 1, out_shape[2]))
        return ctx.reshape(y4, out_shape)
    if spatial == 3:
        return conv_transpose3d_by_depth_taps(ctx, x, weight, bias, pair(stride, 3), pair(padding, 3),
                                              pair(dilation, 3), pair(output_padding, 3), groups, out_shape)
    if spatial != 2:
        raise ctx.fail(f"{spatial}-D transposed convolution has no lowering (1-D, 2-D and 3-D are supported)")
    stride, padding, dilation = pair(stride), pair(padding), pair(dilation)
    if groups != 1 or dilation != [1, 1]:
        weight = _dense_transposed_filter(ctx, weight, groups, dilation)
    n, c_in, h, w = x.shape
    _, c_out, kh, kw = weight.shape
    out_h, out_w = out_shape[2], out_shape[3]
    filt = ctx.transpose(weight, (1, 2, 3, 0))  # [c_in, c_out, kh, kw] -> [c_out, kh, kw, c_in]
    xh = ctx.transpose(x, TO_NHWC)
    sizes = [(h, out_h, kh, stride[0], padding[0]), (w, out_w, kw, stride[1], padding[1])]
    same = all(out == size * s and p == ((size - 1) * s + k - out) // 2 and (size - 1) * s + k >= out
               for size, out, k, s, p in sizes)
    options = dict(stride_h=stride[0], stride_w=stride[1], fused_activation_function="NONE")
    if same:
        y = ctx.emit("TRANSPOSE_CONV", [ctx.dims_tensor([n, out_h, out_w, c_out]), filt, xh, bias],
                     [n, out_h, out_w, c_out], x.dtype, padding="SAME", **options)
        return ctx.transpose(y, TO_NCHW)
    full = [(size - 1) * s + k for size, out, k, s, p in sizes]
    extra = [smax(p + out - f, 0) for (size, out, k, s, p), f in zip(sizes, full)]
    fused_bias = bias if not any(extra) else None
    y = ctx.emit("TRANSPOSE_CONV", [ctx.dims_tensor([n, *full, c_out]), filt, xh, fused_bias], [n, *full, c_out],
                 x.dtype, padding="VALID", **options)
    if any(extra):
        y = ctx.emit("PAD", [y, ctx.const(np.array([[0, 0], [0, extra[0]], [0, extra[1]], [0, 0]], np.int32),
                                          name="paddings")],
                     [n, full[0] + extra[0], full[1] + extra[1], c_out], x.dtype)
    if (y.shape[1], y.shape[2]) != (out_h, out_w):
        y = ctx.emit("SLICE", [y, ctx.const(np.array([0, padding[0], padding[1], 0], np.int32), name="begin"),
                               ctx.dims_tensor([n, out_h, out_w, c_out])],
                     [n, out_h, out_w, c_out], x.dtype)
    if bias is not None and fused_bias is None:
        y = ctx.emit("ADD", [y, bias], like=y)
    return ctx.transpose(y, TO_NCHW)


def conv_transpose3d_by_depth_taps(ctx: LoweringContext, x, weight, bias, stride, padding, dilation, output_padding,
                                   groups, out_shape) -> ir.Tensor:
    """A 3-D transposed convolution as one 2-D transposed convolution per depth tap of the kernel. Tap i
    spreads input depth j to output depth j * stride + i * dilation - padding: its 2-D result over all input
    depths is interleaved with stride - 1 zero depths (a PAD and a RESHAPE), shifted into place (a SLICE and a
    PAD) and summed with the other taps'. Depths no tap reaches (output_padding) stay zero before the bias."""
    n, c_in, d, h, w = x.shape
    _, c_out_group, kd, _, _ = weight.shape
    c_out = c_out_group * groups
    od, oh, ow = out_shape[2:]
    sd, dd, pd = stride[0], dilation[0], padding[0]
    if not all_static([d, od, oh, ow]):
        raise ctx.fail("3-D transposed convolution over dynamic sizes has no lowering")
    images = ctx.reshape(ctx.transpose(x, (0, 2, 1, 3, 4)), [n * d, c_in, h, w])
    plane = c_out * oh * ow
    total = None
    for i in range(kd):
        z = conv_transpose(ctx, images, _depth_tap(ctx, weight, i), None, stride[1:], padding[1:], dilation[1:],
                           output_padding[1:], groups, (n * d, c_out, oh, ow))
        z = ctx.reshape(z, [n, d, 1, plane])
        if sd > 1:
            z = ctx.emit("PAD", [z, ctx.const(np.array([[0, 0], [0, 0], [0, sd - 1], [0, 0]], np.int32),
                                              name="paddings")], [n, d, sd, plane], z.dtype)
        z = ctx.reshape(z, [n, d * sd, plane])
        shift = i * dd - pd  # output depth = position in z + shift
        front, skip = max(shift, 0), max(-shift, 0)
        take = min(d * sd - skip, od - front)
        if take <= 0:
            continue
        z = ctx.slice(z, [0, skip, 0], [n, take, plane])
        if front or od - front - take:
            z = ctx.emit("PAD", [z, ctx.const(np.array([[0, 0], [front, od - front - take], [0, 0]], np.int32),
                                              name="paddings")], [n, od, plane], z.dtype)
        total = z if total is None else ctx.emit("ADD", [total, z], like=z, fused_activation_function="NONE")
    if total is None:
        raise ctx.fail(f"3-D transposed convolution whose padding {pd} crops every depth the kernel reaches")
    y = ctx.reshape(total, [n, od, c_out, oh, ow])
    if bias is not None:
        y = ctx.emit("ADD", [y, ctx.reshape(bias, [1, 1, c_out, 1, 1])], like=y, fused_activation_function="NONE")
    return ctx.transpose(y, (0, 2, 1, 3, 4))
