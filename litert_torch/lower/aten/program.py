"""ExportedProgram -> IR graph.

Walks the fx graph once. Before emitting anything it checks every node, so that all ATen ops without a
lowering are reported together (`UnsupportedOpsError`). Nodes whose tensor inputs are all constants (parameters,
buffers, lifted constants, or values computed from them) are evaluated with PyTorch itself and become constants:
no lowering is needed for them and the result is exact.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.export.graph_signature import InputKind, OutputKind

from litert_torch import ir
from litert_torch.errors import ConversionError, LoweringError, UnsupportedOp, UnsupportedOpsError
from litert_torch.frontend.export import export_module
from litert_torch.frontend.sources import source_ref, target_name
from litert_torch.lower.aten import complex_ops
from litert_torch.lower.aten.quantized import RUN_TIME_ONLY
from litert_torch.node import Node, Value
from litert_torch.lower.common.registry import (
    LoweringContext, lowered_as_is, lowering_for, narrow_int64, normalize_dim, numpy_dtype,
)
from litert_torch.lower.aten.value_sizes import VALUE_READS, anchor_results, check_value_sizes, drop_value_checks
from litert_torch.passes.kernel_types import F16, F32
from litert_torch.symbolic import DynamicSizeError, Sym, SymSpace, from_torch, same_size, space_of_program


def export_lowerable(module: Any, args: tuple, kwargs: dict | None = None, **options: Any) -> torch.export.ExportedProgram:
    """`module` traced by torch.export and decomposed to the ATen ops these lowerings take
    (`frontend.export.export_module`, told which ops have a lowering of their own so that it can skip torch's
    second trace); `options` as export_module takes them."""
    return export_module(module, args, kwargs, lowerable=lowered_as_is, **options)


@dataclass
class LoweredProgram:
    graph: ir.Graph
    input_names: list[str]  # one per graph input (tensor user inputs only)
    output_names: list[str]  # one per graph output
    tensor_input_positions: list[int]  # positions, among the flattened user inputs, that are tensors
    input_dtypes: list[str]  # PyTorch dtype of each graph input ("int64" where the model computes in int32)
    output_dtypes: list[str]  # PyTorch dtype of each graph output
    # forward's name for each graph input (the placeholder's), which calls may use instead of input_names
    parameters: list[str] = field(default_factory=list)


# Why some ops have no lowering, and what to do instead.
HINTS = {
    "aten.native_dropout.default": "dropout in train mode; call model.eval() first",
}

_CONST_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


def _constant_values(program: torch.export.ExportedProgram,
                     weights: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    values = {}
    for spec in program.graph_signature.input_specs:
        if spec.kind in _CONST_KINDS:
            value = weights.get(spec.target) if weights is not None else None
            if value is None:
                value = program.state_dict.get(spec.target)
            if value is None:
                value = program.constants[spec.target]
            values[spec.arg.name] = value.detach()
    return values


def _tensor_nodes(args: Any) -> list[torch.fx.Node]:
    found: list[torch.fx.Node] = []
    torch.fx.node.map_arg(args, found.append)
    return found


_BATCH_NORM_STATE = ("running_mean", "running_var", "num_batches_tracked")


def _check_mutations(program: torch.export.ExportedProgram) -> None:
    """Refuse, before any lowering, a model that writes to its own state (a model's input it writes to is
    fine: see lower_program)."""
    # (a TOKEN output orders ops run for their side effects, such as linalg's error checks: no state of the
    # model's; `_check_supported` names those ops)
    written = [s for s in program.graph_signature.output_specs
               if s.kind not in (OutputKind.USER_OUTPUT, OutputKind.USER_INPUT_MUTATION, OutputKind.TOKEN)]
    if not written:
        return
    names = [str(s.target) for s in written]
    if all(n.rsplit(".", 1)[-1] in _BATCH_NORM_STATE for n in names):
        raise ConversionError(f"the model updates batch norm running statistics ({names[0]!r}"
                              f"{f' and {len(names) - 1} more' if len(names) > 1 else ''}): batch norm is in "
                              "train mode; call model.eval() first")
    spec = written[0]
    raise ConversionError(
        f"the model writes to {spec.kind.name.lower().replace('_', ' ')} {spec.target!r} during forward; "
        "models that mutate their buffers are not supported yet (keep state outside the model)")


def _is_size(node: torch.fx.Node) -> bool:
    """A node whose value is a size (sym_size, arithmetic on sizes), not a tensor."""
    return isinstance(node.meta.get("val"), (torch.SymInt, int)) and not isinstance(node.meta.get("val"), bool)


_EMPTY = (torch.ops.aten.empty.memory_format, torch.ops.aten.empty_permuted.default)
_SORTS = (torch.ops.aten.sort.default, torch.ops.aten.sort.stable)


def _fill_permuted_empties(program: torch.export.ExportedProgram) -> None:
    """An uninitialised 1-D tensor whose every element is then written, `inv[perm] = values` with `perm` the
    indices of a sort of a tensor as long (a permutation: the inverse-permutation idiom of mixture-of-experts
    routing), becomes torch.zeros: no value of it is ever read, so its contents do not matter."""
    for node in list(program.graph.nodes):
        if node.op != "call_function" or node.target not in _EMPTY or len(node.users) != 1:
            continue
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor) or value.dim() != 1 or not isinstance(value.shape[0], int):
            continue
        (user,) = node.users
        if user.target is not torch.ops.aten.index_put.default or user.args[0] is not node \
                or (len(user.args) > 3 and user.args[3]) or len(user.args[1]) != 1:
            continue
        index = user.args[1][0]
        if not (isinstance(index, torch.fx.Node) and index.target is operator.getitem and index.args[1] == 1
                and isinstance(index.args[0], torch.fx.Node) and index.args[0].target in _SORTS):
            continue
        sort = index.args[0].args[0]
        sorted_value = sort.meta.get("val") if isinstance(sort, torch.fx.Node) else None
        if not isinstance(sorted_value, torch.Tensor) or tuple(sorted_value.shape) != tuple(value.shape):
            continue
        node.target, node.args = torch.ops.aten.zeros.default, (list(value.shape),)
        node.kwargs = {"dtype": value.dtype, "device": torch.device("cpu")}


def _reads_only_shape(node: torch.fx.Node, of: torch.fx.Node) -> bool:
    """Whether `node` reads nothing of `of`'s values: a slice of it that only copies write over (the
    functional form of `out[a:b].copy_(src)`: the copy takes only the slice's shape and dtype)."""
    if node.target in (torch.ops.aten.slice.Tensor, torch.ops.aten.select.int) and node.args[0] is of:
        return all(user.target is torch.ops.aten.copy.default and user.args[0] is node
                   and node not in user.args[1:] for user in node.users)
    return False


def _written_span(node: torch.fx.Node, of: torch.fx.Node, shape: tuple) -> tuple[int, range] | None:
    """(axis, positions along it) of `of` that `node` overwrites, when `node` writes every position of a
    strided slice of `of` along one axis (slice_scatter, select_scatter) or all of it (copy); None otherwise."""
    rank = len(shape)
    if node.args[0] is not of or of in node.args[1:]:
        return None
    if node.target is torch.ops.aten.copy.default:
        return (0, range(shape[0])) if rank else None
    if node.target is torch.ops.aten.slice_scatter.default:
        dim, start, end, step = (list(node.args[2:]) + [0, None, None, 1][len(node.args) - 2:])[:4]
        dim, start, end, step = (node.kwargs.get("dim", dim), node.kwargs.get("start", start),
                                 node.kwargs.get("end", end), node.kwargs.get("step", step))
        if not (isinstance(start, (int, type(None))) and isinstance(end, (int, type(None))) and isinstance(step, int)
                and isinstance(dim, int)) or step < 1:
            return None
        axis = dim % rank
        size = shape[axis]
        start = 0 if start is None else (start + size if start < 0 else start)
        end = size if end is None else (end + size if end < 0 else end)
        return axis, range(max(0, min(start, size)), max(0, min(end, size)), step)
    if node.target is torch.ops.aten.select_scatter.default and isinstance(node.args[3], int) \
            and isinstance(node.args[2], int):
        axis = node.args[2] % rank
        index = node.args[3] % shape[axis]
        return axis, range(index, index + 1)
    return None


def _fill_written_empties(program: torch.export.ExportedProgram) -> None:
    """An uninitialised tensor whose every element is written before any is read (`out = x.new_empty(...)`,
    then `out[..., :k].copy_(a)` and `out[..., k:].copy_(b)`, as DeepSeek's attention builds its keys) becomes
    torch.zeros: no value of it is ever read. The writes are spans along one axis, in a chain."""
    for node in list(program.graph.nodes):
        if node.op != "call_function" or node.target not in _EMPTY:
            continue
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor) or value.dim() == 0 \
                or not all(isinstance(d, int) for d in value.shape):
            continue
        shape = tuple(value.shape)
        if _written_before_read(node, shape):
            node.target, node.args = torch.ops.aten.zeros.default, (list(shape),)
            node.kwargs = {"dtype": value.dtype, "device": torch.device("cpu")}


def _written_before_read(node: torch.fx.Node, shape: tuple) -> bool:
    """Whether a chain of writes starting at `node` (one writer each, other users reading only shapes)
    overwrites every element of it before anything reads a value."""
    current, axis = node, None
    written: np.ndarray | None = None
    while True:
        writers = [u for u in current.users if not _reads_only_shape(u, current)]
        if len(writers) != 1:
            return False
        span = _written_span(writers[0], current, shape)
        if span is None:
            return False
        if span[1] == range(shape[span[0]]):  # the whole tensor
            return True
        if axis is not None and span[0] != axis:
            return False
        if axis is None or written is None:
            axis, written = span[0], np.zeros(shape[span[0]], np.bool_)
        written[span[1].start:span[1].stop:span[1].step] = True
        if written.all():
            return True
        current = writers[0]


def _rrelu_in_eval(program: torch.export.ExportedProgram) -> None:
    """rrelu outside training is leaky_relu with the mean of its bounds as the slope: rewritten so, and the noise
    tensor torch.export made for it (uninitialised, and never read in eval mode) dropped."""
    graph = program.graph
    for node in list(graph.nodes):
        if node.target is not torch.ops.aten.rrelu_with_noise_functional.default:
            continue
        args = list(node.args) + [None] * (6 - len(node.args))
        x, noise, lower, upper, training = args[:5]
        lower = node.kwargs.get("lower", 1.0 / 8.0 if lower is None else lower)
        upper = node.kwargs.get("upper", 1.0 / 3.0 if upper is None else upper)
        training = node.kwargs.get("training", bool(training))
        getters = list(node.users)
        if training or any(u.target is not operator.getitem or u.args[1] != 0 for u in getters):
            continue  # training draws random slopes; a read of the noise result is left to the lowering
        with graph.inserting_before(node):
            leaky = graph.call_function(torch.ops.aten.leaky_relu.default, (x, (float(lower) + float(upper)) / 2))
        leaky.meta = dict(node.meta)
        leaky.meta["val"] = node.meta["val"][0]
        for getter in getters:
            getter.replace_all_uses_with(leaky)
            graph.erase_node(getter)
        graph.erase_node(node)
        if isinstance(noise, torch.fx.Node) and not noise.users and noise.target in _EMPTY:
            graph.erase_node(noise)


def _check_supported(program: torch.export.ExportedProgram, constant_nodes: set[str]) -> None:
    """Raise one UnsupportedOpsError listing every op without a lowering, or return."""
    missing: dict[str, UnsupportedOp] = {}
    for node in program.graph.nodes:
        if (node.op != "call_function" or node.target is operator.getitem or node.name in constant_nodes
                or _is_size(node) or isinstance(node.meta.get("val"), torch.SymBool)):
            continue
        if lowering_for(node.target) is not None:
            continue
        name = target_name(node.target)
        if node.target is torch.ops.higher_order.with_effects and len(node.args) > 1:
            name = f"{target_name(node.args[1])} (run for its side effect)"
        if name in missing:
            prev = missing[name]
            missing[name] = UnsupportedOp(name, prev.count + 1, prev.first_node, prev.location, prev.module,
                                          prev.reason)
        else:
            ref = source_ref(node)
            missing[name] = UnsupportedOp(name, 1, node.name, ref.location, ref.module, HINTS.get(name))
    if missing:
        raise UnsupportedOpsError(list(missing.values()))


# Ops whose value depends only on the shape and dtype of their tensor input, known at conversion time.
log = logging.getLogger("litert_torch")

SHAPE_ONLY = {
    torch.ops.aten.full_like.default, torch.ops.aten.zeros_like.default, torch.ops.aten.ones_like.default,
    torch.ops.aten.new_zeros.default, torch.ops.aten.new_ones.default, torch.ops.aten.new_full.default,
}


def _find_constant_nodes(program: torch.export.ExportedProgram, constants: dict[str, Any],
                         sizes: dict[str, Any]) -> set[str]:
    """Nodes computed from constants and static sizes alone (`sizes`: the value of each size node). A node whose
    own shape is dynamic is never constant."""
    const = set(constants) | {name for name, v in sizes.items() if not isinstance(v, Sym)}
    for node in program.graph.nodes:
        if node.op != "call_function" or node.name in sizes:
            continue
        inputs = _tensor_nodes((node.args[1:], node.kwargs) if node.target in SHAPE_ONLY else (node.args, node.kwargs))
        if (all(n.name in const for n in inputs) and _is_pure(node) and not _dynamic_value(node)
                and node.target not in RUN_TIME_ONLY):
            const.add(node.name)
        elif _empty_result(node, inputs) or _values_unread(node):
            const.add(node.name)
    return const


# what torch.empty, empty_like and new_empty become after decomposition
UNINITIALISED = {torch.ops.aten.empty.memory_format, torch.ops.aten.empty_permuted.default}


def _values_unread(node: torch.fx.Node) -> bool:
    """An uninitialised tensor (torch.empty) read only for its shape and dtype, as the template of *_like ops
    (`torch.zeros_like(torch.empty(...))`, what some decompositions make): its values never matter."""
    if node.target not in UNINITIALISED or not node.users:
        return False
    return all(user.target in SHAPE_ONLY and user.args and user.args[0] is node
               and node not in _tensor_nodes((user.args[1:], user.kwargs)) for user in node.users)


def _empty_result(node: torch.fx.Node, inputs: list[torch.fx.Node]) -> bool:
    """An op whose results all have no elements: their value is known whatever the inputs (there is none), so
    it is computed at conversion time, on stand-ins for its non-constant inputs (their static shapes)."""
    val = node.meta.get("val")
    results = val if isinstance(val, (tuple, list)) else [val]
    schema = getattr(node.target, "_schema", None)
    if schema is None or schema.is_mutable or not results:
        return False
    # a shape of plain ints with a 0 in it first (cheap, false for almost every node, and never compares a
    # symbol, which could add a guard), then no symbolic value either
    if not all(isinstance(r, torch.Tensor) and all(type(d) is int for d in r.shape) and 0 in r.shape
               and not _dynamic_value_of(r) for r in results):
        return False
    return all(not _dynamic_value(n) for n in inputs)


_SYMBOLIC_KINDS = (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)


def _dynamic_value_of(val: Any) -> bool:
    """Whether a traced value holds symbols: a tensor of symbolic sizes, a symbolic number, or a sequence
    holding one. Other values (None, numbers, opaque objects) have no sizes."""
    from torch.fx.experimental.symbolic_shapes import free_symbols

    if isinstance(val, (list, tuple)):
        return any(_dynamic_value_of(v) for v in val)
    return isinstance(val, _SYMBOLIC_KINDS) and bool(free_symbols(val))


def _dynamic_value(node: torch.fx.Node) -> bool:
    return _dynamic_value_of(node.meta.get("val"))


def _is_pure(node: torch.fx.Node) -> bool:
    target = node.target
    if target is operator.getitem:
        return True
    schema = getattr(target, "_schema", None)
    if schema is None:
        return False
    if schema.is_mutable or any(t in str(target) for t in ("rand", "dropout", "bernoulli", "empty")):
        return False
    return True


def symbol_names(program: torch.export.ExportedProgram, dims: dict[tuple[int, int], str]) -> dict[str, str]:
    """Size symbol -> the user's Dim name, from `dims` ((user input position, axis) -> Dim name)."""
    user_inputs = [s for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    placeholder_by_name = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    names: dict[str, str] = {}
    for (pos, axis), name in dims.items():
        if pos >= len(user_inputs):
            continue
        node = placeholder_by_name.get(getattr(user_inputs[pos].arg, "name", None))
        val = node.meta.get("val") if node is not None else None
        if isinstance(val, torch.Tensor) and axis < val.dim():
            expr = getattr(getattr(val.shape[axis], "node", None), "expr", None)
            if expr is not None and expr.is_Symbol:
                names.setdefault(str(expr), name)
    return names


def _values(program: torch.export.ExportedProgram, space: SymSpace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The shape and dtype of each tensor node's result (a `Value`, or a tuple of them, None for non-tensors,
    for an op with several results), with dynamic sizes as Syms; and the value of each size node."""
    values: dict[str, Value | tuple[Value | None, ...]] = {}
    sizes: dict[str, Any] = {}
    for node in program.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            values[node.name] = Value(tuple(from_torch(d, space) for d in val.shape), val.dtype,
                                      _contiguous(val))
        elif isinstance(val, (tuple, list)):
            values[node.name] = tuple(Value(tuple(from_torch(d, space) for d in v.shape), v.dtype)
                                      if isinstance(v, torch.Tensor) else None for v in val)
        elif node.op == "call_function" and _is_size(node):
            sizes[node.name] = from_torch(val, space)
    return values, sizes


def _contiguous(val: torch.Tensor) -> bool:
    """Whether `val`'s elements lie in storage order from offset 0, decided without adding a guard to the
    program's shape environment (asking torch's `is_contiguous` of a symbolic tensor specialises its sizes)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    try:
        if not statically_known_true(val.storage_offset() == 0):
            return False
        expected = 1
        for size, stride in reversed(list(zip(val.shape, val.stride()))):
            if not (statically_known_true(size == 1) or statically_known_true(stride == expected)):
                return False
            expected = expected * size
        return True
    except (RuntimeError, NotImplementedError):  # a tensor without strides or storage (sparse, nested): not
        return False                               # contiguous


def _contract(node: torch.fx.Node, values: dict[str, Any], sizes: dict[str, Any], ref: ir.SourceRef) -> Node:
    """The `Node` the lowerings read for one fx node."""

    def operand(n: torch.fx.Node) -> Any:
        return values[n.name] if n.name in values else sizes.get(n.name)

    result = values.get(node.name)
    if isinstance(result, tuple):
        outputs, single = result, False
        used = frozenset(user.args[1] for user in node.users
                         if user.target is operator.getitem and user.users and isinstance(user.args[1], int))
    else:
        outputs, single = ((result,) if result is not None else ()), True
        used = frozenset({0}) if node.users else frozenset()
    return Node(node.name, node.target, tuple(torch.fx.node.map_arg(node.args, operand)), outputs, ref, used, single)


def output_names(out_spec: Any, count: int) -> list[str]:
    """Signature output names from the output pytree: dict keys (and field names) where the model returns a
    dict or dataclass, joined with "_" down nested levels ("y_data_1"), else output_i."""
    import torch.utils._pytree as pytree

    if count == 1 and out_spec.is_leaf():
        return ["output_0"]
    try:
        tree = pytree.tree_unflatten(list(range(count)), out_spec)
        paths = [_path_name(path) for path, _ in pytree.tree_flatten_with_path(tree)[0]]
    # A type registered with pytree (a KV cache object) may need real tensors to be rebuilt: its own code then
    # fails on the placeholder ints with one of these, and the names come from the spec alone.
    except (TypeError, ValueError, AttributeError, IndexError, KeyError):
        paths = ["_".join(parts) for parts in _spec_paths(out_spec)]
    names = []
    for name in paths:
        name = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "output"
        names.append(name if name[0].isalpha() else "output_" + name)
    return _unique(names)


def _spec_paths(spec: Any) -> list[list[str]]:
    """Each leaf's path through a TreeSpec, read from the spec alone: dict keys where the context lists them,
    else child positions."""
    if spec.is_leaf():
        return [[]]
    context = spec.context
    keys: list[Any] = list(range(spec.num_children))
    if isinstance(context, (list, tuple)) and len(context) == spec.num_children and \
            all(isinstance(k, (str, int)) for k in context):
        keys = list(context)
    children = spec.children() if hasattr(spec, "children") else spec.children_specs
    return [[str(key), *rest] for key, child in zip(keys, children) for rest in _spec_paths(child)]


def input_names(in_spec: Any, positions: list[int]) -> list[str]:
    """Signature input names of the (args, kwargs) leaves at `positions`, as the official litert-torch names
    them: args_<i> for positional input i, the keyword for a keyword input, nested levels joined with "_"
    ("args_0_x", "z_data_2_0")."""
    import torch.utils._pytree as pytree

    tree = pytree.tree_unflatten(list(range(in_spec.num_leaves)), in_spec)
    paths = [path for path, _ in pytree.tree_flatten_with_path(tree)[0]]
    names = []
    for pos in positions:
        side, *rest = paths[pos]
        if isinstance(side, pytree.SequenceKey) and side.idx == 0:  # positional: ("args", i, ...)
            index, *rest = rest
            if not isinstance(index, pytree.SequenceKey):
                raise TypeError(f"positional input path {paths[pos]} has no position")
            name = "_".join(["args", str(index.idx), *filter(None, [_path_name(rest)])])
        else:
            name = _path_name(rest)
        names.append(name if name[:1].isalpha() or name[:1] == "_" else "input_" + name)
    return _unique(names)


def _path_name(path: Any) -> str:
    import torch.utils._pytree as pytree

    parts = []
    for key in path:
        if isinstance(key, pytree.MappingKey):
            parts.append(str(key.key))
        elif isinstance(key, pytree.SequenceKey):
            parts.append(str(key.idx))
        elif isinstance(key, pytree.GetAttrKey):
            parts.append(key.name)
        else:
            parts.append(str(key))
    return "".join(c if c.isalnum() or c == "_" else "_" for c in "_".join(parts))


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    unique = []
    for name in names:
        n = seen.get(name, 0)
        seen[name] = n + 1
        unique.append(name if n == 0 else f"{name}_{n}")
    return unique


def lower_program(program: torch.export.ExportedProgram,
                  weights: dict[str, torch.Tensor] | None = None, *,
                  dim_names: dict[str, str] | None = None,
                  fixed: dict[str, int] | None = None) -> LoweredProgram:
    """Lower every node of `program` into a new IR graph. `weights` (state_dict keys -> tensors of the same
    shapes and dtypes) replace the program's own parameters and buffers: one traced program then serves every
    module of the same structure (the layers of a decoder).

    A program traced with dynamic dimensions is lowered once, with those dimensions as symbols
    (`litert_torch.symbolic`); `dim_names` (size symbol -> Dim name) names them in messages, and `fixed`
    (Dim name -> size) lowers the program at one static size of those dimensions instead (buckets)."""
    space = space_of_program(program, dim_names, fixed)
    _fill_permuted_empties(program)
    _fill_written_empties(program)
    _rrelu_in_eval(program)
    drop_value_checks(program)
    constants = _constant_values(program, weights)
    values, sizes = _values(program, space)
    # An input with no elements carries no data: what is computed from it alone is known at conversion time.
    empty_inputs = {n.name: _stand_in(values[n.name]) for n in program.graph.nodes
                    if n.op == "placeholder" and n.name not in constants and isinstance(values.get(n.name), Value)
                    and all(not isinstance(d, Sym) for d in values[n.name].shape)
                    and 0 in tuple(values[n.name].shape)}
    constant_nodes = _find_constant_nodes(program, {**constants, **empty_inputs}, sizes)
    check_value_sizes(program, space)
    _check_mutations(program)
    _check_supported(program, constant_nodes)

    graph = ir.Graph("main")
    ctx = LoweringContext(graph, space)
    env: dict[str, Any] = dict(sizes)  # node name -> IR tensor(s), a size (int or Sym) or a Python value
    torch_env: dict[str, Any] = {**constants, **empty_inputs}  # node name -> torch value, for constant nodes
    torch_env.update({name: v for name, v in sizes.items() if not isinstance(v, Sym)})

    user_inputs = [s for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    tensor_positions, parameters, input_dtypes, output_dtypes = [], [], [], []
    placeholder_by_name = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    for pos, spec in enumerate(user_inputs):
        node = placeholder_by_name.get(getattr(spec.arg, "name", None))
        if node is None or not isinstance(node.meta.get("val"), torch.Tensor):
            continue
        shape = values[node.name].shape
        env[node.name] = ir.Tensor(node.name, shape, numpy_dtype(values[node.name].dtype))
        graph.inputs.append(env[node.name])
        ctx.add_input(env[node.name])
        tensor_positions.append(pos)
        parameters.append(node.name)
        input_dtypes.append(_dtype_name(node.meta["val"].dtype))

    def to_ir(value: Any) -> Any:
        return torch.fx.node.map_arg(value, lambda n: env[n.name])

    def to_torch(value: Any) -> Any:
        return torch.fx.node.map_arg(value, lambda n: torch_env[n.name] if n.name in torch_env else _stand_in(values[n.name]))

    for node in program.graph.nodes:
        if node.op == "placeholder":
            if node.name in constants:
                ref = ir.SourceRef(node.name, "placeholder")
                ctx.begin(Node(node.name, "placeholder", source=ref), ref)
                env[node.name] = _const_tensor(node.name, constants[node.name])
            continue
        if node.op == "output":
            break
        if node.name in sizes:
            value = sizes[node.name]
            if node.target in VALUE_READS and isinstance(value, Sym) and value.expr in space.counts:
                ref = source_ref(node)
                ctx.begin(_contract(node, values, sizes, ref), ref)
                ctx.bind(value.expr, env[node.args[0].name])
            continue
        ref = source_ref(node)
        contract = _contract(node, values, sizes, ref)
        ctx.begin(contract, ref)
        if node.name in constant_nodes:
            with torch.no_grad():
                value = node.target(*to_torch(node.args), **to_torch(node.kwargs))
            torch_env[node.name] = value
            # Only values that something outside the constant part of the graph reads become IR constants: an
            # intermediate that only feeds other constants (T5's log(0) cast to int64 before a where discards
            # it) never has to fit the model's int32.
            if any(user.name not in constant_nodes for user in node.users):
                permuted = _permuted_constant(ctx, node, env)
                env[node.name] = permuted if permuted is not None else _wrap_constant(node.name, value)
            continue
        if node.target is operator.getitem:
            seq, index = node.args
            env[node.name] = env[seq.name][index]
            continue
        lowering = lowering_for(node.target)
        if lowering is None and isinstance(node.meta.get("val"), torch.SymBool):
            raise LoweringError(f"the run-time check {node.meta['val']} on sizes has no lowering (a size "
                                "decided by the input's values)", target=ref.target, location=ref.location)
        try:
            args, kwargs = to_ir(node.args), to_ir(node.kwargs)
            if complex_ops.involves_complex(contract, args, kwargs):
                result = complex_ops.lower(ctx, node.target, lowering.fn if lowering else None, contract, args,
                                           kwargs)
            elif lowering is None:
                raise LoweringError("no lowering for this op", target=ref.target, location=ref.location)
            else:
                result = _lower_node(ctx, lowering.fn, contract, args, kwargs)
        except DynamicSizeError as exc:
            raise LoweringError(f"{exc}; this lowering cannot follow that size at run time (make the dimension "
                                "static, or give buckets= for one static signature per size)",
                                target=ref.target, location=ref.location) from exc
        except LoweringError as exc:
            if exc.target is None:
                raise LoweringError(str(exc), target=ref.target, location=ref.location) from exc
            raise
        except ConversionError:
            raise
        except Exception as exc:
            raise ConversionError(
                f"lowering {ref.target} (node {node.name}, at {ref.location or 'unknown source'}) failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        _check_result(contract, result)
        env[node.name] = result
        anchor_results(ctx, result)

    output_node = next(n for n in program.graph.nodes if n.op == "output")
    out_args = output_node.args[0]
    for spec, arg in zip(program.graph_signature.output_specs, out_args):
        if spec.kind == OutputKind.USER_INPUT_MUTATION:
            # A model writing to its own input (x /= s): its outputs are computed from the written value, as in
            # PyTorch; the converted model does not write back into the caller's array.
            log.warning("the model writes to its input %r in place; the converted model computes the same outputs "
                        "but leaves the caller's input unchanged", spec.target)
            continue
        if spec.kind == OutputKind.TOKEN:  # the order of side effects dropped before lowering (_drop_value_checks)
            continue
        if spec.kind != OutputKind.USER_OUTPUT:  # _check_mutations refuses these before lowering
            raise ConversionError(f"internal error: output {spec.target!r} of kind {spec.kind.name} reached "
                                  "the end of lowering")
        if not isinstance(arg, torch.fx.Node):
            raise ConversionError(f"output {arg!r} is not a tensor; only tensor outputs are supported")
        value = env[arg.name]
        complex_ops.check_output(len(graph.outputs), value, source_ref(arg))
        if not isinstance(value, ir.Tensor):
            raise ConversionError(f"output {arg.name} is not a tensor")
        if value.is_constant and all(not isinstance(d, Sym) for d in value.shape) and 0 in tuple(value.shape):
            value = _empty_output(ctx, graph, arg.name, value)
        graph.outputs.append(value)
        output_dtypes.append(_dtype_name(arg.meta["val"].dtype))
    names = output_names(program.call_spec.out_spec, len(graph.outputs))
    return LoweredProgram(graph, input_names(program.call_spec.in_spec, tensor_positions), names, tensor_positions,
                          input_dtypes, output_dtypes, parameters)


# Ops whose result is exact in any float type (they move, select or compare values): a lowering made of these
# and at most one other op rounds once, at its output, in float16 as in float32.
EXACT_OPS = frozenset({
    "RESHAPE", "TRANSPOSE", "SLICE", "STRIDED_SLICE", "CONCATENATION", "GATHER", "GATHER_ND", "PACK", "UNPACK",
    "SPLIT", "SPLIT_V", "SQUEEZE", "EXPAND_DIMS", "BROADCAST_TO", "TILE", "PAD", "PADV2", "MIRROR_PAD",
    "REVERSE_V2", "SHAPE", "CAST", "SELECT", "SELECT_V2", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "MAXIMUM", "MINIMUM",
    "MAX_POOL_2D", "RELU", "RELU6", "RELU_N1_TO_1", "NEG", "ABS", "REDUCE_MAX", "REDUCE_MIN", "ARG_MAX", "ARG_MIN",
    "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL", "LOGICAL_AND", "LOGICAL_OR",
    "LOGICAL_NOT", "ZEROS_LIKE", "FILL", "TOPK_V2", "FLOOR", "CEIL", "ROUND",
})


def _lower_node(ctx: LoweringContext, fn, contract: Node, args: tuple, kwargs: dict) -> Any:
    """`fn`'s lowering of one node. A float16 node whose lowering computes in more than one rounding step
    (a decomposition: GELU, a norm, a loss) is lowered again in float32 between CASTs, so that it rounds once, at
    its output, as PyTorch's float16 ops do (they compute in float32 internally)."""
    if not _has_half(contract):
        return fn(ctx, contract, *args, **kwargs)
    state = ctx.checkpoint()
    result = fn(ctx, contract, *args, **kwargs)
    if sum(op.opcode not in EXACT_OPS for op in ctx.emitted_since(state)) <= 1:
        return result
    ctx.rollback(state)

    def widen(value: Any) -> Any:
        if isinstance(value, ir.Tensor) and value.dtype == F16 and value.quantization is None:
            return ctx.cast(value, F32)
        if isinstance(value, (list, tuple)):
            return type(value)(widen(v) for v in value)
        return value

    def wide_value(v: Any) -> Any:
        if isinstance(v, Value) and v.dtype == torch.float16:
            return Value(v.shape, torch.float32, v.contiguous)
        if isinstance(v, (list, tuple)):
            return type(v)(wide_value(u) for u in v)
        return v

    wide = dataclasses.replace(contract, inputs=wide_value(contract.inputs), outputs=wide_value(contract.outputs))
    ctx.begin(wide, contract.source)
    result = fn(ctx, wide, *widen(args), **{k: widen(v) for k, v in kwargs.items()})
    ctx.node = contract

    def narrow(value: Any, want: Any) -> Any:
        if isinstance(value, ir.Tensor) and isinstance(want, Value) and want.dtype == torch.float16:
            return ctx.cast(value, F16)
        return value

    if isinstance(result, (list, tuple)):
        return type(result)(narrow(r, w) for r, w in zip(result, contract.outputs))
    return narrow(result, contract.outputs[0] if contract.outputs else None)


def _has_half(contract: Node) -> bool:
    values = [*contract.outputs]
    for v in contract.inputs:
        values.extend(v if isinstance(v, (list, tuple)) else [v])
    return any(isinstance(v, Value) and v.dtype == torch.float16 for v in values)


def _empty_output(ctx: LoweringContext, graph: ir.Graph, name: str, value: ir.Tensor) -> ir.Tensor:
    """An output with no elements, made when the model runs (`LoweringContext.empty`)."""
    ref = ir.SourceRef(name, "output")
    ctx.begin(Node(name, "output", source=ref), ref)
    return ctx.empty(value.shape, value.dtype)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _stand_in(value: Value) -> torch.Tensor:
    """A real tensor with a value's shape and dtype, for ops that read only those (SHAPE_ONLY)."""
    return torch.zeros(tuple(int(d) for d in value.shape), dtype=value.dtype)


def _const_tensor(name: str, value: torch.Tensor) -> Any:
    if value.is_complex():
        return complex_ops.constant(name, value)
    value = value.detach().cpu()
    if value.dtype == torch.bfloat16 or "float8" in str(value.dtype):
        value = value.float()  # exact; bfloat16 is computed in float32 (TORCH_TO_NUMPY), float8 is read through casts
    arr = value.contiguous().numpy()
    if arr.dtype == np.int64:
        arr = narrow_int64(arr, f"constant {name}")
    return ir.Tensor(name, arr.shape, arr.dtype, arr)


def _permuted_constant(ctx: LoweringContext, node: torch.fx.Node, env: dict) -> ir.Tensor | None:
    """A permute of a constant the graph holds, lowered as `lower_permute` lowers it (`ctx.transpose`) rather than
    copied out of torch: a product reading `w.transpose(-1, -2)` of stored weights then reads the stored weights
    with adj_y, and no permuted copy is made. None for other nodes."""
    if node.target is not torch.ops.aten.permute.default or not isinstance(node.args[0], torch.fx.Node):
        return None
    source = env.get(node.args[0].name)
    perm = node.args[1]
    if not isinstance(source, ir.Tensor) or not source.is_constant or not isinstance(perm, (list, tuple)):
        return None
    axes = [d for d in perm if isinstance(d, int)]
    if len(axes) != len(perm):
        return None
    return ctx.transpose(source, [normalize_dim(d, source.rank) for d in axes])


def _wrap_constant(name: str, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return _const_tensor(name, value)
    if isinstance(value, (tuple, list)):
        return type(value)(_wrap_constant(f"{name}_{i}", v) for i, v in enumerate(value))
    return value


def _check_result(node: Node, result: Any) -> None:
    """A lowering's outputs must have the shapes and dtypes the frontend computed; a mismatch is a bug in the
    lowering."""
    target = node.source.target if node.source is not None else str(node.op)
    if node.single:
        pairs = [(node.outputs[0], result)] if node.outputs else []
    elif isinstance(result, (tuple, list)):
        pairs = list(zip(node.outputs, result))
    else:
        return
    for val, got in pairs:
        if val is None or not isinstance(got, ir.Tensor):
            continue
        want = val.shape
        if len(want) != len(got.shape) or not all(same_size(a, b) for a, b in zip(want, got.shape)):
            raise ConversionError(
                f"internal error: lowering of {target} (node {node.name}) produced shape {list(got.shape)}, "
                f"PyTorch computes {list(want)}"
            )
        if got.shape != want and not got.is_constant:
            got.shape = want  # torch.export's form of each dynamic size, so that later comparisons see it
        if np.dtype(numpy_dtype(val.dtype)) != got.dtype:
            raise ConversionError(
                f"internal error: lowering of {target} (node {node.name}) produced {got.dtype}, "
                f"PyTorch computes {val.dtype}"
            )
