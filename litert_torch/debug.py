"""Finding the parts of a model that keep it from converting, as small standalone programs.

    for culprit in litert_torch.debug.find_culprits(model, sample_args):
        print(culprit.error)        # what converting this part alone raises
        culprit.print_code()        # a script that reproduces it: the part's graph, its inputs, the conversion

The model is traced and decomposed as `convert` does it and run once in PyTorch to record every intermediate
value. When the whole graph converts (and, with `runtime_errors`, runs in LiteRT) there is nothing to find.
Otherwise each op is tried alone, on the values it had in the model (ops with the same target, argument shapes,
dtypes and constants are tried once): every op that fails alone is a culprit, and is cut out of the graph (its
uses read its recorded value instead). What still fails after that fails only in combination, and torch's graph
minifier (delta debugging on the remaining graph) cuts it down to a smallest failing subgraph, repeatedly, until
the graph converts.

A part reads what the model computes from its inputs as inputs of its own, and everything else (parameters,
buffers, values computed from them alone) as constants held by its module, as the converter sees them in the
whole model: an LSTM's weights and zero initial state stay constants, so the LSTM converts alone as it does in
the model.

`_search_model(predicate, model, args)` is the same search with a predicate of the user's own: it yields the
smallest parts of the graph for which `predicate(graph_module, inputs)` is true.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import math
import operator
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.fx
from torch.utils import _pytree as pytree

from litert_torch.errors import ExportError, ModelNotExportableError
from litert_torch.frontend.sources import source_location, target_name
from litert_torch.lower.aten.program import export_lowerable

CULPRIT_CLASS = "CulpritGraphModule"
_LITERAL_ELEMENTS = 64  # inputs up to this size are written into the reproduction as they are


def _printed(text: str, print_output: bool) -> str | None:
    """`text` printed (None returned), or returned."""
    if print_output:
        print(text)
        return None
    return text


@dataclass
class SearchResult:
    """A standalone part of the model's graph: every tensor it reads from the rest of the model (parameters
    included) is an input, and `inputs` are the values they had when the whole model ran on the sample."""

    graph_module: torch.fx.GraphModule
    inputs: tuple

    @property
    def graph(self) -> torch.fx.Graph:
        return self.graph_module.graph

    @graph.setter
    def graph(self, graph: torch.fx.Graph) -> None:
        self.graph_module.graph = graph


@dataclass
class Culprit(SearchResult):
    """A smallest part of the model that fails to convert (or, with runtime_errors, to run once converted).
    `error` is what converting it alone raised; `targets` and `locations` name its ops and their PyTorch lines."""

    _runtime_errors: bool = False
    error: str = ""
    targets: list[str] = field(default_factory=list)
    locations: list[str] = field(default_factory=list)

    @property
    def stack_traces(self) -> list[str]:
        return sorted({n.meta["stack_trace"] for n in self.graph.nodes
                       if n.op.startswith("call_") and n.meta.get("stack_trace")})

    def print_readable(self, print_output: bool = True) -> str | None:
        """The part as Python: its graph module's class, `_constants` (the parameters, buffers and other
        constants it reads, by attribute name) and `_args`, values like the ones it failed on. Printed, or
        returned with print_output=False."""
        return _printed(self._readable(), print_output)

    def _readable(self) -> str:
        module = self.graph_module.print_readable(print_output=False).rstrip()
        constants = "".join(f"    {name!r}: {_input_code(v)},\n" for name, v in self.graph_module.named_buffers())
        args = "\n".join(f"    {_input_code(v)}," for v in self.inputs)
        return f"{module}\n\n_constants = {{\n{constants}}}\n_args = (\n{args}\n)"

    def print_code(self, print_output: bool = True) -> str | None:
        """A script reproducing the failure: the part, its inputs and the conversion (and the call, for a
        runtime error), with the error it gave as a comment at the top. Printed, or returned with
        print_output=False."""
        return _printed(self._code(), print_output)

    def _code(self) -> str:
        header = "".join(f"# {line}\n" for line in self.error.splitlines()[:20]) if self.error else ""
        code = (f"{header}import torch\nfrom torch import device\nimport litert_torch\n\n"
                f"{self._readable()}\n\n"
                f"_module = {CULPRIT_CLASS}()\n"
                "for _name, _value in _constants.items():\n"
                "    _module.register_buffer(_name, _value)\n"
                "_edge_model = litert_torch.convert(_module.eval(), _args)\n")
        if self._runtime_errors:
            code += "_edge_model(*_args)\n"
        return code

    @property
    def code(self) -> str:
        return self._code()

    def __str__(self) -> str:
        return self._readable()

    __repr__ = __str__


def find_culprits(torch_model: torch.nn.Module | torch.export.ExportedProgram, args: Any = (),
                  max_granularity: int | None = None, runtime_errors: bool = False, *,
                  enable_fx_minifier_logging: bool = False) -> Iterator[Culprit]:
    """The smallest parts of `torch_model` that fail to convert, one `Culprit` per failing op (or per smallest
    failing group of ops, where no op fails alone). `runtime_errors`: a part that converts but fails when the
    converted model is called fails too. `max_granularity` (a power of two) bounds the minifier's steps;
    `enable_fx_minifier_logging` lets it print its progress. Raises `ModelNotExportableError` (a ValueError)
    when torch.export cannot trace the model."""
    checked: dict[Any, str | None] = {}

    def failure(gm: torch.fx.GraphModule, inputs: Sequence[Any], key: Any = None) -> str | None:
        if key is not None and key in checked:
            return checked[key]
        error = _conversion_failure(gm, inputs, runtime_errors)
        if key is not None:
            checked[key] = error
        return error

    for part, error in _search(failure, torch_model, args, max_granularity, enable_fx_minifier_logging):
        calls = [n for n in part.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]
        yield Culprit(part.graph_module, part.inputs, _runtime_errors=runtime_errors, error=error,
                      targets=[_op_name(n) for n in calls],
                      locations=[loc for n in calls if (loc := source_location(n.meta.get("stack_trace")))])


def _op_name(node: torch.fx.Node) -> str:
    """The ATen op a node runs (for an op run for its side effect, the op, not its with_effects wrapper)."""
    if node.target is torch.ops.higher_order.with_effects and len(node.args) > 1:
        return target_name(node.args[1])
    return target_name(node.target)


def _search_model(predicate_f: Callable[[torch.fx.GraphModule, list], bool],
                  model: torch.nn.Module | torch.export.ExportedProgram, export_args: Any = None, *,
                  max_granularity: int | None = None,
                  enable_fx_minifier_logging: bool = False) -> Iterator[SearchResult]:
    """The smallest parts of `model`'s graph for which `predicate_f(graph_module, inputs)` is true: each op for
    which it holds alone, then (while it holds for what is left) the minifier's smallest subgraphs."""

    def holds(gm: torch.fx.GraphModule, inputs: Sequence[Any], key: Any = None) -> str | None:
        return "" if predicate_f(gm, list(inputs)) else None

    for part, _ in _search(holds, model, export_args, max_granularity, enable_fx_minifier_logging):
        yield part


# ---- the search --------------------------------------------------------------------------------------------
def _search(found: Callable[..., str | None], model, args, max_granularity: int | None,
            minifier_logging: bool) -> Iterator[tuple[SearchResult, str]]:
    whole = _Whole(_exported(model, args))
    error = found(whole.module, whole.inputs())
    if error is None:
        return
    cut = False
    for node in list(whole.module.graph.nodes):
        if getattr(node, "_erased", False):  # dead code removed by an earlier cut
            continue
        if node.op != "call_function" or node.target is operator.getitem or not _has_tensor(whole.values[node]):
            continue  # an op without a tensor result (an assertion) is no program of its own
        part = whole.part([node])
        failed = found(part.graph_module, part.inputs, key=whole.op_key(node))
        if failed is not None:
            yield part, failed
            whole.cut([node.name])
            cut = True
    if cut:
        error = found(whole.module, whole.inputs())
    while error is not None:
        names = yield from _minified(whole, found, max_granularity, minifier_logging, error)
        if not names:
            return
        whole.cut(names)
        error = found(whole.module, whole.inputs())


def _minified(whole: "_Whole", found, max_granularity, logging, error):
    """Yields the minifier's smallest failing subgraph of the graph (rebuilt from the graph's own nodes, so that
    it carries their stack traces and reads constants as the model does) and returns the names of its ops; none
    when the minifier finds none."""
    from torch._functorch.fx_minifier import minifier

    quiet = contextlib.nullcontext() if logging else _silenced()
    try:
        with quiet:
            small, _ = minifier(whole.module, whole.inputs(), lambda gm, inps: found(gm, inps) is not None,
                                dump_state=lambda *a: None, max_granularity=max_granularity)
    except Exception:  # noqa: BLE001 - the minifier found no smaller failing graph, or could not run this one
        return []
    names = [n.name for n in small.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]
    by_name = {n.name: n for n in whole.module.graph.nodes}
    nodes = [by_name[name] for name in names if name in by_name]
    if len(nodes) != len(names) or not nodes:
        return []
    part = whole.part(nodes)
    yield part, found(part.graph_module, part.inputs) or error
    return names


@contextlib.contextmanager
def _silenced() -> Iterator[None]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


def _conversion_failure(gm: torch.fx.GraphModule, inputs: Sequence[Any], runtime_errors: bool) -> str | None:
    """What converting `gm` (and, with runtime_errors, calling the result on `inputs`) raises, as text; None
    when both work."""
    from litert_torch.converter import convert

    with warnings.catch_warnings(), _quiet_log():
        warnings.simplefilter("ignore")
        try:
            edge = convert(gm, tuple(inputs))
        except Exception as exc:  # noqa: BLE001 - any failure of the conversion is what is searched for
            return f"{type(exc).__name__}: {exc}"
        if runtime_errors:
            try:
                edge(*inputs)
            except Exception as exc:  # noqa: BLE001 - any failure of the run is what is searched for
                return f"{type(exc).__name__} when run: {exc}"
    return None


@contextlib.contextmanager
def _quiet_log() -> Iterator[None]:
    """The converter's warnings (int64 downcasts, ...) are about the parts tried, not the user's model."""
    log = logging.getLogger("litert_torch")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


# ---- the graph ---------------------------------------------------------------------------------------------
def _exported(model, args) -> torch.export.ExportedProgram:
    if not isinstance(args, tuple):
        args = (args,) if args is not None else ()
    try:
        return export_lowerable(model, args)
    except ExportError as exc:
        raise ModelNotExportableError(
            f"the model is not exportable by torch.export, so its parts cannot be searched; make it exportable "
            f"first.\n{exc}") from exc


class _Whole:
    """The model's graph as a module that holds its parameters, buffers and constants (its only inputs are the
    model's), with every node's value on the sample and whether it depends on the inputs."""

    def __init__(self, program: torch.export.ExportedProgram):
        from torch.export.graph_signature import InputKind

        graph = copy.deepcopy(program.graph_module.graph)
        self.module = torch.fx.GraphModule(torch.nn.Module(), graph, CULPRIT_CLASS)
        user = iter(pytree.tree_leaves(program.example_inputs))
        inputs = []
        for node, spec in zip([n for n in graph.nodes if n.op == "placeholder"], program.graph_signature.input_specs):
            if spec.kind == InputKind.USER_INPUT:
                inputs.append(next(user))
                continue
            if spec.kind == InputKind.TOKEN:  # orders ops run for their side effects; torch's tokens are empty
                inputs.append(torch.tensor([]))
                continue
            value = program.state_dict[spec.target] if spec.target in program.state_dict \
                else program.constants[spec.target]
            self._hold(node, value)
            graph.erase_node(node)
        self.module.recompile()
        recorder = _Recorder(self.module)
        with torch.no_grad():
            recorder.run(*inputs)
        self.values: dict[torch.fx.Node, Any] = recorder.values
        self.dependent: set[torch.fx.Node] = set()
        for node in graph.nodes:
            if node.op == "placeholder" or any(a in self.dependent for a in node.all_input_nodes):
                self.dependent.add(node)

    def inputs(self) -> list:
        return [self.values[n] for n in self.module.graph.nodes if n.op == "placeholder"]

    def _hold(self, node: torch.fx.Node, value: Any) -> torch.fx.Node:
        """`node`'s uses read `value` as a constant of the module instead; returns the new node."""
        graph = self.module.graph
        name = f"{node.name}_value" if node.op != "placeholder" else node.name
        if isinstance(value, torch.Tensor):
            self.module.register_buffer(name, value.detach())
        else:  # a script object (a custom class's instance) the program holds
            setattr(self.module, name, value)
        with graph.inserting_before(_first_op(graph)):
            attr = graph.get_attr(name)
        attr.meta = _value_meta(node)
        node.replace_all_uses_with(attr)
        return attr

    def part(self, nodes: list[torch.fx.Node]) -> SearchResult:
        """`nodes` (in graph order) as a standalone graph module. What they read from outside is an input when
        it depends on the model's inputs, else a constant of the module (as the converter sees it in the whole
        model); what is not a tensor is written in. Its outputs are their values the model reads."""
        order = {n: i for i, n in enumerate(self.module.graph.nodes)}
        # the results of a multi-result op that the model reads go with it (an LSTM whose final states are
        # not read converts differently from one whose are)
        nodes = sorted({*nodes, *(u for n in nodes for u in n.users if u.target is operator.getitem)},
                       key=order.__getitem__)
        graph = torch.fx.Graph()
        root = torch.nn.Module()
        inside = set(nodes)
        env: dict[torch.fx.Node, Any] = {}
        inputs: list[Any] = []
        reads: list[torch.fx.Node] = []
        for node in nodes:
            torch.fx.node.map_arg((node.args, node.kwargs),
                                  lambda n: reads.append(n) if n not in inside and n not in reads else None)
        for n in reads:
            value = self.values[n]
            if not isinstance(value, torch.Tensor):
                env[n] = value
            elif n in self.dependent:
                env[n] = graph.placeholder(n.name)
                inputs.append(value)
            else:
                root.register_buffer(n.name, value.detach())
                env[n] = graph.get_attr(n.name)
            if isinstance(value, torch.Tensor):
                env[n].meta = _value_meta(n)
        for node in nodes:
            env[node] = graph.node_copy(node, lambda n: env[n])
        outputs = [env[n] for n in nodes if any(u not in inside for u in n.users)] or [env[nodes[-1]]]
        graph.output(outputs[0] if len(outputs) == 1 else tuple(outputs))
        graph.lint()
        return SearchResult(torch.fx.GraphModule(root, graph, CULPRIT_CLASS), tuple(inputs))

    def cut(self, names: Sequence[str]) -> None:
        """Removes the named ops from the graph: their uses read their recorded values, as new inputs (values
        that depend on the model's inputs) or constants."""
        graph = self.module.graph
        by_name = {n.name: n for n in graph.nodes}
        for name in names:
            node = by_name[name]
            for user in [u for u in node.users if u.target is operator.getitem]:
                self._replace(user)
                graph.erase_node(user)
            self._replace(node)
            graph.erase_node(node)
        graph.eliminate_dead_code()
        for node in [n for n in graph.nodes if n.op == "placeholder" and not n.users]:
            graph.erase_node(node)
        self.module.recompile()

    def _replace(self, node: torch.fx.Node) -> None:
        if not node.users:
            return
        value = self.values[node]
        graph = self.module.graph
        if not isinstance(value, torch.Tensor):
            for user in list(node.users):
                user.args = torch.fx.node.map_arg(user.args, lambda a: value if a is node else a)
                user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda a: value if a is node else a)
            return
        if node not in self.dependent:
            self.values[self._hold(node, value)] = value
            return
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        with graph.inserting_after(placeholders[-1]) if placeholders else graph.inserting_before(_first_op(graph)):
            placeholder = graph.placeholder(f"{node.name}_value")
        placeholder.meta = _value_meta(node)
        self.values[placeholder] = value
        self.dependent.add(placeholder)
        node.replace_all_uses_with(placeholder)

    def op_key(self, node: torch.fx.Node) -> Any:
        """Ops with equal keys convert alike alone: the target, and each argument's shape, dtype and whether it
        is an input or a constant (a tensor), or its value (anything else)."""
        def key(a: Any) -> Any:
            if isinstance(a, torch.fx.Node):
                value = self.values[a]
                if isinstance(value, torch.Tensor):
                    described = ("tensor", tuple(value.shape), value.dtype, value.is_contiguous())
                    if a in self.dependent:
                        return described
                    # a constant's values can matter to a lowering (a zero initial state, a small index table)
                    if value.numel() <= _LITERAL_ELEMENTS:
                        return (*described, _literal(value.tolist()))
                    return (*described, _uniform(value))
                return ("value", repr(value))
            return repr(a)

        def is_node(a: Any) -> bool:
            return isinstance(a, torch.fx.Node)

        flat = [key(a) for a in pytree.tree_leaves((node.args, node.kwargs), is_leaf=is_node)]
        return node.target, tuple(flat), repr(pytree.tree_structure((node.args, node.kwargs), is_leaf=is_node))


def _first_op(graph: torch.fx.Graph) -> torch.fx.Node:
    return next(n for n in graph.nodes if n.op not in ("placeholder", "get_attr"))


def _value_meta(node: torch.fx.Node) -> dict:
    return {k: v for k, v in node.meta.items() if k in ("val", "tensor_meta")}


class _Recorder(torch.fx.Interpreter):
    def __init__(self, module: torch.fx.GraphModule):
        super().__init__(module)
        self.values: dict[torch.fx.Node, Any] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        self.values[n] = value = super().run_node(n)
        return value


def _has_tensor(value: Any) -> bool:
    return any(isinstance(v, torch.Tensor) for v in pytree.tree_leaves(value))


def _input_code(value: Any) -> str:
    """Python for a tensor like `value`: its own values when it is small or holds one value throughout (a zero
    state), else random ones of its shape, dtype and (for integers) range."""
    if not isinstance(value, torch.Tensor):
        return repr(value)
    value = value.detach()
    shape = tuple(value.shape)
    if value.numel() <= _LITERAL_ELEMENTS:
        return f"torch.tensor({_literal(value.tolist())}, dtype={value.dtype})"
    uniform = _uniform(value)
    if uniform is not None:
        return f"torch.full({shape}, {uniform}, dtype={value.dtype})"
    if value.dtype == torch.bool:
        return f"torch.randint(0, 2, {shape}).bool()"
    if value.dtype.is_floating_point or value.dtype.is_complex:
        return f"torch.randn({shape}, dtype={value.dtype})"
    low, high = int(value.min()), int(value.max())
    return f"torch.randint({low}, {high + 1}, {shape}, dtype={value.dtype})"


def _uniform(value: torch.Tensor) -> str | None:
    """The one value every element of `value` holds, as Python; None when they differ."""
    flat = value.reshape(-1)
    if flat.numel() == 0:
        return None
    first = flat[0]
    same = (flat == first) | (torch.isnan(flat) & torch.isnan(first)) if value.is_floating_point() else flat == first
    return _literal(first.item()) if bool(same.all()) else None


def _literal(value: Any) -> str:
    """Python for nested lists of numbers, non-finite floats included."""
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)
