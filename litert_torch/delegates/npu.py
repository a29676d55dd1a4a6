"""A conservative common set for NPUs (Qualcomm HTP, MediaTek APU, Google Tensor): static shapes, rank <= 4,
quantized int8 preferred; float ops are taken only as float16 where the vendor runs them (noted per op).
VENDOR_NOTES records where vendors differ."""

from __future__ import annotations

from litert_torch import ir
from litert_torch.delegates.rules import Rule, activations_of, all_of, check, constant_input, max_rank, supported

TARGET = "npu"
DELEGATE = "NPU"


def _static_shapes(op: ir.Op) -> str | None:
    dynamic = [t for t in activations_of(op) if t.shape_signature is not None and any(d < 0 for d in t.shape_signature)]
    return "dynamic shapes (NPUs compile for static shapes)" if dynamic else None


def _supported_types(op: ir.Op) -> str | None:
    for t in activations_of(op):
        if t.dtype.kind == "f" or t.quantization is not None or t.dtype.name in ("int8", "uint8", "int16", "int32",
                                                                                  "bool"):
            continue
        return f"{t.dtype} tensors"
    return None


TABLE: dict[str, Rule] = {name: supported for name in (
    "ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "ABS", "NEG", "SQRT", "RSQRT", "TANH", "LOGISTIC", "ELU",
    "HARD_SWISH", "LEAKY_RELU", "RELU", "RELU6", "RELU_N1_TO_1", "PRELU", "SOFTMAX", "CONCATENATION", "RESHAPE",
    "SPLIT", "SPLIT_V", "TRANSPOSE", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "AVERAGE_POOL_2D", "MAX_POOL_2D",
    "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D",
    "TRANSPOSE_CONV", "QUANTIZE", "DEQUANTIZE", "BATCH_MATMUL", "GELU", "SQUARED_DIFFERENCE", "DIV", "EXP",
)}
TABLE.update({
    "MEAN": constant_input(1, "reduction axes"),
    "PAD": constant_input(1, "paddings"),
    "SLICE": all_of(constant_input(1, "begin"), constant_input(2, "size")),
    "STRIDED_SLICE": lambda op: "STRIDED_SLICE with a shrink mask" if op.options.get("shrink_axis_mask") else None,
})
GENERAL: list[Rule] = [max_rank(4), _static_shapes, _supported_types]

VENDOR_NOTES = {
    "qualcomm": "Qualcomm HTP: int8/int16 quantized graphs run fastest; float ops run as float16 on recent HTP "
                "versions (v73+); GELU and BATCH_MATMUL need QNN 2.x.",
    "mediatek": "MediaTek APU (NeuroPilot): quantized int8 preferred; float16 where the APU generation supports it; "
                "some element-wise ops fall back to the CPU in float.",
    "google_tensor": "Google Tensor (edge TPU lineage): int8 quantized graphs; float ops are not run on the TPU "
                     "itself.",
}


def check_op(op: ir.Op) -> str | None:
    return check(TABLE, GENERAL, op, DELEGATE)
