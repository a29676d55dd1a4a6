"""Integer and bool operands that LiteRT's kernels lack, computed where they are exact or refused.

LiteRT's integer kernels are mostly quantized ones: given plain int8 or uint8 tensors (no quantization parameters)
ADD, SUB and the comparisons abort the process (SUB of int16 too), and MUL, SUM, MEAN and the RELUs write zeros
or saturate where PyTorch wraps. Many kernels take no bool, and some no integer at all (FLOOR, CEIL, ROUND, SQUARE, RELU, AVERAGE_POOL_2D, the
convolutions). `PLAIN_DTYPES` records, for each builtin, the plain integer and bool dtypes its CPU kernel runs
exactly (measured one op at a time against numpy; `tests/passes/test_integer_kernels.py` measures it again
against the installed runtime). An op whose data operands have another plain integer or bool dtype is rewritten:

- where integers make the op an identity or a clamp, it becomes one: FLOOR, CEIL and ROUND pass integers through;
  RELU, RELU6, RELU_N1_TO_1, RELU_0_TO_1 and (integer) SIGN become MAXIMUM / MINIMUM with constants; SQUARE
  becomes MUL;
- a logical op or REDUCE_ANY of integers reads them as `x != 0` (NOT_EQUAL), as PyTorch does;
- otherwise its data operands are widened to int32 (a CAST each) and its results of their dtype narrowed back:

      ADD(a: int8, b: int8) -> y: int8
      CAST(a) -> int32, CAST(b) -> int32, ADD -> int32, CAST -> y: int8

  int32 arithmetic narrowed by CAST (which wraps) gives the int8 result PyTorch's wrapping int8 arithmetic gives,
  and a bool result of a widened op is `!= 0` (bool ADD and MAXIMUM are a logical or, MUL and MINIMUM an and).
  A bool operand of a kernel that takes no int32 either (MAX_POOL_2D) is widened to uint8;
- an integer POW whose exponent may be negative computes b ** |e| (the kernel refuses a negative exponent when
  the model runs) and gives 0 where e < 0 and |b| > 1, as PyTorch does (1 and -1 keep their powers, 0 gives 0).

Lowerings that chain several integer ops (narrow-integer arithmetic, fmod, integer matrix products) compute in
int32 themselves, with one CAST at each end; this pass covers whatever else reaches a kernel.

An op left with operands no kernel takes exactly (an integer convolution or AVERAGE_POOL_2D) is a
LoweringError naming the op and its PyTorch source line, before anything is written.
"""

from __future__ import annotations

import numpy as np

from litert_torch import ir
from litert_torch.errors import LoweringError

I8, U8, I16, I32, I64, BOOL = (np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.int32, np.int64, np.bool_))
_ALL = frozenset({I8, U8, I16, I32, I64, BOOL})
_INTS = frozenset({I8, U8, I16, I32, I64})
_NARROW = frozenset({I8, U8, I16})


def _without(*dtypes) -> frozenset:
    return _ALL - {np.dtype(d) for d in dtypes}


def _only(*dtypes) -> frozenset:
    return frozenset(np.dtype(d) for d in dtypes)


# builtin -> the plain (unquantized) integer and bool dtypes of its data operands its kernel runs exactly
PLAIN_DTYPES: dict[str, frozenset] = {
    **{op: _ALL for op in (
        "SELECT_V2", "GATHER", "GATHER_ND", "TRANSPOSE", "CONCATENATION", "PAD", "PADV2", "MIRROR_PAD", "TILE",
        "REVERSE_V2", "BROADCAST_TO", "STRIDED_SLICE", "SLICE", "RESHAPE", "SQUEEZE", "EXPAND_DIMS",
        "DYNAMIC_UPDATE_SLICE", "FILL", "EMBEDDING_LOOKUP", "SHAPE", "CAST", "BITCAST")},
    **{op: _without(BOOL) for op in ("SPLIT", "SPLIT_V", "PACK", "MAXIMUM", "MINIMUM", "REDUCE_MAX", "REDUCE_MIN",
                                     "REDUCE_PROD", "TOPK_V2")},
    "UNPACK": _without(I64),
    "SPACE_TO_DEPTH": _without(I16, BOOL), "DEPTH_TO_SPACE": _without(I16, BOOL), "SCATTER_ND": _without(I16),
    "WHERE": _without(I16), "ARG_MAX": _without(I16, I64), "ARG_MIN": _without(I16, I64),
    "MAX_POOL_2D": _only(I8, U8, I16), "RESIZE_NEAREST_NEIGHBOR": _without(I64),
    "EQUAL": _only(I32, I64, BOOL), "NOT_EQUAL": _only(I32, I64, BOOL),
    **{op: _only(I32, I64) for op in ("LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "ADD", "SUB", "MUL", "SUM",
                                      "CUMSUM", "RANGE", "BROADCAST_ARGS")},
    "NEG": _only(I32, I64), "ABS": _only(I32), "SIGN": _only(I32), "FLOOR_MOD": _only(I32, I64),
    "FLOOR_DIV": _only(I32), "BITWISE_XOR": _only(I32), "RIGHT_SHIFT": _only(I32), "POW": _only(I32),
    "DIV": _only(I32), "SQUARED_DIFFERENCE": _only(I32), "UNSORTED_SEGMENT_SUM": _only(I32),
    "UNSORTED_SEGMENT_MAX": _only(I32), "UNSORTED_SEGMENT_MIN": _only(I32), "UNSORTED_SEGMENT_PROD": _only(I32),
    "SEGMENT_SUM": _only(I32), "MEAN": _only(I32, I64),
    **{op: _only(BOOL) for op in ("LOGICAL_AND", "LOGICAL_OR", "LOGICAL_NOT", "REDUCE_ANY", "REDUCE_ALL")},
    "ZEROS_LIKE": _only(I32, I64),
    # builtins that take no plain integer or bool operand at all
    **{op: frozenset() for op in (
        "FLOOR", "CEIL", "ROUND", "SQUARE", "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "AVERAGE_POOL_2D",
        "CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "FULLY_CONNECTED", "BATCH_MATMUL", "SOFTMAX", "LOG_SOFTMAX",
        "RESIZE_BILINEAR", "L2_NORMALIZATION", "LOGISTIC", "TANH", "EXP", "LOG", "SQRT", "RSQRT", "SIN", "COS", "ATAN2",
        "GELU", "ELU", "LEAKY_RELU", "PRELU", "HARD_SWISH")},
}

# which inputs of an op carry its data (the others are indices, shapes, axes or conditions); default: all
DATA_INPUTS: dict[str, tuple[int, ...]] = {
    "SELECT_V2": (1, 2), "GATHER": (0,), "GATHER_ND": (0,), "TRANSPOSE": (0,), "PAD": (0,), "PADV2": (0, 2),
    "MIRROR_PAD": (0,), "TILE": (0,), "REVERSE_V2": (0,), "BROADCAST_TO": (0,), "STRIDED_SLICE": (0,),
    "SLICE": (0,), "RESHAPE": (0,), "EXPAND_DIMS": (0,), "DYNAMIC_UPDATE_SLICE": (0, 1), "FILL": (1,),
    "EMBEDDING_LOOKUP": (1,), "SPLIT": (1,), "SPLIT_V": (0,), "REDUCE_MAX": (0,), "REDUCE_MIN": (0,),
    "REDUCE_PROD": (0,), "REDUCE_ANY": (0,), "REDUCE_ALL": (0,), "SUM": (0,), "MEAN": (0,), "CUMSUM": (0,),
    "TOPK_V2": (0,), "ARG_MAX": (0,), "ARG_MIN": (0,), "SCATTER_ND": (1,), "UNSORTED_SEGMENT_SUM": (0,),
    "UNSORTED_SEGMENT_MAX": (0,), "UNSORTED_SEGMENT_MIN": (0,), "UNSORTED_SEGMENT_PROD": (0,),
    "SEGMENT_SUM": (0,), "RESIZE_NEAREST_NEIGHBOR": (0,), "RESIZE_BILINEAR": (0,), "CONV_2D": (0, 1),
    "DEPTHWISE_CONV_2D": (0, 1), "TRANSPOSE_CONV": (2, 1), "FULLY_CONNECTED": (0, 1),
}
_LOGICAL = ("LOGICAL_AND", "LOGICAL_OR", "LOGICAL_NOT", "REDUCE_ANY", "REDUCE_ALL")
# ops whose result is bool whatever their operands' dtype
_BOOL_RESULT = frozenset({"EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL"})
_CLAMPS: dict[str, tuple[int, int | None]] = {
    "RELU": (0, None), "RELU6": (0, 6), "RELU_N1_TO_1": (-1, 1), "RELU_0_TO_1": (0, 1), "SIGN": (-1, 1)}


def run(graph: ir.Graph) -> bool:
    changed = False
    for g in ir.all_graphs(ir.Model([graph], [])):  # the graph and the subgraphs its control-flow ops run
        changed |= _rewrite(g)
    return changed


def _plain(t: ir.Tensor | None) -> bool:
    return t is not None and t.dtype in _ALL and t.quantization is None


def _data(op: ir.Op) -> list[int]:
    positions = DATA_INPUTS.get(op.opcode, range(len(op.inputs)))
    return [k for k in positions if k < len(op.inputs) and _plain(op.inputs[k])]


def _needs_work(op: ir.Op) -> bool:
    allowed = PLAIN_DTYPES.get(op.opcode)
    if allowed is None:
        return False
    if op.opcode == "POW" and _negative_exponent(op):
        return True
    return any(op.input(k).dtype not in allowed for k in _data(op))


def _negative_exponent(op: ir.Op) -> bool:
    """An integer POW whose exponent may be negative."""
    base, exp = op.tensor_inputs()
    if not (_plain(base) and _plain(exp)) or base.dtype == BOOL:
        return False
    return not exp.is_constant or bool((np.asarray(exp.data) < 0).any())


class _Builder:
    """Ops put before (`ops`) and after (`after`) the op being rewritten, with its source."""

    def __init__(self, op: ir.Op, ops: list[ir.Op]):
        self.source, self.ops, self.n = op.source, ops, 0
        self.after: list[ir.Op] = []

    def tensor(self, like: ir.Tensor, dtype, role: str) -> ir.Tensor:
        self.n += 1
        return ir.Tensor(f"{like.name}/{role}{self.n}", like.shape, dtype, shape_signature=like._signature)

    def emit(self, opcode: str, inputs: list, like: ir.Tensor, dtype, role: str, **options) -> ir.Tensor:
        out = self.tensor(like, dtype, role)
        self.ops.append(ir.Op(opcode, inputs, [out], options, self.source))
        return out

    def cast(self, t: ir.Tensor, dtype) -> ir.Tensor:
        dtype = np.dtype(dtype)
        if t.dtype == dtype:
            return t
        if t.is_constant:
            return ir.Tensor(f"{t.name}/{dtype.name}", t.shape, dtype, np.asarray(t.data).astype(dtype))
        return self.emit("CAST", [t], t, dtype, dtype.name)

    @staticmethod
    def scalar(value, dtype) -> ir.Tensor:
        return ir.Tensor(f"const_{np.dtype(dtype).name}_{value}", (), dtype, np.array(value, dtype))


def _rewrite(graph: ir.Graph) -> bool:
    if not any(_needs_work(op) for op in graph.ops):
        return False
    ops: list[ir.Op] = []
    for op in graph.ops:
        if not _needs_work(op):
            ops.append(op)
            continue
        build = _Builder(op, ops)
        if not _special(op, build):
            _widen(op, build)
        ops.append(op)
        ops.extend(build.after)
    graph.ops = ops
    return True


def _special(op: ir.Op, build: _Builder) -> bool:
    """The rewrites that make an op something else; True when `op` was rewritten in place."""
    x = op.input(0)
    dtype = x.dtype
    if op.opcode in ("FLOOR", "CEIL", "ROUND") or (op.opcode in _CLAMPS and dtype == BOOL):
        op.opcode, op.inputs, op.options = "CAST", [x], {}  # the same dtype in and out: removed by cleanup
        return True
    if op.opcode in _CLAMPS:  # MAXIMUM and MINIMUM take every plain integer dtype
        bound, high = _CLAMPS[op.opcode]
        low = None if np.iinfo(dtype).min >= bound else bound  # an unsigned x is already at least `bound`
        if low is None and high is None:
            op.opcode, op.inputs = "CAST", [x]
        elif high is None:
            op.opcode, op.inputs = "MAXIMUM", [x, build.scalar(low, dtype)]
        else:
            y = x if low is None else build.emit("MAXIMUM", [x, build.scalar(low, dtype)], x, dtype, "at_least")
            op.opcode, op.inputs = "MINIMUM", [y, build.scalar(high, dtype)]
        op.options = {}
        return True
    if op.opcode == "SQUARE":
        op.opcode, op.inputs, op.options = "MUL", [x, x], {"fused_activation_function": "NONE"}
        _widen(op, build)
        return True
    if op.opcode in _LOGICAL:
        for k in _data(op):
            t = op.input(k)
            if t.dtype != BOOL:
                op.inputs[k] = build.emit("NOT_EQUAL", [build.cast(t, I32), build.scalar(0, I32)], t, BOOL, "nonzero")
        return True
    if op.opcode == "POW" and dtype in _INTS:
        _integer_pow(op, build)
        return True
    return False


def _widen(op: ir.Op, build: _Builder) -> None:
    """The op computed in int32 (uint8 for a bool operand of a kernel without int32), its results of the operands'
    dtype cast back; refused when no such kernel exists."""
    allowed = PLAIN_DTYPES[op.opcode]
    positions = _data(op)
    dtypes = {op.input(k).dtype for k in positions}
    work = next((d for d in (I32, U8) if d in allowed and (d == I32 or dtypes == {BOOL})), None)
    if work is None or not dtypes <= _NARROW | {BOOL, work}:
        src = op.source
        names = ", ".join(sorted(d.name for d in dtypes))
        raise LoweringError(f"{op.opcode} of plain {names} values has no LiteRT kernel"
                            + (" that computes it exactly" if allowed else "") +
                            "; compute it in float32 in the model (x.float()) or in another integer type",
                            target=src.target if src else None, location=src.location if src else None)
    for k in positions:
        op.inputs[k] = build.cast(op.input(k), work)
    if op.opcode in _BOOL_RESULT:
        return
    for i, t in enumerate(op.outputs):
        if t.dtype in dtypes and t.quantization is None:
            wide = build.tensor(t, work, work.name)
            op.outputs[i] = wide
            build.after.append(ir.Op("CAST", [wide], [t], {}, op.source))


def _integer_pow(op: ir.Op, build: _Builder) -> None:
    """b ** e for integers: |e| as the exponent (no negative exponent reaches the kernel), then 0 where e < 0 and
    |b| > 1 (1 and -1 are their own inverses; PyTorch gives 0 for the rest)."""
    base, exp = op.tensor_inputs()
    out = op.outputs[0]
    if not _negative_exponent(op):
        _widen(op, build)
        return
    b, e = build.cast(base, I32), build.cast(exp, I32)
    magnitude = build.emit("ABS", [e], e, I32, "abs")
    power = build.emit("POW", [b, magnitude], out, I32, "power")
    negative = build.emit("LESS", [e, build.scalar(0, I32)], e, BOOL, "negative")
    large = build.emit("GREATER", [build.emit("ABS", [b], b, I32, "abs"), build.scalar(1, I32)], b, BOOL, "large")
    vanishes = build.emit("LOGICAL_AND", [negative, large], out, BOOL, "vanishes")
    result = build.emit("SELECT_V2", [vanishes, build.scalar(0, I32), power], out, I32, "pow")
    op.opcode, op.inputs, op.options = "CAST", [result], {}  # to the output's dtype; removed by cleanup if int32
