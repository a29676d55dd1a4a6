"""Numerics validation: the edge model against eager PyTorch, per output and per backend, and on failure the
first PyTorch node where the edge model departs.

    report = litert_torch.validate(model, (x,), edge)
    print(report.render()); report.passed; report.to_json()

Backends: "xnnpack" (LiteRT's default CPU path), "reference" (LiteRT's reference kernels: when only XNNPACK
departs, the gap comes from an optimised kernel, not from the graph), "gpu" (LiteRT's GPU accelerator with CPU
fallback for the ops it refuses, as a deployment runs it; on SwiftShader where the machine has no GPU; judged
with its own tolerance, GPU_RTOL, since a GPU may compute in float16; skipped, with the reason, where no Vulkan
device exists) and "cloud" (the model on the XLA path through torchax + JAX; reported as skipped, with the
reason, where that stack is not installed).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
import torch
import torch.utils._pytree as pytree

from litert_torch.errors import InvalidArgumentError
from litert_torch.runtime.accelerated import AcceleratorUnavailable
from litert_torch.validation.compare import ATOL, RTOL, compare_outputs
from litert_torch.structure import plain

SCHEMA_VERSION = 1
BACKENDS = ("xnnpack", "reference", "cloud")
LITERT_BACKENDS = ("xnnpack", "reference")  # EdgeModel kernel names
KNOWN_BACKENDS = (*BACKENDS, "gpu")
# The GPU backend's relative tolerance: GPUs may compute in float16 (11-bit significand, ~5e-4 relative rounding
# per op), so the float32 contract would fail correct models there.
GPU_RTOL = 1e-3


@dataclass
class OutputResult:
    """One output on one backend, worst case over all inputs."""

    name: str
    shape: list[int]
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0  # max |edge - ref| / max |ref|
    mean_abs_error: float = 0.0
    cosine: float = 1.0
    passed: bool = True
    top1_agreement: float | None = None  # share of rows whose argmax agrees (class-score outputs)
    top5_agreement: float | None = None  # share of rows whose top-5 sets agree


@dataclass
class BackendResult:
    backend: str
    status: str  # "ran" or "skipped"
    reason: str | None = None
    outputs: list[OutputResult] = field(default_factory=list)
    # this backend's own tolerance where it differs from the report's (the GPU's)
    rtol: float | None = None
    atol: float | None = None

    @property
    def passed(self) -> bool | None:
        return None if self.status != "ran" else all(o.passed for o in self.outputs)


@dataclass
class Divergence:
    """The first PyTorch node whose value the edge model (reference kernels) does not reproduce."""

    node: str
    target: str
    location: str | None
    module: str | None
    opcode: str
    op_index: int
    relative_error: float
    previous_error: float  # the largest relative error over the nodes before it
    nodes_compared: int


@dataclass
class ValidationReport:
    reference: str
    inputs: int
    rtol: float
    atol: float
    backends: list[BackendResult]
    divergence: Divergence | None = None
    divergence_note: str | None = None
    layers: list[LayerError] = field(default_factory=list)
    # what makes a PASS say little: a reference output that is constant, all zero or not finite
    warnings: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """"PASS", "FAIL", or "INCONCLUSIVE" (it passed, but a warning says the comparison proves little)."""
        if not self.passed:
            return "FAIL"
        return "INCONCLUSIVE" if self.warnings else "PASS"

    @property
    def passed(self) -> bool:
        """Every LiteRT backend that ran passed, and at least one ran (the cloud backend is a reference point)."""
        edge = [b for b in self.backends if b.backend.startswith("litert-")]
        return all(b.passed is not False for b in edge) and any(b.status == "ran" for b in edge)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data; the schema is documented in docs/VALIDATION.md (version field)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "passed": self.passed,
            "verdict": self.verdict,
            "warnings": list(self.warnings),
            "reference": self.reference,
            "inputs": self.inputs,
            "tolerance": {"rtol": self.rtol, "atol": self.atol,
                          "rule": "max|edge - ref| <= rtol * max|ref| + atol, per output"},
            "backends": [{"backend": b.backend, "status": b.status, "reason": b.reason, "passed": b.passed,
                          "tolerance": {"rtol": self.rtol if b.rtol is None else b.rtol,
                                        "atol": self.atol if b.atol is None else b.atol},
                          "outputs": [dataclasses.asdict(o) for o in b.outputs]} for b in self.backends],
            "divergence": dataclasses.asdict(self.divergence) if self.divergence else None,
            "divergence_note": self.divergence_note,
            "layers": [dataclasses.asdict(layer) for layer in self.layers],
        }

    def to_html(self) -> str:
        """A self-contained page: the verdict, the per-output table and the per-layer error plot."""
        from litert_torch.validation.report_html import render_html

        return render_html(self)

    def render(self) -> str:
        """The text table the CLI prints."""
        lines = [f"validation against {self.reference} on {self.inputs} input set(s) "
                 f"(max|err| <= {self.rtol:g} * max|ref| + {self.atol:g}):"]
        width = max([len(b.backend) for b in self.backends] + [10])
        for b in self.backends:
            if b.status != "ran":
                lines.append(f"  {b.backend:<{width}} skipped: {b.reason}")
                continue
            for o in b.outputs:
                topk = ""
                if o.top1_agreement is not None:
                    topk = f"  top1 {o.top1_agreement:.0%}  top5 {o.top5_agreement:.0%}"
                own = "" if b.rtol is None else f"  (rtol {b.rtol:g}, atol {self.atol if b.atol is None else b.atol:g})"
                lines.append(f"  {b.backend:<{width}} {o.name:<18} {str(o.shape):<16} max|err| {o.max_abs_error:.2e}  "
                             f"rel {o.max_rel_error:.2e}  mean {o.mean_abs_error:.2e}  cos {o.cosine:.6f}{topk}  "
                             f"{'ok' if o.passed else 'FAIL'}{own}")
        if self.divergence is not None:
            d = self.divergence
            lines.append(f"first divergent node: {d.node} ({d.target}) lowered to {d.opcode} (op {d.op_index}), "
                         f"relative error {d.relative_error:.2e} after at most {d.previous_error:.2e} before it")
            lines.append(f"  at {d.location or 'unknown source line'}" + (f" in module {d.module}" if d.module else ""))
        elif self.divergence_note:
            lines.append(self.divergence_note)
        lines += [f"warning: {w}" for w in self.warnings]
        lines.append(f"validation: {self.verdict}")
        return "\n".join(lines)


def _draw_inputs(args: tuple, kwargs: dict, draws: int, seed: int = 0) -> list[tuple[tuple, dict]]:
    """The sample inputs, then `draws` copies with fresh normal floats (integer and bool inputs kept: they are
    usually indices or masks whose valid range the sample shows)."""
    generator = torch.Generator().manual_seed(seed)
    sets = [(args, kwargs)]
    for _ in range(draws):
        def fresh(value):
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                return torch.randn(value.shape, generator=generator).to(value.dtype)
            return value
        sets.append((pytree.tree_map(fresh, args), pytree.tree_map(fresh, kwargs)))
    return sets


def _topk_agreement(ref: np.ndarray, got: np.ndarray, k: int) -> float:
    ref_top = np.argsort(-ref, axis=-1)[..., :k]
    got_top = np.argsort(-got, axis=-1)[..., :k]
    if k == 1:
        return float(np.mean(ref_top[..., 0] == got_top[..., 0]))
    return float(np.mean([set(a) == set(b) for a, b in zip(ref_top.reshape(-1, k), got_top.reshape(-1, k))]))


def _looks_like_scores(shape: tuple[int, ...], dtype) -> bool:
    """Class scores: float, rank 2 (batch, classes) with at least 5 classes."""
    return np.dtype(dtype).kind == "f" and len(shape) == 2 and shape[-1] >= 5


def _merge(results: list[OutputResult], new: list, ref_leaves, got_leaves) -> list[OutputResult]:
    if not results:
        results = [OutputResult(c.name, list(c.shape)) for c in new]
        for r in results:
            r.cosine = 1.0
    for r, c, ref, got in zip(results, new, ref_leaves, got_leaves):
        r.max_abs_error = max(r.max_abs_error, c.max_abs_error)
        r.max_rel_error = max(r.max_rel_error, c.relative_error)
        r.mean_abs_error = max(r.mean_abs_error, c.mean_abs_error)
        r.cosine = min(r.cosine, c.cosine)
        r.passed = r.passed and c.passed
        ref_np, got_np = np.asarray(ref), np.asarray(got)
        if _looks_like_scores(ref_np.shape, ref_np.dtype):
            top1, top5 = _topk_agreement(ref_np, got_np, 1), _topk_agreement(ref_np, got_np, 5)
            r.top1_agreement = top1 if r.top1_agreement is None else min(r.top1_agreement, top1)
            r.top5_agreement = top5 if r.top5_agreement is None else min(r.top5_agreement, top5)
    return results


def _as_numpy(value: Any) -> np.ndarray:
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def validate(module: torch.nn.Module, sample_args: Any = (), edge_model: Any = None, *,
             sample_kwargs: dict | None = None, inputs: Iterable | None = None, atol: float = ATOL,
             rtol: float = RTOL, backends: Iterable[str] = BACKENDS, draws: int = 3,
             per_layer: bool | None = None, tpu_precision: bool = False, gpu_rtol: float = GPU_RTOL,
             progress: Callable[[str], None] | None = None, dataset: Any = None,
             dataset_options: dict | None = None) -> Any:
    """Compare `edge_model` (converted from `module` when not given) with eager PyTorch in float32.

    `inputs`: input tuples to use (each a tuple of positional args); by default the sample inputs plus `draws`
    random draws of the same shapes and dtypes (fixed seed). On any failure (or always, with per_layer=True;
    never with per_layer=False) the model is rerun on the reference kernels with every intermediate tensor
    kept, each node's error is recorded (`report.layers`), and the first PyTorch node whose value it departs
    from is reported with its source line and the TFLite op it became.

    `backends` may add "gpu" (LiteRT's GPU accelerator), judged with `gpu_rtol` and `atol`; the report names
    each backend's tolerance. `tpu_precision=True` runs the cloud backend with a TPU's default float32 matmul precision (bfloat16
    multiplies, float32 accumulation), so the drift a TPU deployment would show appears on any machine. The
    cloud backend is a reference point: `report.passed` is decided by the LiteRT backends.

    A reference output that is constant, all zero or not finite passes trivially: `report.warnings` says so and
    the verdict is INCONCLUSIVE. `progress`, when given, is called with each stage as it starts.

    `dataset` (a Ray Dataset with an "x" column of samples, a folder of .npz samples or of images, or a list of
    arrays) runs the comparison at dataset scale on Ray Data instead (`litert_torch.validation.dataset.validate_dataset`, with
    `dataset_options` as its keywords: labels, image_size, mean, std, ...; `edge_model` may then be a {variant:
    model} dict) and returns its DatasetReport: top-1 agreement, error percentiles and the worst samples per
    variant, and accuracy when the dataset is labelled.
    """
    if dataset is not None:
        from litert_torch.validation.dataset import validate_dataset
        from litert_torch.converter import convert as _convert

        if edge_model is None:
            edge_model = _convert(module, sample_args if isinstance(sample_args, tuple) else (sample_args,),
                                  sample_kwargs)
        models = edge_model if isinstance(edge_model, dict) else {"model": edge_model}
        return validate_dataset(module, models, dataset, **(dataset_options or {}))
    from litert_torch.converter import convert

    if not isinstance(sample_args, tuple):
        sample_args = (sample_args,)
    sample_kwargs = dict(sample_kwargs or {})
    try:
        module.eval()
    except NotImplementedError:  # the module of an ExportedProgram is already in its exported mode
        pass
    if edge_model is None:
        edge_model = convert(module, sample_args, sample_kwargs)
    input_sets = ([(tuple(i) if isinstance(i, (tuple, list)) else (i,), {}) for i in inputs] if inputs is not None
                  else _draw_inputs(sample_args, sample_kwargs, draws))
    report_stage = progress or (lambda stage: None)
    report_stage("PyTorch reference")
    references = []
    with torch.no_grad():
        for args, kwargs in input_sets:
            references.append(module(*args, **kwargs))

    names = _output_names(edge_model)
    report_backends = []
    for backend in backends:
        report_stage(f"backend {backend}")
        if backend == "cloud":
            report_backends.append(_cloud_backend(module, input_sets, references, atol, rtol, tpu_precision,
                                                  names))
            continue
        if backend not in KNOWN_BACKENDS:
            raise InvalidArgumentError(f"unknown backend {backend!r}; choose from {KNOWN_BACKENDS}")
        on_gpu = backend == "gpu"
        runner = _on_gpu(edge_model) if on_gpu else edge_model.with_kernels(backend)
        tolerance = {"atol": atol, "rtol": gpu_rtol if on_gpu else rtol}
        results: list[OutputResult] = []
        try:
            for (args, kwargs), reference in zip(input_sets, references):
                got = call_like_pytorch(runner, args, kwargs)
                comparisons = compare_outputs(reference, got, names=names, **tolerance)
                ref_leaves = [_as_numpy(v) for v in pytree.tree_leaves(plain(reference))]
                got_leaves = [_as_numpy(v) for v in pytree.tree_leaves(plain(got))]
                results = _merge(results, comparisons, ref_leaves, got_leaves)
        except AcceleratorUnavailable as exc:
            if not on_gpu:
                raise
            report_backends.append(BackendResult("litert-gpu", "skipped", str(exc), rtol=gpu_rtol))  # never faked
            continue
        report_backends.append(BackendResult(f"litert-{backend}", "ran", None, results,
                                             rtol=gpu_rtol if on_gpu else None))

    report = ValidationReport("pytorch-eager-cpu-float32", len(input_sets), rtol, atol, report_backends,
                              warnings=degenerate(references, names, atol))
    if per_layer or (per_layer is None and not report.passed):
        report_stage("layer by layer")
        args, kwargs = input_sets[0]
        report.divergence, report.divergence_note, report.layers = locate(module, edge_model, args, kwargs, atol,
                                                                          rtol)
        traced = None if report.passed else traced_departure(module, args, kwargs, references[0], atol, rtol)
        if traced is not None:
            report.divergence, report.divergence_note = None, traced
        elif report.divergence is None and report.divergence_note is not None and report.layers \
                and not report.passed:  # no divergence: the note says the reference kernels reproduce every node
            failed = [b.backend for b in report.backends if b.passed is False]
            kernels = "the GPU delegate's kernels" if failed == ["litert-gpu"] else "the optimised (XNNPACK) kernels"
            report.divergence_note += f": the gap comes from {kernels}, not from the graph"
    return report


def _on_gpu(edge_model: Any) -> Any:
    """The same model on LiteRT's GPU accelerator, with the CPU for the ops the GPU delegate refuses."""
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator

    return edge_model.with_kernels("xnnpack").use_compiled_runtime(HardwareAccelerator.GPU | HardwareAccelerator.CPU)


def traced_departure(module, args, kwargs, reference, atol: float = ATOL, rtol: float = RTOL) -> str | None:
    """Why a converted model departs from eager PyTorch when the program torch.export traced departs from it
    too (the model computes differently when traced than when it runs: a branch on `torch.compiler`, a mask
    skipped in eager mode but built when tracing); None when the traced program agrees."""
    from litert_torch.lower.aten.program import export_lowerable

    try:
        with torch.no_grad():
            traced = export_lowerable(module, args, kwargs).module()(*args, **kwargs)
    except Exception:  # noqa: BLE001 - the traced program cannot run here: nothing to say about it
        return None
    failed = [r for r in compare_outputs(reference, traced, atol=atol, rtol=rtol) if not r.passed]
    if not failed:
        return None
    worst = max(failed, key=lambda r: r.relative_error)
    return (f"torch.export's program departs from eager PyTorch itself ({worst.name}: max|err| "
            f"{worst.max_abs_error:.2e}, rel {worst.relative_error:.2e}): the model computes differently when traced "
            "than when it runs eagerly, and the converted model follows the traced program. Look for code that "
            "branches on tracing (torch.compiler.is_compiling, is_torchdynamo_compiling) on the model's path")


def degenerate(references: list, names: list[str] | None = None, atol: float | None = None) -> list[str]:
    """Warnings for reference outputs a comparison says little about: constant (all zero included) over every
    input set, holding NaN or Inf, or within the absolute tolerance `atol` of zero everywhere (then an output
    of zeros would pass too)."""
    per_output: list[list[np.ndarray]] = []
    for reference in references:
        for i, leaf in enumerate(pytree.tree_leaves(plain(reference))):
            arr = _as_numpy(leaf)
            if arr.dtype.kind != "f":
                continue
            while len(per_output) <= i:
                per_output.append([])
            per_output[i].append(arr.astype(np.float64))
    warnings = []
    for i, arrays in enumerate(per_output):
        name = names[i] if names and i < len(names) else f"output_{i}"
        values = np.concatenate([a.reshape(-1) for a in arrays]) if arrays else np.zeros(0)
        if not values.size:
            continue
        if not np.isfinite(values).all():
            warnings.append(f"the PyTorch output {name} holds NaN or Inf: the comparison proves little")
        elif np.all(values == values[0]):
            what = "all zero" if values[0] == 0 else f"constant ({values[0]:g})"
            warnings.append(f"the PyTorch output {name} is {what} on every input: the comparison proves little "
                            "(an untrained or zero-initialised layer?)")
        elif atol is not None and np.abs(values).max() <= atol:
            warnings.append(f"the PyTorch output {name} is within the absolute tolerance ({atol:g}) of zero on every "
                            f"input (largest magnitude {np.abs(values).max():.2g}): any output that small would "
                            "pass, so the comparison proves little (compare it with a smaller atol, or scale it)")
    return warnings


def _output_names(edge_model) -> list[str] | None:
    return edge_model.io_spec.get("outputs") or None


def _cloud_backend(module, input_sets, references, atol, rtol, tpu_precision: bool, names) -> BackendResult:
    """The module on XLA through torchax + JAX (the `cloud` extra). When that stack is missing or cannot run
    the model, the backend is reported as skipped with the reason — never faked."""
    from litert_torch.validation.cloud import run_on_torch_tpu, run_on_xla, torch_tpu_unavailable

    # On a TPU host with torch-tpu, the module itself runs on the `tpu` device (TPU precision is then real, not
    # emulated); elsewhere, the module through torchax on JAX's default backend.
    why_not_tpu = torch_tpu_unavailable() if not tpu_precision else "TPU precision is emulated on XLA"
    try:
        if why_not_tpu is None:
            label, outputs = run_on_torch_tpu(module, input_sets)
        else:
            label, outputs = run_on_xla(module, input_sets, tpu_precision=tpu_precision)
    except ImportError as exc:
        return BackendResult("cloud-xla", "skipped",
                             f"the XLA path needs torchax and jax (pip install 'litert-torch-direct[cloud]'): "
                             f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - the XLA path could not trace or run this model: say so, run nothing else
        message = str(exc).splitlines()[0][:300] if str(exc) else ""
        return BackendResult("cloud-xla", "skipped", f"the XLA path failed: {type(exc).__name__}: {message}")
    results: list[OutputResult] = []
    for reference, got in zip(references, outputs):
        comparisons = compare_outputs(reference, got, atol=atol, rtol=rtol, names=names)
        ref_leaves = [_as_numpy(v) for v in pytree.tree_leaves(plain(reference))]
        got_leaves = [_as_numpy(v) for v in pytree.tree_leaves(plain(got))]
        results = _merge(results, comparisons, ref_leaves, got_leaves)
    return BackendResult(f"cloud-{label}", "ran", why_not_tpu and f"not torch-tpu: {why_not_tpu}", results)


# ---- first divergent node ----------------------------------------------------------------------------------------
def _node_values(module, args, kwargs) -> dict[str, torch.Tensor]:
    """Every fx node's value when the exported program runs eagerly on these inputs."""
    from litert_torch.lower.aten.program import export_lowerable

    program = export_lowerable(module, args, kwargs)
    graph_module = program.module()
    values: dict[str, torch.Tensor] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            first = result[0] if isinstance(result, (tuple, list)) and result else result
            if isinstance(first, torch.Tensor):  # an op's first output holds the tuple's first element
                values[n.name] = first.detach()
            return result

    flat_args = pytree.tree_leaves((args, kwargs))
    with torch.no_grad():
        Recorder(graph_module).run(*flat_args)
    return values


TORCH, NHWC = "torch", "nhwc"
# ops whose rank-4 output TFLite defines as NHWC
_NHWC_OPS = {"CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "MAX_POOL_2D", "AVERAGE_POOL_2D", "L2_POOL_2D",
             "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH"}
# ops the layout pass carries a layout through (it rewrites their axes, paddings and constants to match)
_CARRY = {"PAD", "PADV2", "MIRROR_PAD", "CONCATENATION", "SLICE", "STRIDED_SLICE", "SPLIT", "SPLIT_V", "TILE",
          "BROADCAST_TO", "QUANTIZE", "DEQUANTIZE", "CAST"}
_TO_NHWC, _TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


def tensor_layouts(graph, channel_last_inputs=()) -> dict[int, str | None]:
    """id(tensor) -> how it holds its PyTorch value: "torch" (as PyTorch lays it out), "nhwc" (a rank-4 value
    with channels last) or None (some other arrangement: not compared). Read from the graph's ops (what each
    TFLite op defines, and the transposes the converter placed), never guessed from shapes."""
    from litert_torch.passes.layout import ELEMENTWISE_BINARY, ELEMENTWISE_UNARY, REDUCTIONS

    layout: dict[int, str | None] = {}
    for x in graph.inputs:
        layout[id(x)] = NHWC if x.name in channel_last_inputs and x.rank == 4 else TORCH
    agnostic = ELEMENTWISE_UNARY | ELEMENTWISE_BINARY | _CARRY
    for op in graph.ops:
        ins = [layout.get(id(t), TORCH) for t in op.inputs if t is not None and not t.is_constant]
        kinds = set(ins)
        out = op.outputs[0] if op.outputs else None
        if out is None:
            continue
        if op.opcode in _NHWC_OPS and out.rank == 4:
            result = NHWC
        elif op.opcode == "TRANSPOSE" and op.inputs[1] is not None and op.inputs[1].is_constant:
            perm = [int(p) for p in op.inputs[1].data]
            permute_node = op.source is not None and "permute" in (op.source.target or "") and op.value_node is None
            if kinds == {TORCH} and perm == _TO_NHWC and not permute_node:
                result = NHWC  # a layout transpose in front of an NHWC op
            elif kinds == {NHWC} and perm == _TO_NCHW:
                result = TORCH
            elif kinds == {TORCH} and permute_node:
                result = TORCH  # the PyTorch permute itself
            else:
                result = None
        elif op.opcode in agnostic or (op.opcode in REDUCTIONS and op.options.get("keep_dims")):
            result = kinds.pop() if len(kinds) == 1 else (TORCH if not kinds else None)
            if result == NHWC and out.rank != 4:
                result = None
        else:
            result = TORCH if kinds <= {TORCH} else None
        for t in op.outputs:
            layout[id(t)] = result
    return layout


def _aligned(edge_value: np.ndarray, torch_value: np.ndarray, layout: str | None) -> np.ndarray | None:
    """The edge tensor in the PyTorch value's layout, given how the graph says it holds it; None when it holds
    some other arrangement."""
    if layout == NHWC and edge_value.ndim == 4:
        edge_value = np.transpose(edge_value, _TO_NCHW)
    elif layout != TORCH:
        return None
    if edge_value.shape == torch_value.shape:
        return edge_value
    if [d for d in edge_value.shape if d != 1] == [d for d in torch_value.shape if d != 1]:
        return edge_value.reshape(torch_value.shape)  # unit dimensions the lowering dropped or added
    return None


@dataclass
class LayerError:
    """One PyTorch node's value against the edge model's tensor for it (reference kernels). `node` is the node
    whose value is compared; `target` the ATen op the TFLite op was lowered from (they differ where an
    activation or batch norm was folded into the op)."""

    node: str
    target: str
    opcode: str
    op_index: int
    location: str | None
    relative_error: float  # max |edge - ref| / max |ref|
    passed: bool
    source_node: str  # the node the op was lowered from
    module: str | None = None


def layer_errors(module, edge_model, args, kwargs, atol: float = ATOL,
                 rtol: float = RTOL) -> tuple[list[LayerError], str | None]:
    """Every PyTorch node whose value the model's tensors hold, in op order, with its error on the reference
    kernels; or an empty list and the reason none could be compared."""
    from ai_edge_litert import schema_py_generated as schema

    from litert_torch.flatbuffer.reader import read_model
    from litert_torch.passes.fold_affine import UNSCALED

    graph = read_model(edge_model.flatbuffer).subgraphs[0]
    ops = graph.ops
    layouts = tensor_layouts(graph, edge_model.io_spec.get("channel_last_inputs", []))
    if not any(op.source for op in ops):
        return [], "no source map in the model: cannot compare layer by layer"
    values = _node_values(module, args, kwargs)
    runner = edge_model.with_kernels("reference", keep_intermediates=True)
    call_like_pytorch(runner, args, kwargs)
    fb = schema.Model.GetRootAs(edge_model.flatbuffer, 0).Subgraphs(0)
    last_op_of_node = {}  # fx node -> the last op whose first output holds that node's value
    for i, op in enumerate(ops):
        weight = op.opcode == "DEQUANTIZE" and op.inputs[0] is not None and op.inputs[0].is_constant
        # a transpose into NHWC in front of an op holds that op's input, not the value of the node it serves
        into_nhwc = (op.opcode == "TRANSPOSE" and layouts.get(id(op.outputs[0])) == NHWC
                     and layouts.get(id(op.inputs[0])) == TORCH)
        if op.source is not None and not weight and not into_nhwc:  # a widened weight holds no node's value
            last_op_of_node[op.value_node or op.source.node] = i
    # a node whose scale and shift were folded into the next product is held by no op (passes/fold_affine.py)
    for op in ops:
        if op.value_node and op.value_node.endswith(UNSCALED):
            last_op_of_node.pop(op.value_node.removesuffix(UNSCALED), None)
    layers = []
    for node, i in sorted(last_op_of_node.items(), key=lambda item: item[1]):
        ref = values.get(node)
        op = fb.Operators(i)
        if ref is None or op.OutputsLength() == 0 or not ref.is_floating_point():
            continue
        try:
            edge_value = runner.intermediate(op.Outputs(0))
        except (ValueError, RuntimeError):
            continue
        ref_np = ref.numpy().astype(np.float64)
        got = _aligned(edge_value.astype(np.float64), ref_np, layouts.get(id(ops[i].outputs[0])))
        if got is None:
            continue
        scale = float(np.abs(ref_np).max()) if ref_np.size else 0.0
        err = float(np.abs(got - ref_np).max()) if ref_np.size else 0.0
        source = ops[i].source
        if source is None:  # never: only ops with a source were matched to nodes above
            continue
        layers.append(LayerError(node, source.target, ops[i].opcode, i, source.location,
                                 err / scale if scale else err, err <= rtol * scale + atol, source.node,
                                 source.module))
    return layers, None if layers else "no intermediate tensor could be matched to a PyTorch node"


def locate(module, edge_model, args, kwargs, atol: float = ATOL,
           rtol: float = RTOL) -> tuple[Divergence | None, str | None, list[LayerError]]:
    """(Divergence or None, note, layers): the first node in op order whose value the reference kernels
    depart from, with the per-layer errors it was found in."""
    layers, note = layer_errors(module, edge_model, args, kwargs, atol, rtol)
    if not layers:
        return None, note, layers
    worst_before = 0.0
    for count, layer in enumerate(layers, 1):
        if not layer.passed:
            return Divergence(layer.source_node, layer.target, layer.location, layer.module, layer.opcode,
                              layer.op_index, layer.relative_error, worst_before, count), None, layers
        worst_before = max(worst_before, layer.relative_error)
    return None, f"the reference kernels reproduce all {len(layers)} matched PyTorch nodes", layers


def call_like_pytorch(edge_model, args: tuple, kwargs: dict) -> Any:
    """Call `edge_model` with PyTorch-layout inputs and return PyTorch-layout outputs, whatever the model's
    channel_last_io choice (recorded in its I/O metadata)."""
    io = edge_model.io_spec
    nhwc_in, nhwc_out = set(io.get("channel_last_inputs", [])), set(io.get("channel_last_outputs", []))
    if not nhwc_in and not nhwc_out:
        return edge_model.call_like_module(*args, **kwargs)
    leaves, spec = pytree.tree_flatten((args, kwargs))
    for name, position in zip(io.get("inputs", []), io.get("tensor_input_positions", [])):
        if name in nhwc_in:
            leaves[position] = leaves[position].permute(0, 2, 3, 1).contiguous()
    edge_args, edge_kwargs = pytree.tree_unflatten(leaves, spec)
    got = edge_model.call_like_module(*edge_args, **edge_kwargs)
    out_leaves, out_spec = pytree.tree_flatten(got)
    names = io.get("outputs", [])
    out_leaves = [t.permute(0, 3, 1, 2) if i < len(names) and names[i] in nhwc_out else t
                  for i, t in enumerate(out_leaves)]
    return pytree.tree_unflatten(out_leaves, out_spec)


class OnnxRuntimeReference(torch.nn.Module):
    """An ONNX model on ONNX Runtime (CPU) as a module (the reference `validate` runs): tensors in, tensor or
    tuple out."""

    def __init__(self, model: Any):
        super().__init__()
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise ImportError("validating ONNX models needs onnxruntime: pip install 'litert-torch-direct[onnx]'") \
                from exc
        import onnx

        data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else None
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the graph as written
        self.session = ort.InferenceSession(data if data is not None else str(model), options,
                                            providers=["CPUExecutionProvider"])
        self.inputs = self.session.get_inputs()

    def forward(self, *args: Any) -> Any:
        feeds = {i.name: _as_numpy(a) for i, a in zip(self.inputs, args)}
        outs = [torch.from_numpy(np.asarray(o)) for o in self.session.run(None, feeds)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def sample_inputs(self, input_shapes: dict | None = None, seed: int = 0) -> tuple:
        """Inputs of the model's shapes: normal floats, zeros for integer inputs."""
        generator = torch.Generator().manual_seed(seed)
        types = {"tensor(float)": torch.float32, "tensor(int64)": torch.int64, "tensor(int32)": torch.int32,
                 "tensor(bool)": torch.bool, "tensor(float16)": torch.float16}
        out = []
        for i in self.inputs:
            shape = (input_shapes or {}).get(i.name) or i.shape
            if any(not isinstance(d, int) for d in shape):
                raise InvalidArgumentError(f"input {i.name} has dynamic dimensions {shape}: give input_shapes="
                                           f"{{{i.name!r}: (...)}} with a size for each")
            dtype = types.get(i.type, torch.float32)
            out.append(torch.randn(shape, generator=generator).to(dtype) if dtype.is_floating_point
                       else torch.zeros(shape, dtype=dtype))
        return tuple(out)


def validate_onnx(model: Any, edge_model: Any = None, *, inputs: Iterable | None = None,
                  input_shapes: dict | None = None, atol: float = ATOL, rtol: float = RTOL,
                  backends: Iterable[str] = LITERT_BACKENDS, draws: int = 3) -> ValidationReport:
    """Compare `edge_model` (converted from the ONNX `model`, a path or ModelProto, when not given) with ONNX
    Runtime on the CPU: the same report as `validate`, with ONNX Runtime as the reference. Inputs: `inputs`, or
    random draws of the model's input shapes (integer inputs zero)."""
    from litert_torch.converter import convert_onnx

    reference = OnnxRuntimeReference(model)
    if edge_model is None:
        edge_model = convert_onnx(model, input_shapes=input_shapes)
    elif input_shapes is None:
        # the converted model's own input shapes settle the ONNX file's symbolic dimensions (size 2 where the
        # converted model keeps a dimension dynamic too)
        signature = next(iter(edge_model.signatures.values()))
        input_shapes = {spec.name: tuple(d if d >= 0 else 2 for d in spec.shape) for spec in signature.inputs}
    sample = reference.sample_inputs(input_shapes)
    report = validate(reference, sample, edge_model, inputs=inputs, atol=atol, rtol=rtol,
                      backends=[b for b in backends if b != "cloud"], draws=draws, per_layer=False)
    report.reference = "onnxruntime-cpu"
    return report
