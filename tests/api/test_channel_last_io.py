"""convert(..., channel_last_io=True): NHWC image inputs and outputs, and no TRANSPOSE left in conv nets."""

import torch
from torch import nn

import litert_torch
from tests.helpers import assert_matches, op_counts
from tests.models.zoo import MODELS, build


def test_resnet18_channel_last_has_no_transpose():
    case = next(c for c in MODELS if c.name == "resnet18")
    model = build(case)
    (x,) = case.inputs(1)
    edge = litert_torch.convert(model, (x,), channel_last_io=True)
    assert op_counts(edge).get("TRANSPOSE", 0) == 0
    assert edge.signatures["serving_default"].inputs[0].shape == (1, 224, 224, 3)
    with torch.no_grad():
        assert_matches(model(x), edge(x.permute(0, 2, 3, 1).contiguous()))


class Segmenter(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 1))

    def forward(self, image, scale):
        return self.body(image) * scale, scale.sum()


def test_image_outputs_are_nhwc_and_other_tensors_unchanged():
    model = Segmenter().eval()
    image, scale = torch.randn(2, 3, 16, 16), torch.randn(1)
    edge = litert_torch.convert(model, (image, scale), channel_last_io=True)
    assert op_counts(edge).get("TRANSPOSE", 0) == 0
    out, total = edge(image.permute(0, 2, 3, 1).contiguous(), scale)
    ref_out, ref_total = model(image, scale)
    assert tuple(out.shape) == (2, 16, 16, 4)
    assert_matches((ref_out.permute(0, 2, 3, 1), ref_total), (out, total))
