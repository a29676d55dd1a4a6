"""The cloud accelerator path: the original module on XLA, through torchax + JAX (TPU where JAX sees one, CPU
otherwise), or on a `tpu` device where torch-tpu is installed on a TPU host.

torchax (0.0.11 to 0.0.13) names, in tables it builds at import time, ATen overloads that newer torch removed
(named-tensor overloads such as prod.dim_Dimname). `import_torchax` puts inert placeholders in for exactly the
missing names while it imports and removes them right after; no torch class or torchax file is patched.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import re
import sys
import types
from typing import Any, Callable

import torch

_ATEN_NAME = re.compile(r"\baten\.([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?")


class _Placeholder:
    """Stands in for an ATen op or overload that this torch does not have; never called."""

    def __init__(self, name: str):
        self.name = name

    def __getattr__(self, attr: str) -> "_Placeholder":
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self.name}.{attr}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.name} does not exist in this torch")

    def __repr__(self) -> str:
        return f"<missing {self.name}>"


_torchax = None


def _missing_aten_names(package_dir: str) -> set[tuple[str, str | None]]:
    """(op, overload) names that torchax's sources mention and this torch does not have."""
    missing: set[tuple[str, str | None]] = set()
    for root, _, files in os.walk(package_dir):
        for name in files:
            if not name.endswith(".py"):
                continue
            with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f:
                text = f.read()
            for op, overload in _ATEN_NAME.findall(text):
                if not hasattr(torch.ops.aten, op):
                    missing.add((op, None))
                elif overload and not hasattr(getattr(torch.ops.aten, op), overload):
                    missing.add((op, overload))
    return missing


def import_torchax() -> types.ModuleType:
    """torchax (and torchax.export), imported with placeholders for the ATen names it expects and this torch
    lacks; the placeholders are removed again once the import is done."""
    global _torchax
    if _torchax is not None:
        return _torchax
    spec = importlib.util.find_spec("torchax")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("torchax is not installed")
    added: list[tuple[Any, str]] = []
    try:
        for op, overload in sorted(_missing_aten_names(spec.submodule_search_locations[0]),
                                   key=lambda item: (item[0], item[1] or "")):
            if overload is None:
                if not hasattr(torch.ops.aten, op):
                    setattr(torch.ops.aten, op, _Placeholder(f"aten.{op}"))
                    added.append((torch.ops.aten, op))
            else:
                packet = getattr(torch.ops.aten, op)
                if not isinstance(packet, _Placeholder) and not hasattr(packet, overload):
                    setattr(packet, overload, _Placeholder(f"aten.{op}.{overload}"))
                    added.append((packet, overload))
        import torchax  # noqa: F401

        # Submodules build their op tables at import, some of them lazily at first use: import them all now,
        # while the placeholders stand. Those needing optional packages that are absent are left out.
        for info in pkgutil.walk_packages(torchax.__path__, "torchax."):
            try:
                importlib.import_module(info.name)
            except ImportError:
                pass
        _torchax = sys.modules["torchax"]
        return _torchax
    finally:
        for target, name in reversed(added):
            try:
                delattr(target, name)
            except AttributeError:
                pass


# ---- running on XLA -------------------------------------------------------------------------------------------
_MATMUL_PRIMITIVES = ("dot_general", "conv_general_dilated")
_SUBJAXPR_PARAMS = {"pjit": "jaxpr", "jit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
                    "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr", "remat": "jaxpr",
                    "checkpoint": "jaxpr"}


def tpu_matmul_precision(fn: Callable) -> Callable:
    """`fn` with every float32 dot_general / conv_general_dilated done as a TPU does by default: bfloat16
    operands, float32 accumulation. XLA on CPU ignores JAX's precision settings, so the jaxpr is rewritten."""
    import jax
    import jax.numpy as jnp
    from jax.extend import core as jex_core

    def evaluate(jaxpr, consts, *args):
        env = {}

        def read(var):
            return var.val if isinstance(var, jex_core.Literal) else env[var]

        for var, value in zip(jaxpr.constvars, consts):
            env[var] = value
        for var, value in zip(jaxpr.invars, args):
            env[var] = value
        for eqn in jaxpr.eqns:
            invals = [read(v) for v in eqn.invars]
            name = eqn.primitive.name
            if name in _MATMUL_PRIMITIVES and all(getattr(v, "dtype", None) == jnp.float32 for v in invals):
                params = dict(eqn.params, preferred_element_type=jnp.float32)
                outvals = eqn.primitive.bind(*[v.astype(jnp.bfloat16) for v in invals], **params)
            elif name in _SUBJAXPR_PARAMS and _SUBJAXPR_PARAMS[name] in eqn.params:
                inner = eqn.params[_SUBJAXPR_PARAMS[name]]
                inner_jaxpr, inner_consts = (inner.jaxpr, inner.consts) if hasattr(inner, "consts") else (inner, [])
                outvals = evaluate(inner_jaxpr, inner_consts, *invals)
            else:
                outvals = eqn.primitive.bind(*invals, **eqn.params)
            if not eqn.primitive.multiple_results:
                outvals = [outvals]
            for var, value in zip(eqn.outvars, outvals):
                env[var] = value
        return [read(v) for v in jaxpr.outvars]

    def wrapped(*args):
        closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*args)
        flat = jax.tree_util.tree_leaves(args)
        out = evaluate(closed.jaxpr, closed.consts, *flat)
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shapes), out)

    return wrapped


def run_on_xla(module: torch.nn.Module, input_sets: list[tuple[tuple, dict]], *,
               tpu_precision: bool = False) -> tuple[str, list[Any]]:
    """(backend label, outputs per input set) for `module` exported and run through torchax on JAX's default
    backend. Outputs come back as torch tensors in the module's output structure."""
    import_torchax()
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch.utils._pytree as pytree
    import torchax.export

    args0, kwargs0 = input_sets[0]
    program = torch.export.export(module, tuple(args0), dict(kwargs0), strict=False)
    state, fn = torchax.export.exported_program_to_jax(program)
    runner = jax.jit(tpu_matmul_precision(fn) if tpu_precision else fn)
    out_spec = program.call_spec.out_spec
    outputs = []
    for args, kwargs in input_sets:
        leaves = [jnp.asarray(t.detach().cpu().numpy()) for t in pytree.tree_leaves((tuple(args), dict(kwargs)))
                  if isinstance(t, torch.Tensor)]
        result = runner(state, tuple(leaves))
        flat = [torch.from_numpy(np.array(v)) for v in jax.tree_util.tree_leaves(result)]
        outputs.append(pytree.tree_unflatten(flat, out_spec))
    label = f"xla-{jax.default_backend()}" + (" (TPU matmul precision emulated)" if tpu_precision else "")
    return label, outputs


def torch_tpu_unavailable() -> str | None:
    """Why the module cannot run on torch-tpu's `tpu` device here, or None when it can."""
    if importlib.util.find_spec("torch_tpu") is None:
        return "torch-tpu is not installed (it runs on TPU hosts)"
    try:
        importlib.import_module("torch_tpu")  # registers the `tpu` device with PyTorch
        torch.empty(1, device="tpu")
    except Exception as exc:  # noqa: BLE001 - installed, but no TPU (or no working runtime) on this host
        return f"torch-tpu cannot allocate on a tpu device: {type(exc).__name__}: {exc}"
    return None


def run_on_torch_tpu(module: torch.nn.Module, input_sets: list[tuple[tuple, dict]],
                     device: str = "tpu") -> tuple[str, list[Any]]:
    """(backend label, outputs per input set) for `module` itself on torch-tpu's `tpu` device: a copy of the
    module and each input set moved there, run eagerly, the outputs brought back to the CPU (`device` names
    another device for the same steps)."""
    import copy

    import torch.utils._pytree as pytree

    target = torch.device(device)
    moved = copy.deepcopy(module).to(target)
    to_device = lambda v: v.to(target) if isinstance(v, torch.Tensor) else v  # noqa: E731
    to_cpu = lambda v: v.detach().cpu() if isinstance(v, torch.Tensor) else v  # noqa: E731
    outputs = []
    with torch.no_grad():
        for args, kwargs in input_sets:
            result = moved(*pytree.tree_map(to_device, tuple(args)), **pytree.tree_map(to_device, dict(kwargs)))
            outputs.append(pytree.tree_map(to_cpu, result))
    return f"torch-{target.type}", outputs
