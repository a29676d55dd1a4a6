"""Image + text -> text for PaliGemma: export(task="image_text_to_text") of a tiny random
`PaliGemmaForConditionalGeneration` (SigLIP tower, linear projector, Gemma text model), run in our runner and
checked against Hugging Face's greedy `generate` with its processor's `pixel_values` and `token_type_ids` (the
prefix-LM mask: the whole prompt attends in both directions)."""

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
from litert_torch.generative.vlm_runner import ImageInputError, VlmRunner  # noqa: E402

PROMPT = "<image>the robot counts"
NEW_TOKENS = 16


def _image(seed: int, height: int = vlm_examples.IMAGE_SIZE, width: int = vlm_examples.IMAGE_SIZE) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _exported(folder, gemma2: bool = False):
    """The tiny PaliGemma (PaliGemma 2 with `gemma2`) saved in `folder`: its Hugging Face model (eager attention:
    transformers' SDPA path drops the prefix mask), its processor, and a runner on its float bundle (prefill 8
    and 32, cache 64)."""
    model_dir = vlm_examples.save_tiny_paligemma(str(folder / "paligemma"), gemma2=gemma2)
    hf = transformers.PaliGemmaForConditionalGeneration.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    processor = transformers.AutoProcessor.from_pretrained(model_dir)
    bundle = export.export(model=model_dir, output_dir=str(folder / "out"), task="image_text_to_text",
                           prefill_lengths=[8, 32], cache_length=64, quantization_recipe="none")
    runner = generative.load(bundle)
    assert isinstance(runner, VlmRunner)
    return hf, processor, runner


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _exported(tmp_path_factory.mktemp("paligemma"))


def _hf_greedy(hf, inputs, prefix_lm: bool = True) -> list[int]:
    inputs = dict(inputs)
    if not prefix_lm:  # without token_type_ids the prompt attends causally
        inputs.pop("token_type_ids")
    with torch.no_grad():
        out = hf.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


def test_greedy_tokens_match_hugging_face(tiny):
    hf, processor, runner = tiny
    image = _image(0)
    inputs = processor(text=PROMPT, images=[image], return_tensors="pt")
    expected = _hf_greedy(hf, inputs)
    # the test can tell: a causal mask over the prefix gives other tokens
    assert _hf_greedy(hf, inputs, prefix_lm=False) != expected
    ids = runner.prompt_ids(PROMPT, 1)
    assert ids == inputs["input_ids"][0].tolist()
    assert list(runner.generate_ids(ids, NEW_TOKENS, images=[image], stop=False)) == expected
    text = "".join(runner.generate(PROMPT, NEW_TOKENS, images=[image]))
    assert text == processor.tokenizer.decode(expected, skip_special_tokens=True)


def test_preprocessing_and_vision_sections_match_the_processor(tiny):
    hf, processor, runner = tiny
    spec = runner.spec
    for image in (_image(3), _image(4, 48, 40)):
        pil = transformers.SiglipImageProcessorPil(**{k: getattr(processor.image_processor, k) for k in (
            "size", "resample", "rescale_factor", "image_mean", "image_std")})
        expected = pil(images=[image], return_tensors="np")["pixel_values"]
        x = runner.preprocess(image) * np.float32(255 * spec.rescale_factor)
        x = (x - np.asarray(spec.image_mean, np.float32)) / np.asarray(spec.image_std, np.float32)
        np.testing.assert_allclose(x.transpose(0, 3, 1, 2), expected, atol=1e-6)
    image = _image(5)
    pixels = processor.image_processor(images=[image], return_tensors="pt")["pixel_values"]
    np.testing.assert_allclose(runner.preprocess(image)[0] * 255, image, atol=1e-4)
    with torch.no_grad():
        expected = hf.model.get_image_features(pixels).pooler_output[0].numpy()
    got = runner.encode_image(image)
    assert np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max() + 1e-5


def test_prefix_refusals(tiny):
    _, _, runner = tiny
    with pytest.raises(ImageInputError, match="text before an image"):
        runner.prompt_ids("the robot <image> counts", 1)
    long = runner.prompt_ids("<image>the robot counts and the robot", 1)
    assert 32 < len(long) < 60
    with pytest.raises(ImageInputError, match="one prefill call"):
        list(runner.generate_ids(long, 2, images=[_image(0)]))


def test_paligemma2_greedy_tokens_match_hugging_face(tmp_path):
    """PaliGemma 2 (a Gemma 2 text model: a sliding window in its first layer, soft-capped attention and logits):
    24 greedy tokens, past the 32-token window, equal `generate`'s with the prefix mask, which gives other
    tokens than a causal prompt."""
    hf, processor, runner = _exported(tmp_path, gemma2=True)
    image = _image(0)
    inputs = processor(text=PROMPT, images=[image], return_tensors="pt")
    hf.generation_config.eos_token_id = None  # 24 tokens whatever they are
    with torch.no_grad():
        expected = hf.generate(**inputs, max_new_tokens=24, do_sample=False)[0, inputs["input_ids"].shape[1]:]
        causal = {k: v for k, v in inputs.items() if k != "token_type_ids"}
        other = hf.generate(**causal, max_new_tokens=24, do_sample=False)[0, inputs["input_ids"].shape[1]:]
    expected = expected.tolist()
    assert other.tolist() != expected and len(set(expected)) > 2
    ids = runner.prompt_ids(PROMPT, 1)
    assert len(ids) + 24 > 32  # the decode runs past the sliding window
    assert list(runner.generate_ids(ids, 24, images=[image], stop=False)) == expected
