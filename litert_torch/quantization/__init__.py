"""Quantization of converted models: float16 weights, dynamic-range int8, full-integer int8 with calibration.

    edge = litert_torch.convert(model, args, quantize="int8", calibration_data=samples)
    edge = litert_torch.quantize_model(float_edge, "dynamic-int8")

- `fp16`: every float32 constant of 16 or more elements is stored as float16 and widened by a DEQUANTIZE op
  (LiteRT does that once, when the model is prepared; XNNPACK computes in float32, GPU delegates may compute
  in float16). Our own IR pass: it covers every weight (embedding tables and matmul constants included), where
  ai-edge-quantizer's float casting covers only convolution, dense and embedding-lookup weights.
- `dynamic-int8`: int8 weights (per channel), float activations quantized on the fly by the kernels.
- `int8`: int8 weights (per channel) and int8 activations (per tensor) with ranges calibrated on
  `calibration_data`; model inputs and outputs stay float (a QUANTIZE in, a DEQUANTIZE out) unless
  `quantized_io=True` makes them int8 (`EdgeModel.signatures[...].inputs[i].quantization` gives scale and
  zero point). Ops the quantizer has no int8 kernel for stay float between a DEQUANTIZE and a QUANTIZE, and the
  report says which and where they came from.
- A recipe (ai-edge-quantizer's JSON recipe: a list of dicts, or a path to one) for anything finer;
  `keep_float=[pattern, ...]` keeps in float the ops whose PyTorch node, module path or source line matches a
  pattern (a regular expression), in any mode.

The int8 modes run ai-edge-quantizer (`pip install litert-torch-direct[quantize]`) on the float model we write.
The quantized model keeps our metadata: the source map (ops the quantizer inserted take the source of the op
they serve), a delegate plan recomputed for the quantized ops, and `litert_torch.quantization` (this module's
report: mode, recipe, calibration sample count, sizes, the ops left in float and why).
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module of this package that defines it (loaded on first use, so that reading a report does not
# load the quantizer)
_NAMES = {
    "quantize_model": "quantize", "MODES": "quantize", "MIN_CALIBRATION_SAMPLES": "quantize",
    "TOLERANCES": "quantize", "calibration_feeds": "quantize", "matching_ops": "quantize",
    "int8_weights_report": "quantize",
    "fp16_weights": "weights", "int8_weights": "weights", "int8_gathered_tables": "weights",
    "FP16_MIN_ELEMENTS": "weights", "WEIGHT_OPS": "weights",
    "QUANTIZATION_KEY": "report", "QuantizationReport": "report", "FloatOp": "report",
}


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'litert_torch.quantization' has no attribute {name!r}")
    return getattr(importlib.import_module(f"litert_torch.quantization.{module}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_NAMES))
