"""Test helpers with the official litert-torch's names, so that tests written for it run here:

    from litert_torch import testing
    from litert_torch.testing import model_coverage

    @testing.parameterized_class(testing.V1_V2_PARAMETERS)
    class MyTest(testing.V1V2TestCase):
        def test_add(self):
            edge = litert_torch.convert(model, args)
            self.assertTrue(model_coverage.compare_tflite_torch(edge, model, args))

`V1V2TestCase` needs absl-py (installed with ai-edge-litert).
"""

from __future__ import annotations

import importlib
from typing import Any

from litert_torch.testing import model_coverage
from litert_torch.testing.export import export_with_tensor_inputs_only
from litert_torch.testing.parameterize import V1_V2_PARAMETERS, parameterized_class

__all__ = ["V1_V2_PARAMETERS", "V1V2TestCase", "export_with_tensor_inputs_only", "model_coverage",
           "parameterized_class", "test_utils"]


def __getattr__(name: str) -> Any:
    if name in ("V1V2TestCase", "test_utils"):  # imports absltest, on first use
        module = importlib.import_module("litert_torch.testing.test_utils")
        return module if name == "test_utils" else module.V1V2TestCase
    raise AttributeError(f"module 'litert_torch.testing' has no attribute {name!r}")
