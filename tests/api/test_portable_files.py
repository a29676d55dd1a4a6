"""A converted file does not depend on the folder its model's source was in: source locations are written as the
module they name ('pkg/net.py:LINE'), so two checkouts in different folders write the same bytes."""

import importlib.util
import sys

import torch

import litert_torch
from litert_torch import metadata
from litert_torch.delegates.plan import PLAN_KEY
from litert_torch.flatbuffer.reader import read_model

NET = '''import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(5, 5)

    def forward(self, x):
        z = self.fc(x)
        return torch.sigmoid(z.reshape(1, 5, 1, 1, 1)).reshape(1, 5) + z  # a rank-5 stretch the GPU leaves
'''


def _convert_from(folder, name):
    package = folder / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "net.py").write_text(NET)
    spec = importlib.util.spec_from_file_location(name, package / "net.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        torch.manual_seed(0)
        return litert_torch.convert(module.Net().eval(), (torch.randn(1, 5),)).model_content()
    finally:
        del sys.modules[name]


def test_two_checkouts_in_different_folders_write_the_same_bytes(tmp_path):
    first = _convert_from(tmp_path / "one", "portable_net_one")
    second = _convert_from(tmp_path / "elsewhere" / "two", "portable_net_two")
    assert first == second
    model = read_model(first)
    locations = {op["location"] for op in metadata.decode_source_map(metadata.decode(model.metadata[
        metadata.SOURCE_MAP_KEY]))[0] if op}
    assert locations == {"pkg/net.py:10 in forward", "pkg/net.py:11 in forward"}, locations
    plan = metadata.decode(model.metadata[PLAN_KEY])
    assert "pkg/net.py:11" in str(plan) and str(tmp_path) not in str(plan)
