"""`convert`: PyTorch module -> EdgeModel, the whole path in one place.

    export (torch.export + our decompositions) -> lower (ATen -> IR) -> passes -> metadata -> flatbuffer
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

from litert_torch import ir, metadata
from litert_torch.structure import portable_spec_json
from litert_torch.delegates.plan import PLAN_KEY, check_targets, plan_for, with_before
from litert_torch.flatbuffer.writer import serialize
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
    progress: Callable[[str], None] | None = None,
) -> EdgeModel:
    """Convert `module` to a LiteRT model traced with `sample_args` / `sample_kwargs`.

    `module` may also be a torch.export.ExportedProgram (its own example inputs are then used).
    `target`: the delegate targets ("cpu", "gpu", "npu") whose plan is computed and stored in the model's
    metadata (`EdgeModel.delegate_plan`): which ops each delegate takes, why not the others, the partitions.
    The graph is then rewritten where an equivalent form suits a requested target better (a rank-3 transpose
    for a rank-5 one, a broadcasting MUL for BROADCAST_TO, an unrolled LSTM for the GPU and NPU: see
    `passes/delegate_rewrites.py`); the plan records the residency before and after.
    `progress`, when given, is called with the name of each stage as it starts ("export", "lower",
    "optimize", "write").

    Raises `ExportError` when torch.export cannot trace the model, `UnsupportedOpsError` (listing every
    unsupported op with its source line) when the graph has ops without lowerings, and `ConversionError` for
    anything else that stops the conversion. Nothing is written to disk; call `EdgeModel.export(path)`.

    `channel_last_io=True` makes rank-4 (image) inputs and outputs NHWC in the model and in EdgeModel calls
    (the model then needs no TRANSPOSE at its edges); other inputs and outputs are unchanged.
    """
    if not isinstance(sample_args, tuple):
        sample_args = (sample_args,)
    targets = (target,) if isinstance(target, str) else tuple(target)
    check_targets(targets)
    report = progress or (lambda stage: None)
    timings = {}
    start = time.perf_counter()
    report("export")
    program = export_module(module, sample_args, sample_kwargs)
    timings["export"] = time.perf_counter() - start

    start = time.perf_counter()
    report("lower")
    lowered = lower_program(program)
    report("optimize")
    nhwc_inputs, nhwc_outputs = channel_last_io_pass.apply(lowered.graph) if channel_last_io else ([], [])
    run_pipeline(lowered.graph)
    plan = delegate_aware(lowered.graph, targets)
    report("write")
    model = ir.Model(
        [lowered.graph],
        [ir.Signature(DEFAULT_SIGNATURE, 0, lowered.input_names, lowered.output_names)],
    )
    model.metadata[metadata.SOURCE_MAP_KEY] = metadata.source_map_json(model)
    model.metadata[PLAN_KEY] = plan.to_bytes()
    model.metadata[metadata.IO_KEY] = metadata.io_json({
        DEFAULT_SIGNATURE: {
            "inputs": lowered.input_names,
            "outputs": lowered.output_names,
            "in_spec": portable_spec_json(program.call_spec.in_spec),
            "out_spec": portable_spec_json(program.call_spec.out_spec),
            "tensor_input_positions": lowered.tensor_input_positions,
            "input_dtypes": lowered.input_dtypes,
            "output_dtypes": lowered.output_dtypes,
            "channel_last_inputs": [lowered.input_names[i] for i in nhwc_inputs],
            "channel_last_outputs": [lowered.output_names[i] for i in nhwc_outputs],
        }
    })
    data = serialize(model)
    timings["lower_and_write"] = time.perf_counter() - start
    log.info("converted %s: %d ops, %d bytes (export %.2fs, lower+write %.2fs)", type(module).__name__,
             len(lowered.graph.ops), len(data), timings["export"], timings["lower_and_write"])
    return EdgeModel(data, num_threads=num_threads)


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
