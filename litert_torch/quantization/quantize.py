"""The entry point, `quantize_model`: float16 weights by our own pass, the int8 modes and recipes through
ai-edge-quantizer on the float model we wrote, our metadata carried over, and the report of what stayed float."""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from litert_torch import ir
from litert_torch import metadata as md
from litert_torch.metadata import DEFAULT_SIGNATURE
from litert_torch.logs import third_party_output
from litert_torch.errors import (
    CalibrationError, ModelFileError, ModelInputError, QuantizationArgumentError, QuantizationError,
)
from litert_torch.quantization.report import QUANTIZATION_KEY, FloatOp, QuantizationReport  # noqa: F401 (re-exported)
from litert_torch.quantization.weights import FP16_MIN_ELEMENTS, WEIGHT_OPS, fp16_weights  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from litert_torch.runtime.edge_model import EdgeModel

MODES = ("fp16", "dynamic-int8", "int8")
MIN_CALIBRATION_SAMPLES = 8
# What validation against the float PyTorch model allows per mode: max|err| <= rtol * max|ref| + atol.
TOLERANCES = {"fp16": (1e-2, 1e-4), "dynamic-int8": (0.1, 1e-3), "int8": (0.2, 1e-3), "recipe": (0.2, 1e-3)}


def int8_weights_report(float_bytes: int, quantized_bytes: int, graphs: list[ir.Graph]) -> bytes:
    """The `litert_torch.quantization` entry for a model quantized by `int8_weights`."""
    quantized = counted = 0
    left: list[FloatOp] = []
    for graph in graphs:
        q, n, f = _float_ops(graph, "dynamic-int8", set())
        quantized, counted, left = quantized + q, counted + n, left + f
    recipe = {"int8_weights": "FULLY_CONNECTED and EMBEDDING_LOOKUP weights and gathered expert tables int8, "
                              "symmetric per channel (sizes are the model's constant bytes)"}
    return QuantizationReport("dynamic-int8", float_bytes, quantized_bytes, quantized, counted, 0, "float",
                              recipe, left).to_bytes()


# ---- calibration data ---------------------------------------------------------------------------------------
def calibration_feeds(edge, samples: Iterable[Any] | None, signature: str | None = None) -> list[dict[str, np.ndarray]]:
    """Check `samples` (each a tuple of positional inputs, a dict of keyword inputs, or one tensor) against the
    float model's signature and return them as named arrays. Raises CalibrationError naming the sample."""
    if samples is None:
        raise CalibrationError("int8 quantization needs calibration_data: an iterable of input tuples, as you "
                               f"would pass them to the model (at least {MIN_CALIBRATION_SAMPLES})")
    feeds = []
    args: tuple[Any, ...]
    for index, sample in enumerate(samples):
        if isinstance(sample, dict):
            args, kwargs = (), sample
        elif isinstance(sample, (tuple, list)):
            args, kwargs = tuple(sample), {}
        else:
            args, kwargs = (sample,), {}
        try:
            named = edge.feeds(*args, signature=signature, **kwargs)
        except ModelInputError as exc:
            raise CalibrationError(f"calibration sample {index}: {exc}") from None
        for name, arr in named.items():
            if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                bad = int((~np.isfinite(arr)).sum())
                raise CalibrationError(f"calibration sample {index}: input {name!r} holds {bad} NaN or Inf "
                                       "value(s); calibration needs finite data")
        feeds.append(named)
    if len(feeds) < MIN_CALIBRATION_SAMPLES:
        raise CalibrationError(f"{len(feeds)} calibration sample(s): int8 quantization needs at least "
                               f"{MIN_CALIBRATION_SAMPLES} to estimate activation ranges (a few hundred "
                               "representative inputs is typical)")
    return feeds


# ---- keep_float -------------------------------------------------------------------------------------------
def matching_ops(graph: ir.Graph, patterns: Iterable[str]) -> list[ir.Op]:
    """Ops whose PyTorch node, value node, module path or source location matches one of `patterns`."""
    compiled = [re.compile(p) for p in patterns]
    found = []
    for op in graph.ops:
        s = op.source
        fields = [op.outputs[0].name if op.outputs else ""]
        if s is not None:
            fields += [s.node or "", op.value_node or "", s.module or "", s.location or ""]
        if any(c.search(f) for c in compiled for f in fields if f):
            found.append(op)
    return found


# ---- int8 through ai-edge-quantizer -------------------------------------------------------------------------
def _load_recipe(recipe: Any) -> list[dict[str, Any]]:
    if isinstance(recipe, (str, os.PathLike)) and os.path.exists(recipe):
        with open(recipe) as f:
            recipe = json.load(f)
    if not isinstance(recipe, list) or not all(isinstance(r, dict) for r in recipe):
        raise QuantizationArgumentError("a quantization recipe is ai-edge-quantizer's JSON recipe: a list of "
                                "{regex, operation, algorithm_key, op_config} dicts, or the path of a file holding "
                                f"one; got {type(recipe).__name__}")
    return recipe


def _aeq():
    try:
        from ai_edge_quantizer import qtyping, quantizer, recipe
        from ai_edge_quantizer.algorithm_manager import AlgorithmName
    except ImportError as exc:
        raise QuantizationError("int8 quantization uses ai-edge-quantizer, which is not installed: "
                                "pip install 'litert-torch-direct[quantize]' (or pip install ai-edge-quantizer)"
                                ) from exc
    return qtyping, quantizer, recipe, AlgorithmName


def _run_quantizer(data: bytes, mode: str, recipe_list: list | None, feeds: list | None, signature: str,
                   quantized_io: bool, keep_names: list[str]) -> tuple[bytes, list]:
    qtyping, quantizer, recipes, AlgorithmName = _aeq()
    if recipe_list is None:
        recipe_list = (recipes.dynamic_wi8_afp32() if mode == "dynamic-int8" else recipes.static_wi8_ai8())
    q = quantizer.Quantizer(data, recipe_list)
    if mode == "int8" and not quantized_io:
        for io_op in (qtyping.TFLOperationName.INPUT, qtyping.TFLOperationName.OUTPUT):
            q.update_quantization_recipe(regex=".*", operation_name=io_op, algorithm_key=AlgorithmName.NO_QUANTIZE)
    if keep_names:
        scope = "|".join(f"(^|;){re.escape(n)};" for n in keep_names)
        q.update_quantization_recipe(regex=scope, operation_name=qtyping.TFLOperationName.ALL_SUPPORTED,
                                     algorithm_key=AlgorithmName.NO_QUANTIZE)
    calibration = None
    if q.need_calibration and feeds is None:
        raise CalibrationError("this recipe quantizes activations, so it needs calibration_data")
    try:
        with third_party_output():  # its progress bars, and LiteRT's warning about the interpreter it calibrates in
            if q.need_calibration:
                calibration = q.calibrate({signature: feeds}, num_threads=max(1, min(4, os.cpu_count() or 1)))
            result = q.quantize(calibration, enable_progress_report=False)
    except Exception as exc:  # the quantizer's own failures, with its message
        raise QuantizationError(f"ai-edge-quantizer failed: {type(exc).__name__}: {exc}") from exc
    return bytes(result.quantized_model), q.get_quantization_recipe()


def _aeq_op_names() -> set[str]:
    qtyping = _aeq()[0]
    return set(qtyping.TFLOperationName.__members__)


def _carry_sources(float_graph: ir.Graph, graph: ir.Graph) -> None:
    """Give the quantized graph's ops the sources of the float ops they stand for: by output tensor name, and
    for the QUANTIZE/DEQUANTIZE ops the quantizer inserted, the op they feed (or else the op feeding them)."""
    by_output = {t.name: op for op in float_graph.ops for t in op.outputs}
    for op in graph.ops:  # in order, so that a producer has its source before the ops it feeds look for it
        same = next((by_output[t.name] for t in op.outputs if t.name in by_output), None)
        if same is not None and same.opcode == op.opcode:
            op.source, op.value_node = same.source, same.value_node
    consumers, producers = graph.consumers(), graph.producers()
    for op in graph.ops:
        if op.source is not None:
            continue
        # A (de)quantized copy of a value holds the value of the op producing it; at a graph input, name the
        # op it feeds.
        near = [producers[t] for t in op.inputs if t is not None and t in producers and producers[t].source]
        near += [c for t in op.outputs for c in consumers.get(t, []) if c.source is not None]
        if near:
            op.source, op.value_node = near[0].source, near[0].value_node


def _float_ops(graph: ir.Graph, mode: str, kept: set[str]) -> tuple[int, int, list[FloatOp]]:
    """(ops on quantized data or weights, ops other than QUANTIZE/DEQUANTIZE, the ops left in float that the
    mode would have quantized)."""
    quantized, counted, left = 0, 0, []
    names = _aeq_op_names() if mode == "int8" else set()
    producers = graph.producers()

    def entry(i: int, op: ir.Op, reason: str) -> FloatOp:
        return FloatOp(i, op.opcode, reason, op.source.node if op.source else None,
                       op.source.location if op.source else None)

    for i, op in enumerate(graph.ops):
        if op.opcode in ("QUANTIZE", "DEQUANTIZE"):
            continue
        counted += 1
        tensors = [t for t in (*op.inputs, *op.outputs) if t is not None]
        low = [t for t in tensors if t.dtype in (np.int8, np.uint8, np.int16) or t.quantization is not None
               or (t in producers and producers[t].opcode == "DEQUANTIZE" and producers[t].input(0).is_constant)]
        if low:
            quantized += 1
        out = op.outputs[0] if op.outputs else None
        kept_here = out is not None and out.name in kept
        if mode == "int8" and out is not None and out.dtype == np.float32 and not low:
            reason = ("kept in float (keep_float)" if kept_here else
                      "no int8 kernel in ai-edge-quantizer" if op.opcode not in names else
                      "left in float by the quantizer")
            left.append(entry(i, op, reason))
        elif mode == "dynamic-int8" and op.opcode in WEIGHT_OPS and not low:
            weights = [t for t in op.inputs if t is not None and t.is_constant and t.dtype == np.float32]
            if weights and any(t.size >= FP16_MIN_ELEMENTS for t in weights):
                reason = "kept in float (keep_float)" if kept_here else "weights left in float by the quantizer"
                left.append(entry(i, op, reason))
    return quantized, counted, left


# ---- the entry point ----------------------------------------------------------------------------------------
def quantize_model(edge, mode: str | list | os.PathLike = "int8", *, calibration_data: Iterable[Any] | None = None,
             quantized_io: bool = False, keep_float: Iterable[str] = (), signature: str | None = None) -> EdgeModel:
    """A quantized copy of the float EdgeModel `edge` (see the module docstring for the modes).

    `mode`: "fp16", "dynamic-int8", "int8", or an ai-edge-quantizer recipe (list of dicts or JSON path).
    Raises QuantizationError (CalibrationError for bad calibration data) before anything is written.
    """
    from litert_torch.delegates.plan import PLAN_KEY, TARGETS, plan_for, plans_json
    from litert_torch.flatbuffer.reader import read_metadata, read_model
    from litert_torch.flatbuffer.writer import rewrite_model, serialize
    from litert_torch.runtime.edge_model import EdgeModel

    recipe_list = None
    if not isinstance(mode, str) or mode not in MODES:
        if isinstance(mode, str) and not os.path.exists(mode):
            raise QuantizationArgumentError(f"unknown quantization mode {mode!r}; choose from {list(MODES)} or pass a "
                                    "recipe")
        recipe_list, mode = _load_recipe(mode), "recipe"
    if quantized_io and mode not in ("int8", "recipe"):
        raise QuantizationArgumentError("quantized_io (int8 inputs and outputs) needs full-integer quantization: "
                                "mode='int8'")
    data = edge.flatbuffer
    calibrated = mode == "int8" or (mode == "recipe" and calibration_data is not None)
    if len(edge.signatures) > 1 and (calibrated or keep_float):
        raise QuantizationArgumentError(f"the model has {len(edge.signatures)} signatures; calibration and keep_float "
                                "take models with one (weight-only modes take any number)")
    if QUANTIZATION_KEY in read_metadata(data):
        raise QuantizationArgumentError("this model is already quantized; quantize the float model")
    float_model = read_model(data)
    graph = float_model.subgraphs[0]
    kept_ops = matching_ops(graph, keep_float) if keep_float else []
    if keep_float and not kept_ops:
        raise QuantizationArgumentError(f"keep_float patterns {list(keep_float)} match no op (they are matched against "
                                "PyTorch node names, module paths and source lines: see EdgeModel.source_map)")
    kept_names = {t.name for op in kept_ops for t in op.outputs}
    plan_json = md.read_json(float_model.metadata, PLAN_KEY)
    targets = tuple(plan_json["targets"]) if plan_json and plan_json.get("targets") else TARGETS
    keys = edge._signature_keys()
    key = signature or (DEFAULT_SIGNATURE if DEFAULT_SIGNATURE in keys else keys[0])
    samples = 0

    if mode == "fp16":
        for g in float_model.subgraphs:
            fp16_weights(g, {id(op) for op in kept_ops})
        quantized_model = float_model
        report_recipe: dict[str, str] | list = {
            "fp16": f"float32 constants of {FP16_MIN_ELEMENTS}+ elements as float16 + DEQUANTIZE"}
    else:
        feeds = None
        if calibrated:
            feeds = calibration_feeds(edge, calibration_data, key)
            samples = len(feeds)
        q_bytes, report_recipe = _run_quantizer(data, mode, recipe_list, feeds, key, quantized_io,
                                                sorted(kept_names))
        quantized_model = read_model(q_bytes)
        for float_graph, out_graph in zip(float_model.subgraphs, quantized_model.subgraphs):
            _carry_sources(float_graph, out_graph)
    quantized_count = op_count = 0
    float_ops: list[FloatOp] = []
    for out_graph in quantized_model.subgraphs:
        q, n, left = _float_ops(out_graph, "int8" if mode == "recipe" else mode, kept_names)
        quantized_count, op_count, float_ops = quantized_count + q, op_count + n, float_ops + left
    plans = [plan_for(g, targets) for g in quantized_model.subgraphs]
    per_signature = ({s.key: plans[s.subgraph] for s in quantized_model.signatures}
                     if len(quantized_model.signatures) > 1 else None)
    entries = {  # our entries of the float model (I/O, LLM layout, ...) carried over, the rest recomputed
        **{k: v for k, v in read_metadata(data).items() if k.startswith("litert_torch.")},
        md.SOURCE_MAP_KEY: md.source_map_json(quantized_model),
        PLAN_KEY: plans_json(plans[0], per_signature, plan_json.get("buckets") if plan_json else None),
    }
    if mode == "fp16":
        quantized_model.metadata.update(entries)
        q_bytes, entries = serialize(quantized_model), {}

    def report_entry(size: int) -> dict[str, bytes]:
        report = QuantizationReport(mode, len(data), size, quantized_count, op_count, samples,
                                    "int8" if quantized_io else "float", _jsonable(report_recipe), float_ops)
        return {QUANTIZATION_KEY: report.to_bytes()}

    # One rewrite: the metadata set and, with several signatures, weights the quantizer copied per signature
    # stored once again.
    final = rewrite_model(q_bytes, entries, share_buffers=len(quantized_model.subgraphs) > 1,
                          sized_entries=report_entry)
    from litert_torch.runtime.verify import verify

    try:  # a recipe can ask for weights LiteRT's kernels compute wrongly (int2 in convolutions or in blocks)
        verify(final)
    except ModelFileError as exc:
        raise QuantizationError(f"the quantized model would not run correctly: {exc}") from None
    return EdgeModel(final, num_threads=edge.num_threads, verify=False)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return json.loads(json.dumps(value, default=lambda o: getattr(o, "value", str(o))))
