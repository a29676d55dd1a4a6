"""ATen -> IR lowerings, one module per op family. Importing this package registers every one of them."""

from litert_torch.lower.aten import (  # noqa: F401  (registration)
    attention, conv, elementwise, llm_ops, math_ops, nn, pool, quantized, reduce, resize, rnn, scatter, shape,
    fitted, special, embedding_bag, complex_ops, moe, linalg, selection,
)
