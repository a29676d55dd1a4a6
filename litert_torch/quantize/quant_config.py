"""`QuantConfig`: how `convert(..., quant_config=...)` treats a quantized module (the official litert-torch's
class)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litert_torch.errors import InvalidArgumentError


@dataclass(frozen=True, init=False)
class QuantConfig:
    """`pt2e_quantizer`: the PT2EQuantizer the module was prepared with. A static config (activations
    calibrated) needs nothing more: the converted module's quantize/dequantize nodes become QUANTIZE/DEQUANTIZE
    with int8 weights. A dynamic config (`is_dynamic=True`: weights only, activations quantized per call by the
    kernels) makes `convert` quantize the model's weights to int8 per channel ("dynamic-int8").

    `generative_recipe` (the official's recipes for its own generative models) has no counterpart here: the
    Hugging Face exporter takes `quantization_recipe=` (litert_torch.generative.export_hf)."""

    pt2e_quantizer: Any = None
    generative_recipe: Any = None

    def __init__(self, pt2e_quantizer: Any = None, generative_recipe: Any = None):
        if pt2e_quantizer is not None and generative_recipe is not None:
            raise InvalidArgumentError("give pt2e_quantizer or generative_recipe, not both")
        if generative_recipe is not None:
            raise InvalidArgumentError("generative_recipe applies to the official litert-torch's generative models; "
                                       "here Hugging Face models take export_hf's quantization_recipe=")
        if pt2e_quantizer is not None and not hasattr(pt2e_quantizer, "global_config"):
            raise InvalidArgumentError("pt2e_quantizer must be a litert_torch.quantize.pt2e_quantizer.PT2EQuantizer, "
                                       f"got {type(pt2e_quantizer).__name__}")
        object.__setattr__(self, "pt2e_quantizer", pt2e_quantizer)
        object.__setattr__(self, "generative_recipe", None)

    @property
    def is_dynamic(self) -> bool:
        """Whether the PT2E config quantizes weights only (activations at run time)."""
        config = getattr(self.pt2e_quantizer, "global_config", None)
        return bool(config is not None and config.is_dynamic)
