"""An ONNX graph lowered to the IR: the same IR, passes, delegate plan and writer as the PyTorch path.

The model has been read by `litert_torch.frontend.onnx_model` (checked, opsets upgraded, its inputs' shapes
settled). Shape inference runs first; inputs with dimensions kept dynamic are symbols with ranges, whose nodes get
their output shapes from `shapes` (shape arithmetic folded over symbols) or `dynamic` (shape parameters computed
at run time); every node whose inputs are all constants is evaluated by onnx's reference evaluator at
conversion time. Each remaining node becomes a `litert_torch.node.Node` and is lowered by its registration in
`registry` (the op-family modules), whose lowerings call the ATen lowerings themselves (an ONNX Conv is
lowered by the code that lowers aten.convolution), so both frontends share one implementation of each op.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from litert_torch import ir
from litert_torch.errors import ConversionError, LoweringError, OnnxError, UnsupportedOp, UnsupportedOpsError
from litert_torch.lower.onnx import dynamic as onnx_dynamic
from litert_torch.lower.onnx import ops as _ops  # noqa: F401 (registers every ONNX op)
from litert_torch.lower.onnx.registry import facts, known
from litert_torch.lower.common.registry import LoweringContext, narrow_int64
from litert_torch.frontend import onnx_model
from litert_torch.lower.onnx import shapes as onnx_shapes
from litert_torch.node import Node, Value
from litert_torch.symbolic import DynamicSizeError, SymSpace, all_static, same_size

TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16,
                np.dtype(np.float64): torch.float32, np.dtype(np.int64): torch.int64,
                np.dtype(np.int32): torch.int32, np.dtype(np.int16): torch.int16, np.dtype(np.int8): torch.int8,
                np.dtype(np.uint8): torch.uint8, np.dtype(np.bool_): torch.bool,
                np.dtype(np.uint16): torch.int32, np.dtype(np.uint32): torch.int32}
# uint16 and uint32 have almost no LiteRT kernels: they compute in int32 between CASTs at the model's inputs and
# outputs. A uint16 value fits int32, and every result an op can leave out of the uint16 range (a sum, a
# difference, a product) is wrapped back into it (`OnnxOp.uint16_in_range` marks the ops that cannot). A uint32
# value is held as its int32 bit pattern, on which addition, subtraction, multiplication and equality agree;
# order comparisons and max/min compare the patterns with the top bit flipped; division and the rest are refused
# (`OnnxOp.uint32`).
WIDE_UNSIGNED = (np.dtype(np.uint16), np.dtype(np.uint32))




def _value(shape, dtype) -> Value:
    """The contract's view of an ONNX tensor (float64 is computed in float32)."""
    return Value(tuple(shape), TORCH_DTYPES[np.dtype(dtype)])












@dataclass
class LoweredOnnx:
    graph: ir.Graph
    input_names: list[str]
    output_names: list[str]
    input_dtypes: list[str]
    output_dtypes: list[str]
    parameters: list[str] = field(default_factory=list)  # (an ONNX graph's inputs have only their own names)


def lower_onnx(proto, input_shapes: dict[str, tuple] | None = None,
               dynamic_dims: dict[str, dict] | None = None) -> LoweredOnnx:
    """ONNX graph -> IR graph (constants folded, every other node lowered). Dimensions named in `dynamic_dims`
    stay symbols (`litert_torch.symbolic`): the nodes that read them get their output shapes from
    `onnx_shapes`, and a lowering that cannot follow a size raises an error naming the node."""
    onnx = onnx_model.onnx_package()
    from onnx import numpy_helper

    proto = onnx_model.copy_model(onnx, proto)
    space = SymSpace()
    graph_inputs, input_shape = onnx_model.input_shapes(proto, input_shapes, dynamic_dims, space)
    try:
        proto = onnx.shape_inference.infer_shapes(proto, strict_mode=True, data_prop=True)
    except Exception as exc:  # noqa: BLE001 - onnx's shape inference raises its own error types
        raise OnnxError(f"ONNX shape inference failed: {exc}") from None
    types = {}  # value name -> (static shape or None, numpy dtype or None)
    for vi in [*proto.graph.input, *proto.graph.value_info, *proto.graph.output]:
        tt = vi.type.tensor_type
        static = tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim)
        types[vi.name] = ([d.dim_value for d in tt.shape.dim] if static else None, onnx_model.ONNX_DTYPES.get(tt.elem_type))

    graph = ir.Graph("main")
    ctx = LoweringContext(graph, space)
    env: dict[str, Any] = {}
    consts: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    input_names, input_dtypes = [], []
    for inp in graph_inputs:
        dtype = types[inp.name][1]
        if dtype is None:
            raise OnnxError(f"input {inp.name} has an element type without a TFLite equivalent")
        if all_static(input_shape[inp.name]) and 0 in input_shape[inp.name]:
            # no elements, no data: what the input determines is known now (the model still takes it)
            consts[inp.name] = np.zeros([int(d) for d in input_shape[inp.name]], dtype)
        t = ir.Tensor(inp.name, input_shape[inp.name], np.int32 if dtype == np.int64 else dtype)
        graph.inputs.append(t)
        ctx.add_input(t)
        if np.dtype(dtype) in WIDE_UNSIGNED:
            ref = ir.SourceRef(inp.name, "input", None, None)
            ctx.begin(Node(inp.name, "input", source=ref), ref)
            t = ctx.cast(t, np.int32)
        env[inp.name] = t
        input_names.append(inp.name)
        input_dtypes.append(np.dtype(dtype).name)

    # Everything missing first, all at once, as on the PyTorch path.
    missing: dict[str, list] = {}
    for i, node in enumerate(proto.graph.node):
        if not known(node.op_type):
            missing.setdefault(node.op_type, []).append(node.name or f"{node.op_type}_{i}")
    if missing:
        raise UnsupportedOpsError([UnsupportedOp(f"onnx::{op}", len(names), names[0], f"node {names[0]}", None)
                                   for op, names in sorted(missing.items())])

    def value(name: str):
        if name == "":
            return None
        if name in consts:
            return consts[name]
        return env[name]

    read = {n for node in proto.graph.node for n in node.input} | {o.name for o in proto.graph.output}
    runtime_shapes: dict = {}  # output shapes of nodes with run-time shape parameters (_runtime_shaped_types)
    for i, node in enumerate(proto.graph.node):
        name = node.name or f"{node.op_type}_{i}"
        inputs = [value(n) for n in node.input]
        attrs = {a.name: _plain(onnx.helper.get_attribute_value(a)) for a in node.attribute}
        ref = ir.SourceRef(name, f"onnx::{node.op_type}", None, None)
        if node.op_type in ("Shape", "Size") and isinstance(inputs[0], ir.Tensor):
            # The shape of a run-time tensor is a constant, holding Syms for its dynamic sizes.
            dims = inputs[0].shape
            if node.op_type == "Size":
                total = int(np.prod([int(d) for d in dims])) if all_static(dims) else np.prod(list(dims), dtype=object)
                consts[node.output[0]] = np.array(total, np.int64 if all_static(dims) else object)
            elif all_static(dims):
                consts[node.output[0]] = np.array(dims, np.int64)[slice(attrs.get("start", 0), attrs.get("end"))]
            else:
                consts[node.output[0]] = onnx_shapes.shape_value(dims, attrs.get("start", 0), attrs.get("end"))
            continue
        sizes_in = any(isinstance(v, np.ndarray) and v.dtype == object for v in inputs)
        if not sizes_in and _empty_results(node, inputs, types):
            # results with no elements are known whatever the inputs: evaluated on stand-ins of their shapes
            stand_ins = [np.zeros([int(d) for d in v.shape], v.dtype) if isinstance(v, ir.Tensor) else v
                         for v in inputs]
            for out, result in zip(node.output, _evaluate(onnx, node, stand_ins)):
                declared = types[out][0]
                if declared is None or list(result.shape) != list(declared):
                    raise OnnxError(f"node {name}: output {out} is declared {types[out][0]} but computes to "
                                    f"{list(result.shape)}")
                consts[out] = result
            continue
        if all(not isinstance(v, ir.Tensor) for v in inputs):
            if not sizes_in:
                for out, result in zip(node.output, _evaluate(onnx, node, inputs)):
                    consts[out] = result
                continue
            try:
                for out, result in zip(node.output, onnx_shapes.fold(node.op_type, inputs, attrs)):
                    consts[out] = result
                continue
            except DynamicSizeError as exc:
                if facts(node.op_type).lower is None:
                    raise _dynamic_error(node.op_type, name, space, exc) from None
        op = facts(node.op_type)
        if op.fold_only:
            raise ConversionError(f"onnx::{node.op_type} node {name} computes on run-time values; it is supported "
                                  "only where its inputs are constants")
        entry = op.runtime_shaped
        runtime_shaped = entry is not None and any(k < len(inputs) and onnx_dynamic.at_run_time(inputs[k])
                                                   for k in entry.inputs)
        dynamic = runtime_shaped or sizes_in or any(isinstance(v, ir.Tensor) and not all_static(v.shape)
                                                    for v in inputs)
        if runtime_shaped:
            shapes = _runtime_shaped_types(node, entry, inputs, attrs, types, space, name, runtime_shapes)
        elif dynamic:
            shapes = _symbolic_types(node, inputs, attrs, types, space, name)
        else:
            if any(out and (types.get(out, (None, None))[0] is None or types[out][1] is None) for out in node.output):
                _infer_by_running(onnx, node, inputs, types, name)
            shapes = [types[out] if out else None for out in node.output]
        contract = Node(name, f"onnx::{node.op_type}",
                        inputs=tuple(_operand(v) for v in inputs),
                        outputs=tuple(_value(*t) if t is not None else None for t in shapes),
                        source=ref, used=frozenset(k for k, out in enumerate(node.output) if out in read),
                        single=len(node.output) == 1)
        ctx.begin(contract, ref)
        keep = op.parameters
        allowed = set(op.runtime_parameters) | (entry.inputs if runtime_shaped else set())
        at_run_time = [k for k in sorted(keep) if k < len(inputs) and isinstance(inputs[k], ir.Tensor)
                       and not inputs[k].is_constant and k not in allowed]
        if at_run_time:
            k = at_run_time[0]
            raise LoweringError(f"node {name}: input {k} ({node.input[k]}) is computed when the model runs; this "
                                "lowering needs it to be a constant", target=f"onnx::{node.op_type}",
                                location=f"node {name}")
        inputs = [_as_tensor(ctx, v) if isinstance(v, np.ndarray) and k not in keep else v
                  for k, v in enumerate(inputs)]
        unsigned = {np.dtype(d) for d in (_onnx_dtype(n, consts, types) for n in [*node.input, *node.output])
                    if d is not None} & set(WIDE_UNSIGNED)
        flip = np.dtype(np.uint32) in unsigned and op.uint32 == "ordered"
        if np.dtype(np.uint32) in unsigned and op.uint32 is None:
            raise LoweringError(f"node {name}: onnx::{node.op_type} on uint32 values has no lowering (uint32 is "
                                "computed as int32 bits, which only addition, subtraction, multiplication, "
                                "comparisons and data movement read as uint32)", target=f"onnx::{node.op_type}",
                                location=f"node {name}")
        lower = entry.lower if runtime_shaped else op.lower
        if lower is None:  # never: ops without a lowering are evaluated when their inputs are constant
            raise LoweringError(f"node {name}: {node.op_type} is only evaluated at conversion time",
                                target=f"onnx::{node.op_type}", location=f"node {name}")
        if flip:
            inputs = [_flip_sign(ctx, v) if isinstance(v, ir.Tensor) else v for v in inputs]
        try:
            result = lower(ctx, contract, inputs, attrs)
        except DynamicSizeError as exc:
            raise _dynamic_error(node.op_type, name, space, exc) from exc
        except ConversionError as exc:
            raise ConversionError(f"onnx::{node.op_type} node {name}: {exc}") from exc
        except Exception as exc:
            raise ConversionError(f"lowering onnx::{node.op_type} node {name} failed: {type(exc).__name__}: "
                                  f"{exc}") from exc
        results = list(result) if isinstance(result, (list, tuple)) else [result]
        if flip and node.op_type in ("Max", "Min"):
            results = [_flip_sign(ctx, r) if isinstance(r, ir.Tensor) else r for r in results]
        if dynamic:
            _check_shapes(contract, results)
            for r in results:
                if isinstance(r, ir.Tensor):
                    ctx.anchor(r)
        for out, r in zip(node.output, results):
            if out:
                if (isinstance(r, ir.Tensor) and _onnx_dtype(out, consts, types) == np.uint16
                        and not op.uint16_in_range):
                    r = ctx.cast(ctx.cast(r, np.uint16), np.int32)  # wrapped into the uint16 range
                env[out] = r

    output_names, output_dtypes = [], []
    for out in proto.graph.output:
        if out.name in env:
            t = env[out.name]
        elif out.name in consts:
            data = consts[out.name]
            if data.dtype == object:
                raise OnnxError(f"output {out.name} is a size known only at run time; make that dimension static")
            if data.size == 0:
                ref = ir.SourceRef(out.name, "output", None, None)
                ctx.begin(Node(out.name, "output", source=ref), ref)
                t = ctx.empty(data.shape, np.int32 if data.dtype == np.int64 else data.dtype)
                graph.outputs.append(t)
                output_names.append(out.name)
                output_dtypes.append(np.dtype(types.get(out.name, (None, data.dtype))[1] or data.dtype).name)
                continue
            t = ir.Tensor(out.name, data.shape, data.dtype,
                          narrow_int64(data, out.name) if data.dtype == np.int64 else data)
        else:
            raise OnnxError(f"output {out.name} is not computed by the graph")
        declared = _onnx_dtype(out.name, consts, types)
        if declared is not None and np.dtype(declared) in WIDE_UNSIGNED and t.dtype != declared:
            ref = ir.SourceRef(out.name, "output", None, None)
            ctx.begin(Node(out.name, "output", source=ref), ref)
            t = ctx.cast(t, declared)
        if t in graph.inputs or t in graph.outputs or t.is_constant:
            copy = ir.Tensor(f"{out.name}_out", t.shape, t.dtype)
            graph.ops.append(ir.Op("RESHAPE", [t, ir.Tensor(f"{out.name}/shape", (t.rank,), np.int32,
                                                               np.array(t.shape, np.int32))],
                                   [copy], {"new_shape": list(t.shape)}, None))
            t = copy
        graph.outputs.append(t)
        output_names.append(out.name)
        output_dtypes.append(np.dtype(types.get(out.name, (None, t.dtype))[1] or t.dtype).name)
    return LoweredOnnx(graph, input_names, output_names, input_dtypes, output_dtypes)


def _flip_sign(ctx, t: ir.Tensor) -> ir.Tensor:
    """The int32 bits of a uint32 value with the top bit flipped: their int32 order is the uint32 order."""
    top = np.array(-2**31, np.int32)
    if t.is_constant:
        return ctx.const(np.bitwise_xor(t.values, top), np.int32)
    return ctx.emit("BITWISE_XOR", [t, ctx.const(top, np.int32, name="top_bit")], like=t)


def _onnx_dtype(name: str, consts: dict, types: dict):
    """The ONNX element type of a value, as numpy's (None when unknown)."""
    if not name:
        return None
    if name in consts:
        return consts[name].dtype
    return types.get(name, (None, None))[1]


def _empty_results(node, inputs: list, types: dict) -> bool:
    """Every result of `node` has a static shape with no elements, and its run-time inputs static shapes."""
    outs = [o for o in node.output if o]
    if not outs or node.op_type in ("Shape", "Size"):
        return False
    for o in outs:
        shape, dtype = types.get(o, (None, None))
        if shape is None or dtype is None or 0 not in shape:
            return False
    runtime = [(k, v) for k, v in enumerate(inputs) if isinstance(v, ir.Tensor)]
    if not runtime or not all(all_static(v.shape) for _, v in runtime):
        return False
    # A run-time integer input may be a parameter (axes, a shape, pads) that decides the results' shape:
    # only inputs whose values cannot matter (no elements, non-integer data, or parameters that leave the shape
    # alone, as Gather's indices) let the stand-ins stand for every input.
    shape_free = facts(node.op_type).runtime_parameters
    return all(0 in [int(d) for d in v.shape] or np.dtype(v.dtype).kind not in "iu" or k in shape_free
               for k, v in runtime)


def _symbolic_types(node, inputs: list, attrs: dict, types: dict, space: SymSpace, name: str) -> list:
    """(shape, dtype) of each output of a node that reads a dynamic size: shapes from `onnx_shapes`, element
    types from ONNX's inference (or the first input's)."""
    described = [v.shape if isinstance(v, ir.Tensor) else v for v in inputs]
    try:
        shapes = onnx_shapes.infer(node.op_type, described, attrs, len(node.output))
    except DynamicSizeError as exc:
        raise _dynamic_error(node.op_type, name, space, exc) from None
    first = next((v for v in inputs if isinstance(v, (ir.Tensor, np.ndarray))), None)
    fallback = first.dtype if first is not None and first.dtype != object else np.int64
    out: list[tuple[tuple, Any] | None] = []
    for k, o in enumerate(node.output):
        if not o:
            out.append(None)
            continue
        dtype = types.get(o, (None, None))[1] or fallback
        types[o] = (None, dtype)
        out.append((tuple(shapes[k]), dtype))
    return out


def _runtime_shaped_types(node, entry, inputs: list, attrs: dict, types: dict, space: SymSpace, name: str,
                          memo: dict) -> list:
    """(shape, dtype) of each output of a node whose shape parameters are computed at run time: the shapes
    from the op's rule in `onnx_dynamic`, over new sizes decided by values (`SymSpace.fresh`)."""
    described = [v.shape if isinstance(v, ir.Tensor) else v for v in inputs]
    runtime = {k for k, v in enumerate(inputs) if onnx_dynamic.at_run_time(v)}

    def fresh(what: str, low: int = 0, high: int | None = None):
        return space.fresh(f"{name}.{what.replace(' ', '_')}", low, high)

    # Nodes of one rule over the same run-time parameter tensors, inputs of the same shapes and the same
    # attributes have outputs of the same shapes (two reductions over one axes input): one set of sizes.
    key = (entry.shapes, tuple(id(inputs[k]) for k in sorted(runtime & entry.inputs)),
           tuple(repr(d) if isinstance(d, tuple) else d.tobytes() + str(d.dtype).encode() + repr(d.shape).encode()
                 if isinstance(d, np.ndarray) else repr(d) for d in described), repr(sorted(attrs.items())),
           len(node.output))
    try:
        shapes = memo[key] if key in memo else entry.shapes(described, attrs, len(node.output), runtime, fresh)
    except DynamicSizeError as exc:
        raise LoweringError(f"node {name}: {exc}", target=f"onnx::{node.op_type}", location=f"node {name}") from None
    memo[key] = shapes
    first = inputs[0]
    out: list[tuple[tuple, Any] | None] = []
    for k, o in enumerate(node.output):
        if not o:
            out.append(None)
            continue
        dtype = types.get(o, (None, None))[1] or first.dtype
        types[o] = (None, dtype)
        out.append((tuple(shapes[k]), dtype))
    return out


def _check_shapes(node: Node, results: list) -> None:
    """The lowering's outputs must have the shapes the rules computed over the whole range; each takes the
    rule's form of its dynamic sizes."""
    for want, got in zip(node.outputs, results):
        if want is None or not isinstance(got, ir.Tensor):
            continue
        if len(want.shape) != got.rank or not all(same_size(a, b) for a, b in zip(want.shape, got.shape)):
            raise ConversionError(f"internal error: lowering of {node.op} (node {node.name}) produced shape "
                                  f"{list(got.shape)}, the ONNX definition gives {list(want.shape)}")
        if not got.is_constant:
            got.shape = tuple(want.shape)


def _dynamic_error(op_type: str, name: str, space: SymSpace, exc: DynamicSizeError) -> LoweringError:
    dims = space.describe(space.ranges)
    return LoweringError(f"node {name}: {exc}; it cannot follow the dynamic dimensions ({dims}) at run time "
                         "(give that input a static shape with input_shapes)", target=f"onnx::{op_type}",
                         location=f"node {name}")




def _operand(value: Any) -> Any:
    """An input as the contract describes it: a Value for a tensor or a constant array."""
    if isinstance(value, (ir.Tensor, np.ndarray)):
        return _value(value.shape, np.int64 if value.dtype == object else value.dtype)
    return value


def _plain(value: Any) -> Any:
    """Attribute values as Python values: strings decoded, here once for every lowering and shape rule."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8") for v in value]
    return value


def _as_tensor(ctx, value: np.ndarray) -> ir.Tensor:
    """A constant input as a tensor; sizes known only at run time (an object array of Syms) are computed in
    the model from the inputs' SHAPE."""
    if value.dtype != object:
        return ctx.const(value)
    flat = ctx.dims_tensor(list(value.reshape(-1)))
    return ctx.reshape(flat, list(value.shape)) if value.ndim != 1 else flat


def _infer_by_running(onnx, node, inputs: list, types: dict, name: str) -> None:
    """Output shapes and dtypes that shape inference left open: run the node once on zeros of its inputs'
    static shapes (constants as they are)."""
    if facts(node.op_type).same_shape and isinstance(inputs[0], ir.Tensor):
        types[node.output[0]] = (list(inputs[0].shape), inputs[0].dtype)
        return
    stand_ins = [np.zeros(v.shape, np.int64 if v.dtype == np.int32 else v.dtype) if isinstance(v, ir.Tensor) else v
                 for v in inputs]
    try:
        results = _evaluate(onnx, node, stand_ins)
    except ConversionError as exc:
        raise OnnxError(f"no static shape for the outputs of {name} (onnx::{node.op_type}): shape inference "
                        f"gives none and running it failed ({exc})") from None
    for out, value in zip(node.output, results):
        if out:
            types[out] = (list(value.shape), onnx_model.ONNX_DTYPES.get(_onnx_type(onnx, value.dtype), value.dtype.type))


def _onnx_type(onnx, dtype) -> int:
    return onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _evaluate(onnx, node, inputs: list) -> list[np.ndarray]:
    """A node on constant inputs, by onnx's reference evaluator (or the op's own `constant_fold`)."""
    from onnx.reference import ReferenceEvaluator

    own = facts(node.op_type).constant_fold
    if own is not None:
        attrs = {a.name: _plain(onnx.helper.get_attribute_value(a)) for a in node.attribute}
        return own(node, inputs, attrs)
    try:
        evaluator = ReferenceEvaluator(node)
        feeds = {name: value for name, value in zip(node.input, inputs) if name}
        return [np.asarray(v) for v in evaluator.run(None, feeds)]
    except Exception as exc:
        raise ConversionError(f"evaluating constant onnx::{node.op_type} node {node.name!r} failed: {exc}") from exc
