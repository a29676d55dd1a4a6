"""Output and input structures (pytrees) that survive being written into a model file."""

from __future__ import annotations

from typing import Any

import torch.utils._pytree as pytree


def plain(value: Any) -> Any:
    """`value` with every dict, list and tuple subclass (torch.return_types structseqs, named tuples) replaced
    by the plain container it behaves as."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    return value


def portable_spec_json(spec: pytree.TreeSpec) -> str:
    """The spec in treespec_dumps form; containers that format cannot name are recorded as plain ones."""
    try:
        return pytree.treespec_dumps(spec)
    except (NotImplementedError, TypeError, ValueError):
        tree = plain(pytree.tree_unflatten([0] * spec.num_leaves, spec))
        return pytree.treespec_dumps(pytree.tree_structure(tree))
