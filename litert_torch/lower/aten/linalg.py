"""Small dense linear algebra: inverse, solve, determinant, log-determinant, LU, Cholesky and QR factors, and
triangular and LU solves of static matrices (any batch), unrolled over the columns.

TFLite has no linear-algebra kernels. The inverse and solve are Gauss-Jordan elimination of [A | B] with partial
pivoting (the row of largest magnitude in the column brought up, as LAPACK's getrf chooses it): per column an
ARG_MAX, a GATHER of the pivot row, two SELECT_V2 swapping it in place, and one outer-product update of every
row, so each column costs a fixed dozen ops whatever the batch. The LU factorisation is the same elimination
keeping each column's multipliers below its pivot: LAPACK's getrf, pivots included. The determinant is the
product of the pivots times the sign of the row swaps; a zero pivot gives 0 (the elimination then goes on
dividing by 1, so that no NaN reaches the product). The Cholesky factor is the right-looking column by column
factorisation; a triangular solve is substitution row by row. QR is a Householder reflection per column with
LAPACK's signs (geqrf, then orgqr for Q), so Q and R are the ones PyTorch returns, not merely some QR.

What PyTorch raises on (a singular matrix for inverse and solve, one that is not positive-definite for
Cholesky) is not checked when the model runs: the result holds inf or NaN. Matrices larger than 64 x 64 are
refused: the unrolled graph grows with n.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.common import exact
from litert_torch.lower.common.registry import LoweringContext, lowers
from litert_torch.symbolic import all_static

aten = torch.ops.aten

MAX_SIZE = 64


def _matrix(ctx: LoweringContext, a: ir.Tensor, what: str) -> tuple[int, int, list[int]]:
    """(rows, columns, batch) of static float32 matrices `a` no larger than MAX_SIZE; refused otherwise."""
    if not all_static(a.shape) or a.rank < 2:
        raise ctx.fail(f"{what} of matrices of run-time size has no lowering")
    m, n = int(a.shape[-2]), int(a.shape[-1])
    if max(m, n) > MAX_SIZE:
        raise ctx.fail(f"{what} of {m} x {n} matrices has no lowering (unrolled over the columns up to "
                       f"{MAX_SIZE} x {MAX_SIZE})")
    if np.dtype(a.dtype) != np.float32:
        raise ctx.fail(f"{what} in {np.dtype(a.dtype)} has no lowering (float32 only)")
    return m, n, [int(d) for d in a.shape[:-2]]


def _square(ctx: LoweringContext, a: ir.Tensor, what: str) -> int:
    if a.rank >= 2 and all_static(a.shape[-2:]) and a.shape[-1] != a.shape[-2]:
        raise ctx.fail(f"{what} takes square matrices, not shape {list(a.shape)}")
    return _matrix(ctx, a, what)[0]


def _binary(ctx, opcode, a, b, shape=None):
    shape = list(shape if shape is not None else np.broadcast_shapes(tuple(a.shape), tuple(b.shape)))
    options = {"fused_activation_function": "NONE"} if opcode in ("ADD", "SUB", "MUL", "DIV") else {}
    return ctx.emit(opcode, [a, b], shape, a.dtype, **options)


def _rows_at(n: int, rank: int, rows) -> np.ndarray:
    """A bool [n, 1] constant (leading unit axes to `rank`) marking `rows`."""
    mark = np.zeros((n, 1), np.bool_)
    mark[list(rows)] = True
    return mark.reshape((1,) * (rank - 2) + (n, 1))


class _Elimination(NamedTuple):
    reduced: ir.Tensor  # Gauss-Jordan: the identity, then A^-1 B; LU: U on and above the diagonal (see below)
    pivots: list[ir.Tensor]  # [*batch, 1, 1] per column
    swaps: list[ir.Tensor]  # [*batch, 1] bool per column but the last: whether rows were swapped
    chosen: list[ir.Tensor]  # [*batch, 1] int32 per column: the row swapped into place


def _eliminate(ctx: LoweringContext, a: ir.Tensor, steps: int, jordan: bool, guard_zero: bool,
               multipliers: bool = False) -> _Elimination:
    """Gaussian elimination with partial pivoting of `a` [*batch, n, w] over its first `steps` columns (whole
    rows swapped, as LAPACK's getrf swaps them). With `multipliers`, each column's multipliers are kept below
    its pivot: the reduced matrix is then LAPACK's packed LU."""
    rank, batch, w, n = a.rank, list(a.shape[:-2]), int(a.shape[-1]), int(a.shape[-2])
    positions = ctx.const(np.arange(n, dtype=np.int32).reshape((1,) * len(batch) + (n, 1)), name="rows")
    zero_f = ctx.const(np.array(0.0, np.float32), name="zero")
    pivots, swaps, chosen_rows = [], [], []
    for k in range(steps):
        column = ctx.slice(a, [0] * (rank - 1) + [k], batch + [n, 1])
        magnitude = ctx.emit("ABS", [column], column.shape, a.dtype)
        if k:  # rows already used as pivots take no part in the choice
            magnitude = ctx.emit("SELECT_V2", [ctx.const(_rows_at(n, rank, range(k)), name="used"),
                                               ctx.const(np.array(-1.0, np.float32), name="minus_one"), magnitude],
                                 magnitude.shape, a.dtype)
        chosen = ctx.emit("ARG_MAX", [magnitude, ctx.const(np.array([rank - 2], np.int32), name="axis")],
                          batch + [1], np.int32, output_type="INT32")
        chosen_rows.append(chosen)
        if k < n - 1:
            a = _swap_rows(ctx, a, positions, k, chosen)
            swaps.append(ctx.emit("NOT_EQUAL", [chosen, ctx.const(np.array(k, np.int32), name="k")], batch + [1],
                                  np.bool_))
        pivot = ctx.slice(a, [0] * (rank - 2) + [k, k], batch + [1, 1])
        pivots.append(pivot)
        divisor = pivot
        if guard_zero:
            zero = ctx.emit("EQUAL", [pivot, zero_f], pivot.shape, np.bool_)
            divisor = ctx.emit("SELECT_V2", [zero, ctx.const(np.array(1.0, np.float32), name="one"), pivot],
                               pivot.shape, a.dtype)
        row = _binary(ctx, "DIV", ctx.slice(a, [0] * (rank - 2) + [k, 0], batch + [1, w]), divisor)
        if multipliers and k:  # the multipliers kept left of the pivot are not part of the row
            left = np.zeros((1, w), np.bool_)
            left[0, :k] = True
            row = ctx.emit("SELECT_V2", [ctx.const(left.reshape((1,) * len(batch) + (1, w)), name="left"), zero_f,
                                         row], row.shape, a.dtype)
        column = ctx.slice(a, [0] * (rank - 1) + [k], batch + [n, 1])
        # rows other than k lose factor * row; row k becomes the scaled row (Gauss-Jordan) or stays (LU)
        keep = _rows_at(n, rank, range(k + 1) if not jordan else [])
        factors = ctx.emit("SELECT_V2", [ctx.const(keep, name="kept"), zero_f, column], column.shape, a.dtype)
        a = _binary(ctx, "SUB", a, _binary(ctx, "MUL", factors, row))
        if jordan:
            a = ctx.emit("SELECT_V2", [ctx.const(_rows_at(n, rank, [k]), name="row"), row, a], a.shape, a.dtype)
        if multipliers and k < n - 1:
            below = np.zeros((n, w), np.bool_)
            below[k + 1:, k] = True
            a = ctx.emit("SELECT_V2", [ctx.const(below.reshape((1,) * len(batch) + (n, w)), name="below"),
                                       _binary(ctx, "DIV", column, divisor), a], a.shape, a.dtype)
    return _Elimination(a, pivots, swaps, chosen_rows)


def _swap_rows(ctx, a: ir.Tensor, positions: ir.Tensor, k: int, other: ir.Tensor) -> ir.Tensor:
    """`a` [*batch, n, w] with row k and row `other` ([*batch, 1] int32) exchanged."""
    batch, w = list(a.shape[:-2]), int(a.shape[-1])
    n, rank = int(a.shape[-2]), a.rank
    other_row = ctx.emit("GATHER", [a, other], batch + [1, w], a.dtype, axis=rank - 2, batch_dims=len(batch))
    row_k = ctx.slice(a, [0] * (rank - 2) + [k, 0], batch + [1, w])
    at_other = ctx.emit("EQUAL", [positions, ctx.reshape(other, batch + [1, 1])], batch + [n, 1], np.bool_)
    a = ctx.emit("SELECT_V2", [at_other, row_k, a], a.shape, a.dtype)
    return ctx.emit("SELECT_V2", [ctx.const(_rows_at(n, rank, [k]), name="row"), other_row, a], a.shape, a.dtype)


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
    reduced, pivots, _, _ = _eliminate(ctx, joined, n, jordan=True, guard_zero=False)
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
def lower_linalg_inv_ex(ctx, node, a, check_errors=False) -> tuple[ir.Tensor, ir.Tensor | None]:
    """linalg_inv_ex(Tensor A, *, bool check_errors=False) -> (Tensor inverse, Tensor info)

    The inverse: Gauss-Jordan elimination of [A | I] with partial pivoting (see the module docstring); the
    error code names the first zero pivot, as LAPACK's (the inverse of a singular matrix holds inf or NaN)."""
    n = _square(ctx, a, "linalg.inv")
    eye = np.broadcast_to(np.eye(n, dtype=np.float32), tuple(int(d) for d in a.shape)).copy()
    inverse, pivots = _solve(ctx, a, ctx.const(eye, name="identity"), "linalg.inv")
    info = _error_code(ctx, _zero_pivots(ctx, pivots), [int(d) for d in a.shape[:-2]]) if 1 in node.used else None
    return inverse, info


@lowers(aten._linalg_solve_ex.default)
def lower_linalg_solve_ex(ctx, node, a, b, left=True, check_errors=False) -> tuple[ir.Tensor, None, None, ir.Tensor | None]:
    """_linalg_solve_ex(Tensor A, Tensor B, *, bool left=True, bool check_errors=False) -> (Tensor result, Tensor LU, Tensor pivots, Tensor info)

    X with A X = B (or X A = B, left=False), B a batch of vectors or of matrices: Gauss-Jordan elimination
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
    count = flags[0]
    for flag in flags[1:]:
        count = ctx.emit("ADD", [count, flag], batch + [1], np.int32, fused_activation_function="NONE")
    odd = ctx.emit("FLOOR_MOD", [count, ctx.const(np.array(2, np.int32), name="two")], count.shape, np.int32)
    flip = ctx.emit("EQUAL", [odd, ctx.const(np.array(1, np.int32), name="one")], count.shape, np.bool_)
    return ctx.emit("SELECT_V2", [ctx.reshape(flip, batch + [1, 1]), ctx.const(np.array(-1.0, np.float32),
                                                                               name="minus"),
                                  ctx.const(np.array(1.0, np.float32), name="plus")], batch + [1, 1], np.float32)


@lowers(aten._linalg_det.default)
def lower_linalg_det(ctx, node, a) -> tuple[ir.Tensor, None, None]:
    """_linalg_det(Tensor A) -> (Tensor result, Tensor LU, Tensor pivots)

    The determinant: the product of the pivots of an elimination with partial pivoting, negated for an odd
    number of row swaps (a zero pivot gives 0)."""
    _no_info(ctx, node, 1, 2)
    return determinant(ctx, a, "linalg.det"), None, None


def determinant(ctx: LoweringContext, a: ir.Tensor, what: str) -> ir.Tensor:
    """det(a) [*batch] of square matrices a [*batch, n, n] (see `lower_linalg_det`)."""
    n = _square(ctx, a, what)
    batch = [int(d) for d in a.shape[:-2]]
    _, pivots, swaps, _ = _eliminate(ctx, a, n, jordan=False, guard_zero=True)
    det = _binary(ctx, "MUL", _product(ctx, pivots), _swap_sign(ctx, swaps, batch))
    return ctx.reshape(det, batch)


@lowers(aten._linalg_slogdet.default)
def lower_linalg_slogdet(ctx, node, a) -> tuple[ir.Tensor, ir.Tensor, None, None]:
    """_linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet, Tensor LU, Tensor pivots)

    (sign, log|det|): the product of the pivots' signs and that of the row swaps, and the sum of the
    logarithms of the pivots' magnitudes (sign 0 and -inf for a singular matrix)."""
    _no_info(ctx, node, 2, 3)
    n = _square(ctx, a, "linalg.slogdet")
    batch = [int(d) for d in a.shape[:-2]]
    _, pivots, swaps, _ = _eliminate(ctx, a, n, jordan=False, guard_zero=True)
    signs = [ctx.emit("SIGN", [p], p.shape, p.dtype) for p in pivots]
    sign = _binary(ctx, "MUL", _product(ctx, signs), _swap_sign(ctx, swaps, batch))
    logs = [exact.log(ctx, ctx.emit("ABS", [p], p.shape, p.dtype)) for p in pivots]
    total = logs[0]
    for term in logs[1:]:  # ADD: ADD_N's kernel clamps -inf to the lowest finite float
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
def lower_linalg_cholesky_ex(ctx, node, a, upper=False, check_errors=False) -> tuple[ir.Tensor, ir.Tensor | None]:
    """linalg_cholesky_ex(Tensor self, *, bool upper=False, bool check_errors=False) -> (Tensor L, Tensor info)

    The Cholesky factor (L, or U = L^T with upper=True, read from A's upper triangle): right-looking
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
def lower_linalg_solve_triangular(ctx, node, a, b, upper, left=True, unitriangular=False) -> ir.Tensor:
    """linalg_solve_triangular(Tensor self, Tensor B, *, bool upper, bool left=True, bool unitriangular=False) -> Tensor

    X with A X = B (X A = B with left=False) for a triangular A: substitution row by row, only A's upper or
    lower triangle read (its diagonal taken as ones with unitriangular=True)."""
    if not left:  # X A = B  <=>  A^T X^T = B^T, A^T triangular the other way
        return _transposed(ctx, _substitute(ctx, _transposed(ctx, a), _transposed(ctx, b), not upper,
                                            unitriangular, "linalg.solve_triangular"))
    return _substitute(ctx, a, b, upper, unitriangular, "linalg.solve_triangular")


@lowers(aten.triangular_solve.default)
def lower_triangular_solve(ctx, node, b, a, upper=True, transpose=False, unitriangular=False) -> tuple[ir.Tensor, ir.Tensor]:
    """triangular_solve(Tensor self, Tensor A, bool upper=True, bool transpose=False, bool unitriangular=False) -> (Tensor solution, Tensor cloned_coefficient)

    torch.triangular_solve: (X with op(A) X = B, op the transpose when asked; a copy of A)."""
    if transpose:
        a, upper = _transposed(ctx, a), not upper
    x = _substitute(ctx, a, b, upper, unitriangular, "triangular_solve")
    return x, (a if not transpose else _transposed(ctx, a))


def _permutation(ctx, chosen: list[ir.Tensor], batch: list[int], n: int) -> ir.Tensor:
    """perm [*batch, n, 1] int32: the original row at each of n positions after the row swaps (k with
    chosen[k], in order) an LU factorisation made."""
    positions = ctx.const(np.arange(n, dtype=np.int32).reshape((1,) * len(batch) + (n, 1)), name="rows")
    perm = ctx.const(np.broadcast_to(np.arange(n, dtype=np.int32).reshape(n, 1), tuple(batch) + (n, 1)).copy(),
                     name="perm")
    for k, other in enumerate(chosen[:n - 1]):  # the last row has no other to swap with
        perm = _swap_rows(ctx, perm, positions, k, other)
    return perm


def _permutation_matrix(ctx, perm: ir.Tensor, batch: list[int], n: int) -> ir.Tensor:
    """P with A = P L U: P[r, i] = 1 where row r of A is row i of L U (perm[i] == r)."""
    rows = ctx.const(np.arange(n, dtype=np.int32).reshape((1,) * len(batch) + (n, 1)), name="rows")
    marks = ctx.emit("EQUAL", [rows, ctx.reshape(perm, batch + [1, n])], batch + [n, n], np.bool_)
    return ctx.cast(marks, np.float32)


def _triangles(ctx, lu: ir.Tensor) -> tuple[ir.Tensor, ir.Tensor]:
    """(L [m, k] with a unit diagonal, U [k, n]) from a packed LU [m, n], k = min(m, n)."""
    m, n = int(lu.shape[-2]), int(lu.shape[-1])
    k, lead = min(m, n), (1,) * (lu.rank - 2)
    batch = [int(d) for d in lu.shape[:-2]]
    packed_l = ctx.slice(lu, [0] * lu.rank, batch + [m, k]) if k < n else lu
    packed_u = ctx.slice(lu, [0] * lu.rank, batch + [k, n]) if k < m else lu
    l = ctx.emit("SELECT_V2", [ctx.const(np.tril(np.ones((m, k), np.bool_), -1).reshape(lead + (m, k)), name="lower"),
                               packed_l, ctx.const(np.eye(m, k, dtype=np.float32).reshape(lead + (m, k)),
                                                   name="identity")], batch + [m, k], lu.dtype)
    u = ctx.emit("SELECT_V2", [ctx.const(np.triu(np.ones((k, n), np.bool_)).reshape(lead + (k, n)), name="upper"),
                               packed_u, ctx.const(np.array(0.0, np.float32), name="zero")], batch + [k, n], lu.dtype)
    return l, u


def _lu(ctx, a: ir.Tensor, pivot: bool, what: str) -> tuple[ir.Tensor, list[ir.Tensor], list[ir.Tensor]]:
    """LAPACK's getrf of an m x n matrix: the packed LU, the pivots and the row chosen at each of the min(m, n)
    steps."""
    m, n, _ = _matrix(ctx, a, what)
    if not pivot:
        raise ctx.fail(f"{what} without pivoting has no lowering (PyTorch has none on the CPU either)")
    lu, pivots, _, chosen = _eliminate(ctx, a, min(m, n), jordan=False, guard_zero=True, multipliers=True)
    return lu, pivots, chosen


@lowers(aten.linalg_lu_factor_ex.default)
def lower_linalg_lu_factor_ex(ctx, node, a, pivot=True, check_errors=False) -> tuple[ir.Tensor, ir.Tensor, ir.Tensor | None]:
    """linalg_lu_factor_ex(Tensor A, *, bool pivot=True, bool check_errors=False) -> (Tensor LU, Tensor pivots, Tensor info)

    (LU, pivots, info) as LAPACK's getrf gives them: L's multipliers below the diagonal, U on and above,
    the 1-based row swapped into each position, and the first zero pivot's column (0 for none)."""
    lu, pivots, chosen = _lu(ctx, a, pivot, "linalg.lu_factor")
    batch = [int(d) for d in a.shape[:-2]]
    one = ctx.const(np.array(1, np.int32), name="one")
    rows = [ctx.emit("ADD", [c, one], c.shape, np.int32, fused_activation_function="NONE") for c in chosen]
    swapped = rows[0] if len(rows) == 1 else ctx.emit("CONCATENATION", rows, batch + [len(rows)], np.int32,
                                                      axis=len(batch), fused_activation_function="NONE")
    info = _error_code(ctx, _zero_pivots(ctx, pivots), batch) if 2 in node.used else None
    return lu, swapped, info


@lowers(aten.linalg_lu.default)
def lower_linalg_lu(ctx, node, a, pivot=True) -> tuple[ir.Tensor, ir.Tensor, ir.Tensor]:
    """linalg_lu(Tensor A, *, bool pivot=True) -> (Tensor P, Tensor L, Tensor U)

    (P, L, U) with A = P L U: the packed factorisation of `linalg_lu_factor_ex` unpacked, P from its row
    swaps."""
    lu, _, chosen = _lu(ctx, a, pivot, "linalg.lu")
    batch, m = [int(d) for d in a.shape[:-2]], int(a.shape[-2])
    l, u = _triangles(ctx, lu)
    return _permutation_matrix(ctx, _permutation(ctx, chosen, batch, m), batch, m), l, u


def _pivot_indices(ctx, pivots: ir.Tensor, n: int) -> list[ir.Tensor]:
    """The 0-based row swapped into each position ([*batch, 1] int32 each) from LAPACK's 1-based pivots."""
    batch = [int(d) for d in pivots.shape[:-1]]
    pivots = ctx.cast(pivots, np.int32)
    one = ctx.const(np.array(1, np.int32), name="one")
    return [ctx.emit("SUB", [ctx.slice(pivots, [0] * len(batch) + [k], batch + [1]), one], batch + [1], np.int32,
                     fused_activation_function="NONE") for k in range(n)]


@lowers(aten.lu_unpack.default)
def lower_lu_unpack(ctx, node, lu, pivots, unpack_data=True, unpack_pivots=True) -> tuple[ir.Tensor | None, ir.Tensor | None, ir.Tensor | None]:
    """lu_unpack(Tensor LU_data, Tensor LU_pivots, bool unpack_data=True, bool unpack_pivots=True) -> (Tensor P, Tensor L, Tensor U)

    (P, L, U) from a packed LU and its pivots (given when the model runs: the swaps are made in order)."""
    m, n, batch = _matrix(ctx, lu, "lu_unpack")
    k = min(m, n)
    if not all_static(pivots.shape) or [int(d) for d in pivots.shape] != batch + [k]:
        raise ctx.fail(f"lu_unpack with pivots of shape {list(pivots.shape)} for LU of shape {list(lu.shape)}")
    p = l = u = None
    if unpack_pivots:
        p = _permutation_matrix(ctx, _permutation(ctx, _pivot_indices(ctx, pivots, k), batch, m), batch, m)
    if unpack_data:
        l, u = _triangles(ctx, lu)
    return p, l, u


@lowers(aten.linalg_lu_solve.default)
def lower_linalg_lu_solve(ctx, node, lu, pivots, b, left=True, adjoint=False) -> ir.Tensor:
    """linalg_lu_solve(Tensor LU, Tensor pivots, Tensor B, *, bool left=True, bool adjoint=False) -> Tensor

    X with A X = B (A^T X = B with adjoint, X A = B with left=False) for A = P L U given packed: B's rows
    permuted, then substitution with L (unit diagonal) and U, or the transposed steps for A^T."""
    n = _square(ctx, lu, "linalg.lu_solve")
    batch = [int(d) for d in lu.shape[:-2]]
    if not left:  # X A = B  <=>  A^T X^T = B^T
        x = _lu_solve(ctx, lu, pivots, _transposed(ctx, b), n, batch, not adjoint)
        return _transposed(ctx, x)
    return _lu_solve(ctx, lu, pivots, b, n, batch, adjoint)


def _lu_solve(ctx, lu, pivots, b, n, batch, transposed):
    perm = _permutation(ctx, _pivot_indices(ctx, pivots, n), batch, n)
    out_batch = [int(d) for d in np.broadcast_shapes(tuple(batch), tuple(b.shape[:-2]))]
    m = int(b.shape[-1])
    b = _batch_matrix(ctx, ctx.cast(b, np.float32), out_batch + [n, m])
    lu = _batch_matrix(ctx, lu, out_batch + [n, n])
    perm = _batch_matrix(ctx, perm, out_batch + [n, 1])
    index = ctx.reshape(perm, out_batch + [n])
    if not transposed:  # L U X = P^T B, (P^T B)[i] = B[perm[i]]
        moved = ctx.emit("GATHER", [b, index], out_batch + [n, m], b.dtype, axis=len(out_batch),
                         batch_dims=len(out_batch))
        y = _substitute(ctx, lu, moved, upper=False, unit=True, what="linalg.lu_solve")
        return _substitute(ctx, lu, y, upper=True, unit=False, what="linalg.lu_solve")
    # U^T L^T P^T X = B: Z = L^-T U^-T B, then X[perm[i]] = Z[i]
    lu_t = _transposed(ctx, lu)
    y = _substitute(ctx, lu_t, b, upper=False, unit=False, what="linalg.lu_solve")
    z = _substitute(ctx, lu_t, y, upper=True, unit=True, what="linalg.lu_solve")
    placed = _permutation_matrix(ctx, perm, out_batch, n)  # placed[r, i] = 1 where perm[i] == r
    inverse = ctx.emit("ARG_MAX", [placed, ctx.const(np.array([len(out_batch) + 1], np.int32), name="axis")],
                       out_batch + [n], np.int32, output_type="INT32")
    return ctx.emit("GATHER", [z, inverse], out_batch + [n, m], z.dtype, axis=len(out_batch),
                    batch_dims=len(out_batch))


# ---- QR: Householder reflections, as LAPACK's geqrf and orgqr -----------------------------------------------
def _scalar_f(ctx, value: float) -> ir.Tensor:
    return ctx.const(np.array(value, np.float32), name="c")


def _outer_update(ctx, a: ir.Tensor, v: ir.Tensor, tau: ir.Tensor, left: bool, skip: int = 0) -> ir.Tensor:
    """(I - tau v v^T) a (left; its first `skip` columns left as they are) or a (I - tau v v^T) (right), v
    [*batch, m, 1], tau [*batch, 1, 1]."""
    batch = list(a.shape[:-2])
    if left:  # a - v (tau v^T a)
        vt = ctx.reshape(v, batch + [1, int(v.shape[-2])])
        width = int(a.shape[-1])
        row = ctx.emit("BATCH_MATMUL", [vt, a], batch + [1, width], a.dtype, adj_x=False, adj_y=False)
        if skip:
            kept = np.zeros((1, width), np.bool_)
            kept[0, :skip] = True
            row = ctx.emit("SELECT_V2", [ctx.const(kept.reshape((1,) * len(batch) + (1, width)), name="kept"),
                                         _scalar_f(ctx, 0.0), row], row.shape, a.dtype)
        return _binary(ctx, "SUB", a, _binary(ctx, "MUL", v, _binary(ctx, "MUL", row, tau)))
    column = ctx.emit("BATCH_MATMUL", [a, v], batch + [int(a.shape[-2]), 1], a.dtype, adj_x=False, adj_y=False)
    vt = ctx.reshape(v, batch + [1, int(v.shape[-2])])
    return _binary(ctx, "SUB", a, _binary(ctx, "MUL", _binary(ctx, "MUL", column, tau), vt))


def _householder(ctx, a: ir.Tensor, m: int, n: int, batch: list[int]):
    """LAPACK's geqrf of a [*batch, m, n]: (R in the upper triangle with each reflector's v below its diagonal,
    the reflectors [(v [*batch, m, 1], tau [*batch, 1, 1])]). For column j: beta = -sign(alpha) ||(alpha, x)||
    (sign(0) = +1), tau = (beta - alpha) / beta, v = (1, x / (alpha - beta)); tau = 0 where x is all zero."""
    rank = len(batch) + 2
    reflectors = []
    for j in range(min(m, n)):
        column = ctx.slice(a, [0] * (rank - 1) + [j], batch + [m, 1])
        below = ctx.const(_rows_at(m, rank, range(j + 1, m)), name="below")
        x = ctx.emit("SELECT_V2", [below, column, _scalar_f(ctx, 0.0)], column.shape, a.dtype)
        alpha = ctx.slice(a, [0] * (rank - 2) + [j, j], batch + [1, 1])
        axis = ctx.const(np.array([rank - 2], np.int32), name="axis")
        xsq = ctx.emit("SUM", [_binary(ctx, "MUL", x, x), axis], batch + [1, 1], a.dtype, keep_dims=True)
        norm = exact.sqrt(ctx, _binary(ctx, "ADD", _binary(ctx, "MUL", alpha, alpha), xsq))
        negative = ctx.emit("LESS", [alpha, _scalar_f(ctx, 0.0)], alpha.shape, np.bool_)
        beta = ctx.emit("SELECT_V2", [negative, norm, ctx.emit("NEG", [norm], like=norm)], alpha.shape, a.dtype)
        plain = ctx.emit("EQUAL", [xsq, _scalar_f(ctx, 0.0)], alpha.shape, np.bool_)  # nothing to reflect
        safe_beta = ctx.emit("SELECT_V2", [plain, _scalar_f(ctx, 1.0), beta], alpha.shape, a.dtype)
        tau = ctx.emit("SELECT_V2", [plain, _scalar_f(ctx, 0.0),
                                     _binary(ctx, "DIV", _binary(ctx, "SUB", beta, alpha), safe_beta)],
                       alpha.shape, a.dtype)
        scale = ctx.emit("SELECT_V2", [plain, _scalar_f(ctx, 1.0), _binary(ctx, "SUB", alpha, beta)], alpha.shape,
                         a.dtype)
        v = _binary(ctx, "DIV", x, scale)
        v = ctx.emit("SELECT_V2", [ctx.const(_rows_at(m, rank, [j]), name="pivot"), _scalar_f(ctx, 1.0), v],
                     v.shape, a.dtype)
        reflectors.append((v, tau))
        a = _outer_update(ctx, a, v, tau, left=True, skip=j)  # the reflectors kept left of column j stay
        # column j becomes beta on the diagonal (alpha where nothing was reflected) and v below it
        diagonal = ctx.emit("SELECT_V2", [plain, alpha, beta], alpha.shape, a.dtype)
        on = np.zeros((m, n), np.bool_)
        on[j, j] = True
        a = ctx.emit("SELECT_V2", [ctx.const(on.reshape((1,) * len(batch) + (m, n)), name="diagonal"), diagonal, a],
                     a.shape, a.dtype)
        under = np.zeros((m, n), np.bool_)
        under[j + 1:, j] = True
        a = ctx.emit("SELECT_V2", [ctx.const(under.reshape((1,) * len(batch) + (m, n)), name="under"), v, a],
                     a.shape, a.dtype)
    return a, reflectors


def _q_from(ctx, reflectors, m: int, columns: int, batch: list[int]) -> ir.Tensor:
    """H_1 H_2 ... H_k applied to the first `columns` columns of the m x m identity (LAPACK's orgqr)."""
    eye = np.broadcast_to(np.eye(m, columns, dtype=np.float32), tuple(batch) + (m, columns)).copy()
    q = ctx.const(eye, name="identity")
    for v, tau in reversed(reflectors):
        q = _outer_update(ctx, q, v, tau, left=True)
    return q


@lowers(aten.linalg_qr.default)
def lower_linalg_qr(ctx, node, a, mode="reduced") -> tuple[ir.Tensor | None, ir.Tensor]:
    """linalg_qr(Tensor A, str mode="reduced") -> (Tensor Q, Tensor R)

    Q and R by Householder reflections with LAPACK's signs (R's diagonal -sign(a_jj) times the column's
    norm, so the results are PyTorch's): mode "reduced" (Q m x k, R k x n), "complete" (Q m x m) or "r" (R
    only)."""
    m, n, batch = _matrix(ctx, a, "linalg.qr")
    k = min(m, n)
    packed, reflectors = _householder(ctx, a, m, n, batch)
    rows = m if mode == "complete" else k
    upper = np.triu(np.ones((rows, n), np.bool_)).reshape((1,) * len(batch) + (rows, n))
    r_part = ctx.slice(packed, [0] * (len(batch) + 2), batch + [rows, n]) if rows < m else packed
    r = ctx.emit("SELECT_V2", [ctx.const(upper, name="upper"), r_part, _scalar_f(ctx, 0.0)], batch + [rows, n],
                 a.dtype)
    if mode == "r":
        return ctx.empty(list(node.outputs[0].shape), np.float32) if 0 in node.used else None, r
    return _q_from(ctx, reflectors, m, m if mode == "complete" else k, batch), r


@lowers(aten.geqrf.default)
def lower_geqrf(ctx, node, a) -> tuple[ir.Tensor, ir.Tensor]:
    """geqrf(Tensor self) -> (Tensor a, Tensor tau)

    LAPACK's geqrf: R above the diagonal and each Householder vector below it, and the reflectors' tau."""
    m, n, batch = _matrix(ctx, a, "geqrf")
    packed, reflectors = _householder(ctx, a, m, n, batch)
    taus = [ctx.reshape(tau, batch + [1]) for _, tau in reflectors]
    tau = taus[0] if len(taus) == 1 else ctx.emit("CONCATENATION", taus, batch + [len(taus)], a.dtype,
                                                  axis=len(batch), fused_activation_function="NONE")
    return packed, tau


def _given_reflectors(ctx, packed: ir.Tensor, tau: ir.Tensor, m: int, count: int, batch: list[int]):
    """The reflectors (v, tau) a geqrf-packed matrix holds in its first `count` columns."""
    rank = len(batch) + 2
    reflectors = []
    for j in range(count):
        column = ctx.slice(packed, [0] * (rank - 1) + [j], batch + [m, 1])
        v = ctx.emit("SELECT_V2", [ctx.const(_rows_at(m, rank, range(j + 1, m)), name="below"), column,
                                   _scalar_f(ctx, 0.0)], column.shape, packed.dtype)
        v = ctx.emit("SELECT_V2", [ctx.const(_rows_at(m, rank, [j]), name="pivot"), _scalar_f(ctx, 1.0), v],
                     v.shape, packed.dtype)
        t = ctx.reshape(ctx.slice(tau, [0] * len(batch) + [j], batch + [1]), batch + [1, 1])
        reflectors.append((v, t))
    return reflectors


@lowers(aten.linalg_householder_product.default)
def lower_householder_product(ctx, node, a, tau) -> ir.Tensor:
    """linalg_householder_product(Tensor input, Tensor tau) -> Tensor

    LAPACK's orgqr: the first n columns of H_1 ... H_k, each H_j = I - tau_j v_j v_j^T with v_j read below the
    diagonal of column j of `a` (a unit above it)."""
    m, n, batch = _matrix(ctx, a, "linalg.householder_product")
    k = int(tau.shape[-1])
    if k > n or [int(d) for d in tau.shape[:-1]] != batch:
        raise ctx.fail(f"householder_product of {list(a.shape)} with tau {list(tau.shape)}")
    return _q_from(ctx, _given_reflectors(ctx, a, ctx.cast(tau, np.float32), m, k, batch), m, n, batch)


@lowers(aten.ormqr.default)
def lower_ormqr(ctx, node, a, tau, other, left=True, transpose=False) -> ir.Tensor:
    """ormqr(Tensor self, Tensor input2, Tensor input3, bool left=True, bool transpose=False) -> Tensor

    LAPACK's ormqr: `other` multiplied by Q (or Q^T) from the left or the right, Q = H_1 ... H_k the
    reflectors a geqrf-packed `a` holds, applied one by one (Q is never formed)."""
    m, n, batch = _matrix(ctx, a, "ormqr")
    k = int(tau.shape[-1])
    if not all_static(other.shape) or [int(d) for d in other.shape[:-2]] != batch or k > min(m, n):
        raise ctx.fail(f"ormqr of {list(a.shape)} with tau {list(tau.shape)} and {list(other.shape)}")
    reflectors = _given_reflectors(ctx, a, ctx.cast(tau, np.float32), m, k, batch)
    # Q C applies H_k first; Q^T C applies H_1 first; C Q applies H_1 first; C Q^T applies H_k first
    order = reflectors if transpose == left else list(reversed(reflectors))
    out = ctx.cast(other, np.float32)
    for v, t in order:
        out = _outer_update(ctx, out, v, t, left=left)
    return out
