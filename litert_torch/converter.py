"""`convert`: PyTorch module -> EdgeModel, the whole path in one place.

    export (torch.export + our decompositions) -> lower (ATen -> IR) -> passes -> metadata -> flatbuffer
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
import torch.utils._pytree as pytree

from litert_torch import ir
from litert_torch.errors import InvalidArgumentError
from litert_torch.structure import portable_spec_json
from litert_torch.assemble import Part as _Part, assemble as _assemble, finish_signature as _finish_signature
from litert_torch.delegates.plan import check_targets
from litert_torch.flatbuffer.writer import needs_external, serialize, write_model
from litert_torch.lower.aten.program import export_lowerable
from litert_torch.lower import lower_program
from litert_torch.memory import collections_for_large_graphs
from litert_torch.runtime.edge_model import DEFAULT_SIGNATURE, EdgeModel

log = logging.getLogger("litert_torch")


def convert(
    module: torch.nn.Module | torch.export.ExportedProgram | None = None,
    sample_args: Any = None,
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
    strict_export: bool | str = False,
    enable_x64: bool = False,
    quant_config: Any = None,
    output_file_path: str | None = None,
    **official: Any,
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
    `litert_torch.quantize_model`; the report is `EdgeModel.quantization`.
    `dynamic_shapes` (torch.export's format, with torch.export.Dim) makes those dimensions dynamic in the model
    (-1 in the shape signatures; the runtime resizes on each call; lowered once with the dimensions as
    symbols, `litert_torch.symbolic`), or with
    `buckets={"batch": [1, 2, 4, 8]}` one static signature per size of that dimension, sharing weights
    (`litert_torch.buckets`); calls pick the signature matching their input shapes.
    `progress`, when given, is called with the name of each stage as it starts ("export", "lower",
    "optimize", "write", and "quantize" when asked).

    The official litert-torch keywords: `strict_export` (torch.export's strict mode: False, True, or "auto" for
    non-strict and then strict if that fails); `enable_x64` (False: int64 inputs and outputs are int32 in the
    model, with a warning naming them; True: they stay int64 in the signature, cast at the model's edges);
    `quant_config` (a `litert_torch.quantize.quant_config.QuantConfig`: a PT2E-quantized module keeps its int8
    form, a dynamic PT2E config quantizes the weights to int8); `output_file_path` (also write the model there);
    `lightweight_conversion`, `runtime_constant_folding` (accepted: this converter always folds input-independent
    subgraphs at conversion and writes constants from the module's own tensors); `use_v2` (accepted: one path
    serves both, `litert_torch.converter_v2`). The official's
    MLIR and TensorFlow options (`export_dir`, `print_ir_before`, ...) are refused with an error saying so.

    Raises `ExportError` when torch.export cannot trace the model, `UnsupportedOpsError` (listing every
    unsupported op with its source line) when the graph has ops without lowerings, and `ConversionError` for
    anything else that stops the conversion. Nothing is written to disk unless `output_file_path` is given;
    call `EdgeModel.export(path)`.

    `channel_last_io=True` makes rank-4 (image) inputs and outputs NHWC in the model and in EdgeModel calls
    (the model then needs no TRANSPOSE at its edges); other inputs and outputs are unchanged. (The official's
    `litert_torch.to_channel_last_io(module, args=[...], outputs=[...])` wraps the module instead.)
    """
    if module is None:
        raise InvalidArgumentError("convert() needs the module to convert (a torch.nn.Module or "
                                   "torch.export.ExportedProgram)")
    opts = _Options.of(dict(official, num_threads=num_threads, channel_last_io=channel_last_io, target=target,
                            quantize=quantize, calibration_data=calibration_data, quantized_io=quantized_io,
                            keep_float=keep_float, buckets=buckets, progress=progress, strict_export=strict_export,
                            enable_x64=enable_x64, quant_config=quant_config, output_file_path=output_file_path))
    if sample_args is None and sample_kwargs is None and not isinstance(module, torch.export.ExportedProgram):
        raise InvalidArgumentError("convert() needs sample_args (a tuple of forward's positional inputs) or "
                                   "sample_kwargs (a dict of its keyword inputs) to trace the module with")
    sample_args = () if sample_args is None else sample_args
    _check_samples(sample_args, sample_kwargs)
    with _typed_errors(type(module).__name__), collections_for_large_graphs():
        if opts.buckets is not None:
            parts, bucket_info = _bucket_parts(module, sample_args, sample_kwargs, dynamic_shapes, opts)
        else:
            parts, bucket_info = [_convert_signature(DEFAULT_SIGNATURE, module, sample_args, sample_kwargs, opts,
                                                     opts.report, dynamic_shapes)], None
        return _finish(parts, bucket_info, opts, [], name=type(module).__name__)


@contextlib.contextmanager
def _typed_errors(what: str):
    """Every failure inside a conversion reaches the caller as a LiteRTTorchError: an exception of another type
    (a bug here, or a library misbehaving) becomes a ConversionError that names it, keeping it as the cause."""
    from litert_torch.errors import ConversionError, LiteRTTorchError

    try:
        yield
    except LiteRTTorchError:
        raise
    except Exception as exc:  # noqa: BLE001 - turned into the typed error, the original kept as __cause__
        raise ConversionError(f"converting {what} failed inside the converter: {type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:400]}") from exc


# The official litert-torch's convert() keywords that configure its MLIR / TensorFlow pipeline: accepted at
# their defaults, refused otherwise (this converter has no such pipeline).
_OFFICIAL_PIPELINE_OPTIONS = {
    "export_dir": None, "delete_in_memory_params": False, "fold_fp16_resource_casts": True,
    "allow_reuse_intermediates": False, "weights_loader": None, "enable_debug": False, "debug_dir": None,
    "enable_timing": False, "print_ir_before": None, "print_ir_after": None, "elide_elementsattrs_if_larger": None,
    "_litert_converter_flags": None,
}


@dataclass
class _Options:
    """convert()'s options, checked once, for every signature of a conversion."""

    num_threads: int | None = None
    channel_last_io: bool = False
    targets: tuple[str, ...] = ("cpu", "gpu", "npu")
    quantize: Any = None
    calibration_data: Any = None
    quantized_io: bool = False
    keep_float: Any = ()
    buckets: dict | None = None
    report: Callable[[str], None] = lambda stage: None
    strict_export: bool | str = False
    enable_x64: bool = False
    pt2e_dynamic: bool = False
    output_file_path: str | None = None

    @classmethod
    def of(cls, options: dict[str, Any]) -> "_Options":
        options = dict(options)
        for name, default in _OFFICIAL_PIPELINE_OPTIONS.items():
            value = options.pop(name, default)
            if value is not default and value != default:
                raise InvalidArgumentError(
                    f"{name}= configures the official litert-torch's MLIR/TensorFlow pipeline; this converter "
                    "writes the .tflite directly and has no such stage (leave it at its default)")
        use_v2 = options.pop("use_v2", False)
        if not isinstance(use_v2, bool):
            raise InvalidArgumentError(f"use_v2 must be True or False, got {use_v2!r}")
        lightweight = options.pop("lightweight_conversion", False)
        folding = options.pop("runtime_constant_folding", None)
        for name, value in (("lightweight_conversion", lightweight), ("runtime_constant_folding", folding)):
            if value is not None and not isinstance(value, bool):
                raise InvalidArgumentError(f"{name} must be True or False, got {value!r}")
        strict = options.pop("strict_export", False)
        if strict not in (True, False, "auto"):
            raise InvalidArgumentError(f"strict_export must be True, False or 'auto', got {strict!r}")
        quant_config = options.pop("quant_config", None)
        pt2e_dynamic = False
        if quant_config is not None:
            from litert_torch.quantize.quant_config import QuantConfig

            if not isinstance(quant_config, QuantConfig):
                raise InvalidArgumentError("quant_config must be a litert_torch.quantize.quant_config.QuantConfig, "
                                           f"got {type(quant_config).__name__}")
            pt2e_dynamic = quant_config.is_dynamic
        known = {f for f in cls.__dataclass_fields__} | {"target", "progress"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InvalidArgumentError(f"convert() got unexpected keyword argument(s) {', '.join(unknown)}")
        _check_quantize_options(options.get("quantize"), options.get("calibration_data"),
                                options.get("quantized_io", False), options.get("keep_float", ()))
        if pt2e_dynamic and options.get("quantize") is not None:
            raise InvalidArgumentError("give quantize= or a dynamic quant_config, not both")
        progress = options.pop("progress", None)
        targets = _targets(options.pop("target", ("cpu", "gpu", "npu")))
        path = options.get("output_file_path")
        if path is not None:
            from litert_torch.files import check_writable

            check_writable(path)
        return cls(**options, targets=targets, report=_reporter(progress), strict_export=strict,
                   pt2e_dynamic=pt2e_dynamic)


def _reporter(progress: Callable[[str], None] | None) -> Callable[[str], None]:
    """The stage callback: `progress`, and a log line per stage when litert_torch.config.show_progress is on."""
    from litert_torch.settings import config

    if not config.show_progress:
        return progress or (lambda stage: None)

    def report(stage: str) -> None:
        log.info("conversion stage: %s", stage)
        if progress is not None:
            progress(stage)

    return report


def _finish(parts: list, bucket_info: dict | None, opts: _Options, compilation: list, name: str = "model"):
    """Write the parts as one EdgeModel, quantize and AOT-compile as asked, and write output_file_path."""
    start = time.perf_counter()
    opts.report("write")
    edge = _write(_assemble(parts, bucket_info), opts.num_threads)
    log.info("converted %s: %d signature(s), %d bytes in %.2fs", name, len(parts), len(edge._bytes),
             time.perf_counter() - start)
    quantize = "dynamic-int8" if opts.pt2e_dynamic else opts.quantize
    edge = _maybe_quantize(edge, quantize, opts.calibration_data, opts.quantized_io, opts.keep_float, opts.report)
    if opts.output_file_path is not None:
        os.makedirs(os.path.dirname(os.path.abspath(opts.output_file_path)), exist_ok=True)
        edge.export(opts.output_file_path)
    if compilation:
        from litert_torch.delegates.aot import compile_configs

        return compile_configs(edge, compilation)
    return edge


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
    from litert_torch.quantization.quantize import quantize_model

    return quantize_model(edge, quantize, calibration_data=calibration_data, quantized_io=quantized_io,
                          keep_float=keep_float)


class Converter:
    """Several entry points in one model, their identical weights stored once (the official litert-torch
    `Converter`; `litert_torch.signature(...)` starts one):

        edge = (litert_torch.signature("encode", encoder, (x,))
                .signature("decode", decoder, (z,))
                .convert())
        edge(z, signature_name="decode")  # or edge.run("decode", (z,)), edge.signature_runner("decode")(z)

    `convert(module, sample_args)` adds that module as the default signature ("serving_default"). Each signature
    is traced and lowered on its own (its own subgraph, I/O metadata, source map and delegate plan); constants
    with identical bytes (a weight two modules share) get one buffer in the file."""

    def __init__(self):
        self._entries: list[tuple[str, Any, Any, dict[str, Any] | None, Any]] = []
        self._compilation: list[Any] = []

    def signature(self, name: str, module: torch.nn.Module | torch.export.ExportedProgram, sample_args: Any = None,
                  sample_kwargs: dict[str, Any] | None = None, dynamic_shapes: Any = None) -> "Converter":
        """Add signature `name`: `module` traced with `sample_args` / `sample_kwargs` (`dynamic_shapes` as for
        `convert`)."""
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidArgumentError(f"a signature name is an identifier like 'encode'; got {name!r}")
        if any(name == entry[0] for entry in self._entries):
            raise InvalidArgumentError(f"signature {name!r} is given twice")
        if sample_args is None and sample_kwargs is None:
            raise InvalidArgumentError(f"signature {name!r} needs sample_args or sample_kwargs")
        _check_samples(sample_args, sample_kwargs)
        self._entries.append((name, module, () if sample_args is None else sample_args, sample_kwargs,
                              dynamic_shapes))
        return self

    add_signature = signature

    @property
    def names(self) -> list[str]:
        return [entry[0] for entry in self._entries]

    def experimental_add_compilation_backend(self, target: Any = None, **config: Any) -> "Converter":
        """Compile the converted model ahead of time for `target` (an ai_edge_litert.aot Target, or None for
        every target ai_edge_litert has registered; `config` goes to its CompilationConfig): `convert` then
        returns ai_edge_litert's CompilationResult. See also `litert_torch.aot_compile`."""
        from litert_torch.delegates.aot import compilation_config

        self._compilation.append(compilation_config(target, config))
        return self

    def convert(self, module: torch.nn.Module | torch.export.ExportedProgram | None = None, sample_args: Any = None,
                sample_kwargs: dict[str, Any] | None = None, **options: Any) -> EdgeModel:
        """One EdgeModel holding every signature; with `module`, that module (traced with `sample_args` /
        `sample_kwargs`) is added as the default signature. `options` as for `litert_torch.convert`, applied to
        every signature."""
        if module is not None:
            if sample_args is None and sample_kwargs is None:
                raise InvalidArgumentError("convert(module, ...) needs sample_args or sample_kwargs")
            self.signature(DEFAULT_SIGNATURE, module, sample_args, sample_kwargs, options.pop("dynamic_shapes", None))
        opts = self._options(options)
        with _typed_errors(", ".join(self.names)):
            return _finish(self._parts(opts), None, opts, self._compilation)

    def to_ir(self, **options: Any) -> ir.Model:
        """The model `convert` would write, as IR, its constants still the modules' own tensors: for a caller
        that quantizes and writes it itself, streaming the constants to the file rather than holding the
        serialized model (the generative exporters' large sections). `options` as for `convert`, less those
        that act on the written model (quantize and its settings, output_file_path, compilation)."""
        opts = self._options(options)
        if opts.quantize is not None or opts.pt2e_dynamic or opts.output_file_path is not None or self._compilation:
            raise InvalidArgumentError("to_ir() gives the float model before it is written: quantize it and write "
                                       "it with litert_torch.flatbuffer.writer, or call convert()")
        with _typed_errors(", ".join(self.names)):
            return _assemble(self._parts(opts), None)

    def _options(self, options: dict[str, Any]) -> _Options:
        if not self._entries:
            raise InvalidArgumentError("no signatures: add them with .signature(name, module, sample_args)")
        opts = _Options.of(options)
        if opts.buckets is not None:
            raise InvalidArgumentError("buckets apply to litert_torch.convert of one module")
        return opts

    def _parts(self, opts: _Options) -> list[_Part]:
        parts = []
        for name, module, args, kwargs, dynamic_shapes in self._entries:
            report = ((lambda stage, name=name: opts.report(f"{stage} {name}")) if len(self._entries) > 1
                      else opts.report)
            parts.append(_convert_signature(name, module, args, kwargs, opts, report, dynamic_shapes))
        return parts


SignatureSet = Converter  # the name this toolkit used before it took the official one


def signature(name: str, module: torch.nn.Module | torch.export.ExportedProgram, sample_args: Any = None,
              sample_kwargs: dict[str, Any] | None = None, dynamic_shapes: Any = None) -> Converter:
    """Start a multi-signature model: `signature("encode", enc, (x,)).signature("decode", dec, (z,)).convert()`
    (`dynamic_shapes` as for `convert`, per signature)."""
    return Converter().signature(name, module, sample_args, sample_kwargs, dynamic_shapes)


def experimental_add_compilation_backend(target: Any = None, **config: Any) -> Converter:
    """A Converter that compiles ahead of time for `target` (see `Converter.experimental_add_compilation_backend`):
    `litert_torch.experimental_add_compilation_backend(target).convert(module, sample_args)`."""
    return Converter().experimental_add_compilation_backend(target, **config)


def _convert_signature(key: str, module, sample_args, sample_kwargs, opts: _Options,
                       report: Callable[[str], None], dynamic_shapes: Any = None) -> _Part:
    if not isinstance(sample_args, tuple):
        sample_args = (sample_args,)
    if dynamic_shapes is None:
        report("export")
        program = export_lowerable(module, sample_args, sample_kwargs, strict=opts.strict_export)
        return _lower_part(key, program, opts, report)
    traced = _trace_dynamic(module, sample_args, sample_kwargs, dynamic_shapes, report, opts.strict_export)
    part = _lower_part(key, traced.program, opts, report, dim_names=traced.dim_names)
    part.io["dynamic_dims"] = sorted(traced.dims)
    part.io["dynamic_axes"] = _dynamic_axes(part, traced)
    return part


def _dynamic_axes(part: "_Part", traced: "_Traced") -> dict[str, dict[str, list]]:
    """{signature input: {axis: [Dim name, min, max]}}: what EdgeModel checks calls against and inspect shows."""
    from litert_torch import buckets

    out: dict[str, dict[str, list]] = {}
    positions = part.io["tensor_input_positions"]
    for (position, axis), name in traced.axes.items():
        if position in positions:
            low, high = buckets.dim_bounds(traced.dims[name])
            out.setdefault(part.input_names[positions.index(position)], {})[str(axis)] = [name, low, high]
    return out


@dataclass
class _Traced:
    """A module traced once with its dynamic dimensions."""

    program: torch.export.ExportedProgram
    dims: dict[str, Any]  # Dim name -> Dim
    dim_names: dict[str, str]  # size symbol -> Dim name
    sample_sizes: dict[str, int]  # Dim name -> its size in the user's sample
    axes: dict[tuple[int, int], str]  # (flat input position, axis) -> Dim name


def _trace_dynamic(module, sample_args: tuple, sample_kwargs, dynamic_shapes, report,
                   strict: bool | str = False) -> _Traced:
    """torch.export with the dynamic dimensions: one trace, which the lowering reads symbolically (torch.export
    rejects a model that specialises a dimension)."""
    from litert_torch import buckets
    from litert_torch.lower.aten.program import symbol_names

    if isinstance(module, torch.export.ExportedProgram):
        raise InvalidArgumentError("dynamic_shapes apply to an nn.Module; an ExportedProgram carries its own")
    report("export")
    sample_kwargs = sample_kwargs or {}
    uses, dims = buckets.dim_uses(module, sample_args, sample_kwargs, dynamic_shapes)
    sample: dict[str, int] = {}
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
    program = export_lowerable(module, traced_args, traced_kwargs, dynamic_shapes=dynamic_shapes, strict=strict)
    leaves = _leaf_positions(traced_args, traced_kwargs)
    positions = {(leaves[use.where], use.axis): use.dim for use in uses if use.where in leaves}
    return _Traced(program, dims, symbol_names(program, positions), sample, positions)


def _leaf_positions(args: tuple, kwargs: dict) -> dict[int | str, int]:
    """The position among the flattened inputs of each positional or keyword argument that is one tensor."""
    out, position = {}, 0
    for key, value in [*enumerate(args), *kwargs.items()]:
        if isinstance(value, torch.Tensor):
            out[key] = position
        position += len(pytree.tree_leaves(value))
    return out


def _lower_part(key: str, program, opts: _Options, report: Callable[[str], None],
                dim_names: dict[str, str] | None = None, fixed: dict[str, int] | None = None) -> _Part:
    report("lower")
    lowered = lower_program(program, dim_names=dim_names, fixed=fixed)
    report("optimize")

    def edges(graph: ir.Graph) -> None:
        wide_io(key, lowered, opts.enable_x64)
        bfloat16_io(lowered)

    io = _io(lowered, program.call_spec.in_spec, program.call_spec.out_spec, lowered.tensor_input_positions)
    return _finish_signature(key, lowered.graph, lowered.input_names, lowered.output_names, io, opts.targets,
                             channel_last_io=opts.channel_last_io, after_passes=edges)


def wide_io(key: str, lowered, enable_x64: bool) -> None:
    """int64 inputs and outputs, which the model computes in int32: with enable_x64 they are int64 in the
    signature (a CAST at each edge), else int32 there, with the official litert-torch's warning naming them."""
    wide_in = [i for i, d in enumerate(lowered.input_dtypes) if d == "int64"]
    wide_out = [i for i, d in enumerate(lowered.output_dtypes) if d == "int64"]
    if not wide_in and not wide_out:
        return
    if not enable_x64:
        changed = [f"input {lowered.input_names[i]!r} (torch.int64)" for i in wide_in] + \
                  [f"output {lowered.output_names[i]!r} (torch.int64)" for i in wide_out]
        log.warning("signature %r: enable_x64=False downcasts 64-bit tensors to 32 bits, so %s %s int32 in the "
                    "model (values must fit in int32; convert(..., enable_x64=True) keeps them int64)",
                    key, ", ".join(changed), "is" if len(changed) == 1 else "are")
        return
    from litert_torch.passes.wide_io import cast_io

    cast_io(lowered.graph, wide_in, wide_out, np.int64)


def bfloat16_io(lowered) -> None:
    """bfloat16 inputs and outputs stay bfloat16 in the signature, with a CAST to (from) the float32 the model
    computes in right after the input (before the output)."""
    ins = [i for i, d in enumerate(lowered.input_dtypes) if d == "bfloat16"]
    outs = [i for i, d in enumerate(lowered.output_dtypes) if d == "bfloat16"]
    if ins or outs:
        import ml_dtypes

        from litert_torch.passes.wide_io import cast_io

        cast_io(lowered.graph, ins, outs, ml_dtypes.bfloat16)


def _io(lowered, in_spec, out_spec, positions: list[int]) -> dict[str, Any]:
    """A signature's `litert_torch.io` entry (`litert_torch.metadata`), but for its channel-last inputs and
    outputs, which `finish_signature` adds."""
    return {
        "inputs": lowered.input_names,
        "parameters": lowered.parameters,
        "outputs": lowered.output_names,
        "in_spec": portable_spec_json(in_spec),
        "out_spec": portable_spec_json(out_spec),
        "tensor_input_positions": positions,
        "input_dtypes": lowered.input_dtypes,
        "output_dtypes": lowered.output_dtypes,
    }


def _bucket_parts(module, sample_args, sample_kwargs, dynamic_shapes, opts: _Options):
    from litert_torch import buckets as bucketing

    if dynamic_shapes is None:
        raise InvalidArgumentError("buckets need dynamic_shapes naming the dimension, e.g. {'x': {0: Dim('batch', max=8)}}")
    if not isinstance(sample_args, tuple):
        sample_args = (sample_args,)
    traced = _trace_dynamic(module, sample_args, sample_kwargs, dynamic_shapes, opts.report, opts.strict_export)
    name, sizes = bucketing.bucket_sizes(opts.buckets, traced.dims)
    parts = []
    for size in sizes:
        # One static signature per size, the other dynamic dimensions at their sample sizes; all lowered from
        # the one traced program.
        key = f"{name}_{size}"
        def report(stage: str, key: str = key) -> None:
            opts.report(f"{stage} {key}")

        part = _lower_part(key, traced.program, opts, report, dim_names=traced.dim_names,
                           fixed={**traced.sample_sizes, name: size})
        part.io["bucket"] = {"dim": name, "size": size}
        parts.append(part)
    return parts, {"dim": name, "sizes": sizes, "signatures": [p.key for p in parts]}


def _write(model: ir.Model, num_threads: int | None) -> EdgeModel:
    """The EdgeModel of `model`: in memory, or past 2 GB of constants in a temporary file with the constants
    after the flatbuffer (streamed from the weights, not copied), which EdgeModel.export then copies."""
    if not needs_external(model):
        return EdgeModel(serialize(model), num_threads=num_threads, verify=False)
    import tempfile

    fd, path = tempfile.mkstemp(prefix="litert_", suffix=".tflite")
    os.close(fd)
    try:
        write_model(model, path)
    except BaseException:
        os.unlink(path)
        raise
    return EdgeModel._from_temp_file(path, num_threads=num_threads)


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
    output_file_path: str | None = None,
) -> EdgeModel:
    """Convert an ONNX model (a path or an onnx.ModelProto) to a LiteRT model: the same IR, passes, delegate
    plan, metadata and quantization as `convert`. Inputs with symbolic dimensions need `input_shapes`
    ({name: shape}), or `dynamic_dims` ({name: {axis: max}}, {axis: (min, max)} or {axis: torch.export.Dim}) to
    keep them dynamic in the model: lowered once with those dimensions as symbols, named after the model's
    dim_params (`litert_torch.lower.onnx.shapes`). The EdgeModel takes the graph's inputs positionally (or by
    name) and returns its outputs (a tuple when there are several). `progress` is called with each stage as it
    starts ("read", "lower", "optimize", "write", and "quantize" when asked); `output_file_path` also writes the
    model there. Raises OnnxError for unreadable or unsupported files, UnsupportedOpsError listing every op
    without a lowering, with the node names, and ConversionError for anything else that stops the conversion."""
    from litert_torch.frontend import onnx_model
    from litert_torch.lower.onnx.driver import lower_onnx

    opts = _Options.of(dict(num_threads=num_threads, channel_last_io=channel_last_io, target=target,
                            quantize=quantize, calibration_data=calibration_data, quantized_io=quantized_io,
                            keep_float=keep_float, progress=progress, output_file_path=output_file_path))
    name = os.path.basename(os.fspath(model)) if isinstance(model, (str, os.PathLike)) else "the ONNX model"
    with _typed_errors(name), collections_for_large_graphs():
        opts.report("read")
        proto = onnx_model.load(model)
        opts.report("lower")
        lowered = lower_onnx(proto, input_shapes, dynamic_dims)
        opts.report("optimize")
        n_in, n_out = len(lowered.input_names), len(lowered.output_names)
        in_spec = pytree.tree_flatten((tuple(range(n_in)), {}))[1]
        out_spec = pytree.tree_flatten(tuple(range(n_out)) if n_out > 1 else 0)[1]
        io = {**_io(lowered, in_spec, out_spec, list(range(n_in))), "source": "onnx"}
        part = _finish_signature(DEFAULT_SIGNATURE, lowered.graph, lowered.input_names, lowered.output_names, io,
                                 opts.targets, channel_last_io=opts.channel_last_io)
        return _finish([part], None, opts, [], name=name)
