"""Complex tensors, computed as pairs of real tensors: the FFTs (`torch.fft`, `torch.stft`) and what models do
with their results (magnitude, phase, products, the real and imaginary parts).

LiteRT's kernels have almost no complex64 support, so a complex value never becomes an IR tensor: while a graph
is lowered it is a `ComplexPair` of two float tensors, its real and imaginary parts, and every op that reads or
makes one is lowered here (`lower`): the FFTs as products with constant DFT matrices (one FULLY_CONNECTED per
transformed axis, the cosines and sines computed in float64 from exact integer phases), the arithmetic from the
parts (abs = hypot(re, im), angle = ATAN2(im, re), (a + ib)(c + id) = (ac - bd) + i(ad + bc), ...), and
the ops that only move or sum values (view, permute, slice, cat, sum, ...) by their own lowering applied to each
part (`PARTWISE`). A complex value must become real before it leaves the model (`z.real`, `z.abs()`,
`torch.view_as_real(z)`): a complex model input or output is refused, naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
import torch

from litert_torch import ir
from litert_torch.errors import LoweringError
from litert_torch.lower.common import exact
from litert_torch.lower.common.registry import LoweringContext, lowers, normalize_dim, numpy_dtype
from litert_torch.node import Node, Value
from litert_torch.symbolic import all_static

aten = torch.ops.aten


@dataclass(frozen=True)
class ComplexPair:
    """A complex tensor while lowering: its real and imaginary parts, float tensors of one shape."""

    re: ir.Tensor
    im: ir.Tensor

    @property
    def shape(self) -> tuple:
        return self.re.shape

    @property
    def rank(self) -> int:
        return self.re.rank

    @property
    def dtype(self) -> np.dtype:
        return self.re.dtype


def _is_complex(dtype: Any) -> bool:
    return isinstance(dtype, torch.dtype) and dtype.is_complex


def _real_dtype(dtype: torch.dtype) -> torch.dtype:
    return {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64}.get(
        dtype, dtype)


def _leaves(value: Any):
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    else:
        yield value


def involves_complex(node: Node, args: tuple, kwargs: dict) -> bool:
    """Whether the node reads a complex value or makes one."""
    if any(isinstance(v, ComplexPair) for v in _leaves((args, kwargs))):
        return True
    return any(v is not None and _is_complex(v.dtype) for v in node.outputs)


def constant(name: str, value: torch.Tensor) -> ComplexPair:
    """A complex constant (a parameter, a folded value) as its two parts."""
    value = value.detach().cpu().resolve_conj()
    real = _real_dtype(value.dtype)
    parts = torch.view_as_real(value.to(torch.complex64 if real != torch.float64 else torch.complex128))
    re, im = (parts[..., i].to(real).contiguous().numpy() for i in range(2))
    return ComplexPair(ir.Tensor(f"{name}/re", re.shape, re.dtype, re), ir.Tensor(f"{name}/im", im.shape, im.dtype, im))


# ---- dispatch ------------------------------------------------------------------------------------------------
COMPLEX: dict[Any, Callable] = {}  # ATen overload -> its lowering for complex operands / results


def complex_op(*targets: Any, real: bool = False) -> Callable:
    """Register `fn` as the complex lowering of `targets`; those that have no real lowering (they only exist
    for complex values, `real` False) are registered as lowerings too, so that a program using them is not
    refused before it is lowered."""
    def register(fn: Callable) -> Callable:
        for target in targets:
            COMPLEX[target] = fn
        if not real:
            lowers(*targets)(fn)
        return fn
    return register


# Ops that act on the real and imaginary parts alike and independently: they move, repeat or sum values. Their
# tensor operands other than complex ones (indices) are passed to both.
PARTWISE = frozenset({
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.permute.default, aten.transpose.int,
    aten.t.default, aten.unsqueeze.default, aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims,
    aten.expand.default, aten.clone.default, aten.alias.default, aten.slice.Tensor, aten.select.int,
    aten.index_select.default, aten.index.Tensor, aten.flip.default, aten.roll.default, aten.narrow.default,
    aten.repeat.default, aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int, aten.sum.dim_IntList,
    aten.mean.dim, aten.neg.default, aten.contiguous.default, aten.lift_fresh_copy.default,
    aten._assert_tensor_metadata.default,  # nothing to compute
})


# Ops that act on the parts alike but take several data operands (the positions given), of which a real one is
# a complex one with zero imaginary parts; their other tensor operands (conditions, indices) go to both parts.
PARTWISE_DATA = {
    aten.slice_scatter.default: (0, 1), aten.select_scatter.default: (0, 1), aten.index_put.default: (0, 2),
    aten.where.self: (1, 2), aten.stack.default: (0,), aten.copy.default: (0, 1),
}
# Products bilinear in their two operands: (A + iB)(C + iD) = (AC - BD) + i(AD + BC), four real products.
BILINEAR = frozenset({aten.mm.default, aten.bmm.default, aten.matmul.default})


def lower(ctx: LoweringContext, target: Any, real_fn: Callable | None, node: Node, args: tuple,
          kwargs: dict) -> Any:
    """Lower one node that reads or makes a complex value."""
    fn = COMPLEX.get(target)
    if fn is not None:
        return fn(ctx, node, *args, **kwargs)
    if target in PARTWISE and real_fn is not None:
        return _partwise(ctx, real_fn, node, args, kwargs)
    if target in PARTWISE_DATA and real_fn is not None:
        promoted = list(args)
        for i in PARTWISE_DATA[target]:
            if i < len(promoted):
                value = promoted[i]
                promoted[i] = type(value)(_pair(ctx, v) for v in value) if isinstance(value, (list, tuple)) \
                    else _pair(ctx, value)
        return _partwise(ctx, real_fn, node, tuple(promoted), kwargs)
    if target is aten.constant_pad_nd.default and real_fn is not None:  # the pad value split into its parts
        value = complex(args[2] if len(args) > 2 else kwargs.get("value", 0))
        real = _real_node(node)
        return ComplexPair(real_fn(ctx, real, args[0].re, args[1], value.real),
                           real_fn(ctx, real, args[0].im, args[1], value.imag))
    if target in BILINEAR and real_fn is not None:
        real = _real_node(node)
        a, b = args[0], args[1]
        if not isinstance(a, ComplexPair) or not isinstance(b, ComplexPair):
            return _partwise(ctx, real_fn, node, args, kwargs)  # one real operand: each part times it
        shape, dtype = _out(node)
        ac, bd = real_fn(ctx, real, a.re, b.re), real_fn(ctx, real, a.im, b.im)
        ad, bc = real_fn(ctx, real, a.re, b.im), real_fn(ctx, real, a.im, b.re)
        return ComplexPair(_binary(ctx, "SUB", ac, bd, shape, dtype), _binary(ctx, "ADD", ad, bc, shape, dtype))
    raise LoweringError(f"{target} on complex values has no lowering (the FFTs, abs, angle, real/imag, "
                        "view_as_real, arithmetic and ops that move values are supported)")


def _real_node(node: Node) -> Node:
    """`node` with complex dtypes replaced by their real part's dtype."""
    def fix(v):
        if isinstance(v, Value) and _is_complex(v.dtype):
            return Value(v.shape, _real_dtype(v.dtype))
        if isinstance(v, (list, tuple)):
            return type(v)(fix(x) for x in v)
        return v
    return replace(node, inputs=tuple(fix(v) for v in node.inputs), outputs=tuple(fix(v) for v in node.outputs))


def _part(value: Any, which: str) -> Any:
    if isinstance(value, ComplexPair):
        return getattr(value, which)
    if isinstance(value, (list, tuple)):
        return type(value)(_part(v, which) for v in value)
    return value


def _partwise(ctx, real_fn, node, args, kwargs):
    real = _real_node(node)
    re = real_fn(ctx, real, *_part(args, "re"), **_part(kwargs, "re"))
    im = real_fn(ctx, real, *_part(args, "im"), **_part(kwargs, "im"))
    return _zip(re, im)


def _zip(re: Any, im: Any) -> Any:
    if isinstance(re, (list, tuple)):
        return type(re)(_zip(a, b) for a, b in zip(re, im))
    if re is None:
        return None
    return ComplexPair(re, im)


def _pair(ctx: LoweringContext, value: Any, dtype: Any = np.float32) -> ComplexPair:
    """`value` (complex, a real tensor, or a number: parts of `dtype`) as a pair."""
    if isinstance(value, ComplexPair):
        return value
    if isinstance(value, ir.Tensor):
        return ComplexPair(value, ctx.const(np.zeros(value.shape if all_static(value.shape) else (), value.dtype),
                                            name="zero_imag"))
    z = complex(value)
    return ComplexPair(ctx.const(np.array(z.real, dtype), name="re"), ctx.const(np.array(z.imag, dtype), name="im"))


def _out(node: Node, index: int = 0):
    """The shape of a result and the numpy dtype of its parts (its own, when real)."""
    value = node.output(index)
    return tuple(value.shape), numpy_dtype(_real_dtype(value.dtype))


def _binary(ctx, opcode, a, b, shape, dtype):
    return ctx.emit(opcode, [a, b], shape, dtype, fused_activation_function="NONE")


# ---- FFTs ------------------------------------------------------------------------------------------------------
def _norm_scale(normalization: int, n: int) -> float:
    """aten's FFT normalization code: 0 none, 1 by 1/sqrt(n), 2 by 1/n."""
    return {0: 1.0, 1: 1.0 / np.sqrt(n), 2: 1.0 / n}[int(normalization)]


def _phases(rows: int, cols: int, n: int, row_scale: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2 pi k m / n for k < rows, m < cols, from the exact phase (k m mod n), in float64; values
    that are zero in exact arithmetic (sin of 0 and pi, cos of pi/2) are written as 0."""
    k = np.arange(rows, dtype=np.int64)[:, None]
    m = np.arange(cols, dtype=np.int64)[None, :]
    phase = (k * m) % n
    angle = 2.0 * np.pi * phase / n
    cos, sin = np.cos(angle), np.sin(angle)
    cos[(4 * phase) % (2 * n) == n] = 0.0  # phase n/4 or 3n/4
    sin[(2 * phase) % n == 0] = 0.0  # phase 0 or n/2
    return cos, sin


def _along_last(ctx, axis: int, rank: int):
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    return perm


def _matmul_last(ctx, x: ir.Tensor, w: np.ndarray, dtype) -> ir.Tensor:
    """x [..., k] times the constant w [m, k] transposed: [..., m] (FULLY_CONNECTED)."""
    return ctx.emit("FULLY_CONNECTED", [x, ctx.const(w.astype(dtype), name="dft"), None], [*x.shape[:-1], w.shape[0]],
                    dtype, keep_num_dims=True, fused_activation_function="NONE")


def _dft_axis(ctx, z: ComplexPair | ir.Tensor, axis: int, out_len: int, inverse: bool, scale: float,
              dtype) -> ComplexPair:
    """The DFT of `z` along `axis` (its length n), the first `out_len` frequencies (n, or n // 2 + 1 one-sided),
    times `scale`: one FULLY_CONNECTED of the parts side by side with the [2 out, 2 n] matrix
    [[C, S], [-S, C]] (forward; the sines change sign for the inverse), then SPLIT."""
    x = z.re if isinstance(z, ComplexPair) else z
    n = x.shape[axis]
    if not isinstance(n, int):
        raise LoweringError("an FFT along an axis of run-time size has no lowering")
    perm = _along_last(ctx, axis, x.rank)
    cos, sin = _phases(out_len, n, n)
    cos, sin = cos * scale, sin * scale
    sign = 1.0 if inverse else -1.0  # e^{sign i theta}
    if isinstance(z, ComplexPair):
        parts = [ctx.transpose(z.re, perm), ctx.transpose(z.im, perm)]
        joined = ctx.emit("CONCATENATION", parts, [*parts[0].shape[:-1], 2 * n], dtype, axis=x.rank - 1,
                          fused_activation_function="NONE")
        # re' = a cos - sign b sin; im' = b cos + sign a sin
        w = np.block([[cos, -sign * sin], [sign * sin, cos]])
    else:
        joined = ctx.transpose(x, perm)
        w = np.concatenate([cos, sign * sin], axis=0)
    both = _matmul_last(ctx, joined, w, dtype)
    half = [*both.shape[:-1], out_len]
    re, im = ctx.emit_multi("SPLIT", [ctx.const(np.array(x.rank - 1, np.int32), name="axis"), both],
                            [(half, dtype)] * 2, num_splits=2)
    return ComplexPair(ctx.transpose(re, perm), ctx.transpose(im, perm))


def _dims(dim, rank: int) -> list[int]:
    return [normalize_dim(int(d), rank) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]


@complex_op(aten._fft_r2c.default)
def lower_fft_r2c(ctx, node, x, dim, normalization, onesided) -> ComplexPair:
    """_fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor

    The FFT of a real tensor over `dim`: the last of them one-sided when asked (n // 2 + 1 frequencies), as a
    product with constant cosine and sine matrices per axis (FULLY_CONNECTED), normalized as asked.

    Limits: static sizes along the transformed axes."""
    _, dtype = _out(node)
    dims = _dims(dim, x.rank)
    last = dims[-1]
    n = x.shape[last]
    scale = _norm_scale(normalization, int(np.prod([x.shape[d] for d in dims])))
    z = _dft_axis(ctx, ctx.cast(x, dtype), last, n // 2 + 1 if onesided else n, False, scale, dtype)
    for d in dims[:-1]:
        z = _dft_axis(ctx, z, d, x.shape[d], False, 1.0, dtype)
    return z


@complex_op(aten._fft_c2c.default)
def lower_fft_c2c(ctx, node, z, dim, normalization, forward) -> ComplexPair:
    """_fft_c2c(Tensor self, SymInt[] dim, int normalization, bool forward) -> Tensor

    The FFT (or inverse FFT) of a complex tensor over `dim`, one constant-matrix product per axis.

    Limits: static sizes along the transformed axes."""
    _, dtype = _out(node)
    z = _pair(ctx, z)
    dims = _dims(dim, z.rank)
    scale = _norm_scale(normalization, int(np.prod([z.shape[d] for d in dims])))
    for i, d in enumerate(dims):
        z = _dft_axis(ctx, z, d, z.shape[d], not forward, scale if i == 0 else 1.0, dtype)
    return z


@complex_op(aten._fft_c2r.default)
def lower_fft_c2r(ctx, node, z, dim, normalization, last_dim_size) -> ir.Tensor:
    """_fft_c2r(Tensor self, int[] dim, int normalization, SymInt last_dim_size) -> Tensor

    The inverse FFT to a real tensor of `last_dim_size` along the last of `dim`, from its one-sided spectrum
    (Hermitian symmetry: x_m = sum_k w_k (Re X_k cos - Im X_k sin)(2 pi k m / n), w 1 at k = 0 and n / 2, else
    2; the imaginary parts at those two frequencies are ignored, as in PyTorch); inverse FFTs first over the
    other axes.

    Limits: static sizes along the transformed axes."""
    shape, dtype = _out(node)
    z = _pair(ctx, z)
    dims = _dims(dim, z.rank)
    n = int(last_dim_size)
    scale = _norm_scale(normalization, int(np.prod([z.shape[d] for d in dims[:-1]] + [n])))
    for d in dims[:-1]:
        z = _dft_axis(ctx, z, d, z.shape[d], True, 1.0, dtype)
    last = dims[-1]
    length = z.shape[last]
    if not isinstance(length, int):
        raise LoweringError("an inverse FFT along an axis of run-time size has no lowering")
    k = min(length, n // 2 + 1)
    cos, sin = _phases(k, n, n)
    weight = np.full(k, 2.0)
    weight[0] = 1.0
    if n % 2 == 0 and k == n // 2 + 1:
        weight[-1] = 1.0
    w = np.concatenate([(cos * weight[:, None]).T, (-sin * weight[:, None]).T], axis=1) * scale  # [n, 2k]
    perm = _along_last(ctx, last, z.rank)
    parts = [ctx.transpose(p, perm) for p in (z.re, z.im)]
    if length > k:
        parts = [ctx.slice(p, [0] * p.rank, [*p.shape[:-1], k]) for p in parts]
    joined = ctx.emit("CONCATENATION", parts, [*parts[0].shape[:-1], 2 * k], dtype, axis=z.rank - 1,
                      fused_activation_function="NONE")
    return ctx.transpose(_matmul_last(ctx, joined, w, dtype), perm)


# ---- views between real and complex ---------------------------------------------------------------------------
@complex_op(aten.view_as_real.default)
def lower_view_as_real(ctx, node, z) -> ir.Tensor:
    """view_as_real(Tensor(a) self) -> Tensor(a)

    The parts side by side on a new last axis of 2 (CONCATENATION of the parts with an axis of 1 added; PACK
    has no float16 kernel)."""
    shape, dtype = _out(node)
    parts = [ctx.reshape(p, [*p.shape, 1]) for p in (z.re, z.im)]
    return ctx.emit("CONCATENATION", parts, shape, dtype, axis=z.rank, fused_activation_function="NONE")


@complex_op(aten.view_as_complex.default)
def lower_view_as_complex(ctx, node, x) -> ComplexPair:
    """view_as_complex(Tensor(a) self) -> Tensor(a)

    The last axis of 2 read as the real and imaginary parts (SLICE each)."""
    shape = list(x.shape[:-1])
    parts = [ctx.reshape(ctx.slice(x, [0] * (x.rank - 1) + [i], [*shape, 1]), shape) for i in range(2)]
    return ComplexPair(*parts)


@complex_op(aten.complex.default)
def lower_complex(ctx, node, real, imag) -> ComplexPair:
    """complex(Tensor real, Tensor imag) -> Tensor

    torch.complex(real, imag): the two tensors as the parts (broadcast to one shape)."""
    shape, dtype = _out(node)
    re, im = (_broadcast(ctx, ctx.cast(t, dtype), shape) for t in (real, imag))
    return ComplexPair(re, im)


@complex_op(aten.polar.default)
def lower_polar(ctx, node, magnitude, angle) -> ComplexPair:
    """polar(Tensor abs, Tensor angle) -> Tensor

    torch.polar(abs, angle): abs * cos(angle) + i abs * sin(angle)."""
    shape, dtype = _out(node)
    cos = ctx.emit("COS", [angle], angle.shape, dtype)
    sin = ctx.emit("SIN", [angle], angle.shape, dtype)
    return ComplexPair(_binary(ctx, "MUL", magnitude, cos, shape, dtype), _binary(ctx, "MUL", magnitude, sin, shape,
                                                                                    dtype))


def _broadcast(ctx, t: ir.Tensor, shape) -> ir.Tensor:
    if tuple(t.shape) == tuple(shape):
        return t
    return ctx.emit("BROADCAST_TO", [t, ctx.dims_tensor(shape)], shape, t.dtype)


@complex_op(aten._to_copy.default, real=True)
def lower_to_copy(ctx, node, x, **kwargs) -> ir.Tensor | ComplexPair:
    """To a complex dtype: a real tensor with zero imaginary parts; from complex to real: the real part (PyTorch
    discards the imaginary part)."""
    shape, dtype = _out(node)
    if not _is_complex(node.outputs[0].dtype):
        return ctx.cast(x.re, numpy_dtype(_real_dtype(node.outputs[0].dtype)))
    if isinstance(x, ComplexPair):
        return ComplexPair(ctx.cast(x.re, dtype), ctx.cast(x.im, dtype))
    re = ctx.cast(x, dtype)
    return ComplexPair(re, _zeros_like(ctx, re))


def _zeros_like(ctx, t: ir.Tensor) -> ir.Tensor:
    if all_static(t.shape):
        return ctx.const(np.zeros(t.shape, t.dtype), name="zero_imag")
    return ctx.emit("MUL", [t, ctx.scalar_like(0.0, t)], like=t, fused_activation_function="NONE")


@complex_op(aten._conj.default, aten.conj_physical.default, aten._conj_physical.default, aten.resolve_conj.default,
            aten.resolve_neg.default)
def lower_conj(ctx, node, z) -> ComplexPair | ir.Tensor:
    """_conj(Tensor(a) self) -> Tensor(a)

    The complex conjugate (NEG of the imaginary part); resolve_conj / resolve_neg of a computed value are the
    value itself, as is the conjugate of a real tensor."""
    if not isinstance(z, ComplexPair) or node.op in (aten.resolve_conj.default, aten.resolve_neg.default):
        return z
    return ComplexPair(z.re, ctx.emit("NEG", [z.im], like=z.im))


# ---- arithmetic -----------------------------------------------------------------------------------------------
@complex_op(aten.abs.default, real=True)
def lower_abs(ctx, node, z) -> ir.Tensor:
    """|z| = sqrt(re^2 + im^2)."""
    shape, dtype = _out(node)
    squares = _binary(ctx, "ADD", _binary(ctx, "MUL", z.re, z.re, shape, dtype),
                      _binary(ctx, "MUL", z.im, z.im, shape, dtype), shape, dtype)
    return exact.sqrt(ctx, squares)


@complex_op(aten.angle.default)
def lower_angle(ctx, node, z) -> ir.Tensor:
    """angle(Tensor self) -> Tensor

    The phase: ATAN2(im, re) of a complex value; of a real one, 0 where x >= 0, pi where x < 0, NaN where x is
    NaN (PyTorch's angle of a real tensor)."""
    shape, dtype = _out(node)
    if isinstance(z, ComplexPair):
        return ctx.emit("ATAN2", [z.im, z.re], shape, dtype)
    x = ctx.cast(z, dtype)
    negative = ctx.emit("LESS", [x, ctx.scalar_like(0.0, x)], shape, np.bool_)
    angle = ctx.emit("SELECT_V2", [negative, ctx.scalar_like(np.pi, x), ctx.scalar_like(0.0, x)], shape, dtype)
    return exact.keep_nan(ctx, x, angle)


@complex_op(aten.mul.Tensor, real=True)
def lower_mul(ctx, node, a, b) -> ComplexPair:
    """(a + ib)(c + id) = (ac - bd) + i(ad + bc); by a real tensor or number, each part times it."""
    shape, dtype = _out(node)
    if not isinstance(a, ComplexPair):
        a, b = b, a
    if not isinstance(b, ComplexPair) and not (isinstance(b, complex) and b.imag):
        factor = b.real if isinstance(b, complex) else b
        if not isinstance(factor, ir.Tensor):
            factor = ctx.const(np.array(factor, dtype), name="factor")
        return ComplexPair(_binary(ctx, "MUL", a.re, factor, shape, dtype),
                           _binary(ctx, "MUL", a.im, factor, shape, dtype))
    b = _pair(ctx, b, dtype)
    ac, bd = _binary(ctx, "MUL", a.re, b.re, shape, dtype), _binary(ctx, "MUL", a.im, b.im, shape, dtype)
    ad, bc = _binary(ctx, "MUL", a.re, b.im, shape, dtype), _binary(ctx, "MUL", a.im, b.re, shape, dtype)
    return ComplexPair(_binary(ctx, "SUB", ac, bd, shape, dtype), _binary(ctx, "ADD", ad, bc, shape, dtype))


@complex_op(aten.div.Tensor, real=True)
def lower_div(ctx, node, a, b) -> ComplexPair:
    """(a + ib) / (c + id) = ((ac + bd) + i(bc - ad)) / (c^2 + d^2); by a real tensor or number, each part
    divided by it."""
    shape, dtype = _out(node)
    if not isinstance(b, ComplexPair) and not (isinstance(b, complex) and b.imag):
        a = _pair(ctx, a, dtype)
        divisor = b.real if isinstance(b, complex) else b
        if not isinstance(divisor, ir.Tensor):
            divisor = ctx.const(np.array(divisor, dtype), name="divisor")
        return ComplexPair(_binary(ctx, "DIV", a.re, divisor, shape, dtype),
                           _binary(ctx, "DIV", a.im, divisor, shape, dtype))
    a, b = _pair(ctx, a, dtype), _pair(ctx, b, dtype)
    norm = _binary(ctx, "ADD", _binary(ctx, "MUL", b.re, b.re, b.re.shape, dtype),
                   _binary(ctx, "MUL", b.im, b.im, b.im.shape, dtype), b.re.shape, dtype)
    re = _binary(ctx, "ADD", _binary(ctx, "MUL", a.re, b.re, shape, dtype), _binary(ctx, "MUL", a.im, b.im, shape,
                                                                                     dtype), shape, dtype)
    im = _binary(ctx, "SUB", _binary(ctx, "MUL", a.im, b.re, shape, dtype), _binary(ctx, "MUL", a.re, b.im, shape,
                                                                                     dtype), shape, dtype)
    return ComplexPair(_binary(ctx, "DIV", re, norm, shape, dtype), _binary(ctx, "DIV", im, norm, shape, dtype))


def _add(ctx, node, a, b, alpha, opcode):
    shape, dtype = _out(node)
    a, b = _pair(ctx, a, dtype), _pair(ctx, b, dtype)
    if alpha != 1:
        b = ComplexPair(*(ctx.emit("MUL", [p, ctx.scalar_like(alpha, p)], like=p, fused_activation_function="NONE")
                          for p in (b.re, b.im)))
    return ComplexPair(_binary(ctx, opcode, a.re, b.re, shape, dtype), _binary(ctx, opcode, a.im, b.im, shape, dtype))


@complex_op(aten.add.Tensor, real=True)
def lower_add(ctx, node, a, b, alpha=1) -> ComplexPair:
    """The parts added (a real operand adds to the real part only)."""
    return _add(ctx, node, a, b, alpha, "ADD")


@complex_op(aten.sub.Tensor, real=True)
def lower_sub(ctx, node, a, b, alpha=1) -> ComplexPair:
    """The parts subtracted (a real operand from the real part only)."""
    return _add(ctx, node, a, b, alpha, "SUB")


@complex_op(aten.exp.default, real=True)
def lower_exp(ctx, node, z) -> ComplexPair:
    """e^(a + ib) = e^a cos b + i e^a sin b."""
    shape, dtype = _out(node)
    scale = exact.exp(ctx, z.re)
    return ComplexPair(_binary(ctx, "MUL", scale, ctx.emit("COS", [z.im], shape, dtype), shape, dtype),
                       _binary(ctx, "MUL", scale, ctx.emit("SIN", [z.im], shape, dtype), shape, dtype))


@complex_op(aten.cat.default, real=True)
def lower_cat(ctx, node, tensors, dim=0) -> ComplexPair:
    """The parts concatenated (a real operand with zero imaginary parts)."""
    shape, dtype = _out(node)
    pairs = [_pair(ctx, t) for t in tensors]
    axis = normalize_dim(dim, len(shape))
    return ComplexPair(*(ctx.emit("CONCATENATION", [_broadcast(ctx, getattr(p, part), [*p.shape]) for p in pairs],
                                  shape, dtype, axis=axis, fused_activation_function="NONE")
                         for part in ("re", "im")))


def check_output(index: int, value: Any, source: ir.SourceRef | None = None) -> None:
    """A complex value cannot leave the model."""
    if isinstance(value, ComplexPair):
        raise LoweringError(f"output {index} is a complex tensor, which LiteRT models do not return; return "
                            "torch.view_as_real(z), z.real / z.imag or z.abs() instead",
                            target=source.target if source else None, location=source.location if source else None)
