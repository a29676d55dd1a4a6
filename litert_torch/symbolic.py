"""Symbolic dimensions: sizes known only when the model runs.

A dynamic dimension of a traced program is a `Sym`: torch.export's own sympy expression over the program's size
symbols (`s0`, `(s0 - 1)//2 + 1`, `s0*s1`) together with the `SymSpace` that gives each symbol its name (the
user's `Dim` name) and its range. An IR tensor's shape holds ints for static dimensions and Syms for dynamic ones.

Arithmetic on a Sym gives a Sym (or an int where the result is constant). Anything that needs the size as a
number at conversion time (`int(d)`, `np.array(shape, np.int32)`, a comparison the ranges cannot decide) raises
`DynamicSizeError`, which the lowering driver turns into an error naming the op and the PyTorch source line. A
lowering therefore cannot bake one size into the model by accident; where it can follow the size it says so
explicitly, building the size at run time (`LoweringContext.size_tensor`) or writing -1 into a RESHAPE.

Equality is structural on the canonical expression: `a == b` is True only when the two expressions are the same
after expansion, which is the safe reading for passes that compare shapes. `same_size` decides equality over
the whole range (for checking a lowering's result against torch.export's shapes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import sympy

from litert_torch.errors import ConversionError

# Above this many points, `same_size` samples a range instead of checking every point in it.
EXHAUSTIVE_POINTS = 1 << 16
# Unbounded dimensions are checked up to this size.
CHECK_LIMIT = 1 << 16
# What torch's bound_sympy raises on an expression its value-range analysis has no rule for (a function it
# cannot interpret, a comparison it cannot order): the expression is then unbounded.
BOUND_FAILURES = (TypeError, AttributeError, NotImplementedError, AssertionError)


class DynamicSizeError(ConversionError):
    """A size that depends on a dynamic dimension was needed as a number at conversion time."""

    def __init__(self, message: str, sym: "Sym | None" = None):
        self.sym = sym
        super().__init__(message)


@dataclass
class SymSpace:
    """The size symbols of one traced program: their names (from the user's Dims) and inclusive ranges."""

    names: dict[sympy.Symbol, str] = field(default_factory=dict)
    ranges: dict[sympy.Symbol, tuple[int, int | None]] = field(default_factory=dict)
    fixed: dict[sympy.Symbol, int] = field(default_factory=dict)  # symbols lowered at one static size
    hints: dict[sympy.Symbol, int] = field(default_factory=dict)  # each symbol's size in the traced sample
    # Sizes that depend on values, not on input sizes (a Reshape to a shape computed when the model runs): each
    # is read when the model runs from the SHAPE of the tensor it first sizes (`LoweringContext.anchor`).
    unbacked: set[sympy.Symbol] = field(default_factory=set)
    # Of those, the ones a traced program's values decide (a count of true elements, a size read with .item(),
    # the length of a result that depends on them): 0 whenever nothing is selected, which some kernels cannot
    # take (`LoweringContext.emit` keeps tensors of such sizes away from them).
    counts: set[sympy.Symbol] = field(default_factory=set)

    def fresh(self, what: str, low: int = 0, high: int | None = None) -> "int | Sym":
        """A new size known only when the model runs, decided by values rather than by the input sizes, in the
        inclusive range [low, high] (a plain int when the range holds one size); `what` names it in messages."""
        if high is not None and int(high) == int(low):
            return int(low)
        # (named apart from torch.export's own `u<n>` symbols, which the same space may hold)
        symbol = sympy.Symbol(f"v{len(self.unbacked)}", integer=True, nonnegative=True)
        self.add(symbol, f"{what}#{len(self.unbacked)}", low, high)
        self.unbacked.add(symbol)
        return Sym(symbol, self)

    def add(self, symbol: sympy.Symbol, name: str, low: int, high: int | None) -> None:
        self.names.setdefault(symbol, name)
        self.ranges[symbol] = (int(low), None if high is None else int(high))

    def describe(self, symbols: Iterable[sympy.Symbol]) -> str:
        parts = []
        for s in sorted(symbols, key=str):
            low, high = self.ranges.get(s, (0, None))
            parts.append(f"{self.names.get(s, str(s))} in [{low}, {'inf' if high is None else high}]")
        return ", ".join(parts)

    def text(self, expr: sympy.Expr) -> str:
        return str(expr.xreplace({s: sympy.Symbol(n, integer=True) for s, n in self.names.items()}))

    def bounds(self, expr: sympy.Expr) -> tuple[float, float]:
        """Lower and upper bound of `expr` over the ranges (may be +-inf)."""
        from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

        ranges = {s: ValueRanges(lo, hi if hi is not None else sympy.oo) for s, (lo, hi) in self.ranges.items()}
        try:
            vr = bound_sympy(expr, ranges)
        except BOUND_FAILURES:  # an expression bound_sympy cannot bound is unbounded
            return float("-inf"), float("inf")
        lo, hi = _finite(vr.lower), _finite(vr.upper)
        return (float("-inf") if lo is None else float(lo)), (float("inf") if hi is None else float(hi))

    def points(self, symbols: Sequence[sympy.Symbol], limit: int = EXHAUSTIVE_POINTS) -> dict[sympy.Symbol, np.ndarray]:
        """Assignments of `symbols` covering their ranges: every combination when there are at most `limit`,
        else the ends, small sizes, and an even spread (with a fixed seed) of the rest."""
        spans = []
        for s in symbols:
            low, high = self.ranges.get(s, (0, None))
            high = min(high if high is not None else CHECK_LIMIT, max(low, CHECK_LIMIT))
            spans.append((low, high))
        total = 1
        for low, high in spans:
            total *= high - low + 1
        if total <= limit:
            grids = np.meshgrid(*[np.arange(lo, hi + 1, dtype=np.int64) for lo, hi in spans], indexing="ij")
            return {s: g.reshape(-1) for s, g in zip(symbols, grids)}
        rng = np.random.default_rng(0)
        per = max(2, int(limit ** (1 / max(len(symbols), 1))))
        axes = []
        for low, high in spans:
            picks = {low, high, *range(low, min(low + 8, high + 1))}
            picks.update(int(v) for v in rng.integers(low, high + 1, per))
            axes.append(np.array(sorted(picks), np.int64))
        grids = np.meshgrid(*axes, indexing="ij")
        return {s: g.reshape(-1) for s, g in zip(symbols, grids)}


def evaluate(expr: sympy.Expr, values: Mapping[sympy.Symbol, np.ndarray | np.integer]) -> np.ndarray | np.integer:
    """`expr` evaluated with integer arithmetic (floor division, Python modulo) at the given symbol values (arrays
    of one shape, or single integers: the result is of the same kind)."""
    if expr.is_Integer:
        return np.int64(int(expr))
    if expr.is_Symbol:
        return values[expr]
    args = [evaluate(a, values) for a in expr.args]
    name = type(expr).__name__
    if isinstance(expr, sympy.Add):
        out = args[0]
        for a in args[1:]:
            out = out + a
        return out
    if isinstance(expr, sympy.Mul):
        if any(isinstance(a, sympy.Rational) and not a.is_Integer for a in expr.args):
            raise DynamicSizeError(f"the size {expr} is not an integer expression")
        out = args[0]
        for a in args[1:]:
            out = out * a
        return out
    if isinstance(expr, sympy.Pow) and expr.args[1].is_Integer and int(expr.args[1]) >= 0:
        return args[0] ** int(expr.args[1])
    if name in ("FloorDiv", "CleanDiv"):
        return np.floor_divide(args[0], args[1])
    if name == "CeilDiv":
        return -np.floor_divide(-args[0], args[1])
    if name in ("Mod", "PythonMod"):
        return np.mod(args[0], args[1])
    if name == "ModularIndexing":
        return np.mod(np.floor_divide(args[0], args[1]), args[2])
    if name == "Max":
        out = args[0]
        for a in args[1:]:
            out = np.maximum(out, a)
        return out
    if name == "Min":
        out = args[0]
        for a in args[1:]:
            out = np.minimum(out, a)
        return out
    raise DynamicSizeError(f"the size expression {expr} uses {name}, which this converter does not evaluate")


class Sym:
    """A dimension known only at run time. See the module docstring."""

    __slots__ = ("expr", "space")

    def __init__(self, expr: sympy.Expr, space: SymSpace):
        self.expr = expr
        self.space = space

    # ---- construction ---------------------------------------------------------------------------------------
    @staticmethod
    def make(expr: Any, space: SymSpace) -> "int | Sym":
        expr = sympy.sympify(expr)
        if expr.is_Integer:
            return int(expr)
        if expr.is_number:
            raise DynamicSizeError(f"the size {expr} is not an integer")
        lo, hi = space.bounds(expr)
        if lo == hi:
            return int(lo)
        return Sym(expr, space)

    def _other(self, other: Any) -> sympy.Expr | None:
        if isinstance(other, Sym):
            return other.expr
        if isinstance(other, (int, np.integer)) and not isinstance(other, bool):
            return sympy.Integer(int(other))
        return None

    def _binary(self, other: Any, fn, reverse: bool = False) -> "int | Sym":
        o = self._other(other)
        if o is None:
            return NotImplemented
        a, b = (o, self.expr) if reverse else (self.expr, o)
        return Sym.make(fn(a, b), self.space)

    def __add__(self, other): return self._binary(other, lambda a, b: a + b)
    def __radd__(self, other): return self._binary(other, lambda a, b: a + b, True)
    def __sub__(self, other): return self._binary(other, lambda a, b: a - b)
    def __rsub__(self, other): return self._binary(other, lambda a, b: a - b, True)
    def __mul__(self, other): return self._binary(other, lambda a, b: a * b)
    def __rmul__(self, other): return self._binary(other, lambda a, b: a * b, True)
    def __neg__(self): return Sym.make(-self.expr, self.space)
    def __pos__(self): return self

    def __floordiv__(self, other):
        return self._binary(other, _floordiv)

    def __rfloordiv__(self, other):
        return self._binary(other, _floordiv, True)

    def __mod__(self, other):
        return self._binary(other, _mod)

    def __rmod__(self, other):
        return self._binary(other, _mod, True)

    def __truediv__(self, other):
        raise self.needed("divided as a real number")

    __rtruediv__ = __truediv__

    # ---- comparisons ----------------------------------------------------------------------------------------
    def __eq__(self, other: Any) -> bool:
        o = self._other(other)
        if o is None:
            return False
        if o.is_Integer:
            return False  # a Sym is never a constant (Sym.make returns ints for those)
        return self.expr == o or sympy.expand(self.expr - o) == 0

    def __ne__(self, other: Any) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.expr)

    def _compare(self, other: Any, op: str) -> bool:
        o = self._other(other)
        if o is None:
            return NotImplemented
        lo, hi = self.space.bounds(self.expr - o)
        decided = {"<": (hi < 0, lo >= 0), "<=": (hi <= 0, lo > 0), ">": (lo > 0, hi <= 0), ">=": (lo >= 0, hi < 0)}
        yes, no = decided[op]
        if yes:
            return True
        if no:
            return False
        raise self.needed(f"compared with {self.space.text(o)}")

    def __lt__(self, other): return self._compare(other, "<")
    def __le__(self, other): return self._compare(other, "<=")
    def __gt__(self, other): return self._compare(other, ">")
    def __ge__(self, other): return self._compare(other, ">=")

    def __bool__(self) -> bool:
        lo, hi = self.space.bounds(self.expr)
        if lo > 0 or hi < 0:
            return True
        raise self.needed("tested for zero")

    # ---- conversions that need a number ---------------------------------------------------------------------
    def needed(self, how: str) -> DynamicSizeError:
        return DynamicSizeError(
            f"the size {self} depends on the dynamic dimension{'s' if len(self.expr.free_symbols) > 1 else ''} "
            f"{self.space.describe(self.expr.free_symbols)} and was {how} at conversion time", self)

    def __int__(self):
        raise self.needed("needed as a number")

    def __index__(self):
        raise self.needed("needed as a number")

    def __float__(self):
        raise self.needed("needed as a number")

    def __repr__(self) -> str:
        return self.space.text(self.expr)

    __str__ = __repr__

    @property
    def symbols(self) -> frozenset:
        return frozenset(self.expr.free_symbols)


def _floordiv(a: sympy.Expr, b: sympy.Expr) -> sympy.Expr:
    from torch.utils._sympy.functions import FloorDiv

    return FloorDiv(a, b)


def _mod(a: sympy.Expr, b: sympy.Expr) -> sympy.Expr:
    from torch.utils._sympy.functions import PythonMod

    return PythonMod(a, b)


def is_static(d: Any) -> bool:
    return not isinstance(d, Sym)


def all_static(shape: Iterable[Any]) -> bool:
    return not any(isinstance(d, Sym) for d in shape)


def dims_of(shape: Iterable[Any]) -> tuple:
    """A shape as a tuple of ints and Syms (numpy integers become ints)."""
    return tuple(d if isinstance(d, Sym) else int(d) for d in shape)


def signature(shape: Iterable[Any]) -> tuple[int, ...]:
    """The TFLite shape signature: -1 where the dimension is dynamic."""
    return tuple(-1 if isinstance(d, Sym) else int(d) for d in shape)


def concrete(shape: Iterable[Any]) -> tuple[int, ...]:
    """The shape at the traced sample's sizes (the flatbuffer's `shape` field, the size a runtime prepares the
    model at before the first resize; 1 where a size has no sample value)."""
    return tuple(_at_hint(d) if isinstance(d, Sym) else int(d) for d in shape)


def _at_hint(d: "Sym") -> int:
    if not d.expr.free_symbols <= set(d.space.hints):
        return 1
    try:
        return max(int(evaluate(d.expr, {s: np.int64(v) for s, v in d.space.hints.items()})), 0)
    except DynamicSizeError:
        return 1


def smax(a: Any, b: Any) -> "int | Sym":
    """max(a, b) for ints and Syms (a Sym with sympy's Max where the ranges do not decide it)."""
    if not isinstance(a, Sym) and not isinstance(b, Sym):
        return max(int(a), int(b))
    space = a.space if isinstance(a, Sym) else b.space
    ea = a.expr if isinstance(a, Sym) else sympy.Integer(int(a))
    eb = b.expr if isinstance(b, Sym) else sympy.Integer(int(b))
    lo, hi = space.bounds(ea - eb)
    if lo >= 0:
        return a
    if hi <= 0:
        return b
    return Sym.make(sympy.Max(ea, eb), space)


def smin(a: Any, b: Any) -> "int | Sym":
    """min(a, b) for ints and Syms."""
    return -smax(-a, -b)


def broadcast_shapes(*shapes: Sequence[Any]) -> tuple:
    """NumPy broadcasting of shapes holding ints and Syms (a Sym stands for a size other than 1 where it meets
    another size; torch.export has checked that the sizes agree)."""
    if all(all_static(s) for s in shapes):
        return tuple(int(d) for d in np.broadcast_shapes(*[tuple(int(d) for d in s) for s in shapes]))
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        sizes = [s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0]
        chosen: Any = 1
        for d in sizes:
            if isinstance(d, Sym):
                if isinstance(chosen, Sym) and chosen != d and (d.symbols | chosen.symbols) & d.space.unbacked:
                    # a size decided by values may be 1 at run time: which of the two is the result is not known
                    raise DynamicSizeError(f"sizes {chosen} and {d} meet in a broadcast, and one of them is "
                                           "decided by values when the model runs", d)
                if not isinstance(chosen, Sym) and chosen != 1 and d.symbols & d.space.unbacked:
                    continue  # a size decided by values meets a static one: it is 1 or that size
                chosen = d if not isinstance(chosen, Sym) or chosen == d else chosen
            elif d != 1:
                if isinstance(chosen, Sym) or chosen == 1:
                    chosen = d
                elif chosen != d:
                    raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(chosen)
    return tuple(out)


def estimate(d: Any) -> int:
    """A number for a size in cost estimates: a dynamic size at the top of its range (its bottom when the range
    is unbounded)."""
    if not isinstance(d, Sym):
        return int(d)
    lo, hi = d.space.bounds(d.expr)
    return int(hi) if hi != float("inf") else max(int(lo), 1)


def same_size(a: Any, b: Any) -> bool:
    """True when `a` and `b` are equal at every point of their symbols' ranges (checked at every point, or at a
    wide sample of a range too large to enumerate)."""
    if not isinstance(a, Sym) and not isinstance(b, Sym):
        return int(a) == int(b)
    space = a.space if isinstance(a, Sym) else b.space
    ea = a.expr if isinstance(a, Sym) else sympy.Integer(int(a))
    eb = b.expr if isinstance(b, Sym) else sympy.Integer(int(b))
    if ea == eb or sympy.expand(ea - eb) == 0:
        return True
    symbols = sorted(ea.free_symbols | eb.free_symbols, key=str)
    values = space.points(symbols)
    try:
        va, vb = evaluate(ea, values), evaluate(eb, values)
    except DynamicSizeError:
        return False
    return bool(np.all(np.broadcast_to(va, np.broadcast(va, vb).shape) == vb))


def from_torch(value: Any, space: SymSpace) -> "int | Sym":
    """A torch.SymInt (or int) as an int or a Sym of `space`."""
    node = getattr(value, "node", None)
    if node is None:
        return int(value)
    expr = node.expr
    if space.fixed:
        expr = expr.xreplace({s: sympy.Integer(v) for s, v in space.fixed.items()})
    for s in expr.free_symbols:
        if s not in space.ranges:
            raise DynamicSizeError(f"the size {expr} uses a symbol ({s}) that is no dimension of the inputs")
    return Sym.make(expr, space)


def _finite(bound: Any) -> int | None:
    """A range bound as an int, None for an infinite one (sympy's oo or torch's int_oo)."""
    try:
        return int(bound) if bound.is_Integer else None
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None


def space_of_program(program: Any, names: dict[str, str] | None = None,
                     fixed: dict[str, int] | None = None) -> SymSpace:
    """The SymSpace of an ExportedProgram: its range constraints, each symbol named after the user's Dim where
    `names` (symbol name -> Dim name) says so; `fixed` (Dim or symbol name -> size) makes those static."""
    from torch.utils._sympy.symbol import SymT, symbol_is_type

    space = SymSpace()
    for node in program.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        for d in getattr(val, "shape", ()):
            sym_node = getattr(d, "node", None)
            if sym_node is not None and sym_node.expr.is_Symbol and sym_node.hint is not None:
                space.hints[sym_node.expr] = int(sym_node.hint)
    for symbol, vr in program.range_constraints.items():
        low = _finite(vr.lower)
        low = 0 if low is None else low
        high = _finite(vr.upper)
        high = high if high is not None and high < 2**31 else None
        name = (names or {}).get(str(symbol), str(symbol))
        space.add(symbol, name, low, high)
        if symbol_is_type(symbol, SymT.UNBACKED_INT):  # a size a value-sized op decides (nonzero's count)
            space.unbacked.add(symbol)
        for key in (name, str(symbol)):
            if fixed and key in fixed:
                space.fixed[symbol] = int(fixed[key])
    return space
