"""Dense layers, matrix products, normalisation and softmax."""

from __future__ import annotations

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.common import exact
from litert_torch.lower.common.registry import LoweringContext, lowers, normalize_dim, out_meta
from litert_torch.symbolic import broadcast_shapes

aten = torch.ops.aten


# LiteRT's integer products are the quantized ones: an integer matrix product of plain integers computes its
# element products in one tensor, which is refused past this many elements
INTEGER_PRODUCT_LIMIT = 1 << 26


def _plain_integer(t: ir.Tensor) -> bool:
    return t.dtype.kind in "iub" and t.quantization is None


def _integer_product(ctx: LoweringContext, a: ir.Tensor, rows: ir.Tensor, out_shape, dtype) -> ir.Tensor:
    """a @ rows^T for plain integers, which no LiteRT matrix-product kernel takes (theirs are float or quantized
    int8/int16): a [..., M, K] and rows [..., N, K] as [..., M, 1, K] * [..., 1, N, K] (MUL, broadcast), summed
    over K (SUM). Exact, in int32 arithmetic (narrower integers are widened and the result cast back, which wraps
    as PyTorch's narrow integer products do)."""
    lead = broadcast_shapes(a.shape[:-2], rows.shape[:-2])
    m, n, k = a.shape[-2], rows.shape[-2], a.shape[-1]
    products = [*lead, m, n, k]
    if all(isinstance(d, int) for d in products) and int(np.prod(products)) > INTEGER_PRODUCT_LIMIT:
        raise ctx.fail(f"a matrix product of {dtype} values ({list(a.shape)} by {list(rows.shape)} rows) has no "
                       "LiteRT kernel, and computing it element-wise needs "
                       f"{int(np.prod(products)):,} products at once; compute it in float in the model")
    wide = np.dtype(np.int32) if dtype.itemsize < 4 else dtype
    a, rows = ctx.cast(a, wide), ctx.cast(rows, wide)
    left = ctx.reshape(a, [*a.shape[:-1], 1, k])
    right = ctx.reshape(rows, [*rows.shape[:-2], 1, n, k])
    prod = ctx.emit("MUL", [left, right], products, wide, fused_activation_function="NONE")
    y = ctx.emit("SUM", [prod, ctx.const(np.array([len(products) - 1], np.int32), name="axis")], products[:-1],
                 wide, keep_dims=False)
    return ctx.reshape(ctx.cast(y, dtype), out_shape)


def fully_connected(ctx: LoweringContext, x: ir.Tensor, weight: ir.Tensor, bias: ir.Tensor | None,
                    out_shape) -> ir.Tensor:
    """FULLY_CONNECTED with weights [out, in]; inputs of rank > 2 keep their leading dims. Plain integers take
    `_integer_product`; an empty contraction (in = 0) gives the bias alone."""
    empty = isinstance(x.shape[-1], int) and x.shape[-1] == 0
    if empty or _plain_integer(x):
        if empty:
            y = ctx.emit("FILL", [ctx.dims_tensor(out_shape), ctx.const(np.array(0, x.dtype), name="zero")],
                         out_shape, x.dtype)
        else:
            y = _integer_product(ctx, ctx.reshape(x, [1, *x.shape]) if x.rank == 1 else x, ctx.cast(weight, x.dtype),
                                 out_shape, x.dtype)
        return y if bias is None else ctx.emit("ADD", [y, ctx.cast(bias, x.dtype)], out_shape, x.dtype,
                                               fused_activation_function="NONE")
    if x.rank == 1:
        y = ctx.emit("FULLY_CONNECTED", [ctx.reshape(x, [1, x.shape[0]]), weight, bias], [1, weight.shape[0]],
                     x.dtype, keep_num_dims=False, fused_activation_function="NONE")
        return ctx.reshape(y, out_shape)
    return ctx.emit("FULLY_CONNECTED", [x, weight, bias], out_shape, x.dtype, keep_num_dims=x.rank > 2,
                    fused_activation_function="NONE")


@lowers(aten.linear.default)
def lower_linear(ctx, node, x, weight, bias=None) -> ir.Tensor:
    """linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor

    FULLY_CONNECTED, the weight used as stored ([out, in])."""
    out_shape, _ = out_meta(node)
    return fully_connected(ctx, x, weight, bias, out_shape)


@lowers(aten.bilinear.default)
def lower_bilinear(ctx, node, x1, x2, weight, bias=None) -> ir.Tensor:
    """bilinear(Tensor input1, Tensor input2, Tensor weight, Tensor? bias=None) -> Tensor

    nn.Bilinear, y[..., o] = sum_ij x1[..., i] W[o, i, j] x2[..., j] + b[o]: one FULLY_CONNECTED of x1 with W
    laid out as [(o, j), i] gives x1 W for every (o, j); that times x2 (MUL, broadcast over o) and summed over j
    (SUM) is y. The product is O * I * J per row, as PyTorch computes it, and nothing of size I * J per row is
    made. A weight computed at run time is transposed and reshaped the same way (TRANSPOSE, RESHAPE)."""
    out_shape, dtype = out_meta(node)
    o, i, j = weight.shape
    lead = list(x1.shape[:-1])
    if weight.is_constant:
        w = ctx.const(np.ascontiguousarray(weight.data.transpose(0, 2, 1)).reshape(o * j, i), name="bilinear_w")
    else:
        w = ctx.reshape(ctx.transpose(weight, (0, 2, 1)), [o * j, i])
    rows = fully_connected(ctx, x1, w, None, [*lead, o * j])
    rows = ctx.reshape(rows, [*lead, o, j])
    x2b = ctx.reshape(x2, [*x2.shape[:-1], 1, j])
    prod = ctx.emit("MUL", [rows, x2b], [*broadcast_shapes(rows.shape, x2b.shape)], dtype,
                    fused_activation_function="NONE")
    y = ctx.emit("SUM", [prod, ctx.const(np.array([prod.rank - 1], np.int32), name="axis")], out_shape, dtype,
                 keep_dims=False)
    if bias is None:
        return y
    return ctx.emit("ADD", [y, ctx.cast(bias, dtype)], out_shape, dtype, fused_activation_function="NONE")


def batch_matmul(ctx: LoweringContext, a: ir.Tensor, b: ir.Tensor, out_shape) -> ir.Tensor:
    """a @ b for operands of rank >= 2, broadcasting batch dims. A constant 2-D right operand becomes
    FULLY_CONNECTED (its transposed weights are folded at conversion time), which XNNPACK runs fastest. A
    constant right operand that is another constant with its last two axes swapped (`w.transpose(-1, -2)` of
    stored [.., out, in] weights) is read as stored, with adj_y: no transposed copy of the weights.

    An empty contraction (K = 0) gives zeros (FILL), which the product kernels cannot be asked for; plain
    integers take `_integer_product`."""
    if isinstance(a.shape[-1], int) and a.shape[-1] == 0:
        return ctx.emit("FILL", [ctx.dims_tensor(out_shape), ctx.const(np.array(0, a.dtype), name="zero")],
                        out_shape, a.dtype)
    if _plain_integer(a):
        return _integer_product(ctx, a, ctx.transpose(b, tuple(range(b.rank - 2)) + (b.rank - 1, b.rank - 2)),
                                out_shape, a.dtype)
    if b.is_constant and b.rank == 2:
        return fully_connected(ctx, a, ctx.transpose(b, (1, 0)), None, out_shape)
    stored = ctx.untransposed(b) if b.is_constant else None
    return ctx.emit("BATCH_MATMUL", [a, stored if stored is not None else b], out_shape, a.dtype, adj_x=False,
                    adj_y=stored is not None, asymmetric_quantize_inputs=False)


@lowers(aten.mm.default, aten.bmm.default)
def lower_mm(ctx, node, a, b) -> ir.Tensor:
    """mm(Tensor self, Tensor mat2) -> Tensor

    BATCH_MATMUL, or FULLY_CONNECTED when the right operand is a constant matrix."""
    out_shape, _ = out_meta(node)
    return batch_matmul(ctx, a, b, out_shape)


@lowers(aten.matmul.default)
def lower_matmul(ctx, node, a, b) -> ir.Tensor:
    """matmul(Tensor self, Tensor other) -> Tensor

    torch.matmul, including 1-D operands (promoted to matrices, then the added dim removed)."""
    out_shape, _ = out_meta(node)
    a2 = ctx.reshape(a, [1, a.shape[0]]) if a.rank == 1 else a
    b2 = ctx.reshape(b, [b.shape[0], 1]) if b.rank == 1 else b
    full = list(broadcast_shapes(a2.shape[:-2], b2.shape[:-2])) + [a2.shape[-2], b2.shape[-1]]
    return ctx.reshape(batch_matmul(ctx, a2, b2, full), out_shape)


@lowers(aten.addmm.default)
def lower_addmm(ctx, node, bias, a, b, beta=1, alpha=1) -> ir.Tensor:
    """addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor

    beta * bias + alpha * (a @ b); with a constant b and 1-D bias this is one FULLY_CONNECTED."""
    out_shape, dtype = out_meta(node)
    if b.is_constant and beta == 1 and alpha == 1 and bias.rank == 1 and bias.shape[0] == out_shape[-1]:
        return fully_connected(ctx, a, ctx.transpose(b, (1, 0)), ctx.cast(bias, dtype), out_shape)
    return _scaled_sum(ctx, batch_matmul(ctx, a, b, out_shape), bias, alpha, beta, out_shape, dtype)


def _scaled_sum(ctx: LoweringContext, prod: ir.Tensor, bias: ir.Tensor, alpha, beta, out_shape, dtype) -> ir.Tensor:
    """beta * bias + alpha * prod, broadcasting; with beta = 0 the bias is not read (NaN in it included), as in
    PyTorch."""
    if alpha != 1:
        prod = ctx.emit("MUL", [prod, ctx.scalar_like(alpha, prod)], like=prod)
    if beta == 0:
        return ctx.reshape(prod, out_shape) if tuple(prod.shape) != tuple(out_shape) else prod
    bias = ctx.cast(bias, dtype)
    if beta != 1:
        bias = ctx.emit("MUL", [bias, ctx.scalar_like(beta, bias)], like=bias)
    return ctx.emit("ADD", [prod, bias], out_shape, dtype)


@lowers(aten.addbmm.default)
def lower_addbmm(ctx, node, bias, b1, b2, beta=1, alpha=1) -> ir.Tensor:
    """addbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor

    beta * bias + alpha * sum over the batch of b1 @ b2: BATCH_MATMUL, SUM over axis 0, MUL, ADD."""
    out_shape, dtype = out_meta(node)
    batched = batch_matmul(ctx, b1, b2, (b1.shape[0], b1.shape[1], b2.shape[2]))
    total = ctx.emit("SUM", [batched, ctx.const(np.array([0], np.int32), name="axes")], tuple(batched.shape[1:]),
                     batched.dtype, keep_dims=False)
    return _scaled_sum(ctx, total, bias, alpha, beta, out_shape, dtype)


@lowers(aten.addmv.default)
def lower_addmv(ctx, node, bias, mat, vec, beta=1, alpha=1) -> ir.Tensor:
    """addmv(Tensor self, Tensor mat, Tensor vec, *, Scalar beta=1, Scalar alpha=1) -> Tensor

    beta * bias + alpha * (mat @ vec): the vector as a one-column matrix through the matmul lowering."""
    out_shape, dtype = out_meta(node)
    column = batch_matmul(ctx, mat, ctx.reshape(vec, (vec.shape[0], 1)), (mat.shape[0], 1))
    return _scaled_sum(ctx, ctx.reshape(column, (mat.shape[0],)), bias, alpha, beta, out_shape, dtype)


@lowers(aten._native_batch_norm_legit_no_training.default)
def lower_batch_norm(ctx, node, x, weight, bias, running_mean, running_var, momentum, eps) -> tuple[ir.Tensor, ir.Tensor | None, ir.Tensor | None]:
    """_native_batch_norm_legit_no_training(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor)

    Eval-mode batch norm as x * scale + shift per channel: constants (folded into a preceding conv or linear
    by the fold_affine pass) when the statistics and affine weights are, else computed in the model."""
    if not all(t is None or t.is_constant for t in (running_mean, running_var, weight, bias)):
        out = _batch_norm_run_time_stats(ctx, x, weight, bias, running_mean, running_var, eps)
        return (out, *_no_saved_stats(ctx, node, x))
    mean = running_mean.data.astype(np.float64)
    inv_std = 1.0 / np.sqrt(running_var.data.astype(np.float64) + eps)
    scale = inv_std * (weight.data.astype(np.float64) if weight is not None else 1.0)
    shift = (bias.data.astype(np.float64) if bias is not None else 0.0) - mean * scale
    channel_shape = [x.shape[1]] + [1] * (x.rank - 2)
    scaled = ctx.emit("MUL", [x, ctx.const(scale.reshape(channel_shape).astype(x.dtype), name="bn_scale")], like=x)
    out = ctx.emit("ADD", [scaled, ctx.const(shift.reshape(channel_shape).astype(x.dtype), name="bn_shift")],
                   like=x)
    return (out, *_no_saved_stats(ctx, node, x))


def _no_saved_stats(ctx, node, x):
    """Eval mode saves no statistics: PyTorch returns empty tensors where train mode returns mean and rstd."""
    return tuple(ctx.empty([0], x.dtype) if i in node.used else None for i in (1, 2))


def _per_channel(ctx: LoweringContext, t: ir.Tensor, x: ir.Tensor) -> ir.Tensor:
    """A [C] tensor as [C, 1, ...], broadcasting against x's [N, C, *spatial] (x's dtype)."""
    return ctx.reshape(ctx.cast(t, x.dtype), [x.shape[1]] + [1] * (x.rank - 2))


def _batch_norm_run_time_stats(ctx, x, weight, bias, running_mean, running_var, eps):
    """(x - mean) * rstd * weight + bias with the statistics read when the model runs."""
    var = _per_channel(ctx, running_var, x)
    rstd = exact.rsqrt(ctx, ctx.emit("ADD", [var, ctx.scalar_like(eps, var)], like=var))
    scale = rstd if weight is None else ctx.emit("MUL", [rstd, _per_channel(ctx, weight, x)], like=rstd)
    centred = ctx.emit("SUB", [x, _per_channel(ctx, running_mean, x)], like=x)
    out = ctx.emit("MUL", [centred, scale], like=x)
    return out if bias is None else ctx.emit("ADD", [out, _per_channel(ctx, bias, x)], like=x)


def _batch_statistics(ctx, node, x, weight, bias, eps):
    """Train-mode batch norm: (out, mean [C], rstd [C], the batch's biased variance [1, C, 1...], count), the
    statistics over the batch and spatial axes of each channel."""
    if x.rank < 2:
        raise ctx.fail(f"batch norm of a rank-{x.rank} input (it takes [N, C, ...])")
    ctx.warn_once("train-mode batch norm", "batch norm in train mode (first at %s) normalises by each batch's own "
                  "statistics, as PyTorch does in training; for inference call model.eval() before converting",
                  node.name)
    stages = [list(range(2, x.rank)), [0]] if x.rank > 2 else [[0]]
    y, mean, var, rstd = normalize_with_moments(ctx, x, stages, eps)
    c = x.shape[1]
    channel = [1, c] + [1] * (x.rank - 2)
    out = y
    if weight is not None:
        out = ctx.emit("MUL", [out, ctx.reshape(ctx.cast(weight, x.dtype), channel)], like=out)
    if bias is not None:
        out = ctx.emit("ADD", [out, ctx.reshape(ctx.cast(bias, x.dtype), channel)], like=out)
    count = int(np.prod([int(d) for d in x.shape]) // int(c)) if all(isinstance(d, int) for d in x.shape) else None
    return out, ctx.reshape(mean, [c]), ctx.reshape(rstd, [c]), var, count


def _updated_running_stats(ctx, node, mean, var, count, running_mean, running_var,
                           momentum) -> list[ir.Tensor | None]:
    """(1 - momentum) * running + momentum * batch, the variance unbiased (count / (count - 1))."""
    if count is None:
        raise ctx.fail("batch norm's updated running statistics over dynamic sizes have no lowering")
    c = int(mean.shape[0])
    outs: list[ir.Tensor | None] = []
    for running, batch, factor in ((running_mean, mean, 1.0), (running_var, ctx.reshape(var, [c]),
                                                              count / (count - 1) if count > 1 else np.inf)):
        if running is None:
            outs.append(None)
            continue
        batch = ctx.cast(batch, running.dtype)
        kept = ctx.emit("MUL", [running, ctx.scalar_like(1.0 - momentum, running)], like=running)
        new = ctx.emit("MUL", [batch, ctx.scalar_like(momentum * factor, batch)], like=batch)
        outs.append(ctx.emit("ADD", [kept, new], like=kept))
    return outs


@lowers(aten._native_batch_norm_legit_functional.default)
def lower_batch_norm_functional(ctx, node, x, weight, bias, running_mean, running_var, training, momentum, eps) -> tuple[ir.Tensor, ir.Tensor | None, ir.Tensor | None, ir.Tensor | None, ir.Tensor | None]:
    """_native_batch_norm_legit_functional(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor running_mean_out, Tensor running_var_out)

    Batch norm with its running statistics returned updated: train mode normalises by the batch's own
    statistics (and warns); eval mode is the per-channel affine of the running ones."""
    if not training:
        out, mean, rstd = lower_batch_norm(ctx, node, x, weight, bias, running_mean, running_var, momentum, eps)
        return out, mean, rstd, running_mean, running_var
    out, mean, rstd, var, count = _batch_statistics(ctx, node, x, weight, bias, eps)
    new_mean, new_var = (_updated_running_stats(ctx, node, mean, var, count, running_mean, running_var, momentum)
                         if node.used & {3, 4} else (None, None))
    return out, mean, rstd, new_mean, new_var


@lowers(aten._native_batch_norm_legit.default)
def lower_batch_norm_legit(ctx, node, x, weight, bias, running_mean, running_var, training, momentum, eps) -> tuple[ir.Tensor, ir.Tensor | None, ir.Tensor | None]:
    """_native_batch_norm_legit(Tensor input, Tensor? weight, Tensor? bias, Tensor(a!) running_mean, Tensor(b!) running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)

    (out, mean, rstd) of batch norm; the running statistics' update (a mutation) is not part of the result."""
    return lower_batch_norm_functional(ctx, node, x, weight, bias, running_mean, running_var, training, momentum,
                                       eps)[:3]


@lowers(aten._native_batch_norm_legit.no_stats)
def lower_batch_norm_no_stats(ctx, node, x, weight, bias, training, momentum, eps) -> tuple[ir.Tensor, ir.Tensor, ir.Tensor]:
    """_native_batch_norm_legit.no_stats(Tensor input, Tensor? weight, Tensor? bias, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)

    Batch norm without running statistics: always the batch's own."""
    return _batch_statistics(ctx, node, x, weight, bias, eps)[:3]


@lowers(aten._batch_norm_with_update_functional.default)
def lower_batch_norm_with_update(ctx, node, x, weight, bias, running_mean, running_var, momentum, eps) -> tuple[ir.Tensor, ir.Tensor, ir.Tensor, ir.Tensor | None, ir.Tensor | None, ir.Tensor | None]:
    """_batch_norm_with_update_functional(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor, Tensor running_mean_out, Tensor running_var_out)

    Train-mode batch norm with (out, mean, rstd, reserve, new running mean, new running variance)."""
    out, mean, rstd, var, count = _batch_statistics(ctx, node, x, weight, bias, eps)
    new_mean, new_var = (_updated_running_stats(ctx, node, mean, var, count, running_mean, running_var, momentum)
                         if node.used & {4, 5} else (None, None))
    reserve = ctx.empty([0], np.uint8) if 3 in node.used else None  # a cuDNN workspace, empty on the CPU
    return out, mean, rstd, reserve, new_mean, new_var


@lowers(aten.batch_norm.default)
def lower_batch_norm_eval(ctx, node, x, weight, bias, running_mean, running_var, training, momentum, eps,
                          cudnn_enabled=False) -> ir.Tensor:
    """batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool training, float momentum, float eps, bool cudnn_enabled) -> Tensor

    batch_norm: eval mode as aten._native_batch_norm_legit_no_training (x * scale + shift), train mode by
    the batch's statistics (a warning says so)."""
    if training or running_mean is None:
        return _batch_statistics(ctx, node, x, weight, bias, eps)[0]
    return lower_batch_norm(ctx, node, x, weight, bias, running_mean, running_var, momentum, eps)[0]


def _on_last_axis(ctx: LoweringContext, x: ir.Tensor, dim: int, opcode: str, **options) -> ir.Tensor:
    """Apply a last-axis op along `dim` by moving `dim` last and back."""
    axis = normalize_dim(dim, x.rank)
    if axis == x.rank - 1:
        return ctx.emit(opcode, [x], like=x, **options)
    perm = list(range(x.rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    return ctx.transpose(ctx.emit(opcode, [ctx.transpose(x, perm)], [x.shape[p] for p in perm], x.dtype,
                                  **options), perm)


@lowers(aten._softmax.default)
def lower_softmax(ctx, node, x, dim, half_to_float=False) -> ir.Tensor:
    """_softmax(Tensor self, int dim, bool half_to_float) -> Tensor

    SOFTMAX (beta 1) along `dim`; TFLite's softmax works on the last axis."""
    return _on_last_axis(ctx, x, dim, "SOFTMAX", beta=1.0)


@lowers(aten._log_softmax.default)
def lower_log_softmax(ctx, node, x, dim, half_to_float=False) -> ir.Tensor:
    """_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor

    LOG_SOFTMAX along `dim` (moved last and back when it is not the last axis)."""
    return _on_last_axis(ctx, x, dim, "LOG_SOFTMAX")


def staged_mean(ctx: LoweringContext, x: ir.Tensor, stages: list[list[int]]) -> ir.Tensor:
    """MEAN over the union of `stages`, one MEAN (keep_dims) per stage. Every stage averages groups of equal
    size, so the mean of means is the mean; each stage can be a contiguous reduction after the layout pass."""
    for axes in stages:
        kept = [1 if i in axes else d for i, d in enumerate(x.shape)]
        x = ctx.emit("MEAN", [x, ctx.const(np.array(axes, np.int32), name="norm_axes")], kept, x.dtype,
                     keep_dims=True)
    return x


def normalize(ctx: LoweringContext, x: ir.Tensor, stages: list[list[int]], eps: float) -> ir.Tensor:
    """(x - mean) * rsqrt(var + eps) over the axes of `stages` (biased variance), computed as
    x * rstd + (-mean * rstd): two passes over x (SQUARED_DIFFERENCE for the variance, then MUL and ADD) and
    the rest on the reduced statistics. TFLite has no normalisation builtin."""
    return normalize_with_stats(ctx, x, stages, eps)[0]


def normalize_with_moments(ctx: LoweringContext, x: ir.Tensor, stages: list[list[int]], eps: float) -> tuple[ir.Tensor, ir.Tensor, ir.Tensor, ir.Tensor]:
    """`normalize`'s result, and the mean, biased variance and rstd it used (reduced axes kept)."""
    mean = staged_mean(ctx, x, stages)
    var = staged_mean(ctx, ctx.emit("SQUARED_DIFFERENCE", [x, mean], like=x), stages)
    rstd = exact.rsqrt(ctx, ctx.emit("ADD", [var, ctx.scalar_like(eps, var)], like=var))
    shift = ctx.emit("NEG", [ctx.emit("MUL", [mean, rstd], like=mean)], like=mean)
    return ctx.emit("ADD", [ctx.emit("MUL", [x, rstd], like=x), shift], like=x), mean, var, rstd


def normalize_with_stats(ctx: LoweringContext, x: ir.Tensor, stages: list[list[int]], eps: float) -> tuple[ir.Tensor, ir.Tensor, ir.Tensor]:
    """`normalize`'s result, and the mean and rstd it used (reduced axes kept)."""
    y, mean, _, rstd = normalize_with_moments(ctx, x, stages, eps)
    return y, mean, rstd


def affine(ctx: LoweringContext, y: ir.Tensor, weight, bias, shape) -> ir.Tensor:
    if weight is not None:
        y = ctx.emit("MUL", [y, ctx.reshape(weight, shape)], like=y)
    if bias is not None:
        y = ctx.emit("ADD", [y, ctx.reshape(bias, shape)], like=y)
    return y


@lowers(aten.layer_norm.default)
def lower_layer_norm(ctx, node, x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True) -> ir.Tensor:
    """layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1.0000000000000001e-05, bool cudnn_enable=True) -> Tensor

    Normalisation over the trailing `normalized_shape` dims (MEAN, SQUARED_DIFFERENCE, RSQRT, MUL, ADD), then
    MUL / ADD by the elementwise affine weights (folded into a following FULLY_CONNECTED by fold_affine)."""
    k = len(normalized_shape)
    y = normalize(ctx, x, [list(range(x.rank - k, x.rank))], eps)
    return affine(ctx, y, weight, bias, list(normalized_shape))


@lowers(aten.native_layer_norm.default)
def lower_native_layer_norm(ctx, node, x, normalized_shape, weight, bias, eps) -> tuple[ir.Tensor, ir.Tensor, ir.Tensor]:
    """native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)

    (layer_norm, mean, rstd): the statistics over the trailing `normalized_shape` dims, kept as size-1 axes."""
    k = len(normalized_shape)
    y, mean, rstd = normalize_with_stats(ctx, x, [list(range(x.rank - k, x.rank))], eps)
    return affine(ctx, y, weight, bias, list(normalized_shape)), mean, rstd


def channel_norm(ctx: LoweringContext, x: ir.Tensor, groups: int, weight, bias, eps: float) -> ir.Tensor:
    """Group normalisation of an [N, C, *spatial] tensor as x * a + b with per-sample, per-channel a and b.

    The statistics are reduced in stages (spatial axes, then the channels of each group) and expanded back to
    one value per channel on small [N, C, 1...] tensors; the affine weights fold into a and b. The full-size
    tensor then sees only SQUARED_DIFFERENCE, MUL and ADD against per-channel operands, which after the layout
    pass broadcast along the innermost (channel) axis — the fast case for XNNPACK."""
    n, c = x.shape[0], x.shape[1]
    unit = [1] * (x.rank - 2)
    spatial = list(range(2, x.rank))

    def per_group(per_channel: ir.Tensor) -> ir.Tensor:
        """[N, C, 1...] -> the mean over each group's channels, expanded back to [N, C, 1...]."""
        if groups == c:
            return per_channel
        grouped = ctx.reshape(per_channel, [n, groups, c // groups])
        mean = ctx.emit("MEAN", [grouped, ctx.const(np.array([2], np.int32), name="group_axis")], [n, groups, 1],
                        x.dtype, keep_dims=True)
        wide = ctx.emit("BROADCAST_TO", [mean, ctx.const(np.array([n, groups, c // groups], np.int32),
                                                          name="group_shape")], [n, groups, c // groups], x.dtype)
        return ctx.reshape(wide, [n, c, *unit])

    mean = per_group(staged_mean(ctx, x, [spatial]))
    var = per_group(staged_mean(ctx, ctx.emit("SQUARED_DIFFERENCE", [x, mean], like=x), [spatial]))
    scale = exact.rsqrt(ctx, ctx.emit("ADD", [var, ctx.scalar_like(eps, var)], like=var))
    if weight is not None:
        scale = ctx.emit("MUL", [scale, ctx.reshape(weight, [c, *unit])], like=scale)
    shift = ctx.emit("NEG", [ctx.emit("MUL", [mean, scale], like=mean)], like=mean)
    if bias is not None:
        shift = ctx.emit("ADD", [shift, ctx.reshape(bias, [c, *unit])], like=shift)
    return ctx.emit("ADD", [ctx.emit("MUL", [x, scale], like=x), shift], like=x)


@lowers(aten.group_norm.default)
def lower_group_norm(ctx, node, x, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True) -> ir.Tensor:
    """group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, float eps=1.0000000000000001e-05, bool cudnn_enabled=True) -> Tensor

    x * a + b with per-channel a, b from statistics reduced over the spatial axes and then each group's
    channels (MEAN, SQUARED_DIFFERENCE, RSQRT, BROADCAST_TO on the small statistics tensors, MUL, ADD)."""
    return channel_norm(ctx, x, num_groups, weight, bias, eps)


@lowers(aten.native_group_norm.default)
def lower_native_group_norm(ctx, node, x, weight, bias, n, c, hw, group, eps) -> tuple[ir.Tensor, ir.Tensor | None, ir.Tensor | None]:
    """native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW, int group, float eps) -> (Tensor, Tensor, Tensor)

    As group_norm, and where they are read the saved statistics, mean and rstd of shape [N, group], over
    each sample's group of channels."""
    y = lower_group_norm(ctx, node, x, group, weight, bias, eps)
    if not node.used & {1, 2}:
        return y, None, None
    n, c = x.shape[0], x.shape[1]
    grouped = ctx.reshape(x, [n, group, (c // group) * int(np.prod(x.shape[2:], dtype=np.int64))])
    _, mean, rstd = normalize_with_stats(ctx, grouped, [[2]], eps)
    return y, ctx.reshape(mean, [n, group]), ctx.reshape(rstd, [n, group])


@lowers(aten.instance_norm.default)
def lower_instance_norm(ctx, node, x, weight, bias, running_mean, running_var, use_input_stats, momentum, eps,
                        cudnn_enabled) -> ir.Tensor:
    """instance_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool use_input_stats, float momentum, float eps, bool cudnn_enabled) -> Tensor

    Normalisation over the spatial dims of each sample and channel; with tracked statistics in eval mode
    (use_input_stats False) it is a per-channel affine like eval batch norm."""
    channel_shape = [x.shape[1]] + [1] * (x.rank - 2)
    if use_input_stats:
        return channel_norm(ctx, x, x.shape[1], weight, bias, eps)
    if not (running_mean.is_constant and running_var.is_constant):
        raise ctx.fail("instance norm running statistics must be constants")
    inv_std = 1.0 / np.sqrt(running_var.data.astype(np.float64) + eps)
    scale = inv_std * (weight.data.astype(np.float64) if weight is not None else 1.0)
    shift = (bias.data.astype(np.float64) if bias is not None else 0.0) - running_mean.data * scale
    y = ctx.emit("MUL", [x, ctx.const(scale.reshape(channel_shape).astype(x.dtype), name="scale")], like=x)
    return ctx.emit("ADD", [y, ctx.const(shift.reshape(channel_shape).astype(x.dtype), name="shift")], like=x)
