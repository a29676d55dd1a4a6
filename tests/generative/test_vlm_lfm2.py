"""Image + text -> text for LFM2-VL: export(task="image_text_to_text") of a tiny random
`Lfm2VlForConditionalGeneration` (SigLIP2 NaFlex tower, pixel-unshuffle projector, LFM2 text model with short
convolutions), run in our runner and in LiteRT-LM and checked against Hugging Face's greedy `generate` with its
processor's `pixel_values`, `spatial_shapes` and `pixel_attention_mask`."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("torchvision")

import torch  # noqa: E402
import transformers  # noqa: E402

from litert_torch import generative  # noqa: E402
from litert_torch.generative import vlm_examples  # noqa: E402
from litert_torch.generative.export_hf import export  # noqa: E402
from litert_torch.generative.vlm import UnsupportedVlmError  # noqa: E402
from litert_torch.generative.vlm_families import lfm2_vl_size  # noqa: E402
from litert_torch.generative.vlm_runner import ImageInputError, VlmRunner  # noqa: E402

PROMPT = "the robot <image> counts"
NEW_TOKENS = 16
SIZE = vlm_examples.IMAGE_SIZE


def _image(seed: int, height: int = SIZE, width: int = SIZE) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny LFM2-VL's directory, Hugging Face model, processor, float bundle (prefill 8 and 32, cache 64)
    and a runner on it."""
    folder = tmp_path_factory.mktemp("lfm2_vl")
    model_dir = vlm_examples.save_tiny_lfm2_vl(str(folder / "lfm2_vl"))
    hf = transformers.Lfm2VlForConditionalGeneration.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    processor = transformers.AutoProcessor.from_pretrained(model_dir)
    bundle = export.export(model=model_dir, output_dir=str(folder / "out"), prefill_lengths=[8, 32],
                           cache_length=64, quantization_recipe="none")  # the task read from config.json
    runner = generative.load(bundle)
    assert isinstance(runner, VlmRunner)
    return model_dir, hf, processor, bundle, runner


def _inputs(processor, prompt: str, images):
    """The processor's inputs for `prompt`: it tokenizes without special tokens (LFM2's chat template writes the
    start token), so the prompt is given the start token the runner and LiteRT-LM prepend."""
    return processor(text=processor.tokenizer.bos_token + prompt, images=images, return_tensors="pt")


def _hf_greedy(hf, inputs, n: int = NEW_TOKENS) -> list[int]:
    with torch.no_grad():
        out = hf.generate(**inputs, max_new_tokens=n, do_sample=False)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


@pytest.mark.parametrize("prompt,images", [
    (PROMPT, [_image(0)]),
    (PROMPT, [_image(6)]),
    # two images in a prompt of 36 tokens, prefilled in two chunks (32, then 3 in a padded chunk of 8): the
    # convolution states carry from one call to the next
    ("the robot <image> and <image> counts", [_image(1), _image(2)]),
])
def test_greedy_tokens_match_hugging_face(tiny, prompt, images):
    _, hf, processor, _, runner = tiny
    inputs = _inputs(processor, prompt, images)
    expected = _hf_greedy(hf, inputs)
    ids = runner.prompt_ids(prompt, len(images))
    assert ids == inputs["input_ids"][0].tolist()
    assert list(runner.generate_ids(ids, NEW_TOKENS, images=images, stop=False)) == expected
    text = "".join(runner.generate(prompt, NEW_TOKENS, images=images))
    assert text == processor.tokenizer.decode(expected, skip_special_tokens=True)


def test_the_image_matters(tiny):
    _, hf, processor, _, _ = tiny
    assert _hf_greedy(hf, _inputs(processor, PROMPT, [_image(0)])) != _hf_greedy(
        hf, _inputs(processor, PROMPT, [_image(6)]))


def test_text_only_prompt_matches_hugging_face(tiny):
    _, hf, processor, _, runner = tiny
    prompt = "the little robot counts"
    expected = _hf_greedy(hf, _inputs(processor, prompt, None))
    assert list(runner.generate_ids(runner.prompt_ids(prompt, 0), NEW_TOKENS, stop=False)) == expected


def _pixel_patches(runner: VlmRunner, image: np.ndarray) -> np.ndarray:
    """The runner's encoder input rescaled, normalised and cut into patches as the encoder does it: what the
    processor's `pixel_values` hold (its padding rows left out)."""
    spec = runner.spec
    x = runner.preprocess(image)[0] * np.float32(255 * spec.rescale_factor)
    x = (x - np.asarray(spec.image_mean, np.float32)) / np.asarray(spec.image_std, np.float32)
    p, rows, cols = spec.patch_size, spec.height // spec.patch_size, spec.width // spec.patch_size
    return x.reshape(rows, p, cols, p, 3).transpose(0, 2, 1, 3, 4).reshape(1, rows * cols, -1)


def test_preprocessing_matches_the_processor(tiny):
    """At the encoder's size, the processor's pixel values; a larger or smaller square image that the processor
    resizes to that size is resized (with PIL, where the processor resizes with torchvision: equal when enlarging
    or halving, within two pixel levels on 40 x 40); an image the processor would give another grid is refused,
    naming the size it would get."""
    _, _, processor, _, runner = tiny
    n = (SIZE // runner.spec.patch_size) ** 2
    level = 2 / 255  # one pixel level, normalised (std 0.5)
    for image, atol in ((_image(3), 1e-6), (_image(4, 64, 64), 1e-6), (_image(7, 24, 24), 1e-6),
                        (_image(5, 40, 40), 2 * level + 1e-6)):
        out = processor.image_processor(images=[image], return_tensors="np")
        assert out["spatial_shapes"].tolist() == [[SIZE // 8, SIZE // 8]]
        np.testing.assert_allclose(_pixel_patches(runner, image), out["pixel_values"][:, :n], atol=atol)
    with pytest.raises(ImageInputError, match="resizes a 40x48 image to 16x32 \\(2 image tokens\\)"):
        runner.preprocess(_image(6, 48, 40))
    assert processor.image_processor(images=[_image(6, 48, 40)], return_tensors="np")[
        "spatial_shapes"].tolist() == [[4, 2]]


def test_grid_size_matches_the_processors_resize(tiny):
    ip = tiny[2].image_processor
    for low, high in ((1, 4), (64, 256), (4, 4)):
        for height, width in ((32, 32), (40, 40), (48, 40), (16, 16), (100, 30), (512, 512), (700, 300), (9, 400)):
            width_bar, height_bar = ip.smart_resize(height, width, 2, low, high, 16)
            assert lfm2_vl_size(height, width, 32, low, high) == (height_bar, width_bar)


def test_vision_sections_match_hugging_face(tiny):
    _, hf, processor, _, runner = tiny
    image = _image(5)
    inputs = processor.image_processor(images=[image], return_tensors="pt")
    with torch.no_grad():
        expected = hf.model.get_image_features(inputs["pixel_values"], inputs["spatial_shapes"],
                                               inputs["pixel_attention_mask"]).pooler_output[0].numpy()
    got = runner.encode_image(image)
    assert got.shape == expected.shape == (vlm_examples.TOKENS_PER_IMAGE, 64)
    assert np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max() + 1e-5


@pytest.mark.parametrize("setting,value,match", [
    ("do_image_splitting", True, "do_image_splitting"),
    ("encoder_patch_size", 16, "encoder_patch_size 16"),
    ("min_image_tokens", 8, "min_image_tokens 8"),
])
def test_processor_settings_the_bundle_cannot_reproduce_are_refused(tiny, tmp_path, setting, value, match):
    import os

    model_dir = tiny[0]
    copy = tmp_path / "copy"
    processor = transformers.AutoProcessor.from_pretrained(model_dir)
    setattr(processor.image_processor, setting, value)
    processor.save_pretrained(str(copy))
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        os.link(os.path.join(model_dir, name), copy / name)
    with pytest.raises(UnsupportedVlmError, match=match):
        export.export(model=str(copy), output_dir=str(tmp_path / "out"), prefill_lengths=[8], cache_length=32)
    assert not os.path.exists(tmp_path / "out")


def test_litert_lm_matches_hugging_face(tiny, tmp_path):
    """LiteRT-LM (generic model type with images on: `<image>` as delimiter, `<|image_start|>` and
    `<|image_end|>` as the image prefix and suffix; the LFM2 convolution states carried as `kv_cache_conv_<i>`)
    gives, greedy, Hugging Face's text for an image prompt and for a text prompt."""
    from tests.generative.test_vlm import _engine, _litert_lm_reply

    _, hf, processor, bundle, _ = tiny
    image = _image(0)
    expected = processor.tokenizer.decode(_hf_greedy(hf, _inputs(processor, PROMPT, [image]), 8))
    assert _litert_lm_reply(bundle, str(tmp_path), PROMPT, "<image>", image, 8) == expected
    prompt = "the little robot counts"
    litert_lm, engine = _engine(bundle, str(tmp_path))
    session = engine.create_session(apply_prompt_template=False, sampler_config=litert_lm.SamplerConfig(top_k=1),
                                    max_output_tokens=8)
    session.run_prefill([prompt])
    expected = processor.tokenizer.decode(_hf_greedy(hf, _inputs(processor, prompt, None), 8))
    assert session.run_decode().texts[0] == expected


@pytest.mark.parametrize("table,grid", [(4, (4, 4)), (36, (4, 4)), (9, (4, 6))])
def test_naflex_tower_equals_the_tower_on_its_grid(table, grid):
    """The encoder's module (patches cut from the image, position embeddings resized once) equals
    `Siglip2VisionModel` called on the processor's flattened patches with the grid as `spatial_shapes`, for a
    position table enlarged (2 x 2 to 4 x 4, as the released models' 16 x 16 to 32 x 32), shrunk, and resized to a
    grid that is not square."""
    from litert_torch.generative.vlm_modules import NaflexVisionTower

    config = transformers.Siglip2VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                              num_attention_heads=2, patch_size=8, num_patches=table,
                                              vision_use_head=False)
    torch.manual_seed(0)
    tower = transformers.Siglip2VisionModel(config).eval()
    with torch.no_grad():
        tower.embeddings.position_embedding.weight.normal_()
    module = NaflexVisionTower(tower, None, None, None, grid, 8).eval()
    rows, cols = grid
    pixels = torch.rand(1, 3, rows * 8, cols * 8)
    patches = pixels.reshape(1, 3, rows, 8, cols, 8).permute(0, 2, 4, 3, 5, 1).reshape(1, rows * cols, -1)
    with torch.no_grad():
        expected = tower(pixel_values=patches, spatial_shapes=torch.tensor([grid]),
                         pixel_attention_mask=torch.ones(1, rows * cols, dtype=torch.int32)).last_hidden_state
        got = module.features(pixels)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_released_processor_settings(tmp_path):
    """The released models' processor settings (16-pixel patches downsampled by 2, 64..256 image tokens) with
    splitting off: a 512 x 512 encoder of 256 tokens, its position table (16 x 16) enlarged to the 32 x 32 grid;
    the image features equal `get_image_features` and the greedy tokens Hugging Face's."""
    tokenizer = vlm_examples.lfm2_vl_processor().tokenizer
    processor = transformers.Lfm2VlProcessor(
        image_processor=transformers.Lfm2VlImageProcessor(do_image_splitting=False), tokenizer=tokenizer)
    text = transformers.Lfm2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, pad_token_id=0,
                                   bos_token_id=1, eos_token_id=2, layer_types=["conv", "full_attention"])
    vision = transformers.Siglip2VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                              num_attention_heads=2, patch_size=16, num_patches=256,
                                              vision_use_head=False)
    config = transformers.Lfm2VlConfig(vision_config=vision.to_dict(), text_config=text.to_dict(),
                                       projector_hidden_size=48, image_token_id=tokenizer.convert_tokens_to_ids("<image>"))
    torch.manual_seed(0)
    model_dir = vlm_examples._save(str(tmp_path / "model"), vlm_examples._spread(
        transformers.Lfm2VlForConditionalGeneration(config).eval(), text_part="language_model"), processor)
    bundle = export.export(model=model_dir, output_dir=str(tmp_path / "out"), prefill_lengths=[32, 300],
                           cache_length=320, quantization_recipe="none")
    runner = generative.load(bundle)
    assert (runner.spec.height, runner.spec.width, runner.spec.tokens_per_image) == (512, 512, 256)
    hf = transformers.Lfm2VlForConditionalGeneration.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    image = _image(0, 512, 512)
    inputs = _inputs(processor, PROMPT, [image])
    assert inputs["spatial_shapes"].tolist() == [[32, 32]]
    with torch.no_grad():
        expected = hf.model.get_image_features(inputs["pixel_values"], inputs["spatial_shapes"],
                                               inputs["pixel_attention_mask"]).pooler_output[0].numpy()
    got = runner.encode_image(image)
    assert got.shape == expected.shape and np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max()
    ids = runner.prompt_ids(PROMPT, 1)
    assert ids == inputs["input_ids"][0].tolist()
    assert list(runner.generate_ids(ids, 8, images=[image], stop=False)) == _hf_greedy(hf, inputs, 8)
