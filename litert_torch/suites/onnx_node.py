"""ONNX's backend node tests as a conversion suite. The test data is not in the onnx wheel; onnx's own case
generators (`onnx.backend.test.case.node`) make every case: a one-node model with its inputs and expected
outputs. Each model is converted with `convert_onnx`, run on the case's inputs and compared with the expected
outputs at the case's own tolerances (widened to a few float16 rounding steps, rtol 2**-8, for float16 outputs;
exact for integer and bool outputs). Case ids are the test names
(`test_add_bcast`); cases of ops outside the ONNX domain or with non-tensor inputs are skipped."""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def _cases() -> dict[str, Any]:
    import warnings

    from onnx.backend.test.case import node

    with warnings.catch_warnings(), _quiet():
        warnings.simplefilter("ignore")
        collected = node.collect_testcases(None)
    return {c.name: c for c in collected if c.kind == "node"}


def _quiet():
    import contextlib
    import io

    return contextlib.redirect_stdout(io.StringIO())


def cases() -> list[str]:
    return sorted(_cases())


def op_of(case: str) -> str:
    c = _cases().get(case)
    return c.model.graph.node[0].op_type if c is not None and c.model.graph.node else case


def run_case(case: str) -> dict:
    import numpy as np

    import litert_torch
    from litert_torch.errors import ConversionError, LiteRTTorchError
    from litert_torch.suites.opinfo import refusal

    c = _cases()[case]
    model = c.model
    if any(o.domain not in ("", "ai.onnx") for o in model.opset_import) or not c.data_sets:
        return {"status": "skipped", "detail": "custom domain or no data"}
    inputs, outputs = c.data_sets[0]
    inputs = [np.asarray(x) if isinstance(x, np.generic) else x for x in inputs]
    outputs = [np.asarray(x) if isinstance(x, np.generic) else x for x in outputs]
    if not all(isinstance(x, np.ndarray) for x in [*inputs, *outputs]):
        return {"status": "skipped", "detail": "sequence, optional or map values"}
    if any(x.dtype.kind in "cSUOV" for x in [*inputs, *outputs]):
        return {"status": "skipped", "detail": "string, complex or object data"}
    try:
        edge = litert_torch.convert_onnx(model)
    except ConversionError as exc:
        return {"status": "refused", "detail": refusal(exc)}
    except Exception as exc:  # noqa: BLE001 - an untyped failure inside the converter is what this records
        return {"status": "error", "detail": f"{type(exc).__name__}: {str(exc)[:200]}"}
    try:
        got = edge(*inputs)
    except LiteRTTorchError as exc:
        return {"status": "runtime-error", "detail": f"{type(exc).__name__}: {str(exc)[:200]}"}
    except Exception as exc:  # noqa: BLE001
        return {"status": "runtime-error", "detail": f"{type(exc).__name__}: {str(exc)[:200]}"}
    gots = list(got) if isinstance(got, (tuple, list)) else [got]
    if len(gots) != len(outputs):
        return {"status": "wrong", "detail": f"{len(gots)} outputs, ONNX expects {len(outputs)}"}
    for k, (g, e) in enumerate(zip(gots, outputs)):
        g = np.asarray(g)
        if g.shape != e.shape:
            return {"status": "wrong", "detail": f"output {k}: shape {list(g.shape)}, expected {list(e.shape)}"}
        if e.dtype.kind == "f":
            # float16 results: a few float16 rounding steps (the reference rounds after every op of an expanded
            # function, the runtime's kernels round differently or keep a wider intermediate)
            rtol, atol = (max(c.rtol, 2.0**-8), max(c.atol, 2.0**-24)) if e.dtype == np.float16 else (c.rtol, c.atol)
            ok = np.allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
        else:
            ok = np.array_equal(g.astype(e.dtype), e)
        if not ok:
            err = float(np.nanmax(np.abs(g.astype(np.float64) - e.astype(np.float64)))) if e.size else 0.0
            return {"status": "wrong", "detail": f"output {k}: max|err| {err:.3g}"}
    return {"status": "pass", "detail": ""}
