"""1-D convolution as 2-D convolution, at the module path where the official litert-torch keeps these rewrites.

    _conv1d_decomp(x[N, C, L], w[O, C/g, K], b, stride, padding, dilation, groups)
        == conv2d(x[N, C, 1, L], w[O, C/g, 1, K], ...)[:, :, 0, :]

Arguments may be ints or one-element lists/tuples (SymInts included); any other rank gives NotImplemented, as
a decomposition that does not apply. This converter lowers conv1d itself (`litert_torch.lower.aten.conv`); these are
kept for code that calls them.
"""

from __future__ import annotations

from typing import Any

import torch


def _one(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise ValueError(f"a 1-D convolution takes one value here, got {list(value)}")
        return value[0]
    return value


def _conv1d_decomp(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, stride: Any = 1,
                   padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Any:
    if x.dim() != 3 or w.dim() != 3:
        return NotImplemented
    y = torch.nn.functional.conv2d(x.unsqueeze(2), w.unsqueeze(2), b, stride=(1, _one(stride)),
                                   padding=(0, _one(padding)), dilation=(1, _one(dilation)), groups=groups)
    return y.squeeze(2)


def _convolution_decomp(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, stride: Any = 1,
                        padding: Any = 0, dilation: Any = 1, transposed: bool = False, output_padding: Any = 0,
                        groups: int = 1) -> Any:
    if x.dim() != 3 or w.dim() != 3:
        return NotImplemented
    if not transposed:
        return _conv1d_decomp(x, w, b, stride, padding, dilation, groups)
    y = torch.nn.functional.conv_transpose2d(x.unsqueeze(2), w.unsqueeze(2), b, stride=(1, _one(stride)),
                                             padding=(0, _one(padding)), output_padding=(0, _one(output_padding)),
                                             groups=groups, dilation=(1, _one(dilation)))
    return y.squeeze(2)
