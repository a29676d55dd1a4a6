"""NPU ahead-of-time compilation through ai_edge_litert.aot.

    compiled = litert_torch.aot_compile(edge, "qualcomm:SM8650")   # -> bytes of the NPU-compiled .tflite

Each vendor's compiler ships in a vendor SDK package (the Qualcomm, MediaTek and Google Tensor SDKs for
ai-edge-litert). Where it is missing the call fails with AotCompileError naming the package to install.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import tempfile
from typing import TYPE_CHECKING, Any

from litert_torch.errors import LiteRTTorchError

if TYPE_CHECKING:
    from ai_edge_litert.aot.core import aot_types

    from litert_torch.runtime.edge_model import EdgeModel

# vendor -> (target module in ai_edge_litert.aot, SDK import name, SDK distribution)
VENDORS = {
    "qualcomm": ("ai_edge_litert.aot.vendors.qualcomm.target", "ai_edge_litert_sdk_qualcomm",
                 "ai-edge-litert-sdk-qualcomm"),
    "mediatek": ("ai_edge_litert.aot.vendors.mediatek.target", "ai_edge_litert_sdk_mediatek",
                 "ai-edge-litert-sdk-mediatek"),
    "google_tensor": ("ai_edge_litert.aot.vendors.google_tensor.target", "ai_edge_litert_sdk_google_tensor",
                      "ai-edge-litert-sdk-google-tensor"),
}


class AotCompileError(LiteRTTorchError):
    """The NPU compile could not run (unknown target, missing vendor SDK) or the vendor compiler failed."""


def parse_target(spec: str) -> tuple[str, aot_types.Target]:
    """'qualcomm:SM8650' -> the ai_edge_litert.aot Target object."""
    vendor, _, soc = spec.partition(":")
    vendor = vendor.strip().lower().replace("-", "_")
    if vendor not in VENDORS or not soc:
        raise AotCompileError(f"unknown NPU target {spec!r}: use VENDOR:SOC with VENDOR one of "
                              f"{', '.join(VENDORS)} (e.g. qualcomm:SM8650)")
    module = importlib.import_module(VENDORS[vendor][0])
    socs = [m.value for m in module.SocModel]
    if soc.upper() not in socs:
        raise AotCompileError(f"unknown {vendor} SoC {soc!r}; known: {', '.join(s for s in socs if s != 'ALL')}")
    return vendor, module.Target(module.SocModel(soc.upper()))


def aot_compile(edge_model, target: str) -> bytes:
    """The model compiled for one NPU (`VENDOR:SOC`), as .tflite bytes with the vendor's compiled partitions."""
    vendor, aot_target = parse_target(target)
    _, sdk_module, sdk_package = VENDORS[vendor]
    if importlib.util.find_spec(sdk_module) is None:
        raise AotCompileError(
            f"compiling for {target} needs the {vendor} NPU SDK, which is not installed: pip install {sdk_package} "
            "(it brings the vendor's compiler libraries; it is published for the platforms the vendor supports)")
    from ai_edge_litert.aot import aot_compile as aot

    with tempfile.TemporaryDirectory(prefix="litert_aot_") as work:
        source = os.path.join(work, "model.tflite")
        edge_model.export(source)
        try:
            result = aot.aot_compile(source, output_dir=work, target=aot_target, keep_going=False)
        except Exception as exc:  # the vendor compiler's own error, kept whole
            raise AotCompileError(f"the {vendor} compiler failed for {target}: {type(exc).__name__}: {exc}") from exc
        models = getattr(result, "models_with_backend", None) or []
        for _, model in models:
            data = getattr(model, "model_bytes", None)
            if data:
                return bytes(data)
        failed = getattr(result, "failed_backends", None)
        raise AotCompileError(f"the {vendor} compiler produced no model for {target}" +
                              (f": {failed}" if failed else ""))


def compilation_config(target: Any, config: dict) -> aot_types.CompilationConfig:
    """An ai_edge_litert.aot CompilationConfig for `target` (an aot Target, a "VENDOR:SOC" string, a
    CompilationConfig, or None for every target ai_edge_litert has registered) with `config`'s options."""
    types = _aot_types()
    if isinstance(target, types.CompilationConfig):
        if config:
            raise AotCompileError("options go into the CompilationConfig itself when one is given")
        return target
    if target is None:
        from ai_edge_litert.aot.vendors import import_vendor

        target = import_vendor.AllRegisteredTarget()
    elif isinstance(target, str):
        target = parse_target(target)[1]
    if not isinstance(target, types.Target):
        raise AotCompileError(f"a compilation target is an ai_edge_litert.aot Target or 'VENDOR:SOC', got "
                              f"{type(target).__name__}")
    return types.CompilationConfig(target=target, **config)


def compile_configs(edge_model: EdgeModel, configs: list) -> aot_types.CompilationResult:
    """ai_edge_litert's CompilationResult of the model compiled for each CompilationConfig (what the official
    litert-torch's `experimental_add_compilation_backend(...).convert(...)` returns)."""
    from ai_edge_litert.aot import aot_compile as aot

    model = _aot_types().Model.create_from_bytes(edge_model.flatbuffer)
    try:
        return aot.aot_compile(model, config=configs)
    except Exception as exc:  # the vendor compiler's own error, kept whole
        raise AotCompileError(f"ahead-of-time compilation failed: {type(exc).__name__}: {exc}") from exc


def _aot_types():
    try:
        from ai_edge_litert.aot.core import aot_types
    except ImportError:  # older ai-edge-litert
        from ai_edge_litert.aot.core import types as aot_types
    return aot_types
