"""Recurrent layers as TFLite's fused sequence ops."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.common.registry import LoweringContext, lowers

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
def lower_lstm(ctx, node, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first) -> tuple[ir.Tensor, ir.Tensor | None, ir.Tensor | None]:
    """lstm.input(Tensor input, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor, Tensor)

    nn.LSTM as one UNIDIRECTIONAL_SEQUENCE_LSTM per layer and direction (the reverse direction runs on the
    REVERSE_V2 of the sequence), h_n sliced from the outputs. The fused op starts from a zero state and keeps
    its final cell state to itself, so an initial state (h0, c0) other than zeros, a read c_n or projections
    (proj_size) unroll the layers over time instead (`unrolled_lstm`).

    Limits: eval mode only; weights must be constants."""
    if train:
        raise ctx.fail("LSTM in train mode; call model.eval() first")
    directions = 2 if bidirectional else 1
    per_layer = len(params) // (num_layers * directions)
    projected = per_layer in (3, 5)
    if not all(t.is_constant for t in params):
        raise ctx.fail("LSTM weights must be constants")
    zero_start = all(state.is_constant and not state.data.any() for state in hx)
    if not zero_start or projected or 2 in node.used:
        return _unrolled_torch_lstm(ctx, node, x, hx, params, num_layers, directions, batch_first)
    used = node.used
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
    return layer_in, _stacked_states(ctx, finals, batch), None


def _stacked_states(ctx: LoweringContext, finals: list[ir.Tensor], batch: int) -> ir.Tensor | None:
    """Final states of every layer and direction as PyTorch's [layers * directions, batch, size]."""
    if not finals:
        return None
    size = finals[0].shape[-1]
    stacked = [ctx.reshape(f, [1, batch, size]) for f in finals]
    return stacked[0] if len(stacked) == 1 else ctx.emit(
        "CONCATENATION", stacked, [len(stacked), batch, size], stacked[0].dtype, axis=0,
        fused_activation_function="NONE")


def _unrolled_torch_lstm(ctx, node, x, hx, params, num_layers: int, directions: int, batch_first: bool):
    """nn.LSTM unrolled over time, every layer and direction: PyTorch's gates (i, f, g, o) reordered to ONNX's
    (i, o, f, c) for `unrolled_lstm`, h0 and c0 read per layer and direction, projections (w_hr) applied to
    each step's h. Returns the output sequence, h_n and c_n."""
    per_layer = len(params) // (num_layers * directions)
    hidden = params[0].shape[0] // 4  # w_ih [4H, F]; w_hh is [4H, P] with projections
    time_major = not batch_first
    batch = x.shape[1] if time_major else x.shape[0]
    unit = [1, batch] if time_major else [batch, 1]
    reorder = np.r_[0:hidden, 3 * hidden:4 * hidden, hidden:2 * hidden, 2 * hidden:3 * hidden]
    states = [None if state.is_constant and not state.data.any() else Weights(state) for state in hx]

    def start(state: Weights | None, index: int):  # row `index` of [layers * directions, batch, size]
        if state is None:
            return None
        size = int(state.value.shape[-1])
        return ctx.reshape(state.block(ctx, index, 0, batch, x.dtype, "initial"), [*unit, size])

    layer_in, finals_h, finals_c = x, [], []
    for layer in range(num_layers):
        wd, rd, bd, proj, initial_h, initial_c = [], [], [], [], [], []
        for direction in range(directions):
            index = layer * directions + direction
            tensors = [t.data for t in params[index * per_layer:(index + 1) * per_layer]]
            w_ih, w_hh = tensors[0], tensors[1]
            if per_layer >= 4:
                b_ih, b_hh = tensors[2], tensors[3]
            else:
                b_ih = b_hh = np.zeros(4 * hidden, w_ih.dtype)
            wd.append(w_ih[reorder])
            rd.append(w_hh[reorder])
            bd.append(np.concatenate([b_ih[reorder], b_hh[reorder]]))
            if per_layer in (3, 5):
                proj.append(tensors[-1])
            initial_h.append(start(states[0], index))
            initial_c.append(start(states[1], index))
        outputs, hs, cs = unrolled_lstm(
            ctx, layer_in, np.stack(wd), np.stack(rd), np.stack(bd), hidden, [d == 1 for d in range(directions)],
            time_major=time_major, initial_h=initial_h if states[0] is not None else None,
            initial_c=initial_c if states[1] is not None else None, projection=np.stack(proj) if proj else None)
        finals_h += hs
        finals_c += cs
        layer_in = sequence_of(ctx, outputs, time_major)
    used = node.used
    return (layer_in, _stacked_states(ctx, finals_h, batch) if 1 in used else None,
            _stacked_states(ctx, finals_c, batch) if 2 in used else None)


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
    fc: dict[str, Any] = dict(fused_activation_function="NONE", weights_format="DEFAULT", keep_num_dims=True,
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
                if h.is_constant and not h.values.any() and bd.constant:  # the zero start: the product is its bias
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


def unrolled_lstm(ctx: LoweringContext, x: ir.Tensor, wd, rd, bd, hidden: int, reverse: list[bool], *,
                  time_major: bool, initial_h: list[ir.Tensor] | None = None,
                  initial_c: list[ir.Tensor] | None = None, peepholes=None, projection=None,
                  masks: list[ir.Tensor] | None = None
                  ) -> tuple[list[list[ir.Tensor]], list[ir.Tensor], list[ir.Tensor]]:
    """An LSTM layer, every direction, unrolled over time, in ONNX's terms: per direction d, `wd[d]` [4H, F] and
    `rd[d]` [4H, P] hold the gates i, o, f, c, `bd[d]` [8H] the input then the recurrent biases (numpy arrays or
    `Weights`, constant or computed at run time); `reverse[d]` runs it backwards. One FULLY_CONNECTED projects
    every step's input (both biases), then per step the recurrent FULLY_CONNECTED, SPLIT, the peepholes
    (`peepholes[d]` [3H]: i and f on the previous cell state, o on the new one), LOGISTIC/TANH,
    c = f * c + i * tanh(g) and h = o * tanh(c), then h = h @ projection[d].T where `projection[d]` [P, H] is
    given (PyTorch's proj_size; P = H otherwise). `initial_h[d]` / `initial_c[d]` are the starting states,
    shaped like a step's state (zero when None). With `masks` (bool per step, shaped [*unit, 1]) a batch entry
    whose mask is false keeps its state and outputs zeros at that step.

    Returns per direction the output of each step in time order ([1, batch, P] when time-major, [batch, 1, P]
    otherwise), and per direction the final h and c (after the last step it runs: the first time step when
    running backwards)."""
    seq, batch, features = (x.shape[0], x.shape[1], x.shape[2]) if time_major else (x.shape[1], x.shape[0], x.shape[2])
    if not all(isinstance(v, int) for v in (seq, batch, features)):
        raise ctx.fail("an unrolled LSTM needs static sequence, batch and feature sizes")
    dtype = x.dtype
    wd, rd, bd = (v if isinstance(v, Weights) else Weights(v) for v in (wd, rd, bd))
    projection = projection if projection is None or isinstance(projection, Weights) else Weights(projection)
    out_size = int(projection.array().shape[1]) if projection is not None else hidden
    unit = [1, batch] if time_major else [batch, 1]
    shape, h_shape, gates_shape = [*unit, hidden], [*unit, out_size], [*unit, 4 * hidden]
    fc: dict[str, Any] = dict(fused_activation_function="NONE", weights_format="DEFAULT", keep_num_dims=True,
              asymmetric_quantize_inputs=False)

    def op(opcode, *args, out=None):
        opts = {"fused_activation_function": "NONE"} if opcode in ("ADD", "MUL") else {}
        return ctx.emit(opcode, list(args), shape if out is None else out, dtype, **opts)

    def zero(t: ir.Tensor) -> bool:
        return t.is_constant and not t.values.any()

    time_axis = 0 if time_major else 1
    flat = ctx.reshape(x, [seq * batch, features])
    zeros_h = ctx.const(np.zeros(h_shape, dtype), name="zeros")
    zeros_c = ctx.const(np.zeros(shape, dtype), name="zeros") if out_size != hidden else zeros_h
    gate_axis = ctx.const(np.array(2, np.int32), name="gate_axis")
    outputs, finals_h, finals_c = [], [], []
    for d, backwards in enumerate(reverse):
        bias = bd.block(ctx, d, 0, 4 * hidden, dtype, "bias")
        rec_bias = bd.block(ctx, d, 4 * hidden, 8 * hidden, dtype, "r_bias")
        bias = ctx.const(bias.data + rec_bias.data, name="bias") if bias.is_constant and rec_bias.is_constant \
            else op("ADD", bias, rec_bias, out=[4 * hidden])
        proj = ctx.emit("FULLY_CONNECTED", [flat, wd.block(ctx, d, 0, 4 * hidden, dtype), bias],
                        [flat.shape[0], 4 * hidden], dtype, **{**fc, "keep_num_dims": False})
        proj = ctx.reshape(proj, [seq, batch, 4 * hidden] if time_major else [batch, seq, 4 * hidden])
        per_step = ctx.emit_multi("SPLIT", [ctx.const(np.array(time_axis, np.int32), name="time_axis"), proj],
                                  [(gates_shape, dtype)] * seq, num_splits=seq) if seq > 1 else [proj]
        rec = rd.block(ctx, d, 0, 4 * hidden, dtype, "r_w")
        if peepholes is not None:
            peep = peepholes if isinstance(peepholes, Weights) else Weights(peepholes)
            p_i, p_o, p_f = (ctx.reshape(peep.block(ctx, d, g * hidden, (g + 1) * hidden, dtype, "peephole"),
                                         [hidden]) for g in range(3))
        w_proj = projection.block(ctx, d, 0, out_size, dtype, "w_proj") if projection is not None else None
        h = initial_h[d] if initial_h is not None else zeros_h
        c = initial_c[d] if initial_c is not None else zeros_c
        outs: dict[int, ir.Tensor] = {}
        for t in (range(seq - 1, -1, -1) if backwards else range(seq)):
            g_all = per_step[t] if zero(h) else op(
                "ADD", per_step[t], ctx.emit("FULLY_CONNECTED", [h, rec, None], gates_shape, dtype, **fc),
                out=gates_shape)
            gi, go, gf, gc = ctx.emit_multi("SPLIT", [gate_axis, g_all], [(shape, dtype)] * 4, num_splits=4)
            if peepholes is not None:
                gi = op("ADD", gi, op("MUL", c, p_i))
                gf = op("ADD", gf, op("MUL", c, p_f))
            i_gate = op("LOGISTIC", gi)
            c_new = op("MUL", i_gate, op("TANH", gc))
            if not zero(c):
                c_new = op("ADD", op("MUL", op("LOGISTIC", gf), c), c_new)
            if peepholes is not None:
                go = op("ADD", go, op("MUL", c_new, p_o))
            h_new = op("MUL", op("LOGISTIC", go), op("TANH", c_new))
            if w_proj is not None:
                h_new = ctx.emit("FULLY_CONNECTED", [h_new, w_proj, None], h_shape, dtype, **fc)
            if masks is not None:
                outs[t] = ctx.emit("SELECT_V2", [masks[t], h_new, zeros_h], h_shape, dtype)
                h = ctx.emit("SELECT_V2", [masks[t], h_new, h], h_shape, dtype)
                c = ctx.emit("SELECT_V2", [masks[t], c_new, c], shape, dtype)
            else:
                outs[t], h, c = h_new, h_new, c_new
        outputs.append([outs[t] for t in range(seq)])
        finals_h.append(h)
        finals_c.append(c)
    return outputs, finals_h, finals_c


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
def lower_gru(ctx, node, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first) -> tuple[ir.Tensor, ir.Tensor | None]:
    """gru.input(Tensor input, Tensor hx, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor)

    nn.GRU unrolled over time (`unrolled_gru`, PyTorch's gates r, z, n as ONNX's z, r, h with
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
        for d, steps in enumerate(states):  # the backward direction ends at the first time step
            finals.append(steps[0] if d == 1 else steps[-1])
        layer_in = sequence_of(ctx, states, time_major)
    return layer_in, _stacked_states(ctx, finals, batch) if 1 in node.used else None
