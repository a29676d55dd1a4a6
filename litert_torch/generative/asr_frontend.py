"""The audio frontends in numpy. Moonshine's encoder takes the raw samples (`raw_window`: zero-padded to the
encoder's fixed window, with a mask of the real samples). Whisper's: raw 16 kHz audio -> the log-mel
`input_features` its encoder takes, computed
as transformers' `WhisperFeatureExtractor` computes them (to ~1e-5), from the parameters of the model's
preprocessor_config.json, which the bundle carries.

    audio, padded with zeros (or cut) to `chunk_length` seconds
    -> STFT: a periodic Hann window of `n_fft` samples every `hop_length` samples, the signal reflected by
       n_fft / 2 at both ends (centered frames), power spectrum |X|^2
    -> the Slaney-style mel filter bank (`feature_size` filters from 0 to 8 kHz, area-normalised), floor 1e-10, log10
    -> the last frame dropped, values below (max - 8) raised to it, then (x + 4) / 4
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from litert_torch.errors import InvalidArgumentError, ModelInputError


class AudioTooLongError(ModelInputError):
    """The audio is longer than the encoder's window (30 s for Whisper)."""


@dataclass(frozen=True)
class LogMelParameters:
    """What a `WhisperFeatureExtractor` is built from (preprocessor_config.json)."""

    feature_size: int = 80
    sampling_rate: int = 16000
    hop_length: int = 160
    chunk_length: int = 30
    n_fft: int = 400
    padding_value: float = 0.0

    @property
    def n_samples(self) -> int:
        """The samples of one window: `chunk_length` seconds."""
        return self.chunk_length * self.sampling_rate

    @property
    def frames(self) -> int:
        """The log-mel frames of one window (what the encoder takes)."""
        return self.n_samples // self.hop_length

    def to_json(self) -> dict[str, Any]:
        return {"kind": "log_mel", **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "LogMelParameters":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class RawAudioParameters:
    """A raw-waveform encoder's input (Moonshine's, read from its Wav2Vec2FeatureExtractor config): `samples`
    (the encoder's fixed window) at `sampling_rate`, padded with `padding_value`."""

    samples: int
    sampling_rate: int = 16000
    padding_value: float = 0.0

    @property
    def seconds(self) -> float:
        return self.samples / self.sampling_rate

    def to_json(self) -> dict[str, Any]:
        return {"kind": "raw", **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RawAudioParameters":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def frontend_from_json(data: dict[str, Any]) -> "LogMelParameters | RawAudioParameters":
    """The frontend parameters a bundle stores, by their `kind`."""
    return RawAudioParameters.from_json(data) if data.get("kind") == "raw" else LogMelParameters.from_json(data)


def _samples(audio: Any, limit: int, sampling_rate: int, what: str) -> np.ndarray:
    samples = np.asarray(audio, dtype=np.float64)
    if samples.ndim != 1:
        raise InvalidArgumentError(f"the audio must be a 1-D array of mono samples, got shape {samples.shape}")
    if samples.size == 0:
        raise InvalidArgumentError("the audio has no samples")
    if samples.size > limit:
        raise AudioTooLongError(
            f"{samples.size / sampling_rate:.2f} s of audio exceeds the encoder's window of "
            f"{limit / sampling_rate:g} s ({limit} samples{what}): split it into utterances of at most "
            f"{limit / sampling_rate:g} s")
    return samples


def raw_window(audio: Any, params: RawAudioParameters) -> tuple[np.ndarray, np.ndarray]:
    """`input_values` float32 [1, samples] (the audio, then `padding_value`) and `attention_mask` int32
    [1, samples] (1 for the audio's samples): what Hugging Face's feature extractor gives for a batch padded to
    the window. Audio longer than the window is an AudioTooLongError."""
    samples = _samples(audio, params.samples, params.sampling_rate, "; export with a larger input_sec")
    values = np.full((1, params.samples), params.padding_value, np.float32)
    values[0, :samples.size] = samples
    mask = np.zeros((1, params.samples), np.int32)
    mask[0, :samples.size] = 1
    return values, mask


def hz_to_mel(freq: Any) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above."""
    freq = np.asarray(freq, np.float64)
    mels = 3.0 * freq / 200.0
    log_step = 27.0 / np.log(6.4)
    return np.where(freq >= 1000.0, 15.0 + np.log(np.maximum(freq, 1e-10) / 1000.0) * log_step, mels)


def mel_to_hz(mels: Any) -> np.ndarray:
    """The inverse of `hz_to_mel`."""
    mels = np.asarray(mels, np.float64)
    freq = 200.0 * mels / 3.0
    log_step = np.log(6.4) / 27.0
    return np.where(mels >= 15.0, 1000.0 * np.exp(log_step * (mels - 15.0)), freq)


def mel_filter_bank(num_frequency_bins: int, num_mel_filters: int, sampling_rate: int,
                    min_frequency: float = 0.0, max_frequency: float = 8000.0) -> np.ndarray:
    """Triangular filters evenly spaced on the Slaney mel scale, each scaled to unit area (Slaney's
    normalisation): [num_frequency_bins, num_mel_filters]."""
    mel_points = np.linspace(hz_to_mel(min_frequency), hz_to_mel(max_frequency), num_mel_filters + 2)
    edges = mel_to_hz(mel_points)  # the filters' edges and centres, in Hz
    fft_freqs = np.linspace(0, sampling_rate // 2, num_frequency_bins)
    widths = np.diff(edges)
    slopes = edges[None, :] - fft_freqs[:, None]
    rising = -slopes[:, :-2] / widths[:-1]
    falling = slopes[:, 2:] / widths[1:]
    filters = np.maximum(0.0, np.minimum(rising, falling))
    return filters * (2.0 / (edges[2:num_mel_filters + 2] - edges[:num_mel_filters]))[None, :]


def log_mel(audio: Any, params: LogMelParameters) -> np.ndarray:
    """The encoder's `input_features` float32 [1, feature_size, frames] for one utterance of at most
    `chunk_length` seconds (mono, float, at `params.sampling_rate`); longer audio is an AudioTooLongError."""
    samples = _samples(audio, params.n_samples, params.sampling_rate, "")
    padded = np.full(params.n_samples, params.padding_value, np.float64)
    padded[:samples.size] = samples
    n_fft, hop = params.n_fft, params.hop_length
    signal = np.pad(padded, n_fft // 2, mode="reflect")
    count = 1 + (signal.size - n_fft) // hop
    frames = np.lib.stride_tricks.as_strided(signal, (count, n_fft), (signal.strides[0] * hop, signal.strides[0]))
    window = np.hanning(n_fft + 1)[:-1]  # periodic Hann
    power = np.abs(np.fft.rfft(frames * window, n=n_fft, axis=1)) ** 2  # [frames, n_fft / 2 + 1]
    filters = mel_filter_bank(n_fft // 2 + 1, params.feature_size, params.sampling_rate)
    mel = np.log10(np.maximum(filters.T @ power.T, 1e-10))[:, :-1]  # [feature_size, frames]
    mel = np.maximum(mel, mel.max() - 8.0)
    return ((mel + 4.0) / 4.0).astype(np.float32)[None]
