"""litert_torch: PyTorch models to LiteRT (.tflite), written directly in Python.

    import litert_torch
    edge = litert_torch.convert(model.eval(), (sample_input,))
    edge(sample_input)           # runs in the LiteRT runtime
    edge.export("model.tflite")

The API is the official litert-torch's (`convert`, `signature`, `Converter`, `load`, `to_channel_last_io`,
`config`, `debug.find_culprits`, `quantize.*`, `testing.*`), with additions of ours (see docs/MIGRATING.md). The names below load on
first use: `from litert_torch.runtime import EdgeModel` runs converted models without
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
    ModelLoadError,
    ModelNotExportableError,
    OnnxError,
    QuantizationArgumentError,
    QuantizationError,
    SampleInputError,
    UnknownSignatureError,
    UnsupportedOpsError,
)

# public name -> the module that defines it
_LAZY = {
    "Converter": "litert_torch.converter",
    "SignatureSet": "litert_torch.converter",
    "convert": "litert_torch.converter",
    "convert_onnx": "litert_torch.converter",
    "experimental_add_compilation_backend": "litert_torch.converter",
    "signature": "litert_torch.converter",
    "config": "litert_torch.settings",
    "to_channel_last_io": "litert_torch.wrappers",
    "load": "litert_torch.runtime.edge_model",
    "Model": "litert_torch.runtime.edge_model",
    "AotCompileError": "litert_torch.delegates.aot",
    "aot_compile": "litert_torch.delegates.aot",
    "QuantizationReport": "litert_torch.quantization.report",
    "quantize_model": "litert_torch.quantization.quantize",
    "EdgeModel": "litert_torch.runtime.edge_model",
    "AcceleratorUnavailable": "litert_torch.runtime.accelerated",
    "ValidationReport": "litert_torch.validation.validate",
    "validate": "litert_torch.validation.validate",
    "validate_onnx": "litert_torch.validation.validate",
    "ModelExplorerUnavailable": "litert_torch.explorer.graph",
    "view": "litert_torch.explorer",
}


# submodules the official litert-torch reaches as attributes (litert_torch.quantize.quant_config, ...)
_SUBMODULES = ("converter_v2", "debug", "quantize", "testing", "generative")


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"litert_torch.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'litert_torch' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))


__all__ = [
    "AcceleratorUnavailable",
    "AotCompileError",
    "aot_compile",
    "CalibrationError",
    "ConversionError",
    "Converter",
    "Model",
    "EdgeModel",
    "ExportError",
    "InvalidArgumentError",
    "LiteRTTorchError",
    "LoweringError",
    "ModelFileError",
    "ModelExplorerUnavailable",
    "ModelInputError",
    "ModelLoadError",
    "ModelNotExportableError",
    "OnnxError",
    "QuantizationArgumentError",
    "QuantizationError",
    "QuantizationReport",
    "SampleInputError",
    "SignatureSet",
    "UnknownSignatureError",
    "UnsupportedOpsError",
    "ValidationReport",
    "config",
    "convert",
    "convert_onnx",
    "experimental_add_compilation_backend",
    "load",
    "quantize_model",
    "signature",
    "to_channel_last_io",
    "validate",
    "validate_onnx",
    "view",
]
__version__ = "0.1.0"
