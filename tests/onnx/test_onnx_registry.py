"""The ONNX registry: one registration per op carries everything the driver knows of it, and a fact given twice
is refused."""

from __future__ import annotations

import re

import pytest

from litert_torch.lower.onnx import driver  # noqa: F401 (registers every ONNX op)
from litert_torch.lower.onnx import registry
from litert_torch.lower.onnx.registry import OPS, fold_only, onnx_op, set_fact


def _lower(ctx, node, inputs, attrs):
    return inputs[0]


def test_a_second_lowering_for_an_op_is_refused():
    with pytest.raises(RuntimeError, match=r"onnx::Relu already has its lower"):
        onnx_op("Relu")(_lower)


def test_a_second_shape_rule_or_fold_is_refused():
    with pytest.raises(RuntimeError, match=r"onnx::Conv already has its shape_rule"):
        set_fact("Conv", "shape_rule", lambda inputs, attrs, n: [], "a test")
    with pytest.raises(RuntimeError, match=r"onnx::Shape already has its fold_only"):
        fold_only("Shape")


def test_every_registration_is_whole():
    for name, op in OPS.items():
        assert op.lower is not None or op.fold_only or op.size_fold is not None, name
        assert op.runtime_parameters <= op.parameters, name
        assert op.runtime_shaped is None or op.lower is not None, name
        assert op.uint32 in (None, "bits", "ordered"), name
        assert not (op.fold_only and op.lower is not None), name


def test_facts_of_an_op_come_from_its_registration():
    assert OPS["Gather"].parameters == {1} and OPS["Gather"].runtime_parameters == {1}
    assert OPS["Max"].uint16_in_range and OPS["Max"].uint32 == "ordered"
    assert OPS["Add"].uint32 == "bits" and not OPS["Add"].uint16_in_range
    assert OPS["Identity"].same_shape and not OPS["Dropout"].same_shape
    assert OPS["Resize"].runtime_shaped is not None and OPS["Resize"].shape_rule is not None
    assert OPS["GatherElements"].constant_fold is not None
    assert registry.known("Shape") and not registry.known("NoSuchOp")
    assert "Upsample" in registry.lowered_ops() and "Shape" not in registry.lowered_ops()


def _schema_opsets(name: str) -> str:
    """The opsets in which a model the driver reads may hold op `name`, by the installed onnx's schemas: from
    MIN_OPSET (older models are upgraded to it) or the op's first version if later, to the newest opset; for an
    op deprecated before that, its last version before the deprecation."""
    import onnx

    from litert_torch.frontend.onnx_model import MIN_OPSET

    versions = sorted((s.since_version, s.deprecated) for s in onnx.defs.get_all_schemas_with_history()
                      if s.name == name and s.domain == "")
    assert versions, f"onnx has no op {name}"
    since, deprecated = versions[-1]
    if deprecated:
        live = [v for v, d in versions if not d][-1]
        last = since - 1
        span = f"opset {live}" if live == last else f"opsets {live}-{last}"
        return f"{span}, deprecated since opset {since}"
    first, newest = max(MIN_OPSET, versions[0][0]), onnx.defs.onnx_opset_version()
    return f"opsets {first}-{newest}" if first < newest else f"opset {newest}"


def test_every_lowering_starts_with_its_ops_and_their_opsets():
    """The first line of a lowering's docstring (or of the `doc` given with it) names each op it is registered
    for and the opsets of it that the lowering implements, as the installed onnx's schemas give them:
    "Relu (opsets 13-28).", "Cast (opsets 13-28); CastLike (opsets 15-28)."; docs/COVERAGE.md shows it."""
    group = registry.OPSETS_GROUP.pattern
    wrong = []
    for name, op in OPS.items():
        if op.lower is None:
            continue
        first = registry.docstring(op).split("\n", 1)[0]
        where = f"{name}: {op.lower.__qualname__}'s first line {first!r}"
        if not re.fullmatch(rf"{group}(?:; {group})*\.", first):
            wrong.append(f"{where} is not 'Op (opsets A-B).'")
            continue
        named = [n for m in registry.OPSETS_GROUP.finditer(first) for n in m.group(1).split(", ")]
        wrong += [f"{where} names {n}, which it does not lower" for n in named
                  if n not in OPS or OPS[n].lower is not op.lower]
        said, expected = registry.stated_opsets(op), _schema_opsets(name)
        if said != expected:
            wrong.append(f"{where} states {said!r}; the installed onnx gives {expected!r}")
    assert not wrong, "\n".join(wrong)


def test_every_lowering_names_its_return_type():
    for name, op in OPS.items():
        for fn in (op.lower, op.runtime_shaped.lower if op.runtime_shaped is not None else None):
            if fn is not None:
                assert "return" in fn.__annotations__, f"{name}: {fn.__qualname__} has no return type"
