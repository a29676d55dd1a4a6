"""Output comparison under the project's numerics contract.

An fp32 edge model matches PyTorch when, on every output, max |edge - ref| <= rtol * max|ref| + atol with
rtol = 1e-4 and atol = 1e-5 (relative to the output's largest magnitude, so that near-zero elements of a
large output do not fail on rounding noise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree

from litert_torch.errors import InvalidArgumentError
from litert_torch.structure import plain

RTOL = 1e-4
ATOL = 1e-5


@dataclass(frozen=True)
class OutputComparison:
    name: str
    shape: tuple[int, ...]
    max_abs_error: float
    max_abs_reference: float
    mean_abs_error: float
    cosine: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.max_abs_error <= self.tolerance

    @property
    def relative_error(self) -> float:
        return self.max_abs_error / self.max_abs_reference if self.max_abs_reference else float(self.max_abs_error)

    def describe(self) -> str:
        verdict = "ok" if self.passed else "FAIL"
        return (f"{self.name:<20} {str(list(self.shape)):<18} max|err| {self.max_abs_error:.3e}  "
                f"rel {self.relative_error:.3e}  cos {self.cosine:.6f}  tol {self.tolerance:.3e}  {verdict}")


def _as_numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def compare_outputs(reference: Any, edge: Any, *, rtol: float = RTOL, atol: float = ATOL,
                    names: list[str] | None = None) -> list[OutputComparison]:
    """Compare two output structures leaf by leaf (they must have the same pytree structure)."""
    ref_leaves, ref_spec = pytree.tree_flatten(plain(reference))
    edge_leaves, edge_spec = pytree.tree_flatten(plain(edge))
    if ref_spec != edge_spec:
        raise InvalidArgumentError(f"output structures differ: reference {ref_spec}, edge {edge_spec}")
    results = []
    for i, (r, e) in enumerate(zip(ref_leaves, edge_leaves)):
        r64, e64 = _as_numpy(r).astype(np.float64), _as_numpy(e).astype(np.float64)
        if r64.shape != e64.shape:
            raise InvalidArgumentError(f"output {i}: shape {list(e64.shape)} differs from the reference {list(r64.shape)}")
        diff = np.abs(r64 - e64)
        ref_max = float(np.abs(r64).max()) if r64.size else 0.0
        denom = float(np.linalg.norm(r64) * np.linalg.norm(e64))
        cosine = float((r64 * e64).sum() / denom) if denom else (1.0 if not diff.any() else 0.0)
        results.append(OutputComparison(
            names[i] if names else f"output_{i}", tuple(r64.shape),
            float(diff.max()) if diff.size else 0.0, ref_max, float(diff.mean()) if diff.size else 0.0,
            cosine, rtol * ref_max + atol,
        ))
    return results
