"""`validate BUNDLE HF_DIR` for speech-to-text and image+text bundles: the inputs (a WAV file or a seeded
synthetic clip; an image file or seeded random pixels), the reference model, the report and the exit status (a
float bundle must decode like Hugging Face; a quantized one is reported)."""

from __future__ import annotations

import json
import os
import wave

import click
import numpy as np

from litert_convert.errors import BadInput, Failure

SYNTHETIC_SECONDS = 2.0


def read_wav(path: str) -> tuple[np.ndarray, int]:
    """The samples of a 16-bit PCM WAV file as float32 in [-1, 1) (channels averaged to mono) and its rate."""
    if not os.path.isfile(path):
        raise BadInput(f"no such file: {path}")
    try:
        with wave.open(path, "rb") as f:
            width, channels, rate = f.getsampwidth(), f.getnchannels(), f.getframerate()
            frames = f.readframes(f.getnframes())
    except (wave.Error, EOFError) as exc:
        raise BadInput(f"{path} is not a PCM WAV file the wave module reads: {exc}",
                       "convert it to 16-bit PCM WAV, e.g. ffmpeg -i IN -ac 1 -ar 16000 -c:a pcm_s16le OUT.wav") \
            from None
    if width != 2:
        raise BadInput(f"{path} has {8 * width}-bit samples; --audio takes 16-bit PCM WAV",
                       "convert it, e.g. ffmpeg -i IN -c:a pcm_s16le OUT.wav")
    samples = np.frombuffer(frames, "<i2").astype(np.float32) / 32768.0
    if channels > 1:
        samples = samples.reshape(-1, channels).mean(axis=1)
    if samples.size == 0:
        raise BadInput(f"{path} has no samples")
    return samples, rate


def validate_asr_bundle(model: str, source: str, audio_path: str | None, new_tokens: int | None,
                        as_json: bool) -> None:
    """A speech-to-text bundle against the Whisper or Moonshine model in the directory `source`."""
    from litert_torch import generative
    from litert_torch.generative.validate_tasks import validate_asr

    runner = generative.load(model)
    if audio_path is None:
        from litert_torch.generative.asr_examples import noise

        audio, rate = noise(SYNTHETIC_SECONDS, seed=0, sampling_rate=runner.sampling_rate), runner.sampling_rate
        where = f"a synthetic {SYNTHETIC_SECONDS:g} s clip (seeded noise and a 440 Hz tone; no --audio given)"
    else:
        audio, rate = read_wav(audio_path)
        where = f"{audio_path} ({audio.size / rate:.2f} s)"
        if rate != runner.sampling_rate:
            raise BadInput(f"{audio_path} is sampled at {rate} Hz; the model's feature extractor takes "
                           f"{runner.sampling_rate} Hz, and validate does not resample",
                           f"resample it first, e.g. ffmpeg -i IN -ar {runner.sampling_rate} -ac 1 OUT.wav")
    hf = _speech_model(source)
    report = validate_asr(runner, hf, audio, rate, new_tokens)
    if as_json:
        click.echo(json.dumps({"audio": where, **report.to_json()}, indent=1))
    else:
        click.echo(f"audio: {where}")
        click.echo(report.summary())
    if not report.quantized and (not report.identical or report.first_divergent_cross_layer is not None):
        what = (f"the greedy tokens differ at step {report.first_divergence}" if not report.identical else
                f"decoder layer {report.first_divergent_cross_layer}'s cross-attention keys or values depart "
                f"beyond {report.encoder_rtol:g}")
        raise Failure(f"{model} does not transcribe like {source}: {what}")


def _speech_model(source: str):
    """The speech-to-text model in the directory `source` (float32, eval mode)."""
    import torch
    import transformers

    from litert_torch.logs import third_party_output

    try:
        with third_party_output():
            hf = transformers.AutoModelForSpeechSeq2Seq.from_pretrained(source, dtype=torch.float32,
                                                                        local_files_only=True)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise BadInput(f"could not load a speech-to-text model from {source}: {exc}") from None
    return hf.eval()


def validate_vlm_bundle(model: str, source: str, image_path: str | None, prompt: str, new_tokens: int,
                        as_json: bool) -> None:
    """An image+text bundle against the model and processor in the directory `source`."""
    from litert_torch import generative
    from litert_torch.generative.validate_tasks import validate_vlm

    runner = generative.load(model)
    spec = runner.spec
    if image_path is None:
        image = np.random.default_rng(0).integers(0, 256, (spec.height, spec.width, 3), dtype=np.uint8)
        where = f"a synthetic {spec.width}x{spec.height} image (seeded random pixels; no --image given)"
    else:
        image, where = _read_image(image_path), image_path
    if spec.placeholder not in prompt:
        prompt = f"{spec.placeholder} {prompt}"
        where += f"; the prompt does not mark the image with {spec.placeholder!r}, so it goes first"
    hf, processor = _image_text_model(source)
    report = validate_vlm(runner, hf, processor, prompt, [image], new_tokens)
    if as_json:
        click.echo(json.dumps({"image": where, "prompt": prompt, **report.to_json()}, indent=1))
    else:
        click.echo(f"image: {where}\nprompt: {prompt!r}")
        click.echo(report.summary())
    if not report.quantized and (not report.identical or report.first_divergent_image is not None):
        what = (f"the greedy tokens differ at step {report.first_divergence}" if not report.identical else
                f"the image features depart beyond {report.encoder_rtol:g}")
        raise Failure(f"{model} does not answer like {source}: {what}")


def _read_image(path: str):
    """The image file at `path` as a PIL image."""
    from PIL import Image, UnidentifiedImageError

    if not os.path.isfile(path):
        raise BadInput(f"no such file: {path}")
    try:
        with Image.open(path) as image:
            image.load()
            return image.copy()
    except (UnidentifiedImageError, OSError) as exc:
        raise BadInput(f"{path} is not an image PIL reads: {exc}") from None


def _image_text_model(source: str):
    """The image+text model (float32, eval mode) and its processor in the directory `source`."""
    import torch
    import transformers

    from litert_torch.logs import third_party_output

    try:
        with third_party_output():
            hf = transformers.AutoModelForImageTextToText.from_pretrained(source, dtype=torch.float32,
                                                                          local_files_only=True)
            processor = transformers.AutoProcessor.from_pretrained(source, local_files_only=True)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise BadInput(f"could not load an image+text model and its processor from {source}: {exc}") from None
    return hf.eval(), processor
