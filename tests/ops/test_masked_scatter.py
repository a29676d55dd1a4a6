"""Writes at the positions a boolean mask selects, filled in order from a source: `masked_scatter` (each
element, or whole rows when the mask is per row, as vision-language models put image features in place of their
image tokens) and `x[mask] = values` with one row of values per selected row. The positions are decided by the
mask's values when the model runs, so one conversion must be right for every mask. Also torch.put, at flat
indices given when the model runs."""

import numpy as np
import pytest
import torch

import litert_torch
from litert_torch.errors import LiteRTTorchError
from tests.helpers import litert_warnings, op_counts


class MaskedScatter(torch.nn.Module):
    def forward(self, x, mask, source):
        return x.masked_scatter(mask, source)


class ImageTokens(torch.nn.Module):
    """Token embeddings with the rows of image tokens (id 7) replaced by image features, in order."""

    def __init__(self, expand: bool):
        super().__init__()
        self.expand = expand

    def forward(self, embeds, ids, features):
        mask = (ids == 7).unsqueeze(-1)
        if self.expand:
            mask = mask.expand_as(embeds)
        return embeds.masked_scatter(mask, features)


class PutRows(torch.nn.Module):
    def forward(self, x, mask, values):
        x = x.clone()
        x[mask] = values
        return x


def _run(edge, model, *args):
    with torch.no_grad():
        want = model(*args).numpy()
    np.testing.assert_array_equal(np.asarray(edge(*args)), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_masked_scatter_of_elements_for_every_mask(dtype):
    torch.manual_seed(0)
    x = torch.randn(3, 4).mul(10).to(dtype)
    source = torch.randn(15).mul(10).to(dtype)
    model = MaskedScatter()
    edge = litert_torch.convert(model, (x, torch.rand(3, 4) > 0.5, source))
    for mask in [torch.rand(3, 4) > 0.5 for _ in range(4)] + [torch.zeros(3, 4, dtype=torch.bool),
                                                              torch.ones(3, 4, dtype=torch.bool)]:
        _run(edge, model, x, mask, source)


def test_masked_scatter_broadcasts_the_mask():
    torch.manual_seed(0)
    x, source = torch.randn(3, 4), torch.randn(12)
    model = MaskedScatter()
    edge = litert_torch.convert(model, (x, torch.tensor([True, False, True, True]), source))
    for _ in range(3):
        _run(edge, model, x, torch.rand(4) > 0.5, source)


@pytest.mark.parametrize("expand", [True, False], ids=["expanded", "broadcast"])
def test_image_features_replace_image_tokens_row_by_row(expand):
    torch.manual_seed(0)
    embeds, features = torch.randn(2, 6, 8), torch.randn(5, 8)
    model = ImageTokens(expand)
    edge = litert_torch.convert(model, (embeds, torch.tensor([[1, 7, 7, 2, 3, 4], [7, 1, 2, 7, 7, 5]]), features))
    # whole rows are counted and gathered: one running count per token, not per element
    assert op_counts(edge).get("CUMSUM") == 1
    for ids in ([[1, 7, 7, 2, 3, 4], [7, 1, 2, 7, 7, 5]], [[7, 7, 7, 7, 7, 1], [1, 1, 1, 1, 1, 1]],
                [[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]]):
        _run(edge, model, embeds, torch.tensor(ids), features)


def test_masked_scatter_at_a_run_time_sequence_length():
    torch.manual_seed(0)
    model = ImageTokens(expand=True)
    seq = torch.export.Dim("seq", max=64)
    edge = litert_torch.convert(model, (torch.randn(1, 6, 8), torch.tensor([[1, 7, 7, 2, 3, 4]]), torch.randn(3, 8)),
                                dynamic_shapes=({1: seq}, {1: seq}, None))
    for n in (3, 9, 40):
        ids = torch.randint(0, 5, (1, n))
        ids[0, 1:4] = 7
        _run(edge, model, torch.randn(1, n, 8), ids, torch.randn(3, 8))


def test_more_selected_positions_than_source_elements_fail_the_call():
    x, source = torch.randn(2, 3), torch.randn(4)
    model = MaskedScatter()
    edge = litert_torch.convert(model, (x, torch.rand(2, 3) > 0.5, source))
    full = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(RuntimeError):
        model(x, full, source)
    with pytest.raises(LiteRTTorchError, match="out of bounds"):
        edge(x, full, source)


def test_put_one_row_of_values_per_selected_row():
    torch.manual_seed(0)
    x, values = torch.randn(5, 3), torch.randn(3, 3)
    model = PutRows()
    edge = litert_torch.convert(model, (x, torch.tensor([True, False, True, True, False]), values))
    for mask in ([True, False, True, True, False], [False, False, True, True, True], [True, True, True, False, False]):
        _run(edge, model, x, torch.tensor(mask), values)
    # PyTorch refuses a count of selected rows other than the values' rows; so does the converted model
    fewer = torch.tensor([True, False, False, False, False])
    with pytest.raises(RuntimeError):
        model(x, fewer, values)
    with pytest.raises(LiteRTTorchError, match="out of bounds"):
        edge(x, fewer, values)


def test_a_masked_read_modify_write_converts():
    """x[mask] += values reads the selected rows (a count decided by the mask) and writes them back."""
    class AddRows(torch.nn.Module):
        def forward(self, x, mask, values):
            x = x.clone()
            x[mask] += values
            return x

    torch.manual_seed(0)
    x, values = torch.randn(5, 3), torch.randn(3, 3)
    model = AddRows()
    edge = litert_torch.convert(model, (x, torch.tensor([True, False, True, True, False]), values))
    for mask in ([True, False, True, True, False], [False, True, True, False, True]):
        _run(edge, model, x, torch.tensor(mask), values)
    # a count other than the values' rows: PyTorch raises, and so does the converted model
    with pytest.raises(LiteRTTorchError):
        edge(x, torch.tensor([True, True, True, True, False]), values)


def test_a_check_on_tensor_values_is_dropped_with_a_warning():
    class Checked(torch.nn.Module):
        def forward(self, ids, embeds, features):
            mask = (ids == 7).unsqueeze(-1)
            torch._check_tensor_all(mask.sum() * embeds.shape[-1] == features.numel())
            return embeds.masked_scatter(mask, features)

    ids, embeds, features = torch.tensor([[1, 7, 7, 3]]), torch.randn(1, 4, 8), torch.randn(2, 8)
    with litert_warnings() as records:
        edge = litert_torch.convert(Checked(), (ids, embeds, features))
    assert len([r for r in records if "torch._check" in r.getMessage()
                and "test_masked_scatter.py" in r.getMessage()]) == 1
    _run(edge, Checked(), ids, embeds, features)


def test_llava_puts_its_image_features_in_place():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    vision = transformers.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                           num_attention_heads=2, image_size=32, patch_size=8)
    text = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                    num_key_value_heads=1, vocab_size=120)
    config = transformers.LlavaConfig(vision_config=vision, text_config=text, image_token_index=100,
                                      vision_feature_layer=-1)
    llava = transformers.LlavaForConditionalGeneration(config).eval()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.llava = llava

        def forward(self, ids, pixels):
            return self.llava(input_ids=ids, pixel_values=pixels, use_cache=False).logits

    image_tokens = (32 // 8) ** 2
    ids = torch.tensor([[1, 5] + [100] * image_tokens + [7, 8, 9]])
    pixels = torch.randn(1, 3, 32, 32)
    edge = litert_torch.convert(Logits().eval(), (ids, pixels))
    for prompt in (ids, torch.tensor([[100] * image_tokens + [4, 5, 6, 7, 8]])):
        pixels = torch.randn(1, 3, 32, 32)
        with torch.no_grad():
            want = Logits()(prompt, pixels).numpy()
        np.testing.assert_allclose(np.asarray(edge(prompt, pixels)), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("accumulate", [False, True])
def test_put_at_flat_indices(accumulate):
    class Put(torch.nn.Module):
        def forward(self, x, index, source):
            return torch.put(x, index, source, accumulate=accumulate)

    torch.manual_seed(0)
    x, source = torch.randn(3, 4), torch.randn(2, 2)
    edge = litert_torch.convert(Put(), (x, torch.tensor([[1, -2], [3, 4]]), source))
    # repeated indices only where the values add: a repeated overwrite is left undefined by PyTorch
    for index in ([[1, -2], [3, 4]], [[0, 11], [-11, 5]]) + (([[3, 3], [3, -1]],) if accumulate else ()):
        with torch.no_grad():
            want = Put()(x, torch.tensor(index), source).numpy()
        np.testing.assert_allclose(np.asarray(edge(x, torch.tensor(index), source)), want, rtol=1e-6)


def test_a_source_of_run_time_length_too_short_fails_the_call():
    """A source whose length is known only when the model runs carries a row of padding (so that a source of
    no elements has one to read); a selected position past the source still fails the call."""
    model = MaskedScatter()
    x = torch.randn(4, 3)
    edge = litert_torch.convert(model, (x, torch.rand(4, 3) > 0.5, torch.randn(5)),
                                dynamic_shapes=(None, None, {0: torch.export.Dim("k", max=20)}))
    mask = torch.zeros(4, 3, dtype=torch.bool)
    mask[0] = True
    mask[1, 0] = True
    _run(edge, model, x, mask, torch.randn(4))
    _run(edge, model, x, torch.zeros(4, 3, dtype=torch.bool), torch.randn(4))
    with pytest.raises(LiteRTTorchError, match="out of bounds"):
        edge(x, mask, torch.randn(3))


def test_no_rows_of_values_for_selected_rows_fails_the_call():
    x, values = torch.randn(4, 3), torch.randn(0, 3)
    model = PutRows()
    edge = litert_torch.convert(model, (x, torch.zeros(4, dtype=torch.bool), values))
    _run(edge, model, x, torch.zeros(4, dtype=torch.bool), values)
    with pytest.raises(LiteRTTorchError, match="out of bounds"):
        edge(x, torch.tensor([True, False, False, False]), values)
