"""Helpers shared by the test packages."""

import contextlib
import logging
import os

import pytest
import torch

from litert_torch.flatbuffer.reader import read_model
from litert_torch.validation.compare import compare_outputs


class Fn(torch.nn.Module):
    """A function of the inputs as a module."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def gpu_device_or_skip():
    """The Vulkan device LiteRT's GPU accelerator will use (a GPU driver, or SwiftShader from Debian's chromium
    package); the test is skipped where there is none, and fails instead under LITERT_GPU_TESTS=require (CI)."""
    from litert_torch.runtime import gpu_device

    device = gpu_device.prepare()
    if device.kind == "none":
        message = f"no Vulkan device for LiteRT's GPU accelerator: {gpu_device.INSTALL_HINT}"
        if os.environ.get("LITERT_GPU_TESTS") == "require":
            pytest.fail(f"{message} (LITERT_GPU_TESTS=require)")
        pytest.skip(message)
    return device


def op_counts(edge) -> dict[str, int]:
    """Histogram of the builtin ops in an EdgeModel's main subgraph, read back from its bytes."""
    return read_model(edge.flatbuffer).subgraphs[0].op_counts()


def assert_matches(reference, edge_output, **tolerances):
    """Every output within the numerics contract (max|err| <= 1e-4 * max|ref| + 1e-5 by default)."""
    results = compare_outputs(reference, edge_output, **tolerances)
    failed = [r.describe() for r in results if not r.passed]
    assert not failed, "edge model departs from PyTorch:\n" + "\n".join(failed)


def runtime_partitions(content: bytes) -> int:
    """How many XNNPACK partitions (DELEGATE nodes) the installed LiteRT runtime makes of a .tflite."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=content, num_threads=1)
    interpreter.allocate_tensors()
    return sum(op["op_name"] == "DELEGATE" for op in interpreter._get_ops_details())


@contextlib.contextmanager
def litert_warnings():
    """The litert_torch logger's warnings while the block runs (pytest's log capture is off in this project)."""
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logger = logging.getLogger("litert_torch")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
