"""Delegate-aware rewrites: the same computation in a form the accelerators take.

Each rewrite replaces ops that a delegate rejects by an equivalent form it accepts, and names the targets it
serves; `convert(..., target=...)` runs those whose targets it was asked for (`rewrites_for`). They run after
the main pipeline, followed by a cleanup, and the delegate plan records the residency before and after.

    rank_reduce_transposes     x[1,7,7,2,58] -> TRANSPOSE(0,1,2,4,3)   x[49,2,58] -> TRANSPOSE(0,2,1)
                               (axes that move together merge; GPUs and NPUs take rank <= 4)
    broadcast_to_mul           BROADCAST_TO(x, [2,4,3])               MUL(x, ones[1,1,3])  (x * 1 == x exactly)
    gather_to_slice            GATHER(x, [1,3,5], axis=1)             STRIDED_SLICE(x, begin 1, stride 2, axis 1)
    select_to_bound            SELECT_V2(mask, x, -inf), mask const   MINIMUM(x, where(mask, +inf, -inf))
    unroll_lstm                UNIDIRECTIONAL_SEQUENCE_LSTM           per step: FULLY_CONNECTED, SPLIT, LOGISTIC,
                                                                      TANH, MUL, ADD (no fused-LSTM kernel off the
                                                                      CPU); REVERSE_V2 on its input or output
                                                                      becomes the order of the steps
    nearest_upsample_to_depth_to_space
                               RESIZE_NEAREST_NEIGHBOR(x, 2x)          DEPTH_TO_SPACE(CONCATENATION(x, x, x, x), 2)
    narrow_splits_and_concats  SPLIT(x) into 16 parts                 SPLIT into 4, each SPLIT into 4
                               SPLIT_V(x, [96, 32])                   two SLICEs
                               CONCATENATION of 16 inputs             CONCATENATION of 4 CONCATENATIONs of 4
                               (XNNPACK's limits: it leaves the wider forms to the builtin kernels)
    valid_transpose_conv       TRANSPOSE_CONV(padding SAME)           TRANSPOSE_CONV(padding VALID), SLICE
                               (LiteRT's GPU computes some SAME ones wrong: k8 s4 on lengths 1 or 2 mod 4)
    split_wide_fully_connected FULLY_CONNECTED(w[50257, 128])         two FULLY_CONNECTEDs of <= 32768 outputs,
                                                                      CONCATENATION
                               (the GPU's weight texture is at most 8192 texels of 4 wide; past that the
                               delegate takes the op and writes garbage)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from litert_torch import ir
from litert_torch.passes.layout import perm_of, reshape_op, transpose_op
from litert_torch.symbolic import DynamicSizeError


@dataclass(frozen=True)
class Rewrite:
    name: str
    targets: frozenset[str]
    fn: Callable[[ir.Graph], int]  # returns how many sites it rewrote


def _const(name: str, value: np.ndarray) -> ir.Tensor:
    return ir.Tensor(name, value.shape, value.dtype, value)


def _slice(x: ir.Tensor, axis: int, start: int, out: ir.Tensor, source, value_node=None) -> ir.Op:
    """SLICE of `x` from `start` along `axis`, as large as `out`."""
    begin = np.zeros(x.rank, np.int32)
    begin[axis] = start
    size = np.array(out.shape, np.int32)
    return ir.Op("SLICE", [x, _const(f"{out.name}/begin", begin), _const(f"{out.name}/size", size)], [out], {},
                 source, value_node)


# ---- rank-reduced transposes --------------------------------------------------------------------------------
def reduced_transpose(shape: tuple[int, ...], perm: list[int]) -> tuple[list[int], list[int]]:
    """The smallest-rank transpose equal to TRANSPOSE(x[shape], perm): size-1 axes dropped and runs of input
    axes that stay adjacent and in order merged. Returns (input shape, permutation) of the reduced transpose."""
    non_unit = [a for a in range(len(shape)) if shape[a] != 1]
    index = {a: k for k, a in enumerate(non_unit)}
    groups: list[list[int]] = []  # runs of input axes, in output order
    for axis in (p for p in perm if shape[p] != 1):
        if groups and index[groups[-1][-1]] + 1 == index[axis]:
            groups[-1].append(axis)
        else:
            groups.append([axis])
    by_input = sorted(range(len(groups)), key=lambda g: groups[g][0])
    reduced_shape = [int(np.prod([shape[a] for a in groups[g]])) for g in by_input]
    position = {g: i for i, g in enumerate(by_input)}
    return reduced_shape, [position[g] for g in range(len(groups))]


def rank_reduce_transposes(graph: ir.Graph, max_rank: int = 4) -> int:
    """TRANSPOSEs of rank above `max_rank` as RESHAPE -> lower-rank TRANSPOSE -> RESHAPE (the reshapes merge
    with their neighbours in the cleanup that follows). Channel shuffles (rank 5) become rank-3 transposes."""
    count = 0
    for i, op in enumerate(list(graph.ops)):
        perm = perm_of(op)
        x, out = op.input(0), op.outputs[0]
        if perm is None or x.rank <= max_rank:
            continue
        shape, small = reduced_transpose(tuple(x.shape), perm)
        if not small or len(small) > max_rank or len(small) >= x.rank:
            continue
        flat = ir.Tensor(f"{out.name}/flat_in", shape, x.dtype, quantization=x.quantization)
        moved = ir.Tensor(f"{out.name}/flat_out", [shape[p] for p in small], x.dtype, quantization=x.quantization)
        at = graph.ops.index(op)
        graph.ops[at:at + 1] = [reshape_op(x, flat, op.source), transpose_op(flat, small, moved, op.source),
                                reshape_op(moved, out, op.source)]
        count += 1
    return count


# ---- BROADCAST_TO as a broadcasting MUL ---------------------------------------------------------------------
def broadcast_to_mul(graph: ir.Graph) -> int:
    """Each BROADCAST_TO of float or int32 data with a constant shape becomes MUL by ones shaped like the
    broadcast dims (x * 1 is x exactly, NaN and signed zeros included)."""
    count = 0
    for i, op in enumerate(graph.ops):
        if op.opcode != "BROADCAST_TO":
            continue
        x, out = op.input(0), op.outputs[0]
        if not (x.dtype.kind == "f" or x.dtype == np.int32):
            continue
        target = tuple(out.shape)
        aligned = (1,) * (len(target) - x.rank) + tuple(x.shape)
        ones_shape = tuple(t if a != t else 1 for a, t in zip(aligned, target))
        ones = _const(f"{out.name}/ones", np.ones(ones_shape, x.dtype))
        graph.ops[i] = ir.Op("MUL", [x, ones], [out], {"fused_activation_function": "NONE"}, op.source,
                             op.value_node)
        count += 1
    return count


# ---- GATHER with evenly spaced constant indices as a slice ---------------------------------------------------
def _progression(indices: np.ndarray, size: int) -> tuple[int, int] | None:
    """(start, step) when the indices, read flat, count up from `start` by `step` >= 1 within [0, size)."""
    flat = [int(i) + size if i < 0 else int(i) for i in indices.reshape(-1)]
    if not flat or any(not 0 <= i < size for i in flat):
        return None
    step = flat[1] - flat[0] if len(flat) > 1 else 1
    if step < 1 or flat != list(range(flat[0], flat[0] + step * len(flat), step)):
        return None
    return flat[0], step


def gather_to_slice(graph: ir.Graph) -> int:
    """GATHER (batch_dims 0) whose constant indices are evenly spaced and increasing becomes SLICE (unit step)
    or STRIDED_SLICE, plus a RESHAPE when the index tensor is not 1-D: the same elements, a form XNNPACK and the
    NPUs take. `x[:, 2]`, `x[..., ::2]` spelled as index lists, `index_select` with a range."""
    count = 0
    for i, op in enumerate(list(graph.ops)):
        if op.opcode != "GATHER" or op.options.get("batch_dims", 0) != 0 or not op.input(1).is_constant:
            continue
        x, indices, out = op.input(0), op.input(1), op.outputs[0]
        if x.is_constant:
            continue
        axis = op.options.get("axis", 0) % x.rank
        found = _progression(np.asarray(indices.data), x.shape[axis])
        if found is None:
            continue
        start, step = found
        n = indices.size
        sliced_shape = list(x.shape)
        sliced_shape[axis] = n
        sliced = out if tuple(sliced_shape) == tuple(out.shape) else ir.Tensor(
            f"{out.name}/slice", sliced_shape, x.dtype, quantization=x.quantization)
        if step == 1:
            new = [_slice(x, axis, start, sliced, op.source, op.value_node)]
        else:
            begin = np.zeros(x.rank, np.int32)
            begin[axis] = start
            end = np.array(x.shape, np.int32)
            end[axis] = start + step * (n - 1) + 1
            strides = np.ones(x.rank, np.int32)
            strides[axis] = step
            new = [ir.Op("STRIDED_SLICE", [x, _const(f"{out.name}/begin", begin), _const(f"{out.name}/end", end),
                                           _const(f"{out.name}/strides", strides)], [sliced],
                         {"begin_mask": 0, "end_mask": 0, "shrink_axis_mask": 0, "ellipsis_mask": 0,
                          "new_axis_mask": 0, "offset": False}, op.source, op.value_node)]
        if sliced is not out:
            new.append(reshape_op(sliced, out, op.source))
        at = graph.ops.index(op)
        graph.ops[at:at + 1] = new
        count += 1
    return count


# ---- SELECT_V2 with a constant mask as MINIMUM / MAXIMUM ------------------------------------------------------
def _fill(t: ir.Tensor) -> float | None:
    """The value of a constant float tensor that holds one value, when it is infinite or the dtype's extreme."""
    if t is None or not t.is_constant or t.dtype.kind != "f" or t.size == 0:
        return None
    values = np.unique(np.asarray(t.data))
    if values.size != 1:
        return None
    value = float(values[0])
    finfo = np.finfo(t.dtype)
    return value if abs(value) == math.inf or value in (float(finfo.min), float(finfo.max)) else None


def select_to_bound(graph: ir.Graph, max_elements: int = 1 << 20) -> int:
    """SELECT_V2(mask, x, fill) with a constant mask and fill -inf (or +inf) as MINIMUM(x, bound) (MAXIMUM),
    bound = +inf (-inf) where x is kept and the fill elsewhere: the masked attention scores of causal and
    padded attention, in a form XNNPACK and the NPUs take. Exact for every x but NaN. A fill of the dtype's
    lowest (highest) value is exact but for x = -inf (+inf) at a masked place, which gives -inf there; it is
    rewritten only where every reader is a SOFTMAX, for which the two are the same. A mask that keeps every
    element makes the select x itself. Masks above `max_elements` stay (the bound is a float constant)."""
    count = 0
    consumers = graph.consumers()
    for op in list(graph.ops):
        if op.opcode != "SELECT_V2" or not op.input(0).is_constant or op.input(0).dtype != np.bool_:
            continue
        mask, a, b = op.tensor_inputs()
        out = op.outputs[0]
        keep = np.asarray(mask.data)
        x, fill = (a, _fill(b)) if not a.is_constant else (b, _fill(a))
        if x is b:
            keep = ~keep  # SELECT_V2(mask, fill, x): x where the mask is False
        if fill is None or x.is_constant or x.dtype != out.dtype or keep.size > max_elements:
            continue
        at = graph.ops.index(op)
        if keep.all() and tuple(x.shape) == tuple(out.shape):
            graph.ops.pop(at)
            graph.replace_uses(out, x)
            count += 1
            continue
        if abs(fill) != math.inf and not all(r.opcode == "SOFTMAX" for r in consumers.get(out, [])):
            continue
        lower = fill < 0
        bound = np.where(keep, math.inf if lower else -math.inf, fill).astype(out.dtype)
        graph.ops[at] = ir.Op("MINIMUM" if lower else "MAXIMUM", [x, _const(f"{out.name}/bound", bound)], [out], {},
                              op.source, op.value_node)
        count += 1
    return count


# ---- nearest-neighbour upsampling by an integer factor as DEPTH_TO_SPACE -----------------------------------
def nearest_upsample_to_depth_to_space(graph: ir.Graph) -> int:
    """RESIZE_NEAREST_NEIGHBOR (NHWC, no align_corners) that enlarges height and width by the same integer
    factor k copies every pixel into a k x k block, with or without half-pixel centres (floor((d + 0.5) / k)
    == floor(d / k)). That is DEPTH_TO_SPACE (block k) of k*k copies of the input side by side along the
    channels: the same values, in ops XNNPACK takes (it has no nearest-neighbour resize)."""
    count = 0
    for op in list(graph.ops):
        if op.opcode != "RESIZE_NEAREST_NEIGHBOR" or op.options.get("align_corners"):
            continue
        x, out = op.input(0), op.outputs[0]
        if x.rank != 4 or out.rank != 4:
            continue
        (n, h, w, c), (_, oh, ow, _) = x.shape, out.shape
        if oh % h or ow % w or oh // h != ow // w or oh // h < 2:
            continue
        k = oh // h
        copies = ir.Tensor(f"{out.name}/copies", [n, h, w, c * k * k], x.dtype, quantization=x.quantization)
        graph.ops[graph.ops.index(op):graph.ops.index(op) + 1] = [
            ir.Op("CONCATENATION", [x] * (k * k), [copies], {"axis": 3, "fused_activation_function": "NONE"},
                  op.source),
            ir.Op("DEPTH_TO_SPACE", [copies], [out], {"block_size": k}, op.source, op.value_node),
        ]
        count += 1
    return count


# ---- SPLIT and CONCATENATION within XNNPACK's arity ----------------------------------------------------------
MAX_SPLIT = 4  # XNNPACK's even splits take 2, 3 or 4 outputs and its concatenation 2 to 5 inputs
MAX_CONCAT = 5


def _split_tree(x: ir.Tensor, axis: int, outs: list[ir.Tensor], source) -> list[ir.Op]:
    """Equal parts of `x` along `axis` as SPLITs of at most MAX_SPLIT outputs: the first level splits into a
    divisor's worth of groups, each split again; a prime count of parts above the limit takes one SLICE each."""
    n = len(outs)
    if n <= MAX_SPLIT:
        return [ir.Op("SPLIT", [_const(f"{outs[0].name}/axis", np.array(axis, np.int32)), x], outs,
                      {"num_splits": n}, source)]
    groups = next((d for d in range(MAX_SPLIT, 1, -1) if n % d == 0), None)
    if groups is None:
        step = outs[0].shape[axis]
        return [_slice(x, axis, k * step, out, source) for k, out in enumerate(outs)]
    per = n // groups
    parts = []
    for g in range(groups):
        shape = list(x.shape)
        shape[axis] = x.shape[axis] // groups
        parts.append(ir.Tensor(f"{outs[g * per].name}/group", shape, x.dtype, quantization=x.quantization))
    ops = _split_tree(x, axis, parts, source)
    for g, part in enumerate(parts):
        ops += _split_tree(part, axis, outs[g * per:(g + 1) * per], source)
    return ops


def _concat_tree(ins: list[ir.Tensor], axis: int, out: ir.Tensor, options: dict, source) -> list[ir.Op]:
    """CONCATENATION of many inputs as a tree of at most MAX_CONCAT inputs each (consecutive runs first, the
    fused activation on the last). Up to MAX_CONCAT**2 inputs, as few ops as can be (each takes MAX_CONCAT
    inputs but the last): runs of MAX_CONCAT inputs joined first, the rest read directly by the top one (copied
    once); above that, MAX_CONCAT balanced runs, each a tree of its own."""
    n = len(ins)
    if n <= MAX_CONCAT:
        return [ir.Op("CONCATENATION", [*ins], [out], dict(options), source)]
    runs = -(-(n - MAX_CONCAT) // (MAX_CONCAT - 1))  # joined runs that leave the top op MAX_CONCAT inputs
    if runs <= MAX_CONCAT:
        joined_inputs = n - (MAX_CONCAT - runs)
        sizes = [min(MAX_CONCAT, joined_inputs - MAX_CONCAT * r) for r in range(runs)] + [1] * (MAX_CONCAT - runs)
    else:
        per = -(-n // MAX_CONCAT)
        sizes = [min(per, n - g) for g in range(0, n, per)]
    ops: list[ir.Op] = []
    joined: list[ir.Tensor] = []
    g = 0
    for size in sizes:
        run = ins[g:g + size]
        g += size
        if len(run) == 1:
            joined.append(run[0])
            continue
        shape = list(run[0].shape)
        shape[axis] = sum(t.shape[axis] for t in run)
        part = ir.Tensor(f"{out.name}/part{g}", shape, out.dtype, quantization=out.quantization)
        ops += _concat_tree(run, axis, part, {**options, "fused_activation_function": "NONE"}, source)
        joined.append(part)
    return ops + _concat_tree(joined, axis, out, options, source)


def narrow_splits_and_concats(graph: ir.Graph) -> int:
    """SPLIT into more than 4 parts as a tree of SPLITs, SPLIT_V as one SLICE per part, CONCATENATION of more
    than 5 inputs as a tree of CONCATENATIONs: the same data movement in the forms XNNPACK takes, so that
    the graph is not cut into partitions around them."""
    count = 0
    for op in list(graph.ops):
        new = None
        if op.opcode == "SPLIT" and len(op.outputs) > MAX_SPLIT and op.input(0).is_constant:
            x = op.input(1)
            new = _split_tree(x, int(op.input(0).values) % x.rank, op.outputs, op.source)
        elif op.opcode == "SPLIT_V" and op.input(2).is_constant:
            x = op.input(0)
            axis = int(op.input(2).values) % x.rank
            starts = np.cumsum([0] + [t.shape[axis] for t in op.outputs])
            new = [_slice(x, axis, int(start), out, op.source) for start, out in zip(starts, op.outputs)]
        elif op.opcode == "CONCATENATION" and len(op.inputs) > MAX_CONCAT:
            out = op.outputs[0]
            new = _concat_tree(op.tensor_inputs(), op.options.get("axis", 0) % out.rank, out, op.options, op.source)
        if new is None:
            continue
        at = graph.ops.index(op)
        graph.ops[at:at + 1] = new
        count += 1
    return count


# ---- LSTM unrolled into per-step ops ------------------------------------------------------------------------
class _Emitter:
    """Builds the ops replacing one op, all tagged with its source."""

    def __init__(self, op: ir.Op):
        self.source, self.base, self._n = op.source, op.outputs[0].name, 0
        self.ops: list[ir.Op] = []

    def tensor(self, shape, dtype) -> ir.Tensor:
        self._n += 1
        return ir.Tensor(f"{self.base}/u{self._n}", shape, dtype)

    def op(self, opcode: str, inputs: list, shape, dtype, **options) -> ir.Tensor:
        out = self.tensor(shape, dtype)
        self.ops.append(ir.Op(opcode, inputs, [out], options, self.source))
        return out

    def outs(self, opcode: str, inputs: list, shapes, dtype, **options) -> list[ir.Tensor]:
        outs = [self.tensor(s, dtype) for s in shapes]
        self.ops.append(ir.Op(opcode, inputs, outs, options, self.source))
        return outs

    def reshape(self, x: ir.Tensor, shape) -> ir.Tensor:
        out = self.tensor(shape, x.dtype)
        self.ops.append(reshape_op(x, out, self.source))
        return out


def _time_reversal(op: ir.Op | None, time_axis: int) -> bool:
    if op is None or op.opcode != "REVERSE_V2" or not op.input(1).is_constant:
        return False
    axes = [int(a) % op.input(0).rank for a in op.input(1).values.reshape(-1)]
    return axes == [time_axis]


def _unroll_one(graph: ir.Graph, op: ir.Op, producers, consumers) -> tuple[list[ir.Op], list[ir.Op]] | None:
    """The ops replacing `op`, and the time reversals of its output that they make unnecessary."""
    ins = op.inputs
    x = op.input(0)
    wanted = (*ins[1:5], *ins[5:9], *ins[12:16])
    constants = [t for t in wanted if t is not None and t.is_constant]
    if len(constants) != len(wanted):
        return None
    w_in, w_rec, biases = constants[0:4], constants[4:8], constants[8:12]
    if any(t is not None for t in (*ins[9:12], *ins[16:18], *ins[20:])) or x.dtype.kind != "f":
        return None  # peepholes, projections or layer norm: not the form our lowering writes
    if op.options.get("fused_activation_function", "TANH") != "TANH" or op.options.get("cell_clip") or \
            op.options.get("proj_clip"):
        return None
    time_major = bool(op.options.get("time_major"))
    time_axis = 0 if time_major else 1
    steps, batch, features = (x.shape[0], x.shape[1], x.shape[2]) if time_major else (x.shape[1], x.shape[0],
                                                                                          x.shape[2])
    hidden = w_rec[0].shape[1]
    y = op.outputs[0]
    dtype = x.dtype
    e = _Emitter(op)

    # A time-reversed input is read by running the steps backwards; readers that reverse the output get the
    # steps in the other order instead.
    reverse_in = _time_reversal(producers.get(x), time_axis)
    if reverse_in:
        x = producers[x].input(0)
    readers = consumers.get(y, [])
    reversals = [r for r in readers if _time_reversal(r, time_axis)]
    need_y = y in graph.outputs or len(reversals) < len(readers)

    # Gates stacked as (input, forget, output, cell): one SPLIT into four, LOGISTIC on the first three, TANH on
    # the last (XNNPACK splits only into equal parts).
    order = [0, 1, 3, 2]
    w_x = _const(f"{e.base}/w_x", np.concatenate([w_in[k].values for k in order], axis=0))
    w_h = _const(f"{e.base}/w_h", np.concatenate([w_rec[k].values for k in order], axis=0))
    bias = _const(f"{e.base}/bias", np.concatenate([biases[k].values for k in order], axis=0))
    # The input projection of every step in one FULLY_CONNECTED, then one slice per step.
    flat = e.reshape(x, [steps * batch if time_major else batch * steps, features])
    proj = e.op("FULLY_CONNECTED", [flat, w_x, bias], [flat.shape[0], 4 * hidden], dtype,
                fused_activation_function="NONE", weights_format="DEFAULT", keep_num_dims=False,
                asymmetric_quantize_inputs=False)
    proj = e.reshape(proj, [steps, batch, 4 * hidden] if time_major else [batch, steps, 4 * hidden])
    axis = _const(f"{e.base}/time_axis", np.array(time_axis, np.int32))
    step_shape = [1, batch, 4 * hidden] if time_major else [batch, 1, 4 * hidden]
    per_step = e.outs("SPLIT", [axis, proj], [step_shape] * steps, dtype, num_splits=steps) if steps > 1 else [proj]
    # Every per-step tensor keeps the step's rank-3 shape ([1, B, n] or [B, 1, n]): no RESHAPE per step.
    gate_axis = _const(f"{e.base}/gate_axis", np.array(2, np.int32))
    step_order = range(steps - 1, -1, -1) if reverse_in else range(steps)
    unit = [1, batch] if time_major else [batch, 1]
    shape = [*unit, hidden]
    # The cell starts at zero: a constant, so that every step reads its forget gate (a SPLIT output nobody
    # reads is never allocated, which tools that read every tensor trip on). The hidden state starts at zero
    # too; its recurrent product is zero and is skipped.
    h = None
    c = _const(f"{e.base}/c0", np.zeros(shape, dtype))
    hs: dict[int, ir.Tensor] = {}
    for t in step_order:
        z = per_step[t]
        if h is not None:
            rec = e.op("FULLY_CONNECTED", [h, w_h, None], [*unit, 4 * hidden], dtype,
                       fused_activation_function="NONE", weights_format="DEFAULT", keep_num_dims=True,
                       asymmetric_quantize_inputs=False)
            z = e.op("ADD", [z, rec], [*unit, 4 * hidden], dtype, fused_activation_function="NONE")
        i_g, f_g, o_g, g_g = e.outs("SPLIT", [gate_axis, z], [shape] * 4, dtype, num_splits=4)
        i_g, f_g, o_g = (e.op("LOGISTIC", [t], shape, dtype) for t in (i_g, f_g, o_g))
        g_g = e.op("TANH", [g_g], shape, dtype)
        kept = e.op("MUL", [f_g, c], shape, dtype, fused_activation_function="NONE")
        c = e.op("ADD", [kept, e.op("MUL", [i_g, g_g], shape, dtype, fused_activation_function="NONE")], shape,
                 dtype, fused_activation_function="NONE")
        h = e.op("MUL", [o_g, e.op("TANH", [c], shape, dtype)], shape, dtype, fused_activation_function="NONE")
        hs[t] = h
    # hs[t] is the state after reading x[t]. The LSTM's output y holds them in the order it read them (reversed
    # when its input was); the readers that reverse y get them in the other order, straight from the steps.
    def sequence(out: ir.Tensor, flip: bool) -> None:
        ordered = [hs[steps - 1 - k] if flip else hs[k] for k in range(steps)]
        if steps == 1:
            e.ops.append(reshape_op(ordered[0], out, op.source))
            return
        e.ops.append(ir.Op("CONCATENATION", [*ordered], [out], {"axis": time_axis, "fused_activation_function": "NONE"},
                           op.source))

    if need_y:
        sequence(y, reverse_in)
    if reversals:
        sequence(reversals[0].outputs[0], not reverse_in)
        for reader in reversals[1:]:
            graph.replace_uses(reader.outputs[0], reversals[0].outputs[0])
    return e.ops, reversals


def unroll_lstm(graph: ir.Graph) -> int:
    """Each UNIDIRECTIONAL_SEQUENCE_LSTM (zero initial state, as our lowering writes it) as its steps: one
    FULLY_CONNECTED for the input projection of all steps, then per step a recurrent FULLY_CONNECTED, SPLIT
    into the four gates, LOGISTIC/TANH, and the MUL/ADD of the cell update. The first step skips the
    recurrent product of the zero hidden state."""
    count = 0
    for op in [o for o in graph.ops if o.opcode == "UNIDIRECTIONAL_SEQUENCE_LSTM"]:
        producers, consumers = graph.producers(), graph.consumers()
        unrolled = _unroll_one(graph, op, producers, consumers)
        if unrolled is None:
            continue
        replacement, removed = unrolled
        at = graph.ops.index(op)
        graph.ops[at:at + 1] = replacement
        for reversal in removed:
            graph.ops.remove(reversal)
        count += 1
    return count


# ---- GPU: TRANSPOSE_CONV with SAME padding as VALID and a crop --------------------------------------------
def valid_transpose_conv(graph: ir.Graph) -> int:
    """Each TRANSPOSE_CONV with SAME padding and a constant output shape becomes the VALID one (the full output,
    (in - 1) * stride + kernel rows) and a SLICE cropping the rows SAME drops, total // 2 of them before: the
    same values. LiteRT's GPU accelerator computes some SAME transposed convolutions wrong (kernel 8, stride 4,
    on input lengths 1 or 2 mod 4: relative error ~1.4) and every VALID one measured right."""
    count = 0
    for op in list(graph.ops):
        if op.opcode != "TRANSPOSE_CONV" or op.options.get("padding") != "SAME" or not op.input(0).is_constant:
            continue
        out, x, w = op.outputs[0], op.input(2), op.input(1)
        n, out_h, out_w, c = (int(d) for d in op.input(0).values)
        strides = (op.options.get("stride_h", 1), op.options.get("stride_w", 1))
        full = [(int(size) - 1) * stride + int(k) for size, stride, k in zip(x.shape[1:3], strides, w.shape[1:3])]
        crop = [(f - o) // 2 for f, o in zip(full, (out_h, out_w))]
        if min(f - o for f, o in zip(full, (out_h, out_w))) < 0 or full == [out_h, out_w]:
            continue  # SAME pads the output here (kernel < stride), or crops nothing (the VALID op already)
        wide = ir.Tensor(f"{out.name}/valid", (n, *full, c), out.dtype)
        shape = _const(f"{out.name}/valid_shape", np.array([n, *full, c], np.int32))
        conv = ir.Op("TRANSPOSE_CONV", [shape, *op.inputs[1:]], [wide], {**op.options, "padding": "VALID"},
                     op.source, op.value_node)
        begin = _const(f"{out.name}/begin", np.array([0, *crop, 0], np.int32))
        size = _const(f"{out.name}/size", np.array(out.shape, np.int32))
        at = graph.ops.index(op)
        graph.ops[at:at + 1] = [conv, ir.Op("SLICE", [wide, begin, size], [out], {}, op.source, op.value_node)]
        count += 1
    return count


# ---- GPU: FULLY_CONNECTED wider than the GPU's weight texture as several ---------------------------------------
GPU_MAX_OUTPUTS = 4 * 8192  # 8192 texels (WebGPU's default maxTextureDimension2D) of 4 channels


def split_wide_fully_connected(graph: ir.Graph) -> int:
    """Each FULLY_CONNECTED with constant weights of more than GPU_MAX_OUTPUTS output features becomes one per
    slice of at most that many features (weights and bias rows sliced), joined by a CONCATENATION on the last
    axis: each output feature is the same dot product. LiteRT's GPU delegate takes the wide one and, on a
    64-token input, writes garbage (Dawn: "Texture size ... exceeded maximum texture size")."""
    count = 0
    for op in list(graph.ops):
        w = op.inputs[1] if op.opcode == "FULLY_CONNECTED" else None
        if (w is None or w.data is None or w.quantization is not None or w.rank != 2
                or w.shape[0] <= GPU_MAX_OUTPUTS):
            continue
        bias = op.inputs[2] if len(op.inputs) > 2 else None
        if bias is not None and bias.data is None:
            continue
        out = op.outputs[0]
        parts = math.ceil(w.shape[0] / GPU_MAX_OUTPUTS)
        bounds = np.linspace(0, w.shape[0], parts + 1).astype(int)
        pieces: list[ir.Tensor | None] = []
        new_ops = []
        for k, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            piece = ir.Tensor(f"{out.name}/part{k}", (*out.shape[:-1], int(hi - lo)), out.dtype)
            inputs = [op.inputs[0], _const(f"{w.name}/rows{lo}", np.ascontiguousarray(w.data[lo:hi]))]
            if len(op.inputs) > 2:
                inputs.append(None if bias is None else _const(f"{bias.name}/rows{lo}", bias.values[lo:hi]))
            new_ops.append(ir.Op("FULLY_CONNECTED", inputs, [piece], dict(op.options), op.source))
            pieces.append(piece)
        new_ops.append(ir.Op("CONCATENATION", pieces, [out], {"axis": out.rank - 1,
                                                              "fused_activation_function": "NONE"},
                             op.source, op.value_node))
        at = graph.ops.index(op)
        graph.ops[at:at + 1] = new_ops
        count += 1
    return count


ACCELERATORS = frozenset({"gpu", "npu"})
REWRITES: list[Rewrite] = [
    Rewrite("rank_reduce_transposes", ACCELERATORS, rank_reduce_transposes),
    Rewrite("broadcast_to_mul", frozenset({"cpu", "gpu", "npu"}), broadcast_to_mul),
    Rewrite("gather_to_slice", frozenset({"cpu", "gpu", "npu"}), gather_to_slice),
    Rewrite("select_to_bound", frozenset({"cpu", "npu"}), select_to_bound),
    Rewrite("unroll_lstm", ACCELERATORS, unroll_lstm),
    Rewrite("nearest_upsample_to_depth_to_space", frozenset({"cpu"}), nearest_upsample_to_depth_to_space),
    Rewrite("valid_transpose_conv", frozenset({"gpu"}), valid_transpose_conv),
    Rewrite("split_wide_fully_connected", frozenset({"gpu"}), split_wide_fully_connected),
    # After the rewrites that write wide SPLITs and CONCATENATIONs (the LSTM's steps, k*k copies).
    Rewrite("narrow_splits_and_concats", frozenset({"cpu"}), narrow_splits_and_concats),
]


def rewrites_for(targets: tuple[str, ...]) -> list[Rewrite]:
    return [r for r in REWRITES if r.targets & set(targets)]


def run(graph: ir.Graph, targets: tuple[str, ...]) -> dict[str, int]:
    """Apply the rewrites serving `targets`; returns {rewrite name: sites rewritten} for those that fired."""
    done = {}
    dynamic = graph.is_dynamic
    for rewrite in rewrites_for(targets):
        restore = graph.snapshot() if dynamic else None
        try:
            n = rewrite.fn(graph)
        except DynamicSizeError:
            if restore is None:
                raise
            restore()  # the rewrite needs a size the graph only knows at run time
            continue
        if n:
            done[rewrite.name] = n
    return done
