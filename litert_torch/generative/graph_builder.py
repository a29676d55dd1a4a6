"""The graph builder of the op-by-op LLM decoders (`direct.py`, `direct_linear.py`, `direct_gemma.py`): it appends
TFLite ops to an IR graph in the forms the ATen lowerings give each PyTorch op, names their tensors by the decoder
part that wrote them, and records the source line of each op (the line of the decoder module that called it).
"""

from __future__ import annotations

import itertools
import os
import sys
from typing import Any, Sequence

import numpy as np

from litert_torch import ir
from litert_torch.generative.config import LlmConfig


class Builder:
    """Appends ops to one graph; names tensors `<module>/<what>_<n>` and records where each op was written."""

    def __init__(self, graph: ir.Graph):
        self.graph = graph
        self.module = ""
        self._count = itertools.count()

    def name(self, what: str) -> str:
        n = next(self._count)
        return f"{self.module}/{what}_{n}" if self.module else f"{what}_{n}"

    def const(self, data: Any, what: str = "const", dtype: Any = None) -> ir.Tensor:
        array = np.asarray(data, dtype=dtype)
        return ir.Tensor(self.name(what), array.shape, array.dtype, array)

    def scalar(self, value: float, dtype: Any = np.float32) -> ir.Tensor:
        return self.const(np.array(value, dtype=dtype), "scalar")

    def emit(self, opcode: str, inputs: Sequence[ir.Tensor | None], shape: Sequence[int], dtype: Any, what: str,
             **options: Any) -> ir.Tensor:
        return self.emit_multi(opcode, inputs, [(shape, dtype)], what, **options)[0]

    def emit_multi(self, opcode: str, inputs: Sequence[ir.Tensor | None], outputs: Sequence[tuple[Sequence[int], Any]],
                   what: str, **options: Any) -> list[ir.Tensor]:
        outs = [ir.Tensor(self.name(what), shape, dtype) for shape, dtype in outputs]
        caller = sys._getframe(1)
        while caller.f_back is not None and caller.f_locals.get("self") is self:
            caller = caller.f_back  # a helper of this class: the line that called it
        location = f"litert_torch/generative/{os.path.basename(caller.f_code.co_filename)}:{caller.f_lineno}"
        module = self.module.replace("/", ".") or None
        self.graph.ops.append(ir.Op(opcode, list(inputs), outs, options,
                                    ir.SourceRef(outs[0].name, f"direct.{what}", location, module)))
        return outs

    # -- the forms the lowerings give each PyTorch op ------------------------------------------------------
    def _like(self, opcode: str, x: ir.Tensor, *others: ir.Tensor, what: str = "", **options) -> ir.Tensor:
        return self.emit(opcode, [x, *others], x.shape, x.dtype, what or opcode.lower(), **options)

    def _binary(self, opcode: str, a: ir.Tensor, b: ir.Tensor | float, what: str = "") -> ir.Tensor:
        if not isinstance(b, ir.Tensor):
            b = self.scalar(b, a.dtype)
        shape = np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
        return self.emit(opcode, [a, b], shape, a.dtype, what or opcode.lower())

    def _mul(self, a, b, what=""):
        return self._binary("MUL", a, b, what)

    def _add(self, a, b, what=""):
        return self._binary("ADD", a, b, what)

    def _div(self, a: ir.Tensor, divisor: float, what: str = "div") -> ir.Tensor:
        """x / c: a MUL by 1/c when that is exact (c a power of 2), else DIV (`lower.elementwise.lower_div`)."""
        if divisor != 0 and np.frexp(float(divisor))[0] in (0.5, -0.5):
            return self._mul(a, 1.0 / float(divisor), what)
        return self._binary("DIV", a, divisor, what)

    def _reshape(self, x: ir.Tensor, shape: Sequence[int], what: str = "reshape") -> ir.Tensor:
        shape = [int(d) for d in shape]
        return self.emit("RESHAPE", [x, self.const(np.array(shape, np.int32), "shape")], shape, x.dtype, what,
                         new_shape=shape)

    def _transpose(self, x: ir.Tensor, perm: Sequence[int], what: str = "transpose") -> ir.Tensor:
        return self.emit("TRANSPOSE", [x, self.const(np.array(perm, np.int32), "perm")],
                         [x.shape[p] for p in perm], x.dtype, what)

    def _slice(self, x: ir.Tensor, axis: int, start: int, length: int, what: str = "slice") -> ir.Tensor:
        begin = [0] * x.rank
        size = list(x.shape)
        begin[axis], size[axis] = start, length
        return self.emit("SLICE", [x, self.const(np.array(begin, np.int32), "begin"),
                                   self.const(np.array(size, np.int32), "size")], size, x.dtype, what)

    def _concat(self, parts: Sequence[ir.Tensor], axis: int, what: str = "cat") -> ir.Tensor:
        shape = list(parts[0].shape)
        shape[axis] = sum(p.shape[axis] for p in parts)
        return self.emit("CONCATENATION", list(parts), shape, parts[0].dtype, what, axis=axis,
                         fused_activation_function="NONE")

    def _linear(self, x: ir.Tensor, weight: np.ndarray, bias: np.ndarray | None, what: str) -> ir.Tensor:
        w = self.const(weight, f"{what}_weight")
        b = self.const(bias, f"{what}_bias") if bias is not None else None
        return self.emit("FULLY_CONNECTED", [x, w, b], [*x.shape[:-1], w.shape[0]], x.dtype, what,
                         fused_activation_function="NONE", keep_num_dims=x.rank > 2)

    def _sum(self, x: ir.Tensor, axis: int, keep_dims: bool = False, what: str = "sum") -> ir.Tensor:
        shape = [1 if i == axis else d for i, d in enumerate(x.shape) if keep_dims or i != axis]
        return self.emit("SUM", [x, self.const(np.array([axis], np.int32), "axes")], shape, x.dtype, what,
                         keep_dims=keep_dims)

    def _cumsum(self, x: ir.Tensor, what: str = "cumsum") -> ir.Tensor:
        """Running sums along the first axis."""
        return self._like("CUMSUM", x, self.const(np.array(0, np.int32), "axis"), what=what, exclusive=False,
                          reverse=False)

    def _wrapped(self, index: ir.Tensor, size: int, what: str = "index") -> ir.Tensor:
        """An index tensor with negative entries counted from the end (PyTorch's indexing, as lowered)."""
        added = self._add(index, self.scalar(size, np.int32), what)
        negative = self.emit("LESS", [index, self.scalar(0, np.int32)], index.shape, np.bool_, what)
        return self.emit("SELECT_V2", [negative, added, index], index.shape, np.int32, what)

    def _gather(self, table: ir.Tensor, index: ir.Tensor, what: str = "index") -> ir.Tensor:
        """table[index] along the first axis (`index` int32, of any shape)."""
        return self.emit("GATHER", [table, self._wrapped(index, table.shape[0], what)],
                         [*index.shape, *table.shape[1:]], table.dtype, what, axis=0, batch_dims=0)

    def _topk(self, x: ir.Tensor, k: int) -> tuple[ir.Tensor, ir.Tensor]:
        """The k largest of each row of float32 `x` [N, M] and their int32 indices, in PyTorch's order (TOPK_V2
        of integer order keys, `lower.reduce.topk_last_axis`)."""
        zero = self.scalar(0.0)
        f = self.emit("SELECT_V2", [self.emit("EQUAL", [x, zero], x.shape, np.bool_, "topk"), zero, x], x.shape,
                      x.dtype, "topk")
        bits = self.emit("BITCAST", [f], f.shape, np.int32, "topk")
        flipped = self._like("BITWISE_XOR", bits, self.const(np.array(0x7FFFFFFF, np.int32), "magnitude_bits"),
                             what="topk")
        negative = self.emit("LESS", [bits, self.const(np.array(0, np.int32), "zero")], bits.shape, np.bool_, "topk")
        keys = self.emit("SELECT_V2", [negative, flipped, bits], bits.shape, np.int32, "topk")
        nan = self.emit("NOT_EQUAL", [f, f], f.shape, np.bool_, "topk")
        keys = self.emit("SELECT_V2", [nan, self.const(np.array(np.iinfo(np.int32).max, np.int32), "nan_key"), keys],
                         keys.shape, np.int32, "topk")
        shape = [*x.shape[:-1], k]
        _, indices = self.emit_multi("TOPK_V2", [keys, self.const(np.array(k, np.int32), "k")],
                                     [(shape, np.int32), (shape, np.int32)], "topk")
        values = self.emit("GATHER", [x, indices], shape, x.dtype, "topk", axis=x.rank - 1, batch_dims=x.rank - 1)
        return values, indices

    def _rms_norm(self, x: ir.Tensor, weight: np.ndarray, cfg: LlmConfig, what: str = "norm") -> ir.Tensor:
        """x * rsqrt(mean(x^2) + eps) * w (or * (1 + w)): `model.RMSNorm` as lowered, the rsqrt scaled so
        that RSQRT never sees a value past its range (`lower.exact.rsqrt`)."""
        reduced = [*x.shape[:-1], 1]
        mean = self.emit("MEAN", [self._mul(x, x, "pow"), self.const(np.array([x.rank - 1], np.int32), "axes")],
                         reduced, x.dtype, "mean", keep_dims=True)
        var = self._add(mean, float(cfg.rms_norm_eps), "add")
        inv = self._like("RSQRT", self._mul(var, 2.0 ** -8, "rsqrt"), what="rsqrt")
        inv = self._mul(inv, 2.0 ** -4, "rsqrt")
        scale = np.asarray(weight, np.float32)
        if cfg.norm_plus_one:
            scale = np.float32(1.0) + scale
        return self._mul(self._mul(x, inv, "mul"), self.const(scale, f"{what}_weight"), what)

    def _layer_norm(self, x: ir.Tensor, weight: np.ndarray, bias: np.ndarray | None, cfg: LlmConfig,
                    what: str = "norm") -> ir.Tensor:
        """(x - mean(x)) * rsqrt(var(x) + eps) * w + b over the last axis (`torch.nn.LayerNorm`), the rsqrt
        scaled as in `_rms_norm`; `weight` [.., D] may hold one row per head (StableLM's per-head norms)."""
        reduced = [*x.shape[:-1], 1]
        mean = self.emit("MEAN", [x, self.const(np.array([x.rank - 1], np.int32), "axes")], reduced, x.dtype, "mean",
                         keep_dims=True)
        centered = self._binary("SUB", x, mean, "sub")
        var = self.emit("MEAN", [self._mul(centered, centered, "pow"),
                                 self.const(np.array([x.rank - 1], np.int32), "axes")], reduced, x.dtype, "var",
                        keep_dims=True)
        var = self._add(var, float(cfg.rms_norm_eps), "add")
        inv = self._like("RSQRT", self._mul(var, 2.0 ** -8, "rsqrt"), what="rsqrt")
        inv = self._mul(inv, 2.0 ** -4, "rsqrt")
        out = self._mul(self._mul(centered, inv, "mul"), self.const(np.asarray(weight, np.float32), f"{what}_weight"),
                        what)
        if bias is None:
            return out
        return self._add(out, self.const(np.asarray(bias, np.float32), f"{what}_bias"), what)

    def _norm(self, x: ir.Tensor, weight: np.ndarray, bias: np.ndarray | None, cfg: LlmConfig,
              what: str = "norm") -> ir.Tensor:
        """The architecture's norm: LayerNorm (Phi, StableLM) or RMSNorm."""
        if cfg.layer_norm:
            return self._layer_norm(x, weight, bias, cfg, what)
        return self._rms_norm(x, weight, cfg, what)

    def _named_norm(self, x: ir.Tensor, w: dict[str, Any], key: str, cfg: LlmConfig) -> ir.Tensor:
        """A layer's norm `key` ("input", "post_attention", "q", ...): its weight (and bias) from the layer's
        weights `w`."""
        return self._norm(x, w[f"{key}_norm"], w.get(f"{key}_norm_bias"), cfg, f"{key}_norm")

    def _act(self, x: ir.Tensor, name: str) -> ir.Tensor:
        if name == "silu":
            return self._mul(x, self._like("LOGISTIC", x, what="silu"), "silu")
        return self._like("GELU", x, what="gelu", approximate=name == "gelu_tanh")

    def _softcap(self, x: ir.Tensor, cap: float) -> ir.Tensor:
        return self._mul(self._like("TANH", self._div(x, cap)), float(cap))
