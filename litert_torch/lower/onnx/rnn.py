"""ONNX recurrent layers: LSTM onto the fused TFLite LSTM the ATen path writes, GRU unrolled over time.
Registered in `registry.OPS` like every ONNX op."""

from __future__ import annotations

import numpy as np

from litert_torch import ir
from litert_torch.lower.onnx.registry import onnx_op, tensor
from litert_torch.lower.aten.rnn import Weights, _lstm_layer, _reverse_time, _time_step, unrolled_gru, unrolled_lstm


@onnx_op("LSTM", parameters=[1, 2, 3, 4, 5, 6, 7], runtime_parameters=[1, 2, 3, 4, 5, 6, 7])
def lstm(ctx, node, inputs, attrs) -> tuple[ir.Tensor, ir.Tensor, ir.Tensor | None]:
    """LSTM (opsets 13-28).

    One UNIDIRECTIONAL_SEQUENCE_LSTM per direction (ONNX gates i, o, f, c reordered to i, f, g, o), the
    reverse direction on the time-reversed sequence; Y, and Y_h sliced from it. Weights computed at run time,
    peepholes, initial states, sequence_lens (forward) or a read Y_c: unrolled over time (`_unrolled_lstm`).

    Limits: default activations, no clip, no input_forget."""
    x, w, r = inputs[0], inputs[1], inputs[2]
    b = inputs[3] if len(inputs) > 3 else None
    if attrs.get("activations") or attrs.get("clip") or attrs.get("input_forget"):
        raise ctx.fail("LSTM with custom activations, clip or input_forget has no lowering yet")

    def given(k):
        v = inputs[k] if len(inputs) > k else None
        data = v.data if isinstance(v, ir.Tensor) and v.is_constant else v
        return None if v is None or (isinstance(data, np.ndarray) and k != 4 and not data.any()) else v

    runtime = any(isinstance(v, ir.Tensor) and not v.is_constant for v in (w, r, b))
    if runtime or any(given(k) is not None for k in (4, 5, 6, 7)) or 2 in node.used:
        return _unrolled_lstm(ctx, node, x, w, r, b, given(4), given(5), given(6), given(7), attrs)
    direction = attrs.get("direction", "forward")
    hidden = attrs["hidden_size"]
    layout = attrs.get("layout", 0)
    time_major = layout == 0
    seq, batch = (x.shape[0], x.shape[1]) if time_major else (x.shape[1], x.shape[0])
    wd, rd = np.asarray(w.data if isinstance(w, ir.Tensor) else w), np.asarray(r.data if isinstance(r, ir.Tensor) else r)
    bd = np.asarray(b.data if isinstance(b, ir.Tensor) else b) if b is not None else None
    order = [0, 2, 3, 1]  # ONNX i, o, f, c -> PyTorch i, f, g(c), o

    def param(name: str, data: np.ndarray) -> ir.Tensor:
        return ir.Tensor(name, data.shape, data.dtype, data)

    def reorder(m):
        blocks = np.split(m, 4, axis=0)
        return np.concatenate([blocks[i] for i in order], axis=0)

    directions = [direction] if direction != "bidirectional" else ["forward", "reverse"]
    time_axis = 0 if time_major else 1
    ys, finals = [], []
    for d, name in enumerate(directions):
        w_ih, w_hh = param("w_ih", reorder(wd[d])), param("w_hh", reorder(rd[d]))
        b_ih = param("b_ih", reorder(bd[d][:4 * hidden])) if bd is not None else None
        b_hh = param("b_hh", reorder(bd[d][4 * hidden:])) if bd is not None else None
        seq_in = x if name == "forward" else _reverse_time(ctx, x, time_axis)
        y = _lstm_layer(ctx, seq_in, w_ih, w_hh, b_ih, b_hh, hidden, batch, time_major)
        last = _time_step(ctx, y, time_axis, seq - 1)
        y = y if name == "forward" else _reverse_time(ctx, y, time_axis)
        ys.append(y)
        finals.append(last)
    # Y: [seq, num_directions, batch, hidden] (layout 0) or [batch, seq, num_directions, hidden] (layout 1).
    if time_major:
        parts = [ctx.reshape(y, [seq, 1, batch, hidden]) for y in ys]
        y_all = parts[0] if len(parts) == 1 else ctx.emit("CONCATENATION", parts, [seq, len(parts), batch, hidden],
                                                          x.dtype, axis=1, fused_activation_function="NONE")
    else:
        parts = [ctx.reshape(y, [batch, seq, 1, hidden]) for y in ys]
        y_all = parts[0] if len(parts) == 1 else ctx.emit("CONCATENATION", parts, [batch, seq, len(parts), hidden],
                                                          x.dtype, axis=2, fused_activation_function="NONE")
    h_parts = [ctx.reshape(f, [1, batch, hidden] if time_major else [batch, 1, hidden]) for f in finals]
    h_axis = 0 if time_major else 1
    h_shape = [len(h_parts), batch, hidden] if time_major else [batch, len(h_parts), hidden]
    y_h = h_parts[0] if len(h_parts) == 1 else ctx.emit("CONCATENATION", h_parts, h_shape, x.dtype, axis=h_axis,
                                                        fused_activation_function="NONE")
    return y_all, y_h, None


@onnx_op("GRU", parameters=[1, 2, 3, 4, 5], runtime_parameters=[1, 2, 3, 4, 5])
def gru(ctx, node, inputs, attrs) -> tuple[ir.Tensor, ir.Tensor]:
    """GRU (opsets 13-28).

    Unrolled over time (`rnn.unrolled_gru`): one FULLY_CONNECTED for the input projection of all steps, then
    per step a recurrent FULLY_CONNECTED, SPLIT into the update, reset and candidate gates, LOGISTIC/TANH, and
    h = (1 - z) * n + z * h_prev; both linear_before_reset forms, all directions; weights, biases and the
    initial state constant or computed at run time.

    Limits: default activations, no clip, no sequence_lens."""
    x, w, r = inputs[0], inputs[1], inputs[2]
    b = inputs[3] if len(inputs) > 3 else None
    if len(inputs) > 4 and inputs[4] is not None:
        raise ctx.fail("GRU with sequence_lens has no lowering yet")
    if attrs.get("activations") or attrs.get("clip"):
        raise ctx.fail("GRU with custom activations or clip has no lowering yet")
    hidden = attrs["hidden_size"]
    direction = attrs.get("direction", "forward")
    names = [direction] if direction != "bidirectional" else ["forward", "reverse"]
    reverse = [name == "reverse" for name in names]
    time_major = attrs.get("layout", 0) == 0
    bd = Weights(b) if b is not None else Weights(np.zeros((len(names), 6 * hidden), x.dtype))
    batch = x.shape[1] if time_major else x.shape[0]
    initial = _initial_states(ctx, inputs[5] if len(inputs) > 5 else None, len(names), batch, hidden, time_major,
                              x.dtype)
    states = unrolled_gru(ctx, x, Weights(w), Weights(r), bd, hidden, reverse, time_major=time_major,
                          linear_before_reset=bool(attrs.get("linear_before_reset", 0)), initial=initial)
    y = _sequence_output(ctx, states, batch, hidden, time_major, x.dtype)
    finals = [states[d][0] if backwards else states[d][-1] for d, backwards in enumerate(reverse)]
    h_axis = 0 if time_major else 1
    h_shape = list(finals[0].shape)
    h_shape[h_axis] = len(finals)
    y_h = finals[0] if len(finals) == 1 else ctx.emit("CONCATENATION", finals, h_shape, x.dtype, axis=h_axis,
                                                      fused_activation_function="NONE")
    return y, y_h


def _initial_states(ctx, value, directions: int, batch: int, hidden: int, time_major: bool, dtype):
    """Per direction, the starting state (given [D, batch, H], or [batch, D, H] in layout 1; returned as a step
    of the unrolled layers holds it, [1, batch, H] or [batch, 1, H]), or None for zeros."""
    if value is None:
        return None
    data = value.data if isinstance(value, ir.Tensor) and value.is_constant else value
    if isinstance(data, np.ndarray) and not data.any():
        return None
    unit = [1, batch] if time_major else [batch, 1]
    if not time_major:  # [batch, D, H] -> [D, batch, H]
        value = np.transpose(data, (1, 0, 2)) if isinstance(data, np.ndarray) else ctx.transpose(value, (1, 0, 2))
    state = Weights(value)
    return [ctx.reshape(state.block(ctx, d, 0, batch, dtype, "initial"), [*unit, hidden]) for d in range(directions)]


def _unrolled_lstm(ctx, node, x, w, r, b, lengths, h0, c0, peep, attrs) -> tuple[ir.Tensor, ir.Tensor, ir.Tensor]:
    """An LSTM unrolled over time (`rnn.unrolled_lstm`), peepholes included. With sequence_lens a batch entry
    stops at its length: its state is kept and its outputs are zero after it. Returns Y, Y_h and Y_c."""
    hidden = attrs["hidden_size"]
    direction = attrs.get("direction", "forward")
    names = [direction] if direction != "bidirectional" else ["forward", "reverse"]
    time_major = attrs.get("layout", 0) == 0
    dtype = x.dtype
    seq, batch = (x.shape[0], x.shape[1]) if time_major else (x.shape[1], x.shape[0])
    if lengths is not None and "reverse" in names:
        raise ctx.fail("LSTM with sequence_lens running backwards has no lowering yet")
    unit = [1, batch] if time_major else [batch, 1]
    masks = None
    if lengths is not None:
        if not isinstance(seq, int):
            raise ctx.fail("an unrolled LSTM needs static sequence, batch and feature sizes")
        steps = ctx.const(np.arange(seq, dtype=np.int32).reshape(seq, 1), name="steps")
        lens = ctx.reshape(ctx.cast(tensor(ctx, lengths), np.int32), (1, batch))
        live = ctx.emit("LESS", [steps, lens], (seq, batch), np.bool_)  # [seq, batch]: step t is inside entry b
        masks = [ctx.reshape(ctx.slice(live, [t, 0], [1, batch]), [*unit, 1]) for t in range(seq)]
    bias = Weights(b) if b is not None else Weights(np.zeros((len(names), 8 * hidden), dtype))
    ys, finals_h, finals_c = unrolled_lstm(
        ctx, x, Weights(w), Weights(r), bias, hidden, [name == "reverse" for name in names], time_major=time_major,
        initial_h=_initial_states(ctx, h0, len(names), batch, hidden, time_major, dtype),
        initial_c=_initial_states(ctx, c0, len(names), batch, hidden, time_major, dtype),
        peepholes=Weights(peep) if peep is not None else None, masks=masks)
    y = _sequence_output(ctx, ys, batch, hidden, time_major, dtype)
    state_axis = 0 if time_major else 1

    def joined_states(finals):
        if len(finals) == 1:
            return finals[0]
        out = list(finals[0].shape)
        out[state_axis] = len(finals)
        return ctx.emit("CONCATENATION", finals, out, dtype, axis=state_axis, fused_activation_function="NONE")
    return y, joined_states(finals_h), joined_states(finals_c)


def _sequence_output(ctx, states: list[list[ir.Tensor]], batch: int, hidden: int, time_major: bool, dtype):
    """Y of an unrolled recurrent layer from each direction's per-step states: [seq, D, batch, H] (layout 0) or
    [batch, seq, D, H] (layout 1)."""
    dir_axis, time_axis = (1, 0) if time_major else (2, 1)
    seq = len(states[0])
    step_shape = [1, 1, batch, hidden] if time_major else [batch, 1, 1, hidden]
    per_step = []
    for t in range(seq):
        parts = [ctx.reshape(states[d][t], step_shape) for d in range(len(states))]
        shape = list(step_shape)
        shape[dir_axis] = len(parts)
        per_step.append(parts[0] if len(parts) == 1 else ctx.emit(
            "CONCATENATION", parts, shape, dtype, axis=dir_axis, fused_activation_function="NONE"))
    y_shape = list(per_step[0].shape)
    y_shape[time_axis] = seq
    return per_step[0] if seq == 1 else ctx.emit("CONCATENATION", per_step, y_shape, dtype, axis=time_axis,
                                                 fused_activation_function="NONE")
