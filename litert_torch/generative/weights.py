"""A Hugging Face model directory's weights by their parameter names, read from its files without building the
Hugging Face model: no modeling code is imported and no module is initialised.

Safetensors files are mapped, not read: each tensor is a view of the file's pages (float32 tensors are used as
they are; others are widened when the decoder takes them), so the weights cost resident memory only while they
are being written, and `memory.FilePages` hands those pages back afterwards. PyTorch `.bin` checkpoints are
loaded with `torch.load(weights_only=True, mmap=True)`: tensors only, never pickled code.

The names are the checkpoint's, which for the supported architectures are the model's state-dict names except
for mixture-of-experts layers: a checkpoint holds each expert's projections (`mlp.experts.<e>.gate_proj.weight`),
where a transformers model in memory holds one fused table per layer (`mlp.experts.gate_up_proj`); the decoder
builder reads both (`model.build`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

from litert_torch.errors import ModelFileError

if TYPE_CHECKING:
    import numpy as np

INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


class ModelSourceError(ModelFileError):
    """The model to export cannot be read: a missing or malformed directory, no weights, no tokenizer, a weight
    file that is malformed, truncated or missing from its index."""


def weight_files(path: str) -> list[str]:
    """The weight files of the model directory `path`: those its index names, else model.safetensors or
    pytorch_model.bin (what Hugging Face reads; an adapter's file beside them is not the model's), else every
    *.safetensors file (or, when there is none, every *.bin file). Empty when it has none."""
    names = sorted(os.listdir(path))
    for index in INDEX_FILES:
        if index in names:
            index_path = os.path.join(path, index)
            try:
                with open(index_path, encoding="utf-8") as f:
                    weight_map = json.load(f)["weight_map"]
                files = sorted(set(weight_map.values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ModelSourceError(f"{index_path} is not a weight index (a JSON object with a weight_map): "
                                       f"{exc}") from exc
            # file names only: an index does not reach outside its directory
            missing = [f for f in files if not isinstance(f, str) or os.path.basename(f) != f
                       or not os.path.isfile(os.path.join(path, f))]
            if missing:
                raise ModelSourceError(f"{index_path} names weight files that are not in {path}: "
                                       f"{', '.join(map(str, missing[:3]))}{' ...' if len(missing) > 3 else ''}")
            return [os.path.join(path, f) for f in files]
    for standard in ("model.safetensors", "pytorch_model.bin"):  # the names save_pretrained writes
        if standard in names:
            return [os.path.join(path, standard)]
    safetensors = [n for n in names if n.endswith(".safetensors")]
    chosen = safetensors or [n for n in names if n.endswith(".bin")]
    return [os.path.join(path, n) for n in chosen]


def read_weights(files: list[str], read_safetensors: Callable[[str], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Every tensor of the weight `files` (`weight_files`) by its checkpoint name (views of the mapped files):
    PyTorch tensors, or what `read_safetensors` gives for a safetensors file (the numpy reader)."""
    weights: dict[str, Any] = {}
    for file in files:
        try:
            tensors = (read_safetensors or _read_safetensors)(file) if file.endswith(".safetensors") \
                else _read_bin(file)
        except ModelSourceError:
            raise
        except Exception as exc:  # the readers' own errors: malformed headers, truncated data, bad pickles
            raise ModelSourceError(f"could not read the weights in {file}: {type(exc).__name__}: "
                                   f"{str(exc)[:300]}") from exc
        for name, tensor in tensors.items():
            if name in weights:
                raise ModelSourceError(f"{name} is stored twice in the weight files ({file} and another)")
            weights[name] = tensor
    return weights


def _read_safetensors(file: str) -> dict[str, Any]:
    from safetensors import safe_open

    # The tensors are views of the file's mapping, which they keep alive after the handle is closed.
    with safe_open(file, framework="pt") as f:
        return {name: f.get_tensor(name) for name in f.keys()}


def _read_bin(file: str) -> dict[str, Any]:
    import torch

    state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ModelSourceError(f"{file} does not hold a state dict (names to tensors)")
    return state


def bfloat16() -> type[np.generic]:
    """numpy's bfloat16 type (ml_dtypes', imported when first needed)."""
    import ml_dtypes

    return ml_dtypes.bfloat16


def numpy_weights(weights: Mapping[str, Any]) -> dict[str, Any] | str:
    """The tensors of a state dict as numpy arrays sharing their memory (bfloat16 as ml_dtypes.bfloat16; a
    tensor elsewhere than the CPU copied to it), or why they cannot be taken so (a tensor subclass, a dtype
    numpy has no type for). A weight never loaded (on the meta device) is an error."""
    import torch

    out = {}
    for name, tensor in weights.items():
        if not isinstance(tensor, torch.Tensor) or type(tensor) not in (torch.Tensor, torch.nn.Parameter):
            return f"weight {name} is a {type(tensor).__name__}"
        if tensor.device.type == "meta":
            raise ModelSourceError(f"weight {name} is on the meta device: the model's weights were never loaded")
        tensor = tensor.detach().cpu()
        if tensor.dtype == torch.bfloat16:
            out[name] = tensor.view(torch.int16).numpy().view(bfloat16())
            continue
        try:
            out[name] = tensor.numpy()
        except (TypeError, RuntimeError) as exc:
            return f"weight {name} ({tensor.dtype}) has no numpy form: {exc}"
    return out
