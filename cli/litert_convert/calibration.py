"""Calibration inputs from files: `--calibration DIR_OR_NPZ`.

An .npz file holds one array per model input, named after it (the `forward` argument name, or the signature's
input name, args_0, ..., as `litert-convert inspect` lists them; a model with a single input may use any one
name), with
the samples stacked on a new leading axis: arr[i] is sample i's value, shaped as the input. A directory holds
.npz files of one sample each (arrays shaped as the inputs).
"""

from __future__ import annotations

import os

import numpy as np

from litert_convert.errors import BadInput


def load_calibration(path: str, args: tuple, kwargs: dict, input_names: list[str],
                     parameters: list[str] | None = None) -> list[tuple]:
    """Samples as positional tuples of numpy arrays, in the order of the model's inputs; an array is found by
    the input's signature name (args_0) or forward's name for it (`parameters`)."""
    import torch

    if kwargs or not all(isinstance(a, torch.Tensor) for a in args) or len(args) != len(input_names):
        raise BadInput("--calibration files work for models called with tensors only, positionally",
                       "pass calibration_data to litert_torch.quantize_model from Python for other inputs")
    if os.path.isdir(path):
        files = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".npz"))
        if not files:
            raise BadInput(f"{path} holds no .npz files",
                           "one .npz per calibration sample, arrays named after the model's inputs")
        return [tuple(_by_name(_open(f), input_names, parameters, f)) for f in files]
    stacked = _by_name(_open(path), input_names, parameters, path)
    for a, x, name in zip(stacked, args, input_names):
        if a.ndim != x.dim() + 1:
            raise BadInput(f"{path}: array {name!r} of shape {list(a.shape)} for an input of shape {list(x.shape)}",
                           "stack the samples on a new leading axis: [samples, *input shape]")
    counts = {a.shape[0] for a in stacked}
    if len(counts) != 1:
        raise BadInput(f"{path}: the arrays hold different numbers of samples ({sorted(counts)})")
    return [tuple(a[i] for a in stacked) for i in range(counts.pop())]


def _open(path: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path} is not a readable .npz file: {exc}") from None


def _by_name(arrays: dict[str, np.ndarray], names: list[str], parameters: list[str] | None,
             path: str) -> list[np.ndarray]:
    if len(names) == 1 and len(arrays) == 1:
        return list(arrays.values())
    aliases = list(parameters or []) + [None] * (len(names) - len(parameters or []))
    found = [n if n in arrays else a if a in arrays else None for n, a in zip(names, aliases)]
    missing = [a or n for n, a, f in zip(names, aliases, found) if f is None]
    if missing:
        raise BadInput(f"{path} has no array for input(s) {', '.join(missing)} (it holds {', '.join(arrays)})",
                       "name the arrays after the model's inputs (forward's parameter names, or args_0, ...)")
    return [arrays[f] for f in found if f is not None]
