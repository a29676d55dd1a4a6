"""Several signatures in one model: each runs like its module, shared weights are stored once, and each keeps
its own metadata."""

import pytest
import torch
from torch import nn

import litert_torch
from litert_torch import EdgeModel
from tests.helpers import assert_matches


class AutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(32, 256)  # used by both entry points
        self.enc = nn.Linear(256, 8)
        self.dec = nn.Linear(8, 256)


class Encode(nn.Module):
    def __init__(self, ae):
        super().__init__()
        self.ae = ae

    def forward(self, x):
        return self.ae.enc(torch.relu(self.ae.embed(x)))


class Decode(nn.Module):
    def __init__(self, ae):
        super().__init__()
        self.ae = ae

    def forward(self, z, x):
        return self.ae.dec(z) + self.ae.embed(x)


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    ae = AutoEncoder().eval()
    enc, dec = Encode(ae).eval(), Decode(ae).eval()
    x, z = torch.randn(2, 32), torch.randn(2, 8)
    edge = litert_torch.signature("encode", enc, (x,)).signature("decode", dec, (z, x)).convert()
    return enc, dec, x, z, edge


def test_each_signature_runs_like_its_module(pair, tmp_path):
    enc, dec, x, z, edge = pair
    assert list(edge.signatures) == ["encode", "decode"] or set(edge.signatures) == {"encode", "decode"}
    assert_matches(enc(x), edge.run("encode", (x,)))
    assert_matches(dec(z, x), edge.signature_runner("decode")(z, x))
    path = tmp_path / "ae.tflite"
    edge.export(path)
    loaded = EdgeModel.load(path)
    assert [t.name for t in loaded.signatures["decode"].inputs] == ["args_0", "args_1"]
    assert_matches(dec(z, x), loaded(z=z, x=x, signature_name="decode"))  # forward's names work too
    with pytest.raises(KeyError, match="no default signature"):
        loaded(x)  # two signatures, neither the default: the official API refuses too
    x2, z2 = torch.randn(2, 32), torch.randn(2, 8)
    assert_matches(dec(z2, x2), loaded.run("decode", (z2, x2)))
    with pytest.raises(KeyError, match="no signature 'predict'"):
        loaded.signature_runner("predict")


def test_shared_weights_are_stored_once(pair):
    enc, dec, x, z, edge = pair
    alone = [litert_torch.convert(enc, (x,)), litert_torch.convert(dec, (z, x))]
    shared_bytes = 32 * 256 * 4  # the embed weight, used by both
    assert len(edge.flatbuffer) < sum(len(e.flatbuffer) for e in alone) - 0.9 * shared_bytes


def test_each_signature_has_its_plan_and_source_map(pair):
    *_, edge = pair
    plans = edge.delegate_plans
    assert set(plans) == {"encode", "decode"}
    assert all(p.targets["cpu"].fully_delegated for p in plans.values())
    assert edge.delegate_plan.targets["cpu"].ops in {p.targets["cpu"].ops for p in plans.values()}


def test_bad_signature_sets_are_refused():
    with pytest.raises(ValueError, match="given twice"):
        litert_torch.signature("a", nn.ReLU(), (torch.randn(2),)).signature("a", nn.ReLU(), (torch.randn(2),))
    with pytest.raises(ValueError, match="identifier"):
        litert_torch.signature("not a name", nn.ReLU(), (torch.randn(2),))
    with pytest.raises(ValueError, match="no signatures"):
        litert_torch.SignatureSet().convert()


def test_to_ir_is_the_model_convert_writes(pair, tmp_path):
    """`Converter.to_ir` gives the IR that `convert` serializes (the caller writes it, streaming its constants);
    written with the writer it runs like the modules. Options that act on the written model are refused."""
    from litert_torch import ir
    from litert_torch.errors import InvalidArgumentError
    from litert_torch.flatbuffer.writer import write_model

    enc, dec, x, z, _ = pair
    converter = litert_torch.signature("encode", enc, (x,)).signature("decode", dec, (z, x))
    model = converter.to_ir()
    assert isinstance(model, ir.Model) and [s.key for s in model.signatures] == ["encode", "decode"]
    path = str(tmp_path / "streamed.tflite")
    write_model(model, path)
    loaded = EdgeModel.load(path)
    assert_matches(enc(x), loaded.run("encode", (x,)))
    assert_matches(dec(z, x), loaded.run("decode", (z, x)))
    with pytest.raises(InvalidArgumentError, match="to_ir"):
        converter.to_ir(quantize="dynamic-int8")
