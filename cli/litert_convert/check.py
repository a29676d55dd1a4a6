"""Opening .tflite files safely, and inputs drawn from a model's signature, for `validate` and `bench`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from litert_convert.errors import BadInput  # noqa: F401  (re-raised by open_edge_model)

if TYPE_CHECKING:
    from litert_torch import EdgeModel


def open_edge_model(data: bytes, path: str) -> EdgeModel:
    """An EdgeModel for `data`, checked before LiteRT sees it (litert_torch.runtime.verify); a file we did not
    write (no litert_torch metadata) is also tried once in a child process, so that a runtime crash on it is an
    error message rather than the end of the command."""
    from litert_torch import EdgeModel
    from litert_torch.errors import ModelFileError
    from litert_torch.flatbuffer.reader import read_metadata
    from litert_torch.metadata import IO_KEY

    try:
        ours = IO_KEY in read_metadata(data)
        return EdgeModel(data, isolate=None if ours else True)
    except ModelFileError as exc:
        raise BadInput(f"{path}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - whatever else a foreign file makes the reader raise is bad input
        raise BadInput(f"{path}: unreadable TFLite model ({type(exc).__name__}: {exc})") from None


def random_feeds(details: list[dict], seed: int = 0) -> list[np.ndarray]:
    """One random array per interpreter input detail (normal floats, zero integers and bools)."""
    rng = np.random.default_rng(seed)
    feeds = []
    for d in details:
        dtype = np.dtype(d["dtype"])
        shape = [int(s) for s in d["shape"]]
        feeds.append(rng.standard_normal(shape).astype(dtype) if dtype.kind == "f" else np.zeros(shape, dtype))
    return feeds


def inputs_for_model(edge) -> tuple:
    """Sample inputs drawn to the model's serving signature, as torch tensors (int64 where the source is)."""
    signature = next(iter(edge.signatures.values()))
    io = edge.io_spec
    wide = {n for n, d in zip(io.get("inputs", []), io.get("input_dtypes", [])) if d == "int64"}
    nhwc = set(io.get("channel_last_inputs", []))
    feeds = random_feeds([{"dtype": s.dtype, "shape": s.shape} for s in signature.inputs])
    tensors = []
    for spec, value in zip(signature.inputs, feeds):
        t = torch.from_numpy(value)
        if spec.name in wide:
            t = t.to(torch.int64)
        if spec.name in nhwc:
            t = t.permute(0, 3, 1, 2).contiguous()
        tensors.append(t)
    return tuple(tensors)

