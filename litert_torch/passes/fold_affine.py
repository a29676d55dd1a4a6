"""Fold per-channel affine constants (eval batch norm, scales, biases) into the conv or dense layer before them.

Guarantee afterwards: no MUL or ADD/SUB by a constant that varies only along the output channel directly
follows a CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED whose output it alone reads; its effect is in the
layer's filter and bias instead, unless the layer shares its weights with other ops (folding would then store
a second copy). Likewise no such MUL/ADD/SUB (varying along the feature axis) feeds a single
FULLY_CONNECTED as its only reader — the layer-norm affine before a dense layer, say. A RESHAPE alone between
the layer and the MUL/ADD/SUB does not stop the fold when the constant, broadcast over the reshaped output and
read in the layer's shape, still varies along the output channel only (attention's 1/sqrt(d) on the query
heads). Shared weights are never edited in place: folded layers get new constants.

    CONV_2D(x, W, b) -> MUL(s) -> ADD(t, RELU6)        CONV_2D(x, W * s, b * s + t, RELU6)
    MUL(x, g) -> ADD(beta) -> FULLY_CONNECTED(W, b)    FULLY_CONNECTED(x, W * g, b + W @ beta)
    FULLY_CONNECTED(x, W, b) -> RESHAPE -> MUL(s)      FULLY_CONNECTED(x, W * s, b * s) -> RESHAPE
"""

from __future__ import annotations

import numpy as np

from litert_torch import ir

LAYERS = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0}  # opcode -> output-channel axis of filter


def value_node(op: ir.Op) -> str | None:
    """The fx node whose value `op`'s output holds."""
    return op.value_node or (op.source.node if op.source else None)


def _channel_vector(const: ir.Tensor, out: ir.Tensor) -> np.ndarray | None:
    """The constant as a vector over the output's last axis, if it broadcasts along that axis only."""
    if const.rank > out.rank:
        return None
    shape = (1,) * (out.rank - const.rank) + const.shape
    if any(d != 1 for d in shape[:-1]):
        return None
    channels = out.shape[-1]
    vec = const.values.reshape(-1).astype(np.float64)
    if vec.size == 1:
        return np.full(channels, vec[0])
    return vec if vec.size == channels else None


def _channel_vector_through(const: ir.Tensor, out: ir.Tensor, layer_out: ir.Tensor) -> np.ndarray | None:
    """The constant, broadcast over `out` (a reshape of `layer_out`), as a vector over `layer_out`'s last axis,
    if it varies along that axis only."""
    if not (out.is_static and layer_out.is_static) or const.rank > out.rank:
        return None
    try:
        full = np.broadcast_to(const.values, out.shape)
    except ValueError:
        return None
    rows = full.reshape(-1, layer_out.shape[-1])  # row-major: RESHAPE keeps the element order
    vec = rows[0].astype(np.float64)
    return vec if np.all(rows == rows[0]) else None


def _memory(t: ir.Tensor) -> tuple[int, int]:
    return t.values.ctypes.data, t.values.nbytes


def _holders(graph: ir.Graph) -> dict[tuple[int, int], int]:
    """How many distinct constant tensors of `graph` hold each block of memory: tensors lowered separately
    from one weight (a tied embedding read by a lookup and by the output layer) share it."""
    counts: dict[tuple[int, int], int] = {}
    for t in graph.tensors():
        if t.data is not None and t.data.nbytes:
            key = _memory(t)
            counts[key] = counts.get(key, 0) + 1
    return counts


def _shared(weights: ir.Tensor, consumers: dict, holders: dict[tuple[int, int], int]) -> bool:
    """Whether folding into `weights` would keep a second copy of them (another op or tensor reads them)."""
    return len(consumers.get(weights, [])) != 1 or holders.get(_memory(weights), 1) > 1


def _fold_into_next_dense(graph: ir.Graph) -> bool:
    """Each MUL/ADD/SUB by a per-feature constant folded into the FULLY_CONNECTED that alone reads it; walked
    from the outputs up, so that a chain (MUL, ADD, FULLY_CONNECTED) folds in one walk."""
    consumers = graph.consumers()
    producers = graph.producers()
    holders = _holders(graph)
    removed: set[int] = set()
    for op in reversed(graph.ops):
        if op.opcode not in ("MUL", "ADD", "SUB") or op.options.get("fused_activation_function", "NONE") != "NONE":
            continue
        x, const = op.tensor_inputs()
        if op.opcode != "SUB" and x.is_constant:
            x, const = const, x
        if x.is_constant or not const.is_constant or x.dtype.kind != "f":
            continue
        out = op.outputs[0]
        readers = consumers.get(out, [])
        if len(readers) != 1 or out.shape != x.shape or out in graph.outputs:
            continue
        dense = readers[0]
        if dense.opcode != "FULLY_CONNECTED" or dense.inputs[0] is not out or not dense.input(1).is_constant:
            continue
        weights = dense.input(1)
        if _shared(weights, consumers, holders):
            continue  # shared weights (a tied embedding, say): folding would store a second copy
        bias = dense.inputs[2] if len(dense.inputs) > 2 else None
        if bias is not None and not bias.is_constant:
            continue
        vec = _channel_vector(const, out)
        if vec is None or weights.shape[1] != out.shape[-1]:
            continue
        w = weights.values.astype(np.float64)
        b = bias.values.astype(np.float64) if bias is not None else np.zeros(w.shape[0])
        if op.opcode == "MUL":
            w = w * vec[None, :]
        else:
            b = b + w @ (vec if op.opcode == "ADD" else -vec)
        new_w = ir.Tensor(weights.name + "/folded", w.shape, weights.dtype, w.astype(weights.dtype))
        new_b = ir.Tensor((bias.name if bias is not None else out.name + "/bias") + "/folded", b.shape,
                          dense.outputs[0].dtype, b.astype(dense.outputs[0].dtype))
        dense.inputs = [x, new_w, new_b, *dense.inputs[3:]]
        _unscaled(producers.get(x), value_node(op))
        consumers[x] = [dense if reader is op else reader for reader in consumers.get(x, [])]
        consumers[new_w] = [dense]
        removed.add(id(op))
    if removed:
        graph.ops = [op for op in graph.ops if id(op) not in removed]
    return bool(removed)


UNSCALED = " (before its folded scale and shift)"


def _unscaled(producer: ir.Op | None, node: str | None) -> None:
    """`producer`, lowered from the same node as an affine op folded away after it (a LayerNorm's scale and
    shift folded into the next product), no longer computes that node's value: say so, so that per-layer
    validation does not compare it with the node's PyTorch value (the name matches no node)."""
    if node is None:
        return
    node = node.removesuffix(UNSCALED)  # a chain (scale, then shift) is folded from its last op up
    if producer is not None and value_node(producer) == node:
        producer.value_node = node + UNSCALED


def _fold_into_layers(graph: ir.Graph) -> bool:
    """Each MUL/ADD/SUB by a per-channel constant folded into the layer before it, in one walk down the graph
    (the layer then writes the op's output, so the next op of a chain finds it as its producer)."""
    consumers = graph.consumers()
    producers = graph.producers()
    holders = _holders(graph)
    removed: set[int] = set()
    for op in graph.ops:
        if op.opcode not in ("MUL", "ADD", "SUB"):
            continue
        layer_out, const = op.tensor_inputs()
        if not const.is_constant:
            layer_out, const = const, layer_out
        if not const.is_constant or layer_out.is_constant:
            continue
        if op.opcode == "SUB" and op.inputs[1] is not const:
            continue
        if op.outputs[0].shape != layer_out.shape or layer_out.dtype.kind != "f":
            continue
        layer = producers.get(layer_out)
        reshape = None
        if layer is not None and layer.opcode == "RESHAPE" and layer_out not in graph.outputs \
                and len(consumers.get(layer_out, [])) == 1:
            reshape, layer_out = layer, layer.input(0)
            layer = producers.get(layer_out)
        if layer is None or layer.opcode not in LAYERS or layer_out in graph.outputs:
            continue
        if len(consumers.get(layer_out, [])) != 1 or layer.options.get("fused_activation_function") != "NONE":
            continue
        weights, bias = layer.input(1), layer.inputs[2] if len(layer.inputs) > 2 else None
        if not weights.is_constant or (bias is not None and not bias.is_constant):
            continue
        if _shared(weights, consumers, holders):
            continue  # shared weights: folding would store a second copy
        if reshape is None:
            vec = _channel_vector(const, layer_out)
        else:
            vec = _channel_vector_through(const, op.outputs[0], layer_out)
            if vec is not None and op.options.get("fused_activation_function", "NONE") != "NONE":
                continue  # the activation would have to move before the RESHAPE: leave it to the other passes
        if vec is None:
            continue
        axis = LAYERS[layer.opcode]
        w = weights.values.astype(np.float64)
        b = bias.values.astype(np.float64) if bias is not None else np.zeros(layer_out.shape[-1])
        if op.opcode == "MUL":
            shape = [1] * w.ndim
            shape[axis] = -1
            w = w * vec.reshape(shape)
            b = b * vec
        else:
            b = b + vec if op.opcode == "ADD" else b - vec
        new_w = ir.Tensor(weights.name + "/folded", w.shape, weights.dtype, w.astype(weights.dtype))
        new_b = ir.Tensor((bias.name if bias is not None else layer_out.name + "/bias") + "/folded", b.shape,
                          layer_out.dtype, b.astype(layer_out.dtype))
        layer.inputs = [layer.inputs[0], new_w, new_b, *layer.inputs[3:]]
        # The affine op's own fused activation applies after it, so the layer takes it over.
        layer.options["fused_activation_function"] = op.options.get("fused_activation_function", "NONE")
        # The layer (or the RESHAPE after it) now writes the affine op's output tensor, and so computes its
        # node's value; neither holds its own node's (unscaled) value any longer.
        layer.outputs = [op.outputs[0]]
        layer.value_node = value_node(op)
        if reshape is not None:
            scaled = ir.Tensor(layer_out.name + "/folded", layer_out.shape, layer_out.dtype)
            layer.outputs = [scaled]
            reshape.inputs = [scaled, *reshape.inputs[1:]]
            reshape.outputs = [op.outputs[0]]
            reshape.value_node = value_node(op)
            producers[scaled], consumers[scaled] = layer, [reshape]
        producers[op.outputs[0]] = reshape or layer
        consumers[new_w] = [layer]
        removed.add(id(op))
    if removed:
        graph.ops = [op for op in graph.ops if id(op) not in removed]
    return bool(removed)


def run(graph: ir.Graph) -> bool:
    changed = _fold_into_next_dense(graph)
    return _fold_into_layers(graph) or changed
