"""QuantizationReport: what `litert_torch.quantize` did to a model, stored in the model's metadata and read
back by `EdgeModel.quantization` (kept apart from the quantizer so that reading it needs no conversion code)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from litert_torch import metadata as md
from litert_torch.delegates.plan import Fallback

QUANTIZATION_KEY = "litert_torch.quantization"

# An op the quantized model still computes in float, and why: the same record as a delegate-plan fallback
# (op index, opcode, reason, PyTorch node and source line).
FloatOp = Fallback


@dataclass
class QuantizationReport:
    mode: str
    float_bytes: int
    quantized_bytes: int  # the quantized file without this report
    quantized_ops: int  # ops that compute on quantized (int8 / float16) data or weights
    ops: int  # ops other than QUANTIZE / DEQUANTIZE
    calibration_samples: int = 0
    io: str = "float"
    recipe: Any = None
    float_ops: list[FloatOp] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, **asdict(self)}

    def to_bytes(self) -> bytes:
        return md.encode(self.to_json())

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "QuantizationReport":
        data = {k: v for k, v in data.items() if k != "version"}
        data["float_ops"] = [FloatOp(**f) for f in data.get("float_ops", [])]
        return cls(**data)

    def summary(self) -> str:
        ratio = self.float_bytes / self.quantized_bytes if self.quantized_bytes else 0.0
        text = (f"quantized {self.mode}: {self.float_bytes / 1024:.0f} KiB -> {self.quantized_bytes / 1024:.0f} KiB "
                f"({ratio:.1f}x smaller); {self.quantized_ops}/{self.ops} ops on quantized data or weights")
        if self.calibration_samples:
            text += f"; calibrated on {self.calibration_samples} samples"
        if self.mode == "int8":
            text += f"; {self.io} inputs/outputs"
        if self.float_ops:
            reasons: dict[str, list[FloatOp]] = {}
            for f in self.float_ops:
                reasons.setdefault(f"{f.opcode} ({f.reason})", []).append(f)
            parts = []
            for key, ops in reasons.items():
                where = ops[0].location or ops[0].node or f"op {ops[0].op}"
                parts.append(f"{key} x{len(ops)}, first at {where}" if len(ops) > 1 else f"{key} at {where}")
            text += "\nkept in float: " + "; ".join(parts)
        return text
