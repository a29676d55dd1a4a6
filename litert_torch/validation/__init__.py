"""Proof that a converted model computes what its source computes.

- `validate` (`validate.py`): the edge model against eager PyTorch on the sample inputs and random draws, per
  output and per backend (XNNPACK, LiteRT's reference kernels, the cloud XLA path), and on failure the first
  PyTorch node where the edge model departs; `validate_onnx` against ONNX Runtime.
- `compare.py`: the comparison of two sets of outputs within the numerics contract's tolerance.
- `cloud.py`: the model on the XLA path (torchax + JAX, or torch-tpu on a TPU host).
- `report_html.py`: the report as one HTML page.
- `dataset.py`: a dataset run through PyTorch and each converted variant, with error statistics per variant.

Validation converts, traces and runs models, so it sits above the converter; the runtime never imports it.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module of this package that defines it (loaded on first use)
_NAMES = {
    "validate": "validate", "validate_onnx": "validate", "ValidationReport": "validate",
    "compare_outputs": "compare", "OutputComparison": "compare",
    "validate_dataset": "dataset", "DatasetReport": "dataset",
}


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'litert_torch.validation' has no attribute {name!r}")
    return getattr(importlib.import_module(f"litert_torch.validation.{module}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_NAMES))
