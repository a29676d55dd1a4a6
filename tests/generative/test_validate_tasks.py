"""validate_asr (and `litert-convert validate BUNDLE HF_DIR` on a speech bundle): a float bundle of the tiny
Whisper and Moonshine decodes exactly like Hugging Face, with its cross-attention keys and values within float
rounding; a bundle compared with a perturbed model names the layer and the step where the two depart."""

from __future__ import annotations

import json
import wave

import numpy as np
import pytest

from litert_torch import generative
from litert_torch.errors import InvalidArgumentError
from litert_torch.generative import asr_examples
from litert_torch.generative.export_hf import export
from litert_torch.generative.validate import FLOAT_LAYER_RTOL
from litert_torch.generative.validate_tasks import validate_asr

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    """The tiny Whisper's directory, its float bundle, and the directory of the same model with decoder layer 1's
    cross-attention key projection perturbed."""
    import torch

    folder = tmp_path_factory.mktemp("whisper")
    model_dir = asr_examples.save_tiny_whisper(str(folder / "model"))
    bundle = export.export(model=model_dir, output_dir=str(folder / "out"), quantization_recipe="none")
    transformers.logging.set_verbosity_error()
    hf = transformers.WhisperForConditionalGeneration.from_pretrained(model_dir).eval()
    with torch.no_grad():
        weight = hf.model.decoder.layers[1].encoder_attn.k_proj.weight
        weight.add_(0.5 * torch.randn(weight.shape, generator=torch.Generator().manual_seed(0)))
    perturbed = str(folder / "perturbed")
    hf.save_pretrained(perturbed)
    asr_examples.whisper_tokenizer().save_pretrained(perturbed)
    asr_examples.feature_extractor().save_pretrained(perturbed)
    return model_dir, bundle, perturbed


def _load(model_dir: str):
    transformers.logging.set_verbosity_error()
    return transformers.AutoModelForSpeechSeq2Seq.from_pretrained(model_dir).eval()


def test_float_whisper_matches(whisper):
    import torch

    model_dir, bundle, _ = whisper
    audio = asr_examples.noise(2.0, seed=0)
    runner = generative.load(bundle)
    hf = _load(model_dir)
    report = validate_asr(runner, hf, audio, 16000)
    features = transformers.WhisperFeatureExtractor.from_pretrained(model_dir)(
        audio, sampling_rate=16000, return_tensors="pt").input_features
    with torch.no_grad():
        reference = hf.generate(features)[0].tolist()
    assert report.reference_tokens == reference and len(reference) >= 16
    assert report.tokens == reference and report.identical and report.first_divergence is None
    assert len(report.step_top1_agrees) == len(reference) and report.token_agreement == 1.0
    assert 0 < report.max_relative_error < 1e-4
    assert [e.name for e in report.cross_errors] == ["cross_k_0", "cross_v_0", "cross_k_1", "cross_v_1"]
    assert all(0 < e.max_abs_error and e.relative < FLOAT_LAYER_RTOL for e in report.cross_errors)
    assert report.first_divergent_cross_layer is None and not report.quantized
    assert "identical to Hugging Face" in report.summary() and "none beyond" in report.summary()
    capped = validate_asr(runner, hf, audio, 16000, max_new_tokens=5)
    assert capped.tokens == capped.reference_tokens == reference[:5]
    with pytest.raises(InvalidArgumentError, match="prefill takes 4"):
        runner.prefill([1])


def test_perturbed_model_named(whisper):
    """The bundle against a model whose decoder layer 1 cross-attention keys differ: layer 0 still agrees, layer
    1's keys (only) depart, and the logits show it."""
    model_dir, bundle, perturbed = whisper
    report = validate_asr(generative.load(bundle), _load(perturbed), asr_examples.noise(2.0, seed=0), 16000)
    errors = {e.name: e.relative for e in report.cross_errors}
    assert errors["cross_k_0"] < FLOAT_LAYER_RTOL and errors["cross_v_1"] < FLOAT_LAYER_RTOL
    assert errors["cross_k_1"] > 0.1
    assert report.first_divergent_cross_layer == 1
    assert report.max_relative_error > 1e-3
    assert "first beyond 0.0001: decoder layer 1" in report.summary()
    # the departure is past the encoder: every block inside it holds
    assert len(report.encoder_layers) == 2 and all(e.relative < FLOAT_LAYER_RTOL for e in report.encoder_layers)


def test_encoder_block_named(whisper, tmp_path):
    """A model whose encoder block 1 differs: the blocks inside the encoder section are compared (by default,
    since the cross-attention keys and values depart) and block 1 is named, block 0 agrees; on the model it was
    converted from, every block agrees when asked for."""
    import torch

    model_dir, bundle, _ = whisper
    audio = asr_examples.noise(2.0, seed=0)
    runner = generative.load(bundle)
    report = validate_asr(runner, _load(model_dir), audio, 16000, max_new_tokens=4, encoder_layers=True)
    assert [e.name for e in report.encoder_layers] == ["encoder.layers.0", "encoder.layers.1"]
    assert all(0 < e.relative < FLOAT_LAYER_RTOL for e in report.encoder_layers)
    hf = _load(model_dir)
    with torch.no_grad():
        weight = hf.model.encoder.layers[1].fc1.weight
        weight.add_(0.5 * torch.randn(weight.shape, generator=torch.Generator().manual_seed(1)))
    report = validate_asr(runner, hf, audio, 16000, max_new_tokens=4)
    errors = {e.name: e.relative for e in report.encoder_layers}
    assert errors["encoder.layers.0"] < FLOAT_LAYER_RTOL < errors["encoder.layers.1"]
    assert "first beyond 0.0001: encoder.layers.1" in report.summary()
    assert report.to_json()["first_divergent_encoder_layer"] == "encoder.layers.1"


def test_moonshine_matches(tmp_path):
    model_dir = asr_examples.save_tiny_moonshine(str(tmp_path / "model"))
    bundle = export.export(model=model_dir, output_dir=str(tmp_path / "out"), quantization_recipe="none",
                           input_sec=2)
    report = validate_asr(generative.load(bundle), _load(model_dir), asr_examples.noise(1.3, seed=1), 16000,
                          max_new_tokens=12)
    assert report.identical and len(report.tokens) == 12 and report.token_agreement == 1.0
    assert report.prompt_ids == [transformers.AutoTokenizer.from_pretrained(model_dir).bos_token_id]
    assert len(report.cross_errors) == 4 and report.first_divergent_cross_layer is None
    assert 0 < report.max_relative_error < 1e-4


def _write_wav(path: str, audio: np.ndarray, rate: int = 16000, width: int = 2) -> str:
    with wave.open(path, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(width)
        f.setframerate(rate)
        pcm = np.clip(np.round(audio * 32767), -32768, 32767).astype("<i2")
        f.writeframes(pcm.tobytes() if width == 2 else np.repeat(pcm.view(np.uint8), 2).tobytes())
    return path


def test_cli_validate_speech_bundle(whisper, tmp_path):
    from click.testing import CliRunner

    from litert_convert.main import cli

    model_dir, bundle, perturbed = whisper
    wav = _write_wav(str(tmp_path / "clip.wav"), asr_examples.noise(1.5, seed=2))
    result = CliRunner().invoke(cli, ["validate", bundle, model_dir, "--audio", wav, "--tokens", "8", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{"):])
    assert data["identical"] and len(data["tokens"]) == 8 and data["audio"].startswith(wav)
    result = CliRunner().invoke(cli, ["validate", bundle, model_dir, "--tokens", "4"])
    assert result.exit_code == 0, result.output
    assert "synthetic 2 s clip" in result.output and "identical to Hugging Face" in result.output
    result = CliRunner().invoke(cli, ["validate", bundle, perturbed, "--tokens", "4"])
    assert result.exit_code == 1 and "decoder layer 1" in result.output
    wrong_rate = _write_wav(str(tmp_path / "8k.wav"), asr_examples.noise(1.0, seed=3), rate=8000)
    result = CliRunner().invoke(cli, ["validate", bundle, model_dir, "--audio", wrong_rate])
    assert result.exit_code == 2 and "8000 Hz" in result.output and "resample" in result.output
    result = CliRunner().invoke(cli, ["validate", bundle, model_dir, "--audio", str(tmp_path / "none.wav")])
    assert result.exit_code == 2 and "no such file" in result.output


def test_int8_bundle_reported(whisper, tmp_path):
    """A bundle with dynamic int8 weights: reported with the quantized tolerance, and the CLI exits 0."""
    from click.testing import CliRunner

    from litert_convert.main import cli

    model_dir, _, _ = whisper
    bundle = export.export(model=model_dir, output_dir=str(tmp_path / "int8"))  # the default: int8 weights
    report = validate_asr(generative.load(bundle), _load(model_dir), asr_examples.noise(2.0, seed=0), 16000,
                          max_new_tokens=8)
    assert report.quantized and report.encoder_rtol == 0.1
    assert report.max_relative_error > 1e-4 and max(e.relative for e in report.cross_errors) > FLOAT_LAYER_RTOL
    result = CliRunner().invoke(cli, ["validate", bundle, model_dir, "--tokens", "8", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output[result.output.index("{"):])["quantized"] is True


def test_cli_speech_refusals(whisper, tmp_path):
    from click.testing import CliRunner

    from litert_convert.main import cli

    model_dir, bundle, _ = whisper
    wide = str(tmp_path / "24bit.wav")
    with wave.open(wide, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(3)
        f.setframerate(16000)
        f.writeframes(bytes(3 * 1600))
    result = CliRunner().invoke(cli, ["validate", bundle, model_dir, "--audio", wide])
    assert result.exit_code == 2 and "24-bit samples" in result.output
    (tmp_path / "junk.wav").write_bytes(b"RIFF0000junk")
    result = CliRunner().invoke(cli, ["validate", bundle, model_dir, "--audio", str(tmp_path / "junk.wav")])
    assert result.exit_code == 2 and "not a PCM WAV file" in result.output
    result = CliRunner().invoke(cli, ["validate", bundle, model_dir, "--image", wide])
    assert result.exit_code == 2 and "--image applies to image+text bundles" in result.output
    result = CliRunner().invoke(cli, ["validate", bundle, str(tmp_path / "source.py"), "--audio", wide])
    assert result.exit_code == 2 and "Hugging Face model directory" in result.output
