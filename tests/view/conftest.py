"""Fixtures for the graph-view tests: the converted test model, its validation, and Model Explorer (skipped
where it is not installed, failed under LITERT_SAMPLE_TESTS=require as the sample-app tests are)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.samples.conftest import need


@pytest.fixture(scope="session")
def model_explorer():
    need(importlib.util.find_spec("model_explorer") is not None,
         "Model Explorer (pip install -e '.[view]')")


@pytest.fixture(scope="session")
def converted():
    """(module, sample_args, EdgeModel) of tests/view/models.py."""
    import litert_torch
    from tests.view.models import build

    module, args = build()
    return module, args, litert_torch.convert(module, args)


@pytest.fixture(scope="session")
def report(converted):
    """Its validation with per-layer errors (LiteRT backends only: the layers come from the reference kernels)."""
    import litert_torch

    module, args, edge = converted
    return litert_torch.validate(module, args, edge, per_layer=True, backends=("xnnpack", "reference"))
