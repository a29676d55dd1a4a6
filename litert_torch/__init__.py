"""litert_torch: PyTorch models to LiteRT (.tflite), written directly in Python.

    import litert_torch
    edge = litert_torch.convert(model.eval(), (sample_input,))
    edge(sample_input)           # runs in the LiteRT runtime
    edge.export("model.tflite")
"""

from litert_torch.converter import SignatureSet, convert, convert_onnx, signature
from litert_torch.delegates.aot import AotCompileError, aot_compile
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
    QuantizationError,
    UnknownSignatureError,
    UnsupportedOpsError,
)
from litert_torch.quantization import QuantizationReport, quantize
from litert_torch.runtime import EdgeModel
from litert_torch.runtime.accelerated import AcceleratorUnavailable
from litert_torch.runtime.validate import ValidationReport, validate, validate_onnx

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
