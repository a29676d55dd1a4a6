"""Recurrent layers as TFLite's fused sequence ops."""

from __future__ import annotations

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.registry import LoweringContext, lowers

aten = torch.ops.aten


def _lstm_layer(ctx: LoweringContext, x: ir.Tensor, w_ih, w_hh, b_ih, b_hh, hidden: int, batch: int,
                time_major: bool) -> ir.Tensor:
    """One direction of one layer: UNIDIRECTIONAL_SEQUENCE_LSTM with PyTorch's gate blocks (i, f, g, o) split
    into TFLite's input / forget / cell / output weights and the two biases summed."""
    gates = [slice(i * hidden, (i + 1) * hidden) for i in range(4)]
    w_in = [ctx.const(w_ih.data[g], name="w_ih") for g in gates]
    w_rec = [ctx.const(w_hh.data[g], name="w_hh") for g in gates]
    if b_ih is not None:
        bias = b_ih.data.astype(np.float64) + b_hh.data.astype(np.float64)
    else:
        bias = np.zeros(4 * hidden)
    biases = [ctx.const(bias[g].astype(x.dtype), name="bias") for g in gates]
    state_h = ctx.tensor([batch, hidden], x.dtype, "h_state", variable=True)
    state_c = ctx.tensor([batch, hidden], x.dtype, "c_state", variable=True)
    steps = x.shape[0] if time_major else x.shape[1]
    out_shape = [steps, batch, hidden] if time_major else [batch, steps, hidden]
    inputs = [x, *w_in, *w_rec, None, None, None, *biases, None, None, state_h, state_c, None, None, None, None]
    return ctx.emit("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, out_shape, x.dtype, fused_activation_function="TANH",
                    cell_clip=0.0, proj_clip=0.0, time_major=time_major, asymmetric_quantize_inputs=False)


def _reverse_time(ctx: LoweringContext, x: ir.Tensor, axis: int) -> ir.Tensor:
    return ctx.emit("REVERSE_V2", [x, ctx.const(np.array([axis], np.int32), name="time_axis")], like=x)


def _time_step(ctx: LoweringContext, y: ir.Tensor, axis: int, index: int) -> ir.Tensor:
    begins = [0] * y.rank
    sizes = list(y.shape)
    begins[axis], sizes[axis] = index, 1
    step = ctx.emit("SLICE", [y, ctx.const(np.array(begins, np.int32), name="begin"),
                              ctx.const(np.array(sizes, np.int32), name="size")], sizes, y.dtype)
    return ctx.reshape(step, [s for i, s in enumerate(sizes) if i != axis])


@lowers(aten.lstm.input)
def lower_lstm(ctx, node, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """nn.LSTM as one UNIDIRECTIONAL_SEQUENCE_LSTM per layer and direction (the reverse direction runs on the
    REVERSE_V2 of the sequence); the final hidden state h_n is sliced from the outputs.

    Limits: zero initial state only; the final cell state c_n is not available; no projections (proj_size)."""
    if train:
        raise ctx.fail("LSTM in train mode; call model.eval() first")
    for state in hx:
        if not state.is_constant or state.data.any():
            raise ctx.fail("LSTM with a non-zero initial state (h0, c0) has no fused lowering yet")
    used = node.used
    if 2 in used:
        raise ctx.fail("the LSTM's final cell state c_n is read, but the fused TFLite LSTM does not output it")
    directions = 2 if bidirectional else 1
    per_layer = len(params) // (num_layers * directions)
    if per_layer not in (2, 4):
        raise ctx.fail("LSTM with projections (proj_size) has no lowering yet")
    hidden = params[1].shape[1]
    time_major = not batch_first
    time_axis = 0 if time_major else 1
    batch = x.shape[1] if time_major else x.shape[0]
    finals = []
    layer_in = x
    for layer in range(num_layers):
        outs = []
        for direction in range(directions):
            base = (layer * directions + direction) * per_layer
            w_ih, w_hh = params[base], params[base + 1]
            b_ih, b_hh = (params[base + 2], params[base + 3]) if per_layer == 4 else (None, None)
            if not all(t is None or t.is_constant for t in (w_ih, w_hh, b_ih, b_hh)):
                raise ctx.fail("LSTM weights must be constants")
            seq = layer_in if direction == 0 else _reverse_time(ctx, layer_in, time_axis)
            y = _lstm_layer(ctx, seq, w_ih, w_hh, b_ih, b_hh, hidden, batch, time_major)
            steps = y.shape[time_axis]
            if 1 in used:
                finals.append(_time_step(ctx, y, time_axis, steps - 1))
            outs.append(y if direction == 0 else _reverse_time(ctx, y, time_axis))
        if directions == 1:
            layer_in = outs[0]
        else:
            shape = list(outs[0].shape)
            shape[-1] *= 2
            layer_in = ctx.emit("CONCATENATION", outs, shape, x.dtype, axis=len(shape) - 1,
                                fused_activation_function="NONE")
    h_n = None
    if finals:
        stacked = [ctx.reshape(f, [1, *f.shape]) for f in finals]
        h_n = stacked[0] if len(stacked) == 1 else ctx.emit(
            "CONCATENATION", stacked, [len(stacked), batch, hidden], x.dtype, axis=0, fused_activation_function="NONE")
    return layer_in, h_n, None



class Weights:
    """A recurrent layer's parameter with a leading direction axis ([D, rows, cols] or [D, n]): a constant
    (its blocks become constants) or a tensor computed at run time (its blocks are SLICEs of it)."""

    def __init__(self, value):
        self.value = value

    @property
    def constant(self) -> bool:
        return not isinstance(self.value, ir.Tensor) or self.value.is_constant

    def array(self) -> np.ndarray:
        return np.asarray(self.value.data if isinstance(self.value, ir.Tensor) else self.value)

    def block(self, ctx: LoweringContext, d: int, start: int, stop: int, dtype, name: str = "w") -> ir.Tensor:
        """Rows start:stop of direction d."""
        if self.constant:
            return ctx.const(self.array()[d][start:stop].astype(dtype), name=name)
        t = self.value
        rest = [int(n) for n in t.shape[2:]]
        piece = ctx.slice(t, [d, start] + [0] * len(rest), [1, stop - start] + rest)
        return ctx.cast(ctx.reshape(piece, [stop - start] + rest), dtype)


def unrolled_gru(ctx: LoweringContext, x: ir.Tensor, wd, rd, bd, hidden: int,
                 reverse: list[bool], *, time_major: bool, linear_before_reset: bool,
                 initial: list[ir.Tensor] | None = None) -> list[list[ir.Tensor]]:
    """A GRU layer, every direction, unrolled over time, in ONNX's terms: per direction d, `wd[d]` [3H, F] and
    `rd[d]` [3H, H] hold the update, reset and candidate gates (z, r, h) and `bd[d]` [6H] the input then the
    recurrent biases (numpy arrays or `Weights`, constant or computed at run time); `reverse[d]` runs it
    backwards. One FULLY_CONNECTED projects every step's input, then
    per step the recurrent FULLY_CONNECTEDs (one per gate with linear_before_reset), LOGISTIC/TANH and
    h = n + z * (h_prev - n)
    (= (1 - z) * n + z * h_prev). `initial[d]` is the starting state, shaped like a step's state (zero when
    None). Returns per direction the state after each time step, in time order, each [1, batch, H] when
    time-major and [batch, 1, H] otherwise (no reshape per step)."""
    seq, batch, features = (x.shape[0], x.shape[1], x.shape[2]) if time_major else (x.shape[1], x.shape[0], x.shape[2])
    dtype = x.dtype
    wd, rd, bd = (v if isinstance(v, Weights) else Weights(v) for v in (wd, rd, bd))
    fc = dict(fused_activation_function="NONE", weights_format="DEFAULT", keep_num_dims=True,
              asymmetric_quantize_inputs=False)
    unit = [1, batch] if time_major else [batch, 1]
    shape = [*unit, hidden]
    time_axis = 0 if time_major else 1
    gate_axis = ctx.const(np.array(2, np.int32), name="gate_axis")
    flat = ctx.reshape(x, [seq * batch, features] if time_major else [batch * seq, features])
    result = []

    def add(a, b):
        return ctx.emit("ADD", [a, b], shape, dtype, fused_activation_function="NONE")

    def mul(a, b):
        return ctx.emit("MUL", [a, b], shape, dtype, fused_activation_function="NONE")

    for d, backwards in enumerate(reverse):
        proj = ctx.emit("FULLY_CONNECTED", [flat, wd.block(ctx, d, 0, 3 * hidden, dtype),
                                            bd.block(ctx, d, 0, 3 * hidden, dtype, "bias")],
                        [flat.shape[0], 3 * hidden], dtype, **{**fc, "keep_num_dims": False})
        proj = ctx.reshape(proj, [seq, batch, 3 * hidden] if time_major else [batch, seq, 3 * hidden])
        step_shape = [*unit, 3 * hidden]
        steps = ctx.emit_multi("SPLIT", [ctx.const(np.array(time_axis, np.int32), name="time_axis"), proj],
                               [(step_shape, dtype)] * seq, num_splits=seq) if seq > 1 else [proj]
        def r_b(start: int, stop: int) -> ir.Tensor:  # the recurrent bias of gates start:stop (in units of H)
            return bd.block(ctx, d, 3 * hidden + start * hidden, 3 * hidden + stop * hidden, dtype, "r_b")

        def r_w(start: int, stop: int) -> ir.Tensor:
            return rd.block(ctx, d, start * hidden, stop * hidden, dtype, "r_w")

        h = initial[d] if initial is not None else ctx.const(np.zeros(shape, dtype), name="h0")
        states: dict[int, ir.Tensor] = {}
        for t in (range(seq - 1, -1, -1) if backwards else range(seq)):
            xz, xr, xh = ctx.emit_multi("SPLIT", [gate_axis, steps[t]], [(shape, dtype)] * 3, num_splits=3)
            if linear_before_reset:
                # One FULLY_CONNECTED per gate: a 3H-wide product is split across threads, each H-wide one is
                # not, and the SPLIT of its output goes away.
                if h.is_constant and not h.data.any() and bd.constant:  # the zero start: the product is its bias
                    bias = bd.array()[d][3 * hidden:].astype(dtype)
                    hz, hr, hh = (ctx.const(np.broadcast_to(bias[g * hidden:(g + 1) * hidden], shape).copy(),
                                            name="r_b") for g in range(3))
                else:
                    hz, hr, hh = (ctx.emit("FULLY_CONNECTED", [h, r_w(g, g + 1), r_b(g, g + 1)], shape, dtype, **fc)
                                  for g in range(3))
            else:
                rz_rr = ctx.emit("FULLY_CONNECTED", [h, r_w(0, 2), r_b(0, 2)], [*unit, 2 * hidden], dtype, **fc)
                hz, hr = ctx.emit_multi("SPLIT", [gate_axis, rz_rr], [(shape, dtype)] * 2, num_splits=2)
            z = ctx.emit("LOGISTIC", [add(xz, hz)], shape, dtype)
            rg = ctx.emit("LOGISTIC", [add(xr, hr)], shape, dtype)
            if linear_before_reset:
                cand = mul(rg, hh)
            else:
                cand = ctx.emit("FULLY_CONNECTED", [mul(rg, h), r_w(2, 3), r_b(2, 3)], shape, dtype, **fc)
            n = ctx.emit("TANH", [add(xh, cand)], shape, dtype)
            h = add(n, mul(z, ctx.emit("SUB", [h, n], shape, dtype, fused_activation_function="NONE")))
            states[t] = h
        result.append([states[t] for t in range(seq)])
    return result


def sequence_of(ctx: LoweringContext, states: list[list[ir.Tensor]], time_major: bool) -> ir.Tensor:
    """The steps' states (per direction, in time order) as one sequence, directions side by side on the last
    axis: [seq, batch, D*H] when time-major, else [batch, seq, D*H] (PyTorch's RNN output)."""
    time_axis = 0 if time_major else 1
    per_step = []
    for t in range(len(states[0])):
        parts = [direction[t] for direction in states]
        shape = list(parts[0].shape)
        shape[2] *= len(parts)
        per_step.append(parts[0] if len(parts) == 1 else ctx.emit(
            "CONCATENATION", parts, shape, parts[0].dtype, axis=2, fused_activation_function="NONE"))
    if len(per_step) == 1:
        return per_step[0]
    shape = list(per_step[0].shape)
    shape[time_axis] = len(per_step)
    return ctx.emit("CONCATENATION", per_step, shape, per_step[0].dtype, axis=time_axis,
                    fused_activation_function="NONE")


@lowers(aten.gru.input)
def lower_gru(ctx, node, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """nn.GRU unrolled over time (`unrolled_gru`, PyTorch's gates r, z, n as ONNX's z, r, h with
    linear_before_reset), every layer and direction; the initial state h0 may be any tensor; h_n is the last
    state of each layer and direction.

    Limits: eval mode only."""
    if train:
        raise ctx.fail("GRU in train mode; call model.eval() first")
    directions = 2 if bidirectional else 1
    per_layer = len(params) // (num_layers * directions)
    hidden = params[1].shape[1]
    time_major = not batch_first
    batch = x.shape[1] if time_major else x.shape[0]
    unit = [1, batch] if time_major else [batch, 1]
    zero_start = hx.is_constant and not hx.data.any()
    reorder = np.r_[hidden:2 * hidden, 0:hidden, 2 * hidden:3 * hidden]  # (r, z, n) -> (z, r, n)
    layer_in, finals = x, []
    for layer in range(num_layers):
        wd, rd, bd, initial = [], [], [], []
        for direction in range(directions):
            base = (layer * directions + direction) * per_layer
            tensors = params[base:base + per_layer]
            if not all(t.is_constant for t in tensors):
                raise ctx.fail("GRU weights must be constants")
            w_ih, w_hh = tensors[0].data, tensors[1].data
            b_ih, b_hh = ((tensors[2].data, tensors[3].data) if per_layer == 4 else
                          (np.zeros(3 * hidden, w_ih.dtype), np.zeros(3 * hidden, w_ih.dtype)))
            wd.append(w_ih[reorder])
            rd.append(w_hh[reorder])
            bd.append(np.concatenate([b_ih[reorder], b_hh[reorder]]))
            if not zero_start:
                h0 = _time_step(ctx, hx, 0, layer * directions + direction)  # [batch, hidden]
                initial.append(ctx.reshape(h0, [*unit, hidden]))
        states = unrolled_gru(ctx, layer_in, np.stack(wd), np.stack(rd), np.stack(bd), hidden,
                              [d == 1 for d in range(directions)], time_major=time_major, linear_before_reset=True,
                              initial=initial or None)
        for d, direction in enumerate(states):  # the backward direction ends at the first time step
            finals.append(direction[0] if d == 1 else direction[-1])
        layer_in = sequence_of(ctx, states, time_major)
    h_n = None
    if 1 in node.used:
        stacked = [ctx.reshape(f, [1, batch, hidden]) for f in finals]
        h_n = stacked[0] if len(stacked) == 1 else ctx.emit(
            "CONCATENATION", stacked, [len(stacked), batch, hidden], x.dtype, axis=0, fused_activation_function="NONE")
    return layer_in, h_n
