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
    from litert_torch.suites.common import convert_run_compare

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

    def tolerance(expected: np.ndarray) -> tuple[float, float]:
        # float16 results: a few float16 rounding steps (the reference rounds after every op of an expanded
        # function, the runtime's kernels round differently or keep a wider intermediate)
        if expected.dtype == np.float16:
            return max(c.rtol, 2.0**-8), max(c.atol, 2.0**-24)
        return c.rtol, c.atol

    return convert_run_compare(lambda: litert_torch.convert_onnx(model), tuple(inputs), lambda: list(outputs),
                               tolerance, "ONNX")
