"""ONNX models in: `.onnx` -> the same IR, passes, delegate plan and writer as the PyTorch path.

    edge = litert_torch.convert_onnx("model.onnx")                 # or an onnx.ModelProto
    edge = litert_torch.convert_onnx("model.onnx", input_shapes={"input": (1, 3, 224, 224)})

The graph is read with the `onnx` package (checker and shape inference first, opsets 13 and later), inputs with
symbolic dimensions get the concrete shapes `input_shapes` gives, and every node whose inputs are all constants
is evaluated by onnx's reference evaluator at conversion time. The remaining nodes are lowered through
`litert_torch.lower.onnx_ops`, whose lowerings call the ATen lowerings themselves (an ONNX Conv is lowered by
the code that lowers aten.convolution), so both paths share one implementation of each op.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from litert_torch import ir
from litert_torch.errors import ConversionError, OnnxError, UnsupportedOp, UnsupportedOpsError  # noqa: F401 (OnnxError: re-exported)
from litert_torch.lower import onnx_ops
from litert_torch.lower.registry import LoweringContext, narrow_int64
from litert_torch.node import Node, Value

MIN_OPSET = 13
ONNX_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64, 9: np.bool_,
               10: np.float16, 11: np.float64}
TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16,
                np.dtype(np.float64): torch.float32, np.dtype(np.int64): torch.int64,
                np.dtype(np.int32): torch.int32, np.dtype(np.int16): torch.int16, np.dtype(np.int8): torch.int8,
                np.dtype(np.uint8): torch.uint8, np.dtype(np.bool_): torch.bool}


def _onnx():
    try:
        import onnx
    except ImportError as exc:
        raise OnnxError("reading ONNX files needs the onnx package: pip install 'litert-torch-direct[onnx]'") from exc
    return onnx


def _value(shape, dtype) -> Value:
    """The contract's view of an ONNX tensor (float64 is computed in float32)."""
    return Value(tuple(shape), TORCH_DTYPES[np.dtype(dtype)])


def load(model: Any):
    """The ModelProto of a path or a ModelProto, checked; clear errors for unreadable files."""
    onnx = _onnx()
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise OnnxError(f"no such ONNX file: {path}")
        try:
            proto = onnx.load(path, load_external_data=False)
        except Exception as exc:
            raise OnnxError(f"{path} is not a readable ONNX model (truncated or corrupt?): "
                            f"{type(exc).__name__}: {exc}") from None
        _load_external(onnx, proto, os.path.dirname(os.path.abspath(path)), path)
    elif isinstance(model, onnx.ModelProto):
        proto = model
    else:
        raise OnnxError(f"convert_onnx takes a path or an onnx.ModelProto, got {type(model).__name__}")
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    newest = onnx.defs.onnx_opset_version()
    if opset is None or not MIN_OPSET <= opset <= newest:
        raise OnnxError(f"the model uses ONNX opset {opset}; supported: {MIN_OPSET} to {newest} (re-export it, "
                        "or upgrade it with onnx.version_converter)")
    others = sorted({o.domain for o in proto.opset_import if o.domain not in ("", "ai.onnx")}
                    & {n.domain for n in proto.graph.node})
    if others:
        raise OnnxError(f"the model uses ops from custom domains {others}, which have no lowering")
    try:
        onnx.checker.check_model(proto, full_check=False)
    except Exception as exc:
        raise OnnxError(f"the ONNX model is invalid: {exc}") from None
    if proto.functions:  # exporters may wrap ops in model-local functions: lower their bodies
        from onnx import inliner

        proto = inliner.inline_local_functions(proto)
    return proto


def _load_external(onnx, proto, base: str, path: str) -> None:
    from onnx.external_data_helper import load_external_data_for_model, uses_external_data

    missing = []
    for tensor in proto.graph.initializer:
        if uses_external_data(tensor):
            location = next((e.value for e in tensor.external_data if e.key == "location"), None)
            if location is None or not os.path.isfile(os.path.join(base, location)):
                missing.append(location or tensor.name)
    if missing:
        raise OnnxError(f"{path} keeps weights in external data files that are missing next to it: "
                        f"{', '.join(sorted(set(missing)))}")
    try:
        load_external_data_for_model(proto, base)
    except Exception as exc:
        raise OnnxError(f"could not read the external data of {path}: {exc}") from None


def _concrete_inputs(onnx, proto, input_shapes: dict[str, tuple] | None):
    initializers = {t.name for t in proto.graph.initializer}
    graph_inputs = [i for i in proto.graph.input if i.name not in initializers]
    given = dict(input_shapes or {})
    unknown_names = sorted(set(given) - {i.name for i in graph_inputs})
    if unknown_names:
        raise OnnxError(f"input_shapes names {unknown_names}, which are not inputs of the model "
                        f"({[i.name for i in graph_inputs]})")
    for inp in graph_inputs:
        dims = inp.type.tensor_type.shape.dim
        if inp.name in given:
            shape = [int(d) for d in given[inp.name]]
            if len(shape) != len(dims):
                raise OnnxError(f"input {inp.name} has rank {len(dims)}; input_shapes gives {shape}")
            for d, value in zip(dims, shape):
                if d.HasField("dim_value") and d.dim_value != value:
                    raise OnnxError(f"input {inp.name} has a fixed dimension {d.dim_value}; input_shapes gives "
                                    f"{value}")
                d.Clear()
                d.dim_value = value
        symbolic = [d.dim_param or "?" for d in dims if not d.HasField("dim_value")]
        if symbolic:
            raise OnnxError(f"input {inp.name} has dynamic dimensions {symbolic}: give concrete shapes with "
                            f"input_shapes={{'{inp.name}': (...)}} (CLI: --input {inp.name}=1x3x224x224), or keep "
                            f"them dynamic with dynamic_dims={{'{inp.name}': {{axis: max}}}}")
    return graph_inputs


def dynamic_input_shapes(proto, input_shapes: dict | None, dynamic_dims: dict) -> tuple[dict, dict]:
    """Two concrete input-shape sets for a model with dynamic dimensions: every dynamic axis at its maximum,
    then at one less (the rest from `input_shapes` or the model's fixed dimensions)."""
    initializers = {t.name for t in proto.graph.initializer}
    inputs = {i.name: i for i in proto.graph.input if i.name not in initializers}
    unknown = sorted(set(dynamic_dims) - set(inputs))
    if unknown:
        raise OnnxError(f"dynamic_dims names {unknown}, which are not inputs of the model ({sorted(inputs)})")
    at_max, one_less = {}, {}
    for name, inp in inputs.items():
        dims = inp.type.tensor_type.shape.dim
        given = list((input_shapes or {}).get(name, []))
        axes = {int(a) % len(dims): int(m) for a, m in dynamic_dims.get(name, {}).items()}
        if not axes and not given:
            continue  # static, or reported by lower_onnx
        shape = []
        for axis, d in enumerate(dims):
            if axis in axes:
                if axes[axis] < 2:
                    raise OnnxError(f"dynamic dimension {name}[{axis}] needs a maximum of at least 2")
                shape.append(axes[axis])
            elif given:
                shape.append(int(given[axis]))
            elif d.HasField("dim_value"):
                shape.append(d.dim_value)
            else:
                raise OnnxError(f"input {name} dimension {axis} ({d.dim_param or '?'}) is symbolic: give it in "
                                "input_shapes or dynamic_dims")
        at_max[name] = tuple(shape)
        one_less[name] = tuple(s - 1 if axis in axes else s for axis, s in enumerate(shape))
    return at_max, one_less


@dataclass
class LoweredOnnx:
    graph: ir.Graph
    input_names: list[str]
    output_names: list[str]
    input_dtypes: list[str]
    output_dtypes: list[str]


def lower_onnx(proto, input_shapes: dict[str, tuple] | None = None) -> LoweredOnnx:
    """ONNX graph -> IR graph (constants folded, every other node lowered)."""
    onnx = _onnx()
    from onnx import numpy_helper

    proto = _copy(onnx, proto)
    graph_inputs = _concrete_inputs(onnx, proto, input_shapes)
    try:
        proto = onnx.shape_inference.infer_shapes(proto, strict_mode=True, data_prop=True)
    except Exception as exc:
        raise OnnxError(f"ONNX shape inference failed: {exc}") from None
    types = {}
    for vi in [*proto.graph.input, *proto.graph.value_info, *proto.graph.output]:
        tt = vi.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            types[vi.name] = ([d.dim_value for d in tt.shape.dim], ONNX_DTYPES.get(tt.elem_type))

    graph = ir.Graph("main")
    ctx = LoweringContext(graph)
    env: dict[str, Any] = {}
    consts: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    input_names, input_dtypes = [], []
    for inp in graph_inputs:
        shape, dtype = types[inp.name]
        if dtype is None:
            raise OnnxError(f"input {inp.name} has an element type without a TFLite equivalent")
        t = ir.Tensor(inp.name, shape, np.int32 if dtype == np.int64 else dtype)
        env[inp.name] = t
        graph.inputs.append(t)
        input_names.append(inp.name)
        input_dtypes.append(np.dtype(dtype).name)

    # Everything missing first, all at once, as on the PyTorch path.
    missing: dict[str, list] = {}
    for i, node in enumerate(proto.graph.node):
        if node.op_type not in onnx_ops.LOWERINGS and node.op_type not in onnx_ops.FOLD_ONLY:
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
    for i, node in enumerate(proto.graph.node):
        name = node.name or f"{node.op_type}_{i}"
        inputs = [value(n) for n in node.input]
        attrs = {a.name: _plain(onnx.helper.get_attribute_value(a)) for a in node.attribute}
        if node.op_type in ("Shape", "Size") and isinstance(inputs[0], ir.Tensor):
            # Shapes are static here: the shape of a run-time tensor is a constant.
            dims = np.array(inputs[0].shape, np.int64)
            if node.op_type == "Size":
                consts[node.output[0]] = np.array(int(np.prod(dims)), np.int64)
            else:
                consts[node.output[0]] = dims[slice(attrs.get("start", 0), attrs.get("end"))]
            continue
        if all(not isinstance(v, ir.Tensor) for v in inputs):
            for out, result in zip(node.output, _evaluate(onnx, node, inputs)):
                consts[out] = result
            continue
        if node.op_type in onnx_ops.FOLD_ONLY:
            raise ConversionError(f"onnx::{node.op_type} node {name} computes on run-time values; it is supported "
                                  "only where its inputs are constants")
        if any(out and (out not in types or types[out][1] is None) for out in node.output):
            _infer_by_running(onnx, node, inputs, types, name)
        ref = ir.SourceRef(name, f"onnx::{node.op_type}", None, None)
        contract = Node(name, f"onnx::{node.op_type}",
                        inputs=tuple(_operand(v) for v in inputs),
                        outputs=tuple(_value(*types[out]) if out else None for out in node.output),
                        source=ref, used=frozenset(k for k, out in enumerate(node.output) if out in read),
                        single=len(node.output) == 1)
        ctx.begin(contract, ref)
        keep = onnx_ops.PARAMETER_INPUTS.get(node.op_type, set())
        inputs = [_as_tensor(ctx, v) if isinstance(v, np.ndarray) and k not in keep else v
                  for k, v in enumerate(inputs)]
        try:
            result = onnx_ops.LOWERINGS[node.op_type](ctx, contract, inputs, attrs)
        except ConversionError as exc:
            raise ConversionError(f"onnx::{node.op_type} node {name}: {exc}") from exc
        except Exception as exc:
            raise ConversionError(f"lowering onnx::{node.op_type} node {name} failed: {type(exc).__name__}: "
                                  f"{exc}") from exc
        results = list(result) if isinstance(result, (list, tuple)) else [result]
        for out, r in zip(node.output, results):
            if out:
                env[out] = r

    output_names, output_dtypes = [], []
    for out in proto.graph.output:
        if out.name in env:
            t = env[out.name]
        elif out.name in consts:
            t = ir.Tensor(out.name, consts[out.name].shape, consts[out.name].dtype,
                          narrow_int64(consts[out.name], out.name) if consts[out.name].dtype == np.int64
                          else consts[out.name])
        else:
            raise OnnxError(f"output {out.name} is not computed by the graph")
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


def _copy(onnx, proto):
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    return copy


def _operand(value: Any) -> Any:
    """An input as the contract describes it: a Value for a tensor or a constant array."""
    if isinstance(value, (ir.Tensor, np.ndarray)):
        return _value(value.shape, value.dtype)
    return value


def _plain(value: Any) -> Any:
    """Attribute values as Python values: strings decoded."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8") for v in value]
    return value


def _as_tensor(ctx, value: np.ndarray) -> ir.Tensor:
    return ctx.const(value)


def _gather_elements(node, inputs, attrs):
    data, index = inputs
    axis = attrs.get("axis", 0) % data.ndim
    return [np.take_along_axis(data, np.where(index < 0, index + data.shape[axis], index), axis=axis)]


# Constant folds done with numpy where onnx's reference evaluator is unreliable.
NUMPY_FOLDS = {"GatherElements": _gather_elements}


def _infer_by_running(onnx, node, inputs: list, types: dict, name: str) -> None:
    """Output shapes and dtypes that shape inference left open: run the node once on zeros of its inputs'
    static shapes (constants as they are)."""
    if node.op_type in onnx_ops.SAME_SHAPE and isinstance(inputs[0], ir.Tensor):
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
            types[out] = (list(value.shape), ONNX_DTYPES.get(_onnx_type(onnx, value.dtype), value.dtype.type))


def _onnx_type(onnx, dtype) -> int:
    return onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _evaluate(onnx, node, inputs: list) -> list[np.ndarray]:
    """A node on constant inputs, by onnx's reference evaluator (numpy for the ops in NUMPY_FOLDS)."""
    from onnx.reference import ReferenceEvaluator

    if node.op_type in NUMPY_FOLDS:
        attrs = {a.name: _plain(onnx.helper.get_attribute_value(a)) for a in node.attribute}
        return NUMPY_FOLDS[node.op_type](node, inputs, attrs)
    try:
        evaluator = ReferenceEvaluator(node)
        feeds = {name: value for name, value in zip(node.input, inputs) if name}
        return [np.asarray(v) for v in evaluator.run(None, feeds)]
    except Exception as exc:
        raise ConversionError(f"evaluating constant onnx::{node.op_type} node {node.name!r} failed: {exc}") from exc
