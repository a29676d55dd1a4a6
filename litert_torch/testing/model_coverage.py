"""`compare_tflite_torch`: does a converted model give the PyTorch module's outputs? (The official litert-torch's
helper, with its signature and its rules.)"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
import torch.utils._pytree as pytree


def compare_tflite_torch(edge_model: Any, torch_eval_func: Callable[..., Any], args: Any = None, kwargs: Any = None,
                         *, num_valid_inputs: int = 1, signature_name: str | None = None, atol: float = 1e-5,
                         rtol: float = 1e-5) -> bool:
    """True when `edge_model` (called with numpy copies of the inputs, on `signature_name` or the default
    signature) gives the outputs of `torch_eval_func` within `atol` / `rtol` (numpy.allclose, compared as
    float32), for `num_valid_inputs` draws. `args` / `kwargs` are a tuple / dict of tensors or callables that
    return one (drawn anew each time)."""
    for _ in range(num_valid_inputs):
        call_args = (args() if callable(args) else args) or ()
        call_kwargs = (kwargs() if callable(kwargs) else kwargs) or {}
        with torch.no_grad():
            expected = _leaves(torch_eval_func(*call_args, **call_kwargs))
        np_args, np_kwargs = pytree.tree_map(_to_numpy, (tuple(call_args), dict(call_kwargs)))
        named = {} if signature_name is None else {"signature_name": signature_name}
        got = _leaves(edge_model(*np_args, **np_kwargs, **named))
        if len(got) != len(expected):
            return False
        for g, e in zip(got, expected):
            if not np.allclose(np.asarray(g).astype(np.float32), np.asarray(e).astype(np.float32), atol=atol,
                               rtol=rtol):
                return False
    return True


def _to_numpy(value: Any) -> Any:
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value


def _leaves(value: Any) -> list[Any]:
    return [_to_numpy(v) for v in pytree.tree_leaves(value)]
