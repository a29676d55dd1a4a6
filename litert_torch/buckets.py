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


def _spread(spec: Any, first: int, count: int) -> dict[int, Any]:
    """The specs of a `*args` parameter (a tuple of one spec per argument it takes, from position `first`) by
    argument position."""
    if spec is None:
        return {}
    if not isinstance(spec, (tuple, list)) or len(spec) != count - first \
            or not all(s is None or isinstance(s, (dict, tuple, list)) for s in spec):
        raise InvalidArgumentError(f"dynamic_shapes for forward's *args must hold one entry per argument it takes "
                                   f"({count - first}), each {{axis: Dim}} or None; got {spec!r}")
    return {first + i: s for i, s in enumerate(spec)}


def dim_bounds(dim: Any) -> tuple[int, int]:
    low = getattr(dim, "min", None)
    high = getattr(dim, "max", None)
    return (int(low) if isinstance(low, int) else 0), (int(high) if isinstance(high, int) else 2**31 - 1)


def dim_uses(module: torch.nn.Module, args: tuple, kwargs: dict, dynamic_shapes: Any) -> tuple[list[DimUse], dict]:
    """Each (argument, axis) that `dynamic_shapes` (torch.export's format: a dict by argument name, or a tuple
    by position, of {axis: Dim} or [Dim | None, ...]; for a `*args` parameter, a tuple of those, one per
    argument it takes) makes dynamic, and the Dims by name."""
    signature = inspect.signature(module.forward).parameters
    var_positional = next((i for i, p in enumerate(signature.values()) if p.kind is p.VAR_POSITIONAL), None)
    if isinstance(dynamic_shapes, dict):
        params = list(signature)
        by_name = dict(dynamic_shapes)
        if var_positional is not None and params[var_positional] in by_name:
            by_name = {**{k: v for k, v in by_name.items() if k != params[var_positional]},
                       **_spread(by_name[params[var_positional]], var_positional, len(args))}
    elif isinstance(dynamic_shapes, (tuple, list)):
        by_name = dict(enumerate(dynamic_shapes))
        if var_positional is not None and var_positional in by_name:
            rest = {k: v for k, v in by_name.items() if k != var_positional}
            by_name = {**rest, **_spread(by_name[var_positional], var_positional, len(args))}
        params = list(by_name)
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
    positional, named = list(args), dict(kwargs)
    for use in uses:
        if use.dim != dim:
            continue
        value = positional[use.where] if isinstance(use.where, int) else named[use.where]
        if not isinstance(value, torch.Tensor):
            raise InvalidArgumentError(f"dynamic_shapes makes argument {use.where!r} dynamic, but it is not a tensor")
        shape = list(value.shape)
        shape[use.axis] = size
        if isinstance(use.where, int):
            positional[use.where] = value.new_zeros(shape)
        else:
            named[use.where] = value.new_zeros(shape)
    return tuple(positional), named


def bucket_sizes(buckets: dict | None, dims: dict) -> tuple[str, list[int]]:
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
