"""Our metadata as Model Explorer node-data overlays: one overlay per delegate target (where each op runs and,
when it stays on the CPU, why), the PyTorch source line and node of each op, and after a validation the
per-layer error.

Each overlay is one node-data file in Model Explorer's format (`{graph id: {"results": {node key: {"value":
..., "bgColor": ...}}, ...}}`, the `ModelNodeData` of its `node_data_builder`), built here from the model's bytes
with our own reader; nothing in this module needs Model Explorer installed.

Keys, as Model Explorer's TFLite adapter names the graph (checked against the adapter in
`litert_torch.explorer.graph` and in tests/view): a subgraph is the graph named after the subgraph, or "main" for
an unnamed first subgraph and "subgraph_<i>" for an unnamed later one; op i of a subgraph is the node with id
"<i>". The web app resolves a key first as an output tensor name and only then as a node id, so an op whose id
equals some tensor's name is keyed by its own output tensor's name instead.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from ai_edge_litert import schema_py_generated as schema

from litert_torch import ir
from litert_torch.delegates.plan import CHECKS, PLAN_KEY, DelegatePlan, TargetPlan, plan_target
from litert_torch.errors import InvalidArgumentError
from litert_torch.flatbuffer.reader import read_model
from litert_torch.metadata import read_json

DELEGATED, FALLBACK, NO_ORIGIN = "#a5d6a7", "#ffab91", "#e0e0e0"
PASSED, FAILED = "#a5d6a7", "#ef9a9a"


@dataclass
class Overlay:
    """One node-data overlay: its name in the viewer, a file stem, and its data per graph id."""

    name: str
    stem: str
    graphs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The node-data file's content (Model Explorer's ModelNodeData JSON)."""
        return self.graphs

    def values(self, graph_id: str) -> dict[str, Any]:
        """{node key: value} of one graph."""
        return {key: result["value"] for key, result in self.graphs.get(graph_id, {}).get("results", {}).items()}


def graph_ids(data: bytes) -> list[str]:
    """The graph id Model Explorer's TFLite adapter gives each subgraph, in subgraph order."""
    model = schema.Model.GetRootAs(data, 0)
    ids = []
    for i in range(model.SubgraphsLength()):
        raw = model.Subgraphs(i).Name()
        name = raw.decode("utf-8", "replace") if raw else ""
        ids.append(name or ("main" if i == 0 else f"subgraph_{i}"))
    return ids


def node_keys(graph: ir.Graph) -> list[str]:
    """The node-data key of each op of `graph`: its node id, or its output tensor's name where a tensor of
    another op is named like that id (the web app would give the value to that tensor's node)."""
    producer: dict[str, int] = {}
    for i, op in enumerate(graph.ops):
        for t in op.outputs:
            producer.setdefault(t.name, i)
    names = {t.name for t in graph.tensors()}
    keys = []
    for i, op in enumerate(graph.ops):
        key = str(i)
        if key in names and producer.get(key) != i:
            own = [t.name for t in op.outputs if producer.get(t.name) == i]
            key = own[0] if own else key
        keys.append(key)
    return keys


def expected_label(op: ir.Op) -> str | None:
    """The label the adapter gives an op's node: the builtin's name in lower case, or a custom op's code."""
    if op.opcode.startswith("CUSTOM:"):
        return op.opcode[len("CUSTOM:"):]
    return None if op.opcode.startswith("BUILTIN_") else op.opcode.lower()


def _plans(model: ir.Model, metadata: dict[str, bytes]) -> list[DelegatePlan]:
    """A DelegatePlan per subgraph: the plan stored in the model for the signature that runs it, or our rule
    tables' plan where none is stored (a file we did not write, a subgraph no signature runs) or where the
    stored one does not describe the subgraph's ops."""
    stored = read_json(metadata, PLAN_KEY) or {}
    per_signature = stored.get("signatures") or {}
    stored_targets: dict[int, Any] = {}
    for signature in model.signatures:
        targets = per_signature.get(signature.key) if per_signature else stored.get("targets")
        stored_targets.setdefault(signature.subgraph, targets)
    if not model.signatures and not per_signature:
        stored_targets[0] = stored.get("targets")
    plans = []
    for index, graph in enumerate(model.subgraphs):
        try:
            plan = DelegatePlan.from_json({"targets": stored_targets.get(index) or {}})
        except (KeyError, TypeError, ValueError, AttributeError):
            plan = DelegatePlan({})
        for target in CHECKS:
            found = plan.targets.get(target)
            if found is None or found.ops != len(graph.ops):
                plan.targets[target] = plan_target(graph, target)
        plans.append(plan)
    return plans


def _placement(plan: TargetPlan, op_index: int) -> tuple[str, str]:
    """(value, colour) of one op in one target's plan."""
    reasons = {f.op: f.reason for f in plan.fallbacks}
    if op_index in reasons:
        where = "builtin CPU kernels" if plan.target == "cpu" else "CPU"
        return f"{where}: {reasons[op_index]}", FALLBACK
    value = plan.delegate
    if len(plan.partitions) > 1:
        part = next((n for n, members in enumerate(plan.partitions, 1) if op_index in members), None)
        if part is not None:
            value += f", partition {part} of {len(plan.partitions)}"
    return value, DELEGATED


def _source_texts(op: ir.Op) -> tuple[str, str]:
    """(source line, PyTorch node) of one op, or what says it has none."""
    s = op.source
    if s is None:
        return "no PyTorch origin", "no PyTorch origin"
    node = f"{s.node} ({s.target})"
    if s.module:
        node += f" in {s.module}"
    if op.value_node and op.value_node != s.node:
        node += f"; holds the value of {op.value_node}"
    return s.location or "unknown source line", node


def overlays(data: bytes, metadata: dict[str, bytes] | None = None, layers: Iterable[Any] | None = None,
             model: ir.Model | None = None) -> list[Overlay]:
    """The overlays of the model in `data` (metadata: its `Model.metadata`, read from `data` when not given):
    placement per delegate target, PyTorch source line and node, and, with `layers` (the `LayerError`s of a
    validation of this model, `ValidationReport.layers`), the per-layer relative error of the ops compared."""
    model = model or read_model(data)
    metadata = model.metadata if metadata is None else metadata
    ids = graph_ids(data)
    plans = _plans(model, metadata)
    targets = {t: Overlay(f"placement {t} ({CHECKS[t][0]})", f"placement-{t}") for t in CHECKS}
    source = Overlay("PyTorch source line", "source-line")
    node = Overlay("PyTorch node", "pytorch-node")
    for index, graph in enumerate(model.subgraphs):
        keys = node_keys(graph)
        line_results, node_results = {}, {}
        for op, key in zip(graph.ops, keys):
            line, who = _source_texts(op)
            colour = NO_ORIGIN if op.source is None else None
            line_results[key] = _result(line, colour)
            node_results[key] = _result(who, colour)
        # Text overlays: no min/max/sum columns in the side panel's tables.
        text = {"hideInAggregatedStatsTable": True, "hideInChildrenStatsTable": True}
        source.graphs[ids[index]] = {"results": line_results, **text}
        node.graphs[ids[index]] = {"results": node_results, **text}
        for target, overlay in targets.items():
            results = {}
            for i, key in enumerate(keys):
                value, colour = _placement(plans[index].targets[target], i)
                results[key] = _result(value, colour)
            # a collapsed layer shows how many of its ops land where
            overlay.graphs[ids[index]] = {"results": results, "hideInAggregatedStatsTable": True,
                                          "showExpandedSummaryOnGroupNode": True}
    # The viewer shows the last overlay it loads: the GPU placement, or the layer error after a validation.
    found = [source, node, targets["cpu"], targets["npu"], targets["gpu"]]
    if layers is not None:
        found.append(layer_error_overlay(model, ids[0], node_keys(model.subgraphs[0]), list(layers)))
    return found


def layer_error_overlay(model: ir.Model, graph_id: str, keys: list[str], layers: list[Any]) -> Overlay:
    """The per-layer relative error (max |edge - PyTorch| / max |PyTorch| of the node an op's output holds, on
    the reference kernels): green where the node is within the tolerance, red where it departs."""
    if not layers:
        raise InvalidArgumentError("the validation holds no per-layer errors: validate with per_layer=True "
                                   "(litert_torch.validate(module, sample_args, edge, per_layer=True))")
    ops = model.subgraphs[0].ops
    results = {}
    for layer in layers:
        i = layer.op_index
        if not 0 <= i < len(ops) or ops[i].opcode != layer.opcode:
            here = ops[i].opcode if 0 <= i < len(ops) else "nothing"
            raise InvalidArgumentError(f"the validation's layer {layer.node!r} ({layer.opcode} at op {i}) does not "
                                       f"match this model (op {i} is {here}): give the validation of this model")
        error = float(layer.relative_error)
        # NaN and infinity have no JSON form: the viewer gets them as text
        results[keys[i]] = _result(error if math.isfinite(error) else str(error), PASSED if layer.passed else FAILED)
    return Overlay("layer error (relative)", "layer-error", {graph_id: {"results": results}})


def layers_of(report: Any) -> list[Any] | None:
    """The LayerErrors of `report` (a ValidationReport, or its `layers`), None without one."""
    if report is None:
        return None
    layers = getattr(report, "layers", report)
    try:
        layers = list(layers)
    except TypeError:
        layers = None
    if layers is None or any(not all(hasattr(x, a) for a in ("op_index", "opcode", "relative_error", "passed"))
                             for x in layers):
        raise InvalidArgumentError(f"report must be a ValidationReport or its layers (LayerError), got "
                                   f"{type(report).__name__}")
    return layers


def _result(value: Any, colour: str | None) -> dict[str, Any]:
    return {"value": value} if colour is None else {"value": value, "bgColor": colour}


def safe_stem(text: str) -> str:
    """A file-name stem from a model's file name."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "model"
    return stem[:80]
