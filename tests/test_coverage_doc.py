"""docs/COVERAGE.md is generated from the registry and must be current; every lowering documents itself."""

from litert_torch import coverage
from litert_torch.lower import registered


def test_coverage_doc_is_current():
    assert coverage.main(["--check"]) == 0, "run: python -m litert_torch.coverage"


def test_every_lowering_has_a_docstring_naming_what_it_emits():
    for target, lowering in registered().items():
        assert (lowering.fn.__doc__ or "").strip(), f"{target}: lowering {lowering.fn.__name__} has no docstring"


def test_coverage_lists_the_tflite_ops_of_a_lowering():
    text = coverage.render()
    conv_row = next(line for line in text.splitlines() if line.startswith("| `aten.convolution.default`"))
    assert "CONV_2D" in conv_row and "DEPTHWISE_CONV_2D" in conv_row and "TRANSPOSE_CONV" in conv_row
    relu_row = next(line for line in text.splitlines() if line.startswith("| `aten.relu.default`"))
    assert "| RELU |" in relu_row


def test_every_lowering_is_reachable():
    """An overload the decompositions always remove would be dead code listed as coverage."""
    assert coverage.unreachable() == []


def test_the_readme_counts_the_onnx_ops_the_registry_holds():
    import os
    import re

    from litert_torch.lower.onnx import driver  # noqa: F401 (registers every ONNX op)
    from litert_torch.lower.onnx.registry import lowered_ops

    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")) as f:
        said = re.search(r"ATen lowerings \((\d+) ops, listed", f.read())
    assert said is not None and int(said.group(1)) == len(lowered_ops())


def _signature(schema):
    """(namespace-qualified name, overload, argument names) of a parsed schema; aten is the default namespace."""
    name = schema.name if "::" in schema.name else f"aten::{schema.name}"
    return name, schema.overload_name, [a.name for a in schema.arguments]


def test_every_lowering_docstring_starts_with_the_schema_it_lowers():
    """The first line of a lowering's docstring is the ATen schema of one of the overloads it is registered for
    (`Lowering.schema`, shown in docs/COVERAGE.md): "relu(Tensor self) -> Tensor"."""
    import torch

    wrong = []
    for target, lowering in registered().items():
        try:
            said = _signature(torch._C.parse_schema(lowering.schema or ""))
        except RuntimeError as exc:
            wrong.append(f"{target}: {lowering.fn.__qualname__}'s first line {lowering.schema!r} is no schema ({exc})")
            continue
        overloads = [t for t, other in registered().items() if other.fn is lowering.fn]
        if said not in [_signature(t._schema) for t in overloads]:
            wrong.append(f"{target}: {lowering.fn.__qualname__}'s first line {lowering.schema!r} names none of "
                         f"{[str(t) for t in overloads]}")
    assert not wrong, "\n".join(wrong)
