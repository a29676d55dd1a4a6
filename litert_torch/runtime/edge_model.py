"""EdgeModel: a converted model, run in the LiteRT runtime like the PyTorch module it came from.

    edge = litert_torch.convert(model, (x,))
    y = edge(x)                  # numpy arrays, as the official litert-torch Model returns them
    edge.output_style = "pytorch"
    y = edge(x)                  # the module's own output structure; torch in -> torch out
    edge.export("model.tflite")  # atomic: a temp file, then a rename

A call binds its inputs either like the module's forward (the structure of the sample inputs: tuples, dicts,
dataclasses) or by the signature's flat input names (`args_0`, `args_1`, ... for positional inputs, the keyword
name for keyword inputs, `z_data_1` for a field of a nested input; forward's parameter names are accepted too).
`signature_name=` picks a signature (the default one is "serving_default"). Inputs are checked against the
signature before they reach the runtime: a wrong shape or dtype raises `ModelInputError` (a ValueError) naming
the input, what it expects and what it got.
"""

from __future__ import annotations

import mmap
import os
import re
import shutil
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch
import torch.utils._pytree as pytree

from litert_torch.errors import (
    InvalidArgumentError, ModelFileError, ModelInputError, ModelLoadError, UnknownSignatureError, one_line,
)
from litert_torch.files import atomic_file, write_atomic
from litert_torch.flatbuffer.reader import read_metadata
from litert_torch import logs
from litert_torch.metadata import DEFAULT_SIGNATURE, IO_KEY, SOURCE_MAP_KEY, decode_source_map, read_json

if TYPE_CHECKING:
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.interpreter import Interpreter

    from litert_torch import ir
    from litert_torch.delegates.plan import DelegatePlan
    from litert_torch.explorer.server import ModelView
    from litert_torch.quantization.report import QuantizationReport

# EdgeModel.output_style: "numpy" (the official litert-torch convention, the default) or "pytorch".
OUTPUT_STYLES = ("numpy", "pytorch")


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]  # -1 for a dynamic dimension
    dtype: np.dtype
    # (scale, zero_point) of a quantized tensor (real = scale * (q - zero_point)), None for float ones
    quantization: tuple[float, int] | None = None


@dataclass(frozen=True)
class SignatureInfo:
    key: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]


class EdgeModel:
    """A .tflite model with the calling convention of the PyTorch module it was converted from."""

    KERNELS = ("xnnpack", "builtin", "reference")

    def __init__(self, flatbuffer: bytes | mmap.mmap, *, num_threads: int | None = None, kernels: str = "xnnpack",
                 keep_intermediates: bool = False, accelerator: str | None = None, output_style: str | None = None,
                 verify: bool = True, isolate: bool | None = None):
        """`kernels`: "xnnpack" (the default CPU path: XNNPACK where it applies, builtin kernels elsewhere),
        "builtin" (the optimised builtin kernels, no delegate) or "reference" (the plain reference kernels).
        `keep_intermediates` keeps every tensor readable after a call (for per-layer comparisons; only tensors
        outside a delegate exist, so combine it with "builtin" or "reference").
        `accelerator` ("cpu", "gpu", "npu") runs through LiteRT's CompiledModel on that accelerator only; one
        this machine lacks raises AcceleratorUnavailable when the model is first run.
        `output_style`: what a call returns (see `output_style`); None: "numpy", except "pytorch" for models
        converted from ONNX (the official API has no ONNX path, and their calls keep returning a tuple).

        The file is checked before the runtime sees it (`litert_torch.runtime.verify`): a corrupt or
        inconsistent file raises ModelFileError. `isolate`: whether LiteRT first loads and runs the file once in
        a child process, where a crash becomes a ModelLoadError naming the signal; None (the default) does so
        for files with ops the checks do not cover. `verify=False` skips both, for files this process made."""
        if kernels not in self.KERNELS:
            raise InvalidArgumentError(f"kernels must be one of {self.KERNELS}, got {kernels!r}")
        # use_compiled_runtime's settings: (LiteRT HardwareAccelerator flags or None, require_fully_accelerated)
        self._hardware: tuple[Any, bool] | None = None
        self._kernels = kernels
        self._keep_intermediates = keep_intermediates
        self._quant_params: dict | None = None
        self._accelerator = accelerator
        self._compiled: CompiledModel | None = None
        self._path: str | None = None
        # A memory map for file-backed models (past 2 GB, constants after the flatbuffer), else the bytes.
        self._bytes = flatbuffer if isinstance(flatbuffer, mmap.mmap) else bytes(flatbuffer)
        model = checked_model(self._bytes, isolate) if verify else None
        self._metadata = model.metadata if model is not None else read_metadata(self._bytes)
        try:
            self._io = (read_json(self._metadata, IO_KEY) or {}).get("signatures", {})
        except (ValueError, TypeError, AttributeError) as exc:
            raise ModelFileError(f"corrupt litert_torch.io metadata: {exc}") from None
        if model is not None:
            _check_io(self._io, model)
        if output_style is None:
            onnx = any(io.get("source") == "onnx" for io in self._io.values())
            output_style = "pytorch" if onnx else "numpy"
        self.output_style = output_style
        self._num_threads = num_threads
        self._interpreter: Interpreter | None = None
        self._runners: dict[str, Any] = {}

    @classmethod
    def load(cls, path: str | os.PathLike, *, num_threads: int | None = None, kernels: str = "xnnpack",
             keep_intermediates: bool = False, isolate: bool | None = None,
             accelerator: str | None = None) -> "EdgeModel":
        """The model in the file at `path`, checked as the constructor checks it (`isolate` and `accelerator`
        likewise). Files past
        FILE_BACKED_BYTES (models past 2 GB) stay on disk: they are memory-mapped and the runtime reads them from
        the file."""
        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                data = f.read() if size <= FILE_BACKED_BYTES else mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise ModelFileError(f"cannot read the model file {path}: {exc.strerror or exc}") from None
        try:
            model = cls(data, num_threads=num_threads, kernels=kernels, keep_intermediates=keep_intermediates,
                        isolate=isolate, accelerator=accelerator)
        except ModelFileError as exc:
            raise type(exc)(f"{path}: {exc}") from None  # ModelLoadError stays one
        if size <= FILE_BACKED_BYTES:
            return model
        model._path = path
        return model

    @classmethod
    def _from_temp_file(cls, path: str, *, num_threads: int | None = None) -> "EdgeModel":
        """A file-backed model over a temporary file it owns (removed when the model is garbage-collected)."""
        with open(path, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        model = cls(mapped, num_threads=num_threads, verify=False)
        model._path = path
        weakref.finalize(model, _remove_quietly, path)
        return model

    def with_kernels(self, kernels: str, *, keep_intermediates: bool = False) -> "EdgeModel":
        """The same model on other CPU kernels (see the constructor)."""
        if self._path is not None:
            return EdgeModel.load(self._path, num_threads=self._num_threads, kernels=kernels,
                                  keep_intermediates=keep_intermediates)
        return EdgeModel(self._bytes, num_threads=self._num_threads, kernels=kernels,
                         keep_intermediates=keep_intermediates, verify=False)

    def intermediate(self, tensor_index: int, dequantize: bool = True) -> np.ndarray:
        """A tensor's value after the last call (models built with keep_intermediates=True); a quantized tensor
        comes back as the float values it stands for unless `dequantize` is False."""
        interpreter = self._get_interpreter()
        value = np.array(interpreter.get_tensor(tensor_index))
        if not dequantize or value.dtype.kind not in "iu":
            return value
        if self._quant_params is None:
            self._quant_params = {d["index"]: d.get("quantization_parameters") for d in
                                  interpreter.get_tensor_details()}
        params = self._quant_params.get(tensor_index)
        if not params or not len(params.get("scales", [])):
            return value
        scales = np.asarray(params["scales"], np.float64)
        zeros = np.asarray(params["zero_points"], np.float64)
        if scales.size > 1:  # per channel, along the quantized dimension
            shape = [1] * value.ndim
            shape[params["quantized_dimension"]] = scales.size
            scales, zeros = scales.reshape(shape), zeros.reshape(shape)
        return ((value.astype(np.float64) - zeros) * scales).astype(np.float32)

    # ---- the file ---------------------------------------------------------------------------------------
    @property
    def flatbuffer(self) -> bytes:
        """The .tflite bytes (for a file-backed model, read from its file: several GB)."""
        return self._bytes if isinstance(self._bytes, bytes) else self._bytes[:]

    @property
    def file_backed(self) -> bool:
        """Whether the model lives in a file (models past 2 GB) rather than in memory."""
        return self._path is not None

    def export(self, path: str | os.PathLike) -> None:
        """Write the .tflite file atomically: readers see the old file or the whole new one, never a part."""
        if self._path is None:
            write_atomic(path, self._bytes)
            return
        if os.path.abspath(path) == os.path.abspath(self._path):
            return
        with open(self._path, "rb") as src, atomic_file(path) as dst:
            shutil.copyfileobj(src, dst, 16 << 20)

    def model_content(self) -> bytes:
        """The .tflite bytes (the official litert-torch name for `flatbuffer`)."""
        return self.flatbuffer

    @property
    def output_style(self) -> str:
        """What a call returns. "numpy" (the default, as the official litert-torch Model): numpy arrays; the
        array itself for a model with one output, a tuple for outputs named output_0, output_1, ..., else a
        dict by output name (a dict or dataclass the module returns, flattened: "y_data_1"). "pytorch": the
        module's own output structure (tuples, lists, dicts, dataclasses), torch tensors when the call passed
        torch tensors and numpy arrays when it passed numpy arrays. `run` always returns the "pytorch" form."""
        return self._output_style

    @output_style.setter
    def output_style(self, value: str) -> None:
        if value not in OUTPUT_STYLES:
            raise InvalidArgumentError(f"output_style must be one of {OUTPUT_STYLES}, got {value!r}")
        self._output_style = value

    def use_compiled_runtime(self, hardware_accel: Any = None, require_fully_accelerated: bool = False) -> "EdgeModel":
        """Run calls through LiteRT's CompiledModel instead of the interpreter. `hardware_accel`: LiteRT
        `HardwareAccelerator` flags (e.g. `HardwareAccelerator.GPU | HardwareAccelerator.CPU`), or "cpu", "gpu",
        "npu"; None is LiteRT's default (CPU). With `require_fully_accelerated`, a model the accelerator takes
        only part of raises AcceleratorUnavailable on the first call. Returns the model (for chaining)."""
        if isinstance(hardware_accel, str):
            self._accelerator, self._hardware = hardware_accel, None
            from litert_torch.runtime.accelerated import check_accelerator

            check_accelerator(hardware_accel)
        else:
            self._accelerator = "cpu"
            self._hardware = (hardware_accel, bool(require_fully_accelerated))
        self._compiled = None
        self._runners = {}
        return self

    def use_interpreter_runtime(self) -> "EdgeModel":
        """Run calls through the LiteRT interpreter (the default). Returns the model (for chaining)."""
        self._accelerator, self._hardware, self._compiled = None, None, None
        self._runners = {}
        return self

    @property
    def metadata(self) -> dict[str, bytes]:
        return dict(self._metadata)

    @property
    def io_spec(self) -> dict[str, Any]:
        """The first signature's entry of the `litert_torch.io` metadata (see litert_torch/metadata.py), or {}
        for files without it."""
        return next(iter(self._io.values()), {})

    @property
    def source_map(self) -> list[dict[str, Any] | None]:
        """Per op of the main subgraph: the PyTorch node, ATen target, source line and module it came from."""
        graphs = decode_source_map(read_json(self._metadata, SOURCE_MAP_KEY))
        return graphs[0] if graphs else []

    @property
    def delegate_plan(self) -> DelegatePlan:
        """The DelegatePlan stored in the model, or one computed from the file when it has none."""
        from litert_torch.delegates.plan import PLAN_KEY, DelegatePlan, plan_for
        from litert_torch.flatbuffer.reader import read_model

        data = read_json(self._metadata, PLAN_KEY)
        if data is not None:
            return DelegatePlan.from_json(data)
        return plan_for(read_model(self._bytes).subgraphs[0])

    @property
    def delegate_plans(self) -> dict:
        """{signature: DelegatePlan} for every signature (a model with one signature: just that one)."""
        from litert_torch.delegates.plan import PLAN_KEY, DelegatePlan

        data = read_json(self._metadata, PLAN_KEY)
        if data is not None and data.get("signatures"):
            return {key: DelegatePlan.from_json({"targets": targets}) for key, targets in data["signatures"].items()}
        return {key: self.delegate_plan for key in self._signature_keys()}

    def signature_runner(self, key: str) -> Callable[..., Any]:
        """A callable running signature `key` like the module it came from: `edge.signature_runner("decode")(z)`."""
        if key not in self._signature_keys():
            raise UnknownSignatureError(f"no signature {key!r}; the model has {self._signature_keys()}")
        return lambda *args, **kwargs: self.run(key, args, kwargs)

    @property
    def quantization(self) -> QuantizationReport | None:
        """The QuantizationReport of a model made by litert_torch.quantize / convert(quantize=...), else None."""
        from litert_torch.quantization.report import QUANTIZATION_KEY, QuantizationReport

        data = read_json(self._metadata, QUANTIZATION_KEY)
        return QuantizationReport.from_json(data) if data is not None else None

    # ---- the graph view (Google's Model Explorer, the `view` extra) ---------------------------------------
    def view(self, *, report: Any = None, host: str = "127.0.0.1", port: int | None = None,
             open_browser: bool = True) -> ModelView:
        """Show the model in Model Explorer with our overlays on every op (placement per delegate target and
        why an op falls back, PyTorch source line and node; with `report`, a ValidationReport made with
        per_layer=True, the per-layer error), served on `host`:`port` in a background thread (port None: the
        first free of 8080-8099; 0: any free port). Returns the running ModelView (`url`, `stop()`, `wait()`).
        To validate and show in one call: litert_torch.view(edge, module=..., sample_args=...)."""
        from litert_torch.explorer.overlays import layers_of
        from litert_torch.explorer.page import prepare
        from litert_torch.explorer.server import check_address, serve

        check_address(host, port)
        running = serve(prepare(self.flatbuffer, layers=layers_of(report)), host=host, port=port,
                        open_browser=open_browser)
        running.report = report
        return running

    def export_view(self, folder: str | os.PathLike, *, report: Any = None, overwrite: bool = False) -> str:
        """Write the view to share without a server: `folder` gets one self-contained HTML page (opens from disk),
        the .tflite file, the overlays as Model Explorer node-data JSON files and a README.txt; written atomically.
        Returns the page's path. See litert_torch.explorer.export_view."""
        from litert_torch.explorer.overlays import layers_of
        from litert_torch.explorer.page import check_folder, export, prepare

        check_folder(os.fspath(folder), overwrite)
        name = os.path.basename(self._path) if self._path else None  # the page is named after the file
        return export(prepare(self.flatbuffer, layers=layers_of(report), name=name), os.fspath(folder),
                      overwrite=overwrite)

    # ---- the runtime ------------------------------------------------------------------------------------
    @property
    def num_threads(self) -> int | None:
        return self._num_threads

    @num_threads.setter
    def num_threads(self, value: int | None) -> None:
        if value is not None and (not isinstance(value, int) or value < 1):
            raise InvalidArgumentError(f"num_threads must be a positive int or None, got {value!r}")
        self._num_threads = value
        self._interpreter = None
        self._runners = {}

    def _get_interpreter(self) -> Interpreter:
        if self._interpreter is None:
            from ai_edge_litert.interpreter import Interpreter

            from ai_edge_litert.interpreter import OpResolverType

            resolver = {"xnnpack": OpResolverType.AUTO, "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                        "reference": OpResolverType.BUILTIN_REF}[self._kernels]
            source = {"model_path": self._path} if self._path is not None else {"model_content": self._bytes}
            logs.apply_native()
            try:
                interpreter = Interpreter(**source, num_threads=self._num_threads,
                                          experimental_op_resolver_type=resolver,
                                          experimental_preserve_all_tensors=self._keep_intermediates)
                interpreter.allocate_tensors()
            except (ValueError, RuntimeError) as exc:
                raise ModelLoadError(f"LiteRT could not load this model: {one_line(exc)}") from None
            self._interpreter = interpreter
        return self._interpreter

    @property
    def accelerator(self) -> str:
        """The hardware that runs the model: "cpu" (interpreter or CompiledModel), "gpu" or "npu"."""
        return self._accelerator or "cpu"

    def _runner(self, key: str):
        if self._accelerator is not None:
            from litert_torch.runtime.accelerated import CompiledRunner, compile_for

            if self._compiled is None:
                self._compiled = compile_for(self._bytes, self._accelerator, self._hardware)
            if key not in self._runners:
                self._runners[key] = CompiledRunner(self._compiled, key)
            return self._runners[key]
        if key not in self._runners:
            keys = list(self._get_interpreter().get_signature_list())
            if key not in keys:
                raise UnknownSignatureError(f"no signature {key!r}; the model has {keys}")
            self._runners[key] = self._get_interpreter().get_signature_runner(key)
        return self._runners[key]

    @property
    def signatures(self) -> dict[str, SignatureInfo]:
        out = {}
        for key in self._signature_keys():
            runner = self._runner(key)
            ins, outs = runner.get_input_details(), runner.get_output_details()
            order_in = self._io.get(key, {}).get("inputs") or list(ins)
            order_out = self._io.get(key, {}).get("outputs") or list(outs)
            out[key] = SignatureInfo(key, tuple(_spec(n, ins[n]) for n in order_in),
                                     tuple(_spec(n, outs[n]) for n in order_out))
        return out

    def _signature_keys(self) -> list[str]:
        if self._accelerator is not None:
            if self._compiled is None:
                from litert_torch.runtime.accelerated import compile_for

                self._compiled = compile_for(self._bytes, self._accelerator, self._hardware)
            return list(self._compiled.get_signature_list())
        return list(self._get_interpreter().get_signature_list())

    def _default_key(self) -> str:
        keys = self._signature_keys()
        if not keys:
            raise ModelInputError("the model has no signature to call")
        if DEFAULT_SIGNATURE in keys or len(keys) == 1:
            return DEFAULT_SIGNATURE if DEFAULT_SIGNATURE in keys else keys[0]
        raise UnknownSignatureError(f"the model has no default signature ({DEFAULT_SIGNATURE!r}); name one with "
                                    f"signature_name=, one of {keys}")

    def __call__(self, *args: Any, signature_name: str | None = None, **kwargs: Any) -> Any:
        """Run a signature (`signature_name`, else the default one) on inputs bound as the module's forward takes
        them or by the signature's input names; the result as `output_style` says."""
        return self._call(args, kwargs, signature_name, self._output_style)

    def call_like_module(self, *args: Any, signature_name: str | None = None, **kwargs: Any) -> Any:
        """A call returning the module's own output structure (the "pytorch" output_style), whatever
        `output_style` is set to."""
        return self._call(args, kwargs, signature_name, "pytorch")

    def _call(self, args: tuple, kwargs: dict, signature_name: str | None, style: str) -> Any:
        key = signature_name if signature_name is not None else self._key_for(args, kwargs)
        outputs, want_torch = self._invoke(key, args, kwargs)
        if style == "pytorch":
            return self._structured(key, outputs, want_torch)
        names = list(outputs)
        if all(re.fullmatch(r"output_\d+", n) for n in names):
            return outputs[names[0]] if len(names) == 1 else tuple(outputs[n] for n in names)
        return outputs

    def _key_for(self, args: tuple, kwargs: dict) -> str:
        """The default signature, or for a bucketed model the bucket whose input shapes the call matches."""
        buckets = {key: io["bucket"] for key, io in self._io.items() if io.get("bucket")}
        if not buckets:
            return self._default_key()
        for key in buckets:
            try:
                self._feeds(key, args, kwargs)
                return key
            except ModelInputError:
                continue
        some = next(iter(buckets.values()))
        sizes = sorted(b["size"] for b in buckets.values())
        raise ModelInputError(f"no signature takes these inputs: the model has static signatures for "
                              f"{some['dim']} in {sizes} ({', '.join(buckets)})")

    def run(self, signature: str, args: tuple = (), kwargs: dict | None = None) -> Any:
        """Run `signature` on PyTorch-style (args, kwargs) and return the PyTorch-style output structure (torch
        tensors when the inputs were torch tensors)."""
        outputs, want_torch = self._invoke(signature, args, kwargs or {})
        return self._structured(signature, outputs, want_torch)

    def _invoke(self, signature: str, args: tuple, kwargs: dict) -> tuple[dict[str, np.ndarray], bool]:
        """The signature's outputs as {name: numpy array} in output order, and whether the call passed torch
        tensors."""
        runner = self._runner(signature)
        io = self._io.get(signature)
        feeds, want_torch = self._feeds(signature, args, kwargs)
        # Variable tensors (recurrent state) persist between invocations; each call starts from the initial state.
        try:
            if self._accelerator is None:
                self._get_interpreter().reset_all_variables()
            results = runner(**feeds)
        except ValueError as exc:
            results = self._empty_outputs(runner, exc) if "Invalid tensor size" in str(exc) else None
            if results is None:
                raise ModelLoadError(f"LiteRT could not run signature {signature!r}: {one_line(exc)}") from None
        except RuntimeError as exc:
            raise ModelLoadError(f"LiteRT could not run signature {signature!r}: {one_line(exc)}") from None
        order = io["outputs"] if io else list(runner.get_output_details())
        if any(name not in results for name in order):
            raise ModelFileError(f"the litert_torch.io metadata names outputs {order} that signature {signature!r} "
                                 f"does not have ({sorted(results)})")
        widen = [d == "int64" for d in io.get("output_dtypes", [])] if io else []
        outputs = {}
        for i, name in enumerate(order):
            arr = np.array(results[name])
            if i < len(widen) and widen[i] and arr.dtype == np.int32:
                arr = arr.astype(np.int64)
            outputs[name] = arr
        return outputs, want_torch

    def _empty_outputs(self, runner, exc: Exception) -> dict[str, np.ndarray] | None:
        """The outputs of an invocation whose reading failed because an output sized when the model ran (a
        Reshape to a run-time shape) has no elements, which the interpreter cannot hand out: those as empty
        arrays of their run-time shape, the others read as usual. None when no output is empty."""
        if self._accelerator is not None:
            return None
        details = runner.get_output_details()
        if not any(0 in list(d["shape"]) for d in details.values()):
            return None
        subgraph = getattr(runner, "_subgraph_index", 0)
        out = {}
        for name, d in details.items():
            if 0 in list(d["shape"]):
                out[name] = np.zeros([int(s) for s in d["shape"]], d["dtype"])
            else:
                out[name] = self._get_interpreter().get_tensor(d["index"], subgraph)
        return out

    def _structured(self, signature: str, outputs: dict[str, np.ndarray], want_torch: bool) -> Any:
        values = [_to_torch(a) if want_torch else a for a in outputs.values()]
        io = self._io.get(signature)
        if io and io.get("out_spec"):
            try:
                return pytree.tree_unflatten(values, pytree.treespec_loads(io["out_spec"]))
            except Exception:  # noqa: BLE001 - a type this process lacks or whose rebuild needs more than arrays
                return dict(zip(outputs, values))
        return values[0] if len(values) == 1 else tuple(values)

    def feeds(self, *args: Any, signature: str | None = None, **kwargs: Any) -> dict[str, np.ndarray]:
        """The named, checked numpy arrays a call with these arguments gives the runtime (int64 narrowed to the
        model's int32 where it computes in int32): what quantization calibrates on."""
        return self._feeds(signature or self._default_key(), args, kwargs)[0]

    def _feeds(self, signature: str, args: tuple, kwargs: dict) -> tuple[dict[str, np.ndarray], bool]:
        details = self._runner(signature).get_input_details()
        io = self._io.get(signature)
        leaves, want_torch = self._flatten_inputs(io, details, args, kwargs)
        wide_inputs = {n for n, d in zip(io["inputs"], io.get("input_dtypes", [])) if d == "int64"} if io else set()
        params = dict(zip(io["inputs"], io.get("parameters", []))) if io else {}
        axes = io.get("dynamic_axes", {}) if io else {}
        feeds = {}
        for name, value in leaves:
            arr = self._check_input(name, value, details[name], name in wide_inputs, params.get(name))
            for axis, (dim, low, high) in axes.get(name, {}).items():
                size = arr.shape[int(axis)]
                if not low <= size <= high:
                    who = f"input {name!r}" + (f" ({params[name]})" if params.get(name, name) != name else "")
                    raise ModelInputError(f"{who} has {dim} = {size} on axis {axis}; the model was converted for "
                                          f"{dim} in [{low}, {high}]")
            feeds[name] = arr
        return feeds, want_torch

    def _flatten_inputs(self, io, details, args, kwargs):
        values = pytree.tree_leaves((args, kwargs))
        want_torch = any(isinstance(v, torch.Tensor) for v in values)
        names = list(io["inputs"]) if io else list(details)
        if io is not None:
            spec = pytree.treespec_loads(io["in_spec"])
            flat, given_spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
            if given_spec == spec:
                positions = io["tensor_input_positions"]
                return [(name, flat[pos]) for name, pos in zip(names, positions)], want_torch
        bound = self._bind_by_name(names, io, args, kwargs)
        if bound is not None:
            return bound, want_torch
        if io is None:
            raise ModelInputError(f"the model takes {len(names)} inputs ({', '.join(names)}), got "
                                  f"{len(args)} positional and {sorted(kwargs)} by name")
        raise ModelInputError(
            "inputs do not match the structure the model was converted with: expected "
            f"{_describe(spec)}, got {_describe(given_spec)}; or pass the signature's inputs by name: "
            f"{', '.join(names)}")

    @staticmethod
    def _bind_by_name(names: list[str], io: dict | None, args: tuple, kwargs: dict) -> list | None:
        """Inputs given flat, as the official litert-torch binds them: positional values to the signature's
        inputs in order, keyword values by input name (or forward's parameter name); None when the call does not
        bind that way."""
        aliases = dict(zip(io.get("parameters", []), names)) if io else {}
        if len(args) > len(names) or any(not isinstance(a, (torch.Tensor, np.ndarray)) for a in args):
            return None
        bound = dict(zip(names, args))
        for key, value in kwargs.items():
            name = key if key in names else aliases.get(key)
            if name is None or name in bound or not isinstance(value, (torch.Tensor, np.ndarray)):
                return None
            bound[name] = value
        if len(bound) != len(names):
            if len(args) + len(kwargs) == len(bound) and (args or kwargs):
                missing = [n for n in names if n not in bound]
                raise ModelInputError(f"the model takes {len(names)} inputs ({', '.join(names)}); missing "
                                      f"{', '.join(missing)}")
            return None
        return [(name, bound[name]) for name in names]

    @staticmethod
    def _check_input(name: str, value: Any, detail: dict, accepts_int64: bool = False,
                     parameter: str | None = None) -> np.ndarray:
        who = f"input {name!r}" + (f" ({parameter})" if parameter and parameter != name else "")
        if isinstance(value, torch.Tensor):
            arr = _to_numpy(value)
        elif isinstance(value, np.ndarray):
            arr = value
        else:
            raise ModelInputError(f"{who} must be a torch.Tensor or numpy array, got {type(value).__name__}")
        want_shape = tuple(int(d) for d in detail["shape"])
        want_dtype = np.dtype(detail["dtype"])
        if accepts_int64 and arr.dtype == np.int64 and want_dtype == np.int32:
            if arr.size and (arr.min() < -(2**31) or arr.max() > 2**31 - 1):
                raise ModelInputError(f"{who} holds values outside the int32 range the model computes in "
                                      f"(min {arr.min()}, max {arr.max()})")
            arr = arr.astype(np.int32)
        if arr.dtype != want_dtype:
            expected = "int64 (or int32)" if accepts_int64 else str(want_dtype)
            raise ModelInputError(f"{who} expects dtype {expected}, got {arr.dtype}")
        signature = tuple(int(d) for d in detail.get("shape_signature", want_shape)) or want_shape
        dynamic = len(signature) == len(want_shape) and any(d < 0 for d in signature)
        pattern = signature if dynamic else want_shape
        if len(arr.shape) != len(pattern) or any(w >= 0 and w != g for w, g in zip(pattern, arr.shape)):
            shown = [d if d >= 0 else "?" for d in pattern]
            raise ModelInputError(f"{who} expects shape {shown}, got {list(arr.shape)}")
        return np.require(arr, requirements="C")  # (np.ascontiguousarray would make a 0-d value 1-d)

    def __repr__(self) -> str:
        where = f", file {self._path}" if self._path else ""
        return f"EdgeModel({len(self._bytes)} bytes{where}, signatures={list(self._io) or '?'})"


def checked_model(data: Any, isolate: bool | None = None) -> ir.Model:
    """verify() the file (returning its IR model); try it in a child process when asked, or when it has ops the
    checks do not cover. What EdgeModel and the LLM runner do before LiteRT sees a file."""
    from litert_torch.runtime.verify import verify

    verdict = verify(data)
    if isolate or (isolate is None and verdict.unchecked):
        try_in_child(data)
    return verdict.model


def _check_io(io: dict, model) -> None:
    """Our I/O metadata must name the signatures' own inputs and outputs."""
    signatures = {s.key: s for s in model.signatures}
    for key, entry in io.items():
        sig = signatures.get(key)
        if not isinstance(entry, dict) or sig is None:
            raise ModelFileError(f"the litert_torch.io metadata describes a signature {key!r} the model lacks")
        try:
            ok = (sorted(entry["inputs"]) == sorted(sig.input_names)
                  and sorted(entry["outputs"]) == sorted(sig.output_names)
                  and len(entry.get("tensor_input_positions", [])) == len(entry["inputs"]))
        except (KeyError, TypeError):
            ok = False
        if not ok:
            raise ModelFileError(f"the litert_torch.io metadata of signature {key!r} does not match its inputs and "
                                 "outputs")


_CHILD = """
import sys
import numpy as np
from ai_edge_litert.interpreter import Interpreter
interpreter = Interpreter(model_path=sys.argv[1])
interpreter.allocate_tensors()
for key in interpreter.get_signature_list():
    runner = interpreter.get_signature_runner(key)
    runner(**{n: np.zeros(d["shape"], d["dtype"]) for n, d in runner.get_input_details().items()})
"""


def try_in_child(data: Any, timeout: float = 300.0) -> None:
    """Load, allocate and run every signature of the model (on zeros) in a child process; ModelLoadError when
    the runtime refuses it or dies on it (naming the signal)."""
    import signal
    import subprocess
    import sys
    import tempfile

    def no_core() -> None:
        import os
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        # a model that asks for more memory than the machine has fails in the child instead of bringing the
        # out-of-memory killer to this process
        try:
            physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            resource.setrlimit(resource.RLIMIT_AS, (max(physical * 3 // 4, 4 << 30),) * 2)
        except (ValueError, OSError):
            pass

    with tempfile.NamedTemporaryFile(suffix=".tflite") as f:
        f.write(data)
        f.flush()
        try:
            proc = subprocess.run([sys.executable, "-c", _CHILD, f.name], capture_output=True, text=True,
                                  timeout=timeout, preexec_fn=no_core)
        except subprocess.TimeoutExpired:
            raise ModelLoadError(f"LiteRT did not finish a first run of this model within {timeout:.0f} s") from None
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        raise ModelLoadError(f"the LiteRT runtime crashed ({name}) loading or running this model in a child "
                             "process; it is not loaded here")
    if proc.returncode:
        lines = [line for line in proc.stderr.strip().splitlines() if line.strip() and not line.startswith("INFO")]
        detail = lines[-1] if lines else f"exit status {proc.returncode}"
        raise ModelLoadError(f"LiteRT could not load or run this model: {detail[:300]}")


def _to_numpy(value: torch.Tensor) -> np.ndarray:
    value = value.detach().cpu()
    if value.dtype == torch.bfloat16:  # numpy has no bfloat16; ml_dtypes' has the same bits
        import ml_dtypes

        return value.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return value.numpy()


def _to_torch(arr: np.ndarray) -> torch.Tensor:
    if arr.dtype.name == "bfloat16":
        # (np.ascontiguousarray would make a 0-d array 1-d)
        return torch.from_numpy(np.require(arr, requirements="C").view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)


def _spec(name: str, detail: dict) -> TensorSpec:
    scale, zero_point = detail.get("quantization", (0.0, 0))
    shape = tuple(int(d) for d in detail["shape"])
    signature = tuple(int(d) for d in detail.get("shape_signature", shape))
    if len(signature) == len(shape) and any(d < 0 for d in signature):
        shape = signature  # -1 where the size is dynamic
    return TensorSpec(name, shape, np.dtype(detail["dtype"]),
                      (float(scale), int(zero_point)) if scale else None)


def _describe(spec: pytree.TreeSpec) -> str:
    """A call's (args, kwargs) structure with T for each leaf, e.g. "(T, [T, T]), {'mask': T}"."""
    args, kwargs = pytree.tree_unflatten([_Leaf()] * spec.num_leaves, spec)
    text = repr(tuple(args))
    if kwargs:
        text += ", " + repr(kwargs)
    return text


# Files larger than this are memory-mapped by EdgeModel.load instead of read (the flatbuffer limit is 2 GB).
FILE_BACKED_BYTES = 2**31 - 2**27


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class _Leaf:
    def __repr__(self) -> str:
        return "T"


def load(path: str | os.PathLike) -> EdgeModel:
    """The model in the .tflite file at `path` (the official litert-torch's `litert_torch.load`)."""
    return EdgeModel.load(path)


Model = EdgeModel  # the official litert-torch's name for a converted model
