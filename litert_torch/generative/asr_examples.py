"""Tiny demo speech models: a 2+2-layer `WhisperForConditionalGeneration` with random weights, a small byte-level
BPE tokenizer with Whisper's special tokens, the log-mel feature extractor and a generation config (and a tiny
Moonshine the same way), saved as model directories that `export(..., task="automatic_speech_recognition")`
reads. Their transcripts are noise; they are for trying the export and the runner without downloading a model
(docs/ASR.md uses them).

    from litert_torch.generative import asr_examples
    model_dir = asr_examples.save_tiny_whisper("tiny_whisper")
    moonshine_dir = asr_examples.save_tiny_moonshine("tiny_moonshine")
    audio = asr_examples.noise(2.0)          # 2 s of seeded noise at 16 kHz, float32

Needs `transformers` (the `llm` extra).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from litert_torch.generative.examples import CORPUS, spread_weights

# Whisper's special tokens, after the text tokens as in Whisper's vocabulary (its generate reads every id above
# <|notimestamps|> as a timestamp): the end of text (also the stop and padding token), the start of a
# transcript, two languages, the task, and "no timestamps"
SPECIAL_TOKENS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|fr|>", "<|transcribe|>", "<|notimestamps|>"]
SAMPLING_RATE = 16000


def whisper_tokenizer(vocab_size: int = 320) -> Any:
    """A byte-level BPE trained on `CORPUS`, as a transformers `WhisperTokenizer` with Whisper's special tokens
    after its `vocab_size` text tokens, in `SPECIAL_TOKENS`' order."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import WhisperTokenizer

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    whisper = WhisperTokenizer(vocab=model["vocab"], merges=merges)  # adds <|endoftext|>
    whisper.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[1:]})
    return whisper


def special_ids(tok: Any) -> dict[str, int]:
    """The id of each of `SPECIAL_TOKENS` in `tok`."""
    return {t: tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}


def tiny_whisper(tok: Any, seed: int = 0, max_target_positions: int = 64) -> Any:
    """A randomly initialised `WhisperForConditionalGeneration` (d_model 64, 2 encoder and 2 decoder layers, 4
    heads, 80 mel bins, Whisper's 1500 encoder positions, i.e. 30 s of audio) in eval mode, its weights spread so
    that the greedy transcript varies, for the tokenizer `tok`, and a generation config that forces the prompt
    <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|> and suppresses a few tokens."""
    import torch
    import transformers

    ids = special_ids(tok)
    torch.manual_seed(seed)
    config = transformers.WhisperConfig(
        vocab_size=len(tok), num_mel_bins=80, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
        max_source_positions=1500, max_target_positions=max_target_positions,
        decoder_start_token_id=ids["<|startoftranscript|>"], bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"])
    hf = spread_weights(transformers.WhisperForConditionalGeneration(config).eval(), std=0.3)
    hf.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"], bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"],
        no_timestamps_token_id=ids["<|notimestamps|>"],
        forced_decoder_ids=[[1, ids["<|en|>"]], [2, ids["<|transcribe|>"]]],
        suppress_tokens=[5, 6, 7], begin_suppress_tokens=[ids["<|endoftext|>"], 8], max_length=max_target_positions)
    return hf


def feature_extractor() -> Any:
    """Whisper's log-mel feature extractor: 80 mel bins, 16 kHz, 30 s windows."""
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor(feature_size=80, sampling_rate=SAMPLING_RATE)


def save_tiny_whisper(directory: str, seed: int = 0) -> str:
    """Save a tiny Whisper with its tokenizer and feature extractor into `directory` (created if needed) with
    `save_pretrained`, as a downloaded model directory is laid out, and return `directory`."""
    tok = whisper_tokenizer()
    hf = tiny_whisper(tok, seed)
    os.makedirs(directory, exist_ok=True)
    hf.save_pretrained(directory)
    tok.save_pretrained(directory)
    feature_extractor().save_pretrained(directory)
    return directory


def noise(seconds: float, seed: int = 0, sampling_rate: int = SAMPLING_RATE) -> np.ndarray:
    """`seconds` of seeded Gaussian noise (std 0.1) with a 440 Hz tone, float32 at `sampling_rate`."""
    rng = np.random.default_rng(seed)
    n = int(round(seconds * sampling_rate))
    t = np.arange(n) / sampling_rate
    return (0.1 * rng.standard_normal(n) + 0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


def tiny_moonshine(seed: int = 0, max_position_embeddings: int = 64) -> tuple[Any, Any]:
    """A randomly initialised `MoonshineForConditionalGeneration` (hidden 64, 2 encoder and 2 decoder layers, 4
    heads, rotary on 90% of each head) in eval mode, its weights spread so that the greedy transcript varies, with
    the byte-level BPE tokenizer of `litert_torch.generative.examples` (<s> starts the transcript, </s> ends it)
    and a generation config of `max_position_embeddings` tokens at most; returns (model, tokenizer)."""
    import torch
    import transformers

    from litert_torch.generative.examples import tokenizer

    tok = tokenizer()
    torch.manual_seed(seed)
    config = transformers.MoonshineConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, encoder_num_hidden_layers=2,
        decoder_num_hidden_layers=2, encoder_num_attention_heads=4, decoder_num_attention_heads=4,
        max_position_embeddings=max_position_embeddings, decoder_start_token_id=tok.bos_token_id,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    hf = spread_weights(transformers.MoonshineForConditionalGeneration(config).eval(), std=0.3)
    hf.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=tok.bos_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, max_length=max_position_embeddings)
    return hf, tok


def save_tiny_moonshine(directory: str, seed: int = 0) -> str:
    """Save a tiny Moonshine with its tokenizer and its raw-audio feature extractor (Wav2Vec2FeatureExtractor, as
    Moonshine's) into `directory` and return it."""
    from transformers import Wav2Vec2FeatureExtractor

    hf, tok = tiny_moonshine(seed)
    os.makedirs(directory, exist_ok=True)
    hf.save_pretrained(directory)
    tok.save_pretrained(directory)
    Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=SAMPLING_RATE, padding_value=0.0, do_normalize=False,
                             return_attention_mask=True).save_pretrained(directory)
    return directory
