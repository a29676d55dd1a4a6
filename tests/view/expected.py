"""What each overlay must hold for each op, read from the model's own metadata (delegate plan, source map) and
the validation's layers: the reference the overlay and browser tests compare with."""

from __future__ import annotations

from litert_torch.flatbuffer.reader import read_model

TARGETS = {"cpu": "placement cpu (XNNPACK)", "gpu": "placement gpu (GPU)", "npu": "placement npu (NPU)"}
SOURCE, NODE, ERROR = "PyTorch source line", "PyTorch node", "layer error (relative)"


def expected_values(edge, report=None) -> list[dict[str, object]]:
    """Per op of the main subgraph: {overlay name: value}."""
    ops = read_model(edge.flatbuffer).subgraphs[0].ops
    rows: list[dict[str, object]] = [{} for _ in ops]
    for target, name in TARGETS.items():
        plan = edge.delegate_plan.targets[target]
        reasons = {f.op: f.reason for f in plan.fallbacks}
        for i in range(len(ops)):
            if i in reasons:
                where = "builtin CPU kernels" if target == "cpu" else "CPU"
                rows[i][name] = f"{where}: {reasons[i]}"
            elif len(plan.partitions) > 1:
                part = [n for n, members in enumerate(plan.partitions, 1) if i in members][0]
                rows[i][name] = f"{plan.delegate}, partition {part} of {len(plan.partitions)}"
            else:
                rows[i][name] = plan.delegate
    for i, entry in enumerate(edge.source_map):
        rows[i][SOURCE] = entry["location"]
        node = f"{entry['node']} ({entry['target']}) in {entry['module']}"
        if entry["value_node"] != entry["node"]:
            node += f"; holds the value of {entry['value_node']}"
        rows[i][NODE] = node
    if report is not None:
        for layer in report.layers:
            rows[layer.op_index][ERROR] = layer.relative_error
    return rows


def labels(edge) -> list[str]:
    """The node label Model Explorer gives each op (the builtin's name in lower case)."""
    return [op.opcode.lower() for op in read_model(edge.flatbuffer).subgraphs[0].ops]
