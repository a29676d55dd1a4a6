"""What both suites do with one case once they have its inputs and reference outputs: convert, run, compare,
and name the outcome (`litert_torch.suites.STATUSES`)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


def refusal(exc: Exception) -> str:
    """A conversion error in a line: the ops without a lowering, or the first line of the message."""
    ops = getattr(exc, "ops", None)
    if ops:
        return "no lowering: " + ", ".join(op.target for op in ops)
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"


def classify(exc: Exception) -> dict:
    """A conversion failure of ours as a result: not-exported (torch.export), refused (a typed conversion error)
    or error (anything untyped, which must not happen)."""
    from litert_torch.errors import ConversionError, ExportError

    if isinstance(exc, ExportError):
        return {"status": "not-exported", "detail": str(exc).splitlines()[-1][:200] if str(exc) else "ExportError"}
    if isinstance(exc, ConversionError):
        return {"status": "refused", "detail": refusal(exc)}
    return {"status": "error", "detail": f"{type(exc).__name__}: {str(exc)[:200]}"}


def as_numpy(value: Any) -> np.ndarray:
    """A result as numpy: a torch tensor detached, bfloat16 (which numpy lacks) as the float32 it widens to
    exactly."""
    if hasattr(value, "detach"):
        value = value.detach().float() if str(value.dtype) == "torch.bfloat16" else value.detach()
    return np.asarray(value)


def convert_run_compare(convert: Callable[[], Any], inputs: tuple, reference_outputs: Callable[[], list[np.ndarray]],
                        tolerance: Callable[[np.ndarray], tuple[float, float]], reference: str, *,
                        failed: Callable[[Exception], dict] = classify,
                        run: Callable[[Any, tuple], Any] | None = None) -> dict:
    """Convert (`convert()`), run on `inputs` (`run(model, inputs)`, by default our EdgeModel's
    call_like_module), compare with `reference_outputs()` (asked for once the model ran) at
    `tolerance(expected_output)` = (rtol, atol) for floating-point outputs, exactly otherwise. A conversion that
    raises is recorded as `failed(exc)` says."""
    try:
        edge = convert()
    except Exception as exc:  # noqa: BLE001 - every conversion failure is a result of the case
        return failed(exc)
    try:
        got = run(edge, inputs) if run is not None else edge.call_like_module(*inputs)
    except Exception as exc:  # noqa: BLE001 - typed or not, the runtime refused to run the converted model
        return {"status": "runtime-error", "detail": f"{type(exc).__name__}: {str(exc)[:200]}"}
    gots = list(got) if isinstance(got, (tuple, list)) else [got]
    expected = reference_outputs()
    if len(gots) != len(expected):
        return {"status": "wrong", "detail": f"{len(gots)} outputs, {reference} gives {len(expected)}"}
    for k, (g, e) in enumerate(zip(gots, expected)):
        g = as_numpy(g)
        if g.shape != e.shape:
            return {"status": "wrong", "detail": f"output {k}: shape {list(g.shape)}, {reference} {list(e.shape)}"}
        if e.dtype.kind in "fc":
            rtol, atol = tolerance(e)
            ok = np.allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
        else:
            ok = np.array_equal(g.astype(e.dtype), e)
        if not ok:
            err = float(np.nanmax(np.abs(g.astype(np.float64) - e.astype(np.float64)))) if e.size else 0.0
            return {"status": "wrong", "detail": f"output {k}: max|err| {err:.3g}"}
    return {"status": "pass", "detail": ""}
