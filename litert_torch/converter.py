"""`convert`: PyTorch module -> EdgeModel, the whole path in one place.

    export (torch.export + our decompositions) -> lower (ATen -> IR) -> passes -> metadata -> flatbuffer
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

from litert_torch import ir, metadata
from litert_torch.errors import InvalidArgumentError
from litert_torch.structure import portable_spec_json
from litert_torch.delegates.plan import PLAN_KEY, check_targets, plan_for, plans_json, with_before
from litert_torch.flatbuffer.writer import needs_external, serialize, write_model
from litert_torch.frontend.export import export_module
from litert_torch.lower import lower_program
from litert_torch.passes import channel_last_io as channel_last_io_pass
from litert_torch.passes import cleanup, delegate_rewrites, run_pipeline
from litert_torch.runtime.edge_model import DEFAULT_SIGNATURE, EdgeModel

log = logging.getLogger("litert_torch")


def convert(
    module: torch.nn.Module | torch.export.ExportedProgram,
    sample_args: Any = (),
    sample_kwargs: dict[str, Any] | None = None,
    *,
    num_threads: int | None = None,
    channel_last_io: bool = False,
    target: str | tuple[str, ...] = ("cpu", "gpu", "npu"),
    quantize: str | list | None = None,
    calibration_data: Any = None,
    quantized_io: bool = False,
    keep_float: tuple[str, ...] | list[str] = (),
    dynamic_shapes: Any = None,
    buckets: dict | None = None,
    progress: Callable[[str], None] | None = None,
) -> EdgeModel:
    """Convert `module` to a LiteRT model traced with `sample_args` / `sample_kwargs`.

    `module` may also be a torch.export.ExportedProgram (its own example inputs are then used).
    `target`: the delegate targets ("cpu", "gpu", "npu") whose plan is computed and stored in the model's
    metadata (`EdgeModel.delegate_plan`): which ops each delegate takes, why not the others, the partitions.
    The graph is then rewritten where an equivalent form suits a requested target better (a rank-3 transpose
    for a rank-5 one, a broadcasting MUL for BROADCAST_TO, an unrolled LSTM for the GPU and NPU: see
    `passes/delegate_rewrites.py`); the plan records the residency before and after.
    `quantize`: "fp16", "dynamic-int8", "int8" (with `calibration_data`, an iterable of input tuples as the
    model is called with; `quantized_io=True` for int8 inputs and outputs) or an ai-edge-quantizer recipe;
    `keep_float` patterns keep matching ops (PyTorch node, module path or source line) in float. See
    `litert_torch.quantization`; the report is `EdgeModel.quantization`.
    `dynamic_shapes` (torch.export's format, with torch.export.Dim) makes those dimensions dynamic in the model
    (-1 in the shape signatures; the runtime resizes on each call; lowered once with the dimensions as
    symbols, `litert_torch.symbolic`), or with
    `buckets={"batch": [1, 2, 4, 8]}` one static signature per size of that dimension, sharing weights
    (`litert_torch.buckets`); calls pick the signature matching their input shapes.
    `progress`, when given, is called with the name of each stage as it starts ("export", "lower",
    "optimize", "write", and "quantize" when asked).

    Raises `ExportError` when torch.export cannot trace the model, `UnsupportedOpsError` (listing every
    unsupported op with its source line) when the graph has ops without lowerings, and `ConversionError` for
    anything else that stops the conversion. Nothing is written to disk; call `EdgeModel.export(path)`.

    `channel_last_io=True` makes rank-4 (image) inputs and outputs NHWC in the model and in EdgeModel calls
    (the model then needs no TRANSPOSE at its edges); other inputs and outputs are unchanged.
    """
    targets = _targets(target)
    _check_quantize_options(quantize, calibration_data, quantized_io, keep_float)
    _check_samples(sample_args, sample_kwargs)
    report = progress or (lambda stage: None)
    start = time.perf_counter()
    if buckets is not None:
        parts, bucket_info = _bucket_parts(module, sample_args, sample_kwargs, dynamic_shapes, buckets,
                                           channel_last_io, targets, report)
    else:
        parts, bucket_info = [_convert_signature(DEFAULT_SIGNATURE, module, sample_args, sample_kwargs,
                                                 channel_last_io, targets, report, dynamic_shapes)], None
    report("write")
    edge = _write(_assemble(parts, bucket_info), num_threads)
    log.info("converted %s: %d signature(s), %d bytes in %.2fs", type(module).__name__, len(parts),
             len(edge._bytes), time.perf_counter() - start)
    return _maybe_quantize(edge, quantize, calibration_data, quantized_io, keep_float, report)


def _targets(target: str | tuple[str, ...]) -> tuple[str, ...]:
    targets = (target,) if isinstance(target, str) else tuple(target)
    check_targets(targets)
    return targets


def _check_samples(sample_args: Any, sample_kwargs: Any) -> None:
    """sample_args is a tuple of forward's positional inputs (one tensor is taken as a 1-tuple); sample_kwargs a
    dict of its keyword inputs."""
    if isinstance(sample_args, dict):
        raise InvalidArgumentError("sample_args is a dict; pass keyword inputs as sample_kwargs={...} and "
                                   "positional ones as a tuple in sample_args")
    if isinstance(sample_args, list):
        raise InvalidArgumentError("sample_args is a list; pass a tuple of forward's positional inputs, e.g. (x,) "
                                   "or (x, y) (an input that is itself a list goes inside the tuple: ([a, b],))")
    if sample_kwargs is not None and not isinstance(sample_kwargs, dict):
        raise InvalidArgumentError(f"sample_kwargs must be a dict of keyword inputs, got "
                                   f"{type(sample_kwargs).__name__}")


def _check_quantize_options(quantize, calibration_data, quantized_io, keep_float) -> None:
    if quantize is None and (calibration_data is not None or quantized_io or keep_float):
        raise InvalidArgumentError("calibration_data, quantized_io and keep_float apply only with quantize=...")


def _maybe_quantize(edge: EdgeModel, quantize, calibration_data, quantized_io, keep_float, report) -> EdgeModel:
    if quantize is None:
        return edge
    report("quantize")
    from litert_torch.quantization import quantize as quantize_model

    return quantize_model(edge, quantize, calibration_data=calibration_data, quantized_io=quantized_io,
                          keep_float=keep_float)


class SignatureSet:
    """Several entry points in one model, their identical weights stored once:

        edge = (litert_torch.signature("encode", encoder, (x,))
                .signature("decode", decoder, (z,))
                .convert())
        edge.run("decode", (z,))          # or edge.signature_runner("decode")(z)

    Each signature is traced and lowered on its own (its own subgraph, I/O metadata, source map and delegate
    plan); constants with identical bytes (a weight two modules share) get one buffer in the file."""

    def __init__(self):
        self._entries: list[tuple[str, Any, Any, dict[str, Any] | None, Any]] = []

    def signature(self, name: str, module: torch.nn.Module | torch.export.ExportedProgram, sample_args: Any = (),
                  sample_kwargs: dict[str, Any] | None = None, dynamic_shapes: Any = None) -> "SignatureSet":
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidArgumentError(f"a signature name is an identifier like 'encode'; got {name!r}")
        if any(name == entry[0] for entry in self._entries):
            raise InvalidArgumentError(f"signature {name!r} is given twice")
        self._entries.append((name, module, sample_args, sample_kwargs, dynamic_shapes))
        return self

    @property
    def names(self) -> list[str]:
        return [entry[0] for entry in self._entries]

    def convert(self, *, num_threads: int | None = None, channel_last_io: bool = False,
                target: str | tuple[str, ...] = ("cpu", "gpu", "npu"),
                progress: Callable[[str], None] | None = None) -> EdgeModel:
        """One EdgeModel holding every signature (options as for `convert`, applied to each)."""
        if not self._entries:
            raise InvalidArgumentError("no signatures: add them with .signature(name, module, sample_args)")
        targets = _targets(target)
        report = progress or (lambda stage: None)
        parts = []
        for name, module, args, kwargs, dynamic_shapes in self._entries:
            parts.append(_convert_signature(name, module, args, kwargs, channel_last_io, targets,
                                            lambda stage, name=name: report(f"{stage} {name}"), dynamic_shapes))
        report("write")
        return _write(_assemble(parts), num_threads)


def signature(name: str, module: torch.nn.Module | torch.export.ExportedProgram, sample_args: Any = (),
              sample_kwargs: dict[str, Any] | None = None, dynamic_shapes: Any = None) -> SignatureSet:
    """Start a multi-signature model: `signature("encode", enc, (x,)).signature("decode", dec, (z,)).convert()`
    (`dynamic_shapes` as for `convert`, per signature)."""
    return SignatureSet().signature(name, module, sample_args, sample_kwargs, dynamic_shapes)


@dataclass
class _Part:
    """One signature's subgraph with its plan and I/O metadata."""

    key: str
    graph: ir.Graph
    input_names: list[str]
    output_names: list[str]
    io: dict[str, Any]
    plan: Any


def _convert_signature(key: str, module, sample_args, sample_kwargs, channel_last_io: bool,
                       targets: tuple[str, ...], report: Callable[[str], None], dynamic_shapes: Any = None) -> _Part:
    if not isinstance(sample_args, tuple):
        sample_args = (sample_args,)
    if dynamic_shapes is None:
        report("export")
        program = export_module(module, sample_args, sample_kwargs)
        return _lower_part(key, program, channel_last_io, targets, report)
    traced = _trace_dynamic(module, sample_args, sample_kwargs, dynamic_shapes, report)
    part = _lower_part(key, traced.program, channel_last_io, targets, report, dim_names=traced.dim_names)
    part.io["dynamic_dims"] = sorted(traced.dims)
    return part


@dataclass
class _Traced:
    """A module traced once with its dynamic dimensions."""

    program: torch.export.ExportedProgram
    dims: dict[str, Any]  # Dim name -> Dim
    dim_names: dict[str, str]  # size symbol -> Dim name
    sample_sizes: dict[str, int]  # Dim name -> its size in the user's sample


def _trace_dynamic(module, sample_args: tuple, sample_kwargs, dynamic_shapes, report) -> _Traced:
    """torch.export with the dynamic dimensions: one trace, which the lowering reads symbolically (torch.export
    rejects a model that specialises a dimension)."""
    from litert_torch import buckets
    from litert_torch.lower.program import symbol_names

    if isinstance(module, torch.export.ExportedProgram):
        raise InvalidArgumentError("dynamic_shapes apply to an nn.Module; an ExportedProgram carries its own")
    report("export")
    sample_kwargs = sample_kwargs or {}
    uses, dims = buckets.dim_uses(module, sample_args, sample_kwargs, dynamic_shapes)
    sample = {}
    for use in uses:
        value = sample_args[use.where] if isinstance(use.where, int) else sample_kwargs[use.where]
        size = int(value.shape[use.axis])
        if sample.setdefault(use.dim, size) != size:
            raise InvalidArgumentError(f"the sample inputs give {use.dim} two sizes ({sample[use.dim]} and {size})")
    for name, size in sample.items():
        low, high = buckets.dim_bounds(dims[name])
        if not low <= size <= high:
            raise InvalidArgumentError(f"the sample inputs give {name} = {size}, outside its range [{low}, {high}]")
    # torch.export takes a sample size of 0 or 1 for a constant: trace at 2 where the range allows.
    traced_args, traced_kwargs = sample_args, sample_kwargs
    for name, size in sample.items():
        if size < 2 and buckets.dim_bounds(dims[name])[1] >= 2:
            traced_args, traced_kwargs = buckets.resized(traced_args, traced_kwargs, uses, name, 2)
    program = export_module(module, traced_args, traced_kwargs, dynamic_shapes=dynamic_shapes)
    leaves = _leaf_positions(traced_args, traced_kwargs)
    positions = {(leaves[use.where], use.axis): use.dim for use in uses if use.where in leaves}
    return _Traced(program, dims, symbol_names(program, positions), sample)


def _leaf_positions(args: tuple, kwargs: dict) -> dict[int | str, int]:
    """The position among the flattened inputs of each positional or keyword argument that is one tensor."""
    out, position = {}, 0
    for key, value in [*enumerate(args), *kwargs.items()]:
        if isinstance(value, torch.Tensor):
            out[key] = position
        position += len(pytree.tree_leaves(value))
    return out


def _lower_part(key: str, program, channel_last_io: bool, targets: tuple[str, ...],
                report: Callable[[str], None], dim_names: dict[str, str] | None = None,
                fixed: dict[str, int] | None = None) -> _Part:
    report("lower")
    lowered = lower_program(program, dim_names=dim_names, fixed=fixed)
    report("optimize")
    nhwc_inputs, nhwc_outputs = channel_last_io_pass.apply(lowered.graph) if channel_last_io else ([], [])
    run_pipeline(lowered.graph)
    plan = delegate_aware(lowered.graph, targets)
    io = _io(lowered, program.call_spec.in_spec, program.call_spec.out_spec, lowered.tensor_input_positions,
             nhwc_inputs, nhwc_outputs)
    return _Part(key, lowered.graph, lowered.input_names, lowered.output_names, io, plan)


def _io(lowered, in_spec, out_spec, positions: list[int], nhwc_inputs, nhwc_outputs) -> dict[str, Any]:
    """A signature's `litert_torch.io` entry (`litert_torch.metadata`)."""
    return {
        "inputs": lowered.input_names,
        "outputs": lowered.output_names,
        "in_spec": portable_spec_json(in_spec),
        "out_spec": portable_spec_json(out_spec),
        "tensor_input_positions": positions,
        "input_dtypes": lowered.input_dtypes,
        "output_dtypes": lowered.output_dtypes,
        "channel_last_inputs": [lowered.input_names[i] for i in nhwc_inputs],
        "channel_last_outputs": [lowered.output_names[i] for i in nhwc_outputs],
    }


def _bucket_parts(module, sample_args, sample_kwargs, dynamic_shapes, buckets, channel_last_io, targets, report):
    from litert_torch import buckets as bucketing

    if dynamic_shapes is None:
        raise InvalidArgumentError("buckets need dynamic_shapes naming the dimension, e.g. {'x': {0: Dim('batch', max=8)}}")
    if not isinstance(sample_args, tuple):
        sample_args = (sample_args,)
    traced = _trace_dynamic(module, sample_args, sample_kwargs, dynamic_shapes, report)
    name, sizes = bucketing.bucket_sizes(buckets, traced.dims)
    parts = []
    for size in sizes:
        # One static signature per size, the other dynamic dimensions at their sample sizes; all lowered from
        # the one traced program.
        key = f"{name}_{size}"
        part = _lower_part(key, traced.program, channel_last_io, targets,
                           lambda stage, key=key: report(f"{stage} {key}"), dim_names=traced.dim_names,
                           fixed={**traced.sample_sizes, name: size})
        part.io["bucket"] = {"dim": name, "size": size}
        parts.append(part)
    return parts, {"dim": name, "sizes": sizes, "signatures": [p.key for p in parts]}


def _write(model: ir.Model, num_threads: int | None) -> EdgeModel:
    """The EdgeModel of `model`: in memory, or past 2 GB of constants in a temporary file with the constants
    after the flatbuffer (streamed from the weights, not copied), which EdgeModel.export then copies."""
    if not needs_external(model):
        return EdgeModel(serialize(model), num_threads=num_threads)
    import os
    import tempfile

    fd, path = tempfile.mkstemp(prefix="litert_", suffix=".tflite")
    os.close(fd)
    try:
        write_model(model, path)
    except BaseException:
        os.unlink(path)
        raise
    return EdgeModel._from_temp_file(path, num_threads=num_threads)


def _assemble(parts: list[_Part], bucket_info: dict | None = None) -> ir.Model:
    """One model: a subgraph and a SignatureDef per part (identical constants stored once), the source map,
    the delegate plans and the I/O metadata."""
    for i, part in enumerate(parts):
        part.graph.name = part.key if len(parts) > 1 else part.graph.name
    model = ir.Model([p.graph for p in parts],
                     [ir.Signature(p.key, i, p.input_names, p.output_names) for i, p in enumerate(parts)])
    model.metadata[metadata.SOURCE_MAP_KEY] = metadata.source_map_json(model)
    model.metadata[PLAN_KEY] = plans_json(parts[0].plan, {p.key: p.plan for p in parts}
                                          if len(parts) > 1 else None, bucket_info)
    model.metadata[metadata.IO_KEY] = metadata.io_json({p.key: p.io for p in parts})
    return model


def delegate_aware(graph: ir.Graph, targets: tuple[str, ...]):
    """Run the delegate-aware rewrites serving `targets` and return the delegate plan, with the residency
    before the rewrites for each target they changed."""
    before = plan_for(graph, targets)
    done = delegate_rewrites.run(graph, targets)
    if not done:
        return before
    cleanup.run(graph)
    per_target = {t: {name: n for name, n in done.items()
                      if t in next(r for r in delegate_rewrites.REWRITES if r.name == name).targets}
                  for t in targets}
    return with_before(plan_for(graph, targets), before, per_target)


def convert_onnx(
    model: Any,
    *,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    dynamic_dims: dict[str, dict[int, int]] | None = None,
    num_threads: int | None = None,
    channel_last_io: bool = False,
    target: str | tuple[str, ...] = ("cpu", "gpu", "npu"),
    quantize: str | list | None = None,
    calibration_data: Any = None,
    quantized_io: bool = False,
    keep_float: tuple[str, ...] | list[str] = (),
    progress: Callable[[str], None] | None = None,
) -> EdgeModel:
    """Convert an ONNX model (a path or an onnx.ModelProto) to a LiteRT model: the same IR, passes, delegate
    plan, metadata and quantization as `convert`. Inputs with symbolic dimensions need `input_shapes`
    ({name: shape}), or `dynamic_dims` ({name: {axis: max}}, {axis: (min, max)} or {axis: torch.export.Dim}) to
    keep them dynamic in the model: lowered once with those dimensions as symbols, named after the model's
    dim_params (`litert_torch.frontend.onnx_shapes`). The EdgeModel takes the graph's inputs
    positionally (or by name) and returns its
    outputs (a tuple when there are several). Raises OnnxError for unreadable or unsupported files and
    UnsupportedOpsError listing every op without a lowering, with the node names."""
    from litert_torch.frontend import onnx_frontend

    targets = _targets(target)
    _check_quantize_options(quantize, calibration_data, quantized_io, keep_float)
    report = progress or (lambda stage: None)
    report("read")
    proto = onnx_frontend.load(model)
    report("lower")

    lowered = onnx_frontend.lower_onnx(proto, input_shapes, dynamic_dims)
    nhwc_inputs, nhwc_outputs = channel_last_io_pass.apply(lowered.graph) if channel_last_io else ([], [])
    run_pipeline(lowered.graph)
    plan = delegate_aware(lowered.graph, targets)
    report("optimize")
    graph = lowered.graph
    n_in, n_out = len(lowered.input_names), len(lowered.output_names)
    in_spec = pytree.tree_flatten((tuple(range(n_in)), {}))[1]
    out_spec = pytree.tree_flatten(tuple(range(n_out)) if n_out > 1 else 0)[1]
    io = {**_io(lowered, in_spec, out_spec, list(range(n_in)), nhwc_inputs, nhwc_outputs), "source": "onnx"}
    report("write")
    part = _Part(DEFAULT_SIGNATURE, graph, lowered.input_names, lowered.output_names, io, plan)
    edge = _write(_assemble([part]), num_threads)
    return _maybe_quantize(edge, quantize, calibration_data, quantized_io, keep_float, report)
