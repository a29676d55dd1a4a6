"""Attention over the filled part of the KV cache only.

A signature attends over the whole cache: the scores of every cache slot, masked past each token's position.
While a conversation is short, most of those slots are empty, and reading them is most of a decode step (the
cache of a 30-layer 135M model at 1,024 positions is 47 MB; its int8 weights 135 MB). `attend_filled_prefix`
rewrites each attention core of a signature (the scores matmul against the updated key cache, what is applied
to the scores, the softmax, and the matmul against the updated value cache) to run on the shortest cache prefix
that holds the largest input position: 128 slots, then four lengths to each doubling (160, 192, 224, 256, 320,
...), else the whole cache, so that a step past the first 128 slots reads at most a quarter more of them than
are filled. A slot past every input position is masked (`MASKED`, whose exponential is 0 in float32), so the
sliced core sums the same terms without ones that are exactly zero: the results are the whole core's, up to the
order in which the kernels add them.

Each core becomes a chain of IFs, one per prefix length and one for the whole cache. Exactly one condition is
true (`_selections`, computed once per signature): its IF runs the core on that prefix, and every other IF's
branch passes on the result chained so far (the core's query, at the start). The branches are subgraphs shared
by every layer whose core has the same structure. The cache itself is still updated in place, before the IFs.

The chain is flat, not nested, because of how the runtime runs an IF: after each call it releases the memory of
the branch it ran and prepares that branch again on the next call, and preparing a branch that holds IFs prepares
both of their branches, down to the last. A nested choice among N prefixes prepares up to N cores on every step;
a flat chain prepares the one core it runs, and for each other IF a branch with no ops (docs/LLM.md has the
measurements).

The runtime prepares the branch subgraphs when a signature first runs: about 8 ms once per signature and model
load on one x86 core, measured on a 2-layer model with a cache of 1,024 (13 branches). A decode step gains on
every step; a prefill signature gets the branches only when the attention work they skip on each call is well
above that cost (`PREFILL_MIN_SKIPPED_FLOPS`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from litert_torch import ir

SMALLEST_PREFIX = 128
# A prefill signature attends over the filled prefix only when the branches skip at least this much work per call
# (256 MFLOP: tens of milliseconds on one core, against the branches' one-time preparation of about 8 ms). A
# 2-layer toy skips 59 MFLOP per 128-token call at a cache of 1,024, a 135M Llama 7.9 GFLOP.
PREFILL_MIN_SKIPPED_FLOPS = 256e6
# ops applied to the scores between the two matmuls (mask, scale, soft-capping, softmax over the last axis)
_ON_SCORES = {"ADD", "SUB", "MUL", "DIV", "TANH", "SOFTMAX"}


def prefix_lengths(cache_length: int) -> list[int]:
    """The cache prefixes the cores are specialised to, below `cache_length`: 128, then four lengths to each
    doubling (160, 192, 224, 256, 320, 384, ...), so that a step reads at most a quarter more slots than the
    filled ones past the first 128."""
    out, n = [], SMALLEST_PREFIX
    while n < cache_length:
        out.append(n)
        n += (1 << (n.bit_length() - 1)) // 4  # a quarter of the power of two at or below n
    return out


def branch_length(position: int, cache_length: int) -> int:
    """The slots a core reads when the largest input position is `position`: the shortest prefix longer than it,
    else the whole cache."""
    return next((n for n in prefix_lengths(cache_length) if position < n), cache_length)


def attend_filled_prefix(graph: ir.Graph, input_pos: ir.Tensor, min_skipped_flops: float = 0) -> int:
    """Rewrite each attention core of `graph` (a signature whose input positions are `input_pos`) to run on the
    cache prefix that holds every input position; returns how many cores were rewritten. Nothing is rewritten
    when the work the smallest prefix skips (the two matmuls over the slots past it, all cores together) is
    below `min_skipped_flops`."""
    producers, consumers = graph.producers(), graph.consumers()
    cores = [c for op in graph.ops if (c := _core(op, producers, consumers, graph)) is not None]
    if not cores:
        return 0
    lengths = prefix_lengths(cores[0].cache)
    if not lengths or any(c.cache != cores[0].cache for c in cores):
        return 0
    if sum(c.skipped_flops(lengths[0]) for c in cores) < min_skipped_flops:
        return 0
    selected, condition_ops = _selections(input_pos, lengths)
    shared: dict[Any, tuple[list[ir.Graph], ir.Graph]] = {}
    replaced: dict[int, list[ir.Op] | None] = {}  # id(op) -> the IFs that take its place, or None: dropped
    for core in cores:
        key = core.key()
        if key not in shared:
            # subgraph names are unique in the file (they prefix their tensors' names, which must be)
            shared[key] = _branches(core, lengths, f"{graph.name}/attention_{len(shared)}")
        runs, passed_on = shared[key]
        last = core.ops[-1]
        out = last.outputs[0]
        seed = core.query if (core.query.shape, core.query.dtype) == (out.shape, out.dtype) else \
            ir.Tensor(f"{out.name}/unselected", out.shape, out.dtype, np.zeros(out.shape, out.dtype))
        ifs, chained = [], seed
        for i, (condition, run) in enumerate(zip(selected, runs)):
            result = out if i == len(runs) - 1 else ir.Tensor(f"{out.name}/after_{i}", out.shape, out.dtype)
            ifs.append(ir.Op("IF", [condition, chained, *core.arguments()], [result],
                             {"then_subgraph_index": run, "else_subgraph_index": passed_on}, last.source))
            chained = result
        replaced.update((id(op), None) for op in core.ops[:-1])
        replaced[id(last)] = ifs
    ops: list[ir.Op] = list(condition_ops)
    for op in graph.ops:
        instead = replaced.get(id(op), [op])
        if instead is not None:
            ops.extend(instead)
    graph.ops = ops
    return len(cores)


class _Core:
    """One attention core: its ops, from the scores matmul to the output matmul, and what they read."""

    def __init__(self, ops: list[ir.Op], sides: list[ir.Tensor], cache: int):
        self.ops, self.sides, self.cache = ops, sides, cache

    @property
    def query(self) -> ir.Tensor:
        return self.ops[0].input(0)

    @property
    def keys(self) -> ir.Tensor:
        return self.ops[0].input(1)

    @property
    def values(self) -> ir.Tensor:
        return self.ops[-1].input(1)

    def skipped_flops(self, prefix: int) -> int:
        """Multiply-adds (times 2) of the scores and output matmuls over the slots past `prefix`."""
        *heads, rows, depth = self.query.shape
        return 4 * int(np.prod(heads)) * rows * depth * (self.cache - prefix)

    def arguments(self) -> list[ir.Tensor]:
        return [self.query, self.keys, self.values, *(t for t in self.sides if not t.is_constant)]

    def key(self) -> tuple:
        """What makes two cores the same function: their ops, options, shapes and constants."""
        parts: list[Any] = [tuple(t.shape) for t in self.arguments()]
        for op in self.ops:
            ins: list[tuple] = []
            for t in op.inputs:
                if t is not None and t.is_constant:
                    ins.append(("const", t.dtype.str, tuple(t.shape), t.values.tobytes()))
                elif t is not None and t in self.sides:
                    ins.append(("side", self.sides.index(t)))
                else:
                    ins.append(("chain",))
            parts.append((op.opcode, tuple(sorted((k, repr(v)) for k, v in op.options.items())), tuple(ins),
                          tuple(tuple(t.shape) for t in op.outputs)))
        return tuple(parts)


def _cache_update(t: ir.Tensor, producers: dict, graph: ir.Graph) -> bool:
    """`t` is a cache as updated in place: a DYNAMIC_UPDATE_SLICE of a graph input."""
    op = producers.get(t)
    return op is not None and op.opcode == "DYNAMIC_UPDATE_SLICE" and any(op.inputs[0] is g for g in graph.inputs)


def _core(op: ir.Op, producers: dict, consumers: dict, graph: ir.Graph) -> _Core | None:
    """The attention core whose scores matmul is `op` (query [1, H, M, D] times the updated key cache
    [1, H, C, D] transposed), or None when `op` does not start one."""
    if op.opcode != "BATCH_MATMUL" or op.options.get("adj_x") or not op.options.get("adj_y"):
        return None
    query, keys = op.input(0), op.input(1)
    if keys.rank != 4 or query.rank != 4 or not _cache_update(keys, producers, graph):
        return None
    cache = keys.shape[2]
    scores_shape = tuple(op.outputs[0].shape)
    ops, t = [op], op.outputs[0]
    sides: list[ir.Tensor] = []
    while True:
        users = consumers.get(t, [])
        if len(users) != 1 or any(t is o for o in graph.outputs):
            return None
        user = users[0]
        if user.opcode == "BATCH_MATMUL":
            values = user.input(1)
            if (user.inputs[0] is not t or user.options.get("adj_x") or user.options.get("adj_y")
                    or values.rank != 4 or values.shape[2] != cache or not _cache_update(values, producers, graph)):
                return None
            ops.append(user)
            return _Core(ops, sides, cache)
        if user.opcode not in _ON_SCORES or tuple(user.outputs[0].shape) != scores_shape \
                or user.outputs[0].dtype != t.dtype or len(user.outputs) != 1:
            return None
        if user.opcode == "SOFTMAX" and len(user.inputs) != 1:
            return None
        for other in user.inputs:
            if other is t:
                continue
            if other is None or other.rank > len(scores_shape):
                return None
            # a scalar or a tensor over the cache slots (the mask), broadcast against the scores
            if not (other.size == 1 or (other.rank >= 1 and other.shape[-1] == cache)):
                return None
            if not other.is_constant and other not in sides:
                sides.append(other)
        ops.append(user)
        t = user.outputs[0]


def _selections(input_pos: ir.Tensor, lengths: list[int]) -> tuple[list[ir.Tensor], list[ir.Op]]:
    """One [1] bool per branch, exactly one of them true: the largest input position is below lengths[0], in
    [lengths[i - 1], lengths[i]), or (the whole cache) at least lengths[-1]; and the ops that compute them."""
    ops = []
    if input_pos.shape == (1,):
        last = input_pos
    else:
        last = ir.Tensor("attention_prefix/last_position", [1], np.int32)
        axes = ir.Tensor("attention_prefix/axes", [1], np.int32, np.zeros(1, np.int32))
        ops.append(ir.Op("REDUCE_MAX", [input_pos, axes], [last], {"keep_dims": True}))

    def compare(opcode: str, n: int) -> ir.Tensor:
        out = ir.Tensor(f"attention_prefix/{opcode.lower()}_{n}", [1], np.bool_)
        bound = ir.Tensor(f"attention_prefix/bound_{n}", [], np.int32, np.array(n, np.int32))
        ops.append(ir.Op(opcode, [last, bound], [out]))
        return out

    below = [compare("LESS", n) for n in lengths]
    reached = [compare("GREATER_EQUAL", n) for n in lengths]
    selected = [below[0]]
    for i in range(1, len(lengths)):
        both = ir.Tensor(f"attention_prefix/in_{lengths[i - 1]}_{lengths[i]}", [1], np.bool_)
        ops.append(ir.Op("LOGICAL_AND", [reached[i - 1], below[i]], [both]))
        selected.append(both)
    selected.append(reached[-1])
    return selected, ops


def _branches(core: _Core, lengths: list[int], name: str) -> tuple[list[ir.Graph], ir.Graph]:
    """The subgraphs of the IFs that replace `core`: the core on the first n slots for each length n, then on
    the whole cache (each IF's then branch), and the branch that passes the chained result on (every IF's else
    branch). They take the same inputs: the result so far, then the core's arguments."""
    runs = [_sliced(core, n, f"{name}/prefix_{n}") for n in lengths]
    runs.append(_sliced(core, core.cache, f"{name}/whole"))
    passed_on = ir.Graph(f"{name}/passed_on")
    passed_on.inputs = [ir.Tensor(f"in_{i}", t.shape, t.dtype) for i, t in enumerate(runs[0].inputs)]
    passed_on.outputs = [passed_on.inputs[0]]
    return runs, passed_on


def _sliced(core: _Core, n: int, name: str) -> ir.Graph:
    """The core as a subgraph on the first `n` cache slots; its inputs are the result chained so far (which it
    does not read: every branch of the IFs takes the same inputs), then the core's arguments."""
    graph = ir.Graph(name)
    out = core.ops[-1].outputs[0]
    copies: dict[int, ir.Tensor] = {}
    for i, t in enumerate(core.arguments()):
        copies[id(t)] = ir.Tensor(f"in_{i + 1}", t.shape, t.dtype)
    graph.inputs = [ir.Tensor("in_0", out.shape, out.dtype), *(copies[id(t)] for t in core.arguments())]

    def sliced(t: ir.Tensor, axis: int) -> ir.Tensor:
        if n == core.cache:
            return t
        size = list(t.shape)
        size[axis] = n
        out = ir.Tensor(f"{t.name}_first_{n}", size, t.dtype)
        begin = ir.Tensor(f"{t.name}_begin", [t.rank], np.int32, np.zeros(t.rank, np.int32))
        sizes = ir.Tensor(f"{t.name}_size", [t.rank], np.int32, np.array(size, np.int32))
        graph.ops.append(ir.Op("SLICE", [t, begin, sizes], [out], {}, core.ops[0].source))
        return out

    local = {id(core.keys): sliced(copies[id(core.keys)], 2), id(core.values): sliced(copies[id(core.values)], 2)}
    for side in core.sides:
        local[id(side)] = sliced(copies[id(side)], side.rank - 1) if side.shape[-1] == core.cache \
            else copies[id(side)]
    local[id(core.query)] = copies[id(core.query)]
    for op in core.ops:
        ins: list[ir.Tensor | None] = []
        for given in op.inputs:
            if given is not None and given.is_constant and id(given) not in local:
                local[id(given)] = ir.Tensor(given.name, given.shape, given.dtype, given.data)
            ins.append(local[id(given)] if given is not None else None)
        outs = []
        for t in op.outputs:
            shape = list(t.shape)
            if op is not core.ops[-1]:
                shape[-1] = n  # the scores: one column per slot
            outs.append(ir.Tensor(t.name, shape, t.dtype))
            local[id(t)] = outs[-1]
        graph.ops.append(ir.Op(op.opcode, ins, outs, dict(op.options), op.source))
    graph.outputs = [local[id(core.ops[-1].outputs[0])]]
    return graph
