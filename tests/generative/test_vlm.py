"""Image + text -> text: export(task="image_text_to_text") of a tiny random Gemma 3 (SigLIP tower, projector,
Gemma 3 text model), Idefics3 (vision tower, pixel-shuffle connector, Llama) and LLaVA (CLIP tower, MLP
projector, Llama) to bundles with embedder and vision sections, run in our runner and in LiteRT-LM and checked
against Hugging Face's greedy `generate` with its processor's `pixel_values` (and, for Gemma 3,
`token_type_ids`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("torchvision")

import torch  # noqa: E402
import transformers  # noqa: E402

from litert_torch import generative  # noqa: E402
from litert_torch.errors import InvalidArgumentError, LiteRTTorchError  # noqa: E402
from litert_torch.generative import vlm_examples  # noqa: E402
from litert_torch.generative.config import UnsupportedModelError  # noqa: E402
from litert_torch.generative.export_hf import export  # noqa: E402
from litert_torch.generative.vlm import UnsupportedVlmError  # noqa: E402
from litert_torch.generative.vlm_runner import ImageInputError, VlmRunner  # noqa: E402

PROMPT = "the robot <start_of_image> counts"
NEW_TOKENS = 16


def _image(seed: int, height: int = vlm_examples.IMAGE_SIZE, width: int = vlm_examples.IMAGE_SIZE) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny Gemma 3 directory, its Hugging Face model and processor, and its float bundle (prefill 8 and 16,
    cache 64)."""
    folder = tmp_path_factory.mktemp("vlm")
    model_dir = vlm_examples.save_tiny_gemma3(str(folder / "gemma3"))
    hf = transformers.Gemma3ForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32).eval()
    processor = transformers.AutoProcessor.from_pretrained(model_dir)
    bundle = export.export(model=model_dir, output_dir=str(folder / "out"), task="image_text_to_text",
                           prefill_lengths=[8, 16], cache_length=64, quantization_recipe="none")
    return model_dir, hf, processor, bundle


@pytest.fixture(scope="module")
def runner(tiny) -> VlmRunner:
    vlm = generative.load(tiny[3])
    assert isinstance(vlm, VlmRunner)
    return vlm


def _hf_greedy(hf, inputs, bidirectional: bool = True) -> list[int]:
    inputs = dict(inputs)
    if not bidirectional:
        inputs.pop("token_type_ids")
    with torch.no_grad():
        out = hf.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


@pytest.mark.parametrize("prompt,images", [
    (PROMPT, [_image(0)]),
    # two images: with prefill lengths 8 and 16 the first chunk would end inside the second image's tokens
    ("<start_of_image> and <start_of_image> the quick robot", [_image(1), _image(2)]),
])
def test_greedy_tokens_match_hugging_face(tiny, runner, prompt, images):
    _, hf, processor, _ = tiny
    inputs = processor(text=prompt, images=images, return_tensors="pt")
    expected = _hf_greedy(hf, inputs)
    # the test can tell: attending causally over the image gives other tokens
    assert _hf_greedy(hf, inputs, bidirectional=False) != expected
    ids = runner.prompt_ids(prompt, len(images))
    assert ids == inputs["input_ids"][0].tolist()
    assert list(runner.generate_ids(ids, NEW_TOKENS, images=images, stop=False)) == expected
    text = "".join(runner.generate(prompt, NEW_TOKENS, images=images))
    assert text == processor.tokenizer.decode(expected, skip_special_tokens=True)


def test_text_only_prompt_matches_hugging_face(tiny, runner):
    _, hf, processor, _ = tiny
    inputs = processor.tokenizer("the little robot counts", return_tensors="pt")
    with torch.no_grad():
        out = hf.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
    expected = out[0, inputs["input_ids"].shape[1]:].tolist()
    ids = runner.prompt_ids("the little robot counts", 0)
    assert list(runner.generate_ids(ids, NEW_TOKENS, stop=False)) == expected


def _pixel_values(vlm: VlmRunner, image: np.ndarray) -> np.ndarray:
    """The runner's encoder input (pixels / 255, channels last) rescaled and normalised as the encoder does it,
    channels first: what the processor's `pixel_values` hold."""
    spec = vlm.spec
    x = vlm.preprocess(image) * np.float32(255 * spec.rescale_factor)
    x = (x - np.asarray(spec.image_mean, np.float32)) / np.asarray(spec.image_std, np.float32)
    return x.transpose(0, 3, 1, 2)


def test_preprocessing_matches_the_processor(tiny, runner):
    _, _, processor, _ = tiny
    image = _image(3)
    expected = processor.image_processor(images=[image], return_tensors="np")["pixel_values"]
    np.testing.assert_allclose(_pixel_values(runner, image), expected, atol=1e-6)
    # another size is resized with the processor's filter (the PIL backend resizes as the runner does)
    pil = transformers.Gemma3ImageProcessorPil(**{k: getattr(processor.image_processor, k) for k in (
        "size", "resample", "rescale_factor", "image_mean", "image_std")})
    other = _image(4, 48, 40)
    expected = pil(images=[other], return_tensors="np")["pixel_values"]
    np.testing.assert_allclose(_pixel_values(runner, other), expected, atol=1e-6)
    assert runner.spec.resample == int(processor.image_processor.resample)


def test_vision_sections_match_hugging_face(tiny, runner):
    _, hf, processor, _ = tiny
    image = _image(5)
    pixels = processor.image_processor(images=[image], return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        expected = hf.model.get_image_features(pixels).pooler_output[0].numpy()
    got = runner.encode_image(image)
    assert np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max() + 1e-5


def test_image_errors(runner):
    with pytest.raises(ImageInputError, match="marks 1 image"):
        list(runner.generate(PROMPT, 4, images=[]))
    with pytest.raises(ImageInputError, match="uint8"):
        runner.preprocess(np.zeros((32, 32, 3), np.float32))
    ids = runner.prompt_ids(PROMPT, 1)
    with pytest.raises(ImageInputError, match="ends with an image"):
        runner.prefill(ids[:ids.index(runner.spec.image_token_id) + runner.spec.tokens_per_image], [_image(0)])
    assert issubclass(ImageInputError, LiteRTTorchError)


def test_task_read_from_the_config_and_refusals(tiny, tmp_path):
    model_dir = tiny[0]
    assert export.resolve_task(None, model_dir) == "image_text_to_text"
    with pytest.raises(UnsupportedModelError, match="image\\+text model"):
        export.export(model=model_dir, output_dir=str(tmp_path / "text"), task="text_generation")
    with pytest.raises(InvalidArgumentError, match="enable_dynamic_shape"):
        export.export(model=model_dir, output_dir=str(tmp_path / "x"), task="image_text_to_text",
                      enable_dynamic_shape=True)
    with pytest.raises(InvalidArgumentError, match="image takes 4 tokens"):
        export.export(model=model_dir, output_dir=str(tmp_path / "x"), prefill_lengths=[2], cache_length=64)
    other = tmp_path / "qwen2_5_vl"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl", "text_config": {},
                                                   "vision_config": {}}))
    assert export.resolve_task(None, str(other)) == "image_text_to_text"
    with pytest.raises(UnsupportedVlmError, match="'qwen2_5_vl'"):
        export.export(model=str(other), output_dir=str(tmp_path / "y"))
    assert not os.path.exists(tmp_path / "x") and not os.path.exists(tmp_path / "y")


def test_pan_and_scan_is_refused(tiny, tmp_path):
    model_dir = tiny[0]
    copy = tmp_path / "pan"
    processor = transformers.AutoProcessor.from_pretrained(model_dir)
    processor.image_processor.do_pan_and_scan = True
    processor.save_pretrained(str(copy))
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        os.link(os.path.join(model_dir, name), copy / name)
    with pytest.raises(UnsupportedVlmError, match="pan-and-scan"):
        export.export(model=str(copy), output_dir=str(tmp_path / "out"), prefill_lengths=[8], cache_length=32)


def test_default_int8_export_and_its_sections(tiny, tmp_path):
    """The default recipe quantizes the decoder and the embedder (int8 weights): the bundle is smaller and runs;
    `inspect` lists its sections."""
    from litert_convert.describe import describe_bundle, render

    bundle = export.export(model=tiny[0], output_dir=str(tmp_path / "int8"), prefill_lengths=[8, 16],
                           cache_length=64)
    assert os.path.getsize(bundle) < os.path.getsize(tiny[3])
    int8 = generative.load(bundle)
    assert len(list(int8.generate_ids(int8.prompt_ids(PROMPT, 1), 4, images=[_image(0)], stop=False))) == 4
    summary = describe_bundle(bundle)
    for kind in ("tf_lite_embedder", "tf_lite_vision_encoder", "tf_lite_vision_adapter", "tf_lite_prefill_decode"):
        assert kind in summary["bundle"]["sections"]
    assert "tf_lite_vision_encoder" in render(summary)


def test_vision_encoder_quantization_recipe(tiny, runner, tmp_path):
    """`vision_encoder_quantization_recipe` quantizes the vision sections (int8 weights), apart from the
    decoder's recipe (float here): the encoder's dense layers are int8, the decoder is the float bundle's, and
    the image features stay close to the float bundle's."""
    from litert_torch.flatbuffer.reader import read_model
    from litert_torch.generative.vlm_runner import read_vlm_bundle

    bundle = export.export(model=tiny[0], output_dir=str(tmp_path / "q"), prefill_lengths=[8, 16], cache_length=64,
                           quantization_recipe="none", vision_encoder_quantization_recipe="dynamic_wi8_afp32")
    quantized, float_ = read_vlm_bundle(bundle), read_vlm_bundle(tiny[3])
    assert len(quantized.vision_encoder) < len(float_.vision_encoder)
    assert quantized.decoder == float_.decoder
    graph = read_model(quantized.vision_encoder).subgraphs[0]
    weights = [op.inputs[1].dtype for op in graph.ops if op.opcode == "FULLY_CONNECTED"]
    assert weights and all(dtype == np.int8 for dtype in weights)
    vlm = generative.load(bundle)
    image = _image(0)
    got, expected = vlm.encode_image(image).ravel(), runner.encode_image(image).ravel()
    assert got.shape == expected.shape
    assert float(got @ expected / np.linalg.norm(got) / np.linalg.norm(expected)) >= 0.999


def test_cli_vision_quantize(tiny, tmp_path):
    """`export-hf --vision-quantize` quantizes the vision sections apart from `--quantize` (the decoder's):
    int8 dense weights in the encoder, the float decoder; `--audio-quantize` is refused here."""
    from click.testing import CliRunner

    from litert_convert.main import cli
    from litert_torch.flatbuffer.reader import read_model
    from litert_torch.generative.vlm_runner import read_vlm_bundle

    out = str(tmp_path / "q.litertlm")
    result = CliRunner().invoke(cli, ["export-hf", tiny[0], "-o", out, "--prefill", "8,16", "--cache", "64",
                                      "--quantize", "none", "--vision-quantize", "dynamic_wi8_afp32", "--quiet"])
    assert result.exit_code == 0, result.output
    read = read_vlm_bundle(out)
    assert read.decoder == read_vlm_bundle(tiny[3]).decoder
    encoder = read_model(read.vision_encoder).subgraphs[0]
    assert {op.inputs[1].dtype for op in encoder.ops if op.opcode == "FULLY_CONNECTED"} == {np.dtype(np.int8)}
    result = CliRunner().invoke(cli, ["export-hf", tiny[0], "-o", str(tmp_path / "r.litertlm"), "--audio-quantize",
                                      "none"])
    assert result.exit_code == 2 and "--audio-quantize does not apply" in result.output


@pytest.mark.slow
def test_cli_export_hf_reads_the_task_from_the_config(tiny, tmp_path):
    """`litert-convert export-hf DIR -o OUT` (no --task) writes the image+text bundle; `inspect` lists its
    sections."""
    out = str(tmp_path / "cli.litertlm")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run([sys.executable, "-m", "litert_convert", "export-hf", tiny[0], "-o", out,
                          "--prefill", "8,16", "--cache", "64", "--quiet"], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    shown = subprocess.run([sys.executable, "-m", "litert_convert", "inspect", out, "--json"], capture_output=True,
                           text=True, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "tf_lite_vision_adapter" in json.loads(shown.stdout)["bundle"]["sections"]


# renders a message's text and a `<start_of_image>` per image, nothing else: the prompt the Hugging Face
# processor is given
IMAGE_TEMPLATE = ("{% for m in messages %}{% for c in m['content'] %}{% if c['type'] == 'text' %}{{ c['text'] }}"
                  "{% else %}PLACEHOLDER{% endif %}{% endfor %}{% endfor %}")


def _litert_lm_reply(bundle: str, cache_dir: str, prompt: str, placeholder: str, image: np.ndarray, n: int) -> str:
    """LiteRT-LM's greedy reply of `n` tokens to a message of `prompt` with `image` where its placeholder is."""
    litert_lm, engine = _engine(bundle, cache_dir)
    before, after = prompt.split(placeholder)
    conversation = engine.create_conversation(chat_template=IMAGE_TEMPLATE.replace("PLACEHOLDER", placeholder),
                                              max_output_tokens=n, sampler_config=litert_lm.SamplerConfig(top_k=1))
    reply = conversation.send_message({"role": "user", "content": [
        {"type": "text", "text": before}, {"type": "image", "blob": _png(image)}, {"type": "text", "text": after}]})
    return "".join(c["text"] for c in reply["content"] if c["type"] == "text")


def _png(image: np.ndarray) -> str:
    import base64
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def _engine(bundle: str, cache_dir: str):
    litert_lm = pytest.importorskip("litert_lm")
    return litert_lm, litert_lm.Engine(bundle, max_num_tokens=64, vision_backend=litert_lm.Backend.CPU(),
                                       cache_dir=cache_dir)


def test_litert_lm_runs_the_bundle_on_text(tiny, tmp_path):
    """LiteRT-LM runs a text prompt through the embedder and the decoder on embeddings (its own mask filled by
    the runtime): greedy, the text Hugging Face generates."""
    _, hf, processor, bundle = tiny
    litert_lm, engine = _engine(bundle, str(tmp_path))
    prompt = "the little robot counts"
    inputs = processor.tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        out = hf.generate(**inputs, max_new_tokens=8, do_sample=False)
    expected = processor.tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    session = engine.create_session(apply_prompt_template=False, sampler_config=litert_lm.SamplerConfig(top_k=1),
                                    max_output_tokens=8)
    session.run_prefill([prompt])
    assert session.run_decode().texts[0] == expected


def test_litert_lm_image_prompt_matches_hugging_face(tiny, tmp_path):
    """An image in a LiteRT-LM message (`Engine(..., vision_backend=CPU)`): the runtime resizes it (here: at the
    encoder's size already) and gives the encoder pixels / 255, puts the adapter's rows (the image tokens and the
    end-of-image token) after `\n\n<start_of_image>`, and fills the mask bidirectionally over the image
    (ExecutorMetadata): greedy, Hugging Face's text, which attending causally over the image would change."""
    _, hf, processor, bundle = tiny
    image = _image(0)
    inputs = processor(text=PROMPT, images=[image], return_tensors="pt")
    expected = processor.tokenizer.decode(_hf_greedy(hf, inputs)[:8])
    assert processor.tokenizer.decode(_hf_greedy(hf, inputs, bidirectional=False)[:8]) != expected
    assert _litert_lm_reply(bundle, str(tmp_path), PROMPT, "<start_of_image>", image, 8) == expected


def _pil_processor(name: str, ip):
    """The PIL-backend image processor of `name` with `ip`'s settings: it resizes with PIL, as the runner does."""
    if name == "idefics3":
        return transformers.Idefics3ImageProcessorPil(size=ip.size, max_image_size=ip.max_image_size,
                                                      do_image_splitting=False, resample=ip.resample)
    return transformers.CLIPImageProcessorPil(size=ip.size, crop_size=ip.crop_size, resample=ip.resample,
                                              image_mean=ip.image_mean, image_std=ip.image_std)


# the causal families: how the tiny model is saved, its class and its image placeholder
CAUSAL = {"idefics3": (vlm_examples.save_tiny_idefics3, "Idefics3ForConditionalGeneration", "<image>"),
          "llava": (vlm_examples.save_tiny_llava, "LlavaForConditionalGeneration", "<image>")}


@pytest.fixture(scope="module", params=sorted(CAUSAL))
def causal(request, tmp_path_factory):
    """A tiny Idefics3 or LLaVA: its name, directory, Hugging Face model and processor, and its float bundle."""
    name = request.param
    save, cls, _ = CAUSAL[name]
    folder = tmp_path_factory.mktemp(name)
    model_dir = save(str(folder / name))
    hf = getattr(transformers, cls).from_pretrained(model_dir, dtype=torch.float32).eval()
    processor = transformers.AutoProcessor.from_pretrained(model_dir)
    bundle = export.export(model=model_dir, output_dir=str(folder / "out"), prefill_lengths=[8, 32],
                           cache_length=64, quantization_recipe="none")  # the task read from config.json
    return name, model_dir, hf, processor, bundle


def test_causal_families_greedy_tokens_match_hugging_face(causal):
    name, _, hf, processor, bundle = causal
    vlm = generative.load(bundle)
    prompt = f"the robot {CAUSAL[name][2]} counts"
    seen = []
    for image in (_image(0), _image(6)):
        inputs = processor(text=prompt, images=[image], return_tensors="pt")
        expected = _hf_greedy(hf, inputs)
        ids = vlm.prompt_ids(prompt, 1)
        assert ids == inputs["input_ids"][0].tolist()
        assert list(vlm.generate_ids(ids, NEW_TOKENS, images=[image], stop=False)) == expected
        seen.append(expected)
    assert seen[0] != seen[1]  # the image matters


def test_causal_families_preprocessing_matches_the_processor(causal):
    name, _, _, processor, bundle = causal
    vlm = generative.load(bundle)
    image = _image(3)
    expected = processor.image_processor(images=[image], return_tensors="np")["pixel_values"].reshape(1, 3, 32, 32)
    np.testing.assert_allclose(_pixel_values(vlm, image), expected, atol=1e-6)
    pil = _pil_processor(name, processor.image_processor)
    # Idefics3: the longest edge first, keeping the aspect ratio; LLaVA: the shortest edge, then the centre crop
    for other in (_image(4, 48, 40), _image(5, 30, 64)):
        expected = pil(images=[other], return_tensors="np")["pixel_values"].reshape(1, 3, 32, 32)
        np.testing.assert_allclose(_pixel_values(vlm, other), expected, atol=1e-6)


def test_causal_families_in_litert_lm(causal, tmp_path):
    """LiteRT-LM (generic model type with images on: the placeholder as delimiter, the processor's text before
    and after the image tokens as prefix and suffix) runs an image prompt as Hugging Face does: greedy, the same
    text."""
    name, _, hf, processor, bundle = causal
    placeholder = CAUSAL[name][2]
    prompt, image = f"the robot {placeholder} counts", _image(0)
    inputs = processor(text=prompt, images=[image], return_tensors="pt")
    expected = processor.tokenizer.decode(_hf_greedy(hf, inputs)[:8])
    assert _litert_lm_reply(bundle, str(tmp_path), prompt, placeholder, image, 8) == expected


def test_idefics3_image_splitting_is_refused(tmp_path):
    model_dir = vlm_examples.save_tiny_idefics3(str(tmp_path / "split"))
    processor = transformers.AutoProcessor.from_pretrained(model_dir)
    processor.image_processor.do_image_splitting = True
    processor.save_pretrained(model_dir)
    with pytest.raises(UnsupportedVlmError, match="do_image_splitting"):
        export.export(model=model_dir, output_dir=str(tmp_path / "out"), prefill_lengths=[8], cache_length=32)
