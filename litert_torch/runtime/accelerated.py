"""Running through LiteRT's CompiledModel on a chosen hardware accelerator (cpu, gpu, npu).

The runner has the signature runner's calling convention (keyword arrays in, a dict of arrays out), so
EdgeModel uses either. Asking for an accelerator this machine does not have raises AcceleratorUnavailable
with LiteRT's reason, instead of failing somewhere inside the runtime. Before the GPU accelerator loads, a
Vulkan device is made visible to it (`gpu_device.prepare`: SwiftShader where no GPU driver is installed); with
none at all, GpuDeviceMissing says what to install.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np

from litert_torch.errors import InvalidArgumentError, LiteRTTorchError

ACCELERATORS = ("cpu", "gpu", "npu")


class AcceleratorUnavailable(LiteRTTorchError):
    """The requested hardware accelerator cannot run this model on this machine."""


class GpuDeviceMissing(AcceleratorUnavailable):
    """No Vulkan device for LiteRT's GPU accelerator: neither a GPU driver nor SwiftShader is installed."""


class CompiledRunner:
    """One signature of a CompiledModel, called like an interpreter's signature runner."""

    def __init__(self, compiled: Any, key: str):
        self._compiled, self._key = compiled, key
        self._inputs = compiled.get_input_tensor_details(key)
        self._outputs = compiled.get_output_tensor_details(key)

    def get_input_details(self) -> dict[str, dict]:
        return {n: {"shape": np.array(d["shape"]), "dtype": np.dtype(d["dtype"])} for n, d in self._inputs.items()}

    def get_output_details(self) -> dict[str, dict]:
        return {n: {"shape": np.array(d["shape"]), "dtype": np.dtype(d["dtype"])} for n, d in self._outputs.items()}

    def __call__(self, **feeds: np.ndarray) -> dict[str, np.ndarray]:
        inputs = {n: self._compiled.create_input_buffer_by_name(self._key, n) for n in self._inputs}
        outputs = {n: self._compiled.create_output_buffer_by_name(self._key, n) for n in self._outputs}
        for name, buffer in inputs.items():
            buffer.write(np.ascontiguousarray(feeds[name]))
        self._compiled.run_by_name(self._key, inputs, outputs)
        results = {}
        for name, buffer in outputs.items():
            detail = self._outputs[name]
            shape = [int(d) for d in detail["shape"]]
            results[name] = buffer.read(int(np.prod(shape, dtype=np.int64)), np.dtype(detail["dtype"])).reshape(shape)
        return results


def check_accelerator(accelerator: str) -> None:
    if accelerator not in ACCELERATORS:
        raise InvalidArgumentError(f"accelerator must be one of {ACCELERATORS}, got {accelerator!r}")


def compile_for(flatbuffer: bytes | mmap.mmap, accelerator: str, hardware: tuple[Any, bool] | None = None) -> Any:
    """A CompiledModel of `flatbuffer` on `accelerator` only (no silent CPU fallback), or, with `hardware`
    ((LiteRT HardwareAccelerator flags or None, require_fully_accelerated), as EdgeModel.use_compiled_runtime
    takes them), on those flags."""
    check_accelerator(accelerator)
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator

    kind = {"cpu": HardwareAccelerator.CPU, "gpu": HardwareAccelerator.GPU, "npu": HardwareAccelerator.NPU}
    flags, require_full = (kind[accelerator], accelerator != "cpu") if hardware is None else hardware
    where = accelerator.upper() if hardware is None else str(flags)
    from litert_torch import logs

    logs.apply_native()
    device = None
    if flags is not None and flags & HardwareAccelerator.GPU:
        from litert_torch.runtime import gpu_device

        device = gpu_device.prepare()
    try:
        compiled = (CompiledModel.from_buffer(flatbuffer) if flags is None
                    else CompiledModel.from_buffer(flatbuffer, flags))
    except Exception as exc:  # LiteRT reports a missing device or an unsupported op as a RuntimeError
        detail = " ".join(str(exc).split())[:300]
        missing = device is not None and gpu_device.missing_device_message(device)
        if missing:
            raise GpuDeviceMissing(f"{missing} (LiteRT: {detail})") from exc
        raise AcceleratorUnavailable(
            f"LiteRT could not run this model on the {where} here ({detail}); the delegate plan "
            f"(EdgeModel.delegate_plan) shows which ops each accelerator takes, and accelerator='cpu' "
            "runs the model on this machine") from exc
    if require_full and not compiled.is_fully_accelerated():
        raise AcceleratorUnavailable(f"the {where} takes only part of this model")
    return compiled
