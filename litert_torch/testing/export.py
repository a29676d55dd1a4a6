"""`export_with_tensor_inputs_only`: torch.export with only the tensor inputs as graph inputs (the official
litert-torch's test helper); every other argument is baked into the program as a constant."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.utils._pytree as pytree


def export_with_tensor_inputs_only(model: Callable[..., Any], args: tuple, kwargs: dict,
                                   dynamic_shapes: Any = None) -> torch.export.ExportedProgram:
    leaves, spec = pytree.tree_flatten([tuple(args), dict(kwargs)])
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]

    class TensorsOnly(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model if isinstance(model, torch.nn.Module) else None

        def forward(self, *tensors: torch.Tensor) -> Any:
            values = list(leaves)
            for i, t in zip(positions, tensors):
                values[i] = t
            call_args, call_kwargs = pytree.tree_unflatten(values, spec)
            return model(*call_args, **call_kwargs)

    return torch.export.export(TensorsOnly(), tuple(leaves[i] for i in positions), dynamic_shapes=dynamic_shapes)
