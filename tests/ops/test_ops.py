"""Op-by-op numerics: every row of the op table converted, run in LiteRT and compared with eager PyTorch."""

import pytest
import torch

import litert_torch
from tests.helpers import assert_matches, op_counts
from tests.ops.cases import CASES
from tests.ops.cases_coverage import COVERAGE_CASES

CASES = CASES + COVERAGE_CASES


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op(case):
    module = case.module().eval()
    inputs = case.inputs()
    if case.raises is not None:
        with pytest.raises(case.raises, match=case.match):
            litert_torch.convert(module, inputs)
        return
    edge = litert_torch.convert(module, inputs, **({"target": case.target} if case.target else {}))
    with torch.no_grad():
        expected = module(*inputs)
    assert_matches(expected, edge(*inputs), rtol=case.rtol, atol=case.atol)
    counts = op_counts(edge)
    for opcode, count in case.ops.items():
        assert counts.get(opcode, 0) == count, f"{opcode}: expected {count}, found {counts.get(opcode, 0)} in {counts}"


def test_expected_failures_name_their_reason():
    """A row that expects a refusal says what the message must contain: any error would pass otherwise."""
    vague = [c.id for c in CASES if c.raises is not None and not c.match]
    assert not vague, f"rows expecting an error without `match`: {vague}"
