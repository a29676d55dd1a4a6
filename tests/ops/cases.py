"""The op table: one row per op case, driving tests/ops/test_ops.py.

Each row builds a small module and its sample inputs. The test converts it, runs it in LiteRT and compares
with eager PyTorch under the numerics contract; `ops` pins op counts where structure matters (0 = must not
appear); `raises` marks calls that must fail with a clear conversion error, with the reason; `match` is what the
error message must say (so that a crash inside a lowering does not pass for the expected refusal).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from tests.helpers import Fn


@dataclass
class OpCase:
    id: str
    module: Callable[[], nn.Module]
    inputs: Callable[[], tuple]
    ops: dict[str, int] = field(default_factory=dict)
    raises: type[Exception] | None = None
    reason: str = ""
    match: str = ""  # with `raises`: a regular expression the error message must contain (the reason given)
    rtol: float = 1e-4
    atol: float = 1e-5
    target: str | None = None  # convert for this delegate target only (the default: all of them)


def r(*shape):
    return lambda: (torch.randn(*shape),)


def r2(a, b):
    return lambda: (torch.randn(*a), torch.randn(*b))


def fn(f):
    return lambda: Fn(f)


def seq(*layers):
    return lambda: nn.Sequential(*[layer() if callable(layer) and not isinstance(layer, nn.Module) else layer
                                   for layer in layers])


def conv_bn(cin, cout, **kw):
    def build():
        bn = nn.BatchNorm2d(cout)
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.data.normal_()
        bn.bias.data.normal_()
        return nn.Sequential(nn.Conv2d(cin, cout, 3, **kw), bn, nn.ReLU())
    return build


def bn(channels, dims=2):
    def build():
        layer = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d}[dims](channels)
        layer.running_mean.normal_()
        layer.running_var.uniform_(0.5, 2.0)
        layer.weight.data.normal_()
        layer.bias.data.normal_()
        return layer
    return build


W = lambda *s: nn.Parameter(torch.randn(*s))  # noqa: E731


class MatmulParam(nn.Module):
    def __init__(self, shape, op):
        super().__init__()
        self.w = W(*shape)
        self.op = op

    def forward(self, x):
        return self.op(x, self.w)


CASES: list[OpCase] = [
    # ---- convolution ----------------------------------------------------------------------------------------
    OpCase("conv2d_3x3_same", lambda: nn.Conv2d(3, 8, 3, padding=1), r(1, 3, 16, 16), {"CONV_2D": 1, "PAD": 0}),
    OpCase("conv2d_stride2_pad1", lambda: nn.Conv2d(3, 8, 3, stride=2, padding=1), r(2, 3, 17, 16), {"CONV_2D": 1}),
    OpCase("conv2d_valid_no_bias", lambda: nn.Conv2d(4, 6, (3, 5), bias=False), r(1, 4, 12, 14), {"PAD": 0}),
    OpCase("conv2d_asym_pad_dilation", lambda: nn.Conv2d(4, 6, (3, 5), padding=(1, 3), dilation=(2, 1)),
           r(1, 4, 12, 14)),
    OpCase("conv2d_padding_same_str", lambda: nn.Conv2d(4, 4, 5, padding="same"), r(1, 4, 9, 9), {"PAD": 0}),
    OpCase("conv2d_grouped", lambda: nn.Conv2d(8, 12, 3, padding=1, groups=4), r(1, 8, 10, 10), {"CONV_2D": 1}),
    OpCase("conv2d_depthwise", lambda: nn.Conv2d(8, 8, 3, padding=1, groups=8), r(1, 8, 10, 10),
           {"DEPTHWISE_CONV_2D": 1, "CONV_2D": 0}),
    OpCase("conv2d_depthwise_multiplier", lambda: nn.Conv2d(4, 12, 3, stride=2, groups=4), r(1, 4, 11, 11),
           {"DEPTHWISE_CONV_2D": 1}),
    OpCase("conv2d_1x1", lambda: nn.Conv2d(16, 4, 1), r(3, 16, 5, 7)),
    OpCase("conv1d", lambda: nn.Conv1d(4, 8, 5, stride=2, padding=2), r(2, 4, 33), {"CONV_2D": 1}),
    OpCase("conv2d_padding_circular", lambda: nn.Conv2d(2, 3, 3, padding=1, padding_mode="circular"), r(1, 2, 6, 7),
           {"CONV_2D": 1, "CONCATENATION": 2, "GATHER": 0}),
    OpCase("unfold", fn(lambda x: F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1))), r(2, 3, 6, 7),
           {"GATHER": 1, "PAD": 1}),
    OpCase("unfold_unbatched", lambda: nn.Unfold(3), r(3, 6, 7)),
    OpCase("unfold_fold", fn(lambda x: F.fold(F.unfold(x, 3, padding=1), (6, 7), 3, padding=1)), r(1, 2, 6, 7)),
    OpCase("pad_circular_2d", fn(lambda x: F.pad(x, (1, 2, 2, 1), mode="circular")), r(1, 2, 6, 7)),
    OpCase("pad_circular_3d", fn(lambda x: F.pad(x, (1, 1, 2, 0, 1, 1), mode="circular")), r(1, 2, 3, 6, 7)),
    OpCase("pad_circular_crop", fn(lambda x: F.pad(x, (-1, 2, 3, -2), mode="circular")), r(1, 2, 6, 7),
           {"GATHER": 2}),
    OpCase("conv1d_dilated_grouped", lambda: nn.Conv1d(6, 6, 3, dilation=2, groups=3), r(1, 6, 20)),
    OpCase("conv1d_depthwise", lambda: nn.Conv1d(6, 6, 3, padding=1, groups=6), r(1, 6, 20),
           {"DEPTHWISE_CONV_2D": 1}),
    OpCase("conv_dynamic_weight", fn(lambda x, w: F.conv2d(x, w, padding=1)), r2((1, 3, 8, 8), (5, 3, 3, 3))),
    OpCase("conv_relu_conv_no_inner_transpose",
           seq(lambda: nn.Conv2d(3, 8, 3, padding=1), nn.ReLU, lambda: nn.Conv2d(8, 8, 3, padding=1)),
           r(1, 3, 12, 12), {"TRANSPOSE": 2, "RELU": 0}),
    OpCase("conv_bn_relu_folded", conv_bn(3, 8, padding=1), r(1, 3, 12, 12), {"CONV_2D": 1, "MUL": 0, "ADD": 0}),
    OpCase("conv3d", lambda: nn.Conv3d(3, 4, 3, padding=1), r(2, 3, 6, 7, 8), {"CONV_2D": 3, "CONV_3D": 0}),
    OpCase("conv3d_strided_dilated_grouped", lambda: nn.Conv3d(4, 6, (3, 2, 3), stride=(2, 1, 2), padding=(2, 0, 1),
                                                              dilation=(2, 1, 1), groups=2), r(1, 4, 9, 6, 7),
           {"CONV_2D": 3}),
    OpCase("conv3d_depthwise", lambda: nn.Conv3d(6, 6, 3, padding=1, groups=6), r(1, 6, 5, 6, 6),
           {"DEPTHWISE_CONV_2D": 3}),
    OpCase("conv3d_dynamic_weight", fn(lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1), padding=1, groups=2)),
           lambda: (torch.randn(1, 4, 5, 6, 7), torch.randn(6, 2, 3, 3, 3), torch.randn(6))),
    OpCase("conv_transpose3d", lambda: nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1, output_padding=1),
           r(2, 3, 4, 5, 3), {"TRANSPOSE_CONV": 3}),
    OpCase("conv_transpose3d_dilated_grouped", lambda: nn.ConvTranspose3d(4, 6, (2, 3, 1), stride=(3, 1, 1),
                                                                          padding=(1, 1, 0), output_padding=(2, 0, 0),
                                                                          groups=2, dilation=(2, 1, 1)),
           r(1, 4, 4, 5, 3)),
    OpCase("conv_transpose3d_dynamic_weight",
           fn(lambda x, w: F.conv_transpose3d(x, w, stride=2, padding=1, output_padding=1, groups=2)),
           r2((1, 4, 3, 4, 5), (4, 3, 3, 2, 2))),
    OpCase("conv_transpose2d_k2s2", lambda: nn.ConvTranspose2d(4, 6, 2, stride=2), r(1, 4, 5, 5),
           {"TRANSPOSE_CONV": 1, "SLICE": 0, "ADD": 0}),
    # SAME padding in TFLite; the default targets include the GPU, whose delegate computes some SAME transposed
    # convolutions wrong, so the file holds the VALID one and a SLICE (passes/delegate_rewrites.py)
    OpCase("conv_transpose2d_same", lambda: nn.ConvTranspose2d(4, 3, 4, stride=2, padding=1), r(1, 4, 5, 6),
           {"TRANSPOSE_CONV": 1, "SLICE": 1}),
    OpCase("conv_transpose2d_crop", lambda: nn.ConvTranspose2d(3, 5, 3, stride=2, padding=1), r(2, 3, 5, 5),
           {"TRANSPOSE_CONV": 1}),
    OpCase("conv_transpose2d_output_padding", lambda: nn.ConvTranspose2d(3, 5, 3, stride=2, output_padding=1),
           r(1, 3, 4, 4)),
    OpCase("conv_transpose2d_output_padding_cropped",
           lambda: nn.ConvTranspose2d(3, 5, (3, 5), stride=(2, 3), padding=(1, 2), output_padding=(1, 2)),
           r(1, 3, 4, 4)),
    OpCase("conv_transpose1d", lambda: nn.ConvTranspose1d(4, 2, 4, stride=2, padding=1), r(2, 4, 9)),
    OpCase("conv_transpose_grouped", lambda: nn.ConvTranspose2d(4, 4, 3, groups=2), r(1, 4, 5, 5),
           {"TRANSPOSE_CONV": 1}),
    OpCase("conv_transpose_dilated_grouped_stride", lambda: nn.ConvTranspose2d(6, 9, 3, stride=2, padding=1,
                                                                               dilation=2, groups=3), r(1, 6, 5, 4),
           {"TRANSPOSE_CONV": 1}),
    # ---- dense ----------------------------------------------------------------------------------------------
    OpCase("linear", lambda: nn.Linear(16, 8), r(4, 16), {"FULLY_CONNECTED": 1}),
    OpCase("linear_rank3", lambda: nn.Linear(16, 8), r(2, 5, 16), {"FULLY_CONNECTED": 1, "RESHAPE": 0}),
    OpCase("linear_rank1", lambda: nn.Linear(16, 8, bias=False), r(16)),
    OpCase("linear_bn1d_folded", seq(lambda: nn.Linear(16, 8), bn(8, dims=1)), r(4, 16),
           {"FULLY_CONNECTED": 1, "MUL": 0, "ADD": 0}),
    OpCase("addmm", lambda: MatmulParam((16, 8), lambda x, w: torch.addmm(torch.ones(8), x, w)), r(3, 16),
           {"FULLY_CONNECTED": 1}),
    OpCase("addmm_scaled", fn(lambda b, x: torch.addmm(b, x, x.t(), beta=0.5, alpha=2.0)), r2((3, 3), (3, 4))),
    OpCase("mm_param", lambda: MatmulParam((16, 8), torch.mm), r(3, 16), {"FULLY_CONNECTED": 1}),
    OpCase("mm_dynamic", fn(torch.mm), r2((3, 16), (16, 5)), {"BATCH_MATMUL": 1}),
    OpCase("bmm", fn(torch.bmm), r2((2, 3, 4), (2, 4, 5)), {"BATCH_MATMUL": 1}),
    OpCase("matmul_broadcast", fn(torch.matmul), r2((2, 3, 4, 5), (3, 5, 6))),
    OpCase("matmul_vector_matrix", fn(torch.matmul), r2((5,), (2, 5, 3))),
    OpCase("matmul_matrix_vector", fn(torch.matmul), r2((2, 3, 5), (5,))),
    OpCase("matmul_param_rank3", lambda: MatmulParam((8, 4), torch.matmul), r(2, 3, 8), {"FULLY_CONNECTED": 1}),
    # ---- batch norm -----------------------------------------------------------------------------------------
    OpCase("batch_norm_alone", bn(4), r(2, 4, 5, 5)),
    OpCase("batch_norm_1d_sequence", bn(4, dims=1), r(2, 4, 7)),
    # ---- activations ----------------------------------------------------------------------------------------
    OpCase("relu", lambda: nn.ReLU(), r(2, 8), {"RELU": 1}),
    OpCase("relu6", lambda: nn.ReLU6(), lambda: (torch.randn(2, 8) * 5,), {"RELU6": 1}),
    OpCase("hardtanh_default", lambda: nn.Hardtanh(), lambda: (torch.randn(64) * 3,), {"RELU_N1_TO_1": 1}),
    OpCase("hardtanh_range", lambda: nn.Hardtanh(-2.0, 3.0), lambda: (torch.randn(64) * 3,)),
    OpCase("clamp_both", fn(lambda x: x.clamp(-0.5, 0.25)), r(64)),
    OpCase("clamp_min_zero", fn(lambda x: x.clamp(min=0)), r(64), {"RELU": 1}),
    OpCase("clamp_max", fn(lambda x: x.clamp(max=0.3)), r(64), {"MINIMUM": 1}),
    OpCase("hardswish", lambda: nn.Hardswish(), lambda: (torch.randn(64) * 4,), {"HARD_SWISH": 1}),
    OpCase("hardsigmoid", lambda: nn.Hardsigmoid(), lambda: (torch.randn(64) * 4,)),
    OpCase("sigmoid", lambda: nn.Sigmoid(), r(64), {"LOGISTIC": 1}),
    OpCase("silu", lambda: nn.SiLU(), r(64)),
    OpCase("gelu_exact", lambda: nn.GELU(), r(64), {"GELU": 1}),
    OpCase("gelu_tanh", lambda: nn.GELU(approximate="tanh"), r(64), {"GELU": 1}),
    OpCase("tanh", lambda: nn.Tanh(), r(64), {"TANH": 1}),
    OpCase("leaky_relu", lambda: nn.LeakyReLU(0.2), r(64), {"LEAKY_RELU": 1}),
    OpCase("elu", lambda: nn.ELU(), r(64), {"ELU": 1}),
    OpCase("elu_alpha", lambda: nn.ELU(alpha=0.5), r(64)),
    OpCase("selu", lambda: nn.SELU(), r(64)),
    OpCase("celu", lambda: nn.CELU(alpha=0.7), r(64)),
    # ---- binary arithmetic ----------------------------------------------------------------------------------
    OpCase("add_broadcast", fn(torch.add), r2((2, 3, 4), (3, 1))),
    OpCase("add_scalar", fn(lambda x: x + 2.5), r(5)),
    OpCase("add_alpha", fn(lambda a, b: torch.add(a, b, alpha=3)), r2((4, 5), (5,))),
    OpCase("sub_broadcast", fn(torch.sub), r2((4, 1), (1, 5))),
    OpCase("sub_alpha", fn(lambda a, b: torch.sub(a, b, alpha=0.5)), r2((4, 5), (4, 5))),
    OpCase("rsub_scalar", fn(lambda x: 1 - x), r(6), {"SUB": 1}),
    OpCase("rsub_alpha", fn(lambda a, b: torch.rsub(a, b, alpha=2)), r2((3,), (3,))),
    OpCase("mul_broadcast", fn(torch.mul), r2((2, 3, 4), (2, 1, 4))),
    OpCase("mul_scalar", fn(lambda x: x * 0.3), r(6)),
    OpCase("div_tensor", fn(torch.div), lambda: (torch.randn(3, 4), torch.rand(3, 4) + 0.5)),
    OpCase("div_scalar_power_of_two", fn(lambda x: x / 4.0), r(6), {"MUL": 1, "DIV": 0}),
    OpCase("div_scalar", fn(lambda x: x / 3.0), r(6), {"DIV": 1}),
    OpCase("div_int_true_division", fn(lambda x: x / 4), lambda: (torch.arange(-6, 6),), {"CAST": 1}),
    # ---- pooling --------------------------------------------------------------------------------------------
    OpCase("max_pool2d", lambda: nn.MaxPool2d(2), r(1, 3, 8, 8), {"MAX_POOL_2D": 1}),
    OpCase("max_pool2d_pad", lambda: nn.MaxPool2d(3, 2, 1), r(1, 3, 14, 14)),
    OpCase("max_pool2d_same", lambda: nn.MaxPool2d(3, 1, 1), r(1, 3, 9, 9), {"PADV2": 0}),
    OpCase("max_pool2d_ceil", lambda: nn.MaxPool2d(3, 2, ceil_mode=True), r(1, 3, 14, 14)),
    OpCase("max_pool2d_rect_ceil_pad", lambda: nn.MaxPool2d((3, 2), (2, 1), (1, 0), ceil_mode=True), r(2, 2, 9, 7)),
    OpCase("max_pool2d_rank3", lambda: nn.MaxPool2d(2), r(3, 8, 8)),
    OpCase("avg_pool2d", lambda: nn.AvgPool2d(2), r(1, 3, 8, 8), {"AVERAGE_POOL_2D": 1, "MUL": 0}),
    OpCase("avg_pool2d_pad_include", lambda: nn.AvgPool2d(3, 2, 1), r(1, 3, 9, 9)),
    OpCase("avg_pool2d_pad_exclude", lambda: nn.AvgPool2d(3, 1, 1, count_include_pad=False), r(1, 3, 9, 9),
           {"PAD": 0, "MUL": 0}),
    OpCase("avg_pool2d_ceil_include", lambda: nn.AvgPool2d(3, 2, 1, ceil_mode=True), r(1, 3, 10, 10)),
    OpCase("avg_pool2d_ceil_exclude", lambda: nn.AvgPool2d(3, 2, 0, ceil_mode=True, count_include_pad=False),
           r(1, 3, 10, 10)),
    OpCase("avg_pool2d_divisor_override", lambda: nn.AvgPool2d(2, divisor_override=3), r(1, 3, 8, 8)),
    # windows the 2-D TFLite pools cannot take: one strided slice per kernel tap (pool_by_taps)
    OpCase("max_pool2d_dilated", lambda: nn.MaxPool2d(3, 2, 1, dilation=2), r(1, 3, 11, 11), {"MAX_POOL_2D": 0}),
    OpCase("max_pool2d_indices", lambda: nn.MaxPool2d(3, 2, 1, return_indices=True), r(2, 3, 9, 9)),
    OpCase("max_pool3d", lambda: nn.MaxPool3d(2), r(1, 2, 4, 6, 6)),
    OpCase("max_pool3d_indices_ceil", lambda: nn.MaxPool3d(3, 2, 1, ceil_mode=True, return_indices=True),
           r(1, 2, 5, 6, 7)),
    OpCase("avg_pool3d", lambda: nn.AvgPool3d(3, 2, 1), r(1, 2, 5, 6, 7)),
    OpCase("avg_pool3d_exclude_ceil", lambda: nn.AvgPool3d(3, 2, 1, ceil_mode=True, count_include_pad=False),
           r(1, 2, 5, 6, 7)),
    OpCase("adaptive_avg_pool_global", lambda: nn.AdaptiveAvgPool2d(1), r(2, 8, 7, 7), {"MEAN": 1}),
    OpCase("adaptive_avg_pool_even", lambda: nn.AdaptiveAvgPool2d((2, 3)), r(1, 4, 8, 9), {"AVERAGE_POOL_2D": 1}),
    OpCase("adaptive_avg_pool_uneven", lambda: nn.AdaptiveAvgPool2d((3, 5)), r(1, 4, 7, 10)),
    OpCase("adaptive_max_pool_uneven", lambda: nn.AdaptiveMaxPool2d((3, 4)), r(1, 3, 10, 11),
           {"REDUCE_MAX": 7 * 2, "MAX_POOL_2D": 0}),  # the values' windows and the NaN flags' windows
    OpCase("adaptive_max_pool_uneven_rank3", lambda: nn.AdaptiveMaxPool2d((5, 2)), r(3, 7, 4)),
    # ---- reductions -----------------------------------------------------------------------------------------
    OpCase("mean_keepdim", fn(lambda x: x.mean(dim=(2, 3), keepdim=True)), r(2, 3, 4, 5), {"MEAN": 1}),
    OpCase("mean_negative_dim", fn(lambda x: x.mean(-1)), r(2, 3, 4)),
    OpCase("mean_all", fn(lambda x: x.mean()), r(2, 3, 4)),
    OpCase("sum_dims", fn(lambda x: x.sum(dim=[0, 2])), r(2, 3, 4), {"SUM": 1}),
    OpCase("amax", fn(lambda x: x.amax(dim=1, keepdim=True)), r(2, 3, 4), {"REDUCE_MAX": 1}),
    OpCase("amin", fn(lambda x: x.amin(dim=(-1, 0))), r(2, 3, 4), {"REDUCE_MIN": 1}),
    # ---- shapes ---------------------------------------------------------------------------------------------
    OpCase("view", fn(lambda x: x.view(4, -1)), r(2, 2, 6), {"RESHAPE": 1}),
    OpCase("flatten", lambda: nn.Flatten(), r(2, 3, 4, 5), {"RESHAPE": 1}),
    OpCase("squeeze_unsqueeze", fn(lambda x: x.squeeze(1).unsqueeze(-1)), r(3, 1, 4), {"RESHAPE": 1}),
    OpCase("permute", fn(lambda x: x.permute(2, 0, 1)), r(2, 3, 4), {"TRANSPOSE": 1}),
    OpCase("transpose_contiguous", fn(lambda x: x.transpose(1, -1).contiguous()), r(2, 3, 4)),
    OpCase("transpose_of_unit_dim_is_reshape", fn(lambda x: x.transpose(1, 2)), r(2, 1, 4),
           {"TRANSPOSE": 0, "RESHAPE": 1}),
    OpCase("cat", fn(lambda a, b: torch.cat([a, b, a], dim=-1)), r2((2, 3), (2, 5)), {"CONCATENATION": 1}),
    OpCase("split_equal", fn(lambda x: x.split(2, dim=1)), r(3, 6), {"SPLIT": 1}),
    # SPLIT_V, which XNNPACK does not take, leaves as one SLICE per part (narrow_splits_and_concats).
    OpCase("split_sizes", fn(lambda x: torch.split(x, [1, 2, 3], dim=-1)), r(3, 6), {"SLICE": 3}),
    OpCase("chunk_uneven", fn(lambda x: x.chunk(3, dim=0)), r(7, 2)),
    OpCase("slice", fn(lambda x: x[:, 1:3]), r(4, 5), {"SLICE": 1}),
    OpCase("slice_step", fn(lambda x: x[:, ::2, 1:-1]), r(2, 7, 6)),
    OpCase("slice_clamped_bounds", fn(lambda x: x[-100:3]), r(5, 2)),
    OpCase("constant_pad_zero", fn(lambda x: F.pad(x, (1, 2, 0, 3))), r(1, 2, 3, 4), {"PAD": 1}),
    OpCase("constant_pad_value", fn(lambda x: F.pad(x, (2, 2), value=-1.5)), r(2, 3), {"PADV2": 1}),
    OpCase("constant_pad_negative", fn(lambda x: F.pad(x, (-1, 2))), r(2, 5)),
    # ---- softmax, dropout, identity -------------------------------------------------------------------------
    OpCase("softmax_last", lambda: nn.Softmax(dim=-1), r(2, 10), {"SOFTMAX": 1}),
    OpCase("softmax_dim1", lambda: nn.Softmax(dim=1), r(2, 5, 3), {"SOFTMAX": 1}),
    OpCase("log_softmax", lambda: nn.LogSoftmax(dim=-1), r(3, 7), {"LOG_SOFTMAX": 1}),
    OpCase("dropout_and_identity_vanish", seq(nn.Identity, lambda: nn.Dropout(0.5), nn.ReLU), r(4, 4),
           {"RELU": 1}),
    # ---- logarithms in other bases, inverse and hyperbolic trigonometry, sign tests ----------------------------
    OpCase("log2", fn(lambda x: torch.log2(x.abs() + 0.1)), r(3, 5)),
    OpCase("log10", fn(lambda x: torch.log10(x.abs() * 100)), r(3, 5)),
    OpCase("trunc", fn(lambda x: torch.trunc(x * 3)), r(4, 6), {"FLOOR": 1, "CEIL": 1}),
    OpCase("atan", fn(torch.atan), r(3, 5)),
    OpCase("asin", fn(lambda x: torch.asin(x.clamp(-1, 1))), r(3, 5)),
    OpCase("acos", fn(lambda x: torch.acos(x.clamp(-1, 1))), r(3, 5)),
    OpCase("tan", fn(lambda x: torch.tan(x.clamp(-1.4, 1.4))), r(3, 5)),
    OpCase("sinh", fn(lambda x: torch.sinh(x * 4)), r(3, 5)),
    OpCase("cosh", fn(lambda x: torch.cosh(x * 4)), r(3, 5)),
    OpCase("asinh", fn(lambda x: torch.asinh(x * 10)), r(3, 5)),
    OpCase("acosh", fn(lambda x: torch.acosh(x.abs() * 10 + 1)), r(3, 5)),
    OpCase("atanh", fn(lambda x: torch.atanh(x.clamp(-0.99, 0.99))), r(3, 5)),
    OpCase("erfc", fn(torch.erfc), r(3, 5)),
    OpCase("copysign", fn(torch.copysign), r2((3, 5), (5,))),
    OpCase("signbit", fn(torch.signbit), r(3, 5)),
    OpCase("isinf", fn(lambda x: torch.isinf(x / (x > 0).float())), r(3, 5)),
    # ---- tensors with no elements: what they determine is computed at conversion time -------------------------
    OpCase("empty_elementwise", fn(lambda x: torch.reciprocal(x) * 2 + 1), r(1, 0, 3)),
    OpCase("empty_reductions", fn(lambda x: (x.sum(1), x.amax(0), torch.relu(x))), r(2, 0, 3)),
    OpCase("empty_part_of_cat", fn(lambda x, y: torch.cat([x, y], 0) * 2), r2((0, 3), (2, 3))),
    OpCase("empty_slice_output", fn(lambda x: (x[:, :0] + 1, x * 2)), r(2, 3)),
    OpCase("empty_matmul", fn(lambda x, w: x @ w), r2((3, 0), (0, 4))),
    # ---- products and scatters ----------------------------------------------------------------------------------
    OpCase("prod_all", fn(lambda x: torch.prod(x)), r(2, 3), {"REDUCE_PROD": 1}),
    OpCase("addbmm", fn(lambda b, x: torch.addbmm(b, x, x.transpose(1, 2), beta=0.5, alpha=2.0)),
           r2((3, 3), (4, 3, 5))),
    OpCase("addmv", fn(lambda b, m: torch.addmv(b, m, m[0], beta=0.0, alpha=1.5)), r2((4,), (4, 4))),
    OpCase("slice_scatter", fn(lambda x, y: torch.slice_scatter(x, y[:, :2], dim=1, start=1, end=3)),
           r2((3, 5), (3, 4)), {"CONCATENATION": 1}),
    OpCase("slice_scatter_head", fn(lambda x, y: torch.slice_scatter(x, y, dim=0, start=0, end=2)),
           r2((5, 3), (2, 3))),
    OpCase("slice_scatter_step", fn(lambda x, y: torch.slice_scatter(x, y, dim=0, start=0, end=4, step=2)),
           r2((5, 3), (2, 3)), {"GATHER": 1}),
    OpCase("slice_scatter_step_last_axis", fn(lambda x, y: torch.slice_scatter(x, y, dim=1, start=1, step=3)),
           r2((2, 8), (2, 3)), {"GATHER": 1}),
    OpCase("max_pool1d", fn(lambda x: F.max_pool1d(x, 3, 2)), r(2, 4, 11), {"MAX_POOL_2D": 1}),
    OpCase("adaptive_max_pool2d", fn(lambda x: F.adaptive_max_pool2d(x, (2, 3))), r(1, 3, 8, 9), {"MAX_POOL_2D": 1}),
    OpCase("adaptive_max_pool2d_uneven", fn(lambda x: F.adaptive_max_pool2d(x, 3)), r(1, 3, 8, 8)),
    OpCase("adaptive_max_pool2d_indices", fn(lambda x: F.adaptive_max_pool2d(x, 3, return_indices=True)),
           r(1, 3, 8, 8)),
    OpCase("native_layer_norm_stats", fn(lambda x, w: torch.native_layer_norm(x, [4, 5], w, None, 1e-5)),
           r2((2, 3, 4, 5), (4, 5))),
    OpCase("grid_sample_bilinear", fn(lambda x, g: F.grid_sample(x, g * 1.2, align_corners=False)),
           r2((2, 3, 5, 6), (2, 4, 7, 2)), {"GATHER_ND": 4}),
    OpCase("grid_sample_bilinear_corners", fn(lambda x, g: F.grid_sample(x, g, align_corners=True)),
           r2((1, 2, 6, 4), (1, 3, 3, 2))),
    OpCase("grid_sample_nearest_border", fn(lambda x, g: F.grid_sample(x, g * 1.5, mode="nearest",
                                                                       padding_mode="border")),
           r2((1, 2, 6, 5), (1, 4, 4, 2))),
    OpCase("grid_sample_reflection", fn(lambda x, g: F.grid_sample(x, g * 1.8, padding_mode="reflection", align_corners=False)),
           r2((1, 2, 6, 5), (1, 4, 4, 2))),
    OpCase("grid_sample_reflection_corners_nearest",
           fn(lambda x, g: F.grid_sample(x, g * 2.5, mode="nearest", padding_mode="reflection", align_corners=True)),
           r2((1, 2, 6, 5), (1, 4, 4, 2))),
    OpCase("grid_sample_bicubic", fn(lambda x, g: F.grid_sample(x, g * 1.3, mode="bicubic", align_corners=False)),
           r2((2, 3, 5, 6), (2, 4, 7, 2)), {"GATHER_ND": 16}),
    OpCase("grid_sample_bicubic_border_corners",
           fn(lambda x, g: F.grid_sample(x, g * 1.3, mode="bicubic", padding_mode="border", align_corners=True)),
           r2((1, 2, 5, 6), (1, 4, 3, 2))),
    OpCase("grid_sample_bicubic_reflection",
           fn(lambda x, g: F.grid_sample(x, g * 2.2, mode="bicubic", padding_mode="reflection",
                                         align_corners=False)),
           r2((1, 2, 5, 6), (1, 4, 3, 2))),
    OpCase("grid_sample_3d_trilinear", fn(lambda x, g: F.grid_sample(x, g * 1.2, align_corners=False)),
           r2((2, 3, 4, 5, 6), (2, 3, 4, 2, 3)), {"GATHER_ND": 8}),
    OpCase("grid_sample_3d_nearest_border",
           fn(lambda x, g: F.grid_sample(x, g * 1.5, mode="nearest", padding_mode="border",
                                         align_corners=False)),
           r2((1, 2, 4, 5, 3), (1, 2, 3, 4, 3))),
    OpCase("sort_ascending", fn(lambda x: torch.sort(x, dim=1)), r(3, 7), {"TOPK_V2": 1}),
    OpCase("sort_descending_dim0", fn(lambda x: torch.sort(x, dim=0, descending=True)), r(5, 4)),
    OpCase("unfold", fn(lambda x: x.unfold(1, 3, 2)), r(2, 9, 4), {"GATHER": 1}),
    OpCase("unfold_last", fn(lambda x: x.unfold(-1, 4, 4)), r(3, 12)),
    OpCase("as_strided", fn(lambda x: torch.as_strided(x, (3, 3), (4, 1), 1)), r(4, 4), {"GATHER": 1}),
    OpCase("as_strided_overlapping", fn(lambda x: torch.as_strided(x + 1, (5, 3), (1, 2))), r(12,)),
    OpCase("copy_broadcast", fn(lambda x, y: x.copy_(y) * 2), r2((3, 4), (4,))),
    OpCase("max_pool2d_indices_functional", fn(lambda x: F.max_pool2d(x, 2, return_indices=True)), r(1, 3, 8, 8)),
]
