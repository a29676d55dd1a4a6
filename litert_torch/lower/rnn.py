"""Recurrent layers as TFLite's fused sequence ops."""

from __future__ import annotations

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.registry import LoweringContext, lowers

aten = torch.ops.aten


def _used_outputs(node) -> set[int]:
    """Indices of the tuple outputs of `node` that something reads."""
    return {user.args[1] for user in node.users if user.users}


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
    used = _used_outputs(node)
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
