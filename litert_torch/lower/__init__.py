"""ATen -> IR lowerings. Importing this package registers every lowering module."""

from litert_torch.lower import (  # noqa: F401  (registration)
    attention, conv, elementwise, llm_ops, math_ops, nn, pool, quantized, reduce, resize, rnn, scatter, shape,
    fitted, special, embedding_bag, complex_ops, moe, linalg, selection,
)
from litert_torch.lower.program import LoweredProgram, lower_program
from litert_torch.lower.registry import lowering_for, lowers, registered

__all__ = ["LoweredProgram", "lower_program", "lowering_for", "lowers", "registered"]
