"""`to_channel_last_io`: a module wrapper that takes and returns chosen tensors channel-last.

    wrapped = litert_torch.to_channel_last_io(model, args=[0], outputs=[0])
    edge = litert_torch.convert(wrapped, (x.permute(0, 2, 3, 1),))   # the model now takes NHWC

The official litert-torch's API, for callers that already have NHWC (or NDHWC, NLC) data: positional input i
in `args` is taken channel-last and moved to channel-first before the module runs; output j in `outputs` is
moved from channel-first to channel-last after. The permutes are part of the traced graph, where the layout
pass cancels them against the conv and pool layouts. `convert(..., channel_last_io=True)` does the same for
every rank-4 input and output without wrapping.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

from litert_torch.errors import InvalidArgumentError


class ChannelLastIOWrapper(torch.nn.Module):
    """`module` with the positional inputs at `args` and the outputs at `outputs` channel-last."""

    def __init__(self, module: torch.nn.Module, *, args: Iterable[int] = (), outputs: Iterable[int] = ()):
        super().__init__()
        self.module = module
        self._args = sorted(set(_indices(args, "args")))
        self._outputs = sorted(set(_indices(outputs, "outputs")))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        inputs = list(args)
        for i in self._args:
            if i >= len(inputs):
                raise InvalidArgumentError(f"to_channel_last_io: args names input {i}, but the call has {len(inputs)}")
            inputs[i] = _channel_first(inputs[i], f"input {i}")
        out = self.module(*inputs, **kwargs)
        if not self._outputs:
            return out
        if isinstance(out, torch.Tensor):
            if self._outputs != [0]:
                raise InvalidArgumentError(f"to_channel_last_io: outputs names {self._outputs}, but the module "
                                           "returns one tensor (output 0)")
            return _channel_last(out, "output 0")
        if not isinstance(out, (tuple, list)):
            raise InvalidArgumentError(f"to_channel_last_io: outputs apply to a tensor or a tuple or list of "
                                       f"outputs, not {type(out).__name__}")
        values = list(out)
        for j in self._outputs:
            if j >= len(values):
                raise InvalidArgumentError(f"to_channel_last_io: outputs names output {j}, but the module "
                                           f"returns {len(values)}")
            values[j] = _channel_last(values[j], f"output {j}")
        return type(out)(values) if isinstance(out, tuple) else values


def to_channel_last_io(module: torch.nn.Module, args: Iterable[int] | None = None,
                       outputs: Iterable[int] | None = None) -> ChannelLastIOWrapper:
    """Wrap `module` so that the positional inputs listed in `args` are taken channel-last ([N, ..., C]) and
    the outputs listed in `outputs` are returned channel-last. Wrappers nest."""
    if not isinstance(module, torch.nn.Module):
        raise InvalidArgumentError(f"to_channel_last_io wraps a torch.nn.Module, got {type(module).__name__}")
    return ChannelLastIOWrapper(module, args=args or (), outputs=outputs or ())


def _indices(values: Iterable[int], what: str) -> list[int]:
    out = list(values)
    if any(not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in out):
        raise InvalidArgumentError(f"to_channel_last_io: {what} is a list of non-negative positions, got {out}")
    return out


def _channel_first(x: Any, what: str) -> torch.Tensor:
    _check(x, what)
    return x.permute(0, x.dim() - 1, *range(1, x.dim() - 1))


def _channel_last(x: Any, what: str) -> torch.Tensor:
    _check(x, what)
    return x.permute(0, *range(2, x.dim()), 1)


def _check(x: Any, what: str) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() < 3:
        shape = list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise InvalidArgumentError(f"to_channel_last_io: {what} must be a tensor of rank 3 or more "
                                   f"([N, C, ...]), got {shape}")
