"""Numerics checks for `convert --validate` and `validate`, and inputs drawn from a model's signature."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree

from litert_convert.errors import BadInput  # noqa: F401  (re-raised by open_edge_model)


@dataclass(frozen=True)
class NumericsResult:
    input_index: int
    comparison: Any  # litert_torch.runtime.compare.OutputComparison

    def __getattr__(self, name: str) -> Any:
        return getattr(self.comparison, name)


def open_edge_model(data: bytes, path: str):
    """An EdgeModel for `data`, after our reader has checked the file (so a corrupt one never reaches LiteRT)."""
    from litert_torch import EdgeModel
    from litert_torch.errors import ModelFileError
    from litert_torch.flatbuffer.reader import read_model

    try:
        read_model(data)
        return EdgeModel(data)
    except ModelFileError as exc:
        raise BadInput(f"{path}: {exc}") from None
    except Exception as exc:
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
    io = _io(edge)
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


def _io(edge) -> dict:
    from litert_torch.metadata import IO_KEY, read_json

    data = read_json(edge.metadata, IO_KEY) or {}
    signatures = data.get("signatures", {})
    return next(iter(signatures.values())) if signatures else {}


def _variants(args: tuple, kwargs: dict, count: int) -> list[tuple[tuple, dict]]:
    """The sample inputs, then `count` draws with fresh random floats (integer and bool inputs kept)."""
    generator = torch.Generator().manual_seed(1234)
    out = [(args, kwargs)]
    for _ in range(count):
        def fresh(value):
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                return torch.randn(value.shape, generator=generator).to(value.dtype)
            return value
        out.append((pytree.tree_map(fresh, args), pytree.tree_map(fresh, kwargs)))
    return out


def check_numerics(model, edge, args: tuple, kwargs: dict, draws: int = 3) -> list[NumericsResult]:
    from litert_torch.runtime.compare import compare_outputs

    io = _io(edge)
    nhwc_in = set(io.get("channel_last_inputs", []))
    nhwc_out = set(io.get("channel_last_outputs", []))
    names_in = io.get("inputs", [])
    positions = io.get("tensor_input_positions", list(range(len(names_in))))
    out_names = io.get("outputs", [])
    callable_model = model.module() if isinstance(model, torch.export.ExportedProgram) else model
    results = []
    for index, (a, k) in enumerate(_variants(tuple(args), dict(kwargs), draws)):
        with torch.no_grad():
            reference = callable_model(*a, **k)
        leaves, spec = pytree.tree_flatten((a, k))
        for name, pos in zip(names_in, positions):
            if name in nhwc_in:
                leaves[pos] = leaves[pos].permute(0, 2, 3, 1).contiguous()
        edge_args, edge_kwargs = pytree.tree_unflatten(leaves, spec)
        got = edge(*edge_args, **edge_kwargs)
        if nhwc_out:
            got_leaves, got_spec = pytree.tree_flatten(got)
            got_leaves = [t.permute(0, 3, 1, 2) if i < len(out_names) and out_names[i] in nhwc_out else t
                          for i, t in enumerate(got_leaves)]
            got = pytree.tree_unflatten(got_leaves, got_spec)
        for comparison in compare_outputs(reference, got, names=out_names or None):
            results.append(NumericsResult(index, comparison))
    return results


def render_results(results: list[NumericsResult]) -> str:
    lines = ["numerics against PyTorch (max|err| <= 1e-4 * max|ref| + 1e-5):"]
    lines += [f"  input {r.input_index}: {r.describe()}" for r in results]
    verdict = "PASS" if all(r.passed for r in results) else "FAIL"
    lines.append(f"numerics: {verdict}")
    return "\n".join(lines)
