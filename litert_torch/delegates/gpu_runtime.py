"""The delegate plan's GPU column checked against LiteRT's real GPU accelerator.

LiteRT's Python API tells only whether a compiled model is fully accelerated (`is_fully_accelerated()`, which is
also True when the delegate takes none of the ops: measured on one-op models it refuses). The GPU delegate says
more in its log, which it writes to the process's stderr while the model compiles:

    ERROR: Following operations are not supported by GPU delegate:
    GATHER: Only support 1D indices
    7 operations will run on the GPU, and the remaining 7 operations will run on the CPU.

one line per refused op kind and reason, and the counts. `gpu_residency` compiles a model on the GPU (with CPU
fallback) with stderr captured, reads that log, and then finds which ops of each refused kind the delegate
refuses by compiling each of them alone as a one-op model. From those it forms the partitions the way the plan
does (`plan._partitions`); the delegate then takes only the largest of them (`gpu.MAX_PARTITIONS`, measured:
with one op refused in the middle of a chain, its count is the larger side's). When the ops found that way do not
add up to the delegate's own count, `consistent` is False: the delegate then refused something for a reason one
op alone does not show.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field

from litert_torch import ir
from litert_torch.delegates import gpu
from litert_torch.delegates.plan import _partitions, taken_partitions
from litert_torch.flatbuffer.reader import read_model
from litert_torch.flatbuffer.writer import serialize
from litert_torch.runtime.accelerated import AcceleratorUnavailable, GpuDeviceMissing
from litert_torch.runtime import gpu_device

_HEADER = "Following operations are not supported by GPU delegate:"
_COUNTS = re.compile(r"(\d+) operations will run on the GPU, and the remaining (\d+) operations will run on the CPU")
_NONE = "No operations will run on the GPU"
_REFUSAL = re.compile(r"^([A-Z][A-Z0-9_]*): (.*)$")


@dataclass
class GpuResidency:
    """Where LiteRT's GPU accelerator places a model's main subgraph."""

    fully_accelerated: bool  # LiteRT's own verdict (CompiledModel.is_fully_accelerated)
    ops: int
    delegated_ops: int  # the delegate's count from its log (every op when it logs no refusal)
    refusals: dict[str, list[str]] = field(default_factory=dict)  # op kind -> the delegate's reasons, its words
    refused_ops: list[int] = field(default_factory=list)  # op indices the delegate refuses (one-op checks)
    partitions: list[list[int]] = field(default_factory=list)  # the GPU-capable partitions formed from those
    gpu_ops: list[int] = field(default_factory=list)  # the ops of the partition(s) the delegate takes
    device: str = ""  # the Vulkan device kind gpu_device.prepare found ("driver", "swiftshader", ...)

    @property
    def cpu_ops(self) -> list[int]:
        """The ops left to the CPU: refused ones and those outside the partition the delegate takes."""
        taken = set(self.gpu_ops)
        return [i for i in range(self.ops) if i not in taken]

    @property
    def consistent(self) -> bool:
        """The one-op checks and the partition rule account for exactly the ops the delegate's log counts."""
        return len(self.gpu_ops) == self.delegated_ops


@contextlib.contextmanager
def _captured_stderr(into: list[str]):
    """The process's file descriptor 2 (where LiteRT's C++ logs go) written to a file while the block runs."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            into.append(sink.read().decode("utf-8", "replace"))


def _compile(flatbuffer: bytes) -> tuple[bool, str]:
    """(fully accelerated, the delegate's log) for `flatbuffer` on the GPU with CPU fallback."""
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator

    log: list[str] = []
    try:
        with _captured_stderr(log):
            compiled = CompiledModel.from_buffer(flatbuffer, HardwareAccelerator.GPU | HardwareAccelerator.CPU)
            full = compiled.is_fully_accelerated()
    except RuntimeError as exc:  # LiteRT reports a missing device or a failed compile as a RuntimeError
        detail = " ".join(str(exc).split())[:300]
        raise AcceleratorUnavailable(f"LiteRT's GPU accelerator could not compile this model ({detail})") from exc
    return full, "".join(log)


def parse_log(log: str) -> tuple[dict[str, list[str]], tuple[int, int | None] | None]:
    """The GPU delegate's refusals (op kind -> reasons) and (ops on the GPU, ops on the CPU) from its log; the
    counts are None when it logged none (it logs them only when it refuses something)."""
    refusals: dict[str, list[str]] = {}
    counts: tuple[int, int | None] | None = None
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if not line.endswith(_HEADER):
            continue
        for entry in lines[i + 1:]:
            found = _COUNTS.search(entry)
            if found:
                counts = (int(found.group(1)), int(found.group(2)))
                break
            if _NONE in entry:
                counts = (0, None)
                break
            refusal = _REFUSAL.match(entry.strip())
            if refusal:
                refusals.setdefault(refusal.group(1), []).append(refusal.group(2).strip())
    return refusals, counts


def _one_op_model(op: ir.Op) -> bytes:
    inputs = [t for t in op.inputs if t is not None and not t.is_constant]
    graph = ir.Graph("main", inputs, list(op.outputs), [op])
    return serialize(ir.Model([graph], [ir.Signature("serving_default", 0, [f"in{i}" for i in range(len(inputs))],
                                                     [f"out{i}" for i in range(len(op.outputs))])]))


def gpu_residency(flatbuffer: bytes, *, per_op: bool = True) -> GpuResidency:
    """Run `flatbuffer` through LiteRT's GPU accelerator and report where its main subgraph's ops run.

    `per_op=False` skips the one-op checks (refused_ops, partitions and gpu_ops then stay empty when anything
    is refused). Raises GpuDeviceMissing when this machine has no Vulkan device, AcceleratorUnavailable when LiteRT
    cannot compile the model on the GPU at all."""
    device = gpu_device.prepare()
    missing = gpu_device.missing_device_message(device)
    if missing:
        raise GpuDeviceMissing(missing)
    graph = read_model(flatbuffer).subgraphs[0]
    full, log = _compile(flatbuffer)
    refusals, counts = parse_log(log)
    ops = len(graph.ops)
    if counts is None:
        delegated = ops if full else 0
    else:
        delegated = counts[0]
    refused: list[int] = []
    if refusals and per_op:
        for index, op in enumerate(graph.ops):
            # The log, not is_fully_accelerated(): LiteRT calls a model fully accelerated when the delegate
            # takes none of its ops ("No operations will run on the GPU").
            if op.opcode in refusals and parse_log(_compile(_one_op_model(op))[1])[0]:
                refused.append(index)
    if refusals and not per_op:
        return GpuResidency(full, ops, delegated, refusals, device=device.kind)
    partitions = _partitions(graph, [i not in set(refused) for i in range(ops)])
    gpu_ops = sorted(i for p in taken_partitions(partitions, gpu.MAX_PARTITIONS) for i in p)
    return GpuResidency(full, ops, delegated, refusals, refused, partitions, gpu_ops, device.kind)
