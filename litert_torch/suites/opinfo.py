"""PyTorch's OpInfo database as a conversion suite: every OpInfo with float32 on the CPU, its first two sample
inputs, each call wrapped in a module (tensor arguments as the module's inputs, the rest fixed), converted,
run, and compared with eager PyTorch at rtol 1e-4 / atol 1e-5 (exact for integer and bool results).

Needs torch's test helpers (`pip install expecttest`); case ids are `name[.variant]#index`."""

from __future__ import annotations

import functools
from typing import Any

RTOL, ATOL = 1e-4, 1e-5
SAMPLES = 2


@functools.cache
def _ops() -> dict[str, Any]:
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    return {op.name + (f".{op.variant_test_name}" if op.variant_test_name else ""): op for op in op_db
            if torch.float32 in op.supported_dtypes("cpu")}


def cases() -> list[str]:
    return [f"{name}#{i}" for name in sorted(_ops()) for i in range(SAMPLES)]


def op_of(case: str) -> str:
    return case.rsplit("#", 1)[0]


def _sample(case: str):
    import torch

    name, index = case.rsplit("#", 1)
    samples = _ops()[name].sample_inputs("cpu", torch.float32, requires_grad=False)
    for i, sample in enumerate(samples):
        if i == int(index):
            return _ops()[name], sample
    return _ops()[name], None


def build(case: str) -> tuple[Any, tuple, Any] | dict[str, str]:
    """The case as (module, inputs, expected outputs), or a result dict when it is skipped. Needs torch only, so
    that another converter's worker can run the same cases (bench/official_opinfo.py)."""
    import torch
    import torch.utils._pytree as pytree

    torch.manual_seed(0)
    op, sample = _sample(case)
    if sample is None:
        return {"status": "skipped", "detail": "the OpInfo has fewer samples"}
    call = (sample.input, *sample.args)
    leaves, spec = pytree.tree_flatten((call, dict(sample.kwargs)))
    positions = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
    inputs = tuple(leaves[i].detach().clone() for i in positions)
    if any(t.dtype in (torch.complex64, torch.complex128, torch.bfloat16) for t in inputs):
        return {"status": "skipped", "detail": "complex or bfloat16 input"}

    class Call(torch.nn.Module):
        def forward(self, *tensors):
            values = list(leaves)
            for i, t in zip(positions, tensors):
                values[i] = t
            args, kwargs = pytree.tree_unflatten(values, spec)
            # a model returns real tensors: a complex result is compared as its real and imaginary parts
            return pytree.tree_map(lambda v: torch.view_as_real(v.resolve_conj()) if isinstance(v, torch.Tensor)
                                   and v.is_complex() else v, op.op(*args, **kwargs))

    module = Call().eval()
    try:
        with torch.no_grad():
            expected = module(*(t.clone() for t in inputs))
    except Exception as exc:  # noqa: BLE001 - the sample itself does not run eagerly
        return {"status": "skipped", "detail": f"eager: {type(exc).__name__}"}
    outs = expected if isinstance(expected, (tuple, list)) else (expected,)
    if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
        return {"status": "skipped", "detail": "non-tensor output"}
    if not inputs:
        return {"status": "skipped", "detail": "no tensor input"}
    return module, inputs, outs


def run_case(case: str) -> dict:
    import litert_torch
    from litert_torch.suites.common import as_numpy, convert_run_compare

    built = build(case)
    if isinstance(built, dict):
        return built
    module, inputs, outs = built
    return convert_run_compare(lambda: litert_torch.convert(module, inputs), inputs,
                               lambda: [as_numpy(o) for o in outs], lambda e: (RTOL, ATOL), "PyTorch")
