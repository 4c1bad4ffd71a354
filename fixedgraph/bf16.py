"""bfloat16 <-> float32 conversion for numpy, which has no bf16 dtype.

bf16 tensors are stored as ``np.uint16`` bit patterns everywhere on the host and in the
reference arena. Conversions round to nearest even, as the GPU's ``__float2bfloat16_rn`` does.
"""
from __future__ import annotations

import numpy as np


def to_f32(bits: np.ndarray) -> np.ndarray:
    """uint16 bf16 bit patterns -> float32 (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def from_f32(x: np.ndarray) -> np.ndarray:
    """float32 (or anything castable) -> uint16 bf16 bits, round to nearest even; NaN stays NaN."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    u = f.view(np.uint32)
    rounded = (u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))) >> 16
    nan = np.isnan(f)
    out = rounded.astype(np.uint16)
    if nan.any():
        out[nan] = np.uint16(0x7FC0)
    return out


def round_f32(x: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bf16 value, returned as float32."""
    return to_f32(from_f32(x))
