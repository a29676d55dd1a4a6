"""litert_torch: PyTorch models to LiteRT (.tflite), written directly in Python.

    import litert_torch
    edge = litert_torch.convert(model.eval(), (sample_input,))
    edge(sample_input)           # runs in the LiteRT runtime
    edge.export("model.tflite")

The names below load on first use: `from litert_torch.runtime import EdgeModel` runs converted models without
importing the conversion stack (frontend, lowerings, passes).
"""

from __future__ import annotations

import importlib
from typing import Any

from litert_torch.errors import (
    CalibrationError,
    ConversionError,
    ExportError,
    InvalidArgumentError,
    LiteRTTorchError,
    LoweringError,
    ModelFileError,
    ModelInputError,
    OnnxError,
    QuantizationArgumentError,
    QuantizationError,
    UnknownSignatureError,
    UnsupportedOpsError,
)

# public name -> the module that defines it
_LAZY = {
    "SignatureSet": "litert_torch.converter",
    "convert": "litert_torch.converter",
    "convert_onnx": "litert_torch.converter",
    "signature": "litert_torch.converter",
    "AotCompileError": "litert_torch.delegates.aot",
    "aot_compile": "litert_torch.delegates.aot",
    "QuantizationReport": "litert_torch.quantization_report",
    "quantize": "litert_torch.quantization",
    "EdgeModel": "litert_torch.runtime.edge_model",
    "AcceleratorUnavailable": "litert_torch.runtime.accelerated",
    "ValidationReport": "litert_torch.runtime.validate",
    "validate": "litert_torch.runtime.validate",
    "validate_onnx": "litert_torch.runtime.validate",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'litert_torch' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AcceleratorUnavailable",
    "AotCompileError",
    "aot_compile",
    "CalibrationError",
    "ConversionError",
    "EdgeModel",
    "ExportError",
    "InvalidArgumentError",
    "LiteRTTorchError",
    "LoweringError",
    "ModelFileError",
    "ModelInputError",
    "OnnxError",
    "QuantizationArgumentError",
    "QuantizationError",
    "QuantizationReport",
    "SignatureSet",
    "UnknownSignatureError",
    "UnsupportedOpsError",
    "ValidationReport",
    "convert",
    "convert_onnx",
    "quantize",
    "signature",
    "validate",
    "validate_onnx",
]
__version__ = "0.1.0"
