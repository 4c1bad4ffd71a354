"""Rotary position embedding tables, computed on the host in float64 the way transformers does.

Rotation convention is HF's `rotate_half` (NeoX style): dimension i is paired with i + head_dim/2,
and both use frequency inv_freq[i]. The device reads one table row per position.
"""
from __future__ import annotations

import math

import numpy as np

from fixedgraph.errors import UnsupportedModel
from fixedgraph.models.config import ModelConfig

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "gguf_freq_factors")


def inv_freq(cfg: ModelConfig) -> np.ndarray:
    """Per-pair inverse frequencies after scaling: [head_dim // 2] float64."""
    dim = cfg.head_dim
    base = 1.0 / (cfg.rope_theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))  # [dim/2]
    scaling = cfg.rope_scaling
    rope_type = _rope_type(cfg)
    if rope_type == "default":
        return base
    if rope_type == "linear":
        return base / float(scaling["factor"])
    if rope_type == "llama3":
        return _llama3(base, scaling)
    if rope_type == "yarn":
        return _yarn(cfg, base)
    # llama.cpp stores Llama 3.1 style scaling as per-pair divisors (the rope_freqs tensor).
    factors = np.asarray(scaling["factors"], dtype=np.float64)
    assert factors.shape == base.shape, f"rope freq factors {factors.shape} != {base.shape}"
    return base / factors


def attention_factor(cfg: ModelConfig) -> float:
    """Scale multiplied into cos and sin (YaRN's mscale); 1.0 for every other rope type."""
    if _rope_type(cfg) != "yarn":
        return 1.0
    s = cfg.rope_scaling
    if s.get("attention_factor") is not None:
        return float(s["attention_factor"])
    factor = _yarn_factor(cfg)
    mscale, mscale_all_dim = s.get("mscale"), s.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return float(_yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim))
    return float(_yarn_mscale(factor))


def rope_table(cfg: ModelConfig, max_positions: int) -> np.ndarray:
    """(cos, sin) of position * inv_freq, times attention_factor: [max_positions, head_dim//2, 2] f32."""
    angles = np.arange(max_positions, dtype=np.float64)[:, None] * inv_freq(cfg)[None, :]  # [P, d/2]
    scale = attention_factor(cfg)
    table = np.empty((max_positions, cfg.head_dim // 2, 2), dtype=np.float64)
    table[..., 0] = np.cos(angles) * scale
    table[..., 1] = np.sin(angles) * scale
    return table.astype(np.float32)


def apply_rope(x: np.ndarray, positions: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Rotate x [tokens, heads, head_dim] at positions [tokens] with HF's rotate_half pairing."""
    half = x.shape[-1] // 2
    cs = table[positions]  # [tokens, half, 2]
    cos, sin = cs[:, None, :, 0], cs[:, None, :, 1]  # [tokens, 1, half]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _rope_type(cfg: ModelConfig) -> str:
    if cfg.rope_scaling is None:
        return "default"
    rope_type = cfg.rope_scaling.get("rope_type", "default")
    if rope_type not in SUPPORTED_ROPE_TYPES:
        # dynamic NTK changes frequencies with sequence length, which a fixed table cannot hold.
        raise UnsupportedModel(
            f"rope_scaling type {rope_type!r} is not supported; supported: "
            f"{', '.join(SUPPORTED_ROPE_TYPES[:4])} (a fixed table cannot follow dynamic scaling)")
    return rope_type


def _llama3(base: np.ndarray, s: dict) -> np.ndarray:
    """Llama 3.1: keep high frequencies, divide low ones by factor, blend the band between."""
    factor = float(s["factor"])
    low_ff, high_ff = float(s["low_freq_factor"]), float(s["high_freq_factor"])
    old_ctx = float(s["original_max_position_embeddings"])
    low_freq_wavelen, high_freq_wavelen = old_ctx / low_ff, old_ctx / high_ff
    wavelen = 2 * math.pi / base
    scaled = np.where(wavelen > low_freq_wavelen, base / factor, base)
    smooth = (old_ctx / wavelen - low_ff) / (high_ff - low_ff)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return np.where(is_medium, smoothed, scaled)


def _yarn_factor(cfg: ModelConfig) -> float:
    s = cfg.rope_scaling
    if s.get("factor") is not None:
        return float(s["factor"])
    return cfg.max_position_embeddings / _yarn_original_max(cfg)


def _yarn_original_max(cfg: ModelConfig) -> float:
    return float(cfg.rope_scaling.get("original_max_position_embeddings")
                 or cfg.max_position_embeddings)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(cfg: ModelConfig, base: np.ndarray) -> np.ndarray:
    """YaRN: interpolate low frequencies, extrapolate high ones, linear ramp between."""
    s = cfg.rope_scaling
    dim, theta = cfg.head_dim, cfg.rope_theta
    factor = _yarn_factor(cfg)
    beta_fast = s.get("beta_fast") or 32
    beta_slow = s.get("beta_slow") or 1
    orig = _yarn_original_max(cfg)

    def correction_dim(num_rotations: float) -> float:
        return (dim * math.log(orig / (num_rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # avoid dividing by zero, as transformers does
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrapolation_weight = 1 - ramp  # 1 for high-frequency pairs (kept as is)
    return (base / factor) * (1 - extrapolation_weight) + base * extrapolation_weight
