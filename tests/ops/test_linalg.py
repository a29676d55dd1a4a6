"""Small dense linear algebra inside a model: inverse, solve, determinants, Cholesky factors and triangular
solves, unrolled over the columns, for every matrix the model is given (pivoting included); and what PyTorch
raises on (a singular matrix) as the error codes LAPACK gives, or inf / NaN."""

import numpy as np
import pytest
import torch

import litert_torch
from tests.helpers import litert_warnings


class Solvers(torch.nn.Module):
    def forward(self, a, b):
        sign, logabs = torch.linalg.slogdet(a)
        return (torch.linalg.inv(a), torch.linalg.solve(a, b), torch.linalg.solve(a, b.unsqueeze(-1)),
                torch.linalg.solve(a, b.unsqueeze(-2), left=False), torch.linalg.det(a), sign, logabs)


class Factors(torch.nn.Module):
    def forward(self, a, b):
        spd = a @ a.mT + 0.5 * torch.eye(a.shape[-1])
        return (torch.linalg.cholesky(spd), torch.linalg.cholesky(spd, upper=True),
                torch.linalg.solve_triangular(a, b, upper=False),
                torch.linalg.solve_triangular(a, b, upper=True, unitriangular=True),
                torch.linalg.solve_triangular(a, b.mT, upper=True, left=False),
                torch.triangular_solve(b, a, upper=False, transpose=True)[0])  # the deprecated spelling


def _compare(edge, model, *args, rtol=1e-4):
    with torch.no_grad():
        want = [w.numpy() for w in model(*args)]
    for got, w in zip(edge(*args), want):
        np.testing.assert_allclose(np.asarray(got), w, rtol=rtol, atol=rtol * max(1.0, float(np.abs(w).max())))


@pytest.mark.parametrize("n", [1, 2, 5])
def test_inverse_solve_and_determinants_for_every_matrix(n):
    torch.manual_seed(n)
    model = Solvers()
    edge = litert_torch.convert(model, (torch.randn(3, n, n), torch.randn(3, n)))
    for _ in range(3):
        # well conditioned, so that float32 elimination and LAPACK agree closely; signs and swaps vary
        a = torch.randn(3, n, n) + 2 * torch.diag_embed(torch.sign(torch.randn(3, n)))
        _compare(edge, model, a, torch.randn(3, n))
    if n > 1:  # a zero where the first pivot would be: only a row swap lets the elimination go on
        a = torch.randn(3, n, n) + 2 * torch.eye(n).flip(0)
        a[:, 0, 0] = 0.0
        _compare(edge, model, a, torch.randn(3, n))


def _determinant_tolerance(a):
    """How far two float32 eliminations may honestly disagree on det(a): the rounding of an LU factorisation is a
    backward error of about n * eps relative to each row, so the determinant moves by up to n * eps times
    Hadamard's bound (the product of the row norms). For a singular matrix that is the only scale there is:
    one BLAS gives 1.79e-07 for the singular matrix below where another gives -0.0."""
    n = a.shape[-1]
    hadamard = torch.linalg.vector_norm(a, dim=-1).prod(-1).numpy()
    return 4 * n * np.finfo(np.float32).eps * hadamard


def test_singular_matrices_give_zero_determinants_and_lapacks_error_codes():
    class Codes(torch.nn.Module):
        def forward(self, a, b):
            sign, logabs = torch.linalg.slogdet(a)
            return (torch.linalg.det(a), sign, logabs, torch.linalg.inv_ex(a).info,
                    torch.linalg.solve_ex(a, b).info, torch.linalg.cholesky_ex(a).info)

    a = torch.stack([torch.eye(3), torch.tensor([[1.0, 2, 3], [2, 4, 6], [1, 1, 1]]),
                     torch.tensor([[4.0, 0, 0], [0, -1, 0], [0, 0, 1]])])
    edge = litert_torch.convert(Codes(), (torch.randn(3, 3, 3), torch.randn(3, 3)))
    det, sign, logabs, *codes = (np.asarray(g) for g in edge(a, torch.randn(3, 3)))
    with torch.no_grad():
        want = torch.linalg.det(a).numpy()
    tolerance = _determinant_tolerance(a)
    assert np.all(np.abs(det - want) <= tolerance), (det, want, tolerance)
    assert np.all(np.abs(sign * np.exp(logabs) - want) <= tolerance), (sign, logabs, want, tolerance)
    assert np.all(np.isin(sign, (-1.0, 0.0, 1.0)))
    # the codes are LAPACK's for these matrices: the 1-based index of the zero pivot (inv, solve), of the first
    # leading minor that is not positive (Cholesky); 0 where there is none
    np.testing.assert_array_equal(codes, [[0, 3, 0], [0, 3, 0], [0, 2, 2]])


def test_factors_and_triangular_solves():
    torch.manual_seed(0)
    model = Factors()
    edge = litert_torch.convert(model, (torch.randn(2, 4, 4), torch.randn(2, 4, 3)))
    for _ in range(3):
        _compare(edge, model, torch.randn(2, 4, 4) + 3 * torch.eye(4), torch.randn(2, 4, 3))


def test_the_dropped_input_check_is_said_once():
    class Inverse(torch.nn.Module):
        def forward(self, a):
            return torch.linalg.inv(a) + torch.linalg.inv(a.mT)

    with litert_warnings() as records:
        edge = litert_torch.convert(Inverse(), (torch.randn(3, 3),))
    assert len([r for r in records if "torch.linalg's check" in r.getMessage()]) == 1
    singular = torch.ones(3, 3)
    assert not np.isfinite(np.asarray(edge(singular))).all()


def test_large_and_dynamic_matrices_are_refused_clearly():
    class Inverse(torch.nn.Module):
        def forward(self, a):
            return torch.linalg.inv(a)

    with pytest.raises(litert_torch.LoweringError, match="65 x 65"):
        litert_torch.convert(Inverse(), (torch.randn(65, 65),))
    with pytest.raises(litert_torch.LoweringError, match="run-time size"):
        litert_torch.convert(Inverse(), (torch.randn(2, 3, 3),),
                             dynamic_shapes=({0: torch.export.Dim("b"), 1: torch.export.Dim("n"),
                                              2: torch.export.Dim("n")},))


class LU(torch.nn.Module):
    def forward(self, a, b):
        lu, pivots = torch.linalg.lu_factor(a)
        p, lower, upper = torch.linalg.lu(a)
        return (lu, pivots, p, lower, upper, torch.linalg.lu_solve(lu, pivots, b),
                torch.linalg.lu_solve(lu, pivots, b, adjoint=True), torch.linalg.lu_solve(lu, pivots, b.mT, left=False),
                *torch.lu_unpack(lu, pivots))


def test_lu_factors_pivots_and_solves_as_lapack_gives_them():
    torch.manual_seed(0)
    model = LU()
    edge = litert_torch.convert(model, (torch.randn(2, 4, 4), torch.randn(2, 4, 3)))
    for _ in range(3):
        a, b = torch.randn(2, 4, 4), torch.randn(2, 4, 3)
        with torch.no_grad():
            want = model(a, b)
        got = edge(a, b)
        np.testing.assert_array_equal(np.asarray(got[1]), want[1].numpy())  # the 1-based pivots, exactly
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-4, atol=1e-4 * max(1.0, float(w.abs().max())))


@pytest.mark.parametrize("shape", [(3, 5), (5, 3)], ids=["wide", "tall"])
def test_lu_of_rectangular_matrices(shape):
    class Rectangular(torch.nn.Module):
        def forward(self, a):
            lu, pivots = torch.linalg.lu_factor(a)
            return (lu, pivots, *torch.linalg.lu(a), *torch.lu_unpack(lu, pivots))

    torch.manual_seed(0)
    edge = litert_torch.convert(Rectangular(), (torch.randn(2, *shape),))
    for _ in range(3):
        a = torch.randn(2, *shape)
        with torch.no_grad():
            want = Rectangular()(a)
        for g, w in zip(edge(a), want):
            np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 5, 3), (4, 4), (3, 5)], ids=["tall", "square", "wide"])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr_geqrf_and_householder_product_with_lapacks_signs(shape, mode):
    class QR(torch.nn.Module):
        def forward(self, a):
            q, r = torch.linalg.qr(a, mode=mode)
            packed, tau = torch.geqrf(a)
            tall = a.shape[-2] >= a.shape[-1]
            return (r, packed, tau) + ((q,) if mode != "r" else ()) + \
                ((torch.linalg.householder_product(packed, tau),) if tall else ())

    torch.manual_seed(0)
    edge = litert_torch.convert(QR(), (torch.randn(*shape),))
    for zero_column in (False, True):  # a zero column reflects nothing (tau 0)
        a = torch.randn(*shape)
        if zero_column:
            a[..., 0] = 0.0
        with torch.no_grad():
            want = QR()(a)
        for g, w in zip(edge(a), want):
            np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
def test_ormqr_multiplies_by_the_reflectors(left, transpose):
    class Multiply(torch.nn.Module):
        def forward(self, a, c):
            packed, tau = torch.geqrf(a)
            return torch.ormqr(packed, tau, c, left=left, transpose=transpose)

    torch.manual_seed(0)
    a, c = torch.randn(2, 5, 3), (torch.randn(2, 5, 4) if left else torch.randn(2, 4, 5))
    edge = litert_torch.convert(Multiply(), (a, c))
    np.testing.assert_allclose(np.asarray(edge(a, c)), Multiply()(a, c).numpy(), rtol=1e-5, atol=1e-5)
