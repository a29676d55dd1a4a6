"""validate_vlm (and `litert-convert validate BUNDLE HF_DIR` on an image+text bundle): float bundles of the tiny
Gemma 3, Idefics3 and LLaVA decode exactly like Hugging Face with their image features within float rounding; a
perturbed projector and an int8 bundle show where they depart."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("torchvision")

import torch  # noqa: E402
import transformers  # noqa: E402

from litert_torch import generative  # noqa: E402
from litert_torch.errors import InvalidArgumentError  # noqa: E402
from litert_torch.generative import vlm_examples  # noqa: E402
from litert_torch.generative.export_hf import export  # noqa: E402
from litert_torch.generative.validate import FLOAT_LAYER_RTOL, QUANTIZED_LAYER_RTOL  # noqa: E402
from litert_torch.generative.validate_tasks import validate_vlm  # noqa: E402

NEW_TOKENS = 12


def _image(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)


def _load(model_dir: str):
    transformers.logging.set_verbosity_error()
    hf = transformers.AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    return hf, transformers.AutoProcessor.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    """The tiny Gemma 3's directory, its float bundle, and the same model with its projector perturbed."""
    folder = tmp_path_factory.mktemp("gemma3")
    model_dir = vlm_examples.save_tiny_gemma3(str(folder / "model"))
    bundle = export.export(model=model_dir, output_dir=str(folder / "out"), prefill_lengths=[8, 16],
                           cache_length=64, quantization_recipe="none")
    hf, processor = _load(model_dir)
    with torch.no_grad():
        weight = hf.model.multi_modal_projector.mm_input_projection_weight
        weight.add_(0.5 * torch.randn(weight.shape, generator=torch.Generator().manual_seed(0)))
    perturbed = str(folder / "perturbed")
    hf.save_pretrained(perturbed)
    processor.save_pretrained(perturbed)
    return model_dir, bundle, perturbed


def test_float_gemma3_matches(gemma3):
    model_dir, bundle, _ = gemma3
    hf, processor = _load(model_dir)
    runner = generative.load(bundle)
    prompt = "<start_of_image> and <start_of_image> the quick robot"
    images = [_image(1), _image(2)]
    report = validate_vlm(runner, hf, processor, prompt, images, NEW_TOKENS)
    inputs = processor(text=prompt, images=images, return_tensors="pt")
    with torch.no_grad():
        reference = hf.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None)
    assert report.prompt_ids == inputs["input_ids"][0].tolist()
    assert report.reference_tokens == reference[0, len(report.prompt_ids):].tolist()
    assert report.tokens == report.reference_tokens and report.identical and report.token_agreement == 1.0
    assert len(report.step_max_abs_error) == NEW_TOKENS and 0 < report.max_relative_error < 1e-4
    assert len(report.image_errors) == 2 and report.first_divergent_image is None and not report.quantized
    assert all(0 < e.max_abs_error and e.relative < FLOAT_LAYER_RTOL for e in report.image_errors)
    assert "image 1:" in report.summary()
    with pytest.raises(InvalidArgumentError, match="cache"):
        validate_vlm(runner, hf, processor, prompt, images, 64)


@pytest.mark.parametrize("name", ["idefics3", "llava", "lfm2_vl"])
def test_causal_families_match(name, tmp_path):
    """The float bundles of the causal families give Hugging Face's tokens and image features (LFM2-VL's
    processor, which tokenizes without the start token that the runner puts first, is given the prompt after
    the start token's text)."""
    save = {"idefics3": vlm_examples.save_tiny_idefics3, "llava": vlm_examples.save_tiny_llava,
            "lfm2_vl": vlm_examples.save_tiny_lfm2_vl}[name]
    model_dir = save(str(tmp_path / name))
    bundle = export.export(model=model_dir, output_dir=str(tmp_path / "out"), prefill_lengths=[8, 32],
                           cache_length=64, quantization_recipe="none")
    hf, processor = _load(model_dir)
    report = validate_vlm(generative.load(bundle), hf, processor, "the robot <image> counts", [_image(0)], NEW_TOKENS)
    assert report.identical and len(report.tokens) == NEW_TOKENS and report.token_agreement == 1.0
    assert 0 < report.image_errors[0].relative < FLOAT_LAYER_RTOL


def test_perturbed_projector_named(gemma3):
    _, bundle, perturbed = gemma3
    hf, processor = _load(perturbed)
    report = validate_vlm(generative.load(bundle), hf, processor, "the robot <start_of_image> counts", [_image(0)],
                          NEW_TOKENS)
    assert report.image_errors[0].relative > 0.1 and report.first_divergent_image == 0
    assert report.max_relative_error > 1e-3
    assert "first beyond 0.0001: image 0" in report.summary()
    # the projector departs, after the vision encoder: every block inside it holds
    assert len(report.encoder_layers) == 2 and all(e.relative < FLOAT_LAYER_RTOL for e in report.encoder_layers)


def test_vision_encoder_block_named(gemma3):
    """A model whose vision block 1 differs: the blocks inside the vision encoder section are compared on the
    departing image and block 1 is named, block 0 agrees."""
    model_dir, bundle, _ = gemma3
    hf, processor = _load(model_dir)
    with torch.no_grad():
        weight = hf.model.vision_tower.encoder.layers[1].mlp.fc1.weight
        weight.add_(0.5 * torch.randn(weight.shape, generator=torch.Generator().manual_seed(1)))
    report = validate_vlm(generative.load(bundle), hf, processor, "the robot <start_of_image> counts", [_image(0)],
                          4)
    errors = {e.name: e.relative for e in report.encoder_layers}
    assert list(errors) == ["tower.encoder.layers.0", "tower.encoder.layers.1"]
    assert errors["tower.encoder.layers.0"] < FLOAT_LAYER_RTOL < errors["tower.encoder.layers.1"]
    assert "first beyond 0.0001: tower.encoder.layers.1" in report.summary()


def test_int8_bundle_reported(gemma3, tmp_path):
    model_dir, _, _ = gemma3
    bundle = export.export(model=model_dir, output_dir=str(tmp_path / "int8"), prefill_lengths=[8, 16],
                           cache_length=64)  # the default: dynamic int8 weights
    hf, processor = _load(model_dir)
    report = validate_vlm(generative.load(bundle), hf, processor, "the robot <start_of_image> counts", [_image(0)],
                          NEW_TOKENS)
    assert report.quantized and report.encoder_rtol == QUANTIZED_LAYER_RTOL
    assert report.max_relative_error > 1e-4  # int8 weights move the logits past float rounding
    assert len(report.tokens) == NEW_TOKENS


def test_cli_validate_image_text_bundle(gemma3, tmp_path):
    from click.testing import CliRunner
    from PIL import Image

    from litert_convert.main import cli

    model_dir, bundle, perturbed = gemma3
    png = str(tmp_path / "image.png")
    Image.fromarray(_image(3)).save(png)
    result = CliRunner().invoke(cli, ["validate", bundle, model_dir, "--image", png, "--prompt",
                                      "the robot <start_of_image> counts", "--tokens", "6", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{"):])
    assert data["identical"] and len(data["tokens"]) == 6 and data["image"] == png
    result = CliRunner().invoke(cli, ["validate", bundle, model_dir, "--tokens", "4", "--prompt", "the robot"])
    assert result.exit_code == 0, result.output
    assert "synthetic 32x32 image" in result.output and "goes first" in result.output
    result = CliRunner().invoke(cli, ["validate", bundle, perturbed, "--tokens", "4"])
    assert result.exit_code == 1 and "image" in result.output
    result = CliRunner().invoke(cli, ["validate", bundle, model_dir, "--audio", png])
    assert result.exit_code == 2 and "--audio applies to speech-to-text bundles" in result.output
    (tmp_path / "bad.png").write_bytes(b"not an image")
    result = CliRunner().invoke(cli, ["validate", bundle, model_dir, "--image", str(tmp_path / "bad.png")])
    assert result.exit_code == 2 and "not an image" in result.output
