"""ONNX recurrent layers: LSTM onto the fused TFLite LSTM the ATen path writes, GRU unrolled over time.
Registered in `onnx_registry.LOWERINGS` like every ONNX op."""

from __future__ import annotations

import numpy as np

from litert_torch import ir
from litert_torch.lower.onnx_registry import onnx_op
from litert_torch.lower.rnn import _lstm_layer, _reverse_time, _time_step, unrolled_gru


@onnx_op("LSTM")
def lstm(ctx, node, inputs, attrs):
    """One UNIDIRECTIONAL_SEQUENCE_LSTM per direction (ONNX gates i, o, f, c reordered to i, f, g, o), the
    reverse direction on the time-reversed sequence; Y, and Y_h sliced from it.

    Limits: zero initial state, no peepholes, default activations, no Y_c."""
    x, w, r = inputs[0], inputs[1], inputs[2]
    b = inputs[3] if len(inputs) > 3 else None
    for extra, what in ((4, "sequence_lens"), (5, "initial_h"), (6, "initial_c"), (7, "P (peepholes)")):
        if len(inputs) > extra and inputs[extra] is not None:
            v = inputs[extra]
            data = v.data if isinstance(v, ir.Tensor) and v.is_constant else v
            if extra in (5, 6) and isinstance(data, np.ndarray) and not data.any():
                continue
            raise ctx.fail(f"LSTM with {what} has no lowering yet")
    if attrs.get("activations") or attrs.get("clip") or attrs.get("input_forget"):
        raise ctx.fail("LSTM with custom activations, clip or input_forget has no lowering yet")
    if 2 in node.used:
        raise ctx.fail("the LSTM's Y_c output is read, but the fused TFLite LSTM does not output it")
    direction = attrs.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
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


@onnx_op("GRU")
def gru(ctx, node, inputs, attrs):
    """Unrolled over time (`rnn.unrolled_gru`): one FULLY_CONNECTED for the input projection of all steps, then
    per step a recurrent FULLY_CONNECTED, SPLIT into the update, reset and candidate gates, LOGISTIC/TANH, and
    h = (1 - z) * n + z * h_prev; both linear_before_reset forms, all directions.

    Limits: zero initial state, default activations, no sequence_lens."""
    x, w, r = inputs[0], inputs[1], inputs[2]
    b = inputs[3] if len(inputs) > 3 else None
    for extra, what in ((4, "sequence_lens"), (5, "initial_h")):
        if len(inputs) > extra and inputs[extra] is not None:
            v = inputs[extra]
            data = v.data if isinstance(v, ir.Tensor) and v.is_constant else v
            if extra == 5 and isinstance(data, np.ndarray) and not data.any():
                continue
            raise ctx.fail(f"GRU with {what} has no lowering yet")
    if attrs.get("activations") or attrs.get("clip"):
        raise ctx.fail("GRU with custom activations or clip has no lowering yet")
    hidden = attrs["hidden_size"]
    direction = attrs.get("direction", "forward")
    data = lambda v: np.asarray(v.data if isinstance(v, ir.Tensor) else v)  # noqa: E731
    wd, rd = data(w), data(r)
    bd = data(b) if b is not None else np.zeros((wd.shape[0], 6 * hidden), x.dtype)
    names = [direction] if direction != "bidirectional" else ["forward", "reverse"]
    reverse = [name == "reverse" for name in names]
    time_major = attrs.get("layout", 0) == 0
    states = unrolled_gru(ctx, x, wd, rd, bd, hidden, reverse, time_major=time_major,
                          linear_before_reset=bool(attrs.get("linear_before_reset", 0)))
    # Y is [seq, D, batch, H] (layout 0) or [batch, seq, D, H] (layout 1); Y_h [D, batch, H] or [batch, D, H].
    dir_axis, time_axis = (1, 0) if time_major else (2, 1)
    seq, batch = len(states[0]), states[0][0].shape[1 if time_major else 0]
    step_shape = [1, 1, batch, hidden] if time_major else [batch, 1, 1, hidden]
    per_step = []
    for t in range(seq):
        parts = [ctx.reshape(states[d][t], step_shape) for d in range(len(states))]
        shape = list(step_shape)
        shape[dir_axis] = len(parts)
        per_step.append(parts[0] if len(parts) == 1 else ctx.emit(
            "CONCATENATION", parts, shape, x.dtype, axis=dir_axis, fused_activation_function="NONE"))
    y_shape = list(per_step[0].shape)
    y_shape[time_axis] = seq
    y = per_step[0] if seq == 1 else ctx.emit("CONCATENATION", per_step, y_shape, x.dtype, axis=time_axis,
                                              fused_activation_function="NONE")
    finals = [states[d][0] if backwards else states[d][-1] for d, backwards in enumerate(reverse)]
    h_axis = 0 if time_major else 1
    h_shape = list(finals[0].shape)
    h_shape[h_axis] = len(finals)
    y_h = finals[0] if len(finals) == 1 else ctx.emit("CONCATENATION", finals, h_shape, x.dtype, axis=h_axis,
                                                      fused_activation_function="NONE")
    return y, y_h
