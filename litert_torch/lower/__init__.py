"""Lowerings to the IR, by frontend: `common/` (the context lowerings emit into, the registry, helpers both
frontends use), `aten/` (one module per ATen op family, and the driver that lowers a torch.export program) and
`onnx/` (one registration per ONNX op, and the driver that lowers an ONNX graph). Importing this package
registers every ATen lowering."""

from litert_torch.lower import aten  # noqa: F401  (registration)
from litert_torch.lower.aten.program import LoweredProgram, lower_program
from litert_torch.lower.common.registry import lowering_for, lowers, registered

__all__ = ["LoweredProgram", "lower_program", "lowering_for", "lowers", "registered"]
