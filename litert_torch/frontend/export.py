"""torch.export front end: trace a module, decompose with our table, and describe where each node came from.

After `export_module`, the graph holds only ATen ops that either have a lowering or are reported as unsupported;
ops that map to one TFLite builtin (hardswish, gelu, silu, linear, ...) are kept whole instead of decomposed.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
import re
import sys
import threading
import traceback
import types
from typing import Any, Callable, Iterator

import torch
from torch.fx import proxy as _fx_proxy

from litert_torch.errors import ExportError, SampleInputError, one_line
from litert_torch.frontend.sources import user_line_from_traceback

aten = torch.ops.aten

log = logging.getLogger(__name__)

# Composite ops kept whole because one TFLite builtin (or a short exact sequence) computes them. Everything else
# follows torch.export's default decompositions to core ATen.
KEEP_WHOLE = (
    aten.linear.default,
    aten.matmul.default,
    aten.hardswish.default,
    aten.hardsigmoid.default,
    aten.silu.default,
    aten.gelu.default,
    aten.leaky_relu.default,
    aten.elu.default,
    aten.relu6.default,
    aten.hardtanh.default,
    aten.adaptive_avg_pool2d.default,
    aten.max_pool2d.default,
    aten.scaled_dot_product_attention.default,
    aten.layer_norm.default,
    aten.group_norm.default,
    aten.instance_norm.default,
    aten.pixel_shuffle.default,
    aten.pixel_unshuffle.default,
    aten.upsample_bilinear2d.vec,
    aten.upsample_bilinear2d.default,
    aten.upsample_nearest2d.vec,
    aten.upsample_nearest2d.default,
    aten._upsample_nearest_exact2d.vec,
    aten._upsample_nearest_exact2d.default,
    aten.upsample_bicubic2d.vec,
    aten.upsample_bicubic2d.default,
    aten.upsample_linear1d.vec,
    aten.upsample_linear1d.default,
    aten.upsample_trilinear3d.vec,
    aten.upsample_trilinear3d.default,
    aten.upsample_nearest1d.vec,
    aten.upsample_nearest1d.default,
    aten.upsample_nearest3d.vec,
    aten.upsample_nearest3d.default,
    aten._upsample_nearest_exact1d.vec,
    aten._upsample_nearest_exact1d.default,
    aten._upsample_nearest_exact3d.vec,
    aten._upsample_nearest_exact3d.default,
    aten.lstm.input,
    aten.gru.input,
    aten.reflection_pad1d.default,
    aten.reflection_pad2d.default,
    aten.replication_pad1d.default,
    aten.replication_pad2d.default,
    aten._pad_circular.default,
    aten.im2col.default,
    aten.bilinear.default,
    aten.prelu.default,
    # what masks and routings are computed with: one op each, and a program made only of ops lowered as they
    # are is traced once (`decompose`)
    aten.where.Scalar,
    aten.where.ScalarSelf,
    aten.where.ScalarOther,
    aten.__and__.Tensor,
    aten.__or__.Tensor,
    aten.floor_divide.default,
    aten.arange.default,
    aten.arange.start,
    aten.zeros.default,
    aten.ones.default,
    aten.zeros_like.default,
    aten.ones_like.default,
)


def decomposition_table() -> dict:
    table = torch.export.default_decompositions()
    for op in KEEP_WHOLE:
        table.pop(op, None)
    return table


_DECOMPOSE_LOCK = threading.Lock()


@contextlib.contextmanager
def _cia_registry_walked_once() -> Iterator[None]:
    """While decomposing, torch lists the CompositeImplicitAutograd ops of every op namespace and, for each
    namespace, first walks the whole C++ registry of such ops again (dozens of identical walks, most of the
    conversion time of a small model). Nothing registers ops during one decomposition, so within it the walk
    runs once; the next decomposition walks afresh, as torch needs (custom ops may be registered between
    conversions). Where torch has no such function, nothing changes."""
    utils = getattr(getattr(torch, "_export", None), "utils", None)
    walk = getattr(utils, "_materialize_cpp_cia_ops", None)
    if utils is None or walk is None:
        yield
        return
    done = False

    def once() -> None:
        nonlocal done
        if not done:
            walk()
            done = True

    with _DECOMPOSE_LOCK:
        utils._materialize_cpp_cia_ops = once
        try:
            yield
        finally:
            utils._materialize_cpp_cia_ops = walk


class _LiveStack:
    """What torch.fx records as each traced node's stack trace (its tracer calls CapturedTraceback.extract()
    .summary() per node), read from the live Python frames, each frame's source line read only when it is
    printed. torch's own capture symbolizes the whole stack and reads the source line of every frame, most of
    them torch's and dropped right after (about a tenth of torch.export's time). The stack traces are the same
    text. Nodes made from the same Python stack (the parts of an unbind, the ops of one line in a loop) share one
    summary: the stack is identified by each frame's code and line, and summaries are kept per stack while
    tracing (`_live_stack_traces`)."""

    __slots__ = ("_frames",)

    def __init__(self, frames: traceback.StackSummary):
        self._frames = frames

    @staticmethod
    def extract(*, script: bool = False, cpp: bool = False, skip: int = 0) -> Any:
        if script or cpp:
            if _CAPTURED_TRACEBACK is None:  # never: this stands in for torch's CapturedTraceback only
                raise RuntimeError("torch.fx has no CapturedTraceback to extract a script or C++ stack with")
            return _CAPTURED_TRACEBACK.extract(script=script, cpp=cpp, skip=skip)
        codes_and_lines: list[Any] = []
        frame: types.FrameType | None = sys._getframe(1 + skip)
        while frame is not None:
            codes_and_lines.append(frame.f_code)
            codes_and_lines.append(frame.f_lineno)
            frame = frame.f_back
        key = tuple(codes_and_lines)
        known = _STACKS.get(key)
        if known is None:
            frames = [traceback.FrameSummary(key[i].co_filename, key[i + 1], key[i].co_name, lookup_line=False)
                      for i in range(len(key) - 2, -1, -2)]
            known = _STACKS[key] = _LiveStack(traceback.StackSummary.from_list(frames))
        return known

    def summary(self) -> traceback.StackSummary:
        return self._frames


_ABSENT = object()


class _ReplacedWhileEntered:
    """One attribute of torch replaced while any conversion, in any thread, is inside `entered()`: the first to
    enter puts the replacement in (`replacement()` is read then), the last to leave puts torch's own back (or
    removes the attribute, where torch had none of its own) and calls `on_restore`. `original` is torch's own
    while replaced."""

    def __init__(self, owner: Any, name: str, replacement: Callable[[], Any],
                 on_restore: Callable[[], None] | None = None):
        self._owner, self._name = owner, name
        self._replacement, self._on_restore = replacement, on_restore
        self._lock = threading.Lock()
        self._users = 0
        self.original: Any = None

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        with self._lock:
            if self._users == 0:
                self.original = vars(self._owner).get(self._name, _ABSENT)
                setattr(self._owner, self._name, self._replacement())
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    if self.original is _ABSENT:
                        delattr(self._owner, self._name)
                    else:
                        setattr(self._owner, self._name, self.original)
                    self.original = None
                    if self._on_restore is not None:
                        self._on_restore()


_CAPTURED_TRACEBACK = getattr(_fx_proxy, "CapturedTraceback", None)
_STACKS: dict[tuple, _LiveStack] = {}  # while any trace runs: the summary of each stack met, by codes and lines
_LIVE_STACKS = _ReplacedWhileEntered(_fx_proxy, "CapturedTraceback", lambda: _LiveStack, _STACKS.clear) \
    if _CAPTURED_TRACEBACK is not None else None


def _live_stack_traces() -> contextlib.AbstractContextManager:
    """torch.fx records node stack traces with `_LiveStack` while this is entered (in any thread; the text is the
    same either way). Where torch.fx has no such hook, nothing changes."""
    return _LIVE_STACKS.entered() if _LIVE_STACKS is not None else contextlib.nullcontext()


@contextlib.contextmanager
def _lazy_recompiles() -> Iterator[None]:
    """torch.export regenerates and compiles the Python code of its graph module after each of its passes (7
    times for one non-strict export and decomposition), though nothing runs that code while it works: seconds
    for a graph of 100,000 nodes. While this is entered, graph modules are torch.fx's lazy kind, which generate
    their code when it is first read or run. Strict export reads attributes that only code generation sets, so
    it is never traced under this. Where torch.fx has no lazy kind, nothing changes."""
    try:
        from torch.fx._lazy_graph_module import _use_lazy_graph_module
    except ImportError:
        yield
        return
    with _use_lazy_graph_module(True):
        yield


_FAKE_CACHE_WINDOW = 1024  # fake-tensor cache lookups judged together
_FAKE_CACHE_WINDOW_ATTR = "_litert_torch_cache_window"


def _judged_fake_cache_lookup(mode: Any, *args: Any, **kwargs: Any) -> Any:
    from torch._subclasses.fake_tensor import FakeTensorMode

    if _FAKE_CACHE is None:  # never: only _FAKE_CACHE puts this function in torch's place
        raise RuntimeError("the judged fake-tensor cache lookup runs without torch's own")
    out = _FAKE_CACHE.original(mode, *args, **kwargs)
    hits = FakeTensorMode.cache_hits
    seen = hits + FakeTensorMode.cache_misses
    start = mode.__dict__.get(_FAKE_CACHE_WINDOW_ATTR)
    if start is None:
        mode.__dict__[_FAKE_CACHE_WINDOW_ATTR] = (seen, hits)
    elif seen - start[0] >= _FAKE_CACHE_WINDOW:
        if 8 * (hits - start[1]) < seen - start[0]:
            mode.cache_enabled = False
        mode.__dict__[_FAKE_CACHE_WINDOW_ATTR] = (seen, hits)
    return out


def _fake_cache_replacement() -> _ReplacedWhileEntered | None:
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode
    except ImportError:
        return None
    if "_cached_dispatch_impl" not in FakeTensorMode.__dict__ \
            or not isinstance(getattr(FakeTensorMode, "cache_hits", None), int) \
            or not isinstance(getattr(FakeTensorMode, "cache_misses", None), int):
        return None
    return _ReplacedWhileEntered(FakeTensorMode, "_cached_dispatch_impl", lambda: _judged_fake_cache_lookup)


_FAKE_CACHE = _fake_cache_replacement()


def _fake_cache_while_it_hits() -> contextlib.AbstractContextManager:
    """While this is entered (in any thread), a fake-tensor mode stops using its dispatch cache once fewer than
    one lookup in eight of the last 1024 found an entry. torch's fake tensors cache each op's output metadata
    by its arguments, which pays where a model repeats itself (the layers of a transformer: most lookups hit)
    and costs where it does not (each of `[x + i for i in range(n)]` misses, as the scalar is part of the key,
    and a miss costs a third more than no cache at all). The metadata is the same either way. Where torch's
    fake tensors have no such cache, nothing changes."""
    return _FAKE_CACHE.entered() if _FAKE_CACHE is not None else contextlib.nullcontext()


def decompose(program: torch.export.ExportedProgram, *, own: bool = False,
              lowerable: Callable[[Any], bool] | None = None) -> torch.export.ExportedProgram:
    """`program` with only the ATen ops our lowerings take. torch's run_decompositions traces the whole graph
    again (as long as the export itself). For a program we traced ourselves (`own`) and given `lowerable` (the
    lowering registry's "this op is lowered as it is"), the few non-core ops models use most (conv2d, conv1d,
    conv_transpose2d, transpose, squeeze, unbind, dropout in eval mode, casts) are first rewritten in place to the core
    ops they stand for, and in-place ops whose effect no other node can see to their functional forms; when
    every op is then lowerable as it is, that is the result, traced once. Everything else is decomposed by
    torch."""
    if own and lowerable is not None and _rewrite_to_core(program, lowerable):
        return program
    with _cia_registry_walked_once(), _live_stack_traces(), _lazy_recompiles(), _fake_cache_while_it_hits():
        decomposed = program.run_decompositions(decomposition_table())
    _check_outputs_kept(program, decomposed)
    return decomposed


# ---- decomposing by rewriting ------------------------------------------------------------------------------
def _pair(value: Any, n: int) -> list:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return values * n if len(values) == 1 else values


def _convolution_args(node: torch.fx.Node, spatial: int, transposed: bool) -> tuple:
    """aten.convolution's arguments for a conv{1,2}d / conv_transpose2d node (their defaults filled in)."""
    names = (["input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"] if transposed
             else ["input", "weight", "bias", "stride", "padding", "dilation", "groups"])
    defaults = {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1, "output_padding": 0}
    given = dict(zip(names, node.args))
    given.update(node.kwargs)
    v = {**defaults, **given}
    return (v["input"], v["weight"], v["bias"], _pair(v["stride"], spatial), _pair(v["padding"], spatial),
            _pair(v["dilation"], spatial), transposed, _pair(v["output_padding"], spatial), v["groups"])


def _rank(node: Any) -> int | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val.dim() if isinstance(val, torch.Tensor) else None


def _static_shape(node: torch.fx.Node) -> list[int] | None:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor) and all(isinstance(d, int) for d in val.shape):
        return list(val.shape)
    return None


def _part_sizes(node: torch.fx.Node) -> list[int] | None:
    """The sizes along the split axis of a chunk / split node's parts, when they are all known numbers."""
    vals = node.meta.get("val")
    dim = node.args[2] if len(node.args) > 2 else 0
    if not isinstance(vals, (list, tuple)) or not vals or not isinstance(dim, int):
        return None
    if not all(isinstance(v, torch.Tensor) and isinstance(v.shape[dim], int) for v in vals):
        return None
    return [int(v.shape[dim]) for v in vals]


def _functional(op: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """The functional op of an in-place one (aten.relu_.default -> aten.relu.default), when it has one."""
    name = op._schema.name.split("::")[-1]
    if not name.endswith("_") or name.startswith("_"):
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    overload = getattr(packet, op._overloadname, None) if packet is not None else None
    if overload is None or overload._schema.is_mutable:
        return None
    return overload


def _returns_alias(node: torch.fx.Node) -> bool:
    target = node.target
    if target is operator.getitem and isinstance(node.args[0], torch.fx.Node):  # a part of split, unbind, ...
        return _returns_alias(node.args[0])
    if not isinstance(target, torch._ops.OpOverload):
        return node.op != "call_function" or getattr(target, "__module__", "") != "_operator"
    return any(r.alias_info is not None for r in target._schema.returns)


def _casts(node: torch.fx.Node) -> bool:
    """Whether a `to` node's result has another dtype than its input."""
    source, result = node.args[0], node.meta.get("val")
    val = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and isinstance(result, torch.Tensor) and val.dtype != result.dtype


def _written_through(node: torch.fx.Node, aliases: set) -> bool:
    """Whether an in-place op writes to `node`'s value, directly or through views of it."""
    for user in node.users:
        target = user.target
        if isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
            return True
        if user in aliases and _written_through(user, aliases):
            return True
    return False


def _unseen_mutation(node: torch.fx.Node, order: dict, aliases: set) -> bool:
    """An in-place op on its first argument that no other node can observe: that argument is a fresh tensor
    (made by an op that returns no alias: not an input, parameter or view), and every other reader of it comes
    before this node and is not a view (which would see the change later)."""
    if not isinstance(node.target, torch._ops.OpOverload):
        return False
    schema = node.target._schema
    written = [i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
    if written != [0] or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return False
    base = node.args[0]
    if base.op != "call_function" or base in aliases:
        return False
    return all(user is node or (order[user] < order[node] and user not in aliases) for user in base.users)


def _rewrite_to_core(program: torch.export.ExportedProgram, lowerable: Callable[[Any], bool]) -> bool:
    """Rewrite `program`'s graph in place as `decompose` describes; True when it then holds only ops that are
    lowered as they are (else the caller decomposes the rewritten program as usual)."""
    graph = program.graph_module.graph
    order = {n: i for i, n in enumerate(graph.nodes)}
    aliases = {n for n in graph.nodes if _returns_alias(n)}  # before views are rewritten (unbind to unbind_copy)
    changed = False
    views_after = functools.cache(_views_after)
    restrided = []  # unbinds made copies whose strides differ from the parts' with a view after them
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        target = node.target
        # aten.convolution takes batched inputs only: an unbatched conv (C, H, W) is left to torch's decomposition
        if (target is aten.conv2d.default or target is aten.conv1d.default) and _rank(node.args[0]) == (
                4 if target is aten.conv2d.default else 3):
            node.args, node.kwargs = _convolution_args(node, 2 if target is aten.conv2d.default else 1, False), {}
            node.target = aten.convolution.default
        elif target is aten.conv_transpose2d.input and _rank(node.args[0]) == 4:
            node.args, node.kwargs = _convolution_args(node, 2, True), {}
            node.target = aten.convolution.default
        elif target is aten.transpose.int and (rank := _rank(node.args[0])) is not None and not node.kwargs:
            perm = list(range(rank))
            a, b = (int(d) % max(rank, 1) for d in node.args[1:3])
            perm[a], perm[b] = perm[b], perm[a]
            node.args, node.target = (node.args[0], perm), aten.permute.default
        elif target is aten.squeeze.dim and not node.kwargs:
            node.args, node.target = (node.args[0], [node.args[1]]), aten.squeeze.dims
        elif target in (aten.squeeze.default, aten.unflatten.int) and _static_shape(node) is not None:
            node.args, node.kwargs, node.target = (node.args[0], _static_shape(node)), {}, aten.view.default
        elif target is aten.t.default and _rank(node.args[0]) == 2:
            node.args, node.target = (node.args[0], [1, 0]), aten.permute.default
        elif target in (aten.chunk.default, aten.split.Tensor) and not node.kwargs and _part_sizes(node):
            dim = node.args[2] if len(node.args) > 2 else 0
            node.args, node.target = (node.args[0], _part_sizes(node), dim), aten.split_with_sizes.default
        elif target is aten.unbind.int and not node.kwargs and not _written_through(node, aliases):
            # torch's decomposition makes a select and a squeeze per part, traced again: minutes for 100,000 parts
            node.target = aten.unbind_copy.int
            if _static_strides(node) and not _parts_contiguous(node) and node in views_after(graph):
                restrided.append(node)
        elif target is aten.to.dtype and len(node.args) == 2 and not node.kwargs and _casts(node):
            # a cast to another dtype is always a copy (to the same dtype it is an alias, left to torch)
            node.args, node.kwargs, node.target = (node.args[0],), {"dtype": node.args[1]}, aten._to_copy.default
        elif target is aten.softmax.int and len(node.args) == 2 and not node.kwargs:
            node.args, node.target = (*node.args, False), aten._softmax.default
        elif target in (aten.dropout.default, aten.dropout_.default) and len(node.args) == 3 \
                and node.args[2] is False and not node.kwargs:
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
        elif isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable \
                and _functional(target) is not None and _unseen_mutation(node, order, aliases):
            node.target = _functional(target)
            aliases.discard(node)  # a fresh tensor now
        else:
            continue
        changed = True
    final = all(n.op != "call_function" or _as_it_is(n, lowerable) for n in graph.nodes)
    if not final:
        # The program is traced again: a copy's strides would reach a view that relied on the parts' own (one
        # after which torch.export recorded no copy), and the view would fail. Those unbinds stay views (of
        # static sizes only: torch's decomposition of an unbind of dynamic sizes would make them static).
        for node in restrided:
            node.target = aten.unbind.int
    if changed:
        graph.lint()
        program.graph_module.recompile()
    return final


_VIEWS = (aten.view.default, aten.as_strided.default)


def _views_after(graph: torch.fx.Graph) -> set:
    """The nodes from which a view (an op that needs its input's strides to allow it) can be reached."""
    found: set = set()
    for node in reversed(graph.nodes):
        if node.target in _VIEWS or any(user in found for user in node.users):
            found.add(node)
    return found


def _static_strides(node: torch.fx.Node) -> bool:
    value = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    return isinstance(value, torch.Tensor) and all(isinstance(d, int) for d in (*value.shape, *value.stride()))


def _parts_contiguous(node: torch.fx.Node) -> bool:
    """Whether each part an unbind node of static sizes makes is contiguous (its tensor's strides, less the
    unbound axis, those of a contiguous tensor of the part's shape)."""
    source, axis = node.args[0], node.args[1] if len(node.args) > 1 else 0
    if not isinstance(source, torch.fx.Node) or not isinstance(axis, int):
        return False
    value = source.meta["val"]
    dim = axis % max(value.dim(), 1)
    shape = [d for i, d in enumerate(value.shape) if i != dim]
    strides = [s for i, s in enumerate(value.stride()) if i != dim]
    expected = 1
    for size, stride in reversed(list(zip(shape, strides))):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _as_it_is(node: torch.fx.Node, lowerable: Callable[[Any], bool]) -> bool:
    target = node.target
    if target is aten.batch_norm.default:  # train mode goes through torch's decomposition and its error
        return len(node.args) > 5 and node.args[5] is False and lowerable(target)
    if target in (aten.sym_size.int, aten.sym_numel.default):  # sizes: read from shapes when lowering
        return True
    if isinstance(target, torch._ops.OpOverload):
        return not target._schema.is_mutable and lowerable(target)
    return getattr(target, "__module__", "") == "_operator"


def _output_metas(program: torch.export.ExportedProgram) -> list:
    """The meta value of each user output (buffer and input mutations excluded)."""
    from torch.export.graph_signature import OutputKind

    out = program.graph.output_node().args[0]
    return [n.meta.get("val") if isinstance(n, torch.fx.Node) else None
            for n, spec in zip(out, program.graph_signature.output_specs) if spec.kind == OutputKind.USER_OUTPUT]


def _check_outputs_kept(before: torch.export.ExportedProgram, after: torch.export.ExportedProgram) -> None:
    """torch's decompositions must keep each output's shape and dtype; one that does not (a bug in torch, as for
    the logsumexp of _scaled_dot_product_flash_attention_for_cpu) would make the model return something else."""
    for i, (a, b) in enumerate(zip(_output_metas(before), _output_metas(after))):
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            continue
        if len(a.shape) != len(b.shape) or any(str(x) != str(y) for x, y in zip(a.shape, b.shape)) \
                or a.dtype != b.dtype:
            raise ExportError(f"torch's decomposition changes output {i} from {list(a.shape)} {a.dtype} to "
                              f"{list(b.shape)} {b.dtype} (a bug in torch's decomposition of the op that "
                              "computes it); nothing was converted")


def export_module(
    module: torch.nn.Module, args: tuple, kwargs: dict | None = None, *, dynamic_shapes: Any = None,
    strict: bool | str = False, lowerable: Callable[[Any], bool] | None = None,
) -> torch.export.ExportedProgram:
    """Trace `module` with torch.export (non-strict; `strict=True` for its strict mode, "auto" for non-strict
    and then strict when that fails) and decompose it with our table (`decompose`; `lowerable`, the lowering
    registry's "has a lowering of its own" as `lower.aten.program.export_lowerable` passes it, lets it skip torch's
    second trace when the rewritten program needs none). An
    ExportedProgram (say, from torch.export.load) is only decomposed, never changed in place."""
    if isinstance(module, torch.export.ExportedProgram):
        try:
            return decompose(module)
        except Exception as exc:
            raise ExportError(f"could not decompose the exported program:\n{type(exc).__name__}: {exc}") from exc
    if not isinstance(module, torch.nn.Module):
        raise ExportError(f"convert() needs a torch.nn.Module or torch.export.ExportedProgram, "
                          f"got {type(module).__name__}")

    def trace() -> torch.export.ExportedProgram:
        with _quiet_torch(), _live_stack_traces(), _fake_cache_while_it_hits():
            try:
                # strict mode (TorchDynamo) reads the generated code of its graph modules: never lazy there
                with _lazy_recompiles() if strict is not True else contextlib.nullcontext():
                    program = torch.export.export(module, tuple(args), kwargs or {}, strict=strict is True,
                                                  dynamic_shapes=dynamic_shapes)
            except Exception:
                if strict != "auto":
                    raise
                program = torch.export.export(module, tuple(args), kwargs or {}, strict=True,
                                              dynamic_shapes=dynamic_shapes)
            return decompose(program, own=True, lowerable=lowerable)

    try:
        try:
            return trace()
        except Exception as exc:
            folded = _small_integer_buffers(module) if _data_dependent(exc) else []
            if not folded:
                raise
            try:
                with _buffers_as_python_values(folded):
                    program = trace()
            except Exception:  # noqa: BLE001 - whatever the retry raises, the first failure is the one to explain
                raise exc from None
            log.info("folded the integer buffers %s into the trace as Python values (forward computes sizes from "
                     "them)", ", ".join(name for name, _, _ in folded))
            return program
    except Exception as exc:  # torch.export raises many types; keep its explanation and add the user's line
        refused = _eager_failure(module, args, kwargs or {})
        if refused is not None and _about_the_inputs(refused):
            raise SampleInputError(
                f"{type(module).__name__} does not run on the sample inputs ({_describe_samples(args, kwargs)}) "
                f"in PyTorch itself: {type(refused).__name__}: {one_line(refused)}") from exc
        if refused is not None:  # it fails for a reason of its own: no advice about the inputs
            where = user_line_from_traceback(refused)
            raise ExportError(
                f"{type(module).__name__} raises in PyTorch itself on the sample inputs "
                f"({_describe_samples(args, kwargs)}){f' at {where}' if where else ''}: "
                f"{type(refused).__name__}: {one_line(refused)}") from exc
        where = user_line_from_traceback(exc)
        lead = f"torch.export could not trace {type(module).__name__}"
        if where:
            lead += f" (at {where})"
        raise ExportError(f"{lead}:\n{type(exc).__name__}: {exc}{_hint(exc)}") from exc


# What PyTorch says when a call's inputs do not fit: shapes, sizes, dtypes, argument counts, index ranges
_INPUT_WORDS = re.compile(r"shape|size|dimension|\bdims?\b|dtype|scalar type|mat[12]\b|channels|argument|"
                          r"out of (range|bounds)|index|expected .*(input|tensor)|must match|broadcast", re.I)


def _about_the_inputs(exc: Exception) -> bool:
    """Whether what the model raised looks like its inputs not fitting (a shape, a dtype, the arguments), so
    that giving other sample inputs is the advice to give."""
    return isinstance(exc, TypeError) or bool(_INPUT_WORDS.search(str(exc)))


def _data_dependent(exc: BaseException) -> bool:
    """A trace that needed a tensor's value as a Python number (torch.export traces without values)."""
    return "GuardOnDataDependentSymNode" in type(exc).__name__ or "data-dependent" in str(exc)[:2000]


# integer buffers this small hold settings (a stride, a kernel size, a count), not data
_FOLDABLE_NUMEL = 16


def _small_integer_buffers(module: torch.nn.Module) -> list[tuple[str, torch.nn.Module, str]]:
    """(qualified name, owner, attribute) of each small integer buffer of `module`."""
    return [(f"{prefix}.{name}" if prefix else name, owner, name)
            for prefix, owner in module.named_modules()
            for name, value in owner._buffers.items()
            if value is not None and not value.is_floating_point() and not value.is_complex()
            and value.dtype != torch.bool and value.numel() <= _FOLDABLE_NUMEL]


@contextlib.contextmanager
def _buffers_as_python_values(buffers: list[tuple[str, torch.nn.Module, str]]) -> Iterator[None]:
    """While the block runs, each buffer is an attribute holding its values as Python ints (a tuple for a
    vector), so that a forward computing sizes from it (padding from `stride` and `kernel_size` buffers) traces
    with those sizes. A buffer is a constant of the converted model anyway; its value is what it is now.

        before: self.stride = tensor([2, 2]) (a buffer)   -> int(self.stride[0]) is data-dependent in a trace
        during: self.stride = (2, 2)                      -> int(self.stride[0]) == 2
    """
    saved = {id(owner): (owner, dict(owner._buffers)) for _, owner, _ in buffers}
    try:
        for _, owner, name in buffers:
            buffer = owner._buffers.pop(name)
            if buffer is None:
                raise TypeError(f"buffer {name!r} holds no tensor")
            value = buffer.tolist()
            object.__setattr__(owner, name, tuple(value) if isinstance(value, list) else value)
        yield
    finally:
        for owner, original in saved.values():
            for name in original:
                owner.__dict__.pop(name, None)
            owner._buffers.clear()
            owner._buffers.update(original)


def _eager_failure(module: torch.nn.Module, args: tuple, kwargs: dict) -> Exception | None:
    """After a failed trace: what calling `module` on the samples in PyTorch raises (None when it runs). A model
    that fails there too was given inputs its forward does not take. Its buffers (a BatchNorm's running
    statistics in training mode) are put back as they were."""
    saved = [(b, b.detach().clone()) for b in module.buffers()]
    try:
        with torch.no_grad(), _quiet_torch():
            module(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - what the model raises is the answer
        return exc
    finally:
        with torch.no_grad():
            for buffer, value in saved:
                if buffer.shape == value.shape:
                    buffer.copy_(value)
    return None


def _describe_samples(args: tuple, kwargs: dict | None = None) -> str:
    """Sample inputs as 'float32[1, 5], int64[2]', keywords by name, long lists cut short."""
    def one(value: Any) -> str:
        if isinstance(value, torch.Tensor):
            return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
        if isinstance(value, (list, tuple)):
            inner = ", ".join(one(v) for v in value[:4]) + (", ..." if len(value) > 4 else "")
            return f"[{inner}]" if isinstance(value, list) else f"({inner})"
        return type(value).__name__

    parts = [one(a) for a in args] + [f"{k}={one(v)}" for k, v in (kwargs or {}).items()]
    return ", ".join(parts[:8]) + (f", ... ({len(parts)} in all)" if len(parts) > 8 else "")


def _hint(exc: BaseException) -> str:
    """What to do about the torch.export failures users meet most, as a last line."""
    text = str(exc)
    if "in output, which is not a known type" in text:
        if "cache_utils" in text or "Cache" in text:
            return ("\nThe model returns a key/value cache object (Hugging Face's use_cache=True). Pass "
                    "sample_kwargs={'use_cache': False} (or set model.config.use_cache = False) to convert the "
                    "forward pass alone; for on-device generation with a KV cache use "
                    "litert_torch.generative.export_hf (docs/LLM.md).")
        return ("\nforward returns an object torch.export cannot flatten: return tensors (or tuples, lists and "
                "dicts of them), or register the type with torch.utils._pytree.register_pytree_node.")
    return ""


@contextlib.contextmanager
def _quiet_torch() -> Iterator[None]:
    """Log records up to ERROR are dropped while torch.export runs when litert_torch.config.silence_torch_logs
    is on (the default): its warnings and graph dumps are not the user's concern; failures still raise. The
    partial graph torch.export prints to stderr when a trace fails (hundreds of KB for a detection model) goes
    to our debug log instead."""
    from litert_torch.settings import config

    if not config.silence_torch_logs:
        yield
        return
    previous = logging.root.manager.disable
    logging.disable(max(previous, logging.ERROR))  # torch logs what it then raises (fake-tensor failures)
    try:
        with _PARTIAL_GRAPHS.entered() if _PARTIAL_GRAPHS is not None else contextlib.nullcontext():
            yield
    finally:
        logging.disable(previous)


def _print_but_partial_graphs(*args: Any, file: Any = None, **kwargs: Any) -> None:
    """`print` for torch.export's trace module: a failed trace's partial graph printed to stderr is logged at
    debug level instead; anything else prints."""
    if file is sys.stderr and len(args) == 1 and isinstance(args[0], str) and "def forward(" in args[0][:512]:
        log.debug("torch.export's partial graph of the failed trace:\n%s", args[0])
        return
    print(*args, file=file, **kwargs)


_EXPORT_TRACE: types.ModuleType | None
try:
    import torch.export._trace as _export_trace

    _EXPORT_TRACE = _export_trace
except ImportError:  # another torch layout: its prints stay as they are
    _EXPORT_TRACE = None
# `print` in that module's globals shadows the builtin while entered (the module has none of its own)
_PARTIAL_GRAPHS = _ReplacedWhileEntered(_EXPORT_TRACE, "print", lambda: _print_but_partial_graphs) \
    if _EXPORT_TRACE is not None else None
