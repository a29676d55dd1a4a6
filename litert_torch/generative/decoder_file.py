"""Writing an LLM decoder's model file: the prefill lengths and cache length checked, and the decoder IR written to
a .tflite float or quantized (our int8-weights pass for the default recipe, ai-edge-quantizer for the others).
Shared by the text exporter (export_hf/export.py) and the image+text one (vlm.py)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from litert_torch import ir
from litert_torch.errors import InvalidArgumentError
from litert_torch.flatbuffer.writer import constant_bytes, serialize, write_model
from litert_torch.generative import gpu
from litert_torch.generative.export_options import INT8_WEIGHTS


def write_decoder(model: Any, path: str, recipe: Any, release: Callable | None = None) -> None:
    """Write the decoder IR `model` to `path`, quantized by `recipe` (a checked recipe: None for float, the
    default int8 weights, or an ai-edge-quantizer recipe); `release` hands back the pages of each weight once
    written."""
    if recipe is None:
        gpu.float_lookups_as_gathers(model)  # LiteRT-LM's GPU backend aborts on a float table lookup
        write_model(model, path, release=release)  # constants streamed from the weights
    elif recipe == INT8_WEIGHTS:
        int8_model(model, path, release)
    else:
        from litert_torch.quantization.int4_tables import int4_gathered_tables, recipe_int4_block
        from litert_torch.quantization.quantize import quantize_model

        from litert_torch.runtime.edge_model import EdgeModel

        block = recipe_int4_block(recipe)
        if block is not False:  # the experts' tables, which the quantizer leaves float, int4 as its weights
            int4_gathered_tables(model.subgraphs, block, release=release)
        data = quantize_model(EdgeModel(serialize(model), verify=False), recipe).flatbuffer
        with open(path, "wb") as f:
            f.write(data)
        del data


def write_section(converter: Any, path: str, recipe: Any, release: Callable | None = None) -> None:
    """Write the model of `converter` (a `litert_torch.Converter` holding one bundle section's signatures,
    CPU-targeted) to `path` as `write_decoder` writes a decoder: float or quantized by the checked `recipe`, the
    constants streamed from the modules' tensors rather than held as a serialized copy. `converter` may also be
    that model already lowered (`Converter.to_ir`)."""
    model = converter if isinstance(converter, ir.Model) else converter.to_ir(target="cpu")
    write_decoder(model, path, recipe, release)


def check_lengths(prefill_lengths: Sequence[int], cache_length: int) -> list[int]:
    """`prefill_lengths` (a length or lengths) sorted without repeats, checked against `cache_length`."""
    if isinstance(prefill_lengths, int):
        prefill_lengths = [prefill_lengths]
    if not isinstance(cache_length, int) or isinstance(cache_length, bool) or cache_length < 2:
        raise InvalidArgumentError(f"cache_length must be an integer of at least 2, got {cache_length!r}")
    try:
        lengths = sorted({int(n) for n in prefill_lengths})
    except (TypeError, ValueError):
        lengths = []
    if not lengths or lengths[0] < 1:
        raise InvalidArgumentError(f"prefill_lengths must be positive token counts, got {prefill_lengths!r}")
    if lengths[-1] > cache_length:
        raise InvalidArgumentError(f"prefill length {lengths[-1]} exceeds cache_length {cache_length}")
    return lengths


# The default recipe, ai-edge-quantizer's dynamic_wi8_afp32, as our own IR pass: int8 weights per channel for
# the dense layers, the embedding table and the experts' tables of mixture-of-experts layers (gathered per token,
# then widened), written as they are quantized (the quantizer holds several copies of the model).
def int8_model(model, path: str, release: Callable | None = None) -> None:
    from litert_torch.quantization.report import QUANTIZATION_KEY
    from litert_torch.quantization.weights import int8_gathered_tables, int8_weights
    from litert_torch.quantization.quantize import int8_weights_report

    float_bytes = constant_bytes(model)
    int8_weights(model.subgraphs, release=release)
    int8_gathered_tables(model.subgraphs, release=release)
    model.metadata[QUANTIZATION_KEY] = int8_weights_report(float_bytes, constant_bytes(model), model.subgraphs)
    write_model(model, path, release=release)
