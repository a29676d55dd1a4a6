"""The decomposition step: torch's registry walk is shortened only while one decomposition runs."""

import pytest
import torch
from torch import nn

import litert_torch
from litert_torch.frontend import export


def test_registry_walk_is_restored_after_each_decomposition():
    utils = torch._export.utils
    walk = utils._materialize_cpp_cia_ops
    calls = []

    def counting():
        calls.append(1)
        walk()

    utils._materialize_cpp_cia_ops = counting
    try:
        program = torch.export.export(nn.Sequential(nn.Linear(4, 3), nn.GELU()), (torch.randn(2, 4),), strict=False)
        export.decompose(program)
        assert len(calls) == 1  # torch asks once per op namespace; the registry is walked once
        assert utils._materialize_cpp_cia_ops is counting
        export.decompose(program)
        assert len(calls) == 2  # walked afresh by the next decomposition
    finally:
        utils._materialize_cpp_cia_ops = walk


def test_registry_walk_is_restored_when_decomposition_fails(monkeypatch):
    walk = torch._export.utils._materialize_cpp_cia_ops

    def broken(self, table):
        raise RuntimeError("decomposition failed")

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", broken)
    with pytest.raises(litert_torch.ExportError, match="decomposition failed"):
        litert_torch.convert(nn.Linear(4, 3), (torch.randn(2, 4),))
    assert torch._export.utils._materialize_cpp_cia_ops is walk
