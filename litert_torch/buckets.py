"""Bucketed signatures: a bounded dynamic dimension as a few static signatures that share their weights.

    batch = torch.export.Dim("batch", min=1, max=8)
    edge = litert_torch.convert(model, (x,), dynamic_shapes={"x": {0: batch}}, buckets={"batch": [1, 2, 4, 8]})
    edge(x_of_batch_4)      # runs the signature "batch_4"

Runtimes and delegates that want static shapes (NPUs, GPU delegates that compile per shape) get one static
subgraph per size; identical weights are stored once. EdgeModel picks the signature whose input shapes match
the call. The delegate plan lists the buckets.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from litert_torch.errors import InvalidArgumentError


@dataclass
class DimUse:
    """Where a named dynamic dimension appears: the argument (position or keyword) and the axis."""

    dim: str
    where: int | str
    axis: int


def dim_name(dim: Any) -> str:
    name = getattr(dim, "__name__", None) or getattr(dim, "name", None)
    if not isinstance(name, str):
        raise InvalidArgumentError(f"dynamic_shapes holds {dim!r}; use torch.export.Dim('name', min=..., max=...)")
    return name


def dim_bounds(dim: Any) -> tuple[int, int]:
    low = getattr(dim, "min", None)
    high = getattr(dim, "max", None)
    return (int(low) if isinstance(low, int) else 0), (int(high) if isinstance(high, int) else 2**31 - 1)


def dim_uses(module: torch.nn.Module, args: tuple, kwargs: dict, dynamic_shapes: Any) -> tuple[list[DimUse], dict]:
    """Each (argument, axis) that `dynamic_shapes` (torch.export's format: a dict by argument name, or a tuple
    by position, of {axis: Dim} or [Dim | None, ...]) makes dynamic, and the Dims by name."""
    if isinstance(dynamic_shapes, dict):
        params = list(inspect.signature(module.forward).parameters)
        by_name = dynamic_shapes
    elif isinstance(dynamic_shapes, (tuple, list)):
        params = [i for i in range(len(dynamic_shapes))]
        by_name = dict(enumerate(dynamic_shapes))
    else:
        raise InvalidArgumentError("dynamic_shapes is a dict keyed by forward's argument names, or a tuple by position")
    uses, dims = [], {}
    for key, spec in by_name.items():
        if spec is None:
            continue
        if isinstance(key, str):
            if key not in params:
                raise InvalidArgumentError(f"dynamic_shapes names {key!r}, which is not an argument of forward {params}")
            position = params.index(key)
            where: int | str = position if position < len(args) else key
        else:
            where = key
        axes = spec.items() if isinstance(spec, dict) else enumerate(spec)
        for axis, dim in axes:
            if dim is None:
                continue
            name = dim_name(dim)
            dims[name] = dim
            uses.append(DimUse(name, where, int(axis)))
    return uses, dims


def resized(args: tuple, kwargs: dict, uses: list[DimUse], dim: str, size: int) -> tuple[tuple, dict]:
    """Sample inputs with every axis that `dim` names set to `size` (values: zeros; only shapes matter)."""
    args, kwargs = list(args), dict(kwargs)
    for use in uses:
        if use.dim != dim:
            continue
        container, key = (args, use.where) if isinstance(use.where, int) else (kwargs, use.where)
        value = container[key]
        if not isinstance(value, torch.Tensor):
            raise InvalidArgumentError(f"dynamic_shapes makes argument {use.where!r} dynamic, but it is not a tensor")
        shape = list(value.shape)
        shape[use.axis] = size
        container[key] = value.new_zeros(shape)
    return tuple(args), kwargs


def bucket_sizes(buckets: dict, dims: dict) -> tuple[str, list[int]]:
    """The one bucketed Dim's name and its sizes, checked against the Dim's bounds."""
    if not isinstance(buckets, dict) or len(buckets) != 1:
        raise InvalidArgumentError("buckets maps one dynamic dimension (its Dim or name) to its sizes, e.g. "
                         "{'batch': [1, 2, 4, 8]}")
    (key, sizes), = buckets.items()
    name = key if isinstance(key, str) else dim_name(key)
    if name not in dims:
        raise InvalidArgumentError(f"buckets names {name!r}, which dynamic_shapes does not use (it has {sorted(dims)})")
    sizes = sorted({int(s) for s in sizes})
    low, high = dim_bounds(dims[name])
    outside = [s for s in sizes if not low <= s <= high]
    if not sizes or outside:
        raise InvalidArgumentError(f"bucket sizes {outside or sizes} lie outside {name}'s range [{low}, {high}]")
    return name, sizes
