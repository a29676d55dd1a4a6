"""Graph passes over the IR, run in the order of `PIPELINE`."""

from __future__ import annotations

from typing import Callable

from litert_torch import ir
from litert_torch.symbolic import DynamicSizeError
from litert_torch.passes import (
    broadcast, cleanup, concat, fold_affine, fold_constants, fold_padding, fuse_activation, fuse_gelu, int8_kernels,
    integer_kernels, kernel_types, known_signs, layout,
    matmul, merge_transposes,
)

PassFn = Callable[[ir.Graph], bool]

# The pipeline, in order. Cleanup runs first so that later passes see no no-op reshapes between ops, and last
# so that the ops the other passes bypassed are removed.
PIPELINE: list[tuple[str, PassFn]] = [
    ("cleanup", cleanup.run),
    ("known_signs", known_signs.run),
    ("broadcast", broadcast.run),
    ("fuse_gelu", fuse_gelu.run),
    ("layout", layout.run),
    ("merge_transposes", merge_transposes.run),
    ("fold_constants", fold_constants.run),
    ("concat", concat.run),
    ("matmul", matmul.run),
    ("cleanup", cleanup.run),
    ("fold_padding", fold_padding.run),
    ("fold_affine", fold_affine.run),
    ("fuse_activation", fuse_activation.run),
    ("zero_pad_nonnegative", fold_padding.zero_pad_nonnegative),
    ("int8_kernels", int8_kernels.run),
    ("integer_kernels", integer_kernels.run),
    ("cleanup", cleanup.run),
    ("kernel_types", kernel_types.run),
]


def run_pipeline(graph: ir.Graph, pipeline: list[tuple[str, PassFn]] | None = None) -> None:
    dynamic = graph.is_dynamic
    for _, pass_fn in pipeline or PIPELINE:
        if not dynamic:
            pass_fn(graph)
            continue
        restore = graph.snapshot()
        try:
            pass_fn(graph)
        except DynamicSizeError:
            restore()  # a rewrite that needs a size the graph only knows at run time is not made
