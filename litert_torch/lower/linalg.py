"""Small dense linear algebra: inverse, solve, determinant, log-determinant, Cholesky factor and triangular solve
of static n x n matrices (any batch), unrolled over the n columns.

TFLite has no linear-algebra kernels. The inverse and solve are Gauss-Jordan elimination of [A | B] with partial
pivoting (the row of largest magnitude in the column brought up, as LAPACK's getrf chooses it): per column an
ARG_MAX, a GATHER of the pivot row, two SELECT_V2 swapping it in place, and one outer-product update of every
row, so each column costs a fixed dozen ops whatever the batch. The determinant is the product of the pivots
times the sign of the row swaps; a zero pivot gives 0 (the elimination then goes on dividing by 1, so that no
NaN reaches the product). The Cholesky factor is the right-looking column by column factorisation; a triangular
solve is substitution row by row.

What PyTorch raises on (a singular matrix for inverse and solve, one that is not positive-definite for
Cholesky) is not checked when the model runs: the result holds inf or NaN. Matrices larger than 64 x 64 are
refused: the unrolled graph grows with n.
"""

from __future__ import annotations

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower import exact
from litert_torch.lower.registry import LoweringContext, lowers
from litert_torch.symbolic import all_static

aten = torch.ops.aten

MAX_SIZE = 64


def _square(ctx: LoweringContext, a: ir.Tensor, what: str) -> int:
    if not all_static(a.shape):
        raise ctx.fail(f"{what} of matrices of run-time size has no lowering")
    if a.rank < 2 or a.shape[-1] != a.shape[-2]:
        raise ctx.fail(f"{what} takes square matrices, not shape {list(a.shape)}")
    n = int(a.shape[-1])
    if n > MAX_SIZE:
        raise ctx.fail(f"{what} of {n} x {n} matrices has no lowering (unrolled over the columns up to "
                       f"{MAX_SIZE} x {MAX_SIZE})")
    if np.dtype(a.dtype) != np.float32:
        raise ctx.fail(f"{what} in {np.dtype(a.dtype)} has no lowering (float32 only)")
    return n


def _binary(ctx, opcode, a, b, shape=None):
    shape = list(shape if shape is not None else np.broadcast_shapes(tuple(a.shape), tuple(b.shape)))
    options = {"fused_activation_function": "NONE"} if opcode in ("ADD", "SUB", "MUL", "DIV") else {}
    return ctx.emit(opcode, [a, b], shape, a.dtype, **options)


def _rows_at(n: int, rank: int, rows) -> np.ndarray:
    """A bool [n, 1] constant (leading unit axes to `rank`) marking `rows`."""
    mark = np.zeros((n, 1), np.bool_)
    mark[list(rows)] = True
    return mark.reshape((1,) * (rank - 2) + (n, 1))


def _eliminate(ctx: LoweringContext, a: ir.Tensor, n: int, jordan: bool, guard_zero: bool):
    """Gaussian elimination with partial pivoting of `a` [*batch, n, w] over its first n columns. Returns the
    reduced matrix (Gauss-Jordan: the first n columns the identity, the rest A^-1 B; else: upper triangular),
    the pivots [*batch, 1, 1] of each column and, per column, whether rows were swapped ([*batch, 1] bool)."""
    rank, batch, w = a.rank, list(a.shape[:-2]), int(a.shape[-1])
    positions = ctx.const(np.arange(n, dtype=np.int32).reshape((1,) * len(batch) + (n, 1)), name="rows")
    pivots, swaps = [], []
    for k in range(n):
        column = ctx.slice(a, [0] * (rank - 1) + [k], batch + [n, 1])
        magnitude = ctx.emit("ABS", [column], column.shape, a.dtype)
        if k:  # rows already used as pivots take no part in the choice
            magnitude = ctx.emit("SELECT_V2", [ctx.const(_rows_at(n, rank, range(k)), name="used"),
                                               ctx.const(np.array(-1.0, np.float32), name="minus_one"), magnitude],
                                 magnitude.shape, a.dtype)
        chosen = ctx.emit("ARG_MAX", [magnitude, ctx.const(np.array([rank - 2], np.int32), name="axis")],
                          batch + [1], np.int32, output_type="INT32")
        if k < n - 1:
            pivot_row = ctx.emit("GATHER", [a, chosen], batch + [1, w], a.dtype, axis=rank - 2,
                                 batch_dims=len(batch))
            row_k = ctx.slice(a, [0] * (rank - 2) + [k, 0], batch + [1, w])
            at_chosen = ctx.emit("EQUAL", [positions, ctx.reshape(chosen, batch + [1, 1])], batch + [n, 1],
                                 np.bool_)
            a = ctx.emit("SELECT_V2", [at_chosen, row_k, a], a.shape, a.dtype)
            a = ctx.emit("SELECT_V2", [ctx.const(_rows_at(n, rank, [k]), name="row"), pivot_row, a], a.shape,
                         a.dtype)
            swaps.append(ctx.emit("NOT_EQUAL", [chosen, ctx.const(np.array(k, np.int32), name="k")], batch + [1],
                                  np.bool_))
        pivot = ctx.slice(a, [0] * (rank - 2) + [k, k], batch + [1, 1])
        pivots.append(pivot)
        divisor = pivot
        if guard_zero:
            zero = ctx.emit("EQUAL", [pivot, ctx.const(np.array(0.0, np.float32), name="zero")], pivot.shape,
                            np.bool_)
            divisor = ctx.emit("SELECT_V2", [zero, ctx.const(np.array(1.0, np.float32), name="one"), pivot],
                               pivot.shape, a.dtype)
        row = _binary(ctx, "DIV", ctx.slice(a, [0] * (rank - 2) + [k, 0], batch + [1, w]), divisor)
        factors = ctx.slice(a, [0] * (rank - 1) + [k], batch + [n, 1])
        # rows other than k lose factor * row; row k becomes the scaled row (Gauss-Jordan) or stays (LU)
        keep = _rows_at(n, rank, range(k + 1) if not jordan else [])
        factors = ctx.emit("SELECT_V2", [ctx.const(keep, name="kept"), ctx.const(np.array(0.0, np.float32),
                                                                                 name="zero"), factors],
                           factors.shape, a.dtype)
        a = _binary(ctx, "SUB", a, _binary(ctx, "MUL", factors, row))
        if jordan:
            a = ctx.emit("SELECT_V2", [ctx.const(_rows_at(n, rank, [k]), name="row"), row, a], a.shape, a.dtype)
    return a, pivots, swaps


def _batch_matrix(ctx: LoweringContext, b: ir.Tensor, shape: list[int]) -> ir.Tensor:
    if list(b.shape) == list(shape):
        return b
    if b.rank < len(shape):
        b = ctx.reshape(b, [1] * (len(shape) - b.rank) + list(b.shape))
    return ctx.emit("BROADCAST_TO", [b, ctx.const(np.array(shape, np.int32), name="shape")], shape, b.dtype)


def _solve(ctx: LoweringContext, a: ir.Tensor, b: ir.Tensor, what: str) -> tuple[ir.Tensor, list[ir.Tensor]]:
    """A^-1 B for a [*batch, n, n] and b [*batch, n, m], broadcast over the batch; and the pivots."""
    n = _square(ctx, a, what)
    batch = [int(d) for d in np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))]
    m = int(b.shape[-1])
    a = _batch_matrix(ctx, a, batch + [n, n])
    b = _batch_matrix(ctx, ctx.cast(b, a.dtype), batch + [n, m])
    joined = ctx.emit("CONCATENATION", [a, b], batch + [n, n + m], a.dtype, axis=len(batch) + 1,
                      fused_activation_function="NONE")
    reduced, pivots, _ = _eliminate(ctx, joined, n, jordan=True, guard_zero=False)
    return ctx.slice(reduced, [0] * (len(batch) + 1) + [n], batch + [n, m]), pivots


def _error_code(ctx, failed: list[ir.Tensor], batch: list[int]) -> ir.Tensor:
    """LAPACK's error code [*batch] int32: k + 1 for the first column k whose flag (bool [*batch, 1, 1]) is set,
    0 where none is."""
    code = ctx.const(np.zeros(batch, np.int32), name="info")
    for k in range(len(failed) - 1, -1, -1):
        code = ctx.emit("SELECT_V2", [ctx.reshape(failed[k], batch), ctx.const(np.array(k + 1, np.int32), name="k"),
                                      code], batch, np.int32)
    return code


def _zero_pivots(ctx, pivots: list[ir.Tensor]) -> list[ir.Tensor]:
    zero = ctx.const(np.array(0.0, np.float32), name="zero")
    return [ctx.emit("EQUAL", [p, zero], p.shape, np.bool_) for p in pivots]


def _no_info(ctx, node, *results: int) -> None:
    for i in results:
        if i in node.used:
            raise ctx.fail(f"result {i} of {node.op} (LAPACK's factors, pivots or error code) has no lowering")


@lowers(aten.linalg_inv_ex.default)
def lower_linalg_inv_ex(ctx, node, a, check_errors=False):
    """The inverse: Gauss-Jordan elimination of [A | I] with partial pivoting (see the module docstring); the
    error code names the first zero pivot, as LAPACK's (the inverse of a singular matrix holds inf or NaN)."""
    n = _square(ctx, a, "linalg.inv")
    eye = np.broadcast_to(np.eye(n, dtype=np.float32), tuple(int(d) for d in a.shape)).copy()
    inverse, pivots = _solve(ctx, a, ctx.const(eye, name="identity"), "linalg.inv")
    info = _error_code(ctx, _zero_pivots(ctx, pivots), [int(d) for d in a.shape[:-2]]) if 1 in node.used else None
    return inverse, info


@lowers(aten._linalg_solve_ex.default)
def lower_linalg_solve_ex(ctx, node, a, b, left=True, check_errors=False):
    """X with A X = B (or X A = B, left=False), B a batch of vectors or of matrices: Gauss-Jordan elimination
    of [A | B] with partial pivoting."""
    _no_info(ctx, node, 1, 2)
    vector = b.rank == 1 or (b.rank == a.rank - 1 and tuple(b.shape) == tuple(a.shape[:-1]))
    if vector:
        b = ctx.reshape(b, list(b.shape) + [1])
    if not left:  # X A = B  <=>  A^T X^T = B^T
        perm = list(range(a.rank))
        perm[-2:] = perm[-1], perm[-2]
        a = ctx.transpose(a, perm)
        b = ctx.transpose(b, list(range(b.rank - 2)) + [b.rank - 1, b.rank - 2])
    x, pivots = _solve(ctx, a, b, "linalg.solve")
    if not left:
        x = ctx.transpose(x, list(range(x.rank - 2)) + [x.rank - 1, x.rank - 2])
    info = _error_code(ctx, _zero_pivots(ctx, pivots), list(x.shape[:-2])) if 3 in node.used else None
    return ctx.reshape(x, list(node.outputs[0].shape)), None, None, info


def _product(ctx, factors: list[ir.Tensor]) -> ir.Tensor:
    out = factors[0]
    for f in factors[1:]:
        out = _binary(ctx, "MUL", out, f)
    return out


def _swap_sign(ctx, swaps: list[ir.Tensor], batch: list[int]) -> ir.Tensor:
    """-1 where an odd number of row swaps was made, else 1 ([*batch, 1, 1])."""
    if not swaps:
        return ctx.const(np.ones(batch + [1, 1], np.float32), name="one")
    flags = [ctx.cast(s, np.int32) for s in swaps]
    count = flags[0] if len(flags) == 1 else ctx.emit("ADD_N", flags, batch + [1], np.int32)
    odd = ctx.emit("FLOOR_MOD", [count, ctx.const(np.array(2, np.int32), name="two")], count.shape, np.int32)
    flip = ctx.emit("EQUAL", [odd, ctx.const(np.array(1, np.int32), name="one")], count.shape, np.bool_)
    return ctx.emit("SELECT_V2", [ctx.reshape(flip, batch + [1, 1]), ctx.const(np.array(-1.0, np.float32),
                                                                               name="minus"),
                                  ctx.const(np.array(1.0, np.float32), name="plus")], batch + [1, 1], np.float32)


@lowers(aten._linalg_det.default)
def lower_linalg_det(ctx, node, a):
    """The determinant: the product of the pivots of an elimination with partial pivoting, negated for an odd
    number of row swaps (a zero pivot gives 0)."""
    _no_info(ctx, node, 1, 2)
    n = _square(ctx, a, "linalg.det")
    batch = [int(d) for d in a.shape[:-2]]
    _, pivots, swaps = _eliminate(ctx, a, n, jordan=False, guard_zero=True)
    det = _binary(ctx, "MUL", _product(ctx, pivots), _swap_sign(ctx, swaps, batch))
    return ctx.reshape(det, batch), None, None


@lowers(aten._linalg_slogdet.default)
def lower_linalg_slogdet(ctx, node, a):
    """(sign, log|det|): the product of the pivots' signs and that of the row swaps, and the sum of the
    logarithms of the pivots' magnitudes (sign 0 and -inf for a singular matrix)."""
    _no_info(ctx, node, 2, 3)
    n = _square(ctx, a, "linalg.slogdet")
    batch = [int(d) for d in a.shape[:-2]]
    _, pivots, swaps = _eliminate(ctx, a, n, jordan=False, guard_zero=True)
    signs = [ctx.emit("SIGN", [p], p.shape, p.dtype) for p in pivots]
    sign = _binary(ctx, "MUL", _product(ctx, signs), _swap_sign(ctx, swaps, batch))
    logs = [exact.log(ctx, ctx.emit("ABS", [p], p.shape, p.dtype)) for p in pivots]
    total = logs[0]
    for term in logs[1:]:  # ADD, not ADD_N: ADD_N's kernel clamps -inf to the lowest finite float
        total = _binary(ctx, "ADD", total, term)
    return ctx.reshape(sign, batch), ctx.reshape(total, batch), None, None


def _transposed(ctx, x: ir.Tensor) -> ir.Tensor:
    return ctx.transpose(x, list(range(x.rank - 2)) + [x.rank - 1, x.rank - 2])


def _cholesky_lower(ctx, a: ir.Tensor, n: int) -> tuple[ir.Tensor, list[ir.Tensor]]:
    """L with L L^T = A, from A's lower triangle: column k is A's column k (as updated) over sqrt(A[k, k]), zero
    above the diagonal; then A loses the outer product of that column with itself. Also the values whose roots
    were taken ([*batch, 1, 1] each)."""
    rank, batch = a.rank, [int(d) for d in a.shape[:-2]]
    columns, diagonal = [], []
    for k in range(n):
        diagonal.append(ctx.slice(a, [0] * (rank - 2) + [k, k], batch + [1, 1]))
        root = exact.sqrt(ctx, diagonal[-1])
        column = _binary(ctx, "DIV", ctx.slice(a, [0] * (rank - 1) + [k], batch + [n, 1]), root)
        if k:
            column = ctx.emit("SELECT_V2", [ctx.const(_rows_at(n, rank, range(k)), name="above"),
                                            ctx.const(np.array(0.0, np.float32), name="zero"), column],
                              column.shape, a.dtype)
        columns.append(column)
        if k < n - 1:
            a = _binary(ctx, "SUB", a, _binary(ctx, "MUL", column, ctx.reshape(column, batch + [1, n])))
    if n == 1:
        return columns[0], diagonal
    return ctx.emit("CONCATENATION", columns, batch + [n, n], a.dtype, axis=rank - 1,
                    fused_activation_function="NONE"), diagonal


@lowers(aten.linalg_cholesky_ex.default)
def lower_linalg_cholesky_ex(ctx, node, a, upper=False, check_errors=False):
    """The Cholesky factor (L, or U = L^T with upper=True, read from A's upper triangle): right-looking
    factorisation column by column. The error code is LAPACK's: k + 1 for the first leading minor that is not
    positive (the factor then holds NaN)."""
    n = _square(ctx, a, "linalg.cholesky")
    factor, diagonal = _cholesky_lower(ctx, _transposed(ctx, a) if upper else a, n)
    factor = _transposed(ctx, factor) if upper else factor
    info = None
    if 1 in node.used:
        zero = ctx.const(np.array(0.0, np.float32), name="zero")
        failed = [ctx.emit("LOGICAL_NOT", [ctx.emit("GREATER", [d, zero], d.shape, np.bool_)], d.shape, np.bool_)
                  for d in diagonal]
        info = _error_code(ctx, failed, [int(d) for d in a.shape[:-2]])
    return factor, info


def _substitute(ctx, a: ir.Tensor, b: ir.Tensor, upper: bool, unit: bool, what: str) -> ir.Tensor:
    """X with A X = B for a triangular A [*batch, n, n] (only its `upper` or lower triangle read) and B
    [*batch, n, m], broadcast over the batch: each row of X from the last one solved, then taken out of the
    rows still to solve."""
    n = _square(ctx, a, what)
    batch = [int(d) for d in np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))]
    m, rank = int(b.shape[-1]), len(batch) + 2
    a = _batch_matrix(ctx, a, batch + [n, n])
    rest = _batch_matrix(ctx, ctx.cast(b, a.dtype), batch + [n, m])
    rows: dict[int, ir.Tensor] = {}
    order = range(n - 1, -1, -1) if upper else range(n)
    for step, i in enumerate(order):
        x = ctx.slice(rest, [0] * (rank - 2) + [i, 0], batch + [1, m])
        if not unit:
            x = _binary(ctx, "DIV", x, ctx.slice(a, [0] * (rank - 2) + [i, i], batch + [1, 1]))
        rows[i] = x
        if step == n - 1:
            break
        pending = range(i) if upper else range(i + 1, n)
        column = ctx.emit("SELECT_V2", [ctx.const(_rows_at(n, rank, pending), name="pending"),
                                        ctx.slice(a, [0] * (rank - 1) + [i], batch + [n, 1]),
                                        ctx.const(np.array(0.0, np.float32), name="zero")],
                          batch + [n, 1], a.dtype)
        rest = _binary(ctx, "SUB", rest, _binary(ctx, "MUL", column, x))
    if n == 1:
        return rows[0]
    return ctx.emit("CONCATENATION", [rows[i] for i in range(n)], batch + [n, m], a.dtype, axis=rank - 2,
                    fused_activation_function="NONE")


@lowers(aten.linalg_solve_triangular.default)
def lower_linalg_solve_triangular(ctx, node, a, b, upper, left=True, unitriangular=False):
    """X with A X = B (X A = B with left=False) for a triangular A: substitution row by row, only A's upper or
    lower triangle read (its diagonal taken as ones with unitriangular=True)."""
    if not left:  # X A = B  <=>  A^T X^T = B^T, A^T triangular the other way
        return _transposed(ctx, _substitute(ctx, _transposed(ctx, a), _transposed(ctx, b), not upper,
                                            unitriangular, "linalg.solve_triangular"))
    return _substitute(ctx, a, b, upper, unitriangular, "linalg.solve_triangular")


@lowers(aten.triangular_solve.default)
def lower_triangular_solve(ctx, node, b, a, upper=True, transpose=False, unitriangular=False):
    """torch.triangular_solve: (X with op(A) X = B, op the transpose when asked; a copy of A)."""
    if transpose:
        a, upper = _transposed(ctx, a), not upper
    x = _substitute(ctx, a, b, upper, unitriangular, "triangular_solve")
    return x, (a if not transpose else _transposed(ctx, a))
