"""Florence-2 (a tiny random configuration): its window attention unbinds q, k and v from a permuted tensor and
views the attention output without a copy torch.export recorded; the unbound parts keep their strides through
conversion, so the program traces again as it was first traced, and the logits match eager PyTorch."""

import numpy as np
import pytest
import torch

import litert_torch

transformers = pytest.importorskip("transformers")


def test_florence2_converts_and_matches():
    torch.manual_seed(0)
    config = transformers.Florence2Config(
        text_config=dict(vocab_size=256, d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                         decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128,
                         max_position_embeddings=256),
        vision_config=dict(embed_dim=[16, 32], depths=[1, 1], num_heads=[1, 2], num_groups=[1, 2], patch_size=[7, 3],
                           patch_stride=[4, 2], patch_padding=[3, 1], patch_prenorm=[False, True], projection_dim=64,
                           window_size=2, max_temporal_embeddings=4, max_position_embeddings=16),
        image_token_id=250)
    model = transformers.Florence2ForConditionalGeneration(config).eval()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, pixel_values, decoder_input_ids):
            return self.model(input_ids=input_ids, pixel_values=pixel_values, decoder_input_ids=decoder_input_ids,
                              use_cache=False).logits

    image_tokens = 17  # a 32 x 32 image in this configuration
    ids = torch.randint(3, 200, (1, 6 + image_tokens))
    ids[0, 3:3 + image_tokens] = 250
    args = (ids, torch.randn(1, 3, 32, 32), torch.randint(3, 200, (1, 4)))
    wrapper = Logits().eval()
    edge = litert_torch.convert(wrapper, args)
    with torch.no_grad():
        want = wrapper(*args).numpy()
    np.testing.assert_allclose(np.asarray(edge(*args)), want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
