"""`PT2EQuantizer`: a torchao PT2E quantizer that places int8 quantize/dequantize points where LiteRT's int8
kernels want them (the official litert-torch's class and config function, written for this converter).

Static configs quantize the inputs and outputs of convolutions, linear layers, additions, multiplications,
pooling and means to int8 (per tensor, asymmetric), and the weights of convolutions and linear layers to
int8 (symmetric, per tensor or per output channel); an activation function right after a convolution or linear
layer or an addition shares its output quantization (the fused form). Dynamic configs (`is_dynamic=True`) place nothing in the
graph: `convert(..., quant_config=QuantConfig(pt2e_quantizer=q))` then quantizes the weights to int8 per
channel, activations staying float (LiteRT's dynamic-range kernels).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

try:
    from torchao.quantization.pt2e import (
        FusedMovingAvgObsFakeQuantize, HistogramObserver, MinMaxObserver, MovingAverageMinMaxObserver,
        MovingAveragePerChannelMinMaxObserver, PerChannelMinMaxObserver,
    )
    from torchao.quantization.pt2e.quantizer import (
        QuantizationAnnotation, QuantizationSpec, Quantizer, SharedQuantizationSpec,
    )
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("litert_torch.quantize.pt2e_quantizer needs torchao (pip install torchao, or the "
                      "litert-torch-direct[pt2e] extra)") from exc

aten = torch.ops.aten


@dataclass(frozen=True)
class QuantizationConfig:
    """Where each kind of value is quantized: `input_activation` / `output_activation` / `weight` specs (None
    leaves that kind float)."""

    input_activation: QuantizationSpec | None
    output_activation: QuantizationSpec | None
    weight: QuantizationSpec | None
    bias: QuantizationSpec | None
    is_qat: bool
    is_dynamic: bool


def get_symmetric_quantization_config(is_per_channel: bool = False, is_qat: bool = False,
                                      is_dynamic: bool = False) -> QuantizationConfig:
    """int8 activations (per tensor, asymmetric, histogram-calibrated; fake-quantized in QAT) and int8 symmetric
    weights in [-127, 127], per output channel when `is_per_channel`."""
    if is_qat and is_dynamic:
        raise NotImplementedError("dynamic quantization for QAT is not implemented")
    act_observer = FusedMovingAvgObsFakeQuantize if is_qat else HistogramObserver
    activation = QuantizationSpec(dtype=torch.int8, quant_min=-128, quant_max=127, qscheme=torch.per_tensor_affine,
                                  is_dynamic=False, observer_or_fake_quant_ctr=act_observer.with_args(eps=2**-12))
    extra: dict[str, Any] = {"eps": 2**-12}
    if is_qat:
        weight_observer = FusedMovingAvgObsFakeQuantize
        extra["observer"] = MovingAveragePerChannelMinMaxObserver if is_per_channel else MovingAverageMinMaxObserver
    else:
        weight_observer = PerChannelMinMaxObserver if is_per_channel else MinMaxObserver
    weight = QuantizationSpec(dtype=torch.int8, quant_min=-127, quant_max=127,
                              qscheme=torch.per_channel_symmetric if is_per_channel else torch.per_tensor_symmetric,
                              ch_axis=0, is_dynamic=False, observer_or_fake_quant_ctr=weight_observer.with_args(**extra))
    if is_dynamic:
        return QuantizationConfig(None, None, weight, None, is_qat, True)
    return QuantizationConfig(activation, activation, weight, None, is_qat, False)


# op -> positions of its activation inputs; weighted ops also take their weight at position 1
_WEIGHTED = {aten.conv1d.default, aten.conv2d.default, aten.conv3d.default, aten.linear.default,
             aten.conv_transpose1d.default, aten.conv_transpose2d.input}
_ACTIVATIONS = {aten.relu.default, aten.relu_.default, aten.hardtanh.default, aten.hardtanh_.default,
                aten.relu6.default}
_BINARY = {aten.add.Tensor, aten.add_.Tensor, aten.mul.Tensor, aten.mul_.Tensor}
_SHARED = {aten.max_pool2d.default}
_UNARY = {aten.avg_pool2d.default, aten.adaptive_avg_pool2d.default, aten.mean.dim, aten.mean.default}


class PT2EQuantizer(Quantizer):
    """quantizer = PT2EQuantizer().set_global(get_symmetric_quantization_config()), optionally narrowed with
    set_module_type(nn.Linear, config) / set_module_name("head", None) (None: keep float)."""

    def __init__(self):
        super().__init__()
        self.global_config: QuantizationConfig | None = None
        self.operator_type_config: dict[Any, QuantizationConfig | None] = {}
        self.module_type_config: dict[type, QuantizationConfig | None] = {}
        self.module_name_config: dict[str, QuantizationConfig | None] = {}

    def set_global(self, config: QuantizationConfig | None) -> "PT2EQuantizer":
        self.global_config = config
        return self

    def set_operator_type(self, operator_type: Any, config: QuantizationConfig | None) -> "PT2EQuantizer":
        self.operator_type_config[operator_type] = config
        return self

    def set_module_type(self, module_type: type, config: QuantizationConfig | None) -> "PT2EQuantizer":
        self.module_type_config[module_type] = config
        return self

    def set_module_name(self, module_name: str, config: QuantizationConfig | None) -> "PT2EQuantizer":
        self.module_name_config[module_name] = config
        return self

    def transform_for_annotation(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        return model

    def validate(self, model: torch.fx.GraphModule) -> None:
        pass

    def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        for node in model.graph.nodes:
            if node.op != "call_function" or "quantization_annotation" in node.meta:
                continue
            config = self._config_for(node)
            if config is None or config.is_dynamic:
                continue  # dynamic: convert(quant_config=...) quantizes the weights of the converted model
            if node.target in _WEIGHTED:
                self._annotate_weighted(node, config)
            elif node.target in _BINARY and all(isinstance(a, torch.fx.Node) for a in node.args[:2]):
                self._annotate_fusing(node, {a: config.input_activation for a in node.args[:2]}, config)
            elif node.target in _SHARED and isinstance(node.args[0], torch.fx.Node):
                # pooling keeps its input's quantization (LiteRT's int8 pools need the same scale in and out)
                _annotate(node, {node.args[0]: config.input_activation}, SharedQuantizationSpec((node.args[0], node)))
            elif node.target in _UNARY and isinstance(node.args[0], torch.fx.Node):
                _annotate(node, {node.args[0]: config.input_activation}, config.output_activation)
        return model

    def _annotate_weighted(self, node: torch.fx.Node, config: QuantizationConfig) -> None:
        inputs = {node.args[0]: config.input_activation}
        if isinstance(node.args[1], torch.fx.Node) and config.weight is not None:
            inputs[node.args[1]] = config.weight
        self._annotate_fusing(node, inputs, config)

    def _annotate_fusing(self, node: torch.fx.Node, inputs: dict, config: QuantizationConfig) -> None:
        """Annotate `node`; an activation that is its only use takes the output quantization (the fused form)."""
        users = list(node.users)
        fused = users[0] if len(users) == 1 and users[0].target in _ACTIVATIONS else None
        _annotate(node, inputs, None if fused is not None else config.output_activation)
        if fused is not None and "quantization_annotation" not in fused.meta:
            _annotate(fused, {}, config.output_activation)

    def _config_for(self, node: torch.fx.Node) -> QuantizationConfig | None:
        stack = list((node.meta.get("nn_module_stack") or {}).values())
        for path, _ in reversed(stack):
            name = _module_name(path)
            if name in self.module_name_config:
                return self.module_name_config[name]
        for _, module_type in reversed(stack):
            for cls, config in self.module_type_config.items():
                if module_type is cls or _type_name(module_type) == f"{cls.__module__}.{cls.__qualname__}":
                    return config
        if node.target in self.operator_type_config:
            return self.operator_type_config[node.target]
        return self.global_config

    @classmethod
    def get_supported_operators(cls) -> list:
        return sorted({str(t) for t in _WEIGHTED | _BINARY | _SHARED | _UNARY | _ACTIVATIONS})


def _annotate(node: torch.fx.Node, inputs: dict, output: QuantizationSpec | None) -> None:
    inputs = {n: spec for n, spec in inputs.items() if spec is not None}
    node.meta["quantization_annotation"] = QuantizationAnnotation(input_qspec_map=inputs, output_qspec=output,
                                                                  _annotated=True)


def _module_name(path: str) -> str:
    """'L__self___layer1_0_conv1' or 'layer1.0.conv1' -> 'layer1.0.conv1'."""
    return path.removeprefix("L['self'].").removeprefix("L__self___")


def _type_name(module_type: Any) -> str:
    return module_type if isinstance(module_type, str) else f"{module_type.__module__}.{module_type.__qualname__}"


__all__ = ["PT2EQuantizer", "QuantizationConfig", "get_symmetric_quantization_config"]
