"""The RoPE tables of a decoder, computed from its config once for both LLM builders: per layer type, cos and
sin of positions 0..C-1 over one half of each head's rotated features (Hugging Face's rows are each angle twice),
in transformers' order of operations for each RoPE type, with powers, cosines and sines correctly rounded in
float64 before they are rounded to float32 (PyTorch's float32 ones are within an ulp or two of those). Nothing
here needs PyTorch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from litert_torch.generative.config import PARTIAL_ROTARY, ROPE_PER_LAYER_TYPE, LlmConfig, UnsupportedModelError
from litert_torch.generative.weights import ModelSourceError


def _rope_params_by_type(cfg: LlmConfig, rope_parameters: Any) -> dict[str, Any]:
    if cfg.family in ROPE_PER_LAYER_TYPE and isinstance(rope_parameters, dict) \
            and all(isinstance(v, dict) for v in rope_parameters.values()):
        return {t: rope_parameters.get(t) for t in cfg.attention_types}
    return {t: rope_parameters for t in cfg.attention_types}


def rope_tables(cfg: LlmConfig, rope_parameters: Any, length: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per layer type, cos and sin [length, R/2] of positions 0..length-1: one half of the rows Hugging Face's
    rotary module computes (its rows are two equal halves), in float32 as transformers' RoPE functions compute
    them (`rope_parameters` standardised as its config classes standardise them, `source.read_config`), but
    with powers, cosines and sines correctly rounded where PyTorch's are within an ulp or two. The
    bounded types (LongRoPE, dynamic NTK) give the tables of positions within their original length, which
    `config.check_cache_length` holds the cache to."""
    tables = {}
    positions = np.arange(length, dtype=np.float32)
    for layer_type, params in _rope_params_by_type(cfg, rope_parameters).items():
        if not params:
            raise UnsupportedModelError("config.rope_parameters is not set: the exporter needs the RoPE of every "
                                        "layer type")
        try:  # the parameters' types were checked with the config (`config._check_rope`)
            inv_freq, scaling = _inv_freq(cfg, params, rope_parameters)
        except KeyError as exc:
            raise ModelSourceError(f"config.rope_parameters has no {exc.args[0]!r}, which its RoPE type "
                                        f"{params.get('rope_type', 'default')!r} needs") from None
        freqs = (positions[:, None] * inv_freq[None, :]).astype(np.float64)
        cos, sin = np.cos(freqs).astype(np.float32), np.sin(freqs).astype(np.float32)  # correctly rounded
        if scaling != 1.0:
            cos, sin = cos * np.float32(scaling), sin * np.float32(scaling)
        tables[layer_type] = (cos, sin)
    return tables


def _inv_freq(cfg: LlmConfig, params: Mapping[str, Any], rope_parameters: Any) -> tuple[np.ndarray, float]:
    """The inverse frequencies [R/2] of one RoPE and the factor its cos and sin are scaled by: transformers'
    function for the type, in its order of operations (float32 arrays, Python floats for scalars)."""
    f32 = np.float32
    rope_type = params.get("rope_type", params.get("type", "default"))
    theta = params["rope_theta"]
    rotary = params.get("partial_rotary_factor", 1.0)
    if rope_type == "default" and cfg.family not in PARTIAL_ROTARY:
        rotary = 1.0  # the architectures' own default RoPE rotates every feature but Phi's and StableLM's
    dim = int(cfg.head_dim * rotary)

    def powers(base: float, count: int, divisor: int) -> np.ndarray:
        """f32(base) ** (2i / divisor) for i < count, each correctly rounded to float32 (the float32 powers of
        numpy and PyTorch are not, and differ in the last bit)."""
        exponents = (np.arange(0, 2 * count, 2, dtype=np.float32) / f32(divisor)).astype(np.float64)
        return (np.float64(f32(base)) ** exponents).astype(np.float32)

    if rope_type in ("default", "linear", "llama3"):
        inv_freq = (f32(1.0) / powers(theta, (dim + 1) // 2, dim)).astype(np.float32)
        if rope_type == "linear":
            inv_freq = (inv_freq / f32(params["factor"])).astype(np.float32)
        elif rope_type == "llama3":
            inv_freq = _llama3(inv_freq, params)
        return inv_freq, 1.0
    if rope_type == "dynamic":  # at the model's own length, where Hugging Face's tables start
        seq = cfg.max_position_embeddings
        factor = params["factor"]
        base = theta * ((factor * seq / cfg.max_position_embeddings) - (factor - 1)) ** (dim / (dim - 2))
        return (f32(1.0) / powers(base, (dim + 1) // 2, dim)).astype(np.float32), 1.0
    if rope_type == "proportional":  # a fraction of the angles rotate; the rest stay 0 (cos 1, sin 0)
        head_dim = cfg.head_dim
        angles = int(rotary * head_dim // 2)
        inv_freq = np.zeros(head_dim // 2, np.float32)
        inv_freq[:angles] = f32(1.0) / powers(theta, angles, head_dim)
        return (inv_freq / f32(params.get("factor", 1.0))).astype(np.float32), 1.0
    original = params["original_max_position_embeddings"]
    factor = params.get("factor")
    if factor is None:
        factor = cfg.max_position_embeddings / original
    attention = params.get("attention_factor")
    if rope_type == "longrope":  # the short factors: positions within the original length
        if attention is None:
            attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
        short = np.asarray(params["short_factor"], np.float32)
        if short.shape != ((dim + 1) // 2,):
            raise ModelSourceError(f"config.rope_parameters.short_factor has {short.size} entries, where the "
                                        f"rotated features of a head take {(dim + 1) // 2}")
        return (f32(1.0) / (short * powers(theta, (dim + 1) // 2, dim))).astype(np.float32), float(attention)
    if rope_type != "yarn":
        raise UnsupportedModelError(f"config.rope_parameters.rope_type = {rope_type!r} is not supported")
    if attention is None:
        mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
        attention = (_yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
                     if mscale and mscale_all_dim else _yarn_mscale(factor))
    fast, slow = params.get("beta_fast") or 32, params.get("beta_slow") or 1

    def correction(rotations: float) -> float:  # the dimension at which a wavelength makes `rotations` turns
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction(fast), correction(slow)
    truncate = rope_parameters.get("truncate", True) if isinstance(rope_parameters, dict) else True
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    pos = powers(theta, (dim + 1) // 2, dim)
    extrapolation = (f32(1.0) / pos).astype(np.float32)
    interpolation = (f32(1.0) / (f32(factor) * pos)).astype(np.float32)
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - f32(low)) / f32(high - low), 0, 1).astype(np.float32)
    keep = (f32(1) - ramp).astype(np.float32)
    return (interpolation * (f32(1) - keep) + extrapolation * keep).astype(np.float32), float(attention)


def _yarn_mscale(scale: float, mscale: float = 1) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _llama3(inv_freq: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
    """Llama 3's frequency scaling: long wavelengths divided by `factor`, short ones kept, a smooth blend
    between (float32, in transformers' order of operations)."""
    f32 = np.float32
    factor, low, high = f32(params["factor"]), f32(params["low_freq_factor"]), f32(params["high_freq_factor"])
    old = f32(params["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = (f32(2 * math.pi) / inv_freq).astype(np.float32)
    scaled = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq).astype(np.float32)
    smooth = ((old / wavelen - low) / (high - low)).astype(np.float32)
    smoothed = ((f32(1) - smooth) * scaled / factor + smooth * scaled).astype(np.float32)
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)
