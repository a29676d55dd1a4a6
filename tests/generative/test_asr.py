"""Speech to text: export(task="automatic_speech_recognition") of a tiny random Whisper (built from a config with a
byte-level BPE tokenizer, litert_torch.generative.asr_examples) to a bundle, checked against Hugging Face: the
log-mel frontend against WhisperFeatureExtractor, and the greedy tokens and the transcript of our runner against
`generate(input_features)` on a seeded 2 s clip."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from litert_torch import generative
from litert_torch.errors import InvalidArgumentError, LiteRTTorchError, ModelFileError
from litert_torch.generative import asr_examples, asr_runner
from litert_torch.generative.asr import UnsupportedAsrModelError
from litert_torch.generative.asr_frontend import AudioTooLongError, LogMelParameters, log_mel, mel_filter_bank
from litert_torch.generative.config import UnsupportedModelError
from litert_torch.generative.export_hf import export

transformers = pytest.importorskip("transformers")
MIN_TOKENS = 16  # the fewest generated tokens a comparison covers


def _hf_tokens(model_dir: str, audio: np.ndarray, **kwargs) -> list[int]:
    """What Hugging Face's Whisper generates for `audio`, with the directory's own generation config."""
    import torch

    transformers.logging.set_verbosity_error()
    hf = transformers.WhisperForConditionalGeneration.from_pretrained(model_dir).eval()
    features = transformers.WhisperFeatureExtractor.from_pretrained(model_dir)(
        audio, sampling_rate=16000, return_tensors="pt").input_features
    with torch.no_grad():
        return hf.generate(features, **kwargs)[0].tolist()


def _hf_text(model_dir: str, ids: list[int]) -> str:
    return transformers.AutoTokenizer.from_pretrained(model_dir).decode(ids, skip_special_tokens=True)


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    """The tiny Whisper's directory and its float bundle."""
    folder = tmp_path_factory.mktemp("whisper")
    model_dir = asr_examples.save_tiny_whisper(str(folder / "model"))
    bundle = export.export(model=model_dir, output_dir=str(folder / "out"), quantization_recipe="none")
    return model_dir, bundle


# ---- the frontend ------------------------------------------------------------------------------------------------
def test_mel_filter_bank_matches_transformers():
    from transformers.audio_utils import mel_filter_bank as reference

    for bins in (80, 128):
        ours = mel_filter_bank(201, bins, 16000)
        ref = reference(num_frequency_bins=201, num_mel_filters=bins, min_frequency=0.0, max_frequency=8000.0,
                        sampling_rate=16000, norm="slaney", mel_scale="slaney")
        np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seconds, seed, bins", [(2.0, 0, 80), (30.0, 1, 80), (0.3, 2, 128), (7.5, 3, 128)])
def test_log_mel_matches_whisper_feature_extractor(seconds, seed, bins):
    audio = asr_examples.noise(seconds, seed) * (1 + seed)
    extractor = transformers.WhisperFeatureExtractor(feature_size=bins)
    ours = log_mel(audio, LogMelParameters(feature_size=bins))
    assert ours.shape == (1, bins, 3000) and ours.dtype == np.float32
    reference = extractor(audio, sampling_rate=16000, return_tensors="np").input_features  # torch's STFT
    assert np.abs(ours - reference).max() <= 5e-5
    padded = np.zeros(extractor.n_samples, np.float32)
    padded[:audio.size] = audio
    numpy_path = extractor._np_extract_fbank_features(padded[None], "cpu")  # its numpy STFT, the same arithmetic
    assert np.abs(ours - numpy_path).max() <= 1e-6


def test_log_mel_refusals():
    params = LogMelParameters()
    with pytest.raises(AudioTooLongError, match="30 s"):
        log_mel(np.zeros(16000 * 30 + 1, np.float32), params)
    with pytest.raises(InvalidArgumentError, match="1-D"):
        log_mel(np.zeros((2, 100), np.float32), params)
    with pytest.raises(InvalidArgumentError, match="no samples"):
        log_mel(np.zeros(0, np.float32), params)


# ---- the bundle and the runner -----------------------------------------------------------------------------------
def test_transcribe_matches_generate(whisper):
    model_dir, bundle = whisper
    audio = asr_examples.noise(2.0, seed=0)
    runner = generative.load(bundle)
    assert isinstance(runner, generative.AsrRunner)
    ids = runner.transcribe_ids(audio, sampling_rate=16000)
    reference = _hf_tokens(model_dir, audio)
    assert len(reference) >= MIN_TOKENS and len(set(reference)) > 3  # a transcript, not one token repeated
    assert ids == reference
    assert runner.transcribe(audio, sampling_rate=16000) == _hf_text(model_dir, reference)


@pytest.mark.parametrize("seed, seconds", [(5, 2.0), (6, 11.0)])
def test_transcribe_other_clips(whisper, seed, seconds):
    model_dir, bundle = whisper
    audio = asr_examples.noise(seconds, seed=seed) * 2
    assert generative.load(bundle).transcribe_ids(audio, 16000) == _hf_tokens(model_dir, audio)


def test_max_new_tokens_as_generate(whisper):
    model_dir, bundle = whisper
    audio = asr_examples.noise(2.0, seed=1)
    runner = generative.load(bundle)
    assert runner.transcribe_ids(audio, max_new_tokens=MIN_TOKENS) == _hf_tokens(model_dir, audio,
                                                                                  max_new_tokens=MIN_TOKENS)
    assert runner.transcribe_ids(audio, max_new_tokens=0) == []
    with pytest.raises(InvalidArgumentError):
        runner.transcribe_ids(audio, max_new_tokens=-1)


def test_runner_refusals(whisper):
    _, bundle = whisper
    runner = generative.load(bundle)
    with pytest.raises(InvalidArgumentError, match="8000 Hz"):
        runner.transcribe(asr_examples.noise(1.0, sampling_rate=8000), sampling_rate=8000)
    with pytest.raises(AudioTooLongError, match="split it"):
        runner.transcribe(asr_examples.noise(31.0))


def _variant(tmp_path, model_dir: str, name: str, generation: dict) -> str:
    """A copy of `model_dir` whose generation config has the fields of `generation` (None removes one)."""
    path = str(tmp_path / name)
    shutil.copytree(model_dir, path)
    config_file = os.path.join(path, "generation_config.json")
    config = json.load(open(config_file))
    for key, value in generation.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    json.dump(config, open(config_file, "w"))
    return path


def test_end_of_text_and_a_shorter_prompt(whisper, tmp_path):
    """No forced language or task (the prompt: start of transcript, no timestamps), and a stop token that the
    model generates: the tokens stop before it, as generate's do."""
    model_dir, _ = whisper
    audio = asr_examples.noise(2.0, seed=0)
    plain = _variant(tmp_path, model_dir, "plain", {"forced_decoder_ids": None})
    tokens = _hf_tokens(plain, audio)
    stop = tokens[MIN_TOKENS]  # a token generate reaches after MIN_TOKENS others
    first = tokens.index(stop)
    stopping = _variant(tmp_path, model_dir, "stopping", {"forced_decoder_ids": None, "eos_token_id": stop})
    bundle = export.export(model=stopping, output_dir=str(tmp_path / "out"), quantization_recipe="none")
    runner = generative.load(bundle)
    assert runner.config.prompt == [asr_examples.special_ids(runner_tokenizer(stopping))[t]
                                    for t in ("<|startoftranscript|>", "<|notimestamps|>")]
    ids = runner.transcribe_ids(audio)
    reference = _hf_tokens(stopping, audio)
    assert ids == reference == tokens[:first]
    assert runner.transcribe(audio) == _hf_text(stopping, reference)


def runner_tokenizer(model_dir: str):
    return transformers.AutoTokenizer.from_pretrained(model_dir)


def test_quantized_bundle(whisper, tmp_path):
    """The default recipe (int8 weights): smaller, and it transcribes; how many leading tokens agree with the
    float model is reported, not hidden."""
    model_dir, float_bundle = whisper
    bundle = export.export(model=model_dir, output_dir=str(tmp_path / "int8"), keep_temporary_files=True)
    assert sorted(os.listdir(tmp_path / "int8")) == ["asr_config.json", "decoder.tflite", "encoder.tflite",
                                                      "model.litertlm", "tokenizer.json"]
    assert os.path.getsize(bundle) < 0.75 * os.path.getsize(float_bundle)
    audio = asr_examples.noise(2.0, seed=0)
    ids = generative.load(bundle).transcribe_ids(audio)
    reference = _hf_tokens(model_dir, audio)
    agree = next((i for i, (a, b) in enumerate(zip(ids, reference)) if a != b), min(len(ids), len(reference)))
    print(f"int8 weights: {agree} of {len(reference)} leading tokens equal Hugging Face's")
    assert ids and len(ids) <= generative.load(bundle).config.max_new_tokens()


def _constant_types(tflite: bytes) -> set[str]:
    """The element types of a model's constant tensors other than integer indices and shapes."""
    from litert_torch.flatbuffer.reader import read_model

    return {str(t.dtype) for g in read_model(tflite).subgraphs for op in g.ops for t in op.inputs
            if t is not None and t.is_constant and t.dtype not in (np.int32, np.int64, np.bool_)}


def test_audio_encoder_quantization_recipe(whisper, tmp_path):
    """`audio_encoder_quantization_recipe` quantizes the encoder section by its own recipe (int8 weights here)
    and `quantization_recipe` the decoder (fp16 here): each section's weights have its recipe's types, and the
    bundle transcribes; without it the encoder takes the decoder's recipe."""
    model_dir, float_bundle = whisper
    bundle = export.export(model=model_dir, output_dir=str(tmp_path / "mixed"), quantization_recipe="fp16",
                           audio_encoder_quantization_recipe="dynamic_wi8_afp32")
    read = asr_runner.read_asr_bundle(bundle)
    assert "int8" in _constant_types(read.encoder) and "float16" not in _constant_types(read.encoder)
    assert "float16" in _constant_types(read.decoder) and "int8" not in _constant_types(read.decoder)
    float_read = asr_runner.read_asr_bundle(float_bundle)
    assert _constant_types(float_read.encoder) == _constant_types(float_read.decoder) == {"float32"}
    audio = asr_examples.noise(2.0, seed=0)
    ids = generative.load(bundle).transcribe_ids(audio)
    reference = _hf_tokens(model_dir, audio)
    agree = next((i for i, (a, b) in enumerate(zip(ids, reference)) if a != b), min(len(ids), len(reference)))
    print(f"int8 encoder, fp16 decoder: {agree} of {len(reference)} leading tokens equal Hugging Face's")
    assert ids and generative.load(bundle).transcribe(audio) == _hf_text(model_dir, ids)


def test_bundle_sections(whisper):
    _, bundle = whisper
    assert asr_runner.is_asr_bundle(bundle)
    read = asr_runner.read_asr_bundle(bundle)
    from ai_edge_litert.interpreter import Interpreter

    encoder = Interpreter(model_content=read.encoder).get_signature_list()
    decoder = Interpreter(model_content=read.decoder).get_signature_list()
    assert list(encoder) == ["encode"] and encoder["encode"]["inputs"] == ["input_features"]
    assert sorted(encoder["encode"]["outputs"]) == sorted(f"cross_{k}_{i}" for i in range(2) for k in "kv")
    assert sorted(decoder) == ["decode", "prefill_4"]
    caches = {f"kv_cache_{k}_{i}" for i in range(2) for k in "kv"}
    assert set(decoder["decode"]["outputs"]) == caches | {"logits"}
    assert set(decoder["decode"]["inputs"]) == caches | {"tokens", "input_pos"} | set(encoder["encode"]["outputs"])
    assert read.config.max_target_positions == 64 and read.config.frontend == LogMelParameters()


def test_damaged_bundle(whisper, tmp_path):
    _, bundle = whisper
    data = open(bundle, "rb").read()
    damaged = tmp_path / "damaged.litertlm"
    damaged.write_bytes(data[: len(data) // 2])
    with pytest.raises(LiteRTTorchError):
        asr_runner.load_asr(str(damaged))
    (tmp_path / "not.litertlm").write_bytes(b"not a bundle")
    assert not asr_runner.is_asr_bundle(str(tmp_path / "not.litertlm"))


# ---- the task and the refusals -------------------------------------------------------------------------------------
def test_task_read_from_the_config(whisper, tmp_path):
    model_dir, _ = whisper
    assert export.resolve_task(None, model_dir) == "automatic_speech_recognition"
    with pytest.raises(UnsupportedModelError, match="automatic_speech_recognition"):
        export.resolve_task("text_generation", model_dir)
    with pytest.raises(UnsupportedModelError, match="automatic_speech_recognition"):
        export.resolve_task("text_embedding", model_dir)
    with pytest.raises(InvalidArgumentError, match="automatic_speech_recognition"):
        export.resolve_task("speech", model_dir)


@pytest.mark.parametrize("generation, match", [
    ({"return_timestamps": True}, "timestamp"),
    ({"num_beams": 2}, "beam search"),
    ({"do_sample": True}, "sampling"),
    ({"repetition_penalty": 1.2}, "repetition penalty"),
    ({"no_speech_threshold": 0.6}, "no-speech"),
    ({"forced_decoder_ids": [[2, 323]]}, "forced_decoder_ids"),
])
def test_refused_generation_configs(whisper, tmp_path, generation, match):
    model_dir, _ = whisper
    path = _variant(tmp_path, model_dir, "refused", generation)
    with pytest.raises(UnsupportedAsrModelError, match=match):
        export.export(model=path, output_dir=str(tmp_path / "out"), quantization_recipe="none")
    assert not os.path.exists(tmp_path / "out" / "model.litertlm")


@pytest.mark.slow  # a third export and four generate runs: ~50 s
def test_language_detection(whisper, tmp_path):
    """A multilingual config (lang_to_id, no forced language): the language is detected from the audio as
    Whisper's generate detects it, then the transcript follows."""
    model_dir, _ = whisper
    ids = asr_examples.special_ids(runner_tokenizer(model_dir))
    languages = {"<|en|>": ids["<|en|>"], "<|fr|>": ids["<|fr|>"]}
    path = _variant(tmp_path, model_dir, "multilingual", {
        "forced_decoder_ids": [[1, None], [2, ids["<|transcribe|>"]]], "lang_to_id": languages,
        "task_to_id": {"transcribe": ids["<|transcribe|>"]}, "is_multilingual": True})
    bundle = export.export(model=path, output_dir=str(tmp_path / "out"), quantization_recipe="none")
    runner = generative.load(bundle)
    assert runner.config.prompt == [ids["<|startoftranscript|>"], -1, ids["<|transcribe|>"], ids["<|notimestamps|>"]]
    import torch

    hf = transformers.WhisperForConditionalGeneration.from_pretrained(path).eval()
    extractor = transformers.WhisperFeatureExtractor.from_pretrained(path)
    detected = set()
    for seed in (0, 1, 2, 3):
        audio = asr_examples.noise(2.0, seed=seed) * (1 + seed)
        features = extractor(audio, sampling_rate=16000, return_tensors="pt").input_features
        with torch.no_grad():
            language = int(hf.detect_language(features)[0])
        detected.add(language)
        assert runner.detect_language(audio) == runner.tokenizer.id_to_token(language)
        assert runner.transcribe_ids(audio) == _hf_tokens(path, audio)
    print(f"languages detected over 4 clips: {sorted(detected)}")


def test_language_and_task_from_the_generation_config(whisper, tmp_path):
    """`language` and `task` with lang_to_id / task_to_id give the prompt Whisper's generate starts from."""
    from litert_torch.generative.asr import whisper_prompt

    model_dir, _ = whisper
    ids = asr_examples.special_ids(runner_tokenizer(model_dir))
    generation = transformers.GenerationConfig.from_pretrained(model_dir)
    generation.forced_decoder_ids = None
    generation.lang_to_id = {"<|en|>": ids["<|en|>"]}
    generation.task_to_id = {"transcribe": ids["<|transcribe|>"]}
    generation.language = "en"
    expected = [ids[t] for t in ("<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>")]
    assert whisper_prompt(generation, {}) == (expected, [])


def test_refused_models_and_options(whisper, tmp_path):
    model_dir, _ = whisper
    moonshine = tmp_path / "moonshine"
    moonshine.mkdir()
    (moonshine / "config.json").write_text(json.dumps({
        "model_type": "moonshine", "architectures": ["MoonshineForConditionalGeneration"],
        "decoder_num_attention_heads": 8, "decoder_num_key_value_heads": 2}))
    assert export.resolve_task(None, str(moonshine)) == "automatic_speech_recognition"
    with pytest.raises(UnsupportedAsrModelError, match="decoder_num_key_value_heads"):
        export.export(model=str(moonshine), output_dir=str(tmp_path / "out"))
    with pytest.raises(InvalidArgumentError, match="input_sec"):
        export.export(model=model_dir, output_dir=str(tmp_path / "out"), input_sec=10)
    with pytest.raises(InvalidArgumentError, match="input_sec"):  # an option of this task only
        export.export(model=str(tmp_path / "llm"), output_dir=str(tmp_path / "out"), task="text_generation",
                      input_sec=10)
    for option in ({"prefill_lengths": [8]}, {"cache_length": 128}, {"bundle_litert_lm": False}):
        with pytest.raises(InvalidArgumentError, match=next(iter(option)).split("=")[0]):
            export.export(model=model_dir, output_dir=str(tmp_path / "out"), **option)
    no_frontend = tmp_path / "no_frontend"
    shutil.copytree(model_dir, no_frontend)
    os.unlink(no_frontend / "preprocessor_config.json")
    with pytest.raises(ModelFileError, match="preprocessor_config.json"):
        export.export(model=str(no_frontend), output_dir=str(tmp_path / "out"))
    dithered = tmp_path / "dithered"
    shutil.copytree(model_dir, dithered)
    pre = json.load(open(dithered / "preprocessor_config.json"))
    pre["dither"] = 1e-5
    json.dump(pre, open(dithered / "preprocessor_config.json", "w"))
    with pytest.raises(UnsupportedAsrModelError, match="dither"):
        export.export(model=str(dithered), output_dir=str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out")


# ---- Moonshine ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def moonshine(tmp_path_factory):
    """The tiny Moonshine's directory and its float bundle with a 2 s encoder window."""
    folder = tmp_path_factory.mktemp("moonshine")
    model_dir = asr_examples.save_tiny_moonshine(str(folder / "model"))
    bundle = export.export(model=model_dir, output_dir=str(folder / "out"), quantization_recipe="none", input_sec=2)
    return model_dir, bundle


def _moonshine_tokens(model_dir: str, audio: np.ndarray, window: int | None = None, **kwargs) -> list[int]:
    """Hugging Face's Moonshine `generate` on the raw samples (with `window`, zero-padded to it with the
    attention mask, as a padded batch), without the start token it returns first and the end-of-text token it
    returns last."""
    import torch

    transformers.logging.set_verbosity_error()
    hf = transformers.MoonshineForConditionalGeneration.from_pretrained(model_dir).eval()
    values = torch.from_numpy(audio)[None]
    mask = None
    if window is not None:
        values = torch.zeros(1, window)
        values[0, :audio.size] = torch.from_numpy(audio)
        mask = torch.zeros(1, window, dtype=torch.int64)
        mask[0, :audio.size] = 1
    with torch.no_grad():
        out = hf.generate(values, attention_mask=mask, **kwargs)[0].tolist()
    assert out[0] == hf.generation_config.decoder_start_token_id
    return out[1:-1] if out[-1] == hf.generation_config.eos_token_id else out[1:]


def test_moonshine_transcribe_matches_generate(moonshine):
    """A clip as long as the encoder's window: the tokens of generate on the raw samples."""
    model_dir, bundle = moonshine
    runner = generative.load(bundle)
    audio = asr_examples.noise(2.0, seed=0)
    reference = _moonshine_tokens(model_dir, audio)
    assert len(reference) >= MIN_TOKENS and len(set(reference)) > 3
    assert runner.transcribe_ids(audio) == reference
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    assert runner.transcribe(audio) == tok.decode(reference, skip_special_tokens=True)
    assert runner.transcribe_ids(audio, max_new_tokens=10) == _moonshine_tokens(model_dir, audio, max_new_tokens=10)


def test_moonshine_shorter_clip_is_a_padded_batch(moonshine):
    """A shorter clip is padded to the window with its mask: the tokens of generate on the padded samples with the
    attention mask (the encoder downsamples the mask; the decoder's cross-attention skips the padding)."""
    model_dir, bundle = moonshine
    audio = asr_examples.noise(1.3, seed=1)
    assert generative.load(bundle).transcribe_ids(audio) == _moonshine_tokens(model_dir, audio, window=32000)


def test_moonshine_refusals(moonshine, tmp_path):
    model_dir, bundle = moonshine
    runner = generative.load(bundle)
    with pytest.raises(AudioTooLongError, match="input_sec"):
        runner.transcribe(asr_examples.noise(2.5))
    with pytest.raises(generative.CacheFullError, match="cache of 64"):
        runner.transcribe_ids(asr_examples.noise(1.0), max_new_tokens=100)
    normalized = tmp_path / "normalized"
    shutil.copytree(model_dir, normalized)
    pre = json.load(open(normalized / "preprocessor_config.json"))
    pre["do_normalize"] = True
    json.dump(pre, open(normalized / "preprocessor_config.json", "w"))
    with pytest.raises(UnsupportedAsrModelError, match="do_normalize"):
        export.export(model=str(normalized), output_dir=str(tmp_path / "out"))
    with pytest.raises(InvalidArgumentError, match="input_sec"):
        export.export(model=model_dir, output_dir=str(tmp_path / "out"), input_sec=0)


# ---- the command line and the docs -------------------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.path.join(root, "cli")]))
    return subprocess.run([sys.executable, "-m", "litert_convert", *args], capture_output=True, text=True, env=env)


@pytest.mark.slow  # a fresh process that imports PyTorch and converts: ~25 s
def test_cli_export_hf_and_inspect(whisper, moonshine, tmp_path):
    model_dir, _ = whisper
    out = str(tmp_path / "model.litertlm")
    result = _cli("export-hf", model_dir, "-o", out, "--quantize", "none")  # the task read from config.json
    assert result.returncode == 0, result.stderr
    audio = asr_examples.noise(2.0, seed=0)
    assert generative.load(out).transcribe_ids(audio) == _hf_tokens(model_dir, audio)
    result = _cli("inspect", out)
    assert result.returncode == 0, result.stderr
    for expected in ("speech-to-text bundle (whisper)", "tf_lite_audio_encoder_hw (encode)", "signature 'prefill_4'",
                     "signature 'decode'", "encoder signature 'encode'", "cross_k_0"):
        assert expected in result.stdout
    result = _cli("inspect", out, "--json")
    assert json.loads(result.stdout)["bundle"]["kind"] == "automatic_speech_recognition"
    result = _cli("export-hf", model_dir, "-o", str(tmp_path / "x.litertlm"), "--cache", "64")
    assert result.returncode == 2 and "--cache" in result.stderr
    result = _cli("export-hf", str(tmp_path), "-o", str(tmp_path / "x.litertlm"), "--task", "text_generation",
                  "--input-sec", "2")
    assert result.returncode == 2 and "--input-sec" in result.stderr
    result = _cli("export-hf", model_dir, "-o", str(tmp_path / "x.tflite"), "--task", "automatic_speech_recognition")
    assert result.returncode == 2 and ".litertlm" in result.stderr
    assert not os.path.exists(tmp_path / "x.litertlm")
    moonshine_dir, _ = moonshine
    out = str(tmp_path / "moonshine.litertlm")
    result = _cli("export-hf", moonshine_dir, "-o", out, "--input-sec", "2", "--quantize", "none")
    assert result.returncode == 0, result.stderr
    result = _cli("inspect", out)
    assert "speech-to-text bundle (moonshine)" in result.stdout and "windows of 32000 samples" in result.stdout
    assert "cross_mask" in result.stdout


@pytest.mark.slow  # a fresh process that builds, converts and runs: ~25 s
def test_docs_examples_run_from_any_folder(tmp_path):
    """docs/ASR.md's Python blocks, run in order as one script from an unrelated folder (they build their own tiny
    model and import nothing from tests)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    text = open(os.path.join(root, "docs", "ASR.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks and not any("from tests" in b or "import tests" in b for b in blocks)
    script = tmp_path / "example.py"
    script.write_text("\n".join(blocks))
    env = dict(os.environ, PYTHONPATH=root)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tokens equal: True" in result.stdout and "text equal: True" in result.stdout
    assert "moonshine tokens equal: True" in result.stdout


def test_cli_section_recipes(whisper, tmp_path):
    """`export-hf --audio-quantize` gives the encoder its own recipe beside `--quantize`; the image+text flag
    is refused for speech, and nothing is written."""
    from click.testing import CliRunner

    from litert_convert.main import cli

    model_dir, _ = whisper
    out = str(tmp_path / "mixed.litertlm")
    result = CliRunner().invoke(cli, ["export-hf", model_dir, "-o", out, "--quantize", "fp16", "--audio-quantize",
                                      "dynamic_wi8_afp32", "--quiet"])
    assert result.exit_code == 0, result.output
    read = asr_runner.read_asr_bundle(out)
    assert "int8" in _constant_types(read.encoder) and "float16" not in _constant_types(read.encoder)
    assert "float16" in _constant_types(read.decoder) and "int8" not in _constant_types(read.decoder)
    refused = str(tmp_path / "refused.litertlm")
    result = CliRunner().invoke(cli, ["export-hf", model_dir, "-o", refused, "--vision-quantize", "none"])
    assert result.exit_code == 2 and "--vision-quantize does not apply" in result.output
    assert not os.path.exists(refused)
