"""ONNX models read: a file or ModelProto checked (opsets upgraded to 13, external weights loaded, model-local
functions inlined), and its inputs' shapes settled (`input_shapes`): concrete, or symbols with ranges for the
dimensions kept dynamic. Nothing here lowers anything; `litert_torch.lower.onnx.driver` does."""

from __future__ import annotations

import os
import types
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from litert_torch.errors import OnnxError
from litert_torch.symbolic import Sym, SymSpace

if TYPE_CHECKING:
    import onnx

MIN_OPSET = 13


OLDEST_UPGRADED = 1  # opsets 1 to 12 are upgraded to MIN_OPSET on load


ONNX_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64,
               9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32}


def onnx_package() -> types.ModuleType:
    try:
        import onnx
    except ImportError as exc:
        raise OnnxError("reading ONNX files needs the onnx package: pip install 'litert-torch-direct[onnx]'") from exc
    return onnx


def load(model: Any) -> onnx.ModelProto:
    """The ModelProto of a path or a ModelProto, checked; clear errors for unreadable files."""
    onnx = onnx_package()
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise OnnxError(f"no such ONNX file: {path}")
        try:
            proto = onnx.load(path, load_external_data=False)
        except Exception as exc:  # noqa: BLE001 - protobuf raises what a damaged file leads to
            raise OnnxError(f"{path} is not a readable ONNX model (truncated or corrupt?): "
                            f"{type(exc).__name__}: {exc}") from None
        _load_external(onnx, proto, os.path.dirname(os.path.abspath(path)), path)
    elif isinstance(model, onnx.ModelProto):
        proto = model
    else:
        raise OnnxError(f"convert_onnx takes a path or an onnx.ModelProto, got {type(model).__name__}")
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    newest = onnx.defs.onnx_opset_version()
    if opset is not None and OLDEST_UPGRADED <= opset < MIN_OPSET:
        proto = _upgraded(onnx, proto, opset)
        opset = MIN_OPSET
    if opset is None or not MIN_OPSET <= opset <= newest:
        raise OnnxError(f"the model uses ONNX opset {opset}; supported: {OLDEST_UPGRADED} to {newest} (opsets "
                        f"below {MIN_OPSET} are upgraded with onnx.version_converter; re-export it)")
    others = sorted({o.domain for o in proto.opset_import if o.domain not in ("", "ai.onnx")}
                    & {n.domain for n in proto.graph.node})
    if others:
        raise OnnxError(f"the model uses ops from custom domains {others}, which have no lowering")
    try:
        onnx.checker.check_model(proto, full_check=False)
    except Exception as exc:  # noqa: BLE001 - the checker's own errors, by many types
        raise OnnxError(f"the ONNX model is invalid: {exc}") from None
    if proto.functions:  # exporters may wrap ops in model-local functions: lower their bodies
        from onnx import inliner

        proto = inliner.inline_local_functions(proto)
    return proto


def _upgraded(onnx, proto, opset: int):
    """An opset 1-12 model upgraded to MIN_OPSET by onnx's version converter (which checks what it rewrites and
    refuses what it has no adapter for)."""
    from onnx import version_converter

    try:
        return version_converter.convert_version(proto, MIN_OPSET)
    except Exception as exc:  # noqa: BLE001 - the converter raises many types; its message says what it refused
        raise OnnxError(f"the model uses ONNX opset {opset}, and onnx.version_converter could not upgrade it to "
                        f"{MIN_OPSET}: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}") from None


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
    except Exception as exc:  # noqa: BLE001 - onnx's reader raises what the data files' damage leads to
        raise OnnxError(f"could not read the external data of {path}: {exc}") from None


def input_shapes(proto, input_shapes: dict[str, tuple] | None, dynamic_dims: dict | None,
                  space: SymSpace) -> tuple[list, dict[str, tuple]]:
    """The graph inputs and their shapes: dimensions from `input_shapes`, the model, or `dynamic_dims` (kept
    dynamic: a Sym named after the model's dim_param or the Dim given, with its range). Each dimension is
    written back into `proto` (a dynamic one as a dim_param naming its symbol) for ONNX's shape inference."""
    initializers = {t.name for t in proto.graph.initializer}
    graph_inputs = [i for i in proto.graph.input if i.name not in initializers]
    names = [i.name for i in graph_inputs]
    given = dict(input_shapes or {})
    dynamic = dict(dynamic_dims or {})
    for what, table in (("input_shapes", given), ("dynamic_dims", dynamic)):
        unknown = sorted(set(table) - set(names))
        if unknown:
            raise OnnxError(f"{what} names {unknown}, which are not inputs of the model ({names})")
    symbols: dict[str, Sym] = {}
    shapes: dict[str, tuple] = {}
    for inp in graph_inputs:
        dims = inp.type.tensor_type.shape.dim
        shape = [int(d) for d in given[inp.name]] if inp.name in given else None
        if shape is not None and len(shape) != len(dims):
            raise OnnxError(f"input {inp.name} has rank {len(dims)}; input_shapes gives {shape}")
        axes = {}
        for axis, spec in dynamic.get(inp.name, {}).items():
            if not isinstance(axis, int) or not -len(dims) <= axis < len(dims):
                raise OnnxError(f"dynamic_dims gives input {inp.name} axis {axis!r}; it has {len(dims)} axes")
            axes[axis % len(dims)] = spec
        out: list[Any] = []
        for axis, d in enumerate(dims):
            if axis in axes:
                if d.HasField("dim_value"):
                    raise OnnxError(f"input {inp.name} dimension {axis} is fixed at {d.dim_value} in the model; "
                                    "dynamic_dims cannot make it dynamic")
                name, low, high = _dim_spec(axes[axis], d.dim_param or f"{inp.name}_{axis}", f"{inp.name}[{axis}]")
                if name not in symbols:
                    symbol = sympy.Symbol(name, integer=True, positive=True)
                    space.add(symbol, name, low, high)
                    space.hints[symbol] = high
                    symbols[name] = Sym(symbol, space)
                elif space.ranges[symbols[name].expr] != (low, high):
                    raise OnnxError(f"dynamic dimension {name} is given two ranges")
                out.append(symbols[name])
                d.Clear()
                d.dim_param = name
                continue
            value = shape[axis] if shape is not None else (d.dim_value if d.HasField("dim_value") else None)
            if value is None:
                symbolic = [x.dim_param or "?" for x in dims if not x.HasField("dim_value")]
                raise OnnxError(f"input {inp.name} has dynamic dimensions {symbolic}: give concrete shapes with "
                                f"input_shapes={{'{inp.name}': (...)}} (CLI: --input {inp.name}=1x3x224x224), or "
                                f"keep them dynamic with dynamic_dims={{'{inp.name}': {{axis: max}}}}")
            if d.HasField("dim_value") and value != d.dim_value:
                raise OnnxError(f"input {inp.name} has a fixed dimension {d.dim_value}; input_shapes gives {value}")
            out.append(value)
            d.Clear()
            d.dim_value = value
        shapes[inp.name] = tuple(out)
    return graph_inputs, shapes


def _dim_spec(spec: Any, default_name: str, where: str) -> tuple[str, int, int]:
    """(name, min, max) of one dynamic dimension given as a max, a (min, max) pair or a torch.export.Dim."""
    name = default_name
    if isinstance(spec, (tuple, list)) and len(spec) == 2:
        low, high = spec
    elif hasattr(spec, "max") and hasattr(spec, "min") and hasattr(spec, "__name__"):
        name, low, high = spec.__name__, spec.min, spec.max
    else:
        low, high = 1, spec
    try:
        low, high = int(low), int(high)
    except (TypeError, ValueError, OverflowError):
        raise OnnxError(f"dynamic_dims gives {where} {spec!r}; give a maximum size, a (min, max) pair or a "
                        "torch.export.Dim") from None
    if not 1 <= low <= high or high >= 2**31:
        raise OnnxError(f"dynamic_dims gives {where} the range [{low}, {high}]; it must satisfy 1 <= min <= max "
                        "< 2**31")
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name), low, high


def copy_model(onnx: types.ModuleType, proto: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    return copy
