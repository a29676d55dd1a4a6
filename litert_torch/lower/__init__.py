"""ATen -> IR lowerings. Importing this package registers every lowering module."""

from litert_torch.lower import conv, elementwise, nn, pool, reduce, shape  # noqa: F401  (registration)
from litert_torch.lower.program import LoweredProgram, lower_program
from litert_torch.lower.registry import lowering_for, lowers, registered

__all__ = ["LoweredProgram", "lower_program", "lowering_for", "lowers", "registered"]
